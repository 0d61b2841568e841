//! `thrtrace-bpf report LOG|DIR`: the per-lock and per-thread tables people read, from a log or
//! a directory of tr files, through `tracer_model::analysis`. Callers are symbolized from the
//! log's mapping snapshots (`symbolize`), and so are the call stacks a trace taken with stacks
//! holds; tr files have no caller addresses, and the report says so.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt::{self, Write as _},
    path::{Path, PathBuf},
};

use clap::{Args, ValueEnum};
use serde::Serialize;
use tracer_model::{
    TraceRecord,
    analysis::{
        Acquisition, Analysis, BlockKind, Deadlock, Durations, LockKind, LockStats, OrderEdge,
        ShortWaits, StackStats,
    },
    event::{Event, SystemEvent, SystemKind},
    selection::list_names,
    stack::{LeftOut, Stack, StackShare, Stacks},
    tr::{self, parse_line},
};

use crate::{
    error::UsageError,
    place::{NOT_RECORDED, Place},
    readers::{
        OutputFile, ReadError, flame, pprof,
        samples::{View, contention_samples, summary},
    },
    say::{counted, duration},
    symbolize::{Location, LockName, Mapping, Symbols},
};

/// How many callers and holders a lock lists in text (JSON has them all).
const TOP_CALLERS: usize = 3;
/// How many stacks a lock lists, of its waits and of the releases that ended them.
const TOP_STACKS: usize = 3;

pub fn run(args: &ReportArgs) -> Result<i32, ReadError> {
    // Refused before the log is read: a profile and a flame graph are written, never printed;
    // tables are printed, never written. Clap refuses --format and -o beside --flamegraph.
    let export = match (args.format, &args.output, &args.flamegraph) {
        (_, _, Some(svg)) => Some(Export::FlameGraph(OutputFile::prepare(
            svg,
            &flame::FLAME_GRAPH,
        )?)),
        (ReportFormat::Pprof, Some(path), None) => {
            Some(Export::Pprof(OutputFile::prepare(path, &pprof::PROFILE)?))
        }
        (ReportFormat::Pprof, None, None) => {
            usage_bail!("--format pprof writes a binary profile: name its file with -o FILE")
        }
        (ReportFormat::Folded, path, None) => Some(Export::Folded(
            path.as_deref()
                .map(|path| OutputFile::prepare(path, &flame::FOLDED))
                .transpose()?,
        )),
        (ReportFormat::Text | ReportFormat::Json, Some(_), None) => {
            usage_bail!("-o FILE is for --format pprof and folded: text and JSON are printed")
        }
        (ReportFormat::Text | ReportFormat::Json, None, None) => None,
    };
    let mut analysis = Analysis::new(true);
    let mut symbols = Symbols::fetching(&args.debug_dir);
    let mut stacks = Stacks::default();
    if args.input.is_dir() {
        for record in read_tr_dir(&args.input)? {
            analysis.record(&record);
        }
    } else {
        feed_log(&args.input, &mut analysis, &mut symbols, &mut stacks)?;
        symbols.fetch_debug_files(stacks.frames());
    }
    if let Some(export) = export {
        let samples = contention_samples(
            analysis.locks(),
            &mut symbols,
            &stacks,
            &args.kinds,
            args.view,
        );
        let written = match export {
            Export::Pprof(file) => Some(super::pprof::write(
                &analysis, &samples, &symbols, args.view, file,
            )?),
            Export::Folded(Some(file)) => Some(file.write(flame::folded(&samples).as_bytes())?),
            Export::Folded(None) => {
                crate::say::print(flame::folded(&samples))?;
                None
            }
            Export::FlameGraph(file) => {
                let Some(svg) = flame::flame_graph(&analysis, &samples, &args.kinds, args.view)?
                else {
                    let summary =
                        summary(&samples, args.view, &args.kinds, None, &analysis.left_out());
                    say!(
                        "thrtrace-bpf: {summary}; nothing to draw, {} not written",
                        file.path().display()
                    );
                    return Ok(0);
                };
                Some(file.write(&svg)?)
            }
        };
        say!(
            "thrtrace-bpf: {}",
            summary(
                &samples,
                args.view,
                &args.kinds,
                written.as_deref(),
                &analysis.left_out()
            )
        );
        return Ok(0);
    }
    if args.sort == ReportSort::Hold && analysis.contended_only {
        usage_bail!(
            "--sort hold: {} records no hold times (a lock taken without waiting is not \
             recorded): sort by wait, contended or acquisitions",
            args.input.display()
        );
    }
    let report = Report::build(&mut analysis, &mut symbols, &stacks, args);
    let text = match args.format {
        ReportFormat::Json => serde_json::to_string_pretty(&report)? + "\n",
        ReportFormat::Text | ReportFormat::Pprof | ReportFormat::Folded => report.text(args),
    };
    crate::say::print(text)?;
    Ok(0)
}

/// The contended waits' call stacks, written as a format other tools read.
enum Export {
    Pprof(OutputFile),
    /// To a file, or printed.
    Folded(Option<OutputFile>),
    FlameGraph(OutputFile),
}

/// Every event of a log into `analysis`, its mappings into `symbols`, its call stacks into
/// `stacks`.
fn feed_log(
    path: &Path,
    analysis: &mut Analysis,
    symbols: &mut Symbols,
    stacks: &mut Stacks,
) -> Result<(), ReadError> {
    let reader = super::open_log(path)?;
    for event in reader.events() {
        match event.map_err(ReadError::log(path))? {
            Event::Thread(record) => {
                stacks.count_record(record.stack, record.time_ns() as i64);
                analysis.record(&record);
            }
            // A stack event tells the analysis too which stacks were left out.
            Event::System(event) => {
                stacks.take(&event);
                take_system_event(&event, analysis, |pid, mapping| {
                    symbols.add_mapping(pid, mapping);
                });
            }
        }
    }
    Ok(())
}

/// A system event into `analysis`; a mapping to `add_mapping`, for the symbols.
pub fn take_system_event(
    event: &SystemEvent,
    analysis: &mut Analysis,
    mut add_mapping: impl FnMut(u32, Mapping),
) {
    if let Some(mapping) = Mapping::of(&event.kind) {
        add_mapping(event.pid, mapping);
    }
    if event.kind == SystemKind::ProcessDetach {
        analysis.process_exited(event.pid);
    }
    analysis.system_event(event);
}

/// The lock tables of what `analysis` has seen so far, the first `top` locks by `sort` and the
/// longest idle waits, of the `kinds` given: the live view's (`thrtrace-bpf top`).
pub fn lock_table_so_far(
    analysis: &mut Analysis,
    symbols: &mut Symbols,
    top: usize,
    sort: ReportSort,
    kinds: KindArg,
) -> String {
    let args = ReportArgs {
        format: ReportFormat::Text,
        output: None,
        flamegraph: None,
        view: View::default(),
        by: ReportBy::Lock,
        sort,
        top,
        kinds,
        histogram: false,
        debug_dir: Vec::new(),
        input: PathBuf::new(),
    };
    Report::build(analysis, symbols, &Stacks::default(), &args).text(&args)
}

/// How a table's first column names a lock or an object waited on: by its symbol or member
/// path, else by its address.
fn label(name: &LockName) -> String {
    name.symbol.clone().unwrap_or_else(|| hex(name.address))
}

/// The width of a table's first column: 16, or the longest of its rows' labels (member paths
/// run long: `_rtld_global._dl_load_lock.mutex`).
fn label_width<'a>(names: impl Iterator<Item = &'a LockName>) -> usize {
    names
        .map(|name| label(name).chars().count())
        .fold(16, usize::max)
}

/// The records of the `tr.*` files in `dir`, in time order.
fn read_tr_dir(dir: &Path) -> Result<Vec<TraceRecord>, ReadError> {
    let unreadable = |path: &Path| {
        let path = path.to_owned();
        |source| ReadError::TrFiles { path, source }
    };
    let mut records = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(unreadable(dir))?;
    for entry in entries {
        let entry = entry.map_err(unreadable(dir))?;
        let name = entry.file_name();
        if !tr::is_file_name(&name.to_string_lossy()) {
            continue;
        }
        let path = entry.path();
        let bytes = std::fs::read(&path).map_err(unreadable(&path))?;
        let Ok(text) = String::from_utf8(bytes) else {
            usage_bail!(
                "{}: not a tr file: it holds bytes that are not text (a tr file is lines of \
                 colon-separated numbers)",
                path.display()
            );
        };
        for (n, line) in text.lines().enumerate() {
            let record = parse_line(line).map_err(|error| {
                UsageError(format!(
                    "{} line {}: {error}: not a tr file",
                    path.display(),
                    n + 1
                ))
            })?;
            records.push(record);
        }
    }
    if records.is_empty() {
        return Err(UsageError(format!(
            "{}: no tr.* records: give a trace log or a directory of tr files",
            dir.display()
        ))
        .into());
    }
    // Each file's own order is kept among records stamped alike.
    records.sort_by_key(TraceRecord::time_ns);
    Ok(records)
}

