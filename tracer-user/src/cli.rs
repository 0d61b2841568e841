//! The command line, the tracer's edge: what it asks for, checked into a [`Config`] before
//! anything is created, and which command does it ([`main`]).

use std::{ffi::OsString, io, path::PathBuf, time::Duration};

use clap::{CommandFactory, Parser, Subcommand};
use tracer_model::{
    event::event_types,
    log::{LogFullPolicy, PacketPlacement, StreamFullPolicy},
    selection::EventSet,
};

use crate::{
    attach::{
        cgroups,
        launch::{self, LaunchError},
        targets,
    },
    capture::futex_hook::FutexHook,
    control::{
        self,
        client::{CtlArgs, CtlError},
        socket::parse_trace_name,
    },
    error::{EXIT_FAILURE, EXIT_USAGE, OneLine, UsageError},
    event_list,
    manual::{self, GenerateArgs, GenerateError},
    readers::{
        self, ReadError,
        convert::ConvertArgs,
        dump::{DumpArgs, DumpFormat, LiveOutput, Printer},
        info::InfoArgs,
        pyroscope::{
            ContentionPush, Credentials, Endpoint, OTLP_URL_VARIABLE, PushOptions, URL_VARIABLE,
            Wire, environment,
        },
        report::{KindArg, ReportArgs},
        text::ClockArgs,
        top::LiveView,
    },
    say::StdoutError,
    session::{
        self, TraceError,
        config::{Config, LogOptions, Target},
    },
    sinks::{
        Buffering, Sink, free_space::MinFree, output_dir::split_file_path, threaded::Threaded,
    },
};

