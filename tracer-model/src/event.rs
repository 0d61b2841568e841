//! What a trace stream holds: thread events (the records of traced calls) and system events
//! (what the trace itself went through: start, stop, losses, flushes, errors, and the facts about
//! processes an analyzer needs). Every event type has an id, a name and a payload layout; a log
//! carries the list (`shared/spec/posix-trace.md`, "Event types and event info").

use serde::{Deserialize, Serialize};
use tracer_common::{EVENTS, EventDef};

use crate::TraceRecord;

/// One event of a stream or log, in time order with the others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Thread(TraceRecord),
    System(SystemEvent),
}

impl Event {
    /// Nanoseconds since the epoch (CLOCK_REALTIME).
    pub fn time_ns(&self) -> i64 {
        match self {
            Event::Thread(record) => record.time_ns() as i64,
            Event::System(event) => event.time_ns,
        }
    }
}

/// A system event: the trace's own history, stamped and placed among the thread events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemEvent {
    /// Nanoseconds since the epoch (CLOCK_REALTIME).
    pub time_ns: i64,
    /// The process and thread it is about; 0 for none.
    pub pid: u32,
    pub lwpid: u32,
    /// A string was cut to [`MAX_STRING`] bytes (POSIX_TRACE_TRUNCATED_RECORD).
    pub truncated: bool,
    pub kind: SystemKind,
}

/// Where records were lost (an overflow's `source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum LossSource {
    /// The kernel found no room in a CPU's ring buffer: `cpu` says which.
    Ring = 0,
    /// The stream's `loop` policy overwrote its oldest events.
    Stream = 1,
    /// The log's `loop` policy overwrote its oldest packets (made up by readers).
    Log = 2,
    /// A record arrived that could not be decoded.
    Undecodable = 3,
}

impl LossSource {
    /// How readers name it: `ring`, `stream`, `log`, `undecodable`.
    pub fn name(self) -> &'static str {
        match self {
            LossSource::Ring => "ring",
            LossSource::Stream => "stream",
            LossSource::Log => "log",
            LossSource::Undecodable => "undecodable",
        }
    }
}

/// An overflow whose CPU is not known, or not a CPU's matter.
pub const NO_CPU: u32 = u32::MAX;

/// Strings in system events are cut to this many bytes (so that any event fits in a packet).
pub const MAX_STRING: usize = 1024;

/// The system events, standard (POSIX names) and ours (`thrtrace_` names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SystemKind {
    /// Recording started; `filter` names the event types filtered out (POSIX's event set).
    Start {
        filter: Vec<String>,
    },
    /// Recording stopped: `auto` 0 when asked to, non-zero when a policy stopped it.
    Stop {
        auto: u32,
    },
    /// The filter changed while running.
    Filter {
        old: Vec<String>,
        new: Vec<String>,
    },
    /// Events were lost: `lost` of them, from `source`, on `cpu` ([`NO_CPU`] if none), the
    /// first at `first_lost_ns` (0 if unknown).
    Overflow {
        lost: u64,
        cpu: u32,
        source: LossSource,
        first_lost_ns: i64,
    },
    /// Recording is reliable again, from the next event on.
    Resume,
    FlushStart,
    FlushStop,
    /// Something went wrong that did not end the trace (a target that could not be attached).
    Error {
        code: i64,
        message: String,
    },
    /// A process is traced from now on (`pid` of the event): its executable and arguments.
    ProcessAttach {
        exe: String,
        cmdline: Vec<String>,
    },
    /// A process is no longer traced (it exited, or tracing ended).
    ProcessDetach,
    /// The name (comm) of a thread (`lwpid`), as first seen.
    ThreadName {
        name: String,
    },
    /// Under `--follow`: the event's process was forked by `parent`.
    Fork {
        parent: u32,
    },
    /// Under `--follow`: the event's process exec'd `exe`.
    Exec {
        exe: String,
    },
    /// A file mapped executable in the event's process: addresses `start..end` map `path` from
    /// `file_offset`; `build_id` empty if the file has none.
    Mapping {
        start: u64,
        end: u64,
        file_offset: u64,
        build_id: Vec<u8>,
        path: String,
    },
    /// A traced call of the event's thread was blocked `blocked_ns` (`--flush-on-block`): in
    /// `call` (an event name) on `object` (its first argument), and had `returned` or was still
    /// blocked. The flight recorder was flushed for it.
    Blocked {
        call: String,
        object: u64,
        blocked_ns: u64,
        returned: bool,
    },
    /// Threads found waiting for each other while tracing: `certain` for locks and joins (else
    /// possible); `threads` the cycle as JSON (`analysis::Deadlock`'s threads); `message` as
    /// the tracer printed it.
    Deadlock {
        certain: bool,
        threads: String,
        message: String,
    },
    /// A system event of a type this build does not know (from a newer writer).
    Unknown {
        name: String,
    },
}

