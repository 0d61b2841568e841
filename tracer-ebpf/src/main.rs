//! Where a record is born. `thr_entry` runs at a traced function's entry, `thr_return` at its
//! return, `thr_fast` where a lock call's fast path completes; the attach cookie says which
//! event it is and what to capture (tracer-common's table).
//! Records go to this CPU's ring buffer without waking the reader, except when the buffer
//! reaches each further sixteenth; a record that does not fit is counted in `LOST`, never
//! dropped silently.
//!
//! What a run keeps lives only in registers, on the program's own small stack, in this thread's
//! task storage, or in the ring entry it has reserved: never in per-CPU memory. Uprobe programs
//! run with migration disabled, not preemption, so another thread's run on the same CPU can
//! come between any two instructions of this one. Each program's frame stays under 64 bytes
//! (a test checks), because the verifier gives a larger frame a per-CPU private stack on kernels
//! that have them, which two such runs would share. So user memory is read straight into the
//! ring entry, the slot, or the thread's record for what the ring could not take (to count it
//! as what it would have been), never through a buffer on the stack.
#![no_std]
#![no_main]
// The atomic intrinsics: the BPF target has no `Atomic*` types, but LLVM emits BPF atomics.
#![feature(core_intrinsics)]
#![allow(internal_features)]
// Everything the verifier sees is inlined into its program: calls cost stack and instructions.
#![allow(
    clippy::inline_always,
    reason = "each helper is inlined into its program"
)]
#![allow(
    clippy::needless_pass_by_value,
    reason = "aya's program macros hand each program its context by value"
)]
#![allow(
    missing_docs,
    reason = "aya's program macros make the exported functions; each program is documented where it is written"
)]

use core::{
    intrinsics::{AtomicOrdering, atomic_xadd, atomic_xchg},
    mem::MaybeUninit,
    ptr,
};

mod arch;
mod futex_calls;

use aya_ebpf::{
    EbpfContext,
    bindings::{
        BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE, BPF_NOEXIST, BPF_RB_AVAIL_DATA,
        BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, bpf_dynptr, bpf_map_type, pt_regs, task_struct,
    },
    btf_maps::{ArrayOfMaps, HashMap, LruHashMap, PerCpuArray, RingBuf},
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_get_current_task_btf,
        bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_ringbuf_query,
        bpf_send_signal_thread, bpf_task_storage_get, generated,
    },
    macros::{btf_map, raw_tracepoint, uprobe, uretprobe},
    programs::{ProbeContext, RawTracePointContext, RetProbeContext},
};
use tracer_common::{
    Category, Completion, ERRNO_AT_OFFSET, FoundInRax, LAYOUT_MUSL, LIBRARY_BASE, LIBRARY_ERRNO,
    LIBRARY_ID, LOST_PENDING, LOST_TOTAL, MAX_CGROUPS, MAX_CPUS, OWN_TARGET_SLOTS,
    OWN_TARGETS_SPILLED, ObjectRegister, Outcome, OwnTargets, ProbeCookie, ProbeFlags,
    ProcessLibrary, ProgramConfig, RECORDING_SLOTS, RawRecord, STACKS_ALL, STACKS_SLOW_PATHS,
    STOP_SENT, TracedThrough, call_site_key,
    events::{OBJECT_WORDS, ObjectSize, classify},
    object_layout::{GLIBC, count_one_more, is_recursive_mutex, spin_lock_was_held},
    record::{
        MAX_STACK_BYTES, RAW_RECORD_SIZE, RING_ENTRY_SIZE, STACK_COPY_UNIT, STACKED_RECORD_SIZE,
        StackedRecord, UserStack, WHICH_BOTH_HALVES,
    },
};

/// The settings userspace writes before loading (`names::CONFIG`), in `.rodata`, which it
/// then freezes. Each field is read volatile where it is needed: the compiler would
/// otherwise fold in the zeros it was built with.
#[unsafe(no_mangle)]
static CONFIG: ProgramConfig = ProgramConfig::UNSET;

/// `--lossless`: the threads stopped (SIGSTOP) for writing to a ring past half, by thread id,
/// with their process id, marked `STOP_SENT` once the signal has been sent; one entry per
/// episode. Once it has drained the rings, the tracer removes the marked entries and resumes
/// their threads (SIGCONT, or under `--follow` through ptrace). An unmarked entry is left for
/// later: its SIGSTOP could still come after the SIGCONT.
#[btf_map]
static STOPPED: HashMap<u32, u32, 16384, { BPF_F_NO_PREALLOC as usize }> = HashMap::new();

/// Per category code (a probe's event1), a bit per event2 whose probes record now. Written by
/// userspace: all clear while the trace is stopped, the filter's bits while it runs. Global data
/// in a section of its own (a one-entry array map to userspace): read through a pointer, with
/// no map lookup, so no key on the entry program's stack, which is at the verifier's limit.
#[unsafe(no_mangle)]
#[unsafe(link_section = ".bss.recording")]
static mut RECORDING: [u64; RECORDING_SLOTS as usize] = [0; RECORDING_SLOTS as usize];

/// Whether the probe's event records now: checked first, so that a stopped or filtered-out
/// event costs its trap and one load. A mutex probe records rmutex calls too: it runs if
/// either event records, and its records of the other are discarded as they are written
/// ([`selected`]).
#[inline(always)]
fn recording(cookie: &ProbeCookie) -> bool {
    recording_event(cookie.event1, cookie.event2)
        || cookie.event1 == Category::Mutex as u16
            && recording_event(Category::Rmutex as u16, cookie.event2)
}

/// Whether a filled record is of an event that records now: a mutex probe's record of a call
/// on a recursive mutex is an rmutex call's (`classify`), which may not be selected.
#[inline(always)]
fn selected(record: *const RawRecord) -> bool {
    // SAFETY: a whole record this run filled, in its ring entry or its thread's storage.
    let (event1, event2) = classify(unsafe { &*record });
    recording_event(event1, event2)
}

/// Whether the event of these codes records now.
#[inline(always)]
fn recording_event(event1: u16, event2: u16) -> bool {
    let slot = usize::from(event1) % RECORDING_SLOTS as usize;
    // SAFETY: a bounded index into global data that only userspace writes; read volatile, as
    // it changes under the program.
    let mask = unsafe { ptr::read_volatile(ptr::addr_of!(RECORDING[slot])) };
    mask & (1 << (event2 & 63)) != 0
}

/// The processes recorded, and through which links ([`TracedThrough`]): `-p` targets and a
/// launched command through their own; `--follow`'s targets and every process they fork (fork,
/// vfork, clone), added by `thr_fork` in the kernel before the child runs, and `-p` targets
/// whose main thread has exited (whose own links the kernel no longer applies: it filters by
/// the main thread's memory) through shared ones. Checked at every entry: a link's own process
/// filter is not enough on every kernel (see `TracedThrough`).
#[btf_map]
static TRACED: LruHashMap<u32, u8, 65536> = LruHashMap::new();

/// The processes traced through their own links, found without a map lookup
/// ([`OwnTargets`]). Global data in a section of its own, which only userspace writes.
#[unsafe(no_mangle)]
#[unsafe(link_section = ".bss.own_targets")]
static mut OWN_TARGETS: OwnTargets = [0; OWN_TARGET_SLOTS + 1];

/// Whether a hit through a link with these flags is recorded: its process is traced through
/// that kind of link (system-wide, every process through the shared ones), and is in a
/// cgroup `--cgroup` named, if it named any (asked last: it costs a helper call). Never the
/// tracer.
#[inline(always)]
fn recorded(pid_tgid: u64, flags: ProbeFlags) -> bool {
    !is_tracer(pid_tgid) && traced_through(pid_tgid, flags) && in_selected_cgroups()
}

/// Whether the process of a hit through a link with these flags is traced through that kind
/// of link.
#[inline(always)]
fn traced_through(pid_tgid: u64, flags: ProbeFlags) -> bool {
    let shared = flags.has(ProbeFlags::SHARED);
    // SAFETY: a read-only global that userspace sets before loading.
    if shared && unsafe { ptr::read_volatile(&raw const CONFIG.system_wide) } != 0 {
        return true;
    }
    let tgid = (pid_tgid >> 32) as u32;
    if !shared && let Some(found) = own_target(tgid) {
        return found;
    }
    let wanted = match shared {
        true => TracedThrough::SharedLinks,
        false => TracedThrough::OwnLinks,
    };
    // SAFETY: the value is copied out at once.
    unsafe { TRACED.get(tgid) }.is_some_and(|&how| how == wanted as u8)
}

