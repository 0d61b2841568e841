//! The samples a report exports a trace's contention as, whichever the format (pprof profile,
//! folded stacks, flame graph): per lock of the kinds asked for, each call stack of its
//! contended waits, or of the releases that ended them, with how many waits and how long they
//! lasted. Made in one place, so that every format holds the same samples.

use std::{path::Path, time::Duration};

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
    /// One per call stack, by stack id; then, in the waiters view, one per caller of its
    /// waits shorter than `--min-wait`, by address.
    pub stacks: Vec<StackSample>,
}

/// The waits of one lock with one call stack (or ended by releases made with it).
pub struct StackSample {
    /// The process it is of.
    pub pid: u32,
    /// Symbolized, innermost first.
    pub frames: Vec<Location>,
    /// For waits shorter than `--min-wait`, whose stacks were not recorded (`frames` is their
    /// caller alone), the frame that stands for the rest, innermost: it says so.
    pub unrecorded: Option<String>,
    /// Nanoseconds they lasted, in total.
    pub delay_ns: u64,
    /// Of them, by the thread that waited (or released), by thread id.
    pub threads: Vec<(u32, ThreadWaits)>,
}

/// The samples of `locks` of `kinds` that have stacks in `view` (or, in the waiters view,
/// waits shorter than `--min-wait`), by process and address.
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
            by_stack.sort_unstable_by_key(|&(id, ..)| id);
            let mut samples: Vec<StackSample> = by_stack
                .into_iter()
                .map(|(_, stack, stats)| StackSample {
                    pid: stack.pid,
                    frames: stack_frames(stack, symbols),
                    unrecorded: None,
                    delay_ns: stats.wait_total_ns,
                    threads: by_thread(stats),
                })
                .collect();
            if view == View::Waiters {
                samples.extend(short_wait_samples(lock, symbols));
            }
            if samples.is_empty() {
                return None;
            }
            let name = lock_name(lock, symbols, stacks);
            Some(LockSamples {
                lock,
                name: name
                    .symbol
                    .unwrap_or_else(|| format!("{:#x}", name.address)),
                stacks: samples,
            })
        })
        .collect()
}

/// The waits of `lock` shorter than `--min-wait`, a sample per caller: their stacks were not
/// recorded, and a frame says so above the caller, so that the profile's totals stay the
/// report's.
fn short_wait_samples<'a>(
    lock: &'a LockStats,
    symbols: &'a mut Symbols,
) -> impl Iterator<Item = StackSample> + 'a {
    let mut callers: Vec<(u64, &StackStats)> = lock
        .short_waits_by_caller
        .iter()
        .map(|(&caller, stats)| (caller, stats))
        .collect();
    callers.sort_unstable_by_key(|&(caller, _)| caller);
    let unrecorded = format!(
        "[stack not recorded: waits under {}, --min-wait]",
        humantime::format_duration(Duration::from_nanos(lock.short_waits.below_ns))
    );
    callers.into_iter().map(move |(caller, stats)| StackSample {
        pid: lock.pid,
        frames: match caller {
            0 => Vec::new(),
            _ => vec![symbols.locate(lock.pid, caller)],
        },
        unrecorded: Some(unrecorded.clone()),
        delay_ns: stats.wait_total_ns,
        threads: by_thread(stats),
    })
}

/// `stats`' waits by thread, by thread id.
fn by_thread(stats: &StackStats) -> Vec<(u32, ThreadWaits)> {
    let mut threads: Vec<(u32, ThreadWaits)> =
        stats.threads.iter().map(|(&t, &w)| (t, w)).collect();
    threads.sort_unstable_by_key(|&(lwpid, _)| lwpid);
    threads
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
