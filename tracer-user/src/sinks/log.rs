//! The sink that writes a trace log (`--log FILE`): the POSIX trace stream, with its full
//! policy, in front of the log, with its own (`docs/posix-trace.md`, "Policies").
//!
//! Events are encoded into packets as they come; the stream is the packets not yet written,
//! at most `--stream-size` bytes. Full, it is written to the log (`flush`), loses its oldest
//! packets (`loop`, a flight recorder) or stops recording (`until-full`). Under `flush` it is
//! also written once a second (every batch with `--unbuffered`), so that a tracer killed by
//! SIGKILL leaves all but its last second in the log.

use std::{
    collections::VecDeque,
    fs::File,
    io,
    path::PathBuf,
    time::{Duration, Instant, SystemTime},
};

use tracer_model::{
    TraceRecord,
    event::{Event, LossSource, NO_CPU, SystemEvent, SystemKind},
    log::{
        EventPacket, FinalStatus, LogWriter, Metadata, Status, StreamFullPolicy, Written,
        is_trace_log,
    },
};

use super::{
    Buffering, Sink, SinkState, Summary, TraceEnd,
    output_dir::{FileKind, OutputDir, ReplaceError},
};

/// How often the `flush` policy writes the stream when it is not full.
const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// Packets of a stream are at most this share of it, so that `loop` drops little at a time.
const PACKETS_PER_STREAM: u64 = 8;

/// The log's kind: what `--log` keeps as `FILE.old`, as far as its first packet tells
/// (`tracer_model::log::is_trace_log`).
pub const TRACE_LOG: FileKind = FileKind {
    name: "trace log",
    is_one: is_trace_log,
};

/// A log file made for writing, new and empty.
pub struct LogFile {
    file: File,
    /// Where the earlier log that had its name is now, if there was one.
    kept_old: Option<PathBuf>,
}

impl LogFile {
    /// Creates the log `name` in `dir`, an earlier trace log there kept as `NAME.old`
    /// ([`OutputDir::create_kind`]).
    pub fn create(dir: &OutputDir, name: &str) -> Result<LogFile, ReplaceError> {
        let (file, kept_old) = dir.create_kind(name, &TRACE_LOG)?;
        Ok(LogFile { file, kept_old })
    }
}

pub struct TraceLog {
    writer: Option<LogWriter>,
    /// Until `begin`: the file and what goes first in it.
    pending: Option<(File, Metadata)>,
    shown: PathBuf,
    /// Where the earlier log that had its name is now, if there was one.
    kept_old: Option<PathBuf>,
    policy: StreamFullPolicy,
    stream_size: u64,
    packet_capacity: usize,
    current: EventPacket,
    sealed: VecDeque<EventPacket>,
    sealed_bytes: u64,
    status: Status,
    /// The newest event's time: events the stream makes itself are stamped with it, so that
    /// they fall in order.
    newest_ns: i64,
    /// Events the `loop` policy dropped since the last flush, and when the first of them was.
    overwritten: u64,
    first_overwritten_ns: Option<i64>,
    /// Events not recorded after `until-full` stopped the stream (until a START).
    not_recorded: u64,
    stopped_by_policy: bool,
    events_since_flush: u64,
    last_flush: Instant,
    buffering: Buffering,
    said_full: bool,
}

impl TraceLog {
    /// A log to be written to `file` when the trace begins; its stream `running` from the
    /// start, or suspended until a START.
    pub fn new(
        file: LogFile,
        shown: PathBuf,
        metadata: Metadata,
        buffering: Buffering,
        running: bool,
    ) -> TraceLog {
        let attributes = &metadata.attributes;
        let stream_size = attributes.stream_min_size;
        let packet_capacity = metadata
            .packets
            .packet_capacity()
            .min((stream_size / PACKETS_PER_STREAM) as usize);
        TraceLog {
            writer: None,
            policy: attributes.stream_full_policy,
            newest_ns: attributes.creation_time_ns,
            pending: Some((file.file, metadata)),
            shown,
            kept_old: file.kept_old,
            stream_size,
            packet_capacity,
            current: EventPacket::default(),
            sealed: VecDeque::new(),
            sealed_bytes: 0,
            status: Status {
                running,
                ..Status::default()
            },
            overwritten: 0,
            first_overwritten_ns: None,
            not_recorded: 0,
            stopped_by_policy: false,
            events_since_flush: 0,
            last_flush: Instant::now(),
            buffering,
            said_full: false,
        }
    }

