//! The calling thread's signal mask, and the signals pending for it.

use libc::c_int;

use super::SyscallError;

/// Blocks (`blocked`) or unblocks `signals` in the calling thread. Async-signal-safe, for a
/// child between fork and exec.
pub fn set_blocked(signals: &[c_int], blocked: bool) -> Result<(), SyscallError> {
    let set = set_of(signals);
    let how = if blocked {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: pthread_sigmask reads the set, a live local, and changes this thread's mask;
    // no old mask is asked for.
    match unsafe { libc::pthread_sigmask(how, &raw const set, std::ptr::null_mut()) } {
        0 => Ok(()),
        errno => Err(SyscallError::returned("pthread_sigmask", errno)),
    }
}

/// Whether any of `signals` is pending: sent to this thread or process and held, blocked.
pub fn any_pending(signals: &[c_int]) -> Result<bool, SyscallError> {
    let mut pending = set_of(&[]);
    // SAFETY: sigpending writes one sigset_t to the address passed, a live local.
    if unsafe { libc::sigpending(&raw mut pending) } == -1 {
        return Err(SyscallError::last("sigpending"));
    }
    Ok(signals
        .iter()
        // SAFETY: sigismember reads the set, initialized above.
        .any(|&signal| unsafe { libc::sigismember(&raw const pending, signal) } == 1))
}

/// Sends `signal` to the calling thread (which should hold it, for `take_pending`).
#[cfg(test)]
pub fn raise_in_this_thread(signal: c_int) -> Result<(), SyscallError> {
    // SAFETY: pthread_self names the live calling thread; the signal is the caller's to
    // handle.
    match unsafe { libc::pthread_kill(libc::pthread_self(), signal) } {
        0 => Ok(()),
        errno => Err(SyscallError::returned("pthread_kill", errno)),
    }
}

/// Takes every pending one of `signals` (held) off the calling thread, without waiting.
#[cfg(test)]
pub fn take_pending(signals: &[c_int]) {
    let set = set_of(signals);
    let now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: sigtimedwait reads the set and the timeout, live locals; no siginfo is asked
    // for.
    while unsafe { libc::sigtimedwait(&raw const set, std::ptr::null_mut(), &raw const now) } > 0 {}
}

/// A signal set of `signals`.
fn set_of(signals: &[c_int]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it whatever it holds.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: both write only the set, a live local.
    unsafe {
        libc::sigemptyset(&raw mut set);
        for &signal in signals {
            libc::sigaddset(&raw mut set, signal);
        }
    }
    set
}