/// Whether `tgid` is in `OWN_TARGETS`: `Some(true)` found, `Some(false)` not there and none
/// spilled, `None` not there but more targets than slots (`TRACED` says).
#[inline(always)]
fn own_target(tgid: u32) -> Option<bool> {
    let own = ptr::addr_of!(OWN_TARGETS).cast::<u32>();
    for i in 0..OWN_TARGET_SLOTS {
        // SAFETY: a word of global data that only userspace writes, read volatile as it
        // changes under the program.
        if unsafe { ptr::read_volatile(own.add(i)) } == tgid {
            return Some(true);
        }
    }
    // SAFETY: as above.
    match unsafe { ptr::read_volatile(own.add(OWN_TARGETS_SPILLED)) } {
        0 => Some(false),
        _ => None,
    }
}

/// The targets that exec'd, and when (monotonic ns): see `names::EXECS`.
#[btf_map]
static EXECS: HashMap<u32, u64, 1024, { BPF_F_NO_PREALLOC as usize }> = HashMap::new();

/// A traced process forked: its child is traced too. Runs in the parent, on the raw
/// `sched_process_fork(parent, child)` tracepoint, whose arguments are the two `task_struct`s.
#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn thr_fork(ctx: RawTracePointContext) -> u32 {
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: the value is copied out at once.
    let followed =
        unsafe { TRACED.get(parent) }.is_some_and(|&how| how == TracedThrough::SharedLinks as u8);
    if !followed {
        return 0;
    }
    let child_task: u64 = ctx.arg(1);
    // SAFETY: a read-only global that userspace sets before loading.
    let tgid_offset = unsafe { ptr::read_volatile(&raw const CONFIG.tgid_offset) };
    // SAFETY: a kernel read through the helper, at an offset taken from kernel BTF.
    let child = unsafe { bpf_probe_read_kernel((child_task + tgid_offset) as *const u32) };
    // A new thread of the parent has the parent's tgid, which is followed already.
    if let Ok(child) = child
        && child != parent
    {
        let _ = TRACED.insert(child, TracedThrough::SharedLinks as u8, 0);
        // The child is a copy of the parent's address space: the same library, where it was.
        // SAFETY: the value is copied out at once.
        if let Some(&library) = unsafe { LIBRARIES.get(parent) } {
            let _ = LIBRARIES.insert(child, library, 0);
        }
    }
    0
}

/// A process replaced its image: its errno slot address means nothing in the new one, and a
/// target's new image has no probes of its own (without `--follow`, whose tracer sees the exec
/// through ptrace): noted for userspace to say.
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn thr_exec(_ctx: RawTracePointContext) -> u32 {
    let pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let _ = LIBRARIES.remove(pid);
    // SAFETY: the value is not kept.
    let target = own_target(pid) == Some(true) || unsafe { TRACED.get(pid) }.is_some();
    if target {
        // SAFETY: a helper that reads the clock.
        let now = unsafe { bpf_ktime_get_ns() };
        let _ = EXECS.insert(pid, now, 0);
    }
    0
}

/// Whether the current thread is in one of the cgroups `--cgroup` named, or below one (always,
/// without `--cgroup`): asked of the kernel at each hit, so that a process that enters one
/// later is recorded from then on. The count is known to the verifier, which drops the rest
/// when it is 0.
#[inline(always)]
pub(crate) fn in_selected_cgroups() -> bool {
    // SAFETY: a read-only global that userspace sets before loading.
    let count = unsafe { ptr::read_volatile(&raw const CONFIG.cgroup_count) } as usize;
    count == 0 || under_selected_cgroup(count)
}

/// Whether the current thread is under one of the first `count` of `CONFIG.cgroups`. A
/// function of its own, whose frame stays out of its callers'.
#[inline(never)]
fn under_selected_cgroup(count: usize) -> bool {
    for i in 0..MAX_CGROUPS {
        if i >= count {
            break;
        }
        // SAFETY: fields of an element of a read-only global that userspace sets before
        // loading, each read as a scalar.
        let (id, level) = unsafe {
            (
                ptr::read_volatile(&raw const CONFIG.cgroups[i].id),
                ptr::read_volatile(&raw const CONFIG.cgroups[i].level),
            )
        };
        // SAFETY: a helper that reads the current task's cgroup; a depth below the thread's
        // own gives 0, which is no cgroup's id.
        if unsafe { generated::bpf_get_current_ancestor_cgroup_id(level as i32) } == id {
            return true;
        }
    }
    false
}

#[inline(always)]
fn is_tracer(pid_tgid: u64) -> bool {
    // SAFETY: a read-only global that userspace sets before loading.
    (pid_tgid >> 32) as u32 == unsafe { ptr::read_volatile(&raw const CONFIG.tracer_tgid) }
}

/// The inner definition is only a template: userspace creates one ring buffer per CPU.
#[btf_map]
static RING_BUFFERS: ArrayOfMaps<RingBuf<RawRecord, 4096>, { MAX_CPUS as usize }> =
    ArrayOfMaps::new();

#[btf_map]
static LOST: PerCpuArray<u64, 2> = PerCpuArray::new();

/// Where each thread's stack begins, by thread id: the highest address userspace read to
/// unwind one of the thread's stacks to its start. A stack copy then takes the live stack
/// alone, sized to it, not the most a copy may take.
#[btf_map]
static STACK_TOPS: LruHashMap<u32, u64, 16384> = LruHashMap::new();

/// Per traced process: where its C library keeps errno, and where the library is whose own
/// call sites `CALL_SITES` lists ([`ProcessLibrary`]).
#[btf_map]
static LIBRARIES: HashMap<u32, ProcessLibrary, 16384, { BPF_F_NO_PREALLOC as usize }> =
    HashMap::new();

/// The C library's own calls of traced functions, by return address (`names::CALL_SITES`).
#[btf_map]
static CALL_SITES: HashMap<u64, u8, 65536, { BPF_F_NO_PREALLOC as usize }> = HashMap::new();

/// A call between its entry and its return: the record so far and the switch count at entry.
#[repr(C)]
#[derive(Clone, Copy)]
struct Pending {
    record: RawRecord,
    nvcsw_at_entry: u64,
    /// Calls of the same event made by this one (glibc's compat condvar functions call the new
    /// ones): their returns come first and are skipped.
    nested: u32,
    /// The call's event (`event_key`) while the slot holds a call; `FREE` otherwise.
    event: u32,
    /// 0 for a call opened only for the calls inside it (`ProbeFlags::ONLY_OPENS_CALL`, or a
    /// call inside another): its return records nothing.
    records: u8,
    /// Where the call's return address is (`rsp` at entry, past what the prefix pushed): a
    /// traced function jumped to with it still there is the call going on (a tail call).
    return_slot: u64,
    /// The traced function's code, when it calls other traced functions (else empty): a hit
    /// that returns into it is the call going on.
    code_start: u64,
    code_end: u64,
}

/// An event key no probe has: no event has codes (0, 0), category codes start at 1.
const FREE: u32 = 0;

/// How many traced calls of different events one thread can have open at once: one inside
/// another (a signal handler's lock inside a lock wait) needs a second. A call that never
/// returns (cancellation, longjmp) keeps its slot until a new call needs it and takes the
/// oldest.
const CALL_SLOTS: usize = 4;

/// One thread's open calls, and where a record the ring could not take is filled all the same,
/// to be counted as what it would have been ([`count_lost_call`]).
#[repr(C)]
struct Calls {
    slots: [Pending; CALL_SLOTS],
    lost: RawRecord,
}

/// A task-local storage map (`BPF_MAP_TYPE_TASK_STORAGE`), which aya-ebpf does not define:
/// the same BTF definition as its maps. The kernel finds a thread's value through the task, with
/// no hashing and no lock shared between threads, and frees it when the thread exits.
#[repr(C)]
struct TaskStorage<T> {
    r#type: *const [i32; bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: placeholder pointers the loader replaces, never dereferenced from Rust.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    const fn new() -> Self {
        Self {
            r#type: ptr::null(),
            key: ptr::null(),
            value: ptr::null(),
            max_entries: ptr::null(),
            map_flags: ptr::null(),
        }
    }

    /// The value of `task` (the current thread), created zeroed if `create` and it has none;
    /// null if it has none, or the kernel could not allocate it.
    #[inline(always)]
    fn of(&self, task: *mut task_struct, create: bool) -> *mut T {
        let flags = if create {
            u64::from(BPF_LOCAL_STORAGE_GET_F_CREATE)
        } else {
            0
        };
        // SAFETY: the map is this definition; the task is the current one, from the helper
        // that gives it as a BTF pointer, as the storage helpers require.
        unsafe {
            bpf_task_storage_get(
                ptr::from_ref(self).cast_mut().cast(),
                task,
                ptr::null_mut(),
                flags,
            )
        }
        .cast()
    }
}

/// Each thread's calls between entry and return. Loaded with aya's `allow_unsupported_maps`:
/// only the programs use it.
#[btf_map]
static CALLS: TaskStorage<Calls> = TaskStorage::new();

