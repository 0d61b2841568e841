//! With no -p and no command, every process mapping a glibc is traced, including processes
//! started after the tracer, and never the tracer itself.

use std::{
    collections::{BTreeMap, VecDeque},
    io::Read,
    os::unix::fs::MetadataExt,
    process::{Child, Command},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};
use tracer_common::Which;

use thrtrace_tests::{
    Gated, LIBC, TempDir, TraceRecord, bpf_available, check_holders_in_a_pid_namespace, field,
    file_name, paired_calls, read_line, read_trace, signal, start_contained_gate, start_tracer,
    until_the_hosts_libc_is_traced, whole_lines_of, workload,
};

#[test]
fn processes_started_after_the_tracer_are_traced_and_the_tracer_is_not() {
    if !bpf_available("system_wide") {
        return;
    }
    let dir = TempDir::new("system-wide");
    let (mut traced, mut stderr) = start_tracer(dir.path(), &[], &["--events", "mutex"]);
    until_the_hosts_libc_is_traced(&mut stderr);

    // One process that runs to its end, and one whose files must be completed once it exits.
    let contend = Command::new(workload("mutex_contend"))
        .args(["2", "500"])
        .output()
        .unwrap();
    assert!(contend.status.success());
    let contend_mutex: i64 = field(&String::from_utf8_lossy(&contend.stdout), "mutex");
    let mut gate = Gated::start(0, 300);
    let (gate_pid, gate_mutex) = (gate.pid, gate.mutex);
    gate.run_phase_two();
    gate.finish();

    // The gate process has exited: its file is completed while the tracer goes on.
    let file = dir.path().join(file_name(gate_pid, gate_pid));
    let complete = || {
        whole_lines_of(&file)
            .is_some_and(|lines| paired_calls(&lines, "mutex_lock", gate_mutex).len() == 300)
    };
    let give_up = Instant::now() + Duration::from_secs(10);
    while !complete() {
        assert!(
            Instant::now() < give_up,
            "{} never completed",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    Command::new("kill")
        .args(["-INT", &traced.id().to_string()])
        .status()
        .unwrap();
    assert!(traced.wait().unwrap().success());
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(rest.contains(" 0 lost"), "{rest}");

    let files = read_trace(dir.path());
    let all: Vec<&TraceRecord> = files.values().flatten().collect();
    assert!(
        !all.iter().any(|l| l.pid == traced.id()),
        "the tracer traced itself"
    );
    // Each thread's records, whole: pairing needs every entry before its return.
    let mut by_thread: BTreeMap<u32, Vec<TraceRecord>> = BTreeMap::new();
    for line in &all {
        by_thread.entry(line.lwpid).or_default().push(*(*line));
    }
    let contend_calls: usize = by_thread
        .values()
        .map(|lines| paired_calls(lines, "mutex_lock", contend_mutex).len())
        .sum();
    assert_eq!(
        contend_calls,
        2 * 500,
        "both threads of a process started after the tracer"
    );
    let unlocks = all
        .iter()
        .filter(|l| l.is("mutex_unlock", Which::Whole) && l.a[0] == contend_mutex)
        .count();
    assert_eq!(unlocks, 2 * 500);
}

#[test]
fn a_library_that_appears_after_start_gets_its_probes_too() {
    if !bpf_available("system_wide_new_library") {
        return;
    }
    let dir = TempDir::new("system-wide-late");
    let (mut traced, mut stderr) = start_tracer(dir.path(), &[], &["--events", "mutex"]);
    let mut line = until_the_hosts_libc_is_traced(&mut stderr);

    // A container-like process started now, with its own copy of libc at the usual path.
    let scratch = TempDir::new("late-libc");
    let (mut gate, copy) = start_contained_gate(&scratch, 300);
    let (pid, mutex) = (gate.pid, gate.mutex);
    // The tracer finds the new file (a second inode) within its once-a-second look. (Other
    // tests' container-like processes may bring libraries of their own meanwhile.)
    let inode = std::fs::metadata(&copy).unwrap().ino();
    while !line.contains(&format!("inode {inode})")) {
        line = read_line(&mut stderr);
        assert!(!line.is_empty(), "the tracer ended without it");
    }
    gate.run_phase_two();
    gate.finish();
    Command::new("kill")
        .args(["-INT", &traced.id().to_string()])
        .status()
        .unwrap();
    assert!(traced.wait().unwrap().success());
    let files = read_trace(dir.path());
    let lines: &Vec<TraceRecord> = &files[&file_name(pid, pid)];
    assert_eq!(paired_calls(lines, "mutex_lock", mutex).len(), 300);
}

/// A process found with a copy of libc of its own that exits, taking the file with it, before
/// the tracer places that file's probes, costs the trace a line and an error event: the other
/// files are still probed and the trace goes on. Processes that live from 10 to 200 ms, each
/// with a new copy (deleted as it runs), are started every 10 ms throughout several starts of
/// the tracer, so that some start finds one that is gone by the time its file's turn comes.
#[test]
fn a_library_gone_before_its_probes_are_placed_does_not_end_the_trace() {
    if !bpf_available("system_wide_gone_library") {
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let churn = std::thread::spawn({
        let stop = Arc::clone(&stop);
        move || {
            let mut running: VecDeque<(Child, TempDir)> = VecDeque::new();
            let mut started: u32 = 0;
            while !stop.load(Ordering::Relaxed) {
                let scratch = TempDir::new("short-lived-libc");
                std::fs::copy(LIBC, scratch.path().join("libc.so.6")).unwrap();
                let lifetime = 10 + started * 37 % 190;
                let short = Command::new("sleep")
                    .arg(format!("0.{lifetime:03}"))
                    .env("LD_LIBRARY_PATH", scratch.path())
                    .spawn()
                    .unwrap();
                running.push_back((short, scratch));
                started += 1;
                std::thread::sleep(Duration::from_millis(10));
                // Each copy is deleted while its process still runs, as a container's are.
                if running.len() > 4 {
                    let (mut short, scratch) = running.pop_front().unwrap();
                    drop(scratch);
                    assert!(short.wait().unwrap().success());
                }
            }
            started
        }
    });
    let mut gone = 0;
    for start in 0..20 {
        if gone > 0 && start >= 3 {
            break;
        }
        let dir = TempDir::new("system-wide-churn");
        let (mut traced, mut stderr) = start_tracer(dir.path(), &[], &["--events", "mutex"]);
        // Every file found at the start is probed, or not, before the trace begins; other
        // tests' containers may come and go meanwhile.
        let mut read = String::new();
        loop {
            let line = read_line(&mut stderr);
            assert!(!line.is_empty(), "start {start}: the tracer ended: {read}");
            read.push_str(&line);
            if line.contains("/thrtrace-short-lived-libc-") && line.contains(", is not traced: ") {
                assert!(line.contains("found mapped by pid "), "{line}");
                gone += 1;
            }
            if line.contains("; Ctrl-C stops it") {
                break;
            }
        }
        assert!(
            read.contains(&format!("tracing every process that maps {LIBC} (")),
            "{read}"
        );
        signal(traced.id(), "-INT");
        assert!(traced.wait().unwrap().success(), "start {start}");
    }
    stop.store(true, Ordering::Relaxed);
    assert!(churn.join().unwrap() > 0);
    assert!(gone > 0, "no start found a file gone before its turn");
}

/// A process in a PID namespace of its own under chroot, found by a system-wide trace: the
/// holders of its locks are host threads, each with its id in the namespace (by pid in
/// container.rs).
#[test]
fn the_holders_in_a_pid_namespace_are_host_threads_with_their_ids_there_system_wide() {
    if !bpf_available("pid_namespace_system_wide") {
        return;
    }
    check_holders_in_a_pid_namespace(false);
}
