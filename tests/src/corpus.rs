//! Logs made with the product's own `LogWriter` for tests, and the malformed-log corpus: named
//! logs, each made from a good one by one kind of damage, that every reader must refuse with an error: the Rust
//! API, every CLI command, the C API, and the fuzzer, which starts from them. A good log cut
//! short past its metadata is no such damage: every reader reads its whole packets
//! ([`cut_short`]).
//!
//! Most damage is made behind the packet checksums (the CRC is computed again), so that it
//! reaches the checks after them: a reader must not rely on the CRC alone.

use std::{fs::File, path::Path};
use tracer_common::Which;

use tracer_model::{
    TraceRecord,
    event::{Event, LossSource, SystemEvent, SystemKind, event_types},
    log::{
        Attributes, EventPacket, FORMAT_NAME, FORMAT_VERSION, FinalStatus, Inheritance,
        LogFullPolicy, LogWriter, Metadata, PacketPlacement, Status, StreamFullPolicy, Written,
        entry::ENTRY_HEADER_LEN,
        packet::{HEADER_LEN, Kind, checksum, seal},
        write::CONTEXT_LEN,
    },
};

/// Events packets in the good log, and thread events in each.
const PACKETS: i64 = 3;
const PER_PACKET: i64 = 4;

/// A log's metadata, with this build's event types, for at most `max` bytes under `policy`.
pub fn metadata(max: Option<u64>, policy: LogFullPolicy) -> Metadata {
    Metadata {
        format: FORMAT_NAME.into(),
        format_version: FORMAT_VERSION,
        attributes: Attributes {
            generation_version: "test".into(),
            trace_name: "t".into(),
            creation_time_ns: 1,
            clock_resolution_ns: 1,
            stream_min_size: 1 << 20,
            stream_full_policy: StreamFullPolicy::Flush,
            max_data_size: 42,
            inheritance: Inheritance::CloseForChild,
            log_max_size: max,
            log_full_policy: policy,
        },
        packets: PacketPlacement::choose(max, policy),
        event_types: event_types(),
    }
}

/// Thread event `n`: mutex_lock entry by thread 11 of process 10, a1 = n.
pub fn record(n: i64) -> Event {
    Event::Thread(TraceRecord {
        sec: 1_700_000_000 + n,
        nsec: 5,
        lwpid: 11,
        pid: 10,
        tid: 0x7f00,
        event1: 2,
        event2: 2,
        which: Which::Entry,
        a: [n, -1, 2, 3, 4],
        caller: 0x4010,
        stack: 0,
    })
}

/// Events of several thread and system types, in time order: what the log kept as a fixture
/// (`tests/fixtures/`) holds, written with the type ids of an earlier build.
pub fn mixed_events() -> Vec<Event> {
    let thread = |n: i64, event1: u16, event2: u16, which: Which| {
        Event::Thread(TraceRecord {
            sec: 1_700_000_000,
            nsec: n,
            lwpid: 11 + (n % 2) as u32,
            pid: 10,
            tid: 0x7f00,
            event1,
            event2,
            which,
            a: [0x5000 + n, n, -n, 0, 1],
            caller: 0x4010 + n as u64,
            stack: 0,
        })
    };
    let system = |n: i64, kind: SystemKind| {
        Event::System(SystemEvent::of_process(
            1_700_000_000_000_000_000 + n,
            10,
            11,
            kind,
        ))
    };
    vec![
        system(
            0,
            SystemKind::Start {
                filter: vec!["mutex_init".into()],
                contended: false,
            },
        ),
        system(
            1,
            SystemKind::ThreadName {
                name: "worker".into(),
            },
        ),
        thread(2, 1, 1, Which::Entry),
        thread(3, 2, 2, Which::Entry),
        thread(4, 2, 2, Which::Return),
        thread(5, 3, 4, Which::Entry),
        system(
            6,
            SystemKind::Overflow {
                lost: 3,
                cpu: 1,
                source: LossSource::Ring,
                first_lost_ns: 0,
            },
        ),
        system(7, SystemKind::Resume),
        thread(8, 4, 3, Which::Whole),
        thread(9, 9, 2, Which::Return),
        system(
            10,
            SystemKind::Mapping {
                start: 0x1000,
                end: 0x2000,
                file_offset: 0,
                build_id: vec![0xab, 0xcd],
                path: "/lib/libc.so.6".into(),
            },
        ),
        system(
            11,
            SystemKind::Deadlock {
                certain: true,
                threads: "[]".into(),
                message: "m".into(),
            },
        ),
        system(12, SystemKind::ProcessDetach),
        system(13, SystemKind::Stop { auto: 0 }),
    ]
}