#[derive(Serialize)]
struct Report {
    /// Whether callers could be located (a log has their addresses and mappings).
    callers_known: bool,
    /// The trace records contended calls only (`--contended`).
    contended_only: bool,
    duration_ns: u64,
    /// When the first record was made (CLOCK_REALTIME ns).
    #[serde(skip)]
    first_ns: i64,
    /// Contention: the locks (mutex, rmutex, rwlock, spin, semaphore, futex word waited on),
    /// most waited for first (or as `--sort` says).
    locks: Vec<LockRow>,
    /// Waits for work or an event (condvars, barriers, threads joined), the longest first.
    idle_waits: Vec<LockRow>,
    threads: Vec<ThreadRow>,
    /// The traced processes' totals by cgroup, most time waited on locks first.
    cgroups: Vec<CgroupRow>,
    deadlocks: Vec<DeadlockRow>,
    /// Lock-order inversions: deadlocks that did not happen in this trace but can.
    potential_deadlocks: Vec<InversionRow>,
    /// The lock-order graph reached its bound: later lock pairs were not checked.
    lock_order_incomplete: bool,
    /// Of the records that were to carry a call stack, those whose stack is whole.
    call_stacks: StackShare,
    /// Of them, those that came without it, the tracer behind.
    call_stacks_left_out: LeftOut,
}

#[derive(Serialize)]
struct LockRow {
    pid: u32,
    /// Its process's command, if the log told it.
    process: String,
    #[serde(flatten)]
    cgroup: CgroupLabel,
    /// Its address, and the global variable it is, if it is one; for a lock that is none (on
    /// the heap, a stack), where its first contended wait was called from (the innermost frame
    /// outside the lock function), which names it.
    #[serde(flatten)]
    name: LockName,
    kind: &'static str,
    /// Its waits shorter than `--min-wait`, counted in the figures but not written: no stack
    /// or holder is known of them (absent when there were none).
    #[serde(skip_serializing_if = "Option::is_none")]
    short_waits: Option<ShortWaits>,
    /// Its contended waits whose stacks were left out (the tracer was behind): in the figures,
    /// in no "waited from" row (absent when there were none).
    #[serde(skip_serializing_if = "Option::is_none")]
    stacks_left_out: Option<LeftOutWaits>,
    /// Whether its kind's holds are recorded: a futex word's are not, so neither its hold
    /// times nor its owner changes are known.
    #[serde(skip)]
    holds_recorded: bool,
    acquisitions: u64,
    contended: u64,
    owner_changes: u64,
    wakeups: u64,
    wait_total_ns: u64,
    wait_avg_ns: u64,
    wait_max_ns: u64,
    hold_total_ns: u64,
    hold_avg_ns: u64,
    hold_max_ns: u64,
    wait_histogram: Vec<u64>,
    hold_histogram: Vec<u64>,
    callers: Vec<CallerRow>,
    /// The holders its contended acquisitions waited for, most waited for first.
    owners: Vec<OwnerRow>,
    /// The call stacks its contended waits waited with, most waited first.
    waiting_stacks: Vec<StackRow>,
    /// The call stacks of the releases (unlocks, posts) that ended its contended waits, by
    /// the time of the waits they ended.
    releasing_stacks: Vec<StackRow>,
}

/// A call stack's share of a lock's contended waits.
#[derive(Serialize)]
struct StackRow {
    /// Waits.
    count: u64,
    wait_total_ns: u64,
    /// The threads that waited (or released) with it, most waits first.
    threads: Vec<ThreadShare>,
    /// Innermost first.
    frames: Vec<Location>,
    /// Why the stack stops where it does, when it does not reach its thread's start.
    end: Option<String>,
}

#[derive(Serialize)]
struct OwnerRow {
    #[serde(flatten)]
    thread: ThreadLabel,
    count: u64,
    wait_total_ns: u64,
    /// Where it took the lock, when that acquisition was recorded.
    taken_at: Option<Place>,
}

/// A caller: a source line (its call sites merged; the first's place), else an address.
#[derive(Serialize)]
struct CallerRow {
    #[serde(flatten)]
    at: Place,
    count: u64,
    wait_total_ns: u64,
}

#[derive(Serialize)]
struct ThreadRow {
    pid: u32,
    #[serde(flatten)]
    thread: ThreadLabel,
    #[serde(flatten)]
    cgroup: CgroupLabel,
    calls: std::collections::BTreeMap<&'static str, u64>,
    blocked_ns: u64,
    blocked_by_kind: std::collections::BTreeMap<&'static str, u64>,
    longest_wait: Option<LongestWait>,
    holds_at_end: Vec<String>,
}

/// Where a process ran, where the log told it: its cgroup (v2, or systemd's on a hybrid host
/// whose v2 cgroup is the root) and the container its runtime made that for.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
struct CgroupLabel {
    #[serde(skip_serializing_if = "Option::is_none")]
    cgroup: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container: Option<String>,
}

impl CgroupLabel {
    /// Whether a text should name the cgroups of rows with these labels: where they are more
    /// than one, or a container's. Where all are one (every process of a host without
    /// containers in the root, or each in a session scope), naming it says nothing.
    fn tell_apart<'a>(labels: impl IntoIterator<Item = &'a CgroupLabel>) -> bool {
        let labels: BTreeSet<&CgroupLabel> = labels.into_iter().collect();
        labels.len() > 1 || labels.iter().any(|label| label.container.is_some())
    }

    fn of(analysis: &Analysis, pid: u32) -> CgroupLabel {
        let cgroup = analysis.cgroup(pid);
        CgroupLabel {
            cgroup: cgroup.map(|c| c.path.clone()),
            container: cgroup
                .map(|c| c.container.clone())
                .filter(|id| !id.is_empty()),
        }
    }
}

/// `/system.slice/mariadb.service`, `/kubepods/…/cri-containerd-….scope (container
/// 3f2a9c0d1e8b)`, or `an unknown cgroup` for a process the log told none of.
impl fmt::Display for CgroupLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.cgroup, &self.container) {
            (None, _) => f.write_str("an unknown cgroup"),
            (Some(path), None) => f.write_str(path),
            (Some(path), Some(id)) => write!(f, "{path} (container {id})"),
        }
    }
}

/// A cgroup's share of the trace: what its traced processes did.
#[derive(Serialize)]
struct CgroupRow {
    #[serde(flatten)]
    label: CgroupLabel,
    /// Its traced processes, by pid, with their commands.
    processes: BTreeMap<u32, String>,
    threads: u64,
    /// Of its locks (the kinds shown).
    acquisitions: u64,
    contended: u64,
    lock_wait_total_ns: u64,
    /// Of its idle waits (condvars, barriers, joins: the kinds shown).
    idle_wait_total_ns: u64,
}

impl CgroupRow {
    /// The rows of the processes `analysis` saw, with their `threads` (the report's rows of
    /// them) and their locks of the kinds `args` shows, most time waited on locks first.
    fn all(analysis: &Analysis, threads: &[ThreadRow], args: &ReportArgs) -> Vec<CgroupRow> {
        let mut rows = BTreeMap::new();
        for thread in threads {
            CgroupRow::of(&mut rows, analysis, thread.pid).threads += 1;
        }
        let shown = analysis
            .locks()
            .filter(|lock| args.kinds.shows(lock.kind) && lock.is_reported());
        for lock in shown {
            let row = CgroupRow::of(&mut rows, analysis, lock.pid);
            match lock.kind.is_lock() {
                true => {
                    row.acquisitions += lock.acquisitions;
                    row.contended += lock.contended;
                    row.lock_wait_total_ns += lock.wait.total_ns;
                }
                false => row.idle_wait_total_ns += lock.wait.total_ns,
            }
        }
        let mut rows: Vec<CgroupRow> = rows.into_values().collect();
        rows.sort_by(|a, b| {
            (b.lock_wait_total_ns, b.idle_wait_total_ns)
                .cmp(&(a.lock_wait_total_ns, a.idle_wait_total_ns))
                .then_with(|| a.label.cmp(&b.label))
        });
        rows
    }

