//! How a trace starts, in the order that keeps the host safe and the user told: the outputs
//! opened and the kernel checked before anything is created, the signals caught and the
//! control socket named before anything is attached, then the BPF object loaded, the targets
//! attached, and the sinks started ([`Session::new`]).

use std::{fmt, path::PathBuf, time::Duration};

use foldhash::{HashSet, HashSetExt};
use tracer_common::{Category, kfuncs};
use tracer_model::{
    event::{SystemEvent, event_types},
    log::{Attributes, FORMAT_NAME, FORMAT_VERSION, Inheritance, Metadata, PacketPlacement},
    selection::EventSet,
};

use super::{
    Result, Session, TraceError,
    blocks::{BlockFlushes, BlockWatch},
    config::{Config, LogOptions, Target},
    control::{Controller, Recording},
    deadlocks::DeadlockWatch,
    facts::Facts,
    flow::{Findings, Flow},
    run::Clock,
    short_waits::ShortWaits,
    watch::{Watched, target_error_event},
};
use crate::{
    attach::{
        exec_follow,
        launch::{self, Launched},
        probes::{self, PlanOptions, Probes},
        targets::{self, PthreadLibrary},
    },
    capture::{
        datapath::{DataPath, FutexCalls, FutexHooking, ProgramOptions, Scope},
        decode::{Decoder, ThreadDescriptors},
        features, futex_hook,
        kernel::{self, KernelBtf},
        programs::UprobeMechanism,
    },
    control::socket::{ControlError, RuntimeDir},
    error::{OneLine, UsageError},
    signals::TraceSignals,
    sinks::{
        Sink, Sinks,
        ctf::{CtfTrace, ctf_dir},
        descriptors,
        free_space::{self, FloorError, FloorGuard},
        log::{LogFile, TRACE_LOG, TraceLog},
        output_dir::OutputDir,
        threaded::Threaded,
        tr::TrFiles,
        tr_writers::TrWriters,
    },
};

/// The directories the files go in, opened once: every file is created relative to one of
/// them (see `sinks::output_dir`).
struct Outputs {
    tr: Option<OutputDir>,
    /// The log's directory.
    log: Option<OutputDir>,
    /// The CTF trace's, and where the trace that was in it went.
    ctf: Option<(OutputDir, Option<PathBuf>)>,
}

impl Outputs {
    fn open(config: &Config) -> Result<Self> {
        let tr = match &config.output {
            Some(dir) => Some(OutputDir::open(dir).map_err(|e| e.usage("with --dir"))?),
            None => None,
        };
        let log = match &config.log {
            Some(options) => {
                let dir = OutputDir::open(&options.dir).map_err(|e| e.usage("for --log"))?;
                if let Err(error) = dir.check_kind(&options.file_name, &TRACE_LOG) {
                    usage_bail!("--log: {error}");
                }
                Some(dir)
            }
            None => None,
        };
        let ctf = match &config.ctf {
            Some(dir) => Some(ctf_dir(dir).map_err(|e| e.usage("--ctf"))?),
            None => None,
        };
        let ctf_dir = ctf.as_ref().map(|(dir, _)| dir);
        for dir in [tr.as_ref(), log.as_ref(), ctf_dir].into_iter().flatten() {
            free_space::floor_in(dir, config.min_free).map_err(floor_error)?;
        }
        Ok(Outputs { tr, log, ctf })
    }
}

/// A directory too full to trace into is the user's to free or to name otherwise.
fn floor_error(error: FloorError) -> TraceError {
    match error {
        FloorError::Unreadable { dir, source } => TraceError::Output {
            what: format!("cannot read the free space of {}", dir.display()),
            source,
        },
        below @ FloorError::Below { .. } => UsageError(below.to_string()).into(),
    }
}

/// `sink`, which writes in `dir`, stopped at the file system's floor (`--min-free`).
fn guarded<S: Sink>(sink: S, dir: &OutputDir, config: &Config) -> Result<FloorGuard<S>> {
    FloorGuard::new(sink, dir, config.min_free).map_err(floor_error)
}

