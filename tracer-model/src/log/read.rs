//! Reads a log back. Every byte is checked before it is believed: a packet whose CRC does not
//! match, a length past the end, an entry that does not fit its type, an event type the log
//! does not list, are errors that name the offset. The only damage forgiven is the kind a
//! writer that died leaves: the last packet cut short, and no status packet.

use std::{collections::HashMap, fs::File, io, os::unix::fs::FileExt, path::Path};

use super::{
    FORMAT_NAME, FORMAT_VERSION, FinalStatus, Metadata, PacketPlacement, Status,
    entry::{self},
    filter::Filter,
    packet::{BadHeader, HEADER_LEN, Header, Kind, MAGIC, MAX_PAYLOAD},
    write::CONTEXT_LEN,
};
use crate::event::{Event, EventType, LossSource, NO_CPU, SystemEvent, SystemKind};

/// Why a log cannot be read (or read further).
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Reading the file failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The file is not a trace log.
    #[error("not a thrtrace-bpf trace log: it does not begin with a log's metadata packet")]
    NotALog,
    /// The file is empty: a log is never, from its first write on.
    #[error("the file is empty: not a thrtrace-bpf trace log (or one whose tracer wrote nothing)")]
    Empty,
    #[error(
        "log format version {found}; this thrtrace-bpf reads version {FORMAT_VERSION}: \
         read it with the thrtrace-bpf that wrote it"
    )]
    /// A log of another format version.
    Version {
        /// The log's version.
        found: u16,
    },
    /// The log is damaged at `offset`: `what` says how.
    #[error("corrupt log at offset {offset}: {what}")]
    Corrupt {
        /// Where in the file.
        offset: u64,
        /// What is wrong there.
        what: String,
    },
}

fn corrupt(offset: u64, what: impl Into<String>) -> LogError {
    LogError::Corrupt {
        offset,
        what: what.into(),
    }
}

/// An events packet found in the log.
#[derive(Clone, Copy, Debug)]
struct PacketRef {
    offset: u64,
    seq: u64,
    first_index: u64,
    count: u32,
    status: Status,
}

/// An open log.
pub struct LogReader {
    file: File,
    metadata: Metadata,
    types: HashMap<u16, EventType>,
    /// In sequence order.
    packets: Vec<PacketRef>,
    final_status: Option<FinalStatus>,
    /// The status packet's sequence number.
    status_seq: Option<u64>,
    /// For a log that was not closed, or was cut short: the offset up to which it reads.
    unclosed_at: Option<u64>,
    /// Closed, then cut short.
    cut_short: bool,
    ids: TypeIds,
}

/// The ids a log gives its event types: thread events by their tr codes, system events by name.
#[derive(Clone, Debug)]
pub struct TypeIds {
    thread: HashMap<(u16, u16), u16>,
    system: HashMap<String, u16>,
}

impl TypeIds {
    /// The ids of `types`, a log's list.
    pub fn new(types: &[EventType]) -> TypeIds {
        let (system, thread): (Vec<&EventType>, Vec<&EventType>) =
            types.iter().partition(|t| t.is_system());
        TypeIds {
            thread: thread
                .iter()
                .map(|t| ((t.event1, t.event2), t.id))
                .collect(),
            system: system.iter().map(|t| (t.name.clone(), t.id)).collect(),
        }
    }

    /// The id of the thread event with these tr codes.
    pub fn thread(&self, event1: u16, event2: u16) -> Option<u16> {
        self.thread.get(&(event1, event2)).copied()
    }

    /// The id of the system event of this name.
    pub fn system(&self, name: &str) -> Option<u16> {
        self.system.get(name).copied()
    }

    /// The id of `event`'s type.
    pub fn of(&self, event: &Event) -> Option<u16> {
        match event {
            Event::Thread(r) => self.thread(r.event1, r.event2),
            Event::System(e) => self.system(e.kind.name()),
        }
    }
}

/// What reading the bytes at an offset found.
enum Found {
    Packet(Header, Vec<u8>),
    /// The file ends inside it: a write that never completed.
    CutShort,
    Bad(String),
}

fn read_packet(file: &File, file_len: u64, offset: u64) -> io::Result<Found> {
    read_packet_of(file, file_len, offset, Some(FORMAT_VERSION))
}

