//! `cargo xtask bench --guest ARCH`: the uncontended mutex pair (the main bench's "mutex
//! lock+unlock, 1 thread beside main") measured inside a guest of ARCH, its newest Debian
//! kernel booted once under qemu as `cargo xtask kernels` boots it, with the workload built
//! for ARCH against the guest's glibc. Untraced, traced `--contended`, traced in full with probes placed and with
//! `--probe-at-entry`, repetition by repetition, the order reversed every other one so that
//! drift hits every mode alike. The guest is emulated (TCG) and its clock counts instructions
//! (`kernels`' MEASURING_CLOCK): its nanoseconds are not a machine's, only ratios within one
//! boot mean anything; and they are the same from run to run, whatever else the host runs.

use std::{collections::BTreeMap, ffi::OsStr, path::Path, process::Command};

use anyhow::{Context, Result, bail};

use super::{Mode, WORKLOADS, Workload, launched, median, print_mode_rows, sample, traced};
use crate::{arch::Arch, kernels};

/// The main bench's workload measured.
const WORKLOAD: &str = "mutex lock+unlock, 1 thread beside main";

/// The modes, in their order within a repetition: the first untraced, as the rows' ratios
/// need.
const MODES: [Mode; 4] = [Mode::Untraced, Mode::Contended, Mode::Placed, Mode::AtEntry];

/// The traced runs' arguments: a fifth of the host's pairs. The emulated tracer drains slower
/// than the emulated pair fills its ring: runs of the host's 100,000 lost half their records
/// in 16 MiB rings (on two vCPUs), and a record lost is one not written, which makes a run
/// cheaper. These 60,000 records fit in the ring whole (`kernels::guest_ring_kib`).
const TRACED_ARGS: [&str; 2] = ["1", "20000"];

/// The guest's vCPUs: one. One host thread runs every vCPU (`kernels`' ACCELERATOR), and the
/// guest's clock runs on while it runs another: on two, the tracer's consumer draining on the
/// other counted in the workload's wall time and CPU time alike, more or less as its polls
/// fell inside the loop or after it (placed runs from 8,383 to 9,564 ns a pair). On one the
/// consumer is another task on the same CPU, whose time the kernel counts as the consumer's.
const CPUS: u32 = 1;

/// What a pair costs: the workload's CPU time (its key in the workload's output), its own
/// instructions and the kernel's traps and BPF programs run on its behalf.
const TIME: &str = "cpu_ns_per_op";

/// The functions the workload's pair calls, whose probes the placed and at-entry runs differ
/// by.
const PAIR: [&str; 2] = ["pthread_mutex_lock", "pthread_mutex_unlock"];

/// Where the guest has the tracer, the workload's directory and the traced runs' files.
const TRACER: &str = "/usr/local/bin/thrtrace-bpf";
const PROGRAMS: &str = "/";
const TRACE_DIR: &str = "/tmp/b";

/// The workload's arguments for the process whose probes are listed: one thread, locking for
/// longer than the listings take (it is killed after them).
const LISTED_ARGS: &str = "1 1000000000000";

pub fn run_guest(arch: Arch, reps: usize) -> Result<()> {
    let host = WORKLOADS
        .iter()
        .find(|w| w.name == WORKLOAD)
        .with_context(|| format!("no workload {WORKLOAD}"))?;
    let workload = &Workload {
        traced_args: &TRACED_ARGS,
        ..*host
    };
    let program = Path::new(PROGRAMS).join(workload.program);
    let (tracer, dir) = (Path::new(TRACER), Path::new(TRACE_DIR));
    let ring = kernels::guest_ring_kib(arch).to_string();
    let ring = ["--buffer-kib", ring.as_str()];
    let mut runs = String::new();
    for rep in 1..=reps {
        let mut order: Vec<usize> = (0..MODES.len()).collect();
        if rep % 2 == 0 {
            order.reverse();
        }
        for m in order {
            let run = match MODES[m] {
                Mode::Untraced => {
                    let mut run = launched(tracer, None, dir, &program);
                    run.args(workload.untraced_args);
                    run
                }
                mode => {
                    let options = [mode.tracer_options(), &ring].concat();
                    traced(tracer, &program, workload, &options, dir)
                }
            };
            runs += &format!("{rep} {m} {}\n", shell_line(&run)?);
        }
    }
    let mut probes = String::new();
    for (m, mode) in MODES.iter().enumerate().skip(1) {
        let mut list = Command::new(tracer);
        list.args(["--events", workload.categories])
            .args(mode.tracer_options())
            .args(["--list-probes", "-p"]);
        probes += &format!("{m} {}\n", shell_line(&list)?);
    }
    let source = format!("tests/workloads/{}.c", workload.program);
    let etc = [
        ("bench.runs", runs),
        ("bench.probes", probes),
        (
            "bench.target",
            format!("{} {LISTED_ARGS}\n", program.display()),
        ),
    ];
    let lines = kernels::boot_bench(arch, CPUS, &[&source], &etc)?;
    print_guest(arch, workload, reps, &lines)
}