impl Session {
    /// Starts the trace `config` asks for, up to the point where records flow: probes placed,
    /// targets attached, sinks begun by [`Session::run`]. Needs a tokio runtime's context.
    pub fn new(config: &Config, viewers: Vec<Box<dyn Sink + Send>>) -> Result<Self> {
        let outputs = Outputs::open(config)?;
        // Before anything is created or attached: a kernel below the floor ends the run at once.
        let kernel_features = features::check()?;
        // The events whose probes record the selected ones: rmutex calls are recorded by the
        // mutex probes (told apart by the mutex's kind as each record is written).
        let probed = config.events.probed();
        let recording = Recording::new(probed, config.events, config.stopped, config.contended);
        // The stream is created now: its start is stamped before any record can be (unless it
        // starts stopped, when a controller's START starts it).
        let created_ktime = kernel::monotonic_ns();
        let thread_descriptors = ThreadDescriptors::new();
        let decoder = Decoder::new(kernel::realtime_offset_ns(), recording.decoded())
            .with_thread_descriptors(thread_descriptors.clone());
        let created_ns = decoder.realtime_ns(created_ktime);
        let mut early_events = Vec::new();
        if !config.stopped {
            early_events.push((created_ktime, recording.start_event(created_ns)));
        }
        let signals = TraceSignals::catch_and_hold().map_err(TraceError::CatchSignals)?;
        // Before anything is attached: a name already taken ends the run at once.
        let controller = control_socket(config)?;
        descriptors::raise_limit();
        let (mut datapath, mechanism) = load(config, &kernel_features, &recording)?;
        // Said now, not as it failed: a user without the privileges to trace is told that
        // alone, in one line, by the load.
        let controller = controller
            .inspect_err(|error| {
                say!("thrtrace-bpf: {error}; the trace cannot be controlled with `ctl`");
            })
            .ok();
        let mut probes = Probes::new(probed, plan_options(config), mechanism, thread_descriptors)?;
        // A target's facts (executable, mappings) are read as it is attached, while it surely
        // lives, when an output keeps them: a short run's first records are drained after it
        // has exited, too late to read them then.
        let keeps_facts = config.log.is_some()
            || outputs.ctf.is_some()
            || viewers.iter().any(|viewer| viewer.wants_system_events());
        let symbols = probes.symbols();
        let Attached {
            pids: attached_pids,
            launched,
            facts,
            described,
            followed,
        } = Attacher {
            probes: &mut probes,
            datapath: &mut datapath,
            decoder: &decoder,
            follow: config.follow,
            verbose: config.verbose,
            facts: keeps_facts.then(Facts::default),
            described: HashSet::new(),
            interposers_told: HashSet::new(),
            early_events: &mut early_events,
            followed: Vec::new(),
        }
        .targets(&config.target, &symbols)?;
        // This thread drains the rings from now on: it must keep up with targets at any
        // priority, a launched command having just been released. (Attaching, which can be
        // long and CPU-bound on kernels before uprobe_multi, ran at the normal policy; what
        // the tracer launches starts at it, and the writer threads go back to it.)
        crate::priority::run_first();

        let launched_pid = launched
            .as_ref()
            .filter(|l| l.exited.is_none())
            .map(|l| l.child.id());
        // Under --follow, the targets are also traced through exec into other libraries.
        let exec_requests = config
            .follow
            .then(|| {
                exec_follow::start(
                    attached_pids.clone(),
                    launched_pid,
                    symbols.clone(),
                    datapath.take_stopped_view(),
                )
            })
            .transpose()?;
        for line in followed {
            say!("{line}");
        }
        let (findings, found) = Findings::new();
        let mut sinks = start_sinks(config, outputs, created_ns, viewers)?;
        sinks.extend(watches(config, &findings));
        let sinks = Sinks(sinks);
        let clock = Clock::new(&datapath, config.buffering, config.duration)?;
        let shares = datapath.share_rings(config.consumer_threads);
        let facts = sinks
            .wants_system_events()
            .then(|| facts.unwrap_or_default());
        let short_waits = config
            .min_wait
            .map(|bound| ShortWaits::new(bound.as_nanos() as u64));
        let mut flow = Flow::new(
            shares,
            &decoder,
            facts,
            described,
            early_events,
            short_waits,
        )?;
        flow.stacks = config.stacks;
        flow.stack_tops = datapath.take_stack_tops();
        // The files the targets map are read now, while they surely live: a target whose first
        // record comes late (a contended trace of a short run, a tracer behind) may have
        // exited, its maps gone, before that record is drained.
        if config.stacks != tracer_common::STACKS_NONE {
            for &pid in attached_pids.iter().chain(&launched_pid) {
                flow.unwinder.prepare(pid);
            }
        }
        let destinations = sinks.destinations();
        // A trace with no destination is `top`'s, whose view says all this.
        if !destinations.is_empty() {
            let traced = config.traced(&attached_pids, launched_pid);
            let stops = Stops {
                duration: config.duration,
                control: controller.as_ref().map(|_| config.name.as_str()),
                stopped: config.stopped,
            };
            say!(
                "thrtrace-bpf: tracing {} of {traced} into {}; {stops}",
                events_traced(config),
                destinations.join(" and ")
            );
        }
        Ok(Session {
            datapath,
            probes,
            decoder,
            sinks,
            flow,
            watched: Watched::new(&attached_pids, launched),
            clock,
            until_stopped: matches!(config.target, Target::SystemWide),
            follow: config.follow,
            exec_requests,
            signals,
            name: config.name.clone(),
            controller,
            recording,
            block_flushes: config.flush_on_block.map(BlockFlushes::new),
            found,
        })
    }
}

