//! What a trace stream holds: thread events (the records of traced calls) and system events
//! (what the trace itself went through: start, stop, losses, flushes, errors, and the facts about
//! processes an analyzer needs). Every event type has an id, a name and a payload layout; a log
//! carries the list (`docs/posix-trace.md`, "Event types and event info").

use serde::{Deserialize, Serialize};
use tracer_common::{EVENTS, EventDef};

use crate::{TraceRecord, field_names};

/// One event of a stream or log, in time order with the others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A traced call's record.
    Thread(TraceRecord),
    /// Something the trace itself went through.
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
    /// The thread it is about; 0 for none.
    pub lwpid: u32,
    /// A string was cut to [`MAX_STRING`] bytes (POSIX_TRACE_TRUNCATED_RECORD).
    pub truncated: bool,
    /// What happened, with its data.
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
    /// The kernel skipped a futex program's run, so a futex call went unseen: a run of the
    /// same program was preempted on that CPU (its recursion check). Counted when the tracer
    /// read the count, not when the call was made.
    Skipped = 4,
    /// The tracer stopped writing a sink's files: their file system's free space fell below
    /// the floor (`--min-free`). `first_lost_ns` is the first event not written.
    FreeSpace = 5,
}

impl LossSource {
    /// How readers name it: `ring`, `stream`, `log`, `undecodable`, `skipped`, `free-space`.
    pub fn name(self) -> &'static str {
        match self {
            LossSource::Ring => "ring",
            LossSource::Stream => "stream",
            LossSource::Log => "log",
            LossSource::Undecodable => "undecodable",
            LossSource::Skipped => "skipped",
            LossSource::FreeSpace => "free-space",
        }
    }
}

/// An overflow whose CPU is not known, or not a CPU's matter.
pub const NO_CPU: u32 = u32::MAX;

/// Strings in system events are cut to this many bytes (so that any event fits in a packet).
pub const MAX_STRING: usize = 1024;

