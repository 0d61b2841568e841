//! The scheduling policy and priority of the tracer's own threads.

use std::{os::unix::thread::JoinHandleExt, thread::JoinHandle};

use libc::c_int;

use super::SyscallError;

/// The highest priority of scheduling policy `policy` (`SCHED_FIFO`, ...).
pub fn highest_priority(policy: c_int) -> Result<c_int, SyscallError> {
    // SAFETY: a plain query with no memory effects.
    match unsafe { libc::sched_get_priority_max(policy) } {
        -1 => Err(SyscallError::last("sched_get_priority_max")),
        priority => Ok(priority),
    }
}

/// Sets the calling thread's scheduling policy and priority.
pub fn set_own_policy(policy: c_int, priority: c_int) -> Result<(), SyscallError> {
    // SAFETY: a plain query of the calling thread, which is live.
    set_policy(unsafe { libc::pthread_self() }, policy, priority)
}

/// Sets the scheduling policy and priority of `thread`, a thread of this process.
pub fn set_policy_of<T>(
    thread: &JoinHandle<T>,
    policy: c_int,
    priority: c_int,
) -> Result<(), SyscallError> {
    // The handle's thread is joinable, so its pthread_t stays valid while the handle lives.
    set_policy(thread.as_pthread_t(), policy, priority)
}

/// The calling thread's scheduling policy and priority.
#[cfg(test)]
pub fn own_policy() -> Result<(c_int, c_int), SyscallError> {
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_getparam writes one sched_param, a live local; 0 is the calling thread.
    if unsafe { libc::sched_getparam(0, &raw mut param) } == -1 {
        return Err(SyscallError::last("sched_getparam"));
    }
    // SAFETY: a plain query of the calling thread.
    match unsafe { libc::sched_getscheduler(0) } {
        -1 => Err(SyscallError::last("sched_getscheduler")),
        policy => Ok((policy, param.sched_priority)),
    }
}

/// `thread` must be a live or joinable thread of this process: what the callers vouch for.
fn set_policy(thread: libc::pthread_t, policy: c_int, priority: c_int) -> Result<(), SyscallError> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `thread` is live or joinable (see above); `param` is a live local it only reads.
    match unsafe { libc::pthread_setschedparam(thread, policy, &raw const param) } {
        0 => Ok(()),
        errno => Err(SyscallError::returned("pthread_setschedparam", errno)),
    }
}
