//! Records lost because the tracer fell behind are counted exactly and reported while tracing,
//! when and on which CPUs.

use std::time::{Duration, Instant};

use thrtrace_tests::{
    Gated, TempDir, bpf_available, lines_as_they_come, read_trace, signal, start_tracer,
    summary_count,
};

const THREADS: u32 = 2;
const PAIRS: u32 = 50_000;

#[test]
fn a_stalled_tracer_counts_every_record_it_lost_and_says_so_while_running() {
    if !bpf_available("stalled_tracer") {
        return;
    }
    for run in 0..5 {
        let dir = TempDir::new("stalled");
        let mut gate = Gated::start_with_threads(0, PAIRS, THREADS);
        // 4 KiB rings hold about 20 records each.
        let (mut tracer, stderr) = start_tracer(
            dir.path(),
            &[gate.pid],
            &["--events", "mutex", "--buffer-kib", "4"],
        );
        let stopped = Instant::now();
        signal(tracer.id(), "-STOP");
        gate.run_phase_two();
        std::thread::sleep(Duration::from_secs(2).saturating_sub(stopped.elapsed()));
        signal(tracer.id(), "-CONT");
        // The workload is still running, at its final gate, when the loss is reported.
        let lines = lines_as_they_come(stderr);
        let report = lines
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("run {run}: no loss report: {e}"));
        assert!(
            report.starts_with("thrtrace-bpf: lost ")
                && report.contains(" records ")
                && report.contains("cpu ")
                && report.contains("--buffer-kib"),
            "run {run}: {report}"
        );
        gate.finish();
        assert!(tracer.wait().unwrap().success());
        let rest: String = lines.iter().map(|l| l + "\n").collect();
        let (written, lost) = (
            summary_count(&rest, "records"),
            summary_count(&rest, "lost"),
        );
        let generated = u64::from(THREADS * PAIRS * 3);
        assert!(lost > 0, "run {run}: {rest}");
        // Every record the threads made is written or counted lost; none of glibc's own calls
        // on its recursive locks (pthread_create's, through the probed pthread_mutex_lock: rmutex
        // calls, not selected by --events mutex) is, whether the rings had room or not.
        assert_eq!(written + lost, generated, "run {run}: {rest}");
        let in_files: usize = read_trace(dir.path()).values().map(Vec::len).sum();
        assert_eq!(in_files as u64, written, "run {run}");
    }
}

/// Whether a thread of process `pid` is stopped (`T`, or `t` under ptrace).
fn has_stopped_thread(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .any(|stat| {
            let after_name = &stat[stat.rfind(')').unwrap() + 2..];
            after_name.starts_with(['T', 't'])
        })
}

/// Kills process `pid` unless `cancel` is told within `limit`: a target left stopped fails the
/// test instead of hanging it.
fn watchdog(pid: u32, limit: Duration) -> std::sync::mpsc::Sender<()> {
    let (cancel, cancelled) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if cancelled.recv_timeout(limit).is_err() {
            signal(pid, "-KILL");
        }
    });
    cancel
}

/// `--lossless` with `extra` options: the same stalled tracer loses nothing, 5 runs out of 5,
/// because the target waits stopped while the tracer cannot drain; the workload ends as
/// untraced.
fn a_stalled_lossless_tracer_loses_nothing(test: &str, extra: &[&str]) {
    if !bpf_available(test) {
        return;
    }
    for run in 0..5 {
        let dir = TempDir::new(test);
        // Threads made before the trace: under `--follow` a thread made while the tracer is
        // stopped waits in a ptrace stop, which would pass for the stop looked for here.
        let mut gate = Gated::start_with_waiting_threads(0, PAIRS, THREADS);
        let mut options = vec!["--events", "mutex", "--buffer-kib", "4", "--lossless"];
        options.extend_from_slice(extra);
        let (mut tracer, stderr) = start_tracer(dir.path(), &[gate.pid], &options);
        let target_watchdog = watchdog(gate.pid, Duration::from_mins(1));
        signal(tracer.id(), "-STOP");
        gate.open();
        std::thread::sleep(Duration::from_secs(2));
        let stopped = has_stopped_thread(gate.pid);
        signal(tracer.id(), "-CONT");
        assert!(stopped, "run {run}: the target was not stopped");
        gate.wait_until_done();
        gate.finish();
        let _ = target_watchdog.send(());
        assert!(tracer.wait().unwrap().success());
        let rest: String = lines_as_they_come(stderr)
            .iter()
            .map(|l| l + "\n")
            .collect();
        assert_eq!(summary_count(&rest, "lost"), 0, "run {run}: {rest}");
        let generated = u64::from(THREADS * PAIRS * 3);
        assert_eq!(
            summary_count(&rest, "records"),
            generated,
            "run {run}: {rest}"
        );
        assert!(rest.contains("--lossless stopped traced threads"), "{rest}");
        let in_files: usize = read_trace(dir.path()).values().map(Vec::len).sum();
        assert_eq!(in_files as u64, generated, "run {run}");
    }
}

#[test]
fn lossless_stops_the_target_instead_of_losing_records() {
    a_stalled_lossless_tracer_loses_nothing("lossless", &[]);
}

#[test]
fn lossless_stops_pass_through_the_ptrace_of_follow() {
    a_stalled_lossless_tracer_loses_nothing("lossless_follow", &["--follow"]);
}
