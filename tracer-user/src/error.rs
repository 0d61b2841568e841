//! Errors that the user caused and can fix: printed as one line, exit status 2.

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
