//! Raw records from the kernel become the seed's records here: realtime timestamps, and a1..a5
//! as the event table defines them (`tracer_common::EventDef::fields`).

use std::{
    collections::HashMap,
    sync::{Arc, PoisonError, RwLock},
};

use tracer_common::{
    EventDef, Field, RawRecord, Which,
    arch::{self, InstructionSet},
    events::classify,
    object_layout::ObjectLayout,
};
use tracer_model::{TraceRecord, selection::EventSet};

/// Turns raw records into trace records.
#[derive(Clone)]
pub struct Decoder {
    realtime_offset_ns: i128,
    /// The events kept (rmutex and mutex records come from the same probes).
    selected: EventSet,
    thread_descriptors: ThreadDescriptors,
}

/// How far below the thread pointer that records carry each traced process's thread descriptor
/// lies: what its `pthread_self()` returns, the records' `tid`. On x86-64 they are one, and
/// nothing is kept. On arm64 the C library puts the descriptor below the thread pointer, by an
/// offset of its own version ([`crate::attach::machine_code::thread_descriptor_offset`]), told
/// here as each process's library is found; the one of process 0 serves the processes not told
/// one (system-wide, the first library probed). Shared: the attaching side writes, the decoders
/// read.
#[derive(Clone, Debug)]
pub struct ThreadDescriptors(Option<Arc<RwLock<HashMap<u32, u64>>>>);

impl ThreadDescriptors {
    /// Empty; kept only on an architecture that needs it.
    pub fn new() -> Self {
        ThreadDescriptors(
            matches!(arch::HOST.instruction_set, InstructionSet::A64).then(Default::default),
        )
    }

    /// Process `pid`'s C library puts the descriptor `offset` bytes below the thread pointer
    /// (0: the processes told no offset of their own, unless one was told already).
    pub fn set(&self, pid: u32, offset: u64) {
        if let Some(offsets) = &self.0 {
            let mut offsets = offsets.write().unwrap_or_else(PoisonError::into_inner);
            match pid {
                0 => offsets.entry(0).or_insert(offset),
                _ => offsets.entry(pid).insert_entry(offset).into_mut(),
            };
        }
    }

    /// The `pthread_self()` of process `pid`'s thread whose thread pointer is `thread_pointer`:
    /// the thread pointer itself where no offset is known.
    fn of(&self, pid: u32, thread_pointer: u64) -> u64 {
        let Some(offsets) = &self.0 else {
            return thread_pointer;
        };
        let offsets = offsets.read().unwrap_or_else(PoisonError::into_inner);
        let offset = offsets.get(&pid).or_else(|| offsets.get(&0)).copied();
        offset.map_or(thread_pointer, |offset| thread_pointer.wrapping_sub(offset))
    }
}

impl Default for ThreadDescriptors {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// `realtime_offset_ns` is CLOCK_REALTIME - CLOCK_MONOTONIC (see `kernel::realtime_offset_ns`).
    pub fn new(realtime_offset_ns: i128, selected: EventSet) -> Self {
        Decoder {
            realtime_offset_ns,
            selected,
            thread_descriptors: ThreadDescriptors::new(),
        }
    }

    /// Takes each record's `tid` from its thread pointer as `thread_descriptors` say.
    pub fn with_thread_descriptors(self, thread_descriptors: ThreadDescriptors) -> Self {
        Decoder {
            thread_descriptors,
            ..self
        }
    }

    /// Keeps the records of `selected` only from now on (none: a stopped trace).
    pub fn select(&mut self, selected: EventSet) {
        self.selected = selected;
    }

    /// CLOCK_REALTIME nanoseconds of a CLOCK_MONOTONIC stamp.
    pub fn realtime_ns(&self, ktime_ns: u64) -> i64 {
        (i128::from(ktime_ns) + self.realtime_offset_ns) as i64
    }

    /// Whether the record is of a selected event (a mutex probe records both kinds).
    pub fn selects(&self, record: &TraceRecord) -> bool {
        self.selected.selects(record.event1, record.event2)
    }

    /// `raw` as the part of its call `which` says (its own [`RawRecord::which`] but for a
    /// call written whole, [`RawRecord::parts`]). `None` for codes the event table does not
    /// know (a corrupt or foreign record).
    pub fn decode(&self, raw: &RawRecord, which: u8) -> Option<TraceRecord> {
        let (event1, event2) = classify(raw);
        let event = EventDef::find(event1, event2)?;
        let which = Which::from_code(u16::from(which))?;
        // i64, not i128: a 128-bit division is a library call, and this runs for every record.
        let realtime = self.realtime_ns(raw.ktime_ns);
        Some(TraceRecord {
            sec: realtime.div_euclid(1_000_000_000),
            nsec: realtime.rem_euclid(1_000_000_000),
            lwpid: raw.lwpid,
            pid: raw.pid,
            tid: self.thread_descriptors.of(raw.pid, raw.pthread_self),
            event1,
            event2,
            which,
            a: event.fields(which).map(|field| field_value(field, raw)),
            caller: raw.caller,
            stack: 0,
        })
    }
}

