//! `--log FILE`: the POSIX trace stream and its log, read back with the product's own reader
//! and with `dump`.

use std::{collections::HashSet, time::Duration};

use thrtrace_tests::{
    Gated, Run, TempDir, TraceRecord, bpf_available, log_and_dir, log_with_losses, read_trace,
    run_tracer, run_workload, signal, start_tracer, summary_count, system_events, thread_records,
    wait_until,
};
use tracer_common::{Category, Which};
use tracer_model::{
    event::{Event, LossSource, SystemEvent, SystemKind},
    log::LogReader,
    tr::Line,
};

fn events_of(dir: &TempDir) -> (LogReader, Vec<Event>) {
    let reader = LogReader::open(&dir.path().join("app.ptl")).expect("a readable log");
    let events = reader.events().map(|e| e.expect("an event")).collect();
    (reader, events)
}

/// Records in time order, each thread's own order kept. Two threads' records stamped in the
/// same nanosecond go by thread id: neither the log nor the files can say which came first.
fn in_time_order(mut records: Vec<TraceRecord>) -> Vec<TraceRecord> {
    records.sort_by_key(|r| (r.time_ns(), r.lwpid));
    records
}

/// Every record of the tr.* files in `dir`, in time order.
fn tr_records(dir: &TempDir) -> Vec<TraceRecord> {
    in_time_order(
        read_trace(&dir.path().join("tr"))
            .into_values()
            .flatten()
            .collect(),
    )
}

fn without_callers(records: &[TraceRecord]) -> Vec<TraceRecord> {
    records
        .iter()
        .map(|r| TraceRecord { caller: 0, ..*r })
        .collect()
}

fn dump(dir: &TempDir, args: &[&str]) -> Run {
    let mut argv = vec!["dump"];
    argv.extend_from_slice(args);
    argv.push("app.ptl");
    run_tracer(dir.path(), &argv)
}