    fn stream_bytes(&self) -> u64 {
        self.sealed_bytes + self.current.packet_len() as u64
    }

    /// Adds an event to the stream, whatever the policy.
    fn append(&mut self, event: &Event) {
        self.newest_ns = self.newest_ns.max(event.time_ns());
        if let Some(full) = self.current.push_within(event, self.packet_capacity) {
            self.sealed_bytes += full.packet_len() as u64;
            self.sealed.push_back(full);
        }
    }

    /// A system event of the stream's own, stamped in order.
    fn append_own(&mut self, kind: SystemKind) {
        self.append(&Event::System(SystemEvent::new(self.newest_ns, kind)));
    }

    /// Records an event as the stream's policy says. A stream the `until-full` policy
    /// stopped records nothing more, and counts it. One the controller stopped gets no thread
    /// events (the probes do not record) but keeps the facts about processes (attached, gone,
    /// mapped files) that the events after a restart need to be read.
    fn push(&mut self, event: &Event) -> io::Result<()> {
        if self.stopped_by_policy {
            self.not_recorded += 1;
            return Ok(());
        }
        self.append(event);
        self.events_since_flush += 1;
        if self.stream_bytes() < self.stream_size {
            return Ok(());
        }
        match self.policy {
            StreamFullPolicy::Flush => self.write_stream(),
            StreamFullPolicy::Loop => {
                while self.stream_bytes() > self.stream_size
                    && let Some(oldest) = self.sealed.pop_front()
                {
                    self.sealed_bytes -= oldest.packet_len() as u64;
                    self.overwritten += u64::from(oldest.count());
                    if self.first_overwritten_ns.is_none() {
                        self.first_overwritten_ns = oldest.first_time_ns();
                    }
                    self.status.overrun = true;
                }
                Ok(())
            }
            StreamFullPolicy::UntilFull => {
                self.append_own(SystemKind::Stop { auto: 1 });
                self.status.running = false;
                self.status.full = true;
                self.stopped_by_policy = true;
                Ok(())
            }
        }
    }

    /// Writes the stream to the log, its events followed by FLUSH_START and FLUSH_STOP.
    fn write_stream(&mut self) -> io::Result<()> {
        self.append_own(SystemKind::FlushStart);
        let mut packets = Vec::with_capacity(self.sealed.len() + 2);
        if self.overwritten > 0 {
            let first_lost_ns = self.first_overwritten_ns.take().unwrap_or(0);
            let mut overflow = EventPacket::default();
            overflow.push(&Event::System(SystemEvent::new(
                first_lost_ns,
                SystemKind::Overflow {
                    lost: std::mem::take(&mut self.overwritten),
                    cpu: NO_CPU,
                    source: LossSource::Stream,
                    first_lost_ns,
                },
            )));
            packets.push(overflow);
        }
        packets.extend(self.sealed.drain(..));
        packets.push(std::mem::take(&mut self.current));
        // Written with the flush, not left in the stream, where a flight recorder would
        // overwrite it.
        let mut stop = EventPacket::default();
        stop.push(&Event::System(SystemEvent::new(
            self.newest_ns,
            SystemKind::FlushStop,
        )));
        packets.push(stop);
        self.sealed_bytes = 0;
        self.write(&packets)?;
        self.status.full = false;
        self.events_since_flush = 0;
        self.last_flush = Instant::now();
        Ok(())
    }

