//! The tracer runs as root and writes predictable names into directories others may write to:
//! it never writes through a link planted there, replaces what an earlier run left, and
//! creates files mode 0600 owned by the sudo user; a name held by anything
//! but a regular file or a link is never replaced. `--log` destroys no file: one
//! that is not a trace log is refused, an earlier log is kept as `FILE.old`; so does every
//! file a reader writes (`report -o`, `--flamegraph`, `convert --to perfetto`).

use std::{
    fs,
    os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt},
    path::Path,
};

use thrtrace_tests::{
    Gated, Run, TempDir, bpf_available, field, file_name, paired_calls, read_trace, run_tracer,
    start_tracer, thread_records, workload_arg,
};
use tracer_model::log::LogReader;

const PAIRS: u32 = 25;

/// Traces PAIRS mutex pairs of a gated workload into `dir` (`extra` as `start_tracer` takes
/// it); `plant` runs with the workload's trace file name before the tracer starts. Checks that
/// the file holds exactly those pairs.
fn trace_gate_with(dir: &Path, extra: &[&str], plant: impl FnOnce(&str)) {
    let mut gate = Gated::start(0, PAIRS);
    let name = file_name(gate.pid, gate.pid);
    plant(&name);
    let mut args = vec!["--events", "mutex"];
    args.extend_from_slice(extra);
    let (mut tracer, _stderr) = start_tracer(dir, &[gate.pid], &args);
    let (pid, mutex) = (gate.pid, gate.mutex);
    gate.run_phase_two();
    gate.finish();
    assert!(tracer.wait().unwrap().success());
    let files = read_trace(dir);
    assert_eq!(
        paired_calls(&files[&file_name(pid, pid)], "mutex_lock", mutex).len(),
        PAIRS as usize
    );
    let file = dir.join(name);
    let meta = fs::symlink_metadata(&file).unwrap();
    assert!(meta.is_file(), "{} is not a regular file", file.display());
    assert_eq!(meta.nlink(), 1, "{} has other links", file.display());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
}

/// Traces into a world-writable sticky directory, like /tmp, where `plant` has made a link
/// from the trace file's name to a file outside it: that file is left as it was.
fn planted_link_is_replaced(test: &str, plant: fn(&Path, &Path) -> std::io::Result<()>) {
    if !bpf_available(test) {
        return;
    }
    let scratch = TempDir::new(test);
    let drop = scratch.path().join("drop");
    fs::create_dir(&drop).unwrap();
    fs::set_permissions(&drop, fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = scratch.path().join("victim");
    fs::write(&victim, "precious\n").unwrap();
    trace_gate_with(&drop, &[], |name| plant(&victim, &drop.join(name)).unwrap());
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(fs::metadata(&victim).unwrap().nlink(), 1);
}

#[test]
fn a_planted_symlink_is_replaced_and_its_target_left_alone() {
    planted_link_is_replaced("planted_symlink", |victim, link| {
        std::os::unix::fs::symlink(victim, link)
    });
}

#[test]
fn a_planted_hard_link_is_replaced_and_the_file_outside_left_alone() {
    planted_link_is_replaced("planted_hard_link", |victim, link| {
        fs::hard_link(victim, link)
    });
}

/// A tr file an earlier run left under the name (anyone's, anyone may write it) is kept as
/// `NAME.old`, as `--log` keeps an earlier log, and the thread's file is a new, private one.
#[test]
fn an_earlier_runs_tr_file_is_kept_as_old_and_a_private_one_made() {
    if !bpf_available("stale_file") {
        return;
    }
    let dir = TempDir::new("stale");
    let earlier = "1700000000:000000042:101:100:139800000000000:2:4:0:7:0:1:0:0\n";
    let mut stale_inode = 0;
    let mut stale_name = String::new();
    trace_gate_with(dir.path(), &[], |name| {
        let stale = dir.path().join(name);
        fs::write(&stale, earlier).unwrap();
        fs::set_permissions(&stale, fs::Permissions::from_mode(0o666)).unwrap();
        std::os::unix::fs::chown(&stale, Some(65534), Some(65534)).unwrap();
        stale_inode = fs::metadata(&stale).unwrap().ino();
        stale_name = name.to_owned();
    });
    let old = format!("{stale_name}.old");
    assert_eq!(dir.entries(), [stale_name.clone(), old.clone()]);
    assert_eq!(fs::read_to_string(dir.path().join(&old)).unwrap(), earlier);
    assert_eq!(
        fs::metadata(dir.path().join(&old)).unwrap().ino(),
        stale_inode
    );
    let meta = fs::metadata(dir.path().join(&stale_name)).unwrap();
    assert_ne!(meta.ino(), stale_inode, "the earlier file was written");
    assert_eq!((meta.uid(), meta.gid()), (0, 0));
}

#[test]
fn under_sudo_files_belong_to_the_invoking_user_mode_0600() {
    if !bpf_available("sudo_owner") {
        return;
    }
    let dir = TempDir::new("owner");
    trace_gate_with(dir.path(), &["SUDO_UID=65534", "SUDO_GID=65533"], |_| {});
    for name in dir.entries() {
        let meta = fs::metadata(dir.path().join(&name)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (65534, 65533), "{name}");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600, "{name}");
    }
}

