//! Errors that the user caused and can fix (printed as one line, exit status 2), and how any
//! error is said in one line.

use std::{error::Error, fmt};

/// Bad input: an unknown category, a missing pid, an unwritable directory.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Returns early with a [`UsageError`] built like `format!`.
macro_rules! usage_bail {
    ($($arg:tt)*) => {
        return Err($crate::error::UsageError(format!($($arg)*)).into())
    };
}

/// Exit status for bad input, as clap and most Unix tools use.
pub const EXIT_USAGE: i32 = 2;
/// Exit status for a failure that is not the user's input.
pub const EXIT_FAILURE: i32 = 1;

/// The system calls' errors among `error` and its sources, outermost first: what the kernel
/// said, for a caller to tell one failure from another (or give its errno in an event).
pub fn io_errors<'a>(error: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a std::io::Error> {
    std::iter::successors(Some(error), |&e| e.source())
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
}

/// An error and its sources in one line, outermost first: "cannot load BPF program thr_entry:
/// bpf(BPF_PROG_LOAD) failed: Permission denied (os error 13)". Each error says what failed
/// and leaves why to its source, so every link is said once (as anyhow's `{:#}` says a chain).
pub struct OneLine<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for OneLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}
