//! The log format written and read back, and every kind of damage a reader must survive (the
//! named malformed logs are in `corpus.rs`).

use std::{fs::File, os::unix::fs::FileExt, path::PathBuf};

use thrtrace_tests::corpus::{metadata, mixed_events, record, write_log};
use tracer_model::{
    event::{Event, LossSource, SystemEvent, SystemKind},
    log::{
        EventPacket, FORMAT_NAME, FinalStatus, LogError, LogFullPolicy, LogReader, LogWriter,
        PacketPlacement, Status, Written,
        entry::THREAD_ENTRY_LEN,
        is_trace_log,
        packet::{Kind, checksum, seal},
    },
};

struct TempLog(PathBuf);

impl TempLog {
    fn new(name: &str) -> TempLog {
        let path = std::env::temp_dir().join(format!("ptl-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        TempLog(path)
    }
    fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.0).unwrap()
    }
    fn open(&self) -> Result<LogReader, LogError> {
        LogReader::open(&self.0)
    }
}

impl Drop for TempLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn a1s(reader: &LogReader) -> Vec<i64> {
    reader
        .events()
        .filter_map(|e| match e.unwrap() {
            Event::Thread(r) => Some(r.a[0]),
            Event::System(_) => None,
        })
        .collect()
}

#[test]
fn events_read_back_as_written_with_metadata_and_status() {
    let log = TempLog::new("roundtrip");
    let meta = metadata(None, LogFullPolicy::Append);
    let mut writer = LogWriter::create(File::create(&log.0).unwrap(), &meta).unwrap();
    let mut packet = EventPacket::default();
    let attach = Event::System(SystemEvent::of_process(
        7,
        10,
        0,
        SystemKind::ProcessAttach {
            exe: "/bin/app".into(),
            cmdline: vec!["app".into(), "x".repeat(2000)],
        },
    ));
    packet.push(&attach);
    packet.push(&record(1));
    writer.write(&[packet], Status::default()).unwrap();
    writer
        .close(FinalStatus {
            lost_per_cpu: vec![0, 3],
            ..FinalStatus::default()
        })
        .unwrap();
    let reader = log.open().unwrap();
    assert_eq!(reader.metadata(), &meta);
    let events: Vec<Event> = reader.events().map(Result::unwrap).collect();
    assert_eq!(events[1], record(1));
    let Event::System(system) = &events[0] else {
        panic!("{events:?}")
    };
    assert!(system.truncated, "a 2000-byte argument is cut to 1024");
    let SystemKind::ProcessAttach { cmdline, .. } = &system.kind else {
        panic!()
    };
    assert_eq!(
        cmdline[1].len(),
        1024 - "app\0".len(),
        "the joined command line is cut"
    );
    let status = reader.final_status().unwrap();
    assert_eq!(
        (status.events_written, status.lost_per_cpu.clone()),
        (2, vec![0, 3])
    );
    assert_eq!(reader.unclosed_at(), None);
}

#[test]
fn a_log_cut_anywhere_reads_up_to_its_last_whole_packet() {
    let log = TempLog::new("cut");
    write_log(&log.0, &metadata(None, LogFullPolicy::Append), 3, 10, false);
    let whole = log.bytes();
    let metadata_end = {
        let reader = log.open().unwrap();
        assert_eq!(a1s(&reader), (0..30).collect::<Vec<_>>());
        assert_eq!(reader.unclosed_at(), Some(whole.len() as u64));
        whole.len() - 3 * (24 + 16 + 10 * THREAD_ENTRY_LEN)
    };
    for cut in (metadata_end..whole.len()).step_by(37) {
        std::fs::write(&log.0, &whole[..cut]).unwrap();
        let reader = log.open().unwrap();
        let whole_packets = (cut - metadata_end) / (24 + 16 + 10 * THREAD_ENTRY_LEN);
        assert_eq!(a1s(&reader).len(), whole_packets * 10, "cut at {cut}");
        assert!(reader.unclosed_at().is_some());
    }
}

