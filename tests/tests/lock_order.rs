//! Deadlocks before they happen: lock-order inversions in `report` (text and JSON)
//! and said live, once, from tests/workloads/lock_order.c, whose threads run one after the
//! other so that nothing ever waits, in orders known by construction.

use serde_json::Value;
use thrtrace_tests::{
    TempDir, bpf_available, field, line_of, place, run_tracer, system_events, workload_arg,
};
use tracer_model::{
    event::{Event, SystemKind},
    log::LogReader,
};

/// What one traced scenario gave: the tracer's stderr, the report's JSON and text, the
/// workload's `ready` line, and the log's lock-order events.
struct Traced {
    stderr: String,
    report: Value,
    text: String,
    ready: String,
    logged: usize,
}

fn trace(scenario: &str, options: &[&str]) -> Traced {
    let dir = TempDir::new("lock_order");
    let mut args = vec!["--log", "app.ptl"];
    args.extend_from_slice(options);
    let workload = workload_arg("lock_order");
    args.extend_from_slice(&["--", &workload, scenario]);
    let run = run_tracer(dir.path(), &args);
    assert!(run.status.success(), "{run:?}");
    let report = run_tracer(dir.path(), &["report", "--format", "json", "app.ptl"]);
    assert!(report.status.success(), "{report:?}");
    let text = run_tracer(dir.path(), &["report", "app.ptl"]);
    assert!(text.status.success(), "{text:?}");
    let events: Vec<Event> = LogReader::open(&dir.path().join("app.ptl"))
        .unwrap()
        .events()
        .map(Result::unwrap)
        .collect();
    let logged = system_events(&events)
        .iter()
        .filter(|e| matches!(e.kind, SystemKind::LockOrder { .. }))
        .count();
    Traced {
        ready: run.stdout.lines().next().unwrap().to_owned(),
        stderr: run.stderr,
        report: serde_json::from_str(&report.stdout).unwrap(),
        text: text.stdout,
        logged,
    }
}

/// Each order of an inversion: (thread name, held symbol, its line, acquired symbol, its line).
fn orders(inversion: &Value) -> Vec<(String, String, u64, String, u64)> {
    inversion["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let side = |s: &Value| {
                (
                    s["symbol"].as_str().unwrap().to_owned(),
                    s["at"]["line"].as_u64().unwrap(),
                )
            };
            let (held, held_line) = side(&o["held"]);
            let (acquired, acquired_line) = side(&o["acquired"]);
            (
                o["name"].as_str().unwrap().to_owned(),
                held,
                held_line,
                acquired,
                acquired_line,
            )
        })
        .collect()
}

fn said(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("lock order inversion"))
        .collect()
}

fn order(
    name: &str,
    held: &str,
    held_at: &str,
    acquired: &str,
    acquired_at: &str,
) -> (String, String, u64, String, u64) {
    (
        name.to_owned(),
        held.to_owned(),
        u64::from(line_of("lock_order", held_at)),
        acquired.to_owned(),
        u64::from(line_of("lock_order", acquired_at)),
    )
}

#[test]
fn ab_ba_in_turn_is_one_potential_deadlock_with_both_orders_and_their_lines() {
    if !bpf_available("lock_order_abba") {
        return;
    }
    let traced = trace("abba", &[]);
    let inversions = traced.report["potential_deadlocks"].as_array().unwrap();
    assert_eq!(inversions.len(), 1, "{:#}", traced.report);
    assert_eq!(
        orders(&inversions[0]),
        [
            order("first", "a", "A_FIRST", "b", "B_AFTER_A"),
            order("second", "b", "B_FIRST", "a", "A_AFTER_B"),
        ]
    );
    let pid: u64 = field(&traced.ready, "pid");
    assert_eq!(inversions[0]["pid"], pid);
    let a: String = field(&traced.ready, "a");
    assert_eq!(inversions[0]["orders"][0]["held"]["address"], a);
    assert_eq!(inversions[0]["orders"][0]["held"]["mode"], "write");
    assert_eq!(
        traced.report["deadlocks"].as_array().unwrap().len(),
        0,
        "nothing hung"
    );
    assert_eq!(traced.report["lock_order_incomplete"], false);
    // Said once while tracing, with both threads and lines, and logged once.
    let lines = said(&traced.stderr);
    assert_eq!(lines.len(), 1, "{}", traced.stderr);
    // Each place as the report has it (whose lines `orders` checked): function+offset (line).
    let (first, second) = (&inversions[0]["orders"][0], &inversions[0]["orders"][1]);
    for part in [
        format!("(first) took {a} (a) at {}", place(&first["held"]["at"])),
        format!(
            "(second) took {} (b) at {}",
            field::<String>(&traced.ready, "b"),
            place(&second["held"]["at"])
        ),
        format!("then {a} (a) at {}", place(&second["acquired"]["at"])),
    ] {
        assert!(lines[0].contains(&part), "{part:?} not in {:?}", lines[0]);
    }
    assert_eq!(traced.logged, 1);
    assert!(
        traced.text.contains(&format!(
            "a potential deadlock (lock order inversion) in process {pid}:"
        )),
        "{}",
        traced.text
    );
    assert!(
        traced.text.contains(&format!(
            "(second) held {} (b) taken at {}, then acquired {a} (a) at {}",
            field::<String>(&traced.ready, "b"),
            place(&second["held"]["at"]),
            place(&second["acquired"]["at"])
        )),
        "{}",
        traced.text
    );
}

#[test]
fn three_locks_taken_around_a_ring_are_one_cycle_of_three() {
    if !bpf_available("lock_order_ring") {
        return;
    }
    let traced = trace("ring", &[]);
    let inversions = traced.report["potential_deadlocks"].as_array().unwrap();
    assert_eq!(inversions.len(), 1, "{:#}", traced.report);
    assert_eq!(
        orders(&inversions[0]),
        [
            order("first", "a", "A_FIRST", "b", "B_AFTER_A"),
            order("second", "b", "B_BEFORE_C", "c", "C_AFTER_B"),
            order("third", "c", "C_BEFORE_A", "a", "A_AFTER_C"),
        ]
    );
    assert_eq!(said(&traced.stderr).len(), 1, "{}", traced.stderr);
    assert_eq!(traced.logged, 1);
}

/// A consistent order, a gate lock held around both orders (documented: serialized orders
/// cannot deadlock, so they are not reported), a recursive re-lock under another lock, and a
/// trylock against the order: none is an inversion.
#[test]
fn consistent_orders_a_gate_a_relock_and_a_trylock_are_not_inversions() {
    if !bpf_available("lock_order_none") {
        return;
    }
    for scenario in ["consistent", "gate", "recursive", "trylock"] {
        let traced = trace(scenario, &[]);
        assert_eq!(
            traced.report["potential_deadlocks"],
            Value::Array(Vec::new()),
            "{scenario}"
        );
        assert!(
            said(&traced.stderr).is_empty(),
            "{scenario}: {}",
            traced.stderr
        );
        assert_eq!(traced.logged, 0, "{scenario}");
        assert!(!traced.text.contains("potential deadlock"), "{scenario}");
    }
}

#[test]
fn lock_order_off_says_nothing_while_tracing_and_the_report_still_finds_it() {
    if !bpf_available("lock_order_off") {
        return;
    }
    let traced = trace("abba", &["--lock-order", "off"]);
    assert!(said(&traced.stderr).is_empty(), "{}", traced.stderr);
    assert_eq!(traced.logged, 0);
    assert_eq!(
        traced.report["potential_deadlocks"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}
