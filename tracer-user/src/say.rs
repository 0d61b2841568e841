//! Messages on stderr, a command's output on stdout, and how durations are said in both. The tracer's stderr may be a pipe whose reader has gone (`2>&1 | grep -m1
//! ...`): `eprintln!` panics there, which ended the trace and killed a launched command before it
//! ran. A message that cannot be written is dropped instead, and the trace goes on.

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

/// Writes a command's output to stdout. As `head` expects, output that nobody reads any more is
/// not an error: a write error is ignored.
pub fn print(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// How a command prints what it reports: for people, or one JSON object per line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}