/// The events of the line that says a trace has begun: `mutex, cond`, or `contended mutex`.
fn events_traced(config: &Config) -> String {
    let spec = config.events.spec().replace(':', ", ");
    match config.contended {
        true => format!("contended {spec}"),
        false => spec,
    }
}

/// How a trace that has begun will stop, as that line says it.
struct Stops<'a> {
    duration: Option<Duration>,
    /// The trace's name, when `ctl` can reach it.
    control: Option<&'a str>,
    /// `--stopped`: recording waits for `ctl NAME start`.
    stopped: bool,
}

impl fmt::Display for Stops<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (true, Some(name)) = (self.stopped, self.control) {
            write!(
                f,
                "recording nothing until `thrtrace-bpf ctl {name} start`; "
            )?;
        }
        if let Some(duration) = self.duration {
            write!(f, "for {}; ", humantime::format_duration(duration))?;
        }
        write!(f, "Ctrl-C stops it")?;
        if let Some(name) = self.control {
            write!(f, ", as does `thrtrace-bpf ctl {name} shutdown`")?;
        }
        Ok(())
    }
}

/// The watches `config` asks for, reporting to `findings`: sinks that stay on the session's
/// thread. What they find as time passes is placed in this order: calls still blocked, then
/// deadlocks.
fn watches(config: &Config, findings: &Findings) -> Vec<Box<dyn Sink>> {
    let mut watches: Vec<Box<dyn Sink>> = Vec::new();
    if let Some(threshold) = config.flush_on_block {
        watches.push(Box::new(BlockWatch::new(threshold, findings.clone())));
    }
    // Nothing is recorded with empty programs: no deadlock to watch for.
    if !config.empty_programs {
        let deadlocks =
            DeadlockWatch::new(config.deadlock_after, config.lock_order, findings.clone());
        watches.push(Box::new(deadlocks));
    }
    watches
}

