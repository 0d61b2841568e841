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

/// Runs the calling thread at the highest SCHED_FIFO priority; a process it forks starts at
/// the normal policy (SCHED_RESET_ON_FORK). Best effort: without CAP_SYS_NICE, the thread
/// runs as before.
pub fn run_first() {
    // SAFETY: a plain query with no memory effects.
    let priority = unsafe { libc::sched_get_priority_max(libc::SCHED_FIFO) };
    set(libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, priority);
}

/// Runs the calling thread at SCHED_FIFO one step below [`run_first`]'s threads.
pub fn run_second() {
    // SAFETY: a plain query with no memory effects.
    let priority = unsafe { libc::sched_get_priority_max(libc::SCHED_FIFO) } - 1;
    set(libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, priority);
}

/// Runs the calling thread at the normal policy (a thread inherits its creator's).
pub fn run_normally() {
    set(libc::SCHED_OTHER, 0);
}

fn set(policy: libc::c_int, priority: libc::c_int) {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sets the calling thread's policy (pid 0 is the calling thread on Linux); `param`
    // is a live local.
    let _ = unsafe { libc::sched_setscheduler(0, policy, &raw const param) };
}
