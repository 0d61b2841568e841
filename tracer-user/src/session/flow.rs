//! The way of records and the session's own events from the rings to the sinks: drawn and
//! decoded ([`crate::capture::draw`]), put in time order with the system events the session
//! makes (a process first seen or gone, a gap, an error, a controller's action) by the reorder
//! stage, then handed to the sinks, the outputs and the watches ([`Flow`], `Session::drain`);
//! what the watches find comes back to be written too ([`Finding`]).

use std::{
    collections::hash_map::Entry,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
};

// Per-record sets (processes and threads seen): a fast hasher rather than SipHash.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use tokio::{sync::oneshot, time::Instant};
use tracer_common::Which;
use tracer_model::{
    TraceRecord,
    event::{LossSource, NO_CPU, SystemEvent, SystemKind},
    selection::EventSet,
    stack::{LeftOut, StackShare},
};

use super::{
    Result, Session, TraceError, facts,
    facts::{Facts, HeldFacts},
    short_waits::{ShortWaits, Sorted},
    stacks::{Reach, StackIds, Unwinder, Unwound},
};
use crate::{
    capture::{
        datapath::Rings,
        decode::Decoder,
        draw::{DrawThreads, Drawn, Pulled},
        kernel,
        loss::Losses,
        reorder::{LATE_COMMIT_NS, Released, Reorder},
        stack_tops::StackTops,
    },
    control::Reply,
    sinks::Sink,
};

/// Records between the rings and the sinks, and those that never arrived.
pub(super) struct Flow {
    /// The threads that drain the rings shared out, if any.
    pub(super) drawers: DrawThreads,
    pub(super) reorder: Reorder<Drawn, Staged>,
    /// Processes with records written whose exit has not been handled yet: system-wide, the
    /// ones to look for; under `--follow`, the children to watch.
    pub(super) processes: HashSet<u32>,
    /// The process of the last record written, which `processes` holds (records come in runs
    /// of one process: one lookup per run, not per record).
    pub(super) last_recorded_pid: Option<u32>,
    /// The thread of the last record written (a thread's name is looked for once per run).
    last_recorded_lwpid: Option<u32>,
    /// Processes whose exit waits in the reorder stage.
    pub(super) exiting: HashSet<u32>,
    pub(super) losses: Losses,
    /// Per CPU, the losses placed in the stream by the records that came after them.
    pub(super) placed: Vec<u64>,
    pub(super) lossless_stops: u64,
    /// Records handed to the sinks.
    pub(super) records: u64,
    /// Set when a sink keeps system events: the facts about processes are read then only.
    pub(super) facts: Option<Facts>,
    /// Processes whose facts are in the stream (a detach event ends them).
    pub(super) described: HashSet<u32>,
    /// The facts of processes first seen, till they are placed before their first record.
    pub(super) held_facts: HeldFacts,
    /// Threads whose name is in the stream: that name, and the second they were last seen in.
    pub(super) named_threads: HashMap<u32, ThreadSeen>,
    /// Seconds since the trace began, as counted by the session's once-a-second tick.
    pub(super) seconds: u64,
    pub(super) started: Instant,
    pub(super) rate: Rate,
    /// Unwinds the stacks records are taken with (`--stacks`), and names each once.
    pub(super) unwinder: Unwinder,
    /// Tells the BPF side where each thread's stack begins, as unwinding learns it.
    pub(super) stack_tops: Option<StackTops>,
    pub(super) stack_ids: StackIds,
    /// Which records carry their stack (`tracer_common::STACKS_*`).
    pub(super) stacks: u32,
    /// Records written that came without the stack they were to carry (the BPF side leaves it
    /// out when its CPU's ring is too full for the copy), and the rate they came at.
    pub(super) stacks_left_out: LeftOut,
    /// Of the records that were to carry a stack, those whose stack is whole.
    pub(super) stack_share: StackShare,
    /// `--min-wait`: the waits shorter than it, counted and not written.
    pub(super) short_waits: Option<ShortWaits>,
}

