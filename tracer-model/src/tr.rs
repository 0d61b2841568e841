//! The UnixWare `tr.xxxxxxx.yyy` files: one record a line, the fields of [`TR_LINE`] in
//! decimal, separated by `:`; one file per thread.

use std::fmt;

use tracer_common::Which;

use crate::{TraceRecord, field_names::TR_LINE};

/// How every tr file's name begins.
pub const FILE_PREFIX: &str = "tr.";
/// The bits of the pid a file name keeps: the low 28, its 7 hex digits.
pub const PID_MASK: u32 = 0x0fff_ffff;
/// The bits of the lwpid a file name keeps: the low 12, its 3 hex digits.
pub const LWPID_MASK: u32 = 0xfff;

/// The file a thread's records go to: [`FILE_PREFIX`], the pid's [`PID_MASK`] bits as 7 hex
/// digits, `.`, and the lwpid's [`LWPID_MASK`] bits as 3. Two threads of a process whose
/// lwpids agree in the low 12 bits share a file; each line still carries its full lwpid.
pub fn file_name(pid: u32, lwpid: u32) -> String {
    format!(
        "{FILE_PREFIX}{:07x}.{:03x}",
        pid & PID_MASK,
        lwpid & LWPID_MASK
    )
}

/// Whether a file in a directory of tr files is one: named as [`file_name`] names them (an
/// earlier run's, kept as `NAME.old`, is not).
pub fn is_file_name(name: &str) -> bool {
    let hex = |digits: &str, len: usize| {
        digits.len() == len
            && digits
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    name.strip_prefix(FILE_PREFIX)
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(pid, lwpid)| hex(pid, 7) && hex(lwpid, 3))
}

/// Displays a record as its line, without the newline.
pub struct Line<'a>(pub &'a TraceRecord);

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = Vec::with_capacity(LineWriter::MAX_LEN);
        LineWriter::default().append(self.0, &mut line);
        // Digits, signs and colons only.
        f.write_str(std::str::from_utf8(&line).map_err(|_| fmt::Error)?)
    }
}

/// Writes records as lines, the way the tr sink does, a line a record. It keeps the text of
/// the fields a record most often shares with the one before: its second, and its thread
/// (`lwpid:pid:tid`, the same for a run of one thread's records). perf: formatting numbers was
/// a fifth of the sink's time, and these are 30 of a line's 60-odd digits.
#[derive(Default)]
pub struct LineWriter {
    second: Option<(i64, Vec<u8>)>,
    thread: Option<((u32, u32, u64), Vec<u8>)>,
}

impl LineWriter {
    /// The longest line: 13 fields of at most 20 digits and a sign, 12 separators.
    pub const MAX_LEN: usize = TR_LINE.len() * 21 + TR_LINE.len() - 1;

    /// Appends the line of `record`, without the newline, to `out`. itoap writes each number's
    /// digits straight into `out`, with no copy from a buffer of its own.
    pub fn append(&mut self, record: &TraceRecord, out: &mut Vec<u8>) {
        fn put(out: &mut Vec<u8>, value: impl itoap::Integer) {
            itoap::write_to_vec(out, value);
            out.push(b':');
        }
        /// The text kept for `key`, made anew by `write` if the key changed.
        fn kept<K: PartialEq + Copy>(
            slot: &mut Option<(K, Vec<u8>)>,
            key: K,
            write: impl FnOnce(&mut Vec<u8>),
        ) -> &[u8] {
            if slot.as_ref().is_none_or(|(kept, _)| *kept != key) {
                let mut text = slot.take().map(|(_, text)| text).unwrap_or_default();
                text.clear();
                write(&mut text);
                *slot = Some((key, text));
            }
            slot.as_ref().map_or(&[], |(_, text)| text)
        }
        let r = record;
        out.reserve(Self::MAX_LEN);
        out.extend_from_slice(kept(&mut self.second, r.sec, |text| put(text, r.sec)));
        put(out, r.nsec);
        let thread = (r.lwpid, r.pid, r.tid);
        out.extend_from_slice(kept(&mut self.thread, thread, |text| {
            put(text, r.lwpid);
            put(text, r.pid);
            put(text, r.tid);
        }));
        put(out, r.event1);
        put(out, r.event2);
        put(out, r.which.code());
        for a in r.a {
            put(out, a);
        }
        // The last field has no separator after it.
        out.pop();
    }
}

/// Why a line is not a record.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The line has this many fields.
    #[error("{0} fields, not {expected}", expected = TR_LINE.len())]
    FieldCount(usize),
    /// Field 8, which record of a call it is, is not 0, 1 or 2.
    #[error("field 8 (which) is {0:?}, not 0 (a call's one record), 1 (entry) or 2 (return)")]
    Which(String),
    /// Field `field` (from 1) is not a number in range.
    #[error("field {field} ({value:?}) is not a decimal number in range")]
    Field {
        /// Which field, from 1.
        field: usize,
        /// What it holds.
        value: String,
    },
}

/// Reads a line (without its newline) back into a record, whose `caller` is 0. A line read
/// back may come from anywhere: anything but the 13 decimal fields is an error.
pub fn parse_line(line: &str) -> Result<TraceRecord, ParseError> {
    let fields: Vec<&str> = line.split(':').collect();
    if fields.len() != TR_LINE.len() {
        return Err(ParseError::FieldCount(fields.len()));
    }
    Ok(TraceRecord {
        sec: number(&fields, 0)?,
        nsec: number(&fields, 1)?,
        lwpid: number(&fields, 2)?,
        pid: number(&fields, 3)?,
        tid: number(&fields, 4)?,
        event1: number(&fields, 5)?,
        event2: number(&fields, 6)?,
        which: Which::from_code(number(&fields, 7)?)
            .ok_or_else(|| ParseError::Which(fields[7].to_owned()))?,
        a: [
            number(&fields, 8)?,
            number(&fields, 9)?,
            number(&fields, 10)?,
            number(&fields, 11)?,
            number(&fields, 12)?,
        ],
        caller: 0,
        stack: 0,
    })
}