/// A closed log cut short after it was written (a partial copy, a full disk) reads up to its
/// last whole packet, said to be cut; cut inside its metadata, it cannot be read.
#[test]
fn a_closed_log_cut_anywhere_reads_up_to_its_last_whole_packet() {
    let log = TempLog::new("cut-closed");
    write_log(&log.0, &metadata(None, LogFullPolicy::Append), 3, 10, true);
    let whole = log.bytes();
    let reader = log.open().unwrap();
    assert_eq!(a1s(&reader).len(), 30);
    assert!(!reader.cut_short() && reader.unclosed_at().is_none());
    let packet = 24 + 16 + 10 * THREAD_ENTRY_LEN;
    // The same log unclosed: its packets end where the closed one's status packet begins.
    let unclosed = TempLog::new("cut-unclosed");
    write_log(
        &unclosed.0,
        &metadata(None, LogFullPolicy::Append),
        3,
        10,
        false,
    );
    let metadata_end = unclosed.bytes().len() - 3 * packet;
    for cut in (1..whole.len()).step_by(37) {
        std::fs::write(&log.0, &whole[..cut]).unwrap();
        match log.open() {
            Ok(reader) => {
                let packets = ((cut - metadata_end) / packet).min(3);
                assert!(reader.cut_short(), "cut at {cut}");
                assert_eq!(
                    a1s(&reader),
                    (0..10 * packets as i64).collect::<Vec<_>>(),
                    "cut at {cut}"
                );
                assert_eq!(
                    reader.unclosed_at(),
                    Some((metadata_end + packets * packet) as u64),
                    "cut at {cut}"
                );
            }
            Err(LogError::Corrupt { what, .. }) if cut > 24 => {
                assert!(
                    what.contains("ends inside its metadata"),
                    "cut at {cut}: {what}"
                );
            }
            Err(LogError::Corrupt { .. } | LogError::NotALog) => assert!(cut < metadata_end),
            Err(other) => panic!("cut at {cut}: {other}"),
        }
    }
}

#[test]
fn a_flipped_byte_before_the_end_is_an_error_naming_its_packet() {
    let log = TempLog::new("flip");
    write_log(&log.0, &metadata(None, LogFullPolicy::Append), 3, 10, true);
    let whole = log.bytes();
    let second_packet = whole.len() - 2 * (24 + 16 + 10 * THREAD_ENTRY_LEN) - 24 - 200;
    for at in [
        0,
        30,
        second_packet + 5,
        second_packet + 100,
        whole.len() - 3,
    ] {
        let mut damaged = whole.clone();
        damaged[at] ^= 0x40;
        std::fs::write(&log.0, &damaged).unwrap();
        let error = log.open().err().map(|e| e.to_string());
        match at {
            0 => assert_eq!(
                error.as_deref(),
                Some(LogError::NotALog.to_string().as_str())
            ),
            _ => assert!(
                error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("corrupt log at offset")),
                "byte {at}: {error:?}"
            ),
        }
    }
}

#[test]
fn foreign_files_and_other_versions_are_refused_clearly() {
    let log = TempLog::new("foreign");
    std::fs::write(&log.0, b"").unwrap();
    assert!(matches!(log.open(), Err(LogError::Empty)));
    std::fs::write(&log.0, b"1700000000:1:2:3:4:5:6:7:8:9:10:11:12\n").unwrap();
    assert!(matches!(log.open(), Err(LogError::NotALog)));
    write_log(&log.0, &metadata(None, LogFullPolicy::Append), 1, 1, true);
    let mut bytes = log.bytes();
    bytes[4] = 9;
    std::fs::write(&log.0, &bytes).unwrap();
    assert!(matches!(log.open(), Err(LogError::Version { found: 9 })));
}

#[test]
fn entries_that_lie_about_their_size_or_type_are_errors() {
    let log = TempLog::new("entries");
    let meta = metadata(None, LogFullPolicy::Append);
    for (at, value) in [(0usize, 10u8), (0, 0xff), (2, 0x7f)] {
        write_log(&log.0, &meta, 1, 2, true);
        let mut bytes = log.bytes();
        let entry = bytes.len() - 2 * THREAD_ENTRY_LEN - status_len(&bytes);
        bytes[entry + at] = value;
        // Reseal the packet so that only the entry is wrong.
        let packet_at = entry - 16 - 24;
        let payload = bytes[packet_at + 24..entry + 2 * THREAD_ENTRY_LEN].to_vec();
        let resealed =
            tracer_model::log::packet::seal(tracer_model::log::packet::Kind::Events, 1, &payload);
        bytes[packet_at..packet_at + resealed.len()].copy_from_slice(&resealed);
        std::fs::write(&log.0, &bytes).unwrap();
        let reader = log.open().unwrap();
        let error = reader.events().find_map(Result::err).map(|e| e.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.starts_with(&format!("corrupt log at offset {entry}"))),
            "byte {at} = {value}: {error:?}"
        );
    }
}

