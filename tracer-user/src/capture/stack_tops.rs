//! Where each thread's stack begins, told to the BPF side (`STACK_TOPS`), so that a record's
//! stack copy takes the thread's live stack alone: a few hundred bytes for most waits, where
//! the most a copy may take (`MAX_STACK_BYTES`) would fill the rings. Learnt from the stacks
//! unwound: the highest address an unwind to the thread's start read is where the copies of
//! that thread need to reach.

use std::collections::HashMap as Told;

use aya::maps::{HashMap, MapData};

/// More threads told than the BPF side's map holds (an LRU map) are forgotten here at once:
/// telling a thread again costs one update.
const MOST_TOLD: usize = 16384;

pub struct StackTops {
    map: HashMap<MapData, u32, u64>,
    /// What the map was told of each thread, so that it is told only what changed.
    told: Told<u32, u64>,
}

impl StackTops {
    pub fn new(map: HashMap<MapData, u32, u64>) -> Self {
        StackTops {
            map,
            told: Told::new(),
        }
    }

    /// Thread `lwpid`'s stack begins at `top` (exclusive).
    pub fn learn(&mut self, lwpid: u32, top: u64) {
        if self.told.get(&lwpid) == Some(&top) {
            return;
        }
        if self.told.len() >= MOST_TOLD {
            self.told.clear();
        }
        // Unwritten, the thread's copies stay as large as a copy may be: no record is lost.
        if self.map.insert(lwpid, top, 0).is_ok() {
            self.told.insert(lwpid, top);
        }
    }

    /// What was told of thread `lwpid` cut its stack short (its stack moved, or a new thread
    /// has its id): its copies are as large as they may be again, until it is learnt anew.
    pub fn forget(&mut self, lwpid: u32) {
        self.told.remove(&lwpid);
        // Absent already (the LRU map let it go): nothing to undo.
        let _ = self.map.remove(&lwpid);
    }
}
