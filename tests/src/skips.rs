//! Futex calls the kernel did not show the tracer's programs: it skips a futex program on a
//! CPU where a run of it is preempted, which the tracer counts and marks lost. A test whose
//! exact counts such a skip can spoil checks its runs through [`accounted`].

use std::{cell::Cell, path::Path};

use tracer_model::{
    event::{Event, LossSource, SystemEvent, SystemKind},
    log::LogReader,
};

/// How many times a check of a traced run is made when the kernel skipped futex programs in
/// the runs (see [`accounted`]).
const ATTEMPTS: u32 = 3;

thread_local! {
    /// The futex calls the kernel skipped the programs of in this thread's last traced run,
    /// as its log marks them.
    static UNSEEN: Cell<u64> = const { Cell::new(0) };
}

/// Runs `check` (traced runs and what is asserted of them) until it passes, at most
/// [`ATTEMPTS`] times. A cold first run of a program's code under emulation (the kernel
/// guests) is long enough for a timer tick to preempt a futex program, so an attempt may fall
/// short only where the tracer reported futex calls unseen ([`note_unseen`]); in a run with
/// none, every count is exact, and a failure fails the test. Attempts that all fell short, each
/// with calls unseen, are said.
pub fn accounted(what: &str, check: impl Fn()) {
    for attempt in 1..=ATTEMPTS {
        UNSEEN.set(0);
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(&check)) {
            Ok(()) => return,
            Err(failure) if UNSEEN.get() == 0 => std::panic::resume_unwind(failure),
            Err(_) => eprintln!(
                "{what}: attempt {attempt} of {ATTEMPTS} fell short where the tracer reported \
                 {} futex calls unseen (the kernel skipped its programs)",
                UNSEEN.get()
            ),
        }
    }
}

/// Notes, for [`accounted`], the futex calls a traced run did not see, and returns them: those
/// its log marks, or those the tracer `said` were (once in a guest the log had no marker where
/// the tracer said calls were unseen: what the user was told counts).
pub fn note_unseen(log: &Path, said: &str) -> u64 {
    let unseen = in_log(log).max(said_unseen(said));
    UNSEEN.set(unseen);
    unseen
}

/// The futex calls a log marks unseen.
fn in_log(log: &Path) -> u64 {
    let reader = LogReader::open(log).expect("a readable log");
    reader
        .events()
        .map(|event| event.expect("an event"))
        .filter_map(|event| match event {
            Event::System(SystemEvent {
                kind:
                    SystemKind::Overflow {
                        lost,
                        source: LossSource::Skipped,
                        ..
                    },
                ..
            }) => Some(lost),
            _ => None,
        })
        .sum()
}

/// The futex calls the tracer said were unseen, in the lines it wrote to stderr.
fn said_unseen(said: &str) -> u64 {
    said.lines()
        .filter_map(|line| line.strip_prefix("thrtrace-bpf: up to "))
        .filter_map(|rest| rest.split_once(" futex calls unseen"))
        .map(|(count, _)| count.parse::<u64>().expect("a count"))
        .sum()
}
