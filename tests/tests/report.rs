//! What users read: `report` on a log and on tr files, `convert --to perfetto`, and
//! live deadlock detection, on C workloads built with -g whose contention is known by
//! construction (tests/workloads/lock_story.c, deadlock.c).

use std::{
    io::{BufReader, Write},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use thrtrace_tests::{
    TempDir, bpf_available, corpus, ctl_ok, field, line_of, lines_as_they_come, place, read_line,
    report_json, report_lock, run_tracer, start_tracer, unique_name, workload, workload_arg,
};
use tracer_model::{
    event::{Event, SystemEvent, SystemKind},
    log::{EventPacket, FinalStatus, LogFullPolicy, LogReader, LogWriter, Status},
};

const ROUNDS: u64 = 3;
const HOLD_MS: u64 = 150;
const WAITERS: u64 = 2;
/// What the scheduler may add to a wait or a hold on a loaded machine.
const SLACK_NS: u64 = 250_000_000;

/// lock_story traced into a log (and tr files); the report's JSON and the addresses printed.
fn story(dir: &TempDir) -> (Value, Value) {
    let run = run_tracer(
        dir.path(),
        &[
            "--log",
            "app.ptl",
            "--dir",
            ".",
            "--",
            &workload_arg("lock_story"),
            &ROUNDS.to_string(),
            &HOLD_MS.to_string(),
            &WAITERS.to_string(),
        ],
    );
    assert!(run.status.success(), "{run:?}");
    let addresses: Value = {
        let first = run.stdout.lines().next().unwrap();
        let value = |key: &str| format!("{:#x}", field::<u64>(first, key));
        serde_json::json!({"contended": value("contended"), "recursive": value("recursive"),
                           "rw": value("rw")})
    };
    (report_json(dir, &["app.ptl"]), addresses)
}

/// Every address in a JSON report is a hex string ("0x..."), or null where it is not known
/// (with the reason, `unknown`).
fn assert_addresses_are_hex(value: &Value) {
    let hex = |key: &str, v: &Value, object: &Value| match v {
        Value::String(s) => assert!(
            s.strip_prefix("0x")
                .is_some_and(|digits| u64::from_str_radix(digits, 16).is_ok()),
            "{key}: {s}"
        ),
        Value::Null if key == "address" => {
            assert!(object["unknown"].is_string(), "{object:#}");
        }
        other => panic!("{key} is not a hex string: {other}"),
    };
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match key.as_str() {
                    "address" | "waits_for" | "object" => hex(key, v, value),
                    "holds" | "holds_at_end" => {
                        for held in v.as_array().unwrap() {
                            hex(key, held, value);
                        }
                    }
                    _ => assert_addresses_are_hex(v),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(assert_addresses_are_hex),
        _ => {}
    }
}

fn within(value: &Value, low: u64, high: u64) -> bool {
    value.as_u64().is_some_and(|v| (low..=high).contains(&v))
}

#[test]
fn the_report_counts_the_contention_the_workload_made() {
    if !bpf_available("report_contention") {
        return;
    }
    let dir = TempDir::new("report");
    let (report, addresses) = story(&dir);
    assert_eq!(report["callers_known"], true);
    let hold = HOLD_MS * 1_000_000;

    // One holder and WAITERS waiters, ROUNDS times: every waiter blocks, every acquisition is
    // by another thread than the one before.
    let contended = report_lock(&report, &addresses["contended"]);
    assert_eq!(contended["kind"], "mutex");
    assert_eq!(contended["symbol"], "contended", "a global is named");
    assert_eq!(contended["acquisitions"], ROUNDS * (WAITERS + 1));
    assert_eq!(contended["contended"], ROUNDS * WAITERS);
    assert_eq!(contended["owner_changes"], ROUNDS * (WAITERS + 1) - 1);
    assert!(
        within(&contended["wait_max_ns"], hold * 8 / 10, hold + SLACK_NS),
        "{contended:#}"
    );
    assert!(
        within(&contended["hold_max_ns"], hold, hold + SLACK_NS),
        "{contended:#}"
    );
    // The waiters' line first (they waited), then the holder's.
    let callers = contended["callers"].as_array().unwrap();
    let place = |c: &Value| (c["file"].clone(), c["line"].clone(), c["count"].clone());
    assert_eq!(
        place(&callers[0]),
        (
            "lock_story.c".into(),
            line_of("lock_story", "/* WAIT */").into(),
            (ROUNDS * WAITERS).into()
        )
    );
    assert_eq!(callers[0]["function"], "waiter");
    assert_eq!(
        place(&callers[1]),
        (
            "lock_story.c".into(),
            line_of("lock_story", "/* HOLD */").into(),
            ROUNDS.into()
        )
    );

    // Every waiter began to wait while the main thread held it, taken at line HOLD: the
    // holder and its line, although its unlock came before each waiter's return.
    let hold_line = line_of("lock_story", "/* HOLD */");
    let owners = contended["owners"].as_array().unwrap();
    assert_eq!(owners.len(), 1, "{contended:#}");
    assert_eq!(owners[0]["lwpid"], contended["pid"], "the main thread");
    assert_eq!(owners[0]["count"], ROUNDS * WAITERS);
    assert_eq!(
        (
            &owners[0]["taken_at"]["file"],
            &owners[0]["taken_at"]["line"]
        ),
        (&"lock_story.c".into(), &hold_line.into()),
        "{contended:#}"
    );

    // Three nested locks: one hold, from one line.
    let recursive = report_lock(&report, &addresses["recursive"]);
    assert_eq!(recursive["kind"], "rmutex");
    assert_eq!(recursive["acquisitions"], 3);
    assert_eq!(recursive["contended"], 0);
    let rcallers = recursive["callers"].as_array().unwrap();
    assert_eq!(rcallers.len(), 1, "{recursive:#}");
    assert_eq!(rcallers[0]["line"], line_of("lock_story", "/* RLOCK */"));
    assert_eq!(rcallers[0]["count"], 3);

    // Two readers hold it while the writer waits.
    let rw = report_lock(&report, &addresses["rw"]);
    assert_eq!(rw["kind"], "rwlock");
    assert_eq!(rw["symbol"], "rw");
    assert_eq!(rw["acquisitions"], 3);
    assert_eq!(rw["contended"], 1);
    assert!(
        within(&rw["wait_max_ns"], hold * 8 / 10, hold + SLACK_NS),
        "{rw:#}"
    );
    assert_eq!(
        rw["callers"][0]["line"],
        line_of("lock_story", "/* WRLOCK */")
    );

    // Per thread: the waiters' names, their calls, their time blocked.
    let threads = report["threads"].as_array().unwrap();
    for n in 1..=WAITERS {
        let name = format!("waiter-{n}");
        let waiter = threads
            .iter()
            .find(|t| t["name"] == name.as_str())
            .unwrap_or_else(|| panic!("no {name}: {threads:#?}"));
        assert_eq!(waiter["calls"]["mutex"], 2 * ROUNDS, "{waiter:#}");
        assert!(
            within(
                &waiter["blocked_ns"],
                ROUNDS * hold / 2,
                ROUNDS * (hold + SLACK_NS)
            ),
            "{waiter:#}"
        );
        assert_eq!(waiter["holds_at_end"], serde_json::json!([]));
    }
    assert_eq!(report["deadlocks"], serde_json::json!([]));

    // JSON has every lock whatever --top says; text lists --top of them, 0 for all.
    let locks = |report: &Value| {
        let mut locks: Vec<(String, usize)> = report["locks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                let callers = l["callers"].as_array().unwrap().len();
                (l["address"].as_str().unwrap().to_owned(), callers)
            })
            .collect();
        locks.sort();
        locks
    };
    assert!(locks(&report).len() >= 3, "{report:#}");
    for top in ["1", "0"] {
        let cut = report_json(&dir, &["--top", top, "app.ptl"]);
        assert_eq!(locks(&cut), locks(&report), "--top {top}");
    }
    let rows = |top: &str| {
        let text = run_tracer(dir.path(), &["report", "--top", top, "app.ptl"]).stdout;
        let kinds = [" mutex ", " rmutex ", " rwlock "];
        text.lines()
            .filter(|l| !l.starts_with(' ') && kinds.iter().any(|k| l.contains(k)))
            .count()
    };
    // The loader's own locks, taken through pthread_mutex_lock, are in the trace too.
    let all = locks(&report).len();
    assert_eq!((rows("1"), rows("2"), rows("0")), (1, 2, all));
    assert_addresses_are_hex(&report);

    // From the tr files: the same counts, and no callers.
    let from_tr = report_json(&dir, &["."]);
    assert_eq!(from_tr["callers_known"], false);
    let contended_tr = report_lock(&from_tr, &addresses["contended"]);
    for key in [
        "acquisitions",
        "contended",
        "owner_changes",
        "wait_max_ns",
        "hold_max_ns",
    ] {
        assert_eq!(contended_tr[key], contended[key], "{key}");
    }
    let text = run_tracer(dir.path(), &["report", "."]);
    assert!(
        text.stdout.starts_with("callers: unknown (tr files"),
        "{}",
        text.stdout
    );

    // The text forms name the source lines and the threads.
    let text = run_tracer(dir.path(), &["report", "--histogram", "app.ptl"]).stdout;
    assert!(
        text.contains(&format!(
            "lock_story.c:{} (waiter): {} calls",
            line_of("lock_story", "/* WAIT */"),
            ROUNDS * WAITERS
        )),
        "{text}"
    );
    assert!(text.contains("wait times:"), "{text}");
    let held = format!(
        "    held by thread {} (lock_story): waited for {} times, ",
        contended["pid"],
        ROUNDS * WAITERS
    );
    let held_line = text
        .lines()
        .find(|l| l.starts_with(&held))
        .unwrap_or_else(|| panic!("no {held:?} in {text}"));
    assert!(
        held_line.contains("; it took the lock at main+0x")
            && held_line.ends_with(&format!(" (lock_story.c:{hold_line})")),
        "{held_line}"
    );
    let by_thread = run_tracer(dir.path(), &["report", "--by", "thread", "app.ptl"]).stdout;
    assert!(by_thread.contains("waiter-2"), "{by_thread}");
    assert!(by_thread.contains("in rw_wrlock("), "{by_thread}");
}

