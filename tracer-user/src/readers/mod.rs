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
pub mod text;
pub mod top;

use std::{
    io::{self, Write as _},
    path::{Path, PathBuf},
};

use tracer_model::log::{Attributes, LogError, LogReader};

use crate::{
    error::{EXIT_FAILURE, EXIT_USAGE, UsageError},
    say::StdoutError,
    sinks::output_dir::{FileKind, OutputDir, ReplaceError, split_file_path},
};

/// Why a command that reads a trace failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// The log cannot be read, or is not one.
    #[error("cannot read {}", .path.display())]
    Log { path: PathBuf, source: LogError },
    /// A directory of tr files, or one of them, cannot be read.
    #[error("cannot read {}", .path.display())]
    TrFiles { path: PathBuf, source: io::Error },
    #[error("cannot create {}", .path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("cannot write {}", .path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error(
        "cannot convert {}: what is in {} is incomplete",
        .log.display(),
        .dir.display()
    )]
    Convert {
        log: PathBuf,
        dir: PathBuf,
        source: convert::ReplayError,
    },
    #[error("cannot draw the flame graph")]
    FlameGraph(#[source] io::Error),
    #[error("cannot compress the profile")]
    Compress(#[source] io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Print(#[from] StdoutError),
}

impl ReadError {
    /// A log that cannot be read is bad input, as a bad option is: exit status 2, as for a
    /// usage error; anything else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            ReadError::Usage(_)
            | ReadError::Log { .. }
            | ReadError::Convert {
                source: convert::ReplayError::Log(_),
                ..
            } => EXIT_USAGE,
            _ => EXIT_FAILURE,
        }
    }

    /// What an error reading the log at `path` is.
    pub fn log(path: &Path) -> impl FnOnce(LogError) -> ReadError + '_ {
        |source| ReadError::Log {
            path: path.to_owned(),
            source,
        }
    }
}

/// Opens a log, saying so when it was not closed or was cut short (read up to its last whole
/// packet).
pub fn open_log(path: &Path) -> Result<LogReader, ReadError> {
    let reader = LogReader::open(path).map_err(ReadError::log(path))?;
    match (reader.unclosed_at(), reader.cut_short()) {
        (Some(offset), true) => say!(
            "thrtrace-bpf: warning: {} was cut short after it was written (a partial copy, a \
             full disk): it reads up to byte {offset}, its last whole packet",
            path.display()
        ),
        (Some(offset), false) => say!(
            "thrtrace-bpf: warning: {} was not closed (its tracer was killed or is still \
             running): it reads up to byte {offset}",
            path.display()
        ),
        (None, _) => {}
    }
    Ok(reader)
}

/// The log's size bound, in words.
pub fn log_size(attributes: &Attributes) -> String {
    attributes
        .log_max_size
        .map_or("unbounded".to_owned(), |s| format!("{s} bytes"))
}

/// Nanoseconds since the epoch as the local date and time, to the microsecond, with the
/// zone's offset: `2026-12-03 18:09:19.466794 +0000`.
pub fn timestamp(ns: i64) -> String {
    let seconds = ns.div_euclid(1_000_000_000);
    let micros = ns.rem_euclid(1_000_000_000) / 1_000;
    match local_time(seconds) {
        Some(tm) => {
            let offset = tm.tm_gmtoff / 60;
            format!(
                "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{micros:06} {}{:02}{:02}",
                tm.tm_year + 1900,
                tm.tm_mon + 1,
                tm.tm_mday,
                tm.tm_hour,
                tm.tm_min,
                tm.tm_sec,
                if offset < 0 { '-' } else { '+' },
                offset.abs() / 60,
                offset.abs() % 60
            )
        }
        None => self::seconds(i128::from(ns)),
    }
}

/// Nanoseconds as seconds to the microsecond: `1796165536.123456`, `0.000518`.
pub fn seconds(ns: i128) -> String {
    format!(
        "{}.{:06}",
        ns.div_euclid(1_000_000_000),
        ns.rem_euclid(1_000_000_000) / 1_000
    )
}