/// The length of the status packet that ends `bytes`.
fn status_len(bytes: &[u8]) -> usize {
    let start = (0..bytes.len() - 24)
        .rev()
        .find(|&i| &bytes[i..i + 4] == b"PTLP" && bytes[i + 6] == 3)
        .unwrap();
    bytes.len() - start
}

#[test]
fn a_looping_log_keeps_its_newest_packets_and_says_how_many_events_went() {
    let log = TempLog::new("loop");
    let meta = metadata(Some(64 << 10), LogFullPolicy::Loop);
    let PacketPlacement::Loop { slot_size, slots } = meta.packets else {
        panic!()
    };
    assert_eq!((slot_size, slots), (4096, 16));
    // 40 packets of 40 records (3,320 bytes each): the last 16 stay.
    write_log(&log.0, &meta, 40, 40, true);
    let reader = log.open().unwrap();
    assert_eq!(reader.overwritten(), 24 * 40);
    assert_eq!(a1s(&reader), (24 * 40..40 * 40).collect::<Vec<_>>());
    let first = reader.events().next().unwrap().unwrap();
    let Event::System(SystemEvent {
        kind: SystemKind::Overflow { lost, source, .. },
        ..
    }) = first
    else {
        panic!("{first:?}")
    };
    assert_eq!((lost, source), (960, LossSource::Log));
    assert!(reader.final_status().unwrap().status.log_overrun);
    let bytes = log.bytes();
    let metadata_len = 24 + u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    assert!(
        bytes.len() < metadata_len + (64 << 10) + 4096,
        "bounded by --log-size"
    );
}

#[test]
fn a_looping_log_whose_writer_died_mid_slot_reads_the_rest() {
    let log = TempLog::new("loop-torn");
    let meta = metadata(Some(64 << 10), LogFullPolicy::Loop);
    write_log(&log.0, &meta, 20, 40, false);
    let reader = log.open().unwrap();
    let region = reader.unclosed_at().unwrap() - 16 * 4096;
    drop(reader);
    // Packet 21 was being written into slot 4 (0-based) when the writer died: tear it.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&log.0)
        .unwrap();
    file.write_all_at(&[0x55; 100], region + 4 * 4096 + 300)
        .unwrap();
    let reader = log.open().unwrap();
    assert_eq!(reader.unclosed_at(), Some(region + 4 * 4096));
    assert_eq!(a1s(&reader), (5 * 40..20 * 40).collect::<Vec<_>>());
    // Tearing another slot too is damage no dying writer leaves.
    file.write_all_at(&[0x55; 100], region + 9 * 4096 + 300)
        .unwrap();
    assert!(matches!(log.open(), Err(LogError::Corrupt { .. })));
}

#[test]
fn until_full_keeps_the_oldest_and_counts_what_it_kept_out() {
    let log = TempLog::new("until-full");
    // Room for three packets of 40 records.
    let packet = 24 + 16 + 40 * THREAD_ENTRY_LEN as u64;
    let meta = metadata(Some(3 * packet + 40), LogFullPolicy::UntilFull);
    let outcomes = write_log(&log.0, &meta, 5, 40, true);
    assert_eq!(
        outcomes,
        [
            Written::Written,
            Written::Written,
            Written::Written,
            Written::LogFull,
            Written::LogFull
        ]
    );
    let reader = log.open().unwrap();
    assert_eq!(a1s(&reader), (0..120).collect::<Vec<_>>());
    let status = reader.final_status().unwrap();
    assert_eq!(
        (status.events_written, status.events_not_written),
        (120, 80)
    );
    assert!(status.status.log_full && status.status.log_overrun);
}