/// Field `index` of `fields` as a number of type `T`: digits with an optional leading `-`.
fn number<T: std::str::FromStr>(fields: &[&str], index: usize) -> Result<T, ParseError> {
    let value = fields[index];
    let digits = value.strip_prefix('-').unwrap_or(value);
    let parsed = match !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        true => value.parse().ok(),
        false => None,
    };
    parsed.ok_or_else(|| ParseError::Field {
        field: index + 1,
        value: value.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_as_file_name_makes_them_are_tr_files() {
        assert!(is_file_name(&file_name(0x1234_5678, 0x9abc)));
        for name in [
            "tr.0000064.005.old",
            "tr.0000064",
            "tr.000006g.005",
            "tr.0000064.0050",
        ] {
            assert!(!is_file_name(name), "{name}");
        }
    }

    fn record() -> TraceRecord {
        TraceRecord {
            sec: 1_700_000_000,
            nsec: 42,
            lwpid: 101,
            pid: 100,
            tid: 139_800_000_000_000,
            event1: 2,
            event2: 4,
            which: Which::Whole,
            a: [-3, 0, 1, 0, 0],
            caller: 0,
            stack: 0,
        }
    }

    #[test]
    fn names_files_by_low_pid_and_lwpid_digits() {
        assert_eq!(file_name(0x1234, 0x1235), "tr.0001234.235");
        assert_eq!(file_name(0x3fff_ffff, 7), "tr.fffffff.007");
    }

    #[test]
    fn a_line_is_13_colon_separated_decimal_fields_and_reads_back() {
        let line = Line(&record()).to_string();
        assert_eq!(
            line,
            "1700000000:42:101:100:139800000000000:2:4:0:-3:0:1:0:0"
        );
        assert_eq!(parse_line(&line), Ok(record()));
    }

    #[test]
    fn a_writer_that_keeps_repeated_fields_writes_each_line_as_on_its_own() {
        let first = record();
        let later = TraceRecord {
            nsec: 43,
            a: [7, 0, 0, 0, 0],
            ..first
        };
        let other_thread = TraceRecord {
            lwpid: 102,
            tid: 139_800_000_100_000,
            ..first
        };
        let same_ids_other_tid = TraceRecord { tid: 5, ..first };
        let next_second = TraceRecord {
            sec: 1_700_000_001,
            ..first
        };
        let mut writer = LineWriter::default();
        for r in [
            first,
            later,
            other_thread,
            first,
            same_ids_other_tid,
            next_second,
            first,
        ] {
            let mut line = Vec::new();
            writer.append(&r, &mut line);
            assert_eq!(String::from_utf8(line).unwrap(), Line(&r).to_string());
            assert_eq!(parse_line(&Line(&r).to_string()), Ok(r));
        }
    }

    #[test]
    fn extreme_values_are_written_in_full_and_read_back() {
        let extreme = TraceRecord {
            sec: i64::MIN,
            nsec: 999_999_999,
            lwpid: u32::MAX,
            pid: u32::MAX,
            tid: u64::MAX,
            event1: u16::MAX,
            event2: u16::MAX,
            which: Which::Return,
            a: [i64::MIN, i64::MAX, -1, 0, 1],
            caller: 0,
            stack: 0,
        };
        let line = Line(&extreme).to_string();
        assert_eq!(
            line,
            format!(
                "{}:999999999:{}:{}:{}:{}:{}:2:{}:{}:-1:0:1",
                i64::MIN,
                u32::MAX,
                u32::MAX,
                u64::MAX,
                u16::MAX,
                u16::MAX,
                i64::MIN,
                i64::MAX
            )
        );
        assert_eq!(parse_line(&line), Ok(extreme));
    }

    #[test]
    fn anything_else_is_an_error() {
        assert_eq!(parse_line("1:2:3"), Err(ParseError::FieldCount(3)));
        assert_eq!(
            parse_line("1:2:3:4:5:6:7:1:9:10:11:12:x"),
            Err(ParseError::Field {
                field: 13,
                value: "x".into()
            })
        );
        // Out of range for its field (lwpid is 32 bits; which is 0, 1 or 2), and an empty field.
        assert!(parse_line("1:2:4294967296:4:5:6:7:1:9:10:11:12:13").is_err());
        assert_eq!(
            parse_line("1:2:3:4:5:6:7:3:9:10:11:12:13"),
            Err(ParseError::Which("3".into()))
        );
        assert!(parse_line("1:2:3:4:5:6:7:1:9:10:11:12:").is_err());
        assert!(parse_line("1:2:3:4:5:6:7:1:9:10:11:12:+1").is_err());
    }

    #[test]
    fn records_are_told_by_event_name_and_half() {
        let lock_entry = TraceRecord {
            event2: 2,
            which: Which::Entry,
            ..record()
        };
        assert!(lock_entry.is("mutex_lock", Which::Entry));
        assert!(!lock_entry.is("mutex_lock", Which::Return));
        assert!(!lock_entry.is("cond_wait", Which::Entry));
        assert!(!lock_entry.is("no_such_event", Which::Entry));
    }
}
