//! An exec without `--follow`: the new image has no probes, and the tracer says so
//! once, with the new executable, a hint for a launched command whose new image has pthread
//! functions, and the exec and a detach in the log. Under `--follow` the exec is followed
//! and nothing of the kind is said.

use thrtrace_tests::{
    TempDir, bpf_available, run_tracer, system_events, thread_records, workload_arg,
};
use tracer_model::{
    event::{Event, SystemKind},
    log::LogReader,
};

const SLEEP: &str = "/bin/sleep";

fn left(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("not traced from there on"))
        .collect()
}

#[test]
fn an_exec_without_follow_is_said_once_and_logged_with_a_detach() {
    if !bpf_available("exec_without_follow") {
        return;
    }
    let dir = TempDir::new("exec-without-follow");
    let workload = workload_arg("thread_exec");
    let run = run_tracer(
        dir.path(),
        &[
            "-e",
            "mutex:thread",
            "--log",
            "app.ptl",
            "--",
            &workload,
            SLEEP,
            "0.5",
        ],
    );
    assert!(run.status.success(), "{run:?}");
    let said = left(&run.stderr);
    assert_eq!(said.len(), 1, "{}", run.stderr);
    let sleep = std::fs::canonicalize(SLEEP).unwrap();
    let sleep = sleep.to_str().unwrap();
    assert!(
        said[0].contains(&format!("exec'd {sleep}: ")),
        "{}",
        said[0]
    );
    let hints: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("hint: "))
        .collect();
    assert_eq!(hints.len(), 1, "{}", run.stderr);
    assert!(
        hints[0].contains(&format!("{sleep} has pthread functions in ")),
        "{}",
        hints[0]
    );
    assert!(hints[0].contains("--follow"));

    let events: Vec<Event> = LogReader::open(&dir.path().join("app.ptl"))
        .unwrap()
        .events()
        .map(Result::unwrap)
        .collect();
    let records = thread_records(&events);
    let pid = records[0].pid;
    let system = system_events(&events);
    let execs: Vec<_> = system
        .iter()
        .filter(|e| matches!(&e.kind, SystemKind::Exec { .. }))
        .collect();
    assert_eq!(execs.len(), 1);
    assert_eq!(execs[0].pid, pid);
    assert!(matches!(&execs[0].kind, SystemKind::Exec { exe } if exe == sleep));
    let detaches: Vec<_> = system
        .iter()
        .filter(|e| e.pid == pid && e.kind == SystemKind::ProcessDetach)
        .collect();
    assert_eq!(
        detaches.len(),
        1,
        "detached at the exec, not again at the exit"
    );
    assert!(detaches[0].time_ns >= execs[0].time_ns);
    // thread_exec's own pthread_create (entry and return) and nothing after the exec.
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(
        records
            .iter()
            .all(|r| r.time_ns() as i64 <= execs[0].time_ns)
    );
}

#[test]
fn under_follow_an_exec_is_followed_and_not_said_to_leave() {
    if !bpf_available("exec_with_follow") {
        return;
    }
    let dir = TempDir::new("exec-with-follow");
    let workload = workload_arg("thread_exec");
    let run = run_tracer(
        dir.path(),
        &["--follow", "-e", "mutex", "--", &workload, SLEEP, "0.1"],
    );
    assert!(run.status.success(), "{run:?}");
    assert!(left(&run.stderr).is_empty(), "{}", run.stderr);
    assert!(!run.stderr.contains("hint: "), "{}", run.stderr);
}