#[derive(Debug, Parser)]
#[command(
    name = "thrtrace-bpf",
    version,
    about = "Trace the pthread calls of running or launched processes into thread_trace(4) tr.* files \
             or a POSIX trace log",
    after_help = "Examples:\n  sudo thrtrace-bpf -p 1234 --events mutex,cond --dir /tmp/trace\n  \
                  sudo thrtrace-bpf -a --contended --log host.ptl\n  \
                  sudo thrtrace-bpf --unbuffered -- ./server --port 8080\n  \
                  sudo thrtrace-bpf --log app.ptl -p 1234\n  \
                  thrtrace-bpf dump app.ptl",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub action: Option<Action>,

    /// Trace the process with this pid (repeat for several)
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,

    /// Trace every process of the host (as `perf record -a`), which --events or --contended
    /// also asks for when neither -p nor a command is given
    #[arg(short = 'a', long, conflicts_with_all = ["pids", "command"])]
    pub all: bool,

    /// The events to trace: categories, event names or C library functions, separated by
    /// commas or colons, e.g. mutex,cond or pthread_mutex_lock:sem_wait (`thrtrace-bpf list`
    /// lists them) [default: all but futex]
    #[arg(short = 'e', long, env = "THR_TRACE_EVENTS", value_name = "EVENTS")]
    pub events: Option<String>,

    /// Directory for the tr.* files [default: the current directory, unless --log, --ctf,
    /// --print or --pyroscope is given]
    #[arg(short = 'd', long, env = "THR_TRACE_DIR", value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Write a POSIX trace log (events and system events) to FILE; tr.* files too with --dir.
    /// An earlier log at FILE is kept as FILE.old; any other file there is refused
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,

    /// Write a CTF 1.8 trace (babeltrace2, Trace Compass) into DIR as the trace runs, as
    /// `convert --to ctf` writes one from a log; DIR is made if missing
    #[arg(long, value_name = "DIR")]
    pub ctf: Option<PathBuf>,

    /// The trace's name (POSIX trace-name), which `thrtrace-bpf ctl NAME` controls it by
    /// [default: thrtrace-PID]
    #[arg(long, value_name = "NAME", value_parser = parse_trace_name)]
    pub name: Option<String>,

    /// Place the probes but record nothing until `thrtrace-bpf ctl NAME start`
    #[arg(long)]
    pub stopped: bool,

    /// Say (and log) a deadlock once its threads have waited for each other this long
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "1s")]
    pub deadlock_after: Duration,

    /// Say (and log) each lock-order inversion, a deadlock that has not happened yet, once as
    /// it appears: a thread that holds A while acquiring B where another held B while
    /// acquiring A
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = Switch::On)]
    pub lock_order: Switch,

    /// With --stream-full-policy loop: write the flight recorder to the log whenever a traced
    /// call has been blocked this long (e.g. 200ms), at most once per DURATION
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub flush_on_block: Option<Duration>,

    /// Bytes of events the stream holds before its full policy applies (K, M, G suffixes) [default: 4M]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub stream_size: Option<u64>,

    /// When the stream is full: write it to the log, overwrite its oldest events (a flight
    /// recorder, written at the end), or stop recording
    #[arg(long, value_name = "POLICY", value_parser = clap::builder::PossibleValuesParser::new(StreamFullPolicy::NAMES), default_value = "flush")]
    pub stream_full_policy: String,

    /// Most bytes of events in the log (K, M, G suffixes) [default: unbounded]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub log_size: Option<u64>,

    /// When the log reaches --log-size: grow anyway, keep its newest events, or stop writing
    #[arg(long, value_name = "POLICY", value_parser = clap::builder::PossibleValuesParser::new(LogFullPolicy::NAMES), default_value = "append")]
    pub log_full_policy: String,

    /// Stop writing files (tr files, the log, a CTF trace) once their file system has less
    /// free than SIZE (K, M, G suffixes; 0: write until it is full); the trace goes on, and
    /// counts what is not written [default: the larger of 1G and 5% of the file system, at
    /// most a tenth of it]
    #[arg(long, value_name = "SIZE", value_parser = parse_size_or_zero)]
    pub min_free: Option<u64>,

    /// Write each record to its file as it arrives (or set THR_TRACE_BUF to any value)
    #[arg(short = 'u', long)]
    pub unbuffered: bool,

    /// Stop tracing after this many seconds
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,

    /// Threads that consume the rings: with more than one, N threads drain and decode a share
    /// of the CPUs' rings each, the session's thread puts the records in order and analyses,
    /// the log is written by a thread of its own, and tr files by N-1, each owning some
    /// threads' files; with one, one writer thread writes both [default: one per 4 CPUs,
    /// from 1 to 4]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub consumer_threads: Option<u16>,

    /// Size of each CPU's ring buffer in KiB (a power of two, at least 4)
    #[arg(long, value_name = "KIB", default_value_t = crate::capture::datapath::DEFAULT_RING_BYTES / 1024)]
    pub buffer_kib: u32,

    /// Also trace the children the targets fork (and what they exec), from their first call
    #[arg(short = 'f', long)]
    pub follow: bool,

    /// Trace only the processes in this cgroup (v2) or below it, as `perf -G`: its path as
    /// /proc/PID/cgroup shows it (/system.slice/mariadb.service) or its directory; repeat for
    /// several. Alone, every process that is or comes to be in it; with -p, those of them in it
    #[arg(short = 'G', long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<String>,

    /// Put every probe at its function's entry instead of where the kernel need not single-step
    #[arg(long)]
    pub probe_at_entry: bool,

    /// Probe lock calls at their entry and return, not where their fast path completes them
    /// (two traps a call, as before)
    #[arg(long)]
    pub no_fast_paths: bool,

    /// Print where each probe would go in the target's (or this program's) pthread library,
    /// what a pass costs there, and why; then exit
    #[arg(long)]
    pub list_probes: bool,

    /// Attach BPF programs that record nothing at the same probes (measures the probes' cost)
    #[arg(long)]
    pub empty_programs: bool,

    /// Attach probes as perf-event uprobes, as on kernels before 6.10, even where uprobe_multi
    /// links exist (measures and tests that way on any kernel)
    #[arg(long, hide = true)]
    pub perf_event_probes: bool,

    /// How to hook the kernel's futex calls (the futex category): fentry (only futex calls of
    /// other processes pay), syscall-tracepoints (every syscall of the machine takes a slower
    /// path), raw-syscalls (every syscall also runs a compare); auto: the first of these that
    /// works
    #[arg(long, value_name = "HOOK", value_enum, default_value = "auto")]
    pub futex_hook: FutexHookChoice,

    /// Trace only where locks are contended: mutex and read-write locks and semaphore waits
    /// that wait, and unlocks and posts that wake a waiter, probed on glibc's slow paths (an
    /// uncontended call pays nothing), with condition waits, joins, barrier waits and thread
    /// creation and exit in full
    #[arg(long)]
    pub contended: bool,

    /// Record each call's user call stack (every record written at a call's entry), unwound
    /// from the binaries' CFI, so code built without frame pointers unwinds right [default:
    /// with --contended, the stacks of the waits and wakes on slow paths, not of the calls it
    /// traces whole (condition waits ...); else off]
    #[arg(long, value_name = "WHEN", value_enum)]
    pub stacks: Option<Switch>,

    /// With --contended: waits shorter than DURATION (e.g. 10us, 1ms; at most 1s) are not
    /// written, neither their records nor their stacks; each thread's count and total time of
    /// them, per object and caller, go into the log once a second, so report's totals stay
    /// exact
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub min_wait: Option<Duration>,

    /// Print each event to stdout as it is recorded, in time order, as `dump` prints a log:
    /// text, tr (the tr lines) or json. Writes no tr files unless --dir is given too
    #[arg(long, value_name = "FORMAT", value_enum)]
    pub print: Option<DumpFormat>,

    #[command(flatten)]
    pub clock: ClockArgs,

    /// Push each interval's contention profile (the stacks of the lock waits, as pprof) to the
    /// Grafana Pyroscope server at URL, e.g. http://pyroscope:4040 (or set
    /// THRTRACE_PYROSCOPE_URL); needs call stacks (--contended). Writes no trace files unless
    /// --dir or --log is given too
    #[arg(
        long,
        value_name = "URL",
        env = URL_VARIABLE,
        hide_env_values = true
    )]
    pub pyroscope: Option<String>,

    /// Push each interval's contention profiles to the OpenTelemetry endpoint at URL (OTLP/HTTP
    /// protobuf, profiles v1development, to URL/v1development/profiles), e.g. an OTel Collector
    /// at http://collector:4318 (or set THRTRACE_OTLP_URL); needs call stacks (--contended)
    #[arg(
        long,
        value_name = "URL",
        env = OTLP_URL_VARIABLE,
        hide_env_values = true
    )]
    pub otlp: Option<String>,

    /// The credentials --otlp sends, from FILE (mode 0600), as --pyroscope-credentials reads
    /// them; without it, from THRTRACE_OTLP_TOKEN, _USER, _PASSWORD and _TENANT if set
    #[arg(long, value_name = "FILE")]
    pub otlp_credentials: Option<PathBuf>,

    /// How often --pyroscope and --otlp push [default: 15s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub push_interval: Option<Duration>,

    /// The credentials --pyroscope sends, from FILE (mode 0600): lines `token = …` (a bearer
    /// token) or `user = …` and `password = …` (basic auth), and `tenant = …` (X-Scope-OrgID);
    /// without it, from THRTRACE_PYROSCOPE_TOKEN, _USER, _PASSWORD and _TENANT if set. Never on
    /// the command line, which every user can read
    #[arg(long, value_name = "FILE")]
    pub pyroscope_credentials: Option<PathBuf>,

    /// Never lose a record: stop (SIGSTOP) a traced thread that writes to a ring more than half
    /// full, until the tracer has drained the rings (or set THR_TRACE_LOSSLESS to any value)
    #[arg(long)]
    pub lossless: bool,

    /// Also say how many records were lost on each CPU at the end, and, when the kernel
    /// counts them (sysctl kernel.bpf_stats_enabled=1), how often and how long each BPF
    /// program ran
    #[arg(short = 'v', long)]
    pub verbose: bool,

    /// The command to start and trace
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// What else the command does than trace.
#[derive(Debug, Subcommand)]
pub enum Action {
    /// Print the events of a trace log written with --log
    Dump(DumpArgs),
    /// Summarize a trace log: attributes, status, event types with counts, losses
    Info(InfoArgs),
    /// Write a trace log's events as the tr.* files of its run, or as a CTF trace
    Convert(ConvertArgs),
    /// Per-lock and per-thread tables from a trace log or a directory of tr.* files: waits,
    /// holds, contention, callers with file:line, deadlocks
    Report(ReportArgs),
    /// Control a running trace by its --name: status, start, stop, filter, flush, clear,
    /// shutdown; or list the running traces
    Ctl(CtlArgs),
    /// A live view of the most contended locks, as `perf top` shows functions: a --contended
    /// trace of the process (or the command, or every process) whose lock tables are redrawn
    /// every second to fit the window; w, c, a sort by time waited, contended, acquired (< >
    /// step through them); q quits
    Top(TopArgs),
    /// List the events --events takes: categories, events and the C library functions they
    /// are recorded from, and what --contended records of each
    List,
    /// Write the manual pages or a shell's completions (for `cargo xtask install`)
    #[command(hide = true)]
    Generate(GenerateArgs),
}

