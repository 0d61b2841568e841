//! `--events` takes event names and C library functions as well as categories (`list` lists
//! them): only the named calls are probed and recorded, and a log's START lists every other
//! event type as filtered out.

use thrtrace_tests::{TempDir, bpf_available, codes, run_tracer, trace_workload, workload_arg};
use tracer_common::Which;
use tracer_model::{
    event::{Event, SystemKind},
    log::LogReader,
};

#[test]
fn named_events_are_the_only_ones_recorded() {
    if !bpf_available("event_names") {
        return;
    }
    // The seed's names, and the C library's as users type them, separated either way.
    for events in ["mutex_lock:thr_join", "pthread_mutex_lock,pthread_join"] {
        let (run, records) = trace_workload(&["--events", events], "mutex_contend", &["2", "100"]);
        assert!(run.status.success(), "{events}: {run:?}");
        // The line that says the trace has begun: what, of what, where to, how it stops.
        let begun = run
            .stderr
            .lines()
            .find(|line| line.starts_with("thrtrace-bpf: tracing thr_join, mutex_lock"))
            .unwrap_or_else(|| panic!("{events}: {}", run.stderr));
        assert!(
            begun.contains("/mutex_contend (pid ")
                && begun.contains(") into tr files in ")
                && begun.contains("; Ctrl-C stops it, as does `thrtrace-bpf ctl thrtrace-"),
            "{begun}"
        );
        let count = |name: &str, which: Which| records.iter().filter(|r| r.is(name, which)).count();
        // Each worker: 100 locks, entry and return; the main thread joins both.
        assert_eq!(
            (
                count("mutex_lock", Which::Entry),
                count("mutex_lock", Which::Return)
            ),
            (200, 200),
            "{events}"
        );
        assert_eq!(
            (
                count("thr_join", Which::Entry),
                count("thr_join", Which::Return)
            ),
            (2, 2),
            "{events}"
        );
        // pthread_mutex_lock is also the recursive mutexes' (rmutex_lock): glibc takes one of
        // its own, the loader's, as threads are created; musl does not.
        let recursive = (
            count("rmutex_lock", Which::Entry),
            count("rmutex_lock", Which::Return),
        );
        assert_eq!(recursive.0, recursive.1, "{events}");
        if events.contains("mutex_lock:") {
            assert_eq!(recursive.0, 0, "{events}");
        }
        assert_eq!(records.len(), 404 + 2 * recursive.0, "{events}");
        assert!(
            !records
                .iter()
                .any(|r| (r.event1, r.event2) == codes("mutex_unlock"))
        );
    }
}

/// `list` prints a row per event of the table, each naming what `--events` takes.
#[test]
fn list_shows_every_event_with_its_function() {
    let dir = TempDir::new("event-list");
    let run = run_tracer(dir.path(), &["list"]);
    assert!(run.status.success(), "{run:?}");
    let rows: Vec<Vec<&str>> = run
        .stdout
        .lines()
        .skip(1)
        .take_while(|line| !line.is_empty())
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), tracer_common::EVENTS.len());
    for event in tracer_common::EVENTS {
        let row = rows.iter().find(|row| row[1] == event.name).unwrap();
        assert_eq!(
            (row[0], row[2]),
            (event.category.name(), event.symbol),
            "{row:?}"
        );
    }
    let sem_wait = rows.iter().find(|row| row[2] == "sem_wait").unwrap();
    assert_eq!(sem_wait[3..].join(" "), "the calls that wait");
}

#[test]
fn a_log_names_what_the_selection_filters_out() {
    if !bpf_available("event_names_log") {
        return;
    }
    let dir = TempDir::new("event-names");
    let workload = workload_arg("mutex_contend");
    let run = run_tracer(
        dir.path(),
        &[
            "--events",
            "cond:mutex_unlock",
            "--log",
            "app.ptl",
            "--",
            &workload,
            "1",
            "10",
        ],
    );
    assert!(run.status.success(), "{run:?}");
    let reader = LogReader::open(&dir.path().join("app.ptl")).unwrap();
    let start = reader
        .events()
        .find_map(|e| match e.unwrap() {
            Event::System(s) => match s.kind {
                SystemKind::Start { filter, .. } => Some(filter),
                _ => None,
            },
            Event::Thread(_) => None,
        })
        .unwrap();
    let recorded: Vec<&str> = tracer_common::EVENTS
        .iter()
        .map(|e| e.name)
        .filter(|name| !start.iter().any(|f| f == name))
        .collect();
    let selected: Vec<&str> = tracer_common::EVENTS
        .iter()
        .filter(|e| e.category == tracer_common::Category::Cond || e.name == "mutex_unlock")
        .map(|e| e.name)
        .collect();
    assert_eq!(recorded, selected);
    assert_eq!(selected.len(), 8, "{selected:?}");
}
