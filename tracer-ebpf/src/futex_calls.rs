//! Where a futex record is born: the futex calls of traced threads made outside traced pthread
//! calls (a program's own locks, glibc's internal ones), hooked in the kernel rather than in
//! the library. Three pairs of programs reach the same two bodies, one pair per mechanism the
//! kernel may offer (`docs/futex-design.md`): fentry/fexit on the syscalls' functions, the
//! futex syscalls' own tracepoints, and `raw_syscalls`, whichever userspace attached.
//!
//! A call is one record, written at its exit: under `--contended` only a wait that blocked or
//! a wake that woke, so only the exit can tell. It says how long the call took.

use core::ptr;

use aya_ebpf::{
    EbpfContext,
    bindings::{pt_regs, task_struct},
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel, generated},
    macros::{btf_map, fentry, fexit, raw_tracepoint, tracepoint},
    programs::{FEntryContext, FExitContext, RawTracePointContext, TracePointContext},
};
use tracer_common::{
    Category, RawRecord, STACKS_NONE, futex,
    kfuncs::{self, Kfunc},
    record::RAW_RECORD_SIZE,
};

use crate::{
    CALL_SLOTS, CALLS, CONFIG, FREE, TRACED, TaskStorage, arch, count_lost, current_pid_tgid,
    current_task, emit_stacked, emit_with, in_selected_cgroups, is_tracer, own_target, read_task,
    read_user_into, recording_event, thread_pointer,
};

/// A traced thread's futex call between its entry and its exit, and what its pthread calls
/// told the futex programs.
#[repr(C)]
#[derive(Clone, Copy)]
struct FutexCall {
    /// The syscall's first five arguments; for `futex_waitv(2)`, the first word's address in
    /// place of the array's.
    args: [u64; 5],
    /// The `struct timespec` a wait's fourth argument points to, read at entry; zero if none.
    timeout: [i64; 2],
    started_ns: u64,
    nvcsw_at_entry: u64,
    /// The call's event (`futex::*_EVENT2`) from its entry to its exit; 0 otherwise.
    event2: u64,
    /// What the word held at entry (`FUTEX_UNLOCK_PI`: whether it had waiters).
    word_at_entry: u32,
    /// Set by a pthread unlock's or post's waking slow path, which is that call's record: the
    /// futex wake it makes next is not recorded again. Cleared by the thread's next futex call.
    pthread_wake_next: u32,
}

/// Each traced thread's futex call in progress.
#[btf_map]
static FUTEX_CALLS: TaskStorage<FutexCall> = TaskStorage::new();

/// `FUTEX_UNLOCK_PI` found waiters to hand the lock to: the word's `FUTEX_WAITERS` bit.
const FUTEX_WAITERS: u32 = 0x8000_0000;
/// A wait whose word no longer held the value expected: it returned at once.
const EAGAIN: i64 = 11;
/// Where `struct futex_waitv`'s `uaddr` is: after its 8-byte `val`.
const WAITV_UADDR_OFFSET: u64 = 8;

/// A pthread call's waking slow path was recorded: the thread's next futex wake is that call's.
#[inline(never)]
pub(crate) fn pthread_wake_recorded() {
    // The task taken again here, not passed: kept live across the entry program, it would
    // grow that program's frame.
    let call = FUTEX_CALLS.of(current_task(), true);
    if !call.is_null() {
        // SAFETY: this thread's own value, which only its own programs touch.
        unsafe { (*call).pthread_wake_next = 1 };
    }
}

/// At a futex syscall's entry: a call of a traced thread that is a futex event, not part of a
/// traced pthread call, is noted for its exit to record. `read_args` writes its five arguments.
#[inline(always)]
fn futex_call_entered(nr: u64, op: u64, read_args: impl FnOnce(*mut [u64; 5])) {
    let Some(event2) = futex::event_of_call(nr, op) else {
        return;
    };
    if !recording_event(Category::Futex as u16, event2) {
        return;
    }
    let task = current_task();
    if !traced_process(current_pid_tgid(task)) {
        return;
    }
    unpreempted(|| note_traced_call(task, event2, read_args));
}