/// The BPF object loaded for `config` on a kernel with `kernel_features`, recording what
/// `recording` says from the first hit on, and the mechanism its uprobes are placed with.
fn load(
    config: &Config,
    kernel_features: &str,
    recording: &Recording,
) -> Result<(DataPath, UprobeMechanism)> {
    let scope = match (&config.target, config.follow) {
        (Target::SystemWide, _) => Scope::SystemWide,
        (_, true) => Scope::Follow,
        (_, false) => Scope::Processes,
    };
    let futex_selected = !config
        .events
        .intersection(EventSet::of(Category::Futex.events()))
        .is_empty();
    let futex = match (futex_selected && !config.empty_programs, config.contended) {
        (false, _) => FutexCalls::None,
        (true, true) => FutexCalls::Contended,
        (true, false) => FutexCalls::Every,
    };
    // fentry needs the futex syscalls' functions' ids, and the futex programs those of the
    // kfuncs they call: each a scan of kernel BTF.
    let functions: Vec<&str> = match futex {
        FutexCalls::None => Vec::new(),
        _ => futex_hook::SYSCALL_FUNCTIONS
            .into_iter()
            .chain(kfuncs::ALL.map(|kfunc| kfunc.name))
            .collect(),
    };
    let kernel = KernelBtf::read(&functions)?;
    let mechanism = UprobeMechanism::detect(config.perf_event_probes);
    if config.verbose {
        say!("thrtrace-bpf: {kernel_features}");
        say!("thrtrace-bpf: {}", kernel.access.describe());
        say!(
            "thrtrace-bpf: {}",
            mechanism.describe(config.perf_event_probes)
        );
    }
    let options = ProgramOptions {
        empty: config.empty_programs,
        lossless: config.lossless,
        stacks: config.stacks,
        fast_paths: plan_options(config).plans_fast_paths(),
        futex,
        futex_hook: config.futex_hook,
        cgroups: config.cgroups.iter().map(|c| c.cgroup).collect(),
    };
    let mut datapath = DataPath::load(&kernel, config.ring_bytes, options, scope, mechanism)?;
    if let Some(hooking) = datapath.take_futex_hooking() {
        let unpreempted = kernel.functions.contains_key(kfuncs::PREEMPT_DISABLE.name);
        say_futex_hooking(config, hooking, unpreempted)?;
    }
    // Set before any probe is placed: the first hits record (or, `--stopped`, do not).
    datapath.set_recording(&recording.masks())?;
    Ok((datapath, mechanism))
}

/// Says how the futex calls are hooked (with `-v`), and whether their programs run with
/// preemption off (`unpreempted`), or that they cannot be hooked: a hook the user chose that
/// cannot be used ends the trace; when none can, the rest is traced.
fn say_futex_hooking(config: &Config, hooking: FutexHooking, unpreempted: bool) -> Result<()> {
    let FutexHooking { used, passed_over } = hooking;
    if let (Some(forced), Some((_, error))) = (config.futex_hook, passed_over.first()) {
        usage_bail!(
            "--futex-hook {} cannot be used on this kernel: {error}; leave --futex-hook out to \
             use the first hook that works",
            forced.name()
        );
    }
    if let Some(hook) = used {
        if config.verbose {
            for (hook, error) in &passed_over {
                say!("thrtrace-bpf: futex calls: not {}: {error}", hook.name());
            }
            say!("thrtrace-bpf: futex calls: {}", hook.describe());
            let kfunc = kfuncs::PREEMPT_DISABLE;
            if unpreempted {
                say!("thrtrace-bpf: futex calls: their programs run with preemption off");
            } else {
                say!(
                    "thrtrace-bpf: futex calls: their programs may be preempted (this kernel \
                     lacks {}, Linux {}): a call made where one is preempted is skipped, and \
                     counted lost",
                    kfunc.name,
                    kfunc.since
                );
            }
        }
    } else {
        let why: Vec<String> = passed_over
            .iter()
            .map(|(hook, error)| format!("{}: {error}", hook.name()))
            .collect();
        say!(
            "thrtrace-bpf: futex waits outside pthread calls are not recorded: no way to hook \
             the futex syscalls works here ({})",
            why.join("; ")
        );
    }
    Ok(())
}

