//! `convert LOG --to perfetto FILE`: a timeline the Perfetto UI (ui.perfetto.dev) and
//! chrome://tracing open, in the Trace Event JSON format: a track per thread named by its comm,
//! slices for blocking waits (lock waits where the caller blocked, cond waits, joins, semaphore
//! and barrier waits) and holds, a flow from each unlock to the waiter it woke, and a counter of
//! the threads blocked on locks per process. The slices and wakes are
//! `tracer_model::analysis`'s timeline; a wait's slice and an unlock's carry their call stack,
//! symbolized, in their `args` (a trace taken with stacks).

use std::{collections::BTreeMap, io, path::Path};

use serde_json::{Value, json};
use tracer_model::{
    TraceRecord,
    analysis::{Analysis, BlockKind, Timeline},
    event::{SystemEvent, SystemKind},
    stack::Stacks,
};

use super::{OutputFile, ReadError};
use crate::{
    sinks::{
        Sink, Summary, TraceEnd, Written,
        output_dir::{FileKind, head, holds},
    },
    symbolize::{Mapping, Symbols},
};

/// A timeline's kind: Trace Event JSON, as this writes it.
pub static TIMELINE: FileKind = FileKind {
    name: "Perfetto timeline (Trace Event JSON)",
    is_one: |file| {
        let head = head(file, 4096)?;
        Ok(head.starts_with(b"{") && holds(&head, b"\"traceEvents\":"))
    },
};

/// The timeline of a trace, made as its events come and written to its file at the end.
pub struct PerfettoTimeline {
    /// Taken when the timeline is written.
    file: Option<OutputFile>,
    analysis: Analysis,
    /// Each process's executable name.
    processes: BTreeMap<u32, String>,
    /// Each thread seen, with its name (empty until a name is seen).
    threads: BTreeMap<(u32, u32), String>,
    stacks: Stacks,
    symbols: Symbols,
}

impl PerfettoTimeline {
    /// A timeline to be written to `path` (its directory opened now, so that a mistyped path
    /// is said before any event is read).
    pub fn new(path: &Path) -> Result<Self, ReadError> {
        let mut analysis = Analysis::new(true);
        analysis.timeline = Some(Timeline::default());
        Ok(PerfettoTimeline {
            file: Some(OutputFile::prepare(path, &TIMELINE)?),
            analysis,
            processes: BTreeMap::new(),
            threads: BTreeMap::new(),
            stacks: Stacks::default(),
            symbols: Symbols::fetching(&[]),
        })
    }

