//! Messages on stderr, a command's output on stdout, and how durations are said in both. The tracer's stderr may be a pipe whose reader has gone (`2>&1 | grep -m1
//! ...`): `eprintln!` panics there, which ended the trace and killed a launched command before it
//! ran. A message that cannot be written is dropped instead, and the trace goes on.

use std::io::{self, BufWriter, StdoutLock, Write as _};

/// Writes one line to stderr, formatted as `eprintln!` does; a write error is ignored.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// Nanoseconds as people read them: 830 ns, 5.1 µs, 12.4 ms, 1.23 s.
pub fn duration(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

/// Bytes as people read them: 812 bytes, 64.0 KiB, 512.0 MiB, 1.0 GiB.
pub fn bytes(count: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    match UNITS.iter().find(|(unit, _)| count >= *unit) {
        Some((unit, name)) => format!("{:.1} {name}", count as f64 / *unit as f64),
        None => format!("{count} bytes"),
    }
}

/// `count` of `noun`, its plural as English makes it for ours: "1 file", "4 files",
/// "2 processes".
pub fn counted(count: impl Into<u64>, noun: &str) -> String {
    match count.into() {
        1 => format!("1 {noun}"),
        count if noun.ends_with('s') => format!("{count} {noun}es"),
        count => format!("{count} {noun}s"),
    }
}

/// A command's output could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to standard output")]
pub struct StdoutError(#[source] io::Error);

/// Writes a command's output to stdout, buffered, through `write`: every command's output goes
/// this way. As `head` expects of `cat`, output that nobody reads any more (a pipe whose reader
/// has gone) is not an error: the output ends there and the command succeeds. Any other error,
/// of `write` or of stdout, is returned.
pub fn to_stdout(
    write: impl FnOnce(&mut BufWriter<StdoutLock<'static>>) -> io::Result<()>,
) -> Result<(), StdoutError> {
    let mut out = BufWriter::new(io::stdout().lock());
    match write(&mut out).and_then(|()| out.flush()) {
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        written => written.map_err(StdoutError),
    }
}

/// Writes `text`, a command's output, to stdout as [`to_stdout`] does.
pub fn print(text: impl AsRef<[u8]>) -> Result<(), StdoutError> {
    to_stdout(|out| out.write_all(text.as_ref()))
}

/// How a command prints what it reports: for people, or one JSON object per line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(super::counted(1u64, "file"), "1 file");
        assert_eq!(super::counted(0u64, "lock"), "0 locks");
        assert_eq!(super::counted(2u64, "process"), "2 processes");
    }
}