/// Whether the call returned 0 (success for every call whose stores are recorded).
fn succeeded(raw: &RawRecord) -> bool {
    raw.rval as i32 == 0
}

fn pointee32(raw: &RawRecord, n: u8) -> i64 {
    i64::from(raw.pointees[usize::from(n) - 1] as u32 as i32)
}

fn field_value(field: Field, raw: &RawRecord) -> i64 {
    let object_layout = ObjectLayout::of(raw.object_layout);
    match field {
        Field::Arg(n) => raw.args[usize::from(n) - 1] as i64,
        // The C functions return int: the upper half of rax is not part of the value.
        Field::Rval => i64::from(raw.rval as i32),
        Field::Rval64 => raw.rval,
        Field::Stored64(n) if succeeded(raw) => raw.pointees[usize::from(n) - 1] as i64,
        Field::Stored32(n) if succeeded(raw) => pointee32(raw, n),
        Field::Zero | Field::Stored64(_) | Field::Stored32(_) => 0,
        Field::Pointee32(n) => pointee32(raw, n),
        Field::Block => i64::from(raw.block),
        // A slow-path unlock wakes a waiter: the lock word it cleared said so.
        Field::MutexWaiters => {
            i64::from(raw.slow_path != 0 || object_layout.mutex_waiters(&raw.object))
        }
        Field::MutexOwner => i64::from(object_layout.mutex_owner(&raw.object)),
        Field::CondWaiters => i64::from(object_layout.cond_waiters(&raw.object)),
        Field::SemCount => i64::from(object_layout.sem_count(&raw.object)),
        Field::BarrierWaiting => i64::from(object_layout.barrier_waiting(&raw.object)),
        // A lock that waited did not hold the mutex: it holds it once now, whatever the words
        // read before its count was set say.
        Field::RecursionDepth if raw.slow_path != 0 => 1,
        Field::RecursionDepth => i64::from(object_layout.recursion_depth(&raw.object)),
        Field::RwReaders => i64::from(object_layout.rw_readers(&raw.object)),
        Field::RwWaiters => i64::from(raw.slow_path != 0 || object_layout.rw_waiters(&raw.object)),
        Field::TimespecSec => raw.timespec[0],
        Field::TimespecNsec => raw.timespec[1],
        Field::Errno => i64::from(raw.errno),
        Field::ElapsedNs => raw.ktime_ns.saturating_sub(raw.started_ns) as i64,
        Field::TimeoutNs => timeout_ns(raw),
    }
}