/// The type of a payload field, as a log's event-type list names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    U16,
    U32,
    U64,
    I64,
    /// u32 length, then that many bytes of UTF-8.
    Str,
    /// u32 length, then that many bytes.
    Bytes,
}

/// One field of an event type's payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldSpec {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: FieldType,
}

/// The category a log gives system event types.
pub const SYSTEM_CATEGORY: &str = "system";

/// An event type as a log lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventType {
    pub id: u16,
    pub name: String,
    /// A thread event's category (`mutex`, ...), or [`SYSTEM_CATEGORY`].
    pub category: String,
    /// The tr line's event1 and event2 (0 for system events).
    pub event1: u16,
    pub event2: u16,
    pub payload: Vec<FieldSpec>,
}

impl EventType {
    pub fn is_system(&self) -> bool {
        self.category == SYSTEM_CATEGORY
    }
}

/// The first id of system event types; thread event types are numbered from 1 in table order.
pub const FIRST_SYSTEM_ID: u16 = 0x8000;

/// System event types in id order: name and payload fields. One definition for the writer, the
/// event-type list and the readers.
const SYSTEM_TYPES: [(&str, &[(&str, FieldType)]); 16] = [
    ("posix_trace_start", &[("filter", FieldType::Str)]),
    ("posix_trace_stop", &[("auto", FieldType::U32)]),
    (
        "posix_trace_filter",
        &[("old", FieldType::Str), ("new", FieldType::Str)],
    ),
    (
        "posix_trace_overflow",
        &[
            ("lost", FieldType::U64),
            ("cpu", FieldType::U32),
            ("source", FieldType::U32),
            ("first_lost_ns", FieldType::I64),
        ],
    ),
    ("posix_trace_resume", &[]),
    ("posix_trace_flush_start", &[]),
    ("posix_trace_flush_stop", &[]),
    (
        "posix_trace_error",
        &[("code", FieldType::I64), ("message", FieldType::Str)],
    ),
    (
        "thrtrace_process_attach",
        &[("exe", FieldType::Str), ("cmdline", FieldType::Str)],
    ),
    ("thrtrace_process_detach", &[]),
    ("thrtrace_thread_name", &[("name", FieldType::Str)]),
    ("thrtrace_fork", &[("parent", FieldType::U32)]),
    ("thrtrace_exec", &[("exe", FieldType::Str)]),
    (
        "thrtrace_mapping",
        &[
            ("start", FieldType::U64),
            ("end", FieldType::U64),
            ("file_offset", FieldType::U64),
            ("build_id", FieldType::Bytes),
            ("path", FieldType::Str),
        ],
    ),
    (
        "thrtrace_blocked",
        &[
            ("call", FieldType::Str),
            ("object", FieldType::U64),
            ("blocked_ns", FieldType::U64),
            ("returned", FieldType::U32),
        ],
    ),
    (
        "thrtrace_deadlock",
        &[
            ("certain", FieldType::U32),
            ("threads", FieldType::Str),
            ("message", FieldType::Str),
        ],
    ),
];

