//! The signals a trace answers: SIGINT and SIGTERM end it, SIGUSR1 flushes it (the flight
//! recorder to the log, the tr files' buffers to their files). Caught from the start of a run
//! and held until the session runs, so that one that comes while the tracer attaches acts as
//! soon as the trace has begun.

use tokio::signal::unix::{Signal, SignalKind, signal};

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
    pub fn catch_and_hold() -> std::io::Result<Self> {
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
    pub fn release(&self) -> std::io::Result<()> {
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
    // SAFETY: sigset_t is plain data, filled by sigpending before sigismember reads it.
    unsafe {
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&raw mut pending) == 0
            && [libc::SIGINT, libc::SIGTERM]
                .iter()
                .any(|&signal| libc::sigismember(&raw const pending, signal) == 1)
    }
}

/// Blocks or unblocks the handled signals in the calling thread. A child process inherits the
/// mask through exec: a launched command unblocks them before it execs.
pub fn set_blocked(blocked: bool) -> std::io::Result<()> {
    // SAFETY: sigset_t is plain data, initialized by sigemptyset before use; pthread_sigmask
    // only reads the set and changes this thread's mask.
    let result = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        for signal in HANDLED {
            libc::sigaddset(&raw mut set, signal);
        }
        let how = if blocked {
            libc::SIG_BLOCK
        } else {
            libc::SIG_UNBLOCK
        };
        libc::pthread_sigmask(how, &raw const set, std::ptr::null_mut())
    };
    match result {
        0 => Ok(()),
        error => Err(std::io::Error::from_raw_os_error(error)),
    }
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
            // SAFETY: signals sent to this thread, which blocks them; sigtimedwait takes
            // them back before the thread unblocks anything.
            unsafe {
                libc::pthread_kill(libc::pthread_self(), libc::SIGUSR1);
                assert!(!stop_pending());
                libc::pthread_kill(libc::pthread_self(), libc::SIGTERM);
                assert!(stop_pending());
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&raw mut set);
                libc::sigaddset(&raw mut set, libc::SIGTERM);
                libc::sigaddset(&raw mut set, libc::SIGUSR1);
                let now = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                while libc::sigtimedwait(&raw const set, std::ptr::null_mut(), &raw const now) > 0 {
                }
            }
            assert!(!stop_pending());
        })
        .join()
        .unwrap();
    }
}
