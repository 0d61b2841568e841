//! Writes a log: the metadata packet, then events packets (appended, or looping over slots),
//! then at the close the status packet. Each packet goes to the file in one write, alone or
//! with the packets after it, so that a writer killed at any moment leaves a log that reads back
//! up to its last whole packet.

use std::{fs::File, io, os::unix::fs::FileExt};

use super::{
    FinalStatus, LogFullPolicy, Metadata, PacketPlacement, Status,
    packet::{self, HEADER_LEN, Kind},
};
use crate::event::Event;

/// An events packet's payload starts with its context: the index of its first event among all
/// the events the log was given (u64), its event count (u32) and the status flags when it was
/// written (u32, [`Status::to_bits`]).
pub const CONTEXT_LEN: usize = 16;

/// The largest events packet written to an appended log.
pub const DEFAULT_PACKET_BYTES: usize = 64 << 10;

/// Most bytes of packets written in one call. Larger calls cost the kernel less per byte up to
/// a point: on the development VM, 4 MiB calls cost the tracer more CPU than a call per 64 KiB
/// packet (their copies into new large page-cache folios were slow there), 512 KiB calls less.
/// It also keeps the buffer from being a second copy of a large stream.
const MAX_BATCH_BYTES: usize = 512 << 10;

/// Smallest slot of a looping log, and most slots' share of it (1/16 of the log each).
const MIN_SLOT: u64 = 4 << 10;
const SLOTS_AT_LEAST: u64 = 16;

/// Events encoded for one packet.
#[derive(Clone, Debug, Default)]
pub struct EventPacket {
    entries: Vec<u8>,
    count: u32,
    first_time_ns: Option<i64>,
}

impl EventPacket {
    /// Adds `event`.
    pub fn push(&mut self, event: &Event) {
        super::entry::encode(event, &mut self.entries);
        self.count += 1;
        self.first_time_ns.get_or_insert(event.time_ns());
    }

    /// Adds `event` unless that would make the packet larger than `capacity` bytes; then it
    /// starts a new packet with it and returns the full one.
    pub fn push_within(&mut self, event: &Event, capacity: usize) -> Option<EventPacket> {
        let before = self.entries.len();
        super::entry::encode(event, &mut self.entries);
        if self.packet_len() <= capacity || self.count == 0 {
            self.count += 1;
            self.first_time_ns.get_or_insert(event.time_ns());
            return None;
        }
        // The next packet's buffer is made its full size at once: grown by doubling, it would
        // copy what it holds at every step.
        let mut entries = Vec::with_capacity(capacity);
        entries.extend_from_slice(&self.entries[before..]);
        self.entries.truncate(before);
        let mut next = EventPacket {
            entries,
            count: 1,
            first_time_ns: Some(event.time_ns()),
        };
        std::mem::swap(self, &mut next);
        Some(next)
    }

    /// How many events it holds.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The size of the packet this makes, header included.
    pub fn packet_len(&self) -> usize {
        HEADER_LEN + CONTEXT_LEN + self.entries.len()
    }

    /// When its first event happened.
    pub fn first_time_ns(&self) -> Option<i64> {
        self.first_time_ns
    }
}

impl PacketPlacement {
    /// Where the packets go in a log of at most `max_size` bytes of events under `policy`.
    pub fn choose(max_size: Option<u64>, policy: LogFullPolicy) -> PacketPlacement {
        match (max_size, policy) {
            (Some(max), LogFullPolicy::Loop) => {
                let slot_size = (max / SLOTS_AT_LEAST).clamp(MIN_SLOT, DEFAULT_PACKET_BYTES as u64);
                PacketPlacement::Loop {
                    slot_size: slot_size as u32,
                    slots: (max / slot_size) as u32,
                }
            }
            _ => PacketPlacement::Append,
        }
    }

    /// The smallest log a looping placement works with.
    pub const MIN_LOOP_SIZE: u64 = MIN_SLOT * SLOTS_AT_LEAST;

    /// The largest events packet this placement takes.
    pub fn packet_capacity(&self) -> usize {
        match self {
            PacketPlacement::Append => DEFAULT_PACKET_BYTES,
            PacketPlacement::Loop { slot_size, .. } => *slot_size as usize,
        }
    }
}

/// What became of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// The packet is in the log.
    Written,
    /// The log is full (`until-full`): the packet was not written, nor will any after it.
    LogFull,
}

/// A log being written.
pub struct LogWriter {
    file: File,
    /// The metadata packet's payload, sealed again at the close.
    metadata_json: Vec<u8>,
    placement: PacketPlacement,
    /// Where events packets begin: the end of the metadata packet.
    region_start: u64,
    /// Where the next packet goes in an appended log.
    append_end: u64,
    next_seq: u64,
    max_size: Option<u64>,
    full_policy: LogFullPolicy,
    events_bytes: u64,
    events_written: u64,
    events_not_written: u64,
    log_full: bool,
    log_overrun: bool,
    /// Sealed packets on their way to the file, kept for its capacity.
    batch: Vec<u8>,
}