/// The targets attached, and what the log is told of them.
struct Attached {
    /// The processes given with `-p` that are traced.
    pids: Vec<u32>,
    /// The command started (`-- COMMAND`).
    launched: Option<Launched>,
    /// What read the facts among the early events, if they are kept.
    facts: Option<Facts>,
    /// The processes whose facts are among the early events.
    described: HashSet<u32>,
    /// The lines that tell users a target is ready, said once its execs are followed too.
    followed: Vec<String>,
}

/// Places the probes in each target as it is found, and notes what the log is told of it.
struct Attacher<'a> {
    probes: &'a mut Probes,
    datapath: &'a mut DataPath,
    decoder: &'a Decoder,
    follow: bool,
    verbose: bool,
    /// Facts about the targets (executable, mapped files, threads' ids in a PID namespace),
    /// read as each is attached, when a sink keeps system events; then handed on to the flow,
    /// which goes on reading them.
    facts: Option<Facts>,
    described: HashSet<u32>,
    /// The targets whose interposers `-v` has named.
    interposers_told: HashSet<u32>,
    /// The events stamped before any record: each target's facts and errors go here.
    early_events: &'a mut Vec<(u64, SystemEvent)>,
    followed: Vec<String>,
}

impl Attacher<'_> {
    /// Attaches `target`, whose pthread libraries define `symbols`.
    fn targets(mut self, target: &Target, symbols: &[&str]) -> Result<Attached> {
        let (pids, launched) = match target {
            Target::Pids(pids) => (self.pids(pids, symbols)?, None),
            Target::Command(argv) => {
                let follow = self.follow;
                let launched = launch::launch(
                    argv,
                    symbols,
                    |pid, library| self.library(pid, library),
                    follow,
                )?;
                (Vec::new(), Some(launched))
            }
            // Each distinct library file once; the tracer's own calls are skipped in BPF.
            Target::SystemWide => {
                let failures = self.probes.attach_new_libraries(self.datapath);
                let failures = failures.into_iter().map(|(pid, error)| (pid, error.into()));
                let some_traced = self.probes.probes_everywhere();
                self.not_traced(failures.collect(), some_traced, |_, error| {
                    format!("thrtrace-bpf: {}", OneLine(error))
                })?;
                (Vec::new(), None)
            }
        };
        Ok(Attached {
            pids,
            launched,
            facts: self.facts,
            described: self.described,
            followed: self.followed,
        })
    }

    /// `-p`: the processes traced. One that cannot be attached is an error event and a line,
    /// and the others are traced; if none can be, the run ends with the last one's error.
    fn pids(&mut self, pids: &[u32], symbols: &[&str]) -> Result<Vec<u32>> {
        let mut traced = Vec::new();
        let mut failures = Vec::new();
        for &pid in pids {
            let libraries = targets::find_pthread_libraries(pid, symbols)?;
            if libraries.is_empty() {
                say!("thrtrace-bpf: {}", targets::no_pthread_functions(pid));
                continue;
            }
            match libraries
                .iter()
                .try_for_each(|library| self.library(pid, library))
            {
                Ok(()) => traced.push(pid),
                Err(error) => failures.push((pid, error)),
            }
        }
        self.not_traced(failures, !traced.is_empty(), |pid, error| {
            format!("thrtrace-bpf: pid {pid} is not traced: {}", OneLine(error))
        })?;
        Ok(traced)
    }

    /// Says which targets could not be attached, each in a line (`line`) and an error event,
    /// when `some_traced`; if none is traced, the run ends with the last one's error.
    fn not_traced(
        &mut self,
        mut failures: Vec<(u32, TraceError)>,
        some_traced: bool,
        line: impl Fn(u32, &TraceError) -> String,
    ) -> Result<()> {
        if !some_traced && let Some((_, error)) = failures.pop() {
            return Err(error);
        }
        for (pid, error) in failures {
            say!("{}", line(pid, &error));
            let now = kernel::monotonic_ns();
            let event = target_error_event(self.decoder.realtime_ns(now), pid, &error);
            self.early_events.push((now, event));
        }
        Ok(())
    }

    /// Places the probes in `library`, mapped by process `pid`.
    fn library(&mut self, pid: u32, library: &PthreadLibrary) -> Result<()> {
        self.describe(pid);
        if self.verbose && self.interposers_told.insert(pid) {
            for interposer in targets::pthread_interposers(pid) {
                say!(
                    "thrtrace-bpf: pid {pid}: {interposer} defines pthread functions of its own \
                     (an interposer): the probes are on {}'s, where the calls it forwards are \
                     recorded once, with its call site as the caller",
                    library.file.path
                );
            }
        }
        if self.follow {
            self.probes.attach_shared(self.datapath, pid, library)?;
            self.followed.push(format!(
                "thrtrace-bpf: tracing pid {pid} and its children: probes in {}",
                library.file.path
            ));
            Ok(())
        } else if targets::main_thread_exited(pid) {
            Ok(self
                .probes
                .attach_after_main_thread(self.datapath, pid, library)?)
        } else {
            Ok(self.probes.attach_library(self.datapath, pid, library)?)
        }
    }

    /// The facts of process `pid`, once, for the log.
    fn describe(&mut self, pid: u32) {
        if let Some(facts) = self.facts.as_mut()
            && self.described.insert(pid)
        {
            let now = kernel::monotonic_ns();
            let facts = facts.attached(pid, self.decoder.realtime_ns(now));
            self.early_events
                .extend(facts.into_iter().map(|event| (now, event)));
        }
    }
}

