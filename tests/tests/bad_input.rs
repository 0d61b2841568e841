//! Bad input gets one line on stderr, exit status 2, and no files.
//! These fail before anything is loaded into the kernel, so they need no privileges.

use thrtrace_tests::{TempDir, run_tracer};

fn assert_rejected(args: &[&str], expected: &str) {
    let cwd = TempDir::new("bad-input");
    let run = run_tracer(cwd.path(), args);
    assert_eq!(run.status.code(), Some(2), "{args:?}: {run:?}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one line: {:?}", run.stderr);
    assert!(lines[0].starts_with("thrtrace-bpf: "), "{lines:?}");
    assert!(
        lines[0].contains(expected),
        "{args:?}: {:?} lacks {expected:?}",
        lines[0]
    );
    assert_eq!(
        cwd.entries(),
        Vec::<String>::new(),
        "{args:?} created files"
    );
}

#[test]
fn a_pid_that_does_not_exist() {
    assert_rejected(&["-p", "999999999"], "no process with pid 999999999");
}

#[test]
fn an_unknown_category_or_event_lists_the_valid_categories() {
    assert_rejected(
        &["--events", "mutex:locks", "--", "true"],
        "unknown event or category 'locks': give categories (thread, mutex, cond, sema, rwlock, rmutex, barrier, spin, futex), event names (mutex_lock, cond_wait, ...) or C library functions (pthread_mutex_lock, sem_wait, ...); `thrtrace-bpf list` lists them",
    );
}

/// Nothing a user types by accident traces the whole host: that takes -a, --events or
/// --contended.
#[test]
fn a_bare_command_line_says_what_to_give() {
    let expected = "say what to trace: -p PID, -- COMMAND, or -a for every process";
    assert_rejected(&[], expected);
    assert_rejected(&["--dir", "."], expected);
    assert_rejected(&["--log", "host.ptl", "--duration", "1"], expected);
    assert_rejected(&["-a", "-p", "1"], "cannot be used with");
}

#[test]
fn barrier_spin_has_no_linux_counterpart() {
    assert_rejected(
        &["--events", "barrier_spin", "--", "true"],
        "event category 'barrier_spin' has no Linux counterpart",
    );
}

#[test]
fn a_directory_that_does_not_exist() {
    assert_rejected(
        &["--dir", "/nonexistent/trace", "--", "true"],
        "trace directory /nonexistent/trace",
    );
}

#[test]
fn a_directory_that_is_not_writable() {
    assert_rejected(
        &["--dir", "/proc", "--", "true"],
        "trace directory /proc is not writable (its file system takes no new files): choose \
         another with --dir",
    );
}

#[test]
fn the_environment_variable_is_checked_like_the_flag_and_the_flag_wins() {
    let cwd = TempDir::new("env");
    let run = std::process::Command::new(thrtrace_tests::tracer())
        .args(["--", "true"])
        .env("THR_TRACE_EVENTS", "bogus")
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("unknown event or category 'bogus'"));
    let run = std::process::Command::new(thrtrace_tests::tracer())
        .args(["--events", "barrier_spin", "--", "true"])
        .env("THR_TRACE_EVENTS", "bogus")
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&run.stderr).contains("'barrier_spin' has no Linux counterpart"),
        "flag did not win"
    );
}

#[test]
fn a_command_that_is_not_found_on_path_exits_127() {
    let cwd = TempDir::new("not-on-path");
    let run = run_tracer(cwd.path(), &["--", "no-such-command-thrtrace"]);
    assert_eq!(run.status.code(), Some(127), "{run:?}");
    assert!(
        run.stderr
            .contains("cannot run 'no-such-command-thrtrace': No such file or directory"),
        "{run:?}"
    );
}

#[test]
fn a_command_that_does_not_exist_exits_127() {
    let cwd = TempDir::new("no-command");
    let run = run_tracer(cwd.path(), &["--", "/nonexistent/command"]);
    assert_eq!(run.status.code(), Some(127), "{run:?}");
    assert!(
        run.stderr.contains("cannot run '/nonexistent/command'"),
        "{run:?}"
    );
    assert_eq!(cwd.entries(), Vec::<String>::new());
}

#[test]
fn a_consumer_thread_count_out_of_range() {
    assert_rejected(
        &["--consumer-threads", "0", "--", "true"],
        "invalid value '0' for '--consumer-threads <N>': 0 is not in 1..=64",
    );
}

/// What a reader is given that is not a trace is said for what it is, in one line, exit 2.
#[test]
fn an_empty_log_or_a_binary_tr_file_is_said_for_what_it_is() {
    let cwd = TempDir::new("not-a-trace");
    std::fs::write(cwd.path().join("empty.ptl"), b"").unwrap();
    let trace = cwd.path().join("trace");
    std::fs::create_dir(&trace).unwrap();
    std::fs::write(trace.join("tr.0000001.001"), b"\x7fELF\x02\x01\x01\xff\xfe").unwrap();
    for (args, expected) in [
        (
            ["report", "empty.ptl"],
            "cannot read empty.ptl: the file is empty: not a thrtrace-bpf trace log",
        ),
        (
            ["report", "trace"],
            "trace/tr.0000001.001: not a tr file: it holds bytes that are not text",
        ),
    ] {
        let run = run_tracer(cwd.path(), &args);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {run:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {run:?}");
        assert!(run.stderr.contains(expected), "{args:?}: {}", run.stderr);
    }
}

#[test]
fn min_wait_needs_contended_a_bound_of_at_most_a_second_and_a_duration() {
    assert_rejected(
        &["--min-wait", "10us", "--", "true"],
        "--min-wait 10us: counts the waits of a contended trace: give --contended too",
    );
    assert_rejected(
        &["--contended", "--min-wait", "2s", "--", "true"],
        "--min-wait 2s: give at most 1s",
    );
    assert_rejected(
        &["--contended", "--min-wait", "10", "--", "true"],
        "'10' is not a duration: give a number with a unit",
    );
}
