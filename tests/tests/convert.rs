//! Logs read back: `info`, `convert --to tr` and `--to ctf`, and `dump`'s filters,
//! against what the same run wrote to its tr files and what the product's reader reads.

use std::{collections::BTreeMap, os::unix::fs::PermissionsExt, path::Path, process::Command};

use serde_json::Value;
use thrtrace_tests::{
    TempDir, bpf_available, log_and_dir, log_with_losses, program_available, read_trace, run_tracer,
};
use tracer_model::{
    event::{Event, SystemKind},
    log::LogReader,
    tr::Line,
};

/// Every file of `dir` by name, with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

#[test]
fn convert_to_tr_writes_what_dir_wrote_byte_for_byte() {
    if !bpf_available("convert_to_tr") {
        return;
    }
    let (dir, _) = log_and_dir(&[], &["4", "500"]);
    let run = run_tracer(dir.path(), &["convert", "app.ptl", "--to", "tr", "out"]);
    assert!(run.status.success(), "{run:?}");
    assert_eq!(run.stderr, "thrtrace-bpf: 5 files in out\n");
    let written = files(&dir.path().join("tr"));
    assert_eq!(written.len(), 5, "{:?}", written.keys());
    assert_eq!(files(&dir.path().join("out")), written);
    for name in written.keys() {
        let mode = std::fs::metadata(dir.path().join("out").join(name)).unwrap();
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
    }
    // Into the same directory again: the files are new ones, not appended to, and the earlier
    // ones are kept as NAME.old.
    let again = run_tracer(dir.path(), &["convert", "app.ptl", "--to", "tr", "out"]);
    assert!(again.status.success(), "{again:?}");
    assert_eq!(
        again.stderr,
        "thrtrace-bpf: 5 files in out (5 earlier tr files of their names kept as NAME.old)\n"
    );
    let mut both = written.clone();
    both.extend(
        written
            .iter()
            .map(|(name, bytes)| (format!("{name}.old"), bytes.clone())),
    );
    assert!(
        files(&dir.path().join("out")) == both,
        "{:?}",
        files(&dir.path().join("out")).keys()
    );
}

/// `--print` prints each event as it is recorded, in the order and form `dump` prints the same
/// run's log: tr lines, text and JSON, with the workload's own output in between.
#[test]
fn print_shows_live_what_dump_shows_of_the_log() {
    if !bpf_available("print") {
        return;
    }
    for format in ["tr", "text", "json"] {
        let (dir, run) = log_and_dir(&["--print", format], &["4", "500"]);
        let dumped = run_tracer(dir.path(), &["dump", "--format", format, "app.ptl"]);
        assert!(dumped.status.success(), "{dumped:?}");
        // The text dump begins with the log's attributes and status, which a live trace has
        // not written yet; the workload's own lines ("lwpid=...") begin with a letter.
        let events: Vec<&str> = dumped
            .stdout
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect();
        let printed: Vec<&str> = run
            .stdout
            .lines()
            .filter(|line| line.starts_with(|c: char| c.is_ascii_digit() || c == '{'))
            .collect();
        assert!(events.len() > 1000, "{format}: {}", events.len());
        // The log's own stream events (its stop and flush, at the end) are the log's alone.
        let own = [
            "posix_trace_stop",
            "posix_trace_flush_start",
            "posix_trace_flush_stop",
        ];
        let expected: Vec<&str> = events
            .iter()
            .copied()
            .filter(|line| !own.iter().any(|name| line.contains(name)))
            .collect();
        assert_eq!(printed, expected, "{format}");
    }
}

