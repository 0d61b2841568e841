//! Call stacks in a stream. A trace taken with stacks holds each distinct stack of a process
//! once, as a `thrtrace_stack` event ([`SystemKind::Stack`]) before the first record that names
//! it by id ([`crate::TraceRecord::stack`]); [`Stacks`] keeps them as a reader meets them.

use std::collections::HashMap;

use crate::event::{SystemEvent, SystemKind};

/// One call stack of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// The process whose addresses the frames are.
    pub pid: u32,
    /// Innermost first: the probed instruction, then each caller's return address.
    pub frames: Vec<u64>,
    /// Empty when the stack reaches its thread's start; otherwise why it stops at its last
    /// frame (the stack copied ended, an address in no mapped file, ...).
    pub end: String,
}

impl Stack {
    /// Whether it reaches its thread's start.
    pub fn is_whole(&self) -> bool {
        self.end.is_empty()
    }
}

/// Of the records that were to carry a call stack, how many carry one that reaches their
/// thread's start: the share a user reads a profile's completeness by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StackShare {
    /// Records that were to carry a stack, with one or without (left out, `end` says why).
    pub records: u64,
    /// Of them, those whose stack reaches the thread's start.
    pub whole: u64,
}

impl StackShare {
    /// One more record that was to carry a stack; `whole`: it reaches the thread's start.
    pub fn count(&mut self, whole: bool) {
        self.records += 1;
        self.whole += u64::from(whole);
    }

    /// A record counted before is not written after all.
    pub fn uncount(&mut self, whole: bool) {
        self.records -= 1;
        self.whole -= u64::from(whole);
    }

    /// Whether every record's stack is whole (so too when none was to carry one).
    pub fn is_complete(&self) -> bool {
        self.whole == self.records
    }

    /// "24330 of 24530 whole, to their thread's start (99.1%)". The percentage is rounded
    /// down, so that 100% means every one.
    pub fn figures(&self) -> String {
        let tenths = (self.whole * 1000)
            .checked_div(self.records)
            .unwrap_or(1000);
        format!(
            "{} of {} whole, to their thread's start ({}.{}%)",
            self.whole,
            self.records,
            tenths / 10,
            tenths % 10
        )
    }
}

/// "call stacks: 24330 of 24530 whole, to their thread's start (99.1%)".
impl std::fmt::Display for StackShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "call stacks: {}", self.figures())
    }
}

/// The records that came without the stack they were to carry, left out as the tracer fell
/// behind (their CPU's ring too full for the copy), and the rate it fell behind at: the most
/// records of one second (of the clock's) in which one was left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LeftOut {
    /// Records that came without their stack.
    pub records: u64,
    /// The most records of a second in which a record was left out (0: none was).
    pub peak_per_second: u64,
    /// The last few seconds counted, each in the slot of its number modulo their count: the
    /// records come nearly in time order (one drawn late is written after later ones), and
    /// each is counted in its own second.
    #[serde(skip)]
    seconds: [Option<Second>; SECONDS_KEPT],
}

/// How many seconds back a record can be counted in its own second.
const SECONDS_KEPT: usize = 4;

/// One second's count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Second {
    /// Since the epoch.
    number: i64,
    records: u64,
    /// Whether a record of it was left out (since the count restarted).
    left_out: bool,
}

impl LeftOut {
    /// One more record, stamped `time_ns`; `left_out`: it came without its stack. A record
    /// whose second's slot holds a later second by now (drawn that late) adds to the records
    /// left out, not to the rate.
    pub fn count(&mut self, time_ns: i64, left_out: bool) {
        const SECOND_NS: i64 = 1_000_000_000;
        self.records += u64::from(left_out);
        let number = time_ns.div_euclid(SECOND_NS);
        let slot = &mut self.seconds[number.rem_euclid(SECONDS_KEPT as i64) as usize];
        let second = match slot {
            Some(second) if second.number == number => second,
            Some(second) if second.number > number => return,
            _ => slot.insert(Second {
                number,
                records: 0,
                left_out: false,
            }),
        };
        second.records += 1;
        second.left_out |= left_out;
        if second.left_out {
            self.peak_per_second = self.peak_per_second.max(second.records);
        }
    }

