//! `cargo xtask bench --against REV`: the full trace's cost per pair and its BPF programs' run
//! times, the tracer's start, exit and CPU per record, call stacks under load
//! ([`super::stacks`]) and a real server traced ([`super::server_rounds`]), for the tracer
//! built here and for the one of commit REV, built apart, run after run on the same machine. The main bench prints ratios within one build; a
//! change that makes the programs dearer shows only beside an older build.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, bail};

use super::{
    Consumed, Mode, SINK_PAIRS, SinkMode, WORKLOADS, Workload, consume, empty_dir, measure, median,
    program_costs,
    server_rounds::{self, ServerRound},
    stacks::StacksUnderLoad,
    start_and_exit, trace_dir,
};
use crate::shell::{build_tracer, command, compile_workload, run, workspace_root};

/// The workloads compared: one thread's uncontended pairs of each kind, in a process that has
/// that thread alone (glibc's single-threaded paths) and in one with a second.
const COMPARED: [&str; 6] = [
    "mutex lock+unlock, single-threaded process",
    "mutex lock+unlock, 1 thread beside main",
    "sem post+wait, single-threaded process",
    "sem post+wait, beside a second thread",
    "rwlock rdlock+unlock, single-threaded process",
    "rwlock rdlock+unlock, beside a second thread",
];

/// One build's figures for one workload, run by run.
#[derive(Default)]
struct Figures {
    traced: Vec<f64>,
    empty: Vec<f64>,
    entry: Vec<f64>,
    exit: Vec<f64>,
    fast: Vec<f64>,
}

impl Figures {
    fn take(&mut self, tracer: &Path, program: &Path, workload: &Workload) -> Result<()> {
        let dir = trace_dir();
        empty_dir(&dir)?;
        self.traced
            .push(measure(tracer, program, workload, Mode::Placed, &dir)?.ns_per_op);
        empty_dir(&dir)?;
        self.empty
            .push(measure(tracer, program, workload, Mode::FloorPlaced, &dir)?.ns_per_op);
        empty_dir(&dir)?;
        let costs = program_costs(tracer, program, workload, Mode::Placed, &dir)?;
        self.entry.push(costs[0]);
        self.exit.push(costs[1]);
        self.fast.push(costs[2]);
        Ok(())
    }

    fn medians(&self) -> [f64; 5] {
        [
            median(&self.traced),
            median(&self.empty),
            median(&self.entry),
            median(&self.exit),
            median(&self.fast),
        ]
    }
}

/// How the tracer is started in front of a short command: a full trace of one category, and
/// `--contended` (whose futex hook is chosen at the start).
const LAUNCHES: [(&str, &[&str]); 2] = [
    ("full trace (--events mutex)", &["--events", "mutex"]),
    ("--contended", &["--contended"]),
];

/// The sinks whose consumer's CPU per record is compared.
const CONSUMER_SINKS: [SinkMode; 2] = [SinkMode::TrFiles, SinkMode::Log];

/// One build's start, exit and consumer, run by run: per launch, ms to ready and ms from the
/// command's end to the tracer's; per sink, the tracer's runs with records and its CPU in the
/// same runs with none (what starting and ending cost it, mostly the kernel's verifier).
#[derive(Default)]
struct Running {
    ready: [Vec<f64>; 2],
    exit: [Vec<f64>; 2],
    consumed: [Vec<Consumed>; 2],
    idle_cpu_ns: [Vec<f64>; 2],
}

impl Running {
    fn take(&mut self, tracer: &Path, program: &Path) -> Result<()> {
        let dir = trace_dir();
        for (l, (_, options)) in LAUNCHES.iter().enumerate() {
            empty_dir(&dir)?;
            let [ready, exit] = start_and_exit(tracer, &dir, options, program)?;
            self.ready[l].push(ready);
            self.exit[l].push(exit);
        }
        for (s, &sink) in CONSUMER_SINKS.iter().enumerate() {
            empty_dir(&dir)?;
            let consumed = consume(tracer, &dir, sink, (SINK_PAIRS, 1), None)?;
            self.consumed[s].push(consumed);
            empty_dir(&dir)?;
            let idle = consume(tracer, &dir, sink, (0, 1), None)?;
            self.idle_cpu_ns[s].push(idle.cpu_ns);
        }
        Ok(())
    }

    /// Its rows: what, and the median.
    fn medians(&self) -> Vec<(String, f64)> {
        let launches = LAUNCHES.iter().enumerate().flat_map(|(l, (name, _))| {
            [
                (
                    format!("ready: ms from start, {name}"),
                    median(&self.ready[l]),
                ),
                (
                    format!("exit: ms after the command's, {name}"),
                    median(&self.exit[l]),
                ),
            ]
        });
        let sinks = CONSUMER_SINKS.iter().enumerate().flat_map(|(s, sink)| {
            let per_record: Vec<f64> = self.consumed[s]
                .iter()
                .map(Consumed::cpu_per_record)
                .collect();
            let idle_ns = median(&self.idle_cpu_ns[s]);
            let sink = sink.label();
            [
                (
                    format!("tracer CPU per record (ns), {sink}"),
                    median(&per_record),
                ),
                (
                    format!("of which start and exit: tracer CPU (ms) with no records, {sink}"),
                    idle_ns / 1e6,
                ),
                (
                    format!("beyond start and exit: tracer CPU per record (ns), {sink}"),
                    Consumed::per_record_beyond(&self.consumed[s], idle_ns),
                ),
            ]
        });
        launches.chain(sinks).collect()
    }
}

