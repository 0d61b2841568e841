//! Helpers for the integration tests, shared with xtask's demo and bench: the compiled C
//! workloads, the tracer binary, BPF availability, and reading `tr.*` files back.

use std::{
    collections::BTreeMap,
    ffi::OsStr,
    fs,
    io::{BufRead, BufReader, Read as _, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio},
    sync::{
        atomic::{AtomicU32, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

pub mod corpus;
pub mod ingest;
pub mod pprof;
pub mod skips;

use serde_json::Value;
use tracer_common::{EVENTS, Which};
use tracer_model::event::{Event, SystemEvent};
pub use tracer_model::{
    TraceRecord,
    tr::{file_name, parse_line},
};

/// A C workload from `tests/workloads/`, compiled by this crate's build script.
pub fn workload(name: &str) -> PathBuf {
    let path = Path::new(env!("OUT_DIR")).join("workloads").join(name);
    assert!(
        path.exists(),
        "no workload {name} (tests/workloads/{name}.c)"
    );
    path
}

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

/// `cargo xtask TASK ARGS…` from the workspace's root, as a test runs it. cargo gives a test
/// its package's OUT_DIR, and ring's build script depends on OUT_DIR as cargo's environment
/// holds it: left in, the task's build would build ring and the tracer again, and every build
/// after it (the stress trials', the guests') would build them back.
pub fn cargo_xtask(task: &str) -> Command {
    let mut cargo = Command::new("cargo");
    cargo
        .current_dir(workspace_root())
        .args(["xtask", task])
        .env_remove("OUT_DIR");
    cargo
}

/// The tracer under test: `$THRTRACE_BIN`, else the workspace's release build.
pub fn tracer() -> PathBuf {
    let path = std::env::var_os("THRTRACE_BIN").map_or_else(
        || workspace_root().join("target/release/thrtrace-bpf"),
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "{} does not exist: build it with `cargo build --release` (`cargo xtask test` does)",
        path.display()
    );
    path
}

/// Whether tests that load BPF programs can run here. Outside CI they are skipped with a
/// message; in CI (`CI=true`) a missing capability fails the test.
pub fn bpf_available(test: &str) -> bool {
    let missing = if effective_uid() != Some(0) {
        Some("not running as root (BPF tracing needs root)")
    } else if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        Some("the kernel has no BTF at /sys/kernel/btf/vmlinux")
    } else {
        None
    };
    prerequisite(test, missing)
}

/// Whether this kernel refuses every tracing (fentry) program before verifying it, whatever
/// function it hooks: a policy of the machine (this one's sandbox has it), where the futex
/// tests cannot run the fentry hook. Asked here, not of the tracer, so that a tracer that
/// refuses fentry on a kernel that has it still fails. The program names BTF type 1 (no
/// function): a kernel that allows tracing programs refuses it as invalid (EINVAL).
pub fn kernel_refuses_tracing_programs() -> bool {
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_TYPE_TRACING: u32 = 26;
    const BPF_TRACE_FENTRY: u32 = 24;
    // r0 = 0; exit.
    let instructions: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];
    let license = c"GPL";
    // The prog-load part of `union bpf_attr`, at its fields' offsets.
    let mut attr = [0u8; 128];
    let mut put = |at: usize, bytes: &[u8]| attr[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &BPF_PROG_TYPE_TRACING.to_ne_bytes());
    put(4, &2u32.to_ne_bytes());
    put(8, &(instructions.as_ptr() as u64).to_ne_bytes());
    put(16, &(license.as_ptr() as u64).to_ne_bytes());
    put(68, &BPF_TRACE_FENTRY.to_ne_bytes());
    put(108, &1u32.to_ne_bytes());
    // SAFETY: a BPF_PROG_LOAD request whose pointers outlive the call.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, attr.as_ptr(), attr.len()) };
    if fd >= 0 {
        // SAFETY: the kernel gave this descriptor, which nothing else owns.
        unsafe { libc::close(fd as i32) };
        return false;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether `workload`, one built against glibc 2.31 (`NAME_glibc231`, see build.rs), is there
/// and BPF is available; if not, skips the test, or fails it in CI, as [`bpf_available`] does.
pub fn old_glibc_available(test: &str, workload: &str) -> bool {
    let built = Path::new(env!("OUT_DIR"))
        .join("workloads")
        .join(workload)
        .exists();
    let missing =
        (!built).then_some("no glibc 2.31 sysroot in target/ (`cargo xtask test` fetches it)");
    bpf_available(test) && prerequisite(test, missing)
}

/// The builds of `workload` that a category's record test checks: the one against the
/// architecture's own glibc (Debian 12's 2.36), one against each other glibc of the
/// architecture (`NAME_glibc231`, `NAME_glibc241` on x86-64; `NAME_glibc241` on arm64), and
/// musl's, dynamic and static (`NAME_musl`, `NAME_musl_static`) where musl can build it (see
/// build.rs). One that is not built skips that part of `test` with a message, or fails it in
/// CI. With `THRTRACE_TEST_LIBCS=own` (a kernel's boot of what depends on the kernel, in
/// `cargo xtask kernels`), the architecture's own glibc's alone.
pub fn every_libc(test: &str, workload: &str) -> Vec<String> {
    if std::env::var("THRTRACE_TEST_LIBCS").is_ok_and(|libcs| libcs == "own") {
        return vec![workload.to_owned()];
    }
    let musl = env!("MUSL_WORKLOADS").split(',').any(|w| w == workload);
    let others = env!("OTHER_GLIBC_SUFFIXES")
        .split(',')
        .filter(|suffix| !suffix.is_empty())
        .map(|suffix| {
            (
                suffix,
                "its glibc is not in target/ (xtask fetches it for the tests it builds)",
            )
        })
        .chain(
            env!("MUSL_SUFFIXES")
                .split(',')
                .filter(|_| musl)
                .map(|suffix| {
                    (
                        suffix,
                        "there is no musl-gcc for its architecture (`cargo xtask setup` \
                         installs the host's; xtask fetches arm64's into target/)",
                    )
                }),
        );
    let mut builds = vec![workload.to_owned()];
    for (suffix, why_not) in others {
        let build = format!("{workload}{suffix}");
        let built = Path::new(env!("OUT_DIR"))
            .join("workloads")
            .join(&build)
            .exists();
        let why = format!("{build} is not built: {why_not}");
        if prerequisite(test, (!built).then_some(why.as_str())) {
            builds.push(build);
        }
    }
    builds
}

/// Whether a build of a workload ([`every_libc`]) runs on musl.
pub fn is_musl(build: &str) -> bool {
    build.contains("_musl")
}

/// [`every_libc`]'s builds, each with every probe placement.
pub fn every_libc_and_placement(
    test: &str,
    workload: &str,
) -> Vec<(String, &'static [&'static str])> {
    every_libc(test, workload)
        .into_iter()
        .flat_map(|build| PLACEMENTS.map(|placement| (build.clone(), placement)))
        .collect()
}

/// Runs `command` and returns its output, failing the test unless it exited 0.
pub fn succeeded(command: &mut Command) -> std::process::Output {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Whether `program` runs here (`program --version`); if not, skips the test, or fails it in
/// CI, as [`bpf_available`] does. `cargo xtask setup` installs the ones the tests use.
pub fn program_available(test: &str, program: &str) -> bool {
    let runs = Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let why = format!("{program} is not installed (cargo xtask setup installs it)");
    prerequisite(test, (!runs).then_some(why.as_str()))
}

/// True when nothing is `missing`; else skips `test` with a message, or fails it in CI.
pub fn prerequisite(test: &str, missing: Option<&str>) -> bool {
    let Some(why) = missing else {
        return true;
    };
    assert!(
        !std::env::var("CI").is_ok_and(|v| v == "true"),
        "{test} cannot run, and in CI a missing prerequisite is a failure: {why}"
    );
    eprintln!("skipping {test}: {why}");
    // `cargo xtask test` counts skips from this log for its closing line.
    if let Some(log) = std::env::var_os("THRTRACE_SKIP_LOG") {
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("skip log");
        // One write of an O_APPEND file: concurrent tests cannot interleave.
        file.write_all(format!("{test}: {why}\n").as_bytes())
            .expect("write skip log");
    }
    false
}

fn effective_uid() -> Option<u32> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let uids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    uids.split_whitespace().nth(1)?.parse().ok()
}

/// A fresh directory, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty directory, named after `label`, the test process and a counter.
    pub fn new(label: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("thrtrace-{label}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Names of the entries in the directory, sorted.
    pub fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.0)
            .expect("read temp dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// What a finished tracer run printed and returned.
#[derive(Debug)]
pub struct Run {
    /// How it exited.
    pub status: ExitStatus,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error: messages and the summary line.
    pub stderr: String,
}

/// Runs the tracer with `args`, in `cwd`, to completion.
pub fn run_tracer<S: AsRef<OsStr>>(cwd: &Path, args: &[S]) -> Run {
    Command::new(tracer())
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run tracer")
        .into()
}

impl From<std::process::Output> for Run {
    fn from(output: std::process::Output) -> Run {
        Run {
            status: output.status,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// The number before `label` ("records", "lost", "files") in the tracer's summary line.
pub fn summary_count(stderr: &str, label: &str) -> u64 {
    let summary = stderr
        .lines()
        .rfind(|l| l.contains(" records written, "))
        .unwrap_or_else(|| panic!("no summary line in {stderr:?}"));
    let words: Vec<&str> = summary
        .split([' ', ','])
        .filter(|w| !w.is_empty())
        .collect();
    let at = words
        .iter()
        .position(|w| *w == label)
        .unwrap_or_else(|| panic!("{summary}"));
    words[at - 1].parse().unwrap()
}

/// Checks that `files` are the files the tracer's summary line (in `stderr`) names, and hold
/// every record it counted as written.
pub fn assert_files_hold_the_summary(stderr: &str, files: &BTreeMap<String, Vec<TraceRecord>>) {
    assert_eq!(
        summary_count(stderr, "files"),
        files.len() as u64,
        "{stderr}"
    );
    assert_eq!(
        summary_count(stderr, "records"),
        files.values().map(|lines| lines.len() as u64).sum::<u64>(),
        "{stderr}"
    );
}

/// The records of a `tr.*` file that the tracer may be writing: its whole lines only, as a
/// read can end inside a write, mid-line (the kernel makes a write visible a page at a time).
/// `None` if it cannot be read (yet).
pub fn whole_lines_of(path: &Path) -> Option<Vec<TraceRecord>> {
    let text = fs::read_to_string(path).ok()?;
    let whole = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    Some(whole.lines().map(record_of).collect())
}

/// A `tr.*` line as the product reads it back; panics with the line if it is not a record.
pub fn record_of(line: &str) -> TraceRecord {
    parse_line(line).unwrap_or_else(|e| panic!("not a record ({e}): {line:?}"))
}

/// The (event1, event2) codes of a seed event name, from the shared event table.
pub fn codes(name: &str) -> (u16, u16) {
    let event = EVENTS
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("no event {name}"));
    (event.category.code(), event.event2)
}

/// When this process started, in realtime nanoseconds: its start in clock ticks since boot
/// (`/proc/self/stat`) after the boot time in seconds (`/proc/stat`).
fn process_start_ns() -> i128 {
    let stat = fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let after_name = &stat[stat.rfind(')').expect("a command name") + 2..];
    // Field 22, starttime, is the 20th after the name.
    let ticks: i128 = after_name
        .split_whitespace()
        .nth(19)
        .and_then(|t| t.parse().ok())
        .expect("starttime");
    let boot: i128 = fs::read_to_string("/proc/stat")
        .expect("/proc/stat")
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|t| t.trim().parse().ok())
        .expect("btime");
    // SAFETY: sysconf only reads a constant.
    let ticks_per_second = i128::from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) });
    boot * 1_000_000_000 + ticks * 1_000_000_000 / ticks_per_second
}

/// Checks every file (by name) for realtime stamps of this run, between this test
/// process's start and now (to /proc's second of boot time), nondecreasing per file. Not
/// "within a few seconds of now": an emulated guest (`cargo xtask kernels`) takes longer.
pub fn assert_realtime_and_ordered(files: &BTreeMap<String, Vec<TraceRecord>>) {
    const SECOND: i128 = 1_000_000_000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128;
    let started = process_start_ns();
    for (name, lines) in files {
        for line in lines {
            assert!(
                (started - 2 * SECOND..now + SECOND).contains(&line.time_ns()),
                "{name}: {line:?} is not realtime (this test started at {started} ns, now is \
                 {now} ns)"
            );
            assert!(
                (0..1_000_000_000).contains(&line.nsec),
                "{name}: nsec out of range"
            );
        }
        for pair in lines.windows(2) {
            assert!(
                pair[0].time_ns() <= pair[1].time_ns(),
                "{name}: time goes back at {pair:?}"
            );
        }
    }
}

/// What `mutex_contend` printed (its mutex, and each thread's lwpid; `threads` of them) and
/// each thread's records from its file, with the file's name.
pub fn contending_threads(
    run: &Run,
    files: &BTreeMap<String, Vec<TraceRecord>>,
    threads: usize,
) -> (i64, Vec<(String, Vec<TraceRecord>)>) {
    let mutex: i64 = field(&run.stdout, "mutex");
    let lwpids: Vec<u32> = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("lwpid="))
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(lwpids.len(), threads, "{}", run.stdout);
    let pid = files.values().flatten().next().expect("some records").pid;
    let per_thread = lwpids
        .into_iter()
        .map(|lwpid| {
            let name = file_name(pid, lwpid);
            let lines: Vec<TraceRecord> = files
                .get(&name)
                .unwrap_or_else(|| panic!("no file {name} for lwpid {lwpid}: {:?}", files.keys()))
                .iter()
                .filter(|l| l.lwpid == lwpid)
                .copied()
                .collect();
            assert!(
                lines.iter().all(|l| l.pid == pid),
                "{name} holds another pid"
            );
            (name, lines)
        })
        .collect();
    (mutex, per_thread)
}

/// Every `tr.*` file in `dir`, by file name, with its lines.
pub fn read_trace(dir: &Path) -> BTreeMap<String, Vec<TraceRecord>> {
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(dir).expect("read trace dir") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        if !tracer_model::tr::is_file_name(&name) {
            continue;
        }
        let text = fs::read_to_string(&path).expect("read trace file");
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{name} ends in a partial line"
        );
        files.insert(name, text.lines().map(record_of).collect());
    }
    files
}