#[test]
fn the_log_holds_what_the_tr_files_hold_with_the_system_events_around_it() {
    if !bpf_available("log_and_tr") {
        return;
    }
    let (dir, run) = log_and_dir(&["--name", "contend"], &["2", "1000"]);
    // dump --format tr | sort equals cat tr.* | sort, line for line.
    let dumped = dump(&dir, &["--format", "tr"]);
    assert!(dumped.status.success(), "{dumped:?}");
    let mut from_log: Vec<&str> = dumped.stdout.lines().collect();
    from_log.sort_unstable();
    let tr = tr_records(&dir);
    let mut from_files: Vec<String> = tr.iter().map(|r| Line(r).to_string()).collect();
    from_files.sort_unstable();
    assert_eq!(from_log, from_files);
    let written = summary_count(&run.stderr, "records");
    assert_eq!(tr.len() as u64, written);
    assert!(run.stderr.contains(" events in app.ptl"), "{}", run.stderr);

    let (reader, events) = events_of(&dir);
    let attributes = &reader.metadata().attributes;
    assert_eq!(attributes.trace_name, "contend");
    let times: Vec<i64> = events.iter().map(Event::time_ns).collect();
    assert!(times.is_sorted(), "events in time order");
    // The same records, callers included (a tr line has none).
    assert_eq!(in_time_order(without_callers(&thread_records(&events))), tr);
    assert!(thread_records(&events).iter().all(|r| r.caller != 0));
    // mutex_contend's workers lock and unlock from one line each, a few instructions apart. A
    // lock's caller is read at its entry; an unlock, written only at its return, takes its
    // caller from where the kernel returns it to: the instruction after each call.
    let callers_of = |name: &str, which: Which| -> HashSet<u64> {
        thread_records(&events)
            .iter()
            .filter(|r| r.is(name, which))
            .map(|r| r.caller)
            .collect()
    };
    let (locks, unlocks) = (
        callers_of("mutex_lock", Which::Return),
        callers_of("mutex_unlock", Which::Whole),
    );
    assert_eq!(
        (locks.len(), unlocks.len()),
        (1, 1),
        "{locks:x?} {unlocks:x?}"
    );
    let (lock, unlock) = (
        *locks.iter().next().unwrap(),
        *unlocks.iter().next().unwrap(),
    );
    assert!(unlock > lock && unlock - lock < 32, "{lock:#x} {unlock:#x}");

    let system = system_events(&events);
    // A full trace with no events named leaves only the futex category out.
    let futex: Vec<String> = Category::Futex
        .events()
        .map(|event| event.name.to_owned())
        .collect();
    assert!(
        matches!(&system[0].kind, SystemKind::Start { filter, contended: false } if *filter == futex),
        "{:?}",
        system[0]
    );
    assert_eq!(system.last().unwrap().kind, SystemKind::FlushStop);
    assert!(
        system
            .iter()
            .any(|e| e.kind == SystemKind::Stop { auto: 0 })
    );
    let pid = tr[0].pid;
    let attach = system.iter().find_map(|e| match &e.kind {
        SystemKind::ProcessAttach { exe, cmdline } if e.pid == pid => Some((exe, cmdline)),
        _ => None,
    });
    let (exe, cmdline) = attach.expect("the workload's attach event");
    assert!(exe.ends_with("/mutex_contend"), "{exe}");
    assert_eq!(cmdline[1..], ["2", "1000"]);
    let libc_build_id = system.iter().find_map(|e| match &e.kind {
        SystemKind::Mapping { path, build_id, .. } if path.ends_with("libc.so.6") => {
            Some(build_id.len())
        }
        _ => None,
    });
    assert_eq!(
        libc_build_id,
        Some(20),
        "libc's mapping, with its GNU build-id"
    );
    // A thread's name comes before its first record. (Read from /proc when its first record
    // is drained: a thread gone by then, as these short workers may be, has none.)
    let mut named = std::collections::HashMap::new();
    let mut recorded = std::collections::HashSet::new();
    for event in &events {
        match event {
            Event::System(SystemEvent {
                kind: SystemKind::ThreadName { name },
                lwpid,
                ..
            }) => {
                assert!(
                    !recorded.contains(lwpid),
                    "thread {lwpid} named after its records"
                );
                named.insert(*lwpid, name.clone());
            }
            Event::Thread(r) => {
                recorded.insert(r.lwpid);
            }
            Event::System(_) => {}
        }
    }
    assert_eq!(named.get(&pid).map(String::as_str), Some("mutex_contend"));
    let detach = events.iter().position(
        |e| matches!(e, Event::System(s) if s.kind == SystemKind::ProcessDetach && s.pid == pid),
    );
    let last_record = events.iter().rposition(|e| matches!(e, Event::Thread(_)));
    assert!(detach > last_record, "detached after its last record");
    let status = reader.final_status().expect("closed");
    assert_eq!(status.events_written, events.len() as u64);
    assert!(!status.status.running && !status.status.overrun);

    // JSON: one object per line with the event info and the tr fields.
    let json = dump(&dir, &["--format", "json"]);
    assert!(json.status.success());
    let objects: Vec<serde_json::Value> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(objects.len(), events.len());
    let thread_objects: Vec<&serde_json::Value> =
        objects.iter().filter(|o| o["type"] == "event").collect();
    assert_eq!(thread_objects.len(), tr.len());
    let first = &thread_objects[0];
    for key in [
        "name",
        "pid",
        "lwpid",
        "tid",
        "time_ns",
        "prog_address",
        "event1",
        "event2",
        "which",
        "a",
    ] {
        assert!(!first[key].is_null(), "{key} in {first}");
    }
    assert_eq!(first["a"].as_array().unwrap().len(), 5);
    assert_eq!(first["lwpid"], tr[0].lwpid);
    // Text: a header, then one line per event, but for a call whose two halves came as one
    // record, which takes one line; one left unfinished is resumed.
    let text = dump(&dir, &[]);
    assert!(
        text.stdout.starts_with("# contend (thrtrace-bpf "),
        "{}",
        text.stdout
    );
    let lines: Vec<&str> = text
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect();
    let count = |part: &str| lines.iter().filter(|l| l.contains(part)).count();
    let entries = thread_objects.iter().filter(|o| o["which"] == 1).count();
    let unfinished = count(" <unfinished ...>");
    assert_eq!(count(" resumed>) = "), unfinished);
    assert_eq!(lines.len(), events.len() - (entries - unfinished));

    // One byte changed in the middle: what precedes it, then one line naming the offset.
    let mut bytes = std::fs::read(dir.path().join("app.ptl")).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(dir.path().join("app.ptl"), &bytes).unwrap();
    let damaged = dump(&dir, &["--format", "tr"]);
    assert_eq!(damaged.status.code(), Some(2), "{damaged:?}");
    assert!(
        damaged
            .stderr
            .starts_with("thrtrace-bpf: cannot read app.ptl: corrupt log at offset "),
        "{}",
        damaged.stderr
    );
    assert_eq!(damaged.stderr.lines().count(), 1);
    let before: Vec<&str> = damaged.stdout.lines().collect();
    assert!(before.len() < from_files.len());
}

