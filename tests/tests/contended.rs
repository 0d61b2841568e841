//! `--contended` (issue 28): locks traced on glibc's slow paths only. lock_story's contention
//! is certain by construction (the main thread holds the mutex HOLD_MS while WAITERS threads
//! lock it), so the contended-only trace must hold exactly the full trace's blocked locks and
//! waking unlocks, with the same callers and the owner the waiters found, on every glibc.

use thrtrace_tests::{
    TempDir, bpf_available, codes, every_libc, field, is_musl, read_trace, run_tracer, workload_arg,
};
use tracer_model::{
    TraceRecord,
    event::{Event, SystemKind},
    log::LogReader,
};

const ROUNDS: u64 = 4;
const HOLD_MS: u64 = 30;
const WAITERS: u64 = 3;

/// lock_story `build` traced with `options` into tr files and a log in a new directory: the
/// directory, the workload's pid, the contended mutex's address and every record in time
/// order.
fn story(build: &str, options: &[&str]) -> (TempDir, u32, u64, Vec<TraceRecord>) {
    let dir = TempDir::new("contended");
    let mut args: Vec<String> = options.iter().map(ToString::to_string).collect();
    args.extend(
        [
            "--events",
            "mutex:rmutex",
            "--dir",
            ".",
            "--log",
            "app.ptl",
            "--",
            &workload_arg(build),
            &ROUNDS.to_string(),
            &HOLD_MS.to_string(),
            &WAITERS.to_string(),
        ]
        .map(String::from),
    );
    let run = run_tracer(dir.path(), &args);
    assert!(run.status.success(), "{args:?}: {run:?}");
    let first = run.stdout.lines().next().unwrap();
    let mutex = field::<u64>(first, "contended");
    let mut records: Vec<TraceRecord> = read_trace(dir.path()).into_values().flatten().collect();
    records.sort_by_key(TraceRecord::time_ns);
    let pid = records.first().map_or(0, |r| r.pid);
    (dir, pid, mutex, records)
}

/// The records of `event` (which half) on `mutex`, by thread: entry halves carry the mutex in
/// a1, returns are matched to them through the thread's entry before.
fn on_mutex(records: &[TraceRecord], mutex: u64, name: &str, which: u16) -> Vec<TraceRecord> {
    let code = codes(name);
    let mut last_entry_on_mutex = std::collections::HashMap::new();
    let mut found = Vec::new();
    for record in records.iter().filter(|r| (r.event1, r.event2) == code) {
        match record.which {
            1 => {
                last_entry_on_mutex.insert(record.lwpid, record.a[0] as u64 == mutex);
            }
            2 => {
                if which == 2 && last_entry_on_mutex.get(&record.lwpid) == Some(&true) {
                    found.push(*record);
                }
                continue;
            }
            _ => {}
        }
        if record.which == which && record.a[0] as u64 == mutex {
            found.push(*record);
        }
    }
    found
}

/// Each lock's wait (entry to return) on `mutex`, in nanoseconds, summed.
fn total_wait_ns(records: &[TraceRecord], mutex: u64) -> i128 {
    let code = codes("mutex_lock");
    let mut since = std::collections::HashMap::new();
    let mut total = 0;
    for record in records.iter().filter(|r| (r.event1, r.event2) == code) {
        match record.which {
            1 if record.a[0] as u64 == mutex => {
                since.insert(record.lwpid, record.time_ns());
            }
            2 => {
                if let Some(entry) = since.remove(&record.lwpid) {
                    total += record.time_ns() - entry;
                }
            }
            _ => {}
        }
    }
    total
}