/// Defines [`SystemKind`] and everything that follows from its one table: each kind's log type
/// id (fixed, never reused), name, payload fields and their types, and the conversions to and
/// from a log's named fields. A kind's fields are named as in the log.
macro_rules! system_kinds {
    ($(
        $(#[$doc:meta])*
        $kind:ident = $id:literal, $name:literal $({ $($field:ident: $ty:ty),* $(,)? })?;
    )*) => {
        /// The system events, standard (POSIX names) and ours (`thrtrace_` names).
        #[derive(Clone, Debug, PartialEq, Eq)]
        #[allow(missing_docs, reason = "each kind's documentation names its fields")]
        pub enum SystemKind {
            $( $(#[$doc])* $kind $({ $($field: $ty),* })?, )*
            /// A system event of a type this build does not know (from a newer writer).
            Unknown {
                /// Its type's name, as the log gives it.
                name: String,
            },
        }

        /// Every system event type this build writes, in id order.
        const SYSTEM_TYPES: &[SystemType] = &[$(
            SystemType {
                id: $id,
                name: $name,
                fields: &[$($( (stringify!($field), <$ty as PayloadField>::TYPE) ),*)?],
            },
        )*];

        impl SystemKind {
            /// Its row of the table; none for a kind only readers make.
            fn system_type(&self) -> Option<&'static SystemType> {
                let id = match self {
                    $( SystemKind::$kind { .. } => $id, )*
                    SystemKind::Unknown { .. } => return None,
                };
                SYSTEM_TYPES.iter().find(|t| t.id == id)
            }

            /// The payload, in the order of the type's fields.
            pub fn values(&self) -> Vec<Value> {
                match self {
                    $( SystemKind::$kind $({ $($field),* })? => {
                        vec![$($( $field.to_value() ),*)?]
                    } )*
                    SystemKind::Unknown { .. } => Vec::new(),
                }
            }

            /// The event of the type named `name` whose payload fields are `fields` (name,
            /// value), as a log holds them; a field that is missing reads as zero or empty.
            pub fn from_fields(name: &str, fields: &[(&str, Value)]) -> SystemKind {
                #[allow(unused_variables, reason = "kinds without fields look nothing up")]
                let field = |wanted: &str| {
                    fields
                        .iter()
                        .find(|(n, _)| *n == wanted)
                        .map_or(Value::Unsigned(0), |(_, v)| v.clone())
                };
                match name {
                    $( $name => SystemKind::$kind $({ $(
                        $field: PayloadField::from_value(&field(stringify!($field)))
                    ),* })?, )*
                    other => SystemKind::Unknown { name: other.to_owned() },
                }
            }
        }
    };
}

system_kinds! {
    /// Recording started; `filter` names the event types filtered out (POSIX's event set);
    /// `contended` set when only contended calls are recorded (`--contended`): a lock or
    /// unlock absent from the trace did not wait or wake, it was not lost.
    Start = 0x8000, "posix_trace_start" { filter: Vec<String>, contended: bool };
    /// Recording stopped: `auto` 0 when asked to, non-zero when a policy stopped it.
    Stop = 0x8001, "posix_trace_stop" { auto: u32 };
    /// The filter changed while running.
    Filter = 0x8002, "posix_trace_filter" { old: Vec<String>, new: Vec<String> };
    /// Events were lost: `lost` of them, from `source`, on `cpu` ([`NO_CPU`] if none), the
    /// first at `first_lost_ns` (0 if unknown).
    Overflow = 0x8003, "posix_trace_overflow" {
        lost: u64,
        cpu: u32,
        source: LossSource,
        first_lost_ns: i64,
    };
    /// Recording is reliable again, from the next event on.
    Resume = 0x8004, "posix_trace_resume";
    /// A flush of the stream to the log begins.
    FlushStart = 0x8005, "posix_trace_flush_start";
    /// The flush ends.
    FlushStop = 0x8006, "posix_trace_flush_stop";
    /// Something went wrong that did not end the trace (a target that could not be attached).
    Error = 0x8007, "posix_trace_error" { code: i64, message: String };
    /// A process is traced from now on (`pid` of the event): its executable and arguments.
    ProcessAttach = 0x8008, "thrtrace_process_attach" { exe: String, cmdline: Vec<String> };
    /// A process is no longer traced (it exited, or tracing ended).
    ProcessDetach = 0x8009, "thrtrace_process_detach";
    /// The name (comm) of a thread (`lwpid`), as first seen.
    ThreadName = 0x800a, "thrtrace_thread_name" { name: String };
    /// Under `--follow`: the event's process was forked by `parent`.
    Fork = 0x800b, "thrtrace_fork" { parent: u32 };
    /// Under `--follow`: the event's process exec'd `exe`.
    Exec = 0x800c, "thrtrace_exec" { exe: String };
    /// A file mapped executable in the event's process: addresses `start..end` map `path` from
    /// `file_offset`; `build_id` empty if the file has none.
    Mapping = 0x800d, "thrtrace_mapping" {
        start: u64,
        end: u64,
        file_offset: u64,
        build_id: Vec<u8>,
        path: String,
    };
    /// A traced call of the event's thread was blocked `blocked_ns` (`--flush-on-block`): in
    /// `call` (an event name) on `object` (its first argument), and had `returned` or was still
    /// blocked. The flight recorder was flushed for it.
    Blocked = 0x800e, "thrtrace_blocked" {
        call: String,
        object: u64,
        blocked_ns: u64,
        returned: bool,
    };
    /// Threads found waiting for each other while tracing: `certain` for locks and joins (else
    /// possible); `threads` the cycle as JSON (`analysis::Deadlock`'s threads); `message` as
    /// the tracer printed it.
    Deadlock = 0x800f, "thrtrace_deadlock" { certain: bool, threads: String, message: String };
    /// A lock-order inversion found while tracing, before it deadlocked: `orders` the cycle as
    /// JSON (`analysis::Inversion`'s edges); `message` as the tracer printed it.
    LockOrder = 0x8010, "thrtrace_lock_order" { orders: String, message: String };
    /// A call stack of the event's process, which records of it name by `id` (unique in the
    /// stream, never 0): `frames` innermost first, the probed instruction then each caller's
    /// return address (at most [`MAX_FRAMES`]); `end` empty when the unwind reached the
    /// thread's start, otherwise why it stopped at the last frame. No frame: the stack of
    /// records whose copy was left out, `end` saying so.
    Stack = 0x8011, "thrtrace_stack" { id: u32, frames: Vec<u64>, end: String };
    /// The event's thread (`lwpid`, the host's id) is `ns_lwpid` in the PID namespace of its
    /// process, one of its own (a container's): what the process reads and stores as a
    /// thread's id (glibc's mutex owner) is that one. Told once, as the thread is first seen
    /// or its process attached.
    ThreadNamespaceId = 0x8012, "thrtrace_thread_ns_id" { ns_lwpid: u32 };
    /// The event's process is in cgroup `path` (v2, `/` the root), and in the v1
    /// `name=systemd` hierarchy of a hybrid host at `systemd` (empty: none); `container` is
    /// the id (12 hex digits) of the container a runtime made the cgroup for, empty if none.
    /// Told once, as the process is attached or first seen.
    ProcessCgroup = 0x8013, "thrtrace_process_cgroup" {
        path: String,
        systemd: String,
        container: String,
    };
    /// Waits of the event's thread shorter than `--min-wait` (`min_wait_ns`), not written:
    /// `waits` of them in `call` (an event name) on `object` from `caller`, `wait_total_ns`
    /// long in all, since the last such event of the same thread, call, object and caller.
    /// Each wait is counted here or written as its records, never both.
    ShortWaits = 0x8014, "thrtrace_short_waits" {
        call: String,
        object: u64,
        caller: u64,
        waits: u64,
        wait_total_ns: u64,
        min_wait_ns: u64,
    };
}

/// The most frames a `thrtrace_stack` event holds: as many addresses as fit a string's
/// [`MAX_STRING`] bytes, the probed instruction's included.
pub const MAX_FRAMES: usize = MAX_STRING / 8 - 1;

/// A system event type: its log type id, name and payload fields.
struct SystemType {
    id: u16,
    name: &'static str,
    fields: &'static [(&'static str, FieldType)],
}

