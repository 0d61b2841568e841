//! Which of the tracer's threads run first when the CPUs are busy: the ones the targets wait on
//! (the ptrace follower, whose every stop holds a target thread) and the ones that must keep up
//! with them (the threads that drain the rings) run at the highest SCHED_FIFO priority, so
//! that targets at a real-time priority (stress-ng's workers are SCHED_FIFO) can neither hold
//! a thread of their own in a ptrace stop nor let the rings overflow. Each sleeps until it has
//! work, and its work is bounded by what the targets make. The writer threads run one step
//! below them, above targets at any lower real-time priority: the session waits on them (a
//! sink's begin, flush or state; and locks they share, the allocator's and the channels'), so
//! a writer that real-time targets kept off the CPU held the drain with it (rt_workers under
//! `--follow`: 17 of 40 runs lost about 42,000 records at the start, when the session waits
//! for the sinks to begin).
//!
//! A thread is given its rank by the thread that starts it ([`spawn`]), not as its own first
//! act: a thread started by one at a real-time priority starts at the normal policy
//! (SCHED_RESET_ON_FORK), and with real-time targets on every CPU it waited 58 ms for a CPU
//! before it could raise itself, while the session waited on it and the rings overflowed.

use std::{
    io,
    os::unix::thread::JoinHandleExt,
    sync::mpsc,
    thread::{self, JoinHandle},
};

/// How urgently one of the tracer's threads runs when the CPUs are busy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rank {
    /// The highest SCHED_FIFO priority: the threads that drain the rings and the follower.
    First,
    /// One step below [`Rank::First`]: the threads the session waits on.
    Second,
}

impl Rank {
    fn priority(self) -> libc::c_int {
        // SAFETY: a plain query with no memory effects.
        let highest = unsafe { libc::sched_get_priority_max(libc::SCHED_FIFO) };
        match self {
            Rank::First => highest,
            Rank::Second => highest - 1,
        }
    }
}

/// The real-time policy, which a process the thread forks does not inherit.
const REAL_TIME: libc::c_int = libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK;

/// Runs the calling thread at [`Rank::First`]. Best effort: without CAP_SYS_NICE, the thread
/// runs as before.
pub fn run_first() {
    set(own(), REAL_TIME, Rank::First.priority());
}

/// Runs the calling thread at the normal policy (a thread inherits its creator's).
pub fn run_normally() {
    set(own(), libc::SCHED_OTHER, 0);
}

/// Starts a thread named `name` running `work` at `rank`: set here, by the starting thread,
/// before `work` begins, so that the new thread never waits for a CPU at the normal policy.
/// Best effort, as [`run_first`].
pub fn spawn<T: Send + 'static>(
    name: &str,
    rank: Rank,
    work: impl FnOnce() -> T + Send + 'static,
) -> io::Result<JoinHandle<T>> {
    let (ranked, wait_for_rank) = mpsc::sync_channel::<()>(1);
    let handle = thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let _ = wait_for_rank.recv();
            work()
        })?;
    // The handle's thread is joinable, so its pthread_t stays valid while the handle lives.
    set(handle.as_pthread_t(), REAL_TIME, rank.priority());
    let _ = ranked.send(());
    Ok(handle)
}

/// The calling thread.
fn own() -> libc::pthread_t {
    // SAFETY: a plain query with no memory effects.
    unsafe { libc::pthread_self() }
}

/// Sets the policy and priority of `thread`, a live thread of this process.
fn set(thread: libc::pthread_t, policy: libc::c_int, priority: libc::c_int) {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `thread` is live (the caller's word); `param` is a live local.
    let _ = unsafe { libc::pthread_setschedparam(thread, policy, &raw const param) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_thread_runs_its_work_at_its_rank() {
        let thread = spawn("rank-test", Rank::Second, || {
            let mut param = libc::sched_param { sched_priority: 0 };
            // SAFETY: plain queries of the calling thread, into a live local.
            unsafe {
                libc::sched_getparam(0, &raw mut param);
                (libc::sched_getscheduler(0), param.sched_priority)
            }
        })
        .unwrap();
        let (policy, priority) = thread.join().unwrap();
        // SAFETY: a plain query.
        if unsafe { libc::geteuid() } != 0 {
            // Without CAP_SYS_NICE no rank is given: the thread keeps the normal policy.
            assert_eq!((policy, priority), (libc::SCHED_OTHER, 0));
            return;
        }
        assert_eq!((policy, priority), (REAL_TIME, Rank::Second.priority()));
    }
}
