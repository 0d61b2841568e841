//! Events as strace prints system calls, one line each, for `--print text` and `dump`:
//!
//! ```text
//! 18:02:01.123456 [4242/4243] pthread_mutex_lock(0x55d0c0a4e040 <queue_lock>) = 0 {owner=0, block?=0} from worker+0x1c (queue.c:88)
//! 18:02:01.123502 [4242/4244] pthread_mutex_lock(0x55d0c0a4e040 <queue_lock>) {owner=4243} <unfinished ...> from worker+0x1c (queue.c:88)
//! 18:02:01.124020 [4242/4244] <... pthread_mutex_lock resumed>) = 0 {block?=1} <0.000518>
//! 18:02:02.124101 [4242/4245] <... sem_timedwait resumed>) = -1 ETIMEDOUT (Connection timed out) <1.000102>
//! ```
//!
//! The time (`-t`, `-tt`, `-ttt`, `-r` as strace takes them), the process and thread, the C
//! library's function and the arguments the record holds (a pointer to a global named as gdb
//! names it), the result with its error's name, the record's other fields in braces, the
//! time the call took when its two halves were recorded at two times, and where it was
//! called from. A call written as two records is printed on one line when its halves came as
//! one (a fast path's, at one time); otherwise its entry is `<unfinished ...>` and its return
//! `<... resumed>`, as strace prints a call another thread's interrupted. The fields are read
//! as the event table says (`EventDef::fields`); a record of codes it does not have is
//! printed by its numbers.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
};

use clap::{ArgAction, Args};
use tracer_common::{Category, EventDef, Field, Which};
use tracer_model::{TraceRecord, event::SystemEvent};

use crate::symbolize::Symbols;

/// `-t`, `-tt`, `-ttt` and `-r`, as strace takes them, for lines of text.
#[derive(Clone, Copy, Debug, Default, Args)]
pub struct ClockArgs {
    /// Each text line's time: -t the time of day, -tt with microseconds (the default), -ttt
    /// seconds since the epoch with microseconds, as strace prints them
    #[arg(short = 't', action = ArgAction::Count, conflicts_with = "relative_time")]
    pub time_of_day: u8,
    /// Each text line's time as seconds since the line before, as strace -r prints it
    #[arg(short = 'r')]
    pub relative_time: bool,
}

impl ClockArgs {
    /// Whether a clock was asked for.
    pub fn given(self) -> bool {
        self.relative_time || self.time_of_day > 0
    }

    pub fn clock(self) -> Clock {
        match (self.relative_time, self.time_of_day) {
            (true, _) => Clock::Relative,
            (false, 1) => Clock::Seconds,
            (false, 0 | 2) => Clock::Microseconds,
            (false, _) => Clock::Epoch,
        }
    }
}

/// How a line's time is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The local time of day: `18:02:01`.
    Seconds,
    /// With microseconds: `18:02:01.123456`.
    Microseconds,
    /// Seconds since the epoch: `1796165536.123456`.
    Epoch,
    /// Seconds since the line before: `     0.000123`.
    Relative,
}

/// Makes the lines, keeping what a line needs of the events before it: the mappings that
/// place callers and name globals, each thread's call left unfinished, the time of the line
/// before.
pub struct TextLines {
    clock: Clock,
    /// Whether the processes are running (a live trace): a caller outside the mappings
    /// recorded at attach (a library loaded since) is then looked up in the process.
    live: bool,
    symbols: Symbols,
    globals: HashMap<(u32, u64), Option<String>>,
    /// Where each caller is, as printed.
    callers: HashMap<(u32, u64), String>,
    /// When each thread's unfinished call (by its codes) began.
    unfinished: HashMap<CallKey, i128>,
    /// An entry half not printed yet: printed with the next event if that is its return at
    /// the same time (the two halves of one record), else alone, unfinished.
    held: Option<TraceRecord>,
    previous_ns: Option<i128>,
}

impl TextLines {
    pub fn new(clock: Clock, live: bool) -> Self {
        TextLines {
            clock,
            live,
            // Live, the printer must not wait on a server.
            symbols: match live {
                true => Symbols::live(),
                false => Symbols::fetching(&[]),
            },
            globals: HashMap::new(),
            callers: HashMap::new(),
            unfinished: HashMap::new(),
            held: None,
            previous_ns: None,
        }
    }

