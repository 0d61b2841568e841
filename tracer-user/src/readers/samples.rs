//! The samples a report exports a trace's contention as, whichever the format (pprof profile,
//! folded stacks, flame graph): per lock of the kinds asked for, each call stack of its
//! contended waits, or of the releases that ended them, with how many waits and how long they
//! lasted. Made in one place, so that every format holds the same samples.

use std::path::Path;

use clap::ValueEnum;
use tracer_model::{
    analysis::{LockStats, StackStats, ThreadWaits},
    stack::{Stack, Stacks},
};

use super::report::{KindArg, lock_name, stack_frames};
use crate::{
    say::counted,
    symbolize::{Location, Symbols},
};

/// Which stacks the samples are of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum View {
    /// The stacks that waited (Go's block profile)
    #[default]
    Waiters,
    /// The stacks of the releases that ended the waits (Go's mutex profile)
    Releasers,
}

impl View {
    pub fn name(self) -> &'static str {
        match self {
            View::Waiters => "waiters",
            View::Releasers => "releasers",
        }
    }

    fn stacks(self, lock: &LockStats) -> impl Iterator<Item = (&u32, &StackStats)> {
        match self {
            View::Waiters => &lock.waiting_stacks,
            View::Releasers => &lock.releasing_stacks,
        }
        .iter()
    }
}

/// A lock's samples.
pub struct LockSamples<'a> {
    pub lock: &'a LockStats,
    /// What names it: its symbol, else its address.
    pub name: String,
    /// One per call stack, by stack id.
    pub stacks: Vec<StackSample<'a>>,
}

/// The waits of one lock with one call stack (or ended by releases made with it).
pub struct StackSample<'a> {
    pub stack: &'a Stack,
    /// Symbolized, innermost first.
    pub frames: Vec<Location>,
    /// Nanoseconds they lasted, in total.
    pub delay_ns: u64,
    /// Of them, by the thread that waited (or released), by thread id.
    pub threads: Vec<(u32, ThreadWaits)>,
}

/// The samples of `locks` of `kinds` that have stacks in `view`, by process and address.
pub fn contention_samples<'a>(
    locks: impl IntoIterator<Item = &'a LockStats>,
    symbols: &mut Symbols,
    stacks: &'a Stacks,
    kinds: &KindArg,
    view: View,
) -> Vec<LockSamples<'a>> {
    let mut locks: Vec<&LockStats> = locks
        .into_iter()
        .filter(|lock| kinds.shows(lock.kind))
        .collect();
    locks.sort_by_key(|lock| (lock.pid, lock.address));
    locks
        .into_iter()
        .filter_map(|lock| {
            let mut by_stack: Vec<(u32, &Stack, &StackStats)> = view
                .stacks(lock)
                .filter_map(|(&id, stats)| Some((id, stacks.shown(id)?, stats)))
                .collect();
            if by_stack.is_empty() {
                return None;
            }
            by_stack.sort_unstable_by_key(|&(id, ..)| id);
            let name = lock_name(lock, symbols, stacks);
            Some(LockSamples {
                lock,
                name: name
                    .symbol
                    .unwrap_or_else(|| format!("{:#x}", name.address)),
                stacks: by_stack
                    .into_iter()
                    .map(|(_, stack, stats)| StackSample {
                        stack,
                        frames: stack_frames(stack, symbols),
                        delay_ns: stats.wait_total_ns,
                        threads: {
                            let mut threads: Vec<(u32, ThreadWaits)> =
                                stats.threads.iter().map(|(&t, &w)| (t, w)).collect();
                            threads.sort_unstable_by_key(|&(lwpid, _)| lwpid);
                            threads
                        },
                    })
                    .collect(),
            })
        })
        .collect()
}

/// What a command that wrote `samples` of `view`, of the `kinds` asked for, says it did: `N
/// samples (waiters view) on N locks in FILE` (or without the file, printed), and why there are
/// none.
pub fn summary(
    samples: &[LockSamples<'_>],
    view: View,
    kinds: &KindArg,
    path: Option<&Path>,
) -> String {
    let count: usize = samples.iter().map(|lock| lock.stacks.len()).sum();
    let mut summary = format!(
        "{} ({} view) on {}",
        counted(count as u64, "sample"),
        view.name(),
        counted(samples.len() as u64, "lock")
    );
    if let Some(path) = path {
        summary += &format!(" in {}", path.display());
    }
    if count == 0 {
        summary += match kinds.kind {
            Some(_) => ": no contended wait of the kinds asked for (--kind) has a call stack",
            None => {
                ": no contended wait has a call stack (stacks are taken with --contended, or \
                 --stacks on)"
            }
        };
    }
    summary
}
