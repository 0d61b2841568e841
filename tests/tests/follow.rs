//! `--follow`: the children a target forks, and what they exec, are traced from their first
//! call, with their own pids; nothing else is (issue 5).

use std::collections::BTreeMap;

use thrtrace_tests::{Line, bpf_available, field, paired_calls, trace_workload, workload_arg};

#[test]
fn forked_and_execed_children_are_traced_with_their_own_pids() {
    if !bpf_available("follow") {
        return;
    }
    let (run, lines) = trace_workload(
        &["--follow", "--events", "mutex:sema"],
        "fork_exec",
        &[&workload_arg("mutex_contend")],
    );
    assert!(run.stderr.contains("and its children"), "{}", run.stderr);
    // mutex_contend (exec'd) prints its own line first; fork_exec's comes last.
    let summary = run.stdout.lines().last().unwrap();
    let (mutex, child, execer): (i64, u32, u32) = (
        field(summary, "mutex"),
        field(summary, "child"),
        field(summary, "execer"),
    );
    let execed_mutex: i64 = field(run.stdout.lines().next().unwrap(), "mutex");
    let parent = lines
        .iter()
        .find(|l| l.pid != child && l.pid != execer)
        .map(|l| l.pid)
        .unwrap();

    let mut by_thread: BTreeMap<u32, Vec<Line>> = BTreeMap::new();
    for line in &lines {
        assert!(
            [parent, child, execer].contains(&line.pid),
            "an unrelated process: {line:?}"
        );
        by_thread.entry(line.lwpid).or_default().push(line.clone());
    }
    let calls = |pid: u32, object: i64| -> usize {
        by_thread
            .values()
            .filter(|l| l[0].pid == pid)
            .map(|l| paired_calls(l, "mutex_lock", object).len())
            .sum()
    };
    assert_eq!(calls(parent, mutex), 100, "the target");
    assert_eq!(
        calls(child, mutex),
        300,
        "the forked child, from its first call"
    );
    assert_eq!(calls(execer, execed_mutex), 250, "the child after exec");
    // The forked child shares its parent's address space layout, and so the way to errno.
    let trywait: Vec<[i64; 5]> = lines
        .iter()
        .filter(|l| l.pid == child && l.is("sema_trywait", 0))
        .map(|l| l.a)
        .collect();
    assert_eq!(trywait.len(), 1);
    assert_eq!(trywait[0][1..3], [-1, 11], "rval -1, errno EAGAIN");
}

#[test]
fn follow_needs_a_target() {
    let cwd = thrtrace_tests::TempDir::new("follow-usage");
    let run = thrtrace_tests::run_tracer(cwd.path(), &["--follow"]);
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(
        run.stderr.contains("--follow needs -p PID or -- COMMAND"),
        "{}",
        run.stderr
    );
}
