//! Puts records back in time order before they are written.
//!
//! Each CPU's ring buffer is in order, but a thread that migrates leaves records in several
//! rings, and a drain pass reads the rings one after another: a thread's later record can be
//! read in one pass and its earlier one in the next. So records wait here until every record
//! stamped before them must have been read: anything stamped before the previous pass began was
//! committed long before the current pass (a pass is a poll interval later), so it has been read.

use std::{cmp::Reverse, collections::BinaryHeap};

use tracer_common::RawRecord;

#[derive(Default)]
pub struct Reorder {
    pending: BinaryHeap<Reverse<Held>>,
    arrivals: u64,
    /// The start of the previous drain pass: records stamped before it are complete.
    watermark: u64,
}

/// A record ordered by (timestamp, arrival): records of one thread keep their program order.
struct Held {
    key: (u64, u64),
    record: RawRecord,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

impl Reorder {
    pub fn push(&mut self, record: &RawRecord) {
        self.arrivals += 1;
        self.pending.push(Reverse(Held {
            key: (record.ktime_ns, self.arrivals),
            record: *record,
        }));
    }

    /// Ends a drain pass that began at `pass_start_ns` (CLOCK_MONOTONIC): hands over, in time
    /// order, every record stamped before the previous pass began, and before `behind_after`
    /// if the pass left a ring with records in it (they may be older than ones read).
    pub fn release(
        &mut self,
        pass_start_ns: u64,
        behind_after: Option<u64>,
        mut sink: impl FnMut(&RawRecord),
    ) {
        let previous = std::mem::replace(&mut self.watermark, pass_start_ns);
        let watermark = behind_after.map_or(previous, |behind| behind.min(previous));
        while let Some(Reverse(held)) = self.pending.peek() {
            if held.key.0 >= watermark {
                break;
            }
            sink(&held.record);
            self.pending.pop();
        }
    }

    /// Hands over every held record of `pid` in time order: the process has exited, so none of
    /// its records can still be in flight.
    pub fn release_process(&mut self, pid: u32, mut sink: impl FnMut(&RawRecord)) {
        let (ours, others): (Vec<_>, Vec<_>) = self
            .pending
            .drain()
            .partition(|Reverse(held)| held.record.pid == pid);
        self.pending = others.into();
        let mut ours: Vec<Held> = ours.into_iter().map(|Reverse(held)| held).collect();
        ours.sort_unstable();
        ours.iter().for_each(|held| sink(&held.record));
    }

    /// Hands over everything, in time order: tracing has ended.
    pub fn release_all(&mut self, mut sink: impl FnMut(&RawRecord)) {
        while let Some(Reverse(held)) = self.pending.pop() {
            sink(&held.record);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pid: u32, ktime_ns: u64) -> RawRecord {
        RawRecord {
            pid,
            ktime_ns,
            ..Default::default()
        }
    }

    fn times(records: &[RawRecord]) -> Vec<u64> {
        records.iter().map(|r| r.ktime_ns).collect()
    }

    #[test]
    fn holds_records_until_the_previous_pass_start_has_passed_them() {
        let mut reorder = Reorder::default();
        let mut out = Vec::new();
        // Pass 1 (starts at 100) reads a migrated thread's later record only.
        reorder.push(&record(1, 90));
        reorder.release(100, None, |r| out.push(*r));
        assert!(out.is_empty(), "nothing is complete before the first pass");
        // Pass 2 (starts at 200) reads the earlier record from the other ring.
        reorder.push(&record(1, 80));
        reorder.push(&record(1, 150));
        reorder.release(200, None, |r| out.push(*r));
        assert_eq!(times(&out), [80, 90]);
        reorder.release_all(|r| out.push(*r));
        assert_eq!(times(&out), [80, 90, 150]);
    }

    #[test]
    fn a_ring_left_behind_holds_back_what_it_may_still_precede() {
        let mut reorder = Reorder::default();
        let mut out = Vec::new();
        reorder.release(100, None, |r| out.push(*r));
        for ktime in [40, 60, 90] {
            reorder.push(&record(1, ktime));
        }
        // A ring was left with records after one stamped 50: only what is older may go.
        reorder.release(200, Some(50), |r| out.push(*r));
        assert_eq!(times(&out), [40]);
        reorder.release(300, None, |r| out.push(*r));
        assert_eq!(times(&out), [40, 60, 90]);
    }

    #[test]
    fn equal_timestamps_keep_arrival_order() {
        let mut reorder = Reorder::default();
        let mut out = Vec::new();
        for lwpid in 1..=3 {
            reorder.push(&RawRecord {
                lwpid,
                ktime_ns: 5,
                ..Default::default()
            });
        }
        reorder.release_all(|r| out.push(r.lwpid));
        assert_eq!(out, [1, 2, 3]);
    }

    #[test]
    fn an_exited_process_is_released_whole_and_alone() {
        let mut reorder = Reorder::default();
        let mut out = Vec::new();
        for ktime in [30, 20, 40, 10] {
            reorder.push(&record(7, ktime));
        }
        reorder.push(&record(8, 10));
        reorder.release_process(7, |r| out.push(*r));
        assert_eq!(times(&out), [10, 20, 30, 40]);
        out.clear();
        reorder.release_all(|r| out.push(*r));
        assert_eq!(out, [record(8, 10)]);
    }
}
