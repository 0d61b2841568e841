//! One tracing run: drains the ring buffers into the sinks until a stop condition, then
//! detaches, writes what is left, and reports. Records and the system events the session makes
//! (a process attached or gone, a gap, an error) pass through one reorder stage, so that the
//! sinks get them in time order.
//!
//! The BPF side wakes the reader only when a ring reaches a quarter full (and each further
//! sixteenth while it has not caught up); otherwise records wait for the poll timer, which
//! bounds their latency (`POLL_INTERVAL_*`) without a wakeup per record.

pub mod blocks;
pub mod control;
pub mod deadlocks;
mod draw;
pub mod facts;

use std::{
    collections::hash_map::Entry,
    os::fd::{FromRawFd, OwnedFd, RawFd},
    process::ExitStatus,
    sync::Arc,
    time::Duration,
};

use anyhow::{Context, Result};
// Per-record sets (processes and threads seen): a fast hasher rather than SipHash.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::{Notify, mpsc, oneshot},
    time::{Instant, MissedTickBehavior},
};

use tracer_common::RecordingMasks;
use tracer_model::{
    event::{LossSource, SystemEvent, SystemKind},
    selection::EventSet,
};

use self::{
    blocks::BlockWatch,
    control::{Asked, Controller, Recording},
    deadlocks::DeadlockWatch,
    draw::{DrawThreads, Drawn, Pulled},
    facts::Facts,
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
        programs::RunTime,
        reorder::{LATE_COMMIT_NS, Released, Reorder},
    },
    control::{Reply, Request, StatusReport},
    signals::{TraceSignal, TraceSignals},
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
    /// The trace's name, and its control socket (none if it could not be made).
    pub name: String,
    pub controller: Option<Controller>,
    pub recording: Recording,
    /// `--flush-on-block`.
    pub blocks: Option<BlockWatch>,
    /// Live deadlock detection (`--deadlock-after`).
    pub deadlocks: Option<DeadlockWatch>,
    /// `--consumer-threads`: the rings are drained by this many threads together.
    pub consumer_threads: usize,
}

/// How long a target's main thread must have been gone before the process moves to shared
/// links: longer than a process that is exiting as a whole takes to finish.
const MAIN_THREAD_SETTLE: Duration = Duration::from_millis(50);

/// How often at most the main threads of those targets are looked for: under load the rings
/// are drained hundreds of times a second, and reading each pass's /proc/PID/stat was 4% of
/// the tracer's CPU (perf). A fifth of `MAIN_THREAD_SETTLE`.
const MAIN_THREAD_POLL: Duration = Duration::from_millis(10);

/// How long a launched command may take to exit after the tracer is signalled: the terminal's
/// Ctrl-C reaches it too, and its exit status should be the tracer's.
const LAUNCHED_EXIT_GRACE: Duration = Duration::from_millis(500);

/// How often the record rate (`ctl status`) is measured, and system-wide tracing looks for
/// processes that have exited.
const RATE_INTERVAL: Duration = Duration::from_secs(1);

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
    /// What the kernel counted of the BPF programs' runs (with `kernel.bpf_stats_enabled`).
    pub run_times: Vec<RunTime>,
}

impl Outcome {
    /// The summary line's text: "812 records written, 0 lost, 4 files in /tmp/trace".
    pub fn summary(&self) -> String {
        format!(
            "{} records written, {} lost, {}",
            self.records,
            self.losses.total(),
            self.written
        )
    }
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
        let mut main_threads = MainThreads::default();
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
        // Once a second: the record rate is measured; system-wide, where there is no pidfd per
        // process, the processes gone are looked for, and pthread libraries that have appeared.
        let mut each_second = tokio::time::interval(RATE_INTERVAL);
        each_second.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // `ctl shutdown`: answered once the trace is complete.
        let mut shutdown_answers = Vec::new();
        let shares = self.datapath.share_rings(self.consumer_threads);
        let mut flow = Flow {
            drawers: DrawThreads::start(shares, &self.decoder)?,
            reorder: Reorder::new(LATE_COMMIT_NS),
            processes: HashSet::new(),
            last_recorded_pid: None,
            exiting: HashSet::new(),
            losses: Losses::new(Instant::now().into_std()),
            placed: Vec::new(),
            lossless_stops: 0,
            records: 0,
            facts: self.sinks.wants_system_events().then(Facts::default),
            described: std::mem::take(&mut self.described),
            named_threads: HashMap::new(),
            seconds: 0,
            started: Instant::now(),
            rate: Rate::default(),
        };
        for (ktime, event) in std::mem::take(&mut self.early_events) {
            flow.reorder.push(ktime, Staged::System(event));
        }

