//! Attaching to processes that are already running.

use std::{
    collections::BTreeMap,
    io::{BufReader, Write},
    process::{Command, Stdio},
    time::Duration,
};

use thrtrace_tests::{
    Gated, PLACEMENTS, TempDir, TraceRecord, bpf_available, field, file_name, lines_as_they_come,
    paired_calls, read_line, read_trace, run_tracer, start_tracer, wait_until, whole_lines_of,
    workload,
};
use tracer_common::{OWN_TARGET_SLOTS, Which};

/// (completed lock calls, unlock calls) on `mutex`.
fn mutex_calls(lines: &[TraceRecord], mutex: i64) -> (usize, usize) {
    let locks = paired_calls(lines, "mutex_lock", mutex).len();
    let unlocks = lines
        .iter()
        .filter(|l| l.is("mutex_unlock", Which::Whole) && l.a[0] == mutex)
        .count();
    (locks, unlocks)
}

/// Thread `lwpid`'s records, from the file its pid and lwpid name (which it may share).
fn thread_lines(
    files: &BTreeMap<String, Vec<TraceRecord>>,
    pid: u32,
    lwpid: u32,
) -> Vec<TraceRecord> {
    files[&file_name(pid, lwpid)]
        .iter()
        .filter(|l| l.lwpid == lwpid)
        .copied()
        .collect()
}

#[test]
fn a_running_process_is_traced_from_attach_on_and_no_other_process_is() {
    if !bpf_available("attach_running") {
        return;
    }
    for placement in PLACEMENTS {
        let dir = TempDir::new("attach");
        let mut traced = Gated::start(100, 1000);
        let mut other = Gated::start(100, 1000);
        let options = [&["--events", "mutex"], placement].concat();
        let (mut tracer, mut stderr) = start_tracer(dir.path(), &[traced.pid], &options);
        traced.run_phase_two();
        other.run_phase_two();
        let (traced_pid, other_pid, mutex) = (traced.pid, other.pid, traced.mutex);
        traced.finish();
        other.finish();
        // The tracer ends by itself once its only target has exited.
        assert!(tracer.wait().unwrap().success());
        let summary = read_line(&mut stderr);
        assert!(summary.contains(" 0 lost"), "{summary:?}");

        let files = read_trace(dir.path());
        let name = file_name(traced_pid, traced_pid);
        assert_eq!(files.keys().collect::<Vec<_>>(), [&name]);
        assert!(
            files[&name]
                .iter()
                .all(|l| l.pid == traced_pid && l.pid != other_pid)
        );
        // Exactly the 1000 pairs after attach; none of the 100 before.
        assert_eq!(
            mutex_calls(&files[&name], mutex),
            (1000, 1000),
            "{placement:?}"
        );
    }
}

#[test]
fn unbuffered_records_reach_the_file_while_the_target_runs() {
    if !bpf_available("unbuffered") {
        return;
    }
    // THR_TRACE_BUF is set in the environment of one tracer only: see start_tracer.
    for (unbuffered, extra) in [
        (true, "--unbuffered"),
        (true, "THR_TRACE_BUF=1"),
        (false, ""),
    ] {
        let dir = TempDir::new("unbuffered");
        let mut target = Gated::start(0, 10);
        let (mut tracer, _stderr) = start_tracer(dir.path(), &[target.pid], &[extra]);
        target.run_phase_two();
        let file = dir.path().join(file_name(target.pid, target.pid));
        let mutex = target.mutex;
        let complete = |lines: &[TraceRecord]| mutex_calls(lines, mutex) == (10, 10);
        let read = || whole_lines_of(&file).ok_or(());
        if unbuffered {
            // The target is alive at its second gate; its records must show up meanwhile.
            assert!(
                wait_until(Duration::from_secs(10), Duration::from_millis(10), || {
                    read().is_ok_and(|lines| complete(&lines))
                }),
                "records never reached {}",
                file.display()
            );
        } else {
            // Buffered: 30 short records stay in the tracer's buffer until the target exits.
            std::thread::sleep(Duration::from_millis(500));
            assert!(read().is_ok_and(|lines| lines.is_empty()) || read().is_err());
        }
        target.finish();
        assert!(tracer.wait().unwrap().success());
        assert!(complete(&read().unwrap()), "{extra:?}");
    }
}

