//! With `-v`, the tracer says how often and how long each BPF program ran, when the kernel
//! counts it (`kernel.bpf_stats_enabled`): how `cargo xtask bench` measures the programs.

use thrtrace_tests::{bpf_available, trace_workload};
use tracer_common::Which;

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// The kernel's BPF statistics on while this lives, then as they were.
struct BpfStats(String);

impl BpfStats {
    fn enable() -> Self {
        let before = std::fs::read_to_string(BPF_STATS).unwrap();
        std::fs::write(BPF_STATS, "1").unwrap();
        BpfStats(before)
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(BPF_STATS, self.0.trim());
    }
}

/// Runs and nanoseconds per run of `program`, from the tracer's `-v` line.
fn run_time(stderr: &str, program: &str) -> (u64, u64) {
    let prefix = format!("thrtrace-bpf: BPF program {program}: ");
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no run times of {program} in {stderr}"));
    let (runs, rest) = line.split_once(" runs, ").unwrap();
    let ns = rest.split_once(" ns each").unwrap().0;
    (runs.parse().unwrap(), ns.parse().unwrap())
}

#[test]
fn each_program_runs_once_per_call_and_its_time_is_said() {
    if !bpf_available("program_run_times") {
        return;
    }
    let _stats = BpfStats::enable();
    // Every call of pthread_mutex_lock and _unlock is recorded, glibc's own included (an
    // rmutex's). Probed at entry and return: one entry and one return a call, and records of
    // which 0 or 1 count calls.
    let (run, records) = trace_workload(
        &["-v", "--no-fast-paths", "--events", "mutex:rmutex"],
        "bench_mutex",
        &["1", "1000"],
    );
    let calls = records.iter().filter(|r| r.which != Which::Return).count() as u64;
    assert!(calls >= 2000, "{calls}");
    let (entries, entry_ns) = run_time(&run.stderr, "thr_entry");
    let (returns, return_ns) = run_time(&run.stderr, "thr_return");
    assert_eq!((entries, returns), (calls, calls), "{}", run.stderr);
    assert!(entry_ns > 0 && return_ns > 0, "{}", run.stderr);
    // With no fast path planned, the fast-path program is not even loaded.
    assert!(
        !run.stderr.contains("BPF program thr_fast"),
        "{}",
        run.stderr
    );

    // Where the fast path completes the lock and the unlock (one thread: it never waits, nor
    // wakes): one run of the fast-path program a call of the normal mutex, and none of the
    // entry and return programs. A recursive mutex's call passes one more probe at most (the
    // check of its count) before the one that completes it. The process has one thread all
    // along (its unlocks complete on the check of `__libc_single_threaded`): one that makes
    // its second while traced also passes that check, a run that records nothing, on each
    // unlock until the session has moved it to the probes of the threaded ways.
    let (run, records) = trace_workload(
        &["-v", "--events", "mutex:rmutex"],
        "bench_mutex",
        &["0", "1000"],
    );
    let calls = records.iter().filter(|r| r.which != Which::Return).count() as u64;
    let recursive = records
        .iter()
        .filter(|r| r.which != Which::Return && r.event1 != 2)
        .count() as u64;
    assert!(calls >= 2000, "{calls}");
    let (fast, fast_ns) = run_time(&run.stderr, "thr_fast");
    assert!(
        (calls..=calls + recursive).contains(&fast),
        "{fast} runs for {calls} calls: {}",
        run.stderr
    );
    assert!(fast_ns > 0, "{}", run.stderr);
    let (entries, returns) = (
        run_time(&run.stderr, "thr_entry").0,
        run_time(&run.stderr, "thr_return").0,
    );
    assert_eq!((entries, returns), (0, 0), "{}", run.stderr);
}