/// Whether a whole packet header begins after `offset` (and within a packet's reach of it),
/// before `file_len`.
fn packet_header_after(file: &File, offset: u64, file_len: u64) -> io::Result<bool> {
    let left = file_len - offset;
    // More than a whole packet left cannot be one packet cut short.
    if left > HEADER_LEN as u64 + u64::from(MAX_PAYLOAD) {
        return Ok(true);
    }
    let mut rest = vec![0u8; left as usize];
    file.read_exact_at(&mut rest, offset)?;
    Ok((1..rest.len().saturating_sub(HEADER_LEN - 1)).any(|at| {
        rest[at..].starts_with(&MAGIC)
            && Header::parse(
                rest[at..at + HEADER_LEN]
                    .try_into()
                    .expect("a header's length"),
            )
            .is_ok()
    }))
}

/// The packet at `offset`, of format version `version` (`None`: of any).
fn read_packet_of(
    file: &File,
    file_len: u64,
    offset: u64,
    version: Option<u16>,
) -> io::Result<Found> {
    if file_len < offset + HEADER_LEN as u64 {
        return Ok(Found::CutShort);
    }
    let mut header = [0u8; HEADER_LEN];
    file.read_exact_at(&mut header, offset)?;
    let header = match Header::parse(&header) {
        Ok(header) => header,
        Err(BadHeader::Magic) => return Ok(Found::Bad("no packet begins here".into())),
        Err(BadHeader::Kind(kind)) => return Ok(Found::Bad(format!("unknown packet kind {kind}"))),
        Err(BadHeader::Length(len)) => {
            return Ok(Found::Bad(format!("a packet claims {len} bytes")));
        }
    };
    let end = offset + HEADER_LEN as u64 + u64::from(header.payload_len);
    if end > file_len {
        return Ok(Found::CutShort);
    }
    let mut payload = vec![0u8; header.payload_len as usize];
    file.read_exact_at(&mut payload, offset + HEADER_LEN as u64)?;
    if version.is_some_and(|version| header.version != version) {
        return Ok(Found::Bad(format!(
            "a packet of format version {}",
            header.version
        )));
    }
    if !header.check(&payload) {
        return Ok(Found::Bad("the packet's checksum does not match".into()));
    }
    Ok(Found::Packet(header, payload))
}

/// Whether `file` is a trace log, as far as its first packet tells: it begins with a whole
/// metadata packet (magic `PTLP`, its checksum matching) whose JSON names the format, of any
/// format version, whatever later packets hold. Damage after the metadata leaves it a log; a
/// file that is not one, or whose beginning is lost, is not.
pub fn is_trace_log(file: &File) -> io::Result<bool> {
    /// The one field every version's metadata has.
    #[derive(serde::Deserialize)]
    struct Named {
        format: String,
    }
    let file_len = file.metadata()?.len();
    Ok(match read_packet_of(file, file_len, 0, None)? {
        Found::Packet(header, payload) => {
            header.kind == Kind::Metadata
                && serde_json::from_slice::<Named>(&payload).is_ok_and(|m| m.format == FORMAT_NAME)
        }
        Found::CutShort | Found::Bad(_) => false,
    })
}

impl LogReader {
    /// Opens the log at `path` and reads its metadata.
    pub fn open(path: &Path) -> Result<LogReader, LogError> {
        LogReader::from_file(File::open(path)?)
    }

