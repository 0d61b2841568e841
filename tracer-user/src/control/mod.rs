//! The controller of a live trace (`docs/posix-trace.md`, "Controller operations"): each
//! trace listens on a Unix socket named after it in a root-only runtime directory
//! ([`socket`]); `thrtrace-bpf ctl NAME OP` ([`client`]) sends one [`Request`] as a JSON line
//! and prints the one [`Reply`] line the session sends back once the operation is in force.

pub mod client;
pub mod socket;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

/// The most bytes a request line may have: anything longer is not ours.
pub const MAX_REQUEST_BYTES: usize = 4096;

/// What a controller asks of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Status,
    Start,
    Stop,
    /// Change the events recorded; `events` as `--events` takes them.
    Filter {
        how: FilterHow,
        events: String,
    },
    Flush,
    Clear,
    Shutdown,
}

/// The trace's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// Done, and what was done ("stopped", "flushed to db.ptl").
    Done {
        message: String,
    },
    Status(Box<StatusReport>),
    /// Refused: one line saying why and what to do.
    Refused {
        message: String,
    },
}

impl Reply {
    pub fn done(message: impl Into<String>) -> Reply {
        Reply::Done {
            message: message.into(),
        }
    }

    pub fn refused(message: impl Into<String>) -> Reply {
        Reply::Refused {
            message: message.into(),
        }
    }
}

/// `ctl status`: posix_trace_status_info's fields (by their POSIX names and values) and the
/// trace's counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    pub name: String,
    /// The tracer's pid.
    pub pid: u32,
    pub posix_stream_status: String,
    pub posix_stream_full_status: String,
    pub posix_stream_overrun_status: String,
    pub posix_stream_flush_status: String,
    pub posix_stream_flush_error: i32,
    pub posix_log_overrun_status: String,
    pub posix_log_full_status: String,
    /// What is recorded as `--events` would say it (`mutex:cond_wait`); the event types
    /// recorded, and POSIX's filter: those not.
    pub events: String,
    pub recorded: Vec<String>,
    pub filtered_out: Vec<String>,
    /// Records written, and records lost (the kernel's ring overflows and undecodable ones).
    pub records: u64,
    pub lost: u64,
    /// Records per second over the last second.
    pub rate: f64,
    pub uptime_s: f64,
    /// The traced processes, or every process (`system_wide`).
    pub targets: Vec<u32>,
    pub system_wide: bool,
    /// What is written where ("log db.ptl (812 events written, ...)").
    pub sinks: Vec<String>,
}

impl StatusReport {
    /// The traced processes, space-separated, or "every process".
    pub fn targets_text(&self) -> String {
        match self.system_wide {
            true => "every process".to_owned(),
            false => self
                .targets
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" "),
        }
    }

    /// The status as `ctl status` prints it.
    pub fn text(&self) -> String {
        let recorded = match self.filtered_out.is_empty() {
            true => "every event",
            false => &self.events,
        };
        format!(
            "trace {} (tracer pid {}), up {:.1} s\n\
             stream: {}, {}, {}, {}; log: {}, {}\n\
             recording: {recorded}\n\
             records: {} written, {} lost, {:.0}/s\n\
             targets: {}\n\
             sinks: {}\n",
            self.name,
            self.pid,
            self.uptime_s,
            plain(&self.posix_stream_status),
            plain(&self.posix_stream_full_status),
            plain(&self.posix_stream_overrun_status),
            plain(&self.posix_stream_flush_status),
            plain(&self.posix_log_overrun_status),
            plain(&self.posix_log_full_status),
            self.records,
            self.lost,
            self.rate,
            self.targets_text(),
            self.sinks.join(", "),
        )
    }
}

/// A POSIX status value as people read it: `POSIX_TRACE_NOT_FULL` is "not full".
pub fn plain(value: &str) -> String {
    value
        .trim_start_matches("POSIX_TRACE_")
        .to_lowercase()
        .replace('_', " ")
}

/// POSIX's SET_EVENTSET, ADD_EVENTSET and SUB_EVENTSET, on the events recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FilterHow {
    /// Record these events only
    Set,
    /// Record these events too
    Add,
    /// Stop recording these events
    Sub,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_one_json_object_each() {
        let filter = Request::Filter {
            how: FilterHow::Add,
            events: "rwlock".into(),
        };
        let line = serde_json::to_string(&filter).unwrap();
        assert_eq!(line, r#"{"op":"filter","how":"add","events":"rwlock"}"#);
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), filter);
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"op":"stop"}"#).unwrap(),
            Request::Stop
        );
        for malformed in [
            r#"{"op":"explode"}"#,
            r#"{"op":"filter","how":"xor","events":"mutex"}"#,
            "stop",
            "",
        ] {
            assert!(
                serde_json::from_str::<Request>(malformed).is_err(),
                "{malformed}"
            );
        }
    }
}
