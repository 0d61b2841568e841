//! The command line, and its validation into a [`Config`] before anything is created.

use std::{ffi::OsString, path::PathBuf, time::Duration};

use anyhow::Result;
use clap::Parser;
use tracer_common::Category;

use crate::{
    attach::{launch, targets},
    error::UsageError,
    sinks::output_dir::OutputDir,
    usage_bail,
};

#[derive(Debug, Parser)]
#[command(
    name = "thrtrace-bpf",
    version,
    about = "Trace the pthread calls of running or launched processes into thread_trace(4) tr.* files",
    after_help = "Examples:\n  sudo thrtrace-bpf -p 1234 --events mutex:cond --dir /tmp/trace\n  \
                  sudo thrtrace-bpf --unbuffered -- ./server --port 8080"
)]
pub struct Cli {
    /// Trace the process with this pid (repeat for several)
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,

    /// Colon-separated event categories to trace, e.g. mutex:cond [default: all]
    #[arg(short = 'e', long, env = "THR_TRACE_EVENTS", value_name = "CATEGORIES")]
    pub events: Option<String>,

    /// Directory for the tr.* files [default: the current directory]
    #[arg(short = 'd', long, env = "THR_TRACE_DIR", value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Write each record to its file as it arrives (or set THR_TRACE_BUF to any value)
    #[arg(short = 'u', long)]
    pub unbuffered: bool,

    /// Stop tracing after this many seconds
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,

    /// Size of each CPU's ring buffer in KiB (a power of two, at least 4)
    #[arg(long, value_name = "KIB", default_value_t = crate::capture::datapath::DEFAULT_RING_BYTES / 1024)]
    pub buffer_kib: u32,

    /// Also trace the children the targets fork (and what they exec), from their first call
    #[arg(short = 'f', long)]
    pub follow: bool,

    /// Put every probe at its function's entry instead of where the kernel need not single-step
    #[arg(long)]
    pub probe_at_entry: bool,

    /// Print where each probe would go in the target's (or this program's) pthread library, and exit
    #[arg(long)]
    pub list_probes: bool,

    /// Attach BPF programs that record nothing at the same probes (measures the probes' cost)
    #[arg(long)]
    pub empty_programs: bool,

    /// Never lose a record: stop (SIGSTOP) a traced thread that writes to a ring more than half
    /// full, until the tracer has drained the rings (or set THR_TRACE_LOSSLESS to any value)
    #[arg(long)]
    pub lossless: bool,

    /// Also say how many records were lost on each CPU at the end
    #[arg(short = 'v', long)]
    pub verbose: bool,

