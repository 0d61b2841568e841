//! A live trace under control: `thrtrace-bpf ctl NAME OP` interleaved with bursts of
//! known calls (tests/workloads/burst.c), each checked in the log exactly.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Write},
    os::unix::{fs::PermissionsExt, net::UnixStream},
    path::Path,
    process::{Child, Command},
};
use tracer_common::Which;

use thrtrace_tests::{
    Burst, TempDir, bpf_available, ctl, ctl_ok, lines_as_they_come, read_trace, start_tracer,
    thread_records, unique_name,
};
use tracer_model::{
    TraceRecord,
    event::{Event, LossSource, SystemEvent, SystemKind},
    log::LogReader,
};

/// The control directory (the tests run without THRTRACE_RUNTIME_DIR).
const RUNTIME_DIR: &str = "/run/thrtrace-bpf";

fn events_of(log: &Path) -> Vec<Event> {
    LogReader::open(log)
        .unwrap()
        .events()
        .map(Result::unwrap)
        .collect()
}

fn is_control(event: &SystemEvent) -> bool {
    matches!(
        event.kind,
        SystemKind::Start { .. } | SystemKind::Stop { .. } | SystemKind::Filter { .. }
    )
}

/// The log's thread records, cut at each START, STOP and FILTER: the control events, and the
/// records after each (the first group: before any).
fn segments(events: &[Event]) -> (Vec<SystemKind>, Vec<Vec<TraceRecord>>) {
    let mut controls = Vec::new();
    let mut groups = vec![Vec::new()];
    for event in events {
        match event {
            Event::Thread(record) => groups.last_mut().unwrap().push(*record),
            Event::System(system) if is_control(system) => {
                controls.push(system.kind.clone());
                groups.push(Vec::new());
            }
            Event::System(_) => {}
        }
    }
    (controls, groups)
}

/// How many records of each event name, as (name, count) in name order.
fn counts(records: &[TraceRecord]) -> Vec<(&'static str, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for record in records {
        let name = tracer_common::EventDef::find(record.event1, record.event2)
            .unwrap()
            .name;
        *counts.entry(name).or_insert(0) += 1;
    }
    counts.into_iter().collect()
}

/// The records of `rounds` rounds of burst.c: lock entry and return, signal, unlock.
fn rounds(rounds: usize, mutex: bool, cond: bool) -> Vec<(&'static str, usize)> {
    let mut expected = Vec::new();
    if cond {
        expected.push(("cond_signal", rounds));
    }
    if mutex {
        expected.extend([("mutex_lock", 2 * rounds), ("mutex_unlock", rounds)]);
    }
    expected.sort_unstable();
    expected.retain(|&(_, n)| n > 0);
    expected
}

fn traced(dir: &TempDir, burst: &Burst, name: &str, extra: &[&str]) -> (Child, String) {
    let log = dir.path().join("app.ptl").to_string_lossy().into_owned();
    let mut options = vec!["--name", name, "--log", &log];
    options.extend_from_slice(extra);
    let (tracer, _stderr) = start_tracer(dir.path(), &[burst.pid], &options);
    (tracer, log)
}

/// Ends the trace with `ctl shutdown`: it answers once the log is complete, and the tracer
/// exits 0.
fn shutdown(name: &str, mut tracer: Child) {
    let answer = ctl_ok(&[name, "shutdown"]);
    assert!(
        answer.starts_with(&format!("{name}: shut down: ")),
        "{answer}"
    );
    assert!(tracer.wait().unwrap().success());
}