/// More `-p` targets than the entry program finds without a map lookup
/// (`OWN_TARGET_SLOTS`): every one is traced exactly, through the lookup for the rest, and a
/// process that maps the same library but was not named records nothing.
#[test]
fn more_targets_than_the_programs_list_are_each_traced_and_no_other_process_is() {
    if !bpf_available("more_targets") {
        return;
    }
    let dir = TempDir::new("more_targets");
    let count = OWN_TARGET_SLOTS + 2;
    // Each with its own number of pairs, so that a record in the wrong file is seen.
    let mut targets: Vec<Gated> = (0..count).map(|i| Gated::start(0, 50 + i as u32)).collect();
    let mut bystander = Gated::start(0, 40);
    let pids: Vec<u32> = targets.iter().map(|t| t.pid).collect();
    let (mut tracer, _stderr) = start_tracer(dir.path(), &pids, &[]);
    let expected: Vec<(u32, i64, usize)> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| (t.pid, t.mutex, 50 + i))
        .collect();
    bystander.run_phase_two();
    let bystander_pid = bystander.pid;
    bystander.finish();
    for target in &mut targets {
        target.run_phase_two();
    }
    for target in targets {
        target.finish();
    }
    assert!(tracer.wait().unwrap().success());
    let files = read_trace(dir.path());
    for (pid, mutex, pairs) in expected {
        let lines = files
            .get(&file_name(pid, pid))
            .unwrap_or_else(|| panic!("no file for pid {pid}: {:?}", files.keys()));
        assert_eq!(mutex_calls(lines, mutex), (pairs, pairs), "pid {pid}");
    }
    assert!(
        !files.contains_key(&file_name(bystander_pid, bystander_pid)),
        "the process not named has a file: {:?}",
        files.keys()
    );
    assert_eq!(files.len(), count, "{:?}", files.keys());
}

#[test]
fn several_pids_are_traced_at_once() {
    if !bpf_available("several_pids") {
        return;
    }
    let dir = TempDir::new("pids");
    let mut first = Gated::start(5, 300);
    let mut second = Gated::start(5, 700);
    let (mut tracer, _stderr) = start_tracer(dir.path(), &[first.pid, second.pid], &[]);
    let (first_pid, first_mutex) = (first.pid, first.mutex);
    first.run_phase_two();
    first.finish();
    // The first target has exited: its file is completed while the other is still traced.
    let first_file = dir.path().join(file_name(first_pid, first_pid));
    let complete = || {
        whole_lines_of(&first_file)
            .is_some_and(|lines| mutex_calls(&lines, first_mutex) == (300, 300))
    };
    assert!(
        wait_until(Duration::from_secs(10), Duration::from_millis(20), complete),
        "{} never completed",
        first_file.display()
    );
    assert!(
        tracer.try_wait().unwrap().is_none(),
        "the tracer stopped with a target left"
    );
    second.run_phase_two();
    let (second_pid, second_mutex) = (second.pid, second.mutex);
    second.finish();
    assert!(tracer.wait().unwrap().success());
    let files = read_trace(dir.path());
    let lines = files
        .get(&file_name(second_pid, second_pid))
        .expect("file per process");
    assert_eq!(mutex_calls(lines, second_mutex), (700, 700));
}

#[test]
fn threads_created_after_attach_are_traced() {
    if !bpf_available("threads_after_attach") {
        return;
    }
    let dir = TempDir::new("new-threads");
    let mut target = Gated::start_with_threads(0, 200, 3);
    let (mut tracer, _stderr) = start_tracer(dir.path(), &[target.pid], &["--events", "mutex"]);
    target.run_phase_two();
    let (pid, mutex) = (target.pid, target.mutex);
    target.finish();
    assert!(tracer.wait().unwrap().success());
    let files = read_trace(dir.path());
    let mut threads: Vec<u32> = files
        .values()
        .flatten()
        .map(|l| l.lwpid)
        .filter(|&t| t != pid)
        .collect();
    threads.sort_unstable();
    threads.dedup();
    assert_eq!(
        threads.len(),
        3,
        "three threads created after attach: {threads:?}"
    );
    for lwpid in threads {
        let lines = thread_lines(&files, pid, lwpid);
        assert_eq!(mutex_calls(&lines, mutex), (200, 200), "thread {lwpid}");
    }
}

