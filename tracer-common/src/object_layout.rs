//! How each C library lays out the pthread objects whose first words a record copies
//! ([`RawRecord::object`](crate::RawRecord::object)): one table per layout, naming each
//! field's word and bits as the library's source names the field, and the rules that derive
//! the a1..a5 fields from them. Every side reads this one description: the BPF side (a
//! mutex's type and depth, a spin lock's word), the probe planner (the byte a fast path's
//! code tests, where glibc keeps `__wrefs`) and the decoder (the derived fields). Where a
//! library keeps no such value in the object, the derived field is 0 (docs/events.md, "How
//! the derived fields are read", says which).

#![allow(
    clippy::inline_always,
    reason = "what the BPF side calls here is inlined: it has no calls to spare, and its \
              verifier likes them inlined"
)]

use crate::events::OBJECT_WORDS;

/// The words of an object, as copied.
pub type ObjectWords = [u32; OBJECT_WORDS];

/// [`RawRecord::object_layout`](crate::RawRecord::object_layout): glibc 2.25 to 2.40
/// ([`GLIBC`]).
pub const LAYOUT_GLIBC: u8 = 0;
/// [`RawRecord::object_layout`](crate::RawRecord::object_layout): glibc 2.41 and later, whose
/// condition variable has no `__g_refs` ([`GLIBC_2_41`]).
pub const LAYOUT_COND_WITHOUT_G_REFS: u8 = 1;
/// [`RawRecord::object_layout`](crate::RawRecord::object_layout): musl 1.1.20 and later
/// ([`MUSL`]).
pub const LAYOUT_MUSL: u8 = 2;

/// The bits of a mutex's kind that are its type (in glibc's `__kind` and musl's `_m_type`).
pub const MUTEX_TYPE_MASK: u32 = 3;
/// A recursive mutex's type (`PTHREAD_MUTEX_RECURSIVE`, in glibc and musl).
pub const MUTEX_RECURSIVE: u32 = 1;

/// A field of an object: the 32-bit word of the copy it is in, and its bits there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WordField {
    /// Which 32-bit word of [`ObjectWords`].
    pub word: usize,
    /// The field's bits in that word.
    pub mask: u32,
}

impl WordField {
    const fn whole(word: usize) -> Self {
        WordField {
            word,
            mask: u32::MAX,
        }
    }

    const fn bits(word: usize, mask: u32) -> Self {
        WordField { word, mask }
    }

    /// The field's bits in `words`.
    #[inline(always)]
    pub const fn read(self, words: &ObjectWords) -> u32 {
        words[self.word] & self.mask
    }

    /// The byte offset of the field's word in the object.
    pub const fn byte_offset(self) -> usize {
        self.word * 4
    }
}

/// glibc's x86-64 objects (nptl, `sysdeps/nptl/bits/thread-shared-types.h` and
/// `struct_rwlock.h`; glibc 2.25 and later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlibcLayout {
    /// `pthread_mutex_t.__lock`: 0 free, 1 locked, 2 locked with waiters.
    pub mutex_lock: WordField,
    /// `pthread_mutex_t.__count`: a recursive mutex's depth.
    pub mutex_count: WordField,
    /// `pthread_mutex_t.__owner`: the holder's thread id.
    pub mutex_owner: WordField,
    /// `pthread_mutex_t.__kind`'s type bits (robust, PI and PP variants keep them).
    pub mutex_kind: WordField,
    /// `pthread_cond_t.__wrefs` without its flags: its bits from 3 up count the waiters. It
    /// moved 8 bytes closer in 2.41, where `__g_refs` is gone.
    pub cond_waiter_refs: WordField,
    /// `pthread_rwlock_t.__readers`: the readers from bit 3 up, then flags
    /// (`PTHREAD_RWLOCK_WRPHASE` 1, `_WRLOCKED` 2, `_RWAITING` 4).
    pub rwlock_readers: WordField,
    /// `pthread_rwlock_t.__writers`: registered writers, and the hand-over bit (31).
    pub rwlock_writers: WordField,
    /// `pthread_rwlock_t.__wrphase_futex`: bit 1 (`PTHREAD_RWLOCK_FUTEX_USED`) while a
    /// waiter sleeps on it.
    pub rwlock_wrphase_futex: WordField,
    /// `pthread_rwlock_t.__writers_futex`: the same.
    pub rwlock_writers_futex: WordField,
    /// `sem_t`'s value: the low 32 bits of its 64-bit word.
    pub sem_value: WordField,
    /// `pthread_barrier_t.in`: threads that arrived, over every round.
    pub barrier_in: WordField,
    /// `pthread_barrier_t.current_round`: where this round began; the threads waiting in it
    /// are `in - current_round`.
    pub barrier_current_round: WordField,
}

