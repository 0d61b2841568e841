//! The commands that read a trace log back, each a thin layer over
//! `tracer_model::log::LogReader`: [`dump`] prints its events, [`info`] sums them up,
//! [`convert`] replays them into a sink (the tr files, or a CTF trace), and [`report`] tables
//! them per lock and per thread through `tracer_model::analysis`, its callers located by
//! [`symbolize`], or exports its contended waits' call stacks ([`samples`]) as a [`pprof`]
//! profile, folded stacks or a flame graph ([`flame`]). The same analysis, live, as sinks the
//! command line gives a trace: [`top`] draws the report as it runs, [`pyroscope`] pushes each
//! interval's profile to a profiling server.

pub mod convert;
pub mod dump;
pub mod flame;
pub mod info;
pub mod perfetto;
pub mod pprof;
pub mod pyroscope;
pub mod report;
pub mod samples;
pub mod top;

use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

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

/// A file a report writes once its whole content is made: its directory opened and its name
/// checked when the command starts, before the log is read, so that a mistyped path is said at
/// once; created, as every file we write is (`OutputDir::create`), only with all of it to write.
pub struct OutputFile {
    dir: OutputDir,
    name: String,
    path: PathBuf,
}

impl OutputFile {
    pub fn prepare(path: &Path) -> Result<OutputFile> {
        let (dir, name) = output_place(path)?;
        dir.check_replaceable(&name)
            .map_err(|error| cannot_create(path, error))?;
        Ok(OutputFile {
            dir,
            name,
            path: path.to_owned(),
        })
    }

    /// As the user named it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates the file with `bytes`; returns where it is.
    pub fn write(self, bytes: &[u8]) -> Result<PathBuf> {
        let (mut file, _) = self
            .dir
            .create(&self.name)
            .map_err(|error| cannot_create(&self.path, error))?;
        file.write_all(bytes)
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        Ok(self.path)
    }
}

/// A file that cannot be created at `path`: a name held by what is never replaced (a
/// directory, a device) is the user's to change, as a bad option is.
fn cannot_create(path: &Path, error: std::io::Error) -> anyhow::Error {
    let context = format!("cannot create {}", path.display());
    match error.kind() {
        std::io::ErrorKind::AlreadyExists => UsageError(format!("{context}: {error}")).into(),
        _ => anyhow::Error::new(error).context(context),
    }
}
