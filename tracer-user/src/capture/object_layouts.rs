//! How each C library lays out the objects whose first words a record carries
//! (`RawRecord::object`), and the fields derived from them: one description per library,
//! chosen by the record's `object_layout` (what the probed library is, decided when it was
//! probed).
//! Where a library keeps no such value in the object, the field is 0 (docs/events.md, "How the
//! derived fields are read", says which).

use tracer_common::{
    LAYOUT_MUSL, RawRecord,
    events::{GLIBC_MUTEX_COUNT_WORD, MUSL_MUTEX_NORMAL_MASK, MUSL_MUTEX_TYPE_WORD, OBJECT_WORDS},
    record::glibc_cond_wrefs_word,
};

/// The words of an object, as copied.
type Words = [u32; OBJECT_WORDS];

/// A C library's object layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectLayout {
    /// glibc 2.25 and later, x86-64; `cond_wrefs_word` is where `pthread_cond_t` keeps
    /// `__wrefs`, which moved in 2.41 ([`glibc_cond_wrefs_word`]).
    Glibc { cond_wrefs_word: usize },
    /// musl 1.1.20 and later, x86-64 (`src/internal/pthread_impl.h`).
    Musl,
}

impl ObjectLayout {
    /// The object layout a record says it was captured with.
    pub fn of(raw: &RawRecord) -> Self {
        match raw.object_layout {
            LAYOUT_MUSL => ObjectLayout::Musl,
            object_layout => ObjectLayout::Glibc {
                cond_wrefs_word: glibc_cond_wrefs_word(object_layout),
            },
        }
    }

    /// `waiters?` of a mutex. glibc: `__lock` (word 0) is 2 when locked with waiters. musl:
    /// `_m_waiters` (word 2) counts them, and bit 31 of `_m_lock` (word 1) marks them.
    pub fn mutex_waiters(self, words: &Words) -> bool {
        match self {
            ObjectLayout::Glibc { .. } => words[0] as i32 > 1,
            ObjectLayout::Musl => words[2] != 0 || words[1] & MUSL_WAITERS_BIT != 0,
        }
    }

    /// The thread id holding a mutex, if the mutex says (0: not held, or not known). glibc:
    /// `__owner` (word 2). musl: the low 30 bits of `_m_lock` (word 1), except for a normal
    /// mutex (`_m_type` says so, [`MUSL_MUTEX_NORMAL_MASK`]), which it locks with a constant
    /// instead.
    pub fn mutex_owner(self, words: &Words) -> u32 {
        match self {
            ObjectLayout::Glibc { .. } => words[2],
            ObjectLayout::Musl if words[MUSL_MUTEX_TYPE_WORD] & MUSL_MUTEX_NORMAL_MASK == 0 => 0,
            ObjectLayout::Musl => words[1] & MUSL_OWNER_MASK,
        }
    }

    /// `rm_depth`: how many times a recursive mutex is held. glibc: `__count` (word 1). musl:
    /// `_m_count` (word 5) counts the locks after the first, while `_m_lock` has an owner.
    pub fn recursion_depth(self, words: &Words) -> u32 {
        match self {
            ObjectLayout::Glibc { .. } => words[GLIBC_MUTEX_COUNT_WORD],
            ObjectLayout::Musl if words[1] & MUSL_OWNER_MASK == 0 => 0,
            ObjectLayout::Musl => words[5].wrapping_add(1),
        }
    }

    /// `waiters?` of a condition variable. glibc: `__wrefs` >> 3 counts them. musl: a
    /// process-private one (`_c_shared`, words 0-1, null) lists them from `_c_head` (words
    /// 2-3); a shared one counts them in `_c_waiters` (word 3).
    pub fn cond_waiters(self, words: &Words) -> bool {
        match self {
            ObjectLayout::Glibc { cond_wrefs_word } => words[cond_wrefs_word] >> 3 != 0,
            ObjectLayout::Musl if words[0] | words[1] == 0 => words[2] | words[3] != 0,
            ObjectLayout::Musl => words[3] != 0,
        }
    }

    /// `s_count`: a semaphore's value. glibc: the low 32 bits of `sem_t`. musl: `__val[0]`
    /// without bit 31, which marks waiters.
    pub fn sem_count(self, words: &Words) -> u32 {
        match self {
            ObjectLayout::Glibc { .. } => words[0],
            ObjectLayout::Musl => words[0] & !MUSL_WAITERS_BIT,
        }
    }

    /// `b_count`: threads already waiting at a barrier. glibc: `in - current_round`. musl
    /// counts them outside the object (in the round's instance, on the first waiter's stack):
    /// 0.
    pub fn barrier_waiting(self, words: &Words) -> u32 {
        match self {
            ObjectLayout::Glibc { .. } => words[0].wrapping_sub(words[1]),
            ObjectLayout::Musl => 0,
        }
    }

    /// `rw_readers`: readers holding a rwlock. glibc: `__readers` >> 3. musl: `_rw_lock`
    /// (word 0) without bit 31, unless it is 0x7fffffff (a writer holds it).
    pub fn rw_readers(self, words: &Words) -> u32 {
        match self {
            ObjectLayout::Glibc { .. } => words[GLIBC_RW_READERS_WORD] >> 3,
            ObjectLayout::Musl => match words[0] & !MUSL_WAITERS_BIT {
                MUSL_RW_WRITE_LOCKED => 0,
                readers => readers,
            },
        }
    }