/// musl's x86-64 objects (`src/internal/pthread_impl.h`; musl 1.1.20 and later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MuslLayout {
    /// `_m_type`'s type bits; robust is 4, priority-inheriting 8, process-shared 128.
    pub mutex_type: WordField,
    /// The bits of `_m_type` its lock tests (`_m_type & 15`) for a normal mutex that is neither
    /// robust nor priority-inheriting (0), which it locks with a constant (EBUSY) in
    /// `_m_lock` instead of its owner's thread id.
    pub mutex_normal: WordField,
    /// `_m_lock`: the holder's thread id (see `mutex_owner`), and [`MUSL_WAITERS_BIT`].
    pub mutex_lock: WordField,
    /// `_m_lock`'s owner: the holder's thread id in the low 30 bits.
    pub mutex_owner: WordField,
    /// `_m_waiters`: threads waiting.
    pub mutex_waiters: WordField,
    /// `_m_count`: the locks of a recursive mutex after the first.
    pub mutex_count: WordField,
    /// `_c_shared`, a pointer (words 0-1): null for a process-private condition variable.
    pub cond_shared: [WordField; 2],
    /// `_c_head`, a pointer (words 2-3): the first waiter of a private one.
    pub cond_head: [WordField; 2],
    /// `_c_waiters`: the waiters of a process-shared one.
    pub cond_waiters: WordField,
    /// `_rw_lock`: readers, or [`MUSL_RW_WRITE_LOCKED`] while a writer holds it; and
    /// [`MUSL_WAITERS_BIT`].
    pub rwlock_lock: WordField,
    /// `_rw_waiters`: threads waiting.
    pub rwlock_waiters: WordField,
    /// `__val[0]`: the semaphore's value.
    pub sem_value: WordField,
}

/// musl marks waiters in bit 31 of a mutex's, rwlock's or semaphore's lock word.
pub const MUSL_WAITERS_BIT: u32 = 1 << 31;
/// musl's `_rw_lock` (without [`MUSL_WAITERS_BIT`]) while a writer holds the lock.
pub const MUSL_RW_WRITE_LOCKED: u32 = 0x7fff_ffff;

/// glibc 2.25 to 2.40 ([`LAYOUT_GLIBC`]).
pub const GLIBC: GlibcLayout = GlibcLayout {
    mutex_lock: WordField::whole(0),
    mutex_count: WordField::whole(1),
    mutex_owner: WordField::whole(2),
    mutex_kind: WordField::bits(4, MUTEX_TYPE_MASK),
    cond_waiter_refs: WordField::bits(9, !7),
    rwlock_readers: WordField::whole(0),
    rwlock_writers: WordField::whole(1),
    rwlock_wrphase_futex: WordField::whole(2),
    rwlock_writers_futex: WordField::whole(3),
    sem_value: WordField::whole(0),
    barrier_in: WordField::whole(0),
    barrier_current_round: WordField::whole(1),
};

/// glibc 2.41 and later ([`LAYOUT_COND_WITHOUT_G_REFS`]): `__wrefs` is at byte 28.
pub const GLIBC_2_41: GlibcLayout = GlibcLayout {
    cond_waiter_refs: WordField::bits(7, !7),
    ..GLIBC
};

/// musl ([`LAYOUT_MUSL`]).
pub const MUSL: MuslLayout = MuslLayout {
    mutex_type: WordField::bits(0, MUTEX_TYPE_MASK),
    mutex_normal: WordField::bits(0, 15),
    mutex_lock: WordField::whole(1),
    mutex_owner: WordField::bits(1, 0x3fff_ffff),
    mutex_waiters: WordField::whole(2),
    mutex_count: WordField::whole(5),
    cond_shared: [WordField::whole(0), WordField::whole(1)],
    cond_head: [WordField::whole(2), WordField::whole(3)],
    cond_waiters: WordField::whole(3),
    rwlock_lock: WordField::whole(0),
    rwlock_waiters: WordField::whole(1),
    sem_value: WordField::bits(0, !MUSL_WAITERS_BIT),
};