/// The sinks `config` asks for, writing into `outputs`, on threads of their own so that
/// creating and writing files never stalls the drain: with one consumer thread, one writer
/// thread does all the writing (each record is handed over once); with N, the tr files are
/// written by N-1 threads and the log by one. `viewers` (the command line's: `top`'s view)
/// come first, on the session's thread.
fn start_sinks(
    config: &Config,
    outputs: Outputs,
    created_ns: i64,
    viewers: Vec<Box<dyn Sink + Send>>,
) -> Result<Vec<Box<dyn Sink>>> {
    let budget = descriptors::open_file_budget();
    let log = match (&config.log, outputs.log) {
        (Some(options), Some(dir)) => Some(guarded(
            trace_log(options, &dir, config, created_ns)?,
            &dir,
            config,
        )?),
        _ => None,
    };
    let ctf = match outputs.ctf {
        Some((dir, earlier)) => {
            let trace = CtfTrace::new(
                dir.try_clone().map_err(TraceError::output(
                    "cannot open the CTF trace's directory again",
                ))?,
                &config.name,
                &event_types(),
            );
            Some(guarded(trace.kept_earlier(earlier), &dir, config)?)
        }
        None => None,
    };
    let mut sinks: Vec<Box<dyn Sink>> = viewers
        .into_iter()
        .map(|viewer| viewer as Box<dyn Sink>)
        .collect();
    if config.consumer_threads == 1 {
        let mut written: Vec<Box<dyn Sink + Send>> = Vec::new();
        if let Some(dir) = outputs.tr {
            let files = TrFiles::new(
                dir.try_clone().map_err(TraceError::output(
                    "cannot open the tr files' directory again",
                ))?,
                config.buffering,
                budget,
            );
            written.push(Box::new(guarded(files, &dir, config)?));
        }
        if let Some(log) = log {
            written.push(Box::new(log));
        }
        if let Some(ctf) = ctf {
            written.push(Box::new(ctf));
        }
        if !written.is_empty() {
            let writer = Threaded::new(Sinks(written), "writer")
                .map_err(TraceError::output("cannot start the writer thread"))?;
            sinks.push(Box::new(writer));
        }
        return Ok(sinks);
    }
    if let Some(dir) = outputs.tr {
        let writers = config.consumer_threads - 1;
        let files = TrWriters::new(&dir, config.buffering, budget, writers)
            .map_err(TraceError::output("cannot start the tr writer threads"))?;
        sinks.push(Box::new(guarded(files, &dir, config)?));
    }
    if let Some(log) = log {
        sinks.push(Box::new(Threaded::new(log, "log-writer").map_err(
            TraceError::output("cannot start the log writer thread"),
        )?));
    }
    if let Some(ctf) = ctf {
        sinks.push(Box::new(Threaded::new(ctf, "ctf-writer").map_err(
            TraceError::output("cannot start the CTF writer thread"),
        )?));
    }
    Ok(sinks)
}