/// What `top` watches.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  sudo thrtrace-bpf top -p 1234\n  \
                        sudo thrtrace-bpf top --interval 2s -- ./server")]
pub struct TopArgs {
    /// Watch the process with this pid (repeat for several) [default: every process]
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Watch only the processes in this cgroup (v2) or below it, as the trace's --cgroup
    #[arg(short = 'G', long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<String>,
    /// How often the view is redrawn
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// The events to trace, as the trace's --events [default: every event --contended traces]
    #[arg(short = 'e', long, value_name = "EVENTS")]
    pub events: Option<String>,
    #[command(flatten)]
    pub kinds: KindArg,
    /// Count the waits shorter than DURATION, as the trace's --min-wait: fewer records to
    /// analyse on a busy host, the same totals
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub min_wait: Option<Duration>,
    /// The command to start and watch
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl TopArgs {
    /// Runs `top`: the command line's own `--contended` trace of the same targets, with the
    /// live view for output instead of files.
    pub fn run(&self) -> Result<i32, Failure> {
        let config = self.config()?;
        let watched = config.traced(&[], None);
        let view = LiveView::new(self.interval, watched, self.kinds.clone());
        session::trace_into(&config, vec![Box::new(view)]).map_err(Failure::from)
    }

    fn config(&self) -> Result<Config, Failure> {
        let mut argv: Vec<OsString> = vec!["thrtrace-bpf".into(), "--contended".into()];
        if let Some(events) = &self.events {
            argv.extend(["--events".into(), events.into()]);
        }
        for pid in &self.pids {
            argv.extend(["--pid".into(), pid.to_string().into()]);
        }
        for cgroup in &self.cgroups {
            argv.extend(["--cgroup".into(), cgroup.into()]);
        }
        if let Some(bound) = self.min_wait {
            let bound = humantime::format_duration(bound).to_string();
            argv.extend(["--min-wait".into(), bound.into()]);
        }
        if !self.command.is_empty() {
            argv.push("--".into());
            argv.extend(self.command.iter().cloned());
        }
        let cli = Cli::try_parse_from(argv).map_err(|error| UsageError(error.to_string()))?;
        let mut config = cli.into_config()?;
        config.output = None;
        Ok(config)
    }
}

/// `--futex-hook`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FutexHookChoice {
    Auto,
    Fentry,
    SyscallTracepoints,
    RawSyscalls,
}