pub fn run_against(rev: &str, reps: usize) -> Result<()> {
    let (name, older) = older_tracer(rev)?;
    let tracer = build_tracer()?;
    let workloads: Vec<&Workload> = COMPARED
        .iter()
        .map(|name| {
            WORKLOADS
                .iter()
                .find(|w| w.name == *name)
                .with_context(|| format!("no workload {name}"))
        })
        .collect::<Result<_>>()?;
    let mut figures: Vec<[Figures; 2]> = workloads.iter().map(|_| Default::default()).collect();
    let mut stacks: [StacksUnderLoad; 2] = Default::default();
    let server = server_rounds::start_server()?;
    let mut server_rounds: [Vec<ServerRound>; 2] = Default::default();
    let mut running: [Running; 2] = Default::default();
    let short_command = compile_workload("bench_mutex")?;
    for rep in 1..=reps {
        eprintln!("xtask: repetition {rep} of {reps}");
        let [stacks_then, stacks_now] = &mut stacks;
        let [server_then, server_now] = &mut server_rounds;
        let [running_then, running_now] = &mut running;
        let mut builds = [
            (stacks_then, server_then, running_then, &older),
            (stacks_now, server_now, running_now, &tracer),
        ];
        if rep % 2 == 0 {
            builds.reverse();
        }
        for (stacks, server_rounds, running, tracer) in builds {
            stacks.take(tracer, &trace_dir())?;
            server_rounds.push(ServerRound::take(tracer, &server, &trace_dir())?);
            running.take(tracer, &short_command)?;
        }
        for (workload, [then, now]) in workloads.iter().zip(&mut figures) {
            let program = compile_workload(workload.program)?;
            // Alternately first, so that drift within a repetition hits both alike.
            let mut builds = [(&mut *then, &older), (&mut *now, &tracer)];
            if rep % 2 == 0 {
                builds.reverse();
            }
            for (figures, tracer) in builds {
                figures.take(tracer, &program, workload)?;
            }
        }
    }
    for (workload, [then, now]) in workloads.iter().zip(&figures) {
        let (
            [t_traced, t_empty, t_entry, t_exit, t_fast],
            [n_traced, n_empty, n_entry, n_exit, n_fast],
        ) = (then.medians(), now.medians());
        println!(
            "\n| {}, median of {reps} | {name} | now | now / then |",
            workload.name
        );
        println!("|---|---|---|---|");
        for (what, then, now) in [
            ("traced, probes placed: ns per pair", t_traced, n_traced),
            ("empty programs at the same points", t_empty, n_empty),
            ("BPF entry program: ns per run", t_entry, n_entry),
            ("BPF return program: ns per run", t_exit, n_exit),
            ("BPF fast-path program: ns per run", t_fast, n_fast),
        ] {
            // A program the older build does not have ran 0 times there.
            let ratio = match then > 0.0 {
                true => format!("{:.2}", now / then),
                false => "-".into(),
            };
            println!("| {what} | {then:.0} | {now:.0} | {ratio} |");
        }
        println!(
            "| traced / empty | {:.2} | {:.2} | |",
            t_traced / t_empty,
            n_traced / n_empty
        );
    }
    println!("\n| start, exit and consumer, median of {reps} | {name} | now | now / then |");
    println!("|---|---|---|---|");
    for ((what, then), (_, now)) in running[0].medians().into_iter().zip(running[1].medians()) {
        println!("| {what} | {then:.0} | {now:.0} | {:.2} |", now / then);
    }
    super::stacks::print(&[(&name, &stacks[0]), ("now", &stacks[1])], reps);
    server_rounds::print(
        &[(&name, &server_rounds[0]), ("now", &server_rounds[1])],
        reps,
    );
    Ok(())
}

/// The tracer of commit `rev`, built from its tree (exported under target/, with a target
/// directory shared by such builds) unless it is there; its short name and path. The files
/// are given the time of their export (`tar -m`), not of the commit: cargo rebuilds a path
/// crate only when its sources are newer than what it built.
fn older_tracer(rev: &str) -> Result<(String, PathBuf)> {
    let resolved = command("git")
        .args(["rev-parse", "--short", "--verify", "--quiet"])
        .arg(format!("{rev}^{{commit}}"))
        .output()?;
    if !resolved.status.success() {
        bail!("{rev} is not a commit of this repository: give a commit, tag or branch");
    }
    let short = String::from_utf8_lossy(&resolved.stdout).trim().to_owned();
    let root = workspace_root().join("target/bench-against");
    let binary = root.join(format!("thrtrace-bpf-{short}"));
    if binary.exists() {
        return Ok((short, binary));
    }
    let tree = root.join(&short);
    let _ = fs::remove_dir_all(&tree);
    fs::create_dir_all(&tree)?;
    run(command("sh").arg("-c").arg(format!(
        "git archive {short} | tar -x -m -C '{}'",
        tree.display()
    )))?;
    eprintln!("xtask: building {short}'s tracer in {}", tree.display());
    run(command("cargo")
        .current_dir(&tree)
        .env("CARGO_TARGET_DIR", root.join("target"))
        .args(["build", "--release", "--package", "tracer-user"]))?;
    let built = root.join("target/release/thrtrace-bpf");
    if !built.exists() {
        bail!("{short}'s build left no {}", built.display());
    }
    fs::copy(&built, &binary)?;
    Ok((short, binary))
}
