//! `thrtrace-bpf dump LOG`: every event of a log, as text, as tr lines, or as JSON lines.
//!
//! A log whose writer died reads up to its last whole packet, with a warning, and exit 0; a log
//! damaged elsewhere prints what precedes the damage, then one line naming the offset, exit 2.

use std::{
    collections::HashMap,
    fmt::Write as _,
    io::{self, Write},
    path::PathBuf,
};

use clap::{Args, ValueEnum};
use serde_json::{Value as Json, json};
use tracer_model::{
    TraceRecord,
    event::{Event, EventType, SystemEvent, SystemKind, Value},
    field_names::{EVENT1, EVENT2, LWPID, PID, STACK, TID, WHICH},
    log::{Filter, LogReader},
    tr::Line,
};

use super::{
    ReadError,
    text::{Clock, ClockArgs, TextLines},
    timestamp,
};
use crate::{
    error::UsageError,
    sinks::{Sink, Summary, TraceEnd, Written},
};

/// Dumps the log; returns the exit status.
pub fn run(args: &DumpArgs) -> Result<i32, ReadError> {
    if args.clock.given() && args.format != DumpFormat::Text {
        return Err(UsageError(
            "-t, -tt, -ttt and -r time the lines of text: leave out --format, or give text"
                .to_owned(),
        )
        .into());
    }
    let reader = super::open_log(&args.log)?;
    let mut filter = Filter::default().events(args.events.as_deref().unwrap_or(""));
    filter.pids.clone_from(&args.pids);
    filter.lwpids.clone_from(&args.lwpids);
    filter
        .check(&reader.metadata().event_types)
        .map_err(|e| UsageError(format!("--events: {e}")))?;
    // A reader of the output that has gone (`| head`) ends it, with success; damage in the
    // log ends it after the events before it, and is said then.
    let mut damage = None;
    crate::say::to_stdout(|out| {
        if args.format == DumpFormat::Text {
            write_header(&reader, out)?;
        }
        let clock = args.clock.clock();
        let types = &reader.metadata().event_types;
        let mut printer = Printer::new(args.format, clock, false, types, out);
        let system_events = printer.wants_system_events();
        // Every event is read: those the filter leaves out still place callers (mappings).
        for event in reader.events() {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    damage = Some(error);
                    break;
                }
            };
            let shown = filter.matches(&event, || reader.type_of(&event));
            match event {
                Event::Thread(record) if shown => printer.record(&record)?,
                Event::Thread(_) => {}
                Event::System(event) if shown && system_events => printer.system_event(&event)?,
                Event::System(event) => printer.learn(&event),
            }
        }
        printer.end()
    })?;
    match damage {
        Some(error) => Err(ReadError::log(&args.log)(error)),
        None => Ok(0),
    }
}

/// Prints each event it is handed, as `dump` does: readable text, tr lines (thread events
/// only) or JSON lines. Thread events are named as `types` (a log's list, or a live trace's)
/// names them. `dump` hands it a log's events; `--print` a live trace's, into [`LiveOutput`].
pub struct Printer<W: PrintOutput> {
    format: DumpFormat,
    names: HashMap<(u16, u16), String>,
    text: TextLines,
    out: W,
    /// Events printed so far (not those dropped once the output's reader had gone).
    printed: u64,
}

impl<W: PrintOutput> Printer<W> {
    /// A printer of `format`, text lines timed by `clock`; `live` for the events of a trace
    /// that runs, whose processes can be asked where a caller is.
    pub fn new(format: DumpFormat, clock: Clock, live: bool, types: &[EventType], out: W) -> Self {
        let names = types
            .iter()
            .filter(|t| !t.is_system())
            .map(|t| ((t.event1, t.event2), t.name.clone()))
            .collect();
        Printer {
            format,
            names,
            text: TextLines::new(clock, live),
            out,
            printed: 0,
        }
    }

    /// Counts the event just written, if its line reached the output.
    fn count_printed(&mut self) {
        if !self.out.closed() {
            self.printed += 1;
        }
    }

    /// Keeps what a system event not printed tells of the processes.
    fn learn(&mut self, event: &SystemEvent) {
        self.text.learn(event);
    }

    /// Prints what is held for the next event: at the end, or before a pause.
    fn end(&mut self) -> io::Result<()> {
        if let Some(line) = self.text.let_go() {
            writeln!(self.out, "{line}")?;
        }
        self.out.flush()
    }

    /// Prints `lines`.
    fn print(&mut self, lines: Vec<String>) -> io::Result<()> {
        for line in lines {
            writeln!(self.out, "{line}")?;
        }
        Ok(())
    }

    /// A thread event's name; `unknown` for codes the types do not have.
    fn name(&self, record: &TraceRecord) -> &str {
        self.names
            .get(&(record.event1, record.event2))
            .map_or("unknown", String::as_str)
    }
}

impl<W: PrintOutput> Sink for Printer<W> {
    fn destinations(&self) -> Vec<String> {
        vec!["standard output".to_owned()]
    }

    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        match self.format {
            DumpFormat::Tr => writeln!(self.out, "{}", Line(record))?,
            DumpFormat::Text => {
                let lines = self.text.record(record);
                self.print(lines)?;
            }
            DumpFormat::Json => {
                let object = record_json(self.name(record), record);
                writeln!(self.out, "{object}")?;
            }
        }
        self.count_printed();
        Ok(())
    }

    fn system_event(&mut self, event: &SystemEvent) -> io::Result<()> {
        match self.format {
            DumpFormat::Tr => return Ok(()),
            DumpFormat::Text => {
                let lines = self.text.system_event(event);
                self.print(lines)?;
            }
            DumpFormat::Json => writeln!(self.out, "{}", system_json(event))?,
        }
        self.count_printed();
        Ok(())
    }

    fn wants_system_events(&self) -> bool {
        self.format.prints_system_events()
    }

    /// What a live trace drained is on the screen, or in the pipe, before the next drain: a
    /// call that waits shows as it begins.
    fn batch_done(&mut self) -> io::Result<()> {
        self.end()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn finish(&mut self, _end: &TraceEnd) -> io::Result<Summary> {
        self.end()?;
        Ok(Written::Printed {
            events: self.printed,
        }
        .into())
    }
}

