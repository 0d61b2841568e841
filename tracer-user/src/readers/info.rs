//! `thrtrace-bpf info LOG`: what a log is, in a screenful: its attributes, its status, how many
//! events of each type it holds, and what was lost on the way.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{self, Write},
    path::PathBuf,
};

use clap::Args;
use serde_json::{Value as Json, json};
use tracer_model::{
    event::{Event, SystemKind},
    log::{LogError, LogReader},
    stack::Stacks,
};

use super::{ReadError, timestamp};
use crate::say::{OutputFormat, counted};

/// Prints the summary; returns the exit status.
pub fn run(args: &InfoArgs) -> Result<i32, ReadError> {
    let reader = super::open_log(&args.log)?;
    let summary = Summary::of(&reader).map_err(ReadError::log(&args.log))?;
    crate::say::to_stdout(|out| match args.format {
        OutputFormat::Json => writeln!(out, "{}", summary.json(&reader)),
        OutputFormat::Text => summary.write_text(&reader, out),
    })?;
    Ok(0)
}

/// What one pass over the events finds.
#[derive(Default)]
struct Summary {
    /// Events of each type id.
    counts: BTreeMap<u16, u64>,
    thread_events: u64,
    system_events: u64,
    first_ns: Option<i64>,
    last_ns: Option<i64>,
    pids: BTreeSet<u32>,
    lwpids: BTreeSet<u32>,
    /// Events lost, by where (the overflow events' counts).
    lost: BTreeMap<&'static str, u64>,
    /// The call stacks records named, the share of them whole, and those left out.
    stacks: Stacks,
}

impl Summary {
    fn of(reader: &LogReader) -> Result<Summary, LogError> {
        let mut summary = Summary::default();
        for event in reader.events() {
            let event = event?;
            if let Some(event_type) = reader.type_of(&event) {
                *summary.counts.entry(event_type.id).or_default() += 1;
            }
            let time_ns = event.time_ns();
            summary.first_ns = Some(summary.first_ns.map_or(time_ns, |t| t.min(time_ns)));
            summary.last_ns = Some(summary.last_ns.map_or(time_ns, |t| t.max(time_ns)));
            match event {
                Event::Thread(record) => {
                    summary.stacks.count_record(record.stack, time_ns);
                    summary.thread_events += 1;
                    summary.pids.insert(record.pid);
                    summary.lwpids.insert(record.lwpid);
                }
                Event::System(system) => {
                    summary.stacks.take(&system);
                    summary.system_events += 1;
                    if let SystemKind::Overflow { lost, source, .. } = system.kind {
                        *summary.lost.entry(source.name()).or_default() += lost;
                    }
                }
            }
        }
        Ok(summary)
    }

