//! `cargo xtask bench`: what tracing costs the traced process, measured side by side in one
//! run, repetitions interleaved so that drift hits every row alike. For each workload (a C
//! program that times its own loop, so start-up and attach are not counted):
//! - untraced;
//! - thrtrace-bpf with probe placement, full records written to tr.* files;
//! - thrtrace-bpf with `--probe-at-entry`;
//! - thrtrace-bpf with `--lossless` (what stopping a target that fills a ring costs one the
//!   consumer keeps up with: nothing, if it never fills one);
//! - the floor: BPF programs that do nothing, at the entry (`--empty-programs --probe-at-entry`);
//! - the same at the placed probes (`--empty-programs`): what the programs cost beyond their
//!   traps is thrtrace-bpf's time over this one's (the aim is at most 1.3x);
//! - a stopped trace at the same probes (`--stopped --probe-at-entry`, as after `ctl stop`):
//!   what a stopped or filtered-out event costs against the floor;
//! - bpftrace (installed if missing): a uprobe and a uretprobe on each function, printing the
//!   record fields to a file;
//! - thrtrace-bpf `--contended`: probes on the slow paths only, run with the untraced run's
//!   operations (it costs an uncontended call nothing, so the difference is in the noise),
//!   with its default call stacks and with `--stacks off`;
//! - thrtrace-bpf with `--stacks on`: the full trace with every entry record's call stack.
//!
//! Call stacks under load ([`stacks`]): a waiter and a waker at full speed, traced
//! system-wide `--contended`: the share of records with their stack, the cost, the tracer's CPU.
//!
//! A contended workload (tests/workloads/contention.c: threads blocking on two mutexes, a
//! semaphore and a read-write lock, and making uncontended calls between) is one of them, and
//! real programs traced whole, `sysbench mutex`, `sysbench threads` and `pigz` (installed if
//! missing), are timed untraced, with `--contended`, with full tracing and with it `--no-fast-paths`. For the contended workload, what a record's call
//! stack costs: the tracer's CPU per record and the BPF programs' time per run, with stacks and
//! without. A real server under load (a private MariaDB, Debian's `mariadb-server`, driven by
//! sysbench: `server`), after a round to warm it, serves rounds untraced, traced `--contended`
//! with its stacks, traced and untraced again: the transaction rates' ratio, repetition by
//! repetition.
//!
//! What a `--contended` trace's futex hook costs processes it does not trace: a syscall-heavy
//! one (tests/workloads/bench_syscalls.c: getppid and uncontended futex wakes) untraced and
//! beside a trace of an idle process, for each hook forced with `--futex-hook`; and the traced
//! process's uncontended `std::sync::Mutex` lock+unlock (xtask/workloads/std_mutex.rs),
//! untraced and traced; both in runs untraced, traced, traced, untraced.
//!
//! Then what `--follow` costs a target's thread and process creation (it holds targets under
//! ptrace), the tracer's own CPU time per record for each sink (tr files; the log; both, with
//! the default consumer threads and with two), the records per second written to tr files
//! and a log against the number of producer threads (1, 2, one per CPU) with one consumer
//! thread and with two, with the tracer's CPU share, what a `--pyroscope` push costs the
//! tracer (its CPU with a push a second and without, per push), and how fast the tracer gets
//! ready and how fast it exits after Ctrl-C.
//!
//! `--against REV` measures instead the full trace's pairs beside commit REV's tracer
//! (`against`); `--guest ARCH`, the uncontended mutex pair inside an emulated guest of ARCH
//! (`guest`).

use std::{
    ffi::OsStr,
    fs,
    io::{BufRead, BufReader, Read as _, Write},
    path::{Path, PathBuf},
    process::Stdio,
    time::Instant,
};

use anyhow::{Context, Result, bail};
use tracer_common::{Category, EVENTS};
use tracer_model::selection::list_names;

pub mod against;
pub mod guest;
pub mod server_rounds;
pub mod stacks;

use self::server_rounds::ServerRound;
use crate::{
    setup,
    shell::{
        build_tracer, command, compile_rust_workload, compile_workload, output, require_root,
        succeeds, workspace_root,
    },
};

const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

struct Workload {
    name: &'static str,
    program: &'static str,
    categories: &'static str,
    /// Arguments for the untraced run and for traced runs (fewer operations: tracing is slower).
    untraced_args: &'static [&'static str],
    traced_args: &'static [&'static str],
}

const WORKLOADS: [Workload; 9] = [
    Workload {
        name: "mutex lock+unlock, single-threaded process",
        program: "bench_mutex",
        categories: "mutex",
        untraced_args: &["0", "5000000"],
        traced_args: &["0", "100000"],
    },
    Workload {
        name: "mutex lock+unlock, 1 thread beside main",
        program: "bench_mutex",
        categories: "mutex",
        untraced_args: &["1", "5000000"],
        traced_args: &["1", "100000"],
    },
    Workload {
        name: "mutex lock+unlock, 2 threads",
        program: "bench_mutex",
        categories: "mutex",
        untraced_args: &["2", "2000000"],
        traced_args: &["2", "50000"],
    },
    Workload {
        name: "sem post+wait, single-threaded process",
        program: "bench_sem",
        categories: "sema",
        untraced_args: &["5000000"],
        traced_args: &["100000"],
    },
    Workload {
        name: "sem post+wait, beside a second thread",
        program: "bench_sem",
        categories: "sema",
        untraced_args: &["5000000", "1"],
        traced_args: &["100000", "1"],
    },
    Workload {
        name: "rwlock rdlock+unlock, single-threaded process",
        program: "bench_rwlock",
        categories: "rwlock",
        untraced_args: &["5000000"],
        traced_args: &["100000"],
    },
    Workload {
        name: "rwlock rdlock+unlock, beside a second thread",
        program: "bench_rwlock",
        categories: "rwlock",
        untraced_args: &["5000000", "1"],
        traced_args: &["100000", "1"],
    },
    Workload {
        name: "cond signal/wait ping-pong",
        program: "bench_cond",
        categories: "mutex:cond",
        untraced_args: &["20000"],
        traced_args: &["20000"],
    },
    Workload {
        name: "contended: 4 threads block on 2 mutexes, a semaphore and a read-write lock, \
               2,000 uncontended pairs of each kind each between rounds; per round",
        program: "contention",
        categories: "mutex:sema:rwlock",
        untraced_args: &["10", "2", "4", "2000"],
        traced_args: &["10", "2", "4", "2000"],
    },
];

/// A real program traced whole, and how its time is known.
struct RealProgram {
    argv: &'static [&'static str],
    /// sysbench says how long its threads worked (`total time:`); another is timed from
    /// outside, less what the same run of `true` takes (the tracer's start and exit).
    reports_its_time: bool,
    /// It compresses the generated input ([`pigz_input`]), named after its arguments.
    reads_input: bool,
}

/// Real programs traced whole, on 4 threads: `sysbench mutex`, `sysbench threads`, and `pigz`
/// compressing in small blocks (its threads hand each block over with a mutex and a condition
/// variable); untraced, with `--contended`, with every mutex call traced, and so without fast
/// paths.
const REAL_PROGRAMS: [RealProgram; 3] = [
    RealProgram {
        argv: &[
            "sysbench",
            "mutex",
            "--threads=4",
            "--mutex-num=64",
            "--mutex-locks=100000",
            "run",
        ],
        reports_its_time: true,
        reads_input: false,
    },
    RealProgram {
        argv: &[
            "sysbench",
            "threads",
            "--threads=4",
            "--thread-locks=8",
            "--thread-yields=100",
            "--events=2000",
            "--time=0",
            "run",
        ],
        reports_its_time: true,
        reads_input: false,
    },
    RealProgram {
        argv: &[
            "pigz",
            "--force",
            "--keep",
            "--processes",
            "4",
            "--blocksize",
            "32",
        ],
        reports_its_time: false,
        reads_input: true,
    },
];

