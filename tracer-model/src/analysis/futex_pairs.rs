//! Which futex wake ended which wait. Both are stamped at their syscall's exit, so either can
//! reach the analysis first: each is kept, unpaired, until the other comes, for a bounded time
//! and in a bounded number (the live views run for days). A woken wait on a word of a process
//! is paired with a wake on that word that began while it waited; each wake with at most as
//! many waits as it woke, the earliest-ending first (the kernel wakes in order of arrival).

use std::collections::VecDeque;

use foldhash::HashMap;

/// How long an unpaired wait or wake is kept for the other half, after it ended: a woken
/// waiter returns, and a waker's call ends, well within it.
pub const KEPT_NS: i64 = 1_000_000_000;
/// How many unpaired waits and wakes are kept at most (words that are only woken, as a
/// condvar's, keep their wakes for `KEPT_NS` each).
pub const MAX_UNPAIRED: usize = 1 << 14;

/// A futex word of a process.
pub type Word = (u32, u64);

/// A wait that a wake ended (its result was 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FutexWait {
    pub lwpid: u32,
    pub start_ns: i64,
    pub end_ns: i64,
}

impl FutexWait {
    /// How long it waited.
    pub fn ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns).max(0) as u64
    }
}

/// A wake that woke `woken` waiters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FutexWake {
    pub lwpid: u32,
    pub begin_ns: i64,
    pub end_ns: i64,
    /// Its call stack (0: none).
    pub stack: u32,
    /// Where it was called from (0: unknown).
    pub caller: u64,
    /// Waiters it woke not yet paired with a wait.
    pub woken: u64,
}

impl FutexWake {
    fn ended(&self, wait: &FutexWait) -> bool {
        (wait.start_ns..=wait.end_ns).contains(&self.begin_ns)
    }
}

#[derive(Default)]
struct Unpaired {
    /// In the order they came.
    waits: VecDeque<FutexWait>,
    /// In the order they came; each with waiters left to pair.
    wakes: VecDeque<FutexWake>,
}

impl Unpaired {
    /// Drops what ended before `before`; returns how many.
    fn drop_before(&mut self, before: i64) -> usize {
        let (waits, wakes) = (self.waits.len(), self.wakes.len());
        self.waits.retain(|wait| wait.end_ns >= before);
        self.wakes.retain(|wake| wake.end_ns >= before);
        waits - self.waits.len() + wakes - self.wakes.len()
    }

    fn is_empty(&self) -> bool {
        self.waits.is_empty() && self.wakes.is_empty()
    }

    fn len(&self) -> usize {
        self.waits.len() + self.wakes.len()
    }
}

/// The waits and wakes not yet paired, by word.
#[derive(Default)]
pub struct FutexPairs {
    words: HashMap<Word, Unpaired>,
    /// Waits and wakes kept, in all.
    count: usize,
}

impl FutexPairs {
    /// A woken wait on `word`: the wake that ended it if it has come (its count of waiters
    /// woken taken one down), else none and the wait is kept for it.
    pub fn wait(&mut self, word: Word, wait: FutexWait) -> Option<FutexWake> {
        self.make_room(wait.end_ns);
        let unpaired = self.words.entry(word).or_default();
        self.count -= unpaired.drop_before(wait.end_ns - KEPT_NS);
        // Of the wakes that began while it waited, the first.
        let found = unpaired
            .wakes
            .iter()
            .enumerate()
            .filter(|(_, wake)| wake.ended(&wait))
            .min_by_key(|(_, wake)| wake.begin_ns)
            .map(|(at, _)| at);
        let Some(at) = found else {
            unpaired.waits.push_back(wait);
            self.count += 1;
            return None;
        };
        let wake = &mut unpaired.wakes[at];
        let paired = *wake;
        wake.woken -= 1;
        if wake.woken == 0 {
            unpaired.wakes.remove(at);
            self.count -= 1;
        }
        if unpaired.is_empty() {
            self.words.remove(&word);
        }
        Some(paired)
    }