/// The type of a payload field, as a log's event-type list names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// A 16-bit unsigned integer.
    U16,
    /// A 32-bit unsigned integer.
    U32,
    /// A 64-bit unsigned integer.
    U64,
    /// A 64-bit signed integer.
    I64,
    /// u32 length, then that many bytes of UTF-8.
    Str,
    /// u32 length, then that many bytes.
    Bytes,
}

/// One field of an event type's payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldSpec {
    /// The field's name (`lost`, `a1`, ...).
    pub name: String,
    /// How it is encoded.
    #[serde(rename = "type")]
    pub ty: FieldType,
}

/// The category a log gives system event types.
pub const SYSTEM_CATEGORY: &str = "system";

/// An event type as a log lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventType {
    /// Its id in this log (see `docs/log-format.md`).
    pub id: u16,
    /// Its name: the event table's (`mutex_lock`) or a system event's (`posix_trace_overflow`).
    pub name: String,
    /// A thread event's category (`mutex`, ...), or [`SYSTEM_CATEGORY`].
    pub category: String,
    /// The tr line's event1 and event2 (0 for system events).
    pub event1: u16,
    /// See `event1`.
    pub event2: u16,
    /// Its payload's fields, in order.
    pub payload: Vec<FieldSpec>,
}

impl EventType {
    /// Whether it is a system event type.
    pub fn is_system(&self) -> bool {
        self.category == SYSTEM_CATEGORY
    }

