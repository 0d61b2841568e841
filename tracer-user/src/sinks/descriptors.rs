//! How many trace files may be open at once. A traced host or JVM has thousands of threads,
//! each with a file of its own, and a descriptor limit of 1024 is common: the tracer raises its
//! soft limit to the hard one, and keeps its open files to a share of what is left.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Never more open files than this, however high the limit: each holds a 64 KiB buffer.
const MOST_OPEN_FILES: usize = 1024;

/// Raises the soft limit on open descriptors to the hard limit (a failure leaves it as it was:
/// the budget below is taken from whatever it is).
pub fn raise_limit() {
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        );
    }
}

/// How many trace files may be open at once: half of the descriptors not in use now, so that
/// what the session opens later (a pidfd per process, links for new libraries) has the rest.
pub fn open_file_budget() -> usize {
    let limit = getrlimit(Resource::Nofile)
        .current
        .map_or(MOST_OPEN_FILES * 2, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        });
    let in_use = std::fs::read_dir("/proc/self/fd").map_or(0, std::iter::Iterator::count);
    (limit.saturating_sub(in_use) / 2).clamp(1, MOST_OPEN_FILES)
}
