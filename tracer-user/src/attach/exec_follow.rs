//! `--follow` across exec: a followed process that execs a new image has that image's pthread
//! libraries probed before any of its code runs, whichever files they are (a static binary,
//! another glibc).
//!
//! Forks are followed by the BPF side alone (a tracepoint adds each child to the followed set),
//! but nothing in BPF can hold a task while userspace attaches probes to a file the task has
//! not mapped yet. So the targets are also put under ptrace, as `strace -f` does, by one thread
//! that owns them: children and threads are attached by the kernel as they are made
//! (PTRACE_O_TRACEFORK/VFORK/CLONE), and at each exec stop the new image is stepped through its
//! loader ([`launch::step_through_loader`]) and the session probes its libraries while it
//! waits. Everything else a stop can be is passed on unchanged: signals are re-injected,
//! group-stops are kept with PTRACE_LISTEN. The cost to the targets: a stop at each fork,
//! clone, exec, thread exit and signal.
//!
//! The launched command is handed over stopped by the thread that started it, and is let go
//! at its exit stop, so that its status still goes to the tracer's main thread.

use std::{collections::HashSet, io, sync::mpsc as sync_mpsc, thread, time::Duration};

use rustix::process::{Pid, Signal, kill_process};
use tokio::sync::mpsc;

use super::{
    launch::{self, Loader},
    targets::{self, PthreadLibrary},
};
use crate::{
    capture::lossless::StoppedView,
    error::OneLine,
    priority::Rank,
    sys::{SyscallError, process, ptrace},
};

