//! The one record model that every side shares: the tracer that decodes records, the sinks that
//! write them, the readers that read them back, and the tests. It has no aya or tokio
//! dependency, so that a reader needs none of the tracer's machinery.
//!
//! - [`TraceRecord`]: one record of UnixWare's `thread_trace(4)` scheme, as decoded;
//! - [`tr`]: its `tr.*` line and the file it goes to (event map, "Record line" and "File
//!   names and buffering");
//! - [`event`]: thread and system events and their types, as a trace stream holds them;
//! - [`log`]: the trace log file, written and read back.

pub mod event;
pub mod log;
pub mod tr;

use tracer_common::EVENTS;

/// One record of the thread_trace scheme (event map, "Record line").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// CLOCK_REALTIME seconds and nanoseconds.
    pub sec: i64,
    pub nsec: i64,
    /// Kernel thread id and process id, as seen from the initial PID namespace.
    pub lwpid: u32,
    pub pid: u32,
    /// `pthread_self()` of the caller.
    pub tid: u64,
    pub event1: u16,
    pub event2: u16,
    /// 0: a single record; 1 and 2: the entry and return halves of a call that can block.
    pub which: u16,
    pub a: [i64; 5],
    /// Where the call returns to (0 where unknown: a tr line has no field for it).
    pub caller: u64,
}

impl TraceRecord {
    /// Nanoseconds since the epoch.
    pub fn time_ns(&self) -> i128 {
        i128::from(self.sec) * 1_000_000_000 + i128::from(self.nsec)
    }

    /// Whether this is the `which` record of the event named `name` in the event table
    /// (`mutex_lock`, `cond_wait`, ...); false for a name the table does not have.
    pub fn is(&self, name: &str, which: u16) -> bool {
        EVENTS
            .iter()
            .any(|e| e.name == name && (e.category.code(), e.event2) == (self.event1, self.event2))
            && self.which == which
    }
}
