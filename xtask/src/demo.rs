//! Traces a bundled workload whose locks are contended, with call stacks, then shows the report
//! of its log and where the trace files and the log are.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Stdio,
};

use anyhow::{Context, Result};
use tracer_common::{EventDef, Which};
use tracer_model::tr;

use crate::{
    setup,
    shell::{build_tracer, command, require_root, run, workspace_root},
};

/// `tests/workloads/contention.c`: 3 rounds in which the main thread holds each lock 50 ms while
/// 3 waiter threads block on it (the mutexes `first` and `second`, the semaphore `sem`, the
/// read-write lock `rw`).
const WORKLOAD: &str = "contention";
const WORKLOAD_ARGS: [&str; 3] = ["3", "50", "3"];

/// Lines shown from one waiter's file.
const SHOWN_LINES: usize = 4;

pub fn run_demo() -> Result<()> {
    setup::ensure_prerequisites()?;
    require_root("demo")?;
    let tracer = build_tracer()?;
    let workload = compile_with_lines(WORKLOAD)?;
    let dir = workspace_root().join("target/demo-trace");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    let log = dir.join("demo.ptl");

    eprintln!(
        "\nTracing tests/workloads/{WORKLOAD}.c: 3 threads block on two mutexes, a semaphore and a \
         read-write lock that the main thread holds 50 ms at a time; every call is recorded, with \
         its call stack.\n\
         \n$ thrtrace-bpf --stacks on --dir {} --log {} -- {WORKLOAD} {}",
        dir.display(),
        log.display(),
        WORKLOAD_ARGS.join(" ")
    );
    // The workload's own output (its locks' addresses, its timing) is left out.
    run(command(&tracer)
        .args(["--stacks", "on", "--dir"])
        .arg(&dir)
        .arg("--log")
        .arg(&log)
        .arg("--")
        .arg(&workload)
        .args(WORKLOAD_ARGS)
        .stdout(Stdio::null()))?;

    println!(
        "\nThe most waited-for mutex, who held it, and the stacks that waited and released it:\n\
         \n$ thrtrace-bpf report --kind mutex --top 1 {}",
        log.display()
    );
    run(command(&tracer)
        .args(["report", "--kind", "mutex", "--top", "1"])
        .arg(&log))?;

    show_where(&dir, &log)
}

/// Compiles `tests/workloads/NAME.c` with debug information, so that the report names source
/// lines, into `target/demo/NAME`.
fn compile_with_lines(name: &str) -> Result<PathBuf> {
    let out_dir = workspace_root().join("target/demo");
    fs::create_dir_all(&out_dir)?;
    let binary = out_dir.join(name);
    let source = workspace_root()
        .join("tests/workloads")
        .join(format!("{name}.c"));
    run(command("cc")
        .args(["-g", "-O2", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source))?;
    Ok(binary)
}

/// Where the log and the tr files are, with the first lines of one waiter's file explained.
fn show_where(dir: &Path, log: &Path) -> Result<()> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|f| {
        f.file_name()
            .is_some_and(|n| tr::is_file_name(&n.to_string_lossy()))
    });
    files.sort();

    println!("\nThe trace is in {}:", dir.display());
    println!(
        "  {:<16} the log: every event with its caller and stack (thrtrace-bpf report, dump, info, convert)",
        log.file_name().context("log name")?.to_string_lossy()
    );
    for file in &files {
        let name = file.file_name().context("file name")?.to_string_lossy();
        let records = fs::read_to_string(file)?.lines().count();
        println!("  {name:<16} {records} records of one thread");
    }
    // The main thread's file comes first; the second is the first waiter's.
    if let Some(file) = files.get(1).or(files.first()) {
        println!(
            "\nThe first lines of {} (time1:time2:lwpid:pid:tid:event1:event2:which:a1:a2:a3:a4:a5):",
            file.display()
        );
        for line in fs::read_to_string(file)?.lines().take(SHOWN_LINES) {
            println!("  {line:<90} {}", describe(line));
        }
    }
    println!(
        "\nEvery lock: thrtrace-bpf report {}\n\
         On a running process, only the calls that waited or woke, with their stacks:\n  \
         sudo thrtrace-bpf --contended --log app.ptl -p PID, then thrtrace-bpf report app.ptl\n\
         The fields and events: docs/events.md; using it: docs/guide.md.",
        log.display()
    );
    Ok(())
}

/// The event's seed name and which half a record is, from the shared event table.
fn describe(line: &str) -> String {
    let Ok(record) = tr::parse_line(line) else {
        return String::new();
    };
    let name = EventDef::find(record.event1, record.event2).map_or("?", |e| e.name);
    match record.which {
        Which::Entry => format!("{name} (entry)"),
        Which::Return => format!("{name} (return)"),
        Which::Whole => name.to_owned(),
    }
}
