//! Call stacks under load: a waiter and a waker on a fresh futex word each round
//! (tests/workloads/stack_load.c), at full speed and paced to the rate the stacks are to hold
//! at ([`PACES`]), run untraced and beside a system-wide `--contended` trace (call stacks on,
//! its default). For each pace and tracer: the records a second, the share that carried the
//! stack they were to carry and the share whose stack was whole, the records lost, what a
//! round (a wait that slept and the wake that ended it) cost beyond untraced, and the tracer's
//! CPU as a share of one CPU.

use std::{
    io::BufReader,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use super::{
    empty_dir, median, reap_tracer, share_cell, table_head, table_row, wait_until_tracing,
};
use crate::shell::{command, compile_workload};

/// The workload's rounds: a second or two untraced.
const ROUNDS: u32 = 20_000;

/// The workload's paces, in rounds a second: full speed, and 20,000 contended records a second
/// (a round is two: the wait that slept and the wake that ended it), where every stack is to
/// be carried whole.
const PACES: [Option<u32>; 2] = [None, Some(10_000)];

/// One tracer's figures, at each of [`PACES`].
#[derive(Default)]
pub struct StacksUnderLoad {
    paces: [Runs; PACES.len()],
}

impl StacksUnderLoad {
    /// One run untraced and one traced by `tracer` at each pace, its files in `dir`.
    pub fn take(&mut self, tracer: &Path, dir: &Path) -> Result<()> {
        for (runs, pace) in self.paces.iter_mut().zip(PACES) {
            runs.take(tracer, dir, pace)?;
        }
        Ok(())
    }
}

/// One tracer's figures at one pace, run by run.
#[derive(Default)]
struct Runs {
    untraced_s: Vec<f64>,
    traced_s: Vec<f64>,
    records_per_s: Vec<f64>,
    stacked_share: Vec<f64>,
    whole_share: Vec<f64>,
    lost: Vec<f64>,
    cpu_share: Vec<f64>,
}

impl Runs {
    /// One run untraced and one traced by `tracer` at `pace` (rounds a second, `None` for full
    /// speed), its files in `dir`.
    fn take(&mut self, tracer: &Path, dir: &Path, pace: Option<u32>) -> Result<()> {
        let program = compile_workload("stack_load")?;
        let mut args = vec!["futex".to_owned(), ROUNDS.to_string()];
        args.extend(pace.map(|rounds| rounds.to_string()));
        let started = Instant::now();
        crate::shell::run(command(&program).args(&args).stdout(Stdio::null()))?;
        self.untraced_s.push(started.elapsed().as_secs_f64());
        empty_dir(dir)?;
        // System-wide, as a host's trace would be: every process's contended calls.
        let mut traced = command(tracer)
            .args(["--contended", "--dir"])
            .arg(dir)
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stderr = BufReader::new(traced.stderr.take().context("stderr")?);
        wait_until_tracing(&mut stderr)?;
        let started = Instant::now();
        let ran = crate::shell::run(command(&program).args(&args).stdout(Stdio::null()));
        let seconds = started.elapsed().as_secs_f64();
        // The records made by now are in the rings: the trace is stopped after a drain.
        std::thread::sleep(Duration::from_millis(200));
        let traced_for = started.elapsed().as_secs_f64();
        // SAFETY: a signal to our own child, not reaped yet (the reaping waits for it).
        unsafe { libc::kill(traced.id() as libc::pid_t, libc::SIGINT) };
        let ended = reap_tracer(&traced, &mut stderr)?;
        ran?;
        if ended.written == 0 {
            bail!("the system-wide trace wrote no record: {}", ended.said);
        }
        self.traced_s.push(seconds);
        self.records_per_s.push(ended.written as f64 / seconds);
        self.stacked_share
            .push(ended.stacks.carried_share(ended.written));
        self.whole_share.push(ended.stacks.whole_share());
        self.lost.push(ended.lost as f64);
        self.cpu_share.push(ended.cpu_ns / 1e9 / traced_for);
        Ok(())
    }

    /// The medians: records a second, share stacked, share whole, lost, µs added per round,
    /// tracer CPU.
    fn medians(&self) -> [f64; 6] {
        let added: Vec<f64> = self
            .traced_s
            .iter()
            .zip(&self.untraced_s)
            .map(|(traced, untraced)| (traced - untraced) / f64::from(ROUNDS) * 1e6)
            .collect();
        [
            median(&self.records_per_s),
            median(&self.stacked_share),
            median(&self.whole_share),
            median(&self.lost),
            median(&added),
            median(&self.cpu_share),
        ]
    }
}

/// Prints the figures of each `(name, figures)`, a column each, median of `reps`: a table a
/// pace.
pub fn print(tracers: &[(&str, &StacksUnderLoad)], reps: usize) {
    for (p, pace) in PACES.iter().enumerate() {
        let pace = match pace {
            Some(rounds) => format!("{rounds} rounds a second"),
            None => "full speed".to_owned(),
        };
        println!(
            "\ncall stacks under load: stack_load futex {ROUNDS} (a waiter and a waker, a fresh \
             word a round) at {pace}, traced system-wide `--contended`; median of {reps}"
        );
        let names: Vec<&str> = tracers.iter().map(|(name, _)| *name).collect();
        table_head(&names);
        let medians: Vec<[f64; 6]> = tracers.iter().map(|(_, f)| f.paces[p].medians()).collect();
        // A paced round takes its time traced or not: what tracing adds shows at full speed.
        print_rows(&medians, PACES[p].is_none());
    }
}

/// The rows of one table, from each tracer's medians; `at_full_speed`: with the time a round
/// takes more.
fn print_rows(medians: &[[f64; 6]], at_full_speed: bool) {
    let row = |what: &str, i: usize, show: &dyn Fn(f64) -> String| {
        let cells: Vec<String> = medians.iter().map(|m| show(m[i])).collect();
        table_row(what, &cells);
    };
    row("records per second", 0, &|v| format!("{v:.0}"));
    row("records with the stack they were to carry", 1, &share_cell);
    row(
        "records with a whole stack, to the thread's start",
        2,
        &share_cell,
    );
    row("records lost", 3, &|v| format!("{v:.0}"));
    if at_full_speed {
        row("µs added per round (a wait and its wake)", 4, &|v| {
            format!("{v:.1}")
        });
    }
    row("tracer CPU, share of one CPU", 5, &|v| {
        format!("{:.0}%", v * 100.0)
    });
}
