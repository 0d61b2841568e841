//! One tracing run: drains the ring buffers into the sinks until a stop condition, then
//! detaches, writes what is left, and reports. Records and the system events the session makes
//! (a process attached or gone, a gap, an error) pass through one reorder stage, so that the
//! sinks get them in time order.
//!
//! The BPF side wakes the reader only when a ring is a quarter full; otherwise records wait for
//! the poll timer, which bounds their latency (`POLL_INTERVAL_*`) without a wakeup per record.

pub mod facts;
pub mod signals;

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
use tracer_model::event::{LossSource, SystemEvent, SystemKind};

use self::{
    facts::Facts,
    signals::{TraceSignal, TraceSignals},
};
use crate::{
    attach::{
        exec_follow::{AttachRequest, Followed},
        launch::Launched,
        probes::Probes,
        targets,
    },
    capture::{
        datapath::DataPath,
        decode::Decoder,
        kernel,
        loss::Losses,
        lossless,
        reorder::{LATE_COMMIT_NS, Reorder},
    },
    sinks::{Sink, Sinks, TraceEnd},
};

const POLL_INTERVAL_BUFFERED: Duration = Duration::from_millis(100);
const POLL_INTERVAL_UNBUFFERED: Duration = Duration::from_millis(10);

/// What a run traces and how it ends.
pub struct Session {
    pub datapath: DataPath,
    pub probes: Probes,
    pub decoder: Decoder,
    pub sinks: Sinks,
    /// System events from before the run (the start, targets attached or not), each with its
    /// CLOCK_MONOTONIC stamp.
    pub early_events: Vec<(u64, SystemEvent)>,
    /// Processes whose facts (`facts`) are among `early_events`.
    pub described: HashSet<u32>,
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
    pub exec_requests: Option<mpsc::UnboundedReceiver<Followed>>,
    pub signals: TraceSignals,
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
    pub records: u64,
    /// What the sinks wrote ("4 files in /tmp/trace, 812 events in app.ptl").
    pub written: String,
    pub losses: Losses,
    /// How many times `--lossless` stopped a thread until the rings were drained.
    pub lossless_stops: u64,
    /// The tracer's exit status.
    pub exit_code: i32,
}

impl Session {
    pub async fn run(mut self) -> Result<Outcome> {
        self.sinks
            .begin()
            .context("cannot start writing the trace")?;
        // Everything is loaded: a held SIGINT or SIGTERM is delivered now, and ends the trace.
        self.signals.release()?;
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
            reorder: Reorder::new(LATE_COMMIT_NS),
            processes: HashSet::new(),
            exiting: HashSet::new(),
            losses: Losses::new(Instant::now().into_std()),
            placed: Vec::new(),
            lossless_stops: 0,
            records: 0,
            facts: self.sinks.wants_system_events().then(Facts::default),
            described: std::mem::take(&mut self.described),
            named_threads: HashSet::new(),
        };
        for (ktime, event) in std::mem::take(&mut self.early_events) {
            flow.reorder.push(ktime, Staged::System(event));
        }

        loop {
            let mut exited = Vec::new();
            let mut signalled = false;
            let mut flush_requested = false;
            tokio::select! {
                _ = ticker.tick() => {}
                _ = wakeups.notified() => {}
                signal = self.signals.recv() => match signal {
                    TraceSignal::Stop => signalled = true,
                    TraceSignal::Flush => flush_requested = true,
                },
                _ = sleep_until(deadline) => break,
                _ = sleep_until(grace) => break,
                _ = liveness.tick(), if self.until_stopped => {
                    exited.extend(flow.processes.iter().filter(|&&pid| !targets::process_exists(pid)));
                    if let Err(error) = self.probes.attach_new_libraries(&mut self.datapath) {
                        self.target_error(&mut flow, 0, &error);
                    }
                }
                Some(followed) = next_request(&mut self.exec_requests) => match followed {
                    Followed::Exec(request) => {
                        self.attach_after_exec(&request, &mut flow);
                        let _ = request.done.send(());
                    }
                    Followed::Fork { parent, child, ktime_ns } if flow.facts.is_some() => {
                        let time_ns = self.decoder.realtime_ns(ktime_ns);
                        let fork = SystemEvent::of_process(time_ns, child, 0, SystemKind::Fork { parent });
                        flow.reorder.push(ktime_ns, Staged::System(fork));
                    }
                    Followed::Fork { .. } => {}
                },
                Some(pid) = exits.recv() => {
                    exited.push(pid);
                    while let Ok(pid) = exits.try_recv() {
                        exited.push(pid);
                    }
                }
            }
            self.drain(&mut flow)?;
            if flush_requested {
                // What has passed the reorder stage: the records of the last pass or two wait.
                self.sinks.flush().context(INCOMPLETE)?;
                say!("thrtrace-bpf: flushed (SIGUSR1)");
            }
            self.share_after_main_thread(&mut main_thread_gone, &mut flow);
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
                // Completed once every record stamped before now has been written.
                if flow.exiting.insert(pid) {
                    flow.reorder
                        .push(kernel::monotonic_ns(), Staged::Exited(pid));
                }
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
        let mut rest = Vec::new();
        flow.reorder.release_all(|item| rest.push(item));
        // What is still traced is detached now; losses no record came after are placed last.
        let end_ns = self.decoder.realtime_ns(kernel::monotonic_ns());
        let mut still_traced: Vec<u32> = flow.described.iter().copied().collect();
        still_traced.sort_unstable();
        rest.extend(still_traced.into_iter().map(Staged::Exited));
        // Written first: the records among them place the gaps they follow.
        self.write(rest, &mut flow)?;
        let lost_per_cpu = self.datapath.lost_per_cpu()?;
        let mut unplaced = Vec::new();
        for (cpu, &lost) in (0..).zip(&lost_per_cpu) {
            let placed = flow.placed.get(cpu as usize).copied().unwrap_or(0);
            if lost > placed {
                let gap = overflow(end_ns, lost - placed, cpu, LossSource::Ring);
                unplaced.push(Staged::System(gap));
            }
        }
        self.write(unplaced, &mut flow)?;
        flow.lossless_stops += lossless::resume_at_end(&mut self.datapath).len() as u64;
        if let Some(report) = flow.losses.report(std::time::Instant::now()) {
            say!("thrtrace-bpf: {report}");
        }
        let written = self
            .sinks
            .finish(&TraceEnd { lost_per_cpu })
            .context("cannot complete the trace")?;
        if let (Some(pid), None) = (launched_pid, launched_status) {
            say!("thrtrace-bpf: stopped tracing; the command (pid {pid}) is still running");
        }
        // Like `time` and strace: the command's status; stopping by signal or time is success.
        let exit_code = launched_status.map_or(0, exit_code_of);
        Ok(Outcome {
            records: flow.records,
            written,
            losses: flow.losses,
            lossless_stops: flow.lossless_stops,
            exit_code,
        })
    }