/// The slot of the thread's open call of `event`, if any.
#[inline(always)]
fn open_call(calls: *mut Calls, event: u32) -> Option<*mut Pending> {
    for i in 0..CALL_SLOTS {
        // SAFETY: `calls` is this thread's value, which only this thread's probes touch.
        let slot = unsafe { ptr::addr_of_mut!((*calls).slots[i]) };
        // SAFETY: as above: a slot of this thread's value.
        if unsafe { (*slot).event } == event {
            return Some(slot);
        }
    }
    None
}

/// A slot for a new call: a free one, or else the one whose call began first.
#[inline(always)]
fn free_slot(calls: *mut Calls) -> *mut Pending {
    let mut chosen = 0;
    let mut oldest = u64::MAX;
    for i in 0..CALL_SLOTS {
        // SAFETY: as in `open_call`.
        let slot = unsafe { &(*calls).slots[i] };
        if slot.event == FREE {
            chosen = i;
            break;
        }
        if slot.record.ktime_ns < oldest {
            oldest = slot.record.ktime_ns;
            chosen = i;
        }
    }
    // SAFETY: as in `open_call`; `chosen` is below CALL_SLOTS.
    unsafe { ptr::addr_of_mut!((*calls).slots[chosen % CALL_SLOTS]) }
}

/// At a traced function's entry (or where its probe is placed): the entry record, or the
/// thread's open call, for the return to complete.
#[uprobe]
pub fn thr_entry(ctx: ProbeContext) -> u32 {
    // SAFETY: the helper reads the cookie of the link this program runs for.
    let raw_cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let cookie = ProbeCookie::decode(raw_cookie);
    let flags = cookie.flags;
    let only_opens_call = flags.has(ProbeFlags::ONLY_OPENS_CALL);
    if !only_opens_call && !recording(&cookie) {
        return 0;
    }
    let task = current_task();
    if !recorded(current_pid_tgid(task), flags) {
        return 0;
    }
    let regs = ctx.regs;
    // A call inside an open one records nothing; if it calls traced functions in turn, it is
    // opened all the same, for its own calls inside to be known as such. (A binding of its
    // own: declared mutable above, the verifier counted the entry's frame at 56 bytes.)
    let mut only_opens_call = only_opens_call;
    if flags.has(ProbeFlags::CALLED_INSIDE) && called_inside(task, regs, raw_cookie, FREE) {
        if cookie.function.bytes == 0 || !flags.has(ProbeFlags::RETURN) {
            return 0;
        }
        only_opens_call = true;
    }
    let slot = if flags.has(ProbeFlags::RETURN) {
        let calls = CALLS.of(task, true);
        if calls.is_null() {
            count_lost();
            return 0;
        }
        // A hit while this thread's call of the same event is open is not a new call: a spin
        // lock trying again (it spun), or the implementation calling itself. No records.
        if let Some(open) = open_call(calls, event_key(&cookie)) {
            // SAFETY: this thread's own slot.
            unsafe {
                if flags.has(ProbeFlags::SPINS) {
                    (*open).record.block = 1;
                } else {
                    (*open).nested += 1;
                }
            }
            return 0;
        }
        free_slot(calls)
    } else {
        ptr::null_mut()
    };
    // A single record, or the entry half of a paired call, is filled in the ring, where user
    // reads are cheaper than into the slot's slab memory (see `read_user_into`); an entry half
    // is copied to the slot too.
    let in_ring = !only_opens_call
        && !written_at_return_only(flags)
        && emit_entry(raw_cookie, regs, slot, task);
    if slot.is_null() {
        // A waking slow path's record is its call's: the futex wake that follows is not
        // recorded again.
        if in_ring && cookie.slow_path {
            futex_calls::pthread_wake_recorded();
        }
        return 0;
    }
    // SAFETY: this thread's own slot.
    unsafe { hold_call(slot, raw_cookie, regs, in_ring, only_opens_call) };
    0
}

/// Makes `slot` hold the call opened here, for its return (or a completion) to complete: its
/// record, if `in_ring` did not already copy it there (the ring had no room for its entry),
/// and what the return needs of its entry.
///
/// A call of its own, to keep its callers' frames small.
///
/// # Safety
/// `slot` is a slot of this thread's own calls, which nothing reads until this returns.
#[inline(never)]
unsafe fn hold_call(
    slot: *mut Pending,
    raw_cookie: u64,
    regs: *const pt_regs,
    in_ring: bool,
    only_opens_call: bool,
) {
    let cookie = ProbeCookie::decode(raw_cookie);
    let flags = cookie.flags;
    // SAFETY: per the function's contract; `regs` is the probe's context.
    unsafe {
        if !in_ring {
            let record = ptr::addr_of_mut!((*slot).record);
            fill_entry(record, raw_cookie, regs, current_task());
            (*record).which = u8::from(flags.has(ProbeFlags::PAIRED));
        }
        (*slot).nested = 0;
        (*slot).records = u8::from(!only_opens_call);
        let code_start = arch::instruction_pointer(regs) - u64::from(cookie.function.before_probe);
        (*slot).return_slot = arch::call_frame(regs, cookie.stack_offset);
        (*slot).code_start = code_start;
        (*slot).code_end = code_start + u64::from(cookie.function.bytes);
        if flags.has(ProbeFlags::SPINS) {
            (*slot).record.block = u8::from(held_at_first_try(slot, flags, regs));
        }
        (*slot).nvcsw_at_entry = if flags.has(ProbeFlags::BLOCK) {
            read_task::<u64>(
                current_task(),
                ptr::read_volatile(&raw const CONFIG.nvcsw_offset),
            )
        } else {
            0
        };
        (*slot).event = event_key(&cookie);
    }
}

/// Where a lock call's fast path completes, in a full trace ([`Completion`]): the call is
/// written whole when the flags say it completed here, with no probe at its entry or return;
/// a call that went by a slow path and was opened there is completed instead. When they say it
/// did not, and the planner found that the call goes on to wait or to code it did not prove,
/// the call is opened here, as its entry would.
#[uprobe]
pub fn thr_fast(ctx: ProbeContext) -> u32 {
    // SAFETY: the helper reads the cookie of the link this program runs for.
    let raw_cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let cookie = ProbeCookie::decode(raw_cookie);
    let Some(completion) = cookie.completion else {
        return 0;
    };
    let regs = ctx.regs;
    let completed = Completion::holds_in(raw_cookie, arch::flags(regs));
    // The way an uncontended call does not take costs one compare.
    if !completed && !completion.opens_otherwise || !recording(&cookie) {
        return 0;
    }
    let task = current_task();
    let flags = cookie.flags;
    if !recorded(current_pid_tgid(task), flags)
        || flags.has(ProbeFlags::CALLED_INSIDE)
            && called_inside(task, regs, raw_cookie, event_key(&cookie))
    {
        return 0;
    }
    match completed && !completion.may_be_open {
        true => emit_whole(raw_cookie, regs, task),
        false => meet_open_call(raw_cookie, task, regs, completed),
    }
    0
}

/// At a completion that may find the call open, or opens it ([`thr_fast`]): completes the
/// call opened before, or writes it whole (`completed`); else opens it, unless it is open. A
/// call of its own, to keep the fast path's frame small.
#[inline(never)]
fn meet_open_call(raw_cookie: u64, task: *mut task_struct, regs: *const pt_regs, completed: bool) {
    let calls = CALLS.of(task, !completed);
    if calls.is_null() {
        match completed {
            true => emit_whole(raw_cookie, regs, task),
            false => count_lost(),
        }
        return;
    }
    let cookie = ProbeCookie::decode(raw_cookie);
    match open_call(calls, event_key(&cookie)) {
        // SAFETY: this thread's own slot; freed once its record is out.
        Some(slot) if completed => unsafe {
            if (*slot).records != 0 {
                emit_return(slot, raw_cookie, task, regs);
            }
            (*slot).event = FREE;
        },
        // Opened before, on its way here.
        Some(_) => {}
        None if completed => emit_whole(raw_cookie, regs, task),
        None => {
            let slot = free_slot(calls);
            let in_ring =
                !written_at_return_only(cookie.flags) && emit_entry(raw_cookie, regs, slot, task);
            // SAFETY: this thread's own slot.
            unsafe { hold_call(slot, raw_cookie, regs, in_ring, false) };
        }
    }
}

/// Writes a call that completed where its fast path ends ([`thr_fast`]) into the ring, both
/// halves in one record ([`WHICH_BOTH_HALVES`]), or its one record; with the thread's stack
/// when asked. A call of its own, to keep the fast path's frame small.
#[inline(never)]
fn emit_whole(raw_cookie: u64, regs: *const pt_regs, task: *mut task_struct) {
    let fill = move |entry: *mut RawRecord, regs, task| {
        fill_entry(entry, raw_cookie, regs, task);
        complete_whole(entry, raw_cookie, regs);
    };
    let written = match with_stack(raw_cookie) {
        true => emit_stacked(regs, fill),
        false => emit_with(|entry| fill(entry, regs, task)),
    };
    if !written {
        count_lost_call(raw_cookie, regs, task, true);
    }
}

