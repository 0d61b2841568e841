//! Traces the bundled producer/consumer workload and shows the result.

use std::fs;

use anyhow::{Context, Result};
use tracer_common::EventDef;

use crate::{
    setup,
    shell::{build_tracer, command, compile_workload, require_root, run, workspace_root},
};

/// Lines shown from each of the first files.
const SHOWN_LINES: usize = 6;

pub fn run_demo() -> Result<()> {
    setup::ensure_prerequisites()?;
    require_root("demo")?;
    let tracer = build_tracer()?;
    let workload = compile_workload("cond_prodcons")?;
    let dir = workspace_root().join("target/demo-trace");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;

    eprintln!(
        "\n$ thrtrace-bpf --events mutex:cond --dir {} -- cond_prodcons 2 200",
        dir.display()
    );
    run(command(&tracer)
        .args(["--events", "mutex:cond", "--dir"])
        .arg(&dir)
        .arg("--")
        .arg(&workload)
        .args(["2", "200"]))?;

    let mut files: Vec<_> = fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.sort();
    println!("\nOne file per thread in {}:", dir.display());
    for file in &files {
        let text = fs::read_to_string(file)?;
        let name = file.file_name().context("file name")?.to_string_lossy();
        println!("  {name}  {} records", text.lines().count());
    }
    for file in files.iter().take(2) {
        println!(
            "\n{}  (time1:time2:lwpid:pid:tid:event1:event2:which:a1:a2:a3:a4:a5)",
            file.display()
        );
        for line in fs::read_to_string(file)?.lines().take(SHOWN_LINES) {
            println!("  {line:<90} {}", describe(line));
        }
    }
    Ok(())
}

/// The event's seed name and which half a record is, from the shared event table.
fn describe(line: &str) -> String {
    let fields: Vec<u16> = line
        .split(':')
        .skip(5)
        .take(3)
        .filter_map(|f| f.parse().ok())
        .collect();
    let [event1, event2, which] = fields[..] else {
        return String::new();
    };
    let name = EventDef::find(event1, event2).map_or("?", |e| e.name);
    match which {
        1 => format!("{name} (entry)"),
        2 => format!("{name} (return)"),
        _ => name.to_owned(),
    }
}