impl FutexHookChoice {
    /// The hook chosen, `None` for the first that works.
    fn hook(self) -> Option<FutexHook> {
        match self {
            FutexHookChoice::Auto => None,
            FutexHookChoice::Fentry => Some(FutexHook::Fentry),
            FutexHookChoice::SyscallTracepoints => Some(FutexHook::SyscallTracepoints),
            FutexHookChoice::RawSyscalls => Some(FutexHook::RawSyscalls),
        }
    }
}

/// An analysis the tracer runs unless told not to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// How often `--pyroscope` pushes without `--push-interval`: Pyroscope's own clients' period.
const DEFAULT_PUSH_INTERVAL: Duration = Duration::from_secs(15);

/// The stream size without `--stream-size`.
pub const DEFAULT_STREAM_SIZE: u64 = 4 << 20;
/// The smallest stream: a few packets.
pub const MIN_STREAM_SIZE: u64 = 64 << 10;

/// Consumer threads when not told: one per 4 CPUs, from 1 to 4. On the 2-CPU development VM
/// the producers it can run keep one consumer thread under half busy, and handing records
/// to writer threads costs CPU of its own (`cargo xtask bench`); a host with many CPUs has
/// producers that can outrun one thread.
fn default_consumer_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |cpus| (cpus.get() / 4).clamp(1, 4))
}

