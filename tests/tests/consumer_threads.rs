//! `--consumer-threads N`: whatever the number of consumer threads, every record is
//! written once, to its thread's file and to the log, in time order; one thread writes as the
//! session did; N threads drain the rings, each its share.

use std::{
    io::Read,
    process::Command,
    time::{Duration, Instant},
};
use tracer_common::Which;

use thrtrace_tests::{
    Gated, TempDir, TraceRecord, assert_files_hold_the_summary, assert_realtime_and_ordered,
    bpf_available, contending_threads, file_name, log_and_dir, paired_calls, read_trace,
    run_workload, start_tracer, summary_count, thread_records, workload,
};
use tracer_model::{event::Event, log::LogReader};

const THREADS: usize = 8;
const PAIRS: usize = 5_000;

#[test]
fn every_consumer_thread_count_writes_each_threads_records_once_and_in_order() {
    if !bpf_available("every_consumer_thread_count") {
        return;
    }
    // 1: the session's thread alone; 2 and 5: one and four tr writer threads, 8 producers.
    // Rings that hold every record of the run (120,000 of 184 bytes, 22 MB, even all on one
    // CPU): on 2 CPUs, 8 busy producers can keep the consumer off the CPU long enough to fill
    // a 4 MiB ring (517 records lost once in a full test run), and losses are not what this
    // test is about; every record must still be written once.
    for consumers in ["1", "2", "5"] {
        let options = [
            "--events",
            "mutex",
            "--consumer-threads",
            consumers,
            "--buffer-kib",
            "32768",
        ];
        let (dir, run) = run_workload(
            &options,
            "mutex_contend",
            &[&THREADS.to_string(), &PAIRS.to_string()],
        );
        let files = read_trace(dir.path());
        let (mutex, threads) = contending_threads(&run, &files, THREADS);
        assert_files_hold_the_summary(&run.stderr, &files);
        for (name, lines) in &threads {
            assert_eq!(lines.len(), 3 * PAIRS, "{consumers}: {name}");
            assert_eq!(
                paired_calls(lines, "mutex_lock", mutex).len(),
                PAIRS,
                "{consumers}: {name}"
            );
            let unlocks = lines
                .iter()
                .filter(|l| l.is("mutex_unlock", Which::Whole))
                .count();
            assert_eq!(unlocks, PAIRS, "{consumers}: {name}");
        }
        assert_realtime_and_ordered(&files);
    }
}

#[test]
fn the_log_and_the_tr_files_hold_the_same_records_whatever_the_consumer_threads() {
    if !bpf_available("log_whatever_the_consumer_threads") {
        return;
    }
    // 1: both sinks in the session's thread; 4: the log and three tr writers in their own.
    for consumers in ["1", "4"] {
        let (dir, run) = log_and_dir(&["--consumer-threads", consumers], &["4", "2000"]);
        let reader = LogReader::open(&dir.path().join("app.ptl")).expect("a readable log");
        let events: Vec<Event> = reader.events().map(|e| e.expect("an event")).collect();
        let logged = thread_records(&events);
        let written = summary_count(&run.stderr, "records");
        assert_eq!(logged.len() as u64, written, "{consumers}: {run:?}");
        // Each file's records: the same in the log, in the same order.
        let files = read_trace(&dir.path().join("tr"));
        for (name, lines) in &files {
            let from_log: Vec<TraceRecord> = logged
                .iter()
                .filter(|r| file_name(r.pid, r.lwpid) == *name)
                .map(|r| TraceRecord { caller: 0, ..*r })
                .collect();
            assert_eq!(&from_log, lines, "{consumers}: {name}");
        }
        let in_files: usize = files.values().map(Vec::len).sum();
        assert_eq!(in_files as u64, written, "{consumers}");
        // 4 threads x 2000 pairs x 3 records, and the main thread's own.
        assert!(written >= 24_000, "{consumers}: {written}");
    }
}

#[test]
fn each_consumer_thread_drains_its_share_of_the_rings() {
    if !bpf_available("each_consumer_thread_drains_its_share") {
        return;
    }
    const PAIRS: u32 = 2_000;
    let cpus = std::thread::available_parallelism().unwrap().get();
    let consumers = cpus.min(64);
    // A target pinned to each CPU in turn writes to that CPU's ring only: ring `cpu` is drawn
    // by the session's thread (share 0) or by drawing thread `cpu % consumers`.
    for cpu in 0..cpus {
        let dir = TempDir::new("ring-shares");
        let mut pinned = Command::new("taskset");
        pinned
            .args(["-c", &cpu.to_string()])
            .arg(workload("mutex_gate"))
            .args(["0", &PAIRS.to_string(), "0"]);
        let mut target = Gated::spawn(&mut pinned);
        let threads = consumers.to_string();
        let options = ["--events", "mutex", "--consumer-threads", &threads];
        let (mut tracer, mut stderr) = start_tracer(dir.path(), &[target.pid], &options);
        // The drawing threads start with the session, just after the tracer says it traces.
        let tasks = format!("/proc/{}/task", tracer.id());
        let drawers = || {
            std::fs::read_dir(&tasks)
                .unwrap()
                .filter_map(|task| std::fs::read_to_string(task.unwrap().path().join("comm")).ok())
                .filter(|name| name.starts_with("ring-drawer-"))
                .count()
        };
        let give_up = Instant::now() + Duration::from_secs(10);
        while drawers() < consumers - 1 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(drawers(), consumers - 1, "cpu {cpu}");
        let (pid, mutex) = (target.pid, target.mutex);
        target.run_phase_two();
        target.finish();
        assert!(tracer.wait().unwrap().success());
        let mut said = String::new();
        stderr.read_to_string(&mut said).unwrap();
        assert_eq!(summary_count(&said, "lost"), 0, "cpu {cpu}: {said}");
        let files = read_trace(dir.path());
        let lines = &files[&file_name(pid, pid)];
        assert_eq!(lines.len(), 3 * PAIRS as usize, "cpu {cpu}: {said}");
        assert_eq!(
            paired_calls(lines, "mutex_lock", mutex).len(),
            PAIRS as usize,
            "cpu {cpu}"
        );
        assert_realtime_and_ordered(&files);
    }
}