    /// The row in `rows` of process `pid`'s cgroup, which now lists the process.
    fn of<'a>(
        rows: &'a mut BTreeMap<CgroupLabel, CgroupRow>,
        analysis: &Analysis,
        pid: u32,
    ) -> &'a mut CgroupRow {
        let label = CgroupLabel::of(analysis, pid);
        let row = rows.entry(label.clone()).or_insert_with(|| CgroupRow {
            label,
            processes: BTreeMap::new(),
            threads: 0,
            acquisitions: 0,
            contended: 0,
            lock_wait_total_ns: 0,
            idle_wait_total_ns: 0,
        });
        row.processes
            .entry(pid)
            .or_insert_with(|| analysis.process_name(pid).unwrap_or_default().to_owned());
        row
    }
}

#[derive(Serialize)]
struct LongestWait {
    ns: u64,
    call: &'static str,
    object: String,
    at: Place,
}

#[derive(Serialize)]
struct DeadlockRow {
    certain: bool,
    threads: Vec<DeadlockThreadRow>,
}

#[derive(Serialize)]
struct DeadlockThreadRow {
    pid: u32,
    lwpid: u32,
    name: String,
    call: String,
    waits_for: String,
    waits_at: Place,
    holds: Vec<String>,
    locked_at: Place,
}

#[derive(Serialize)]
struct InversionRow {
    pid: u32,
    /// Each "held one lock while acquiring the next", the last acquiring the first's.
    orders: Vec<OrderRow>,
}

#[derive(Serialize)]
struct OrderRow {
    lwpid: u32,
    name: String,
    held: LockTaken,
    acquired: LockTaken,
    /// When the acquisition was first seen (CLOCK_REALTIME ns).
    time_ns: i64,
}

#[derive(Serialize)]
struct LockTaken {
    /// Its address, and the global variable it is, if it is one.
    #[serde(flatten)]
    name: LockName,
    kind: &'static str,
    /// "write" (or the only mode of a mutex or spin lock) or "read".
    mode: &'static str,
    at: Place,
}

impl LockTaken {
    fn new(pid: u32, taken: &Acquisition, symbols: &mut Symbols) -> Self {
        LockTaken {
            name: symbols.name_lock(pid, taken.lock, None),
            kind: taken.kind.name(),
            mode: if taken.exclusive { "write" } else { "read" },
            at: Place::locate(symbols, pid, taken.caller),
        }
    }
}

impl std::fmt::Display for LockTaken {
    /// As messages name a lock (`symbolize::LockName::label`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name.label(self.mode != "read"))
    }
}

fn order_row(edge: &OrderEdge, analysis: &Analysis, symbols: &mut Symbols) -> OrderRow {
    OrderRow {
        lwpid: edge.lwpid,
        name: analysis
            .thread_name(edge.lwpid)
            .unwrap_or_default()
            .to_owned(),
        held: LockTaken::new(edge.pid, &edge.held, symbols),
        acquired: LockTaken::new(edge.pid, &edge.acquired, symbols),
        time_ns: edge.time_ns,
    }
}

fn hex(address: u64) -> String {
    format!("{address:#x}")
}

impl Report {
    fn build(
        analysis: &mut Analysis,
        symbols: &mut Symbols,
        stacks: &Stacks,
        args: &ReportArgs,
    ) -> Report {
        let callers_known = symbols.has_mappings();
        let (mut locks, mut idle): (Vec<&LockStats>, Vec<&LockStats>) = analysis
            .locks()
            .filter(|lock| args.kinds.shows(lock.kind) && lock.is_reported())
            .partition(|lock| lock.kind.is_lock());
        let key = |lock: &LockStats| match args.sort {
            ReportSort::Wait => lock.wait.total_ns,
            ReportSort::Hold => lock.hold.total_ns,
            ReportSort::Contended => lock.contended,
            ReportSort::Acquisitions => lock.acquisitions,
        };
        locks.sort_by(|a, b| key(b).cmp(&key(a)).then(a.address.cmp(&b.address)));
        // Idle waits are neither held nor contended: the longest first.
        idle.sort_by(|a, b| (b.wait.total_ns, a.address).cmp(&(a.wait.total_ns, b.address)));
        // Text lists the first --top of each (0: all) and a few callers and holders of each;
        // JSON has everything.
        let (shown, listed) = match (args.format, args.top) {
            (ReportFormat::Json | ReportFormat::Pprof | ReportFormat::Folded, _)
            | (ReportFormat::Text, 0) => (usize::MAX, usize::MAX),
            (ReportFormat::Text, top) => (top, TOP_CALLERS),
        };
        let mut rows = |locks: Vec<&LockStats>| -> Vec<LockRow> {
            locks
                .into_iter()
                .take(shown)
                .map(|lock| lock_row(lock, analysis, symbols, stacks, listed))
                .collect()
        };
        let (locks, idle_waits) = (rows(locks), rows(idle));
        let threads: Vec<ThreadRow> = analysis
            .threads()
            .into_iter()
            .map(|t| ThreadRow {
                holds_at_end: analysis.held_by(t.lwpid).into_iter().map(hex).collect(),
                blocked_ns: t.blocked.values().sum(),
                blocked_by_kind: t.blocked.iter().map(|(k, v)| (k.name(), *v)).collect(),
                longest_wait: t.longest_wait.as_ref().map(|w| LongestWait {
                    ns: w.ns,
                    call: w.call,
                    object: hex(w.object),
                    at: Place::locate(symbols, t.pid, w.caller),
                }),
                pid: t.pid,
                cgroup: CgroupLabel::of(analysis, t.pid),
                thread: ThreadLabel::named(analysis, t.pid, t.lwpid, t.name),
                calls: t.calls,
            })
            .collect();
        // Those the tracer found while it ran, and those blocked at the end of the trace.
        let mut deadlocks: Vec<Deadlock> = analysis
            .recorded_deadlocks()
            .iter()
            .filter_map(|event| match &event.kind {
                SystemKind::Deadlock {
                    certain,
                    threads,
                    message,
                } => match serde_json::from_str(threads) {
                    Ok(threads) => Some(Deadlock {
                        certain: *certain,
                        threads,
                    }),
                    // Said, not dropped: a deadlock whose threads the log could not keep whole
                    // (a string is cut at its size limit) is told as the tracer told it.
                    Err(error) => {
                        let why = match event.truncated {
                            true => "its threads were cut short in the log".to_owned(),
                            false => format!("its threads do not read ({error})"),
                        };
                        say!(
                            "thrtrace-bpf: a deadlock found while tracing, at {}, is left out \
                             of the report: {why}; the tracer said: {message}",
                            super::timestamp(event.time_ns)
                        );
                        None
                    }
                },
                _ => None,
            })
            .collect();
        let end = analysis.last_ns;
        for found in analysis.new_deadlocks(end, 0) {
            if !deadlocks.iter().any(|d| d.key() == found.key()) {
                deadlocks.push(found);
            }
        }
        let deadlocks = deadlocks
            .into_iter()
            .map(|d| DeadlockRow {
                certain: d.certain,
                threads: d
                    .threads
                    .into_iter()
                    .map(|t| DeadlockThreadRow {
                        name: analysis.thread_name(t.lwpid).unwrap_or_default().to_owned(),
                        waits_at: Place::locate(symbols, t.pid, t.wait_caller),
                        locked_at: Place::locate(symbols, t.pid, t.locked_at),
                        pid: t.pid,
                        lwpid: t.lwpid,
                        call: t.call,
                        waits_for: hex(t.waits_for),
                        holds: t.holds.into_iter().map(hex).collect(),
                    })
                    .collect(),
            })
            .collect();
        let (potential_deadlocks, lock_order_incomplete) = match analysis.lock_order() {
            Some(order) => (order.inversions().to_vec(), order.full),
            None => (Vec::new(), false),
        };
        let potential_deadlocks = potential_deadlocks
            .iter()
            .map(|inversion| InversionRow {
                pid: inversion.pid,
                orders: inversion
                    .edges
                    .iter()
                    .map(|edge| order_row(edge, analysis, symbols))
                    .collect(),
            })
            .collect();
        let cgroups = CgroupRow::all(analysis, &threads, args);
        Report {
            callers_known,
            contended_only: analysis.contended_only,
            potential_deadlocks,
            lock_order_incomplete,
            first_ns: analysis.first_ns.unwrap_or(0),
            duration_ns: analysis
                .first_ns
                .map_or(0, |first| (analysis.last_ns - first).max(0) as u64),
            cgroups,
            locks,
            idle_waits,
            threads,
            deadlocks,
            call_stacks: stacks.share(),
            call_stacks_left_out: stacks.left_out(),
        }
    }