    /// `waiters?` of a rwlock. musl: `_rw_waiters` (word 1), or bit 31 of `_rw_lock`.
    pub fn rw_waiters(self, words: &Words) -> bool {
        match self {
            ObjectLayout::Glibc { .. } => glibc_rwlock_has_waiters(words),
            ObjectLayout::Musl => words[1] != 0 || words[0] & MUSL_WAITERS_BIT != 0,
        }
    }
}

/// musl marks waiters in bit 31 of a mutex's, rwlock's or semaphore's lock word.
const MUSL_WAITERS_BIT: u32 = 1 << 31;
/// musl's `_m_lock`: the owner's thread id in the low 30 bits.
const MUSL_OWNER_MASK: u32 = 0x3fff_ffff;
/// musl's `_rw_lock` while a writer holds the lock.
const MUSL_RW_WRITE_LOCKED: u32 = 0x7fff_ffff;

/// glibc's x86-64 `pthread_rwlock_t` (glibc >= 2.25): `__readers`, `__writers`,
/// `__wrphase_futex`, `__writers_futex` are its first four words.
const GLIBC_RW_READERS_WORD: usize = 0;
const GLIBC_RW_WRITERS_WORD: usize = 1;
const GLIBC_RW_WRPHASE_FUTEX_WORD: usize = 2;
const GLIBC_RW_WRITERS_FUTEX_WORD: usize = 3;

/// Whether a glibc rwlock has threads waiting on it (nptl/pthread_rwlock_common.c):
/// - readers waiting: `PTHREAD_RWLOCK_RWAITING` in `__readers`;
/// - a primary writer waiting for readers to leave: `PTHREAD_RWLOCK_WRLOCKED` set while still
///   in a read phase (`PTHREAD_RWLOCK_WRPHASE` clear);
/// - secondary writers registered: `__writers` without its hand-over bit;
/// - a waiter asleep on a futex: `PTHREAD_RWLOCK_FUTEX_USED` in either futex word.
fn glibc_rwlock_has_waiters(words: &Words) -> bool {
    const WRPHASE: u32 = 1;
    const WRLOCKED: u32 = 2;
    const RWAITING: u32 = 4;
    const WRHANDOVER: u32 = 1 << 31;
    const FUTEX_USED: u32 = 2;
    let readers = words[GLIBC_RW_READERS_WORD];
    readers & RWAITING != 0
        || readers & (WRLOCKED | WRPHASE) == WRLOCKED
        || words[GLIBC_RW_WRITERS_WORD] & !WRHANDOVER != 0
        || (words[GLIBC_RW_WRPHASE_FUTEX_WORD] | words[GLIBC_RW_WRITERS_FUTEX_WORD]) & FUTEX_USED
            != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(set: &[(usize, u32)]) -> Words {
        let mut words = [0; OBJECT_WORDS];
        for &(word, value) in set {
            words[word] = value;
        }
        words
    }

    #[test]
    fn musl_mutex_fields() {
        let recursive_held_twice = words(&[(0, 1), (1, 1234), (5, 1)]);
        assert_eq!(ObjectLayout::Musl.recursion_depth(&recursive_held_twice), 2);
        assert_eq!(ObjectLayout::Musl.mutex_owner(&recursive_held_twice), 1234);
        assert!(!ObjectLayout::Musl.mutex_waiters(&recursive_held_twice));
        // Released: no owner, depth 0 (whatever `_m_count` was left at).
        assert_eq!(
            ObjectLayout::Musl.recursion_depth(&words(&[(0, 1), (5, 3)])),
            0
        );
        // A normal mutex is locked with EBUSY, not its owner; a waiter is counted.
        let normal_contended = words(&[(1, 16 | MUSL_WAITERS_BIT), (2, 1)]);
        assert_eq!(ObjectLayout::Musl.mutex_owner(&normal_contended), 0);
        assert!(ObjectLayout::Musl.mutex_waiters(&normal_contended));
    }

    #[test]
    fn musl_cond_sem_and_rwlock_fields() {
        // A private condition variable with a waiter listed (a stack address in _c_head).
        assert!(ObjectLayout::Musl.cond_waiters(&words(&[(2, 0x7ffd_1000), (3, 0x7fff)])));
        assert!(!ObjectLayout::Musl.cond_waiters(&words(&[])));
        // A shared one: _c_seq (word 2) changes without waiters; _c_waiters counts them.
        let shared = [(0, u32::MAX), (1, u32::MAX), (2, 7)];
        assert!(!ObjectLayout::Musl.cond_waiters(&words(&shared)));
        assert!(ObjectLayout::Musl.cond_waiters(&words(&[shared[0], shared[1], (3, 1)])));
        assert_eq!(
            ObjectLayout::Musl.sem_count(&words(&[(0, 3 | MUSL_WAITERS_BIT)])),
            3
        );
        assert_eq!(ObjectLayout::Musl.rw_readers(&words(&[(0, 2)])), 2);
        assert_eq!(ObjectLayout::Musl.rw_readers(&words(&[(0, u32::MAX)])), 0);
        assert!(ObjectLayout::Musl.rw_waiters(&words(&[(0, 1 | MUSL_WAITERS_BIT)])));
        assert!(!ObjectLayout::Musl.rw_waiters(&words(&[(0, 1)])));
        assert_eq!(
            ObjectLayout::Musl.barrier_waiting(&words(&[(0, 5), (1, 1)])),
            0
        );
    }
}
