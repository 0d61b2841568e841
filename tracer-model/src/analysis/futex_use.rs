//! What a futex word is used as, told from its waits and wakes alone: a lock, whose threads
//! take turns (a waiter, woken by the thread that held it, holds it in turn and wakes the
//! next as it lets go), or an event that threads wait on for others' signals (a thread's turn
//! to commit, work to do, a tick).

use foldhash::HashSet;

/// The threads that waited on a futex word, and those whose wakes woke a waiter.
#[derive(Clone, Debug, Default)]
pub struct FutexUse {
    waiters: HashSet<u32>,
    wakers: HashSet<u32>,
    /// Some wake woke more than one waiter: all at once, as an event is signalled (a lock
    /// lets one waiter through).
    woke_many: bool,
}

impl FutexUse {
    /// Thread `lwpid` waited on the word, and blocked.
    pub(super) fn waited(&mut self, lwpid: u32) {
        self.waiters.insert(lwpid);
    }

    /// Thread `lwpid` woke `woken` of the word's waiters.
    pub(super) fn woke(&mut self, lwpid: u32, woken: u64) {
        if woken > 0 {
            self.wakers.insert(lwpid);
        }
        self.woke_many |= woken > 1;
    }

    /// Whether the word is an event: some wake woke several waiters at once, or it was woken
    /// only by threads that never waited on it. A lock that only one thread ever has to wait
    /// for, released by threads that never wait, reads as an event too: its records are an
    /// event's.
    pub fn is_event(&self) -> bool {
        self.woke_many || (!self.wakers.is_empty() && self.waiters.is_disjoint(&self.wakers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_that_take_turns_make_a_lock() {
        let mut word = FutexUse::default();
        // 1 holds it; 2 and 3 wait; 1 wakes 2, which wakes 3 as it lets go.
        word.waited(2);
        word.waited(3);
        word.woke(1, 1);
        assert!(
            word.is_event(),
            "so far, woken only by a thread that never waited"
        );
        word.woke(2, 1);
        assert!(!word.is_event());
        word.woke(3, 0);
        assert!(!word.is_event(), "a wake that woke none says nothing");
    }

    #[test]
    fn a_word_others_signal_or_wake_all_at_once_is_an_event() {
        let mut ticks = FutexUse::default();
        ticks.waited(2);
        ticks.woke(1, 1);
        ticks.waited(2);
        ticks.woke(3, 1);
        assert!(ticks.is_event(), "one waiter, its wakers never wait");
        let mut broadcast = FutexUse::default();
        for lwpid in 1..=3 {
            broadcast.waited(lwpid);
            broadcast.woke(lwpid, 1);
        }
        assert!(!broadcast.is_event());
        broadcast.woke(1, 2);
        assert!(broadcast.is_event(), "two woken at once");
        assert!(
            !FutexUse::default().is_event(),
            "never woken: no sign of one"
        );
    }
}