    /// Counts anew from here (a profile's next interval), the seconds counting kept: a second
    /// the cut falls in is counted whole, its records left out only from here.
    pub fn restart(&mut self) {
        self.records = 0;
        self.peak_per_second = 0;
        for second in self.seconds.iter_mut().flatten() {
            second.left_out = false;
        }
    }

    /// "0.01% of 399976, in seconds of up to 35394 records": the share of the `of` records that
    /// were to carry a stack, and the rate.
    pub fn figures(&self, of: u64) -> String {
        let share = self.records as f64 * 100.0 / of.max(1) as f64;
        let share = match share {
            0.0 => "0%".to_owned(),
            share if share < 0.01 => "under 0.01%".to_owned(),
            share => format!("{share:.2}%"),
        };
        format!(
            "{share} of {of}, in seconds of up to {} records",
            self.peak_per_second
        )
    }
}

/// The stacks of a stream so far, by id, the share of the records so far that name a whole
/// one, and those left out.
#[derive(Clone, Debug, Default)]
pub struct Stacks {
    by_id: HashMap<u32, Stack>,
    share: StackShare,
    left_out: LeftOut,
}

impl Stacks {
    /// Keeps `event` if it is a stack; returns whether it was.
    pub fn take(&mut self, event: &SystemEvent) -> bool {
        let SystemKind::Stack { id, frames, end } = &event.kind else {
            return false;
        };
        let stack = Stack {
            pid: event.pid,
            frames: frames.clone(),
            end: end.clone(),
        };
        self.by_id.insert(*id, stack);
        true
    }

    /// Process `pid` has exited: its stacks will not be named again.
    pub fn forget(&mut self, pid: u32) {
        self.by_id.retain(|_, stack| stack.pid != pid);
    }

    /// Every frame of every stack kept, with its process: `(pid, address)`.
    pub fn frames(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.by_id
            .values()
            .flat_map(|stack| stack.frames.iter().map(|&frame| (stack.pid, frame)))
    }

    /// The stack a record names (`None` for 0, or an id no event has given).
    pub fn get(&self, id: u32) -> Option<&Stack> {
        self.by_id.get(&id)
    }

    /// The stack a record names, if it is one to show in a profile or a table of stacks: the
    /// stack of records whose copy was left out has no frame, and stands in none (the share of
    /// whole stacks counts it).
    pub fn shown(&self, id: u32) -> Option<&Stack> {
        self.get(id).filter(|stack| !stack.frames.is_empty())
    }

    /// A record that names stack `id` (0: it was to carry none), stamped `time_ns`, into the
    /// share and the records left out; an id no event has given (a looping log overwrote it)
    /// is not counted as one to carry a stack.
    pub fn count_record(&mut self, id: u32, time_ns: i64) {
        let stack = self.by_id.get(&id);
        if let Some(stack) = stack {
            self.share.count(stack.is_whole());
        }
        let left_out = stack.is_some_and(|stack| stack.frames.is_empty());
        self.left_out.count(time_ns, left_out);
    }

    /// Of the records counted, those that were to carry a stack and those whose stack is whole.
    pub fn share(&self) -> StackShare {
        self.share
    }

