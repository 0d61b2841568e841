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

/// The stacks of a stream so far, by id.
#[derive(Clone, Debug, Default)]
pub struct Stacks {
    by_id: HashMap<u32, Stack>,
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

    /// The stack a record names (`None` for 0, or an id no event has given).
    pub fn get(&self, id: u32) -> Option<&Stack> {
        self.by_id.get(&id)
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
}
