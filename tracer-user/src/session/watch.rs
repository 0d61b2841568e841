//! The targets the session watches: which run, which have exited, the launched command and its
//! status, the processes that have had one thread so far (whose one-thread ways of glibc have
//! probes of their own until then) and those whose main thread has gone (traced through shared
//! links from then on). A target's exit completes its files once its last records are written.

use std::{error::Error, process::ExitStatus, time::Duration};

use foldhash::{HashMap, HashSet};
use rustix::process::{Pid, PidfdFlags, pidfd_open};
use tokio::{sync::mpsc, time::Instant};
use tracer_model::event::{SystemEvent, SystemKind};

use super::{Result, Session, TraceError, facts, flow::Staged, run::register};
use crate::{
    attach::{exec_follow::AttachRequest, launch::Launched, targets},
    capture::kernel,
    error::{OneLine, io_errors},
};

/// How long a target's main thread must have been gone before the process moves to shared
/// links: longer than a process that is exiting as a whole takes to finish.
const MAIN_THREAD_SETTLE: Duration = Duration::from_millis(50);

/// How often at most the main threads of those targets are looked for: under load the rings
/// are drained hundreds of times a second, and reading each pass's /proc/PID/stat was 4% of
/// the tracer's CPU (perf). A fifth of `MAIN_THREAD_SETTLE`.
const MAIN_THREAD_POLL: Duration = Duration::from_millis(10);

/// How often the new image of a launched command that exec'd is looked at for pthread
/// functions, and for how long: its loader maps its libraries within milliseconds of the exec,
/// which the tracer may see sooner.
const EXEC_HINT_POLL: Duration = Duration::from_millis(10);
const EXEC_HINT_PATIENCE: Duration = Duration::from_secs(1);

/// A launched command that exec'd, to hint about once its new image has pthread functions.
struct ExecHint {
    pid: u32,
    exe: String,
    since: Instant,
    looked: Instant,
}

/// Targets with links of their own whose main thread has been seen gone, and since when; and
/// when they were last looked for.
#[derive(Default)]
struct MainThreads {
    gone: HashMap<u32, Instant>,
    checked: Option<Instant>,
}

/// The targets and what became of them.
pub(super) struct Watched {
    /// Traced processes that have not exited (by their pidfds).
    pub(super) running: HashSet<u32>,
    /// Every process ever watched: under `--follow`, children first seen in records join.
    seen: HashSet<u32>,
    exit_tx: mpsc::UnboundedSender<u32>,
    pub(super) exits: mpsc::UnboundedReceiver<u32>,
    /// Processes that exited since the last pass, to complete once their records are written.
    pub(super) exited: Vec<u32>,
    /// The process the tracer started, whose exit status becomes the tracer's.
    pub(super) launched: Option<Launched>,
    pub(super) launched_pid: Option<u32>,
    pub(super) launched_status: Option<ExitStatus>,
    main_threads: MainThreads,
    /// Targets whose exec (without `--follow`) was said: once per process.
    exec_said: HashSet<u32>,
    exec_hints: Vec<ExecHint>,
}

impl Watched {
    /// The targets attached (`attached`) and the command launched, if any.
    pub(super) fn new(attached: &[u32], launched: Option<Launched>) -> Self {
        let launched_pid = launched.as_ref().map(|l| l.child.id());
        let launched_status = launched.as_ref().and_then(|l| l.exited);
        let mut running: HashSet<u32> = attached.iter().copied().collect();
        if launched_status.is_none() {
            running.extend(launched_pid);
        }
        let (exit_tx, exits) = mpsc::unbounded_channel();
        Watched {
            seen: running.clone(),
            running,
            exit_tx,
            exits,
            exited: Vec::new(),
            launched,
            launched_pid,
            launched_status,
            main_threads: MainThreads::default(),
            exec_said: HashSet::default(),
            exec_hints: Vec::new(),
        }
    }

    /// Starts watching the targets' exits (in the runtime).
    pub(super) fn start(&self) {
        for &pid in &self.running {
            watch_pid(pid, self.exit_tx.clone());
        }
    }

    /// Under `--follow`: the processes that records came from are watched like targets.
    pub(super) fn follow(&mut self, processes: &HashSet<u32>) {
        for &pid in processes {
            if self.seen.insert(pid) {
                self.running.insert(pid);
                watch_pid(pid, self.exit_tx.clone());
            }
        }
    }

    /// Whether a traced process may still run: one not seen to exit, or one seen to exit whose
    /// pid still names a process (its exit may have been assumed, when it could not be
    /// watched; if instead the pid was reused, the tracer only waits at exit for nothing).
    pub(super) fn may_run(&self) -> bool {
        !self.running.is_empty()
            || self.seen.iter().any(|&pid| {
                Pid::from_raw(pid as i32)
                    .is_some_and(|pid| rustix::process::test_kill_process(pid).is_ok())
            })
    }

