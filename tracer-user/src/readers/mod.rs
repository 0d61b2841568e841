//! The commands that read a trace log back, each a thin layer over
//! `tracer_model::log::LogReader`: [`dump`] prints its events, [`info`] sums them up,
//! [`convert`] replays them into a sink (the tr files, or a CTF trace), and [`report`] tables
//! them per lock and per thread through `tracer_model::analysis`, its callers located by
//! [`symbolize`]; [`pprof`] makes its profiles. The same analysis, live, as sinks the command
//! line gives a trace: [`top`] draws the report as it runs, [`pyroscope`] pushes each
//! interval's profile to a profiling server.

pub mod convert;
pub mod dump;
pub mod info;
pub mod perfetto;
pub mod pprof;
pub mod pyroscope;
pub mod report;
pub mod top;

use std::path::Path;

use anyhow::{Context, Result};
use tracer_model::log::{Attributes, LogReader};

use crate::{
    error::UsageError,
    sinks::output_dir::{OutputDir, split_file_path},
};

/// Opens a log, saying so when it was not closed (read up to its last whole packet).
pub fn open_log(path: &Path) -> Result<LogReader> {
    let reader = LogReader::open(path).with_context(|| cannot_read(path))?;
    if let Some(offset) = reader.unclosed_at() {
        say!(
            "thrtrace-bpf: warning: {} was not closed (its tracer was killed or is still \
             running): it reads up to byte {offset}",
            path.display()
        );
    }
    Ok(reader)
}

/// What an error reading the log at `path` says first.
pub fn cannot_read(path: &Path) -> String {
    format!("cannot read {}", path.display())
}

/// The log's size bound, in words.
pub fn log_size(attributes: &Attributes) -> String {
    attributes
        .log_max_size
        .map_or("unbounded".to_owned(), |s| format!("{s} bytes"))
}

/// Nanoseconds since the epoch as `seconds.nanoseconds`.
pub fn timestamp(ns: i64) -> String {
    format!(
        "{}.{:09}",
        ns.div_euclid(1_000_000_000),
        ns.rem_euclid(1_000_000_000)
    )
}

/// The directory a file goes in, opened, and its name there.
fn output_place(path: &Path) -> Result<(OutputDir, String)> {
    let Some((parent, name)) = split_file_path(path) else {
        return Err(UsageError(format!("{}: name a file", path.display())).into());
    };
    let dir = OutputDir::open(parent).map_err(|e| e.usage("output file"))?;
    Ok((dir, name.to_owned()))
}
