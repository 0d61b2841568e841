//! `--contended`: locks traced on glibc's slow paths only. The contention
//! workload's contention is certain by construction (the main thread holds a mutex HOLD_MS
//! while WAITERS threads lock it, posts a semaphore they all wait on only after HOLD_MS, and
//! holds a read-write lock HOLD_MS as writer while they read-lock it, then as reader while they
//! write-lock it). One run of it is traced by two tracers at once, whole and `--contended`: the
//! contended-only trace must hold exactly the whole trace's blocked calls, with the owner the
//! waiters found, the same waits (within 5% in total) and none of the uncontended calls each
//! thread also makes, on every glibc. A run traced `--contended` alone names their callers (in
//! the run traced twice, the whole trace's return probes stand in for the return addresses
//! the slow paths read).

use std::{collections::HashMap, io::Write, process::Command};
use tracer_common::Which;

use thrtrace_tests::{
    TempDir, bpf_available, codes, every_libc, field, folded_waits_of, is_musl, line_of,
    read_trace, report_json, report_lock, run_tracer, start_told, start_tracer, system_events,
    thread_records, workload, workload_arg,
};
use tracer_model::{
    TraceRecord,
    event::{Event, SystemKind},
    log::LogReader,
};

const ROUNDS: u64 = 4;
/// Each wait is about this long: long against what the traps themselves add to the whole
/// trace's (its entry and return, the contended trace's own two), which under emulation (the
/// kernel guests) is about 1.5 ms a wait.
const HOLD_MS: u64 = 100;
const WAITERS: u64 = 3;
/// Uncontended lock+unlock and post+wait pairs each thread makes between rounds.
const WORK: u64 = 50;
const EVENTS: &str = "mutex:rmutex:sema:rwlock";

/// One tracer's trace of the run.
struct Trace {
    dir: TempDir,
    records: Vec<TraceRecord>,
}

impl Trace {
    fn read(dir: TempDir) -> Self {
        let mut records: Vec<TraceRecord> =
            read_trace(dir.path()).into_values().flatten().collect();
        records.sort_by_key(TraceRecord::time_ns);
        Trace { dir, records }
    }
}

/// A run of the contention workload `build`, traced whole and `--contended` by two tracers
/// attached before it starts; its pid and the two mutexes, the semaphore and the read-write
/// lock the waiters block on.
struct Story {
    full: Trace,
    slow: Trace,
    pid: u32,
    first: u64,
    second: u64,
    sem: u64,
    rw: u64,
}

fn story(build: &str) -> Story {
    let args = [ROUNDS, HOLD_MS, WAITERS, WORK, 1].map(|n| n.to_string());
    let (mut child, stdin, mut out, first_line) =
        start_told(Command::new(workload(build)).args(args));
    let pid = child.id();
    let (full_dir, slow_dir) = (TempDir::new("contended-full"), TempDir::new("contended"));
    let log = |dir: &TempDir| dir.path().join("app.ptl").to_string_lossy().into_owned();
    let (full_log, slow_log) = (log(&full_dir), log(&slow_dir));
    // The full trace as placed before fast paths: its return probes on the locks put the
    // kernel's trampoline where the slow paths read their callers (checked below).
    let tracers = [
        start_tracer(
            full_dir.path(),
            &[pid],
            &["--no-fast-paths", "--events", EVENTS, "--log", &full_log],
        ),
        start_tracer(
            slow_dir.path(),
            &[pid],
            &["--contended", "--events", EVENTS, "--log", &slow_log],
        ),
    ];
    writeln!(stdin.unwrap(), "go").unwrap();
    // Read to its end, so that its last line does not meet a closed pipe.
    std::io::copy(&mut out, &mut std::io::sink()).unwrap();
    assert!(child.wait().unwrap().success(), "{build}");
    for (mut tracer, _) in tracers {
        assert!(tracer.wait().unwrap().success(), "{build}");
    }
    Story {
        full: Trace::read(full_dir),
        slow: Trace::read(slow_dir),
        pid,
        first: field(&first_line, "first"),
        second: field(&first_line, "second"),
        sem: field(&first_line, "sem"),
        rw: field(&first_line, "rw"),
    }
}

