//! Puts records back in time order before they are written.
//!
//! Each CPU's ring buffer is in order, but a thread that migrates leaves records in several
//! rings, and a drain pass reads the rings one after another: a thread's later record can be
//! read in one pass and its earlier one in the next. So records wait here until every record
//! stamped before them must have been read: anything stamped before the previous pass began was
//! committed long before the current pass (a pass is a poll interval later), so it has been read.
//! Long before, but not always: a producer preempted between stamping a record and committing
//! it (a loaded machine) commits it late, so records also wait out a margin of a few time
//! slices, and while a ring's reader is held up by a record still being written, nothing
//! stamped after that record could have been reserved waits any less (`Ring::held_up_since`).

//!
//! What waits here is any item stamped with CLOCK_MONOTONIC: records, and the system events the
//! session makes (a process attached or gone), which must fall in time order among them.

use std::collections::VecDeque;

/// (timestamp, arrival, slot): the order of an item, and where it waits. Records of one thread
/// keep their program order through the arrival count.
type Key = (u64, u64, u32);

/// The slot bit that says an item is an other one, not a record.
const OTHER: u32 = 1 << 31;

/// What the stage hands over: a record, where it waits, or another item, its own. Two words:
/// an other item is boxed, so that handing over a record does not copy an item's room (perf:
/// a 136-byte copy of each record's `Released` was 3% of the tracer).
pub enum Released<'a, R, T> {
    Record(&'a R),
    Other(Box<T>),
}

/// Items in time order: records (`R`, plain data by the million) and other items (`T`, the
/// session's events and requests, a few). Items wait in slots and are ordered by small keys,
/// so that keeping them in order moves 24 bytes, not a record: many thousands wait here at
/// high rates. The keys of a pass are sorted together and merged into those waiting, which
/// are nearly all older: a sort and an append, where a heap paid a logarithmic sift of cache
/// misses for each item (a fifth of the consumer's time, measured with perf). A record is
/// handed over by reference where it waits and its slot reused as it is: records cost no
/// move out and no drop (perf: a record moved twice more cost as much as its decoding).
pub struct Reorder<R, T> {
    /// Keys waiting, in order.
    waiting: VecDeque<Key>,
    /// Keys pushed since the last release, in arrival order.
    arrived: Vec<Key>,
    records: Vec<R>,
    /// The arrival of the record in each slot while it waits; 0 once it is handed over or
    /// withdrawn, which its key then no longer matches.
    record_arrivals: Vec<u64>,
    free_records: Vec<u32>,
    others: Vec<Option<Box<T>>>,
    free_others: Vec<u32>,
    arrivals: u64,
    /// The start of the previous drain pass: records stamped before it are complete.
    watermark: u64,
    /// How long before the watermark a record may be stamped and still be committed late.
    late_ns: u64,
}

/// How many items ahead of the one handed over the record there is fetched into cache: records
/// wait long enough to have left it, and reading each back missed it (perf: two fifths of the
/// time of writing a record, in the first load from it).
const PREFETCH_AHEAD: usize = 8;

/// Has the CPU start loading `item`'s cache lines (a hint: nothing where there is no such
/// instruction).
#[inline(always)]
#[cfg_attr(
    not(target_arch = "x86_64"),
    expect(unused_variables, reason = "only x86-64's prefetch is stable")
)]
fn prefetch<R>(item: &R) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let start = std::ptr::from_ref(item).cast::<i8>();
        let last = size_of::<R>().saturating_sub(1);
        for offset in (0..last).step_by(64).chain([last]) {
            // SAFETY: SSE is part of the x86-64 baseline, and a prefetch never faults: the
            // address (within `item`) is only a hint.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(offset)) };
        }
    }
}

/// Where a record waits, for it to be withdrawn ([`Reorder::withdraw`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    slot: u32,
    arrival: u64,
}

/// The margin for records committed late: several scheduler time slices.
pub const LATE_COMMIT_NS: u64 = 50_000_000;

impl<R: Copy, T> Reorder<R, T> {
    /// An empty stage whose records wait `late_ns` past the pass that completes them.
    pub fn new(late_ns: u64) -> Self {
        Reorder {
            waiting: VecDeque::new(),
            arrived: Vec::new(),
            records: Vec::new(),
            record_arrivals: Vec::new(),
            free_records: Vec::new(),
            others: Vec::new(),
            free_others: Vec::new(),
            arrivals: 0,
            watermark: 0,
            late_ns,
        }
    }