/// The value of `key=value` in a workload's output line.
pub fn field<T: std::str::FromStr>(output: &str, key: &str) -> T {
    output
        .split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {output:?}"))
}

/// Records grouped by thread (lwpid), each thread's in the order given.
pub fn by_thread(lines: impl IntoIterator<Item = TraceRecord>) -> BTreeMap<u32, Vec<TraceRecord>> {
    let mut threads: BTreeMap<u32, Vec<TraceRecord>> = BTreeMap::new();
    for line in lines {
        threads.entry(line.lwpid).or_default().push(line);
    }
    threads
}

/// The two records of each call of the paired event `name` on `object`, matched per thread in
/// file order: the which=2 record is the return of that thread's last which=1 record. Panics if
/// a return has no entry before it.
pub fn paired_calls<'a>(
    lines: &'a [TraceRecord],
    name: &str,
    object: i64,
) -> Vec<(&'a TraceRecord, &'a TraceRecord)> {
    let mut open: BTreeMap<u32, &TraceRecord> = BTreeMap::new();
    let mut calls = Vec::new();
    for line in lines {
        if line.is(name, Which::Entry) {
            open.insert(line.lwpid, line);
        } else if line.is(name, Which::Return) {
            let entry = open
                .remove(&line.lwpid)
                .unwrap_or_else(|| panic!("{line:?} returns without entry"));
            if entry.a[0] == object {
                calls.push((entry, line));
            }
        }
    }
    calls
}

