//! `--lossless`, PTT's promise that no record is lost. A BPF probe cannot wait for room in a
//! ring, so the traced thread does: the BPF side stops a thread with SIGSTOP when it writes to a
//! ring more than half full, once per episode (its entry in the `STOPPED` map), and once a
//! drain pass has read every ring to its end the tracer forgets the entries and resumes them.
//!
//! Without ptrace a stop signal stops the whole process, and SIGCONT resumes it; the target's
//! parent sees both, as job-control stops. Under `--follow` the targets are under ptrace, where
//! a SIGSTOP is first reported to the tracer: the exec-following thread keeps such a thread
//! stopped, never passing the signal on (so no job-control stop happens), until its entry is
//! gone.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use rustix::process::{Pid, Signal, kill_process};

use super::datapath::DataPath;

/// How long the end of a trace waits for the exec-following thread to let go of the threads it
/// holds stopped.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(1);

/// Resumes every thread the BPF side has stopped, now that the rings have been drained;
/// returns them, as (thread id, process id).
pub fn resume(datapath: &mut DataPath) -> Vec<(u32, u32)> {
    let stopped = datapath.stopped_threads();
    for &(tid, _) in &stopped {
        datapath.forget_stopped(tid);
    }
    if datapath.follows() {
        // The exec-following thread lets them go as their entries disappear.
        return stopped;
    }
    let pids: BTreeSet<u32> = stopped.iter().map(|&(_, pid)| pid).collect();
    for &pid in &pids {
        signal(pid, Signal::CONT);
    }
    // A thread that sent itself SIGSTOP before the SIGCONT lost that signal (SIGCONT discards
    // pending stop signals) and, its entry still there, would run on unstopped and never stop
    // itself again: stop it again, for the next drain to resume. That is every thread with an
    // entry now, whether its entry is marked sent yet or not (a thread preempted between
    // making its entry and marking it is one of them); a thread with none has not sent its
    // signal yet, which then comes after the SIGCONT.
    let stopping: BTreeSet<u32> = datapath.stopping_processes().into_iter().collect();
    for pid in stopping.intersection(&pids) {
        signal(*pid, Signal::STOP);
    }
    stopped
}

/// [`resume`] at the end of a trace. Under `--follow` it also waits until the exec-following
/// thread has let each thread go: one still in its ptrace stop when the tracer exits would be
/// handed its SIGSTOP by the kernel, with nobody left to send SIGCONT.
pub fn resume_at_end(datapath: &mut DataPath) -> Vec<(u32, u32)> {
    let stopped = resume(datapath);
    if datapath.follows() {
        let give_up = Instant::now() + RELEASE_TIMEOUT;
        while Instant::now() < give_up && stopped.iter().any(|&(tid, _)| in_ptrace_stop(tid)) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    stopped
}

/// Sends `signal` to process `pid`; one gone meanwhile needs nothing.
fn signal(pid: u32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pid as i32) {
        let _ = kill_process(pid, signal);
    }
}

/// Whether thread `tid` is stopped under ptrace (state `t`).
fn in_ptrace_stop(tid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{tid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|end| stat[end..].chars().nth(2))
            .is_some_and(|state| state == 't')
    })
}