impl LogWriter {
    /// Starts a log in `file` (empty, opened for writing) with its metadata packet.
    pub fn create(file: File, metadata: &Metadata) -> io::Result<LogWriter> {
        let json = serde_json::to_vec(metadata).map_err(io::Error::other)?;
        let packet = packet::seal(Kind::Metadata, 0, &json);
        file.write_all_at(&packet, 0)?;
        let attributes = &metadata.attributes;
        Ok(LogWriter {
            file,
            metadata_json: json,
            placement: metadata.packets,
            region_start: packet.len() as u64,
            append_end: packet.len() as u64,
            next_seq: 1,
            max_size: attributes.log_max_size,
            full_policy: attributes.log_full_policy,
            events_bytes: 0,
            events_written: 0,
            events_not_written: 0,
            log_full: false,
            log_overrun: false,
            batch: Vec::new(),
        })
    }

    /// Where its packets go.
    pub fn placement(&self) -> PacketPlacement {
        self.placement
    }

    /// Writes `packets` in order, with the stream's `status`, unless the log's policy keeps
    /// them out: `LogFull` if it kept out any. Packets that lie end to end in the file (an
    /// appended log) are sealed into one buffer and written together, up to `MAX_BATCH_BYTES`
    /// at a time.
    pub fn write(&mut self, packets: &[EventPacket], status: Status) -> io::Result<Written> {
        let mut outcome = Written::Written;
        self.batch.clear();
        let mut batch_offset = 0;
        for events in packets.iter().filter(|events| !events.is_empty()) {
            let Some(offset) = self.place(events)? else {
                outcome = Written::LogFull;
                continue;
            };
            let contiguous = batch_offset + self.batch.len() as u64 == offset;
            if !self.batch.is_empty() && (!contiguous || self.batch.len() >= MAX_BATCH_BYTES) {
                self.file.write_all_at(&self.batch, batch_offset)?;
                self.batch.clear();
            }
            if self.batch.is_empty() {
                batch_offset = offset;
            }
            let flags = Status {
                log_full: self.log_full,
                log_overrun: self.log_overrun,
                ..status
            };
            let mut context = [0; CONTEXT_LEN];
            context[..8].copy_from_slice(&self.events_written.to_le_bytes());
            context[8..12].copy_from_slice(&events.count.to_le_bytes());
            context[12..].copy_from_slice(&flags.to_bits().to_le_bytes());
            let parts: [&[u8]; 2] = [&context, &events.entries];
            packet::seal_parts_into(Kind::Events, self.next_seq, &parts, &mut self.batch);
            let len = events.packet_len() as u64;
            self.next_seq += 1;
            self.append_end = self.append_end.max(offset + len);
            self.events_bytes += len;
            self.events_written += u64::from(events.count);
        }
        if !self.batch.is_empty() {
            self.file.write_all_at(&self.batch, batch_offset)?;
        }
        Ok(outcome)
    }

    /// Where an events packet goes, or `None` if the log's policy keeps it out (counted).
    fn place(&mut self, events: &EventPacket) -> io::Result<Option<u64>> {
        let len = events.packet_len() as u64;
        let full = self
            .max_size
            .is_some_and(|max| self.events_bytes + len > max);
        if self.log_full || (full && self.full_policy == LogFullPolicy::UntilFull) {
            self.log_full = true;
            self.log_overrun = true;
            self.events_not_written += u64::from(events.count);
            return Ok(None);
        }
        match self.placement {
            PacketPlacement::Append => Ok(Some(self.append_end)),
            PacketPlacement::Loop { slot_size, slots } => {
                if len > u64::from(slot_size) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "an events packet larger than the log's slots",
                    ));
                }
                let slot = (self.next_seq - 1) % u64::from(slots);
                if self.next_seq > u64::from(slots) {
                    self.log_overrun = true;
                }
                Ok(Some(self.region_start + slot * u64::from(slot_size)))
            }
        }
    }

    /// Events written, and events the log's policy kept out.
    pub fn counts(&self) -> (u64, u64) {
        (self.events_written, self.events_not_written)
    }

    /// Ends the log with its status packet (the counts are the writer's own), then marks the
    /// metadata packet closed with the status packet's sequence number: a copy cut short
    /// afterwards is told from a log whose writer died.
    pub fn close(self, mut status: FinalStatus) -> io::Result<()> {
        (status.events_written, status.events_not_written) = self.counts();
        status.status.log_full = self.log_full;
        status.status.log_overrun = self.log_overrun;
        let json = serde_json::to_vec(&status).map_err(io::Error::other)?;
        let offset = match self.placement {
            PacketPlacement::Append => self.append_end,
            PacketPlacement::Loop { slot_size, slots } => {
                self.region_start + u64::from(slot_size) * u64::from(slots)
            }
        };
        let packet = packet::seal(Kind::Status, self.next_seq, &json);
        self.file.write_all_at(&packet, offset)?;
        self.file.sync_data()?;
        let metadata = packet::seal(Kind::Metadata, self.next_seq, &self.metadata_json);
        self.file.write_all_at(&metadata, 0)?;
        self.file.sync_data()
    }
}
