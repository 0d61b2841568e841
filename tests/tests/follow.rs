//! `--follow`: the children a target makes (fork, vfork, posix_spawn, clone), and what they
//! exec, are traced from their first call, with their own pids, whatever pthread library the new
//! image has; nothing else is.

use std::{
    io::{BufReader, Write},
    process::{Command, Stdio},
};
use tracer_common::Which;

use thrtrace_tests::{
    TempDir, TraceRecord, bpf_available, by_thread, field, paired_calls, read_line, read_trace,
    run_tracer, start_tracer, trace_workload, workload_arg,
};

/// The lock calls on `mutex` of each thread of `lines`.
fn per_thread_lock_calls(lines: impl IntoIterator<Item = TraceRecord>, mutex: i64) -> Vec<usize> {
    by_thread(lines)
        .values()
        .map(|l| paired_calls(l, "mutex_lock", mutex).len())
        .collect()
}

/// Lock calls on `mutex` made by the threads of process `pid`.
fn lock_calls(lines: &[TraceRecord], pid: u32, mutex: i64) -> usize {
    let of_pid = lines.iter().filter(|l| l.pid == pid).copied();
    per_thread_lock_calls(of_pid, mutex).into_iter().sum()
}

/// The lock calls on `mutex` of each thread that made some; every record must be process
/// `pid`'s (an exec keeps the pid).
fn lock_calls_by_thread(lines: Vec<TraceRecord>, pid: u32, mutex: i64) -> Vec<usize> {
    assert!(
        lines.iter().all(|l| l.pid == pid),
        "only process {pid}'s records"
    );
    let mut calls = per_thread_lock_calls(lines, mutex);
    calls.retain(|&calls| calls > 0);
    calls
}

/// The children fork_exec runs PROGRAM (a build of mutex_contend) in, from its output: the pid,
/// the pairs asked for, and the mutex the new image printed on its line for those pairs.
fn exec_children(stdout: &str) -> Vec<(u32, usize, i64)> {
    let summary = stdout.lines().last().unwrap();
    [("execer", 250), ("vforker", 150), ("spawned", 200)]
        .into_iter()
        .map(|(key, pairs)| {
            let image = stdout
                .lines()
                .find(|l| l.contains(&format!(" iters={pairs}")))
                .unwrap_or_else(|| panic!("no line of the {key} child in {stdout:?}"));
            (field(summary, key), pairs, field(image, "mutex"))
        })
        .collect()
}

