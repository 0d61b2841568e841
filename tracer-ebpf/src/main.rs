//! Where a record is born. `thr_entry` runs at a traced function's entry, `thr_return` at its
//! return; the attach cookie says which event it is and what to capture (tracer-common's table).
//! Records go to this CPU's ring buffer without waking the reader, except when the buffer is a
//! quarter full; a record that does not fit is counted in `LOST`, never dropped silently.
#![no_std]
#![no_main]
// The atomic intrinsics: the BPF target has no `Atomic*` types, but LLVM emits BPF atomics.
#![feature(core_intrinsics)]
#![allow(internal_features)]

use core::ptr;

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    btf_maps::{ArrayOfMaps, HashMap, LruHashMap, PerCpuArray, RingBuf},
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_get_current_task,
        bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user,
        bpf_ringbuf_query, bpf_send_signal_thread,
    },
    macros::{btf_map, raw_tracepoint, uprobe, uretprobe},
    programs::{ProbeContext, RawTracePointContext, RetProbeContext},
};
use tracer_common::{
    MAX_CPUS, ProbeCookie, ProbeFlags, RECORDING_SLOTS, RawRecord,
    events::{OBJECT_WORDS, ObjectSize},
};

/// Set by userspace from kernel BTF before loading.
#[unsafe(no_mangle)]
static FSBASE_OFFSET: u64 = 0;
#[unsafe(no_mangle)]
static NVCSW_OFFSET: u64 = 0;
/// The tracer's own process: never traced (system-wide, its runtime's locks would feed back).
#[unsafe(no_mangle)]
static TRACER_TGID: u32 = 0;
/// Set when tracing system-wide: shared links (no process filter) record every process.
#[unsafe(no_mangle)]
static SYSTEM_WIDE: u32 = 0;
/// Byte offset of `tgid` in `task_struct`, to tell a forked process from a new thread.
#[unsafe(no_mangle)]
static TGID_OFFSET: u64 = 0;
/// Bytes of each CPU's ring buffer: how full a ring is, without asking the kernel its size
/// at every record.
#[unsafe(no_mangle)]
static RING_BYTES: u64 = 0;
/// Set with `--lossless`: a thread that writes to a ring more than half full is stopped until
/// the tracer has drained the rings.
#[unsafe(no_mangle)]
static LOSSLESS: u32 = 0;

/// `--lossless`: the threads stopped (SIGSTOP) for writing to a ring past half, by thread id,
/// with their process id, marked `STOP_SENT` once the signal has been sent; one entry per
/// episode. Once it has drained the rings, the tracer removes the marked entries and resumes
/// their threads (SIGCONT, or under `--follow` through ptrace). An unmarked entry is left for
/// later: its SIGSTOP could still come after the SIGCONT.
#[btf_map]
static STOPPED: HashMap<u32, u32, 16384> = HashMap::new();

/// Per category code (a probe's event1), a bit per event2 whose probes record now. Written by
/// userspace: all clear while the trace is stopped, the filter's bits while it runs. Global data
/// in a section of its own (a one-entry array map to userspace): read through a pointer, with
/// no map lookup, so no key on the entry program's stack, which is at the verifier's limit.
#[unsafe(no_mangle)]
#[unsafe(link_section = ".bss.recording")]
static mut RECORDING: [u64; RECORDING_SLOTS as usize] = [0; RECORDING_SLOTS as usize];

/// Whether the probe's event records now: checked first, so that a stopped or filtered-out
/// event costs its trap and one load.
#[inline(always)]
fn recording(cookie: &ProbeCookie) -> bool {
    let slot = usize::from(cookie.event1) % RECORDING_SLOTS as usize;
    // SAFETY: a bounded index into global data that only userspace writes; read volatile, as
    // it changes under the program.
    let mask = unsafe { ptr::read_volatile(ptr::addr_of!(RECORDING[slot])) };
    mask & (1 << (cookie.event2 & 63)) != 0
}

/// The processes recorded through shared links (links with no process filter): `--follow`'s
/// targets and every process they fork (fork, vfork, clone), added by `thr_fork` in the kernel
/// before the child runs; and `-p` targets whose main thread has exited, whose own links the
/// kernel no longer applies (it filters by the main thread's memory).
#[btf_map]
static SHARED_TRACED: LruHashMap<u32, u8, 65536> = LruHashMap::new();