/// pigz's input: 64 MiB of words drawn by a fixed generator (as compressible as text), made
/// once.
fn pigz_input() -> Result<PathBuf> {
    const BYTES: usize = 64 << 20;
    const WORDS: [&str; 8] = [
        "lock ", "unlock ", "wait ", "signal ", "mutex ", "thread ", "futex ", "owner\n",
    ];
    let path = workspace_root().join("target/bench-pigz/input");
    if fs::metadata(&path).is_ok_and(|m| m.len() as usize >= BYTES) {
        return Ok(path);
    }
    fs::create_dir_all(path.parent().context("no parent")?)?;
    let mut text = Vec::with_capacity(BYTES + 16);
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    while text.len() < BYTES {
        // xorshift64: the same input on every machine.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        text.extend_from_slice(WORDS[(state % WORDS.len() as u64) as usize].as_bytes());
    }
    fs::write(&path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}
const REAL_PROGRAM_MODES: [(&str, Option<&[&str]>); 4] = [
    ("untraced", None),
    (
        "thrtrace-bpf --contended",
        Some(&["--events", "mutex", "--contended"]),
    ),
    ("thrtrace-bpf", Some(&["--events", "mutex"])),
    (
        "thrtrace-bpf --no-fast-paths",
        Some(&["--events", "mutex", "--no-fast-paths"]),
    ),
];

/// The futex category's hooks, each forced in turn with `--futex-hook`, and the goal for what a
/// trace with it costs a syscall-heavy process it does not trace: at most 1.05x where a
/// futex-specific hook exists; the raw_syscalls fallback runs a program on every syscall of the
/// machine, and is only measured.
const FUTEX_HOOKS: [(&str, &str); 3] = [
    ("fentry", "at most 1.05x"),
    ("syscall-tracepoints", "at most 1.05x"),
    ("raw-syscalls", "measured"),
];

/// Calls of each kind (getppid, an uncontended futex wake) per run of `bench_syscalls`.
const SYSCALLS: u32 = 1_000_000;

/// Uncontended lock+unlock pairs per run of `std_mutex` (xtask/workloads/std_mutex.rs).
const STD_MUTEX_PAIRS: u32 = 20_000_000;

/// Thread and process creation (tests/workloads/bench_spawn.c): a name and its arguments.
const SPAWN_WORKLOADS: [(&str, &[&str]); 2] = [
    ("thread create+join", &["threads", "2000"]),
    ("fork+exec+wait", &["execs", "300"]),
];

/// Untraced, traced, traced with `--follow`: the tracer's options (None: untraced).
const FOLLOW_MODES: [Option<&[&str]>; 3] = [
    None,
    Some(&["--events", "mutex"]),
    Some(&["--events", "mutex", "--follow"]),
];

/// Lock+unlock pairs of the run that measures the tracer's CPU per record (3 records a pair).
const SINK_PAIRS: u32 = 400_000;

/// The sink runs: each sink with the default consumer threads, and both with two; the log
/// without the live lock-order analysis, whose cost decides its default.
const SINK_RUNS: [(SinkMode, Option<usize>); 5] = [
    (SinkMode::TrFiles, None),
    (SinkMode::Log, None),
    (SinkMode::Both, None),
    (SinkMode::Both, Some(2)),
    (SinkMode::LogWithoutLockOrder, None),
];

/// The consumers the scaling runs compare: one thread, and a writer thread per sink.
const CONSUMER_THREADS: [usize; 2] = [1, 2];

/// Producer threads of the scaling runs: 1, 2 and one per CPU.
fn producer_counts() -> Vec<u32> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mut counts = vec![1, 2, cpus];
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// Where the records of that run go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SinkMode {
    TrFiles,
    Log,
    Both,
    LogWithoutLockOrder,
}

impl SinkMode {
    fn label(self) -> &'static str {
        match self {
            SinkMode::TrFiles => "tr files (--dir)",
            SinkMode::Log => "log (--log)",
            SinkMode::Both => "both",
            SinkMode::LogWithoutLockOrder => "log, --lock-order off",
        }
    }

    fn args(self, dir: &Path) -> Vec<String> {
        let dir = dir.display().to_string();
        let log = format!("{dir}/bench.ptl");
        match self {
            SinkMode::TrFiles => vec!["--dir".into(), dir],
            SinkMode::Log => vec!["--log".into(), log],
            SinkMode::Both => vec!["--dir".into(), dir, "--log".into(), log],
            SinkMode::LogWithoutLockOrder => {
                vec!["--log".into(), log, "--lock-order".into(), "off".into()]
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Untraced,
    Placed,
    AtEntry,
    Floor,
    Bpftrace,
    Lossless,
    Stopped,
    FloorPlaced,
    PerfEvent,
    Contended,
    ContendedWithoutStacks,
    Stacks,
    WithoutFastPaths,
    FloorWithoutFastPaths,
}

/// The modes whose programs' run times are read: traced, and empty programs at the same probes.
const COSTED_MODES: [Mode; 2] = [Mode::Placed, Mode::FloorPlaced];
/// The modes whose contended records are costed, with their call stacks and without.
const STACK_COST_MODES: [Mode; 2] = [Mode::Contended, Mode::ContendedWithoutStacks];

const MODES: [Mode; 14] = [
    Mode::Untraced,
    Mode::Placed,
    Mode::AtEntry,
    Mode::Floor,
    Mode::Bpftrace,
    Mode::Lossless,
    Mode::Stopped,
    Mode::FloorPlaced,
    Mode::PerfEvent,
    Mode::Contended,
    Mode::ContendedWithoutStacks,
    Mode::Stacks,
    Mode::WithoutFastPaths,
    Mode::FloorWithoutFastPaths,
];

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Untraced => "untraced",
            Mode::Placed => "thrtrace-bpf",
            Mode::AtEntry => "thrtrace-bpf --probe-at-entry",
            Mode::Floor => "floor: empty programs at entry",
            Mode::Bpftrace => "bpftrace uprobe+uretprobe",
            Mode::Lossless => "thrtrace-bpf --lossless",
            Mode::Stopped => "stopped (ctl stop), at entry",
            Mode::FloorPlaced => "empty programs, placed",
            Mode::PerfEvent => "perf-event probes (before 6.10)",
            Mode::Contended => "thrtrace-bpf --contended",
            Mode::ContendedWithoutStacks => "  the same, --stacks off",
            Mode::Stacks => "thrtrace-bpf --stacks on",
            Mode::WithoutFastPaths => "thrtrace-bpf --no-fast-paths",
            Mode::FloorWithoutFastPaths => "  empty programs, the same",
        }
    }

    fn tracer_options(self) -> &'static [&'static str] {
        match self {
            Mode::AtEntry => &["--probe-at-entry"],
            Mode::Floor => &["--empty-programs", "--probe-at-entry"],
            Mode::Lossless => &["--lossless"],
            Mode::Stopped => &["--stopped", "--probe-at-entry"],
            Mode::FloorPlaced => &["--empty-programs"],
            Mode::PerfEvent => &["--perf-event-probes"],
            Mode::Contended => &["--contended"],
            Mode::ContendedWithoutStacks => &["--contended", "--stacks", "off"],
            Mode::Stacks => &["--stacks", "on"],
            Mode::WithoutFastPaths => &["--no-fast-paths"],
            Mode::FloorWithoutFastPaths => &["--empty-programs", "--no-fast-paths"],
            Mode::Placed | Mode::Untraced | Mode::Bpftrace => &[],
        }
    }
}

/// One measurement: ns per operation, records written, records lost, and the records/s the
/// tracer wrote while the workload ran.
#[derive(Clone, Copy, Default)]
struct Sample {
    ns_per_op: f64,
    written: u64,
    lost: u64,
    records_per_sec: f64,
}