/// What a trace of `leader_exits 2 200` left: its pid, mutex and worker threads, the files,
/// and the tracer's stderr.
struct LeaderExits {
    pid: u32,
    mutex: i64,
    workers: Vec<u32>,
    files: BTreeMap<String, Vec<TraceRecord>>,
    stderr: Vec<String>,
}

/// Traces `leader_exits 2 200`, whose main thread exits before its two workers make their
/// calls. `attach_late`: the tracer starts only once the main thread has gone, and an untraced
/// process makes the same calls meanwhile; else it starts before, and once it has moved the
/// target to shared links another tracer attaches to and detaches from the same functions
/// (which removed the target's breakpoints while its own links served it).
fn trace_leader_exits(attach_late: bool) -> LeaderExits {
    let dir = TempDir::new("leader-exits");
    let mut target = Command::new(workload("leader_exits"))
        .args(["2", "200"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = target.stdin.take().unwrap();
    let mut stdout = BufReader::new(target.stdout.take().unwrap());
    let ready = read_line(&mut stdout);
    let (pid, mutex): (u32, i64) = (field(&ready, "pid"), field(&ready, "mutex"));
    let start = || start_tracer(dir.path(), &[pid], &["--events", "thread:mutex"]);
    let traced = (!attach_late).then(start);
    writeln!(stdin, "go").unwrap();
    assert_eq!(read_line(&mut stdout), "main exited\n");
    let (mut tracer, stderr) = traced.unwrap_or_else(start);
    let stderr = lines_as_they_come(stderr);
    if attach_late {
        // The tracer has said it shares the probes in its first line, which start_tracer read.
        let mut other = Gated::start(0, 300);
        other.run_phase_two();
        other.finish();
    } else {
        let moved = stderr
            .recv_timeout(Duration::from_secs(10))
            .expect("the tracer said nothing of the main thread's exit");
        assert!(moved.contains("its main thread has exited"), "{moved}");
        let scratch = TempDir::new("leader-exits-other-tracer");
        let own = std::process::id().to_string();
        let other = run_tracer(
            scratch.path(),
            &["-p", &own, "--events", "mutex", "--duration", "0.2"],
        );
        assert!(other.status.success(), "{other:?}");
    }
    writeln!(stdin, "on").unwrap();
    let workers = (0..2)
        .map(|_| field(&read_line(&mut stdout), "lwpid"))
        .collect();
    assert!(target.wait().unwrap().success());
    assert!(tracer.wait().unwrap().success(), "ends with its target");
    LeaderExits {
        pid,
        mutex,
        workers,
        files: read_trace(dir.path()),
        stderr: stderr.iter().collect(),
    }
}

/// Every record is the target's, and each worker's 200 pairs are there.
fn assert_workers_traced(run: &LeaderExits) {
    assert!(run.stderr.concat().contains(" 0 lost"), "{:?}", run.stderr);
    assert!(run.files.values().flatten().all(|l| l.pid == run.pid));
    for &lwpid in &run.workers {
        let lines = thread_lines(&run.files, run.pid, lwpid);
        assert_eq!(mutex_calls(&lines, run.mutex), (200, 200), "thread {lwpid}");
    }
}

#[test]
fn a_target_whose_main_thread_exits_is_traced_until_its_last_thread_is_gone() {
    if !bpf_available("main_thread_exits") {
        return;
    }
    let run = trace_leader_exits(false);
    assert_workers_traced(&run);
    let exit = run.files[&file_name(run.pid, run.pid)]
        .iter()
        .find(|l| l.lwpid == run.pid && l.is("thr_exit", Which::Whole))
        .expect("the main thread's pthread_exit");
    for &lwpid in &run.workers {
        let lines = thread_lines(&run.files, run.pid, lwpid);
        let calls = paired_calls(&lines, "mutex_lock", run.mutex);
        assert!(
            calls
                .iter()
                .all(|(entry, _)| entry.time_ns() > exit.time_ns())
        );
    }
}

#[test]
fn a_target_whose_main_thread_has_exited_is_traced_and_no_other_process_is() {
    if !bpf_available("main_thread_exited") {
        return;
    }
    assert_workers_traced(&trace_leader_exits(true));
}
