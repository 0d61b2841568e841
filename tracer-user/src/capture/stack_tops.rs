//! Where each thread's stack begins, told to the BPF side (`STACK_TOPS`), so that a record's
//! stack copy takes the thread's live stack alone: a few hundred bytes for most waits, where
//! the most a copy may take (`MAX_STACK_BYTES`) would fill the rings. Learnt from the stacks
//! unwound: the highest word an unwind to the thread's start read is where that thread's
//! copies need to reach. An unwind that stopped early (generated code, a file without unwind
//! information) tells as much for as long as no later stack of the thread needs more.

use std::collections::{HashMap as Told, HashSet};

use aya::maps::{HashMap, MapData};

/// More threads told than the BPF side's map holds (an LRU map) are forgotten here at once:
/// telling a thread again costs one update.
const MOST_TOLD: usize = 16384;

/// What the BPF side was told of a thread.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Top {
    address: u64,
    /// From an unwind that stopped early, not at the thread's start.
    partly: bool,
}

pub struct StackTops {
    map: HashMap<MapData, u32, u64>,
    /// What the map was told of each thread, so that it is told only what changed.
    told: Told<u32, Top>,
    /// Threads whose early stop, told, cut a later stack short: told only whole stacks' tops.
    distrusted: HashSet<u32>,
}

impl StackTops {
    pub fn new(map: HashMap<MapData, u32, u64>) -> Self {
        StackTops {
            map,
            told: Told::new(),
            distrusted: HashSet::new(),
        }
    }

    /// A stack of thread `lwpid` unwound to the thread's start, reading below `top` only.
    pub fn learn(&mut self, lwpid: u32, top: u64) {
        self.tell(
            lwpid,
            Top {
                address: top,
                partly: false,
            },
        );
    }

    /// A stack of thread `lwpid` stopped early, reading below `top` only: the thread's copies
    /// reach that far, unless one reached the thread's start or this cut a stack short before.
    pub fn learn_partly(&mut self, lwpid: u32, top: u64) {
        if !self.told.contains_key(&lwpid) && !self.distrusted.contains(&lwpid) {
            self.tell(
                lwpid,
                Top {
                    address: top,
                    partly: true,
                },
            );
        }
    }

    /// What was told of thread `lwpid` cut a stack short (its stack moved, a new thread has
    /// its id, or another path went further than an early stop): its copies are as large as
    /// they may be again, until a stack of it reaches its start.
    pub fn cut_short(&mut self, lwpid: u32) {
        if self.told.remove(&lwpid).is_some_and(|top| top.partly) {
            self.distrusted.insert(lwpid);
        }
        // Absent already (the LRU map let it go): nothing to undo.
        let _ = self.map.remove(&lwpid);
    }

    fn tell(&mut self, lwpid: u32, top: Top) {
        if self.told.get(&lwpid) == Some(&top) {
            return;
        }
        if self.told.len() >= MOST_TOLD {
            self.told.clear();
            self.distrusted.clear();
        }
        // Unwritten, the thread's copies stay as large as a copy may be: no record is lost.
        if self.map.insert(lwpid, top.address, 0).is_ok() {
            self.told.insert(lwpid, top);
        }
    }
}
