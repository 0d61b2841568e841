//! `cargo xtask bench`: ns per pthread_mutex_lock + unlock pair in a tight loop, measured side
//! by side in one run, repetitions interleaved so that drift hits every row alike:
//! - untraced;
//! - the floor: the same probes with BPF programs that do nothing (`--empty-programs`);
//! - traced by thrtrace-bpf, full records written to tr.* files.

use std::{fs, path::Path};

use anyhow::{Context, Result, bail};

use crate::{
    setup,
    shell::{build_tracer, command, compile_workload, output, require_root, workspace_root},
};

const UNTRACED_PAIRS: &str = "5000000";
const TRACED_PAIRS: &str = "100000";

struct Row {
    name: &'static str,
    tracer_args: Option<&'static [&'static str]>,
    ns_per_pair: Vec<f64>,
    lost: u64,
}

pub fn run(reps: usize) -> Result<()> {
    setup::ensure_prerequisites()?;
    require_root("bench")?;
    let tracer = build_tracer()?;
    let workload = compile_workload("bench_mutex")?;
    let dir = workspace_root().join("target/bench-trace");
    let mut rows = [
        Row {
            name: "untraced",
            tracer_args: None,
            ns_per_pair: vec![],
            lost: 0,
        },
        Row {
            name: "floor: empty BPF programs",
            tracer_args: Some(&["--events", "mutex", "--empty-programs"]),
            ns_per_pair: vec![],
            lost: 0,
        },
        Row {
            name: "thrtrace-bpf, tr.* files",
            tracer_args: Some(&["--events", "mutex"]),
            ns_per_pair: vec![],
            lost: 0,
        },
    ];
    for rep in 1..=reps {
        eprintln!("xtask: repetition {rep} of {reps}");
        for row in &mut rows {
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir)?;
            let (ns, lost) = measure(&tracer, &workload, &dir, row.tracer_args)?;
            row.ns_per_pair.push(ns);
            row.lost += lost;
        }
    }
    let _ = fs::remove_dir_all(&dir);

    let median = |row: &Row| {
        let mut v = row.ns_per_pair.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let untraced = median(&rows[0]);
    println!("\npthread_mutex_lock + unlock, 1 thread, median of {reps} runs");
    println!(
        "{:<28} {:>12} {:>12} {:>10}",
        "", "ns per pair", "x untraced", "lost"
    );
    for row in &rows {
        let ns = median(row);
        println!(
            "{:<28} {:>12.1} {:>12.1} {:>10}",
            row.name,
            ns,
            ns / untraced,
            row.lost
        );
    }
    println!("traced / floor: {:.2}", median(&rows[2]) / median(&rows[1]));
    Ok(())
}

/// One run: the workload's own ns per pair, and the records the tracer reported lost.
fn measure(
    tracer: &Path,
    workload: &Path,
    dir: &Path,
    args: Option<&[&str]>,
) -> Result<(f64, u64)> {
    let out = match args {
        None => output(command(workload).arg(UNTRACED_PAIRS))?,
        Some(args) => output(
            command(tracer)
                .args(args)
                .arg("--dir")
                .arg(dir)
                .arg("--")
                .arg(workload)
                .arg(TRACED_PAIRS),
        )?,
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ns = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ns_per_pair="))
        .context("the workload printed no ns_per_pair")?
        .parse()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lost = match args {
        None => 0,
        Some(_) => {
            let summary = stderr.lines().last().unwrap_or_default();
            let Some(lost) = summary.split(", ").find_map(|p| p.strip_suffix(" lost")) else {
                bail!("no summary line from the tracer: {stderr}");
            };
            lost.parse()?
        }
    };
    Ok((ns, lost))
}