/// The events `--contended` traces of `spec` (the `--events` syntax; `None` or empty for
/// every event). Events it does not trace are refused when named, alone or as a category it
/// traces nothing of.
fn contended_events(spec: Option<&str>) -> Result<EventSet, UsageError> {
    let (traced, untraced) = match spec.filter(|spec| !spec.is_empty()) {
        Some(spec) => {
            EventSet::parse_contended(spec).map_err(|error| UsageError(error.to_string()))?
        }
        None => (EventSet::all().contended(), EventSet::EMPTY),
    };
    if !untraced.is_empty() || traced.is_empty() {
        usage_bail!(
            "--contended does not trace {}: their slow paths are not probed yet (it traces {}); \
             leave them out, or trace them without --contended",
            untraced.names().join(", "),
            EventSet::all().contended().names().join(", ")
        );
    }
    Ok(traced)
}

impl Cli {
    pub fn into_config(mut self) -> Result<Config, Failure> {
        let events = match self.contended {
            true => contended_events(self.events.as_deref())?,
            false => EventSet::parse(self.events.as_deref().unwrap_or(""))
                .map_err(|error| UsageError(error.to_string()))?,
        };
        let log = match self.list_probes {
            true => None,
            false => self.log_options()?,
        };
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
            (true, true) if self.follow => usage_bail!(
                "--follow needs -p PID or -- COMMAND: system-wide tracing sees every process"
            ),
            (true, true)
                if self.all
                    || self.events.is_some()
                    || self.contended
                    || !self.cgroups.is_empty() =>
            {
                Target::SystemWide
            }
            // A bare command line must not start a trace of the whole host by accident.
            (true, true) => usage_bail!(
                "say what to trace: -p PID, -- COMMAND, or -a for every process (--help lists \
                 the options, `thrtrace-bpf list` the events)"
            ),
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
        let cgroups =
            cgroups::select(&self.cgroups).map_err(|error| UsageError(error.to_string()))?;
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
        let dir = match self.dir.take() {
            Some(dir) if !dir.as_os_str().is_empty() => Some(dir),
            _ if log.is_some()
                || self.ctf.is_some()
                || self.print.is_some()
                || self.pyroscope.as_deref().is_some_and(|u| !u.is_empty())
                || self.otlp.as_deref().is_some_and(|u| !u.is_empty()) =>
            {
                None
            }
            _ => Some(PathBuf::from(".")),
        };
        let output = dir.filter(|_| !self.list_probes);
        let buffering = match self.unbuffered
            || std::env::var_os("THR_TRACE_BUF").is_some_and(|v| !v.is_empty())
        {
            true => Buffering::EachRecord,
            false => Buffering::Buffered,
        };
        if let Some(threshold) = self.flush_on_block
            && !log
                .as_ref()
                .is_some_and(|l| l.stream_full_policy == StreamFullPolicy::Loop)
        {
            usage_bail!(
                "--flush-on-block {}: flushes a flight recorder: give --log FILE \
                 --stream-full-policy loop too",
                humantime::format_duration(threshold)
            );
        }
        match self.min_wait {
            Some(bound) if !self.contended => usage_bail!(
                "--min-wait {}: counts the waits of a contended trace: give --contended too",
                humantime::format_duration(bound)
            ),
            Some(bound) if bound > MAX_MIN_WAIT => usage_bail!(
                "--min-wait {}: give at most 1s (every record waits that much longer before \
                 it is written)",
                humantime::format_duration(bound)
            ),
            _ => {}
        }
        Ok(Config {
            events,
            output,
            name: trace_name(self.name.as_deref()),
            name_given: self.name.is_some(),
            stopped: self.stopped,
            flush_on_block: self.flush_on_block,
            deadlock_after: self.deadlock_after,
            lock_order: self.lock_order == Switch::On,
            log,
            ctf: self.ctf.filter(|_| !self.list_probes),
            buffering,
            min_free: self.min_free.map_or(MinFree::Default, MinFree::Bytes),
            consumer_threads: self
                .consumer_threads
                .map_or_else(default_consumer_threads, usize::from),
            duration,
            ring_bytes,
            empty_programs: self.empty_programs,
            perf_event_probes: self.perf_event_probes,
            futex_hook: self.futex_hook.hook(),
            probe_at_entry: self.probe_at_entry,
            fast_paths: !self.no_fast_paths,
            contended: self.contended,
            min_wait: self.min_wait,
            stacks: match (self.stacks, self.contended) {
                (Some(Switch::On), _) => tracer_common::STACKS_ALL,
                (None, true) => tracer_common::STACKS_SLOW_PATHS,
                (Some(Switch::Off), _) | (None, false) => tracer_common::STACKS_NONE,
            },
            follow: self.follow,
            cgroups,
            verbose: self.verbose,
            lossless: self.lossless
                || std::env::var_os("THR_TRACE_LOSSLESS").is_some_and(|v| !v.is_empty()),
            list_probes: self.list_probes,
            target,
        })
    }