    /// Whether `name` names it, as a log's readers name event types: by its name
    /// (`mutex_lock`, `posix_trace_overflow`) or its category's (`mutex`, `system`).
    pub fn is_named(&self, name: &str) -> bool {
        self.name == name || self.category == name
    }
}

/// The first id of system event types. Thread event types have ids below it, made of their
/// codes (`event1 << 8 | event2`), so that no id changes when a row is added to either table
/// (before log format 2's writers, ids were table rows; a log's own list is what readers go by).
pub const FIRST_SYSTEM_ID: u16 = 0x8000;

/// The payload of every thread event: the tr line's `which` and a1..a5, and the id of its call
/// stack (0 for none; absent from logs written before stacks, where it reads 0).
pub const THREAD_PAYLOAD: [(&str, FieldType); 7] = [
    (field_names::WHICH, FieldType::U16),
    (field_names::A[0], FieldType::I64),
    (field_names::A[1], FieldType::I64),
    (field_names::A[2], FieldType::I64),
    (field_names::A[3], FieldType::I64),
    (field_names::A[4], FieldType::I64),
    (field_names::STACK, FieldType::U32),
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
    let thread = EVENTS.iter().map(|e| EventType {
        id: e.category.code() << 8 | e.event2,
        name: e.name.to_owned(),
        category: e.category.name().to_owned(),
        event1: e.category.code(),
        event2: e.event2,
        payload: specs(&THREAD_PAYLOAD),
    });
    let system = SYSTEM_TYPES.iter().map(|t| EventType {
        id: t.id,
        name: t.name.to_owned(),
        category: SYSTEM_CATEGORY.to_owned(),
        event1: 0,
        event2: 0,
        payload: specs(t.fields),
    });
    thread.chain(system).collect()
}

/// The id a thread event's codes have: fixed by the codes, which the tr format fixes.
pub fn thread_type_id(event1: u16, event2: u16) -> Option<u16> {
    EventDef::row(event1, event2).map(|_| event1 << 8 | event2)
}

/// A payload value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// An unsigned integer (u16, u32 or u64).
    Unsigned(u64),
    /// A signed integer.
    Signed(i64),
    /// A string.
    Str(String),
    /// Bytes.
    Bytes(Vec<u8>),
}

impl Value {
    /// The value as an unsigned integer (0 for a string or bytes).
    pub fn as_u64(&self) -> u64 {
        match self {
            Value::Unsigned(n) => *n,
            Value::Signed(n) => *n as u64,
            _ => 0,
        }
    }

    /// The value as a signed integer (0 for a string or bytes).
    pub fn as_i64(&self) -> i64 {
        self.as_u64() as i64
    }

    /// The value as a string (empty for a number or bytes).
    pub fn as_str(&self) -> &str {
        match self {
            Value::Str(s) => s,
            _ => "",
        }
    }
}

/// The separator of a list's items in its one string.
const LIST_SEPARATOR: char = '\0';

impl SystemKind {
    /// The type's name: its POSIX name, or ours.
    pub fn name(&self) -> &str {
        match (self, self.system_type()) {
            (SystemKind::Unknown { name }, _) => name,
            (_, Some(t)) => t.name,
            (_, None) => "",
        }
    }

    /// The names and types of the payload's fields.
    pub fn fields(&self) -> &'static [(&'static str, FieldType)] {
        self.system_type().map_or(&[], |t| t.fields)
    }

    /// The id this build gives the type (never written for `Unknown`, which only readers make).
    pub fn type_id(&self) -> u16 {
        self.system_type().map_or(u16::MAX, |t| t.id)
    }
}

/// How a field of a system kind travels in a log's payload.
trait PayloadField: Sized {
    const TYPE: FieldType;
    fn to_value(&self) -> Value;
    fn from_value(value: &Value) -> Self;
}

impl PayloadField for u32 {
    const TYPE: FieldType = FieldType::U32;
    fn to_value(&self) -> Value {
        Value::Unsigned(u64::from(*self))
    }
    fn from_value(value: &Value) -> Self {
        value.as_u64() as u32
    }
}