/// A name held by something that is not a link or a tr file of ours (`plant` makes it) ends the
/// trace with one line naming it and saying what it is (`said` follows the name), and is left
/// as it was.
fn a_name_held_by_something_else_ends_the_trace(
    test: &str,
    said: &str,
    plant: fn(&Path),
    left: fn(&fs::Metadata) -> bool,
) {
    if !bpf_available(test) {
        return;
    }
    let dir = TempDir::new(test);
    let mut gate = Gated::start(0, PAIRS);
    let name = file_name(gate.pid, gate.pid);
    plant(&dir.path().join(&name));
    let (mut tracer, stderr) = start_tracer(dir.path(), &[gate.pid], &["--events", "mutex"]);
    gate.run_phase_two();
    gate.finish();
    assert_eq!(tracer.wait().unwrap().code(), Some(1));
    let lines: Vec<String> = std::io::BufRead::lines(stderr)
        .map(Result::unwrap)
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("thrtrace-bpf: cannot write trace records")
            && lines[0].contains(&format!("{name}{said}")),
        "{lines:?}"
    );
    assert!(left(&fs::symlink_metadata(dir.path().join(&name)).unwrap()));
    assert_eq!(dir.entries(), [name], "a temporary file was left behind");
}

#[test]
fn a_directory_under_a_tr_name_ends_the_trace_with_one_line() {
    a_name_held_by_something_else_ends_the_trace(
        "name_held_by_directory",
        " is a directory",
        |path| fs::create_dir(path).unwrap(),
        fs::Metadata::is_dir,
    );
}

#[test]
fn a_fifo_under_a_tr_name_is_never_replaced() {
    a_name_held_by_something_else_ends_the_trace(
        "name_held_by_fifo",
        " is a FIFO",
        make_fifo,
        |meta| meta.file_type().is_fifo(),
    );
}

#[test]
fn someone_elses_file_under_a_tr_name_is_never_replaced() {
    a_name_held_by_something_else_ends_the_trace(
        "name_held_by_a_file",
        " exists and is not a tr file: it is left as it is",
        |path| fs::write(path, "notes\n").unwrap(),
        |meta| meta.is_file() && meta.len() == 6,
    );
}

fn make_fifo(path: &Path) {
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
}

