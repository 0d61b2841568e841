//! One tracing run, from a [`Config`]: [`Session::new`] (`start.rs`) opens the outputs, loads
//! the BPF object, attaches the targets and starts the sinks; [`Session::run`] (`run.rs`) is
//! the loop that drains the rings into the sinks until a stop condition, then detaches, writes
//! what is left, and reports. Records and the system events the session makes (a process
//! attached or gone, a gap, an error) pass through one reorder stage, so that the sinks get
//! them in time order (`flow.rs`). Among the sinks are the session's watches, for long blocks
//! (`blocks.rs`) and deadlocks (`deadlocks.rs`): what they find comes back to the session to be
//! written to every sink (`flow::Finding`). The session also answers the controller
//! (`control.rs`), watches its targets (`watch.rs`), reads what /proc says of the processes it
//! sees (`facts.rs`), and unwinds the call stacks records are taken with (`stacks.rs`).

mod blocks;
pub mod config;
mod control;
mod deadlocks;
mod facts;
mod flow;
mod run;
mod short_waits;
mod stacks;
mod start;
mod watch;

use std::io;

use tokio::sync::mpsc;
use tracer_model::stack::StackShare;

use self::{
    blocks::BlockFlushes,
    config::Config,
    control::{Controller, Recording},
    flow::{Flow, Found},
    run::Clock,
    watch::Watched,
};
use crate::{
    attach::{
        exec_follow::{FollowError, Followed},
        launch::LaunchError,
        probes::{AttachError, Probes},
        targets::MapsError,
    },
    capture::{
        CaptureError, datapath::DataPath, decode::Decoder, features::KernelTooOld,
        kernel::BtfError, loss::Losses, programs::RunTime,
    },
    control::socket::ControlError,
    error::{EXIT_FAILURE, EXIT_USAGE, UsageError},
    say::StdoutError,
    signals::{CatchError, TraceSignals},
    sinks::{Sink, Sinks, Summary, output_dir::ReplaceError},
    sys::SyscallError,
};