    /// The lines a thread event makes (none while its entry is held, up to two when one held
    /// before is let go).
    pub fn record(&mut self, record: &TraceRecord) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(entry) = self.held.take() {
            let halves_of_one = record.which == Which::Return
                && (record.pid, record.lwpid, record.event1, record.event2)
                    == (entry.pid, entry.lwpid, entry.event1, entry.event2)
                && record.time_ns() == entry.time_ns();
            if halves_of_one {
                lines.push(self.call_line(&entry, Some(record)));
                return lines;
            }
            lines.push(self.call_line(&entry, None));
        }
        match record.which {
            Which::Entry => self.held = Some(*record),
            Which::Whole => lines.push(self.call_line(record, None)),
            Which::Return => lines.push(self.resumed_line(record)),
        }
        lines
    }

    /// A system event's line, after the held entry's; the mappings and processes it tells of
    /// are kept.
    pub fn system_event(&mut self, event: &SystemEvent) -> Vec<String> {
        let mut lines: Vec<String> = self.let_go().into_iter().collect();
        self.learn(event);
        let fields: Vec<String> = super::dump::system_fields(event)
            .into_iter()
            .map(|(name, value)| match (name, value.as_u64()) {
                ("start" | "end", Some(address)) => format!("{name}={address:#x}"),
                // POSIX's filter is the set of events left out, which its name does not say.
                ("filter", _) => format!("filtered_out={value}"),
                _ => format!("{name}={value}"),
            })
            .collect();
        let truncated = if event.truncated { " (truncated)" } else { "" };
        lines.push(format!(
            "{} [{}/{}] --- {} {}{truncated} ---",
            self.time(i128::from(event.time_ns)),
            event.pid,
            event.lwpid,
            event.kind.name(),
            fields.join(" ")
        ));
        lines
    }

    /// Keeps what a system event, printed or not (`dump -e` leaves it out), tells of the
    /// processes: their mappings, which place callers and name globals.
    pub fn learn(&mut self, event: &SystemEvent) {
        if self.symbols.learn(event) {
            self.globals.retain(|&(pid, _), _| pid != event.pid);
            self.callers.retain(|&(pid, _), _| pid != event.pid);
            self.unfinished.retain(|key, _| key.0 != event.pid);
        }
    }

    /// The held entry's line, unfinished: at the end, or before a pause (a live trace's
    /// drain), so that a call that waits shows as it begins.
    pub fn let_go(&mut self) -> Option<String> {
        let entry = self.held.take()?;
        Some(self.call_line(&entry, None))
    }

    /// A call's line from its entry (or its one record) and, if the two came as one, its
    /// return; an entry alone is left unfinished, to be resumed.
    fn call_line(&mut self, first: &TraceRecord, second: Option<&TraceRecord>) -> String {
        let (mut line, event, mut fields) = match self.begin(first) {
            Ok(begun) => begun,
            Err(line) => return line,
        };
        if let Some(second) = second {
            self.read(event, second, &mut fields);
        }
        let arguments = fields.arguments();
        let _ = write!(line, "{}({arguments})", event.symbol);
        let unfinished = first.which == Which::Entry && second.is_none();
        if !unfinished {
            line += &result(event, &fields);
        }
        line += &fields.others();
        // The halves of one record carry one time, that of the fast path's completion: the
        // time the call took is not known.
        match unfinished {
            true => {
                self.unfinished.insert(call_key(first), first.time_ns());
                line += " <unfinished ...>";
            }
            false => line += &fields.elapsed(),
        }
        if first.caller != 0 {
            let _ = write!(line, " from {}", self.caller(first.pid, first.caller));
        }
        line
    }

    /// A return half whose entry was printed before, unfinished.
    fn resumed_line(&mut self, record: &TraceRecord) -> String {
        let (mut line, event, fields) = match self.begin(record) {
            Ok(begun) => begun,
            Err(line) => return line,
        };
        let _ = write!(line, "<... {} resumed>)", event.symbol);
        line += &result(event, &fields);
        line += &fields.others();
        if let Some(began) = self.unfinished.remove(&call_key(record)) {
            line += &duration(record.time_ns() - began);
        }
        line
    }

    /// A line's beginning (the time and the thread), and the record's event and fields; for
    /// codes the event table does not have, the whole line, of the record's numbers.
    fn begin(
        &mut self,
        record: &TraceRecord,
    ) -> Result<(String, &'static EventDef, Fields), String> {
        let time = self.time(record.time_ns());
        let line = format!("{time} [{}/{}] ", record.pid, record.lwpid);
        let Some(event) = EventDef::find(record.event1, record.event2) else {
            return Err(line + &unknown(record));
        };
        let mut fields = Fields::default();
        self.read(event, record, &mut fields);
        Ok((line, event, fields))
    }

    fn time(&mut self, ns: i128) -> String {
        let since = ns - self.previous_ns.unwrap_or(ns);
        self.previous_ns = Some(ns);
        let micros = ns.rem_euclid(1_000_000_000) / 1_000;
        // A time past what the C library breaks down (a corrupt log's) is told in seconds.
        let of_day = |ns: i128| match i64::try_from(ns.div_euclid(1_000_000_000)) {
            Ok(seconds) => time_of_day(seconds),
            Err(_) => super::seconds(ns),
        };
        match self.clock {
            Clock::Seconds => of_day(ns),
            Clock::Microseconds => format!("{}.{micros:06}", of_day(ns)),
            Clock::Epoch => super::seconds(ns),
            Clock::Relative => format!("{:>13}", super::seconds(since)),
        }
    }

    /// Sorts `record`'s fields, as the event table lays them out for its half, into `fields`,
    /// with the id of the stack it carries (`--- thrtrace_stack id=N ... ---` before it).
    fn read(&mut self, event: &EventDef, record: &TraceRecord, fields: &mut Fields) {
        if record.stack != 0 {
            fields.others.push(format!("stack={}", record.stack));
        }
        for (&field, &value) in event.fields(record.which).iter().zip(&record.a) {
            match field {
                Field::Zero => {}
                Field::Arg(2) if event.symbol == "futex" => {
                    fields.arguments.insert(2, futex_op(value));
                }
                Field::Arg(n) => {
                    let argument = self.value_named(record.pid, value);
                    fields.arguments.insert(n, argument);
                }
                Field::Rval => fields.returned = Some(Returned::Int(value)),
                Field::Rval64 => fields.returned = Some(Returned::Pointer(value)),
                Field::Errno => fields.errno = value,
                Field::ElapsedNs => fields.elapsed_ns = Some(value),
                Field::Stored64(_) => {
                    let name = event.field_name(field);
                    fields.others.push(format!("{name}={}", number(value)));
                }
                other => {
                    let name = event.field_name(other);
                    fields.others.push(format!("{name}={value}"));
                }
            }
        }
    }

    /// A value, and if it is the address of a global of its process, the global's name.
    fn value_named(&mut self, pid: u32, value: i64) -> String {
        let text = number(value);
        if !looks_like_a_pointer(value) {
            return text;
        }
        let address = value as u64;
        let symbols = &mut self.symbols;
        let global = self
            .globals
            .entry((pid, address))
            .or_insert_with(|| symbols.name_lock(pid, address, None).symbol);
        match global {
            Some(name) => format!("{text} <{name}>"),
            None => text,
        }
    }

    /// Where `address` (a return address) of process `pid` is.
    fn caller(&mut self, pid: u32, address: u64) -> String {
        if let Some(known) = self.callers.get(&(pid, address)) {
            return known.clone();
        }
        let location = self.symbols.locate(pid, address);
        let placed = location.module.is_some();
        let text = match placed || !self.live {
            true => location.to_string(),
            false => self.symbols.locate_live(pid, address).to_string(),
        };
        self.callers.insert((pid, address), text.clone());
        text
    }
}