#[test]
fn stop_start_and_filters_act_in_bpf_and_the_log_shows_each_step() {
    if !bpf_available("ctl_stop_start_filter") {
        return;
    }
    let dir = TempDir::new("ctl");
    let name = unique_name("ctl");
    let mut burst = Burst::start();
    let (tracer, log) = traced(&dir, &burst, &name, &["--events", "mutex:cond"]);

    burst.run(10);
    assert_eq!(ctl_ok(&[&name, "stop"]), format!("{name}: stopped\n"));
    burst.run(7);
    let status: serde_json::Value =
        serde_json::from_str(&ctl_ok(&[&name, "status", "--format", "json"])).unwrap();
    assert_eq!(status["posix_stream_status"], "POSIX_TRACE_SUSPENDED");
    assert_eq!(status["posix_stream_full_status"], "POSIX_TRACE_NOT_FULL");
    assert_eq!(status["posix_log_full_status"], "POSIX_TRACE_NOT_FULL");
    assert_eq!(status["name"], name.as_str());
    assert_eq!(status["pid"], tracer.id());
    assert_eq!(status["targets"], serde_json::json!([burst.pid]));
    assert_eq!(status["events"], "mutex:cond");
    assert_eq!(status["lost"], 0);
    ctl_ok(&[&name, "start"]);
    // The stream runs as the controller is answered, before the log has written its START.
    let text = ctl_ok(&[&name, "status"]);
    assert!(text.contains("stream: running"), "{text}");
    assert_eq!(
        ctl_ok(&[&name, "filter", "set", "cond"]),
        format!("{name}: recording cond\n")
    );
    burst.run(5);
    ctl_ok(&[&name, "filter", "add", "mutex"]);
    burst.run(3);
    assert_eq!(
        ctl_ok(&[&name, "filter", "sub", "cond_signal"]),
        format!(
            "{name}: recording mutex:cond_init:cond_broadcast:cond_wait:cond_timedwait:cond_destroy:pthread_cond_clockwait\n"
        )
    );
    burst.run(2);
    let listed = ctl_ok(&["--list"]);
    let line = listed
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(line.contains(&tracer.id().to_string()), "{line}");
    assert!(line.contains("running"), "{line}");
    let text = ctl_ok(&[&name, "status"]);
    assert!(text.contains("stream: running, not full"), "{text}");
    shutdown(&name, tracer);
    burst.finish();

    let events = events_of(Path::new(&log));
    let (controls, groups) = segments(&events);
    let start = |kind: &SystemKind| matches!(kind, SystemKind::Start { .. });
    assert!(start(&controls[0]));
    assert_eq!(controls[1], SystemKind::Stop { auto: 0 });
    assert!(start(&controls[2]));
    assert!(matches!(&controls[3], SystemKind::Filter { .. }));
    assert!(matches!(&controls[4], SystemKind::Filter { .. }));
    assert!(matches!(&controls[5], SystemKind::Filter { .. }));
    assert_eq!(controls[6], SystemKind::Stop { auto: 0 });
    assert_eq!(controls.len(), 7);
    assert_eq!(groups[0], [], "nothing before the trace started");
    assert_eq!(counts(&groups[1]), rounds(10, true, true));
    assert_eq!(
        counts(&groups[2]),
        [],
        "a burst while stopped leaves no records"
    );
    assert_eq!(counts(&groups[3]), []);
    assert_eq!(counts(&groups[4]), rounds(5, false, true), "cond only");
    assert_eq!(counts(&groups[5]), rounds(3, true, true), "mutex again");
    assert_eq!(
        counts(&groups[6]),
        rounds(2, true, false),
        "cond_signal no more"
    );
    assert_eq!(groups[7], []);

    // POSIX's filter is the set filtered out.
    let out = |names: &[String], name: &str| names.iter().any(|n| n == name);
    let SystemKind::Filter { old, new } = &controls[3] else {
        unreachable!()
    };
    assert!(!out(old, "mutex_lock") && !out(old, "cond_signal") && out(old, "rw_rdlock"));
    assert!(out(new, "mutex_lock") && !out(new, "cond_signal"));
    let SystemKind::Start { filter, .. } = &controls[2] else {
        unreachable!()
    };
    assert_eq!(filter, old, "START carries the filter in force");
    let SystemKind::Filter { new, .. } = &controls[5] else {
        unreachable!()
    };
    assert!(!out(new, "mutex_lock") && out(new, "cond_signal") && !out(new, "cond_wait"));
    let reader = LogReader::open(Path::new(&log)).unwrap();
    assert!(reader.final_status().is_some(), "a complete log");
}