    fn text(&self, args: &ReportArgs) -> String {
        let mut out = String::new();
        // Nothing to place yet (`top`'s first frame, before any mapping came): nothing to say.
        if !self.callers_known && !self.locks.is_empty() {
            out += "callers: unknown (tr files and logs without mappings have no caller \
                    addresses; a trace log has them)\n";
        }
        if self.contended_only {
            out += "contended calls only (--contended): a lock is counted when it waited, an \
                    unlock when it woke a waiter; uncontended calls were not recorded, so hold \
                    times are not known\n";
        }
        // A profile short of some stacks is read as such: each stack says where and why it ends.
        if !self.call_stacks.is_complete() {
            let left_out = self.call_stacks_left_out.records;
            let mut said = vec![];
            if left_out > 0 {
                said.push(format!(
                    "{left_out} left out ({}; the tracer was behind)",
                    self.call_stacks_left_out.figures(self.call_stacks.records)
                ));
            }
            if self.call_stacks.records - self.call_stacks.whole > left_out {
                said.push("the others end early, each saying why".to_owned());
            }
            let _ = writeln!(out, "{}; {}", self.call_stacks, said.join(", "));
        }
        match args.by {
            ReportBy::Lock => self.lock_tables(&mut out, args),
            ReportBy::Thread => self.thread_table(&mut out),
            ReportBy::Cgroup => self.cgroup_table(&mut out),
        }
        for deadlock in &self.deadlocks {
            let _ = writeln!(
                out,
                "\n{} deadlock:",
                if deadlock.certain { "a" } else { "a possible" }
            );
            for t in &deadlock.threads {
                let locked_at = match t.locked_at.unknown {
                    Some(NOT_RECORDED) if self.contended_only => {
                        "taken without waiting, which --contended does not record".to_owned()
                    }
                    Some(NOT_RECORDED) => "taken before the trace began".to_owned(),
                    _ => format!("locked at {}", t.locked_at),
                };
                let _ = writeln!(
                    out,
                    "  thread {} ({}) waits in {}({}) at {}, holds {} ({locked_at})",
                    t.lwpid,
                    t.name,
                    t.call,
                    t.waits_for,
                    t.waits_at,
                    t.holds.join(", "),
                );
            }
        }
        self.inversions_text(&mut out);
        out
    }

    /// Each lock-order inversion: who took which lock where, then which.
    fn inversions_text(&self, out: &mut String) {
        let start = self.first_ns;
        for inversion in &self.potential_deadlocks {
            let _ = writeln!(
                out,
                "\na potential deadlock (lock order inversion) in process {}:",
                inversion.pid
            );
            for order in &inversion.orders {
                let _ = writeln!(
                    out,
                    "  thread {} ({}) held {} taken at {}, then acquired {} at {}, {} into the trace",
                    order.lwpid,
                    order.name,
                    order.held,
                    order.held.at,
                    order.acquired,
                    order.acquired.at,
                    duration((order.time_ns - start).max(0) as u64),
                );
            }
        }
        if self.lock_order_incomplete {
            out.push_str(
                "\nlock order: the trace has more lock pairs than the analysis keeps; later \
                 pairs were not checked\n",
            );
        }
    }

    /// Lock contention first, ranked as `--sort` says (by time waited unless told), then the
    /// idle waits: a thread pool's workers waiting for work wait long, and are no contention.
    fn lock_tables(&self, out: &mut String, args: &ReportArgs) {
        let kinds = |locks: bool| -> Vec<&str> {
            LockKind::ALL
                .into_iter()
                .filter(|k| k.is_lock() == locks && args.kinds.shows(*k))
                .map(LockKind::name)
                .collect()
        };
        let (lock_kinds, idle_kinds) = (kinds(true), kinds(false));
        if !lock_kinds.is_empty() {
            let _ = writeln!(
                out,
                "lock contention ({}), by {}:",
                lock_kinds.join(", "),
                args.sort.description()
            );
            self.lock_table(out, args);
        }
        if !idle_kinds.is_empty() && !self.idle_waits.is_empty() {
            if !lock_kinds.is_empty() {
                out.push('\n');
            }
            let _ = writeln!(
                out,
                "idle waits, for work or an event ({}), by time waited:",
                idle_kinds.join(", ")
            );
            self.idle_table(out, args);
        }
    }

    fn lock_table(&self, out: &mut String, args: &ReportArgs) {
        let cgroups_told = CgroupLabel::tell_apart(self.locks.iter().map(|lock| &lock.cgroup));
        let width = label_width(self.locks.iter().map(|lock| &lock.name));
        let _ = writeln!(
            out,
            "{:<width$} {:<6} {:>9} {:>9} {:>7} {:>10} {:>9} {:>9} {:>10} {:>9} {:>9}",
            "lock",
            "kind",
            "acquired",
            "contended",
            "owner chg",
            "wait total",
            "avg",
            "max",
            "hold total",
            "avg",
            "max"
        );
        for lock in &self.locks {
            // Not known from contended calls only (the uncontended takes and releases are
            // absent), nor for a kind whose holds are not recorded.
            let holds_known = lock.holds_recorded && !self.contended_only;
            let hold = |ns: u64| match holds_known {
                true => duration(ns),
                false => "-".to_owned(),
            };
            let owner_changes = match lock.holds_recorded {
                true => lock.owner_changes.to_string(),
                false => "-".to_owned(),
            };
            let _ = writeln!(
                out,
                "{:<width$} {:<6} {:>9} {:>9} {:>7} {:>10} {:>9} {:>9} {:>10} {:>9} {:>9}",
                label(&lock.name),
                lock.kind,
                lock.acquisitions,
                lock.contended,
                owner_changes,
                duration(lock.wait_total_ns),
                duration(lock.wait_avg_ns),
                duration(lock.wait_max_ns),
                hold(lock.hold_total_ns),
                hold(lock.hold_avg_ns),
                hold(lock.hold_max_ns),
            );
            if cgroups_told {
                let _ = writeln!(
                    out,
                    "    in process {} ({}), cgroup {}",
                    lock.pid, lock.process, lock.cgroup
                );
            }
            if let Some(at) = &lock.name.frame {
                let _ = writeln!(out, "    first waited on from {at}");
            }
            callers_text(out, &lock.callers);
            // A futex word has no holder the records name: its owners are the threads whose
            // wakes ended the waits, which "released by" lists with their stacks.
            let holders = match lock.holds_recorded {
                true => &lock.owners[..],
                false => &[][..],
            };
            for owner in holders {
                let taken = owner.taken_at.as_ref().map_or_else(
                    || "where it took the lock was not recorded".to_owned(),
                    |at| format!("it took the lock at {at}"),
                );
                let _ = writeln!(
                    out,
                    "    held by thread {}: waited for {}, {}; {taken}",
                    owner.thread,
                    crate::say::counted(owner.count, "time"),
                    duration(owner.wait_total_ns)
                );
            }
            if let Some(short) = &lock.short_waits {
                let _ = writeln!(
                    out,
                    "    {} shorter than {} (--min-wait), {}: counted, not written, so \
                     neither their stacks nor their holders are known",
                    crate::say::counted(short.count, "wait"),
                    duration(short.below_ns),
                    duration(short.total_ns)
                );
            }
            if let Some(left_out) = &lock.stacks_left_out {
                let _ = writeln!(
                    out,
                    "    {}, {}, came without their stacks (the tracer was behind): profiles \
                     weigh them onto the recorded stacks through their callers, or else put \
                     them under their callers",
                    crate::say::counted(left_out.count, "wait"),
                    duration(left_out.total_ns)
                );
            }
            for (what, rows) in [
                ("waited from", &lock.waiting_stacks),
                ("released by", &lock.releasing_stacks),
            ] {
                for row in rows {
                    let threads: Vec<String> = row
                        .threads
                        .iter()
                        .map(|t| format!("{} {}", t.thread, t.count))
                        .collect();
                    let _ = writeln!(
                        out,
                        "    {what} ({}, {}; threads {}):",
                        crate::say::counted(row.count, "wait"),
                        duration(row.wait_total_ns),
                        threads.join(", ")
                    );
                    for frame in &row.frames {
                        let _ = writeln!(out, "        {frame}");
                    }
                    if let Some(end) = &row.end {
                        let _ = writeln!(out, "        (stack ends here: {end})");
                    }
                }
            }
            if args.histogram {
                histogram(out, "wait", &lock.wait_histogram);
                if holds_known {
                    histogram(out, "hold", &lock.hold_histogram);
                }
            }
        }
    }

