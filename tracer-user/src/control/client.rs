//! `thrtrace-bpf ctl`: sends one request to a running trace and prints its answer. Exits 0
//! once the operation is in force, 2 for a trace that is not running or a request it refused.

use std::{
    io::{self, BufRead, BufReader, Write},
    time::Duration,
};

use clap::{Args, Subcommand};

use super::{
    FilterHow, Reply, Request, StatusReport,
    socket::{ControlError, RuntimeDir, parse_trace_name},
};
use crate::{
    error::{EXIT_FAILURE, EXIT_USAGE, UsageError},
    say::{OutputFormat, StdoutError, print},
};

/// How long a trace may take to answer: a shutdown completes every file first.
const ANSWER_TIMEOUT: Duration = Duration::from_mins(2);

/// Why a trace could not be asked, or did not answer.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// No such trace, an operation it refused, or options that do not go together.
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The answer's timeout could not be set.
    #[error(transparent)]
    Timeout(io::Error),
    #[error("cannot send the request to trace {name}")]
    Send { name: String, source: io::Error },
    #[error("trace {name} did not answer")]
    NoAnswer { name: String, source: io::Error },
    #[error(
        "trace {name} answered something that is not a reply ({bytes} bytes): is it a \
         thrtrace-bpf of another version?"
    )]
    NotAReply {
        name: String,
        bytes: usize,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Print(#[from] StdoutError),
}

impl CtlError {
    /// A trace that is not running, or a request it refused, is the user's to change: exit
    /// status 2, as for bad input; anything else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            CtlError::Usage(_) => EXIT_USAGE,
            _ => EXIT_FAILURE,
        }
    }
}

pub fn run(args: &CtlArgs) -> Result<i32, CtlError> {
    if args.list {
        if args.operation.is_some() {
            return Err(UsageError("ctl --list takes no operation".into()).into());
        }
        return list();
    }
    let name = args.name.as_deref().unwrap_or_default();
    let operation = args.operation.clone().unwrap_or(CtlOperation::Status {
        format: OutputFormat::Text,
    });
    let request = match &operation {
        CtlOperation::Status { .. } => Request::Status,
        CtlOperation::Start => Request::Start,
        CtlOperation::Stop => Request::Stop,
        CtlOperation::Filter { how, events } => Request::Filter {
            how: *how,
            events: events.clone(),
        },
        CtlOperation::Flush => Request::Flush,
        CtlOperation::Clear => Request::Clear,
        CtlOperation::Shutdown => Request::Shutdown,
    };
    let dir = RuntimeDir::open(false).map_err(not_running(name))?;
    match ask(&dir, name, &request)? {
        Reply::Done { message } => print(format!("{name}: {message}\n"))?,
        Reply::Status(report) => {
            let text = match operation {
                CtlOperation::Status {
                    format: OutputFormat::Json,
                } => serde_json::to_string_pretty(&report)? + "\n",
                _ => report.text(),
            };
            print(text)?;
        }
        Reply::Refused { message } => {
            return Err(UsageError(format!("{name}: {message}")).into());
        }
    }
    Ok(0)
}

/// A missing runtime directory means no trace has run: said as for a name not found.
fn not_running(name: &str) -> impl Fn(ControlError) -> CtlError + '_ {
    move |error| match error {
        missing if missing.is_missing_directory() => usage(ControlError::NoSuchTrace {
            name: name.to_owned(),
        }),
        other => usage(other),
    }
}

/// An error about what the user asked for (a trace that is not there): exit status 2.
fn usage(error: ControlError) -> CtlError {
    match error {
        ControlError::NoSuchTrace { .. } => UsageError(error.to_string()).into(),
        other => other.into(),
    }
}

/// Sends `request` to trace `name` and reads its one-line answer.
pub fn ask(dir: &RuntimeDir, name: &str, request: &Request) -> Result<Reply, CtlError> {
    let mut stream = dir.connect(name).map_err(usage)?;
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .map_err(CtlError::Timeout)?;
    let mut line = serde_json::to_string(request)?;
    line.push('\n');
    stream
        .write_all(line.as_bytes())
        .map_err(|source| CtlError::Send {
            name: name.to_owned(),
            source,
        })?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .map_err(|source| CtlError::NoAnswer {
            name: name.to_owned(),
            source,
        })?;
    serde_json::from_str(&answer).map_err(|source| CtlError::NotAReply {
        name: name.to_owned(),
        bytes: answer.len(),
        source,
    })
}

/// `ctl --list`: a line per running trace.
fn list() -> Result<i32, CtlError> {
    let dir = match RuntimeDir::open(false) {
        Err(missing) if missing.is_missing_directory() => {
            say!("thrtrace-bpf: no traces are running");
            return Ok(0);
        }
        result => result?,
    };
    let reports: Vec<StatusReport> = dir
        .names()?
        .into_iter()
        // A stale socket, or a trace ending as we ask: not running.
        .filter_map(|name| match ask(&dir, &name, &Request::Status) {
            Ok(Reply::Status(report)) => Some(*report),
            _ => None,
        })
        .collect();
    if reports.is_empty() {
        say!("thrtrace-bpf: no traces are running");
        return Ok(0);
    }
    let mut table = format!(
        "{:<24} {:>8} {:<10} {:<20} {}\n",
        "NAME", "PID", "STATE", "TARGETS", "SINKS"
    );
    for report in reports {
        table += &format!(
            "{:<24} {:>8} {:<10} {:<20} {}\n",
            report.name,
            report.pid,
            super::plain(&report.posix_stream_status),
            report.targets_text(),
            report.sinks.join(", ")
        );
    }
    print(table)?;
    Ok(0)
}

#[derive(Debug, Args)]
#[command(
    arg_required_else_help = true,
    after_help = "Examples:\n  sudo thrtrace-bpf ctl --list\n  sudo thrtrace-bpf ctl db status\n  \
                  sudo thrtrace-bpf ctl db filter set mutex:cond_wait\n  \
                  sudo thrtrace-bpf ctl db flush"
)]
pub struct CtlArgs {
    /// List the running traces: name, tracer pid, targets, sinks
    #[arg(long, conflicts_with = "name")]
    pub list: bool,

    /// The trace's name, as its --name gave it (see --list)
    #[arg(value_parser = parse_trace_name, required_unless_present = "list")]
    pub name: Option<String>,

    #[command(subcommand)]
    pub operation: Option<CtlOperation>,
}

#[derive(Clone, Debug, Subcommand)]
pub enum CtlOperation {
    /// The POSIX stream status, records, losses, rate, targets and sinks
    Status {
        #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
        format: OutputFormat,
    },
    /// Record again (after stop, or --stopped)
    Start,
    /// Record nothing; the probes stay placed
    Stop,
    /// Change which events are recorded: categories, event names or C library functions,
    /// separated by commas or colons
    Filter {
        #[arg(value_enum)]
        how: FilterHow,
        #[arg(value_name = "EVENTS")]
        events: String,
    },
    /// Write what the stream holds to the log now (the flight recorder's way out)
    Flush,
    /// Drop what the stream holds, unwritten
    Clear,
    /// End the trace as Ctrl-C does: complete files, summary, the tracer exits 0
    Shutdown,
}