    /// Traces as the command line says, printing its events and pushing the profiles to
    /// Pyroscope if asked.
    fn trace(self) -> Result<i32, Failure> {
        let push = self.push_options()?;
        let print = self.print.filter(|_| !self.list_probes);
        if self.clock.given() && self.print != Some(DumpFormat::Text) {
            return Err(UsageError(
                "-t, -tt, -ttt and -r time the lines of --print text: give it too".to_owned(),
            )
            .into());
        }
        let clock = self.clock.clock();
        let config = self.into_config()?;
        let mut viewers: Vec<Box<dyn Sink + Send>> = Vec::new();
        if let Some(format) = print {
            // On a thread of its own, as the files are written: a reader of stdout that falls
            // behind does not hold up the draining of the rings, or the other outputs.
            let printer = Threaded::made_there(
                move || Printer::new(format, clock, true, &event_types(), LiveOutput::new()),
                format.prints_system_events(),
                "printer",
            )
            .map_err(Failure::Printer)?;
            viewers.push(Box::new(printer));
        }
        for push in push {
            viewers.push(Box::new(ContentionPush::new(push)));
        }
        session::trace_into(&config, viewers).map_err(Failure::from)
    }

    /// `--pyroscope`, `--otlp` and their options, checked; an error for options given without
    /// them. The credentials' variables are then taken out of the environment: the command
    /// traced, and any other process started, runs as the invoking user, who would read them
    /// in /proc/PID/environ.
    fn push_options(&self) -> Result<Vec<PushOptions>, UsageError> {
        fn given(url: Option<&str>) -> Option<&str> {
            url.filter(|url| !url.is_empty())
        }
        let pushes: Vec<(Wire, &str, Option<&std::path::Path>)> = [
            (
                Wire::Pyroscope,
                given(self.pyroscope.as_deref()),
                self.pyroscope_credentials.as_deref(),
            ),
            (
                Wire::Otlp,
                given(self.otlp.as_deref()),
                self.otlp_credentials.as_deref(),
            ),
        ]
        .into_iter()
        .filter_map(|(wire, url, credentials)| {
            if url.is_none() && credentials.is_some() {
                return Some(Err(wire));
            }
            Some(Ok((wire, url?, credentials)))
        })
        .collect::<Result<_, Wire>>()
        .map_err(|wire| {
            UsageError(format!(
                "{}-credentials is for {} URL: give the URL too",
                wire.option(),
                wire.option()
            ))
        })?;
        let Some(&(first, ..)) = pushes.first() else {
            if self.push_interval.is_some() {
                usage_bail!("--push-interval is for --pyroscope or --otlp URL: give a URL too");
            }
            return Ok(Vec::new());
        };
        let option = first.option();
        match (self.contended, self.stacks) {
            (_, Some(Switch::Off)) => {
                usage_bail!("{option} pushes the call stacks of lock waits: leave out --stacks off")
            }
            (false, None) => usage_bail!(
                "{option} pushes the call stacks of lock waits: add --contended (or --stacks on)"
            ),
            _ => {}
        }
        let interval = self.push_interval.unwrap_or(DEFAULT_PUSH_INTERVAL);
        if self.list_probes {
            usage_bail!("{option} traces: leave out --list-probes");
        }
        if interval < Duration::from_secs(1) {
            usage_bail!(
                "--push-interval {}: give at least 1s",
                humantime::format_duration(interval)
            );
        }
        let mut options = Vec::new();
        for (wire, url, credentials) in pushes {
            let credentials = Credentials::load(credentials, wire)
                .map_err(|error| UsageError(error.to_string()))?;
            let endpoint = Endpoint::new(url, credentials, wire)
                .map_err(|error| UsageError(error.to_string()))?;
            options.push(PushOptions { endpoint, interval });
        }
        for variable in environment() {
            // SAFETY: the command line is read before the tracer starts a thread (the session's
            // runtime and workers come later), so nothing reads the environment meanwhile.
            unsafe { std::env::remove_var(variable) };
        }
        Ok(options)
    }
}