/// Where a [`Printer`] prints.
pub trait PrintOutput: Write {
    /// Whether what is written now is dropped, its reader gone.
    fn closed(&self) -> bool;
}

/// `dump`'s stdout, through which a reader that has gone ends the command instead.
impl<W: Write> PrintOutput for &mut W {
    fn closed(&self) -> bool {
        false
    }
}

impl PrintOutput for LiveOutput {
    fn closed(&self) -> bool {
        self.closed
    }
}

/// Stdout for a live trace's `--print`, buffered. Once its reader has gone (`| head`), what
/// is written is dropped, said once on stderr: the trace goes on, with its other outputs,
/// until it ends as it would have (the target is left to run as it would untraced).
pub struct LiveOutput {
    out: io::BufWriter<io::Stdout>,
    closed: bool,
}

impl LiveOutput {
    pub fn new() -> Self {
        LiveOutput {
            out: io::BufWriter::new(io::stdout()),
            closed: false,
        }
    }

    /// Passes on `result`, but a reader that has gone, which closes the output for good.
    fn unless_closed(&mut self, result: io::Result<()>) -> io::Result<()> {
        match result {
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
                say!("thrtrace-bpf: stdout was closed: no more events are printed");
                self.closed = true;
                Ok(())
            }
            other => other,
        }
    }
}

impl Write for LiveOutput {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if !self.closed {
            let written = self.out.write_all(bytes);
            self.unless_closed(written)?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let flushed = self.out.flush();
        self.unless_closed(flushed)
    }
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

/// A system event's payload by field name, as JSON values.
pub(super) fn system_fields(event: &SystemEvent) -> Vec<(&'static str, Json)> {
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

/// A thread event, named `name`, as one JSON object: the event info and the tr fields, which
/// keep their names, but for its time (`time_ns`), its caller (POSIX's `prog_address`) and
/// a1..a5 (the array `a`).
fn record_json(name: &str, r: &TraceRecord) -> Json {
    json!({
            "type": "event",
            "name": name,
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
    })
}

/// A system event as one JSON object, with the keys of [`record_json`]'s and its payload's
/// fields by name in `fields`, where they cannot take the place of those keys (a thread name
/// event's `name`).
fn system_json(e: &SystemEvent) -> Json {
    let fields: serde_json::Map<String, Json> = system_fields(e)
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect();
    json!({
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
        "fields": fields,
    })
}

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// text: every event, a line each as strace prints calls; tr: the tr lines of thread events, in time order; json: one
    /// object per line
    #[arg(long, value_enum, default_value_t = DumpFormat::Text)]
    pub format: DumpFormat,
    /// Only these event types or categories, separated by commas or colons (e.g.
    /// mutex_lock,cond,system)
    #[arg(short = 'e', long, value_name = "EVENTS")]
    pub events: Option<String>,
    /// Only the events of this process (repeat for several)
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Only the events of this thread (repeat for several)
    #[arg(long = "lwpid", value_name = "LWPID")]
    pub lwpids: Vec<u32>,
    #[command(flatten)]
    pub clock: ClockArgs,
    /// The log
    pub log: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DumpFormat {
    Text,
    Tr,
    Json,
}

impl DumpFormat {
    /// Whether system events are printed: tr lines are of thread events alone.
    pub fn prints_system_events(self) -> bool {
        self != DumpFormat::Tr
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::Which;
    use tracer_model::{TraceRecord, event::event_types};

    use super::*;

    /// The keys every object has, record or system event.
    const KEYS: [&str; 11] = [
        "type",
        "name",
        PID,
        LWPID,
        TID,
        "time_ns",
        "prog_address",
        EVENT1,
        EVENT2,
        WHICH,
        "a",
    ];

    fn keys(object: &Json) -> Vec<&str> {
        sorted(object.as_object().unwrap().keys().map(String::as_str))
    }

    fn sorted<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        let mut keys: Vec<&str> = keys.into_iter().collect();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn every_event_type_keeps_its_name_and_the_common_keys() {
        for event_type in event_types() {
            let object = if event_type.is_system() {
                let event = SystemEvent {
                    time_ns: 1,
                    pid: 2,
                    lwpid: 3,
                    truncated: false,
                    kind: SystemKind::from_fields(&event_type.name, &[]),
                };
                let object = system_json(&event);
                let fields = event_type.payload.iter().map(|f| f.name.as_str());
                assert_eq!(
                    keys(&object["fields"]),
                    sorted(fields),
                    "{}",
                    event_type.name
                );
                assert_eq!(
                    keys(&object),
                    sorted(KEYS.into_iter().chain(["truncated", "fields"])),
                );
                assert_eq!(object["type"], "system");
                object
            } else {
                let record = TraceRecord {
                    sec: 1,
                    nsec: 2,
                    lwpid: 3,
                    pid: 4,
                    tid: 5,
                    event1: event_type.event1,
                    event2: event_type.event2,
                    which: Which::Whole,
                    a: [6; 5],
                    caller: 7,
                    stack: 8,
                };
                let object = record_json(&event_type.name, &record);
                assert_eq!(keys(&object), sorted(KEYS.into_iter().chain([STACK])));
                assert_eq!(object["type"], "event");
                object
            };
            assert_eq!(object["name"], event_type.name.as_str(), "{object}");
        }
    }
}