    /// Holds `record`, stamped `ktime_ns` (CLOCK_MONOTONIC).
    pub fn push_record(&mut self, ktime_ns: u64, record: R) -> Placed {
        let slot = if let Some(slot) = self.free_records.pop() {
            self.records[slot as usize] = record;
            slot
        } else {
            self.records.push(record);
            self.record_arrivals.push(0);
            (self.records.len() - 1) as u32
        };
        self.arrive(ktime_ns, slot);
        self.record_arrivals[slot as usize] = self.arrivals;
        Placed {
            slot,
            arrival: self.arrivals,
        }
    }

    /// Whether the record `placed` put here still waits.
    pub fn holds(&self, placed: Placed) -> bool {
        self.record_arrivals[placed.slot as usize] == placed.arrival
    }

    /// Takes back the record `placed` put here, if it still waits: it will not be handed
    /// over.
    pub fn withdraw(&mut self, placed: Placed) {
        if self.holds(placed) {
            self.record_arrivals[placed.slot as usize] = 0;
        }
    }

    /// Holds `item`, stamped `ktime_ns` (CLOCK_MONOTONIC).
    pub fn push(&mut self, ktime_ns: u64, item: T) {
        let slot = if let Some(slot) = self.free_others.pop() {
            self.others[slot as usize] = Some(Box::new(item));
            slot
        } else {
            self.others.push(Some(Box::new(item)));
            (self.others.len() - 1) as u32
        };
        self.arrive(ktime_ns, slot | OTHER);
    }

    fn arrive(&mut self, ktime_ns: u64, slot: u32) {
        self.arrivals += 1;
        self.arrived.push((ktime_ns, self.arrivals, slot));
    }

    /// Puts the keys that arrived among those waiting, in order.
    fn merge_arrived(&mut self) {
        if self.arrived.is_empty() {
            return;
        }
        self.arrived.sort_unstable();
        // Only the waiting keys newer than the oldest arrival need merging.
        let split = self.waiting.partition_point(|key| *key < self.arrived[0]);
        let newer: Vec<Key> = self.waiting.drain(split..).collect();
        let (mut old, mut new) = (
            newer.into_iter().peekable(),
            self.arrived.drain(..).peekable(),
        );
        while let (Some(a), Some(b)) = (old.peek(), new.peek()) {
            let next = if a <= b { old.next() } else { new.next() };
            self.waiting.extend(next);
        }
        // One side is used up: the rest of the other follows in one piece (nearly always all
        // the arrivals, newer than every key waiting; one at a time cost 2% of the consumer).
        self.waiting.extend(old);
        self.waiting.extend(new);
    }