    fn write(&mut self, packets: &[EventPacket]) -> io::Result<()> {
        let Some(writer) = self.writer.as_mut() else {
            return Ok(());
        };
        if writer.write(packets, self.status)? == Written::LogFull && !self.said_full {
            self.said_full = true;
            say!(
                "thrtrace-bpf: {} reached its --log-size: no more events are written to it \
                 (--log-full-policy until-full)",
                self.shown.display()
            );
        }
        Ok(())
    }
}

impl Sink for TraceLog {
    fn begin(&mut self) -> io::Result<()> {
        if let Some((file, metadata)) = self.pending.take() {
            self.writer = Some(LogWriter::create(file, &metadata)?);
        }
        Ok(())
    }

    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        self.push(&Event::Thread(*record))
    }

    /// START and STOP from the controller change the stream's status: a START is the first
    /// event of a running stream, a STOP the last of a suspended one.
    fn system_event(&mut self, event: &SystemEvent) -> io::Result<()> {
        if let SystemKind::Start { .. } = event.kind {
            self.status.running = true;
            self.stopped_by_policy = false;
        }
        self.push(&Event::System(event.clone()))?;
        if let SystemKind::Stop { .. } = event.kind {
            self.status.running = false;
        }
        Ok(())
    }

    fn wants_system_events(&self) -> bool {
        true
    }

    fn batch_done(&mut self) -> io::Result<()> {
        let due =
            self.buffering == Buffering::EachRecord || self.last_flush.elapsed() >= FLUSH_INTERVAL;
        if self.policy == StreamFullPolicy::Flush && due && self.events_since_flush > 0 {
            self.write_stream()?;
        }
        Ok(())
    }

    /// The stream goes to the log now, whatever the policy: the flight recorder's way out.
    fn flush(&mut self) -> io::Result<()> {
        self.write_stream()
    }

    /// As posix_trace_clear: the stream is emptied, its full and overrun status reset, its
    /// running status kept; the log keeps what was written to it.
    fn clear(&mut self) -> io::Result<u64> {
        let dropped = self
            .sealed
            .drain(..)
            .chain([std::mem::take(&mut self.current)])
            .map(|packet| u64::from(packet.count()))
            .sum();
        self.sealed_bytes = 0;
        self.overwritten = 0;
        self.first_overwritten_ns = None;
        self.status.full = false;
        self.status.overrun = false;
        self.events_since_flush = 0;
        Ok(dropped)
    }

    fn state(&self) -> SinkState {
        let written = self.writer.as_ref().map_or(0, |w| w.counts().0);
        SinkState {
            descriptions: vec![format!(
                "log {} ({written} events written, {} of {} stream bytes held)",
                self.shown.display(),
                self.stream_bytes(),
                self.stream_size
            )],
            status: Some(self.status),
        }
    }

    fn destinations(&self) -> Vec<String> {
        vec![format!("the log {}", self.shown.display())]
    }

    fn finish(&mut self, end: &TraceEnd) -> io::Result<Summary> {
        if self.status.running {
            self.append_own(SystemKind::Stop { auto: 0 });
            self.status.running = false;
        }
        // Written at the end, not flushed by a controller: a stream that filled stays FULL.
        let full = self.status.full;
        self.write_stream()?;
        self.status.full = full;
        let Some(writer) = self.writer.take() else {
            return Ok(Summary::default());
        };
        let (written, not_written) = writer.counts();
        let closed_ns = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        writer.close(FinalStatus {
            status: self.status,
            closed_ns,
            lost_per_cpu: end.lost_per_cpu.clone(),
            ..FinalStatus::default()
        })?;
        Ok(super::Written::Log {
            events: written,
            path: self.shown.clone(),
            past_size_limit: not_written,
            stream_full: self.not_recorded,
            earlier: self.kept_old.clone(),
        }
        .into())
    }
}
