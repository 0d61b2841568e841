//! `convert LOG --to perfetto FILE`: a timeline the Perfetto UI (ui.perfetto.dev) and
//! chrome://tracing open, in the Trace Event JSON format: a track per thread named by its comm,
//! slices for blocking waits (lock waits where the caller blocked, cond waits, joins, semaphore
//! and barrier waits) and holds, a flow from each unlock to the waiter it woke, and a counter of
//! the threads blocked on locks per process. The slices and wakes are
//! `tracer_model::analysis`'s timeline; a wait's slice and an unlock's carry their call stack,
//! symbolized, in their `args` (a trace taken with stacks).

use std::{
    collections::BTreeMap,
    io::{BufWriter, Write},
    path::Path,
};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use tracer_model::{
    analysis::{Analysis, Timeline},
    event::{Event, SystemKind},
    log::LogReader,
    stack::Stacks,
};

use crate::symbolize::{Mapping, Symbols};

/// Writes the timeline of `reader` to `path`; returns the summary.
pub fn write(reader: &LogReader, path: &Path) -> Result<String> {
    let mut analysis = Analysis::new(true);
    analysis.timeline = Some(Timeline::default());
    let mut processes = BTreeMap::new();
    let mut threads = BTreeMap::new();
    let mut stacks = Stacks::default();
    let mut symbols = Symbols::new();
    for event in reader.events() {
        match event? {
            Event::Thread(record) => {
                threads
                    .entry((record.pid, record.lwpid))
                    .or_insert_with(String::new);
                analysis.record(&record);
            }
            Event::System(event) => {
                match &event.kind {
                    SystemKind::ProcessAttach { exe, .. } => {
                        let name = Path::new(exe)
                            .file_name()
                            .map_or(exe.clone(), |n| n.to_string_lossy().into_owned());
                        processes.insert(event.pid, name);
                    }
                    SystemKind::ThreadName { name } => {
                        threads.insert((event.pid, event.lwpid), name.clone());
                    }
                    kind => {
                        if let Some(mapping) = Mapping::of(kind) {
                            symbols.add_mapping(event.pid, mapping);
                        }
                        stacks.take(&event);
                    }
                }
                analysis.system_event(&event);
            }
        }
    }
    let timeline = analysis.timeline.take().unwrap_or_default();
    let base = analysis.first_ns.unwrap_or(0);
    // Microseconds from the trace's first event, as the format counts.
    let us = |ns: i64| (ns - base) as f64 / 1e3;

    let mut events: Vec<Value> = Vec::new();
    for (pid, name) in &processes {
        events.push(
            json!({"ph": "M", "name": "process_name", "pid": pid, "tid": pid,
                           "args": {"name": name}}),
        );
    }
    for ((pid, lwpid), name) in &threads {
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
    let mut stack_args = |id: u32| match stacks.get(id) {
        Some(stack) => json!({"stack": super::report::stack_frames(stack, &mut symbols)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()}),
        None => json!({}),
    };
    for slice in &timeline.slices {
        events.push(json!({"ph": "X", "name": slice.name, "cat": slice.category,
                           "pid": slice.pid, "tid": slice.lwpid, "ts": us(slice.start_ns),
                           "dur": (slice.end_ns - slice.start_ns) as f64 / 1e3,
                           "args": stack_args(slice.stack)}));
        if slice.category == "lock wait" {
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

    let (dir, name) = super::output_place(path)?;
    let (file, _) = dir
        .create(&name)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = BufWriter::new(file);
    serde_json::to_writer(
        &mut out,
        &json!({"displayTimeUnit": "ns", "traceEvents": events}),
    )?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(format!(
        "{} slices, {} wakeups on {} threads in {}",
        timeline.slices.len(),
        timeline.wakes.len(),
        threads.len(),
        path.display()
    ))
}