    fn write_text(&self, reader: &LogReader, out: &mut impl Write) -> io::Result<()> {
        let metadata = reader.metadata();
        let attributes = &metadata.attributes;
        let log_size = super::log_size(attributes);
        writeln!(out, "trace name:      {}", attributes.trace_name)?;
        writeln!(out, "written by:      {}", attributes.generation_version)?;
        writeln!(
            out,
            "created:         {}",
            timestamp(attributes.creation_time_ns)
        )?;
        writeln!(
            out,
            "stream:          {} bytes, full policy {}, inheritance {}",
            attributes.stream_min_size,
            attributes.stream_full_policy,
            json!(attributes.inheritance).as_str().unwrap_or("?")
        )?;
        writeln!(
            out,
            "log:             {log_size}, full policy {}",
            attributes.log_full_policy
        )?;
        match (reader.final_status(), reader.unclosed_at()) {
            (Some(closed), _) => writeln!(
                out,
                "closed:          {}: {} events written, {} kept out by the log's policy",
                timestamp(closed.closed_ns),
                closed.events_written,
                closed.events_not_written
            )?,
            (None, offset) => writeln!(
                out,
                "closed:          no (the tracer was killed or is running); read up to byte {}",
                offset.unwrap_or(0)
            )?,
        }
        writeln!(out, "status:          {}", status_words(reader).join(", "))?;
        if let (Some(first), Some(last)) = (self.first_ns, self.last_ns) {
            writeln!(
                out,
                "time span:       {} to {} ({:.3} s)",
                timestamp(first),
                timestamp(last),
                (last - first) as f64 / 1e9
            )?;
        }
        writeln!(
            out,
            "events:          {} from {}, {}; {}",
            counted(self.thread_events, "thread event"),
            counted(self.pids.len() as u64, "process"),
            counted(self.lwpids.len() as u64, "thread"),
            counted(self.system_events, "system event")
        )?;
        let lost: Vec<String> = self
            .lost
            .iter()
            .map(|(source, n)| format!("{n} in the {source}"))
            .collect();
        let kernel = reader
            .final_status()
            .map(|s| {
                format!(
                    "; the kernel's count at the end: {}",
                    s.lost_per_cpu.iter().sum::<u64>()
                )
            })
            .unwrap_or_default();
        let lost = if lost.is_empty() {
            "none".to_owned()
        } else {
            lost.join(", ")
        };
        writeln!(out, "lost:            {lost}{kernel}")?;
        let share = self.stacks.share();
        if share.records > 0 {
            let left_out = self.stacks.left_out();
            let left_out = match left_out.records {
                0 => String::new(),
                n => format!(
                    "; {} without theirs ({}; the tracer was behind)",
                    counted(n, "record"),
                    left_out.figures(share.records)
                ),
            };
            writeln!(out, "call stacks:     {}{left_out}", share.figures())?;
        }
        writeln!(out, "event types:")?;
        writeln!(out, "  {:>7}  {:>12}  name (category)", "id", "events")?;
        for event_type in &metadata.event_types {
            if let Some(count) = self.counts.get(&event_type.id) {
                writeln!(
                    out,
                    "  {:>7}  {count:>12}  {} ({})",
                    event_type.id, event_type.name, event_type.category
                )?;
            }
        }
        let unseen = metadata.event_types.len() - self.counts.len();
        writeln!(
            out,
            "  and {unseen} more types that the log lists with no events"
        )?;
        Ok(())
    }

    fn json(&self, reader: &LogReader) -> Json {
        let metadata = reader.metadata();
        let event_types: Vec<Json> = metadata
            .event_types
            .iter()
            .map(|t| {
                json!({
                    "id": t.id,
                    "name": t.name,
                    "category": t.category,
                    "count": self.counts.get(&t.id).copied().unwrap_or(0),
                })
            })
            .collect();
        json!({
            "attributes": metadata.attributes,
            "format_version": metadata.format_version,
            "layout": metadata.packets,
            "closed": reader.final_status().is_some(),
            "final_status": reader.final_status(),
            "status": reader.status(),
            "unclosed_at": reader.unclosed_at(),
            "thread_events": self.thread_events,
            "system_events": self.system_events,
            "processes": self.pids,
            "threads": self.lwpids.len(),
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "lost": self.lost,
            "call_stacks": self.stacks.share(),
            "stacks_left_out": self.stacks.left_out().records,
            "stacks_left_out_peak_per_second": self.stacks.left_out().peak_per_second,
            "event_types": event_types,
        })
    }
}

/// posix_trace_status_info as words.
fn status_words(reader: &LogReader) -> Vec<&'static str> {
    let status = reader.status();
    let flag = |set: bool, yes: &'static str, no: &'static str| if set { yes } else { no };
    vec![
        flag(status.running, "running", "suspended"),
        flag(status.full, "full", "not full"),
        flag(status.overrun, "overrun", "no overrun"),
        flag(status.flushing, "flushing", "not flushing"),
        flag(status.flush_error, "flush error", "no flush error"),
        flag(status.log_overrun, "log overrun", "no log overrun"),
        flag(status.log_full, "log full", "log not full"),
    ]
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// The log
    pub log: PathBuf,
}