#[test]
fn the_flight_recorder_flushes_its_newest_events_and_clear_drops_the_rest() {
    if !bpf_available("ctl_flush_clear") {
        return;
    }
    let dir = TempDir::new("ctl-flush");
    let name = unique_name("flush");
    let mut burst = Burst::start();
    let options = [
        "--events",
        "mutex:cond",
        "--stopped",
        "--stream-full-policy",
        "loop",
        "--stream-size",
        "64K",
    ];
    let (tracer, log) = traced(&dir, &burst, &name, &options);
    let log = Path::new(&log);

    burst.run(4);
    let status = ctl_ok(&[&name, "status"]);
    assert!(status.contains("stream: suspended"), "{status}");
    ctl_ok(&[&name, "start"]);
    burst.run(100);
    let cleared = ctl_ok(&[&name, "clear"]);
    assert!(
        cleared.starts_with(&format!("{name}: cleared: ")),
        "{cleared}"
    );
    burst.run(20_000);
    assert_eq!(ctl_ok(&[&name, "flush"]), format!("{name}: flushed\n"));

    // In the log now: the newest of the 20,000 rounds, then FLUSH_START and FLUSH_STOP.
    let events = events_of(log);
    let n = events.len();
    let last_kinds: Vec<&SystemKind> = events[n - 2..]
        .iter()
        .map(|e| match e {
            Event::System(s) => &s.kind,
            Event::Thread(r) => panic!("{r:?}"),
        })
        .collect();
    assert_eq!(
        last_kinds,
        [&SystemKind::FlushStart, &SystemKind::FlushStop]
    );
    let overwritten: u64 = events
        .iter()
        .filter_map(|e| match e {
            Event::System(SystemEvent {
                kind:
                    SystemKind::Overflow {
                        lost,
                        source: LossSource::Stream,
                        ..
                    },
                ..
            }) => Some(*lost),
            _ => None,
        })
        .sum();
    assert!(overwritten > 0, "64K cannot hold 80,000 records");
    let flushed = thread_records(&events);
    // The same records as the newest lines of the tr file, which has every record.
    let files = read_trace(dir.path());
    let all: Vec<TraceRecord> = files.into_values().flatten().collect();
    assert_eq!(all.len(), (100 + 20_000) * 4, "none while stopped");
    let newest = &all[all.len() - flushed.len()..];
    let without_caller = |r: &TraceRecord| TraceRecord { caller: 0, ..*r };
    assert_eq!(
        flushed.iter().map(without_caller).collect::<Vec<_>>(),
        newest,
        "the flight recorder keeps the newest records"
    );
    assert!(
        flushed.len() < 20_000 * 4 && flushed.len() > 500,
        "{} records",
        flushed.len()
    );

    burst.run(5);
    shutdown(&name, tracer);
    burst.finish();
    let events = events_of(log);
    let starts = events
        .iter()
        .filter(|e| matches!(e, Event::System(s) if matches!(s.kind, SystemKind::Start { .. })))
        .count();
    assert_eq!(
        starts, 0,
        "none at creation (--stopped); the controller's was cleared with the stream"
    );
    let after_flush = thread_records(&events[n..]);
    assert_eq!(counts(&after_flush), rounds(5, true, true));
    let thread_events = events
        .iter()
        .filter(|e| matches!(e, Event::Thread(_)))
        .count();
    assert_eq!(
        thread_events,
        flushed.len() + 20,
        "the cleared rounds are not in the log"
    );
}