#[test]
fn packets_written_together_make_the_same_log_as_written_one_by_one() {
    let running = Status {
        running: true,
        ..Status::default()
    };
    // An appended log whose packets take more than one write together (over 512 KiB), a
    // looping one, and one that fills (until-full) partway through the packets.
    for (name, meta, packets, per_packet) in [
        ("append", metadata(None, LogFullPolicy::Append), 20, 800),
        (
            "loop",
            metadata(Some(64 << 10), LogFullPolicy::Loop),
            40,
            40,
        ),
        (
            "full",
            metadata(Some(16 << 10), LogFullPolicy::UntilFull),
            10,
            40,
        ),
    ] {
        let one_by_one = TempLog::new(&format!("{name}-each"));
        let outcomes = write_log(&one_by_one.0, &meta, packets, per_packet, true);
        let together = TempLog::new(&format!("{name}-together"));
        let mut writer = LogWriter::create(File::create(&together.0).unwrap(), &meta).unwrap();
        let all: Vec<EventPacket> = (0..packets)
            .map(|p| {
                let mut packet = EventPacket::default();
                for n in 0..per_packet {
                    packet.push(&record(p * per_packet + n));
                }
                packet
            })
            .collect();
        let outcome = writer.write(&all, running).unwrap();
        writer.close(FinalStatus::default()).unwrap();
        let any_full = outcomes.contains(&Written::LogFull);
        assert_eq!(any_full, name == "full", "{name}");
        assert_eq!(outcome == Written::LogFull, any_full, "{name}");
        let (each, both) = (one_by_one.bytes(), together.bytes());
        assert_eq!(each.len(), both.len(), "{name}");
        assert!(each == both, "{name}: the logs differ");
    }
}

#[test]
fn a_log_whose_type_ids_are_table_rows_reads_as_written() {
    // Written by the log writer before type ids were fixed by codes (ids 1.. in table
    // order): a log's own list gives its ids meaning, so it reads the same today.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/log-ids-by-table-row.ptl"
    );
    let reader = LogReader::open(std::path::Path::new(path)).unwrap();
    let types = &reader.metadata().event_types;
    let mutex_lock = types.iter().find(|t| t.name == "mutex_lock");
    assert_eq!(mutex_lock.map(|t| t.id), Some(24));
    let events: Vec<Event> = reader.events().map(Result::unwrap).collect();
    assert_eq!(events, mixed_events());
}

/// What `--log FILE` keeps as `FILE.old` rather than refuse: a file that begins with a whole
/// metadata packet naming the format, whatever follows it and whatever its version.
#[test]
fn a_trace_log_is_told_by_its_metadata_packet() {
    let log = TempLog::new("is-log");
    write_log(&log.0, &metadata(None, LogFullPolicy::Append), 3, 10, true);
    let whole = log.bytes();
    let is_log = |bytes: &[u8]| {
        std::fs::write(&log.0, bytes).unwrap();
        is_trace_log(&File::open(&log.0).unwrap()).unwrap()
    };
    assert!(is_log(&whole));
    let metadata_end = 24 + u32::from_le_bytes(whole[16..20].try_into().unwrap()) as usize;
    // Damaged after its metadata, or cut right after it: a log still, which its reader
    // refuses or reads as far as it goes.
    let mut damaged = whole.clone();
    damaged[metadata_end + 30] ^= 0x40;
    assert!(is_log(&damaged));
    assert!(matches!(log.open(), Err(LogError::Corrupt { .. })));
    assert!(is_log(&whole[..metadata_end]));
    // Another format version, its checksum made again: a log, of a version not read here.
    let mut other_version = whole[..metadata_end].to_vec();
    other_version[4] = 9;
    let crc = checksum(&other_version[..20], &other_version[24..]);
    other_version[20..24].copy_from_slice(&crc.to_le_bytes());
    assert!(is_log(&other_version));
    assert!(matches!(log.open(), Err(LogError::Version { found: 9 })));
    let named = format!(r#"{{"format": "{FORMAT_NAME}"}}"#);
    assert!(is_log(&seal(Kind::Metadata, 0, named.as_bytes())));

    let mut flipped = whole.clone();
    flipped[30] ^= 0x40;
    let not_logs: [&[u8]; 7] = [
        b"",
        b"1700000000:1:2:3:4:5:6:7:8:9:10:11:12\n",
        b"PTLP",
        &whole[..metadata_end - 1],
        &flipped,
        &seal(Kind::Metadata, 0, br#"{"format": "another format"}"#),
        &seal(Kind::Events, 0, named.as_bytes()),
    ];
    for (n, bytes) in not_logs.into_iter().enumerate() {
        assert!(!is_log(bytes), "not a log {n}");
    }
}