    /// Probes the libraries of the image process `request.pid` has just exec'd, and says so
    /// for the files that had no probes yet.
    fn attach_after_exec(&mut self, request: &AttachRequest, flow: &mut Flow) {
        let now = kernel::monotonic_ns();
        if let Some(facts) = flow.facts.as_mut() {
            for event in facts.exec(request.pid, self.decoder.realtime_ns(now)) {
                flow.reorder.push(now, Staged::System(event));
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
                Err(error) => self.target_error(flow, request.pid, &error),
            }
        }
    }

    /// An error about one target: said, and an ERROR event in the trace, which goes on.
    fn target_error(&self, flow: &mut Flow, pid: u32, error: &anyhow::Error) {
        say!("thrtrace-bpf: {error:#}");
        let now = kernel::monotonic_ns();
        let event = target_error_event(self.decoder.realtime_ns(now), pid, error);
        flow.reorder.push(now, Staged::System(event));
    }

    /// A process with links of its own whose main thread has exited while others run on is
    /// traced through shared links from then on: its own no longer apply (see `probes`). No
    /// pidfd tells of that (the kernel holds its wakeup back while other threads run), so each
    /// pass reads /proc/PID/stat of those processes. A process moves once its main thread has
    /// been gone for `MAIN_THREAD_SETTLE` (`gone` says since when): one exiting as a whole is
    /// gone by then, or has no thread left to be seen through.
    fn share_after_main_thread(&mut self, gone: &mut HashMap<u32, Instant>, flow: &mut Flow) {
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
                if let Err(error) =
                    self.probes
                        .attach_after_main_thread(&mut self.datapath, pid, library)
                {
                    self.target_error(flow, pid, &error);
                }
            }
        }
    }

    /// Reads the rings into the reorder stage and writes what it releases; reads the kernel's
    /// loss counters and reports new losses.
    fn drain(&mut self, flow: &mut Flow) -> Result<()> {
        let pass_start = kernel::monotonic_ns();
        let Flow {
            reorder,
            facts,
            described,
            named_threads,
            ..
        } = flow;
        let decoder = &self.decoder;
        let drained = self.datapath.drain(|cpu, raw| {
            // A process or thread first seen: its facts are read now, while it most likely
            // still lives, and placed just before its record.
            if let Some(facts) = facts.as_mut() {
                let time_ns = decoder.realtime_ns(raw.ktime_ns);
                let mut events = Vec::new();
                if described.insert(raw.pid) {
                    events.extend(facts.attached(raw.pid, time_ns));
                }
                if named_threads.insert(raw.lwpid) {
                    events.extend(facts::thread_name(raw.pid, raw.lwpid, time_ns));
                }
                for event in events {
                    reorder.push(raw.ktime_ns, Staged::System(event));
                }
            }
            reorder.push(raw.ktime_ns, Staged::Record { cpu, raw: *raw })
        });
        flow.losses.add_undecodable(drained.malformed);
        // Every ring read to its end: what --lossless stopped may run again.
        if drained.behind_after.is_none() {
            flow.lossless_stops += lossless::resume(&mut self.datapath).len() as u64;
        }
        let mut released = Vec::new();
        flow.reorder
            .release(pass_start, drained.behind_after, |item| released.push(item));
        self.write(released, flow)?;
        let lost = self.datapath.lost_per_cpu()?;
        if let Some(report) = flow.losses.update(lost, std::time::Instant::now()) {
            say!("thrtrace-bpf: {report}");
        }
        Ok(())
    }

    /// Hands `items` to the sinks in order: a record after a gap with the gap's overflow, a
    /// process first seen with its facts, a thread first seen with its name.
    fn write(&mut self, items: Vec<Staged>, flow: &mut Flow) -> Result<()> {
        let mut undecodable = 0;
        for item in items {
            let (cpu, raw) = match item {
                Staged::Record { cpu, raw } => (cpu, raw),
                Staged::System(event) => {
                    self.sinks.system_event(&event).context(INCOMPLETE)?;
                    continue;
                }
                Staged::Exited(pid) => {
                    flow.exiting.remove(&pid);
                    flow.processes.remove(&pid);
                    if flow.described.remove(&pid) {
                        let now = self.decoder.realtime_ns(kernel::monotonic_ns());
                        let detach =
                            SystemEvent::of_process(now, pid, 0, SystemKind::ProcessDetach);
                        self.sinks.system_event(&detach).context(INCOMPLETE)?;
                    }
                    self.sinks.process_exited(pid).context(INCOMPLETE)?;
                    continue;
                }
            };
            let time_ns = self.decoder.realtime_ns(raw.ktime_ns);
            if raw.lost_before > 0 {
                let lost = u64::from(raw.lost_before);
                let slot = cpu as usize;
                if flow.placed.len() <= slot {
                    flow.placed.resize(slot + 1, 0);
                }
                flow.placed[slot] += lost;
                let gap = overflow(time_ns, lost, cpu, LossSource::Ring);
                self.sinks.system_event(&gap).context(INCOMPLETE)?;
                let resume = SystemEvent::new(time_ns, SystemKind::Resume);
                self.sinks.system_event(&resume).context(INCOMPLETE)?;
            }
            match self.decoder.decode(&raw) {
                Some(record) if self.decoder.selects(&record) => {
                    flow.processes.insert(record.pid);
                    flow.records += 1;
                    self.sinks.record(&record).context(INCOMPLETE)?
                }
                // A call of the kind not selected (a plain mutex when only rmutex is).
                Some(_) => {}
                None => {
                    undecodable += 1;
                    let lost = overflow(time_ns, 1, cpu, LossSource::Undecodable);
                    self.sinks.system_event(&lost).context(INCOMPLETE)?;
                }
            }
        }
        self.sinks.batch_done().context(INCOMPLETE)?;
        flow.losses.add_undecodable(undecodable);
        Ok(())
    }
}