pub fn run(reps: usize) -> Result<()> {
    setup::ensure_prerequisites()?;
    require_root("bench")?;
    ensure_installed("bpftrace", "bpftrace", "the comparison")?;
    ensure_installed("sysbench", "sysbench", "the real program's run")?;
    ensure_installed("pigz", "pigz", "the real program's run")?;
    let input = pigz_input()?;
    let tracer = build_tracer()?;
    let static_tracer = crate::dist::build_static_tracer(
        &workspace_root()
            .join("target")
            .join(crate::dist::STATIC_BUILD),
        crate::arch::Arch::HOST,
    )?;
    let dir = trace_dir();
    let mut samples: Vec<Vec<Vec<Sample>>> = vec![vec![Vec::new(); MODES.len()]; WORKLOADS.len()];
    let mut costs: Vec<Vec<Vec<Vec<f64>>>> =
        vec![vec![Vec::new(); COSTED_MODES.len()]; WORKLOADS.len()];
    let mut timings = Vec::new();
    let mut real: Vec<Vec<Vec<f64>>> =
        vec![vec![Vec::new(); REAL_PROGRAM_MODES.len()]; REAL_PROGRAMS.len()];
    // Per futex hook, repetition by repetition: `bench_syscalls`'s ns per call untraced and
    // beside the trace.
    let mut syscall_rounds: Vec<Vec<SyscallRound>> = vec![Vec::new(); FUTEX_HOOKS.len()];
    // Why this kernel refuses a hook, for each it does (this machine refuses fentry programs).
    let hook_refusals = FUTEX_HOOKS
        .iter()
        .map(|(hook, _)| hook_refusal(&tracer, hook))
        .collect::<Result<Vec<_>>>()?;
    // Repetition by repetition: `std_mutex`'s ns per pair untraced and traced `--contended`.
    let mut std_mutex_rounds: Vec<(f64, f64)> = Vec::new();
    // Per mode of STACK_COST_MODES, run by run: the tracer's CPU per record, the entry and the
    // return program's ns per run.
    let mut stack_costs: Vec<Vec<[f64; 3]>> = vec![Vec::new(); STACK_COST_MODES.len()];
    let contended = WORKLOADS
        .iter()
        .find(|w| w.program == "contention")
        .context("no contended workload")?;
    let server = server_rounds::start_server()?;
    let mut server_rounds: Vec<ServerRound> = Vec::new();
    let mut every_category = [Vec::new(), Vec::new()];
    let mut follow: Vec<Vec<Vec<f64>>> =
        vec![vec![Vec::new(); FOLLOW_MODES.len()]; SPAWN_WORKLOADS.len()];
    let mut sink_cpu: Vec<Vec<Consumed>> = vec![Vec::new(); SINK_RUNS.len()];
    // The release's static tracer beside the glibc build, both sinks, run after run.
    let mut static_cpu: Vec<(Consumed, Consumed)> = Vec::new();
    // The same runs without records: what starting and ending costs the tracer.
    let mut sink_idle_cpu: Vec<Vec<f64>> = vec![Vec::new(); SINK_RUNS.len()];
    // Run by run: the tracer's CPU (ns) with pushes and without, and the pushes.
    let mut push_costs: Vec<(f64, f64, usize)> = Vec::new();
    let producers = producer_counts();
    let mut scaling: Vec<Vec<Vec<Consumed>>> =
        vec![vec![Vec::new(); CONSUMER_THREADS.len()]; producers.len()];
    let mut stacks_under_load = stacks::StacksUnderLoad::default();
    for rep in 1..=reps {
        eprintln!("xtask: repetition {rep} of {reps}");
        stacks_under_load.take(&tracer, &dir)?;
        for (w, workload) in WORKLOADS.iter().enumerate() {
            let program = compile_workload(workload.program)?;
            for (m, &mode) in MODES.iter().enumerate() {
                empty_dir(&dir)?;
                samples[w][m].push(measure(&tracer, &program, workload, mode, &dir)?);
            }
            // Apart: the statistics' clock reads slow the programs they time.
            for (c, &mode) in COSTED_MODES.iter().enumerate() {
                empty_dir(&dir)?;
                costs[w][c].push(program_costs(&tracer, &program, workload, mode, &dir)?);
            }
        }
        for (p, real_program) in REAL_PROGRAMS.iter().enumerate() {
            for (m, (_, options)) in REAL_PROGRAM_MODES.iter().enumerate() {
                empty_dir(&dir)?;
                real[p][m].push(real_program_ns(
                    &tracer,
                    real_program,
                    &input,
                    *options,
                    &dir,
                )?);
            }
        }
        let syscalls = compile_workload("bench_syscalls")?;
        for (h, (hook, _)) in FUTEX_HOOKS.iter().enumerate() {
            if hook_refusals[h].is_none() {
                syscall_rounds[h].push(syscall_round(&tracer, &syscalls, hook, &dir)?);
            }
        }
        std_mutex_rounds.push(std_mutex_round(&tracer, &dir)?);
        let program = compile_workload(contended.program)?;
        for (m, &mode) in STACK_COST_MODES.iter().enumerate() {
            empty_dir(&dir)?;
            let cpu = contended_record_cpu(&tracer, &dir, mode)?;
            empty_dir(&dir)?;
            let programs = program_costs(&tracer, &program, contended, mode, &dir)?;
            stack_costs[m].push([cpu, programs[0], programs[1]]);
        }
        let spawn = compile_workload("bench_spawn")?;
        for (w, args) in SPAWN_WORKLOADS.iter().enumerate() {
            for (m, options) in FOLLOW_MODES.iter().enumerate() {
                empty_dir(&dir)?;
                let out = output(launched(&tracer, *options, &dir, &spawn).args(args.1))?;
                follow[w][m].push(workload_value(&out.stdout, "ns_per_op")?);
            }
        }
        for (m, &(mode, threads)) in SINK_RUNS.iter().enumerate() {
            empty_dir(&dir)?;
            sink_cpu[m].push(consume(&tracer, &dir, mode, (SINK_PAIRS, 1), threads)?);
            empty_dir(&dir)?;
            let idle = consume(&tracer, &dir, mode, (0, 1), threads)?;
            sink_idle_cpu[m].push(idle.cpu_ns);
        }
        let both = |tracer: &Path| -> Result<Consumed> {
            empty_dir(&dir)?;
            consume(tracer, &dir, SinkMode::Both, (SINK_PAIRS, 1), None)
        };
        static_cpu.push((both(&static_tracer)?, both(&tracer)?));
        push_costs.push(push_cpu(&tracer, &dir)?);
        for (p, &count) in producers.iter().enumerate() {
            for (c, &threads) in CONSUMER_THREADS.iter().enumerate() {
                empty_dir(&dir)?;
                let workload = (SINK_PAIRS, count);
                let run = consume(&tracer, &dir, SinkMode::Both, workload, Some(threads))?;
                scaling[p][c].push(run);
            }
        }
        server_rounds.push(ServerRound::take(&tracer, &server, &dir)?);
        empty_dir(&dir)?;
        timings.push(latencies(&tracer, &dir, &["--events", "mutex:cond"])?);
        for (m, (_, options)) in MECHANISMS.iter().enumerate() {
            empty_dir(&dir)?;
            every_category[m].push(latencies(&tracer, &dir, options)?);
        }
    }
    let _ = fs::remove_dir_all(&dir);
    print_table(&samples, reps);
    print_program_costs(&costs, reps);
    stacks::print(&[("thrtrace-bpf", &stacks_under_load)], reps);
    println!(
        "\nwhat a --pyroscope push costs the tracer, on the contended workload traced \
         --contended for {PUSH_SECONDS} s with a push every second and without, median of {reps}"
    );
    let per_push: Vec<f64> = push_costs
        .iter()
        .map(|&(with, without, pushes)| (with - without) / pushes.max(1) as f64)
        .collect();
    println!(
        "  tracer CPU {:.1} ms with pushes, {:.1} ms without; {:.0} µs per push (per interval \
         of one process), {} pushes a run",
        median(&push_costs.iter().map(|c| c.0).collect::<Vec<_>>()) / 1e6,
        median(&push_costs.iter().map(|c| c.1).collect::<Vec<_>>()) / 1e6,
        median(&per_push) / 1e3,
        push_costs.first().map_or(0, |c| c.2)
    );
    println!(
        "\na --contended record's cost with its call stack and without, on the contended \
         workload (its records are the contended calls), median of {reps} runs"
    );
    println!(
        "  {:<32} {:>18} {:>14} {:>14}",
        "", "tracer ns/record", "BPF entry ns", "BPF return ns"
    );
    for (m, mode) in STACK_COST_MODES.iter().enumerate() {
        let column =
            |i: usize| median(&stack_costs[m].iter().map(|run| run[i]).collect::<Vec<_>>());
        println!(
            "  {:<32} {:>18.0} {:>14.0} {:>14.0}",
            mode.label(),
            column(0),
            column(1),
            column(2)
        );
    }
    for (p, real_program) in REAL_PROGRAMS.iter().enumerate() {
        let (input, timed) = match real_program.reads_input {
            true => (
                " INPUT (64 MiB of words)",
                "its wall time less the same run of `true`",
            ),
            false => ("", "the time it reports"),
        };
        println!(
            "\na real program traced whole: `{}{input}`, {timed}, median of {reps} runs",
            real_program.argv.join(" ")
        );
        let untraced_ns = median(&real[p][0]);
        for (m, (label, _)) in REAL_PROGRAM_MODES.iter().enumerate() {
            let ns = median(&real[p][m]);
            println!(
                "  {label:<32} {:>10.1} ms {:>8.2}x",
                ns / 1e6,
                ns / untraced_ns
            );
        }
    }
    print_syscall_costs(&syscall_rounds, &hook_refusals, reps);
    print_std_mutex_costs(&std_mutex_rounds, reps);
    drop(server);
    server_rounds::print(&[("this build", &server_rounds)], reps);
    println!(
        "
what --follow costs a target, µs per operation, median of {reps} runs"
    );
    println!(
        "  {:<28} {:>10} {:>10} {:>10}",
        "", "untraced", "traced", "--follow"
    );
    for (w, (name, _)) in SPAWN_WORKLOADS.iter().enumerate() {
        let us: Vec<f64> = follow[w].iter().map(|s| median(s) / 1e3).collect();
        println!(
            "  {name:<28} {:>10.1} {:>10.1} {:>10.1}",
            us[0], us[1], us[2]
        );
    }
    println!(
        "\nthe tracer's own CPU (user+system) per record, {} records of mutex lock+unlock, median \
         of {reps} runs",
        3 * SINK_PAIRS
    );
    println!(
        "  (startup and exit: the tracer's CPU for the same run with no records; beyond it: \
         what is left of each record's share)"
    );
    println!(
        "  {:<36} {:>10} {:>20} {:>8} {:>12} {:>10}",
        "", "ns/record", "records/CPU-second", "lost", "startup+exit", "beyond it"
    );
    for (m, (mode, threads)) in SINK_RUNS.iter().enumerate() {
        let ns = median(
            &sink_cpu[m]
                .iter()
                .map(Consumed::cpu_per_record)
                .collect::<Vec<_>>(),
        );
        let idle_ns = median(&sink_idle_cpu[m]);
        let beyond = Consumed::per_record_beyond(&sink_cpu[m], idle_ns);
        let lost: u64 = sink_cpu[m].iter().map(|s| s.lost).sum();
        let label = match threads {
            None => mode.label().to_owned(),
            Some(n) => format!("{}, {n} consumer threads", mode.label()),
        };
        println!(
            "  {label:<36} {ns:>10.0} {:>20.0} {lost:>8} {:>9.0} ms {beyond:>10.0}",
            1e9 / ns,
            idle_ns / 1e6
        );
    }
    let of = |mode: SinkMode| {
        SINK_RUNS
            .iter()
            .position(|&(m, t)| m == mode && t.is_none())
    };
    if let (Some(on), Some(off)) = (of(SinkMode::Log), of(SinkMode::LogWithoutLockOrder)) {
        let ratios: Vec<f64> = sink_cpu[on]
            .iter()
            .zip(&sink_cpu[off])
            .map(|(on, off)| on.cpu_per_record() / off.cpu_per_record())
            .collect();
        println!(
            "  live lock-order analysis: log / log with --lock-order off, per record, run by run: \
             {:.3}",
            median(&ratios)
        );
    }
    let ratios: Vec<f64> = static_cpu
        .iter()
        .map(|(release, glibc)| release.cpu_per_record() / glibc.cpu_per_record())
        .collect();
    let lost: u64 = static_cpu.iter().map(|(r, g)| r.lost + g.lost).sum();
    println!(
        "  the release's static tracer / the glibc build, both sinks, per record, run by run: \
         {:.3} ({:.0} against {:.0} ns; {lost} lost)",
        median(&ratios),
        median(
            &static_cpu
                .iter()
                .map(|(r, _)| r.cpu_per_record())
                .collect::<Vec<_>>()
        ),
        median(
            &static_cpu
                .iter()
                .map(|(_, g)| g.cpu_per_record())
                .collect::<Vec<_>>()
        ),
    );
    println!(
        "\nrecords/s written to tr files and a log against producer threads ({} records in \
         all), the tracer's CPU per second of them (1.00 = one core), records lost; median of \
         {reps} runs",
        3 * SINK_PAIRS
    );
    print!("  {:<12}", "producers");
    for threads in CONSUMER_THREADS {
        let label = format!("{threads} consumer");
        print!(" {label:>16} {:>6} {:>6}", "cpu", "lost");
    }
    println!();
    for (p, count) in producers.iter().enumerate() {
        print!("  {count:<12}");
        for runs in &scaling[p] {
            let rate = median(
                &runs
                    .iter()
                    .map(Consumed::records_per_second)
                    .collect::<Vec<_>>(),
            );
            let share = median(&runs.iter().map(Consumed::cpu_share).collect::<Vec<_>>());
            let lost: u64 = runs.iter().map(|r| r.lost).sum();
            print!(" {rate:>16.0} {share:>6.2} {lost:>6}");
        }
        println!();
    }
    let column = |i: usize| median(&timings.iter().map(|t: &[f64; 3]| t[i]).collect::<Vec<_>>());
    println!(
        "\nmedians: tracer ready (mutex and cond probes attached) {:.0} ms; --unbuffered records in \
         the file {:.0} ms after the call; exit after SIGINT {:.0} ms",
        column(0),
        column(1),
        column(2)
    );
    for (m, (mechanism, _)) in MECHANISMS.iter().enumerate() {
        let column = |i: usize| median(&every_category[m].iter().map(|t| t[i]).collect::<Vec<_>>());
        println!(
            "every category, {mechanism:<22}: ready {:.0} ms; exit after SIGINT {:.0} ms",
            column(0),
            column(2)
        );
    }
    Ok(())
}