/// Adds to a record its entry filled what the completion knows: how the call ends, and a
/// recursive mutex's count as the call leaves it. A call of its own, to keep the frame of the
/// stacked emit it goes into small.
#[inline(never)]
fn complete_whole(entry: *mut RawRecord, raw_cookie: u64, regs: *const pt_regs) {
    let cookie = ProbeCookie::decode(raw_cookie);
    let Some(completion) = cookie.completion else {
        return;
    };
    // SAFETY: the entry is ours until submitted, filled by `fill_entry`; `regs` is the
    // probe's context.
    unsafe {
        (*entry).which = match cookie.flags.has(ProbeFlags::PAIRED) {
            true => WHICH_BOTH_HALVES,
            false => 0,
        };
        set_completed_value(ptr::addr_of_mut!((*entry).rval), &completion, regs);
        match completion.outcome.unpack() {
            Outcome::Fails(errno) => (*entry).errno = i32::from(errno),
            // A `ret`: the code has set errno if the call failed.
            Outcome::ReturnsRegister(_)
                if cookie.flags.has(ProbeFlags::ERRNO) && (*entry).rval as i32 == -1 =>
            {
                read_errno(
                    &mut *ptr::addr_of_mut!((*entry).errno),
                    (*entry).pid,
                    (*entry).pthread_self,
                );
            }
            _ => {}
        }
        if completion.stores_after && cookie.flags.has(ProbeFlags::ONLY_IF_RECURSIVE) {
            count_one_more(
                &mut *ptr::addr_of_mut!((*entry).object),
                (*entry).object_layout,
            );
        }
    }
}

/// Sets `rval` to what a call that completed where `completion` says returns: a known value,
/// or a register's ([`arch::register_value`]).
///
/// # Safety
/// `rval` is the `rval` of a record this run owns; `regs` is the probe's context.
#[inline(always)]
unsafe fn set_completed_value(rval: *mut i64, completion: &Completion, regs: *const pt_regs) {
    // SAFETY: per the function's contract.
    unsafe {
        match completion.outcome.unpack() {
            Outcome::Returns(value) => *rval = i64::from(value),
            Outcome::Fails(_) => *rval = -1,
            Outcome::ReturnsRegister(register) => {
                *rval = arch::register_value(register as u64, regs) as i64;
            }
        }
    }
}

/// Writes a call's entry record into the ring, with the thread's stack when asked
/// (`CONFIG.stacks`), and copies it to the open call's `slot` if there is one (null: none).
/// Returns whether it was written (or discarded: of an event not selected); a record lost is
/// counted. A call of its own, to keep the entry's frame small.
#[inline(never)]
fn emit_entry(
    raw_cookie: u64,
    regs: *const pt_regs,
    slot: *mut Pending,
    task: *mut task_struct,
) -> bool {
    let fill = move |entry: *mut RawRecord, regs, task| {
        fill_entry(entry, raw_cookie, regs, task);
        if !slot.is_null() {
            // SAFETY: the entry is ours until submitted; the slot is this thread's own.
            unsafe {
                (*entry).which = 1;
                ptr::copy_nonoverlapping(entry, ptr::addr_of_mut!((*slot).record), 1);
            }
        }
    };
    let written = match with_stack(raw_cookie) {
        true => emit_stacked(regs, fill),
        false => emit_with(|entry| fill(entry, regs, task)),
    };
    if !written {
        count_lost_call(raw_cookie, regs, task, false);
    }
    written
}

/// Whether this hit is the C library's own call, not the program's (`ProbeFlags::CALLED_INSIDE`):
/// it returns to one of the library's own call sites (`CALL_SITES`), or into the function of a
/// traced call the thread has open, or it was jumped to with that call's return address in
/// place (a tail call). A call from a signal handler that interrupted the open call returns
/// into the handler, from deeper in the stack: it is recorded. The open call of `own_event`
/// (a fast path's completion meeting the call it opened before, at the same return address)
/// is the call itself, not one around it: `FREE` for none. A call of its own, to keep the
/// entry's frame small.
#[inline(never)]
fn called_inside(
    task: *mut task_struct,
    regs: *const pt_regs,
    raw_cookie: u64,
    own_event: u32,
) -> bool {
    let cookie = ProbeCookie::decode(raw_cookie);
    let return_slot = arch::call_frame(regs, cookie.stack_offset);
    let read_caller = || {
        let mut caller = 0;
        arch::read_return_address(&raw mut caller, regs, raw_cookie);
        caller
    };
    let pid = (current_pid_tgid(task) >> 32) as u32;
    // Only musl's shared library lists call sites: a probe of another object layout has no
    // lookup (one of a static musl executable finds no base).
    if cookie.object_layout == LAYOUT_MUSL
        // SAFETY: the value is read at once.
        && let Some(library) = unsafe { LIBRARIES.get(pid) }
        && library[LIBRARY_BASE] != 0
    {
        let caller = read_caller();
        if caller >= library[LIBRARY_BASE] {
            let key = call_site_key(library[LIBRARY_ID], caller - library[LIBRARY_BASE]);
            // SAFETY: the value is not kept.
            if unsafe { CALL_SITES.get(key) }.is_some() {
                return true;
            }
        }
    }
    let calls = CALLS.of(task, false);
    if calls.is_null() {
        return false;
    }
    let open = |i: usize| {
        // SAFETY: as in `open_call`.
        let event = unsafe { (*calls).slots[i].event };
        event != FREE && event != own_event
    };
    // The caller is read only where it is compared: most hits find no call open, in a library
    // that lists no call sites of its own (glibc's). (A first pass of its own: read inside the
    // loop below, LLVM walked the slots from a pointer before the map value, which Linux 7.3's
    // verifier refuses.)
    if !(0..CALL_SLOTS).any(open) {
        return false;
    }
    let caller = read_caller();
    for i in 0..CALL_SLOTS {
        // SAFETY: as in `open_call`.
        let slot = unsafe { &(*calls).slots[i] };
        if open(i)
            && (slot.return_slot == return_slot
                || (slot.code_start <= caller && caller < slot.code_end))
        {
            return true;
        }
    }
    false
}

/// Whether a spin lock's first try found it held (`ProbeFlags::SPINS`): from the zero flag the
/// decrement just before the probe left, or else from the lock word (glibc's held when at
/// most 0, musl's when not 0), read into the slot's unused object words. A call of its own,
/// to keep the entry's frame small.
#[inline(never)]
fn held_at_first_try(slot: *mut Pending, flags: ProbeFlags, regs: *const pt_regs) -> bool {
    /// x86's zero flag, in `eflags`.
    const ZERO_FLAG: u64 = 1 << 6;
    // SAFETY: `regs` is the probe's context; `slot` is this thread's own slot.
    unsafe {
        if flags.has(ProbeFlags::LOCKED_AT_FIRST_TRY_IF_NZ) {
            return arch::flags(regs) & ZERO_FLAG == 0;
        }
        let word = ptr::addr_of_mut!((*slot).record.object).cast::<i32>();
        read_user_into(word, arch::arguments(regs)[0]);
        spin_lock_was_held(ptr::read_volatile(word), (*slot).record.object_layout)
    }
}

/// Writes a call's record as its entry knows it into `record` (ring or slot memory): every
/// byte, padding included, `which` 0. A function of its own (a BPF-to-BPF call) taking few
/// arguments, so that its frame and its caller's each stay small: passing it the ids too made
/// the caller's frame 56 bytes, which the kernel moves to a private stack. The task is passed
/// on, not taken again: each take is a helper call.
#[inline(never)]
fn fill_entry(
    record: *mut RawRecord,
    raw_cookie: u64,
    regs: *const pt_regs,
    task: *mut task_struct,
) {
    let cookie = ProbeCookie::decode(raw_cookie);
    let flags = cookie.flags;
    let pid_tgid = current_pid_tgid(task);
    // SAFETY: `record` is writable memory of a whole record, owned by this program run;
    // `regs` is the probe's context, the user's registers at the probed instruction.
    unsafe {
        let regs = &*regs;
        // Zeroed word by word, volatile so that LLVM does not make it a call to `memset`, a
        // byte loop on BPF; then the entry's fields.
        let words = record.cast::<u64>();
        for i in 0..RAW_RECORD_SIZE / 8 {
            words.add(i).write_volatile(0);
        }
        (*record).ktime_ns = bpf_ktime_get_ns();
        (*record).pthread_self = thread_pointer(task);
        // A call written once, at its return, takes its caller there, with no read; one
        // written where its fast path completes reads it as an entry does.
        if !written_at_return_only(flags) || cookie.completion.is_some() {
            arch::read_return_address(ptr::addr_of_mut!((*record).caller), regs, raw_cookie);
        }
        (*record).pid = (pid_tgid >> 32) as u32;
        (*record).lwpid = pid_tgid as u32;
        (*record).event1 = cookie.event1;
        (*record).event2 = cookie.event2;
        (*record).object_layout = cookie.object_layout;
        (*record).slow_path = u8::from(cookie.slow_path);
        (*record).args = arch::arguments(regs);
        // Through the record's copy of the arguments: a computed offset into the context is
        // not allowed, and a copy on the stack would not fit its budget.
        if let Some(n) = flags.timespec_argument()
            && let Some(&pointer) = (*record).args.get(usize::from(n) - 1)
        {
            read_user_into(ptr::addr_of_mut!((*record).timespec), pointer);
        }
    }
    capture_object(record, raw_cookie, regs);
}

