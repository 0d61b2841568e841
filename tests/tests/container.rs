//! A process in its own mount namespace with its own copy of libc.so.6 (a different inode at
//! the usual path), as in a container, is traced through the file it really maps; a host
//! process making the same calls is not recorded; a library deleted since it was mapped is
//! traced too. A process in a PID namespace of its own, under chroot, has the holders of its
//! locks named by the host's thread ids, each with its id there (system-wide too, in
//! system_wide.rs).

use std::{fs, os::unix::fs::MetadataExt, process::Command};

use thrtrace_tests::{
    Gated, LIBC, TempDir, TraceRecord, bpf_available, check_holders_in_a_pid_namespace, file_name,
    paired_calls, read_trace, start_contained_gate, start_tracer, workload,
};

#[test]
fn a_namespaced_process_with_its_own_libc_is_traced_and_the_host_is_not() {
    if !bpf_available("container") {
        return;
    }
    let scratch = TempDir::new("container");
    let (mut contained, copy) = start_contained_gate(&scratch, 300);
    let (pid, mutex) = (contained.pid, contained.mutex);
    // It really maps a different file at the same path.
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let inode: u64 = maps
        .lines()
        .find(|l| l.ends_with(LIBC))
        .and_then(|l| l.split_whitespace().nth(4)?.parse().ok())
        .expect("libc mapped");
    assert_ne!(
        inode,
        fs::metadata(LIBC).unwrap().ino(),
        "the copy is not what it maps"
    );
    assert_eq!(inode, fs::metadata(&copy).unwrap().ino());

    let mut host = Gated::start(0, 300);
    let host_pid = host.pid;
    let dir = TempDir::new("container-trace");
    let (mut traced, _stderr) = start_tracer(dir.path(), &[pid], &["--events", "mutex"]);
    host.run_phase_two();
    host.finish();
    contained.run_phase_two();
    contained.finish();
    assert!(traced.wait().unwrap().success());

    let files = read_trace(dir.path());
    let name = file_name(pid, pid);
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        [&name],
        "only the contained process"
    );
    let lines: &Vec<TraceRecord> = &files[&name];
    assert!(
        lines.iter().all(|l| l.pid == pid && l.pid != host_pid),
        "host pids, not namespace pids"
    );
    assert_eq!(paired_calls(lines, "mutex_lock", mutex).len(), 300);
}

#[test]
fn a_library_deleted_after_it_was_mapped_is_traced_through_the_mapping() {
    if !bpf_available("deleted_library") {
        return;
    }
    // The loader takes libc.so.6 from LD_LIBRARY_PATH: a copy, removed once the process runs.
    let scratch = TempDir::new("deleted-libc");
    let copy = scratch.path().join("libc.so.6");
    fs::copy(LIBC, &copy).unwrap();
    let mut gate = Gated::spawn(
        Command::new(workload("mutex_gate"))
            .args(["0", "300"])
            .env("LD_LIBRARY_PATH", scratch.path()),
    );
    fs::remove_file(&copy).unwrap();
    let (pid, mutex) = (gate.pid, gate.mutex);
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains("libc.so.6 (deleted)"), "{maps}");

    let dir = TempDir::new("deleted-trace");
    let (mut traced, _stderr) = start_tracer(dir.path(), &[pid], &["--events", "mutex"]);
    gate.run_phase_two();
    gate.finish();
    assert!(traced.wait().unwrap().success());
    let files = read_trace(dir.path());
    let lines: &Vec<TraceRecord> = &files[&file_name(pid, pid)];
    assert_eq!(paired_calls(lines, "mutex_lock", mutex).len(), 300);
}

#[test]
fn the_holders_in_a_pid_namespace_are_host_threads_with_their_ids_there_by_pid() {
    if !bpf_available("pid_namespace") {
        return;
    }
    check_holders_in_a_pid_namespace(true);
}
