//! A process in its own mount namespace with its own copy of libc.so.6 (a different inode at
//! the usual path), as in a container, is traced through the file it really maps; a host
//! process making the same calls is not recorded (issue 5).

use std::{fs, os::unix::fs::MetadataExt};

use thrtrace_tests::{
    Gated, LIBC, Line, TempDir, bpf_available, paired_calls, read_trace, start_contained_gate,
    start_tracer, trace_file_name,
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
    let name = trace_file_name(pid, pid);
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        [&name],
        "only the contained process"
    );
    let lines: &Vec<Line> = &files[&name];
    assert!(
        lines.iter().all(|l| l.pid == pid && l.pid != host_pid),
        "host pids, not namespace pids"
    );
    assert_eq!(paired_calls(lines, "mutex_lock", mutex).len(), 300);
}