/// Whether a hit through a link with these flags is recorded. A process in `SHARED_TRACED` is
/// recorded through shared links only, so that while a `-p` target moves from its own links to
/// shared ones each call is recorded once. Never the tracer.
#[inline(always)]
fn recorded(pid_tgid: u64, flags: ProbeFlags) -> bool {
    if is_tracer(pid_tgid) {
        return false;
    }
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: the map value is only tested for presence.
    let shared_traced = unsafe { SHARED_TRACED.get(tgid) }.is_some();
    if flags.has(ProbeFlags::SHARED) {
        shared_traced || unsafe { ptr::read_volatile(&SYSTEM_WIDE) } != 0
    } else {
        !shared_traced
    }
}

/// A traced process forked: its child is traced too. Runs in the parent, on the raw
/// `sched_process_fork(parent, child)` tracepoint, whose arguments are the two `task_struct`s.
#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn thr_fork(ctx: RawTracePointContext) -> u32 {
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: the map value is only tested for presence.
    if unsafe { SHARED_TRACED.get(parent) }.is_none() {
        return 0;
    }
    let child_task: u64 = ctx.arg(1);
    let tgid_offset = unsafe { ptr::read_volatile(&TGID_OFFSET) };
    // SAFETY: a kernel read through the helper, at an offset taken from kernel BTF.
    let child = unsafe { bpf_probe_read_kernel((child_task + tgid_offset) as *const u32) };
    // A new thread of the parent has the parent's tgid, which is followed already.
    if let Ok(child) = child
        && child != parent
    {
        let _ = SHARED_TRACED.insert(child, 1, 0);
        // The child is a copy of the parent's address space: the same errno slot.
        // SAFETY: the value is copied out at once.
        if let Some(&slot) = unsafe { ERRNO_SLOTS.get(parent) } {
            let _ = ERRNO_SLOTS.insert(child, slot, 0);
        }
    }
    0
}

/// A process replaced its image: its errno slot address means nothing in the new one.
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn thr_exec(_ctx: RawTracePointContext) -> u32 {
    let pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let _ = ERRNO_SLOTS.remove(pid);
    0
}

#[inline(always)]
fn is_tracer(pid_tgid: u64) -> bool {
    (pid_tgid >> 32) as u32 == unsafe { ptr::read_volatile(&TRACER_TGID) }
}

/// The inner definition is only a template: userspace creates one ring buffer per CPU.
#[btf_map]
static RING_BUFFERS: ArrayOfMaps<RingBuf<RawRecord, 4096>, { MAX_CPUS as usize }> =
    ArrayOfMaps::new();

#[btf_map]
static LOST: PerCpuArray<u64, 2> = PerCpuArray::new();

/// Per traced process: the address of the GOT slot from which its C library's
/// `__errno_location` loads errno's offset from the thread pointer.
#[btf_map]
static ERRNO_SLOTS: HashMap<u32, u64, 16384> = HashMap::new();

/// A call between its entry and its return: the record so far and the switch count at entry.
#[repr(C)]
#[derive(Clone, Copy)]
struct Pending {
    record: RawRecord,
    nvcsw_at_entry: u64,
    /// Calls of the same event made by this one (glibc's compat condvar functions call the new
    /// ones): their returns come first and are skipped.
    nested: u64,
}

/// Keyed by thread and event, so that one traced call inside another cannot mix them up. LRU,
/// so that calls which never return (cancellation, longjmp) cannot fill it.
#[repr(C)]
#[derive(Clone, Copy)]
struct PendingKey {
    pid_tgid: u64,
    event: u32,
    _pad: u32,
}

#[btf_map]
static PENDING: LruHashMap<PendingKey, Pending, 65536> = LruHashMap::new();