/// The probe mechanisms whose start and exit with every category are timed: uprobe_multi
/// links, and the perf-event uprobes of kernels before 6.10.
const MECHANISMS: [(&str, &[&str]); 2] = [
    ("uprobe_multi links", &[]),
    ("perf-event probes", &["--perf-event-probes"]),
];

fn print_table(samples: &[Vec<Vec<Sample>>], reps: usize) {
    println!("\nns per operation, median of {reps} runs; x = times untraced; lost = records lost");
    for (w, workload) in WORKLOADS.iter().enumerate() {
        let ns = |m: usize| median_ns(&samples[w][m]);
        println!("\n{}", workload.name);
        print_mode_rows(&MODES, &samples[w]);
        let (placed, entry, floor, bpftrace, lossless, stopped, floor_placed) =
            (ns(1), ns(2), ns(3), ns(4), ns(5), ns(6), ns(7));
        let (without_fast_paths, floor_without) = (ns(12), ns(13));
        println!(
            "  placed vs at entry: {:.1}x cheaper; traced / bpftrace: {:.2}; traced / floor: {:.2}; \
             lossless / traced: {:.2}; stopped / floor: {:.2}; traced / empty placed: {:.2}",
            entry / placed,
            placed / bpftrace,
            placed / floor,
            lossless / placed,
            stopped / floor,
            placed / floor_placed
        );
        println!(
            "  fast paths: traced / traced --no-fast-paths: {:.2}; --no-fast-paths / its empty \
             programs: {:.2}",
            placed / without_fast_paths,
            without_fast_paths / floor_without
        );
    }
}

/// The median ns per operation of `samples`.
fn median_ns(samples: &[Sample]) -> f64 {
    median(&samples.iter().map(|s| s.ns_per_op).collect::<Vec<_>>())
}