/// The probe placements every record test runs under: the default (lock calls written where
/// their fast path completes them, other probes where the kernel need not single-step), the
/// placement before fast paths (`--no-fast-paths`), and `--probe-at-entry`. Records must be
/// the same under each.
#[cfg(target_arch = "x86_64")]
pub const PLACEMENTS: [&[&str]; 3] = [&[], &["--no-fast-paths"], &["--probe-at-entry"]];
/// The probe placements every record test runs under: the default and `--probe-at-entry`.
/// Records must be the same under each. arm64 has no fast paths: `--no-fast-paths` is the
/// default there.
#[cfg(target_arch = "aarch64")]
pub const PLACEMENTS: [&[&str]; 2] = [&[], &["--probe-at-entry"]];

/// The line of `marker` in a workload's source: a comment after the call, given whole
/// (`/* WAIT */`) or by its word (`WAIT`).
pub fn line_of(workload: &str, marker: &str) -> u32 {
    let source = workspace_root().join(format!("tests/workloads/{workload}.c"));
    let text = std::fs::read_to_string(source).unwrap();
    let comment = match marker.starts_with("/*") {
        true => marker.to_owned(),
        false => format!("/* {marker} */"),
    };
    let at = text
        .lines()
        .position(|l| l.contains(&comment))
        .unwrap_or_else(|| panic!("no {marker} in {workload}.c"));
    at as u32 + 1
}