/// The payload of every thread event: the tr line's `which` and a1..a5.
const THREAD_PAYLOAD: [(&str, FieldType); 6] = [
    ("which", FieldType::U16),
    ("a1", FieldType::I64),
    ("a2", FieldType::I64),
    ("a3", FieldType::I64),
    ("a4", FieldType::I64),
    ("a5", FieldType::I64),
];

fn specs(fields: &[(&str, FieldType)]) -> Vec<FieldSpec> {
    fields
        .iter()
        .map(|&(name, ty)| FieldSpec {
            name: name.to_owned(),
            ty,
        })
        .collect()
}

/// Every event type this build writes: the event table's rows, then the system events.
pub fn event_types() -> Vec<EventType> {
    let thread = EVENTS.iter().zip(1..).map(|(e, id)| EventType {
        id,
        name: e.name.to_owned(),
        category: e.category.name().to_owned(),
        event1: e.category.code(),
        event2: e.event2,
        payload: specs(&THREAD_PAYLOAD),
    });
    let system = SYSTEM_TYPES
        .iter()
        .zip(FIRST_SYSTEM_ID..)
        .map(|(&(name, fields), id)| EventType {
            id,
            name: name.to_owned(),
            category: SYSTEM_CATEGORY.to_owned(),
            event1: 0,
            event2: 0,
            payload: specs(fields),
        });
    thread.chain(system).collect()
}

/// The id this build gives a thread event's codes.
pub fn thread_type_id(event1: u16, event2: u16) -> Option<u16> {
    EventDef::row(event1, event2).map(|row| row as u16 + 1)
}

/// A payload value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Unsigned(u64),
    Signed(i64),
    Str(String),
    Bytes(Vec<u8>),
}

impl Value {
    pub fn as_u64(&self) -> u64 {
        match self {
            Value::Unsigned(n) => *n,
            Value::Signed(n) => *n as u64,
            _ => 0,
        }
    }

    pub fn as_i64(&self) -> i64 {
        self.as_u64() as i64
    }

    pub fn as_str(&self) -> &str {
        match self {
            Value::Str(s) => s,
            _ => "",
        }
    }
}

/// Lists (filters, command lines) travel as one string, items separated by NUL.
const LIST_SEPARATOR: char = '\0';

fn join(items: &[String]) -> String {
    items.join(&LIST_SEPARATOR.to_string())
}

fn split(joined: &str) -> Vec<String> {
    match joined.is_empty() {
        true => Vec::new(),
        false => joined.split(LIST_SEPARATOR).map(str::to_owned).collect(),
    }
}

impl SystemKind {
    /// The type's name: its POSIX name, or ours.
    pub fn name(&self) -> &str {
        match self {
            SystemKind::Unknown { name } => name,
            known => SYSTEM_TYPES[known.index()].0,
        }
    }

