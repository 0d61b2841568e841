//! The samples a report exports a trace's contention as, whichever the format (pprof profile,
//! folded stacks, flame graph): per lock of the kinds asked for, each call stack of its
//! contended waits, or of the releases that ended them, with how many waits and how long they
//! lasted. Made in one place, so that every format holds the same samples.

use std::{path::Path, time::Duration};

use clap::ValueEnum;
use tracer_model::{
    analysis::{LockStats, StackStats, ThreadWaits},
    stack::{LeftOut, Stack, Stacks},
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

    /// `lock`'s waits in this view whose stacks were left out, by caller.
    fn left_out(self, lock: &LockStats) -> impl Iterator<Item = (&u64, &StackStats)> {
        match self {
            View::Waiters => &lock.left_out_waiting,
            View::Releasers => &lock.left_out_releasing,
        }
        .iter()
    }
}

/// A lock's samples.
pub struct LockSamples<'a> {
    pub lock: &'a LockStats,
    /// What names it: its symbol, else its address.
    pub name: String,
    /// One per call stack, by stack id; then one per caller of waits whose stacks were left
    /// out that no recorded stack passes through, and, in the waiters view, one per caller of
    /// its waits shorter than `--min-wait`, by address.
    pub stacks: Vec<StackSample>,
}

/// The waits of one lock with one call stack (or ended by releases made with it).
pub struct StackSample {
    /// The process it is of.
    pub pid: u32,
    /// Symbolized, innermost first.
    pub frames: Vec<Location>,
    /// For waits whose stacks were not recorded (shorter than `--min-wait`, or left out;
    /// `frames` is their caller alone), the frame that stands for the rest, innermost: it says
    /// so.
    pub unrecorded: Option<String>,
    /// Nanoseconds they lasted, in total.
    pub delay_ns: u64,
    /// Of them, by the thread that waited (or released), by thread id.
    pub threads: Vec<(u32, ThreadWaits)>,
}

/// The samples of `locks` of `kinds` that have stacks in `view` (or, in the waiters view,
/// waits shorter than `--min-wait`), by process and address. Waits whose stacks were left out
/// (the tracer was behind) are weighed onto the recorded stacks of their caller
/// (`weigh_left_out`), so that every total stays the report's.
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
            let unweighed = weigh_left_out(&mut samples, view.left_out(lock));
            samples.extend(caller_samples(lock, unweighed, LEFT_OUT_FRAME, symbols));
            if view == View::Waiters {
                let short = lock.short_waits_by_caller.iter();
                let unrecorded = format!(
                    "[stack not recorded: waits under {}, --min-wait]",
                    humantime::format_duration(Duration::from_nanos(lock.short_waits.below_ns))
                );
                samples.extend(caller_samples(lock, short, &unrecorded, symbols));
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

/// The frame that stands for the stack of waits whose record came without it.
const LEFT_OUT_FRAME: &str = "[stack left out: the tracer was behind, see --buffer-kib]";

/// Waits of `lock` whose stacks were not recorded, `by_caller`, a sample per caller: a frame
/// that says so, `unrecorded`, above the caller, so that the profile's totals stay the
/// report's.
fn caller_samples<'a>(
    lock: &LockStats,
    by_caller: impl IntoIterator<Item = (&'a u64, &'a StackStats)>,
    unrecorded: &str,
    symbols: &mut Symbols,
) -> Vec<StackSample> {
    let mut callers: Vec<(u64, &StackStats)> = by_caller
        .into_iter()
        .map(|(&caller, stats)| (caller, stats))
        .collect();
    callers.sort_unstable_by_key(|&(caller, _)| caller);
    callers
        .into_iter()
        .map(|(caller, stats)| StackSample {
            pid: lock.pid,
            frames: match caller {
                0 => Vec::new(),
                _ => vec![symbols.locate(lock.pid, caller)],
            },
            unrecorded: Some(unrecorded.to_owned()),
            delay_ns: stats.wait_total_ns,
            threads: by_thread(stats),
        })
        .collect()
}

/// Weighs the waits whose stacks were left out, by caller, onto the `samples` of recorded
/// stacks that pass through that caller, in proportion to the waits and time each recorded
/// stack holds: the stacks stand for the waits the tracer could not copy theirs for, and the
/// profile's totals stay the report's. Each thread's waits go to that thread's share of the
/// stacks. Returns the callers no recorded stack passes through.
fn weigh_left_out<'a>(
    samples: &mut [StackSample],
    left_out: impl Iterator<Item = (&'a u64, &'a StackStats)>,
) -> Vec<(&'a u64, &'a StackStats)> {
    // What each recorded stack holds of its own, before any caller's waits are weighed on.
    let counts: Vec<u64> = samples.iter().map(StackSample::count).collect();
    let times: Vec<u64> = samples.iter().map(|sample| sample.delay_ns).collect();
    let mut unweighed = Vec::new();
    let mut callers: Vec<(&u64, &StackStats)> = left_out.collect();
    callers.sort_unstable_by_key(|&(caller, _)| *caller);
    for (caller, stats) in callers {
        // Any frame: a futex record's caller is its probed instruction, frame 0.
        let through: Vec<usize> = match *caller {
            0 => Vec::new(),
            address => (0..samples.len())
                .filter(|&i| samples[i].frames.iter().any(|f| f.address == address))
                .collect(),
        };
        if through.is_empty() {
            unweighed.push((caller, stats));
            continue;
        }
        let threads = by_thread(stats);
        let by_stack = |of: fn(&ThreadWaits) -> u64, weights: &[u64]| {
            let weights: Vec<u64> = through.iter().map(|&i| weights[i]).collect();
            let units: Vec<u64> = threads.iter().map(|(_, waits)| of(waits)).collect();
            split(&units, &weights)
        };
        let count_shares = by_stack(|waits| waits.count, &counts);
        let time_shares = by_stack(|waits| waits.wait_total_ns, &times);
        for (t, &(lwpid, _)) in threads.iter().enumerate() {
            for (s, &i) in through.iter().enumerate() {
                let waits = ThreadWaits {
                    count: count_shares[t][s],
                    wait_total_ns: time_shares[t][s],
                };
                samples[i].add(lwpid, waits);
            }
        }
    }
    unweighed
}

