//! glibc before 2.34, where the pthread functions are in libpthread.so.0 and libc.so.6 has
//! forwarders to some of them, which programs never call, plus a few of its own.
//! Workloads are built against Debian 11's glibc 2.31 (see build.rs); thread.rs checks the
//! thread calls, split between the two files. x86-64 only, where 2.31 is fetched
//! (tests/c_libraries.rs).
#![cfg(target_arch = "x86_64")]

use std::process::Command;
use tracer_common::Which;

use thrtrace_tests::{
    Gated, TempDir, by_thread, old_glibc_available, paired_calls, read_trace, start_tracer,
    trace_workload,
};

const LIBPTHREAD: &str = "libpthread-2.31.so";

#[test]
fn a_command_is_traced_through_libpthread_so_0() {
    if !old_glibc_available("old_glibc_command", "mutex_contend_glibc231") {
        return;
    }
    let (run, lines) = trace_workload(
        &["--events", "mutex"],
        "mutex_contend_glibc231",
        &["3", "700"],
    );
    assert!(
        run.stderr.contains("probes in /") && run.stderr.contains(LIBPTHREAD),
        "{}",
        run.stderr
    );
    let mutex = thrtrace_tests::field(&run.stdout, "mutex");
    let by_thread = by_thread(lines);
    assert_eq!(by_thread.len(), 3, "one file per worker thread");
    for thread in by_thread.values() {
        assert_eq!(paired_calls(thread, "mutex_lock", mutex).len(), 700);
        let unlocks = thread
            .iter()
            .filter(|l| l.is("mutex_unlock", Which::Whole))
            .count();
        assert_eq!(unlocks, 700);
    }
}

#[test]
fn a_running_process_is_traced_in_libpthread_not_in_libc_forwarders() {
    if !old_glibc_available("old_glibc_pid", "mutex_gate_glibc231") {
        return;
    }
    let dir = TempDir::new("old-glibc-pid");
    let mut gate = Gated::spawn(
        Command::new(thrtrace_tests::workload("mutex_gate_glibc231")).args(["50", "400", "2"]),
    );
    let (mut tracer, mut stderr) = start_tracer(dir.path(), &[gate.pid], &["--events", "mutex"]);
    gate.run_phase_two();
    let (pid, mutex) = (gate.pid, gate.mutex);
    gate.finish();
    assert!(tracer.wait().unwrap().success());
    let rest = std::io::read_to_string(&mut stderr).unwrap();
    assert!(rest.contains(" 0 lost"), "{rest}");

    let files = read_trace(dir.path());
    assert_eq!(files.len(), 2, "the two threads made after attach");
    for lines in files.values() {
        assert!(lines.iter().all(|l| l.pid == pid));
        assert_eq!(paired_calls(lines, "mutex_lock", mutex).len(), 400);
    }
}