impl PayloadField for u64 {
    const TYPE: FieldType = FieldType::U64;
    fn to_value(&self) -> Value {
        Value::Unsigned(*self)
    }
    fn from_value(value: &Value) -> Self {
        value.as_u64()
    }
}

impl PayloadField for i64 {
    const TYPE: FieldType = FieldType::I64;
    fn to_value(&self) -> Value {
        Value::Signed(*self)
    }
    fn from_value(value: &Value) -> Self {
        value.as_i64()
    }
}

/// Addresses travel as bytes, 8 little-endian ones each (a partial last one is dropped).
impl PayloadField for Vec<u64> {
    const TYPE: FieldType = FieldType::Bytes;
    fn to_value(&self) -> Value {
        Value::Bytes(self.iter().flat_map(|a| a.to_le_bytes()).collect())
    }
    fn from_value(value: &Value) -> Self {
        match value {
            Value::Bytes(bytes) => bytes
                .chunks_exact(8)
                .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl PayloadField for bool {
    const TYPE: FieldType = FieldType::U32;
    fn to_value(&self) -> Value {
        Value::Unsigned(u64::from(*self))
    }
    fn from_value(value: &Value) -> Self {
        value.as_u64() != 0
    }
}

impl PayloadField for String {
    const TYPE: FieldType = FieldType::Str;
    fn to_value(&self) -> Value {
        Value::Str(self.clone())
    }
    fn from_value(value: &Value) -> Self {
        value.as_str().to_owned()
    }
}

/// Lists (filters, command lines) travel as one string, items separated by NUL.
impl PayloadField for Vec<String> {
    const TYPE: FieldType = FieldType::Str;
    fn to_value(&self) -> Value {
        Value::Str(self.join(&LIST_SEPARATOR.to_string()))
    }
    fn from_value(value: &Value) -> Self {
        match value.as_str() {
            "" => Vec::new(),
            joined => joined.split(LIST_SEPARATOR).map(str::to_owned).collect(),
        }
    }
}

impl PayloadField for Vec<u8> {
    const TYPE: FieldType = FieldType::Bytes;
    fn to_value(&self) -> Value {
        Value::Bytes(self.clone())
    }
    fn from_value(value: &Value) -> Self {
        match value {
            Value::Bytes(bytes) => bytes.clone(),
            _ => Vec::new(),
        }
    }
}

impl PayloadField for LossSource {
    const TYPE: FieldType = FieldType::U32;
    fn to_value(&self) -> Value {
        Value::Unsigned(*self as u64)
    }
    fn from_value(value: &Value) -> Self {
        match value.as_u64() {
            0 => LossSource::Ring,
            1 => LossSource::Stream,
            2 => LossSource::Log,
            4 => LossSource::Skipped,
            5 => LossSource::FreeSpace,
            _ => LossSource::Undecodable,
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
    fn ids_are_fixed_by_codes_and_the_table_and_never_shared() {
        let types = event_types();
        let mut ids: Vec<u16> = types.iter().map(|t| t.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), types.len());
        assert!(
            types
                .iter()
                .all(|t| t.is_system() == (t.id >= FIRST_SYSTEM_ID))
        );
        // Documented in docs/log-format.md: these never change.
        let mutex_lock = types.iter().find(|t| t.name == "mutex_lock").unwrap();
        assert_eq!(mutex_lock.id, 0x0202);
        assert_eq!(thread_type_id(2, 2), Some(mutex_lock.id));
        assert_eq!(thread_type_id(2, 63), None);
        assert_eq!(
            SystemKind::Deadlock {
                certain: true,
                threads: String::new(),
                message: String::new()
            }
            .type_id(),
            0x800f
        );
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
                contended: true,
            },
            SystemKind::Stop { auto: 1 },
            SystemKind::Overflow {
                lost: 2,
                cpu: NO_CPU,
                source: LossSource::Skipped,
                first_lost_ns: 0,
            },
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
