//! `--min-wait`: waits shorter than a bound are counted, not written.
//!
//! A slow path's wait comes as two records, its entry half (with its stack) when it begins and
//! its return half when it ends; a futex wait as one record at its end, which says how long it
//! took, and is sorted as it is drawn. The two halves of a wait wait in the reorder stage like
//! every record, and may be drawn in either order (a thread that moved between CPUs left them
//! in two rings). Each pass, before the stage hands records over, the halves stamped before
//! the time the pass completes are paired, thread by thread in time order: an entry half and
//! the return half right after it, of the same call, are a wait; a short one that blocked and
//! took what it waited for (as the analysis counts a contended acquisition) has both halves
//! withdrawn from the stage and is counted instead, per thread, call, object and caller. The
//! stage holds every record the bound longer than it would, so that both halves of a short
//! wait are still in it when they are paired. Each wait is written or counted, never both. The
//! counts go into the stream as `thrtrace_short_waits` events, once a second, as their process
//! exits and as tracing ends.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};
use tracer_common::{CallRole, Category, EventDef, Field, Which};
use tracer_model::{
    TraceRecord,
    event::{SystemEvent, SystemKind},
};

use crate::capture::{
    draw::Drawn,
    reorder::{Placed, Reorder},
};

/// The bound, the halves of waits not yet paired and the counts not yet told.
pub struct ShortWaits {
    below_ns: u64,
    /// Each thread's slow-path halves in the stage, by stamp and arrival, till they are paired.
    halves: HashMap<u32, BTreeMap<(u64, u64), Half>>,
    arrivals: u64,
    tallies: HashMap<TallyKey, Tally>,
    /// Waits counted since tracing began.
    counted: u64,
}

/// One half of a slow path's wait, where it waits in the stage.
#[derive(Clone, Copy)]
struct Half {
    which: Which,
    event: (u16, u16),
    pid: u32,
    placed: Placed,
    /// The object and caller its entry half names.
    object: u64,
    caller: u64,
    /// What of it a withdrawal undoes.
    withdrawn: Withdrawn,
    /// Its wait may be counted as far as this half tells: no gap before it, and for an entry
    /// half a semaphore found at 0, for a return half a wait that blocked and succeeded.
    countable: bool,
}

/// An entry half taken back from the stage ([`ShortWaits::pair`]): the stack it names, and
/// whether that is whole (none: it was to carry none).
#[derive(Clone, Copy)]
pub struct Withdrawn {
    pub stack: u32,
    pub whole: Option<bool>,
}

#[derive(Clone, Copy, Hash, PartialEq, Eq)]
struct TallyKey {
    pid: u32,
    lwpid: u32,
    call: &'static str,
    object: u64,
    caller: u64,
}

#[derive(Clone, Copy, Default)]
struct Tally {
    waits: u64,
    total_ns: u64,
}

/// What becomes of a record drawn ([`ShortWaits::sort`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sorted {
    /// Written, unless its wait turns out short: one half of a slow path's wait, to hand to
    /// [`ShortWaits::placed`] once it is in the stage.
    Half,
    /// Written.
    Written,
    /// Counted as a short wait: not written.
    Counted,
}

impl ShortWaits {
    /// Waits shorter than `below_ns` are counted, not written.
    pub fn new(below_ns: u64) -> Self {
        ShortWaits {
            below_ns,
            halves: HashMap::new(),
            arrivals: 0,
            tallies: HashMap::new(),
            counted: 0,
        }
    }

    /// How much longer the reorder stage must hold records: the bound.
    pub fn late_ns(&self) -> u64 {
        self.below_ns
    }

    /// How many waits were counted since tracing began, and the bound: what the summary
    /// says.
    pub fn counted(&self) -> (u64, u64) {
        (self.counted, self.below_ns)
    }

    /// Sorts `record`, taken on a slow path if `slow_path`, after `lost_before` records the
    /// kernel could not deliver: a short futex wait is counted now; a slow path's half waits
    /// for its pair.
    pub fn sort(&mut self, record: &TraceRecord, slow_path: bool, lost_before: u32) -> Sorted {
        match record.which {
            _ if !slow_path => Sorted::Written,
            Which::Entry | Which::Return => Sorted::Half,
            // A gap's marker goes before the record after it, which is written.
            Which::Whole if lost_before == 0 && is_futex_wait(record) => {
                let took = record.field(Field::ElapsedNs).unwrap_or(0).max(0) as u64;
                let object = record.field(Field::Arg(1)).unwrap_or(0) as u64;
                match took < self.below_ns {
                    true => {
                        let event = (record.event1, record.event2);
                        let on = (object, record.caller);
                        self.tally(record.pid, record.lwpid, event, on, took);
                        Sorted::Counted
                    }
                    false => Sorted::Written,
                }
            }
            Which::Whole => Sorted::Written,
        }
    }

