//! One event inside an events packet: a 40-byte header, then the payload its type lays out.
//!
//! | bytes | field |
//! |---|---|
//! | 0..2 | entry size, header included |
//! | 2..4 | event type id |
//! | 4..8 | pid (posix_pid) |
//! | 8..12 | lwpid |
//! | 12..16 | flags: bit 0 set if recorded truncated (POSIX_TRACE_TRUNCATED_RECORD) |
//! | 16..24 | time, CLOCK_REALTIME nanoseconds (i64) |
//! | 24..32 | pthread_t of the caller (posix_thread_id) |
//! | 32..40 | address the call returns to (posix_prog_address) |
//!
//! Payload fields follow one another with no padding: u16, u32, u64, i64 in their sizes;
//! `str` and `bytes` as a u32 length and that many bytes.

use std::collections::HashMap;

use tracer_common::Which;

use crate::{
    TraceRecord,
    event::{Event, EventType, FieldType, MAX_STRING, SystemEvent, SystemKind, Value},
    field_names,
};

/// Bytes of an entry before its payload.
pub const ENTRY_HEADER_LEN: usize = 40;
/// Bytes of a thread event's entry: the header, `which`, a1..a5 and `stack`.
pub const THREAD_ENTRY_LEN: usize = ENTRY_HEADER_LEN + 2 + 5 * 8 + 4;
const TRUNCATED: u32 = 1;

/// Appends `event` to `out`.
pub fn encode(event: &Event, out: &mut Vec<u8>) {
    match event {
        Event::Thread(r) => encode_thread(r, out),
        Event::System(e) => encode_system(e, out),
    }
}

/// A thread record's entry: a fixed size, made in one array and appended at once (the
/// tracer encodes one per record).
fn encode_thread(r: &TraceRecord, out: &mut Vec<u8>) {
    const LEN: usize = THREAD_ENTRY_LEN;
    let mut entry = [0u8; LEN];
    let type_id = crate::event::thread_type_id(r.event1, r.event2).unwrap_or(0);
    let header = Header {
        size: LEN as u16,
        type_id,
        pid: r.pid,
        lwpid: r.lwpid,
        flags: 0,
        time_ns: r.time_ns() as i64,
        thread_id: r.tid,
        prog_address: r.caller,
    };
    header.write(&mut entry[..ENTRY_HEADER_LEN]);
    entry[ENTRY_HEADER_LEN..ENTRY_HEADER_LEN + 2].copy_from_slice(&r.which.code().to_le_bytes());
    for (slot, a) in entry[ENTRY_HEADER_LEN + 2..LEN - 4]
        .chunks_exact_mut(8)
        .zip(r.a)
    {
        slot.copy_from_slice(&a.to_le_bytes());
    }
    entry[LEN - 4..].copy_from_slice(&r.stack.to_le_bytes());
    out.extend_from_slice(&entry);
}

fn encode_system(e: &SystemEvent, out: &mut Vec<u8>) {
    let start = out.len();
    // The payload, made once: it is checked for cut strings and then written.
    let values = e.kind.values();
    let cut = values.iter().any(|v| match v {
        Value::Str(s) => s.len() > MAX_STRING,
        Value::Bytes(b) => b.len() > MAX_STRING,
        _ => false,
    });
    let header = Header {
        size: 0,
        type_id: e.kind.type_id(),
        pid: e.pid,
        lwpid: e.lwpid,
        flags: if e.truncated || cut { TRUNCATED } else { 0 },
        time_ns: e.time_ns,
        thread_id: 0,
        prog_address: 0,
    };
    let mut bytes = [0u8; ENTRY_HEADER_LEN];
    header.write(&mut bytes);
    out.extend_from_slice(&bytes);
    for (value, &(_, ty)) in values.iter().zip(e.kind.fields()) {
        put_value(value, ty, out);
    }
    let size = (out.len() - start) as u16;
    out[start..start + 2].copy_from_slice(&size.to_le_bytes());
}

/// The fixed part of every entry, as the table above lays it out: written and read here only.
struct Header {
    /// The entry's bytes, this header included.
    size: u16,
    type_id: u16,
    pid: u32,
    lwpid: u32,
    flags: u32,
    time_ns: i64,
    thread_id: u64,
    prog_address: u64,
}

impl Header {
    /// Writes it into `out`, `ENTRY_HEADER_LEN` bytes.
    fn write(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.size.to_le_bytes());
        out[2..4].copy_from_slice(&self.type_id.to_le_bytes());
        out[4..8].copy_from_slice(&self.pid.to_le_bytes());
        out[8..12].copy_from_slice(&self.lwpid.to_le_bytes());
        out[12..16].copy_from_slice(&self.flags.to_le_bytes());
        out[16..24].copy_from_slice(&self.time_ns.to_le_bytes());
        out[24..32].copy_from_slice(&self.thread_id.to_le_bytes());
        out[32..40].copy_from_slice(&self.prog_address.to_le_bytes());
    }

    /// Reads it from an entry's first `ENTRY_HEADER_LEN` bytes.
    fn parse(bytes: &[u8; ENTRY_HEADER_LEN]) -> Result<Header, BadEntry> {
        let mut header = Cursor { bytes };
        Ok(Header {
            size: header.u16()?,
            type_id: header.u16()?,
            pid: header.u32()?,
            lwpid: header.u32()?,
            flags: header.u32()?,
            time_ns: header.i64()?,
            thread_id: header.u64()?,
            prog_address: header.u64()?,
        })
    }
}

