//! `--cgroup` traces only the processes in a cgroup (v2), one that enters it after the trace
//! began included; the log tells each traced process's cgroup, and the report names it.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use thrtrace_tests::{
    Gated, TempDir, bpf_available, paired_calls, prerequisite, read_line, report_json, run_tracer,
    signal, start_tracer, system_events, thread_records,
};
use tracer_model::{event::SystemKind, log::LogReader};

/// A cgroup the test makes in the cgroup v2 hierarchy, removed when dropped (its processes
/// have exited by then; a cgroup below it, dropped first).
struct TestCgroup {
    directory: PathBuf,
    /// As /proc/PID/cgroup names it.
    path: String,
}

impl TestCgroup {
    /// One at the hierarchy's root, or `None` (the test skipped) where there is no cgroup v2.
    fn new(test: &str) -> Option<TestCgroup> {
        // A hybrid host mounts v2 below the v1 controllers.
        let root = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .into_iter()
            .find(|root| Path::new(root).join("cgroup.procs").exists());
        if !prerequisite(
            test,
            root.is_none()
                .then_some("no cgroup v2 hierarchy is mounted"),
        ) {
            return None;
        }
        let name = format!("thrtrace-{test}-{}", std::process::id());
        Some(TestCgroup::made(
            Path::new(root?).join(&name),
            format!("/{name}"),
        ))
    }

    /// One below it.
    fn below(&self, name: &str) -> TestCgroup {
        TestCgroup::made(self.directory.join(name), format!("{}/{name}", self.path))
    }

    fn made(directory: PathBuf, path: String) -> TestCgroup {
        fs::create_dir(&directory).unwrap();
        TestCgroup { directory, path }
    }

    /// Moves process `pid`, all its threads, into it.
    fn enter(&self, pid: u32) {
        fs::write(self.directory.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.directory);
    }
}