/// Checks `done` every `every` until it holds or `longest` has passed; whether it held. For
/// what the tracer does in its own time (a drain, a flush), which an emulated guest does
/// slower than any fixed wait would allow.
pub fn wait_until(longest: Duration, every: Duration, mut done: impl FnMut() -> bool) -> bool {
    let give_up = Instant::now() + longest;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= give_up {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// Waits until no child left by an earlier tracer to close its links (always on kernels
/// before 6.10, whose probes are perf-event uprobes; on any kernel once its targets had all
/// exited) is still closing them. Each close takes the write lock on the memory map of every
/// process that maps the probed library, and a probe hit waits for that lock asleep: a
/// workload traced meanwhile sees switches no lock call made. That matters where a child
/// closes a hundred perf-event uprobes one by one for seconds; a few uprobe_multi links, each
/// one pass over the processes, make the chance negligible, and other tests do not wait. The
/// closing children are the `thrtrace-bpf` processes that lead a session of their own, or
/// whose parent is init.
pub fn wait_for_earlier_detaches() {
    const LONGEST: Duration = Duration::from_mins(10);
    let started = Instant::now();
    while let Some(pid) = detaching_child() {
        assert!(
            started.elapsed() < LONGEST,
            "pid {pid}, left by a tracer to detach its probes, still runs after {LONGEST:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `thrtrace-bpf` process that leads its own session, or that its tracer left before it could
/// make one (its parent is then init): the child a tracer leaves to detach.
fn detaching_child() -> Option<u32> {
    fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
        let (head, rest) = stat.rsplit_once(") ")?;
        let fields: Vec<&str> = rest.split(' ').collect();
        let parent: u32 = fields.get(1)?.parse().ok()?;
        let session: u32 = fields.get(3)?.parse().ok()?;
        (head.ends_with("(thrtrace-bpf") && (session == pid || parent == 1) && fields[0] != "Z")
            .then_some(pid)
    })
}

/// A workload's path as a string argument.
pub fn workload_arg(name: &str) -> String {
    workload(name).to_str().expect("UTF-8 path").to_owned()
}

/// Runs the tracer on `workload args` launched with `options`, in a fresh directory that
/// holds the trace; panics if the tracer fails or lost records (exact counts mean nothing
/// then: that is said, not a count that is off). See [`trace_launched`].
pub fn run_workload(options: &[&str], workload: &str, args: &[&str]) -> (TempDir, Run) {
    let (dir, run) = trace_launched(options, workload, args);
    assert_eq!(
        summary_count(&run.stderr, "lost"),
        0,
        "{options:?} {workload} lost records: {}",
        run.stderr
    );
    (dir, run)
}

/// `--buffer-kib` and the ring a test's tracer is to have where `cargo xtask kernels` says
/// (`THRTRACE_TEST_BUFFER_KIB`), unless the test's `options` choose one: an emulated guest's
/// tracer drains slower than its workloads fill the default ring.
fn guest_ring(options: &[&str]) -> Vec<String> {
    match std::env::var("THRTRACE_TEST_BUFFER_KIB") {
        Ok(kib) if !options.contains(&"--buffer-kib") => vec!["--buffer-kib".into(), kib],
        _ => Vec::new(),
    }
}

/// Like [`run_workload`], for a test that needs no exact count and may lose records (futex
/// calls the kernel skipped are counted lost). It starts once earlier tracers' probes are
/// detached, so that the records' exact values (block? above all) are the workload's own.
pub fn trace_launched(options: &[&str], workload: &str, args: &[&str]) -> (TempDir, Run) {
    wait_for_earlier_detaches();
    let dir = TempDir::new(workload);
    let mut argv: Vec<String> = guest_ring(options)
        .into_iter()
        .chain(options.iter().map(std::string::ToString::to_string))
        .collect();
    argv.push("--".into());
    argv.push(workload_arg(workload));
    argv.extend(args.iter().map(std::string::ToString::to_string));
    let run = run_tracer(dir.path(), &argv);
    assert!(run.status.success(), "{argv:?}: {run:?}");
    (dir, run)
}

/// Like [`run_workload`]; returns the run and every record of every file, in time order.
pub fn trace_workload(options: &[&str], workload: &str, args: &[&str]) -> (Run, Vec<TraceRecord>) {
    let (dir, run) = run_workload(options, workload, args);
    let mut lines: Vec<TraceRecord> = read_trace(dir.path()).into_values().flatten().collect();
    lines.sort_by_key(TraceRecord::time_ns);
    (run, lines)
}

/// A deadline a workload printed as `key=SEC.NSEC`.
pub fn deadline_field(output: &str, key: &str) -> (i64, i64) {
    let value: String = field(output, key);
    let (sec, nsec) = value
        .split_once('.')
        .unwrap_or_else(|| panic!("{key}={value} is not SEC.NSEC"));
    (sec.parse().unwrap(), nsec.parse().unwrap())
}

/// Starts a workload told what to do on its standard input; returns it, its input and output,
/// and the first line it printed (its "ready" line).
pub fn start_told(
    command: &mut Command,
) -> (Child, Option<ChildStdin>, BufReader<ChildStdout>, String) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let ready = read_line(&mut stdout);
    (child, stdin, stdout, ready)
}

/// A running `mutex_gate` workload, stopped at its gate (tests/workloads/mutex_gate.c).
pub struct Gated {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Its process id.
    pub pid: u32,
    /// The address of the mutex it locks.
    pub mutex: i64,
}

impl Gated {
    /// BEFORE pairs, then the gate, then AFTER pairs in the main thread.
    pub fn start(before: u32, after: u32) -> Gated {
        Gated::start_with_threads(before, after, 0)
    }

    /// The second phase runs in `threads` threads created then (0: the main thread).
    pub fn start_with_threads(before: u32, after: u32, threads: u32) -> Gated {
        let mut command = Command::new(workload("mutex_gate"));
        command.args([before.to_string(), after.to_string(), threads.to_string()]);
        Gated::spawn(&mut command)
    }

    /// The second phase runs in `threads` threads created before the gate, which wait there
    /// making no pthread call: a tracer attached at the gate sees no thread created.
    pub fn start_with_waiting_threads(before: u32, after: u32, threads: u32) -> Gated {
        let mut command = Command::new(workload("mutex_gate"));
        command.args([
            &before.to_string(),
            &after.to_string(),
            &threads.to_string(),
            "early",
        ]);
        Gated::spawn(&mut command)
    }

    /// Runs `command`, which must end up exec'ing mutex_gate in the same process (as
    /// `unshare ... sh -c 'exec mutex_gate ...'` does), and waits at the gate.
    pub fn spawn(command: &mut Command) -> Gated {
        let (child, stdin, stdout, ready) = start_told(command);
        let (pid, mutex) = (field(&ready, "pid"), field(&ready, "mutex"));
        assert_eq!(pid, child.id(), "{ready}");
        Gated {
            child,
            stdin,
            stdout,
            pid,
            mutex,
        }
    }

    /// Opens the gate and waits until the second phase is done.
    pub fn run_phase_two(&mut self) {
        self.open();
        self.wait_until_done();
    }

    /// Opens the gate: the second phase starts.
    pub fn open(&mut self) {
        writeln!(self.stdin.as_mut().unwrap(), "go").unwrap();
    }

    /// Waits until the second phase is done.
    pub fn wait_until_done(&mut self) {
        assert_eq!(read_line(&mut self.stdout).trim(), "done");
    }

    /// Lets the process exit.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

/// A running `burst` workload (tests/workloads/burst.c), which makes known calls when told.
pub struct Burst {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Its process id.
    pub pid: u32,
    /// The address of the mutex it locks.
    pub mutex: i64,
    /// The address of the condition variable it signals.
    pub cond: i64,
}

impl Burst {
    /// Starts it; it waits to be told what to do.
    pub fn start() -> Burst {
        let (child, stdin, stdout, ready) = start_told(&mut Command::new(workload("burst")));
        Burst {
            pid: field(&ready, "pid"),
            mutex: field(&ready, "mutex"),
            cond: field(&ready, "cond"),
            child,
            stdin,
            stdout,
        }
    }

    fn tell(&mut self, command: &str, answer: &str) {
        writeln!(self.stdin.as_mut().unwrap(), "{command}").unwrap();
        assert_eq!(read_line(&mut self.stdout).trim(), answer);
    }

    /// `rounds` rounds of mutex lock, cond signal, mutex unlock; returns once they are made.
    pub fn run(&mut self, rounds: u32) {
        self.tell(&rounds.to_string(), &format!("done {rounds}"));
    }

    /// Waits `ms` milliseconds in pthread_mutex_lock for a thread that holds the mutex.
    pub fn hold(&mut self, ms: u32) {
        self.tell(&format!("hold {ms}"), &format!("held {ms}"));
    }

    /// Lets the process exit.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

/// `thrtrace-bpf ctl ARGS`, run to completion.
pub fn ctl(args: &[&str]) -> Run {
    Command::new(tracer())
        .arg("ctl")
        .args(args)
        .output()
        .expect("run thrtrace-bpf ctl")
        .into()
}

/// `ctl ARGS`, which must succeed; its standard output.
pub fn ctl_ok(args: &[&str]) -> String {
    let run = ctl(args);
    assert!(run.status.success(), "ctl {args:?}: {run:?}");
    run.stdout
}

/// The thread events' records among `events`.
pub fn thread_records(events: &[Event]) -> Vec<TraceRecord> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Thread(r) => Some(*r),
            Event::System(_) => None,
        })
        .collect()
}

/// The system events among `events`.
pub fn system_events(events: &[Event]) -> Vec<SystemEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::System(s) => Some(s.clone()),
            Event::Thread(_) => None,
        })
        .collect()
}

