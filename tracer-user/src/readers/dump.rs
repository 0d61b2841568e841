//! `thrtrace-bpf dump LOG`: every event of a log, as text, as tr lines, or as JSON lines.
//!
//! A log whose writer died reads up to its last whole packet, with a warning, and exit 0; a log
//! damaged elsewhere prints what precedes the damage, then one line naming the offset, exit 2.

use std::{
    fmt::Write as _,
    io::{self, Write},
    path::PathBuf,
};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use serde_json::{Value as Json, json};
use tracer_model::{
    TraceRecord,
    event::{Event, SystemEvent, SystemKind, Value},
    field_names::{EVENT1, EVENT2, LWPID, PID, STACK, TID, WHICH},
    log::{Filter, LogReader},
    tr::Line,
};

use super::timestamp;
use crate::error::UsageError;

/// Dumps the log; returns the exit status.
pub fn run(args: &DumpArgs) -> Result<i32> {
    let reader = super::open_log(&args.log)?;
    let mut filter = Filter::default().events(args.events.as_deref().unwrap_or(""));
    filter.pids.clone_from(&args.pids);
    filter.lwpids.clone_from(&args.lwpids);
    filter
        .check(&reader.metadata().event_types)
        .map_err(|e| UsageError(format!("--events: {e}")))?;
    // A reader of the output that has gone (`| head`) ends it, with success.
    crate::say::to_stdout(|out| write_events(&reader, filter, args.format, out))
        .with_context(|| super::cannot_read(&args.log))?;
    Ok(0)
}

fn write_events(
    reader: &LogReader,
    filter: Filter,
    format: DumpFormat,
    out: &mut impl Write,
) -> Result<()> {
    if format == DumpFormat::Text {
        write_header(reader, out)?;
    }
    for event in reader.events_where(filter) {
        let event = event?;
        match (format, &event) {
            (DumpFormat::Tr, Event::Thread(record)) => writeln!(out, "{}", Line(record))?,
            (DumpFormat::Tr, Event::System(_)) => {}
            (DumpFormat::Text, _) => writeln!(out, "{}", text(reader, &event))?,
            (DumpFormat::Json, _) => writeln!(out, "{}", json_of(reader, &event))?,
        }
    }
    Ok(())
}

/// The attributes and the final status, as `#` lines.
fn write_header(reader: &LogReader, out: &mut impl Write) -> io::Result<()> {
    let attributes = &reader.metadata().attributes;
    writeln!(
        out,
        "# {} ({}), created {}",
        attributes.trace_name,
        attributes.generation_version,
        timestamp(attributes.creation_time_ns)
    )?;
    let log_size = super::log_size(attributes);
    writeln!(
        out,
        "# stream {} bytes, full policy {}; log {log_size}, full policy {}",
        attributes.stream_min_size, attributes.stream_full_policy, attributes.log_full_policy,
    )?;
    if let Some(closed) = reader.final_status() {
        writeln!(
            out,
            "# closed {}: {} events written, {} not; {} records lost in the kernel",
            timestamp(closed.closed_ns),
            closed.events_written,
            closed.events_not_written,
            closed.lost_per_cpu.iter().sum::<u64>()
        )?;
    }
    Ok(())
}

/// A thread event's name, from the log's own event-type list.
fn type_name<'a>(reader: &'a LogReader, record: &TraceRecord) -> &'a str {
    reader.thread_event_name(record).unwrap_or("unknown")
}

/// One readable line: time, pid/lwpid, the event's name, its fields.
fn text(reader: &LogReader, event: &Event) -> String {
    match event {
        Event::Thread(r) => format!(
            "{} {}/{} {}[{}] a=[{}, {}, {}, {}, {}] tid={:#x} caller={:#x}{}",
            timestamp(r.time_ns() as i64),
            r.pid,
            r.lwpid,
            type_name(reader, r),
            r.which.code(),
            r.a[0],
            r.a[1],
            r.a[2],
            r.a[3],
            r.a[4],
            r.tid,
            r.caller,
            match r.stack {
                0 => String::new(),
                id => format!(" stack={id}"),
            }
        ),
        Event::System(e) => {
            let fields: Vec<String> = system_fields(e)
                .into_iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect();
            let truncated = if e.truncated { " (truncated)" } else { "" };
            format!(
                "{} {}/{} {} {}{truncated}",
                timestamp(e.time_ns),
                e.pid,
                e.lwpid,
                e.kind.name(),
                fields.join(" ")
            )
        }
    }
}

/// A system event's payload by field name, as JSON values.
fn system_fields(event: &SystemEvent) -> Vec<(&'static str, Json)> {
    event
        .kind
        .fields()
        .iter()
        .zip(event.kind.values())
        .map(|(&(name, _), value)| {
            let json = match (&event.kind, name, value) {
                (SystemKind::Overflow { source, .. }, "source", _) => {
                    json!(source.name())
                }
                (SystemKind::Stack { frames, .. }, "frames", _) => {
                    json!(frames.iter().map(|a| format!("{a:#x}")).collect::<Vec<_>>())
                }
                (_, "filter" | "old" | "new" | "cmdline", Value::Str(s)) => {
                    json!(s.split('\0').filter(|s| !s.is_empty()).collect::<Vec<_>>())
                }
                (_, _, Value::Bytes(bytes)) => {
                    json!(bytes.iter().fold(String::new(), |mut hex, b| {
                        let _ = write!(hex, "{b:02x}");
                        hex
                    }))
                }
                (_, _, Value::Str(s)) => json!(s),
                (_, _, Value::Signed(n)) => json!(n),
                (_, _, Value::Unsigned(n)) => json!(n),
            };
            (name, json)
        })
        .collect()
}

/// One JSON object: the event info, the tr fields, and a system event's payload by name. The
/// record's fields keep their names, but for its time (`time_ns`), its caller (POSIX's
/// `prog_address`) and a1..a5 (the array `a`).
fn json_of(reader: &LogReader, event: &Event) -> Json {
    match event {
        Event::Thread(r) => json!({
            "type": "event",
            "name": type_name(reader, r),
            PID: r.pid,
            LWPID: r.lwpid,
            TID: r.tid,
            "time_ns": r.time_ns() as i64,
            "prog_address": r.caller,
            EVENT1: r.event1,
            EVENT2: r.event2,
            WHICH: r.which.code(),
            "a": r.a,
            STACK: r.stack,
        }),
        Event::System(e) => {
            let mut object = json!({
                "type": "system",
                "name": e.kind.name(),
                PID: e.pid,
                LWPID: e.lwpid,
                TID: 0,
                "time_ns": e.time_ns,
                "prog_address": 0,
                EVENT1: 0,
                EVENT2: 0,
                WHICH: 0,
                "a": [0, 0, 0, 0, 0],
                "truncated": e.truncated,
            });
            if let Json::Object(map) = &mut object {
                for (name, value) in system_fields(e) {
                    map.insert(name.to_owned(), value);
                }
            }
            object
        }
    }
}

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// text: every event, readable; tr: the tr lines of thread events, in time order; json: one
    /// object per line
    #[arg(long, value_enum, default_value_t = DumpFormat::Text)]
    pub format: DumpFormat,
    /// Only these event types or categories, colon-separated (e.g. mutex_lock:cond:system)
    #[arg(short = 'e', long, value_name = "EVENTS")]
    pub events: Option<String>,
    /// Only the events of this process (repeat for several)
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Only the events of this thread (repeat for several)
    #[arg(long = "lwpid", value_name = "LWPID")]
    pub lwpids: Vec<u32>,
    /// The log
    pub log: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DumpFormat {
    Text,
    Tr,
    Json,
}