/// The calls of event `name` on `object`: each one's first record (entry half, or its one
/// record) with its return half if it has one.
fn calls(
    records: &[TraceRecord],
    name: &str,
    object: u64,
) -> Vec<(TraceRecord, Option<TraceRecord>)> {
    let code = codes(name);
    let mut open: HashMap<u32, usize> = HashMap::new();
    let mut found: Vec<(TraceRecord, Option<TraceRecord>)> = Vec::new();
    for record in records.iter().filter(|r| (r.event1, r.event2) == code) {
        match record.which {
            Which::Return => {
                if let Some(index) = open.remove(&record.lwpid) {
                    found[index].1 = Some(*record);
                }
            }
            which if record.a[0] as u64 == object => {
                if which == Which::Entry {
                    open.insert(record.lwpid, found.len());
                }
                found.push((*record, None));
            }
            _ => {}
        }
    }
    found
}

/// The nanoseconds between a call's entry and its return, if it returned.
fn wait_ns((entry, back): &(TraceRecord, Option<TraceRecord>)) -> Option<i128> {
    Some(back.as_ref()?.time_ns() - entry.time_ns())
}

/// The nanoseconds between each call's entry and return, summed.
fn total_wait_ns(calls: &[(TraceRecord, Option<TraceRecord>)]) -> i128 {
    calls.iter().filter_map(wait_ns).sum()
}

