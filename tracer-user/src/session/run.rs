//! The session's loop. It waits for whichever comes first: a ring's wakeup or the poll timer, a
//! signal, a controller's request, an exec to follow, a target's exit, the once-a-second tick,
//! or the end of `--duration`; hands it to its handler; then makes a pass ([`Session::pass`]):
//! drain the rings, watch the calls and the targets, and tell whether the trace goes on. Once
//! it ends, [`Session::finish`] detaches, writes what is left, and completes the files.
//!
//! The BPF side wakes the reader only when a ring fills another sixteenth; otherwise records
//! wait for the poll timer, which bounds their latency (`POLL_INTERVAL_*`) without a wakeup
//! per record.

use std::{os::fd::OwnedFd, process::ExitStatus, sync::Arc, time::Duration};

use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::{Notify, mpsc, oneshot},
    time::{Instant, Interval, MissedTickBehavior},
};
use tracer_common::RecordingMasks;
use tracer_model::event::{LossSource, SystemEvent, SystemKind};

use super::{
    Outcome, Result, Session, TraceError,
    control::{Asked, Controller},
    flow::{Action, FlushCause, Staged, overflow},
    short_waits::ShortWaits,
};
use crate::{
    attach::exec_follow::Followed,
    capture::{datapath::DataPath, kernel},
    control::Reply,
    signals::TraceSignal,
    sinks::{Buffering, Sink, TraceEnd},
};

const POLL_INTERVAL_BUFFERED: Duration = Duration::from_millis(100);
const POLL_INTERVAL_UNBUFFERED: Duration = Duration::from_millis(10);

/// How long a launched command may take to exit after the tracer is signalled: the terminal's
/// Ctrl-C reaches it too, and its exit status should be the tracer's.
const LAUNCHED_EXIT_GRACE: Duration = Duration::from_millis(500);

/// How often the record rate (`ctl status`) is measured, and system-wide tracing looks for
/// processes that have exited.
const RATE_INTERVAL: Duration = Duration::from_secs(1);

/// What wakes the session to drain the rings, its timers, and how it is being asked to end.
pub(super) struct Clock {
    /// Notified whenever a ring is readable (the BPF side wakes it at each sixteenth).
    wakeups: Arc<Notify>,
    /// Drains the rings when no wakeup came.
    poll: Interval,
    /// The rate, renamed threads and (system-wide) the processes gone.
    each_second: Interval,
    /// `--duration`.
    deadline: Option<Instant>,
    /// Asked to stop while the launched command runs: it may exit until then.
    grace: Option<Instant>,
    /// A signal or `ctl shutdown` asked the trace to end.
    stop_asked: bool,
    /// `ctl shutdown`: answered once the trace is complete.
    shutdown_answers: Vec<oneshot::Sender<Reply>>,
}

impl Clock {
    /// Wakeups from every ring of `datapath` (before its rings are shared out), and timers for
    /// a trace that polls as `buffering` says, for `duration` if given. Needs the runtime's
    /// context.
    pub(super) fn new(
        datapath: &DataPath,
        buffering: Buffering,
        duration: Option<Duration>,
    ) -> Result<Self> {
        let wakeups = Arc::new(Notify::new());
        let fds = datapath
            .ring_fds()
            .map_err(TraceError::output("cannot watch the ring buffers"))?;
        for fd in fds {
            watch_ring(fd, Arc::clone(&wakeups))?;
        }
        let interval = match buffering {
            Buffering::EachRecord => POLL_INTERVAL_UNBUFFERED,
            Buffering::Buffered => POLL_INTERVAL_BUFFERED,
        };
        let mut poll = tokio::time::interval(interval);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut each_second = tokio::time::interval(RATE_INTERVAL);
        each_second.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ok(Clock {
            wakeups,
            poll,
            each_second,
            deadline: duration.map(|d| Instant::now() + d),
            grace: None,
            stop_asked: false,
            shutdown_answers: Vec::new(),
        })
    }
}

/// What woke the session.
enum Wakeup {
    /// A ring's wakeup or the poll timer: only the pass is due.
    Poll,
    Signal(TraceSignal),
    Second,
    Request(Asked),
    Followed(Followed),
    Exited(u32),
    /// `--duration` or the launched command's grace is over.
    TimeUp,
}