/// Why the targets' execs could not be followed.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("cannot start the exec-following thread")]
    Start(#[source] io::Error),
    #[error("the exec-following thread ended before it attached to the targets")]
    Ended(#[source] sync_mpsc::RecvError),
    #[error("cannot list the threads of the targets")]
    Threads(#[from] io::Error),
    #[error(transparent)]
    Seize(#[from] SyscallError),
    /// The launched command could not be let go on.
    #[error(transparent)]
    Continue(#[from] rustix::io::Errno),
}

/// What following the targets reports to the session.
pub enum Followed {
    /// A target exec'd: probe its new image.
    Exec(AttachRequest),
    /// Process `parent` forked `child` (at CLOCK_MONOTONIC `ktime_ns`).
    Fork {
        parent: u32,
        child: u32,
        ktime_ns: u64,
    },
}

/// A request to probe, for process `pid`, the libraries of the image it has just exec'd; the
/// process stays stopped until `done` is answered.
pub struct AttachRequest {
    pub pid: u32,
    pub libraries: Vec<PthreadLibrary>,
    pub done: sync_mpsc::SyncSender<()>,
}

/// How often a thread held for `--lossless` looks whether the rings have been drained.
const HOLD_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// ptrace options: report exec, follow every new task, and mark syscall stops (for stepping).
const OPTIONS: libc::c_int = libc::PTRACE_O_TRACEEXEC
    | libc::PTRACE_O_TRACEFORK
    | libc::PTRACE_O_TRACEVFORK
    | libc::PTRACE_O_TRACECLONE
    | libc::PTRACE_O_TRACEEXIT
    | libc::PTRACE_O_TRACESYSGOOD;

/// Starts the thread that follows the execs of `pids` and of `launched` (stopped by its
/// launcher with SIGSTOP, resumed here), and all their descendants. Returns once every target
/// is under ptrace, so that an exec made after the tracer says it is ready is seen; returns
/// the requests to probe new images, which the session must answer.
/// With `--lossless`, `stopped` tells which threads the BPF side has stopped: each is kept
/// stopped, its SIGSTOP never passed on, until the session has drained the rings.
pub fn start(
    pids: Vec<u32>,
    launched: Option<u32>,
    functions: Vec<&'static str>,
    stopped: Option<StoppedView>,
) -> Result<mpsc::UnboundedReceiver<Followed>, FollowError> {
    let (requests, received) = mpsc::unbounded_channel();
    let (seized, all_seized) = sync_mpsc::sync_channel(1);
    // Every fork, clone and exec of a target waits for this thread.
    crate::priority::spawn("exec-follow", Rank::First, move || {
        for &pid in &pids {
            if let Err(error) = seize_process(pid) {
                say!(
                    "thrtrace-bpf: cannot follow the execs of pid {pid} ({}); is a debugger \
                     attached? Its forks are still followed",
                    OneLine(&error)
                );
            }
        }
        if let Some(pid) = launched
            && let Err(error) = seize_and_continue(pid)
        {
            say!(
                "thrtrace-bpf: cannot follow the execs of the command: {}",
                OneLine(&error)
            );
        }
        let _ = seized.send(());
        Follower {
            functions,
            launched,
            requests,
            stopped,
        }
        .run();
    })
    .map_err(FollowError::Start)?;
    all_seized.recv().map_err(FollowError::Ended)?;
    Ok(received)
}

/// Attaches to every thread of `pid`, again until no new thread has appeared meanwhile.
fn seize_process(pid: u32) -> Result<(), FollowError> {
    let mut seized: HashSet<libc::pid_t> = HashSet::new();
    loop {
        let tasks: Vec<libc::pid_t> = std::fs::read_dir(format!("/proc/{pid}/task"))?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|tid| !seized.contains(tid))
            .collect();
        if tasks.is_empty() {
            return Ok(());
        }
        for tid in tasks {
            match seize(tid) {
                Ok(()) => {}
                // The thread exited meanwhile.
                Err(error) if error.raw_os_error() == Some(libc::ESRCH) => {}
                Err(error) => return Err(error.into()),
            }
            seized.insert(tid);
        }
    }
}

fn seize(tid: libc::pid_t) -> Result<(), SyscallError> {
    ptrace::seize(tid, OPTIONS)
}

/// Attaches to the launched command `pid`, which its launcher left stopped, and lets it go on.
fn seize_and_continue(pid: u32) -> Result<(), FollowError> {
    seize(pid as libc::pid_t)?;
    if let Some(process) = Pid::from_raw(pid as i32) {
        kill_process(process, Signal::CONT)?;
    }
    Ok(())
}

/// Whether the signal `tid` is stopped for came from the kernel (`SI_KERNEL`), as the BPF
/// side's do, rather than from a process.
fn sent_by_kernel(tid: libc::pid_t) -> bool {
    ptrace::signal_info(tid).is_ok_and(|info| info.si_code == libc::SI_KERNEL)
}

/// Resumes a stopped tracee, delivering `signal` (0 for none).
fn resume(tid: libc::pid_t, signal: libc::c_int) {
    // It fails only if the tracee is gone: nothing to do then.
    let _ = ptrace::resume(tid, signal);
}

struct Follower {
    functions: Vec<&'static str>,
    launched: Option<u32>,
    requests: mpsc::UnboundedSender<Followed>,
    stopped: Option<StoppedView>,
}

impl Follower {
    /// Handles every stop of every tracee until none is left.
    fn run(self) {
        loop {
            // __WNOTHREAD: only this thread's tracees, never the main thread's child, whose
            // status is the tracer's to collect.
            let (tid, status) = match process::waitpid(-1, libc::__WALL | libc::__WNOTHREAD) {
                Ok(changed) => changed,
                Err(error) if error.io_error.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return, // ECHILD: no tracee left.
            };
            if libc::WIFSTOPPED(status) {
                self.stopped(tid, status);
            }
        }
    }

    fn stopped(&self, tid: libc::pid_t, status: libc::c_int) {
        let signal = libc::WSTOPSIG(status);
        match status >> 16 {
            libc::PTRACE_EVENT_EXEC => self.exec(tid, status),
            libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => {
                self.forked(tid);
                resume(tid, 0);
            }
            libc::PTRACE_EVENT_EXIT if Some(tid as u32) == self.launched => {
                // Let the command exit untraced: its status goes to its parent, the tracer.
                // It fails only if the command is gone: nothing to do then.
                let _ = ptrace::detach(tid, 0);
            }
            // A group-stop: stay stopped as without a tracer, until SIGCONT. (A new task's
            // first stop, and a wake-up by SIGCONT, report SIGTRAP instead.)
            libc::PTRACE_EVENT_STOP
                if matches!(
                    signal,
                    libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
                ) =>
            {
                // If it is refused, the tracee is resumed.
                if ptrace::listen(tid).is_err() {
                    resume(tid, 0);
                }
            }
            // --lossless stopped this thread until the rings are drained.
            0 if signal == libc::SIGSTOP && self.stopped.is_some() && sent_by_kernel(tid) => {
                self.hold_until_drained(tid);
            }
            // A signal on its way (even SIGTRAP: exec reports an event, not a SIGTRAP,
            // with PTRACE_O_TRACEEXEC): deliver it.
            0 => resume(tid, signal),
            // Fork, clone, exit and new-task stops.
            _ => resume(tid, 0),
        }
    }

    /// Keeps `tid`, stopped by `--lossless`, stopped until the session has forgotten it (once
    /// the rings are drained), then resumes it without its SIGSTOP: nothing else sees a stop.
    /// Meanwhile the other tracees' stops wait too; they are being held back anyway.
    fn hold_until_drained(&self, tid: libc::pid_t) {
        if let Some(stopped) = &self.stopped {
            while stopped.contains(tid as u32) {
                thread::sleep(HOLD_POLL_INTERVAL);
            }
        }
        resume(tid, 0);
    }

    /// Thread `tid` forked: the session records which process made which.
    fn forked(&self, tid: libc::pid_t) {
        let child = ptrace::event_message(tid);
        let Some(parent) = process_of(tid) else {
            return;
        };
        if let Ok(child) = child {
            let _ = self.requests.send(Followed::Fork {
                parent,
                child: child as u32,
                ktime_ns: crate::capture::kernel::monotonic_ns(),
            });
        }
    }

    /// `pid` has exec'd: step its loader, have its libraries probed, let it run.
    fn exec(&self, pid: libc::pid_t, status: libc::c_int) {
        match launch::step_through_loader(pid as u32, status, &self.functions) {
            Ok(Loader::Done) => {}
            // It exited while stepped: nothing to resume.
            Ok(Loader::Exited(_)) => return,
            Ok(Loader::ExitStop(status)) => return self.stopped(pid, status),
            Err(error) => {
                say!(
                    "thrtrace-bpf: cannot follow pid {pid} through exec: {}",
                    OneLine(&error)
                );
                return resume(pid, 0);
            }
        }
        match targets::find_pthread_libraries(pid as u32, &self.functions) {
            Ok(libraries) if libraries.is_empty() => {
                say!(
                    "thrtrace-bpf: {}",
                    targets::no_pthread_functions(pid as u32)
                );
            }
            Ok(libraries) => {
                let (done, answered) = sync_mpsc::sync_channel(1);
                let request = AttachRequest {
                    pid: pid as u32,
                    libraries,
                    done,
                };
                // If the session has ended, the process just goes on.
                if self.requests.send(Followed::Exec(request)).is_ok() {
                    let _ = answered.recv();
                }
            }
            Err(error) => say!("thrtrace-bpf: pid {pid} after exec: {}", OneLine(&error)),
        }
        resume(pid, 0);
    }
}

/// The process thread `tid` belongs to (`Tgid` in its status; it is stopped, so it is there).
fn process_of(tid: libc::pid_t) -> Option<u32> {
    super::targets::status_field(&format!("/proc/{tid}/status"), "Tgid")?
        .parse()
        .ok()
}
