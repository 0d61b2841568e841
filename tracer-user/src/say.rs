//! Messages on stderr, and a command's output on stdout. The tracer's stderr may be a pipe whose reader has gone (`2>&1 | grep -m1
//! ...`): `eprintln!` panics there, which ended the trace and killed a launched command before it
//! ran. A message that cannot be written is dropped instead, and the trace goes on.

/// Writes one line to stderr, formatted as `eprintln!` does; a write error is ignored.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// Writes a command's output to stdout. As `head` expects, output that nobody reads any more is
/// not an error: a write error is ignored.
pub fn print(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}