/// Splits `units` (each thread's, in order) over parts of `weights` (all 0: even): the units
/// laid end to end, thread after thread, and cut where each part's share of them all ends
/// (rounded down). Each part gets its share to within one unit, each thread exactly its own
/// units. By thread, then part.
fn split(units: &[u64], weights: &[u64]) -> Vec<Vec<u64>> {
    let even = weights.iter().all(|&w| w == 0);
    let weight = |w: u64| u128::from(if even { 1 } else { w });
    let sum: u128 = weights.iter().map(|&w| weight(w)).sum();
    let total = u128::from(units.iter().sum::<u64>());
    let mut before = 0;
    let ends: Vec<u64> = weights
        .iter()
        .map(|&w| {
            before += weight(w);
            (total * before / sum) as u64
        })
        .collect();
    let mut start = 0;
    units
        .iter()
        .map(|&n| {
            let (from, to) = (start, start + n);
            start = to;
            let mut part_start = 0;
            ends.iter()
                .map(|&part_end| {
                    let share = to.min(part_end).saturating_sub(from.max(part_start));
                    part_start = part_end;
                    share
                })
                .collect()
        })
        .collect()
}

impl StackSample {
    /// How many waits it stands for.
    fn count(&self) -> u64 {
        self.threads.iter().map(|(_, waits)| waits.count).sum()
    }

    /// `waits` more, by `lwpid`.
    fn add(&mut self, lwpid: u32, waits: ThreadWaits) {
        if waits == ThreadWaits::default() {
            return;
        }
        self.delay_ns += waits.wait_total_ns;
        match self.threads.binary_search_by_key(&lwpid, |&(t, _)| t) {
            Ok(i) => self.threads[i].1 += waits,
            Err(i) => self.threads.insert(i, (lwpid, waits)),
        }
    }
}

/// `stats`' waits by thread, by thread id.
fn by_thread(stats: &StackStats) -> Vec<(u32, ThreadWaits)> {
    let mut threads: Vec<(u32, ThreadWaits)> =
        stats.threads.iter().map(|(&t, &w)| (t, w)).collect();
    threads.sort_unstable_by_key(|&(lwpid, _)| lwpid);
    threads
}

/// What a profile of `samples` says of the waits whose stacks were left out, if any: how many
/// of how many, the rate the tracer fell behind at (of the records of `left_out`), and how
/// they are shown.
pub fn left_out_note(
    samples: &[LockSamples<'_>],
    view: View,
    left_out: &LeftOut,
) -> Option<String> {
    let waits_left_out: u64 = samples
        .iter()
        .flat_map(|lock| view.left_out(lock.lock))
        .map(|(_, stats)| stats.count)
        .sum();
    let all: u64 = samples
        .iter()
        .flat_map(|lock| lock.stacks.iter())
        .map(StackSample::count)
        .sum();
    let whose = match view {
        View::Waiters => format!("the stacks of {waits_left_out} of {all} waits"),
        View::Releasers => {
            format!("the stacks of the releases that ended {waits_left_out} of {all} waits")
        }
    };
    let rate = match left_out.peak_per_second {
        0 => String::new(),
        peak => format!(", in seconds of up to {peak} records"),
    };
    (waits_left_out > 0).then(|| {
        format!(
            "{whose} were left out (the tracer was behind{rate}): weighed onto the recorded \
             stacks through their callers, or else under their callers"
        )
    })
}

/// What a command that wrote `samples` of `view`, of the `kinds` asked for, says it did: `N
/// samples (waiters view) on N locks in FILE` (or without the file, printed), the waits whose
/// stacks were `left_out`, and why there are no samples.
pub fn summary(
    samples: &[LockSamples<'_>],
    view: View,
    kinds: &KindArg,
    path: Option<&Path>,
    left_out: &LeftOut,
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
    if let Some(note) = left_out_note(samples, view, left_out) {
        summary += &format!("; {note}");
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Many threads' single units over even parts go half to each, not all to the first; each
    /// thread's units add up to its own, each part's to its share.
    #[test]
    fn units_split_thread_after_thread_at_each_parts_share() {
        let eight = split(&[1; 8], &[1, 1]);
        assert!(eight.iter().all(|parts| parts.iter().sum::<u64>() == 1));
        let by_part: Vec<u64> = (0..2).map(|p| eight.iter().map(|t| t[p]).sum()).collect();
        assert_eq!(by_part, [4, 4]);
        assert_eq!(
            split(&[8_000, 2], &[10, 30]),
            [vec![2_000, 6_000], vec![0, 2]]
        );
        assert_eq!(split(&[3], &[0, 0, 0]), [vec![1, 1, 1]]);
    }
}