/// A thread's call, by its codes.
type CallKey = (u32, u32, u16, u16);

fn call_key(record: &TraceRecord) -> CallKey {
    (record.pid, record.lwpid, record.event1, record.event2)
}

/// A record's fields by what they are to a line.
#[derive(Default)]
struct Fields {
    /// The arguments the records hold, by their number.
    arguments: BTreeMap<u8, String>,
    returned: Option<Returned>,
    errno: i64,
    elapsed_ns: Option<i64>,
    others: Vec<String>,
}

impl Fields {
    /// The arguments in their order, `?` for one the records do not hold.
    fn arguments(&self) -> String {
        let last = self.arguments.keys().last().copied().unwrap_or(0);
        (1..=last)
            .map(|n| self.arguments.get(&n).map_or("?", String::as_str))
            .collect::<Vec<&str>>()
            .join(", ")
    }

    /// ` {owner=0, block?=1}`, or nothing.
    fn others(&self) -> String {
        match self.others.is_empty() {
            true => String::new(),
            false => format!(" {{{}}}", self.others.join(", ")),
        }
    }

    /// The time the record says the call took (a futex wait's), if it says.
    fn elapsed(&self) -> String {
        self.elapsed_ns
            .map(i128::from)
            .map_or_else(String::new, duration)
    }
}