    /// `record`, one half of a slow path's wait stamped `ktime_ns` and drawn after
    /// `lost_before` records lost, waits in the stage at `placed`; `whole` says whether its
    /// stack is whole (none: it carries none).
    pub fn placed(
        &mut self,
        ktime_ns: u64,
        record: &TraceRecord,
        (placed, lost_before): (Placed, u32),
        whole: Option<bool>,
    ) {
        self.arrivals += 1;
        let value = |field: Field| record.field(field);
        let countable = lost_before == 0
            && match record.which {
                Which::Entry => value(Field::SemCount).is_none_or(|count| count == 0),
                _ => {
                    value(Field::Rval).is_none_or(|rval| rval as i32 == 0)
                        && value(Field::Block).is_none_or(|blocked| blocked != 0)
                }
            };
        let half = Half {
            which: record.which,
            event: (record.event1, record.event2),
            pid: record.pid,
            placed,
            object: record.a[0] as u64,
            caller: record.caller,
            withdrawn: Withdrawn {
                stack: record.stack,
                whole,
            },
            countable,
        };
        self.halves
            .entry(record.lwpid)
            .or_default()
            .insert((ktime_ns, self.arrivals), half);
    }

    /// Pairs the halves stamped before `complete_before`, before which every record has been
    /// drawn: each short wait's two halves are withdrawn from `reorder` and counted. Returns
    /// the entry halves withdrawn.
    pub fn pair(
        &mut self,
        complete_before: u64,
        reorder: &mut Reorder<Drawn, impl Sized>,
    ) -> Vec<Withdrawn> {
        let mut counted = Vec::new();
        self.halves.retain(|&lwpid, halves| {
            let later = halves.split_off(&(complete_before, 0));
            let complete = std::mem::replace(halves, later);
            let mut complete = complete.into_iter().peekable();
            while let Some(((entry_ns, arrival), entry)) = complete.next() {
                if entry.which != Which::Entry {
                    continue;
                }
                let Some(&((return_ns, _), back)) = complete.peek() else {
                    // Its return may come after: it waits for it, unless that would be long.
                    if entry_ns + self.below_ns > complete_before {
                        halves.insert((entry_ns, arrival), entry);
                    }
                    break;
                };
                if back.which != Which::Return || back.event != entry.event {
                    continue;
                }
                complete.next();
                let took = return_ns - entry_ns;
                if took < self.below_ns
                    && entry.countable
                    && back.countable
                    && reorder.holds(entry.placed)
                    && reorder.holds(back.placed)
                {
                    reorder.withdraw(entry.placed);
                    reorder.withdraw(back.placed);
                    counted.push((lwpid, entry, took));
                }
            }
            !halves.is_empty()
        });
        counted
            .into_iter()
            .map(|(lwpid, entry, took)| {
                let on = (entry.object, entry.caller);
                self.tally(entry.pid, lwpid, entry.event, on, took);
                entry.withdrawn
            })
            .collect()
    }

    /// Counts a wait of thread `lwpid` of `pid` in a call of `event` (its codes) on `object`
    /// from `caller` that took `took` ns.
    fn tally(
        &mut self,
        pid: u32,
        lwpid: u32,
        (event1, event2): (u16, u16),
        (object, caller): (u64, u64),
        took: u64,
    ) {
        let Some(row) = EventDef::row(event1, event2) else {
            return;
        };
        let key = TallyKey {
            pid,
            lwpid,
            call: tracer_common::EVENTS[row].name,
            object,
            caller,
        };
        let tally = self.tallies.entry(key).or_default();
        self.counted += 1;
        tally.waits += 1;
        tally.total_ns += took;
    }

    /// The counts since the last call, of process `of` or (none) of every one, as events
    /// stamped `time_ns`; those counts start again.
    pub fn take_events(&mut self, time_ns: i64, of: Option<u32>) -> Vec<SystemEvent> {
        let mut tallies: Vec<(TallyKey, Tally)> = self
            .tallies
            .extract_if(|key, _| of.is_none_or(|pid| key.pid == pid))
            .collect();
        tallies.sort_unstable_by_key(|(key, _)| {
            (key.pid, key.lwpid, key.call, key.object, key.caller)
        });
        tallies
            .into_iter()
            .map(|(key, tally)| {
                let kind = SystemKind::ShortWaits {
                    call: key.call.to_owned(),
                    object: key.object,
                    caller: key.caller,
                    waits: tally.waits,
                    wait_total_ns: tally.total_ns,
                    min_wait_ns: self.below_ns,
                };
                SystemEvent::of_process(time_ns, key.pid, key.lwpid, kind)
            })
            .collect()
    }
}