/// The service a profile push names a workload that a test launches under the tracer: the
/// systemd service the test itself runs in (a CI runner's), which the workload inherits, else
/// the workload's command. As `docs/agent.md` says a service is named.
pub fn pushed_service(command: &str) -> String {
    let cgroups = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let unit = cgroups
        .lines()
        .filter_map(|line| line.strip_prefix("0::"))
        .flat_map(|path| path.split('/'))
        .filter_map(|component| component.strip_suffix(".service"))
        .filter(|unit| !unit.starts_with("user@"))
        .map(|unit| unit.split_once('@').map_or(unit, |(template, _)| template))
        .rfind(|unit| !unit.is_empty());
    unit.unwrap_or(command).to_owned()
}

/// A trace name no other test uses.
pub fn unique_name(label: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{label}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The lines `reader` gives, sent as they come by a thread of their own, so that a test can
/// wait for one with a time limit (`recv_timeout`) instead of blocking for good.
pub fn lines_as_they_come(reader: impl BufRead + Send + 'static) -> mpsc::Receiver<String> {
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in reader.lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    received
}

/// The next line of `reader`, without its newline.
pub fn read_line(reader: &mut impl BufRead) -> String {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    line
}

/// Reads a system-wide tracer's lines until the one that says the workloads' C library (the
/// host's libc.so.6, the file this process maps) is probed, and returns it: other files are
/// probed before it in no set order (a static program of the host's, another test's container,
/// whose copy of libc.so.6 may be at the same path). Panics with the lines read if the tracer
/// ends first.
pub fn until_the_hosts_libc_is_traced(stderr: &mut impl BufRead) -> String {
    // The one this process maps, by its inode: another test's container-like process has a
    // copy of its own at the same path, in its own mount namespace.
    let maps = fs::read_to_string("/proc/self/maps").unwrap();
    let hosts = maps
        .lines()
        .filter_map(|line| line.split_ascii_whitespace().nth(5))
        .find(|path| path.ends_with("/libc.so.6"))
        .expect("this process maps no libc.so.6");
    let inode = std::os::unix::fs::MetadataExt::ino(&fs::metadata(hosts).unwrap());
    let said = (
        format!("tracing every process that maps {hosts} ("),
        format!(", inode {inode}): "),
    );
    let mut read = String::new();
    loop {
        let line = read_line(stderr);
        assert!(
            !line.is_empty(),
            "the tracer ended before probing {hosts}:\n{read}"
        );
        if line.contains(&said.0) && line.contains(&said.1) {
            return line;
        }
        read.push_str(&line);
    }
}

/// Starts the tracer with `--dir dir`, `extra` and `-p` for each of `pids`, and waits until it
/// says it traces each of them. An `extra` of the form VARIABLE=value goes to the environment.
pub fn start_tracer(dir: &Path, pids: &[u32], extra: &[&str]) -> (Child, BufReader<ChildStderr>) {
    let mut command = Command::new(tracer());
    command
        .arg("--dir")
        .arg(dir)
        .args(guest_ring(extra))
        .stderr(Stdio::piped());
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
            line.starts_with(&format!("thrtrace-bpf: tracing pid {pid}")),
            "{line:?}"
        );
    }
    // Then the line that says the trace has begun (system-wide, it follows the libraries').
    if !pids.is_empty() {
        let line = read_line(&mut stderr);
        assert!(line.contains("; Ctrl-C stops it"), "{line:?}");
    }
    (tracer, stderr)
}