    /// Reads the log open as `file`, from its metadata.
    pub fn from_file(file: File) -> Result<LogReader, LogError> {
        let file_len = file.metadata()?.len();
        if file_len == 0 {
            return Err(LogError::Empty);
        }
        let mut magic = [0u8; 4];
        if file.read_exact_at(&mut magic, 0).is_err() || magic != MAGIC {
            return Err(LogError::NotALog);
        }
        if file_len < HEADER_LEN as u64 {
            return Err(corrupt(0, "the log ends inside its metadata packet"));
        }
        let mut header = [0u8; HEADER_LEN];
        file.read_exact_at(&mut header, 0)?;
        if let Ok(header) = Header::parse(&header)
            && header.version != FORMAT_VERSION
        {
            return Err(LogError::Version {
                found: header.version,
            });
        }
        let (header, payload) = match read_packet(&file, file_len, 0)? {
            Found::Packet(header, payload) => (header, payload),
            Found::CutShort => return Err(corrupt(0, "the log ends inside its metadata packet")),
            Found::Bad(what) => return Err(corrupt(0, what)),
        };
        if header.kind != Kind::Metadata {
            return Err(LogError::NotALog);
        }
        // Rewritten with the status packet's sequence number when the log was closed.
        let closed_with = header.seq;
        let metadata: Metadata = serde_json::from_slice(&payload)
            .map_err(|e| corrupt(HEADER_LEN as u64, format!("metadata: {e}")))?;
        if metadata.format != FORMAT_NAME {
            return Err(LogError::NotALog);
        }
        let mut types = HashMap::new();
        for event_type in &metadata.event_types {
            if types.insert(event_type.id, event_type.clone()).is_some() {
                let what = format!("event type {} listed twice", event_type.id);
                return Err(corrupt(HEADER_LEN as u64, what));
            }
        }
        let ids = TypeIds::new(&metadata.event_types);
        let mut reader = LogReader {
            file,
            metadata,
            types,
            packets: Vec::new(),
            final_status: None,
            status_seq: None,
            unclosed_at: None,
            cut_short: false,
            ids,
        };
        let region_start = (HEADER_LEN + payload.len()) as u64;
        match reader.metadata.packets {
            PacketPlacement::Append => reader.scan_appended(region_start, file_len)?,
            PacketPlacement::Loop { slot_size, slots } => {
                reader.scan_slots(region_start, file_len, slot_size, slots)?;
            }
        }
        // Closed, but its status packet is missing: the file was cut short after it was
        // written (a copy or a disk that ran out). What is whole of it is read, said so.
        if closed_with != 0 && reader.status_seq != Some(closed_with) {
            let end = *reader.unclosed_at.get_or_insert(file_len);
            // What follows the last whole packet of a cut file is at most the start of one
            // packet; a whole packet header there means a damaged length, not a cut.
            if packet_header_after(&reader.file, end, file_len)? {
                let what = "a packet claims more bytes than the file has, yet packets follow it";
                return Err(corrupt(end, what));
            }
            reader.cut_short = true;
        }
        Ok(reader)
    }

    /// The packets of an appended log, one after the other.
    fn scan_appended(&mut self, mut offset: u64, file_len: u64) -> Result<(), LogError> {
        while offset < file_len {
            let (header, payload) = match read_packet(&self.file, file_len, offset)? {
                Found::Packet(header, payload) => (header, payload),
                Found::CutShort => {
                    self.unclosed_at = Some(offset);
                    return Ok(());
                }
                Found::Bad(what) => return Err(corrupt(offset, what)),
            };
            let expected = self.packets.last().map_or(1, |p| p.seq + 1);
            if header.seq != expected {
                let what = format!("packet {} where packet {expected} should be", header.seq);
                return Err(corrupt(offset, what));
            }
            let end = offset + (HEADER_LEN + payload.len()) as u64;
            match header.kind {
                Kind::Events => self.packets.push(events_packet(offset, &header, &payload)?),
                Kind::Status => {
                    self.final_status = Some(status_packet(offset, &payload)?);
                    self.status_seq = Some(header.seq);
                    if end != file_len {
                        return Err(corrupt(end, "data after the status packet"));
                    }
                }
                Kind::Metadata => return Err(corrupt(offset, "a second metadata packet")),
            }
            offset = end;
        }
        if self.final_status.is_none() {
            self.unclosed_at = Some(offset);
        }
        Ok(())
    }