    /// A wake on `word` that woke `wake.woken` waiters: the waits it ended that have come,
    /// earliest-ending first; what it woke beyond them is kept for the waits still to come.
    pub fn wake(&mut self, word: Word, mut wake: FutexWake) -> Vec<FutexWait> {
        self.make_room(wake.end_ns);
        let unpaired = self.words.entry(word).or_default();
        self.count -= unpaired.drop_before(wake.end_ns - KEPT_NS);
        let mut ending: Vec<(i64, usize)> = unpaired
            .waits
            .iter()
            .enumerate()
            .filter(|(_, wait)| wake.ended(wait))
            .map(|(at, wait)| (wait.end_ns, at))
            .collect();
        ending.sort_unstable();
        ending.truncate(usize::try_from(wake.woken).unwrap_or(usize::MAX));
        let ended: Vec<FutexWait> = ending.iter().map(|&(_, at)| unpaired.waits[at]).collect();
        let mut paired: Vec<usize> = ending.into_iter().map(|(_, at)| at).collect();
        paired.sort_unstable_by(|a, b| b.cmp(a));
        for at in paired {
            unpaired.waits.remove(at);
        }
        self.count -= ended.len();
        wake.woken -= ended.len() as u64;
        if wake.woken > 0 {
            unpaired.wakes.push_back(wake);
            self.count += 1;
        }
        if unpaired.is_empty() {
            self.words.remove(&word);
        }
        ended
    }

    /// Drops what ended more than `KEPT_NS` before `now_ns`.
    pub fn expire(&mut self, now_ns: i64) {
        self.drop_before(now_ns - KEPT_NS);
    }

    /// Process `pid` has exited: its waits and wakes will find no other half.
    pub fn process_exited(&mut self, pid: u32) {
        self.words.retain(|&(of, _), unpaired| {
            if of == pid {
                self.count -= unpaired.len();
            }
            of != pid
        });
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.words.clear();
        self.count = 0;
    }

