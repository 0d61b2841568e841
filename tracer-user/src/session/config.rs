//! What a trace is asked to do, checked: the command line (`cli`) makes a [`Config`], and
//! [`super::Session::new`] starts a trace from it.

use std::{ffi::OsString, path::PathBuf, time::Duration};

use crate::{
    attach::cgroups::Selected,
    capture::futex_hook::FutexHook,
    sinks::{Buffering, free_space::MinFree},
};
use tracer_model::{
    log::{LogFullPolicy, StreamFullPolicy},
    selection::EventSet,
};

/// What to trace and where, checked.
#[derive(Debug)]
pub struct Config {
    /// The events to record.
    pub events: EventSet,
    /// The directory tr.* files go in; `None` when another output was asked for without
    /// `--dir` (`--log`, `--ctf`, `--print`, `--pyroscope`), and with `list_probes`.
    pub output: Option<PathBuf>,
    pub log: Option<LogOptions>,
    /// `--ctf DIR`: a CTF trace written as the trace runs.
    pub ctf: Option<PathBuf>,
    /// The trace's name: POSIX trace-name, and the control socket's.
    pub name: String,
    /// `--name` was given: a control socket that cannot be made is an error, not a warning.
    pub name_given: bool,
    pub stopped: bool,
    pub flush_on_block: Option<Duration>,
    pub deadlock_after: Duration,
    /// Live lock-order analysis (`--lock-order`).
    pub lock_order: bool,
    /// `--unbuffered`, or `THR_TRACE_BUF`.
    pub buffering: Buffering,
    /// The free space each file-writing sink leaves on its file system (`--min-free`).
    pub min_free: MinFree,
    /// Threads that consume the rings, the session's own included (at least 1).
    pub consumer_threads: usize,
    pub duration: Option<Duration>,
    pub ring_bytes: u32,
    pub empty_programs: bool,
    pub perf_event_probes: bool,
    /// `--futex-hook`: the one way to hook futex calls that may be used (`None`: the first
    /// that works).
    pub futex_hook: Option<FutexHook>,
    pub probe_at_entry: bool,
    /// Lock calls written where their fast path completes them (not `--no-fast-paths`).
    pub fast_paths: bool,
    /// `--contended`: locks traced on their slow paths only.
    pub contended: bool,
    /// `--min-wait`: waits shorter than this are counted, not written (`None`: every wait is
    /// written).
    pub min_wait: Option<Duration>,
    /// Which records carry their thread's call stack (`--stacks`: `tracer_common::STACKS_*`).
    pub stacks: u32,
    pub follow: bool,
    /// `--cgroup`: only the processes in these cgroups are recorded (none: every one).
    pub cgroups: Vec<Selected>,
    pub verbose: bool,
    pub lossless: bool,
    /// Only print where the probes would go.
    pub list_probes: bool,
    pub target: Target,
}

impl Config {
    /// What it traces, as the line that says a trace has begun names it (`pid 4711`,
    /// `every process in cgroup /system.slice/x.service`): `attached_pids` those of `-p` that
    /// were attached (none yet: those asked for), `launched_pid` the command's.
    pub fn traced(&self, attached_pids: &[u32], launched_pid: Option<u32>) -> String {
        let processes = match &self.target {
            Target::SystemWide => "every process".to_owned(),
            Target::Pids(asked) => match if attached_pids.is_empty() {
                asked
            } else {
                attached_pids
            } {
                [pid] => format!("pid {pid}"),
                pids => {
                    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
                    format!("pids {}", pids.join(", "))
                }
            },
            Target::Command(command) => match launched_pid {
                Some(pid) => format!("{} (pid {pid})", command[0].to_string_lossy()),
                None => command[0].to_string_lossy().into_owned(),
            },
        };
        let cgroups: Vec<&str> = self.cgroups.iter().map(|c| c.path.as_str()).collect();
        match cgroups[..] {
            [] => processes,
            [one] => format!("{processes} in cgroup {one}"),
            _ => format!("{processes} in cgroups {}", cgroups.join(", ")),
        }
    }
}

#[derive(Debug)]
pub enum Target {
    Pids(Vec<u32>),
    Command(Vec<OsString>),
    /// Every process that maps a pthread library, now or later.
    SystemWide,
}

/// `--log` and the stream's attributes, checked.
#[derive(Debug)]
pub struct LogOptions {
    /// The log file, as the user named it, for messages.
    pub path: PathBuf,
    /// The directory it goes in, and its name there (split once, checked).
    pub dir: PathBuf,
    pub file_name: String,
    pub trace_name: String,
    pub stream_size: u64,
    pub stream_full_policy: StreamFullPolicy,
    pub log_size: Option<u64>,
    pub log_full_policy: LogFullPolicy,
}