#[test]
fn forked_vforked_spawned_cloned_and_execed_children_are_traced_with_their_own_pids() {
    if !bpf_available("follow") {
        return;
    }
    let (run, lines) = trace_workload(
        &["--follow", "--events", "mutex:sema"],
        "fork_exec",
        &[&workload_arg("mutex_contend")],
    );
    assert!(run.status.success(), "{run:?}");
    assert!(run.stderr.contains("and its children"), "{}", run.stderr);
    let summary = run.stdout.lines().last().unwrap();
    let (mutex, child, cloned): (i64, u32, u32) = (
        field(summary, "mutex"),
        field(summary, "child"),
        field(summary, "cloned"),
    );
    let execs = exec_children(&run.stdout);
    let mut children: Vec<u32> = execs.iter().map(|&(pid, ..)| pid).collect();
    children.extend([child, cloned]);
    let parent = lines
        .iter()
        .map(|l| l.pid)
        .find(|pid| !children.contains(pid))
        .unwrap();
    for line in &lines {
        assert!(
            line.pid == parent || children.contains(&line.pid),
            "an unrelated process: {line:?}"
        );
    }
    assert_eq!(lock_calls(&lines, parent, mutex), 100, "the target");
    assert_eq!(
        lock_calls(&lines, child, mutex),
        300,
        "the forked child, from its first call"
    );
    assert_eq!(
        lock_calls(&lines, cloned, mutex),
        50,
        "the clone()d child with no exit signal"
    );
    for (pid, pairs, image_mutex) in execs {
        assert_eq!(
            lock_calls(&lines, pid, image_mutex),
            pairs,
            "child {pid} after its exec"
        );
    }
    // The forked child shares its parent's address space layout, and so the way to errno.
    let trywait: Vec<[i64; 5]> = lines
        .iter()
        .filter(|l| l.pid == child && l.is("sema_trywait", Which::Whole))
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

/// Runs fork_exec on `program` (a build of mutex_contend) under --follow; returns the lock
/// calls each child that ran it made on its mutex (fork+exec, vfork+exec, posix_spawn), and the
/// tracer's stderr.
fn exec_into(program: &str) -> (Vec<usize>, String) {
    let (run, lines) = trace_workload(
        &["--follow", "--events", "mutex"],
        "fork_exec",
        &[&workload_arg(program)],
    );
    assert!(run.status.success(), "{run:?}");
    let calls = exec_children(&run.stdout)
        .into_iter()
        .map(|(pid, _, mutex)| lock_calls(&lines, pid, mutex))
        .collect();
    (calls, run.stderr)
}

#[test]
fn an_exec_into_a_static_binary_is_traced_in_its_executable() {
    if !bpf_available("follow_exec_static") {
        return;
    }
    let (calls, stderr) = exec_into("mutex_contend_static");
    assert_eq!(calls, [250, 150, 200], "{stderr}");
    assert!(
        stderr.contains("exec'd: ")
            && stderr.contains("probes in /")
            && stderr.contains("mutex_contend_static"),
        "{stderr}"
    );
}

// glibc 2.31 is fetched for x86-64 only (tests/c_libraries.rs).
#[cfg(target_arch = "x86_64")]
#[test]
fn an_exec_into_another_glibc_is_traced_in_its_libpthread() {
    if !thrtrace_tests::old_glibc_available("follow_exec_old_glibc", "mutex_contend_glibc231") {
        return;
    }
    let (calls, stderr) = exec_into("mutex_contend_glibc231");
    assert_eq!(calls, [250, 150, 200], "{stderr}");
    assert!(stderr.contains("libpthread-2.31.so"), "{stderr}");
}

#[test]
fn a_running_target_that_execs_is_traced_in_its_new_image() {
    if !bpf_available("follow_pid_exec") {
        return;
    }
    let dir = TempDir::new("follow-pid-exec");
    let script = format!(
        "echo ready; read line; exec {} 2 300",
        workload_arg("mutex_contend_static")
    );
    let mut shell = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(shell.stdout.take().unwrap());
    assert_eq!(read_line(&mut stdout), "ready\n");
    let pid = shell.id();
    let (mut tracer, mut stderr) =
        start_tracer(dir.path(), &[pid], &["--follow", "--events", "mutex"]);
    writeln!(shell.stdin.take().unwrap(), "go").unwrap();
    let mutex: i64 = field(&read_line(&mut stdout), "mutex");
    assert!(shell.wait().unwrap().success());
    assert!(tracer.wait().unwrap().success(), "ends with its target");
    let rest = std::io::read_to_string(&mut stderr).unwrap();
    assert!(rest.contains(&format!("pid {pid} exec'd: ")), "{rest}");

    let lines = read_trace(dir.path()).into_values().flatten().collect();
    assert_eq!(
        lock_calls_by_thread(lines, pid, mutex),
        [300, 300],
        "both threads of the new image"
    );
}

#[test]
fn an_exec_from_a_thread_other_than_the_main_one_is_followed() {
    if !bpf_available("follow_thread_exec") {
        return;
    }
    let dir = TempDir::new("follow-thread-exec");
    let run = run_tracer(
        dir.path(),
        &[
            "--follow",
            "--events",
            "mutex",
            "--",
            &workload_arg("thread_exec"),
            &workload_arg("mutex_contend_static"),
            "2",
            "300",
        ],
    );
    assert!(run.status.success(), "{run:?}");
    assert!(run.stderr.contains("exec'd: "), "{}", run.stderr);
    let mutex: i64 = field(&run.stdout, "mutex");
    let lines: Vec<TraceRecord> = read_trace(dir.path()).into_values().flatten().collect();
    let pid = lines[0].pid;
    assert_eq!(
        lock_calls_by_thread(lines, pid, mutex),
        [300, 300],
        "both threads of the new image"
    );
}

#[test]
fn a_followed_command_still_gives_its_exit_status_and_stops_and_continues() {
    if !bpf_available("follow_status") {
        return;
    }
    let cwd = TempDir::new("follow-status");
    let status = |script: &str| {
        run_tracer(cwd.path(), &["--follow", "--", "sh", "-c", script])
            .status
            .code()
    };
    assert_eq!(status("exit 3"), Some(3));
    assert_eq!(status("kill -TERM $$"), Some(128 + 15));
    // Job control still works on a traced process: stopped, then continued by another process.
    // The continuer sends SIGCONT until the shell says it went on: under ptrace the stop
    // takes effect once the tracer passes the signal on, which under emulation can come after
    // a single SIGCONT sent a fixed time later (the shell would then stay stopped).
    assert_eq!(
        status(
            "(until [ -e went-on ]; do sleep 0.2; kill -CONT $$; done) & kill -STOP $$; \
             touch went-on; wait; exit 5"
        ),
        Some(5)
    );
}

#[test]
fn errno_is_recorded_after_an_exec() {
    if !bpf_available("follow_exec_errno") {
        return;
    }
    const EAGAIN: i64 = 11;
    const ETIMEDOUT: i64 = 110;
    // The exec forgets the shell's errno slot; the new image's is found at the exec stop.
    let dir = TempDir::new("follow-exec-errno");
    let script = format!("exec {}", workload_arg("sem_sequence"));
    let run = run_tracer(
        dir.path(),
        &["--follow", "--events", "sema", "--", "sh", "-c", &script],
    );
    assert!(run.status.success(), "{run:?}");
    let lines: Vec<TraceRecord> = read_trace(dir.path()).into_values().flatten().collect();
    let sem: i64 = field(&run.stdout, "sem");
    let trywaits: Vec<[i64; 5]> = lines
        .iter()
        .filter(|l| l.is("sema_trywait", Which::Whole))
        .map(|l| l.a)
        .collect();
    assert_eq!(trywaits, [[sem, -1, EAGAIN, 0, 0], [sem, 0, 0, 0, 0]]);
    let timedwait = lines
        .iter()
        .find(|l| l.is("sem_timedwait", Which::Return))
        .unwrap();
    assert_eq!(timedwait.a[..2], [-1, ETIMEDOUT]);
}

#[test]
fn neither_tracefs_nor_debugfs_is_needed() {
    if !bpf_available("follow_without_tracefs") {
        return;
    }
    // A fresh machine has neither mounted: run where the host's are unmounted, in a mount
    // namespace of its own, with --follow's fork and exec programs attached.
    let unmounted = "for m in /sys/kernel/tracing /sys/kernel/debug/tracing /sys/kernel/debug; \
                     do umount -l $m 2>/dev/null; done; \
                     ! grep -qE ' (tracefs|debugfs) ' /proc/self/mounts && exec \"$@\"";
    let dir = TempDir::new("follow-no-tracefs");
    let run = Command::new("unshare")
        .args(["--mount", "sh", "-c", unmounted, "sh"])
        .arg(thrtrace_tests::tracer())
        .arg("--dir")
        .arg(dir.path())
        .args(["--follow", "--events", "mutex", "--"])
        .args([&workload_arg("mutex_contend"), "2", "100"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let mutex: i64 = field(&String::from_utf8_lossy(&run.stdout), "mutex");
    let lines: Vec<TraceRecord> = read_trace(dir.path()).into_values().flatten().collect();
    let pid = lines[0].pid;
    assert_eq!(
        lock_calls_by_thread(lines, pid, mutex),
        [100, 100],
        "both threads"
    );
}

/// Under `--follow` a target's fork, clone and exec stops wait for the tracer's
/// ptrace thread. A target thread at a real-time priority on the CPU that thread runs on kept
/// it off the CPU, holding the creating thread in its clone stop until the spin ended (stress-ng
/// --mutex then found its first worker finished before the next was created, and failed). The
/// tracer is pinned to CPU 0, where rt_create's SCHED_FIFO thread spins 200 ms each round while
/// its main thread, on CPU 1, creates a thread: the create must return while the spinner still
/// spins, as untraced, in every round of every run.
#[test]
fn a_real_time_target_thread_does_not_hold_a_followed_create_in_its_clone_stop() {
    if !bpf_available("follow_rt_create") {
        return;
    }
    assert!(
        std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2),
        "needs 2 CPUs"
    );
    let workload = workload_arg("rt_create");
    let args = [workload.as_str(), "3", "200", "0", "1"];
    let untraced = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(untraced.status.success());
    assert_eq!(
        field::<u32>(&String::from_utf8_lossy(&untraced.stdout), "overlapped"),
        3,
        "untraced, the create returns while the spinner spins"
    );
    let dir = TempDir::new("follow-rt-create");
    for run in 0..5 {
        let traced = Command::new("taskset")
            .args(["-c", "0"])
            .arg(thrtrace_tests::tracer())
            .args(["--follow", "-e", "thread", "--"])
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&traced.stdout);
        assert!(traced.status.success(), "run {run}: {traced:?}");
        assert_eq!(
            field::<u32>(&stdout, "overlapped"),
            3,
            "run {run}: a create waited for the real-time thread: {stdout}"
        );
    }
}

/// The tracer's draining and ptrace threads run at a real-time priority; what it starts does
/// not: a launched command, and what it forks and execs under `--follow`, run at the normal
/// policy (field 41 of /proc/PID/stat: 0, SCHED_OTHER), as they would untraced.
#[test]
fn what_the_tracer_starts_runs_at_the_normal_policy() {
    if !bpf_available("normal_policy") {
        return;
    }
    let dir = TempDir::new("normal-policy");
    let policy = "cut -d' ' -f41 /proc/$$/stat; sh -c \"cut -d' ' -f41 /proc/\\$\\$/stat\"";
    for follow in [&[][..], &["--follow"]] {
        let mut args: Vec<&str> = follow.to_vec();
        args.extend(["-d", ".", "--", "sh", "-c", policy]);
        let run = run_tracer(dir.path(), &args);
        assert!(run.status.success(), "{run:?}");
        assert_eq!(run.stdout, "0\n0\n", "{follow:?}");
    }
}
