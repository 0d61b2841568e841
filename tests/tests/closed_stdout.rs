//! A reader command whose output nobody reads any more (`thrtrace-bpf dump LOG | head`): the
//! output ends there, quietly, with exit status 0, as `cat`'s does under `head`. Needs no
//! privileges: the logs are the corpus's, written here, and nothing is traced.

use std::{
    io::{BufRead, BufReader, PipeReader},
    path::Path,
    process::{Command, ExitStatus, Stdio},
};

use thrtrace_tests::{TempDir, corpus, tracer};
use tracer_model::log::LogFullPolicy;

/// Runs the tracer with `args` in `cwd`, its stdout a pipe that `read` reads from and then
/// closes (a reader of no lines closes it before the tracer starts); returns how the tracer
/// exited and its stderr.
fn into_closed_pipe(
    cwd: &Path,
    args: &[&str],
    read: impl FnOnce(PipeReader),
) -> (ExitStatus, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    // The Command, and with it this process's copy of the pipe's write end, is gone once the
    // tracer has started.
    let child = Command::new(tracer())
        .args(args)
        .current_dir(cwd)
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tracer");
    read(reader);
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status, stderr)
}

fn assert_ended_quietly(args: &[&str], (status, stderr): (ExitStatus, String)) {
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(
        !stderr.contains("Broken pipe") && !stderr.contains("os error 32"),
        "{args:?}: {stderr}"
    );
    assert!(status.success(), "{args:?}: {status}: {stderr}");
}

#[test]
fn every_reader_command_into_a_pipe_closed_before_it_writes_ends_with_status_0() {
    let scratch = TempDir::new("closed-stdout");
    std::fs::write(
        scratch.path().join("log.ptl"),
        corpus::good_log(scratch.path()),
    )
    .unwrap();
    let commands: [&[&str]; 8] = [
        &["dump", "log.ptl"],
        &["dump", "--format", "tr", "log.ptl"],
        &["dump", "--format", "json", "log.ptl"],
        &["info", "log.ptl"],
        &["info", "--format", "json", "log.ptl"],
        &["report", "log.ptl"],
        &["report", "--format", "json", "log.ptl"],
        &["generate", "completions", "bash"],
    ];
    for args in commands {
        assert_ended_quietly(args, into_closed_pipe(scratch.path(), args, drop));
    }
}

#[test]
fn dump_into_a_pipe_closed_after_its_first_line_ends_with_status_0() {
    let scratch = TempDir::new("closed-stdout-head");
    // 20000 records: far more text than a pipe holds, so the tracer is still writing when its
    // reader goes.
    let metadata = corpus::metadata(None, LogFullPolicy::Append);
    corpus::write_log(&scratch.path().join("big.ptl"), &metadata, 5000, 4, true);
    let args = ["dump", "big.ptl"];
    let read_one_line = |reader: PipeReader| {
        let mut line = String::new();
        BufReader::new(reader).read_line(&mut line).unwrap();
        assert!(line.starts_with('#'), "{line}");
    };
    assert_ended_quietly(
        &args,
        into_closed_pipe(scratch.path(), &args, read_one_line),
    );
}
