//! SIGINT and SIGTERM end a trace: caught from the start of a run and held until the session
//! runs, so that one that comes while the tracer attaches ends the trace as soon as it has
//! begun, cleanly.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// SIGINT and SIGTERM, caught from before anything is loaded and held (blocked) until the
/// session runs: one that comes while the tracer attaches ends the trace as soon as it has
/// begun, cleanly, instead of killing the tracer halfway (or, inherited as ignored from a
/// shell's background job, being lost). Held, not just caught, because a signal pending
/// while the kernel verifies a BPF program makes the load fail with EAGAIN.
pub struct StopSignals {
    interrupt: Signal,
    terminate: Signal,
}

impl StopSignals {
    /// Catches both and holds them in this thread and the threads it starts from now on;
    /// needs a tokio runtime's context (`Runtime::enter`).
    pub fn catch_and_hold() -> std::io::Result<Self> {
        // Held first: caught but not held, one could come while a program is verified.
        set_blocked(true)?;
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Delivers the held signals from now on (in this thread).
    pub fn release(&self) -> std::io::Result<()> {
        set_blocked(false)
    }

    /// Waits for either.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

/// Blocks or unblocks SIGINT and SIGTERM in the calling thread. A child process inherits the
/// mask through exec: a launched command unblocks them before it execs.
pub fn set_blocked(blocked: bool) -> std::io::Result<()> {
    // SAFETY: sigset_t is plain data, initialized by sigemptyset before use; pthread_sigmask
    // only reads the set and changes this thread's mask.
    let result = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let how = if blocked {
            libc::SIG_BLOCK
        } else {
            libc::SIG_UNBLOCK
        };
        libc::pthread_sigmask(how, &set, std::ptr::null_mut())
    };
    match result {
        0 => Ok(()),
        error => Err(std::io::Error::from_raw_os_error(error)),
    }
}