impl Flow {
    /// Records from the rings shared out in `shares` (drawn by threads of their own) and the
    /// session's own; `early` system events first. `facts`, where a sink keeps system events:
    /// what reads the facts about processes, those it read for `early` known to it;
    /// `described`: the processes whose facts are among `early`.
    pub fn new(
        shares: Vec<Rings>,
        decoder: &Decoder,
        facts: Option<Facts>,
        described: HashSet<u32>,
        early: Vec<(u64, SystemEvent)>,
        short_waits: Option<ShortWaits>,
    ) -> Result<Self> {
        let late_ns = LATE_COMMIT_NS + short_waits.as_ref().map_or(0, ShortWaits::late_ns);
        let mut reorder = Reorder::new(late_ns);
        for (ktime, event) in early {
            reorder.push(ktime, Staged::System(event));
        }
        Ok(Flow {
            drawers: DrawThreads::start(shares, decoder)?,
            reorder,
            processes: HashSet::new(),
            last_recorded_pid: None,
            last_recorded_lwpid: None,
            exiting: HashSet::new(),
            losses: Losses::new(std::time::Instant::now()),
            placed: Vec::new(),
            lossless_stops: 0,
            records: 0,
            facts,
            described,
            held_facts: HeldFacts::default(),
            named_threads: HashMap::new(),
            seconds: 0,
            started: Instant::now(),
            rate: Rate::default(),
            unwinder: Unwinder::default(),
            stack_tops: None,
            stack_ids: StackIds::default(),
            stacks: tracer_common::STACKS_NONE,
            stacks_left_out: LeftOut::default(),
            stack_share: StackShare::default(),
            short_waits,
        })
    }
}

/// What else waits in the reorder stage, among the records.
pub(super) enum Staged {
    System(SystemEvent),
    /// A process has exited: once everything before is written, its files are completed.
    Exited(u32),
    /// A thread first seen, stamped `time_ns` as its first record was drawn: its name is read
    /// when this is written (the one it had then if it is gone by then, see `ThreadSeen`).
    ThreadName {
        lwpid: u32,
        time_ns: i64,
    },
    /// Something asked of the sinks or the decoder, done once everything before is written;
    /// `answer` is the controller's, if it asked.
    Act {
        action: Action,
        answer: Option<oneshot::Sender<Reply>>,
    },
}

/// What a watch found. The watches are sinks, and a sink cannot write to the others: it
/// reports what it finds through [`Findings`], and the session writes it as an item of the
/// stream: right after the item it was found in, or in time order if time passing showed it
/// ([`Sink::time_passed`]).
pub(super) enum Finding {
    /// A deadlock or a lock-order inversion, said on stderr already: written to every sink.
    Event(SystemEvent),
    /// A call blocked past `--flush-on-block`: its BLOCKED event is written, then the sinks
    /// flushed, at most once per threshold.
    LongBlock(SystemEvent),
}

impl From<Finding> for Staged {
    fn from(finding: Finding) -> Self {
        match finding {
            Finding::Event(event) => Staged::System(event),
            Finding::LongBlock(event) => Staged::Act {
                action: Action::Flush(FlushCause::Blocked(event)),
                answer: None,
            },
        }
    }
}

/// The watches' way back to the session, which holds the receiving end.
#[derive(Clone)]
pub(super) struct Findings {
    sender: mpsc::Sender<Finding>,
    /// Findings sent and not yet taken: counted after each is sent.
    waiting: Arc<AtomicUsize>,
}

impl Findings {
    /// A way back, and the session's end of it.
    pub(super) fn new() -> (Self, Found) {
        let (sender, receiver) = mpsc::channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        let found = Found {
            receiver,
            waiting: Arc::clone(&waiting),
        };
        (Findings { sender, waiting }, found)
    }

    pub(super) fn report(&self, finding: Finding) {
        // The session holds the receiving end for as long as it holds its sinks.
        if self.sender.send(finding).is_ok() {
            self.waiting.fetch_add(1, Ordering::Release);
        }
    }
}

/// The session's end of [`Findings`]. It is looked at after every item written, so a count
/// says whether anything waits: one load, where a look into the channel costs a record's
/// tenth.
pub(super) struct Found {
    receiver: mpsc::Receiver<Finding>,
    waiting: Arc<AtomicUsize>,
}

impl Found {
    /// The oldest finding not taken yet. A count above zero was counted after its finding
    /// was sent, and only this end takes them: the channel holds it.
    pub(super) fn take(&self) -> Option<Finding> {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return None;
        }
        let finding = self.receiver.try_recv().ok()?;
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        Some(finding)
    }
}

