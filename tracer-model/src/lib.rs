//! The one record model that every side shares: the tracer that decodes records, the sinks that
//! write them, the readers that read them back, and the tests. It has no aya or tokio
//! dependency, so that a reader needs none of the tracer's machinery.
//!
//! - [`TraceRecord`]: one record of UnixWare's `thread_trace(4)` scheme, as decoded;
//! - [`tr`]: its `tr.*` line and the file it goes to (`docs/events.md`, "Record line" and "File
//!   names and buffering");
//! - [`field_names`]: the names of its fields, which every format that names them takes;
//! - [`event`]: thread and system events and their types, as a trace stream holds them;
//! - [`stack`]: the call stacks records name, kept as a reader meets them;
//! - [`log`]: the trace log file, written and read back;
//! - [`analysis`]: what records mean for locks and threads (reports, deadlock detection).
//!
//! # Reading a log
//!
//! [`log::LogReader`] is the analyzer's view of a log (`thrtrace-bpf --log FILE`): its
//! attributes, its status, its event types, and its events in time order, all or those a
//! [`log::Filter`] lets through. `dump`, `info`, `convert` and the C library `libposixtrace` are
//! built on it. It checks every byte it reads, so any file gives events or an error, never a
//! panic.
//!
//! ```
//! use tracer_model::{event::Event, log::{Filter, LogReader}};
//! # use tracer_common::Which;
//! # use tracer_model::{TraceRecord, event::event_types, log::*};
//! # let path = std::env::temp_dir().join(format!("doc-example-{}.ptl", std::process::id()));
//! # let metadata = Metadata {
//! #     format: FORMAT_NAME.into(),
//! #     format_version: FORMAT_VERSION,
//! #     attributes: Attributes {
//! #         generation_version: "doc".into(), trace_name: "app".into(), creation_time_ns: 0,
//! #         clock_resolution_ns: 1, stream_min_size: 1 << 20,
//! #         stream_full_policy: StreamFullPolicy::Flush, max_data_size: 42,
//! #         inheritance: Inheritance::CloseForChild, log_max_size: None,
//! #         log_full_policy: LogFullPolicy::Append,
//! #     },
//! #     packets: PacketPlacement::Append,
//! #     event_types: event_types(),
//! # };
//! # let mut writer = LogWriter::create(std::fs::File::create(&path)?, &metadata)?;
//! # let mut packet = EventPacket::default();
//! # for (lwpid, event1, event2, which) in [
//! #     (11, 2, 2, Which::Entry), (11, 2, 2, Which::Return), (12, 2, 2, Which::Entry), (11, 3, 1, Which::Whole),
//! # ] {
//! #     let a = [0x1000, 0, 0, 0, 0];
//! #     let record = TraceRecord { sec: 1, nsec: 0, lwpid, pid: 10, tid: 1, event1, event2, which, a, caller: 0, stack: 0 };
//! #     packet.push(&Event::Thread(record));
//! # }
//! # writer.write(&[packet], Status::default())?;
//! # writer.close(FinalStatus::default())?;
//!
//! let log = LogReader::open(&path)?;
//! let attributes = &log.metadata().attributes;
//! println!("{} ({})", attributes.trace_name, attributes.generation_version);
//! println!("running at the end: {}", log.status().running);
//! for event_type in &log.metadata().event_types {
//!     println!("{:5} {} ({})", event_type.id, event_type.name, event_type.category);
//! }
//!
//! // The mutex calls of thread 11, as tr lines.
//! let mut mutex_calls = log.events_where(Filter::default().events("mutex").lwpid(11));
//! let mut lines = Vec::new();
//! for event in mutex_calls.by_ref() {
//!     if let Event::Thread(record) = event? {
//!         lines.push(tracer_model::tr::Line(&record).to_string());
//!     }
//! }
//! assert_eq!(lines.len(), 2);
//!
//! // Read them again from the start.
//! mutex_calls.rewind();
//! assert_eq!(mutex_calls.count(), 2);
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod analysis;
pub mod event;
pub mod field_names;
pub mod log;
pub mod selection;
pub mod stack;
pub mod tr;

use tracer_common::{EventDef, Which};

/// One record of the thread_trace scheme (`docs/events.md`, "Record line").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// CLOCK_REALTIME seconds and nanoseconds.
    pub sec: i64,
    /// See `sec`.
    pub nsec: i64,
    /// Kernel thread id and process id, as seen from the initial PID namespace.
    pub lwpid: u32,
    /// See `lwpid`.
    pub pid: u32,
    /// `pthread_self()` of the caller.
    pub tid: u64,
    /// The event's category code: the tr line's `event1`.
    pub event1: u16,
    /// The event's code in its category: the tr line's `event2`.
    pub event2: u16,
    /// The call's one record, or the entry or return half of a call that can block.
    pub which: Which,
    /// a1..a5, laid out as `docs/events.md`'s tables say for the event and `which`.
    pub a: [i64; 5],
    /// Where the call returns to (0 where unknown: a tr line has no field for it).
    pub caller: u64,
    /// The call stack the record was taken with: the id of its process's `thrtrace_stack`
    /// event ([`event::SystemKind::Stack`]), which comes before it in the stream; 0 for none (a
    /// tr line has no field for it).
    pub stack: u32,
}

impl TraceRecord {
    /// Nanoseconds since the epoch.
    pub fn time_ns(&self) -> i128 {
        i128::from(self.sec) * 1_000_000_000 + i128::from(self.nsec)
    }

    /// The value of `field` in this record, if its event's layout for its part has that
    /// field.
    pub fn field(&self, field: tracer_common::Field) -> Option<i64> {
        let row = EventDef::row(self.event1, self.event2)?;
        self.field_in(&tracer_common::EVENTS[row], field)
    }

    /// The value of `field` in this record of `event` (its row, known to the caller).
    pub fn field_in(&self, event: &EventDef, field: tracer_common::Field) -> Option<i64> {
        event
            .fields(self.which)
            .iter()
            .position(|f| *f == field)
            .map(|at| self.a[at])
    }

    /// Whether this is the `which` record of the event named `name` in the event table
    /// (`mutex_lock`, `cond_wait`, ...); false for a name the table does not have.
    pub fn is(&self, name: &str, which: Which) -> bool {
        EventDef::by_name(name)
            .is_some_and(|e| (e.category.code(), e.event2) == (self.event1, self.event2))
            && self.which == which
    }
}
