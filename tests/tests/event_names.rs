//! `--events` takes event names as well as categories: only the named calls are
//! probed and recorded, and a log's START lists every other event type as filtered out.

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
    let (run, records) = trace_workload(
        &["--events", "mutex_lock:thr_join"],
        "mutex_contend",
        &["2", "100"],
    );
    assert!(run.status.success(), "{run:?}");
    let count = |name: &str, which: Which| records.iter().filter(|r| r.is(name, which)).count();
    // Each worker: 100 locks, entry and return; the main thread joins both.
    assert_eq!(
        (
            count("mutex_lock", Which::Entry),
            count("mutex_lock", Which::Return)
        ),
        (200, 200)
    );
    assert_eq!(
        (
            count("thr_join", Which::Entry),
            count("thr_join", Which::Return)
        ),
        (2, 2)
    );
    assert_eq!(records.len(), 404);
    assert!(
        !records
            .iter()
            .any(|r| (r.event1, r.event2) == codes("mutex_unlock"))
    );
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