    /// Whether the launched command is still running.
    pub(super) fn launched_running(&self) -> bool {
        self.launched_pid
            .is_some_and(|pid| self.running.contains(&pid))
    }
}

impl Session {
    /// The targets that have exited since the last pass: no longer running, and completed once
    /// every record stamped before now has been written.
    pub(super) fn handle_exits(&mut self) -> Result<()> {
        for pid in std::mem::take(&mut self.watched.exited) {
            if Some(pid) == self.watched.launched_pid
                && let Some(launched) = self.watched.launched.as_mut()
            {
                self.watched.launched_status =
                    launched.child.try_wait().map_err(TraceError::ExitStatus)?;
            }
            self.watched.running.remove(&pid);
            if self.flow.exiting.insert(pid) {
                self.flow
                    .reorder
                    .push(kernel::monotonic_ns(), Staged::Exited(pid));
            }
        }
        Ok(())
    }

    /// System-wide, where there is no pidfd per process: the processes with records that are
    /// gone, and the pthread libraries that have appeared since.
    pub(super) fn look_around(&mut self) {
        let gone = self
            .flow
            .processes
            .iter()
            .filter(|&&pid| !targets::process_exists(pid));
        self.watched.exited.extend(gone);
        for (pid, error) in self.probes.attach_new_libraries(&mut self.datapath) {
            self.target_error(pid, &error);
        }
    }

    /// Probes the libraries of the image process `request.pid` has just exec'd, and says so
    /// for the files that had no probes yet.
    pub(super) fn attach_after_exec(&mut self, request: &AttachRequest) {
        let now = kernel::monotonic_ns();
        if let Some(facts) = self.flow.facts.as_mut() {
            for event in facts.exec(request.pid, self.decoder.realtime_ns(now)) {
                self.flow.reorder.push(now, Staged::System(event));
            }
        }
        for library in &request.libraries {
            match self
                .probes
                .attach_shared(&mut self.datapath, request.pid, library)
            {
                Ok(0) => {}
                Ok(count) => say!(
                    "thrtrace-bpf: pid {} exec'd: {count} probes in {}",
                    request.pid,
                    library.file.path
                ),
                Err(error) => self.target_error(request.pid, &error),
            }
        }
    }

    /// Without `--follow`, a target that exec'd is no longer traced: its new image has no
    /// probes. Said once per process (the new executable, and a hint once the new image
    /// has pthread functions, if it is the launched command); in the trace, its exec and new
    /// mappings, then its detach. Under `--follow`, ptrace saw the exec and it goes on.
    pub(super) fn execs_without_follow(&mut self) {
        for (pid, ktime) in self.datapath.take_execs() {
            if self.follow {
                continue;
            }
            let time_ns = self.decoder.realtime_ns(ktime);
            let exec = match self.flow.facts.as_mut() {
                Some(facts) => facts.exec(pid, time_ns),
                None => vec![facts::exec_event(pid, time_ns)],
            };
            if self.watched.exec_said.insert(pid) {
                let exe = facts::executable(pid);
                say!(
                    "thrtrace-bpf: pid {pid} exec'd {exe}: not traced from there on (--follow \
                     traces what a target execs)"
                );
                if self.watched.launched_pid == Some(pid) {
                    let now = Instant::now();
                    self.watched.exec_hints.push(ExecHint {
                        pid,
                        exe,
                        since: now,
                        looked: now - EXEC_HINT_POLL,
                    });
                }
            }
            for event in exec {
                self.flow.reorder.push(ktime, Staged::System(event));
            }
            // Its old image's probes stay as they are, all of them.
            self.probes.keep_single_threaded_ways(pid);
            let detach = SystemEvent::of_process(time_ns, pid, 0, SystemKind::ProcessDetach);
            self.flow.described.remove(&pid);
            self.flow.reorder.push(ktime, Staged::System(detach));
        }
        self.hint_after_exec();
    }

    /// Looks at each launched command's new image (at most every `EXEC_HINT_POLL`, for
    /// `EXEC_HINT_PATIENCE`) and, once it has pthread functions, says how to trace it.
    fn hint_after_exec(&mut self) {
        if self.watched.exec_hints.is_empty() {
            return;
        }
        let now = Instant::now();
        let symbols = self.probes.symbols();
        self.watched.exec_hints.retain_mut(|hint| {
            if now.duration_since(hint.looked) < EXEC_HINT_POLL {
                return true;
            }
            hint.looked = now;
            let libraries = targets::find_pthread_libraries(hint.pid, &symbols);
            match libraries.as_deref() {
                Ok([library, ..]) => {
                    say!(
                        "thrtrace-bpf: hint: {} has pthread functions in {}: trace it with \
                         --follow, or launch it directly",
                        hint.exe,
                        library.file.path
                    );
                    false
                }
                // Not mapped yet; gone, or none after all this time: nothing to say.
                Ok([]) => now.duration_since(hint.since) < EXEC_HINT_PATIENCE,
                Err(_) => false,
            }
        });
    }