    /// Condvars, barriers and threads joined: how often and how long they were waited on,
    /// from where, and how often woken (signals and broadcasts).
    fn idle_table(&self, out: &mut String, args: &ReportArgs) {
        let width = label_width(self.idle_waits.iter().map(|wait| &wait.name));
        let _ = writeln!(
            out,
            "{:<width$} {:<11} {:>8} {:>10} {:>9} {:>9} {:>8}",
            "object", "kind", "waits", "wait total", "avg", "max", "wakeups"
        );
        for wait in &self.idle_waits {
            let _ = writeln!(
                out,
                "{:<width$} {:<11} {:>8} {:>10} {:>9} {:>9} {:>8}",
                label(&wait.name),
                wait.kind,
                wait.acquisitions,
                duration(wait.wait_total_ns),
                duration(wait.wait_avg_ns),
                duration(wait.wait_max_ns),
                wait.wakeups,
            );
            callers_text(out, &wait.callers);
            if args.histogram {
                histogram(out, "wait", &wait.wait_histogram);
            }
        }
    }

    fn thread_table(&self, out: &mut String) {
        let cgroups_told = CgroupLabel::tell_apart(self.threads.iter().map(|t| &t.cgroup));
        let _ = write!(out, "{:>8} {:>8} {:<16}", "pid", "lwpid", "name");
        for kind in BlockKind::ALL {
            let _ = write!(out, " {:>10}", kind.name());
        }
        let _ = writeln!(
            out,
            "  calls; longest wait; held at the end{}",
            if cgroups_told { "; cgroup" } else { "" }
        );
        for thread in &self.threads {
            let _ = write!(
                out,
                "{:>8} {:>8} {:<16}",
                thread.pid, thread.thread.lwpid, thread.thread.name
            );
            for kind in BlockKind::ALL {
                let ns = thread
                    .blocked_by_kind
                    .get(kind.name())
                    .copied()
                    .unwrap_or(0);
                let _ = write!(out, " {:>10}", duration(ns));
            }
            let calls: Vec<String> = thread
                .calls
                .iter()
                .map(|(category, n)| format!("{category} {n}"))
                .collect();
            let longest = thread.longest_wait.as_ref().map_or("-".to_owned(), |w| {
                format!("{} in {}({}) at {}", duration(w.ns), w.call, w.object, w.at)
            });
            let held = match thread.holds_at_end.is_empty() {
                true => "-".to_owned(),
                false => thread.holds_at_end.join(" "),
            };
            let _ = write!(out, "  {}; {longest}; {held}", calls.join(", "));
            if cgroups_told {
                let _ = write!(out, "; {}", thread.cgroup);
            }
            out.push('\n');
        }
    }

    /// The traced processes' totals by cgroup, most time waited on locks first.
    fn cgroup_table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "by cgroup, most time waited on locks first:\n{:>8} {:>10} {:>10} {:>10} {:>10}  \
             cgroup: processes",
            "threads", "acquired", "contended", "lock wait", "idle wait"
        );
        for row in &self.cgroups {
            let processes: Vec<String> = row
                .processes
                .iter()
                .map(|(pid, name)| match name.is_empty() {
                    true => pid.to_string(),
                    false => format!("{pid} ({name})"),
                })
                .collect();
            let _ = writeln!(
                out,
                "{:>8} {:>10} {:>10} {:>10} {:>10}  {}: {}",
                row.threads,
                row.acquisitions,
                row.contended,
                duration(row.lock_wait_total_ns),
                duration(row.idle_wait_total_ns),
                row.label,
                processes.join(", ")
            );
        }
    }
}

/// A thread's share of a stack's waits.
#[derive(Serialize)]
struct ThreadShare {
    #[serde(flatten)]
    thread: ThreadLabel,
    count: u64,
}

/// A thread as the report names it: its id (the host's), its name (comm), and its id in its
/// process's PID namespace where that is one of its own (a container's): the id its own
/// logs and tools show.
#[derive(Serialize)]
struct ThreadLabel {
    lwpid: u32,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace_lwpid: Option<u32>,
}

impl ThreadLabel {
    /// Thread `lwpid` of process `pid`, named as the log named it.
    fn of(analysis: &Analysis, pid: u32, lwpid: u32) -> Self {
        let name = analysis.thread_name(lwpid).unwrap_or_default();
        ThreadLabel::named(analysis, pid, lwpid, name.to_owned())
    }

    fn named(analysis: &Analysis, pid: u32, lwpid: u32, name: String) -> Self {
        ThreadLabel {
            lwpid,
            name,
            namespace_lwpid: analysis.namespace_id(pid, lwpid),
        }
    }
}

/// `20931`, `20931 (mariadbd)`, `20931 (mariadbd, 4 in its namespace)`; no name for a thread
/// whose name was never read (gone before its first record was drawn).
impl fmt::Display for ThreadLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut about: Vec<String> = Vec::new();
        if !self.name.is_empty() {
            about.push(self.name.clone());
        }
        if let Some(id) = self.namespace_lwpid {
            about.push(format!("{id} in its namespace"));
        }
        match about.is_empty() {
            true => write!(f, "{}", self.lwpid),
            false => write!(f, "{} ({})", self.lwpid, about.join(", ")),
        }
    }
}

/// The `TOP_STACKS` stacks of `by_stack` (of `lock`) with the most wait time, symbolized,
/// each with its `TOP_CALLERS` threads.
fn stack_rows(
    lock: &LockStats,
    by_stack: &HashMap<u32, StackStats, impl std::hash::BuildHasher>,
    analysis: &Analysis,
    stacks: &Stacks,
    symbols: &mut Symbols,
) -> Vec<StackRow> {
    let mut ranked: Vec<(&u32, &StackStats)> =
        by_stack.iter().filter(|(id, _)| **id != 0).collect();
    ranked.sort_by(|a, b| (b.1.wait_total_ns, a.0).cmp(&(a.1.wait_total_ns, b.0)));
    ranked
        .into_iter()
        .filter_map(|(&id, stats)| Some((stacks.shown(id)?, stats)))
        .take(TOP_STACKS)
        .map(|(stack, stats)| StackRow {
            count: stats.count,
            wait_total_ns: stats.wait_total_ns,
            threads: {
                let mut threads: Vec<ThreadShare> = stats
                    .threads
                    .iter()
                    .map(|(&lwpid, waits)| ThreadShare {
                        thread: ThreadLabel::of(analysis, lock.pid, lwpid),
                        count: waits.count,
                    })
                    .collect();
                threads.sort_by(|a, b| (b.count, a.thread.lwpid).cmp(&(a.count, b.thread.lwpid)));
                threads.truncate(TOP_CALLERS);
                threads
            },
            frames: stack_frames(stack, symbols),
            end: (!stack.is_whole()).then(|| stack.end.clone()),
        })
        .collect()
}

/// The frames of `stack`, symbolized, innermost first.
pub fn stack_frames(stack: &Stack, symbols: &mut Symbols) -> Vec<Location> {
    stack
        .frames
        .iter()
        .enumerate()
        .map(|(n, &address)| match n {
            // The probed instruction itself, not a return address (which `locate` takes the
            // call before).
            0 => Location {
                address,
                ..symbols.locate(stack.pid, address + 1)
            },
            _ => symbols.locate(stack.pid, address),
        })
        .collect()
}

/// What names `lock`: its symbol, else where its first contended wait was called from (or,
/// if that wait's stack has no caller frame, the wait with the lowest stack id that has one, or
/// the lowest caller of its waits shorter than `--min-wait` or whose stacks were left out).
pub fn lock_name(lock: &LockStats, symbols: &mut Symbols, stacks: &Stacks) -> LockName {
    let caller = |id: u32| {
        stacks
            .get(id)
            .and_then(|stack| stack.frames.get(1))
            .copied()
    };
    let first_waited_at = caller(lock.first_waiting_stack)
        .or_else(|| {
            let by_id = lock
                .waiting_stacks
                .keys()
                .filter_map(|&id| Some((id, caller(id)?)));
            by_id.min().map(|(_, caller)| caller)
        })
        // Its waits all shorter than `--min-wait`, or their stacks left out: their callers
        // alone are known.
        .or_else(|| {
            let callers = lock.short_waits_by_caller.keys();
            let callers = callers.chain(lock.left_out_waiting.keys());
            callers.filter(|&&caller| caller != 0).min().copied()
        })
        .map(|caller| symbols.locate(lock.pid, caller));
    symbols.name_lock(lock.pid, lock.address, first_waited_at)
}