#[test]
fn a_long_block_flushes_the_wait_and_the_calls_before_it() {
    if !bpf_available("flush_on_block") {
        return;
    }
    let dir = TempDir::new("flush-on-block");
    let name = unique_name("block");
    let mut burst = Burst::start();
    let options = [
        "--events",
        "mutex",
        "--stream-full-policy",
        "loop",
        "--stream-size",
        "64K",
        "--flush-on-block",
        "200ms",
    ];
    let (tracer, log) = traced(&dir, &burst, &name, &options);
    burst.run(50);
    burst.hold(800);
    // Far more than the stream holds: what was not flushed is overwritten.
    burst.run(20_000);
    shutdown(&name, tracer);
    burst.finish();

    let events = events_of(Path::new(&log));
    let blocked: Vec<&SystemEvent> = events
        .iter()
        .filter_map(|e| match e {
            Event::System(s) if matches!(s.kind, SystemKind::Blocked { .. }) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    let SystemKind::Blocked {
        call,
        object,
        blocked_ns,
        ..
    } = &blocked[0].kind
    else {
        unreachable!()
    };
    assert_eq!(
        (blocked[0].pid, blocked[0].lwpid),
        (burst_pid(&events), burst_pid(&events))
    );
    assert_eq!(call, "mutex_lock");
    assert_eq!(*object as i64, mutex_of(&events));
    assert!(
        (200_000_000..800_000_000).contains(blocked_ns),
        "{blocked_ns}"
    );
    // The first flush: the 50 rounds, the holder's lock, the main thread's wait, the event.
    let first_flush = events
        .iter()
        .position(|e| matches!(e, Event::System(s) if s.kind == SystemKind::FlushStart))
        .unwrap();
    let flushed = thread_records(&events[..first_flush]);
    let main = burst_pid(&events);
    let of_main: Vec<&TraceRecord> = flushed.iter().filter(|r| r.lwpid == main).collect();
    assert_eq!(
        of_main.len(),
        50 * 3 + 1,
        "the calls before the wait, and its entry"
    );
    let wait = of_main.last().unwrap();
    assert_eq!((wait.which, wait.a[0]), (Which::Entry, mutex_of(&events)));
    let of_holder: Vec<&TraceRecord> = flushed.iter().filter(|r| r.lwpid != main).collect();
    assert_eq!(of_holder.len(), 2, "the holder's lock, entry and return");
    assert!(matches!(events[first_flush - 1], Event::System(ref s) if s.kind == blocked[0].kind));
}

/// A call that returns blocked too long before any pass saw it still blocked is found as its
/// return is written: its BLOCKED event comes right after that return, and its flush is said.
#[test]
fn a_call_found_blocked_at_its_return_is_written_right_after_it() {
    if !bpf_available("flush_on_block_at_return") {
        return;
    }
    let dir = TempDir::new("flush-on-return");
    let name = unique_name("returned");
    let mut burst = Burst::start();
    let mutex = burst.mutex;
    let log = dir.path().join("app.ptl").to_string_lossy().into_owned();
    let options = [
        "--name",
        &name,
        "--log",
        &log,
        "--events",
        "mutex",
        "--stream-full-policy",
        "loop",
        "--flush-on-block",
        "5ms",
    ];
    let (tracer, stderr) = start_tracer(dir.path(), &[burst.pid], &options);
    let lines = lines_as_they_come(stderr);
    // A wait far shorter than the poll (100 ms) is most often drawn, entry and return, in one
    // pass: only a pass that falls within it sees it still blocked (about one wait in five).
    for _ in 0..8 {
        burst.hold(20);
    }
    shutdown(&name, tracer);
    burst.finish();
    let said: Vec<String> = lines
        .iter()
        .filter(|line| line.contains("flushed: "))
        .collect();

    let events = events_of(Path::new(&log));
    let blocked: Vec<(usize, &SystemEvent)> = events
        .iter()
        .enumerate()
        .filter_map(|(n, e)| match e {
            Event::System(s) if matches!(s.kind, SystemKind::Blocked { .. }) => Some((n, s)),
            _ => None,
        })
        .collect();
    // Each lock call that waited past the threshold, once: on a loaded machine the waiter may
    // see the holder late and wait less than it held.
    let threshold_ns: i128 = 5_000_000;
    let mut entered = HashMap::new();
    let mut long_waits = 0;
    for event in &events {
        let Event::Thread(r) = event else { continue };
        let event_name = tracer_common::EventDef::find(r.event1, r.event2)
            .unwrap()
            .name;
        if event_name != "mutex_lock" {
            continue;
        }
        // A lock's return carries what it returned in a1, not the mutex: its entry does.
        match r.which {
            Which::Entry if r.a[0] == mutex => {
                entered.insert(r.lwpid, r.time_ns());
            }
            Which::Return => {
                if let Some(entry) = entered.remove(&r.lwpid)
                    && r.time_ns() - entry >= threshold_ns
                {
                    long_waits += 1;
                }
            }
            _ => {}
        }
    }
    assert!(long_waits > 0, "no wait lasted 5 ms: {events:#?}");
    assert_eq!(blocked.len(), long_waits, "each wait once: {blocked:#?}");
    let mut at_return = 0;
    for &(n, event) in &blocked {
        let SystemKind::Blocked {
            call,
            object,
            returned,
            ..
        } = &event.kind
        else {
            unreachable!()
        };
        assert_eq!((call.as_str(), *object as i64), ("mutex_lock", mutex));
        if !returned {
            continue;
        }
        at_return += 1;
        let Event::Thread(before) = &events[n - 1] else {
            panic!("not after its return: {:#?}", &events[n - 1..=n])
        };
        let event_name = tracer_common::EventDef::find(before.event1, before.event2)
            .unwrap()
            .name;
        assert_eq!(
            (before.lwpid, event_name, before.which),
            (event.lwpid, "mutex_lock", Which::Return)
        );
        assert_eq!(before.time_ns() as i64, event.time_ns);
    }
    assert!(
        at_return > 0,
        "every wait was seen still blocked: {blocked:#?}"
    );
    // The first flush: nothing was flushed in the threshold before it.
    let (_, first) = blocked[0];
    let SystemKind::Blocked {
        blocked_ns,
        returned,
        ..
    } = first.kind
    else {
        unreachable!()
    };
    let how = if returned {
        "was blocked"
    } else {
        "has been blocked"
    };
    let expected = format!(
        "thrtrace-bpf: flushed: thread {} (pid {}) {how} {} ms in mutex_lock({mutex:#x})",
        first.lwpid,
        first.pid,
        blocked_ns / 1_000_000,
    );
    assert_eq!(said.first(), Some(&expected), "{said:#?}");
}

/// The traced process: the only one in the log.
fn burst_pid(events: &[Event]) -> u32 {
    events
        .iter()
        .find_map(|e| match e {
            Event::Thread(r) => Some(r.pid),
            Event::System(_) => None,
        })
        .unwrap()
}

/// The mutex of the first lock in the log.
fn mutex_of(events: &[Event]) -> i64 {
    events
        .iter()
        .find_map(|e| match e {
            Event::Thread(r) if r.which == Which::Entry => Some(r.a[0]),
            _ => None,
        })
        .unwrap()
}

#[test]
fn names_are_unique_and_a_stale_socket_is_replaced() {
    if !bpf_available("ctl_names") {
        return;
    }
    let dir = TempDir::new("ctl-names");
    let name = unique_name("names");
    // A socket nobody listens on any more, as a killed tracer leaves it.
    std::fs::create_dir_all(RUNTIME_DIR).unwrap();
    let stale = Path::new(RUNTIME_DIR).join(format!("{name}.sock"));
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    assert_eq!(ctl(&[&name, "status"]).status.code(), Some(2));

    let burst = Burst::start();
    let (first, _) = traced(&dir, &burst, &name, &["--events", "mutex"]);
    let mode = |path: &Path| {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode(&stale), 0o600);
    assert_eq!(mode(Path::new(RUNTIME_DIR)), 0o700);
    assert!(
        ctl_ok(&[&name, "status"])
            .starts_with(&format!("trace {name} (tracer pid {})", first.id()))
    );

    let second = Command::new(thrtrace_tests::tracer())
        .args([
            "--name",
            &name,
            "--log",
            "second.ptl",
            "-p",
            &burst.pid.to_string(),
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(
        stderr,
        format!(
            "thrtrace-bpf: a trace named {name} is already running (tracer pid {}): choose \
             another --name, or end it with `thrtrace-bpf ctl {name} shutdown`\n",
            first.id()
        )
    );
    assert!(!dir.path().join("second.ptl").exists());
    shutdown(&name, first);
    assert!(!stale.exists(), "the socket goes with its trace");
    burst.finish();
}

#[test]
fn bad_requests_get_one_line_and_exit_2_and_the_trace_goes_on() {
    if !bpf_available("ctl_bad_requests") {
        return;
    }
    let dir = TempDir::new("ctl-bad");
    let name = unique_name("bad");
    let mut burst = Burst::start();
    let (tracer, log) = traced(&dir, &burst, &name, &["--events", "mutex"]);
    let refused = |args: &[&str], expected: &str| {
        let run = ctl(args);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {run:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
        assert!(run.stderr.contains(expected), "{args:?}: {}", run.stderr);
        assert_eq!(run.stdout, "");
    };
    let missing = unique_name("missing");
    refused(
        &[&missing, "stop"],
        &format!("no trace named {missing} is running: `thrtrace-bpf ctl --list` lists them"),
    );
    refused(
        &[&name, "filter", "set", "mutex:bogus"],
        "unknown event or category 'bogus'",
    );
    refused(
        &[&name, "filter", "add", "rwlock"],
        "rwlock_init is not probed in this trace",
    );
    refused(&["../etc", "stop"], "is not a trace name");

    // A malformed message on the socket itself: refused with one line, the trace unharmed.
    for garbage in ["garbage\n", "{\"op\":\"explode\"}\n", &"x".repeat(10_000)] {
        let mut stream =
            UnixStream::connect(Path::new(RUNTIME_DIR).join(format!("{name}.sock"))).unwrap();
        stream.write_all(garbage.as_bytes()).unwrap();
        let mut answer = String::new();
        BufReader::new(&stream).read_line(&mut answer).unwrap();
        let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(answer["reply"], "refused", "{answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .starts_with("malformed request"),
            "{answer}"
        );
    }
    burst.run(3);
    shutdown(&name, tracer);
    burst.finish();
    let records = events_of(Path::new(&log))
        .iter()
        .filter(|e| matches!(e, Event::Thread(_)))
        .count();
    assert_eq!(records, 3 * 3, "the filter is unchanged: mutex");
}
