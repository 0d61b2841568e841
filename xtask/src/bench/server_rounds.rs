//! A real server under load ([`Server`]: MariaDB under sysbench) traced `--contended -p`, call
//! stacks on, as a user would trace a production server: its transactions a second beside
//! untraced, and of the trace the records a second, the share that carried the call stack they
//! were to carry and the share whose stack was whole, the tracer's CPU (medians), and the
//! records lost (in all).

use std::path::Path;

use anyhow::Result;

use super::{
    Traced, beside_trace, ensure_installed, median, mirrored_rounds, share_cell, table_head,
    table_row,
};
use crate::{server::Server, shell::workspace_root};

/// How long each of the real server's rounds runs.
const SERVER_SECONDS: u32 = 10;

/// A private server, its caches warmed by a first round unmeasured.
pub fn start_server() -> Result<Server> {
    ensure_installed("sysbench", "sysbench", "the real server's load")?;
    ensure_installed("mariadbd", "mariadb-server", "the real server's run")?;
    let server = Server::start(&workspace_root().join("target/bench-server"))?;
    server.transactions_per_second(SERVER_SECONDS)?;
    Ok(server)
}

/// One repetition of the real server's rounds: the untraced rounds' transactions a second, and
/// the traced ones' with how their traces ended.
pub struct ServerRound {
    untraced: [f64; 2],
    traced: [Traced<f64>; 2],
}

impl ServerRound {
    /// Four rounds of the real server's load, untraced, traced, traced, untraced (traced
    /// `--contended`, its default call stacks on), the traces' files in `dir`.
    pub fn take(tracer: &Path, server: &Server, dir: &Path) -> Result<Self> {
        let rate = || server.transactions_per_second(SERVER_SECONDS);
        let (untraced, traced) = mirrored_rounds(rate, || {
            beside_trace(tracer, &["--contended"], server.pid(), dir, rate)
        })?;
        Ok(ServerRound { untraced, traced })
    }

    fn untraced_rate(&self) -> f64 {
        f64::midpoint(self.untraced[0], self.untraced[1])
    }

    /// The mean of `figure` over the traced rounds.
    fn traced_mean(&self, figure: impl Fn(&Traced<f64>) -> f64) -> f64 {
        f64::midpoint(figure(&self.traced[0]), figure(&self.traced[1]))
    }

    /// Transactions a second traced, as a share of untraced (each the mean of its rounds).
    fn ratio(&self) -> f64 {
        self.traced_mean(|t| t.result) / self.untraced_rate()
    }

    fn lost(&self) -> u64 {
        self.traced.iter().map(|t| t.ended.lost).sum()
    }
}

/// Prints the figures of each `(name, rounds)`, a column each, median of `reps`; the minimum
/// ratio too, as a round that drifted shows there.
pub fn print(tracers: &[(&str, &[ServerRound])], reps: usize) {
    println!(
        "\na real server under load: MariaDB ({}), {SERVER_SECONDS} s rounds untraced, traced \
         `--contended -p` (call stacks on), traced, untraced; median of {reps}",
        Server::load()
    );
    let names: Vec<&str> = tracers.iter().map(|(name, _)| *name).collect();
    table_head(&names);
    let row = |what: &str, figure: &dyn Fn(&ServerRound) -> f64, show: &dyn Fn(f64) -> String| {
        let cells: Vec<String> = tracers
            .iter()
            .map(|(_, rounds)| show(median(&rounds.iter().map(figure).collect::<Vec<_>>())))
            .collect();
        table_row(what, &cells);
    };
    row(
        "transactions/s untraced",
        &ServerRound::untraced_rate,
        &|v| format!("{v:.1}"),
    );
    row(
        "transactions/s traced",
        &|r| r.traced_mean(|t| t.result),
        &|v| format!("{v:.1}"),
    );
    row("traced / untraced", &ServerRound::ratio, &|v| {
        format!("{v:.3}")
    });
    let lowest: Vec<String> = tracers
        .iter()
        .map(|(_, rounds)| {
            let lowest = rounds
                .iter()
                .map(ServerRound::ratio)
                .fold(f64::INFINITY, f64::min);
            format!("{lowest:.3}")
        })
        .collect();
    table_row("traced / untraced, lowest", &lowest);
    row(
        "records per second",
        &|r| r.traced_mean(Traced::records_per_s),
        &|v| format!("{v:.0}"),
    );
    row(
        "records with the stack they were to carry",
        &|r| r.traced_mean(|t| t.ended.stacks.carried_share(t.ended.written)),
        &share_cell,
    );
    row(
        "records with a whole stack, to the thread's start",
        &|r| r.traced_mean(|t| t.ended.stacks.whole_share()),
        &share_cell,
    );
    row(
        "tracer CPU, share of one CPU",
        &|r| r.traced_mean(Traced::cpu_share),
        &|v| format!("{:.1}%", v * 100.0),
    );
    let lost: Vec<String> = tracers
        .iter()
        .map(|(_, rounds)| {
            rounds
                .iter()
                .map(ServerRound::lost)
                .sum::<u64>()
                .to_string()
        })
        .collect();
    table_row("records lost, all repetitions", &lost);
}