/// A lock's row, with its first `listed` callers and holders.
fn lock_row(
    lock: &LockStats,
    analysis: &Analysis,
    symbols: &mut Symbols,
    stacks: &Stacks,
    listed: usize,
) -> LockRow {
    // Call sites of one source line (an unrolled loop) are one caller.
    let mut callers: Vec<CallerRow> = Vec::new();
    for (&address, stats) in &lock.callers {
        let at = Place::locate(symbols, lock.pid, address);
        let same = |row: &CallerRow| match (at.source_line(), row.at.source_line()) {
            (Some(line), Some(row_line)) => line == row_line,
            (None, None) => {
                (place_address(&row.at), row.at.unknown) == (place_address(&at), at.unknown)
            }
            _ => false,
        };
        if let Some(row) = callers.iter_mut().find(|row| same(row)) {
            row.count += stats.count;
            row.wait_total_ns += stats.wait_total_ns;
            continue;
        }
        callers.push(CallerRow {
            at,
            count: stats.count,
            wait_total_ns: stats.wait_total_ns,
        });
    }
    callers.sort_by(|a, b| {
        (b.wait_total_ns, b.count, place_address(&a.at)).cmp(&(
            a.wait_total_ns,
            a.count,
            place_address(&b.at),
        ))
    });
    callers.truncate(listed);
    let mut owners: Vec<OwnerRow> = lock
        .owners
        .iter()
        .map(|(&lwpid, owner)| OwnerRow {
            thread: ThreadLabel::of(analysis, lock.pid, lwpid),
            count: owner.count,
            wait_total_ns: owner.wait_total_ns,
            taken_at: (owner.taken_at != 0)
                .then(|| Place::locate(symbols, lock.pid, owner.taken_at)),
        })
        .collect();
    owners
        .sort_by(|a, b| (b.wait_total_ns, a.thread.lwpid).cmp(&(a.wait_total_ns, b.thread.lwpid)));
    owners.truncate(listed);
    let Durations {
        total_ns: wait_total_ns,
        max_ns: wait_max_ns,
        ..
    } = lock.wait;
    LockRow {
        pid: lock.pid,
        process: analysis
            .process_name(lock.pid)
            .unwrap_or_default()
            .to_owned(),
        cgroup: CgroupLabel::of(analysis, lock.pid),
        name: lock_name(lock, symbols, stacks),
        kind: lock.kind.name(),
        short_waits: (lock.short_waits.count > 0).then_some(lock.short_waits),
        stacks_left_out: LeftOutWaits::of(lock),
        holds_recorded: lock.kind.holds_recorded(),
        acquisitions: lock.acquisitions,
        contended: lock.contended,
        owner_changes: lock.owner_changes,
        wakeups: lock.wakeups,
        wait_total_ns,
        wait_avg_ns: lock.wait.average_ns(),
        wait_max_ns,
        hold_total_ns: lock.hold.total_ns,
        hold_avg_ns: lock.hold.average_ns(),
        hold_max_ns: lock.hold.max_ns,
        wait_histogram: lock.wait.log2.clone(),
        hold_histogram: lock.hold.log2.clone(),
        callers,
        owners,
        waiting_stacks: stack_rows(lock, &lock.waiting_stacks, analysis, stacks, symbols),
        releasing_stacks: stack_rows(lock, &lock.releasing_stacks, analysis, stacks, symbols),
    }
}

/// A lock's contended waits whose stacks were left out.
#[derive(Serialize)]
struct LeftOutWaits {
    count: u64,
    total_ns: u64,
}

impl LeftOutWaits {
    /// Those of `lock`, if any.
    fn of(lock: &LockStats) -> Option<LeftOutWaits> {
        let waits = lock.left_out_waiting.values();
        let (count, total_ns) = waits.fold((0, 0), |(count, ns), stats| {
            (count + stats.count, ns + stats.wait_total_ns)
        });
        (count > 0).then_some(LeftOutWaits { count, total_ns })
    }
}

/// A row's callers, one line each: where, how many calls, how long they waited.
fn callers_text(out: &mut String, callers: &[CallerRow]) {
    for caller in callers {
        // A line's call sites are one caller: the line says where, the function whose.
        let at = &caller.at;
        let place = match (at.source_line(), &at.location) {
            (Some(line), Some(location)) if location.function.is_some() => format!(
                "{line} ({}){}",
                location.function.as_deref().unwrap_or_default(),
                location.inlined_text()
            ),
            _ => at.to_string(),
        };
        let _ = writeln!(
            out,
            "    {place}: {}, waited {}",
            counted(caller.count, "call"),
            duration(caller.wait_total_ns)
        );
    }
}

/// A place's address, if it has one (an order for places with no line).
fn place_address(place: &Place) -> Option<u64> {
    place.location.as_ref().map(|location| location.address)
}

/// A log2 histogram, one line per non-empty bucket.
fn histogram(out: &mut String, what: &str, buckets: &[u64]) {
    let most = buckets.iter().copied().max().unwrap_or(0).max(1);
    let _ = writeln!(out, "    {what} times:");
    for (bucket, &count) in buckets.iter().enumerate().filter(|(_, c)| **c > 0) {
        let bar = "#".repeat(((count * 40).div_ceil(most)) as usize);
        let _ = writeln!(
            out,
            "      {:>9} .. {:<9} {count:>8} {bar}",
            duration(1 << bucket),
            duration(1 << (bucket + 1))
        );
    }
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  thrtrace-bpf report app.ptl\n  \
                        thrtrace-bpf report --by thread app.ptl\n  \
                        thrtrace-bpf report --sort hold --top 5 --histogram app.ptl\n  \
                        thrtrace-bpf report --format json trace/\n  \
                        thrtrace-bpf report --format pprof -o app.pb.gz app.ptl\n  \
                        thrtrace-bpf report --format folded app.ptl | flamegraph.pl > app.svg\n  \
                        thrtrace-bpf report --flamegraph app.svg --view releasers app.ptl")]
pub struct ReportArgs {
    /// Tables for people, JSON, a pprof contention profile (with -o FILE), or folded stacks
    /// (flamegraph.pl's and speedscope's input, weighted by nanoseconds waited; printed, or
    /// written with -o FILE); the last two from a log of a trace taken with stacks
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// The file --format pprof (gzipped profile.proto, for `go tool pprof`) or --format folded
    /// writes
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write a flame graph (SVG) of the contended waits' call stacks, weighted by time waited,
    /// each stack topped by the lock it waited on, to FILE (from a log of a trace taken with
    /// stacks)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["format", "output"])]
    pub flamegraph: Option<PathBuf>,
    /// Which stacks the pprof profile, the folded stacks and the flame graph hold
    #[arg(long, value_enum, default_value_t = View::Waiters)]
    pub view: View,
    /// One row per lock (semaphores and condvars too), per thread, or per cgroup (its
    /// processes' totals)
    #[arg(long, value_enum, default_value_t = ReportBy::Lock)]
    pub by: ReportBy,
    /// What orders the locks
    #[arg(long, value_enum, default_value_t = ReportSort::Wait)]
    pub sort: ReportSort,
    /// How many locks the text lists, 0 for all (JSON has every lock, with all its callers and
    /// holders)
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    #[command(flatten)]
    pub kinds: KindArg,
    /// Log2 histograms of wait and hold times for the locks shown
    #[arg(long)]
    pub histogram: bool,
    /// Where separate debug files are (as `.build-id/xx/rest.debug`), looked in before
    /// /usr/lib/debug and /lib/debug; repeatable
    #[arg(long, value_name = "DIR")]
    pub debug_dir: Vec<PathBuf>,
    /// A trace log (--log), or a directory of tr.* files
    #[arg(value_name = "LOG|DIR")]
    pub input: PathBuf,
}

/// What `report` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Text,
    Json,
    Pprof,
    Folded,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportBy {
    Lock,
    Thread,
    Cgroup,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportSort {
    Wait,
    Hold,
    Contended,
    Acquisitions,
}

impl ReportSort {
    /// What it orders the locks by, in words.
    pub fn description(self) -> &'static str {
        match self {
            ReportSort::Wait => "time waited",
            ReportSort::Hold => "time held",
            ReportSort::Contended => "acquisitions that waited",
            ReportSort::Acquisitions => "acquisitions",
        }
    }
}

/// `--kind`, of `report` and `top`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct KindArg {
    /// Only these kinds, separated by commas: mutex, rmutex, rwlock, spin, sema, futex (locks),
    /// cond, barrier, join (idle waits) [default: all]
    #[arg(long, value_name = "KINDS", value_parser = KindFilter::parse)]
    pub kind: Option<KindFilter>,
}