/// The field of a mutex's words that holds its type, as `object_layout` lays it out.
#[inline(always)]
pub const fn mutex_type_field(object_layout: u8) -> WordField {
    match object_layout {
        LAYOUT_MUSL => MUSL.mutex_type,
        _ => GLIBC.mutex_kind,
    }
}

/// Whether these words of a `pthread_mutex_t`, laid out as `object_layout` says, are a
/// recursive mutex's (by its type).
#[inline(always)]
pub fn is_recursive_mutex(object: &ObjectWords, object_layout: u8) -> bool {
    mutex_type_field(object_layout).read(object) == MUTEX_RECURSIVE
}

/// Counts one more lock in the copy of a recursive glibc mutex (`__count`), for a lock
/// written where it completed, before its code stored the count
/// ([`Completion::stores_after`](crate::Completion::stores_after)). The fast path is not
/// planned on musl.
#[inline(always)]
pub fn count_one_more(object: &mut ObjectWords, object_layout: u8) {
    if object_layout != LAYOUT_MUSL && is_recursive_mutex(object, object_layout) {
        let count = GLIBC.mutex_count.word;
        object[count] = object[count].wrapping_add(1);
    }
}

/// Whether a spin lock's word, as its first try left it, says another thread held it:
/// glibc's x86-64 lock is 1 when free and decremented to take it; musl's, and glibc's on arm64,
/// is 0 when free.
#[inline(always)]
pub const fn spin_lock_was_held(word: i32, object_layout: u8) -> bool {
    match object_layout {
        LAYOUT_MUSL => word != 0,
        _ if crate::arch::HOST.glibc_spin_lock_free_is_one => word <= 0,
        _ => word != 0,
    }
}