#[test]
fn the_perfetto_timeline_has_the_waits_holds_and_wakeups() {
    if !bpf_available("report_perfetto") {
        return;
    }
    let dir = TempDir::new("perfetto");
    let (report, addresses) = story(&dir);
    let run = run_tracer(
        dir.path(),
        &["convert", "app.ptl", "--to", "perfetto", "app.json"],
    );
    assert!(run.status.success(), "{run:?}");
    let trace: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("app.json")).unwrap())
            .unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let of = |ph: &str, cat: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == ph && (cat.is_empty() || e["cat"] == cat))
            .collect::<Vec<_>>()
    };
    let names: Vec<&str> = of("M", "")
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    for name in ["waiter-1", "waiter-2", "reader-1", "reader-2"] {
        assert!(names.contains(&name), "{names:?}");
    }
    // A slice per blocking lock wait (the waiters' and the writer's), a wakeup for each.
    let contended = report_lock(&report, &addresses["contended"])["contended"]
        .as_u64()
        .unwrap();
    let waits = of("X", "lock wait");
    let on = |address: &Value| {
        waits
            .iter()
            .filter(|e| {
                e["name"]
                    .as_str()
                    .unwrap()
                    .ends_with(address.as_str().unwrap())
            })
            .count() as u64
    };
    assert_eq!(on(&addresses["contended"]), contended);
    assert_eq!(on(&addresses["rw"]), 1);
    assert_eq!(of("s", "wake").len() as u64, contended + 1);
    assert_eq!(of("f", "wake").len() as u64, contended + 1);
    let holds = of("X", "hold");
    assert!(
        holds.len() as u64 >= ROUNDS * (WAITERS + 1) + 1 + 3,
        "{}",
        holds.len()
    );
    let counters = of("C", "");
    assert!(counters.iter().any(|c| c["args"]["waiters"] == WAITERS));
    assert!(counters.iter().all(|c| c["name"] == "contended waiters"));
}