#[test]
fn a_contended_trace_holds_exactly_the_full_traces_blocked_calls() {
    if !bpf_available("contended_counts") {
        return;
    }
    let contended_calls = (ROUNDS * WAITERS) as usize;
    for build in every_libc("contended_counts", "contention") {
        if is_musl(&build) {
            continue;
        }
        let story = story(&build);
        let Story {
            full,
            slow,
            pid,
            first,
            second,
            sem,
            rw,
        } = &story;

        let waits = [
            ("mutex_lock", [*first, *second]),
            ("sema_wait", [*sem, 0]),
            ("rw_rdlock", [*rw, 0]),
            ("rw_wrlock", [*rw, 0]),
        ];
        for (name, objects) in waits {
            let waited = |trace: &Trace| {
                let mut all = calls(&trace.records, name, objects[0]);
                all.extend(calls(&trace.records, name, objects[1]));
                all
            };
            let (full_calls, slow_calls) = (waited(full), waited(slow));
            // The full trace's blocked ones: block? for a lock, s_count 0 at entry for a wait.
            let blocked: Vec<_> = full_calls
                .iter()
                .filter(|(entry, back)| match name {
                    "sema_wait" => entry.a[1] == 0,
                    _ => back.is_some_and(|b| b.a[1] == 1),
                })
                .copied()
                .collect();
            assert_eq!(blocked.len(), contended_calls, "{build} {name}: full trace");
            assert_eq!(
                slow_calls.len(),
                contended_calls,
                "{build} {name}: {slow_calls:#?}"
            );
            for (entry, back) in &slow_calls {
                let back = back.unwrap_or_else(|| panic!("{build} {name}: no return: {entry:?}"));
                assert_eq!(back.a[0], 0, "{build} {name}: rval: {back:?}");
                if name != "sema_wait" {
                    assert_eq!(back.a[1], 1, "{build} {name}: block?: {back:?}");
                }
                if name == "mutex_lock" {
                    // Every waiter found the main thread (lwpid = pid) holding the mutex.
                    assert_eq!(entry.a[1], i64::from(*pid), "{build}: owner: {entry:?}");
                }
            }
            // Each wait spans the block: the lock was held for HOLD_MS once the waiter came
            // (less the time the waiter took to come, far below half of it).
            let half_hold = i128::from(HOLD_MS) * 1_000_000 / 2;
            for (trace, calls) in [("full", &blocked), ("contended", &slow_calls)] {
                // A call that never returned spans nothing.
                let shortest = calls
                    .iter()
                    .map(|call| wait_ns(call).unwrap_or(0))
                    .min()
                    .unwrap_or(0);
                assert!(
                    shortest >= half_hold,
                    "{build} {name}: a wait of {shortest} ns in the {trace} trace"
                );
            }
            // And the two traces, two runs, agree on the whole: how long the main thread
            // takes to see every waiter asleep varies from run to run (by 11% in an emulated
            // guest), not by half.
            let (full_wait, wait) = (total_wait_ns(&blocked), total_wait_ns(&slow_calls));
            assert!(
                (wait - full_wait).abs() * 4 <= full_wait,
                "{build} {name}: waits {wait} ns against {full_wait} ns in full"
            );
        }

        // Unlocks that woke a waiter, and posts that did: as many as in the full trace.
        let wakes = [
            ("mutex_unlock", 2),
            ("sema_post", usize::MAX),
            ("rw_unlock", 2),
        ];
        for (name, waiters_field) in wakes {
            let woke = |trace: &Trace| -> Vec<TraceRecord> {
                [*first, *second, *sem, *rw]
                    .iter()
                    .flat_map(|&o| calls(&trace.records, name, o))
                    .map(|(record, _)| record)
                    .filter(|r| waiters_field == usize::MAX || r.a[waiters_field] == 1)
                    .collect()
            };
            let (full_woke, slow_woke) = (woke(full), woke(slow));
            assert_eq!(slow_woke.len(), full_woke.len(), "{build} {name}");
            assert!(
                slow_woke.len() as u64 >= ROUNDS,
                "{build} {name}: {slow_woke:?}"
            );
        }

        // Nothing of the uncontended calls: every lock and semaphore record is on the four.
        let others: Vec<&TraceRecord> = slow
            .records
            .iter()
            .filter(|r| [2, 4, 5, 6].contains(&r.event1) && r.which != Which::Return)
            .filter(|r| ![*first, *second, *sem, *rw].contains(&(r.a[0] as u64)))
            .collect();
        assert!(
            others.is_empty(),
            "{build}: uncontended calls recorded: {others:#?}"
        );
        let full_others = full.records.len() - slow.records.len();
        assert!(full_others as u64 >= 8 * WORK * ROUNDS * WAITERS, "{build}");

        // The log says what kind of trace it is; the report shows the owner waited for.
        let start = LogReader::open(&slow.dir.path().join("app.ptl"))
            .unwrap()
            .events()
            .map(Result::unwrap)
            .find_map(|event| match event {
                Event::System(system) => match system.kind {
                    SystemKind::Start { contended, .. } => Some(contended),
                    _ => None,
                },
                Event::Thread(_) => None,
            });
        assert_eq!(start, Some(true), "{build}");
        let report = report_json(&slow.dir, &["app.ptl"]);
        assert_eq!(report["contended_only"], true);
        let lock = |address: u64| report_lock(&report, &format!("{address:#x}").into());
        for mutex in [*first, *second] {
            let lock = lock(mutex);
            assert_eq!(lock["contended"], ROUNDS * WAITERS / 2, "{build}: {lock:#}");
            assert_eq!(lock["owners"][0]["lwpid"], *pid, "{build}: {lock:#}");
            assert_eq!(lock["owners"][0]["count"], ROUNDS * WAITERS / 2, "{build}");
        }
        let sem = lock(*sem);
        assert_eq!(sem["acquisitions"], ROUNDS * WAITERS, "{build}: {sem:#}");
        assert_eq!(sem["contended"], ROUNDS * WAITERS, "{build}: {sem:#}");
        let rw = lock(*rw);
        assert_eq!(rw["contended"], 2 * ROUNDS * WAITERS, "{build}: {rw:#}");
        // The whole trace's return probes put the kernel's trampoline where the slow paths
        // read their callers: no caller is named, each lock's waits are one unknown caller.
        for (object, waits) in [
            (story.first, ROUNDS * WAITERS / 2),
            (story.second, ROUNDS * WAITERS / 2),
            (story.sem, ROUNDS * WAITERS),
            (story.rw, 2 * ROUNDS * WAITERS),
        ] {
            let lock = lock(object);
            let callers = lock["callers"].as_array().unwrap();
            assert_eq!(callers.len(), 1, "{build}: {lock:#}");
            assert_eq!(
                callers[0]["address"],
                serde_json::Value::Null,
                "{build}: {lock:#}"
            );
            assert_eq!(callers[0]["unknown"], "another tool's return probe");
            assert_eq!(callers[0]["count"], waits, "{build}: {lock:#}");
        }
        let run = run_tracer(slow.dir.path(), &["report", "app.ptl"]);
        let unknown = format!(
            "    unknown (another tool's return probe): {} calls, ",
            2 * ROUNDS * WAITERS
        );
        assert!(
            run.stdout.lines().any(|l| l.starts_with(&unknown)),
            "{build}: {}",
            run.stdout
        );
        assert!(!run.stdout.contains("0x7fffffffe000"), "{}", run.stdout);
        assert!(
            run.stdout.starts_with("contended calls only (--contended)"),
            "{}",
            run.stdout
        );
    }
}