        loop {
            let mut exited = Vec::new();
            let mut signalled = false;
            tokio::select! {
                _ = ticker.tick() => {}
                _ = wakeups.notified() => {}
                signal = self.signals.recv() => match signal {
                    TraceSignal::Stop => signalled = true,
                    TraceSignal::Flush => flow.reorder.push(
                        kernel::monotonic_ns(),
                        Staged::Act { action: Action::Flush(FlushCause::Signal), answer: None },
                    ),
                },
                _ = sleep_until(deadline) => break,
                _ = sleep_until(grace) => break,
                _ = each_second.tick() => {
                    flow.rate.sample(flow.records);
                    self.renamed_threads(&mut flow);
                    if self.until_stopped {
                        exited.extend(flow.processes.iter().filter(|&&pid| !targets::process_exists(pid)));
                        if let Err(error) = self.probes.attach_new_libraries(&mut self.datapath) {
                            self.target_error(&mut flow, 0, &error);
                        }
                    }
                }
                Some(asked) = next_request_of(&mut self.controller) => {
                    if let Some(answer) = self.answer(asked, &mut flow, &running)? {
                        shutdown_answers.push(answer);
                        signalled = true;
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
            let now = kernel::monotonic_ns();
            if let Some(blocks) = self.blocks.as_mut() {
                for event in blocks.still_blocked(self.decoder.realtime_ns(now)) {
                    let action = Action::Flush(FlushCause::Blocked(event));
                    let answer = None;
                    flow.reorder.push(now, Staged::Act { action, answer });
                }
            }
            if let Some(deadlocks) = self.deadlocks.as_mut() {
                for event in deadlocks.check(self.decoder.realtime_ns(now)) {
                    flow.reorder.push(now, Staged::System(event));
                }
            }
            self.share_after_main_thread(&mut main_threads, &mut flow);
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

        // Nothing is recorded from here on, however long the probes take to go away; records
        // written before are still in the rings: read them after.
        self.datapath.set_recording(&RecordingMasks::default())?;
        let tracepoints = self.datapath.take_tracepoint_links();
        std::thread::scope(|scope| {
            scope.spawn(move || drop(tracepoints));
            self.probes.detach_all();
        });
        self.drain(&mut flow)?;
        // Written first: the records among them place the gaps they follow.
        self.write_released(&mut flow, None)?;
        // What is still traced is detached now; losses no record came after are placed last.
        let end_ns = self.decoder.realtime_ns(kernel::monotonic_ns());
        let mut still_traced: Vec<u32> = flow.described.iter().copied().collect();
        still_traced.sort_unstable();
        self.write(
            still_traced.into_iter().map(Staged::Exited).collect(),
            &mut flow,
        )?;
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
        flow.lossless_stops += self.datapath.stopped().resume_at_end().len() as u64;
        if let Some(report) = flow.losses.report(std::time::Instant::now()) {
            say!("thrtrace-bpf: {report}");
        }
        // A write that failed in a sink's own thread is a failed write, said as such.
        self.sinks.sync().context(INCOMPLETE)?;
        let written = self
            .sinks
            .finish(&TraceEnd { lost_per_cpu })
            .context("cannot complete the trace")?;
        if let (Some(pid), None) = (launched_pid, launched_status) {
            say!("thrtrace-bpf: stopped tracing; the command (pid {pid}) is still running");
        }
        // Like `time` and strace: the command's status; stopping by signal or time is success.
        let exit_code = launched_status.map_or(0, exit_code_of);
        let outcome = Outcome {
            records: flow.records,
            written,
            losses: flow.losses,
            lossless_stops: flow.lossless_stops,
            exit_code,
            // Said with -v only; a kernel that cannot tell has nothing to say.
            run_times: self.datapath.programs().run_times().unwrap_or_default(),
        };
        for answer in shutdown_answers {
            let _ = answer.send(Reply::done(format!("shut down: {}", outcome.summary())));
        }
        if let Some(controller) = self.controller.take() {
            controller.close().await;
        }
        Ok(outcome)
    }

    /// Once a second: the threads seen in the last second whose name (comm) has changed get a
    /// THREAD_NAME event with the new one.
    fn renamed_threads(&mut self, flow: &mut Flow) {
        flow.seconds += 1;
        if flow.facts.is_none() {
            return;
        }
        let now = kernel::monotonic_ns();
        let time_ns = self.decoder.realtime_ns(now);
        let recent = flow.seconds - 1;
        let mut renamed = Vec::new();
        // A thread whose first name is not written yet (it waits in the reorder stage) is not
        // renamed.
        let renamable = |seen: &ThreadSeen| seen.seen >= recent && !seen.name.is_empty();
        for (&lwpid, seen) in flow.named_threads.iter_mut().filter(|(_, s)| renamable(s)) {
            if let Some(event) = facts::thread_name(seen.pid, lwpid, time_ns)
                && let SystemKind::ThreadName { name } = &event.kind
                && *name != seen.name
            {
                seen.name = name.clone();
                renamed.push(event);
            }
        }
        for event in renamed {
            flow.reorder.push(now, Staged::System(event));
        }
    }

    /// Answers a controller's request, or says it is to be answered at the end (shutdown).
    fn answer(
        &mut self,
        asked: Asked,
        flow: &mut Flow,
        targets: &HashSet<u32>,
    ) -> Result<Option<oneshot::Sender<Reply>>> {
        let Asked { request, answer } = asked;
        let now = kernel::monotonic_ns();
        let now_ns = self.decoder.realtime_ns(now);
        let change = match request {
            Request::Status => {
                let status = self.status(flow, targets);
                let _ = answer.send(Reply::Status(Box::new(status)));
                return Ok(None);
            }
            Request::Shutdown => return Ok(Some(answer)),
            Request::Flush | Request::Clear => {
                let action = match request {
                    Request::Flush => Action::Flush(FlushCause::Controller),
                    _ => Action::Clear,
                };
                // Done once everything stamped before now is written.
                let answer = Some(answer);
                flow.reorder.push(now, Staged::Act { action, answer });
                return Ok(None);
            }
            Request::Start => self
                .recording
                .set_running(true, now_ns)
                .ok_or("running already"),
            Request::Stop => self
                .recording
                .set_running(false, now_ns)
                .ok_or("stopped already"),
            Request::Filter { how, events } => match self.recording.filter(how, &events, now_ns) {
                Ok(event) => Ok(event),
                Err(refusal) => {
                    let _ = answer.send(Reply::refused(refusal));
                    return Ok(None);
                }
            },
        };
        let event = match change {
            Ok(event) => event,
            // Nothing to change: done, as POSIX's start of a running stream is.
            Err(already) => {
                let _ = answer.send(Reply::done(already));
                return Ok(None);
            }
        };
        self.datapath.set_recording(&self.recording.masks())?;
        let message = match &event.kind {
            SystemKind::Start { .. } => "started".to_owned(),
            SystemKind::Stop { .. } => "stopped".to_owned(),
            _ => format!("recording {}", self.recording.selected().spec()),
        };
        let action = Action::Select {
            events: self.recording.decoded(),
            event,
        };
        flow.reorder.push(
            now,
            Staged::Act {
                action,
                answer: None,
            },
        );
        let _ = answer.send(Reply::done(message));
        Ok(None)
    }

    /// `ctl status`.
    fn status(&self, flow: &Flow, targets: &HashSet<u32>) -> StatusReport {
        let state = self.sinks.state();
        let status = state.status.unwrap_or_default();
        let running = self.recording.running() && (state.status.is_none() || status.running);
        let flag =
            |set: bool, yes: &str, no: &str| format!("POSIX_TRACE_{}", if set { yes } else { no });
        let mut targets: Vec<u32> = targets.iter().copied().collect();
        targets.sort_unstable();
        StatusReport {
            name: self.name.clone(),
            pid: std::process::id(),
            posix_stream_status: flag(running, "RUNNING", "SUSPENDED"),
            posix_stream_full_status: flag(status.full, "FULL", "NOT_FULL"),
            posix_stream_overrun_status: flag(status.overrun, "OVERRUN", "NO_OVERRUN"),
            posix_stream_flush_status: flag(status.flushing, "FLUSHING", "NOT_FLUSHING"),
            posix_stream_flush_error: i32::from(status.flush_error),
            posix_log_overrun_status: flag(status.log_overrun, "OVERRUN", "NO_OVERRUN"),
            posix_log_full_status: flag(status.log_full, "FULL", "NOT_FULL"),
            events: self.recording.selected().spec(),
            recorded: self
                .recording
                .selected()
                .names()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            filtered_out: self.recording.selected().filtered_out(),
            records: flow.records,
            lost: flow.losses.total(),
            rate: flow.rate.per_second,
            uptime_s: flow.started.elapsed().as_secs_f64(),
            targets,
            system_wide: self.until_stopped,
            sinks: state.descriptions,
        }
    }

    /// Does what a controller, a signal or a long block asked, now that everything stamped
    /// before the request has been written.
    fn act(&mut self, action: Action, answer: Option<oneshot::Sender<Reply>>) -> Result<()> {
        let reply = match action {
            Action::Select { events, event } => {
                self.decoder.select(events);
                self.sinks.system_event(&event).context(INCOMPLETE)?;
                return Ok(());
            }
            Action::Clear => {
                let dropped = self.sinks.clear().context(INCOMPLETE)?;
                Reply::done(format!("cleared: {dropped} events dropped from the stream"))
            }
            Action::Flush(cause) => {
                if let FlushCause::Blocked(event) = &cause {
                    self.sinks.system_event(event).context(INCOMPLETE)?;
                    let may_flush = self
                        .blocks
                        .as_mut()
                        .is_some_and(|blocks| blocks.may_flush(std::time::Instant::now()));
                    if !may_flush {
                        return Ok(());
                    }
                }
                self.sinks.flush().context(INCOMPLETE)?;
                match &cause {
                    FlushCause::Signal => say!("thrtrace-bpf: flushed (SIGUSR1)"),
                    FlushCause::Blocked(event) => {
                        say!("thrtrace-bpf: flushed: {}", describe_block(event))
                    }
                    FlushCause::Controller => {}
                }
                Reply::done("flushed")
            }
        };
        if let Some(answer) = answer {
            let _ = answer.send(reply);
        }
        Ok(())
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
    /// pidfd tells of that (the kernel holds its wakeup back while other threads run), so a
    /// pass reads /proc/PID/stat of those processes, if `MAIN_THREAD_POLL` has passed since
    /// the last did. A process moves once its main thread has been gone for
    /// `MAIN_THREAD_SETTLE`: one exiting as a whole is gone by then, or has no thread left to
    /// be seen through.
    fn share_after_main_thread(&mut self, main_threads: &mut MainThreads, flow: &mut Flow) {
        let now = Instant::now();
        if main_threads
            .checked
            .is_some_and(|at| now.duration_since(at) < MAIN_THREAD_POLL)
        {
            return;
        }
        main_threads.checked = Some(now);
        let gone = &mut main_threads.gone;
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
        flow.drawers.begin_pass()?;
        let Flow {
            reorder,
            facts,
            described,
            named_threads,
            seconds,
            drawers,
            ..
        } = flow;
        // The thread of the previous record: records come in runs of one thread, whose
        // process and name are known after the first (and `seconds` holds for the pass).
        let mut previous = None;
        let mut arrive = |pulled: Pulled| {
            let Pulled {
                ktime_ns,
                pid,
                lwpid,
                drawn,
            } = pulled;
            // A process or thread first seen: its facts are read now, while it most likely
            // still lives, and placed just before its record.
            if let Some(facts) = facts.as_mut()
                && previous.replace((pid, lwpid)) != Some((pid, lwpid))
            {
                let time_ns = drawn.time_ns;
                let mut events = Vec::new();
                if described.insert(pid) {
                    events.extend(facts.attached(pid, time_ns));
                }
                for event in events {
                    reorder.push(ktime_ns, Staged::System(event));
                }
                // A thread first seen is named when its first record is written: a thread
                // that names itself as it starts has done so by then. The name it has now
                // stands in if it is gone by then.
                match named_threads.entry(lwpid) {
                    Entry::Occupied(mut seen) => seen.get_mut().seen = *seconds,
                    Entry::Vacant(slot) => {
                        let name = facts::thread_name(pid, lwpid, time_ns);
                        slot.insert(ThreadSeen {
                            pid,
                            name: String::new(),
                            seen: *seconds,
                        });
                        let staged = Staged::ThreadName { lwpid, first: name };
                        reorder.push(ktime_ns, staged);
                    }
                }
            }
            reorder.push_record(ktime_ns, drawn)
        };
        let decoder = &self.decoder;
        let drained = self
            .datapath
            .drain(|cpu, raw| arrive(Pulled::new(decoder, cpu, raw)));
        let drained = drained.merge(drawers.end_pass(&mut arrive)?);
        flow.losses.add_undecodable(drained.malformed);
        // Every ring read to its end: what --lossless stopped may run again.
        if drained.behind_after.is_none() {
            flow.lossless_stops += self.datapath.stopped().resume().len() as u64;
        }
        self.write_released(flow, Some((pass_start, drained.behind_after)))?;
        self.sinks.batch_done().context(INCOMPLETE)?;
        let lost = self.datapath.lost_per_cpu()?;
        if let Some(report) = flow.losses.update(lost, std::time::Instant::now()) {
            say!("thrtrace-bpf: {report}");
        }
        Ok(())
    }

    /// Hands `items` to the sinks in order (see `write_item`), then ends the batch.
    fn write(&mut self, items: Vec<Staged>, flow: &mut Flow) -> Result<()> {
        for item in items {
            self.write_item(item, flow)?;
        }
        self.sinks.batch_done().context(INCOMPLETE)
    }

    /// Writes what the reorder stage releases, as it releases it (a record read where it
    /// waits): what the pass ending with `until` (pass start, oldest unread) completes, or
    /// with `None` everything.
    fn write_released(&mut self, flow: &mut Flow, until: Option<(u64, Option<u64>)>) -> Result<()> {
        let mut reorder = std::mem::replace(&mut flow.reorder, Reorder::new(LATE_COMMIT_NS));
        let mut written = Ok(());
        let mut sink = |item: Released<'_, Drawn, Staged>| {
            if written.is_ok() {
                written = match item {
                    Released::Record(drawn) => self.write_record(drawn, flow),
                    Released::Other(item) => self.write_item(*item, flow),
                };
            }
        };
        match until {
            Some((pass_start, behind_after)) => {
                reorder.release(pass_start, behind_after, &mut sink)
            }
            None => reorder.release_all(&mut sink),
        }
        flow.reorder = reorder;
        written
    }

    /// Hands one item other than a record to the sinks (or does it): a process first seen
    /// with its facts, a thread first seen with its name.
    fn write_item(&mut self, item: Staged, flow: &mut Flow) -> Result<()> {
        match item {
            Staged::System(event) => self.sinks.system_event(&event).context(INCOMPLETE),
            Staged::Act { action, answer } => self.act(action, answer),
            Staged::ThreadName { lwpid, first } => {
                if let Some(event) = name_now(flow, lwpid, first) {
                    self.sinks.system_event(&event).context(INCOMPLETE)?;
                }
                Ok(())
            }
            Staged::Exited(pid) => {
                flow.exiting.remove(&pid);
                flow.processes.remove(&pid);
                flow.last_recorded_pid = None;
                if let Some(blocks) = self.blocks.as_mut() {
                    blocks.process_exited(pid);
                }
                if let Some(deadlocks) = self.deadlocks.as_mut() {
                    deadlocks.process_exited(pid);
                }
                if flow.described.remove(&pid) {
                    let now = self.decoder.realtime_ns(kernel::monotonic_ns());
                    let detach = SystemEvent::of_process(now, pid, 0, SystemKind::ProcessDetach);
                    self.sinks.system_event(&detach).context(INCOMPLETE)?;
                }
                self.sinks.process_exited(pid).context(INCOMPLETE)
            }
        }
    }

    /// Writes a drawn record, after the overflow of the gap before it if there was one.
    fn write_record(&mut self, drawn: &Drawn, flow: &mut Flow) -> Result<()> {
        let Drawn {
            ref record,
            time_ns,
            cpu,
            lost_before,
            owner_hint,
        } = *drawn;
        if lost_before > 0 {
            let lost = u64::from(lost_before);
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
        match record {
            Some(record) if self.decoder.selects(record) => {
                if flow.last_recorded_pid != Some(record.pid) {
                    flow.processes.insert(record.pid);
                    flow.last_recorded_pid = Some(record.pid);
                }
                flow.records += 1;
                self.sinks.record(record).context(INCOMPLETE)?;
                if let Some(event) = self.blocks.as_mut().and_then(|b| b.record(record)) {
                    self.act(Action::Flush(FlushCause::Blocked(event)), None)?;
                }
                if let Some(deadlocks) = self.deadlocks.as_mut() {
                    deadlocks.record(record, owner_hint);
                }
            }
            // A call of the kind not selected (a plain mutex when only rmutex is).
            Some(_) => {}
            None => {
                flow.losses.add_undecodable(1);
                let lost = overflow(time_ns, 1, cpu, LossSource::Undecodable);
                self.sinks.system_event(&lost).context(INCOMPLETE)?;
            }
        }
        Ok(())
    }
}

/// What a failed write of the trace means.
const INCOMPLETE: &str = "cannot write trace records; the trace is incomplete";

/// Targets with links of their own whose main thread has been seen gone, and since when; and
/// when they were last looked for.
#[derive(Default)]
struct MainThreads {
    gone: HashMap<u32, Instant>,
    checked: Option<Instant>,
}

/// What else waits in the reorder stage, among the records.
enum Staged {
    System(SystemEvent),
    /// A process has exited: once everything before is written, its files are completed.
    Exited(u32),
    /// A thread first seen: its name is read when this is written (`first`: as it was when
    /// its first record was read, in case it is gone by then).
    ThreadName {
        lwpid: u32,
        first: Option<SystemEvent>,
    },
    /// Something asked of the sinks or the decoder, done once everything before is written;
    /// `answer` is the controller's, if it asked.
    Act {
        action: Action,
        answer: Option<oneshot::Sender<Reply>>,
    },
}

enum Action {
    /// From here on the decoder keeps `events` (none while stopped); `event` (START, STOP,
    /// FILTER) says why.
    Select {
        events: EventSet,
        event: SystemEvent,
    },
    Flush(FlushCause),
    Clear,
}

enum FlushCause {
    /// SIGUSR1.
    Signal,
    Controller,
    /// `--flush-on-block`: a call blocked too long; the event says which (written first).
    Blocked(SystemEvent),
}

/// "thread 4251 (pid 4242) blocked 250 ms in mutex_lock(0x55d0c0a4e0c0)".
fn describe_block(event: &SystemEvent) -> String {
    let SystemKind::Blocked {
        call,
        object,
        blocked_ns,
        returned,
    } = &event.kind
    else {
        return event.kind.name().to_owned();
    };
    format!(
        "thread {} (pid {}) {} {} ms in {call}({object:#x})",
        event.lwpid,
        event.pid,
        if *returned {
            "was blocked"
        } else {
            "has been blocked"
        },
        blocked_ns / 1_000_000
    )
}

/// Records per second, measured over the last second.
#[derive(Default)]
struct Rate {
    last: Option<(Instant, u64)>,
    per_second: f64,
}

impl Rate {
    fn sample(&mut self, records: u64) {
        let now = Instant::now();
        if let Some((then, before)) = self.last {
            let seconds = now.duration_since(then).as_secs_f64();
            if seconds > 0.0 {
                self.per_second = (records - before) as f64 / seconds;
            }
        }
        self.last = Some((now, records));
    }
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
    /// The threads that drain the rings shared out, if any.
    drawers: DrawThreads,
    reorder: Reorder<Drawn, Staged>,
    /// Processes with records written whose exit has not been handled yet: system-wide, the
    /// ones to look for; under `--follow`, the children to watch.
    processes: HashSet<u32>,
    /// The process of the last record written, which `processes` holds (records come in runs
    /// of one process: one lookup per run, not per record).
    last_recorded_pid: Option<u32>,
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
    /// Threads whose name is in the stream: that name, and the second they were last seen in.
    named_threads: HashMap<u32, ThreadSeen>,
    /// Seconds since the trace began, as counted by the session's once-a-second tick.
    seconds: u64,
    started: Instant,
    rate: Rate,
}

struct ThreadSeen {
    pid: u32,
    name: String,
    seen: u64,
}

/// The THREAD_NAME event of thread `lwpid` first seen: its name now, or the one it had when
/// first seen if it is gone; none if that name is the one in the stream already.
fn name_now(flow: &mut Flow, lwpid: u32, first: Option<SystemEvent>) -> Option<SystemEvent> {
    let seen = flow.named_threads.get_mut(&lwpid)?;
    let time_ns = first.as_ref()?.time_ns;
    let event = facts::thread_name(seen.pid, lwpid, time_ns).or(first)?;
    let SystemKind::ThreadName { name } = &event.kind else {
        return None;
    };
    if *name == seen.name {
        return None;
    }
    seen.name = name.clone();
    Some(event)
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

/// The next controller's request, if there is a control socket; never, if not.
async fn next_request_of(controller: &mut Option<Controller>) -> Option<Asked> {
    match controller {
        Some(controller) => controller.next().await,
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
