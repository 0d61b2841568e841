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
    sync::mpsc,
    thread::{self, JoinHandle},
};

use crate::sys::sched;

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
        // SCHED_FIFO always has a range; were it refused, -1 is no priority, and giving it
        // fails, best effort, as it would without CAP_SYS_NICE.
        let highest = sched::highest_priority(libc::SCHED_FIFO).unwrap_or(-1);
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
    let _ = sched::set_own_policy(REAL_TIME, Rank::First.priority());
}

/// Runs the calling thread at the normal policy (a thread inherits its creator's).
pub fn run_normally() {
    let _ = sched::set_own_policy(libc::SCHED_OTHER, 0);
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
    let _ = sched::set_policy_of(&handle, REAL_TIME, rank.priority());
    let _ = ranked.send(());
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_thread_runs_its_work_at_its_rank() {
        let thread = spawn("rank-test", Rank::Second, sched::own_policy).unwrap();
        let (policy, priority) = thread.join().unwrap().unwrap();
        if !rustix::process::geteuid().is_root() {
            // Without CAP_SYS_NICE no rank is given: the thread keeps the normal policy.
            assert_eq!((policy, priority), (libc::SCHED_OTHER, 0));
            return;
        }
        assert_eq!((policy, priority), (REAL_TIME, Rank::Second.priority()));
    }
}