/// A CTF trace written live (`--ctf`) is the one `convert --to ctf` writes from the same run's
/// log: the metadata and each process's stream byte for byte; the trace's own stream lacks only
/// the log's bookkeeping of its stream (its stop and flush events), which a live CTF trace has
/// no stream to keep.
#[test]
fn a_live_ctf_trace_is_the_one_converted_from_the_log() {
    if !bpf_available("live_ctf") || !program_available("live_ctf", "babeltrace2") {
        return;
    }
    let (dir, run) = log_and_dir(&["--ctf", "live"], &["4", "500"]);
    assert!(
        run.stderr.contains(" events in a CTF trace in live"),
        "{}",
        run.stderr
    );
    let converted = run_tracer(dir.path(), &["convert", "app.ptl", "--to", "ctf", "out"]);
    assert!(converted.status.success(), "{converted:?}");
    let (live, out) = (
        files(&dir.path().join("live")),
        files(&dir.path().join("out")),
    );
    assert_eq!(
        live.keys().collect::<Vec<_>>(),
        out.keys().collect::<Vec<_>>()
    );
    let processes: Vec<&String> = live.keys().filter(|n| n.starts_with("process-")).collect();
    assert_eq!(processes.len(), 1, "{:?}", live.keys());
    for name in live.keys().filter(|&n| n != "trace") {
        assert!(live[name] == out[name], "{name} differs");
    }
    let events = |trace: &str| -> Vec<String> {
        let read = Command::new("babeltrace2")
            .arg(dir.path().join(trace))
            .output()
            .unwrap();
        assert!(read.status.success(), "{read:?}");
        String::from_utf8(read.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let log_keeping = [
        "posix_trace_stop:",
        "posix_trace_flush_start:",
        "posix_trace_flush_stop:",
    ];
    let kept_by_the_log = |line: &String| log_keeping.iter().any(|name| line.contains(name));
    let from_log: Vec<String> = events("out")
        .into_iter()
        .filter(|line| !kept_by_the_log(line))
        .collect();
    let live_events = events("live");
    assert!(live_events.len() > 100, "{live_events:?}");
    assert_eq!(live_events, from_log);
}

/// One log with losses for `info` and `convert --to ctf`: two tracers stalled at once on two
/// CPUs would make the losses depend on each other's timing.
#[test]
fn info_and_a_ctf_trace_count_every_event_and_every_loss() {
    if !bpf_available("info_and_ctf") || !program_available("info_and_ctf", "babeltrace2") {
        return;
    }
    let dir = TempDir::new("info-ctf");
    let (written, lost) = log_with_losses(&dir);
    info_counts_each_event_type_and_the_losses(&dir, written, lost);
    a_ctf_trace_reads_in_babeltrace2_with_every_event_and_every_loss(&dir, written, lost);
}

fn info_counts_each_event_type_and_the_losses(dir: &TempDir, written: u64, lost: u64) {
    let reader = LogReader::open(&dir.path().join("app.ptl")).unwrap();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for event in reader.events() {
        let event = event.unwrap();
        *counts
            .entry(reader.type_of(&event).unwrap().name.clone())
            .or_default() += 1;
    }

    let run = run_tracer(dir.path(), &["info", "--format", "json", "app.ptl"]);
    assert!(run.status.success(), "{run:?}");
    let info: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(info["thread_events"], written);
    assert_eq!(info["lost"]["ring"], lost);
    assert_eq!(info["closed"], true);
    assert_eq!(
        info["final_status"]["lost_per_cpu"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .sum::<u64>(),
        lost
    );
    assert_eq!(info["attributes"]["stream_full_policy"], "flush");
    assert_eq!(info["status"]["running"], false);
    let listed: BTreeMap<String, u64> = info["event_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["count"].as_u64().unwrap(),
            )
        })
        .filter(|(_, count)| *count > 0)
        .collect();
    assert_eq!(listed, counts);
    assert_eq!(
        info["event_types"].as_array().unwrap().len(),
        reader.metadata().event_types.len()
    );

    let text = run_tracer(dir.path(), &["info", "app.ptl"]);
    assert!(text.status.success(), "{text:?}");
    assert!(
        text.stdout.contains(&format!(
            "lost:            {lost} in the ring; the kernel's count at the end: {lost}\n"
        )),
        "{}",
        text.stdout
    );
    let mutex_locks = format!("{}  mutex_lock (mutex)\n", counts["mutex_lock"]);
    assert!(text.stdout.contains(&mutex_locks), "{}", text.stdout);
}

fn a_ctf_trace_reads_in_babeltrace2_with_every_event_and_every_loss(
    dir: &TempDir,
    written: u64,
    lost: u64,
) {
    let run = run_tracer(dir.path(), &["convert", "app.ptl", "--to", "ctf", "ctf"]);
    assert!(run.status.success(), "{run:?}");
    let reader = LogReader::open(&dir.path().join("app.ptl")).unwrap();
    let events: Vec<Event> = reader.events().map(Result::unwrap).collect();

    let babeltrace = Command::new("babeltrace2")
        .arg(dir.path().join("ctf"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&babeltrace.stdout);
    let stderr = String::from_utf8_lossy(&babeltrace.stderr);
    assert!(babeltrace.status.success(), "{stderr}");
    // `[time] (+delta) name: { packet context }, { fields }`
    let thread_lines: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            let name = l.split(' ').nth(2).unwrap_or("").trim_end_matches(':');
            reader
                .metadata()
                .event_types
                .iter()
                .any(|t| t.name == name && !t.is_system())
        })
        .collect();
    assert_eq!(thread_lines.len() as u64, written);
    assert_eq!(stdout.lines().count(), events.len());
    for field in [
        "pid", "lwpid", "tid", "caller", "which", "a1", "a2", "a3", "a4", "a5",
    ] {
        assert!(
            thread_lines[0].contains(&format!(" {field} = ")),
            "{}",
            thread_lines[0]
        );
    }
    let overflow = stdout
        .lines()
        .find(|l| l.contains("posix_trace_overflow"))
        .unwrap();
    for field in ["lost", "cpu", "source", "first_lost_ns"] {
        assert!(overflow.contains(&format!(" {field} = ")), "{overflow}");
    }
    // "WARNING: Tracer discarded 5 events between ..." (and "1 event").
    let discarded: u64 = stderr
        .lines()
        .filter_map(|l| {
            l.split("Tracer discarded ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert_eq!(discarded, lost, "{stderr}");
    let overflows: u64 = events
        .iter()
        .filter_map(|e| match e {
            Event::System(s) => match s.kind {
                SystemKind::Overflow { lost, .. } => Some(lost),
                _ => None,
            },
            Event::Thread(_) => None,
        })
        .sum();
    assert_eq!(overflows, lost);
}

#[test]
fn dump_reads_the_events_a_filter_names() {
    if !bpf_available("dump_filters") {
        return;
    }
    let (dir, _) = log_and_dir(&[], &["3", "200"]);
    let trace = read_trace(&dir.path().join("tr"));
    let (file, records) = trace.iter().find(|(_, r)| r.len() == 600).unwrap();
    let lwpid = records[0].lwpid.to_string();
    let run = run_tracer(
        dir.path(),
        &[
            "dump",
            "--format",
            "tr",
            "-e",
            "mutex_lock",
            "--lwpid",
            &lwpid,
            "app.ptl",
        ],
    );
    assert!(run.status.success(), "{run:?}");
    let expected: Vec<String> = records
        .iter()
        .filter(|r| r.is("mutex_lock", r.which))
        .map(|r| Line(r).to_string())
        .collect();
    assert_eq!(expected.len(), 400, "{file}");
    assert_eq!(run.stdout.lines().collect::<Vec<_>>(), expected);

    let system = run_tracer(dir.path(), &["dump", "-e", "system", "app.ptl"]);
    assert!(
        system
            .stdout
            .lines()
            .filter(|l| !l.starts_with('#'))
            .all(|l| l.contains(" posix_trace_") || l.contains(" thrtrace_")),
        "{}",
        system.stdout
    );

    let unknown = run_tracer(dir.path(), &["dump", "-e", "mutex:bogus", "app.ptl"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        unknown.stderr.starts_with("thrtrace-bpf: --events: 'bogus' is neither an event type nor a category of this log: it has thread, "),
        "{}",
        unknown.stderr
    );
    assert_eq!(unknown.stderr.lines().count(), 1);
}