/// A row for each of `modes` (the first untraced) and its runs' `samples`: the median ns per
/// operation, times the first's, the records lost in all, the median records/s.
fn print_mode_rows(modes: &[Mode], samples: &[Vec<Sample>]) {
    println!(
        "  {:<32} {:>12} {:>9} {:>8} {:>12}",
        "", "ns/op", "x", "lost", "records/s"
    );
    let untraced = median_ns(&samples[0]);
    for (mode, samples) in modes.iter().zip(samples) {
        let lost: u64 = samples.iter().map(|s| s.lost).sum();
        let rate = median(
            &samples
                .iter()
                .map(|s| s.records_per_sec)
                .collect::<Vec<_>>(),
        );
        let rate = if rate > 0.0 {
            format!("{rate:.0}")
        } else {
            "-".into()
        };
        let ns = median_ns(samples);
        println!(
            "  {:<32} {:>12.1} {:>9.1} {:>8} {:>12}",
            mode.label(),
            ns,
            ns / untraced,
            lost,
            rate
        );
    }
}

fn print_program_costs(costs: &[Vec<Vec<Vec<f64>>>], reps: usize) {
    println!(
        "\nns per run of each BPF program, as the kernel counts it (kernel.bpf_stats_enabled, \
         in runs of their own: its two clock reads a run are counted in), median of {reps} runs"
    );
    println!(
        "  {:<32} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}",
        "", "entry", "return", "fast path", "empty entry", "empty return", "empty fast"
    );
    for (w, workload) in WORKLOADS.iter().enumerate() {
        print!("  {:<32}", workload.name);
        for (c, width) in [(0, 10), (1, 12)] {
            for program in 0..3 {
                let ns = median(
                    &costs[w][c]
                        .iter()
                        .map(|run| run[program])
                        .collect::<Vec<_>>(),
                );
                print!(" {ns:>width$.0}");
            }
        }
        println!();
    }
}

/// Makes `dir` an empty directory for the next run's trace files.
fn empty_dir(dir: &Path) -> Result<()> {
    let _ = fs::remove_dir_all(dir);
    Ok(fs::create_dir_all(dir)?)
}

/// Where the bench's traced runs write.
fn trace_dir() -> PathBuf {
    workspace_root().join("target/bench-trace")
}

/// Prints the head of a Markdown table with a column per `names`.
fn table_head(names: &[&str]) {
    println!("| | {} |", names.join(" | "));
    println!("|---|{}", "---|".repeat(names.len()));
}

/// Prints a row of a Markdown table: what it is, then its cells.
fn table_row(what: &str, cells: &[String]) {
    println!("| {what} | {} |", cells.join(" | "));
}

