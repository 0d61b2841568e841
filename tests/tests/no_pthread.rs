//! A process with no pthread functions at all (no C library: tests/workloads/no_pthread.c) is
//! told about in one line and is not an error; other targets are traced as usual.

use std::{
    io::{BufReader, Write},
    process::{Command, Stdio},
};

use thrtrace_tests::{
    Gated, TempDir, bpf_available, paired_calls, read_line, read_trace, run_tracer, tracer,
    workload, workload_arg,
};

const MESSAGE: &str = "(no_pthread) has no pthread functions in any file it maps: nothing to trace";

#[test]
fn a_launched_command_without_pthread_functions_runs_untraced_with_its_own_status() {
    if !bpf_available("no_pthread_command") {
        return;
    }
    let dir = TempDir::new("no-pthread-command");
    let run = run_tracer(dir.path(), &["--", &workload_arg("no_pthread")]);
    assert_eq!(
        run.status.code(),
        Some(7),
        "the command's own status: {run:?}"
    );
    assert_eq!(run.stdout, "ready\n");
    assert!(run.stderr.contains(MESSAGE), "{}", run.stderr);
    assert!(run.stderr.contains(" 0 records written"), "{}", run.stderr);
    assert!(dir.entries().is_empty(), "no files: {:?}", dir.entries());
}

#[test]
fn a_pid_without_pthread_functions_is_skipped_and_the_others_are_traced() {
    if !bpf_available("no_pthread_pid") {
        return;
    }
    let dir = TempDir::new("no-pthread-pid");
    let mut bare = Command::new(workload("no_pthread"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(
        read_line(&mut BufReader::new(bare.stdout.take().unwrap())),
        "ready\n"
    );
    let mut gate = Gated::start(10, 300);

    // Alone, it ends the tracer at once, successfully.
    let alone = run_tracer(dir.path(), &["-p", &bare.id().to_string()]);
    assert_eq!(alone.status.code(), Some(0), "{alone:?}");
    assert!(alone.stderr.contains(MESSAGE), "{}", alone.stderr);

    // With a process that has them, that one is traced.
    let mut tracer = Command::new(tracer())
        .arg("--dir")
        .arg(dir.path())
        .args(["--events", "mutex", "-p", &bare.id().to_string()])
        .args(["-p", &gate.pid.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(tracer.stderr.take().unwrap());
    assert!(read_line(&mut stderr).contains(MESSAGE));
    assert!(read_line(&mut stderr).contains(&format!("tracing pid {}", gate.pid)));
    gate.run_phase_two();
    let (pid, mutex) = (gate.pid, gate.mutex);
    gate.finish();
    bare.stdin.take().unwrap().write_all(b"end\n").unwrap();
    assert_eq!(bare.wait().unwrap().code(), Some(7));
    assert!(tracer.wait().unwrap().success());

    let files = read_trace(dir.path());
    assert_eq!(files.len(), 1);
    let lines = files.values().next().unwrap();
    assert!(lines.iter().all(|l| l.pid == pid));
    assert_eq!(paired_calls(lines, "mutex_lock", mutex).len(), 300);
}
