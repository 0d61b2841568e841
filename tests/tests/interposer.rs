//! A process that preloads its own pthread functions: the probes stay on the C
//! library's definitions, so a forwarding interposer changes nothing in what is recorded: the
//! program's calls once each (through the interposer), and the C library's own calls, which
//! never go through it. `-v` names the interposer.

use std::process::Command;
use tracer_common::Which;

use thrtrace_tests::{
    Run, TempDir, TraceRecord, bpf_available, codes, field, read_trace, tracer, workload,
    workload_arg,
};

const THREADS: u32 = 2;
const ITERS: u32 = 1000;

/// mutex_contend traced with -v, with `preload` in its environment (and the tracer's).
fn trace(preload: Option<&str>) -> (Run, Vec<TraceRecord>) {
    let dir = TempDir::new("interposer");
    let mut command = Command::new(tracer());
    command
        .args(["-v", "-e", "mutex:rmutex", "-d", "."])
        .arg("--")
        .arg(workload_arg("mutex_contend"))
        .args([THREADS.to_string(), ITERS.to_string()])
        .current_dir(dir.path());
    if let Some(preload) = preload {
        command.env("LD_PRELOAD", preload);
    }
    let run: Run = command.output().unwrap().into();
    assert!(run.status.success(), "{run:?}");
    let records = read_trace(dir.path()).into_values().flatten().collect();
    (run, records)
}

fn count(records: &[TraceRecord], name: &str, which: Which, object: Option<i64>) -> usize {
    let (event1, event2) = codes(name);
    records
        .iter()
        .filter(|r| (r.event1, r.event2, r.which) == (event1, event2, which))
        .filter(|r| object.is_none_or(|o| r.a[0] == o))
        .count()
}

#[test]
fn a_forwarding_interposer_changes_nothing_in_what_is_recorded() {
    if !bpf_available("interposer") {
        return;
    }
    let interposer = workload("libinterpose.so");
    let (plain, plain_records) = trace(None);
    let (preloaded, records) = trace(interposer.to_str());
    let mutex: i64 = field(&preloaded.stdout, "mutex");
    let pairs = (THREADS * ITERS) as usize;
    // The program's calls, once each: not twice (interposer and C library), not missing.
    assert_eq!(
        count(&records, "mutex_lock", Which::Entry, Some(mutex)),
        pairs
    );
    assert_eq!(count(&records, "mutex_lock", Which::Return, None), pairs);
    assert_eq!(
        count(&records, "mutex_unlock", Which::Whole, Some(mutex)),
        pairs
    );
    let plain_mutex: i64 = field(&plain.stdout, "mutex");
    assert_eq!(
        count(
            &plain_records,
            "mutex_lock",
            Which::Entry,
            Some(plain_mutex)
        ),
        pairs
    );
    // The C library's own locking (the loader's recursive lock, at each thread's creation),
    // which never goes through the interposer, is recorded as without it (and more: the
    // interposer's dlsym takes it too).
    let internal = count(&plain_records, "rmutex_lock", Which::Entry, None);
    assert!(
        internal > 0,
        "glibc locks its loader lock at thread creation"
    );
    assert!(count(&records, "rmutex_lock", Which::Entry, None) >= internal);
    // -v says where the probes are and why.
    let name = interposer.to_str().unwrap();
    assert!(
        preloaded.stderr.contains(&format!(
            "{name} defines pthread functions of its own (an interposer): the probes are on "
        )),
        "{}",
        preloaded.stderr
    );
    assert!(!plain.stderr.contains("interposer"), "{}", plain.stderr);
}
