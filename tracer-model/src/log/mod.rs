//! The trace log: one file of self-checking packets (format described in `docs/log-format.md`).
//!
//! - [`packet`]: the 24-byte packet header and its CRC-32;
//! - [`entry`]: how one event is laid out inside an events packet;
//! - [`write`]: [`LogWriter`], which appends packets (or loops over slots);
//! - [`read`]: [`LogReader`], which reads any file back and never trusts it;
//! - [`filter`]: [`Filter`], which events of a log to read.

pub mod entry;
pub mod filter;
pub mod packet;
pub mod read;
pub mod write;

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

pub use self::{
    filter::{Filter, UnknownEvent},
    read::{Cursor, Events, LogError, LogReader, TypeIds, is_trace_log},
    write::{EventPacket, LogWriter, Written},
};
use crate::event::EventType;

/// The version of the format this build writes and reads. Readers refuse other versions.
pub const FORMAT_VERSION: u16 = 1;

/// What the metadata packet's `format` says.
pub const FORMAT_NAME: &str = "thrtrace-bpf trace log";

/// What happens when the stream (the tracer's buffer) is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StreamFullPolicy {
    /// Write the stream to the log and go on (POSIX_TRACE_FLUSH).
    #[default]
    Flush,
    /// Overwrite the oldest events; write the newest at a flush or the end (POSIX_TRACE_LOOP).
    Loop,
    /// Stop recording (POSIX_TRACE_UNTIL_FULL).
    UntilFull,
}

/// What happens when the log reaches its maximum size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFullPolicy {
    /// No bound (POSIX_TRACE_APPEND).
    #[default]
    Append,
    /// Keep the newest packets (POSIX_TRACE_LOOP).
    Loop,
    /// Stop writing (POSIX_TRACE_UNTIL_FULL).
    UntilFull,
}

macro_rules! policy_names {
    ($policy:ty: $($variant:ident = $name:literal),+) => {
        impl $policy {
            /// How the command line and the log name each policy.
            pub const NAMES: &[&str] = &[$($name),+];
            /// The policy's name, as the command line and the log spell it.
            pub fn name(self) -> &'static str {
                match self { $(Self::$variant => $name),+ }
            }
        }
        impl FromStr for $policy {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($name => Ok(Self::$variant),)+
                    _ => Err(format!("'{s}' is not one of {}", Self::NAMES.join(", "))),
                }
            }
        }
        impl fmt::Display for $policy {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
policy_names!(StreamFullPolicy: Flush = "flush", Loop = "loop", UntilFull = "until-full");
policy_names!(LogFullPolicy: Append = "append", Loop = "loop", UntilFull = "until-full");

/// POSIX's inheritance attribute: whether children of traced processes are traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Inheritance {
    /// POSIX_TRACE_CLOSE_FOR_CHILD: children are not traced.
    CloseForChild,
    /// POSIX_TRACE_INHERITED: children are traced too (`--follow`).
    Inherited,
}

/// The stream's attributes (posix_trace_attr_t), as the controller created it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attributes {
    /// `thrtrace-bpf X.Y.Z (log format N)`.
    pub generation_version: String,
    /// `--name`, or `thrtrace-PID`.
    pub trace_name: String,
    /// CLOCK_REALTIME nanoseconds when the stream was created.
    pub creation_time_ns: i64,
    /// The resolution of the clock records are stamped with.
    pub clock_resolution_ns: u64,
    /// `--stream-size`: bytes of events the stream holds.
    pub stream_min_size: u64,
    /// `--stream-full-policy`.
    pub stream_full_policy: StreamFullPolicy,
    /// The largest payload of any event type, in bytes.
    pub max_data_size: u64,
    /// Whether children of traced processes are traced.
    pub inheritance: Inheritance,
    /// None: unbounded.
    pub log_max_size: Option<u64>,
    /// `--log-full-policy`.
    pub log_full_policy: LogFullPolicy,
}

/// Where the events packets of a log are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum PacketPlacement {
    /// One after another from the end of the metadata packet; the status packet last.
    Append,
    /// `slots` slots of `slot_size` bytes from the end of the metadata packet, packet `seq` in
    /// slot `(seq - 1) % slots`; the status packet after the last slot.
    /// See above.
    Loop {
        /// Bytes of each slot.
        slot_size: u32,
        /// How many slots.
        slots: u32,
    },
}

/// The first packet of every log: everything a reader needs besides the events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub format_version: u16,
    /// The stream's attributes.
    pub attributes: Attributes,
    /// Where the events packets are (the format's `layout`).
    #[serde(rename = "layout")]
    pub packets: PacketPlacement,
    /// Every event type the log can hold, with its id.
    pub event_types: Vec<EventType>,
}

/// posix_trace_status_info, as flags. Every events packet carries them as they were when it
/// was written; the status packet as they were at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// RUNNING (else SUSPENDED).
    pub running: bool,
    /// The stream is FULL.
    pub full: bool,
    /// The stream overran (events lost or overwritten).
    pub overrun: bool,
    /// FLUSHING: a flush to the log is under way.
    pub flushing: bool,
    /// A flush to the log failed.
    pub flush_error: bool,
    /// The log overran (its `loop` policy overwrote packets).
    pub log_overrun: bool,
    /// The log is full (`until-full`).
    pub log_full: bool,
}

impl Status {
    const FLAGS: usize = 7;

    fn flags(self) -> [bool; Self::FLAGS] {
        [
            self.running,
            self.full,
            self.overrun,
            self.flushing,
            self.flush_error,
            self.log_overrun,
            self.log_full,
        ]
    }

    /// The flags as bits: running is bit 0, log full bit 6.
    pub fn to_bits(self) -> u32 {
        self.flags()
            .iter()
            .enumerate()
            .map(|(bit, &set)| u32::from(set) << bit)
            .sum()
    }

    /// The flags [`Status::to_bits`] made.
    pub fn from_bits(bits: u32) -> Status {
        let set = |bit: u32| bits & (1 << bit) != 0;
        Status {
            running: set(0),
            full: set(1),
            overrun: set(2),
            flushing: set(3),
            flush_error: set(4),
            log_overrun: set(5),
            log_full: set(6),
        }
    }
}

/// The last packet of a log that was closed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalStatus {
    /// The status at the close.
    pub status: Status,
    /// CLOCK_REALTIME nanoseconds at the close.
    pub closed_ns: i64,
    /// Events in the log's packets, and events the log's policy kept out of it.
    pub events_written: u64,
    /// See `events_written`.
    pub events_not_written: u64,
    /// Records the kernel could not deliver, per CPU, over the whole trace.
    pub lost_per_cpu: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_flags_round_trip_through_bits() {
        let status = Status {
            running: true,
            overrun: true,
            log_full: true,
            ..Status::default()
        };
        assert_eq!(status.to_bits(), 0b100_0101);
        assert_eq!(Status::from_bits(status.to_bits()), status);
    }

    #[test]
    fn policies_parse_their_names_only() {
        assert_eq!("until-full".parse(), Ok(StreamFullPolicy::UntilFull));
        assert_eq!("loop".parse(), Ok(LogFullPolicy::Loop));
        let error = "sometimes".parse::<LogFullPolicy>().unwrap_err();
        assert_eq!(error, "'sometimes' is not one of append, loop, until-full");
    }
}
