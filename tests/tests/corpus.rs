//! The malformed-log corpus (`tests/src/corpus.rs`) against every reader: the Rust API, each
//! CLI command, and the C API. None may panic, allocate what a file declares, or
//! return an event of a damaged packet as good. A log cut short is read up to its last whole
//! packet by each, said to be cut.

use std::path::{Path, PathBuf};

use thrtrace_tests::{TempDir, build_analyzer, corpus, run_tracer};
use tracer_model::{event::Event, log::LogReader};

/// What the Rust API makes of a log: the events it returned as good, and whether it refused
/// the log (at open, or at some packet).
fn read_all(path: &Path) -> (Vec<Event>, bool) {
    let Ok(reader) = LogReader::open(path) else {
        return (Vec::new(), true);
    };
    let mut good = Vec::new();
    for event in reader.events() {
        match event {
            Ok(event) => good.push(event),
            Err(_) => return (good, true),
        }
    }
    (good, false)
}

fn write_corpus(scratch: &TempDir) -> Vec<(&'static str, PathBuf)> {
    corpus::corpus(scratch.path())
        .into_iter()
        .map(|(name, bytes)| {
            let path = scratch.path().join(format!("{name}.ptl"));
            std::fs::write(&path, bytes).unwrap();
            (name, path)
        })
        .collect()
}

#[test]
fn the_rust_api_refuses_each_malformed_log_and_returns_no_damaged_event() {
    let scratch = TempDir::new("corpus-rust");
    let good = scratch.path().join("good.ptl");
    std::fs::write(&good, corpus::good_log(scratch.path())).unwrap();
    let (events, refused) = read_all(&good);
    assert!(!refused);
    assert_eq!(events.len(), 12);
    let cases = write_corpus(&scratch);
    assert!(cases.len() >= 20, "{} cases", cases.len());
    for (name, path) in cases {
        let (returned, refused) = read_all(&path);
        assert!(refused, "{name}: read as a good log");
        assert!(
            events.starts_with(&returned),
            "{name}: returned events the good log does not have"
        );
    }
}

#[test]
fn every_cli_command_gives_one_line_and_status_2_for_each_malformed_log() {
    let scratch = TempDir::new("corpus-cli");
    let commands: [&[&str]; 7] = [
        &["dump", "LOG"],
        &["dump", "--format", "tr", "LOG"],
        &["dump", "--format", "json", "LOG"],
        &["info", "LOG"],
        &["info", "--format", "json", "LOG"],
        &["convert", "LOG", "--to", "tr", "out"],
        &["convert", "LOG", "--to", "ctf", "out"],
    ];
    for (name, _) in write_corpus(&scratch) {
        let file = format!("{name}.ptl");
        for command in commands {
            let args: Vec<&str> = command
                .iter()
                .map(|&a| if a == "LOG" { file.as_str() } else { a })
                .collect();
            let run = run_tracer(scratch.path(), &args);
            assert_eq!(run.status.code(), Some(2), "{args:?}: {run:?}");
            let prefix = format!("thrtrace-bpf: cannot read {file}: ");
            assert!(run.stderr.starts_with(&prefix), "{args:?}: {}", run.stderr);
            assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {}", run.stderr);
            // Nothing converted from a log that cannot be read whole.
            assert!(!scratch.path().join("out").exists(), "{args:?}");
        }
    }
}

#[test]
fn the_c_api_returns_an_error_code_for_each_malformed_log() {
    let scratch = TempDir::new("corpus-c");
    let cases = write_corpus(&scratch);
    let program = build_analyzer("open_errors", scratch.path());
    let output = std::process::Command::new(&program)
        .args(cases.iter().map(|(_, path)| path))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), cases.len());
    for ((name, path), line) in cases.iter().zip(lines) {
        let (_, returned) = (read_all(path), line);
        let result = line.strip_prefix(&format!("{} ", path.display())).unwrap();
        // Refused at open (EINVAL), or at the damaged packet (EIO) after the good ones.
        let refused_at_open = result == format!("open={}", libc::EINVAL);
        let refused_later = result.ends_with(&format!(" end={}", libc::EIO));
        assert!(refused_at_open || refused_later, "{name}: {returned}");
        if refused_later {
            let (good, _) = read_all(path);
            assert_eq!(
                result,
                format!("events={} end={}", good.len(), libc::EIO),
                "{name}"
            );
        }
    }
}

/// A closed log cut short: each reader returns the events of its whole packets, and the CLI
/// says, in one line, that it was cut and where it reads up to.
#[test]
fn every_reader_reads_a_log_cut_short_up_to_its_last_whole_packet() {
    let scratch = TempDir::new("corpus-cut");
    let good = scratch.path().join("good.ptl");
    std::fs::write(&good, corpus::good_log(scratch.path())).unwrap();
    let (events, _) = read_all(&good);
    let thread_events = |events: &[Event]| {
        events
            .iter()
            .filter(|e| matches!(e, Event::Thread(_)))
            .count()
    };
    let cases: Vec<(&str, PathBuf, usize)> = corpus::cut_short(scratch.path())
        .into_iter()
        .map(|(name, bytes, kept)| {
            let path = scratch.path().join(format!("{name}.ptl"));
            std::fs::write(&path, bytes).unwrap();
            (name, path, kept)
        })
        .collect();
    let program = build_analyzer("open_errors", scratch.path());
    for (name, path, kept) in &cases {
        let reader = LogReader::open(path).unwrap();
        assert!(reader.cut_short(), "{name}");
        let (returned, refused) = read_all(path);
        assert!(!refused, "{name}");
        assert!(events.starts_with(&returned), "{name}");
        assert_eq!(thread_events(&returned), *kept, "{name}");

        let file = path.file_name().unwrap().to_str().unwrap();
        let run = run_tracer(scratch.path(), &["dump", "--format", "json", file]);
        assert_eq!(run.status.code(), Some(0), "{name}: {run:?}");
        assert_eq!(run.stdout.lines().count(), returned.len(), "{name}");
        let warning = format!(
            "thrtrace-bpf: warning: {file} was cut short after it was written (a partial copy, \
             a full disk): it reads up to byte {}, its last whole packet\n",
            reader.unclosed_at().unwrap()
        );
        assert_eq!(run.stderr, warning, "{name}");

        let output = std::process::Command::new(&program)
            .arg(path)
            .output()
            .unwrap();
        let said = String::from_utf8(output.stdout).unwrap();
        assert_eq!(
            said.trim_end(),
            format!("{} events={} end=0", path.display(), returned.len()),
            "{name}"
        );
    }
}