/// The entry of a traced thread's futex call that is a futex event: noted for its exit,
/// unless it is part of a traced pthread call.
#[inline(always)]
fn note_traced_call(task: *mut task_struct, event2: u16, read_args: impl FnOnce(*mut [u64; 5])) {
    let call = FUTEX_CALLS.of(task, true);
    if call.is_null() {
        count_lost();
        return;
    }
    // SAFETY: this thread's own value, which only its own programs touch.
    unsafe {
        (*call).event2 = 0;
        let after_pthread_wake = (*call).pthread_wake_next != 0;
        (*call).pthread_wake_next = 0;
        if (after_pthread_wake && event2 == futex::WAKE_EVENT2) || inside_traced_call(task) {
            return;
        }
        let args = ptr::addr_of_mut!((*call).args);
        read_args(args);
        note_call(call, event2);
    }
}

/// Fills the rest of `call` at its entry: what its arguments point to, when it began.
/// A call of its own, to keep the entry programs' frames small.
///
/// # Safety
/// `call` is the current thread's own value, its arguments written.
#[inline(never)]
unsafe fn note_call(call: *mut FutexCall, event2: u16) {
    // SAFETY: per the function's contract.
    unsafe {
        let word = (*call).args[0];
        if event2 == futex::WAITV_EVENT2 {
            read_user_into(
                ptr::addr_of_mut!((*call).args[0]),
                word + WAITV_UADDR_OFFSET,
            );
        }
        (*call).timeout = [0, 0];
        // A wake's fourth argument is a count, not a pointer.
        if event2 != futex::WAKE_EVENT2 && (*call).args[3] != 0 {
            read_user_into(ptr::addr_of_mut!((*call).timeout), (*call).args[3]);
        }
        (*call).word_at_entry = 0;
        if (*call).args[1] & !futex::OP_FLAGS == futex::command::UNLOCK_PI {
            read_user_into(ptr::addr_of_mut!((*call).word_at_entry), word);
        }
        (*call).nvcsw_at_entry = read_task::<u64>(
            current_task(),
            ptr::read_volatile(&raw const CONFIG.nvcsw_offset),
        );
        (*call).started_ns = bpf_ktime_get_ns();
        (*call).event2 = u64::from(event2);
    }
}

/// At a futex syscall's exit, with its result: the record of the call noted at its entry, if
/// it is to be written.
#[inline(always)]
fn futex_call_exited(result: i64) {
    let task = current_task();
    let call = FUTEX_CALLS.of(task, false);
    if call.is_null() {
        return;
    }
    unpreempted(|| record_exited_call(task, call, result));
}

/// The exit of a call of a thread that has futex storage: its record, if it was noted at its
/// entry and is to be written.
#[inline(always)]
fn record_exited_call(task: *mut task_struct, call: *mut FutexCall, result: i64) {
    // SAFETY: this thread's own value.
    let (event2, unlock_pi_woke) = unsafe {
        let event2 = (*call).event2 as u16;
        if event2 == 0 {
            return;
        }
        (*call).event2 = 0;
        let unlock_pi = (*call).args[1] & !futex::OP_FLAGS == futex::command::UNLOCK_PI;
        (
            event2,
            unlock_pi && result == 0 && (*call).word_at_entry & FUTEX_WAITERS != 0,
        )
    };
    // A wake's result is how many it woke; an unlock of a PI futex returns 0 either way.
    let (result, blocked) = if event2 == futex::WAKE_EVENT2 {
        let woke = if unlock_pi_woke { 1 } else { result };
        (woke, woke > 0)
    } else {
        // SAFETY: a read-only global that userspace sets before loading.
        let nvcsw = read_task::<u64>(task, unsafe {
            ptr::read_volatile(&raw const CONFIG.nvcsw_offset)
        });
        // A wait that slept; one woken before it slept returns 0 without a switch.
        // SAFETY: this thread's own value.
        let switched = nvcsw != unsafe { (*call).nvcsw_at_entry };
        (result, switched && result != -EAGAIN)
    };
    // SAFETY: a read-only global that userspace sets before loading.
    if !blocked && unsafe { ptr::read_volatile(&raw const CONFIG.futex_contended_only) } != 0 {
        return;
    }
    emit_futex_call(call, event2, result, blocked);
}

/// Writes the record of the futex call in `call`, with the thread's stack when asked (left out
/// if the ring has no room for it). A call of its own, to keep the exit programs' frames small.
#[inline(never)]
fn emit_futex_call(call: *const FutexCall, event2: u16, result: i64, blocked: bool) {
    // SAFETY: a read-only global that userspace sets before loading.
    let with_stack = unsafe { ptr::read_volatile(&raw const CONFIG.stacks) } != STACKS_NONE;
    let fill = move |entry| fill_futex_record(entry, call, event2, result, blocked);
    let written = match with_stack {
        true => emit_stacked(user_registers(), move |entry, _, _| fill(entry)),
        false => emit_with(fill),
    };
    if !written {
        count_lost();
    }
}

