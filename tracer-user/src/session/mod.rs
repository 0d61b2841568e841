//! One tracing run: drains the ring buffers into the sink until a stop condition, then
//! detaches, writes what is left, and reports.
//!
//! The BPF side wakes the reader only when a ring is a quarter full; otherwise records wait for
//! the poll timer, which bounds their latency (`POLL_INTERVAL_*`) without a wakeup per record.

pub mod stop_signals;

use std::{
    collections::{HashMap, HashSet},
    os::fd::{FromRawFd, OwnedFd, RawFd},
    process::ExitStatus,
    sync::Arc,
    time::Duration,
};

use anyhow::{Context, Result};
use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::{Notify, mpsc},
    time::{Instant, MissedTickBehavior},
};

use tracer_common::RawRecord;

use self::stop_signals::StopSignals;
use crate::{
    attach::{exec_follow::AttachRequest, launch::Launched, probes::Probes, targets},
    capture::{
        datapath::DataPath, decode::Decoder, kernel, loss::Losses, lossless, reorder::Reorder,
    },
    sinks::{Sink, SinkSummary},
};

const POLL_INTERVAL_BUFFERED: Duration = Duration::from_millis(100);
const POLL_INTERVAL_UNBUFFERED: Duration = Duration::from_millis(10);

/// What a run traces and how it ends.
pub struct Session {
    pub datapath: DataPath,
    pub probes: Probes,
    pub decoder: Decoder,
    pub sink: Box<dyn Sink>,
    pub unbuffered: bool,
    pub duration: Option<Duration>,
    /// Traced processes that the tracer did not start.
    pub attached_pids: Vec<u32>,
    /// The process the tracer started, whose exit status becomes the tracer's.
    pub launched: Option<Launched>,
    /// System-wide: trace until stopped, finishing the files of processes as they go away.
    pub until_stopped: bool,
    /// `--follow`: processes first seen in records (children) are watched like targets.
    pub follow: bool,
    /// `--follow`: images just exec'd by followed processes, to probe while they wait.
    pub exec_requests: Option<mpsc::UnboundedReceiver<AttachRequest>>,
    pub stop_signals: StopSignals,
}

/// How often system-wide tracing looks for processes that have exited, to complete their files.
const LIVENESS_INTERVAL: Duration = Duration::from_secs(1);

/// How long a target's main thread must have been gone before the process moves to shared
/// links: longer than a process that is exiting as a whole takes to finish.
const MAIN_THREAD_SETTLE: Duration = Duration::from_millis(50);

/// How long a launched command may take to exit after the tracer is signalled: the terminal's
/// Ctrl-C reaches it too, and its exit status should be the tracer's.
const LAUNCHED_EXIT_GRACE: Duration = Duration::from_millis(500);

/// How a run ended.
pub struct Outcome {
    pub summary: SinkSummary,
    pub losses: Losses,
    /// How many times `--lossless` stopped a thread until the rings were drained.
    pub lossless_stops: u64,
    /// The tracer's exit status.
    pub exit_code: i32,
}