/// Writes a log to `path`: `packets` packets of `per_packet` records each (record n has
/// a1 = n), written while running, then closed if `close`. Returns what became of each packet.
pub fn write_log(
    path: &Path,
    metadata: &Metadata,
    packets: i64,
    per_packet: i64,
    close: bool,
) -> Vec<Written> {
    let mut writer = LogWriter::create(File::create(path).unwrap(), metadata).unwrap();
    let running = Status {
        running: true,
        ..Status::default()
    };
    let outcomes = (0..packets)
        .map(|p| {
            let mut packet = EventPacket::default();
            for n in 0..per_packet {
                packet.push(&record(p * per_packet + n));
            }
            writer.write(&[packet], running).unwrap()
        })
        .collect();
    if close {
        writer.close(FinalStatus::default()).unwrap();
    }
    outcomes
}

/// A good appended log, closed: metadata, three events packets of four records, status.
pub fn good_log(scratch: &Path) -> Vec<u8> {
    let path = scratch.join("good.ptl");
    let append = metadata(None, LogFullPolicy::Append);
    write_log(&path, &append, PACKETS, PER_PACKET, true);
    std::fs::read(path).unwrap()
}

/// A good looping log, closed, whose slots have all been written (some twice).
fn good_loop_log(scratch: &Path) -> (Vec<u8>, PacketPlacement) {
    let looping = metadata(Some(PacketPlacement::MIN_LOOP_SIZE), LogFullPolicy::Loop);
    let PacketPlacement::Loop { slots, .. } = looping.packets else {
        unreachable!("a looping log")
    };
    let path = scratch.join("good-loop.ptl");
    write_log(&path, &looping, i64::from(slots) + 2, PER_PACKET, true);
    (std::fs::read(path).unwrap(), looping.packets)
}

/// Where each packet of an appended log starts, and its length, header included.
fn packets(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut at = 0;
    while at + HEADER_LEN <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 16..at + 20].try_into().unwrap()) as usize;
        found.push((at, HEADER_LEN + len));
        at += HEADER_LEN + len;
    }
    found
}

/// Computes the CRC of the packet at `at` again, as a writer would have.
fn reseal(bytes: &mut [u8], at: usize) {
    let len = u32::from_le_bytes(bytes[at + 16..at + 20].try_into().unwrap()) as usize;
    let payload = &bytes[at + HEADER_LEN..at + HEADER_LEN + len];
    let crc = checksum(&bytes[at..at + 20], payload);
    bytes[at + 20..at + 24].copy_from_slice(&crc.to_le_bytes());
}

fn flip(mut bytes: Vec<u8>, at: usize, mask: u8) -> Vec<u8> {
    bytes[at] ^= mask;
    bytes
}

fn put(mut bytes: Vec<u8>, at: usize, value: &[u8], reseal_at: Option<usize>) -> Vec<u8> {
    bytes[at..at + value.len()].copy_from_slice(value);
    if let Some(packet) = reseal_at {
        reseal(&mut bytes, packet);
    }
    bytes
}

/// A log with the metadata packet's JSON replaced by `json` (offsets after it shift with it:
/// an appended log's packets are found by walking, so it stays readable up to the change).
fn with_metadata(good: &[u8], json: &[u8], seq: u64) -> Vec<u8> {
    let (_, metadata_len) = packets(good)[0];
    let mut bytes = seal(Kind::Metadata, seq, json);
    bytes.extend_from_slice(&good[metadata_len..]);
    bytes
}

/// The good log closed and then cut short past its metadata (a partial copy, a full disk), by
/// name, with the thread events of its whole packets, which every reader returns.
pub fn cut_short(scratch: &Path) -> Vec<(&'static str, Vec<u8>, usize)> {
    let good = good_log(scratch);
    let at = packets(&good);
    let (metadata, first, second, status) = (at[0], at[1], at[2], at[4]);
    let cut = |end: usize| good[..end].to_vec();
    let per_packet = PER_PACKET as usize;
    let all = (PACKETS * PER_PACKET) as usize;
    vec![
        ("cut-after-metadata", cut(metadata.1), 0),
        ("cut-in-events-header", cut(first.0 + 12), 0),
        ("cut-in-events-context", cut(first.0 + HEADER_LEN + 8), 0),
        (
            "cut-in-an-entry",
            cut(first.0 + HEADER_LEN + CONTEXT_LEN + 20),
            0,
        ),
        ("cut-between-packets", cut(second.0), per_packet),
        ("cut-before-status", cut(status.0), all),
        ("cut-in-status", cut(status.0 + status.1 - 3), all),
    ]
}