/// Writes every byte of the record of the futex call in `call` into `record` (a ring entry),
/// stamped now.
#[inline(never)]
fn fill_futex_record(
    record: *mut RawRecord,
    call: *const FutexCall,
    event2: u16,
    result: i64,
    blocked: bool,
) {
    let task = current_task();
    let regs = user_registers();
    let pid_tgid = current_pid_tgid(task);
    // SAFETY: `record` is a reserved ring entry, ours until submitted; `call` is this
    // thread's own value; `regs` is the task's saved user registers, read by the helper.
    unsafe {
        // As in `fill_entry`: zeroed word by word, with no call to `memset`.
        let words = record.cast::<u64>();
        for i in 0..RAW_RECORD_SIZE / 8 {
            words.add(i).write_volatile(0);
        }
        (*record).ktime_ns = bpf_ktime_get_ns();
        (*record).started_ns = (*call).started_ns;
        (*record).pthread_self = thread_pointer(task);
        // The user instruction pointer: the instruction after the syscall's.
        (*record).caller = user_register(regs, arch::INSTRUCTION_POINTER);
        (*record).pid = (pid_tgid >> 32) as u32;
        (*record).lwpid = pid_tgid as u32;
        (*record).event1 = Category::Futex as u16;
        (*record).event2 = event2;
        // Recorded where it waits or wakes, as a lock's slow path is: stacks of slow paths
        // include it.
        (*record).slow_path = 1;
        (*record).block = u8::from(blocked);
        // Copied as not overlapping, which they cannot: an assignment between two raw
        // pointers' places is a `memmove`, a byte loop on BPF that the verifier walks byte by
        // byte, at each of its callers' states.
        ptr::copy_nonoverlapping(&raw const (*call).args, &raw mut (*record).args, 1);
        (*record).rval = result;
        ptr::copy_nonoverlapping(&raw const (*call).timeout, &raw mut (*record).timespec, 1);
    }
}

/// The registers the current thread entered the kernel with: its user stack, where it called
/// from.
#[inline(always)]
fn user_registers() -> *const pt_regs {
    // SAFETY: the helper takes the current task, as the BTF pointer it needs.
    unsafe { generated::bpf_task_pt_regs(current_task()) as *const pt_regs }
}

/// The saved user register at `offset` in `regs` (0 if it cannot be read).
#[inline(always)]
fn user_register(regs: *const pt_regs, offset: usize) -> u64 {
    // SAFETY: the helper checks the kernel address.
    unsafe { bpf_probe_read_kernel(regs.byte_add(offset).cast::<u64>()) }.unwrap_or(0)
}

/// Whether the current process's futex calls are recorded: it is traced through links of
/// either kind, or the trace is system-wide. Never the tracer's.
#[inline(always)]
fn traced_process(pid_tgid: u64) -> bool {
    if is_tracer(pid_tgid) {
        return false;
    }
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: a read-only global that userspace sets before loading.
    let system_wide = unsafe { ptr::read_volatile(&raw const CONFIG.system_wide) } != 0;
    // SAFETY: the value is not kept.
    let traced =
        system_wide || own_target(tgid) == Some(true) || unsafe { TRACED.get(tgid) }.is_some();
    // Asked last: it costs a helper call.
    traced && in_selected_cgroups()
}

/// Whether the thread has a traced call open: a futex call inside it is that call's, which is
/// recorded as its own event.
#[inline(always)]
fn inside_traced_call(task: *mut task_struct) -> bool {
    let calls = CALLS.of(task, false);
    if calls.is_null() {
        return false;
    }
    for i in 0..CALL_SLOTS {
        // SAFETY: this thread's own value, which only its own programs touch.
        if unsafe { (*calls).slots[i].event } != FREE {
            return true;
        }
    }
    false
}

/// The syscall's arguments from its saved registers, as the architecture's syscall ABI
/// passes them.
#[inline(always)]
fn entered_with_registers(regs: *const pt_regs) {
    let nr = arch::syscall_number(regs);
    let op = user_register(regs, arch::SYSCALL_ARGUMENTS[1]);
    futex_call_entered(nr, op, |args| {
        for (i, offset) in arch::SYSCALL_ARGUMENTS.into_iter().enumerate() {
            // SAFETY: `args` is the thread's own value; `i` is below 5.
            unsafe { (*args)[i] = user_register(regs, offset) };
        }
    });
}