    /// The names and types of the payload's fields.
    pub fn fields(&self) -> &'static [(&'static str, FieldType)] {
        match self {
            SystemKind::Unknown { .. } => &[],
            known => SYSTEM_TYPES[known.index()].1,
        }
    }

    /// The id this build gives the type.
    pub fn type_id(&self) -> u16 {
        FIRST_SYSTEM_ID + self.index() as u16
    }

    fn index(&self) -> usize {
        match self {
            SystemKind::Start { .. } => 0,
            SystemKind::Stop { .. } => 1,
            SystemKind::Filter { .. } => 2,
            SystemKind::Overflow { .. } => 3,
            SystemKind::Resume => 4,
            SystemKind::FlushStart => 5,
            SystemKind::FlushStop => 6,
            SystemKind::Error { .. } => 7,
            SystemKind::ProcessAttach { .. } => 8,
            SystemKind::ProcessDetach => 9,
            SystemKind::ThreadName { .. } => 10,
            SystemKind::Fork { .. } => 11,
            SystemKind::Exec { .. } => 12,
            SystemKind::Mapping { .. } => 13,
            SystemKind::Blocked { .. } => 14,
            SystemKind::Deadlock { .. } => 15,
            // Never written: only readers make it.
            SystemKind::Unknown { .. } => usize::MAX,
        }
    }

    /// The payload, in the order of the type's fields.
    pub fn values(&self) -> Vec<Value> {
        use Value::{Bytes, Signed, Str, Unsigned};
        match self {
            SystemKind::Start { filter } => vec![Str(join(filter))],
            SystemKind::Stop { auto } => vec![Unsigned(u64::from(*auto))],
            SystemKind::Filter { old, new } => vec![Str(join(old)), Str(join(new))],
            SystemKind::Overflow {
                lost,
                cpu,
                source,
                first_lost_ns,
            } => vec![
                Unsigned(*lost),
                Unsigned(u64::from(*cpu)),
                Unsigned(*source as u64),
                Signed(*first_lost_ns),
            ],
            SystemKind::Resume
            | SystemKind::FlushStart
            | SystemKind::FlushStop
            | SystemKind::ProcessDetach
            | SystemKind::Unknown { .. } => Vec::new(),
            SystemKind::Error { code, message } => vec![Signed(*code), Str(message.clone())],
            SystemKind::ProcessAttach { exe, cmdline } => {
                vec![Str(exe.clone()), Str(join(cmdline))]
            }
            SystemKind::ThreadName { name } => vec![Str(name.clone())],
            SystemKind::Fork { parent } => vec![Unsigned(u64::from(*parent))],
            SystemKind::Exec { exe } => vec![Str(exe.clone())],
            SystemKind::Mapping {
                start,
                end,
                file_offset,
                build_id,
                path,
            } => vec![
                Unsigned(*start),
                Unsigned(*end),
                Unsigned(*file_offset),
                Bytes(build_id.clone()),
                Str(path.clone()),
            ],
            SystemKind::Blocked {
                call,
                object,
                blocked_ns,
                returned,
            } => vec![
                Str(call.clone()),
                Unsigned(*object),
                Unsigned(*blocked_ns),
                Unsigned(u64::from(*returned)),
            ],
            SystemKind::Deadlock {
                certain,
                threads,
                message,
            } => vec![
                Unsigned(u64::from(*certain)),
                Str(threads.clone()),
                Str(message.clone()),
            ],
        }
    }

    /// The event of the type named `name` whose payload fields are `fields` (name, value), as
    /// a log holds them; a field that is missing reads as zero or empty.
    pub fn from_fields(name: &str, fields: &[(&str, Value)]) -> SystemKind {
        let field = |wanted: &str| {
            fields
                .iter()
                .find(|(n, _)| *n == wanted)
                .map(|(_, v)| v.clone())
                .unwrap_or(Value::Unsigned(0))
        };
        let text = |wanted: &str| field(wanted).as_str().to_owned();
        let list = |wanted: &str| split(field(wanted).as_str());
        let number = |wanted: &str| field(wanted).as_u64();
        match name {
            "posix_trace_start" => SystemKind::Start {
                filter: list("filter"),
            },
            "posix_trace_stop" => SystemKind::Stop {
                auto: number("auto") as u32,
            },
            "posix_trace_filter" => SystemKind::Filter {
                old: list("old"),
                new: list("new"),
            },
            "posix_trace_overflow" => SystemKind::Overflow {
                lost: number("lost"),
                cpu: number("cpu") as u32,
                source: match number("source") {
                    0 => LossSource::Ring,
                    1 => LossSource::Stream,
                    2 => LossSource::Log,
                    _ => LossSource::Undecodable,
                },
                first_lost_ns: field("first_lost_ns").as_i64(),
            },
            "posix_trace_resume" => SystemKind::Resume,
            "posix_trace_flush_start" => SystemKind::FlushStart,
            "posix_trace_flush_stop" => SystemKind::FlushStop,
            "posix_trace_error" => SystemKind::Error {
                code: field("code").as_i64(),
                message: text("message"),
            },
            "thrtrace_process_attach" => SystemKind::ProcessAttach {
                exe: text("exe"),
                cmdline: list("cmdline"),
            },
            "thrtrace_process_detach" => SystemKind::ProcessDetach,
            "thrtrace_thread_name" => SystemKind::ThreadName { name: text("name") },
            "thrtrace_fork" => SystemKind::Fork {
                parent: number("parent") as u32,
            },
            "thrtrace_exec" => SystemKind::Exec { exe: text("exe") },
            "thrtrace_mapping" => SystemKind::Mapping {
                start: number("start"),
                end: number("end"),
                file_offset: number("file_offset"),
                build_id: match field("build_id") {
                    Value::Bytes(bytes) => bytes,
                    _ => Vec::new(),
                },
                path: text("path"),
            },
            "thrtrace_blocked" => SystemKind::Blocked {
                call: text("call"),
                object: number("object"),
                blocked_ns: number("blocked_ns"),
                returned: number("returned") != 0,
            },
            "thrtrace_deadlock" => SystemKind::Deadlock {
                certain: number("certain") != 0,
                threads: text("threads"),
                message: text("message"),
            },
            other => SystemKind::Unknown {
                name: other.to_owned(),
            },
        }
    }
}