/// Sends `signal` (`-STOP`, `-KILL`, ...) to process `pid` with kill(1).
pub fn signal(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// `mutex_contend ARGS` traced with `options` into both a log (`app.ptl`) and tr files (`tr/`)
/// in a new directory.
pub fn log_and_dir(options: &[&str], args: &[&str]) -> (TempDir, Run) {
    let dir = TempDir::new("log-and-dir");
    fs::create_dir(dir.path().join("tr")).unwrap();
    let workload = workload_arg("mutex_contend");
    let mut argv = vec!["--log", "app.ptl", "--dir", "tr"];
    argv.extend_from_slice(options);
    argv.push("--");
    argv.push(&workload);
    argv.extend_from_slice(args);
    let run = run_tracer(dir.path(), &argv);
    assert!(run.status.success(), "{argv:?}: {run:?}");
    (dir, run)
}

/// 300,000 mutex records made while the tracer is stopped, with 4 KiB rings, logged to
/// `dir/app.ptl`: most are lost. Returns the tracer's counts of records written and lost
/// (which add up to 300,000, give or take glibc's own locks).
pub fn log_with_losses(dir: &TempDir) -> (u64, u64) {
    let mut gate = Gated::start_with_threads(0, 50_000, 2);
    let log = dir.path().join("app.ptl");
    let (mut tracer, stderr) = start_tracer(
        dir.path(),
        &[gate.pid],
        &[
            "--events",
            "mutex",
            "--buffer-kib",
            "4",
            "--log",
            &log.to_string_lossy(),
        ],
    );
    let stopped = std::time::Instant::now();
    signal(tracer.id(), "-STOP");
    gate.run_phase_two();
    std::thread::sleep(std::time::Duration::from_secs(2).saturating_sub(stopped.elapsed()));
    signal(tracer.id(), "-CONT");
    gate.finish();
    assert!(tracer.wait().unwrap().success());
    let rest: String = lines_as_they_come(stderr)
        .iter()
        .map(|l| l + "\n")
        .collect();
    let (written, lost) = (
        summary_count(&rest, "records"),
        summary_count(&rest, "lost"),
    );
    assert!(lost > 0, "{rest}");
    // The mutex probes also see glibc's own recursive locks (the TLS lock taken when each
    // thread starts and exits): rmutex calls, neither written nor counted lost.
    assert_eq!(written + lost, 300_000, "{rest}");
    (written, lost)
}

/// Builds the C analyzer `tests/analyzers/NAME.c` against the workspace's `trace.h` and
/// `libposixtrace.so` (built by `cargo build --release`) into `dir`; returns the program.
pub fn build_analyzer(name: &str, dir: &Path) -> PathBuf {
    let root = workspace_root();
    let library_dir = tracer()
        .parent()
        .expect("the tracer's directory")
        .to_owned();
    assert!(
        library_dir.join("libposixtrace.so").exists(),
        "no libposixtrace.so beside the tracer: build it with `cargo build --release`"
    );
    let program = dir.join(name);
    // The library's soname is libposixtrace.so.0, as installed; cargo makes no such link.
    let soname = dir.join("libposixtrace.so.0");
    if !soname.exists() {
        std::os::unix::fs::symlink(library_dir.join("libposixtrace.so"), &soname).unwrap();
    }
    let built = Command::new("cc")
        .args([
            "-std=c11",
            "-D_POSIX_C_SOURCE=200809L",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
        ])
        .arg(&program)
        .arg(root.join(format!("tests/analyzers/{name}.c")))
        .arg("-I")
        .arg(root.join("posixtrace/include"))
        .arg(format!("-L{}", library_dir.display()))
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-lposixtrace")
        .output()
        .expect("run cc");
    assert!(
        built.status.success(),
        "{name}.c: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    program
}

/// Where Debian's glibc is, in the architecture's multiarch directory.
pub const LIBC: &str = concat!("/usr/lib/", env!("GNU_TRIPLE"), "/libc.so.6");

/// A container-like `mutex_gate` (AFTER pairs past its gate): run under `unshare --mount` with a
/// copy of libc.so.6, made in `scratch`, bind-mounted over the usual path. Returns it and the
/// copy, whose inode is the one it maps.
pub fn start_contained_gate(scratch: &TempDir, after: u32) -> (Gated, PathBuf) {
    let copy = scratch.path().join("libc.so.6");
    fs::copy(LIBC, &copy).expect("copy libc.so.6");
    let script = format!(
        "mount --bind {} {LIBC} && exec {} 0 {after}",
        copy.display(),
        workload("mutex_gate").display()
    );
    let gate = Gated::spawn(Command::new("unshare").args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ]));
    (gate, copy)
}

/// `contention`'s rounds and waiters in a PID namespace of its own.
const NAMESPACED_ROUNDS: u32 = 2;
const NAMESPACED_WAITERS: u32 = 2;

