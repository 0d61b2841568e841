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

/// A file found through a process that exits before the tracer places the file's probes is
/// looked for again through the processes that still map it: no start says it is not traced,
/// none ends, and the file is probed. Processes that live from 10 to 200 ms, all with one copy
/// of libc, are started every 10 ms throughout several starts of the tracer: the scan finds the
/// copy through the oldest, which is the likeliest to be gone by the time the copy's turn comes.
#[test]
fn a_library_whose_process_is_gone_before_its_probes_are_placed_is_probed_through_another() {
    if !bpf_available("system_wide_gone_library") {
        return;
    }
    let scratch = TempDir::new("short-lived-libc");
    let copy = scratch.path().join("libc.so.6");
    std::fs::copy(LIBC, &copy).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let churn = std::thread::spawn({
        let stop = Arc::clone(&stop);
        let dir = scratch.path().to_owned();
        move || {
            let mut running: VecDeque<Child> = VecDeque::new();
            let mut started: u32 = 0;
            while !stop.load(Ordering::Relaxed) {
                let lifetime = 10 + started * 37 % 190;
                let short = Command::new("sleep")
                    .arg(format!("0.{lifetime:03}"))
                    .env("LD_LIBRARY_PATH", &dir)
                    .spawn()
                    .unwrap();
                running.push_back(short);
                started += 1;
                std::thread::sleep(Duration::from_millis(10));
                if running.len() > 20 {
                    assert!(running.pop_front().unwrap().wait().unwrap().success());
                }
            }
            for mut short in running {
                assert!(short.wait().unwrap().success());
            }
            started
        }
    });
    let copy_traced = format!("tracing every process that maps {} (", copy.display());
    for start in 0..5 {
        let dir = TempDir::new("system-wide-churn");
        let (mut traced, mut stderr) = start_tracer(dir.path(), &[], &["--events", "mutex"]);
        // The copy is probed at the start or, should every process found with it be gone
        // before its turn, at a later look.
        let mut read = String::new();
        while !read.contains(&copy_traced) {
            let line = read_line(&mut stderr);
            assert!(!line.is_empty(), "start {start}: the tracer ended: {read}");
            assert!(
                !line.contains(", is not traced: "),
                "start {start}: {read}{line}"
            );
            read.push_str(&line);
        }
        signal(traced.id(), "-INT");
        assert!(traced.wait().unwrap().success(), "start {start}");
    }
    stop.store(true, Ordering::Relaxed);
    assert!(churn.join().unwrap() > 0);
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