#[test]
fn with_log_alone_no_tr_file_is_written() {
    if !bpf_available("log_alone") {
        return;
    }
    let (dir, run) = run_workload(
        &["--events", "mutex", "--log", "app.ptl"],
        "mutex_contend",
        &["1", "100"],
    );
    assert_eq!(dir.entries(), ["app.ptl"]);
    assert!(run.stderr.contains(" events in app.ptl"), "{}", run.stderr);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join("app.ptl"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let (_, events) = events_of(&dir);
    assert_eq!(thread_records(&events).len(), 300);
}

#[test]
fn overflows_stand_where_records_were_lost_and_add_up_to_the_kernels_count() {
    if !bpf_available("log_overflow") {
        return;
    }
    let dir = TempDir::new("log-overflow");
    let (written, lost) = log_with_losses(&dir);
    let (reader, events) = events_of(&dir);
    assert_eq!(thread_records(&events).len() as u64, written);
    let mut from_rings = 0;
    for (at, event) in events.iter().enumerate() {
        let Event::System(SystemEvent {
            kind: SystemKind::Overflow {
                lost, source, cpu, ..
            },
            time_ns,
            ..
        }) = event
        else {
            continue;
        };
        assert_eq!(*source, LossSource::Ring);
        assert!((*cpu as usize) < 1024);
        from_rings += lost;
        // A gap that records came after: RESUME at once, stamped like the record after the
        // gap (which may be one the filter drops: a recursive mutex of the C library). A gap
        // no record came after is placed at the end.
        match events.get(at + 1) {
            Some(Event::System(SystemEvent {
                kind: SystemKind::Resume,
                time_ns: resumed,
                ..
            })) => {
                assert_eq!(resumed, time_ns);
                let next = events[at + 2..]
                    .iter()
                    .find(|e| matches!(e, Event::Thread(_)));
                assert!(next.is_none_or(|e| e.time_ns() >= *time_ns));
            }
            _ => assert!(
                events[at..].iter().all(|e| matches!(e, Event::System(_))),
                "{:?}",
                &events[at..at + 2]
            ),
        }
    }
    assert_eq!(
        from_rings, lost,
        "the overflows add up to the kernel's counters"
    );
    let per_cpu: u64 = reader.final_status().unwrap().lost_per_cpu.iter().sum();
    assert_eq!(per_cpu, lost);
}

#[test]
fn a_tracer_killed_by_sigkill_leaves_a_log_that_reads_to_its_last_flush() {
    if !bpf_available("log_sigkill") {
        return;
    }
    let dir = TempDir::new("log-sigkill");
    let mut gate = Gated::start(0, 20_000);
    let log = dir.path().join("app.ptl");
    let (mut tracer, _stderr) = start_tracer(
        dir.path(),
        &[gate.pid],
        &["--events", "mutex", "--log", &log.to_string_lossy()],
    );
    gate.run_phase_two();
    // The stream is written to the log once a second, once the rings are drained, which an
    // emulated guest does in its own time.
    let mut flushed = 0;
    assert!(
        wait_until(Duration::from_mins(2), Duration::from_millis(200), || {
            flushed = dump(&dir, &["--format", "tr"]).stdout.lines().count();
            flushed >= 60_000
        }),
        "{flushed} of the phase's 60,000 records reached the log"
    );
    signal(tracer.id(), "-KILL");
    let _ = tracer.wait();
    gate.finish();
    let dumped = dump(&dir, &["--format", "tr"]);
    assert!(dumped.status.success(), "{dumped:?}");
    assert!(
        dumped.stderr.contains("app.ptl was not closed"),
        "{}",
        dumped.stderr
    );
    assert_eq!(dumped.stderr.lines().count(), 1, "{}", dumped.stderr);
    let lines: Vec<TraceRecord> = dumped
        .stdout
        .lines()
        .map(thrtrace_tests::record_of)
        .collect();
    assert_eq!(
        lines.len(),
        60_000,
        "every record of the phase, flushed before the kill"
    );
    let reader = LogReader::open(&log).unwrap();
    assert!(reader.final_status().is_none() && reader.status().running);
}

/// 20,000 lock+unlock pairs traced into a log bounded by `policy` (and into tr files, which
/// hold every record): what the log kept, of how many, in how much.
struct Bounded {
    dir: TempDir,
    run: Run,
    reader: LogReader,
    events: Vec<Event>,
    /// The log's records, callers left out (tr lines have none), and every record in time order.
    kept: Vec<TraceRecord>,
    all: Vec<TraceRecord>,
}

fn bounded(policy: &[&str], kept_between: std::ops::Range<usize>) -> Bounded {
    let mut options = vec!["--events", "mutex"];
    options.extend_from_slice(policy);
    let (dir, run) = log_and_dir(&options, &["1", "20000"]);
    let (reader, events) = events_of(&dir);
    let kept = without_callers(&thread_records(&events));
    let all = tr_records(&dir);
    assert!(
        kept_between.contains(&kept.len()),
        "{} records kept with {policy:?}",
        kept.len()
    );
    Bounded {
        dir,
        run,
        reader,
        events,
        kept,
        all,
    }
}

#[test]
fn the_flight_recorder_keeps_the_newest_events_and_marks_what_it_overwrote() {
    if !bpf_available("log_flight_recorder") {
        return;
    }
    let Bounded {
        run,
        reader,
        events,
        kept,
        all,
        ..
    } = bounded(
        &["--stream-full-policy", "loop", "--stream-size", "64K"],
        300..1000,
    );
    // The newest: exactly the last records the workload made.
    assert_eq!(kept, all[all.len() - kept.len()..], "{}", run.stderr);
    let overwritten: u64 = system_events(&events)
        .iter()
        .filter_map(|e| match e.kind {
            SystemKind::Overflow {
                lost,
                source: LossSource::Stream,
                ..
            } => Some(lost),
            _ => None,
        })
        .sum();
    let first_is_overflow = matches!(
        &events[0],
        Event::System(SystemEvent {
            kind: SystemKind::Overflow { .. },
            ..
        })
    );
    assert!(first_is_overflow, "{:?}", events[0]);
    // Everything else the stream held was overwritten: records and system events.
    let total = summary_count(&run.stderr, "records");
    assert!(
        overwritten >= total - kept.len() as u64,
        "{overwritten} of {total}"
    );
    assert!(reader.status().overrun);
    assert_eq!(reader.metadata().attributes.stream_min_size, 64 << 10);
}

#[test]
fn until_full_keeps_the_oldest_events_and_stops_with_a_non_zero_auto() {
    if !bpf_available("log_until_full") {
        return;
    }
    let Bounded {
        run,
        reader,
        events,
        kept,
        all,
        ..
    } = bounded(
        &["--stream-full-policy", "until-full", "--stream-size", "64K"],
        300..1000,
    );
    assert_eq!(kept, all[..kept.len()]);
    assert!(
        system_events(&events)
            .iter()
            .any(|e| e.kind == SystemKind::Stop { auto: 1 })
    );
    assert!(
        !system_events(&events)
            .iter()
            .any(|e| e.kind == SystemKind::Stop { auto: 0 })
    );
    let status = reader.status();
    assert!(status.full && !status.running);
    assert!(
        run.stderr.contains(" not recorded: the stream filled"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_looping_log_keeps_its_newest_bytes() {
    if !bpf_available("log_loop") {
        return;
    }
    let Bounded {
        dir,
        reader,
        events,
        kept,
        all,
        ..
    } = bounded(
        &["--log-size", "128K", "--log-full-policy", "loop"],
        600..1700,
    );
    assert_eq!(kept, all[all.len() - kept.len()..]);
    assert!(matches!(
        events[0],
        Event::System(SystemEvent {
            kind: SystemKind::Overflow {
                source: LossSource::Log,
                ..
            },
            ..
        })
    ));
    assert!(reader.final_status().unwrap().status.log_overrun);
    let size = std::fs::metadata(dir.path().join("app.ptl")).unwrap().len();
    assert!(size < (128 << 10) + (64 << 10), "{size} bytes");
}

#[test]
fn a_log_that_fills_stops_growing_and_says_so() {
    if !bpf_available("log_until_full") {
        return;
    }
    let Bounded {
        run,
        reader,
        kept,
        all,
        ..
    } = bounded(
        &["--log-size", "128K", "--log-full-policy", "until-full"],
        1..1700,
    );
    assert_eq!(kept, all[..kept.len()]);
    let status = reader.final_status().unwrap();
    assert!(status.status.log_full && status.events_not_written > 0);
    assert!(
        run.stderr.contains("app.ptl reached its --log-size"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(" not written: --log-size reached"),
        "{}",
        run.stderr
    );
}

#[test]
fn follow_logs_forks_and_execs() {
    if !bpf_available("log_follow") {
        return;
    }
    let program = thrtrace_tests::workload_arg("mutex_contend");
    let (dir, run) = run_workload(
        &["--events", "mutex", "--follow", "--log", "app.ptl"],
        "fork_exec",
        &[&program],
    );
    let (reader, events) = events_of(&dir);
    assert_eq!(
        reader.metadata().attributes.inheritance,
        tracer_model::log::Inheritance::Inherited
    );
    let launched = system_events(&events)
        .iter()
        .find(|e| matches!(e.kind, SystemKind::ProcessAttach { .. }))
        .unwrap()
        .pid;
    let child: u32 = thrtrace_tests::field(&run.stdout, "child");
    let forks: Vec<(u32, u32)> = system_events(&events)
        .iter()
        .filter_map(|e| match e.kind {
            SystemKind::Fork { parent } => Some((e.pid, parent)),
            _ => None,
        })
        .collect();
    assert!(
        forks.contains(&(child, launched)),
        "the forked child of {launched}: {forks:?}"
    );
    let execer: u32 = thrtrace_tests::field(&run.stdout, "execer");
    let exec = system_events(&events)
        .into_iter()
        .find(|e| e.pid == execer && matches!(e.kind, SystemKind::Exec { .. }));
    assert!(
        matches!(exec.map(|e| e.kind), Some(SystemKind::Exec { exe }) if exe.ends_with("/mutex_contend"))
    );
}

#[test]
fn bad_log_options_and_bad_logs_get_one_line_each() {
    let dir = TempDir::new("log-bad");
    let cases: [(&[&str], i32, &str); 6] = [
        (
            &["--stream-size", "64M", "-p", "1"],
            2,
            "--stream-size shapes a trace log: give --log FILE too",
        ),
        (
            &["--log", "x.ptl", "--stream-size", "1K", "-p", "1"],
            2,
            "--stream-size 1024: give at least 64K",
        ),
        (
            &["--log", "x.ptl", "--log-full-policy", "loop", "-p", "1"],
            2,
            "--log-full-policy loop needs --log-size SIZE",
        ),
        (
            &["--log", "x.ptl", "--stream-size", "lots", "-p", "1"],
            2,
            "'lots' is not a size",
        ),
        (
            &["--log", "no/such/dir/x.ptl", "-p", "1"],
            2,
            "choose another for --log",
        ),
        (
            &["dump", "missing.ptl"],
            2,
            "cannot read missing.ptl: No such file or directory",
        ),
    ];
    for (args, code, message) in cases {
        let run = run_tracer(dir.path(), args);
        assert_eq!(run.status.code(), Some(code), "{args:?}: {run:?}");
        assert!(run.stderr.contains(message), "{args:?}: {}", run.stderr);
        // clap words its own errors over several lines; ours are one.
        if !message.contains("is not a size") {
            assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {}", run.stderr);
        }
    }
    std::fs::write(dir.path().join("app.ptl"), "1:2:3\n").unwrap();
    let run = dump(&dir, &[]);
    assert_eq!(run.status.code(), Some(2));
    assert_eq!(
        run.stderr.trim(),
        "thrtrace-bpf: cannot read app.ptl: not a thrtrace-bpf trace log: it does not begin with a log's metadata packet"
    );
}