impl KindArg {
    /// Whether rows of this kind are shown.
    pub fn shows(&self, kind: LockKind) -> bool {
        self.kind
            .as_ref()
            .is_none_or(|kinds| kinds.0.contains(&kind))
    }
}

/// The kinds of lock or wait a report shows (`--kind mutex,rwlock`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindFilter(pub Vec<LockKind>);

impl KindFilter {
    /// Kind names separated by commas (or colons, as `--events` separates its categories).
    /// Not `--events`' names: a kind is a kind of lock or wait ([`LockKind`]), which the
    /// event categories do not match one for one (`join` is none, `thread` no kind).
    pub fn parse(text: &str) -> Result<KindFilter, String> {
        let names = || {
            let all: Vec<&str> = LockKind::ALL.into_iter().map(LockKind::name).collect();
            all.join(", ")
        };
        let kinds = list_names(text)
            .map(|name| {
                LockKind::ALL
                    .into_iter()
                    .find(|kind| kind.name() == name)
                    .ok_or_else(|| format!("unknown kind '{name}': give some of {}", names()))
            })
            .collect::<Result<Vec<LockKind>, String>>()?;
        if kinds.is_empty() {
            return Err(format!("no kind given: give some of {}", names()));
        }
        Ok(KindFilter(kinds))
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::{EventDef, Field};

    use tracer_common::Which;

    use super::*;
    use crate::readers::{
        pprof::{Names, Span},
        pyroscope::otlp::{self, ProcessProfile},
        samples::{LockSamples, left_out_note},
    };
    use tracer_model::analysis::ThreadWaits;

    const MS: i64 = 1_000_000;
    const WAITED_ON: i64 = 0x7000;
    const ONLY_WOKEN: i64 = 0x8000;

    /// Futex event `name` of thread `lwpid`, ended at `ms`, with stack 10 + `lwpid`: each value
    /// at its field's position in the event's fields.
    fn futex(lwpid: u32, name: &str, ms: i64, fields: [(Field, i64); 3]) -> TraceRecord {
        let event = EventDef::by_name(name).unwrap();
        let mut a = [0; 5];
        for (of, value) in fields {
            a[event
                .fields(Which::Whole)
                .iter()
                .position(|f| *f == of)
                .unwrap()] = value;
        }
        TraceRecord {
            sec: ms / 1000,
            nsec: ms % 1000 * MS,
            lwpid,
            pid: 100,
            tid: u64::from(lwpid) << 8,
            event1: event.category.code(),
            event2: event.event2,
            which: Which::Whole,
            a,
            caller: 0,
            stack: 10 + lwpid,
        }
    }

    /// A word waited on twice (once woken by thread 9 after 40 ms, once not at all: its value
    /// had changed), a lock: thread 1, once woken, wakes the next in turn (whose wait is not
    /// in the trace). And one only woken, as a condvar's word is under --contended.
    fn futex_trace() -> Analysis {
        let mut analysis = Analysis::new(true);
        let wait = |lwpid, ms, waited_ns, result| {
            let fields = [
                (Field::Arg(1), WAITED_ON),
                (Field::ElapsedNs, waited_ns),
                (Field::Rval, result),
            ];
            futex(lwpid, "futex_wait", ms, fields)
        };
        let wake = |lwpid, word, ms| {
            let fields = [
                (Field::Arg(1), word),
                (Field::ElapsedNs, MS),
                (Field::Rval, 1),
            ];
            futex(lwpid, "futex_wake", ms, fields)
        };
        for record in [
            wait(1, 100, 40 * MS, 0),
            wake(9, WAITED_ON, 101),
            wait(2, 110, 1000, -11),
            wake(9, ONLY_WOKEN, 120),
            wake(1, WAITED_ON, 130),
        ] {
            analysis.record(&record);
        }
        analysis
    }

    fn table(kinds: &str) -> String {
        let kinds = KindArg {
            kind: (!kinds.is_empty()).then(|| KindFilter::parse(kinds).unwrap()),
        };
        let mut analysis = futex_trace();
        lock_table_so_far(
            &mut analysis,
            &mut Symbols::new(),
            0,
            ReportSort::Wait,
            kinds,
        )
    }

    #[test]
    fn futex_is_a_lock_kind_that_kind_names() {
        assert_eq!(
            KindFilter::parse("futex:mutex"),
            Ok(KindFilter(vec![LockKind::Futex, LockKind::Mutex]))
        );
        let error = KindFilter::parse("futx").unwrap_err();
        assert!(error.contains("sema, futex, futex event, cond"), "{error}");
    }

    #[test]
    fn a_futex_word_waited_on_is_a_lock_with_no_holds_known_and_one_only_woken_is_none() {
        let text = table("");
        let lines: Vec<&str> = text.lines().collect();
        let header = "lock contention (mutex, rmutex, rwlock, spin, sema, futex), by time waited:";
        let at = lines.iter().position(|l| *l == header).expect(&text);
        // Its owner changes and hold times are not known.
        let row = format!(
            "{:<16} {:<6} {:>9} {:>9} {:>7} {:>10} {:>9} {:>9} {:>10} {:>9} {:>9}",
            "0x7000", "futex", 2, 1, "-", "40.0 ms", "20.0 ms", "40.0 ms", "-", "-", "-"
        );
        assert_eq!(lines[at + 2], row, "{text}");
        // Its waker is no holder: "released by" names it, with its stack.
        assert!(!text.contains("held by thread 9"), "{text}");
        assert!(!text.contains("0x8000"), "{text}");
        assert!(table("futex").contains("\nlock contention (futex), by time waited:\n"));
        assert!(!table("sema").contains("0x7000"));
    }

    /// Waits shorter than `--min-wait` are samples of the waiters view, one per caller, with
    /// the caller's frame (none if unknown) under one that says the stack was not recorded.
    #[test]
    fn short_waits_are_samples_of_their_callers_under_a_frame_saying_so() {
        let mut analysis = Analysis::new(true);
        for (caller, waits, wait_total_ns) in [(0x4000, 3, 30_000), (0, 1, 7_000)] {
            let kind = SystemKind::ShortWaits {
                call: "mutex_lock".into(),
                object: 0x7000,
                caller,
                waits,
                wait_total_ns,
                min_wait_ns: 1_000_000,
            };
            analysis.system_event(&SystemEvent::of_process(5, 100, 2, kind));
        }
        let stacks = Stacks::default();
        let mut symbols = Symbols::new();
        let all = KindArg { kind: None };
        let samples = |view, symbols: &mut Symbols| {
            contention_samples(analysis.locks(), symbols, &stacks, &all, view)
        };
        assert!(samples(View::Releasers, &mut symbols).is_empty());
        let waiters = samples(View::Waiters, &mut symbols);
        let unrecorded = "[stack not recorded: waits under 1ms, --min-wait]";
        let seen: Vec<_> = waiters[0]
            .stacks
            .iter()
            .map(|sample| {
                let frames: Vec<u64> = sample.frames.iter().map(|f| f.address).collect();
                let threads = sample.threads.clone();
                (
                    frames,
                    sample.unrecorded.as_deref(),
                    sample.delay_ns,
                    threads,
                )
            })
            .collect();
        let by = |count, wait_total_ns| {
            vec![(
                2,
                ThreadWaits {
                    count,
                    wait_total_ns,
                },
            )]
        };
        assert_eq!(
            seen,
            [
                (vec![], Some(unrecorded), 7_000, by(1, 7_000)),
                (vec![0x4000], Some(unrecorded), 30_000, by(3, 30_000)),
            ]
        );
        assert_eq!(
            flame::folded(&waiters),
            format!(
                "{unrecorded};lock 0x7000 (mutex) 7000\n\
                 [unknown];{unrecorded};lock 0x7000 (mutex) 30000\n"
            )
        );
    }

    /// Waits whose stacks were left out weigh on the recorded stacks through their caller, in
    /// proportion to the waits and time each holds, each thread's as its own; a caller no
    /// recorded stack passes through is a sample of its own, under a frame that says so. The
    /// profile's totals are every wait's, and its summary says how many were left out.
    #[test]
    fn waits_whose_stacks_were_left_out_weigh_on_the_recorded_stacks_through_their_caller() {
        let mut analysis = Analysis::new(true);
        let mut stacks = Stacks::default();
        let recorded = [
            (1, vec![0x1000, 0x2000, 0x5000]),
            (2, vec![0x1000, 0x2000, 0x6000]),
            (4, vec![0x1000, 0x3000, 0x7000]),
        ];
        for (id, frames) in recorded.into_iter().chain([(3, vec![])]) {
            let end = match frames.is_empty() {
                true => "left out".to_owned(),
                false => String::new(),
            };
            let kind = SystemKind::Stack { id, frames, end };
            let event = SystemEvent::of_process(0, 100, 0, kind);
            stacks.take(&event);
            analysis.system_event(&event);
        }
        let wait = |lwpid, ms, waited_ms, stack, caller| {
            let fields = [
                (Field::Arg(1), WAITED_ON),
                (Field::ElapsedNs, waited_ms * MS),
                (Field::Rval, 0),
            ];
            TraceRecord {
                stack,
                caller,
                ..futex(lwpid, "futex_wait", ms, fields)
            }
        };
        for record in [
            wait(1, 100, 10, 1, 0x2000),
            wait(1, 200, 30, 2, 0x2000),
            wait(3, 250, 5, 4, 0x3000),
            wait(2, 300, 8, 3, 0x2000),
            wait(2, 400, 3, 3, 0x9000),
        ] {
            analysis.record(&record);
        }
        let all = KindArg { kind: None };
        let mut symbols = Symbols::new();
        let waiters =
            contention_samples(analysis.locks(), &mut symbols, &stacks, &all, View::Waiters);
        let seen: Vec<_> = waiters[0]
            .stacks
            .iter()
            .map(|sample| {
                let frames: Vec<u64> = sample.frames.iter().map(|f| f.address).collect();
                let threads: Vec<(u32, u64, u64)> = sample
                    .threads
                    .iter()
                    .map(|(lwpid, waits)| (*lwpid, waits.count, waits.wait_total_ns / MS as u64))
                    .collect();
                (frames, sample.unrecorded.as_deref(), threads)
            })
            .collect();
        // Thread 2's 8 ms from 0x2000 go 10:30 to the two stacks through it (not to the one
        // through 0x3000), its one wait to the second (the counts are even: a unit goes to the
        // part whose share it ends).
        let left_out_frame = "[stack left out: the tracer was behind, see --buffer-kib]";
        assert_eq!(
            seen,
            [
                (
                    vec![0x1000, 0x2000, 0x5000],
                    None,
                    vec![(1, 1, 10), (2, 0, 2)]
                ),
                (
                    vec![0x1000, 0x2000, 0x6000],
                    None,
                    vec![(1, 1, 30), (2, 1, 6)]
                ),
                (vec![0x1000, 0x3000, 0x7000], None, vec![(3, 1, 5)]),
                (vec![0x9000], Some(left_out_frame), vec![(2, 1, 3)]),
            ]
        );
        let delays: Vec<u64> = waiters[0].stacks.iter().map(|s| s.delay_ns).collect();
        assert_eq!(delays, [12, 36, 5, 3].map(|ms| ms * MS as u64));
        assert_eq!(
            summary(&waiters, View::Waiters, &all, None, &analysis.left_out()),
            "4 samples (waiters view) on 1 lock; the stacks of 2 of 5 waits were left out (the \
             tracer was behind, in seconds of up to 5 records): weighed onto the recorded \
             stacks through their callers, or else under their callers"
        );
        // An OTLP push says it as a profile attribute.
        let note = left_out_note(&waiters, View::Waiters, &analysis.left_out()).unwrap();
        let span = Span {
            start_ns: 0,
            duration_ns: 1_000 * MS,
        };
        let process = ProcessProfile {
            pid: 100,
            service: "app",
            samples: waiters,
        };
        let request = otlp::encode(
            &[process],
            &Names::default(),
            &symbols,
            span,
            &analysis.left_out(),
            "host",
        );
        for said in [otlp::LEFT_OUT_ATTRIBUTE, &note] {
            let bytes = said.as_bytes();
            assert!(request.windows(bytes.len()).any(|w| w == bytes), "{said}");
        }
    }

    #[test]
    fn a_futex_words_waits_and_the_wakes_that_ended_them_are_samples_of_its_kind() {
        let analysis = futex_trace();
        let mut stacks = Stacks::default();
        for (id, frames) in [(11, vec![0x1000, 0x2000]), (19, vec![0x3000])] {
            let end = String::new();
            let kind = SystemKind::Stack { id, frames, end };
            stacks.take(&SystemEvent::of_process(0, 100, 0, kind));
        }
        let kinds = |kinds: &str| KindArg {
            kind: Some(KindFilter::parse(kinds).unwrap()),
        };
        let mut symbols = Symbols::new();
        let waiters = contention_samples(
            analysis.locks(),
            &mut symbols,
            &stacks,
            &kinds("futex"),
            View::Waiters,
        );
        let releasers = contention_samples(
            analysis.locks(),
            &mut symbols,
            &stacks,
            &kinds("futex"),
            View::Releasers,
        );
        let seen = |samples: &[LockSamples<'_>]| -> Vec<_> {
            samples
                .iter()
                .flat_map(|lock| {
                    lock.stacks.iter().map(|sample| {
                        let threads: Vec<(u32, u64, u64)> = sample
                            .threads
                            .iter()
                            .map(|(lwpid, waits)| (*lwpid, waits.count, waits.wait_total_ns))
                            .collect();
                        let frames: Vec<u64> = sample.frames.iter().map(|f| f.address).collect();
                        (
                            lock.name.clone(),
                            lock.lock.kind,
                            frames,
                            sample.delay_ns,
                            threads,
                        )
                    })
                })
                .collect()
        };
        let waited = 40 * MS as u64;
        assert_eq!(
            seen(&waiters),
            [(
                "0x7000".to_owned(),
                LockKind::Futex,
                vec![0x1000, 0x2000],
                waited,
                vec![(1, 1, waited)]
            )]
        );
        assert_eq!(
            seen(&releasers),
            [(
                "0x7000".to_owned(),
                LockKind::Futex,
                vec![0x3000],
                waited,
                vec![(9, 1, waited)]
            )]
        );
        assert_eq!(
            flame::folded(&waiters),
            "[unknown];[unknown];lock 0x7000 (futex) 40000000\n"
        );
        let mutexes = contention_samples(
            analysis.locks(),
            &mut symbols,
            &stacks,
            &kinds("mutex"),
            View::Waiters,
        );
        assert!(mutexes.is_empty());
    }

    #[test]
    fn json_has_the_futex_word_waited_on_and_not_the_one_only_woken() {
        let args = ReportArgs {
            format: ReportFormat::Json,
            output: None,
            flamegraph: None,
            view: View::default(),
            by: ReportBy::Lock,
            sort: ReportSort::Wait,
            top: 10,
            kinds: KindArg::default(),
            histogram: false,
            debug_dir: Vec::new(),
            input: PathBuf::new(),
        };
        let mut analysis = futex_trace();
        let report = Report::build(
            &mut analysis,
            &mut Symbols::new(),
            &Stacks::default(),
            &args,
        );
        let json = serde_json::to_value(&report).unwrap();
        let locks = json["locks"].as_array().unwrap();
        assert_eq!(locks.len(), 1, "{json}");
        let lock = &locks[0];
        assert_eq!(
            (
                lock["address"].as_str(),
                lock["kind"].as_str(),
                lock["acquisitions"].as_u64(),
                lock["contended"].as_u64(),
                lock["wakeups"].as_u64(),
                lock["wait_total_ns"].as_u64(),
            ),
            (
                Some("0x7000"),
                Some("futex"),
                Some(2),
                Some(1),
                Some(2),
                Some(40 * MS as u64 + 1000)
            )
        );
        assert_eq!(lock["owners"][0]["lwpid"], 9);
        assert_eq!(json["idle_waits"].as_array().map(Vec::len), Some(0));
        let waiter = &json["threads"][0];
        assert_eq!(
            (
                waiter["lwpid"].as_u64(),
                waiter["blocked_by_kind"]["lock wait"].as_u64()
            ),
            (Some(1), Some(40 * MS as u64))
        );
        assert_eq!(waiter["longest_wait"]["call"], "futex_wait");
    }
}