    /// The Trace Event JSON's events, and the timeline's counts for the summary.
    fn trace_events(&mut self) -> (Vec<Value>, usize, usize) {
        let timeline = self.analysis.timeline.take().unwrap_or_default();
        let base = self.analysis.first_ns.unwrap_or(0);
        // Microseconds from the trace's first event, as the format counts.
        let us = |ns: i64| (ns - base) as f64 / 1e3;

        let mut events: Vec<Value> = Vec::new();
        for (pid, name) in &self.processes {
            events.push(
                json!({"ph": "M", "name": "process_name", "pid": pid, "tid": pid,
                               "args": {"name": name}}),
            );
            // Where it ran, as the viewers label a process: its cgroup and container.
            if let Some(cgroup) = self.analysis.cgroup(*pid) {
                let mut labels = vec![format!("cgroup {}", cgroup.path)];
                if !cgroup.container.is_empty() {
                    labels.push(format!("container {}", cgroup.container));
                }
                events.push(
                    json!({"ph": "M", "name": "process_labels", "pid": pid, "tid": pid,
                                   "args": {"labels": labels.join(", ")}}),
                );
            }
        }
        for ((pid, lwpid), name) in &self.threads {
            let name = if name.is_empty() {
                lwpid.to_string()
            } else {
                name.clone()
            };
            events.push(
                json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": lwpid,
                               "args": {"name": name}}),
            );
        }
        // Threads blocked on locks, per process: +1 at each blocking wait's start, -1 at its end.
        let mut changes: Vec<(u32, i64, i64)> = Vec::new();
        let (stacks, symbols) = (&self.stacks, &mut self.symbols);
        let mut stack_args = |id: u32| match stacks.get(id) {
            Some(stack) => json!({"stack": super::report::stack_frames(stack, symbols)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()}),
            None => json!({}),
        };
        for slice in &timeline.slices {
            events.push(
                json!({"ph": "X", "name": slice.name, "cat": slice.category(),
                               "pid": slice.pid, "tid": slice.lwpid, "ts": us(slice.start_ns),
                               "dur": (slice.end_ns - slice.start_ns) as f64 / 1e3,
                               "args": stack_args(slice.stack)}),
            );
            if slice.waited == Some(BlockKind::LockWait) {
                changes.push((slice.pid, slice.start_ns, 1));
                changes.push((slice.pid, slice.end_ns, -1));
            }
        }
        changes.sort_unstable();
        let mut waiting: BTreeMap<u32, i64> = BTreeMap::new();
        for (pid, ns, change) in changes {
            let count = waiting.entry(pid).or_default();
            *count += change;
            events.push(
                json!({"ph": "C", "name": "contended waiters", "pid": pid, "ts": us(ns),
                               "args": {"waiters": count}}),
            );
        }
        for (id, wake) in timeline.wakes.iter().enumerate() {
            // The unlock, a slice for the flow to start in; the flow ends in the waiter's wait.
            events.push(
                json!({"ph": "X", "name": "unlock", "cat": "wake", "pid": wake.pid,
                               "tid": wake.from_lwpid, "ts": us(wake.from_ns), "dur": 0.001,
                               "args": stack_args(wake.stack)}),
            );
            events.push(json!({"ph": "s", "name": "wake", "cat": "wake", "id": id,
                               "pid": wake.pid, "tid": wake.from_lwpid, "ts": us(wake.from_ns)}));
            events.push(
                json!({"ph": "f", "bp": "e", "name": "wake", "cat": "wake", "id": id,
                               "pid": wake.pid, "tid": wake.to_lwpid, "ts": us(wake.to_ns - 1)}),
            );
        }

        (events, timeline.slices.len(), timeline.wakes.len())
    }
}

impl Sink for PerfettoTimeline {
    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        self.threads.entry((record.pid, record.lwpid)).or_default();
        self.analysis.record(record);
        Ok(())
    }

    fn system_event(&mut self, event: &SystemEvent) -> io::Result<()> {
        match &event.kind {
            SystemKind::ProcessAttach { exe, .. } => {
                let name = Path::new(exe)
                    .file_name()
                    .map_or(exe.clone(), |n| n.to_string_lossy().into_owned());
                self.processes.insert(event.pid, name);
            }
            SystemKind::ThreadName { name } => {
                self.threads.insert((event.pid, event.lwpid), name.clone());
            }
            kind => {
                if let Some(mapping) = Mapping::of(kind) {
                    self.symbols.add_mapping(event.pid, mapping);
                }
                self.stacks.take(event);
            }
        }
        self.analysis.system_event(event);
        Ok(())
    }

    fn wants_system_events(&self) -> bool {
        true
    }

    fn finish(&mut self, _end: &TraceEnd) -> io::Result<Summary> {
        let Some(file) = self.file.take() else {
            return Ok(Summary::default());
        };
        let (events, slices, wakes) = self.trace_events();
        let mut json =
            serde_json::to_vec(&json!({"displayTimeUnit": "ns", "traceEvents": events}))?;
        json.push(b'\n');
        let path = file.write(&json).map_err(io::Error::other)?;
        Ok(Written::Timeline {
            slices,
            wakes,
            threads: self.threads.len(),
            path,
        }
        .into())
    }
}