/// `command` as the guest script runs it: its words split at spaces, so none may hold one.
fn shell_line(command: &Command) -> Result<String> {
    let words: Vec<&OsStr> = std::iter::once(command.get_program())
        .chain(command.get_args())
        .collect();
    let words: Vec<&str> = words
        .iter()
        .map(|word| word.to_str().context("a word that is not UTF-8"))
        .collect::<Result<_>>()?;
    if let Some(word) = words.iter().find(|word| word.contains(char::is_whitespace)) {
        bail!("the guest cannot run a word with a space: {word:?}");
    }
    Ok(words.join(" "))
}

/// What one of the guest's runs wrote.
#[derive(Default)]
struct Output {
    stdout: String,
    stderr: String,
}

fn print_guest(arch: Arch, workload: &Workload, reps: usize, lines: &[String]) -> Result<()> {
    let mut outputs: BTreeMap<(usize, usize), Output> = BTreeMap::new();
    let mut listings: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for line in lines {
        if let Some(rest) = line.strip_prefix("KT|bench|") {
            let mut fields = rest.splitn(4, '|');
            let (Some(rep), Some(mode), Some(stream), Some(text)) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                bail!("a bench line the guest should not print: {line}");
            };
            let output = outputs.entry((rep.parse()?, mode.parse()?)).or_default();
            let into = match stream {
                "out" => &mut output.stdout,
                _ => &mut output.stderr,
            };
            *into += text.strip_prefix(' ').unwrap_or(text);
            *into += "\n";
        } else if let Some(rest) = line.strip_prefix("KT|probes|") {
            let (mode, text) = rest.split_once("| ").context("a probes line")?;
            listings
                .entry(mode.parse()?)
                .or_default()
                .push(text.to_owned());
        }
    }
    let mut samples = vec![Vec::new(); MODES.len()];
    for ((rep, m), output) in &outputs {
        let taken = sample(MODES[*m], output.stdout.as_bytes(), &output.stderr, TIME)
            .with_context(|| format!("repetition {rep}, {}", MODES[*m].label()))?;
        samples[*m].push(taken);
    }
    if samples.iter().any(|runs| runs.len() != reps) {
        bail!(
            "the guest ran fewer runs than asked for:\n{}",
            lines.join("\n")
        );
    }
    let kernel = lines
        .iter()
        .find_map(|line| line.strip_prefix("KT: kernel "))
        .and_then(|line| line.split(',').next())
        .unwrap_or("?");
    println!(
        "\n{} guest, kernel {kernel}, {CPUS} vCPU, emulated (qemu TCG; its clock counts a ns an \
         instruction: only ratios within one guest mean anything): {}; ns of the workload's CPU \
         time per pair (records/s: per second of it), median of {reps} runs",
        arch.name(),
        workload.name
    );
    print_mode_rows(&MODES, &samples);
    let ratio = |over: usize, under: usize| -> (f64, f64, f64) {
        let ratios: Vec<f64> = samples[over]
            .iter()
            .zip(&samples[under])
            .map(|(a, b)| a.ns_per_op / b.ns_per_op)
            .collect();
        let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let max = ratios.iter().copied().fold(0.0, f64::max);
        (median(&ratios), min, max)
    };
    let index = |mode: Mode| MODES.iter().position(|&m| m == mode).expect("one of MODES");
    let (contended, placed, entry) = (
        index(Mode::Contended),
        index(Mode::Placed),
        index(Mode::AtEntry),
    );
    let pair_probes = |m: usize| -> Vec<String> {
        listings
            .get(&m)
            .into_iter()
            .flatten()
            .filter(|line| PAIR.iter().any(|f| line.starts_with(&format!("{f} "))))
            .cloned()
            .collect()
    };
    let probe_column = |line: &String| line.split_whitespace().nth(2).map(str::to_owned);
    let moved = pair_probes(placed)
        .iter()
        .filter(|line| probe_column(line).is_some_and(|probe| probe != "+0x0"))
        .count();
    let (median_ratio, min, max) = ratio(contended, 0);
    println!(
        "  --contended / untraced, repetition by repetition: {median_ratio:.3} (from {min:.3} \
         to {max:.3})   goal at most 1.05"
    );
    let (median_ratio, min, max) = ratio(placed, entry);
    let goal = match moved {
        0 => "no probe of the pair is placed past its entry: about 1.00".to_owned(),
        n => format!("below 1.00: {n} probe(s) of the pair placed past the entry"),
    };
    println!(
        "  placed / --probe-at-entry, repetition by repetition: {median_ratio:.3} (from \
         {min:.3} to {max:.3})   goal {goal}"
    );
    println!("\nthe pair's probes, as --list-probes gives them in the guest");
    for (m, mode) in MODES.iter().enumerate().skip(1) {
        println!("  {}", mode.label());
        let lines = pair_probes(m);
        if lines.is_empty() {
            println!("    none");
        }
        for line in lines {
            println!("    {line}");
        }
    }
    Ok(())
}