/// What a call returned.
#[derive(Clone, Copy)]
enum Returned {
    Int(i64),
    Pointer(i64),
}

/// The pthread functions whose result is a value, not an error number.
const RETURNING_A_VALUE: [&str; 1] = ["pthread_getconcurrency"];

/// ` = 0`; an error with its name and text, as strace prints it: a pthread function's error
/// number (`= 16 EBUSY (Device or resource busy)`), -1 with the errno a record keeps beside
/// it (`= -1 ETIMEDOUT (Connection timed out)`), or a system call's negative errno, as -1
/// with it; nothing for a call whose records hold no result (`pthread_exit`).
fn result(event: &EventDef, fields: &Fields) -> String {
    let reports_errors =
        event.symbol.starts_with("pthread_") && !RETURNING_A_VALUE.contains(&event.symbol);
    match fields.returned {
        None => String::new(),
        Some(Returned::Pointer(value)) => format!(" = {:#x}", value as u64),
        Some(Returned::Int(-1)) if fields.errno > 0 => {
            format!(" = -1 {}", error_text(fields.errno))
        }
        Some(Returned::Int(value))
            if event.category == Category::Futex && (-4095..0).contains(&value) =>
        {
            format!(" = -1 {}", error_text(-value))
        }
        Some(Returned::Int(value)) if value > 0 && reports_errors => {
            format!(" = {value} {}", error_text(value))
        }
        Some(Returned::Int(value)) => format!(" = {value}"),
    }
}

/// `ETIMEDOUT (Connection timed out)`: the name of the errors pthread calls return, and the
/// C library's text for each.
fn error_text(errno: i64) -> String {
    const NAMES: [(i32, &str); 15] = [
        (libc::EPERM, "EPERM"),
        (libc::ESRCH, "ESRCH"),
        (libc::EINTR, "EINTR"),
        (libc::EAGAIN, "EAGAIN"),
        (libc::ENOMEM, "ENOMEM"),
        (libc::EBUSY, "EBUSY"),
        (libc::EINVAL, "EINVAL"),
        (libc::EDEADLK, "EDEADLK"),
        (libc::ENOSYS, "ENOSYS"),
        (libc::EOVERFLOW, "EOVERFLOW"),
        (libc::ENOTSUP, "ENOTSUP"),
        (libc::ETIMEDOUT, "ETIMEDOUT"),
        (libc::EOWNERDEAD, "EOWNERDEAD"),
        (libc::ENOTRECOVERABLE, "ENOTRECOVERABLE"),
        (libc::EFAULT, "EFAULT"),
    ];
    let Ok(errno) = i32::try_from(errno) else {
        return format!("errno {errno}");
    };
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    let text = text.split(" (os error").next().unwrap_or_default();
    match NAMES.iter().find(|&&(code, _)| code == errno) {
        Some((_, name)) => format!("{name} ({text})"),
        None => format!("errno {errno} ({text})"),
    }
}

/// A futex call's operation as strace names it: `FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME`.
fn futex_op(op: i64) -> String {
    const OPERATIONS: [&str; 14] = [
        "FUTEX_WAIT",
        "FUTEX_WAKE",
        "FUTEX_FD",
        "FUTEX_REQUEUE",
        "FUTEX_CMP_REQUEUE",
        "FUTEX_WAKE_OP",
        "FUTEX_LOCK_PI",
        "FUTEX_UNLOCK_PI",
        "FUTEX_TRYLOCK_PI",
        "FUTEX_WAIT_BITSET",
        "FUTEX_WAKE_BITSET",
        "FUTEX_WAIT_REQUEUE_PI",
        "FUTEX_CMP_REQUEUE_PI",
        "FUTEX_LOCK_PI2",
    ];
    // Bits of no flag are the command's, which names none then.
    let command = op & i64::from(libc::FUTEX_CMD_MASK);
    let Some(name) = usize::try_from(command)
        .ok()
        .and_then(|command| OPERATIONS.get(command))
    else {
        return number(op);
    };
    let private = match op & i64::from(libc::FUTEX_PRIVATE_FLAG) {
        0 => "",
        _ => "_PRIVATE",
    };
    let realtime = match op & i64::from(libc::FUTEX_CLOCK_REALTIME) {
        0 => "",
        _ => "|FUTEX_CLOCK_REALTIME",
    };
    format!("{name}{private}{realtime}")
}