/// Copies the call's object into `record`, and on a slow path whose object is in another
/// register than the first argument's, or at an offset before what a register points to,
/// takes it from there as `a1`. A function of its own, called last, so that `fill_entry` keeps
/// nothing across it.
#[inline(never)]
fn capture_object(record: *mut RawRecord, raw_cookie: u64, regs: *const pt_regs) {
    // Read from the cookie's bits, not decoded: see `ProbeCookie::marks_completion`.
    let register = ProbeCookie::object_register_code(raw_cookie);
    let offset = ProbeCookie::object_offset_in(raw_cookie);
    let found_in_rax = Completion::found_in_rax_code(raw_cookie);
    // SAFETY: as in `fill_entry`, which has filled the record's arguments.
    unsafe {
        if register != ObjectRegister::Rdi as u64 || offset != 0 {
            (*record).args[0] = arch::register_value(register, regs).wrapping_sub(offset);
        }
        let object = ptr::addr_of_mut!((*record).object);
        // A call completed here whose record reads nothing of the object but the lock word
        // in rax, and the type a register holds if the code did not prove it: the rest of the
        // copy stays zeroed, as the code proved it.
        if found_in_rax == Completion::FOUND_WORD_AND_OBJECT
            && Completion::holds_in(raw_cookie, arch::flags(regs))
        {
            // Matched, not read as a number: its code is two fields joined by an `or`, after
            // which the verifiers of Linux 6.1 and 6.12 know no bound for an index.
            if let Some(completion) = ProbeCookie::decode(raw_cookie).completion
                && let Some(register) = completion.type_register.unpack()
            {
                (*object)[GLIBC.mutex_kind.word] =
                    arch::register_value(register as u64, regs) as u32 & GLIBC.mutex_kind.mask;
            }
        } else {
            copy_object(
                object,
                ProbeCookie::decode(raw_cookie).flags,
                ptr::read_volatile(ptr::addr_of!((*record).args[0])),
            );
        }
        // Where a fast path completes or opens the call, what the atomic instruction found
        // in the object's first bytes, which it may have changed since.
        if found_in_rax != 0 {
            let rax = arch::return_value(regs);
            (*object)[0] = rax as u32;
            if found_in_rax == FoundInRax::DoubleWord as u64 {
                (*object)[1] = (rax >> 32) as u32;
            }
        }
    }
}

/// Whether a record of the probe whose cookie is `raw_cookie` is to carry the thread's stack
/// (`CONFIG.stacks`); `stack_copy_size` says whether the ring has room for it.
#[inline(always)]
fn with_stack(raw_cookie: u64) -> bool {
    // SAFETY: a read-only global that userspace sets before loading.
    match unsafe { ptr::read_volatile(&raw const CONFIG.stacks) } {
        STACKS_ALL => true,
        STACKS_SLOW_PATHS => ProbeCookie::decode(raw_cookie).slow_path,
        _ => false,
    }
}

/// The bytes to reserve for the stack above `sp` in the ring `ring`, and the thread's stack top
/// they were sized by (none told: 0). With a top from `STACK_TOPS` above `sp`, the live stack
/// up to it; else, for a thread whose stack lies below its thread pointer, up to that; else
/// the most a copy takes. Either must fit in a sixteenth of the room left
/// before the ring is half full, so that a burst of copies the reader has not caught up with
/// (the threads first seen as a trace starts, each copy as large as it may be) shrinks them as
/// the ring fills, and none is taken past half full, where the reader, woken at each
/// sixteenth, is behind: a burst of them cannot fill the ring and lose records. A live stack
/// that does not fit, or a copy of an unknown one smaller than `least_unknown_copy`, would be
/// cut short: 0 bytes, the stack left out (userspace counts it). A call of its own, so that
/// what it keeps across its helper calls is not in its caller's frame.
#[inline(never)]
fn stack_copy_size(ring: *mut core::ffi::c_void, sp: u64) -> StackCopySize {
    // SAFETY: a read-only global that userspace sets before loading; `ring` is a ring buffer
    // map.
    let (ring_bytes, used) = unsafe {
        (
            ptr::read_volatile(&raw const CONFIG.ring_bytes),
            bpf_ringbuf_query(ring, u64::from(BPF_RB_AVAIL_DATA)),
        )
    };
    let room = (ring_bytes / 2).saturating_sub(used) / 16;
    let most = room.min(MAX_STACK_BYTES as u64) / STACK_COPY_UNIT as u64 * STACK_COPY_UNIT as u64;
    let thread = bpf_get_current_pid_tgid() as u32;
    // SAFETY: the value is copied out at once; userspace may replace it at any time.
    match unsafe { STACK_TOPS.get(thread) } {
        Some(&top) if top > sp && top - sp <= MAX_STACK_BYTES as u64 => match top - sp <= most {
            true => StackCopySize::new(top - sp, top),
            false => StackCopySize::NONE,
        },
        _ => match thread_pointer(current_task()).wrapping_sub(sp) {
            // Below the thread pointer: the thread's whole stack where the C library put its
            // thread descriptor at the top of the thread's stack, as glibc and musl do for
            // every thread but the main one (whose descriptor lies below its stack: the
            // difference wraps and is too large).
            below if below > 0 && below <= most => StackCopySize::new(below, 0),
            _ if most >= least_unknown_copy(ring_bytes) => StackCopySize::new(most, 0),
            _ => StackCopySize::NONE,
        },
    }
}

/// A stack copy's size, in whole `STACK_COPY_UNIT`s, and the stack top told that sized it, in
/// one register: returned through memory, the pair would take room in the caller's frame. A
/// user address fits in the low bits on every kernel thrtrace-bpf runs on (47 or 48 bits);
/// a top told above them is not used.
#[derive(Clone, Copy)]
struct StackCopySize(u64);

impl StackCopySize {
    const TOP_BITS: u32 = 52;
    const NONE: StackCopySize = StackCopySize(0);

    #[inline(always)]
    fn new(bytes: u64, top: u64) -> Self {
        match top >> Self::TOP_BITS {
            0 => StackCopySize((bytes.div_ceil(STACK_COPY_UNIT as u64) << Self::TOP_BITS) | top),
            _ => Self::NONE,
        }
    }

    #[inline(always)]
    fn bytes(self) -> u32 {
        ((self.0 >> Self::TOP_BITS) * STACK_COPY_UNIT as u64) as u32
    }

    #[inline(always)]
    fn top(self) -> u64 {
        self.0 & ((1 << Self::TOP_BITS) - 1)
    }
}

/// The thread pointer of `task` (the current task) as the kernel saved it
/// (`CONFIG.thread_pointer_offset`): where the C library put the thread's descriptor.
#[inline(always)]
fn thread_pointer(task: *mut task_struct) -> u64 {
    // SAFETY: a read-only global that userspace sets before loading.
    let offset = unsafe { ptr::read_volatile(&raw const CONFIG.thread_pointer_offset) };
    read_task::<u64>(task, offset)
}

/// The smallest copy of a stack whose top is not known worth taking: 4 KiB holds most waits'
/// whole stacks, and the first whole one tells where the thread's stack begins. Smaller in a
/// small ring, where a copy may take a sixteenth of half the ring at most.
#[inline(always)]
fn least_unknown_copy(ring_bytes: u64) -> u64 {
    (ring_bytes / 64).min(4096)
}