/// The timeout read through argument 4 at entry, in nanoseconds; -1 for a null pointer.
fn timeout_ns(raw: &RawRecord) -> i64 {
    match raw.args[3] {
        0 => -1,
        _ => raw.timespec[0]
            .saturating_mul(1_000_000_000)
            .saturating_add(raw.timespec[1]),
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::{
        Category,
        object_layout::{GLIBC, GLIBC_2_41},
    };

    use super::*;

    fn raw(event1: u16, event2: u16, which: u8) -> RawRecord {
        RawRecord {
            ktime_ns: 5_000_000_123,
            pthread_self: 0x7f00_0000_1000,
            pid: 10,
            lwpid: 11,
            event1,
            event2,
            which,
            args: [0x5555_0000, 2, 0x7ffd_0000, 4, 5],
            rval: 0xdead_0000_006e, // upper half is garbage; the int is 110 (ETIMEDOUT)
            timespec: [1_700_000_000, 250],
            block: 1,
            ..Default::default()
        }
    }

    #[test]
    fn lays_out_fields_as_the_seed_tables_say() {
        let decoder = Decoder::new(1_000_000_000, EventSet::all());
        let lock_entry = decoder.decode(&raw(2, 2, 1), 1).unwrap();
        assert_eq!(lock_entry.a, [0x5555_0000, 0, 0, 0, 0]);
        assert_eq!((lock_entry.sec, lock_entry.nsec), (6, 123));
        let lock_return = decoder.decode(&raw(2, 2, 2), 2).unwrap();
        assert_eq!(lock_return.a, [110, 1, 0, 0, 0]);
        let unlock = decoder.decode(&raw(2, 4, 0), 0).unwrap();
        assert_eq!(unlock.a, [0x5555_0000, 110, 0, 0, 0]);
        let timedwait = decoder.decode(&raw(3, 5, 1), 1).unwrap();
        assert_eq!(timedwait.a, [0x5555_0000, 2, 1_700_000_000, 250, 0]);
        let mutex_init = decoder.decode(&raw(2, 1, 0), 0).unwrap();
        assert_eq!(
            mutex_init.a,
            [0x5555_0000, 2, 0, 110, 0],
            "rval stays in the seed's a4"
        );
    }

    #[test]
    fn derives_object_fields_from_the_copied_words() {
        let decoder = Decoder::new(0, EventSet::all());
        let with_object = |event2: u16, object: &[(usize, u32)]| {
            let mut record = raw(2, event2, 0);
            for &(word, value) in object {
                record.object[word] = value;
            }
            record
        };
        // glibc mutex __lock: 1 locked, 2 locked with waiters.
        let unlock = |lock: u32| {
            let raw = with_object(4, &[(0, lock)]);
            decoder.decode(&raw, raw.which).unwrap().a[2]
        };
        assert_eq!((unlock(1), unlock(2)), (0, 1));
        // glibc condvar __wrefs (word 9): waiters are counted from bit 3 up.
        let wrefs = GLIBC.cond_waiter_refs.word;
        let mut signal = raw(3, 2, 0);
        signal.object[wrefs] = 0b100;
        assert_eq!(
            decoder.decode(&signal, signal.which).unwrap().a[2],
            0,
            "bit 2 is the clock, not a waiter"
        );
        signal.object[wrefs] = 2 << 3;
        assert_eq!(decoder.decode(&signal, signal.which).unwrap().a[2], 1);
        // glibc 2.41's, without __g_refs: __wrefs is word 7, and word 9 is __g_signals[0].
        signal.object_layout = tracer_common::LAYOUT_COND_WITHOUT_G_REFS;
        assert_eq!(decoder.decode(&signal, signal.which).unwrap().a[2], 0);
        signal.object[GLIBC_2_41.cond_waiter_refs.word] = 1 << 3;
        assert_eq!(decoder.decode(&signal, signal.which).unwrap().a[2], 1);
        // rwlock: 3 readers hold it (3 << 3) while a writer waits (WRLOCKED in a read phase),
        // then a writer holds it alone (WRPHASE | WRLOCKED, wrphase futex 1).
        let mut unlock = raw(5, 4, 0);
        unlock.object[0] = (3 << 3) | 2;
        assert_eq!(decoder.decode(&unlock, unlock.which).unwrap().a[2], 1);
        unlock.object[0] = 3;
        unlock.object[2] = 1;
        assert_eq!(decoder.decode(&unlock, unlock.which).unwrap().a[2], 0);
        let mut rdlock = raw(5, 2, 2);
        rdlock.object[0] = 2 << 3;
        assert_eq!(
            decoder.decode(&rdlock, rdlock.which).unwrap().a[2],
            2,
            "rw_readers"
        );
        // sem_t value: the low 32 bits.
        let mut post = raw(4, 4, 0);
        post.object = [7, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(decoder.decode(&post, post.which).unwrap().a[2], 7);
    }

    #[test]
    fn recursive_mutexes_are_rmutex_records_and_only_selected_categories_are_kept() {
        let mut lock = raw(2, 2, 2);
        lock.object[4] = 1; // PTHREAD_MUTEX_RECURSIVE
        lock.object[1] = 3; // __count after the lock
        let decoder = Decoder::new(0, EventSet::of(Category::Rmutex.events()));
        let record = decoder.decode(&lock, lock.which).unwrap();
        assert_eq!(
            (record.event1, record.event2, record.a[2]),
            (6, 2, 3),
            "rm_depth"
        );
        assert!(decoder.selects(&record));
        let plain = decoder.decode(&raw(2, 2, 2), 2).unwrap();
        assert_eq!(plain.event1, 2);
        assert!(!decoder.selects(&plain), "only rmutex selected");
    }

    #[test]
    fn a_futex_wait_says_how_long_it_blocked_and_its_timeout() {
        let decoder = Decoder::new(0, EventSet::all());
        let mut wait = raw(Category::Futex.code(), 1, 0);
        wait.started_ns = wait.ktime_ns - 2_500;
        wait.args = [0x5555_0000, 0x80, 1, 0x7ffd_0000, 0];
        wait.rval = -110;
        let record = decoder.decode(&wait, wait.which).unwrap();
        assert_eq!(
            record.a,
            [0x5555_0000, 0x80, 2_500, -110, 1_700_000_000_000_000_250]
        );
        wait.args[3] = 0;
        assert_eq!(
            decoder.decode(&wait, wait.which).unwrap().a[4],
            -1,
            "no timeout"
        );
    }

    #[test]
    fn rejects_unknown_codes() {
        let decoder = Decoder::new(0, EventSet::all());
        assert_eq!(decoder.decode(&raw(2, 99, 0), 0), None);
        assert_eq!(decoder.decode(&raw(2, 2, 3), 3), None);
    }

    #[test]
    fn negative_offsets_keep_nanoseconds_in_range() {
        let record = Decoder::new(-1, EventSet::all())
            .decode(&raw(2, 2, 1), 1)
            .unwrap();
        assert_eq!((record.sec, record.nsec), (5, 122));
    }
}