fn plan_options(config: &Config) -> PlanOptions {
    PlanOptions {
        at_entry: config.probe_at_entry,
        fast_paths: config.fast_paths,
        contended: config.contended,
    }
}

/// The trace's control socket, listening (in the runtime's context). A name that another
/// trace has is an error; a socket that cannot be made is one only if `--name` asked for it,
/// else the inner error, said once the trace is sure to start.
fn control_socket(config: &Config) -> Result<Result<Controller, ControlError>> {
    let socket = RuntimeDir::open(true).and_then(|dir| dir.listen(&config.name));
    match socket {
        Ok(socket) => {
            let shown = socket.path();
            let controller = Controller::listen(socket).map_err(TraceError::output(format!(
                "cannot listen on {}",
                shown.display()
            )))?;
            Ok(Ok(controller))
        }
        Err(error @ ControlError::NameTaken { .. }) => Err(UsageError(error.to_string()).into()),
        Err(error) if config.name_given => Err(error.into()),
        Err(error) => Ok(Err(error)),
    }
}

/// The log sink: its file created now in `dir` (safely, see `sinks::output_dir`), its
/// attributes as the command line gave them.
fn trace_log(
    log: &LogOptions,
    dir: &OutputDir,
    config: &Config,
    created_ns: i64,
) -> Result<TraceLog> {
    let file = LogFile::create(dir, &log.file_name).map_err(|source| TraceError::CreateLog {
        path: log.path.clone(),
        source,
    })?;
    let event_types = event_types();
    let max_data_size = event_types
        .iter()
        .map(|t| tracer_model::log::entry::max_payload(&t.payload))
        .max()
        .unwrap_or(0);
    let metadata = Metadata {
        format: FORMAT_NAME.to_owned(),
        format_version: FORMAT_VERSION,
        attributes: Attributes {
            generation_version: format!(
                "thrtrace-bpf {} (log format {FORMAT_VERSION})",
                env!("CARGO_PKG_VERSION")
            ),
            trace_name: log.trace_name.clone(),
            creation_time_ns: created_ns,
            clock_resolution_ns: kernel::clock_resolution_ns(),
            stream_min_size: log.stream_size,
            stream_full_policy: log.stream_full_policy,
            max_data_size,
            inheritance: match config.follow {
                true => Inheritance::Inherited,
                false => Inheritance::CloseForChild,
            },
            log_max_size: log.log_size,
            log_full_policy: log.log_full_policy,
        },
        packets: PacketPlacement::choose(log.log_size, log.log_full_policy),
        event_types,
    };
    Ok(TraceLog::new(
        file,
        log.path.clone(),
        metadata,
        config.buffering,
        !config.stopped,
    ))
}

/// `--list-probes`: where each probe would go in each target's pthread library.
pub fn list_probes(config: &Config) -> Result<i32> {
    let Target::Pids(pids) = &config.target else {
        usage_bail!("--list-probes takes -p PID");
    };
    let events = config.events.probed().in_library();
    let symbols: Vec<&str> = events.events().map(|e| e.symbol).collect();
    let mut table = String::new();
    for &pid in pids {
        let libraries = targets::find_pthread_libraries(pid, &symbols)?;
        if libraries.is_empty() {
            table += &format!("{}\n", targets::no_pthread_functions(pid));
        }
        for library in &libraries {
            table += &format!("{} (pid {pid})\n", library.file.path);
            table += &probes::describe(&probes::plan(library, events, plan_options(config)));
        }
    }
    crate::say::print(table)?;
    Ok(0)
}