/// Why a trace could not start, or could not go on.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(transparent)]
    KernelTooOld(#[from] KernelTooOld),
    #[error(transparent)]
    Btf(#[from] BtfError),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error(transparent)]
    Attach(#[from] AttachError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Follow(#[from] FollowError),
    #[error(transparent)]
    Maps(#[from] MapsError),
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("cannot catch SIGINT, SIGTERM and SIGUSR1")]
    CatchSignals(#[source] CatchError),
    #[error("cannot let SIGINT, SIGTERM and SIGUSR1 through")]
    ReleaseSignals(#[source] SyscallError),
    #[error("cannot collect the launched command's exit status")]
    ExitStatus(#[source] io::Error),
    #[error("cannot start the tracer's runtime")]
    Runtime(#[source] io::Error),
    /// A file, socket or thread an output needs could not be made ("cannot create the log
    /// app.ptl").
    #[error("{what}")]
    Output { what: String, source: io::Error },
    #[error("cannot create the log {}", .path.display())]
    CreateLog {
        path: std::path::PathBuf,
        source: ReplaceError,
    },
    #[error(transparent)]
    Stdout(#[from] StdoutError),
    /// Writing to the outputs failed once records flowed.
    #[error("cannot write trace records; the trace is incomplete")]
    Incomplete(#[source] io::Error),
    #[error("cannot complete the trace")]
    Complete(#[source] io::Error),
}

impl TraceError {
    /// An output that could not be made: `what` says which ("cannot start the writer thread").
    fn output(what: impl Into<String>) -> impl FnOnce(io::Error) -> TraceError {
        let what = what.into();
        move |source| TraceError::Output { what, source }
    }

    /// The tracer's exit status: 2 for bad input and for a kernel below the floor (which the
    /// user can change, and we cannot), 126 or 127 for a command that cannot be run, else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            TraceError::Usage(_) | TraceError::KernelTooOld(_) => EXIT_USAGE,
            TraceError::Btf(error) => error.exit_code(),
            TraceError::Launch(error) => error.exit_code(),
            _ => EXIT_FAILURE,
        }
    }
}

type Result<T, E = TraceError> = std::result::Result<T, E>;

/// Traces as `config` says, handing every event to `viewers` too (`top`'s live view, the
/// profiles pushed to Pyroscope), which the session begins and finishes with its own sinks;
/// returns the tracer's exit status.
pub fn trace_into(config: &Config, viewers: Vec<Box<dyn Sink + Send>>) -> Result<i32> {
    if config.list_probes {
        return start::list_probes(config);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(TraceError::Runtime)?;
    let session = {
        let _context = runtime.enter();
        Session::new(config, viewers)?
    };
    let outcome = runtime.block_on(session.run())?;
    say!("thrtrace-bpf: {}", outcome.summary());
    if outcome.lossless_stops > 0 {
        say!(
            "thrtrace-bpf: --lossless stopped traced threads {} times until the rings \
             were drained",
            outcome.lossless_stops
        );
    }
    if config.verbose {
        say!("thrtrace-bpf: lost per CPU: {}", outcome.losses.split());
        for time in &outcome.run_times {
            say!(
                "thrtrace-bpf: BPF program {}: {} runs, {} ns each (kernel.bpf_stats_enabled)",
                time.program,
                time.runs,
                time.ns.checked_div(time.runs).unwrap_or(0)
            );
        }
    }
    Ok(outcome.exit_code)
}

/// A trace: what it traces and how, the way its records go, and what it watches.
pub struct Session {
    datapath: DataPath,
    probes: Probes,
    decoder: Decoder,
    /// The outputs, then the watches.
    sinks: Sinks<dyn Sink>,
    /// Records and the session's events, from the rings to the sinks.
    flow: Flow,
    /// The targets, and what became of them.
    watched: Watched,
    /// The timers, and how the trace is being asked to end.
    clock: Clock,
    /// System-wide: trace until stopped, finishing the files of processes as they go away.
    until_stopped: bool,
    /// `--follow`: processes first seen in records (children) are watched like targets.
    follow: bool,
    /// `--follow`: images just exec'd by followed processes, to probe while they wait.
    exec_requests: Option<mpsc::UnboundedReceiver<Followed>>,
    signals: TraceSignals,
    /// The trace's name, and its control socket (none if it could not be made).
    name: String,
    controller: Option<Controller>,
    recording: Recording,
    /// `--flush-on-block`: the flushes long blocks cause.
    block_flushes: Option<BlockFlushes>,
    /// What the watches among the sinks found, not written yet (see `flow::Finding`).
    found: Found,
}

/// How a run ended.
pub struct Outcome {
    pub records: u64,
    /// What the sinks wrote ("4 files in /tmp/trace, 812 events in app.ptl").
    pub written: Summary,
    pub losses: Losses,
    /// How many times `--lossless` stopped a thread until the rings were drained.
    pub lossless_stops: u64,
    /// Of the records that were to carry a call stack, those whose stack is whole.
    pub stack_share: StackShare,
    /// `--min-wait`: how many waits were counted, not written, and the bound in ns.
    pub short_waits: Option<(u64, u64)>,
    /// The tracer's exit status.
    pub exit_code: i32,
    /// What the kernel counted of the BPF programs' runs (with `kernel.bpf_stats_enabled`).
    pub run_times: Vec<RunTime>,
}

impl Outcome {
    /// The summary line's text: "812 records written, 0 lost, 4 files in /tmp/trace", then,
    /// if records were to carry call stacks, how many of those are whole, and with
    /// `--min-wait` how many waits were counted instead of written.
    pub fn summary(&self) -> String {
        let mut summary = format!(
            "{} records written, {} lost",
            self.records,
            self.losses.total()
        );
        if !self.written.0.is_empty() {
            summary += &format!(", {}", self.written);
        }
        if self.stack_share.records > 0 {
            summary += &format!("; {}", self.stack_share);
        }
        if let Some((waits, below_ns)) = self.short_waits {
            let below = humantime::format_duration(std::time::Duration::from_nanos(below_ns));
            summary += &format!(
                "; {} shorter than {below} counted, not written (--min-wait)",
                crate::say::counted(waits, "wait")
            );
        }
        summary
    }
}