impl Session {
    /// Runs the trace until a stop condition; returns how it ended.
    pub async fn run(mut self) -> Result<Outcome> {
        self.sinks
            .begin()
            .map_err(TraceError::output("cannot start writing the trace"))?;
        // Everything is loaded: a held SIGINT or SIGTERM is delivered now, and ends the trace.
        self.signals.release().map_err(TraceError::ReleaseSignals)?;
        self.watched.start();
        loop {
            let wakeup = tokio::select! {
                _ = self.clock.poll.tick() => Wakeup::Poll,
                () = self.clock.wakeups.notified() => Wakeup::Poll,
                signal = self.signals.recv() => Wakeup::Signal(signal),
                () = sleep_until(self.clock.deadline) => Wakeup::TimeUp,
                () = sleep_until(self.clock.grace) => Wakeup::TimeUp,
                _ = self.clock.each_second.tick() => Wakeup::Second,
                Some(asked) = next_request_of(&mut self.controller) => Wakeup::Request(asked),
                Some(followed) = next_request(&mut self.exec_requests) => {
                    Wakeup::Followed(followed)
                }
                Some(pid) = self.watched.exits.recv() => Wakeup::Exited(pid),
            };
            match wakeup {
                Wakeup::Poll => {}
                Wakeup::Signal(signal) => self.on_signal(signal),
                Wakeup::Second => self.on_second(),
                Wakeup::Request(asked) => self.on_request(asked)?,
                Wakeup::Followed(followed) => self.on_followed(followed),
                Wakeup::Exited(pid) => self.on_exited(pid),
                Wakeup::TimeUp => break,
            }
            if !self.pass()? {
                break;
            }
        }
        self.finish().await
    }

    /// SIGINT and SIGTERM end the trace; SIGUSR1 flushes it once what came before is written.
    fn on_signal(&mut self, signal: TraceSignal) {
        match signal {
            TraceSignal::Stop => self.clock.stop_asked = true,
            TraceSignal::Flush => {
                let action = Action::Flush(FlushCause::Signal);
                let staged = Staged::Act {
                    action,
                    answer: None,
                };
                self.flow.reorder.push(kernel::monotonic_ns(), staged);
            }
        }
    }

    /// Once a second: the record rate is measured, renamed threads are named again and the
    /// short waits counted are told; system-wide, where there is no pidfd per process, the
    /// processes gone are looked for, and pthread libraries that have appeared.
    fn on_second(&mut self) {
        self.flow.rate.sample(self.flow.records);
        self.renamed_threads();
        self.tell_short_waits();
        if self.until_stopped {
            self.look_around();
        }
    }

    /// A controller's request: answered now, once in force, or (shutdown) at the end.
    fn on_request(&mut self, asked: Asked) -> Result<()> {
        if let Some(answer) = self.answer(asked)? {
            self.clock.shutdown_answers.push(answer);
            self.clock.stop_asked = true;
        }
        Ok(())
    }

    /// Under `--follow`: an image just exec'd is probed while its process waits; a fork is
    /// written, for the sinks that keep system events.
    fn on_followed(&mut self, followed: Followed) {
        match followed {
            Followed::Exec(request) => {
                self.attach_after_exec(&request);
                let _ = request.done.send(());
            }
            Followed::Fork {
                parent,
                child,
                ktime_ns,
            } if self.flow.facts.is_some() => {
                let time_ns = self.decoder.realtime_ns(ktime_ns);
                let kind = SystemKind::Fork { parent };
                let fork = SystemEvent::of_process(time_ns, child, 0, kind);
                self.flow.reorder.push(ktime_ns, Staged::System(fork));
            }
            Followed::Fork { .. } => {}
        }
    }

    /// A target's pidfd says it exited (with any others that did meanwhile).
    fn on_exited(&mut self, pid: u32) {
        self.watched.exited.push(pid);
        while let Ok(pid) = self.watched.exits.try_recv() {
            self.watched.exited.push(pid);
        }
    }

    /// Drains the rings, tells the sinks that time passed (the watches look for calls still
    /// blocked and deadlocks), watches the targets; returns whether the trace goes on.
    fn pass(&mut self) -> Result<bool> {
        self.drain()?;
        let now = kernel::monotonic_ns();
        // Time passing shows calls still blocked and deadlocks: what the watches find is
        // placed in time order.
        self.sinks.time_passed(self.decoder.realtime_ns(now));
        while let Some(finding) = self.found.take() {
            self.flow.reorder.push(now, finding.into());
        }
        self.watch_own_targets_threads();
        self.execs_without_follow();
        if self.follow {
            self.watched.follow(&self.flow.processes);
        }
        self.handle_exits()?;
        if self.watched.running.is_empty() && !self.until_stopped {
            return Ok(false);
        }
        if self.clock.stop_asked {
            if !self.watched.launched_running() {
                return Ok(false);
            }
            let grace = Instant::now() + LAUNCHED_EXIT_GRACE;
            self.clock.grace.get_or_insert(grace);
        }
        Ok(true)
    }