    /// How many waits and wakes are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.count
    }

    fn drop_before(&mut self, before: i64) {
        self.words.retain(|_, unpaired| {
            self.count -= unpaired.drop_before(before);
            !unpaired.is_empty()
        });
    }

    /// Before one more is kept at `now_ns`, at the bound: drops what has expired, then, if
    /// more than half the bound is left, the oldest, to half the bound (so that the next
    /// such pass is that many records away).
    fn make_room(&mut self, now_ns: i64) {
        if self.count < MAX_UNPAIRED {
            return;
        }
        self.expire(now_ns);
        let keep = MAX_UNPAIRED / 2;
        if self.count <= keep {
            return;
        }
        let mut ends: Vec<i64> = self
            .words
            .values()
            .flat_map(|unpaired| {
                let waits = unpaired.waits.iter().map(|wait| wait.end_ns);
                waits.chain(unpaired.wakes.iter().map(|wake| wake.end_ns))
            })
            .collect();
        let dropped = ends.len() - keep;
        let (_, &mut newest_dropped, _) = ends.select_nth_unstable(dropped - 1);
        self.drop_before(newest_dropped + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORD: Word = (100, 0x1000);

    fn wait(lwpid: u32, start_ns: i64, end_ns: i64) -> FutexWait {
        FutexWait {
            lwpid,
            start_ns,
            end_ns,
        }
    }

    fn wake(lwpid: u32, begin_ns: i64, end_ns: i64, woken: u64) -> FutexWake {
        FutexWake {
            lwpid,
            begin_ns,
            end_ns,
            stack: lwpid,
            caller: 0,
            woken,
        }
    }

    #[test]
    fn a_wake_pairs_with_the_waits_it_woke_whichever_comes_first() {
        let mut pairs = FutexPairs::default();
        // Waiter 1 returns before its waker's call does; waiter 2 after.
        assert_eq!(pairs.wait(WORD, wait(1, 0, 50)), None);
        assert_eq!(pairs.wake(WORD, wake(9, 40, 60, 2)), [wait(1, 0, 50)]);
        assert_eq!(pairs.len(), 1, "the wake, with one waiter left");
        let paired = pairs.wait(WORD, wait(2, 10, 70)).unwrap();
        assert_eq!((paired.lwpid, paired.begin_ns), (9, 40));
        assert_eq!(pairs.len(), 0);
        assert!(pairs.words.is_empty());
    }

    #[test]
    fn a_wait_is_ended_by_the_first_wake_that_began_while_it_waited() {
        let mut pairs = FutexPairs::default();
        pairs.wake(WORD, wake(7, 2, 25, 1));
        pairs.wake(WORD, wake(8, 20, 22, 1));
        pairs.wake(WORD, wake(9, 10, 24, 1));
        assert_eq!(pairs.wait(WORD, wait(1, 5, 30)).map(|w| w.lwpid), Some(9));
        assert_eq!(pairs.wait(WORD, wait(2, 5, 30)).map(|w| w.lwpid), Some(8));
        assert_eq!(pairs.len(), 1, "the wake that began before both");
    }

    #[test]
    fn a_wake_ends_no_wait_it_began_outside_of_nor_one_of_another_word() {
        let mut pairs = FutexPairs::default();
        pairs.wait(WORD, wait(1, 100, 200));
        assert!(pairs.wake((100, 0x2000), wake(9, 150, 210, 1)).is_empty());
        assert!(pairs.wake((101, 0x1000), wake(9, 150, 210, 1)).is_empty());
        assert!(pairs.wake(WORD, wake(9, 201, 210, 1)).is_empty());
        assert!(pairs.wake(WORD, wake(9, 99, 210, 1)).is_empty());
        assert_eq!(pairs.len(), 5);
    }

    #[test]
    fn a_wake_ends_no_more_waits_than_it_woke_the_earliest_ending_first() {
        let mut pairs = FutexPairs::default();
        for (lwpid, end) in [(1, 30), (2, 10), (3, 20)] {
            pairs.wait(WORD, wait(lwpid, 0, end));
        }
        let ended: Vec<u32> = pairs
            .wake(WORD, wake(9, 5, 40, 2))
            .iter()
            .map(|w| w.lwpid)
            .collect();
        assert_eq!(ended, [2, 3]);
        assert_eq!(pairs.len(), 1, "waiter 1, unpaired");
        // Its budget spent, the wake is not kept for a later wait.
        assert_eq!(pairs.wait(WORD, wait(4, 0, 50)), None);
    }

    #[test]
    fn what_is_kept_is_bounded_in_time_and_number_and_by_process() {
        let mut pairs = FutexPairs::default();
        pairs.wait(WORD, wait(1, 0, 10));
        pairs.wake((100, 0x2000), wake(9, 5, 10, 1));
        pairs.wake((200, 0x2000), wake(9, 5, 10, 1));
        pairs.process_exited(200);
        assert_eq!(pairs.len(), 2);
        pairs.expire(10 + KEPT_NS);
        assert_eq!(pairs.len(), 2, "kept for KEPT_NS");
        // Too late for the wait kept: it was dropped, and the wake is kept instead.
        assert!(pairs.wake(WORD, wake(9, 5, 11 + KEPT_NS, 1)).is_empty());
        pairs.expire(11 + KEPT_NS);
        assert_eq!(pairs.len(), 1);
        // Wakes of as many words as the bound, and more, all within KEPT_NS: the oldest go.
        pairs.clear();
        let extra = 10;
        for n in 0..MAX_UNPAIRED + extra {
            let word = (100, 0x10_0000 + 64 * n as u64);
            pairs.wake(word, wake(9, n as i64, n as i64, 1));
            assert!(pairs.len() <= MAX_UNPAIRED);
        }
        assert_eq!(pairs.len(), MAX_UNPAIRED / 2 + extra);
        assert_eq!(pairs.words.len(), pairs.len());
        // The newest are kept: the last wake is there to pair.
        let last = (MAX_UNPAIRED + extra - 1) as i64;
        let word = (100, 0x10_0000 + 64 * last as u64);
        assert!(pairs.wait(word, wait(1, 0, last)).is_some());
    }
}
