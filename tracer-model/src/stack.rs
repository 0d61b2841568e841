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

/// The stacks of a stream so far, by id, and the share of the records so far that name a
/// whole one.
#[derive(Clone, Debug, Default)]
pub struct Stacks {
    by_id: HashMap<u32, Stack>,
    share: StackShare,
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

    /// A record that names stack `id` (0: it was to carry none), into the share; an id no
    /// event has given (a looping log overwrote it) is not counted.
    pub fn count_record(&mut self, id: u32) {
        if let Some(stack) = self.get(id) {
            let whole = stack.is_whole();
            self.share.count(whole);
        }
    }

    /// Of the records counted, those that were to carry a stack and those whose stack is whole.
    pub fn share(&self) -> StackShare {
        self.share
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
            stacks.count_record(id);
        }
        let share = StackShare {
            records: 3,
            whole: 2,
        };
        assert_eq!(stacks.share(), share);
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
