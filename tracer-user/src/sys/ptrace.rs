//! `ptrace(2)`: the requests the tracer makes of its tracees, each a function. A request
//! on a thread that is not a stopped tracee of the calling thread fails with ESRCH; none
//! can reach memory of the tracer's but the structure it returns.

use std::{mem::MaybeUninit, ptr};

use libc::{c_int, c_uint, c_void, pid_t};

use super::{SyscallError, zero_or_errno};

/// Makes the calling process a tracee of its parent (before an exec, which then stops it).
/// Async-signal-safe, for a child between fork and exec.
pub fn trace_me() -> Result<(), SyscallError> {
    // SAFETY: no address or data is passed.
    let result = unsafe { request(libc::PTRACE_TRACEME, 0, ptr::null_mut(), 0) };
    zero_or_errno(result, "ptrace(PTRACE_TRACEME)")
}

/// Attaches to thread `tid` without stopping it, with ptrace `options`.
pub fn seize(tid: pid_t, options: c_int) -> Result<(), SyscallError> {
    // SAFETY: the options travel in `data` as a number; no memory is passed.
    let result = unsafe { request(libc::PTRACE_SEIZE, tid, ptr::null_mut(), options as usize) };
    zero_or_errno(result, "ptrace(PTRACE_SEIZE)")
}

/// Sets the ptrace `options` of stopped tracee `tid`.
pub fn set_options(tid: pid_t, options: c_int) -> Result<(), SyscallError> {
    // SAFETY: the options travel in `data` as a number; no memory is passed.
    let result = unsafe {
        request(
            libc::PTRACE_SETOPTIONS,
            tid,
            ptr::null_mut(),
            options as usize,
        )
    };
    zero_or_errno(result, "ptrace(PTRACE_SETOPTIONS)")
}

/// Resumes stopped tracee `tid` until its next syscall entry or exit, delivering `signal`
/// (0: none).
pub fn step_to_syscall(tid: pid_t, signal: c_int) -> Result<(), SyscallError> {
    // SAFETY: the signal travels in `data` as a number; no memory is passed.
    let result = unsafe { request(libc::PTRACE_SYSCALL, tid, ptr::null_mut(), signal as usize) };
    zero_or_errno(result, "ptrace(PTRACE_SYSCALL)")
}

/// Resumes stopped tracee `tid`, delivering `signal` (0: none).
pub fn resume(tid: pid_t, signal: c_int) -> Result<(), SyscallError> {
    // SAFETY: the signal travels in `data` as a number; no memory is passed.
    let result = unsafe { request(libc::PTRACE_CONT, tid, ptr::null_mut(), signal as usize) };
    zero_or_errno(result, "ptrace(PTRACE_CONT)")
}

/// Lets stopped tracee `tid` go, delivering `signal` (0: none).
pub fn detach(tid: pid_t, signal: c_int) -> Result<(), SyscallError> {
    // SAFETY: the signal travels in `data` as a number; no memory is passed.
    let result = unsafe { request(libc::PTRACE_DETACH, tid, ptr::null_mut(), signal as usize) };
    zero_or_errno(result, "ptrace(PTRACE_DETACH)")
}

/// Keeps tracee `tid`, in a group-stop, stopped as it would be untraced, while its other
/// events are still reported.
pub fn listen(tid: pid_t) -> Result<(), SyscallError> {
    // SAFETY: no address or data is passed.
    let result = unsafe { request(libc::PTRACE_LISTEN, tid, ptr::null_mut(), 0) };
    zero_or_errno(result, "ptrace(PTRACE_LISTEN)")
}

/// The syscall that tracee `tid`, at a syscall stop, is entering: its number and arguments
/// (`PTRACE_GET_SYSCALL_INFO`, Linux 5.3, the same on every architecture). `None` at its exit
/// or any other stop.
pub fn syscall_entry(tid: pid_t) -> Result<Option<(u64, [u64; 6])>, SyscallError> {
    let mut info = MaybeUninit::<libc::ptrace_syscall_info>::zeroed();
    // SAFETY: the request writes at most `addr` bytes, the size of `info`, to `info`.
    let result = unsafe {
        request(
            libc::PTRACE_GET_SYSCALL_INFO,
            tid,
            ptr::without_provenance_mut(size_of::<libc::ptrace_syscall_info>()),
            info.as_mut_ptr() as usize,
        )
    };
    // It returns the size of the whole information, which may be more than was written.
    zero_or_errno(result, "ptrace(PTRACE_GET_SYSCALL_INFO)")?;
    // SAFETY: zeroed, then written by the kernel: plain integers, valid either way (the
    // union's entry member too, which means something only when `op` says so).
    unsafe {
        let info = info.assume_init();
        Ok((info.op == libc::PTRACE_SYSCALL_INFO_ENTRY)
            .then_some((info.u.entry.nr, info.u.entry.args)))
    }
}

/// The signal that stopped tracee `tid`, and who sent it.
pub fn signal_info(tid: pid_t) -> Result<libc::siginfo_t, SyscallError> {
    // SAFETY: PTRACE_GETSIGINFO writes one siginfo_t to the address passed.
    unsafe { read_into(libc::PTRACE_GETSIGINFO, tid, "ptrace(PTRACE_GETSIGINFO)") }
}

/// The message of the ptrace event `tid` is stopped at: a new task's id at a fork or clone.
pub fn event_message(tid: pid_t) -> Result<libc::c_ulong, SyscallError> {
    // SAFETY: PTRACE_GETEVENTMSG writes one unsigned long to the address passed.
    unsafe { read_into(libc::PTRACE_GETEVENTMSG, tid, "ptrace(PTRACE_GETEVENTMSG)") }
}

/// Request `what`, which writes one `T` to the address in its `data`.
///
/// # Safety
///
/// `what` writes at most a `T` to that address, and `T` is plain data: all-zero, and
/// whatever the kernel writes there, is a valid `T`.
unsafe fn read_into<T>(what: c_uint, tid: pid_t, call: &'static str) -> Result<T, SyscallError> {
    let mut value = MaybeUninit::<T>::zeroed();
    // SAFETY: `value` is a live, writable T, as large as the caller says the request writes.
    let result = unsafe { request(what, tid, ptr::null_mut(), value.as_mut_ptr() as usize) };
    zero_or_errno(result, call)?;
    // SAFETY: zeroed, then written by the kernel: a valid T either way (the caller's word).
    Ok(unsafe { value.assume_init() })
}

/// # Safety
///
/// `addr` and `data` are what `what` takes: numbers, or addresses of memory it may read or
/// write for the call.
unsafe fn request(what: c_uint, tid: pid_t, addr: *mut c_void, data: usize) -> libc::c_long {
    // SAFETY: the caller's word; glibc reads each argument at its own width.
    unsafe { libc::ptrace(what, tid, addr, data as *mut c_void) }
}