#[test]
fn only_the_processes_in_the_cgroup_are_traced_one_that_enters_it_later_too() {
    if !bpf_available("cgroup") {
        return;
    }
    let Some(selected) = TestCgroup::new("cgroup") else {
        return;
    };
    let below = selected.below("below");
    let mut inside = Gated::start(0, 200);
    selected.enter(inside.pid);
    let mut outside = Gated::start(0, 300);
    let mut later = Gated::start(0, 400);

    let dir = TempDir::new("cgroup-trace");
    let log = dir.path().join("app.ptl");
    // Named by its directory, which the tracer names as /proc/PID/cgroup does.
    let options = [
        "--events",
        "mutex",
        "--cgroup",
        selected.directory.to_str().unwrap(),
        "-u",
        "--log",
        log.to_str().unwrap(),
    ];
    let (mut traced, mut stderr) = start_tracer(dir.path(), &[], &options);
    let begun = loop {
        let line = read_line(&mut stderr);
        assert!(!line.is_empty(), "the tracer ended before it began");
        if line.contains("; Ctrl-C stops it") {
            break line;
        }
    };
    assert!(
        begun.contains(&format!(
            "of every process in cgroup {} into",
            selected.path
        )),
        "{begun}"
    );

    inside.run_phase_two();
    outside.run_phase_two();
    // Into a cgroup below the one named, after the trace began.
    below.enter(later.pid);
    later.run_phase_two();
    // A process's cgroup is read as its first records are drawn: they live until it is told.
    let told = || {
        let events = LogReader::open(&log)
            .map(|reader| reader.events().filter_map(Result::ok).collect::<Vec<_>>())
            .unwrap_or_default();
        system_events(&events)
            .iter()
            .filter(|e| matches!(e.kind, SystemKind::ProcessCgroup { .. }))
            .count()
    };
    let deadline = Instant::now() + Duration::from_mins(1);
    while told() < 2 {
        assert!(Instant::now() < deadline, "the cgroups were not told");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (inside_pid, inside_mutex) = (inside.pid, inside.mutex);
    let (later_pid, later_mutex) = (later.pid, later.mutex);
    inside.finish();
    outside.finish();
    later.finish();
    signal(traced.id(), "-INT");
    assert!(traced.wait().unwrap().success());

    let events: Vec<_> = LogReader::open(&log)
        .unwrap()
        .events()
        .map(Result::unwrap)
        .collect();
    let records = thread_records(&events);
    let of = |pid: u32| -> Vec<_> { records.iter().filter(|r| r.pid == pid).copied().collect() };
    assert!(
        records
            .iter()
            .all(|r| r.pid == inside_pid || r.pid == later_pid),
        "records of a process outside the cgroup"
    );
    assert_eq!(
        paired_calls(&of(inside_pid), "mutex_lock", inside_mutex).len(),
        200
    );
    // Its calls made after it entered the cgroup, all of them.
    assert_eq!(
        paired_calls(&of(later_pid), "mutex_lock", later_mutex).len(),
        400
    );
    let cgroups: Vec<(u32, String, String)> = system_events(&events)
        .into_iter()
        .filter_map(|e| match e.kind {
            SystemKind::ProcessCgroup {
                path, container, ..
            } => Some((e.pid, path, container)),
            _ => None,
        })
        .collect();
    let cgroup_of = BTreeMap::from([
        (inside_pid, selected.path.as_str()),
        (later_pid, below.path.as_str()),
    ]);
    let told: BTreeMap<u32, (&str, &str)> = cgroups
        .iter()
        .map(|(pid, path, container)| (*pid, (path.as_str(), container.as_str())))
        .collect();
    assert_eq!(cgroups.len(), 2, "{cgroups:?}");
    assert_eq!(
        told,
        cgroup_of
            .iter()
            .map(|(&pid, &path)| (pid, (path, "")))
            .collect()
    );

    let report = report_json(&dir, &["app.ptl"]);
    let threads = report["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2, "{report:#}");
    for row in threads.iter().chain(report["locks"].as_array().unwrap()) {
        let pid = row["pid"].as_u64().unwrap() as u32;
        assert_eq!(row["cgroup"], cgroup_of[&pid], "{row:#}");
    }
    // The lock tables (`top` draws them too) say whose lock each is, where.
    let text = run_tracer(dir.path(), &["report", "app.ptl"]).stdout;
    for (pid, path) in &cgroup_of {
        let whose = format!("\n    in process {pid} (mutex_gate), cgroup {path}\n");
        assert!(text.contains(&whose), "{whose:?} in\n{text}");
    }
    // The timeline labels each process with its cgroup.
    let timeline = dir.path().join("timeline.json");
    let converted = run_tracer(
        dir.path(),
        &[
            "convert",
            "--to",
            "perfetto",
            "app.ptl",
            timeline.to_str().unwrap(),
        ],
    );
    assert!(converted.status.success(), "{converted:?}");
    let timeline: serde_json::Value =
        serde_json::from_slice(&fs::read(&timeline).unwrap()).unwrap();
    let labels: BTreeMap<u32, String> = timeline["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_labels")
        .map(|e| {
            let pid = e["pid"].as_u64().unwrap() as u32;
            (pid, e["args"]["labels"].as_str().unwrap().to_owned())
        })
        .collect();
    let expected: BTreeMap<u32, String> = cgroup_of
        .iter()
        .map(|(&pid, path)| (pid, format!("cgroup {path}")))
        .collect();
    assert_eq!(labels, expected);
    // So does a CTF trace, in each process's stream.
    let ctf = dir.path().join("ctf");
    let converted = run_tracer(
        dir.path(),
        &["convert", "--to", "ctf", "app.ptl", ctf.to_str().unwrap()],
    );
    assert!(converted.status.success(), "{converted:?}");
    let metadata = fs::read_to_string(ctf.join("metadata")).unwrap();
    assert!(metadata.contains("name = \"thrtrace_process_cgroup\";"));
    for (pid, path) in &cgroup_of {
        let stream = fs::read(ctf.join(format!("process-{pid}"))).unwrap();
        let path = format!("{path}\0").into_bytes();
        assert!(
            stream.windows(path.len()).any(|w| w == path),
            "process-{pid}"
        );
    }
    // A row per cgroup: threads, acquired, contended.
    let text = run_tracer(dir.path(), &["report", "--by", "cgroup", "app.ptl"]).stdout;
    for (pid, path, acquired) in [
        (inside_pid, &selected.path, "200"),
        (later_pid, &below.path, "400"),
    ] {
        let row = format!("  {path}: {pid} (mutex_gate)");
        let line = text
            .lines()
            .find(|line| line.ends_with(&row))
            .unwrap_or_else(|| panic!("no row {row:?} in\n{text}"));
        let columns: Vec<&str> = line.split_whitespace().take(3).collect();
        assert_eq!(columns, ["1", acquired, "0"], "{line}");
    }
}

#[test]
fn a_cgroup_that_is_not_there_is_refused_in_one_line() {
    let run = run_tracer(Path::new("."), &["--cgroup", "/no/such/cgroup/here"]);
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    // Where the host has no cgroup v2 at all, the line says that instead.
    assert!(
        run.stderr
            .starts_with("thrtrace-bpf: --cgroup /no/such/cgroup/here: no such cgroup in ")
            || run.stderr.contains("mounts no cgroup2 file system"),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
}