/// A share as a percentage; "not said" for NaN, what a build that does not say it gives.
fn share_cell(share: f64) -> String {
    match share.is_nan() {
        true => "not said".to_owned(),
        false => format!("{:.2}%", share * 100.0),
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}

fn measure(
    tracer: &Path,
    program: &Path,
    workload: &Workload,
    mode: Mode,
    dir: &Path,
) -> Result<Sample> {
    let out = match mode {
        Mode::Untraced => output(command(program).args(workload.untraced_args))?,
        Mode::Bpftrace => output(
            command("bpftrace")
                .arg("-o")
                .arg(dir.join("bpftrace.out"))
                .arg("-e")
                .arg(bpftrace_program(workload.categories))
                .arg("-c")
                .arg(format!(
                    "{} {}",
                    program.display(),
                    workload.traced_args.join(" ")
                )),
        )?,
        _ => output(&mut traced(
            tracer,
            program,
            workload,
            mode.tracer_options(),
            dir,
        ))?,
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    sample(mode, &out.stdout, &stderr, "ns_per_op")
}

/// The measurement of a run in `mode` from what it wrote: the workload's `stdout`, whose
/// `time` (its key: wall time or CPU time per operation) is the ns per operation, and the
/// tracer's `stderr`, whose summary gives the records written and lost.
fn sample(mode: Mode, stdout: &[u8], stderr: &str, time: &str) -> Result<Sample> {
    let value = |key: &str| workload_value(stdout, key);
    let ns_per_op = value(time)?;
    let mut sample = Sample {
        ns_per_op,
        ..Sample::default()
    };
    if matches!(
        mode,
        Mode::Placed
            | Mode::AtEntry
            | Mode::Floor
            | Mode::Lossless
            | Mode::Stopped
            | Mode::FloorPlaced
            | Mode::Contended
            | Mode::ContendedWithoutStacks
            | Mode::Stacks
            | Mode::WithoutFastPaths
            | Mode::FloorWithoutFastPaths
    ) {
        (sample.written, sample.lost) = summary_counts(stderr)?;
        let seconds = ns_per_op * value("ops")? / 1e9;
        sample.records_per_sec = sample.written as f64 / seconds;
    }
    Ok(sample)
}

/// The tracer running `workload` with `options`.
fn traced(
    tracer: &Path,
    program: &Path,
    workload: &Workload,
    options: &[&str],
    dir: &Path,
) -> std::process::Command {
    // --contended costs an uncontended call nothing: as many operations as untraced.
    let args = match options.contains(&"--contended") {
        true => workload.untraced_args,
        false => workload.traced_args,
    };
    let options: Vec<&str> = ["--events", workload.categories]
        .into_iter()
        .chain(options.iter().copied())
        .collect();
    let mut run = launched(tracer, Some(&options), dir, program);
    run.args(args);
    run
}

/// The kernel's switch for BPF run-time statistics.
const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// BPF run-time statistics on while this lives, then as they were.
struct BpfStats {
    before: String,
}

impl BpfStats {
    fn enable() -> Result<Self> {
        let before =
            fs::read_to_string(BPF_STATS).with_context(|| format!("cannot read {BPF_STATS}"))?;
        fs::write(BPF_STATS, "1").with_context(|| format!("cannot write {BPF_STATS}"))?;
        Ok(BpfStats { before })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = fs::write(BPF_STATS, self.before.trim());
    }
}

/// Nanoseconds per run of each BPF program of a traced run of `workload` in `mode` (entry,
/// return, fast path; 0 for one that did not run), as the kernel counts them with its
/// statistics on and the tracer says them with `-v`.
fn program_costs(
    tracer: &Path,
    program: &Path,
    workload: &Workload,
    mode: Mode,
    dir: &Path,
) -> Result<Vec<f64>> {
    let _stats = BpfStats::enable()?;
    let options: Vec<&str> = mode
        .tracer_options()
        .iter()
        .copied()
        .chain(["-v"])
        .collect();
    let out = output(&mut traced(tracer, program, workload, &options, dir))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut costs: Vec<f64> = stderr
        .lines()
        .filter(|line| line.contains("BPF program "))
        .filter_map(|line| {
            line.split(", ")
                .nth(1)?
                .split(" ns each")
                .next()?
                .parse()
                .ok()
        })
        .collect();
    // A tracer before fast paths has two programs (`--against` an older commit).
    if !(2..=3).contains(&costs.len()) {
        bail!("the tracer did not say its programs' run times: {stderr}");
    }
    costs.resize(3, 0.0);
    Ok(costs)
}

/// The number a workload printed as `key=VALUE`.
fn workload_value(stdout: &[u8], key: &str) -> Result<f64> {
    let stdout = String::from_utf8_lossy(stdout);
    stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .with_context(|| format!("the workload printed no {key}: {stdout}"))?
        .parse()
        .context("not a number")
}

/// A bpftrace program with a uprobe and a uretprobe on each function of `categories` in the
/// child's libc, printing what the tr.* records hold.
fn bpftrace_program(categories: &str) -> String {
    let mut program = String::new();
    for category in list_names(categories).filter_map(Category::from_name) {
        for event in EVENTS.iter().filter(|e| e.category == category) {
            let (e1, e2, sym) = (category.code(), event.event2, event.symbol);
            program += &format!(
                "uprobe:{LIBC}:{sym} /pid == cpid/ {{ printf(\"%llu:%d:%d:{e1}:{e2}:1:%lu:%lu:%lu\\n\", \
                 nsecs, tid, pid, arg0, arg1, arg2); }}\n\
                 uretprobe:{LIBC}:{sym} /pid == cpid/ {{ printf(\"%llu:%d:%d:{e1}:{e2}:2:%d\\n\", \
                 nsecs, tid, pid, retval); }}\n"
            );
        }
    }
    program
}

/// Installs the Debian package `package` unless `program --version` runs.
fn ensure_installed(program: &str, package: &str, why: &str) -> Result<()> {
    if succeeds(command(program).arg("--version")) {
        return Ok(());
    }
    eprintln!("xtask: installing {package} for {why}");
    setup::apt_install(&[package])
}

/// The time a run of `real_program` with the tracer's `options` (or untraced) took, in ns: its
/// threads' work, not the tracer's start-up, attach and exit.
fn real_program_ns(
    tracer: &Path,
    real_program: &RealProgram,
    input: &Path,
    options: Option<&[&str]>,
    dir: &Path,
) -> Result<f64> {
    let argv = real_program.argv;
    let mut run = launched(tracer, options, dir, argv[0]);
    run.args(&argv[1..]);
    if real_program.reads_input {
        run.arg(input);
    }
    if !real_program.reports_its_time {
        let started = Instant::now();
        output(&mut run)?;
        let ns = started.elapsed().as_nanos() as f64;
        let started = Instant::now();
        output(&mut launched(tracer, options, dir, "true"))?;
        return Ok(ns - started.elapsed().as_nanos() as f64);
    }
    let out = output(&mut run)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seconds = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("total time:"))
        .and_then(|time| time.trim().trim_end_matches('s').parse::<f64>().ok())
        .with_context(|| format!("sysbench printed no total time: {stdout}"))?;
    Ok(seconds * 1e9)
}

fn print_syscall_costs(rounds: &[Vec<SyscallRound>], refusals: &[Option<String>], reps: usize) {
    println!(
        "\nwhat a --contended trace of an idle process costs a syscall-heavy process it does not \
         trace, per futex hook (--futex-hook): ns per call of {SYSCALLS} getppid and of \
         {SYSCALLS} FUTEX_WAKE_PRIVATE on a word nobody waits on; runs untraced, traced, traced, \
         untraced; x = traced / untraced, round by round; median of {reps}"
    );
    println!(
        "  {:<32} {:>10} {:>8} {:>12} {:>8}   goal",
        "", "getppid", "x", "futex wake", "x"
    );
    let every_round = || rounds.iter().flatten();
    if every_round().next().is_none() {
        println!("  no hook could be measured on this kernel");
        return;
    }
    let untraced =
        [0, 1].map(|kind| median(&every_round().map(|r| r.untraced[kind]).collect::<Vec<_>>()));
    println!(
        "  {:<32} {:>10.1} {:>8} {:>12.1}",
        "untraced", untraced[0], "", untraced[1]
    );
    for (((hook, goal), rounds), refusal) in FUTEX_HOOKS.iter().zip(rounds).zip(refusals) {
        if let Some(refusal) = refusal {
            println!(
                "  {:<32} not on this kernel: {refusal}",
                format!("--futex-hook {hook}")
            );
            continue;
        }
        let traced =
            |kind: usize| median(&rounds.iter().map(|r| r.traced[kind]).collect::<Vec<_>>());
        let ratio =
            |kind: usize| median(&rounds.iter().map(|r| r.ratios()[kind]).collect::<Vec<_>>());
        println!(
            "  {:<32} {:>10.1} {:>8.3} {:>12.1} {:>8.3}   {goal}",
            format!("--futex-hook {hook}"),
            traced(0),
            ratio(0),
            traced(1),
            ratio(1),
        );
    }
}

/// Why the tracer refuses futex hook `hook` on this kernel, if it does (its one line).
fn hook_refusal(tracer: &Path, hook: &str) -> Result<Option<String>> {
    // A refusal is the tracer's exit with one line: not `output`'s failure.
    let out = command(tracer)
        .args(["--contended", "--futex-hook", hook, "--", "true"])
        .output()
        .with_context(|| format!("cannot start {}", tracer.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    Ok(stderr
        .lines()
        .find(|line| line.contains("cannot be used on this kernel"))
        .map(str::to_owned))
}

/// `bench_syscalls`'s ns per getppid and per futex wake, untraced and beside a trace of another
/// process, each the mean of its two runs.
#[derive(Clone, Copy)]
struct SyscallRound {
    untraced: [f64; 2],
    traced: [f64; 2],
}

impl SyscallRound {
    /// Traced / untraced, per kind of call.
    fn ratios(&self) -> [f64; 2] {
        [0, 1].map(|kind| self.traced[kind] / self.untraced[kind])
    }
}

/// Four runs of `bench_syscalls` (`program`), untraced, beside a `--contended` trace with the
/// futex hook `hook` of an idle process (a `mutex_gate` at its gate), beside another, untraced.
fn syscall_round(tracer: &Path, program: &Path, hook: &str, dir: &Path) -> Result<SyscallRound> {
    let run = || {
        let out = output(command(program).arg(SYSCALLS.to_string()))?;
        let value = |key: &str| workload_value(&out.stdout, key);
        Ok([value("getppid_ns")?, value("futex_wake_ns")?])
    };
    let (mut idle, _) = start_gate(0, 0)?;
    let options = ["--contended", "--futex-hook", hook];
    let runs = mirrored_rounds(run, || {
        Ok(beside_trace(tracer, &options, idle.id(), dir, run)?.result)
    });
    idle.kill()?;
    idle.wait()?;
    let (untraced, traced) = runs?;
    let mean = |[a, b]: [[f64; 2]; 2]| [0, 1].map(|kind| f64::midpoint(a[kind], b[kind]));
    Ok(SyscallRound {
        untraced: mean(untraced),
        traced: mean(traced),
    })
}

fn print_std_mutex_costs(rounds: &[(f64, f64)], reps: usize) {
    println!(
        "\nthe traced process's uncontended std::sync::Mutex lock+unlock (Rust, no futex call), \
         {STD_MUTEX_PAIRS} pairs; runs untraced, traced --contended, traced, untraced; x = traced \
         / untraced, round by round; median of {reps}"
    );
    let column =
        |value: fn(&(f64, f64)) -> f64| median(&rounds.iter().map(value).collect::<Vec<_>>());
    println!("  {:<32} {:>10.1} ns", "untraced", column(|r| r.0));
    println!(
        "  {:<32} {:>10.1} ns {:>8.3}x   goal at most 1.05x",
        "thrtrace-bpf --contended",
        column(|r| r.1),
        column(|(untraced, traced)| traced / untraced)
    );
}

/// Four runs of `std_mutex`, untraced, launched by a `--contended` trace (the futex hook the
/// tracer picks), again, untraced: ns per lock+unlock pair untraced and traced, each the mean
/// of its two runs.
fn std_mutex_round(tracer: &Path, dir: &Path) -> Result<(f64, f64)> {
    let program = compile_rust_workload("std_mutex")?;
    let run = |options: Option<&[&str]>| -> Result<f64> {
        empty_dir(dir)?;
        let mut run = launched(tracer, options, dir, &program);
        let out = output(run.arg(STD_MUTEX_PAIRS.to_string()))?;
        if options.is_some() {
            wait_until_tracing(&mut out.stderr.as_slice())?;
        }
        workload_value(&out.stdout, "ns_per_op")
    };
    let (untraced, traced) = mirrored_rounds(|| run(None), || run(Some(&["--contended"])))?;
    Ok((
        f64::midpoint(untraced[0], untraced[1]),
        f64::midpoint(traced[0], traced[1]),
    ))
}

/// `program`, untraced (`options` None) or launched by the tracer with `options` writing to
/// `dir`.
fn launched(
    tracer: &Path,
    options: Option<&[&str]>,
    dir: &Path,
    program: impl AsRef<OsStr>,
) -> std::process::Command {
    let Some(options) = options else {
        return command(program);
    };
    let mut traced = command(tracer);
    traced
        .args(options)
        .arg("--dir")
        .arg(dir)
        .arg("--")
        .arg(program);
    traced
}

/// What one traced run of `SINK_PAIRS` lock+unlock pairs cost the tracer.
#[derive(Clone, Copy)]
struct Consumed {
    /// The tracer's CPU time, user + system over all its threads (from wait4).
    cpu_ns: f64,
    /// From opening the gate to the workload's "done": the traced calls' wall time.
    phase_ns: f64,
    written: u64,
    lost: u64,
}

impl Consumed {
    fn cpu_per_record(&self) -> f64 {
        self.cpu_ns / self.written as f64
    }

    /// The median over `runs` of the CPU per record left once `idle_ns`, what the same run
    /// with no records cost (start and exit), is taken away.
    fn per_record_beyond(runs: &[Consumed], idle_ns: f64) -> f64 {
        let beyond: Vec<f64> = runs
            .iter()
            .map(|run| (run.cpu_ns - idle_ns) / run.written as f64)
            .collect();
        median(&beyond)
    }

    fn records_per_second(&self) -> f64 {
        self.written as f64 / self.phase_ns * 1e9
    }

    /// The tracer's CPU time per second of traced calls: 1.0 is one core kept busy.
    fn cpu_share(&self) -> f64 {
        self.cpu_ns / self.phase_ns
    }
}

/// Traces `pairs` lock+unlock pairs made by `producers` threads of a `mutex_gate` it did not
/// start (so that the workload's own time is not the tracer's), writing to `mode`'s sinks with
/// `consumer_threads` (None: the tracer's default).
fn consume(
    tracer: &Path,
    dir: &Path,
    mode: SinkMode,
    (pairs, producers): (u32, u32),
    consumer_threads: Option<usize>,
) -> Result<Consumed> {
    let (mut target, mut target_out) = start_gate(pairs / producers, producers)?;
    let mut line = String::new();
    let mut traced = command(tracer);
    traced
        .args(["--events", "mutex"])
        .args(mode.args(dir))
        .args(["-p", &target.id().to_string()]);
    if let Some(threads) = consumer_threads {
        traced.args(["--consumer-threads", &threads.to_string()]);
    }
    let mut traced = traced.stderr(Stdio::piped()).spawn()?;
    let mut stderr = BufReader::new(traced.stderr.take().context("stderr")?);
    stderr.read_line(&mut line)?;
    let gate_opened = Instant::now();
    writeln!(target.stdin.as_mut().context("stdin")?, "go")?;
    target_out.read_line(&mut line)?;
    let phase_ns = gate_opened.elapsed().as_nanos() as f64;
    drop(target.stdin.take());
    target.wait()?;
    let ended = reap_tracer(&traced, &mut stderr)?;
    Ok(Consumed {
        cpu_ns: ended.cpu_ns,
        phase_ns,
        written: ended.written,
        lost: ended.lost,
    })
}

/// What a tracer used and said by the time it ended.
struct TracerEnd {
    /// Its CPU time, user and system, ns.
    cpu_ns: f64,
    written: u64,
    lost: u64,
    stacks: StackFigures,
    /// What it said after what was read of its stderr before.
    said: String,
}

/// What a tracer said of the call stacks its records were to carry.
struct StackFigures {
    /// The records that came without theirs ("N records carry no call stack").
    left_out: u64,
    /// Whole ones, of how many were to carry one (the summary's "call stacks: W of N whole";
    /// none from a build before it said so).
    whole_of: Option<(u64, u64)>,
}

impl StackFigures {
    fn of(said: &str, summary: &str) -> Result<Self> {
        let left_out = said
            .lines()
            .find_map(|line| {
                let (count, _) = line
                    .strip_prefix("thrtrace-bpf: ")?
                    .split_once(" records carry no call stack")?;
                count.parse().ok()
            })
            .unwrap_or(0);
        let whole_of = match summary.split_once("; call stacks: ") {
            Some((_, share)) => {
                let (whole, rest) = share.split_once(" of ").context("stack share")?;
                let records = rest.split(' ').next().context("stack share")?;
                Some((whole.parse()?, records.parse()?))
            }
            None => None,
        };
        Ok(StackFigures { left_out, whole_of })
    }

    /// The share of the records to carry a stack that came with it; of all `written`, from a
    /// build that does not say how many were to carry one.
    fn carried_share(&self, written: u64) -> f64 {
        let records = self.whole_of.map_or(written, |(_, records)| records);
        1.0 - self.left_out as f64 / records.max(1) as f64
    }

    /// The share of the records to carry a stack whose stack is whole; NaN if not said.
    fn whole_share(&self) -> f64 {
        self.whole_of.map_or(f64::NAN, |(whole, records)| {
            whole as f64 / records.max(1) as f64
        })
    }
}

/// Waits for the tracer `traced`, whose target has exited or which was told to stop, reading
/// the rest of its `stderr`.
fn reap_tracer(traced: &std::process::Child, stderr: &mut impl BufRead) -> Result<TracerEnd> {
    let mut said = String::new();
    std::io::Read::read_to_string(stderr, &mut said)?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 writes the status and the rusage we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; the pointers are to live locals.
    let reaped = unsafe {
        libc::wait4(
            traced.id() as libc::pid_t,
            &raw mut status,
            0,
            &raw mut usage,
        )
    };
    if reaped == -1 {
        bail!(
            "cannot wait for the tracer: {}",
            std::io::Error::last_os_error()
        );
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu_ns = (seconds(usage.ru_utime) + seconds(usage.ru_stime)) * 1e9;
    let (written, lost) = summary_counts(&said)?;
    let stacks = StackFigures::of(&said, summary_line(&said)?)?;
    Ok(TracerEnd {
        cpu_ns,
        written,
        lost,
        stacks,
        said,
    })
}

/// Four rounds, untraced, traced, traced, untraced: the untraced rounds' results and the traced
/// ones'. The mirrored order cancels drift over the rounds (a server's tables grow, its caches
/// warm; the machine's other load comes and goes), which one untraced round before one traced
/// one charged to the tracer.
fn mirrored_rounds<U, T>(
    mut untraced: impl FnMut() -> Result<U>,
    mut traced: impl FnMut() -> Result<T>,
) -> Result<([U; 2], [T; 2])> {
    let first = untraced()?;
    let second = traced()?;
    let third = traced()?;
    let fourth = untraced()?;
    Ok(([first, fourth], [second, third]))
}

/// What a piece of work gave while a trace ran beside it, and how the trace ended.
struct Traced<T> {
    result: T,
    ended: TracerEnd,
    /// How long it traced, s.
    seconds: f64,
}

impl Traced<f64> {
    fn records_per_s(&self) -> f64 {
        self.ended.written as f64 / self.seconds
    }

    /// The tracer's CPU time as a share of one CPU.
    fn cpu_share(&self) -> f64 {
        self.ended.cpu_ns / 1e9 / self.seconds
    }
}

/// What `work` gives while a trace with `options` of the process `pid` runs, started before it
/// and ready, and how the trace ended.
fn beside_trace<T>(
    tracer: &Path,
    options: &[&str],
    pid: u32,
    dir: &Path,
    work: impl FnOnce() -> Result<T>,
) -> Result<Traced<T>> {
    empty_dir(dir)?;
    let mut traced = command(tracer)
        .args(options)
        .arg("--dir")
        .arg(dir)
        .args(["-p", &pid.to_string()])
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stderr = BufReader::new(traced.stderr.take().context("stderr")?);
    let tracing = wait_until_tracing(&mut stderr);
    // From its start of tracing, not of its process: attaching is not what a second of
    // tracing costs.
    let started = Instant::now();
    let result = tracing.and_then(|()| work());
    // SAFETY: a signal to our own child, not reaped yet (reap_tracer waits for it).
    unsafe { libc::kill(traced.id() as libc::pid_t, libc::SIGINT) };
    let ended = reap_tracer(&traced, &mut stderr);
    let seconds = started.elapsed().as_secs_f64();
    Ok(Traced {
        result: result?,
        ended: ended?,
        seconds,
    })
}

/// Reads the tracer's `stderr` until it says it is tracing: its probes (system-wide, those
/// in the first library, the C library) and the futex hook are in place. Fails if it says it cannot hook the futex syscall: a `--contended` trace without
/// its futex hook is not the one measured.
fn wait_until_tracing(stderr: &mut impl BufRead) -> Result<()> {
    let mut said = String::new();
    loop {
        let start = said.len();
        if stderr.read_line(&mut said)? == 0 {
            bail!("the tracer ended before tracing: {said}");
        }
        let line = &said[start..];
        if line.contains("futex waits outside pthread calls are not recorded") {
            bail!("{}", line.trim());
        }
        if line.contains(": tracing pid ") || line.contains(": tracing every process that maps ") {
            return Ok(());
        }
    }
}

/// How long the push cost's traces run.
const PUSH_SECONDS: u32 = 10;

/// The tracer's CPU (ns) tracing the contended workload `--contended` for [`PUSH_SECONDS`]
/// with a push a second to a stand-in Pyroscope on the loopback address, the same without
/// pushes, and how many pushes it took.
fn push_cpu(tracer: &Path, dir: &Path) -> Result<(f64, f64, usize)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}", listener.local_addr()?);
    let taken = std::thread::spawn(move || take_pushes(&listener));
    let with = contended_trace_cpu(tracer, dir, &["--pyroscope", &url, "--push-interval", "1s"])?;
    // Wakes the stand-in's accept: a connection that sends nothing ends it.
    drop(std::net::TcpStream::connect(
        url.trim_start_matches("http://"),
    )?);
    let pushes = taken
        .join()
        .map_err(|_| anyhow::anyhow!("the stand-in Pyroscope failed"))?;
    let without = contended_trace_cpu(tracer, dir, &[])?;
    Ok((with, without, pushes))
}

/// Answers each request `listener` gets with 200, as Pyroscope's ingest does, until a
/// connection sends nothing; returns how many it answered.
fn take_pushes(listener: &std::net::TcpListener) -> usize {
    let mut pushes = 0;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let mut reader = BufReader::new(stream);
        let mut length = None;
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
            let header = line.to_ascii_lowercase();
            if let Some(value) = header.strip_prefix("content-length:") {
                length = value.trim().parse::<u64>().ok();
            }
            line.clear();
        }
        let Some(length) = length else { return pushes };
        // The whole body before the answer: a socket closed with bytes unread is reset.
        let _ = std::io::copy(&mut (&mut reader).take(length), &mut std::io::sink());
        let answered = reader
            .get_mut()
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        pushes += usize::from(answered.is_ok());
    }
    pushes
}