/// Runs deadlock.c (`mode`: before or after), traces it (with `options` too), lets it
/// deadlock; returns the line the tracer said (once: no other line says a deadlock), how long
/// after the deadlock it said it, the log, and the workload's thread ids.
fn deadlock(mode: &str, options: &[&str]) -> (String, Duration, TempDir, u32, u32) {
    let dir = TempDir::new("deadlock");
    let name = unique_name("deadlock");
    let mut child = Command::new(workload("deadlock"))
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let ready = read_line(&mut BufReader::new(child.stdout.take().unwrap()));
    let (a, b): (u32, u32) = (field(&ready, "a"), field(&ready, "b"));
    let log = dir.path().join("app.ptl").to_string_lossy().into_owned();
    let mut all = vec!["--name", &name, "--log", &log, "--deadlock-after", "500ms"];
    all.extend_from_slice(options);
    let (tracer, stderr) = start_tracer(dir.path(), &[child.id()], &all);
    let lines = lines_as_they_come(stderr);
    writeln!(stdin, "go").unwrap();
    let deadlocked = Instant::now();
    let said = lines
        .recv_timeout(Duration::from_millis(500) + Duration::from_secs(1))
        .expect("a deadlock said within --deadlock-after plus a second");
    let after = deadlocked.elapsed();
    ctl_ok(&[&name, "shutdown"]);
    let mut tracer = tracer;
    assert!(tracer.wait().unwrap().success());
    let later: Vec<String> = lines.iter().collect();
    assert!(
        later.iter().all(|line| !line.contains("deadlock: ")),
        "said again: {later:#?}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    (said, after, dir, a, b)
}

#[test]
fn an_ab_ba_deadlock_is_said_once_with_both_threads_and_lines() {
    if !bpf_available("deadlock_after_attach") {
        return;
    }
    let (said, after, dir, a, b) = deadlock("after", &[]);
    let (first, second) = (
        line_of("deadlock", "/* FIRST */"),
        line_of("deadlock", "/* SECOND */"),
    );
    assert!(after >= Duration::from_millis(500), "{after:?}");
    assert!(
        said.starts_with("thrtrace-bpf: deadlock: thread "),
        "{said}"
    );
    for (waiter, holder, wname, hname) in [
        (a, b, "worker-a", "worker-b"),
        (b, a, "worker-b", "worker-a"),
    ] {
        let part = format!("thread {waiter} ({wname}) waits in pthread_mutex_lock(0x");
        assert!(said.contains(&part), "{said}");
        let tail = format!(" (deadlock.c:{second}), held by {holder} ({hname}) since ");
        assert!(said.contains(&tail), "{said}");
    }
    assert_eq!(said.matches(", locked at ").count(), 2, "{said}");
    assert_eq!(
        said.matches(&format!(" (deadlock.c:{first})")).count(),
        2,
        "{said}"
    );

    // In the log, and in the report.
    let events: Vec<Event> = LogReader::open(&dir.path().join("app.ptl"))
        .unwrap()
        .events()
        .map(Result::unwrap)
        .collect();
    let found: Vec<&SystemKind> = events
        .iter()
        .filter_map(|e| match e {
            Event::System(s) if matches!(s.kind, SystemKind::Deadlock { .. }) => Some(&s.kind),
            _ => None,
        })
        .collect();
    assert_eq!(found.len(), 1, "said once");
    let SystemKind::Deadlock {
        certain, message, ..
    } = found[0]
    else {
        unreachable!()
    };
    assert!(certain);
    assert_eq!(format!("thrtrace-bpf: {message}"), said.trim_end());
    let report = report_json(&dir, &["app.ptl"]);
    let deadlocks = report["deadlocks"].as_array().unwrap();
    assert_eq!(deadlocks.len(), 1, "{deadlocks:#?}");
    let threads = deadlocks[0]["threads"].as_array().unwrap();
    let mut lwpids: Vec<u64> = threads
        .iter()
        .map(|t| t["lwpid"].as_u64().unwrap())
        .collect();
    lwpids.sort_unstable();
    let mut expected = vec![u64::from(a), u64::from(b)];
    expected.sort_unstable();
    assert_eq!(lwpids, expected);
    for thread in threads {
        let other = threads
            .iter()
            .find(|t| t["lwpid"] != thread["lwpid"])
            .unwrap();
        assert_eq!(
            thread["holds"],
            serde_json::json!([other["waits_for"]]),
            "{thread:#}"
        );
        assert_eq!(thread["waits_at"]["line"], second);
        assert_eq!(thread["locked_at"]["line"], first);
        // Said as the report places them: function+offset (line).
        let waiter = &thread["lwpid"];
        let part = format!(
            "thread {waiter} ({}) waits in pthread_mutex_lock({}) at {}, held by {} ({}) since ",
            thread["name"].as_str().unwrap(),
            thread["waits_for"].as_str().unwrap(),
            place(&thread["waits_at"]),
            other["lwpid"],
            other["name"].as_str().unwrap(),
        );
        assert!(said.contains(&part), "{part} not in {said}");
        let locked = format!("locked at {}", place(&other["locked_at"]));
        assert!(said.contains(&locked), "{locked} not in {said}");
    }
    assert_addresses_are_hex(&report);
    let waits_at = &threads[0]["waits_at"]["address"];
    assert!(
        waits_at.as_str().is_some_and(|a| a.starts_with("0x")),
        "{waits_at}"
    );
}

/// Under --contended the locks a deadlock's threads hold were taken without waiting, which is
/// not recorded: said so, not as if they were taken before the trace began.
#[test]
fn a_deadlock_under_contended_says_its_locks_were_taken_without_waiting() {
    if !bpf_available("deadlock_contended") {
        return;
    }
    let (said, _, dir, _, _) = deadlock("after", &["--contended"]);
    assert_eq!(
        said.matches("taken without waiting (which --contended does not record)")
            .count(),
        2,
        "{said}"
    );
    let report = run_tracer(dir.path(), &["report", "app.ptl"]);
    assert!(report.status.success(), "{report:?}");
    assert_eq!(
        report
            .stdout
            .matches("(taken without waiting, which --contended does not record)")
            .count(),
        2,
        "{}",
        report.stdout
    );
    assert!(!report.stdout.contains("before the trace began"));
    // Nor does it know how long a lock was held.
    let by_hold = run_tracer(dir.path(), &["report", "--sort", "hold", "app.ptl"]);
    assert_eq!(by_hold.status.code(), Some(2), "{by_hold:?}");
    assert_eq!(by_hold.stderr.lines().count(), 1, "{by_hold:?}");
    assert!(
        by_hold
            .stderr
            .contains("--sort hold: app.ptl records no hold times"),
        "{by_hold:?}"
    );
}

#[test]
fn a_lock_taken_before_attach_is_owned_as_glibc_says() {
    if !bpf_available("deadlock_before_attach") {
        return;
    }
    let (said, _, dir, a, b) = deadlock("before", &[]);
    for (waiter, holder) in [(a, b), (b, a)] {
        assert!(
            said.contains(&format!("thread {waiter} (worker-"))
                && said.contains(&format!("held by {holder} (worker-")),
            "{said}"
        );
    }
    assert_eq!(
        said.matches("since before the trace began").count(),
        2,
        "{said}"
    );
    let report = report_json(&dir, &["app.ptl"]);
    let threads = report["deadlocks"][0]["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2);
    for thread in threads {
        let other = threads
            .iter()
            .find(|t| t["lwpid"] != thread["lwpid"])
            .unwrap();
        assert_eq!(thread["holds"], serde_json::json!([other["waits_for"]]));
    }
}

#[test]
fn a_deadlock_is_said_from_contended_calls_only() {
    if !bpf_available("deadlock_contended") {
        return;
    }
    // Each worker's first lock is uncontended, so not recorded: who holds what is known from
    // the owner each blocked lock found.
    let (said, _, dir, a, b) = deadlock("after", &["--contended"]);
    let second = line_of("deadlock", "/* SECOND */");
    for (waiter, holder) in [(a, b), (b, a)] {
        let part = format!("thread {waiter} (worker-");
        assert!(said.contains(&part), "{said}");
        assert!(
            said.contains(&format!(
                " (deadlock.c:{second}), held by {holder} (worker-"
            )),
            "{said}"
        );
    }
    let report = report_json(&dir, &["app.ptl"]);
    assert_eq!(report["contended_only"], true);
    let threads = report["deadlocks"][0]["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2, "{report:#}");
}

#[test]
fn a_cycle_through_a_condvar_is_a_possible_deadlock() {
    if !bpf_available("deadlock_through_cond") {
        return;
    }
    let (said, _, dir, a, c) = deadlock("cond", &[]);
    assert!(
        said.starts_with("thrtrace-bpf: possible deadlock: "),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "thread {a} (worker-a) waits in pthread_cond_wait(0x"
        )) && said.contains(&format!(
            " (deadlock.c:{}), which only {c} (worker-c) ever woke",
            line_of("deadlock", "/* COND */")
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "thread {c} (worker-c) waits in pthread_mutex_lock(0x"
        )) && said.contains(&format!(
            " (deadlock.c:{}), held by {a} (worker-a)",
            line_of("deadlock", "/* BLOCKED */")
        )),
        "{said}"
    );
    let report = report_json(&dir, &["app.ptl"]);
    assert_eq!(report["deadlocks"][0]["certain"], false, "{report:#}");
}

#[test]
fn idle_workers_that_woke_each_other_are_no_deadlock() {
    if !bpf_available("idle_pool_no_deadlock") {
        return;
    }
    const WORKERS: u64 = 4;
    const POOL_ROUNDS: u64 = 3;
    for (mode, wait, marker) in [
        ("timed", "pthread_cond_clockwait", "TIMED_WAIT"),
        ("untimed", "cond_wait", "WAIT"),
    ] {
        let dir = TempDir::new("idle_pool");
        // Idle for 1.5 s, fifteen times --deadlock-after, traced whole.
        let run = run_tracer(
            dir.path(),
            &[
                "--log",
                "app.ptl",
                "--deadlock-after",
                "100ms",
                "--",
                &workload_arg("idle_pool"),
                &WORKERS.to_string(),
                &POOL_ROUNDS.to_string(),
                "1500",
                mode,
            ],
        );
        assert!(run.status.success(), "{mode}: {run:?}");
        assert!(run.stdout.contains("\nidle\n"), "{mode}: {}", run.stdout);
        assert!(!run.stderr.contains("deadlock"), "{mode}: {}", run.stderr);
        let logged = LogReader::open(&dir.path().join("app.ptl"))
            .unwrap()
            .events()
            .map(Result::unwrap)
            .filter(
                |e| matches!(e, Event::System(s) if matches!(s.kind, SystemKind::Deadlock { .. })),
            )
            .count();
        assert_eq!(logged, 0, "{mode}");
        let report = report_json(&dir, &["app.ptl"]);
        assert_eq!(report["deadlocks"], serde_json::json!([]), "{mode}");
        assert_eq!(
            report["potential_deadlocks"],
            serde_json::json!([]),
            "{mode}"
        );
        // Each worker's condvar (pthread_cond_t is 48 bytes): waited on and signaled once a
        // round and once more when idle, from the wait's line.
        let cond0: u64 = field(&run.stdout, "cond0");
        for n in 0..WORKERS {
            let address = format!("{:#x}", cond0 + n * 48);
            let cond = report["idle_waits"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["address"] == address.as_str())
                .unwrap_or_else(|| panic!("{mode}: no idle wait on {address}: {report:#}"));
            assert_eq!(cond["kind"], "cond", "{mode}: {cond:#}");
            assert_eq!(cond["acquisitions"], POOL_ROUNDS + 1, "{mode}: {cond:#}");
            assert_eq!(cond["wakeups"], POOL_ROUNDS + 1, "{mode}: {cond:#}");
            let callers = cond["callers"].as_array().unwrap();
            assert_eq!(callers.len(), 1, "{mode}: {cond:#}");
            assert_eq!(callers[0]["line"], line_of("idle_pool", marker), "{mode}");
            assert_eq!(callers[0]["count"], POOL_ROUNDS + 1, "{mode}");
        }
        let calls = report["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("worker-")))
            .map(|t| t["longest_wait"]["call"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>();
        assert_eq!(calls, vec![wait.to_owned(); WORKERS as usize], "{mode}");
    }
}

#[test]
fn lock_contention_comes_before_longer_idle_waits() {
    if !bpf_available("report_contention_first") {
        return;
    }
    const IDLERS: u64 = 4;
    const LOCKERS: u64 = 2;
    const BUSY_ROUNDS: u64 = 3;
    let dir = TempDir::new("busy_and_idle");
    let run = run_tracer(
        dir.path(),
        &[
            "--log",
            "app.ptl",
            "--",
            &workload_arg("busy_and_idle"),
            &IDLERS.to_string(),
            &LOCKERS.to_string(),
            &BUSY_ROUNDS.to_string(),
            "100",
        ],
    );
    assert!(run.status.success(), "{run:?}");
    let report = report_json(&dir, &["app.ptl"]);
    let hot = &report["locks"][0];
    assert_eq!(
        hot["symbol"], "hot",
        "the most waited-for lock first: {report:#}"
    );
    assert_eq!(hot["acquisitions"], BUSY_ROUNDS * (LOCKERS + 1));
    assert_eq!(hot["contended"], BUSY_ROUNDS * LOCKERS);
    assert_eq!(
        hot["callers"][0]["line"],
        line_of("busy_and_idle", "CONTEND")
    );
    let idle = report["idle_waits"].as_array().unwrap();
    let work_ready = &idle[0];
    assert_eq!(work_ready["symbol"], "work_ready", "{report:#}");
    assert_eq!(work_ready["kind"], "cond");
    assert_eq!(work_ready["acquisitions"], IDLERS);
    assert_eq!(work_ready["wakeups"], 1);
    assert_eq!(
        work_ready["callers"][0]["line"],
        line_of("busy_and_idle", "IDLE")
    );
    // The idlers waited longer than the lockers: by time waited alone, they would come first.
    assert!(
        work_ready["wait_total_ns"].as_u64() > hot["wait_total_ns"].as_u64(),
        "{work_ready:#} {hot:#}"
    );
    // Each thread the main thread joined, a wait of its own; no lock among the idle waits,
    // no idle wait among the locks.
    let joins = idle.iter().filter(|w| w["kind"] == "join").count() as u64;
    assert_eq!(joins, IDLERS + LOCKERS, "{idle:#?}");
    assert!(
        idle.iter()
            .all(|w| ["cond", "join"].contains(&w["kind"].as_str().unwrap()))
    );
    let locks = report["locks"].as_array().unwrap();
    assert!(
        locks
            .iter()
            .all(|l| ["mutex", "rmutex"].contains(&l["kind"].as_str().unwrap()))
    );

    // The text: the contended lock's section and row first, then the idle waits'.
    let text = run_tracer(dir.path(), &["report", "app.ptl"]).stdout;
    let lines: Vec<&str> = text.lines().collect();
    // A line by its words: a table's first column is as wide as its longest name.
    let at = |starts: &str| {
        lines
            .iter()
            .position(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                words.join(" ").starts_with(starts)
            })
            .unwrap_or_else(|| panic!("no line {starts:?} in {text}"))
    };
    let sections = (
        at("lock contention (mutex, rmutex, rwlock, spin, sema, futex), by time waited:"),
        at("lock kind"),
        at("hot mutex"),
        at("idle waits, for work or an event (futex event, cond, barrier, join), by time waited:"),
        at("object kind"),
        at("work_ready cond"),
    );
    assert_eq!(
        (
            sections.0 + 1,
            sections.1 + 1,
            sections.3 + 1,
            sections.4 + 1
        ),
        (sections.1, sections.2, sections.4, sections.5),
        "{text}"
    );
    assert!(sections.2 < sections.3, "{text}");

    // --kind: only the kinds named, in text and JSON; an unknown kind is refused.
    let mutexes = run_tracer(dir.path(), &["report", "--kind", "mutex", "app.ptl"]).stdout;
    assert!(
        mutexes.starts_with("lock contention (mutex), by time waited:\n"),
        "{mutexes}"
    );
    assert!(
        !mutexes.contains("idle waits") && !mutexes.contains(" rmutex "),
        "{mutexes}"
    );
    let conds = report_json(&dir, &["--kind", "cond,join", "app.ptl"]);
    assert_eq!(conds["locks"], serde_json::json!([]));
    assert_eq!(
        conds["idle_waits"].as_array().unwrap().len() as u64,
        1 + IDLERS + LOCKERS
    );
    let refused = run_tracer(
        dir.path(),
        &["report", "--kind", "mutex,semaphore", "app.ptl"],
    );
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("unknown kind 'semaphore'"),
        "{}",
        refused.stderr
    );
    assert!(refused.stdout.is_empty());
}

/// A deadlock the tracer found whose threads the log could not keep whole (a string is cut at
/// its size limit) is said on stderr with the tracer's own words, not left out in silence.
/// Needs no privileges: the log is written here.
#[test]
fn a_deadlock_the_log_cut_short_is_said_not_dropped() {
    let dir = TempDir::new("cut-deadlock");
    let path = dir.path().join("app.ptl");
    let metadata = corpus::metadata(None, LogFullPolicy::Append);
    let file = std::fs::File::create(&path).unwrap();
    let mut writer = LogWriter::create(file, &metadata).unwrap();
    let mut packet = EventPacket::default();
    packet.push(&corpus::record(1));
    let threads = format!("[{}]", vec![r#"{"pid":10,"lwpid":11}"#; 60].join(","));
    assert!(threads.len() > tracer_model::event::MAX_STRING);
    let deadlock = SystemKind::Deadlock {
        certain: true,
        threads,
        message: "deadlock: thread 11 waits in pthread_mutex_lock(0x5000)".into(),
    };
    packet.push(&Event::System(SystemEvent::of_process(
        1_700_000_000_000_000_001,
        10,
        0,
        deadlock,
    )));
    writer.write(&[packet], Status::default()).unwrap();
    writer.close(FinalStatus::default()).unwrap();
    let run = run_tracer(dir.path(), &["report", "app.ptl"]);
    assert!(run.status.success(), "{run:?}");
    assert!(
        run.stderr.contains(
            "is left out of the report: its threads were cut short in the log; the tracer \
             said: deadlock: thread 11 waits in pthread_mutex_lock(0x5000)"
        ),
        "{}",
        run.stderr
    );
}