#[test]
fn a_contended_trace_names_the_lines_that_waited() {
    if !bpf_available("contended_callers") {
        return;
    }
    for build in every_libc("contended_callers", "contention") {
        if is_musl(&build) {
            continue;
        }
        let dir = TempDir::new("contended-callers");
        let run = run_tracer(
            dir.path(),
            &[
                "--contended",
                "--events",
                EVENTS,
                "--log",
                "app.ptl",
                "--",
                &workload_arg(&build),
                "1",
                "50",
                "2",
            ],
        );
        assert!(run.status.success(), "{build}: {run:?}");
        let first_line = run.stdout.lines().next().unwrap_or_default();
        let report = report_json(&dir, &["app.ptl"]);
        // Round 1 waits on `first` (WAIT_MUTEX), `sem` and `rw`, 2 waiters each.
        let expected = [
            ("first", vec!["WAIT_MUTEX"]),
            ("sem", vec!["WAIT_SEM"]),
            ("rw", vec!["WAIT_RDLOCK", "WAIT_WRLOCK"]),
        ];
        for (object, markers) in expected {
            let address = format!("{:#x}", field::<u64>(first_line, object));
            let lock = report_lock(&report, &address.into());
            let mut lines: Vec<(u64, u64)> = lock["callers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    let file = c["file"].as_str().unwrap_or_default();
                    assert!(file.ends_with("contention.c"), "{build} {object}: {c:#}");
                    (c["line"].as_u64().unwrap(), c["count"].as_u64().unwrap())
                })
                .collect();
            lines.sort_unstable();
            let mut wanted: Vec<(u64, u64)> = markers
                .iter()
                .map(|m| (u64::from(line_of("contention", m)), 2))
                .collect();
            wanted.sort_unstable();
            assert_eq!(lines, wanted, "{build} {object}: {lock:#}");
        }
    }
}

#[test]
fn what_contended_mode_cannot_trace_is_refused_by_name() {
    let dir = TempDir::new("contended-refused");
    let run = run_tracer(
        dir.path(),
        &["--contended", "--events", "mutex:spin", "--", "/bin/true"],
    );
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("--contended does not trace _spin_unlock, _spin_init")
            && run.stderr.contains("without --contended"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty(), "{run:?}");
}

#[test]
fn musl_has_no_slow_path_found_and_says_so_by_function() {
    if !bpf_available("contended_musl") {
        return;
    }
    for build in every_libc("contended_musl", "contention")
        .into_iter()
        .filter(|b| b.ends_with("_musl"))
    {
        let dir = TempDir::new("contended-musl");
        let run = run_tracer(
            dir.path(),
            &[
                "--contended",
                "--events",
                "mutex",
                "--dir",
                ".",
                "--",
                &workload_arg(&build),
                "1",
                "1",
                "1",
            ],
        );
        assert!(run.status.success(), "{run:?}");
        for function in ["pthread_mutex_lock", "pthread_mutex_unlock"] {
            assert!(
                run.stderr.contains(&format!(
                    "--contended: no slow path found in {function} of "
                )),
                "{build}: {}",
                run.stderr
            );
        }
    }
}

