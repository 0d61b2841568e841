//! The signals a trace answers: SIGINT and SIGTERM end it, SIGUSR1 flushes it (the flight
//! recorder to the log, the tr files' buffers to their files). Caught from the start of a run
//! and held until the session runs, so that one that comes while the tracer attaches acts as
//! soon as the trace has begun.

use std::io;

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::sys::{self, SyscallError};

/// Why the signals could not be caught.
#[derive(Debug, thiserror::Error)]
pub enum CatchError {
    /// They could not be held.
    #[error(transparent)]
    Hold(#[from] SyscallError),
    /// No handler could be installed.
    #[error(transparent)]
    Handler(#[from] io::Error),
}

/// The signals handled, in `set_blocked`'s set.
const HANDLED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1];

/// SIGINT, SIGTERM and SIGUSR1, caught from before anything is loaded and held (blocked)
/// until the session runs: one that comes while the tracer attaches is acted on as soon as the
/// trace has begun, instead of killing the tracer halfway (SIGUSR1's default action too) or,
/// inherited as ignored from a shell's background job, being lost. Held, not just caught,
/// because a signal pending while the kernel verifies a BPF program makes the load fail with
/// EAGAIN.
pub struct TraceSignals {
    interrupt: Signal,
    terminate: Signal,
    user1: Signal,
}

impl TraceSignals {
    /// Catches them and holds them in this thread and the threads it starts from now on;
    /// needs a tokio runtime's context (`Runtime::enter`).
    pub fn catch_and_hold() -> Result<Self, CatchError> {
        // Held first: caught but not held, one could come while a program is verified.
        set_blocked(true)?;
        Ok(TraceSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            user1: signal(SignalKind::user_defined1())?,
        })
    }

    /// Delivers the held signals from now on (in this thread).
    #[allow(clippy::unused_self, reason = "only who holds them releases them")]
    pub fn release(&self) -> Result<(), SyscallError> {
        set_blocked(false)
    }

    /// Waits for the next of them.
    pub async fn recv(&mut self) -> TraceSignal {
        tokio::select! {
            _ = self.interrupt.recv() => TraceSignal::Stop,
            _ = self.terminate.recv() => TraceSignal::Stop,
            _ = self.user1.recv() => TraceSignal::Flush,
        }
    }
}

/// What a signal asks of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceSignal {
    /// SIGINT, SIGTERM: end it.
    Stop,
    /// SIGUSR1: flush it.
    Flush,
}

/// Whether SIGINT or SIGTERM is held, waiting for the trace to begin: long work before it
/// (attaching perf-event uprobes one grace period each) stops early, so that the trace ends
/// soon after it was asked to.
pub fn stop_pending() -> bool {
    sys::signal::any_pending(&[libc::SIGINT, libc::SIGTERM]).unwrap_or(false)
}

/// Blocks or unblocks the handled signals in the calling thread. A child process inherits the
/// mask through exec: a launched command unblocks them before it execs (async-signal-safe).
pub fn set_blocked(blocked: bool) -> Result<(), SyscallError> {
    sys::signal::set_blocked(&HANDLED, blocked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_sigterm_is_seen_as_a_pending_stop_and_sigusr1_is_not() {
        // In a thread of its own, which alone holds the signals sent to it.
        std::thread::spawn(|| {
            set_blocked(true).unwrap();
            assert!(!stop_pending());
            // Sent to this thread, which holds them; taken back before it unblocks anything.
            sys::signal::raise_in_this_thread(libc::SIGUSR1).unwrap();
            assert!(!stop_pending());
            sys::signal::raise_in_this_thread(libc::SIGTERM).unwrap();
            assert!(stop_pending());
            sys::signal::take_pending(&[libc::SIGTERM, libc::SIGUSR1]);
            assert!(!stop_pending());
        })
        .join()
        .unwrap();
    }
}