impl Cli {
    /// `--log` and the options that shape its stream, or an error for those given without it.
    fn log_options(&self) -> Result<Option<LogOptions>, UsageError> {
        let stream_full_policy: StreamFullPolicy = parse_policy(&self.stream_full_policy)?;
        let log_full_policy: LogFullPolicy = parse_policy(&self.log_full_policy)?;
        let Some(path) = &self.log else {
            let shaping = [
                ("--stream-size", self.stream_size.is_some()),
                (
                    "--stream-full-policy",
                    stream_full_policy != StreamFullPolicy::default(),
                ),
                ("--log-size", self.log_size.is_some()),
                (
                    "--log-full-policy",
                    log_full_policy != LogFullPolicy::default(),
                ),
            ];
            if let Some((option, _)) = shaping.iter().find(|(_, given)| *given) {
                usage_bail!("{option} shapes a trace log: give --log FILE too");
            }
            return Ok(None);
        };
        let Some((dir, file_name)) = split_file_path(path) else {
            usage_bail!("--log {}: name a file", path.display());
        };
        let stream_size = self.stream_size.unwrap_or(DEFAULT_STREAM_SIZE);
        if stream_size < MIN_STREAM_SIZE {
            usage_bail!("--stream-size {stream_size}: give at least 64K");
        }
        if log_full_policy != LogFullPolicy::Append && self.log_size.is_none() {
            usage_bail!("--log-full-policy {log_full_policy} needs --log-size SIZE");
        }
        if log_full_policy == LogFullPolicy::Loop
            && self
                .log_size
                .is_some_and(|size| size < PacketPlacement::MIN_LOOP_SIZE)
        {
            usage_bail!("--log-size with --log-full-policy loop: give at least 64K");
        }
        Ok(Some(LogOptions {
            path: path.clone(),
            dir: dir.to_owned(),
            file_name: file_name.to_owned(),
            trace_name: trace_name(self.name.as_deref()),
            stream_size,
            stream_full_policy,
            log_size: self.log_size,
            log_full_policy,
        }))
    }
}

/// The longest `--min-wait`: records wait in the reorder stage that much longer.
const MAX_MIN_WAIT: Duration = Duration::from_secs(1);

/// The trace's name: `--name`, or `thrtrace-PID` with the tracer's pid.
fn trace_name(given: Option<&str>) -> String {
    given.map_or_else(|| format!("thrtrace-{}", std::process::id()), str::to_owned)
}