    /// Hands `sink` each item stamped before `before`, oldest first, and frees its slot.
    fn release_before(&mut self, before: u64, mut sink: impl FnMut(Released<'_, R, T>)) {
        while let Some(&(ktime_ns, arrival, slot)) = self.waiting.front() {
            if ktime_ns >= before {
                break;
            }
            if let Some(&(_, _, ahead)) = self.waiting.get(PREFETCH_AHEAD)
                && ahead & OTHER == 0
                && let Some(record) = self.records.get(ahead as usize)
            {
                prefetch(record);
            }
            self.waiting.pop_front();
            if slot & OTHER == 0 {
                self.free_records.push(slot);
                let still_waiting = &mut self.record_arrivals[slot as usize];
                if *still_waiting == arrival {
                    *still_waiting = 0;
                    sink(Released::Record(&self.records[slot as usize]));
                }
            } else {
                let slot = slot & !OTHER;
                self.free_others.push(slot);
                if let Some(item) = self.others[slot as usize].take() {
                    sink(Released::Other(item));
                }
            }
        }
    }

    /// Ends a drain pass that began at `pass_start_ns` (CLOCK_MONOTONIC): hands over, in time
    /// order, everything stamped before the previous pass began, and before
    /// `incomplete_after` if the pass left a ring that may still hold records older than ones
    /// read (left with records, or held up by one still being written).
    pub fn release(
        &mut self,
        pass_start_ns: u64,
        incomplete_after: Option<u64>,
        sink: impl FnMut(Released<'_, R, T>),
    ) {
        self.merge_arrived();
        let before = self.releases_before(incomplete_after);
        self.watermark = pass_start_ns;
        self.release_before(before, sink);
    }

    /// What the end of the pass now being drawn (`release`) hands over: what is stamped
    /// before this.
    pub fn releases_before(&self, incomplete_after: Option<u64>) -> u64 {
        incomplete_after
            .map_or(self.watermark, |incomplete| incomplete.min(self.watermark))
            .saturating_sub(self.late_ns)
    }

    /// Hands over everything, in time order: tracing has ended.
    pub fn release_all(&mut self, sink: impl FnMut(Released<'_, R, T>)) {
        self.merge_arrived();
        self.release_before(u64::MAX, sink);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records and other items alike carry their stamp, for the tests to check order by.
    fn value(item: Released<'_, u64, u64>) -> u64 {
        match item {
            Released::Record(&record) => record,
            Released::Other(other) => *other,
        }
    }

    fn released(reorder: &mut Reorder<u64, u64>, pass: u64, behind: Option<u64>) -> Vec<u64> {
        let mut out = Vec::new();
        reorder.release(pass, behind, |item| out.push(value(item)));
        out
    }

    #[test]
    fn holds_items_until_the_previous_pass_start_has_passed_them() {
        let mut reorder = Reorder::new(0);
        // Pass 1 (starts at 100) reads a migrated thread's later record only.
        reorder.push_record(90, 90);
        assert!(
            released(&mut reorder, 100, None).is_empty(),
            "nothing is complete before the first pass"
        );
        // Pass 2 (starts at 200) reads the earlier record from the other ring.
        reorder.push(80, 80);
        reorder.push_record(150, 150);
        assert_eq!(released(&mut reorder, 200, None), [80, 90]);
        let mut rest = Vec::new();
        reorder.release_all(|item| rest.push(value(item)));
        assert_eq!(rest, [150]);
    }

    #[test]
    fn a_ring_left_behind_holds_back_what_it_may_still_precede() {
        let mut reorder = Reorder::new(0);
        released(&mut reorder, 100, None);
        for ktime in [40, 60, 90] {
            reorder.push_record(ktime, ktime);
        }
        // A ring was left with records after one stamped 50: only what is older may go.
        assert_eq!(released(&mut reorder, 200, Some(50)), [40]);
        assert_eq!(released(&mut reorder, 300, None), [60, 90]);
    }

    #[test]
    fn records_wait_out_the_margin_for_late_commits() {
        let mut reorder = Reorder::new(30);
        released(&mut reorder, 100, None);
        reorder.push_record(60, 60);
        reorder.push(80, 80);
        assert_eq!(released(&mut reorder, 200, None), [60]);
        assert_eq!(released(&mut reorder, 300, None), [80]);
    }

    #[test]
    fn passes_of_interleaved_items_come_out_in_order() {
        let mut reorder = Reorder::new(0);
        let mut out = Vec::new();
        // Three rings' worth per pass, each ring in order, the rings interleaved in time,
        // some of each pass older than what waits from the pass before; the middle ring's
        // items are other items, not records. Slots are reused from pass to pass.
        let mut next = 0u64;
        for pass in 1..=20u64 {
            for ring in 0..3u64 {
                for i in 0..50u64 {
                    let ktime = pass * 1000 + i * 7 + ring * 3 - 500;
                    match ring {
                        1 => reorder.push(ktime, ktime),
                        _ => {
                            reorder.push_record(ktime, ktime);
                        }
                    }
                    next += 1;
                }
            }
            reorder.release(pass * 1000, None, |item| out.push(value(item)));
        }
        reorder.release_all(|item| out.push(value(item)));
        assert_eq!(out.len() as u64, next);
        assert!(out.is_sorted());
    }

    #[test]
    fn a_withdrawn_record_is_not_handed_over_and_its_slot_serves_again() {
        let mut reorder = Reorder::new(0);
        reorder.push_record(10, 10);
        let entry = reorder.push_record(20, 20);
        reorder.push(25, 25);
        reorder.withdraw(entry);
        assert!(!reorder.holds(entry), "withdrawn");
        assert!(released(&mut reorder, 100, None).is_empty());
        assert_eq!(released(&mut reorder, 200, None), [10, 25]);
        // The freed slot holds the next record, which the old placing cannot withdraw.
        let next = reorder.push_record(150, 150);
        assert_eq!(next.slot, entry.slot);
        assert!(reorder.holds(next) && !reorder.holds(entry));
        reorder.withdraw(entry);
        let late = reorder.push_record(160, 160);
        assert_eq!(released(&mut reorder, 300, None), [150, 160]);
        assert!(
            !reorder.holds(late),
            "a record handed over is no longer here"
        );
    }

    #[test]
    fn equal_timestamps_keep_arrival_order() {
        let mut reorder = Reorder::new(0);
        reorder.push_record(5, 1);
        reorder.push(5, 2);
        reorder.push_record(5, 3);
        let mut out = Vec::new();
        reorder.release_all(|item| out.push(value(item)));
        assert_eq!(out, [1, 2, 3]);
    }
}