    /// The packets of a looping log: one per slot, in any order; sorted by sequence number.
    fn scan_slots(
        &mut self,
        region_start: u64,
        file_len: u64,
        slot_size: u32,
        slots: u32,
    ) -> Result<(), LogError> {
        if slot_size < (HEADER_LEN + CONTEXT_LEN) as u32 || slots == 0 {
            return Err(corrupt(HEADER_LEN as u64, "a looping log with no room"));
        }
        let status_at = region_start + u64::from(slot_size) * u64::from(slots);
        if let Found::Packet(header, payload) = read_packet(&self.file, file_len, status_at)?
            && header.kind == Kind::Status
        {
            self.final_status = Some(status_packet(status_at, &payload)?);
            self.status_seq = Some(header.seq);
        }
        let mut damaged = Vec::new();
        for slot in 0..u64::from(slots) {
            let offset = region_start + slot * u64::from(slot_size);
            let mut magic = [0u8; 4];
            if offset >= file_len || self.file.read_exact_at(&mut magic, offset).is_err() {
                continue;
            }
            if magic == [0; 4] {
                continue;
            }
            match read_packet(&self.file, file_len.min(status_at), offset)? {
                Found::Packet(header, payload) if header.kind == Kind::Events => {
                    let packet = events_packet(offset, &header, &payload)?;
                    if (packet.seq - 1) % u64::from(slots) != slot {
                        return Err(corrupt(offset, "a packet in another packet's slot"));
                    }
                    self.packets.push(packet);
                }
                Found::Packet(..) => return Err(corrupt(offset, "not an events packet")),
                Found::CutShort => {
                    damaged.push((offset, slot, "the packet runs past its slot".into()));
                }
                Found::Bad(what) => damaged.push((offset, slot, what)),
            }
        }
        self.packets.sort_by_key(|p| p.seq);
        for pair in self.packets.windows(2) {
            if pair[1].seq != pair[0].seq + 1 {
                let what = format!("packet {} follows packet {}", pair[1].seq, pair[0].seq);
                return Err(corrupt(pair[1].offset, what));
            }
        }
        // A writer that died may have left the slot it was writing torn; nothing else.
        let next_slot = self.packets.last().map_or(0, |p| p.seq % u64::from(slots));
        match (damaged.as_slice(), &self.final_status) {
            ([], None) => self.unclosed_at = Some(status_at),
            ([], Some(_)) => {}
            ([(offset, slot, _)], None) if *slot == next_slot => self.unclosed_at = Some(*offset),
            ([(offset, _, what), ..], _) => return Err(corrupt(*offset, what.clone())),
        }
        Ok(())
    }

    /// The log's metadata: attributes, where its packets are, event types.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The event type with this id, if the log has one.
    pub fn event_type(&self, id: u16) -> Option<&EventType> {
        self.types.get(&id)
    }

    /// The status packet, if the log was closed.
    pub fn final_status(&self) -> Option<&FinalStatus> {
        self.final_status.as_ref()
    }

    /// For a log whose writer did not close it, or that was cut short after it was
    /// ([`LogReader::cut_short`]): the offset up to which it reads.
    pub fn unclosed_at(&self) -> Option<u64> {
        self.unclosed_at
    }

    /// Whether the log was closed and then cut short: it reads up to
    /// [`LogReader::unclosed_at`], its status packet and what came before it lost.
    pub fn cut_short(&self) -> bool {
        self.cut_short
    }

    /// The status when the log was closed, or when its last packet was written.
    pub fn status(&self) -> Status {
        match (&self.final_status, self.packets.last()) {
            (Some(closed), _) => closed.status,
            (None, Some(last)) => last.status,
            (None, None) => Status::default(),
        }
    }

    /// Events a looping log overwrote before its oldest packet.
    pub fn overwritten(&self) -> u64 {
        self.packets.first().map_or(0, |p| p.first_index)
    }

    /// The type the log gives `event`; `None` for an event it does not list.
    pub fn type_of(&self, event: &Event) -> Option<&EventType> {
        self.ids.of(event).and_then(|id| self.types.get(&id))
    }

    /// The ids the log gives its event types.
    pub fn type_ids(&self) -> &TypeIds {
        &self.ids
    }

