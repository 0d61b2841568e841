//! The names of a [`TraceRecord`](crate::TraceRecord)'s fields: the one list that every format
//! naming them takes them from (the tr line, the log's thread payload, the CTF metadata,
//! `dump`'s JSON), as `docs/events.md`, "Record line", names them.

/// CLOCK_REALTIME seconds (the tr line's first field).
pub const SEC: &str = "sec";
/// The nanoseconds of the second.
pub const NSEC: &str = "nsec";
/// The kernel thread id.
pub const LWPID: &str = "lwpid";
/// The process id.
pub const PID: &str = "pid";
/// The caller's `pthread_self()`.
pub const TID: &str = "tid";
/// The event's category code.
pub const EVENT1: &str = "event1";
/// The event's code in its category.
pub const EVENT2: &str = "event2";
/// Which record of a call it is.
pub const WHICH: &str = "which";
/// The five values the event's fields give.
pub const A: [&str; 5] = ["a1", "a2", "a3", "a4", "a5"];
/// Where the call returns to (no tr field).
pub const CALLER: &str = "caller";
/// The id of the call stack the record was taken with (no tr field).
pub const STACK: &str = "stack";

/// A tr line's fields, in order: all but [`CALLER`] and [`STACK`].
pub const TR_LINE: [&str; 13] = [
    SEC, NSEC, LWPID, PID, TID, EVENT1, EVENT2, WHICH, A[0], A[1], A[2], A[3], A[4],
];