/// A C library's object layouts, as a record names them: the table the decoder derives a
/// record's fields from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectLayout {
    /// glibc's, of one of its versions.
    Glibc(&'static GlibcLayout),
    /// musl's.
    Musl(&'static MuslLayout),
}

impl ObjectLayout {
    /// The layout `object_layout` (a record's or a probe's) names.
    pub const fn of(object_layout: u8) -> Self {
        match object_layout {
            LAYOUT_MUSL => ObjectLayout::Musl(&MUSL),
            LAYOUT_COND_WITHOUT_G_REFS => ObjectLayout::Glibc(&GLIBC_2_41),
            _ => ObjectLayout::Glibc(&GLIBC),
        }
    }

    /// `waiters?` of a mutex: glibc's `__lock` is 2 when locked with waiters; musl counts
    /// them in `_m_waiters` and marks them in `_m_lock`.
    pub fn mutex_waiters(self, words: &ObjectWords) -> bool {
        match self {
            ObjectLayout::Glibc(glibc) => glibc.mutex_lock.read(words) as i32 > 1,
            ObjectLayout::Musl(musl) => {
                musl.mutex_waiters.read(words) != 0
                    || musl.mutex_lock.read(words) & MUSL_WAITERS_BIT != 0
            }
        }
    }

    /// The thread id holding a mutex, if the mutex says (0: not held, or not known). musl
    /// locks a normal mutex with a constant instead of its owner.
    pub fn mutex_owner(self, words: &ObjectWords) -> u32 {
        match self {
            ObjectLayout::Glibc(glibc) => glibc.mutex_owner.read(words),
            ObjectLayout::Musl(musl) if musl.mutex_normal.read(words) == 0 => 0,
            ObjectLayout::Musl(musl) => musl.mutex_owner.read(words),
        }
    }

    /// `rm_depth`: how many times a recursive mutex is held. musl counts the locks after the
    /// first, while `_m_lock` has an owner.
    pub fn recursion_depth(self, words: &ObjectWords) -> u32 {
        match self {
            ObjectLayout::Glibc(glibc) => glibc.mutex_count.read(words),
            ObjectLayout::Musl(musl) if musl.mutex_owner.read(words) == 0 => 0,
            ObjectLayout::Musl(musl) => musl.mutex_count.read(words).wrapping_add(1),
        }
    }

    /// `waiters?` of a condition variable: glibc counts them in `__wrefs`; musl lists a
    /// private one's from `_c_head`, and counts a shared one's in `_c_waiters`.
    pub fn cond_waiters(self, words: &ObjectWords) -> bool {
        match self {
            ObjectLayout::Glibc(glibc) => glibc.cond_waiter_refs.read(words) != 0,
            ObjectLayout::Musl(musl) => {
                let [low, high] = musl.cond_shared;
                if low.read(words) | high.read(words) == 0 {
                    let [low, high] = musl.cond_head;
                    low.read(words) | high.read(words) != 0
                } else {
                    musl.cond_waiters.read(words) != 0
                }
            }
        }
    }

    /// `s_count`: a semaphore's value.
    pub fn sem_count(self, words: &ObjectWords) -> u32 {
        match self {
            ObjectLayout::Glibc(glibc) => glibc.sem_value.read(words),
            ObjectLayout::Musl(musl) => musl.sem_value.read(words),
        }
    }

    /// `b_count`: threads already waiting at a barrier. musl counts them outside the object
    /// (in the round's instance, on the first waiter's stack): 0.
    pub fn barrier_waiting(self, words: &ObjectWords) -> u32 {
        match self {
            ObjectLayout::Glibc(glibc) => glibc
                .barrier_in
                .read(words)
                .wrapping_sub(glibc.barrier_current_round.read(words)),
            ObjectLayout::Musl(_) => 0,
        }
    }

    /// `rw_readers`: readers holding a rwlock (none while a writer holds musl's).
    pub fn rw_readers(self, words: &ObjectWords) -> u32 {
        match self {
            ObjectLayout::Glibc(glibc) => glibc.rwlock_readers.read(words) >> 3,
            ObjectLayout::Musl(musl) => match musl.rwlock_lock.read(words) & !MUSL_WAITERS_BIT {
                MUSL_RW_WRITE_LOCKED => 0,
                readers => readers,
            },
        }
    }

    /// `waiters?` of a rwlock. glibc (nptl/pthread_rwlock_common.c): readers waiting
    /// (`PTHREAD_RWLOCK_RWAITING`); a primary writer waiting for readers to leave
    /// (`PTHREAD_RWLOCK_WRLOCKED` set while still in a read phase); secondary writers
    /// registered (`__writers` without its hand-over bit); or a waiter asleep on either futex
    /// word (`PTHREAD_RWLOCK_FUTEX_USED`). musl: `_rw_waiters`, or the waiters bit of
    /// `_rw_lock`.
    pub fn rw_waiters(self, words: &ObjectWords) -> bool {
        match self {
            ObjectLayout::Glibc(glibc) => {
                const WRPHASE: u32 = 1;
                const WRLOCKED: u32 = 2;
                const RWAITING: u32 = 4;
                const WRHANDOVER: u32 = 1 << 31;
                const FUTEX_USED: u32 = 2;
                let readers = glibc.rwlock_readers.read(words);
                readers & RWAITING != 0
                    || readers & (WRLOCKED | WRPHASE) == WRLOCKED
                    || glibc.rwlock_writers.read(words) & !WRHANDOVER != 0
                    || (glibc.rwlock_wrphase_futex.read(words)
                        | glibc.rwlock_writers_futex.read(words))
                        & FUTEX_USED
                        != 0
            }
            ObjectLayout::Musl(musl) => {
                musl.rwlock_waiters.read(words) != 0
                    || musl.rwlock_lock.read(words) & MUSL_WAITERS_BIT != 0
            }
        }
    }
}

// Each copy holds the fields read of it: a condition variable's copy (`ObjectSize::Large`)
// its `__wrefs`, a mutex's (`ObjectSize::Small`) its kind and count.
const _: () = {
    use crate::events::ObjectSize;
    let (large, small) = (ObjectSize::Large.bytes(), ObjectSize::Small.bytes());
    assert!(GLIBC.cond_waiter_refs.byte_offset() + 4 <= large);
    assert!(GLIBC_2_41.cond_waiter_refs.byte_offset() + 4 <= large);
    assert!(GLIBC.mutex_kind.byte_offset() + 4 <= small);
    assert!(MUSL.mutex_count.byte_offset() + 4 <= small);
};

#[cfg(test)]
mod tests {
    use super::*;

    fn words(set: &[(usize, u32)]) -> ObjectWords {
        let mut words = [0; OBJECT_WORDS];
        for &(word, value) in set {
            words[word] = value;
        }
        words
    }

    const MUSL_LAYOUT: ObjectLayout = ObjectLayout::of(LAYOUT_MUSL);

    #[test]
    fn musl_mutex_fields() {
        let recursive_held_twice = words(&[(0, 1), (1, 1234), (5, 1)]);
        assert_eq!(MUSL_LAYOUT.recursion_depth(&recursive_held_twice), 2);
        assert_eq!(MUSL_LAYOUT.mutex_owner(&recursive_held_twice), 1234);
        assert!(!MUSL_LAYOUT.mutex_waiters(&recursive_held_twice));
        // Released: no owner, depth 0 (whatever `_m_count` was left at).
        assert_eq!(MUSL_LAYOUT.recursion_depth(&words(&[(0, 1), (5, 3)])), 0);
        // A normal mutex is locked with EBUSY, not its owner; a waiter is counted.
        let normal_contended = words(&[(1, 16 | MUSL_WAITERS_BIT), (2, 1)]);
        assert_eq!(MUSL_LAYOUT.mutex_owner(&normal_contended), 0);
        assert!(MUSL_LAYOUT.mutex_waiters(&normal_contended));
    }

    #[test]
    fn musl_cond_sem_and_rwlock_fields() {
        // A private condition variable with a waiter listed (a stack address in _c_head).
        assert!(MUSL_LAYOUT.cond_waiters(&words(&[(2, 0x7ffd_1000), (3, 0x7fff)])));
        assert!(!MUSL_LAYOUT.cond_waiters(&words(&[])));
        // A shared one: _c_seq (word 2) changes without waiters; _c_waiters counts them.
        let shared = [(0, u32::MAX), (1, u32::MAX), (2, 7)];
        assert!(!MUSL_LAYOUT.cond_waiters(&words(&shared)));
        assert!(MUSL_LAYOUT.cond_waiters(&words(&[shared[0], shared[1], (3, 1)])));
        assert_eq!(
            MUSL_LAYOUT.sem_count(&words(&[(0, 3 | MUSL_WAITERS_BIT)])),
            3
        );
        assert_eq!(MUSL_LAYOUT.rw_readers(&words(&[(0, 2)])), 2);
        assert_eq!(MUSL_LAYOUT.rw_readers(&words(&[(0, u32::MAX)])), 0);
        assert!(MUSL_LAYOUT.rw_waiters(&words(&[(0, 1 | MUSL_WAITERS_BIT)])));
        assert!(!MUSL_LAYOUT.rw_waiters(&words(&[(0, 1)])));
        assert_eq!(MUSL_LAYOUT.barrier_waiting(&words(&[(0, 5), (1, 1)])), 0);
    }

    #[test]
    fn a_recursive_mutex_is_told_by_its_type_bits_on_each_library() {
        for (kind, recursive) in [(0, false), (1, true), (2, false), (3, false), (0x11, true)] {
            let glibc = words(&[(GLIBC.mutex_kind.word, kind)]);
            assert_eq!(
                is_recursive_mutex(&glibc, LAYOUT_GLIBC),
                recursive,
                "{kind:#x}"
            );
            assert!(!is_recursive_mutex(&glibc, LAYOUT_MUSL), "kind {kind:#x}");
            // musl's `_m_type` (robust: 4, process-shared: 128).
            let musl = words(&[(MUSL.mutex_type.word, kind | 128)]);
            assert_eq!(is_recursive_mutex(&musl, LAYOUT_MUSL), recursive);
        }
    }

    #[test]
    fn glibc_2_41_keeps_the_condition_variables_waiters_8_bytes_closer() {
        assert_eq!(GLIBC.cond_waiter_refs.byte_offset(), 36);
        assert_eq!(GLIBC_2_41.cond_waiter_refs.byte_offset(), 28);
        for (object_layout, word) in [(LAYOUT_GLIBC, 9), (LAYOUT_COND_WITHOUT_G_REFS, 7)] {
            let layout = ObjectLayout::of(object_layout);
            assert!(layout.cond_waiters(&words(&[(word, 1 << 3)])));
            // The low three bits are flags, not waiters.
            assert!(!layout.cond_waiters(&words(&[(word, 7)])));
        }
    }
}