    /// Ends the trace: stops recording, detaches, writes what is left in time order, places
    /// the losses no record came after, and completes the files.
    async fn finish(mut self) -> Result<Outcome> {
        // Nothing is recorded from here on, however long the probes take to go away; records
        // written before are still in the rings: read them after.
        self.datapath.set_recording(&RecordingMasks::default())?;
        // A program already running when recording stopped may still write its record until
        // the links' grace periods are over, unless every traced process has exited (with
        // --follow or system-wide, processes not watched may be traced).
        let in_flight = self.follow || self.until_stopped || self.watched.may_run();
        let tracepoints = self.datapath.take_tracepoint_links();
        self.probes.detach_all(tracepoints, in_flight);
        self.drain()?;
        // Written first: the records among them place the gaps they follow; then the last
        // short waits, paired as they were written.
        self.write_released(None)?;
        self.tell_short_waits();
        self.write_released(None)?;
        // What is still traced is detached now; losses no record came after are placed last.
        let end_ns = self.decoder.realtime_ns(kernel::monotonic_ns());
        let mut still_traced: Vec<u32> = self.flow.described.iter().copied().collect();
        still_traced.sort_unstable();
        self.write(still_traced.into_iter().map(Staged::Exited).collect())?;
        let lost_per_cpu = self.datapath.lost_per_cpu()?;
        let mut unplaced = Vec::new();
        for (cpu, &lost) in (0..).zip(&lost_per_cpu) {
            let placed = self.flow.placed.get(cpu as usize).copied().unwrap_or(0);
            if lost > placed {
                let gap = overflow(end_ns, lost - placed, cpu, LossSource::Ring);
                unplaced.push(Staged::System(gap));
            }
        }
        self.write(unplaced)?;
        self.flow.lossless_stops += self.datapath.stopped().resume_at_end().len() as u64;
        if let Some(report) = self.flow.losses.report(std::time::Instant::now()) {
            say!("thrtrace-bpf: {report}");
        }
        let left_out = self.flow.stacks_left_out;
        if left_out.records > 0 {
            say!(
                "thrtrace-bpf: {} records carry no call stack ({}): they came while their CPU's \
                 ring was too full for their copy (the tracer behind); a larger --buffer-kib \
                 gives it more time",
                left_out.records,
                left_out.figures(self.flow.stack_share.records)
            );
        }
        // A write that failed in a sink's own thread is a failed write, said as such.
        self.sinks.sync().map_err(TraceError::Incomplete)?;
        let written = self
            .sinks
            .finish(&TraceEnd { lost_per_cpu })
            .map_err(TraceError::Complete)?;
        let (launched_pid, launched_status) =
            (self.watched.launched_pid, self.watched.launched_status);
        if let (Some(pid), None) = (launched_pid, launched_status) {
            // Never ended by the tracer: tracing must not change what the command does.
            say!(
                "thrtrace-bpf: stopped tracing; the command (pid {pid}) runs on, untraced, and \
                 its exit status is not the tracer's (kill {pid} ends it)"
            );
        }
        let controller = self.controller.take();
        let shutdown_answers = std::mem::take(&mut self.clock.shutdown_answers);
        // Said with -v only; a kernel that cannot tell has nothing to say.
        let run_times = self.datapath.programs().run_times().unwrap_or_default();
        let outcome = Outcome {
            records: self.flow.records,
            written,
            losses: self.flow.losses,
            lossless_stops: self.flow.lossless_stops,
            stack_share: self.flow.stack_share,
            short_waits: self.flow.short_waits.as_ref().map(ShortWaits::counted),
            // Like `time` and strace: the command's status; stopping by signal or time is
            // success.
            exit_code: launched_status.map_or(0, exit_code_of),
            run_times,
        };
        for answer in shutdown_answers {
            let _ = answer.send(Reply::done(format!("shut down: {}", outcome.summary())));
        }
        if let Some(controller) = controller {
            controller.close().await;
        }
        Ok(outcome)
    }
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
    let ready = register(fd).map_err(TraceError::output("cannot watch a ring buffer"))?;
    tokio::spawn(async move {
        while let Ok(mut guard) = ready.readable().await {
            guard.clear_ready();
            wakeups.notify_one();
        }
    });
    Ok(())
}

/// Watches an owned descriptor for readability.
pub(super) fn register(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd owns `fd`, so it stays open and the same for the AsyncFd's lifetime.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into_parts().1)
}