/// Runs `body` with preemption off where the kernel can turn it off (`kfuncs::PREEMPT_DISABLE`):
/// while a futex program is preempted, the kernel skips it for every other thread on that CPU.
/// What a traced thread's call does is run so; the checks that turn every other call away
/// come first, and do not pay for it.
#[inline(always)]
fn unpreempted(body: impl FnOnce()) {
    call_kfunc(kfuncs::PREEMPT_DISABLE);
    body();
    call_kfunc(kfuncs::PREEMPT_ENABLE);
}

/// A call of `kfunc`, by its placeholder, which the loader replaces.
#[inline(always)]
fn call_kfunc(kfunc: Kfunc) {
    // SAFETY: the placeholder is a call the loader turns into the kfunc's (which takes no
    // arguments and returns nothing) or into nothing; a kernel never runs it as it is.
    unsafe {
        let call: unsafe extern "C" fn() = core::mem::transmute(kfunc.placeholder as usize);
        call();
    }
}

/// fentry on the futex syscalls' functions (`__x64_sys_futex`, `__x64_sys_futex_waitv`),
/// whose one argument is the saved registers: only futex calls run it.
#[fentry]
pub fn thr_futex_fentry(ctx: FEntryContext) -> u32 {
    entered_with_registers(ctx.arg(0));
    0
}

/// fexit of the same functions: their second word is the return value.
#[fexit]
pub fn thr_futex_fexit(ctx: FExitContext) -> u32 {
    futex_call_exited(ctx.arg(1));
    0
}

/// In a `syscalls:sys_enter_*` record, the syscall's number (an int) and, in 8-byte words
/// from `SYSCALL_ARGS_AT`, its arguments; in a `sys_exit_*` record the return value there.
const SYSCALL_NR_AT: usize = 8;
const SYSCALL_ARGS_AT: usize = 16;

/// Word `n` of a syscall tracepoint's record from `SYSCALL_ARGS_AT`. A load from the context
/// at a constant offset, which the verifier checks.
#[inline(always)]
fn syscall_record_word(ctx: &TracePointContext, n: usize) -> u64 {
    // SAFETY: the context is the tracepoint's record, whose words these are.
    unsafe {
        ctx.as_ptr()
            .byte_add(SYSCALL_ARGS_AT + 8 * n)
            .cast::<u64>()
            .read()
    }
}

/// The futex syscalls' entry tracepoints (`syscalls:sys_enter_futex`, `_futex_waitv`).
#[tracepoint]
pub fn thr_futex_tp_enter(ctx: TracePointContext) -> u32 {
    // SAFETY: the number is an int at a fixed offset of the record.
    let nr = unsafe { ctx.as_ptr().byte_add(SYSCALL_NR_AT).cast::<i32>().read() };
    futex_call_entered(nr as u64, syscall_record_word(&ctx, 1), |args| {
        // SAFETY: `args` is the thread's own value. Each at a constant offset: the verifier
        // refuses a context load at a computed one.
        unsafe {
            *args = [
                syscall_record_word(&ctx, 0),
                syscall_record_word(&ctx, 1),
                syscall_record_word(&ctx, 2),
                syscall_record_word(&ctx, 3),
                syscall_record_word(&ctx, 4),
            ];
        }
    });
    0
}

/// The futex syscalls' exit tracepoints.
#[tracepoint]
pub fn thr_futex_tp_exit(ctx: TracePointContext) -> u32 {
    futex_call_exited(syscall_record_word(&ctx, 0) as i64);
    0
}

/// `raw_syscalls:sys_enter(regs, id)`: every syscall of the machine runs it, and most return
/// at the first compare.
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn thr_futex_raw_enter(ctx: RawTracePointContext) -> u32 {
    let nr: u64 = ctx.arg(1);
    if nr == futex::SYS_FUTEX || nr == futex::SYS_FUTEX_WAITV {
        entered_with_registers(ctx.arg(0));
    }
    0
}

/// `raw_syscalls:sys_exit(regs, ret)`.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn thr_futex_raw_exit(ctx: RawTracePointContext) -> u32 {
    let nr = arch::syscall_number(ctx.arg(0));
    if nr == futex::SYS_FUTEX || nr == futex::SYS_FUTEX_WAITV {
        futex_call_exited(ctx.arg(1));
    }
    0
}