/// A root for chroot in `scratch` holding `contention` (as `/contention`), the files it loads
/// at the paths it loads them from, and an empty `/proc` for the namespace's own.
fn contention_root(scratch: &TempDir) -> PathBuf {
    let root = scratch.path().join("root");
    let program = workload("contention");
    let ldd = Command::new("ldd").arg(&program).output().unwrap();
    assert!(ldd.status.success(), "{ldd:?}");
    let loaded = String::from_utf8(ldd.stdout).unwrap();
    let files = loaded
        .split_whitespace()
        .filter(|word| word.starts_with('/'));
    for file in files {
        let inside = root.join(file.trim_start_matches('/'));
        fs::create_dir_all(inside.parent().unwrap()).unwrap();
        fs::copy(file, &inside).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    fs::create_dir_all(root.join("proc")).unwrap();
    fs::copy(&program, root.join("contention")).unwrap();
    root
}

/// Runs `contention` in a PID and mount namespace of its own under chroot, stopped at its
/// gate; traces it `--contended` into a log, by its host pid if `by_pid`, else system-wide,
/// until the gate is opened and it has exited; then checks that every holder the report
/// names is a host thread its records name, with its id in the namespace.
pub fn check_holders_in_a_pid_namespace(by_pid: bool) {
    let scratch = TempDir::new("pid-namespace");
    let root = contention_root(&scratch);
    let dir = TempDir::new("pid-namespace-trace");
    let log = dir.path().join("app.ptl");
    // Unbuffered: the log shows what the tracer has read of the threads as it goes.
    let tracer_args = ["--contended", "-u", "--log", log.to_str().unwrap()];
    let mut contained = Command::new("unshare")
        .args(["--pid", "--fork", "--mount", "--propagation", "private"])
        .arg("--mount-proc")
        .arg(format!("--root={}", root.display()))
        .args([
            "/contention",
            &NAMESPACED_ROUNDS.to_string(),
            "20",
            &NAMESPACED_WAITERS.to_string(),
        ])
        .args(["0", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(contained.stdout.take().unwrap());
    let ready = read_line(&mut stdout);
    assert!(ready.starts_with("first="), "{ready:?}");
    // unshare forks the program: pid 1 in its namespace, the one child of unshare here.
    let children = format!("/proc/{0}/task/{0}/children", contained.id());
    let children = fs::read_to_string(children).unwrap();
    let pid: u32 = children.trim().parse().unwrap();
    let pids: &[u32] = if by_pid { &[pid] } else { &[] };
    let (mut traced, mut stderr) = start_tracer(dir.path(), pids, &tracer_args);
    if !by_pid {
        let mut read = String::new();
        while !read.contains("; Ctrl-C stops it") {
            let line = read_line(&mut stderr);
            assert!(!line.is_empty(), "the tracer ended: {read}");
            read.push_str(&line);
        }
    }
    writeln!(contained.stdin.as_mut().unwrap(), "go").unwrap();
    // Its threads wait, alive, until the tracer has told the id of each in the namespace,
    // which it reads from /proc as it first sees each.
    let told = || {
        let dump = run_tracer(dir.path(), &["dump", "--format", "json", "app.ptl"]);
        let events = dump
            .stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok());
        let told = events
            .filter(|event| event["name"] == "thrtrace_thread_ns_id" && event["pid"] == pid)
            .map(|event| event["lwpid"].as_u64());
        told.collect::<std::collections::HashSet<_>>().len()
    };
    let deadline = Instant::now() + Duration::from_mins(1);
    while told() < 1 + NAMESPACED_WAITERS as usize {
        assert!(Instant::now() < deadline, "the threads' ids were not told");
        std::thread::sleep(Duration::from_millis(50));
    }
    writeln!(contained.stdin.as_mut().unwrap(), "end").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(contained.wait().unwrap().success(), "{rest}");
    if !by_pid {
        signal(traced.id(), "-INT");
    }
    assert!(traced.wait().unwrap().success());
    let report = report_json(&dir, &["app.ptl"]);
    let first = report_lock_named(&report, "first");
    let owners = first["owners"].as_array().unwrap();
    // The main thread held `first` through every wait: the host's id, 1 in the namespace.
    assert_eq!(owners.len(), 1, "{first:#}");
    assert_eq!(owners[0]["lwpid"], pid, "{first:#}");
    assert_eq!(owners[0]["namespace_lwpid"], 1, "{first:#}");
    assert_eq!(
        owners[0]["count"],
        NAMESPACED_ROUNDS.div_ceil(2) * NAMESPACED_WAITERS,
        "{first:#}"
    );
    // Every holder of every lock of the process is a thread its records name, with its id
    // in the namespace.
    let dump = run_tracer(dir.path(), &["dump", "--format", "json", "app.ptl"]);
    let recorded: std::collections::HashSet<u64> = dump
        .stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["type"] == "event" && event["pid"] == pid)
        .map(|event| event["lwpid"].as_u64().unwrap())
        .collect();
    let locks = report["locks"].as_array().unwrap();
    for lock in locks.iter().filter(|lock| lock["pid"] == pid) {
        for owner in lock["owners"].as_array().unwrap() {
            let lwpid = owner["lwpid"].as_u64().unwrap();
            assert!(recorded.contains(&lwpid), "{owner} in {recorded:?}");
            assert!(
                owner["namespace_lwpid"].as_u64().unwrap() <= 1 + u64::from(NAMESPACED_WAITERS)
            );
        }
    }
    // Each of its threads is listed with its id in the namespace: 1, then its waiters'.
    let threads = report["threads"].as_array().unwrap();
    let mut ids: Vec<u64> = threads
        .iter()
        .filter(|thread| thread["pid"] == pid)
        .map(|thread| thread["namespace_lwpid"].as_u64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (1..=1 + u64::from(NAMESPACED_WAITERS)).collect::<Vec<_>>()
    );
    let text = run_tracer(dir.path(), &["report", "--top", "100", "app.ptl"]).stdout;
    let held = format!("    held by thread {pid} (contention, 1 in its namespace): waited for ");
    assert!(text.contains(&held), "{text}");
}

/// `report --format json --top 100 ARGS` run in `dir`, parsed; panics if it fails.
pub fn report_json(dir: &TempDir, args: &[&str]) -> Value {
    let mut all = vec!["report", "--format", "json"];
    all.extend_from_slice(args);
    let run = run_tracer(dir.path(), &all);
    assert!(run.status.success(), "{run:?}");
    serde_json::from_str(&run.stdout).unwrap()
}

/// The lock named `symbol` (a global variable) in a JSON report; panics if it has none.
pub fn report_lock_named<'a>(report: &'a Value, symbol: &str) -> &'a Value {
    report["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["symbol"] == symbol)
        .unwrap_or_else(|| panic!("no lock {symbol} in {report:#}"))
}