/// Copies the registers an unwinder starts from into `stack`, and as much of the user stack
/// above the stack pointer as is mapped into the `reserved` bytes of `entry` that follow the
/// head: the largest readable prefix, in steps of halving size down to `STACK_COPY_UNIT` (a
/// read that crosses the stack's end fails whole). Userspace unwinds it. A call of its own,
/// to keep the entry's frame small.
#[inline(never)]
fn copy_stack(entry: *const bpf_dynptr, stack: *mut UserStack, regs: *const pt_regs) {
    // SAFETY: `stack` is in the head of the reserved entry `entry`, ours until submitted;
    // `regs` is the probe's context.
    unsafe {
        let sp = arch::stack_pointer(regs);
        (*stack).ip = arch::instruction_pointer(regs);
        (*stack).sp = sp;
        (*stack).bp = arch::frame_pointer(regs);
        (*stack).lr = arch::link_register(regs);
        ptr::write_volatile(&raw mut (*stack).copied, 0);
    }
    extend_stack_copy::<MAX_STACK_BYTES>(entry, stack);
    extend_stack_copy::<{ MAX_STACK_BYTES / 2 }>(entry, stack);
    extend_stack_copy::<{ MAX_STACK_BYTES / 4 }>(entry, stack);
    extend_stack_copy::<{ MAX_STACK_BYTES / 8 }>(entry, stack);
    extend_stack_copy::<{ MAX_STACK_BYTES / 16 }>(entry, stack);
    extend_stack_copy::<{ MAX_STACK_BYTES / 32 }>(entry, stack);
    extend_stack_copy::<{ MAX_STACK_BYTES / 64 }>(entry, stack);
    extend_stack_copy::<{ MAX_STACK_BYTES / 128 }>(entry, stack);
    extend_stack_copy::<{ MAX_STACK_BYTES / 256 }>(entry, stack);
    extend_stack_copy::<{ MAX_STACK_BYTES / 512 }>(entry, stack);
    extend_stack_copy::<STACK_COPY_UNIT>(entry, stack);
}

/// Copies `SIZE` more bytes of the stack after the `copied` ones, if they fit in `reserved`
/// and are all readable. The counts go through the entry, read volatile: the verifier does not
/// follow values through ring memory, so the paths of each step (read or not) go on as one,
/// where counts it knew exactly would make 2^11 paths to verify.
#[inline(always)]
fn extend_stack_copy<const SIZE: usize>(entry: *const bpf_dynptr, stack: *mut UserStack) {
    // SAFETY: `stack` is in the head of the reserved entry `entry`, ours until submitted; the
    // dynptr helper checks that the `SIZE` bytes lie within the entry, the read helper checks
    // the user address, and zeroes what it could not read.
    unsafe {
        let copied = ptr::read_volatile(&raw const (*stack).copied);
        if copied + SIZE as u32 > ptr::read_volatile(&raw const (*stack).reserved) {
            return;
        }
        let to =
            generated::bpf_dynptr_data(entry, STACKED_RECORD_SIZE as u32 + copied, SIZE as u32);
        if to.is_null() {
            return;
        }
        let from = ptr::read_volatile(&raw const (*stack).sp) + u64::from(copied);
        if generated::bpf_probe_read_user(to, SIZE as u32, from as *const _) == 0 {
            ptr::write_volatile(&raw mut (*stack).copied, copied + SIZE as u32);
        }
    }
}

/// Whether a call's one record is written at its return: its entry is not written.
#[inline(always)]
fn written_at_return_only(flags: ProbeFlags) -> bool {
    flags.has(ProbeFlags::RETURN) && !flags.has(ProbeFlags::PAIRED)
}

/// At a traced function's return (a uretprobe), or where a slow path's wait ends (a plain
/// uprobe on the instruction after it): the return record, or the open call completed.
#[uretprobe]
pub fn thr_return(ctx: RetProbeContext) -> u32 {
    // SAFETY: the helper reads the cookie of the link this program runs for.
    let raw_cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let cookie = ProbeCookie::decode(raw_cookie);
    let task = current_task();
    let calls = CALLS.of(task, false);
    if calls.is_null() {
        return 0;
    }
    let Some(slot) = open_call(calls, event_key(&cookie)) else {
        return 0;
    };
    // SAFETY: this thread's own slot; freed once its record is out.
    unsafe {
        if (*slot).nested > 0 {
            (*slot).nested -= 1;
            return 0;
        }
        // Stopped or filtered out since the entry: nothing more is recorded of the call.
        if (*slot).records != 0 && recording(&cookie) {
            // Completed in the ring, where the return's user reads land.
            emit_return(slot, raw_cookie, task, ctx.regs);
        }
        (*slot).event = FREE;
    }
    0
}

/// Writes the record of the open call in `slot`, completed by its return, into the ring. A call
/// written only at its return takes its stack there (`CONFIG.stacks`): its callers' frames,
/// from the instruction it returns to. A call of its own, to keep the return's frame small.
#[inline(never)]
fn emit_return(slot: *mut Pending, raw_cookie: u64, task: *mut task_struct, regs: *const pt_regs) {
    let fill = move |entry, regs, task| complete_from_slot(entry, slot, raw_cookie, task, regs);
    let written = match with_stack(raw_cookie)
        && written_at_return_only(ProbeCookie::decode(raw_cookie).flags)
    {
        true => emit_stacked(regs, fill),
        false => emit_with(|entry| fill(entry, regs, task)),
    };
    if !written {
        count_lost_return(slot, raw_cookie, task, regs);
    }
}

/// The return record of the open call in `slot` that the ring could not take, completed in the
/// thread's storage as it would have been (a mutex's kind may be known only after its call,
/// as `pthread_mutex_init`'s), and counted so ([`count_lost_as`]).
#[inline(never)]
fn count_lost_return(
    slot: *mut Pending,
    raw_cookie: u64,
    task: *mut task_struct,
    regs: *const pt_regs,
) {
    // The slot is in the thread's storage, which is there.
    let calls = CALLS.of(task, false);
    if calls.is_null() {
        count_lost();
        return;
    }
    // SAFETY: this thread's own storage, which no other run uses while this one runs.
    let record = unsafe { ptr::addr_of_mut!((*calls).lost) };
    complete_from_slot(record, slot, raw_cookie, task, regs);
    count_lost_as(record);
}

/// Writes into `entry` the record of the open call in `slot`, completed by its return. A call
/// of its own, whose decoded cookie stays off its caller's frame.
#[inline(never)]
fn complete_from_slot(
    entry: *mut RawRecord,
    slot: *mut Pending,
    raw_cookie: u64,
    task: *mut task_struct,
    regs: *const pt_regs,
) {
    // SAFETY: the entry is ours until submitted; the slot is this thread's own, holding the
    // open call's record; `regs` is the probe's context.
    unsafe {
        ptr::copy_nonoverlapping(ptr::addr_of!((*slot).record), entry, 1);
        complete(entry, raw_cookie, task, regs, (*slot).nvcsw_at_entry);
    }
}

/// Adds what the return knows to a call's record.
///
/// # Safety
/// `record` is a reserved ring entry holding the current thread's open call's record; `regs`
/// is the probe's context.
#[inline(always)]
unsafe fn complete(
    record: *mut RawRecord,
    raw_cookie: u64,
    task: *mut task_struct,
    regs: *const pt_regs,
    nvcsw_at_entry: u64,
) {
    let cookie = ProbeCookie::decode(raw_cookie);
    let flags = cookie.flags;
    // SAFETY: per the function's contract.
    let (record, regs) = unsafe { (&mut *record, &*regs) };
    // Decoded before the branch on the completion below: tested again after it, LLVM kept
    // what that branch decoded for the second test, and the verifier, which cannot tell the
    // two tests agree, found the register unset on a way no run takes.
    let stores_after = cookie.completion.is_some_and(|c| c.stores_after);
    if cookie.completion.is_some() {
        complete_at_completion(record, raw_cookie, regs);
    } else {
        // On a slow path the return is a wait's end, whose value is not the call's unless the
        // call passed itself on to the function that waits (`ProbeCookie::returns_result`):
        // the call then succeeds.
        record.rval = match cookie.slow_path && !cookie.returns_result {
            true => 0,
            false => arch::return_value(regs) as i64,
        };
        // Before it runs the return programs, the kernel puts the address the call returns
        // to back in the instruction pointer: the caller, as the entry read it.
        if written_at_return_only(flags) {
            record.caller = arch::instruction_pointer(regs);
        }
    }
    if flags.has(ProbeFlags::BLOCK) {
        // SAFETY: a read-only global that userspace sets before loading.
        let nvcsw = read_task::<u64>(task, unsafe {
            ptr::read_volatile(&raw const CONFIG.nvcsw_offset)
        });
        record.block = u8::from(nvcsw != nvcsw_at_entry);
    }
    if flags.has(ProbeFlags::OBJECT_AT_RETURN)
        && (!flags.has(ProbeFlags::ONLY_IF_RECURSIVE)
            || is_recursive_mutex(&record.object, record.object_layout))
    {
        copy_object(&raw mut record.object, flags, record.args[0]);
        if stores_after {
            count_one_more(&mut record.object, record.object_layout);
        }
    }
    if flags.has(ProbeFlags::POINTEES) {
        for i in 0..record.pointees.len() {
            read_user_into(&raw mut record.pointees[i], record.args[i]);
        }
    }
    // A completion with a known outcome knows the errno its code has not set yet.
    if flags.has(ProbeFlags::ERRNO)
        && record.rval as i32 == -1
        && cookie.completion.is_none_or(|c| c.outcome.is_register())
    {
        read_errno(&mut record.errno, record.pid, record.pthread_self);
    }
    if flags.has(ProbeFlags::PAIRED) {
        record.which = 2;
        // SAFETY: the helper takes no arguments.
        record.ktime_ns = unsafe { bpf_ktime_get_ns() };
    }
}