pub(super) enum Action {
    /// From here on the decoder keeps `events` (none while stopped); `event` (START, STOP,
    /// FILTER) says why.
    Select {
        events: EventSet,
        event: SystemEvent,
    },
    Flush(FlushCause),
    Clear,
}

pub(super) enum FlushCause {
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
pub(super) struct Rate {
    last: Option<(Instant, u64)>,
    pub(super) per_second: f64,
}

impl Rate {
    pub(super) fn sample(&mut self, records: u64) {
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
pub(super) fn overflow(time_ns: i64, lost: u64, cpu: u32, source: LossSource) -> SystemEvent {
    let kind = SystemKind::Overflow {
        lost,
        cpu,
        source,
        first_lost_ns: 0,
    };
    SystemEvent::new(time_ns, kind)
}

pub(super) struct ThreadSeen {
    pub(super) pid: u32,
    /// The name in the stream (empty: none yet).
    pub(super) name: String,
    pub(super) seen: u64,
    /// Its name when its first record was drawn, in case it is gone when that is written.
    first_name: Option<String>,
    /// Its name has been looked for as a record of it was written.
    looked_for: bool,
}

impl ThreadSeen {
    /// A thread of `pid` first seen in second `seen`, named `first_name` then: no name in the
    /// stream yet.
    fn first_seen(pid: u32, seen: u64, first_name: Option<String>) -> Self {
        ThreadSeen {
            pid,
            name: String::new(),
            seen,
            first_name,
            looked_for: false,
        }
    }

    /// Makes `name` thread `lwpid`'s name in the stream: its THREAD_NAME event, stamped
    /// `time_ns`.
    fn named(&mut self, lwpid: u32, time_ns: i64, name: String) -> SystemEvent {
        self.name.clone_from(&name);
        let kind = SystemKind::ThreadName { name };
        SystemEvent::of_process(time_ns, self.pid, lwpid, kind)
    }
}

/// The THREAD_NAME event of the thread of `record`, about to be written, if its name is not in
/// the stream yet: a thread that migrated can have an earlier record drawn from another CPU's
/// ring after a later one, which its name waits in the reorder stage with. Stamped as the
/// record, so that the stream stays in time order; looked for once.
fn name_before_records(flow: &mut Flow, record: &TraceRecord) -> Option<SystemEvent> {
    flow.facts.as_ref()?;
    let seen = flow.named_threads.get_mut(&record.lwpid)?;
    if !seen.name.is_empty() || seen.looked_for {
        return None;
    }
    seen.looked_for = true;
    let name = facts::comm(seen.pid, record.lwpid).or_else(|| seen.first_name.clone())?;
    Some(seen.named(record.lwpid, record.time_ns() as i64, name))
}

/// The THREAD_NAME event of thread `lwpid` first seen, stamped `time_ns`: its name now, or
/// the one it had when first seen if it is gone; none if it had none then, or if that name is
/// the one in the stream already.
fn name_now(flow: &mut Flow, lwpid: u32, time_ns: i64) -> Option<SystemEvent> {
    let seen = flow.named_threads.get_mut(&lwpid)?;
    let first = seen.first_name.clone()?;
    let name = facts::comm(seen.pid, lwpid).unwrap_or(first);
    (name != seen.name).then(|| seen.named(lwpid, time_ns, name))
}

impl Session {
    /// Reads the rings into the reorder stage and writes what it releases; reads the kernel's
    /// loss counters and reports new losses.
    pub(super) fn drain(&mut self) -> Result<()> {
        let pass_start = kernel::monotonic_ns();
        self.flow.drawers.begin_pass()?;
        let decoder = &self.decoder;
        let Flow {
            reorder,
            facts,
            described,
            held_facts,
            named_threads,
            seconds,
            drawers,
            unwinder,
            stack_tops,
            stack_ids,
            stacks,
            stack_share,
            short_waits,
            ..
        } = &mut self.flow;
        // The thread of the previous record: records come in runs of one thread, whose
        // process and name are known after the first (and `seconds` holds for the pass).
        let mut previous = None;
        let mut arrive = |pulled: Pulled| {
            let Pulled {
                ktime_ns,
                pid,
                lwpid,
                mut drawn,
                stack,
                slow_path,
            } = pulled;
            let new_run = previous.replace((pid, lwpid)) != Some((pid, lwpid));
            // The files a process maps are read at its first record, not its first stack: a
            // process may have exited, its maps gone, by the time a record with a stack comes.
            if new_run && *stacks != tracer_common::STACKS_NONE {
                unwinder.prepare(pid);
            }
            // A process or thread first seen: its facts are read now, while it most likely
            // still lives, and placed just before its first record (`HeldFacts`).
            if let Some(facts) = facts.as_mut()
                && new_run
            {
                let time_ns = drawn.time_ns;
                if described.insert(pid) {
                    held_facts.hold(pid, ktime_ns, facts.attached(pid, time_ns));
                }
                // A thread first seen is named when its first record is written: a thread
                // that names itself as it starts has done so by then. The name it has now
                // stands in if it is gone by then.
                match named_threads.entry(lwpid) {
                    Entry::Occupied(mut seen) => seen.get_mut().seen = *seconds,
                    Entry::Vacant(slot) => {
                        let first_name = facts::comm(pid, lwpid);
                        slot.insert(ThreadSeen::first_seen(pid, *seconds, first_name));
                        reorder.push(ktime_ns, Staged::ThreadName { lwpid, time_ns });
                    }
                }
                // Asked at each run of a thread, not at its first alone: a host id that a
                // thread of another process had is one to tell again.
                let told = facts.thread_seen(pid, lwpid, time_ns);
                if let Some(event) = held_facts.drawn(pid, ktime_ns, told) {
                    reorder.push(ktime_ns, Staged::System(event));
                }
            }
            // Unwound as it arrives, while the process's files are mapped as they were; its
            // stack event, if new, is written just before the first record naming it.
            let wanted = match *stacks {
                tracer_common::STACKS_ALL => true,
                tracer_common::STACKS_SLOW_PATHS => slow_path,
                _ => false,
            };
            // A record of a kind not selected is not written: its stack is neither unwound
            // nor counted. The return half of a call takes none: its entry half has it.
            let written = drawn.record.is_some_and(|r| decoder.selects(&r));
            let wanted =
                wanted && written && drawn.record.is_some_and(|r| r.which != Which::Return);
            let unwound = match stack {
                Some(stack) if written => {
                    let (unwound, reach) = unwinder.unwind(pid, &stack);
                    if let Some(tops) = stack_tops.as_mut() {
                        match reach {
                            Reach::Whole { top } => tops.learn(lwpid, top),
                            Reach::Stopped { top } => tops.learn_partly(lwpid, top),
                            Reach::CopyEnded if stack.top_hint != 0 => tops.cut_short(lwpid),
                            Reach::CopyEnded | Reach::Unread => {}
                        }
                    }
                    Some(unwound)
                }
                // Named as left out, where it happened, and counted as it is written.
                None if wanted => {
                    drawn.stack_left_out = true;
                    Some(Unwound::left_out())
                }
                Some(_) | None => None,
            };
            let whole = unwound.as_ref().map(Unwound::is_whole);
            if let (Some(unwound), Some(record)) = (unwound, drawn.record.as_mut()) {
                // A futex call's instruction is in the function that made the syscall (the C
                // library's `syscall`, or its own lock's wait): where it was called from says
                // more, as a pthread call's return address does.
                if record.event1 == tracer_common::Category::Futex as u16
                    && let Some(&called_from) = unwound.frames.get(1)
                {
                    record.caller = called_from;
                }
                record.stack = stack_ids.intern(pid, unwound);
            }
            // Sorted once its caller is the one a written record of it would have.
            let sorted = match (short_waits.as_mut(), &drawn.record) {
                (Some(waits), Some(record)) if written => {
                    waits.sort(record, slow_path, drawn.lost_before)
                }
                _ => Sorted::Written,
            };
            if sorted == Sorted::Counted {
                if let Some(record) = &drawn.record {
                    stack_ids.withdrawn(record.stack);
                }
                return;
            }
            if let Some(whole) = whole {
                stack_share.count(whole);
            }
            let record = drawn.record;
            let lost_before = drawn.lost_before;
            let placed = reorder.push_record(ktime_ns, drawn);
            if let (Sorted::Half, Some(waits), Some(record)) =
                (sorted, short_waits.as_mut(), record)
            {
                waits.placed(ktime_ns, &record, (placed, lost_before), whole);
            }
        };
        let drained = self
            .datapath
            .drain(|cpu, raw, part, stack| arrive(Pulled::new(decoder, cpu, (raw, part), stack)));
        let drained = drained.merge(drawers.end_pass(&mut arrive)?);
        self.flow.losses.add_undecodable(drained.malformed);
        // Futex calls the kernel did not show the programs: marked where the tracer learnt of
        // them, which is as near as can be told.
        let skipped = self.datapath.futex_skips();
        if let Some((new, report)) = self
            .flow
            .losses
            .update_skipped(skipped, std::time::Instant::now())
        {
            say!("thrtrace-bpf: {report}");
            let time_ns = self.decoder.realtime_ns(pass_start);
            let marker = overflow(time_ns, new, NO_CPU, LossSource::Skipped);
            self.flow.reorder.push(pass_start, Staged::System(marker));
        }
        // Every ring read to its end and at most half full: what --lossless stopped may run
        // again, and is stopped again before its ring is full. (A ring read up to a record
        // still being written, by a program preempted in a target, may be fuller than that.)
        if drained.behind_after.is_none() && !drained.past_half {
            self.flow.lossless_stops += self.datapath.stopped().resume().len() as u64;
        }
        self.write_released(Some((pass_start, drained.incomplete_after())))?;
        self.sinks.batch_done().map_err(TraceError::Incomplete)?;
        let lost = self.datapath.lost_per_cpu()?;
        if let Some(report) = self.flow.losses.update(lost, std::time::Instant::now()) {
            say!("thrtrace-bpf: {report}");
        }
        Ok(())
    }

    /// Hands `items` to the sinks in order (see `write_item`), then ends the batch.
    pub(super) fn write(&mut self, items: Vec<Staged>) -> Result<()> {
        for item in items {
            self.write_item(item)?;
            self.write_findings()?;
        }
        self.sinks.batch_done().map_err(TraceError::Incomplete)
    }

    /// Writes what the reorder stage releases, as it releases it (a record read where it
    /// waits): what the pass ending with `until` (pass start, oldest unread) completes, or
    /// with `None` everything.
    pub(super) fn write_released(&mut self, until: Option<(u64, Option<u64>)>) -> Result<()> {
        let mut reorder = std::mem::replace(&mut self.flow.reorder, Reorder::new(0));
        let releases_before = match until {
            Some((_, incomplete_after)) => reorder.releases_before(incomplete_after),
            None => u64::MAX,
        };
        // Every record stamped before what is handed over, less the bound, has been drawn: the
        // waits that ended by then are known.
        if let Some(waits) = self.flow.short_waits.as_mut() {
            let complete_before = releases_before.saturating_add(waits.late_ns());
            for entry in waits.pair(complete_before, &mut reorder) {
                self.flow.stack_ids.withdrawn(entry.stack);
                if let Some(whole) = entry.whole {
                    self.flow.stack_share.uncount(whole);
                }
            }
        }
        let decoder = &self.decoder;
        self.flow.held_facts.release(
            releases_before,
            |ktime_ns| decoder.realtime_ns(ktime_ns),
            |ktime_ns, event| reorder.push(ktime_ns, Staged::System(event)),
        );
        let mut written = Ok(());
        let mut sink = |item: Released<'_, Drawn, Staged>| {
            if written.is_ok() {
                written = match item {
                    Released::Record(drawn) => self.write_record(drawn),
                    Released::Other(item) => self.write_item(*item),
                }
                .and_then(|()| self.write_findings());
            }
        };
        match until {
            Some((pass_start, incomplete_after)) => {
                reorder.release(pass_start, incomplete_after, &mut sink);
            }
            None => reorder.release_all(&mut sink),
        }
        self.flow.reorder = reorder;
        written
    }

    /// Hands a system event to the sinks.
    fn system_event(&mut self, event: &SystemEvent) -> Result<()> {
        self.sinks
            .system_event(event)
            .map_err(TraceError::Incomplete)
    }

    /// Writes what the watches found in the item just written (a call that returned after
    /// blocking too long), right after it.
    fn write_findings(&mut self) -> Result<()> {
        while let Some(finding) = self.found.take() {
            self.write_item(finding.into())?;
        }
        Ok(())
    }

    /// Hands one item other than a record to the sinks (or does it): a process first seen
    /// with its facts, a thread first seen with its name.
    fn write_item(&mut self, item: Staged) -> Result<()> {
        match item {
            Staged::System(event) => self.system_event(&event),
            Staged::Act { action, answer } => self.act(action, answer),
            Staged::ThreadName { lwpid, time_ns } => {
                if let Some(event) = name_now(&mut self.flow, lwpid, time_ns) {
                    self.system_event(&event)?;
                }
                Ok(())
            }
            Staged::Exited(pid) => {
                self.flow.exiting.remove(&pid);
                self.flow.processes.remove(&pid);
                self.flow.last_recorded_pid = None;
                self.flow.unwinder.forget(pid);
                self.flow.stack_ids.forget(pid);
                if let Some(facts) = self.flow.facts.as_mut() {
                    facts.exited(pid);
                }
                let now = self.decoder.realtime_ns(kernel::monotonic_ns());
                // Its short waits are told before it is gone, to count with its other waits.
                let counted = match self.flow.short_waits.as_mut() {
                    Some(waits) => waits.take_events(now, Some(pid)),
                    None => Vec::new(),
                };
                for event in &counted {
                    self.system_event(event)?;
                }
                if self.flow.described.remove(&pid) {
                    let detach = SystemEvent::of_process(now, pid, 0, SystemKind::ProcessDetach);
                    self.system_event(&detach)?;
                }
                self.sinks
                    .process_exited(pid)
                    .map_err(TraceError::Incomplete)
            }
        }
    }

    /// Writes a drawn record, after the overflow of the gap before it if there was one.
    fn write_record(&mut self, drawn: &Drawn) -> Result<()> {
        let Drawn {
            ref record,
            time_ns,
            cpu,
            lost_before,
            stack_left_out,
        } = *drawn;
        if lost_before > 0 {
            let lost = u64::from(lost_before);
            let slot = cpu as usize;
            if self.flow.placed.len() <= slot {
                self.flow.placed.resize(slot + 1, 0);
            }
            self.flow.placed[slot] += lost;
            let gap = overflow(time_ns, lost, cpu, LossSource::Ring);
            self.system_event(&gap)?;
            let resume = SystemEvent::new(time_ns, SystemKind::Resume);
            self.system_event(&resume)?;
        }
        match record {
            Some(record) if self.decoder.selects(record) => {
                if self.flow.last_recorded_pid != Some(record.pid) {
                    self.flow.processes.insert(record.pid);
                    self.flow.last_recorded_pid = Some(record.pid);
                }
                if self.flow.last_recorded_lwpid != Some(record.lwpid) {
                    self.flow.last_recorded_lwpid = Some(record.lwpid);
                    if let Some(name) = name_before_records(&mut self.flow, record) {
                        self.system_event(&name)?;
                    }
                }
                if let Some(stack) = self.flow.stack_ids.written_before(record.stack, time_ns) {
                    self.system_event(&stack)?;
                }
                self.flow.records += 1;
                if self.flow.stacks != tracer_common::STACKS_NONE {
                    self.flow.stacks_left_out.count(time_ns, stack_left_out);
                }
                self.sinks.record(record).map_err(TraceError::Incomplete)?;
            }
            // A call of the kind not selected (a plain mutex when only rmutex is).
            Some(_) => {}
            None => {
                self.flow.losses.add_undecodable(1);
                let lost = overflow(time_ns, 1, cpu, LossSource::Undecodable);
                self.system_event(&lost)?;
            }
        }
        Ok(())
    }

    /// Does what a controller, a signal or a long block asked, now that everything stamped
    /// before the request has been written.
    pub(super) fn act(
        &mut self,
        action: Action,
        answer: Option<oneshot::Sender<Reply>>,
    ) -> Result<()> {
        let reply = match action {
            Action::Select { events, event } => {
                self.decoder.select(events);
                self.system_event(&event)?;
                return Ok(());
            }
            Action::Clear => {
                let dropped = self.sinks.clear().map_err(TraceError::Incomplete)?;
                Reply::done(format!("cleared: {dropped} events dropped from the stream"))
            }
            Action::Flush(cause) => {
                if let FlushCause::Blocked(event) = &cause {
                    self.system_event(event)?;
                    let may_flush = self
                        .block_flushes
                        .as_mut()
                        .is_some_and(|flushes| flushes.may_flush(std::time::Instant::now()));
                    if !may_flush {
                        return Ok(());
                    }
                }
                self.sinks.flush().map_err(TraceError::Incomplete)?;
                match &cause {
                    FlushCause::Signal => say!("thrtrace-bpf: flushed (SIGUSR1)"),
                    FlushCause::Blocked(event) => {
                        say!("thrtrace-bpf: flushed: {}", describe_block(event));
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

    /// The waits counted as short since the last call go into the stream, now.
    pub(super) fn tell_short_waits(&mut self) {
        let Some(waits) = self.flow.short_waits.as_mut() else {
            return;
        };
        let now = kernel::monotonic_ns();
        for event in waits.take_events(self.decoder.realtime_ns(now), None) {
            self.flow.reorder.push(now, Staged::System(event));
        }
    }

    /// Once a second: the threads seen in the last second whose name (comm) has changed get a
    /// THREAD_NAME event with the new one.
    pub(super) fn renamed_threads(&mut self) {
        self.flow.seconds += 1;
        if self.flow.facts.is_none() {
            return;
        }
        let now = kernel::monotonic_ns();
        let time_ns = self.decoder.realtime_ns(now);
        let recent = self.flow.seconds - 1;
        let mut renamed = Vec::new();
        // A thread whose first name is not written yet (it waits in the reorder stage) is not
        // renamed.
        let renamable = |seen: &ThreadSeen| seen.seen >= recent && !seen.name.is_empty();
        for (&lwpid, seen) in self
            .flow
            .named_threads
            .iter_mut()
            .filter(|(_, s)| renamable(s))
        {
            if let Some(name) = facts::comm(seen.pid, lwpid)
                && name != seen.name
            {
                renamed.push(seen.named(lwpid, time_ns, name));
            }
        }
        for event in renamed {
            self.flow.reorder.push(now, Staged::System(event));
        }
    }
}

#[cfg(test)]
mod tests {
    use tracer_model::selection::EventSet;

    use super::*;

    #[test]
    fn a_thread_whose_record_comes_before_its_staged_name_is_named_first_and_once() {
        let decoder = Decoder::new(0, EventSet::all());
        let facts = Some(Facts::default());
        let mut flow = Flow::new(
            Vec::new(),
            &decoder,
            facts,
            HashSet::new(),
            Vec::new(),
            None,
        )
        .unwrap();
        // This test's own thread: /proc has its name.
        let pid = std::process::id();
        let lwpid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let seen = ThreadSeen::first_seen(pid, 0, Some("gone".into()));
        flow.named_threads.insert(lwpid, seen);
        let record = TraceRecord {
            sec: 7,
            nsec: 5,
            lwpid,
            pid,
            tid: 0,
            event1: 2,
            event2: 2,
            which: Which::Entry,
            a: [0; 5],
            caller: 0,
            stack: 0,
        };
        let event = name_before_records(&mut flow, &record).expect("named before its record");
        let comm = facts::comm(pid, lwpid).unwrap();
        assert_eq!(event.kind, SystemKind::ThreadName { name: comm.clone() });
        assert_eq!((event.time_ns, event.lwpid), (7_000_000_005, lwpid));
        assert_eq!(name_before_records(&mut flow, &record), None);
        // The name staged with its later record is in the stream already: not written again.
        assert_eq!(name_now(&mut flow, lwpid, 7_000_000_006), None);
        // A thread gone by then keeps the name it had when first drawn.
        let mut gone = record;
        gone.lwpid = u32::MAX;
        let first = ThreadSeen::first_seen(pid, 0, Some("worker".into()));
        flow.named_threads.insert(u32::MAX, first);
        let event = name_before_records(&mut flow, &gone).unwrap();
        assert_eq!(
            event.kind,
            SystemKind::ThreadName {
                name: "worker".into()
            }
        );
    }
}
