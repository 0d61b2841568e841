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
    os::fd::AsFd,
    time::{Duration, Instant},
};

use aya::maps::{HashMap, Map, MapData, MapError};
use rustix::process::{Pid, Signal, kill_process};
use tracer_common::STOP_SENT;

use super::CaptureError;

/// How long the end of a trace waits for the exec-following thread to let go of the threads it
/// holds stopped.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(1);

/// The threads the BPF side has stopped for writing to a ring past half (its `STOPPED` map),
/// and how to let them go. However the tracer ends short of SIGKILL (an error, a panic
/// unwinding), dropping it resumes them: no process is left stopped.
pub struct Stopped {
    map: HashMap<MapData, u32, u32>,
    /// `--lossless` was given: otherwise the map stays empty and is never read.
    lossless: bool,
    /// The targets are under ptrace (`--follow`): the exec-following thread lets them go.
    follows: bool,
}

impl Stopped {
    /// Over the BPF object's `STOPPED` map.
    pub fn new(map: Map, lossless: bool, follows: bool) -> Result<Self, MapError> {
        Ok(Stopped {
            map: HashMap::try_from(map)?,
            lossless,
            follows,
        })
    }

    /// The threads the BPF side has stopped and sent their SIGSTOP since their entries were
    /// last forgotten, as (thread id, process id). (An entry whose signal is not sent yet is
    /// left: forgotten and resumed now, its thread could stop after the SIGCONT.)
    fn threads(&self) -> Vec<(u32, u32)> {
        if !self.lossless {
            return Vec::new();
        }
        self.map
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, pid)| pid & STOP_SENT != 0)
            .map(|(tid, pid)| (tid, pid & !STOP_SENT))
            .collect()
    }

    /// The processes with a thread the BPF side is stopping or has stopped (its entry made,
    /// its SIGSTOP sent or about to be).
    fn stopping_processes(&self) -> Vec<u32> {
        if !self.lossless {
            return Vec::new();
        }
        self.map
            .iter()
            .filter_map(Result::ok)
            .map(|(_, pid)| pid & !STOP_SENT)
            .collect()
    }

    /// Resumes every thread the BPF side has stopped, now that the rings have been drained;
    /// returns them, as (thread id, process id). Forgetting a thread's entry means the next
    /// time it writes to a ring past half, it is stopped anew (and under `--follow`, the
    /// exec-following thread lets it go now).
    pub fn resume(&mut self) -> Vec<(u32, u32)> {
        let stopped = self.threads();
        for &(tid, _) in &stopped {
            let _ = self.map.remove(&tid);
        }
        if self.follows {
            // The exec-following thread lets them go as their entries disappear.
            return stopped;
        }
        let pids: BTreeSet<u32> = stopped.iter().map(|&(_, pid)| pid).collect();
        for &pid in &pids {
            signal(pid, Signal::CONT);
        }
        // A thread that sent itself SIGSTOP before the SIGCONT lost that signal (SIGCONT
        // discards pending stop signals) and, its entry still there, would run on unstopped and
        // never stop itself again: stop it again, for the next drain to resume. That is every
        // thread with an entry now, whether its entry is marked sent yet or not (a thread
        // preempted between making its entry and marking it is one of them); a thread with
        // none has not sent its signal yet, which then comes after the SIGCONT.
        let stopping: BTreeSet<u32> = self.stopping_processes().into_iter().collect();
        for pid in stopping.intersection(&pids) {
            signal(*pid, Signal::STOP);
        }
        stopped
    }

    /// [`Stopped::resume`] at the end of a trace. Under `--follow` it also waits until the
    /// exec-following thread has let each thread go: one still in its ptrace stop when the
    /// tracer exits would be handed its SIGSTOP by the kernel, with nobody left to send
    /// SIGCONT.
    pub fn resume_at_end(&mut self) -> Vec<(u32, u32)> {
        let stopped = self.resume();
        if self.follows {
            let give_up = Instant::now() + RELEASE_TIMEOUT;
            while Instant::now() < give_up && stopped.iter().any(|&(tid, _)| in_ptrace_stop(tid)) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        stopped
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.resume();
    }
}

/// `--lossless` under `--follow`: the threads the BPF side has stopped, read by the thread that
/// holds the targets under ptrace, which keeps each such thread stopped until its entry is gone.
pub struct StoppedView(HashMap<MapData, u32, u32>);

impl StoppedView {
    /// A second handle on the `STOPPED` map.
    pub fn of(map: &Map) -> Result<Self, CaptureError> {
        let Map::HashMap(data) = map else {
            return Err(CaptureError::StoppedNotAHashMap);
        };
        let fd = data.fd().as_fd().try_clone_to_owned()?;
        let data = MapData::from_fd(fd)?;
        Ok(StoppedView(HashMap::try_from(Map::HashMap(data))?))
    }

    /// Whether thread `tid` is stopped until the rings are drained.
    pub fn contains(&self, tid: u32) -> bool {
        self.0.get(&tid, 0).is_ok()
    }
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