/// What a completion ([`thr_fast`]) knows of the call it completes: its value, its errno, and
/// for a call written only now, its caller, read where the call's entry put it (the kernel
/// restores no caller there). A call of its own, to keep its caller's frame small.
#[inline(never)]
fn complete_at_completion(record: &mut RawRecord, raw_cookie: u64, regs: &pt_regs) {
    let cookie = ProbeCookie::decode(raw_cookie);
    let Some(completion) = cookie.completion else {
        return;
    };
    // SAFETY: the record's own field; `regs` is the probe's context.
    unsafe { set_completed_value(&raw mut record.rval, &completion, regs) };
    if let Outcome::Fails(errno) = completion.outcome.unpack() {
        record.errno = i32::from(errno);
    }
    if written_at_return_only(cookie.flags) {
        arch::read_return_address(&raw mut record.caller, regs, raw_cookie);
    }
}

/// Does nothing: attached instead of the two programs above, it measures what the probes
/// alone cost (`--empty-programs`).
#[uprobe]
pub fn thr_empty(_ctx: ProbeContext) -> u32 {
    0
}

#[inline(always)]
fn event_key(cookie: &ProbeCookie) -> u32 {
    (u32::from(cookie.event1) << 16) | u32::from(cookie.event2)
}

/// Copies the first words of the object at `address`: exactly as many bytes as `flags` say
/// ([`ProbeFlags::object_size`]), never more, so that a small object at the end of a page is
/// not read past. Userspace derives fields from them. One read of a size taken from a table
/// by the flags' code, not one read per size: the verifier walks the rest of the program
/// once per way.
#[inline(always)]
fn copy_object(words: *mut [u32; OBJECT_WORDS], flags: ProbeFlags, address: u64) {
    let at = &raw const OBJECT_BYTES[flags.object_size_code() % OBJECT_BYTES.len()];
    // SAFETY: `at` is an element of the table, read as memory for the verifier not to know
    // it; bounded by the copy's size, as the helper's size must be.
    let bytes = unsafe { ptr::read_volatile(at) }.min(size_of::<[u32; OBJECT_WORDS]>() as u32);
    if bytes != 0 {
        // SAFETY: `words` is writable memory of `bytes` at least; the helper checks `address`.
        unsafe { generated::bpf_probe_read_user(words.cast(), bytes, address as *const _) };
    }
}

/// The bytes of each object size, by its code ([`ProbeFlags::object_size_code`]).
static OBJECT_BYTES: [u32; 4] = [
    ObjectSize::None.bytes() as u32,
    ObjectSize::Word.bytes() as u32,
    ObjectSize::Small.bytes() as u32,
    ObjectSize::Large.bytes() as u32,
];

/// Reads the user value at `address` into `destination` (ring or slot memory), which the
/// helper zeroes if the address is not readable (a bad pointer argument). Straight there, not
/// through the stack, which has no room for it (see the top of this file). The kernel's
/// usercopy hardening checks a ring destination (vmalloc memory) at once, a slot (slab memory)
/// at some length: the programs read into the ring where they can.
#[inline(always)]
fn read_user_into<T>(destination: *mut T, address: u64) {
    // SAFETY: `destination` is writable memory of a whole `T`; the helper checks `address`.
    unsafe {
        generated::bpf_probe_read_user(
            destination.cast(),
            size_of::<T>() as u32,
            address as *const _,
        )
    };
}

/// Reads the calling thread's errno into `errno`: thread pointer + the offset the process's GOT
/// holds (written by ld.so, so read at each use rather than when the probes were attached), or
/// the library's fixed offset. Left 0 if unknown.
#[inline(always)]
fn read_errno(errno: &mut i32, pid: u32, thread_pointer: u64) {
    // SAFETY: the value is copied out at once.
    let Some(&library) = (unsafe { LIBRARIES.get(pid) }) else {
        return;
    };
    // The offset's low 63 bits, sign-extended: musl's errno is below arm64's thread pointer.
    let mut offset = ((library[LIBRARY_ERRNO] << 1) as i64 >> 1) as u64;
    match library[LIBRARY_ERRNO] {
        0 => return,
        at if at & ERRNO_AT_OFFSET == 0 => read_user_into(&raw mut offset, at),
        _ => {}
    }
    read_user_into(errno, thread_pointer.wrapping_add(offset));
}

/// The current thread's `task_struct`, as the BTF pointer that task storage and field loads
/// need. Taken once per program run and passed on: each take is a helper call.
#[inline(always)]
fn current_task() -> *mut task_struct {
    // SAFETY: the helper takes no arguments.
    unsafe { bpf_get_current_task_btf() }
}

/// What `bpf_get_current_pid_tgid` returns (process id high, thread id low), from two loads.
#[inline(always)]
fn current_pid_tgid(task: *mut task_struct) -> u64 {
    // SAFETY: read-only globals that userspace sets before loading.
    let (pid, tgid) = unsafe {
        (
            read_task::<u32>(task, ptr::read_volatile(&raw const CONFIG.pid_offset)),
            read_task::<u32>(task, ptr::read_volatile(&raw const CONFIG.tgid_offset)),
        )
    };
    (u64::from(tgid) << 32) | u64::from(pid)
}

/// A field of `task` (the current thread) at a BTF-derived offset. A plain load, not a helper
/// call: the offset is read-only global data (frozen, so the verifier knows its value) and
/// names a field of `task_struct` of `T`'s size in kernel BTF, where the verifier checks it.
#[inline(always)]
fn read_task<T>(task: *mut task_struct, offset: u64) -> T {
    // SAFETY: `task` is the helper's BTF pointer to the current task, valid for the program's
    // run; the verifier checks the field at `offset` and makes the load safe.
    unsafe { task.cast::<u8>().add(offset as usize).cast::<T>().read() }
}

/// Reserves an entry for a [`RawRecord`] in this CPU's ring, has `fill` write it in place (no
/// copy of it on the stack) and submits it, or discards it if it is of an event not selected
/// ([`selected`]). Returns whether it was written or discarded, not lost: the caller counts a
/// record lost.
#[inline(always)]
fn emit_with(fill: impl FnOnce(*mut RawRecord)) -> bool {
    // SAFETY: the helper takes no arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let reserved = RING_BUFFERS.get(cpu).and_then(|ring| {
        let entry = ring.reserve_untyped::<RawRecord>(0)?;
        Some((ring, entry))
    });
    let Some((ring, mut entry)) = reserved else {
        return ring_full();
    };
    fill(entry.as_mut_ptr());
    let selected = selected(entry.as_ptr());
    if selected {
        mark_gap(entry.as_mut_ptr());
    }
    // A discarded entry holds its room until the reader passes it: the ring fills as much.
    let (wakeup, past_half) = fill_level(
        ptr::from_ref(ring).cast_mut().cast(),
        RING_ENTRY_SIZE as u64,
    );
    match selected {
        true => entry.submit(wakeup),
        false => entry.discard(wakeup),
    }
    if past_half {
        stop_if_lossless();
    }
    true
}