/// What a failed write of the trace means.
const INCOMPLETE: &str = "cannot write trace records; the trace is incomplete";

/// What waits in the reorder stage.
enum Staged {
    /// A record, from the ring of `cpu`.
    Record {
        cpu: u32,
        raw: RawRecord,
    },
    System(SystemEvent),
    /// A process has exited: once everything before is written, its files are completed.
    Exited(u32),
}

/// `lost` records of `cpu` that never arrived, stamped `time_ns`.
fn overflow(time_ns: i64, lost: u64, cpu: u32, source: LossSource) -> SystemEvent {
    let kind = SystemKind::Overflow {
        lost,
        cpu,
        source,
        first_lost_ns: 0,
    };
    SystemEvent::new(time_ns, kind)
}

/// An ERROR event about process `pid` (0: none in particular).
pub fn target_error_event(time_ns: i64, pid: u32, error: &anyhow::Error) -> SystemEvent {
    let code = error
        .chain()
        .find_map(|e| e.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error)
        .unwrap_or(0);
    let kind = SystemKind::Error {
        code: i64::from(code),
        message: format!("{error:#}"),
    };
    SystemEvent::of_process(time_ns, pid, 0, kind)
}

/// Records between the rings and the sinks, and those that never arrived.
struct Flow {
    reorder: Reorder<Staged>,
    /// Processes with records written whose exit has not been handled yet: system-wide, the
    /// ones to look for; under `--follow`, the children to watch.
    processes: HashSet<u32>,
    /// Processes whose exit waits in the reorder stage.
    exiting: HashSet<u32>,
    losses: Losses,
    /// Per CPU, the losses placed in the stream by the records that came after them.
    placed: Vec<u64>,
    lossless_stops: u64,
    /// Records handed to the sinks.
    records: u64,
    /// Set when a sink keeps system events: the facts about processes are read then only.
    facts: Option<Facts>,
    /// Processes whose facts are in the stream (a detach event ends them).
    described: HashSet<u32>,
    /// Threads whose name is in the stream.
    named_threads: HashSet<u32>,
}

/// The next exec to attach to, if exec's are followed; never, if not.
async fn next_request(
    requests: &mut Option<mpsc::UnboundedReceiver<Followed>>,
) -> Option<Followed> {
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
