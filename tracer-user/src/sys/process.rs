//! Processes: waiting for a child or tracee to change state, and the one process the tracer
//! forks itself.

use std::os::fd::RawFd;

use libc::{c_int, pid_t};

use super::SyscallError;

/// Waits for child or tracee `pid` (-1: any) to change state as `options` (`WUNTRACED`,
/// `__WALL`, ...) ask; returns which one did, and its wait status. An interrupted wait fails
/// with `ErrorKind::Interrupted`, for the caller to wait again.
pub fn waitpid(pid: pid_t, options: c_int) -> Result<(pid_t, c_int), SyscallError> {
    let mut status = 0;
    // SAFETY: waitpid writes one int, the status, to the address passed: a live local.
    let changed = unsafe { libc::waitpid(pid, &raw mut status, options) };
    match changed {
        -1 => Err(SyscallError::last("waitpid")),
        changed => Ok((changed, status)),
    }
}

/// Forks a child that keeps open only `keep` (descriptors of this process), leaves the
/// tracer's session, takes the default action for SIGINT, SIGTERM and SIGUSR1 with no signal
/// blocked, then closes `keep` one by one and exits. What closing each does (a link that
/// detaches, waiting for the kernel) is then the child's to wait for. Returns once the child
/// is made.
pub fn fork_to_close(keep: &[RawFd]) -> Result<(), SyscallError> {
    let mut keep = keep.to_vec();
    keep.sort_unstable();
    // SAFETY: the child of a multi-threaded process calls only async-signal-safe functions
    // (setsid, sigprocmask, signal, close_range, close, _exit) on memory made before the fork,
    // and never returns.
    unsafe {
        match libc::fork() {
            -1 => Err(SyscallError::last("fork")),
            0 => {
                libc::setsid();
                let mut all: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&raw mut all);
                libc::sigprocmask(libc::SIG_SETMASK, &raw const all, std::ptr::null_mut());
                for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1] {
                    libc::signal(signal, libc::SIG_DFL);
                }
                let mut next = 0;
                for &fd in &keep {
                    if fd > next {
                        libc::syscall(libc::SYS_close_range, next, fd - 1, 0);
                    }
                    next = fd + 1;
                }
                libc::syscall(libc::SYS_close_range, next, libc::c_uint::MAX, 0);
                for &fd in &keep {
                    libc::close(fd);
                }
                libc::_exit(0)
            }
            _ => Ok(()),
        }
    }
}