impl Session {
    pub async fn run(mut self) -> Result<Outcome> {
        // Everything is loaded: a held SIGINT or SIGTERM is delivered now, and ends the trace.
        self.stop_signals.release()?;
        let wakeups = Arc::new(Notify::new());
        for fd in self.datapath.ring_fds()? {
            watch_ring(fd, Arc::clone(&wakeups))?;
        }
        let (exit_tx, mut exits) = mpsc::unbounded_channel();
        let launched_pid = self.launched.as_ref().map(|l| l.child.id());
        let mut launched_status = self.launched.as_ref().and_then(|l| l.exited);
        let mut running: HashSet<u32> = self.attached_pids.iter().copied().collect();
        if launched_status.is_none() {
            running.extend(launched_pid);
        }
        for &pid in &running {
            watch_pid(pid, exit_tx.clone());
        }
        // Targets with links of their own whose main thread has been seen gone, and since when.
        let mut main_thread_gone: HashMap<u32, Instant> = HashMap::new();
        // With --follow, processes first seen in records (children) are watched as they come.
        let mut seen: HashSet<u32> = running.clone();

        let interval = if self.unbuffered {
            POLL_INTERVAL_UNBUFFERED
        } else {
            POLL_INTERVAL_BUFFERED
        };
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let deadline = self.duration.map(|d| Instant::now() + d);
        let mut grace = None;
        // System-wide there is no pidfd per process: look for the ones gone once a second, and for
        // pthread libraries that have appeared since.
        let mut liveness = tokio::time::interval(LIVENESS_INTERVAL);
        liveness.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut flow = Flow {
            reorder: Reorder::default(),
            processes: HashSet::new(),
            losses: Losses::new(Instant::now().into_std()),
            lossless_stops: 0,
        };

        loop {
            let mut exited = Vec::new();
            let mut signalled = false;
            tokio::select! {
                _ = ticker.tick() => {}
                _ = wakeups.notified() => {}
                _ = self.stop_signals.recv() => signalled = true,
                _ = sleep_until(deadline) => break,
                _ = sleep_until(grace) => break,
                _ = liveness.tick(), if self.until_stopped => {
                    exited.extend(flow.processes.iter().filter(|&&pid| !targets::process_exists(pid)));
                    self.probes.attach_new_libraries(&mut self.datapath)?;
                }
                Some(request) = next_request(&mut self.exec_requests) => {
                    self.attach_after_exec(&request)?;
                    let _ = request.done.send(());
                }
                Some(pid) = exits.recv() => {
                    exited.push(pid);
                    while let Ok(pid) = exits.try_recv() {
                        exited.push(pid);
                    }
                }
            }
            self.drain(&mut flow)?;
            self.share_after_main_thread(&mut main_thread_gone)?;
            if self.follow {
                for &pid in &flow.processes {
                    if seen.insert(pid) {
                        running.insert(pid);
                        watch_pid(pid, exit_tx.clone());
                    }
                }
            }
            for pid in exited {
                if Some(pid) == launched_pid
                    && let Some(launched) = self.launched.as_mut()
                {
                    launched_status = launched.child.try_wait()?;
                }
                running.remove(&pid);
                let mut records = Vec::new();
                flow.reorder.release_process(pid, |r| records.push(*r));
                self.write(&records, &mut flow)?;
                flow.processes.remove(&pid);
                self.sink
                    .process_exited(pid)
                    .context("cannot complete trace files")?;
            }
            if running.is_empty() && !self.until_stopped {
                break;
            }
            if signalled {
                if launched_pid.is_none_or(|pid| !running.contains(&pid)) {
                    break;
                }
                grace.get_or_insert(Instant::now() + LAUNCHED_EXIT_GRACE);
            }
        }

        // Records written before the probes went away are still in the rings: read them after.
        let tracepoints = self.datapath.take_tracepoint_links();
        std::thread::scope(|scope| {
            scope.spawn(move || drop(tracepoints));
            self.probes.detach_all();
        });
        self.drain(&mut flow)?;
        let mut records = Vec::new();
        flow.reorder.release_all(|r| records.push(*r));
        self.write(&records, &mut flow)?;
        flow.lossless_stops += lossless::resume_at_end(&mut self.datapath).len() as u64;
        if let Some(report) = flow.losses.report(std::time::Instant::now()) {
            say!("thrtrace-bpf: {report}");
        }
        let summary = self.sink.finish().context("cannot complete trace files")?;
        if let (Some(pid), None) = (launched_pid, launched_status) {
            say!("thrtrace-bpf: stopped tracing; the command (pid {pid}) is still running");
        }
        // Like `time` and strace: the command's status; stopping by signal or time is success.
        let exit_code = launched_status.map_or(0, exit_code_of);
        Ok(Outcome {
            summary,
            losses: flow.losses,
            lossless_stops: flow.lossless_stops,
            exit_code,
        })
    }

    /// Probes the libraries of the image process `request.pid` has just exec'd, and says so
    /// for the files that had no probes yet.
    fn attach_after_exec(&mut self, request: &AttachRequest) -> Result<()> {
        for library in &request.libraries {
            let count = self
                .probes
                .attach_shared(&mut self.datapath, request.pid, library)?;
            if count > 0 {
                say!(
                    "thrtrace-bpf: pid {} exec'd: {count} probes in {}",
                    request.pid,
                    library.file.path
                );
            }
        }
        Ok(())
    }