/// Every malformed log of the corpus, by name.
pub fn corpus(scratch: &Path) -> Vec<(&'static str, Vec<u8>)> {
    let good = good_log(scratch);
    let at = packets(&good);
    let (metadata, first, second, third, status) = (at[0], at[1], at[2], at[3], at[4]);
    let closed_seq = u64::from_le_bytes(good[8..16].try_into().unwrap());
    let metadata_json = &good[HEADER_LEN..metadata.1];
    let thread_entry = first.0 + HEADER_LEN + CONTEXT_LEN;
    let (loop_log, packets) = good_loop_log(scratch);
    let PacketPlacement::Loop { slot_size, .. } = packets else {
        unreachable!("a looping log")
    };
    let slot = |n: usize| metadata.1 + n * slot_size as usize;
    let cut = |end: usize| good[..end].to_vec();

    let mut duplicated = json_value(metadata_json);
    let types = duplicated["event_types"].as_array_mut().unwrap();
    types.push(types[0].clone());
    let mut swapped = good.clone();
    swapped[second.0..second.0 + second.1].copy_from_slice(&good[third.0..third.0 + third.1]);
    swapped[third.0..third.0 + third.1].copy_from_slice(&good[second.0..second.0 + second.1]);
    let mut repeated = good.clone();
    repeated[third.0..third.0 + third.1].copy_from_slice(&good[second.0..second.0 + second.1]);
    let mut wrapped = loop_log.clone();
    let half = slot_size as usize / 2;
    wrapped.copy_within(slot(2)..slot(2) + half, slot(1) + 100);
    let mut second_metadata = good.clone();
    second_metadata.truncate(status.0);
    second_metadata.extend_from_slice(&seal(Kind::Metadata, 4, metadata_json));
    second_metadata.extend_from_slice(&good[status.0..]);
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"and some bytes after the status packet");

    vec![
        ("empty", Vec::new()),
        ("magic-only", good[..4].to_vec()),
        (
            "not-a-log",
            b"sec:nsec:lwpid:pid:tid:event1:event2:which\n".to_vec(),
        ),
        ("wrong-magic", put(good.clone(), 0, b"PTLQ", None)),
        (
            "future-version",
            put(good.clone(), 4, &2u16.to_le_bytes(), Some(0)),
        ),
        ("cut-in-metadata-header", cut(10)),
        ("cut-after-metadata-header", cut(HEADER_LEN)),
        ("cut-in-metadata", cut(metadata.1 / 2)),
        (
            "flipped-bit-in-magic",
            flip(good.clone(), second.0 + 1, 0x01),
        ),
        (
            "flipped-bit-in-version",
            flip(good.clone(), second.0 + 4, 0x02),
        ),
        (
            "flipped-bit-in-kind",
            flip(good.clone(), second.0 + 6, 0x04),
        ),
        (
            "flipped-bit-in-sequence",
            flip(good.clone(), second.0 + 8, 0x01),
        ),
        (
            "flipped-bit-in-length",
            flip(good.clone(), second.0 + 17, 0x01),
        ),
        (
            "flipped-bit-in-checksum",
            flip(good.clone(), second.0 + 22, 0x80),
        ),
        (
            "flipped-bit-in-payload",
            flip(good.clone(), thread_entry + 50, 0x10),
        ),
        (
            "flipped-bit-in-metadata",
            flip(good.clone(), HEADER_LEN + 30, 0x08),
        ),
        (
            "flipped-bit-in-status",
            flip(good.clone(), status.0 + HEADER_LEN + 5, 0x01),
        ),
        (
            "huge-declared-length",
            put(good.clone(), first.0 + 16, &u32::MAX.to_le_bytes(), None),
        ),
        (
            "length-past-the-end",
            put(
                good.clone(),
                first.0 + 16,
                &(16u32 << 20).to_le_bytes(),
                None,
            ),
        ),
        (
            "huge-event-count",
            put(
                good.clone(),
                first.0 + HEADER_LEN + 8,
                &u32::MAX.to_le_bytes(),
                Some(first.0),
            ),
        ),
        (
            "event-id-not-in-the-list",
            put(
                good.clone(),
                thread_entry + 2,
                &0x7777u16.to_le_bytes(),
                Some(first.0),
            ),
        ),
        (
            "entry-longer-than-its-packet",
            put(
                good.clone(),
                thread_entry,
                &u16::MAX.to_le_bytes(),
                Some(first.0),
            ),
        ),
        (
            "entry-shorter-than-its-header",
            put(
                good.clone(),
                thread_entry,
                &((ENTRY_HEADER_LEN - 1) as u16).to_le_bytes(),
                Some(first.0),
            ),
        ),
        ("packets-out-of-order", swapped),
        ("packet-repeated", repeated),
        ("second-metadata-packet", second_metadata),
        ("data-after-status", trailing),
        (
            "metadata-not-json",
            with_metadata(&good, b"{\"format\": ", closed_seq),
        ),
        (
            "event-type-listed-twice",
            with_metadata(&good, duplicated.to_string().as_bytes(), closed_seq),
        ),
        ("status-not-json", {
            let mut bytes = good[..status.0].to_vec();
            bytes.extend_from_slice(&seal(Kind::Status, closed_seq, b"[1, 2"));
            bytes
        }),
        ("loop-wrapped-mid-packet", wrapped),
    ]
}

fn json_value(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}