impl SystemEvent {
    /// An event of no particular process.
    pub fn new(time_ns: i64, kind: SystemKind) -> Self {
        SystemEvent {
            time_ns,
            pid: 0,
            lwpid: 0,
            truncated: false,
            kind,
        }
    }

    /// An event about process `pid` (thread `lwpid`, or 0).
    pub fn of_process(time_ns: i64, pid: u32, lwpid: u32, kind: SystemKind) -> Self {
        SystemEvent {
            pid,
            lwpid,
            ..SystemEvent::new(time_ns, kind)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_table_and_every_system_kind_has_its_row() {
        let types = event_types();
        assert_eq!(types[0].id, 1);
        assert_eq!(types[0].name, EVENTS[0].name);
        let mutex_lock = types.iter().find(|t| t.name == "mutex_lock").unwrap();
        assert_eq!(thread_type_id(2, 2), Some(mutex_lock.id));
        let overflow = SystemKind::Overflow {
            lost: 3,
            cpu: 1,
            source: LossSource::Ring,
            first_lost_ns: 0,
        };
        let row = types.iter().find(|t| t.id == overflow.type_id()).unwrap();
        assert_eq!(row.name, "posix_trace_overflow");
        assert_eq!(row.payload.len(), overflow.values().len());
    }

    #[test]
    fn kinds_round_trip_through_named_fields() {
        let kinds = [
            SystemKind::Start {
                filter: vec!["mutex_init".into(), "cond_init".into()],
            },
            SystemKind::Stop { auto: 1 },
            SystemKind::ProcessAttach {
                exe: "/bin/x".into(),
                cmdline: vec!["x".into(), "-v".into()],
            },
            SystemKind::Mapping {
                start: 1,
                end: 2,
                file_offset: 3,
                build_id: vec![0xab, 0xcd],
                path: "/lib/libc.so.6".into(),
            },
        ];
        let types = event_types();
        for kind in kinds {
            let row = types.iter().find(|t| t.id == kind.type_id()).unwrap();
            let values = kind.values();
            let named: Vec<(&str, Value)> = row
                .payload
                .iter()
                .map(|f| f.name.as_str())
                .zip(values)
                .collect();
            assert_eq!(SystemKind::from_fields(&row.name, &named), kind);
        }
    }
}