    /// An error about one target: said, and an ERROR event in the trace, which goes on.
    pub(super) fn target_error(&mut self, pid: u32, error: &(dyn Error + 'static)) {
        say!("thrtrace-bpf: {}", OneLine(error));
        let now = kernel::monotonic_ns();
        let event = target_error_event(self.decoder.realtime_ns(now), pid, error);
        self.flow.reorder.push(now, Staged::System(event));
    }

    /// The threads of the processes with links of their own, looked at if `MAIN_THREAD_POLL`
    /// has passed since the last pass did. No pidfd tells of them (the kernel holds a pidfd's
    /// wakeup back while other threads run), so /proc is read.
    ///
    /// One that had one thread when its probes were placed and has a second now moves to the
    /// probes of the ways glibc takes with threads (see `probes`).
    ///
    /// One whose main thread has exited while others run on is traced through shared links
    /// from then on: its own no longer apply. It moves once its main thread has been gone for
    /// `MAIN_THREAD_SETTLE`: one exiting as a whole is gone by then, or has no thread left to
    /// be seen through.
    pub(super) fn watch_own_targets_threads(&mut self) {
        let now = Instant::now();
        let main_threads = &mut self.watched.main_threads;
        if main_threads
            .checked
            .is_some_and(|at| now.duration_since(at) < MAIN_THREAD_POLL)
        {
            return;
        }
        main_threads.checked = Some(now);
        for (pid, error) in self
            .probes
            .leave_single_threaded_ways(self.datapath.programs())
        {
            self.target_error(pid, &error);
        }
        let exited: Vec<u32> = self
            .probes
            .with_own_links()
            .into_iter()
            .filter(|&pid| targets::main_thread_exited(pid))
            .collect();
        let gone = &mut self.watched.main_threads.gone;
        gone.retain(|pid, _| exited.contains(pid));
        for pid in exited {
            gone.entry(pid).or_insert(now);
        }
        let settled: Vec<u32> = gone
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= MAIN_THREAD_SETTLE)
            .map(|(&pid, _)| pid)
            .collect();
        for pid in settled {
            self.watched.main_threads.gone.remove(&pid);
            let libraries = targets::find_pthread_libraries(pid, &self.probes.symbols());
            for library in libraries.iter().flatten() {
                if let Err(error) =
                    self.probes
                        .attach_after_main_thread(&mut self.datapath, pid, library)
                {
                    self.target_error(pid, &error);
                }
            }
        }
    }
}

/// An ERROR event about process `pid` (0: none in particular).
/// Its code is the errno of the system call that failed, if one did.
pub(super) fn target_error_event(
    time_ns: i64,
    pid: u32,
    error: &(dyn Error + 'static),
) -> SystemEvent {
    let code = io_errors(error)
        .next()
        .and_then(std::io::Error::raw_os_error)
        .unwrap_or(0);
    let kind = SystemKind::Error {
        code: i64::from(code),
        message: OneLine(error).to_string(),
    };
    SystemEvent::of_process(time_ns, pid, 0, kind)
}

/// Sends `pid` on `exits` when that process exits, via a pidfd (which also works for our own
/// child without reaping it, so its status can still be collected).
fn watch_pid(pid: u32, exits: mpsc::UnboundedSender<u32>) {
    let opened = Pid::from_raw(pid as i32).map(|pid| pidfd_open(pid, PidfdFlags::empty()));
    let Some(Ok(pidfd)) = opened else {
        // Already gone.
        let _ = exits.send(pid);
        return;
    };
    tokio::spawn(async move {
        if let Ok(ready) = register(pidfd) {
            let _ = ready.readable().await;
        }
        let _ = exits.send(pid);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{attach::probes::AttachError, capture::CaptureError};

    #[test]
    fn a_target_errors_event_carries_the_errno_of_the_call_that_failed() {
        let error = AttachError::Capture(CaptureError::Duplicate(
            std::io::Error::from_raw_os_error(libc::EMFILE),
        ));
        let event = target_error_event(5, 42, &error);
        let SystemKind::Error { code, message } = event.kind else {
            panic!("{event:?}")
        };
        assert_eq!(code, i64::from(libc::EMFILE));
        assert_eq!(
            message,
            "cannot duplicate the descriptor of a ring or map: Too many open files (os error 24)"
        );
        assert_eq!(event.pid, 42);
    }
}