    /// Every event in order. A log that looped begins with an overflow standing for the
    /// events it overwrote.
    pub fn events(&self) -> Events<'_> {
        self.events_where(Filter::default())
    }

    /// The events `filter` lets through, in order (check its names with [`Filter::check`]
    /// first: a name the log does not have matches nothing).
    pub fn events_where(&self, filter: Filter) -> Events<'_> {
        Events {
            reader: self,
            cursor: Cursor::new(filter),
        }
    }

    /// The events of one packet, checked again as they are read (the file may have changed).
    fn packet_events(&self, packet: &PacketRef) -> Result<Vec<Event>, LogError> {
        let file_len = self.file.metadata()?.len();
        let (_, payload) = match read_packet(&self.file, file_len, packet.offset)? {
            Found::Packet(header, payload) if header.seq == packet.seq => (header, payload),
            _ => {
                return Err(corrupt(
                    packet.offset,
                    "the packet changed while it was read",
                ));
            }
        };
        let entries_at = packet.offset + (HEADER_LEN + CONTEXT_LEN) as u64;
        let Some(mut entries) = payload.get(CONTEXT_LEN..) else {
            return Err(corrupt(
                packet.offset,
                "the packet changed while it was read",
            ));
        };
        // The count is the file's word: room for no more events than the payload can hold.
        let most = (payload.len() - CONTEXT_LEN) / entry::ENTRY_HEADER_LEN;
        let mut events = Vec::with_capacity((packet.count as usize).min(most));
        while !entries.is_empty() {
            let offset = entries_at + (payload.len() - CONTEXT_LEN - entries.len()) as u64;
            let (event, size) =
                entry::decode(entries, &self.types).map_err(|e| corrupt(offset, e.to_string()))?;
            events.push(event);
            entries = &entries[size..];
        }
        if events.len() != packet.count as usize {
            let what = format!(
                "{} events where the packet says {}",
                events.len(),
                packet.count
            );
            return Err(corrupt(packet.offset, what));
        }
        Ok(events)
    }
}

fn events_packet(offset: u64, header: &Header, payload: &[u8]) -> Result<PacketRef, LogError> {
    let Some((context, _)) = payload.split_first_chunk::<CONTEXT_LEN>() else {
        return Err(corrupt(
            offset,
            "an events packet too short for its context",
        ));
    };
    let word = |at: usize| {
        u32::from_le_bytes([
            context[at],
            context[at + 1],
            context[at + 2],
            context[at + 3],
        ])
    };
    Ok(PacketRef {
        offset,
        seq: header.seq,
        first_index: u64::from(word(0)) | u64::from(word(4)) << 32,
        count: word(8),
        status: Status::from_bits(word(12)),
    })
}

fn status_packet(offset: u64, payload: &[u8]) -> Result<FinalStatus, LogError> {
    serde_json::from_slice(payload)
        .map_err(|e| corrupt(offset + HEADER_LEN as u64, format!("status: {e}")))
}

/// The events of a log in order; after an error, nothing more until [`Events::rewind`].
pub struct Events<'a> {
    reader: &'a LogReader,
    cursor: Cursor,
}

impl Events<'_> {
    /// Back to the first event.
    pub fn rewind(&mut self) {
        self.cursor.rewind();
    }
}

impl Iterator for Events<'_> {
    type Item = Result<Event, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.cursor.next(self.reader)
    }
}

/// A place in a log's events that does not borrow the log: for a reader kept beside its
/// position, as the C library keeps them. [`Events`] is one with its log.
#[derive(Debug)]
pub struct Cursor {
    filter: Filter,
    next_packet: usize,
    decoded: std::vec::IntoIter<Event>,
    failed: bool,
}

impl Cursor {
    /// Before the first event `filter` lets through.
    pub fn new(filter: Filter) -> Cursor {
        Cursor {
            filter,
            next_packet: 0,
            decoded: Vec::new().into_iter(),
            failed: false,
        }
    }

    /// Back to the first event.
    pub fn rewind(&mut self) {
        self.next_packet = 0;
        self.decoded = Vec::new().into_iter();
        self.failed = false;
    }

    /// The next event of `reader`'s log (the log this cursor was used with from the start).
    pub fn next(&mut self, reader: &LogReader) -> Option<Result<Event, LogError>> {
        loop {
            for event in self.decoded.by_ref() {
                if self.filter.matches(&event, || reader.type_of(&event)) {
                    return Some(Ok(event));
                }
            }
            if self.failed {
                return None;
            }
            let packet = *reader.packets.get(self.next_packet)?;
            self.next_packet += 1;
            match reader.packet_events(&packet) {
                Ok(mut events) => {
                    if self.next_packet == 1 && packet.first_index > 0 {
                        let time_ns = events.first().map_or(0, Event::time_ns);
                        let overflow = SystemKind::Overflow {
                            lost: packet.first_index,
                            cpu: NO_CPU,
                            source: LossSource::Log,
                            first_lost_ns: 0,
                        };
                        events.insert(0, Event::System(SystemEvent::new(time_ns, overflow)));
                    }
                    self.decoded = events.into_iter();
                }
                Err(error) => {
                    self.failed = true;
                    return Some(Err(error));
                }
            }
        }
    }
}
