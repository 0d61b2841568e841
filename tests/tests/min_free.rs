//! `--min-free`: a trace into a file system that fills up stops writing there at the floor,
//! each sink once, with its files whole (tr files end at a line's end, the log reads to its
//! closing status), says so once per sink, and counts every record it did not write (the log
//! marks where, as a `free-space` overflow); the traced program runs to its end, its exit
//! status the tracer's. The file system is a 64 MiB tmpfs the test mounts. Without a floor
//! (`--min-free 0`), a file system that fills up stops the writing there, as the floor does.

use std::{fs, path::Path, process::Command};

use thrtrace_tests::{TempDir, bpf_available, read_trace, run_tracer, summary_count, workload_arg};
use tracer_model::{
    event::{Event, LossSource, SystemEvent, SystemKind},
    log::LogReader,
};

/// A tmpfs of some MiB mounted on a fresh directory, with a `tr` directory for the tr files,
/// unmounted when dropped.
struct SmallFileSystem(TempDir);

impl SmallFileSystem {
    fn mount(label: &str, mib: u64) -> Self {
        let dir = TempDir::new(label);
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m,mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "cannot mount a tmpfs on {}",
            dir.path().display()
        );
        fs::create_dir(dir.path().join("tr")).unwrap();
        SmallFileSystem(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    /// The lines of the tr files in its `tr` directory, each file whole.
    fn tr_lines(&self) -> u64 {
        read_trace(&self.path().join("tr"))
            .values()
            .map(|lines| lines.len() as u64)
            .sum()
    }

    /// Bytes free, as `df` counts them.
    fn free(&self) -> u64 {
        let output = Command::new("stat")
            .args(["-f", "-c", "%a %S"])
            .arg(self.path())
            .output()
            .expect("run stat");
        let text = String::from_utf8(output.stdout).unwrap();
        let (blocks, size) = text.trim().split_once(' ').unwrap();
        blocks.parse::<u64>().unwrap() * size.parse::<u64>().unwrap()
    }
}

impl Drop for SmallFileSystem {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.path()).status();
    }
}

/// The number before `label` in the part of the summary line after `after`.
fn count_after(stderr: &str, after: &str, label: &str) -> u64 {
    let line = stderr
        .lines()
        .rfind(|line| line.contains(" records written, "))
        .expect("a summary line");
    let part = &line[line
        .find(after)
        .unwrap_or_else(|| panic!("{after} in {line}"))..];
    let words: Vec<&str> = part.split([' ', ',', '(']).collect();
    let at = words.iter().position(|word| *word == label).unwrap();
    words[at - 1].parse().unwrap()
}

/// The thread records of a log, and the records its free-space overflows say were not written.
fn log_counts(log: &Path) -> (u64, u64) {
    let reader = LogReader::open(log).expect("a log that reads");
    assert!(!reader.cut_short(), "the log ends whole");
    let (mut records, mut not_written) = (0, 0);
    for event in reader.events() {
        match event.expect("an event") {
            Event::Thread(_) => records += 1,
            Event::System(SystemEvent {
                kind:
                    SystemKind::Overflow {
                        lost,
                        source: LossSource::FreeSpace,
                        ..
                    },
                ..
            }) => not_written += lost,
            Event::System(_) => {}
        }
    }
    (records, not_written)
}

#[test]
fn a_trace_into_a_filling_file_system_stops_at_the_floor_whole_and_counted() {
    if !bpf_available("min_free") {
        return;
    }
    let small = SmallFileSystem::mount("min-free", 64);
    // 8 threads of 12,000 rounds of two mutexes: 576,000 records, some 48 MiB of log alone,
    // where the floor leaves 24 MiB to write.
    let workload = workload_arg("lock_mix");
    let run = run_tracer(
        small.path(),
        &[
            "--lossless",
            "--events",
            "mutex",
            "--min-free",
            "40M",
            "--stream-size",
            "1M",
            "--log",
            "app.ptl",
            "--dir",
            "tr",
            "--",
            &workload,
            "8",
            "12000",
        ],
    );
    assert!(run.status.success(), "{run:?}");
    assert!(
        run.stdout.contains("8 threads, 12000 rounds each: ok"),
        "{run:?}"
    );
    let said: Vec<&str> = run
        .stderr
        .lines()
        .filter(|line| line.contains(" free, below the 40.0 MiB that --min-free keeps free there"))
        .collect();
    assert_eq!(
        said.len(),
        2,
        "once for the log, once for the tr files: {run:?}"
    );
    assert!(
        said.iter().any(|line| line.contains("to the log app.ptl")),
        "{said:?}"
    );
    assert!(
        said.iter().any(|line| line.contains("to tr files in tr")),
        "{said:?}"
    );
    assert_eq!(summary_count(&run.stderr, "lost"), 0, "{run:?}");
    let handed = summary_count(&run.stderr, "records");
    assert!(handed >= 576_000, "{run:?}");

    let (in_log, log_not_written) = log_counts(&small.path().join("app.ptl"));
    assert!(
        in_log > 0 && log_not_written > 0,
        "{in_log} {log_not_written}"
    );
    assert_eq!(in_log + log_not_written, handed, "{run:?}");

    let in_files = small.tr_lines();
    assert_eq!(
        count_after(&run.stderr, "events in app.ptl", "records"),
        log_not_written,
        "the summary's count for the log is the log's: {run:?}"
    );
    let tr_not_written = count_after(&run.stderr, "files in tr", "records");
    assert!(in_files > 0 && tr_not_written > 0, "{run:?}");
    assert_eq!(in_files + tr_not_written, handed, "{run:?}");

    // What was written after the floor was seen (the stream's last second, the files' buffers,
    // the log's close) is a small part of what the floor keeps.
    assert!(
        small.free() >= 32 << 20,
        "{} bytes free: {run:?}",
        small.free()
    );
}

#[test]
fn a_trace_into_a_file_system_that_fills_up_goes_on_and_counts_what_it_could_not_write() {
    if !bpf_available("full_file_system") {
        return;
    }
    let small = SmallFileSystem::mount("full", 2);
    // 2 threads of 200,000 lock/unlock pairs: 800,000 records, some 50 MiB of tr lines.
    let workload = workload_arg("bench_mutex");
    let run = run_tracer(
        small.path(),
        &[
            "--events",
            "mutex",
            "--min-free",
            "0",
            "--log",
            "app.ptl",
            "--dir",
            "tr",
            "--",
            &workload,
            "2",
            "200000",
        ],
    );
    assert!(run.status.success(), "{run:?}");
    assert!(run.stdout.contains("ops=400000"), "{run:?}");
    for (dir, sink) in [("tr", "tr files in tr"), (".", "the log app.ptl")] {
        let said = format!(
            "thrtrace-bpf: {dir} is full: no more is written to {sink}; the trace goes on, and \
             counts what is not written (--min-free keeps space free)"
        );
        let times = run.stderr.lines().filter(|line| *line == said).count();
        assert_eq!(times, 1, "{said}: {run:?}");
    }
    assert_eq!(small.free(), 0);
    let handed = summary_count(&run.stderr, "records");
    assert!(handed >= 800_000, "{run:?}");
    let tr_not_written = count_after(&run.stderr, "files in tr", "records");
    let in_files = small.tr_lines();
    assert!(in_files > 0 && tr_not_written > 0, "{run:?}");
    assert!(in_files + tr_not_written <= handed, "{run:?}");
    assert!(run.stderr.contains(" not written: tr filled up"), "{run:?}");
}