#[uprobe]
pub fn thr_entry(ctx: ProbeContext) -> u32 {
    let cookie = ProbeCookie::decode(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    if !recording(&cookie) {
        return 0;
    }
    let flags = cookie.flags;
    // SAFETY: uprobe context registers are the user's at the probed instruction.
    let regs = unsafe { &*ctx.regs };
    let pid_tgid = bpf_get_current_pid_tgid();
    if !recorded(pid_tgid, flags) {
        return 0;
    }
    let key = PendingKey {
        pid_tgid,
        event: event_key(&cookie),
        _pad: 0,
    };
    // A hit while this thread's call of the same event is pending is not a new call: a spin
    // lock trying again (it spun), or the implementation calling itself. No records.
    if flags.has(ProbeFlags::RETURN)
        && let Some(pending) = PENDING.get_ptr_mut(key)
    {
        // SAFETY: this thread's own entry; only this thread touches it until its return.
        unsafe {
            if flags.has(ProbeFlags::SPINS) {
                (*pending).record.block = 1;
            } else {
                (*pending).nested += 1;
            }
        }
        return 0;
    }
    let mut pending = Pending {
        record: RawRecord {
            ktime_ns: unsafe { bpf_ktime_get_ns() },
            pthread_self: read_task_u64(unsafe { ptr::read_volatile(&FSBASE_OFFSET) }),
            caller: read_user::<u64>(regs.rsp + u64::from(cookie.stack_offset)),
            pid: (pid_tgid >> 32) as u32,
            lwpid: pid_tgid as u32,
            event1: cookie.event1,
            event2: cookie.event2,
            which: 0,
            block: 0,
            _pad: 0,
            args: [regs.rdi, regs.rsi, regs.rdx, regs.rcx, regs.r8],
            rval: 0,
            timespec: [0; 2],
            errno: 0,
            object: [0; OBJECT_WORDS],
            lost_before: 0,
            pointees: [0; 3],
        },
        nvcsw_at_entry: 0,
        nested: 0,
    };
    let record = &mut pending.record;
    // From the copy of the arguments: a computed offset into the context is not allowed.
    if let Some(n) = flags.timespec_argument()
        && let Some(&pointer) = record.args.get(usize::from(n) - 1)
    {
        record.timespec = read_user::<[i64; 2]>(pointer);
    }
    copy_object(&mut record.object, flags.object_size(), regs.rdi);
    // A single record now, or the entry half of a paired call. One call site: each inlined
    // copy of `emit` takes stack of its own.
    let single = !flags.has(ProbeFlags::RETURN);
    if single || flags.has(ProbeFlags::PAIRED) {
        record.which = if single { 0 } else { 1 };
        emit(record);
    }
    if single {
        return 0;
    }
    if flags.has(ProbeFlags::BLOCK) {
        pending.nvcsw_at_entry = read_task_u64(unsafe { ptr::read_volatile(&NVCSW_OFFSET) });
    }
    // A full LRU map evicts the oldest entry; insert cannot fail for lack of room.
    let _ = PENDING.insert(key, pending, 0);
    0
}

#[uretprobe]
pub fn thr_return(ctx: RetProbeContext) -> u32 {
    let cookie = ProbeCookie::decode(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    let key = PendingKey {
        pid_tgid: bpf_get_current_pid_tgid(),
        event: event_key(&cookie),
        _pad: 0,
    };
    let Some(entry) = PENDING.get_ptr_mut(key) else {
        return 0;
    };
    // SAFETY: this thread's own entry, copied out before it is removed.
    let pending = unsafe {
        if (*entry).nested > 0 {
            (*entry).nested -= 1;
            return 0;
        }
        *entry
    };
    let _ = PENDING.remove(key);
    // Stopped or filtered out since the entry: nothing more is recorded of the call.
    if !recording(&cookie) {
        return 0;
    }
    let mut record = pending.record;
    // SAFETY: uretprobe context registers are the user's at the return address.
    record.rval = unsafe { (*ctx.regs).rax } as i64;
    if cookie.flags.has(ProbeFlags::BLOCK) {
        let nvcsw = read_task_u64(unsafe { ptr::read_volatile(&NVCSW_OFFSET) });
        record.block = (nvcsw != pending.nvcsw_at_entry) as u8;
    }
    if cookie.flags.has(ProbeFlags::OBJECT_AT_RETURN) {
        copy_object(
            &mut record.object,
            cookie.flags.object_size(),
            record.args[0],
        );
    }
    if cookie.flags.has(ProbeFlags::POINTEES) {
        for (pointee, &pointer) in record.pointees.iter_mut().zip(&record.args) {
            *pointee = read_user::<u64>(pointer);
        }
    }
    if cookie.flags.has(ProbeFlags::ERRNO) && record.rval as i32 == -1 {
        record.errno = read_errno(record.pid, record.pthread_self);
    }
    if cookie.flags.has(ProbeFlags::PAIRED) {
        record.which = 2;
        record.ktime_ns = unsafe { bpf_ktime_get_ns() };
    }
    emit(&record);
    0
}

/// Does nothing: attached instead of the two programs above, it measures what the probes
/// alone cost (`--empty-programs`).
#[uprobe]
pub fn thr_empty(_ctx: ProbeContext) -> u32 {
    0
}

#[inline(always)]
fn event_key(cookie: &ProbeCookie) -> u32 {
    ((cookie.event1 as u32) << 16) | cookie.event2 as u32
}

/// Copies the first words of the object at `address`: exactly `size`, never more, so that a
/// small object at the end of a page is not read past. Userspace derives fields from them.
#[inline(always)]
fn copy_object(words: &mut [u32; OBJECT_WORDS], size: ObjectSize, address: u64) {
    match size {
        ObjectSize::None => {}
        ObjectSize::Word => words[0] = read_user::<u32>(address),
        ObjectSize::Small => {
            let small = read_user::<[u32; 8]>(address);
            words[..8].copy_from_slice(&small);
        }
        ObjectSize::Large => *words = read_user::<[u32; OBJECT_WORDS]>(address),
    }
}

/// A user value, or zero if the address is not readable (a bad pointer argument).
#[inline(always)]
fn read_user<T: Default>(address: u64) -> T {
    unsafe { bpf_probe_read_user(address as *const T) }.unwrap_or_default()
}

/// The calling thread's errno: thread pointer + the offset the process's GOT holds (written by
/// ld.so, so read at each use rather than when the probes were attached). 0 if unknown.
#[inline(always)]
fn read_errno(pid: u32, thread_pointer: u64) -> i32 {
    // SAFETY: the value is copied out at once.
    let Some(&slot) = (unsafe { ERRNO_SLOTS.get(pid) }) else {
        return 0;
    };
    let offset = read_user::<i64>(slot);
    read_user::<i32>(thread_pointer.wrapping_add(offset as u64))
}

/// A u64 field of the current `task_struct` at a BTF-derived offset.
#[inline(always)]
fn read_task_u64(offset: u64) -> u64 {
    let task = unsafe { bpf_get_current_task() };
    unsafe { bpf_probe_read_kernel((task + offset) as *const u64) }.unwrap_or(0)
}

#[inline(always)]
fn emit(record: &RawRecord) {
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let reserved = RING_BUFFERS.get(cpu).and_then(|ring| {
        let entry = ring.reserve(0)?;
        Some((ring, entry))
    });
    let Some((ring, mut entry)) = reserved else {
        count_lost();
        stop_if_lossless(record);
        return;
    };
    // SAFETY: the reserved entry has room for one record; copied in place, with no copy of
    // it on the stack (the entry program's stack is near the verifier's 512 bytes).
    unsafe { ptr::copy_nonoverlapping(record, entry.as_mut_ptr(), 1) };
    // The first record after a gap says how long the gap was, so that it is placed exactly.
    if let Some(pending) = LOST.get_ptr_mut(LOST_PENDING) {
        // SAFETY: per-CPU slot, as in `count_lost`; the entry is ours until submitted.
        unsafe {
            // Taken and cleared in one step: a program preempted here by another on this CPU
            // would otherwise report the same gap twice.
            if *pending != 0 {
                let lost = atomic_xchg::<u64, { AtomicOrdering::Relaxed }>(pending, 0);
                (*entry.as_mut_ptr()).lost_before = lost.min(u64::from(u32::MAX)) as u32;
            }
        }
    }
    // Wake the reader only when a quarter of the ring is in use; otherwise it polls.
    let ring_ptr = ptr::from_ref(ring).cast_mut().cast();
    let used = unsafe { bpf_ringbuf_query(ring_ptr, BPF_RB_AVAIL_DATA as u64) };
    let size = unsafe { ptr::read_volatile(&RING_BYTES) };
    let wakeup = if used > size / 4 {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(wakeup as u64);
    // Half full: the reader has been woken and not caught up; stop the writer for it.
    if used > size / 2 {
        stop_if_lossless(record);
    }
}

/// With `--lossless`, stops the current thread (that of `record`) with SIGSTOP, once per
/// episode: only the insert that creates its entry sends the signal. A thread rather than its
/// process, so that a thread under ptrace (`--follow`) stops at once, without waiting for the
/// tracer to pass the signal on; without ptrace a stop signal stops the whole process anyway.
/// Key and value are the record's own fields, so that no stack is taken: the entry program's
/// is near the verifier's 512 bytes.
#[inline(always)]
// Passed by value, key and value are copied to the stack: thr_entry then exceeds 512 bytes.
#[allow(clippy::needless_borrows_for_generic_args)]
fn stop_if_lossless(record: &RawRecord) {
    if unsafe { ptr::read_volatile(&LOSSLESS) } != 0
        && STOPPED
            .insert(&record.lwpid, &record.pid, BPF_NOEXIST as u64)
            .is_ok()
    {
        // SAFETY: the helper signals the current thread; it takes no pointers.
        unsafe { bpf_send_signal_thread(SIGSTOP) };
        if let Some(entry) = STOPPED.get_ptr_mut(&record.lwpid) {
            // SAFETY: a value of this map; only this thread writes its own entry.
            unsafe { *entry |= STOP_SENT };
        }
    }
}

use core::intrinsics::{AtomicOrdering, atomic_xadd, atomic_xchg};

use tracer_common::{LOST_PENDING, LOST_TOTAL, STOP_SENT};

/// SIGSTOP's number on Linux.
const SIGSTOP: u32 = 19;

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