/// The lines of a folded profile (`report --format folded`) that end at the JSON report's
/// `lock` (named by its symbol, else its address): each stack and the nanoseconds its waits
/// lasted.
pub fn folded_waits_of<'a>(folded: &'a str, lock: &Value) -> Vec<(&'a str, u64)> {
    let name = lock["symbol"]
        .as_str()
        .or(lock["address"].as_str())
        .unwrap();
    let leaf = format!("lock {name} ({})", lock["kind"].as_str().unwrap());
    folded
        .lines()
        .filter_map(|line| {
            let (stack, weight) = line.rsplit_once(' ')?;
            (stack.rsplit(';').next() == Some(leaf.as_str()))
                .then(|| (stack, weight.parse().unwrap()))
        })
        .collect()
}

/// The lock at `address` (as the report writes it) in a JSON report; panics if it has none.
pub fn report_lock<'a>(report: &'a Value, address: &Value) -> &'a Value {
    report_row(report, "locks", address)
}

/// The row of a JSON report's idle wait (a condition, a futex word used as an event) at
/// `address`.
pub fn report_idle_wait<'a>(report: &'a Value, address: &Value) -> &'a Value {
    report_row(report, "idle_waits", address)
}

/// The row of a futex word at `address` in a JSON report, in either table: a word used as a
/// lock is among the locks, one used as an event among the idle waits.
pub fn report_futex_row<'a>(report: &'a Value, address: &Value) -> &'a Value {
    report["locks"]
        .as_array()
        .into_iter()
        .chain(report["idle_waits"].as_array())
        .flatten()
        .find(|row| row["address"] == *address)
        .unwrap_or_else(|| panic!("no row {address} in locks or idle_waits of {report:#}"))
}

fn report_row<'a>(report: &'a Value, table: &str, address: &Value) -> &'a Value {
    report[table]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["address"] == *address)
        .unwrap_or_else(|| panic!("no row {address} in {table} of {report:#}"))
}

/// The functions of a report's stack (its JSON), innermost first, each without its offset
/// (`alpha_5+0x1c` is `alpha_5`).
pub fn stack_functions(stack: &Value) -> Vec<String> {
    stack["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|frame| {
            let name = frame["function"].as_str().unwrap_or_default();
            name.split_once('+')
                .map_or(name, |(name, _)| name)
                .to_owned()
        })
        .collect()
}

/// A place as the report's text and the tracer's messages write it, from a report's JSON
/// location: `worker+0x1c (queue.c:88)`.
pub fn place(at: &Value) -> String {
    format!(
        "{}+{} ({}:{})",
        at["function"].as_str().expect("a function"),
        at["function_offset"].as_str().expect("an offset"),
        at["file"].as_str().expect("a file"),
        at["line"]
    )
}

/// The GNU build-id of an ELF file, in hex, as reports write it.
pub fn build_id_of(elf: &object::File<'_>) -> String {
    use object::Object;
    let id = elf.build_id().unwrap().expect("a build-id");
    id.iter().fold(String::new(), |mut digits, byte| {
        let _ = std::fmt::Write::write_fmt(&mut digits, format_args!("{byte:02x}"));
        digits
    })
}

/// `DIR/.build-id/xx/rest.debug`, as debug packages lay their files out.
pub fn debug_file_path(dir: &Path, build_id: &str) -> PathBuf {
    dir.join(".build-id")
        .join(&build_id[..2])
        .join(format!("{}.debug", &build_id[2..]))
}

/// Traces `program`, launched, `--contended` on its mutexes into `app.ptl` in `dir`; panics if
/// the tracer fails.
pub fn trace_contended_mutexes(dir: &TempDir, program: &str) {
    let args = [
        "--contended",
        "--events",
        "mutex",
        "--log",
        "app.ptl",
        "--",
        program,
    ];
    let run = run_tracer(dir.path(), &args);
    assert!(run.status.success(), "{run:?}");
}

/// Traces the stack_chains workload `--contended` into `app.ptl` in `dir` (as
/// [`trace_contended_mutexes`]); returns the JSON report's row of its `big_lock`, the lock that
/// the profile and flame graph tests weigh their stacks against.
pub fn trace_stack_chains_big_lock(dir: &TempDir) -> Value {
    trace_contended_mutexes(dir, &workload_arg("stack_chains"));
    let report = report_json(dir, &["app.ptl"]);
    report_lock_named(&report, "big_lock").clone()
}

/// A traced run of a workload.
pub struct Traced {
    /// Holds the tr files and the log, `app.ptl`.
    pub dir: TempDir,
    /// Every record, in time order.
    pub records: Vec<TraceRecord>,
    /// Its process id, which is its main thread's lwpid.
    pub pid: u32,
    /// The line it printed first.
    pub first_line: String,
    /// What it printed after that line.
    pub rest: String,
}

/// A run of `program` with `args`, a workload that prints a line and waits for one on stdin
/// before it starts, traced with `options` from then on into tr files and a log.
pub fn traced_run(program: &Path, args: &[String], options: &[&str]) -> Traced {
    let (mut child, stdin, mut out, first_line) = start_told(Command::new(program).args(args));
    let dir = TempDir::new("traced");
    let log = dir.path().join("app.ptl").to_string_lossy().into_owned();
    let mut options = options.to_vec();
    options.extend(["--log", &log]);
    let (mut tracer, mut said) = start_tracer(dir.path(), &[child.id()], &options);
    writeln!(stdin.unwrap(), "go").unwrap();
    // Read to its end, so that its last line does not meet a closed pipe.
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{}", program.display());
    assert!(tracer.wait().unwrap().success());
    // Shown with a failure: what the tracer said of the run (losses, the summary).
    let mut tracer_said = String::new();
    said.read_to_string(&mut tracer_said).unwrap();
    eprintln!("{}: the tracer said: {tracer_said}", program.display());
    skips::note_unseen(Path::new(&log), &tracer_said);
    let mut records: Vec<TraceRecord> = read_trace(dir.path()).into_values().flatten().collect();
    records.sort_by_key(TraceRecord::time_ns);
    Traced {
        dir,
        records,
        pid: child.id(),
        first_line,
        rest,
    }
}
