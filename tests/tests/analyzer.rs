//! The POSIX trace analyzer API in C (`libposixtrace`, `posixtrace/include/trace.h`), by C
//! analyzers built against it (tests/analyzers), checked against the tr files of the same run
//! and the product's own reader.

use std::{collections::BTreeMap, process::Command};

use thrtrace_tests::{TempDir, bpf_available, build_analyzer, log_and_dir, read_trace};
use tracer_model::{
    event::EventType,
    log::{LogReader, entry},
    tr::{file_name, parse_line},
};

fn run(program: &std::path::Path, args: &[&std::path::Path]) -> String {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{}: {}",
        program.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn a_c_analyzer_prints_the_tr_files_of_the_same_run() {
    if !bpf_available("c_analyzer_tr") {
        return;
    }
    let (dir, _) = log_and_dir(&[], &["4", "500"]);
    let program = build_analyzer("print_tr", dir.path());
    let log = dir.path().join("app.ptl");
    let output = run(&program, &[&log]);

    let reader = LogReader::open(&log).unwrap();
    let listed: Vec<String> = reader
        .metadata()
        .event_types
        .iter()
        .map(|t| format!("# {} {}", t.id, t.name))
        .collect();
    let (types, lines): (Vec<&str>, Vec<&str>) = output.lines().partition(|l| l.starts_with('#'));
    assert_eq!(types, listed);

    // Each thread's lines, in the order printed, are its tr file's.
    let mut by_file: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in &lines {
        let record = parse_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        by_file
            .entry(file_name(record.pid, record.lwpid))
            .or_default()
            .push((*line).to_owned());
    }
    let tr_dir = dir.path().join("tr");
    let files: Vec<String> = read_trace(&tr_dir).into_keys().collect();
    assert_eq!(by_file.keys().cloned().collect::<Vec<_>>(), files);
    for (name, printed) in by_file {
        let written = std::fs::read_to_string(tr_dir.join(&name)).unwrap();
        assert_eq!(printed.join("\n") + "\n", written, "{name}");
    }
}

#[test]
fn a_c_analyzer_reads_the_attributes_and_status_the_log_holds() {
    if !bpf_available("c_analyzer_attributes") {
        return;
    }
    let (dir, _) = log_and_dir(
        &[
            "--name",
            "attributes",
            "--follow",
            "--stream-size",
            "1M",
            "--stream-full-policy",
            "loop",
            "--log-size",
            "2M",
            "--log-full-policy",
            "until-full",
        ],
        &["2", "100"],
    );
    let program = build_analyzer("attributes", dir.path());
    let log = dir.path().join("app.ptl");
    let output = run(&program, &[&log]);
    let values: BTreeMap<&str, &str> = output.lines().filter_map(|l| l.split_once('=')).collect();

    let reader = LogReader::open(&log).unwrap();
    let attributes = &reader.metadata().attributes;
    let seconds = |ns: i64| format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
    let status = reader.status();
    let max_system = reader
        .metadata()
        .event_types
        .iter()
        .filter(|t| t.is_system())
        .map(|t| 40 + entry::max_payload(&t.payload))
        .max()
        .unwrap();
    let start_id = reader
        .metadata()
        .event_types
        .iter()
        .find(|t| t.name == "posix_trace_start")
        .map(|t: &EventType| t.id)
        .unwrap();
    let expected: BTreeMap<&str, String> = [
        ("genversion", attributes.generation_version.clone()),
        ("name", "attributes".to_owned()),
        ("createtime", seconds(attributes.creation_time_ns)),
        ("clockres", seconds(attributes.clock_resolution_ns as i64)),
        ("inherited", "inherited".to_owned()),
        ("streamfullpolicy", "loop".to_owned()),
        ("logfullpolicy", "until-full".to_owned()),
        ("streamsize", (1u64 << 20).to_string()),
        ("logsize", (2u64 << 20).to_string()),
        ("maxdatasize", attributes.max_data_size.to_string()),
        ("maxsystemeventsize", max_system.to_string()),
        ("maxusereventsize(100)", "140".to_owned()),
        (
            "stream_status",
            if status.running {
                "running"
            } else {
                "suspended"
            }
            .to_owned(),
        ),
        ("stream_full", u8::from(status.full).to_string()),
        ("stream_overrun", u8::from(status.overrun).to_string()),
        ("flushing", "0".to_owned()),
        ("flush_error", "0".to_owned()),
        ("log_overrun", u8::from(status.log_overrun).to_string()),
        ("log_full", u8::from(status.log_full).to_string()),
        ("overflow", "posix_trace_overflow".to_owned()),
        ("equal", "1 unequal=0".to_owned()),
        ("first", format!("{start_id} len=2 truncation=read")),
        ("events", reader.events().count().to_string()),
        ("types", reader.metadata().event_types.len().to_string()),
        ("again", reader.metadata().event_types.len().to_string()),
        ("same_first", "1".to_owned()),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        values,
        expected
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect::<BTreeMap<_, _>>()
    );
    assert_eq!(values["stream_status"], "suspended");
}

#[test]
fn a_c_analyzer_gets_an_error_code_for_files_that_are_not_logs_and_reads_cut_ones() {
    if !bpf_available("c_analyzer_errors") {
        return;
    }
    let (dir, _) = log_and_dir(&[], &["2", "100"]);
    let log = dir.path().join("app.ptl");
    let whole = std::fs::read(&log).unwrap();
    let scratch = TempDir::new("c-errors");
    let write = |name: &str, bytes: &[u8]| {
        let path = scratch.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let mut flipped = whole.clone();
    flipped[whole.len() / 2] ^= 0x40;
    let files = [
        write("text", b"1:2:3:4:5:6:7:8:9:10:11:12:13\n"),
        write("empty", b""),
        write("cut-in-metadata", &whole[..100]),
        write("cut-in-the-middle", &whole[..whole.len() / 2]),
        write("cut-before-the-status", &whole[..whole.len() - 20]),
        write("flipped", &flipped),
        log.clone(),
    ];
    let program = build_analyzer("open_errors", scratch.path());
    let args: Vec<&std::path::Path> = files.iter().map(std::path::PathBuf::as_path).collect();
    let output = run(&program, &args);
    let events = |path: &std::path::Path| LogReader::open(path).unwrap().events().count();
    // Cut after its metadata, a log reads up to its last whole packet (all of it, cut in its
    // status packet).
    let (middle, before_status) = (events(&files[3]), events(&files[4]));
    assert!(middle < before_status, "{middle} {before_status}");
    assert_eq!(before_status, events(&log));
    let refused = |f: &std::path::PathBuf| format!("{} open={}", f.display(), libc::EINVAL);
    let read = |f: &std::path::PathBuf, n: usize| format!("{} events={n} end=0", f.display());
    let expected = [
        refused(&files[0]),
        refused(&files[1]),
        refused(&files[2]),
        read(&files[3], middle),
        read(&files[4], before_status),
        refused(&files[5]),
        read(&log, before_status),
    ];
    assert_eq!(output.lines().collect::<Vec<_>>(), expected);
}
