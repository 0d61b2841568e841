//! Processes: waiting for a child or tracee to change state, and the one process the tracer
//! forks itself.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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

/// Leaves `groups` of links (descriptors whose last close waits for the kernel, such as BPF
/// links) to a child process to close, so that this process need not wait. The child leaves
/// the tracer's session, takes the default action for SIGINT, SIGTERM and SIGUSR1 with no
/// signal blocked, and closes every other descriptor. It waits until this process has closed
/// its own copies (so that the last close of each link is the child's), then forks a process
/// for each group, which closes that group's links one by one: groups go away concurrently.
/// If no child could be made, the links are handed back.
pub fn fork_to_close(groups: Vec<Vec<OwnedFd>>) -> Result<(), (SyscallError, Vec<OwnedFd>)> {
    let mut gate = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array passed, a live local.
    if unsafe { libc::pipe2(gate.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err((
            SyscallError::last("pipe2"),
            groups.into_iter().flatten().collect(),
        ));
    }
    // SAFETY: the two descriptors pipe2 just made, owned from here on.
    let (gate_read, gate_write) =
        unsafe { (OwnedFd::from_raw_fd(gate[0]), OwnedFd::from_raw_fd(gate[1])) };
    let raw_groups: Vec<Vec<RawFd>> = groups
        .iter()
        .map(|group| {
            let mut fds: Vec<RawFd> = group.iter().map(AsRawFd::as_raw_fd).collect();
            fds.sort_unstable();
            fds
        })
        .collect();
    let mut keep = raw_groups.concat();
    keep.push(gate_read.as_raw_fd());
    keep.sort_unstable();
    // SAFETY: the child of a multi-threaded process calls only async-signal-safe functions
    // (setsid, sigprocmask, signal, close_range, read, fork, close, _exit) on memory made
    // before the fork, and never returns.
    match unsafe { libc::fork() } {
        -1 => Err((
            SyscallError::last("fork"),
            groups.into_iter().flatten().collect(),
        )),
        // SAFETY: this is the child just forked.
        0 => unsafe { close_in_child(&keep, gate_read.as_raw_fd(), &raw_groups) },
        _ => {
            drop(groups);
            drop(gate_read);
            drop(gate_write);
            Ok(())
        }
    }
}

/// The child of [`fork_to_close`]: keeps only `keep`, waits for end-of-file on `gate`, then
/// closes each of `groups` in a process of its own.
///
/// # Safety
///
/// Called only in a child just forked; calls only async-signal-safe functions.
unsafe fn close_in_child(keep: &[RawFd], gate: RawFd, groups: &[Vec<RawFd>]) -> ! {
    // SAFETY: async-signal-safe calls on descriptors and memory of this process.
    unsafe {
        libc::setsid();
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &raw const all, std::ptr::null_mut());
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1] {
            libc::signal(signal, libc::SIG_DFL);
        }
        close_all_but(keep);
        let mut byte = 0u8;
        while libc::read(gate, (&raw mut byte).cast(), 1) == -1
            && *libc::__errno_location() == libc::EINTR
        {}
        for group in groups {
            if libc::fork() == 0 {
                close_all_but(group);
                for &fd in group {
                    libc::close(fd);
                }
                libc::_exit(0);
            }
        }
        close_all_but(&[]);
        libc::_exit(0)
    }
}

/// Closes every descriptor of this process but those of `keep`, which is sorted.
///
/// # Safety
///
/// Async-signal-safe; the caller owns every descriptor closed.
unsafe fn close_all_but(keep: &[RawFd]) {
    let mut next = 0;
    for &fd in keep {
        if fd > next {
            // SAFETY: closes descriptors the caller owns.
            unsafe { libc::syscall(libc::SYS_close_range, next, fd - 1, 0) };
        }
        next = fd + 1;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, next, libc::c_uint::MAX, 0) };
}