/// A futex wait's record (one record at its end, its time taken in it).
fn is_futex_wait(record: &TraceRecord) -> bool {
    record.event1 == Category::Futex.code()
        && EventDef::row(record.event1, record.event2)
            .is_some_and(|row| matches!(tracer_common::EVENTS[row].role, CallRole::Wait(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::reorder::Released;

    const OBJECT: i64 = 0x1000;

    fn record(name: &str, which: Which, lwpid: u32, a: [i64; 5]) -> TraceRecord {
        let row = EventDef::by_name(name).unwrap();
        TraceRecord {
            sec: 0,
            nsec: 0,
            lwpid,
            pid: 7,
            tid: 0,
            event1: row.category.code(),
            event2: row.event2,
            which,
            a,
            caller: 0x1234,
            stack: 0,
        }
    }

    /// Draws `record` stamped `ktime_ns` as the session does.
    fn draw(
        waits: &mut ShortWaits,
        reorder: &mut Reorder<Drawn, ()>,
        ktime_ns: u64,
        record: TraceRecord,
    ) {
        let sorted = waits.sort(&record, true, 0);
        if sorted == Sorted::Counted {
            return;
        }
        let placed = reorder.push_record(ktime_ns, drawn(record, ktime_ns));
        if sorted == Sorted::Half {
            waits.placed(ktime_ns, &record, (placed, 0), None);
        }
    }

    fn drawn(record: TraceRecord, ktime_ns: u64) -> Drawn {
        Drawn {
            record: Some(record),
            time_ns: ktime_ns as i64,
            cpu: 0,
            lost_before: 0,
            stack_left_out: false,
        }
    }

    /// Draws a mutex lock's wait on thread `lwpid` from `start` to `end`, its halves in order.
    fn draw_wait(
        waits: &mut ShortWaits,
        reorder: &mut Reorder<Drawn, ()>,
        lwpid: u32,
        (start, end): (u64, u64),
    ) {
        draw(waits, reorder, start, lock_half(Which::Entry, lwpid));
        draw(waits, reorder, end, lock_half(Which::Return, lwpid));
    }

    /// A mutex lock's half on thread `lwpid`; a return half that blocked (`block?` 1) and
    /// succeeded.
    fn lock_half(which: Which, lwpid: u32) -> TraceRecord {
        let row = EventDef::by_name("mutex_lock").unwrap();
        let mut a = [0; 5];
        if which == Which::Entry {
            a[0] = OBJECT;
        } else {
            let block = row.fields(which).iter().position(|f| *f == Field::Block);
            a[block.unwrap()] = 1;
        }
        record("mutex_lock", which, lwpid, a)
    }

    /// What the stage hands over once everything is paired: each record's thread, part and
    /// stamp.
    fn written(waits: &mut ShortWaits, reorder: &mut Reorder<Drawn, ()>) -> Vec<(u32, Which, i64)> {
        waits.pair(u64::MAX, reorder);
        let mut out = Vec::new();
        reorder.release_all(|item| {
            if let Released::Record(drawn) = item {
                let record = drawn.record.unwrap();
                out.push((record.lwpid, record.which, drawn.time_ns));
            }
        });
        out
    }

    #[test]
    fn a_short_wait_is_counted_whichever_half_is_drawn_first_and_a_long_one_written() {
        let mut waits = ShortWaits::new(10_000);
        let mut reorder = Reorder::new(0);
        // Thread 1 waits 4 µs, then 3 µs, its halves drawn out of order (two rings).
        draw(&mut waits, &mut reorder, 5_000, lock_half(Which::Entry, 1));
        draw(&mut waits, &mut reorder, 4_100, lock_half(Which::Return, 1));
        draw(&mut waits, &mut reorder, 8_000, lock_half(Which::Return, 1));
        draw(&mut waits, &mut reorder, 100, lock_half(Which::Entry, 1));
        // Thread 2 waits 50 µs.
        draw_wait(&mut waits, &mut reorder, 2, (200, 50_200));
        assert_eq!(
            written(&mut waits, &mut reorder),
            [(2, Which::Entry, 200), (2, Which::Return, 50_200)]
        );
        let events = waits.take_events(9, None);
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].pid, events[0].lwpid), (7, 1));
        assert_eq!(
            events[0].kind,
            SystemKind::ShortWaits {
                call: "mutex_lock".into(),
                object: OBJECT as u64,
                caller: 0x1234,
                waits: 2,
                wait_total_ns: 7_000,
                min_wait_ns: 10_000,
            }
        );
        assert!(waits.take_events(10, None).is_empty(), "told once");
        // A process's own, as it exits.
        draw_wait(&mut waits, &mut reorder, 1, (60_000, 61_000));
        waits.pair(u64::MAX, &mut reorder);
        assert!(
            waits.take_events(11, Some(8)).is_empty(),
            "another process's"
        );
        assert_eq!(waits.take_events(11, Some(7)).len(), 1);
    }

    #[test]
    fn a_short_wait_that_did_not_block_is_written_as_the_analysis_would_not_count_it() {
        let mut waits = ShortWaits::new(10_000);
        let mut reorder = Reorder::new(0);
        draw(&mut waits, &mut reorder, 100, lock_half(Which::Entry, 1));
        let mut unblocked = lock_half(Which::Return, 1);
        unblocked.a = [0; 5];
        draw(&mut waits, &mut reorder, 200, unblocked);
        assert_eq!(
            written(&mut waits, &mut reorder),
            [(1, Which::Entry, 100), (1, Which::Return, 200)]
        );
        assert!(waits.take_events(0, None).is_empty());
    }

    #[test]
    fn a_gap_between_halves_keeps_them_apart() {
        let mut waits = ShortWaits::new(10_000);
        let mut reorder = Reorder::new(0);
        let back = lock_half(Which::Return, 1);
        draw(&mut waits, &mut reorder, 100, lock_half(Which::Entry, 1));
        // A return half after a gap, then (its entry lost) another return: neither pairs.
        let placed = reorder.push_record(200, drawn(back, 200));
        waits.placed(200, &back, (placed, 1), None);
        draw(&mut waits, &mut reorder, 300, back);
        assert_eq!(written(&mut waits, &mut reorder).len(), 3);
        assert!(waits.take_events(0, None).is_empty());
    }

    #[test]
    fn halves_are_paired_only_once_every_record_before_them_is_drawn() {
        let mut waits = ShortWaits::new(10_000);
        let mut reorder = Reorder::new(0);
        draw(&mut waits, &mut reorder, 100, lock_half(Which::Entry, 1));
        // The pass completes records before 1,000 only: the return may still come.
        waits.pair(1_000, &mut reorder);
        draw(&mut waits, &mut reorder, 3_100, lock_half(Which::Return, 1));
        assert!(written(&mut waits, &mut reorder).is_empty());
        assert_eq!(waits.take_events(0, None).len(), 1);
    }

    #[test]
    fn a_short_wait_with_a_half_already_handed_over_is_written_whole() {
        let mut waits = ShortWaits::new(10_000);
        let mut reorder = Reorder::new(0);
        draw(&mut waits, &mut reorder, 100, lock_half(Which::Entry, 3));
        let mut early = Vec::new();
        reorder.release_all(|_| early.push(()));
        draw(&mut waits, &mut reorder, 200, lock_half(Which::Return, 3));
        assert_eq!(written(&mut waits, &mut reorder), [(3, Which::Return, 200)]);
        assert!(waits.take_events(9, None).is_empty());
    }

    #[test]
    fn a_futex_wait_is_counted_by_the_time_it_took() {
        let mut waits = ShortWaits::new(10_000);
        let row = EventDef::by_name("futex_wait").unwrap();
        let at = |field: Field| {
            row.fields(Which::Whole)
                .iter()
                .position(|f| *f == field)
                .unwrap()
        };
        let mut a = [0; 5];
        a[at(Field::Arg(1))] = 0x2000;
        a[at(Field::ElapsedNs)] = 9_999;
        let short = record("futex_wait", Which::Whole, 4, a);
        assert_eq!(waits.sort(&short, true, 1), Sorted::Written, "after a gap");
        assert_eq!(waits.sort(&short, true, 0), Sorted::Counted);
        a[at(Field::ElapsedNs)] = 10_000;
        let long = record("futex_wait", Which::Whole, 4, a);
        assert_eq!(waits.sort(&long, true, 0), Sorted::Written);
        let wake = record("futex_wake", Which::Whole, 4, a);
        assert_eq!(waits.sort(&wake, true, 0), Sorted::Written);
        let events = waits.take_events(0, None);
        assert!(matches!(
            events[0].kind,
            SystemKind::ShortWaits {
                object: 0x2000,
                waits: 1,
                wait_total_ns: 9_999,
                ..
            }
        ));
    }
}
