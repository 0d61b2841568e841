//! Attaching to processes that are already running (issue 2, tests 4, 5 and 7).

use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio},
    time::{Duration, Instant},
};

use thrtrace_tests::{
    Line, PLACEMENTS, TempDir, bpf_available, field, paired_calls, read_trace, trace_file_name,
    tracer, workload,
};

/// A running `mutex_gate` workload, stopped at its gate.
struct Gated {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pid: u32,
    mutex: i64,
}

impl Gated {
    fn start(before: u32, after: u32) -> Gated {
        Gated::start_with_threads(before, after, 0)
    }

    /// The second phase runs in `threads` threads created then (0: the main thread).
    fn start_with_threads(before: u32, after: u32, threads: u32) -> Gated {
        let mut child = Command::new(workload("mutex_gate"))
            .args([before.to_string(), after.to_string(), threads.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let ready = read_line(&mut stdout);
        let pid = field(&ready, "pid");
        let mutex = field(&ready, "mutex");
        assert_eq!(pid, child.id());
        Gated {
            child,
            stdin,
            stdout,
            pid,
            mutex,
        }
    }

    /// Opens the gate and waits until the second phase is done.
    fn run_phase_two(&mut self) {
        writeln!(self.stdin.as_mut().unwrap(), "go").unwrap();
        assert_eq!(read_line(&mut self.stdout).trim(), "done");
    }

    /// Lets the process exit.
    fn finish(mut self) {
        drop(self.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

fn read_line(reader: &mut impl BufRead) -> String {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    line
}

/// Starts the tracer on `pids` and waits until it says it traces each of them.
fn start_tracer(dir: &Path, pids: &[u32], extra: &[&str]) -> (Child, BufReader<ChildStderr>) {
    let mut command = Command::new(tracer());
    command.arg("--dir").arg(dir).stderr(Stdio::piped());
    // An `extra` of the form VARIABLE=value goes to the environment, anything else is an option.
    for arg in extra.iter().filter(|a| !a.is_empty()) {
        match arg.split_once('=') {
            Some((variable, value)) => command.env(variable, value),
            None => command.arg(arg),
        };
    }
    for pid in pids {
        command.args(["-p", &pid.to_string()]);
    }
    let mut tracer = command.spawn().unwrap();
    let mut stderr = BufReader::new(tracer.stderr.take().unwrap());
    for pid in pids {
        let line = read_line(&mut stderr);
        assert!(
            line.starts_with(&format!("thrtrace-bpf: tracing pid {pid}:")),
            "{line:?}"
        );
    }
    (tracer, stderr)
}

/// (completed lock calls, unlock calls) on `mutex`.
fn mutex_calls(lines: &[Line], mutex: i64) -> (usize, usize) {
    let locks = paired_calls(lines, "mutex_lock", mutex).len();
    let unlocks = lines
        .iter()
        .filter(|l| l.is("mutex_unlock", 0) && l.a[0] == mutex)
        .count();
    (locks, unlocks)
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
        let name = trace_file_name(traced_pid, traced_pid);
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
        let file = dir.path().join(trace_file_name(target.pid, target.pid));
        let mutex = target.mutex;
        let complete = |lines: &[Line]| mutex_calls(lines, mutex) == (10, 10);
        let read = || {
            std::fs::read_to_string(&file).map(|t| t.lines().map(Line::parse).collect::<Vec<_>>())
        };
        if unbuffered {
            // The target is alive at its second gate; its records must show up meanwhile.
            let give_up = Instant::now() + Duration::from_secs(10);
            while !read().is_ok_and(|lines| complete(&lines)) {
                assert!(
                    Instant::now() < give_up,
                    "records never reached {}",
                    file.display()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
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
    let first_file = dir.path().join(trace_file_name(first_pid, first_pid));
    let complete = || {
        std::fs::read_to_string(&first_file).is_ok_and(|t| {
            let lines: Vec<Line> = t.lines().map(Line::parse).collect();
            mutex_calls(&lines, first_mutex) == (300, 300)
        })
    };
    let give_up = Instant::now() + Duration::from_secs(10);
    while !complete() {
        assert!(
            Instant::now() < give_up,
            "{} never completed",
            first_file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
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
        .get(&trace_file_name(second_pid, second_pid))
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
        let lines: Vec<Line> = files[&trace_file_name(pid, lwpid)]
            .iter()
            .filter(|l| l.lwpid == lwpid)
            .cloned()
            .collect();
        assert_eq!(mutex_calls(&lines, mutex), (200, 200), "thread {lwpid}");
    }
}