/// Reserves an entry for a [`StackedRecord`] in this CPU's ring with room for the thread's
/// live stack ([`stack_copy_size`]), has `fill` write the record in place, copies the stack
/// after it and submits it, or discards it if it is of an event not selected ([`selected`]);
/// returns whether it was written or discarded, not lost: the caller counts a record lost.
/// The entry's size is known only as it is reserved, so it is a dynptr, kept in this call's
/// own frame, which holds little else: `fill` is handed the registers and the task
/// rather than holding them, so that its captures stay small.
#[inline(never)]
fn emit_stacked(
    regs: *const pt_regs,
    fill: impl FnOnce(*mut RawRecord, *const pt_regs, *mut task_struct),
) -> bool {
    let Some(ring) = this_cpus_ring() else {
        return ring_full();
    };
    let copy_size = stack_copy_size(ring, arch::stack_pointer(regs));
    let mut entry = MaybeUninit::<bpf_dynptr>::uninit();
    let entry = entry.as_mut_ptr();
    // SAFETY: `ring` is this CPU's ring buffer map and `entry` a dynptr on this frame, released
    // on every path: discarded if the reserve failed (as it must be then) or its head cannot
    // be had, else submitted. The head lies within the entry, ours until then.
    unsafe {
        let size = STACKED_RECORD_SIZE as u32 + copy_size.bytes();
        if generated::bpf_ringbuf_reserve_dynptr(ring, size, 0, entry) != 0 {
            generated::bpf_ringbuf_discard_dynptr(entry, 0);
            return ring_full();
        }
        let head = generated::bpf_dynptr_data(entry, 0, STACKED_RECORD_SIZE as u32)
            .cast::<StackedRecord>();
        if head.is_null() {
            generated::bpf_ringbuf_discard_dynptr(entry, 0);
            return ring_full();
        }
        (*head).stack.reserved = copy_size.bytes();
        (*head).stack.top_hint = copy_size.top();
        fill(ptr::addr_of_mut!((*head).record), regs, current_task());
        let selected = selected(ptr::addr_of!((*head).record));
        if selected {
            copy_stack(entry, ptr::addr_of_mut!((*head).stack), regs);
        }
        // The size and the ring are found again rather than kept: kept across the calls
        // above, they would take room in this frame. The kernel's 8-byte header, and the size
        // rounded up to it.
        let size =
            STACKED_RECORD_SIZE as u32 + ptr::read_volatile(&raw const (*head).stack.reserved);
        let entry_bytes = u64::from(size.next_multiple_of(8) + 8);
        let Some(ring) = this_cpus_ring() else {
            generated::bpf_ringbuf_discard_dynptr(entry, 0);
            return ring_full();
        };
        // A discarded entry holds its room until the reader passes it: the ring fills as much.
        let (wakeup, past_half) = fill_level(ring, entry_bytes);
        if selected {
            mark_gap(ptr::addr_of_mut!((*head).record));
            generated::bpf_ringbuf_submit_dynptr(entry, wakeup);
        } else {
            generated::bpf_ringbuf_discard_dynptr(entry, wakeup);
        }
        if past_half {
            stop_if_lossless();
        }
    }
    true
}

/// This CPU's ring buffer map, as the helpers take it. Uprobe programs run with migration
/// disabled: the same ring throughout a run.
#[inline(always)]
fn this_cpus_ring() -> Option<*mut core::ffi::c_void> {
    // SAFETY: the helper takes no arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    RING_BUFFERS
        .get(cpu)
        .map(|ring| ptr::from_ref(ring).cast_mut().cast())
}

/// A record the ring could not take: with `--lossless` its thread is stopped. Returns false,
/// for "not written"; the caller counts it, as what it would have been.
#[inline(always)]
fn ring_full() -> bool {
    stop_if_lossless();
    false
}

/// A call's record the ring could not take (its entry, or, `whole`, the record written where
/// its fast path completed), filled in the thread's storage instead, to be counted as what it
/// would have been ([`count_lost_as`]). A thread that has no storage and can get none has it
/// counted as one record.
#[inline(never)]
fn count_lost_call(raw_cookie: u64, regs: *const pt_regs, task: *mut task_struct, whole: bool) {
    let calls = CALLS.of(task, true);
    if calls.is_null() {
        count_lost();
        return;
    }
    // SAFETY: this thread's own storage, which no other run uses while this one runs.
    let record = unsafe { ptr::addr_of_mut!((*calls).lost) };
    fill_entry(record, raw_cookie, regs, task);
    if whole {
        complete_whole(record, raw_cookie, regs);
    }
    count_lost_as(record);
}

/// Counts a record the ring could not take as what it would have been: one record, the two
/// halves of a call ([`WHICH_BOTH_HALVES`]), or none if it is of an event not selected
/// ([`selected`]: a mutex probe's call on the kind of mutex not traced).
#[inline(never)]
fn count_lost_as(record: *const RawRecord) {
    if !selected(record) {
        return;
    }
    // SAFETY: a whole record this run filled.
    if unsafe { (*record).which } == WHICH_BOTH_HALVES {
        count_lost();
    }
    count_lost();
}

/// Completes the `record` about to be submitted: the first record after a gap says how long
/// the gap was, so that it is placed exactly.
#[inline(always)]
fn mark_gap(record: *mut RawRecord) {
    if let Some(pending) = LOST.get_ptr_mut(LOST_PENDING) {
        // SAFETY: per-CPU slot, as in `count_lost`; the entry is ours until submitted.
        unsafe {
            // Taken and cleared in one step: a program preempted here by another on this CPU
            // would otherwise report the same gap twice.
            if *pending != 0 {
                let lost = atomic_xchg::<u64, { AtomicOrdering::Relaxed }>(pending, 0);
                (*record).lost_before = lost.min(u64::from(u32::MAX)) as u32;
            }
        }
    }
}

/// The flags to submit or discard an entry of `entry_bytes` of `ring` with, and whether the
/// ring is past half full.
#[inline(always)]
fn fill_level(ring: *mut core::ffi::c_void, entry_bytes: u64) -> (u64, bool) {
    // Wake the reader at each sixteenth of the ring in use; otherwise it polls. Not at every
    // record: a wakeup is an interrupt, and a reader that is behind would get one per record.
    // SAFETY: `ring` is a ring buffer map of this CPU's slot.
    let used = unsafe { bpf_ringbuf_query(ring, u64::from(BPF_RB_AVAIL_DATA)) };
    // SAFETY: a read-only global that userspace sets before loading.
    let size = unsafe { ptr::read_volatile(&raw const CONFIG.ring_bytes) };
    let step = (size / 16).max(1);
    let before = used.saturating_sub(entry_bytes);
    let wakeup = match before / step != used / step {
        true => BPF_RB_FORCE_WAKEUP,
        false => BPF_RB_NO_WAKEUP,
    };
    // Half full: the reader has been woken and not caught up; stop the writer for it.
    (u64::from(wakeup), used > size / 2)
}

/// With `--lossless`, stops the current thread with SIGSTOP. The first stop of an episode
/// makes the thread's entry in `STOPPED`, which tells the tracer whom to resume. A thread that
/// writes past half with its entry already made was not stopped by its signal (a SIGCONT for
/// another thread of its process can discard a stop signal not yet acted on; under emulated
/// preemption a thread was seen filling its ring so), so it is signalled again: a stop signal
/// does not queue, and a thread that stops writes nothing more. A thread rather than its
/// process, so that a thread under ptrace (`--follow`) stops at once, without waiting for the
/// tracer to pass the signal on; without ptrace a stop signal stops the whole process anyway.
#[inline(always)]
fn stop_if_lossless() {
    // SAFETY: a read-only global that userspace sets before loading.
    if unsafe { ptr::read_volatile(&raw const CONFIG.lossless) } == 0 {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let (pid, lwpid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    if STOPPED.insert(lwpid, pid, u64::from(BPF_NOEXIST)).is_err() {
        stop_again(lwpid);
        return;
    }
    // SAFETY: the helper signals the current thread; it takes no pointers.
    let sent = unsafe { bpf_send_signal_thread(SIGSTOP) } == 0;
    if !sent {
        // Refused (kernels that queue the signal through a per-CPU irq_work refuse while it
        // is busy): the entry goes too, so that the tracer waits for no signal that never
        // came, and the thread's next write tries again.
        let _ = STOPPED.remove(lwpid);
    } else if let Some(entry) = STOPPED.get_ptr_mut(lwpid) {
        // SAFETY: a value of this map; only this thread writes its own entry.
        unsafe { *entry |= STOP_SENT };
    }
}

/// Stops again a thread whose stop did not hold (its entry is still there). The tracer may
/// have resumed it meanwhile (removed the entry, then sent SIGCONT), and a stop that landed
/// after that SIGCONT would hold the process for good, with no entry to say so: if the entry
/// is gone after the signal, the stop is lifted here (sent before the tracer's SIGCONT, it was
/// discarded anyway). Seen under preempt=full: a process left stopped, the tracer waiting on
/// it. A call of its own, whose map key stays off the writing program's frame.
#[inline(never)]
fn stop_again(lwpid: u32) {
    // SAFETY: the helper signals the current thread; it takes no pointers.
    let sent = unsafe { bpf_send_signal_thread(SIGSTOP) } == 0;
    // SAFETY: the value is not kept.
    if sent && unsafe { STOPPED.get(lwpid) }.is_none() {
        // SAFETY: as above.
        unsafe { bpf_send_signal_thread(SIGCONT) };
    }
}

/// SIGSTOP's and SIGCONT's numbers on Linux.
const SIGSTOP: u32 = 19;
const SIGCONT: u32 = 18;

#[inline(always)]
fn count_lost() {
    for slot in [LOST_TOTAL, LOST_PENDING] {
        if let Some(counter) = LOST.get_ptr_mut(slot) {
            // SAFETY: per-CPU slot, valid for the program's run. Uprobe programs can be
            // preempted by another on the same CPU, so the count is added atomically.
            unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(counter, 1) };
        }
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
