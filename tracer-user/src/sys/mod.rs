//! Every system call the tracer makes itself, each behind a small safe function: the only
//! place in the crate that calls the kernel through libc or a raw `syscall`. Calls that a
//! dependency already offers safely (rustix's `pidfd_open`, `kill`, `clock_gettime`, `mount`;
//! aya's maps) are made through it where they are needed instead, as is rustix's `mmap` of the
//! rings, whose pointers `capture::ring` keeps.
//!
//! Every wrapper fails with a [`SyscallError`] naming the call (and, for the multiplexed
//! ones, the request: `bpf(BPF_PROG_LOAD)`, `ptrace(PTRACE_SEIZE)`), with the errno as its
//! source, so that an error said in one line (`error::OneLine`) ends in what the kernel said,
//! and the errno can still be found among its sources.

pub mod bpf;
pub mod perf;
pub mod process;
pub mod ptrace;
pub mod sched;
pub mod signal;

use std::io;

/// A system call failed.
#[derive(Debug, thiserror::Error)]
#[error("{call} failed")]
pub struct SyscallError {
    /// The call, and the request for calls that multiplex several.
    pub call: &'static str,
    /// What the kernel (or libc) said: the errno.
    #[source]
    pub io_error: io::Error,
}

impl SyscallError {
    /// `call` failed with the calling thread's errno.
    fn last(call: &'static str) -> Self {
        SyscallError {
            call,
            io_error: io::Error::last_os_error(),
        }
    }

    /// `call` failed, returning the error number `errno` itself (as the pthread functions do).
    fn returned(call: &'static str, errno: libc::c_int) -> Self {
        SyscallError {
            call,
            io_error: io::Error::from_raw_os_error(errno),
        }
    }

    /// The errno, as `io::Error::raw_os_error` gives it.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.io_error.raw_os_error()
    }
}

/// `Ok(())` for a call that returns 0 on success and -1 with errno set on failure.
fn zero_or_errno(result: libc::c_long, call: &'static str) -> Result<(), SyscallError> {
    match result {
        -1 => Err(SyscallError::last(call)),
        _ => Ok(()),
    }
}