    /// Of the records counted, those left out and the rate they were left out at.
    pub fn left_out(&self) -> LeftOut {
        self.left_out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_stack_events_by_id_and_nothing_else() {
        let mut stacks = Stacks::default();
        let kind = SystemKind::Stack {
            id: 3,
            frames: vec![0x1000, 0x2000],
            end: String::new(),
        };
        assert!(stacks.take(&SystemEvent::of_process(5, 42, 0, kind)));
        assert!(!stacks.take(&SystemEvent::new(6, SystemKind::Resume)));
        let stack = stacks.get(3).expect("kept");
        assert_eq!(
            (stack.pid, stack.frames.as_slice()),
            (42, &[0x1000, 0x2000][..])
        );
        assert!(stack.is_whole());
        assert_eq!(stacks.get(0), None);
        stacks.forget(41);
        assert!(stacks.get(3).is_some());
        stacks.forget(42);
        assert_eq!(stacks.get(3), None);
    }

    #[test]
    fn records_naming_stacks_are_counted_whole_or_not() {
        let mut stacks = Stacks::default();
        let stack = |id, end: &str| {
            let kind = SystemKind::Stack {
                id,
                frames: vec![0x1000],
                end: end.to_owned(),
            };
            SystemEvent::of_process(5, 42, 0, kind)
        };
        stacks.take(&stack(1, ""));
        stacks.take(&stack(2, "left out"));
        for id in [0, 1, 1, 2, 0, 3] {
            stacks.count_record(id, 0);
        }
        let share = StackShare {
            records: 3,
            whole: 2,
        };
        assert_eq!(stacks.share(), share);
        // Frames, though it is not whole: not left out.
        assert_eq!(stacks.left_out().records, 0);
    }

    /// The rate said is the most records of a second in which one was left out: a busier
    /// second with none left out, or the records of another second, do not count.
    #[test]
    fn records_left_out_are_counted_with_the_busiest_second_they_came_in() {
        const SECOND: i64 = 1_000_000_000;
        let mut left_out = LeftOut::default();
        // Second 5: four records, one left out. Second 6: ten, none. Second 8: two, both.
        for (second, records, left) in [(5, 4, 1), (6, 10, 0), (8, 2, 2)] {
            for n in 0..records {
                left_out.count(second * SECOND + n * 1000, n < left);
            }
        }
        assert_eq!((left_out.records, left_out.peak_per_second), (3, 4));
        assert_eq!(
            left_out.figures(16),
            "18.75% of 16, in seconds of up to 4 records"
        );
        // Times before the epoch fall in their own second too, and any time is counted.
        let mut before = LeftOut::default();
        before.count(-1, true);
        before.count(-SECOND, false);
        before.count(0, false);
        before.count(i64::MIN, true);
        before.count(i64::MAX, false);
        assert_eq!(before.peak_per_second, 2);
        // A record drawn late, written after those of the next second, counts in its own;
        // one older than the seconds kept, in none.
        let mut late = LeftOut::default();
        for (second, left_out) in [
            (10, true),
            (10, false),
            (11, false),
            (10, false),
            (11, true),
        ] {
            late.count(second * SECOND, left_out);
        }
        assert_eq!(late.peak_per_second, 3);
        late.count(14 * SECOND, false);
        late.count(10 * SECOND, true);
        assert_eq!((late.records, late.peak_per_second), (3, 3));
        // A profile's next interval: the second it starts in is counted whole, the records
        // left out from there.
        late.restart();
        late.count(14 * SECOND, false);
        assert_eq!((late.records, late.peak_per_second), (0, 0));
        late.count(14 * SECOND, true);
        assert_eq!((late.records, late.peak_per_second), (1, 3));
        assert_eq!(
            late.figures(200_000),
            "under 0.01% of 200000, in seconds of up to 3 records"
        );
    }

    #[test]
    fn a_share_says_how_many_stacks_are_whole_rounded_down() {
        let mut share = StackShare::default();
        assert!(share.is_complete());
        for whole in [true; 999].into_iter().chain([false]) {
            share.count(whole);
        }
        assert!(!share.is_complete());
        assert_eq!(
            share.to_string(),
            "call stacks: 999 of 1000 whole, to their thread's start (99.9%)"
        );
        share.count(false);
        assert_eq!(
            share.to_string(),
            "call stacks: 999 of 1001 whole, to their thread's start (99.8%)"
        );
    }
}