/// A duration as `200ms`, `1.5s` or `2m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        _ => Err(format!(
            "'{text}' is not a duration: give a number with a unit, e.g. 200ms, 1.5s or 2m"
        )),
    }
}

fn parse_policy<T: std::str::FromStr<Err = String>>(name: &str) -> Result<T, UsageError> {
    name.parse().map_err(UsageError)
}

/// A size as [`parse_size`] reads it, or 0.
fn parse_size_or_zero(text: &str) -> Result<u64, String> {
    match text {
        "0" => Ok(0),
        _ => parse_size(text),
    }
}

/// A size in bytes: digits and an optional K, M or G (powers of 1024), e.g. `64M`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim_end_matches(['B', 'b']).trim_end_matches(['i']);
    let (digits, shift) = match trimmed.char_indices().last() {
        Some((at, 'K' | 'k')) => (&trimmed[..at], 10),
        Some((at, 'M' | 'm')) => (&trimmed[..at], 20),
        Some((at, 'G' | 'g')) => (&trimmed[..at], 30),
        _ => (trimmed, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            format!("'{text}' is not a size: give a number of bytes, optionally with K, M or G")
        })
}

/// Why a command failed: each command's own error, said as one line, with its exit status.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Ctl(#[from] CtlError),
    #[error(transparent)]
    Generate(#[from] GenerateError),
    #[error(transparent)]
    Print(#[from] StdoutError),
    #[error("cannot start the printer thread")]
    Printer(#[source] io::Error),
    /// Boxed: the session's errors are large, and every command returns a `Failure`.
    #[error(transparent)]
    Trace(Box<TraceError>),
}

impl From<TraceError> for Failure {
    fn from(error: TraceError) -> Self {
        Failure::Trace(Box::new(error))
    }
}

impl Failure {
    /// The exit status: 2 for bad input, 126 or 127 for a command that cannot be run, else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Usage(_) => EXIT_USAGE,
            Failure::Launch(error) => error.exit_code(),
            Failure::Read(error) => error.exit_code(),
            Failure::Ctl(error) => error.exit_code(),
            Failure::Generate(_) | Failure::Print(_) | Failure::Printer(_) => EXIT_FAILURE,
            Failure::Trace(error) => error.exit_code(),
        }
    }
}

/// The command line: parses it, does what it asks, and returns the exit status.
pub fn main() -> i32 {
    let cli = Cli::try_parse().unwrap_or_else(|error| usage_error(&error));
    match run(cli) {
        Ok(code) => code,
        Err(failure) => {
            say!("thrtrace-bpf: {}", OneLine(&failure));
            failure.exit_code()
        }
    }
}

/// Does what the command line asks; returns the exit status.
fn run(cli: Cli) -> Result<i32, Failure> {
    Ok(match &cli.action {
        Some(Action::Dump(args)) => readers::dump::run(args)?,
        Some(Action::Info(args)) => readers::info::run(args)?,
        Some(Action::Convert(args)) => readers::convert::run(args)?,
        Some(Action::Ctl(args)) => control::client::run(args)?,
        Some(Action::Report(args)) => readers::report::run(args)?,
        Some(Action::Top(args)) => args.run()?,
        Some(Action::List) => event_list::run()?,
        Some(Action::Generate(args)) => manual::generate(&args.what, Cli::command())?,
        None => cli.trace()?,
    })
}

/// A command line clap refused: help and version as clap prints them; an error as one line,
/// like every other bad input, with exit status 2.
fn usage_error(error: &clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        error.exit();
    }
    // The message is the text before the usage, its lines joined ("the following required
    // arguments were not provided: <NAME>").
    let text = error.to_string();
    let message: Vec<&str> = text
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect();
    let message = message.join(" ");
    say!(
        "thrtrace-bpf: {}; see --help",
        message
            .trim_start_matches("error: ")
            .trim_end_matches(['.', ':'])
    );
    std::process::exit(EXIT_USAGE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("99999999999G").is_err());
    }
}