fn put_value(value: &Value, ty: FieldType, out: &mut Vec<u8>) {
    let number = value.as_u64();
    match ty {
        FieldType::U16 => out.extend_from_slice(&(number as u16).to_le_bytes()),
        FieldType::U32 => out.extend_from_slice(&(number as u32).to_le_bytes()),
        FieldType::U64 | FieldType::I64 => out.extend_from_slice(&number.to_le_bytes()),
        FieldType::Str | FieldType::Bytes => {
            let bytes = match value {
                Value::Str(s) => s.as_bytes(),
                Value::Bytes(b) => b,
                _ => &[],
            };
            // Cut, and flagged as truncated by the caller: every entry fits a packet.
            let bytes = &bytes[..bytes.len().min(MAX_STRING)];
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
    }
}

/// The most bytes a payload of these fields takes (strings at their longest).
pub fn max_payload(fields: &[crate::event::FieldSpec]) -> u64 {
    fields
        .iter()
        .map(|f| match f.ty {
            FieldType::U16 => 2,
            FieldType::U32 => 4,
            FieldType::U64 | FieldType::I64 => 8,
            FieldType::Str | FieldType::Bytes => 4 + MAX_STRING as u64,
        })
        .sum()
}

/// Why an entry could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadEntry {
    /// The entry claims a size that does not fit (or is too small).
    Size(usize),
    /// Its type id is not in the log's list.
    UnknownType(u16),
    /// Its payload does not match its type's fields: the field named.
    Payload(&'static str),
}

impl std::fmt::Display for BadEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadEntry::Size(size) => write!(f, "an entry of {size} bytes does not fit"),
            BadEntry::UnknownType(id) => write!(f, "event type {id} is not in the log's list"),
            BadEntry::Payload(what) => write!(f, "the payload does not match its type: {what}"),
        }
    }
}

/// Reads the entry at the start of `bytes`: the event and the entry's size.
pub fn decode<S: std::hash::BuildHasher>(
    bytes: &[u8],
    types: &HashMap<u16, EventType, S>,
) -> Result<(Event, usize), BadEntry> {
    let Some(first) = bytes.first_chunk::<ENTRY_HEADER_LEN>() else {
        return Err(BadEntry::Size(bytes.len()));
    };
    let Header {
        size,
        type_id,
        pid,
        lwpid,
        flags,
        time_ns,
        thread_id,
        prog_address,
    } = Header::parse(first)?;
    let size = usize::from(size);
    if size < ENTRY_HEADER_LEN || size > bytes.len() {
        return Err(BadEntry::Size(size));
    }
    let event_type = types.get(&type_id).ok_or(BadEntry::UnknownType(type_id))?;
    let mut payload = Cursor {
        bytes: &bytes[ENTRY_HEADER_LEN..size],
    };
    let mut fields = Vec::with_capacity(event_type.payload.len());
    for spec in &event_type.payload {
        fields.push((spec.name.as_str(), payload.value(spec.ty)?));
    }
    if !payload.bytes.is_empty() {
        return Err(BadEntry::Payload("bytes left after the last field"));
    }
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| v.as_i64())
    };
    let which = |field: i64| {
        u16::try_from(field)
            .ok()
            .and_then(Which::from_code)
            .ok_or(BadEntry::Payload("a which that is not 0, 1 or 2"))
    };
    let event = if event_type.is_system() {
        Event::System(SystemEvent {
            time_ns,
            pid,
            lwpid,
            truncated: flags & TRUNCATED != 0,
            kind: SystemKind::from_fields(&event_type.name, &fields),
        })
    } else {
        let time = i128::from(time_ns);
        Event::Thread(TraceRecord {
            sec: time.div_euclid(1_000_000_000) as i64,
            nsec: time.rem_euclid(1_000_000_000) as i64,
            lwpid,
            pid,
            tid: thread_id,
            event1: event_type.event1,
            event2: event_type.event2,
            which: which(field(field_names::WHICH))?,
            a: field_names::A.map(field),
            caller: prog_address,
            stack: field(field_names::STACK) as u32,
        })
    };
    Ok((event, size))
}

/// Reads fields off the front of a slice.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], BadEntry> {
        let Some((head, rest)) = self.bytes.split_first_chunk::<N>() else {
            return Err(BadEntry::Payload("a field runs past the entry"));
        };
        self.bytes = rest;
        Ok(*head)
    }
    fn u16(&mut self) -> Result<u16, BadEntry> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, BadEntry> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, BadEntry> {
        self.take().map(u64::from_le_bytes)
    }
    fn i64(&mut self) -> Result<i64, BadEntry> {
        self.take().map(i64::from_le_bytes)
    }
    fn value(&mut self, ty: FieldType) -> Result<Value, BadEntry> {
        Ok(match ty {
            FieldType::U16 => Value::Unsigned(self.u16()?.into()),
            FieldType::U32 => Value::Unsigned(self.u32()?.into()),
            FieldType::U64 => Value::Unsigned(self.u64()?),
            FieldType::I64 => Value::Signed(self.i64()?),
            FieldType::Str | FieldType::Bytes => {
                let len = self.u32()? as usize;
                if len > self.bytes.len() {
                    return Err(BadEntry::Payload("a string runs past the entry"));
                }
                let (bytes, rest) = self.bytes.split_at(len);
                self.bytes = rest;
                match ty {
                    FieldType::Str => Value::Str(String::from_utf8_lossy(bytes).into_owned()),
                    _ => Value::Bytes(bytes.to_vec()),
                }
            }
        })
    }
}