#[test]
fn a_contended_trace_holds_exactly_the_full_traces_blocked_locks_and_waking_unlocks() {
    if !bpf_available("contended_counts") {
        return;
    }
    for build in every_libc("contended_counts", "lock_story") {
        if is_musl(&build) {
            continue;
        }
        let (_full_dir, _, full_mutex, full) = story(&build, &[]);
        let (dir, pid, mutex, contended) = story(&build, &["--contended"]);

        let blocked: Vec<TraceRecord> = on_mutex(&full, full_mutex, "mutex_lock", 2)
            .into_iter()
            .filter(|r| r.a[1] == 1)
            .collect();
        let waited = on_mutex(&contended, mutex, "mutex_lock", 2);
        assert_eq!(
            blocked.len() as u64,
            ROUNDS * WAITERS,
            "{build}: full trace"
        );
        assert_eq!(waited.len(), blocked.len(), "{build}: {contended:#?}");
        for lock in &waited {
            assert_eq!(lock.a[..2], [0, 1], "{build}: rval 0, block? 1: {lock:?}");
        }
        // Every waiter found the main thread (lwpid = pid) holding the mutex.
        let entries = on_mutex(&contended, mutex, "mutex_lock", 1);
        assert_eq!(entries.len(), waited.len(), "{build}");
        for entry in &entries {
            assert_eq!(
                entry.a[1],
                i64::from(pid),
                "{build}: owner found: {entry:?}"
            );
        }
        // The same call site as the full trace's blocked locks: the caller, not glibc.
        let callers = |records: &[TraceRecord]| {
            let mut callers: Vec<u64> = records.iter().map(|r| r.caller & 0xfff).collect();
            callers.dedup();
            callers
        };
        let full_entries: Vec<TraceRecord> = on_mutex(&full, full_mutex, "mutex_lock", 1)
            .into_iter()
            .filter(|r| r.lwpid != r.pid)
            .collect();
        assert_eq!(callers(&entries), callers(&full_entries), "{build}");

        let waking = |records: &[TraceRecord], mutex: u64| -> Vec<TraceRecord> {
            on_mutex(records, mutex, "mutex_unlock", 0)
                .into_iter()
                .filter(|r| r.a[2] == 1)
                .collect()
        };
        let unlocks = on_mutex(&contended, mutex, "mutex_unlock", 0);
        assert_eq!(
            unlocks.len(),
            waking(&full, full_mutex).len(),
            "{build}: waking unlocks"
        );
        assert_eq!(unlocks.len(), waking(&contended, mutex).len(), "{build}");
        assert!(unlocks.len() as u64 >= ROUNDS, "{build}: {unlocks:?}");
        // Nothing else of the mutexes: the recursive one is never contended.
        let mutex_records = contended
            .iter()
            .filter(|r| [2, 6].contains(&r.event1))
            .count();
        assert_eq!(mutex_records, 2 * waited.len() + unlocks.len(), "{build}");

        let (full_wait, wait) = (
            total_wait_ns(&full, full_mutex),
            total_wait_ns(&contended, mutex),
        );
        assert!(
            (wait - full_wait).abs() * 20 <= full_wait,
            "{build}: waits {wait} ns against {full_wait} ns in full"
        );

        // The log says what kind of trace it is; the report shows the owner waited for.
        let start = LogReader::open(&dir.path().join("app.ptl"))
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
        let run = run_tracer(
            dir.path(),
            &["report", "--format", "json", "--top", "100", "app.ptl"],
        );
        assert!(run.status.success(), "{run:?}");
        let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(report["contended_only"], true);
        let lock = report["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["address"] == format!("{mutex:#x}"))
            .unwrap_or_else(|| panic!("{build}: no lock {mutex:#x} in {report:#}"));
        assert_eq!(lock["contended"], ROUNDS * WAITERS, "{build}");
        assert_eq!(lock["owners"][0]["lwpid"], pid, "{build}: {lock:#}");
        assert_eq!(lock["owners"][0]["count"], ROUNDS * WAITERS, "{build}");
        let run = run_tracer(dir.path(), &["report", "app.ptl"]);
        assert!(
            run.stdout.starts_with("contended calls only (--contended)"),
            "{}",
            run.stdout
        );
    }
}

#[test]
fn what_contended_mode_cannot_trace_is_refused_by_name() {
    let dir = TempDir::new("contended-refused");
    let run = run_tracer(
        dir.path(),
        &["--contended", "--events", "mutex:sema", "--", "/bin/true"],
    );
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("--contended does not trace sema_init, sema_wait")
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
    for build in every_libc("contended_musl", "lock_story")
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