/// `seconds` since the epoch in the local time zone (TZ, /etc/localtime), as the C library
/// breaks it down; none if it cannot.
pub fn local_time(seconds: i64) -> Option<libc::tm> {
    // SAFETY: `tm` is plain data, which zeroes make a valid value of.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let time: libc::time_t = seconds;
    // SAFETY: both pointers are to live values of their types; localtime_r writes only `tm`.
    let converted = unsafe { libc::localtime_r(&raw const time, &raw mut tm) };
    (!converted.is_null()).then_some(tm)
}

/// The directory a file goes in, opened, and its name there.
fn output_place(path: &Path) -> Result<(OutputDir, String), ReadError> {
    let Some((parent, name)) = split_file_path(path) else {
        return Err(UsageError(format!("{}: name a file", path.display())).into());
    };
    let dir = OutputDir::open(parent).map_err(|e| e.usage("output file"))?;
    Ok((dir, name.to_owned()))
}

/// A file a report writes once its whole content is made: its directory opened and its name
/// checked when the command starts, before the log is read, so that a mistyped path or a
/// file that is not of its kind is said at once; created, as every file we write is
/// (`OutputDir::create_kind`: an earlier one of its kind kept as `FILE.old`), only with all of
/// it to write.
pub struct OutputFile {
    dir: OutputDir,
    name: String,
    path: PathBuf,
    kind: &'static FileKind,
}

impl OutputFile {
    pub fn prepare(path: &Path, kind: &'static FileKind) -> Result<OutputFile, ReadError> {
        let (dir, name) = output_place(path)?;
        dir.check_kind(&name, kind)
            .map_err(|error| cannot_create(path, error))?;
        Ok(OutputFile {
            dir,
            name,
            path: path.to_owned(),
            kind,
        })
    }

    /// As the user named it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates the file with `bytes`; returns where it is.
    pub fn write(self, bytes: &[u8]) -> Result<PathBuf, ReadError> {
        let (mut file, _) = self
            .dir
            .create_kind(&self.name, self.kind)
            .map_err(|error| cannot_create(&self.path, error))?;
        if let Err(source) = file.write_all(bytes) {
            return Err(ReadError::Write {
                path: self.path,
                source,
            });
        }
        Ok(self.path)
    }
}

/// A file that cannot be created at `path`: a name held by what is never replaced (a file of
/// another kind, a link, a directory, a device) is the user's to change, as a bad option is.
fn cannot_create(path: &Path, error: ReplaceError) -> ReadError {
    let path = path.to_owned();
    match error {
        ReplaceError::Io(source) if source.kind() != io::ErrorKind::AlreadyExists => {
            ReadError::Create { path, source }
        }
        refused => UsageError(format!("cannot create {}: {refused}", path.display())).into(),
    }
}

#[cfg(test)]
mod tests {
    use std::{fs::File, io::Write as _};

    use super::*;

    /// Whether `kind` takes `bytes` for one of its files.
    fn is_one(kind: &FileKind, bytes: &[u8]) -> bool {
        let path = std::env::temp_dir().join(format!("thrtrace-kind-{}", std::process::id()));
        File::create(&path).unwrap().write_all(bytes).unwrap();
        let answer = (kind.is_one)(&File::open(&path).unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        answer
    }

    #[test]
    fn each_kind_of_output_tells_its_own_files_from_others() {
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(b"profile").unwrap();
        let profile = gzip.finish().unwrap();
        let svg = b"<?xml version=\"1.0\" standalone=\"no\"?><!DOCTYPE svg><svg version=\"1.1\">";
        let own: [(&FileKind, &[u8]); 4] = [
            (&pprof::PROFILE, &profile),
            (
                &flame::FOLDED,
                b"main;work;lock 0x10 1200\nmain;lock 0x10 7\n",
            ),
            (&flame::FLAME_GRAPH, svg),
            (
                &perfetto::TIMELINE,
                b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[]}",
            ),
        ];
        let notes: &[u8] = b"notes that took a week to write\n";
        for (kind, bytes) in own {
            assert!(is_one(kind, bytes), "{}", kind.name);
            assert!(!is_one(kind, notes), "{}", kind.name);
            for (other, others) in own {
                assert_eq!(
                    is_one(kind, others),
                    std::ptr::eq(kind, other),
                    "{}",
                    kind.name
                );
            }
        }
        assert!(
            is_one(&flame::FOLDED, b""),
            "written where no wait had a stack"
        );
    }
}