    /// The command to start and trace
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// What to trace and where, checked.
#[derive(Debug)]
pub struct Config {
    pub categories: Vec<Category>,
    /// Where files go; `None` only with `list_probes`, which writes none.
    pub output: Option<OutputDir>,
    pub unbuffered: bool,
    pub duration: Option<Duration>,
    pub ring_bytes: u32,
    pub empty_programs: bool,
    pub probe_at_entry: bool,
    pub follow: bool,
    pub verbose: bool,
    pub lossless: bool,
    /// Only print where the probes would go.
    pub list_probes: bool,
    pub target: Target,
}

#[derive(Debug)]
pub enum Target {
    Pids(Vec<u32>),
    Command(Vec<OsString>),
    /// Every process that maps a pthread library, now or later.
    SystemWide,
}

impl Cli {
    pub fn into_config(mut self) -> Result<Config> {
        let categories = parse_categories(self.events.as_deref())?;
        if self.list_probes && self.pids.is_empty() {
            if !self.command.is_empty() {
                usage_bail!(
                    "--list-probes takes -p PID, or nothing for this program's own C library"
                );
            }
            // The tracer's own C library: what a command started from here would most likely map.
            self.pids.push(std::process::id());
        }
        let target = match (self.pids.is_empty(), self.command.is_empty()) {
            (false, false) => usage_bail!("give either -p PID or -- COMMAND, not both"),
            (true, true) => Target::SystemWide,
            (false, true) => {
                for &pid in &self.pids {
                    if pid == 0 || !targets::process_exists(pid) {
                        usage_bail!("no process with pid {pid}: check it with ps");
                    }
                }
                Target::Pids(self.pids)
            }
            (true, false) => {
                launch::check_runnable(&self.command[0])?;
                Target::Command(self.command)
            }
        };
        if self.follow && matches!(target, Target::SystemWide) {
            usage_bail!(
                "--follow needs -p PID or -- COMMAND: system-wide tracing sees every process"
            );
        }
        let duration = match self.duration {
            None => None,
            Some(secs) if secs.is_finite() && secs > 0.0 => Some(Duration::from_secs_f64(secs)),
            Some(secs) => usage_bail!("--duration {secs}: give a positive number of seconds"),
        };
        let ring_bytes = self
            .buffer_kib
            .checked_mul(1024)
            .filter(|b| b.is_power_of_two() && *b >= 4096);
        let Some(ring_bytes) = ring_bytes else {
            usage_bail!(
                "--buffer-kib {}: give a power of two from 4 up",
                self.buffer_kib
            );
        };
        let dir = match self.dir {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => PathBuf::from("."),
        };
        // Opened now, once: every file is created relative to it (see `sinks::output_dir`).
        let output = match self.list_probes {
            true => None,
            false => Some(OutputDir::open(&dir).map_err(|e| UsageError(e.to_string()))?),
        };
        let unbuffered =
            self.unbuffered || std::env::var_os("THR_TRACE_BUF").is_some_and(|v| !v.is_empty());
        Ok(Config {
            categories,
            output,
            unbuffered,
            duration,
            ring_bytes,
            empty_programs: self.empty_programs,
            probe_at_entry: self.probe_at_entry,
            follow: self.follow,
            verbose: self.verbose,
            lossless: self.lossless
                || std::env::var_os("THR_TRACE_LOSSLESS").is_some_and(|v| !v.is_empty()),
            list_probes: self.list_probes,
            target,
        })
    }
}

/// `THR_TRACE_EVENTS` syntax: empty means every category this build traces.
pub fn parse_categories(spec: Option<&str>) -> Result<Vec<Category>> {
    let traced = || Category::ALL.into_iter().filter(|c| c.is_traced());
    let spec = spec.unwrap_or("");
    if spec.is_empty() {
        return Ok(traced().collect());
    }
    let mut categories = Vec::new();
    for name in spec.split(':').filter(|n| !n.is_empty()) {
        let Some(category) = Category::from_name(name) else {
            let valid: Vec<&str> = Category::ALL.iter().map(|c| c.name()).collect();
            usage_bail!(
                "unknown event category '{name}': valid categories are {}",
                valid.join(", ")
            );
        };
        if !category.is_traced() {
            usage_bail!(
                "event category '{name}' has no Linux counterpart (glibc has no such calls): \
                 choose from {}",
                traced().map(|c| c.name()).collect::<Vec<_>>().join(", ")
            );
        }
        if !categories.contains(&category) {
            categories.push(category);
        }
    }
    Ok(categories)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_or_unset_means_every_traced_category() {
        let all: Vec<Category> = Category::ALL
            .into_iter()
            .filter(|c| c.is_traced())
            .collect();
        assert_eq!(parse_categories(None).unwrap(), all);
        assert_eq!(parse_categories(Some("")).unwrap(), all);
    }

    #[test]
    fn parses_colon_separated_names_once_each() {
        assert_eq!(
            parse_categories(Some("cond:mutex:cond")).unwrap(),
            [Category::Cond, Category::Mutex]
        );
    }

    #[test]
    fn unknown_names_list_the_valid_ones() {
        let error = parse_categories(Some("mutex:bogus"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown event category 'bogus'"), "{error}");
        assert!(error.contains("barrier_spin"), "{error}");
    }
}
