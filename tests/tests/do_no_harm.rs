//! Tracing must not change what a program does: the same output and exit status with
//! and without the tracer, and cancellation, pthread_exit from deep in a call chain, and a
//! longjmp out of a signal handler all work with probes (and uretprobes) in place.

use std::process::Command;

use thrtrace_tests::{TempDir, bpf_available, read_trace, run_tracer, workload, workload_arg};

/// Output with every number masked: addresses and times differ from run to run anyway.
fn shape(output: &str) -> String {
    output
        .split(|c: char| c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("#")
}

fn untraced(name: &str, args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(workload(name)).args(args).output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

fn traced(name: &str, args: &[&str]) -> (Option<i32>, String, usize) {
    let dir = TempDir::new("harm");
    let mut argv = vec!["--".to_string(), workload_arg(name)];
    argv.extend(args.iter().map(std::string::ToString::to_string));
    let run = run_tracer(dir.path(), &argv);
    let records = read_trace(dir.path()).values().map(Vec::len).sum();
    (run.status.code(), run.stdout, records)
}

#[test]
fn cancellation_deep_pthread_exit_and_longjmp_out_of_a_handler_work_traced() {
    if !bpf_available("do_no_harm") {
        return;
    }
    for (scenario, expected) in [
        ("cancel", "cancelled=1 cleanups=1\n"),
        ("exit", "exit=42 cleanups=1\n"),
        ("longjmp", "escaped=3\n"),
    ] {
        assert_eq!(
            untraced("do_no_harm", &[scenario]),
            (Some(0), expected.to_string())
        );
        let (status, stdout, records) = traced("do_no_harm", &[scenario]);
        assert_eq!(
            (status, stdout.as_str()),
            (Some(0), expected),
            "{scenario} under tracing"
        );
        assert!(records > 0, "{scenario}: nothing traced");
    }
}

#[test]
fn every_workload_behaves_the_same_traced() {
    if !bpf_available("same_behaviour") {
        return;
    }
    let workloads: [(&str, &[&str]); 9] = [
        ("mutex_contend", &["4", "2000"]),
        ("cond_prodcons", &["2", "500"]),
        ("sem_sequence", &[]),
        ("rwlock_story", &[]),
        ("timed_waits", &[]),
        ("barrier_rounds", &["3", "2"]),
        ("spin_story", &[]),
        ("rmutex_depth", &[]),
        ("bench_mutex", &["2", "1000"]),
    ];
    for (name, args) in workloads {
        let (status, stdout) = untraced(name, args);
        let (traced_status, traced_stdout, records) = traced(name, args);
        assert_eq!(status, Some(0), "{name} untraced");
        assert_eq!(traced_status, status, "{name}: exit status");
        assert_eq!(shape(&traced_stdout), shape(&stdout), "{name}: output");
        assert!(records > 0, "{name}: nothing traced");
    }
}