/// `--log` naming something that is not a regular file (`/dev/null`, a FIFO) is refused with
/// one line and exit 2 before anything is attached, and the thing is left as it was: the
/// tracer once replaced the system's `/dev/null` with a regular file.
#[test]
fn a_log_named_after_a_device_or_fifo_is_refused_and_left_alone() {
    let scratch = TempDir::new("log_not_regular");
    let fifo = scratch.path().join("pipe");
    make_fifo(&fifo);
    for (path, kind) in [
        (Path::new("/dev/null"), "a character device"),
        (fifo.as_path(), "a FIFO"),
        (scratch.path(), "a directory"),
    ] {
        let run = run_tracer(
            scratch.path(),
            &[
                "--log".as_ref(),
                path.as_os_str(),
                "--".as_ref(),
                "true".as_ref(),
            ],
        );
        assert_eq!(run.status.code(), Some(2), "{run:?}");
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{run:?}");
        assert!(
            lines[0].starts_with(&format!(
                "thrtrace-bpf: --log: {} is {kind}",
                path.display()
            )),
            "{lines:?}"
        );
    }
    assert!(
        fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
    assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(scratch.entries(), ["pipe"]);
}

/// `--log FILE` run in `dir` on `mutex_contend 2 ITERS`.
fn log_contend(dir: &Path, file: &str, iters: u32) -> Run {
    run_tracer(
        dir,
        &[
            "--events",
            "mutex",
            "--log",
            file,
            "--",
            &workload_arg("mutex_contend"),
            "2",
            &iters.to_string(),
        ],
    )
}

/// The tracer's one line on stderr, and its exit status 2, for a `--log` it refuses.
fn refused(run: &Run) -> &str {
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{run:?}");
    lines[0]
}

/// Never a file destroyed: `--log` naming a file that is not a trace log (text; a file that
/// begins like a log, with `PTLP`, but has no whole metadata packet) is refused with one line
/// and exit 2 before anything is attached, and the file is left byte for byte as it was.
#[test]
fn a_log_named_after_a_file_that_is_not_a_log_is_refused_and_left_intact() {
    let scratch = TempDir::new("log_not_a_log");
    let mut magic_only = b"PTLP\x01\x00\x01\x00".to_vec();
    magic_only.extend(0..=255u8);
    let files: [(&str, &[u8]); 3] = [
        ("y.txt", b"notes that took a week to write\n"),
        ("empty", b""),
        ("magic", &magic_only),
    ];
    for (name, bytes) in files {
        fs::write(scratch.path().join(name), bytes).unwrap();
        fs::set_permissions(scratch.path().join(name), fs::Permissions::from_mode(0o644)).unwrap();
    }
    for (name, bytes) in files {
        let run = run_tracer(scratch.path(), &["--log", name, "--", "true"]);
        assert_eq!(
            refused(&run),
            format!(
                "thrtrace-bpf: --log: {name} exists and is not a trace log: it is left as it \
                 is (name a new file, or move it away)"
            )
        );
        assert_eq!(fs::read(scratch.path().join(name)).unwrap(), bytes);
        let meta = fs::metadata(scratch.path().join(name)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
    }
    assert_eq!(scratch.entries(), ["empty", "magic", "y.txt"]);
}

/// An earlier trace log under `--log`'s name is kept as `FILE.old` (whatever regular file had
/// that name is replaced), and FILE is the new log, whole, mode 0600. A link at either name is
/// refused, never followed, and everything is left as it was.
#[test]
fn an_earlier_log_is_kept_as_file_old_and_links_are_refused() {
    if !bpf_available("log_kept_as_old") {
        return;
    }
    let scratch = TempDir::new("log_kept_as_old");
    let dir = scratch.path();
    let first = log_contend(dir, "app.ptl", 100);
    assert!(first.status.success(), "{first:?}");
    let earlier = fs::read(dir.join("app.ptl")).unwrap();
    fs::write(dir.join("app.ptl.old"), "a log from long ago\n").unwrap();

    let second = log_contend(dir, "app.ptl", 300);
    assert!(second.status.success(), "{second:?}");
    assert!(
        second
            .stderr
            .contains(" events in app.ptl (the earlier log is app.ptl.old)"),
        "{second:?}"
    );
    assert_eq!(scratch.entries(), ["app.ptl", "app.ptl.old"]);
    assert_eq!(fs::read(dir.join("app.ptl.old")).unwrap(), earlier);
    // Each log holds its own run: 2 threads of 100, then of 300, mutex_lock calls.
    for (name, run, iters) in [("app.ptl.old", &first, 100), ("app.ptl", &second, 300)] {
        let mutex = field::<u64>(&run.stdout, "mutex") as i64;
        let reader = LogReader::open(&dir.join(name)).unwrap();
        assert!(reader.final_status().is_some(), "{name} was closed");
        let events: Vec<_> = reader.events().map(Result::unwrap).collect();
        let records = thread_records(&events);
        assert_eq!(
            paired_calls(&records, "mutex_lock", mutex).len(),
            2 * iters,
            "{name}"
        );
    }
    let meta = fs::symlink_metadata(dir.join("app.ptl")).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);

    // A link at FILE.old (to a file outside) is not replaced: the new log would go nowhere.
    let victim = dir.join("victim");
    fs::write(&victim, "precious\n").unwrap();
    fs::remove_file(dir.join("app.ptl.old")).unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("app.ptl.old")).unwrap();
    let logged = fs::read(dir.join("app.ptl")).unwrap();
    let run = log_contend(dir, "app.ptl", 1);
    assert_eq!(
        refused(&run),
        "thrtrace-bpf: --log: app.ptl is a trace log, kept as app.ptl.old when a new one is \
         written, but app.ptl.old is a symbolic link, never replaced (remove it, or name \
         another file)"
    );
    assert_eq!(fs::read(dir.join("app.ptl")).unwrap(), logged);
    assert!(
        fs::symlink_metadata(dir.join("app.ptl.old"))
            .unwrap()
            .is_symlink()
    );

    // A link at FILE, even to a trace log, is neither followed nor replaced.
    let run = log_contend(dir, "app.ptl.old", 1);
    assert_eq!(
        refused(&run),
        "thrtrace-bpf: --log: app.ptl.old is a symbolic link: a trace log is never written through \
         one, nor put in its place (name the file itself, or remove the link)"
    );
    fs::remove_file(dir.join("app.ptl.old")).unwrap();
    std::os::unix::fs::symlink(dir.join("app.ptl"), dir.join("link.ptl")).unwrap();
    let run = log_contend(dir, "link.ptl", 1);
    assert!(refused(&run).starts_with("thrtrace-bpf: --log: link.ptl is a symbolic link"));
    assert_eq!(fs::read(dir.join("app.ptl")).unwrap(), logged);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(scratch.entries(), ["app.ptl", "link.ptl", "victim"]);
}

