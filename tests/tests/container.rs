//! A process in its own mount namespace with its own copy of libc.so.6 (a different inode at
//! the usual path), as in a container, is traced through the file it really maps; a host
//! process making the same calls is not recorded (issue 5).

use std::{
    fs,
    io::{BufRead, BufReader, Write},
    os::unix::fs::MetadataExt,
    process::{Child, ChildStdout, Command, Stdio},
};

use thrtrace_tests::{
    Line, TempDir, bpf_available, field, paired_calls, read_trace, trace_file_name, tracer,
    workload,
};

const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

fn gate(command: &mut Command) -> (Child, BufReader<ChildStdout>, u32, i64) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut ready = String::new();
    out.read_line(&mut ready).unwrap();
    (child, out, field(&ready, "pid"), field(&ready, "mutex"))
}

fn go(child: &mut Child, out: &mut BufReader<ChildStdout>) {
    writeln!(child.stdin.as_mut().unwrap(), "go").unwrap();
    let mut done = String::new();
    out.read_line(&mut done).unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_namespaced_process_with_its_own_libc_is_traced_and_the_host_is_not() {
    if !bpf_available("container") {
        return;
    }
    let scratch = TempDir::new("container");
    let copy = scratch.path().join("libc.so.6");
    fs::copy(LIBC, &copy).unwrap();
    let script = format!(
        "mount --bind {} {LIBC} && exec {} 0 300",
        copy.display(),
        workload("mutex_gate").display()
    );
    let (mut contained, mut contained_out, pid, mutex) = gate(Command::new("unshare").args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ]));
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

    let (mut host, mut host_out, host_pid, _) =
        gate(Command::new(workload("mutex_gate")).args(["0", "300"]));
    let dir = TempDir::new("container-trace");
    let mut traced = Command::new(tracer())
        .args(["--events", "mutex", "--dir"])
        .arg(dir.path())
        .args(["-p", &pid.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(traced.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains(&format!("tracing pid {pid}")), "{line}");
    go(&mut host, &mut host_out);
    go(&mut contained, &mut contained_out);
    assert!(traced.wait().unwrap().success());

    let files = read_trace(dir.path());
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        [&trace_file_name(pid, pid)],
        "only the contained process"
    );
    let lines: &Vec<Line> = &files[&trace_file_name(pid, pid)];
    assert!(
        lines.iter().all(|l| l.pid == pid && l.pid != host_pid),
        "host pids, not namespace pids"
    );
    assert_eq!(paired_calls(lines, "mutex_lock", mutex).len(), 300);
}