/// `--min-wait`: a wait shorter than the bound is counted, not written; one as long or
/// longer is written whole. The contention workload's waits each last about HOLD_MS: under a
/// bound of 1 s every one of them is counted, under 5 ms none, and both traces count the same
/// waits on each object: two rounds of two waiters block twice on each mutex, four times on
/// the semaphore and eight times on the read-write lock (a read and a write lock each).
#[test]
fn min_wait_counts_the_shorter_waits_exactly_and_writes_the_longer_ones() {
    if !bpf_available("min_wait") {
        return;
    }
    let expected = [("first", 2), ("second", 2), ("sem", 4), ("rw", 8)];
    for (bound, all_short) in [("1s", true), ("5ms", false)] {
        let dir = TempDir::new("min-wait");
        let workload = workload_arg("contention");
        let argv = [
            "--contended",
            "--events",
            EVENTS,
            "--min-wait",
            bound,
            "--log",
            "app.ptl",
            "--",
            &workload,
            "2",
            "50",
            "2",
        ];
        let run = run_tracer(dir.path(), &argv);
        assert!(run.status.success(), "{bound}: {run:?}");
        let first_line = run.stdout.lines().next().unwrap_or_default();
        let all: u64 = expected.iter().map(|(_, n)| n).sum();
        let counted = if all_short { all } else { 0 };
        let said = format!("; {counted} waits shorter than {bound} counted, not written");
        assert!(run.stderr.contains(&said), "{said}: {}", run.stderr);
        let report = report_json(&dir, &["app.ptl"]);
        let folded = run_tracer(dir.path(), &["report", "--format", "folded", "app.ptl"]);
        assert!(folded.status.success(), "{bound}: {folded:?}");
        let unrecorded = format!("[stack not recorded: waits under {bound}, --min-wait]");
        for (object, waits) in expected {
            let address = format!("{:#x}", field::<u64>(first_line, object));
            let lock = report_lock(&report, &address.clone().into());
            // The profile holds every wait the report counts, short ones under their caller.
            let profiled = folded_waits_of(&folded.stdout, lock);
            let profiled_ns: u64 = profiled.iter().map(|(_, ns)| ns).sum();
            assert_eq!(
                profiled_ns, lock["wait_total_ns"],
                "{bound} {object}: {}",
                folded.stdout
            );
            assert!(
                profiled
                    .iter()
                    .all(|(stack, _)| stack.contains(&unrecorded) == all_short),
                "{bound} {object}: {}",
                folded.stdout
            );
            assert_eq!(lock["acquisitions"], waits, "{bound} {object}: {lock:#}");
            assert_eq!(lock["contended"], waits, "{bound} {object}: {lock:#}");
            let stacked: u64 = lock["waiting_stacks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["count"].as_u64().unwrap())
                .sum();
            if all_short {
                let short = &lock["short_waits"];
                assert_eq!(short["count"], waits, "{bound} {object}: {lock:#}");
                assert_eq!(short["below_ns"], 1_000_000_000, "{object}");
                assert_eq!(
                    short["total_ns"], lock["wait_total_ns"],
                    "{object}: {lock:#}"
                );
                assert_eq!(stacked, 0, "{object}: no stack is written: {lock:#}");
            } else {
                assert!(lock.get("short_waits").is_none(), "{object}: {lock:#}");
                assert_eq!(stacked, waits, "{object}: {lock:#}");
            }
        }
        // No record of a counted wait is written, and every wait not counted is.
        let log = LogReader::open(&dir.path().join("app.ptl")).unwrap();
        let events: Vec<Event> = log.events().map(Result::unwrap).collect();
        let lock_waits = thread_records(&events)
            .iter()
            .filter(|r| {
                ["mutex_lock", "sema_wait", "rw_rdlock", "rw_wrlock"]
                    .iter()
                    .any(|name| r.is(name, Which::Entry))
            })
            .count();
        let told: u64 = system_events(&events)
            .iter()
            .filter_map(|s| match s.kind {
                SystemKind::ShortWaits { waits, .. } => Some(waits),
                _ => None,
            })
            .sum();
        match all_short {
            true => assert_eq!((lock_waits, told), (0, all), "{bound}"),
            false => assert_eq!((lock_waits as u64, told), (all, 0), "{bound}"),
        }
    }
}