/// The readers' files follow `--log`'s rule: a file of another kind is refused in one line,
/// before the log is read, and left as it was; an earlier one of their own kind is kept as
/// `FILE.old`.
#[test]
fn a_reader_never_replaces_a_file_of_another_kind() {
    let scratch = TempDir::new("reader_outputs");
    let notes = b"notes that took a week to write\n";
    fs::write(scratch.path().join("notes.txt"), notes).unwrap();
    let fixture = thrtrace_tests::workspace_root().join("tests/fixtures/log-ids-by-table-row.ptl");
    fs::copy(fixture, scratch.path().join("app.ptl")).unwrap();
    let outputs: [&[&str]; 4] = [
        &["report", "--format", "pprof", "-o", "notes.txt", "app.ptl"],
        &["report", "--format", "folded", "-o", "notes.txt", "app.ptl"],
        &["report", "--flamegraph", "notes.txt", "app.ptl"],
        &["convert", "app.ptl", "--to", "perfetto", "notes.txt"],
    ];
    for args in outputs {
        let run = run_tracer(scratch.path(), args);
        let line = refused(&run);
        assert!(
            line.starts_with(
                "thrtrace-bpf: cannot create notes.txt: notes.txt exists and is not a "
            ) && line.ends_with(": it is left as it is (name a new file, or move it away)"),
            "{args:?}: {line}"
        );
        assert_eq!(fs::read(scratch.path().join("notes.txt")).unwrap(), notes);
    }
    assert_eq!(scratch.entries(), ["app.ptl", "notes.txt"]);

    // Written twice: the first is kept as FILE.old.
    for _ in 0..2 {
        let run = run_tracer(
            scratch.path(),
            &["convert", "app.ptl", "--to", "perfetto", "timeline.json"],
        );
        assert!(run.status.success(), "{run:?}");
    }
    let timeline = fs::read(scratch.path().join("timeline.json")).unwrap();
    assert_eq!(
        fs::read(scratch.path().join("timeline.json.old")).unwrap(),
        timeline
    );
}

/// A CTF trace is a directory: one that holds an earlier CTF trace is moved to `DIR.old`
/// before the new trace is written (no stream of the earlier one is read as the new one's),
/// and one that holds anything else is refused in one line, before anything is written.
#[test]
fn an_earlier_ctf_trace_is_kept_as_dir_old_and_other_directories_refused() {
    let scratch = TempDir::new("ctf_outputs");
    let fixture = thrtrace_tests::workspace_root().join("tests/fixtures/log-ids-by-table-row.ptl");
    fs::copy(fixture, scratch.path().join("app.ptl")).unwrap();
    let convert = || {
        run_tracer(
            scratch.path(),
            &["convert", "app.ptl", "--to", "ctf", "ctf"],
        )
    };
    let first = convert();
    assert!(first.status.success(), "{first:?}");
    let streams = |dir: &str| {
        let mut names: Vec<String> = fs::read_dir(scratch.path().join(dir))
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let written = streams("ctf");
    let second = convert();
    assert!(second.status.success(), "{second:?}");
    assert!(
        second.stderr.contains("(the earlier trace is ctf.old)"),
        "{second:?}"
    );
    assert_eq!(streams("ctf.old"), written);
    assert_eq!(streams("ctf"), written);

    fs::create_dir(scratch.path().join("mine")).unwrap();
    fs::write(scratch.path().join("mine/notes.txt"), "notes\n").unwrap();
    let run = run_tracer(
        scratch.path(),
        &["convert", "app.ptl", "--to", "ctf", "mine"],
    );
    assert_eq!(
        refused(&run),
        "thrtrace-bpf: mine holds files that are not a CTF trace: they are left as \
         they are (name a new or empty directory, or move them away)"
    );
    assert_eq!(streams("mine"), ["notes.txt"]);
}