/// ` <0.000518>`, as strace -T prints the time a call took.
fn duration(ns: i128) -> String {
    format!(" <{}>", super::seconds(ns))
}

/// An argument's or a stored value: in decimal, or in hex when it looks like an address.
fn number(value: i64) -> String {
    match looks_like_a_pointer(value) {
        true => format!("{:#x}", value as u64),
        false => value.to_string(),
    }
}

/// Whether `value` is more likely an address than a count, a flag or an id: past the first
/// page tables' worth, or negative beyond any errno.
fn looks_like_a_pointer(value: i64) -> bool {
    !(-4096..0x1_0000).contains(&value)
}

/// A record whose codes the event table does not have (a log from a newer writer).
fn unknown(record: &TraceRecord) -> String {
    format!(
        "event {}:{}[{}]({})",
        record.event1,
        record.event2,
        record.which.code(),
        record.a.map(number).join(", ")
    )
}

/// `18:02:01`: the local time of day of `seconds` since the epoch.
fn time_of_day(seconds: i64) -> String {
    match super::local_time(seconds) {
        Some(tm) => format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec),
        None => seconds.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(event: &str, which: Which, ns: i64, a: [i64; 5]) -> TraceRecord {
        let event = EventDef::by_name(event).unwrap();
        TraceRecord {
            sec: 1_796_165_536,
            nsec: ns,
            lwpid: 12,
            pid: 10,
            tid: 0x7f00_0000_0000,
            event1: event.category.code(),
            event2: event.event2,
            which,
            a,
            caller: 0,
            stack: 0,
        }
    }

    fn lines(records: &[TraceRecord]) -> Vec<String> {
        let mut text = TextLines::new(Clock::Epoch, false);
        let mut lines: Vec<String> = records.iter().flat_map(|r| text.record(r)).collect();
        lines.extend(text.let_go());
        lines
    }

    #[test]
    fn the_halves_of_one_record_make_one_line_and_a_wait_is_resumed_with_its_time() {
        let lock = 0x5555_0000_1000;
        let printed = lines(&[
            record("mutex_lock", Which::Entry, 1_000, [lock, 0, 0, 0, 0]),
            record("mutex_lock", Which::Return, 1_000, [0, 0, 0, 0, 0]),
            record("mutex_lock", Which::Entry, 2_000, [lock, 13, 0, 0, 0]),
            record("mutex_lock", Which::Return, 520_000, [0, 1, 0, 0, 0]),
            record("mutex_trylock", Which::Whole, 600_000, [lock, 16, 0, 0, 0]),
            record(
                "sema_wait",
                Which::Entry,
                700_000,
                [0x7ffd_0000_0010, 0, 0, 0, 0],
            ),
            record("sema_wait", Which::Return, 700_000, [-1, 4, 0, 0, 0]),
            record(
                "futex_wait",
                Which::Whole,
                900_000,
                [0x7ffd_0000_0020, 128, 2_500, -110, -1],
            ),
            record(
                "sema_init",
                Which::Whole,
                950_000,
                [0x7ffd_0000_0030, 3, 1, 0, 0],
            ),
        ]);
        assert_eq!(
            printed,
            [
                "1796165536.000001 [10/12] pthread_mutex_lock(0x555500001000) = 0 \
                 {owner=0, block?=0}",
                "1796165536.000002 [10/12] pthread_mutex_lock(0x555500001000) {owner=13} \
                 <unfinished ...>",
                "1796165536.000520 [10/12] <... pthread_mutex_lock resumed>) = 0 {block?=1} \
                 <0.000518>",
                "1796165536.000600 [10/12] pthread_mutex_trylock(0x555500001000) = 16 EBUSY \
                 (Device or resource busy)",
                "1796165536.000700 [10/12] sem_wait(0x7ffd00000010) = -1 EINTR (Interrupted system \
                 call) {s_count=0}",
                "1796165536.000900 [10/12] futex(0x7ffd00000020, FUTEX_WAIT_PRIVATE) = -1 ETIMEDOUT (Connection \
                 timed out) {timeout_ns=-1} <0.000002>",
                "1796165536.000950 [10/12] sem_init(0x7ffd00000030, 1, 3) = 0",
            ]
        );
    }
}