/// The tracer's CPU (ns) tracing the contended workload, endless, `--contended` with `options`
/// for [`PUSH_SECONDS`].
fn contended_trace_cpu(tracer: &Path, dir: &Path, options: &[&str]) -> Result<f64> {
    empty_dir(dir)?;
    let mut target = command(compile_workload("contention")?)
        .args(["1000000", "10", "2"])
        .stdout(Stdio::null())
        .spawn()?;
    let mut traced = command(tracer)
        .args(["--contended", "--dir"])
        .arg(dir)
        .args(options)
        .args(["--duration", &PUSH_SECONDS.to_string()])
        .args(["-p", &target.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stderr = BufReader::new(traced.stderr.take().context("stderr")?);
    let reaped = reap_tracer(&traced, &mut stderr);
    target.kill()?;
    target.wait()?;
    Ok(reaped?.cpu_ns)
}

/// The contended workload's arguments for the runs that cost its records, with its gate.
const CONTENDED_COST_ARGS: [&str; 5] = ["10", "2", "4", "2000", "1"];

/// The tracer's CPU per record (ns) of a trace in `mode` (a `--contended` one) of the contended
/// workload, started apart so that its own time is not the tracer's.
fn contended_record_cpu(tracer: &Path, dir: &Path, mode: Mode) -> Result<f64> {
    let program = compile_workload("contention")?;
    let mut target = command(program)
        .args(CONTENDED_COST_ARGS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut target_out = BufReader::new(target.stdout.take().context("stdout")?);
    let mut line = String::new();
    target_out.read_line(&mut line)?;
    let mut traced = command(tracer)
        .args(["--events", "mutex:sema:rwlock"])
        .args(mode.tracer_options())
        .arg("--dir")
        .arg(dir)
        .args(["-p", &target.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stderr = BufReader::new(traced.stderr.take().context("stderr")?);
    stderr.read_line(&mut line)?;
    writeln!(target.stdin.as_mut().context("stdin")?, "go")?;
    std::io::copy(&mut target_out, &mut std::io::sink())?;
    target.wait()?;
    let ended = reap_tracer(&traced, &mut stderr)?;
    Ok(ended.cpu_ns / ended.written.max(1) as f64)
}

/// The tracer's summary line among what it said.
fn summary_line(stderr: &str) -> Result<&str> {
    match stderr.lines().rfind(|l| l.contains(" records written, ")) {
        Some(summary) => Ok(summary),
        None => bail!("no summary line from the tracer: {stderr}"),
    }
}

fn summary_counts(stderr: &str) -> Result<(u64, u64)> {
    let summary = summary_line(stderr)?;
    let count = |label: &str| -> Result<u64> {
        let before = summary.split(label).next().context("summary")?;
        Ok(before.rsplit(' ').next().context("count")?.parse()?)
    };
    Ok((count(" records written")?, count(" lost")?))
}

/// A `mutex_gate` whose `threads` new threads (0: its main thread) each do `pairs` lock+unlock
/// pairs once its gate opens, waiting at the gate, and its output after the ready line.
fn start_gate(
    pairs: u32,
    threads: u32,
) -> Result<(std::process::Child, BufReader<std::process::ChildStdout>)> {
    let gate: PathBuf = compile_workload("mutex_gate")?;
    let mut target = command(gate)
        .args(["0", &pairs.to_string(), &threads.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut target_out = BufReader::new(target.stdout.take().context("stdout")?);
    target_out.read_line(&mut String::new())?;
    Ok((target, target_out))
}

/// Milliseconds from starting the tracer (with `options`, launching `program` for a few
/// lock+unlock pairs) to its saying it traces the command, and from the command's last
/// output, as it exits, to the tracer's exit: what a tracer in front of a short command costs.
fn start_and_exit(tracer: &Path, dir: &Path, options: &[&str], program: &Path) -> Result<[f64; 2]> {
    let start = Instant::now();
    let mut traced = launched(tracer, Some(options), dir, program)
        .args(["1", "10"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stderr = BufReader::new(traced.stderr.take().context("stderr")?);
    wait_until_tracing(&mut stderr)?;
    let ready = start.elapsed().as_secs_f64() * 1e3;
    // Its one line, as it ends (the pipe closes only with the tracer, which holds it too).
    let mut said = String::new();
    BufReader::new(traced.stdout.take().context("stdout")?).read_line(&mut said)?;
    let done = Instant::now();
    stderr.read_to_string(&mut said)?;
    if !traced.wait()?.success() {
        bail!("the tracer failed: {said}");
    }
    Ok([ready, done.elapsed().as_secs_f64() * 1e3])
}

/// Milliseconds from starting the tracer (`--unbuffered`, with `options`) on a waiting process
/// to its "tracing pid" line; from the process's last traced call to its records being in the
/// file; and from SIGINT to the tracer's exit.
fn latencies(tracer: &Path, dir: &Path, options: &[&str]) -> Result<[f64; 3]> {
    const PAIRS: usize = 10;
    let (mut target, mut target_out) = start_gate(PAIRS as u32, 0)?;
    let mut line = String::new();
    let start = Instant::now();
    let mut traced = command(tracer)
        .args(options)
        .args(["--unbuffered", "--dir"])
        .arg(dir)
        .args(["-p", &target.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()?;
    BufReader::new(traced.stderr.as_mut().context("stderr")?).read_line(&mut line)?;
    let ready = start.elapsed().as_secs_f64() * 1e3;

    writeln!(target.stdin.as_mut().context("stdin")?, "go")?;
    target_out.read_line(&mut line)?;
    let done = Instant::now();
    let file = dir.join(tracer_model::tr::file_name(target.id(), target.id()));
    while fs::read_to_string(&file).map_or(0, |t| t.lines().count()) < 3 * PAIRS {
        if done.elapsed().as_secs() > 10 {
            bail!("records never reached {}", file.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let in_file = done.elapsed().as_secs_f64() * 1e3;

    let stop = Instant::now();
    crate::shell::run(command("kill").arg("-INT").arg(traced.id().to_string()))?;
    traced.wait()?;
    let exited = stop.elapsed().as_secs_f64() * 1e3;
    target.kill()?;
    target.wait()?;
    Ok([ready, in_file, exited])
}