    /// A process with links of its own whose main thread has exited while others run on is
    /// traced through shared links from then on: its own no longer apply (see `probes`). No
    /// pidfd tells of that (the kernel holds its wakeup back while other threads run), so each
    /// pass reads /proc/PID/stat of those processes. A process moves once its main thread has
    /// been gone for `MAIN_THREAD_SETTLE` (`gone` says since when): one exiting as a whole is
    /// gone by then, or has no thread left to be seen through.
    fn share_after_main_thread(&mut self, gone: &mut HashMap<u32, Instant>) -> Result<()> {
        let now = Instant::now();
        let exited: Vec<u32> = self
            .probes
            .with_own_links()
            .into_iter()
            .filter(|&pid| targets::main_thread_exited(pid))
            .collect();
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
            gone.remove(&pid);
            let libraries = targets::find_pthread_libraries(pid, &self.probes.symbols());
            for library in libraries.iter().flatten() {
                self.probes
                    .attach_after_main_thread(&mut self.datapath, pid, library)?;
            }
        }
        Ok(())
    }

    /// Reads the rings into the reorder stage and writes what it releases; reads the kernel's
    /// loss counters and reports new losses.
    fn drain(&mut self, flow: &mut Flow) -> Result<()> {
        let pass_start = kernel::monotonic_ns();
        let drained = self.datapath.drain(|raw| flow.reorder.push(raw));
        flow.losses.add_undecodable(drained.malformed);
        // Every ring read to its end: what --lossless stopped may run again.
        if drained.behind_after.is_none() {
            flow.lossless_stops += lossless::resume(&mut self.datapath).len() as u64;
        }
        let mut records = Vec::new();
        flow.reorder
            .release(pass_start, drained.behind_after, |r| records.push(*r));
        self.write(&records, flow)?;
        let lost = self.datapath.lost_per_cpu()?;
        if let Some(report) = flow.losses.update(lost, std::time::Instant::now()) {
            say!("thrtrace-bpf: {report}");
        }
        Ok(())
    }

    /// Decodes and writes `records`, noting their processes; counts those that cannot be
    /// decoded as lost.
    fn write(&mut self, records: &[RawRecord], flow: &mut Flow) -> Result<()> {
        const INCOMPLETE: &str = "cannot write trace records; the files are incomplete";
        let mut undecodable = 0;
        for raw in records {
            match self.decoder.decode(raw) {
                Some(record) if self.decoder.selects(&record) => {
                    flow.processes.insert(record.pid);
                    self.sink.write(&record).context(INCOMPLETE)?
                }
                // A call of the kind not selected (a plain mutex when only rmutex is).
                Some(_) => {}
                None => undecodable += 1,
            }
        }
        self.sink.batch_done().context(INCOMPLETE)?;
        flow.losses.add_undecodable(undecodable);
        Ok(())
    }
}

/// Records between the rings and the sink, and those that never arrived.
struct Flow {
    reorder: Reorder,
    /// Processes with records written whose exit has not been handled yet: system-wide, the
    /// ones to look for; under `--follow`, the children to watch.
    processes: HashSet<u32>,
    losses: Losses,
    lossless_stops: u64,
}

/// The next exec to attach to, if exec's are followed; never, if not.
async fn next_request(
    requests: &mut Option<mpsc::UnboundedReceiver<AttachRequest>>,
) -> Option<AttachRequest> {
    match requests {
        Some(requests) => requests.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Exit status as a shell reports it: the code, or 128 + the signal that killed the process.
fn exit_code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Notifies `wakeups` whenever the ring buffer behind `fd` is readable.
fn watch_ring(fd: OwnedFd, wakeups: Arc<Notify>) -> Result<()> {
    let ready = register(fd).context("cannot watch a ring buffer")?;
    tokio::spawn(async move {
        while let Ok(mut guard) = ready.readable().await {
            guard.clear_ready();
            wakeups.notify_one();
        }
    });
    Ok(())
}

/// Watches an owned descriptor for readability.
fn register(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd owns `fd`, so it stays open and the same for the AsyncFd's lifetime.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into_parts().1)
}

/// Sends `pid` on `exits` when that process exits, via a pidfd (which also works for our own
/// child without reaping it, so its status can still be collected).
fn watch_pid(pid: u32, exits: mpsc::UnboundedSender<u32>) {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        // Already gone.
        let _ = exits.send(pid);
        return;
    }
    // SAFETY: the descriptor was just opened and is ours.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    tokio::spawn(async move {
        if let Ok(ready) = register(pidfd) {
            let _ = ready.readable().await;
        }
        let _ = exits.send(pid);
    });
}
