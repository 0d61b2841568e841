//! Records the kernel could not deliver. The BPF side counts, per CPU, each record it found no
//! room for in that CPU's ring; the session reads the counters at every drain, so that a loss
//! is reported while tracing, when it happens and on which CPUs, not only as a total at the end.

use std::time::{Duration, Instant};

/// At most one report a second: a consumer that cannot keep up loses records at every drain.
const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// What to do about it, said with every report.
const ADVICE: &str = "the tracer could not keep up: give each CPU a bigger ring (--buffer-kib), \
                      trace fewer --events, or use --lossless";

/// Lost records so far, and what has been reported of them.
pub struct Losses {
    started: Instant,
    /// Per CPU, as last read from the kernel's counters.
    per_cpu: Vec<u64>,
    /// Per CPU, as far as reports have told.
    reported: Vec<u64>,
    last_report: Option<Instant>,
    /// Records that reached userspace but could not be read as records.
    undecodable: u64,
    /// Futex calls unseen: runs of the futex programs the kernel skipped.
    skipped: u64,
}

impl Losses {
    /// Nothing lost yet; reports say how long after `started` a loss was seen.
    pub fn new(started: Instant) -> Self {
        Losses {
            started,
            per_cpu: Vec::new(),
            reported: Vec::new(),
            last_report: None,
            undecodable: 0,
            skipped: 0,
        }
    }

    /// Takes the kernel's per-CPU counters; returns a report to print if records have been
    /// lost since the last one and the last was at least a second before `now`.
    pub fn update(&mut self, per_cpu: Vec<u64>, now: Instant) -> Option<String> {
        self.per_cpu = per_cpu;
        let due = self
            .last_report
            .is_none_or(|last| now.duration_since(last) >= REPORT_INTERVAL);
        if due { self.report(now) } else { None }
    }

    /// Records that arrived but could not be decoded: lost too, on no particular CPU.
    pub fn add_undecodable(&mut self, count: u64) {
        self.undecodable += count;
    }

    /// Takes the count of the futex programs' runs the kernel skipped so far; returns how many
    /// are new, each a futex call unseen, and a report to print of them.
    pub fn update_skipped(&mut self, skipped: u64, now: Instant) -> Option<(u64, String)> {
        let new = skipped.checked_sub(self.skipped).filter(|&new| new > 0)?;
        self.skipped = skipped;
        let report = format!(
            "up to {new} futex calls unseen {:.1} s into the trace: the kernel skipped the \
             futex programs where a run of them was preempted on the same CPU",
            now.duration_since(self.started).as_secs_f64(),
        );
        Some((new, report))
    }

    /// A report of what has been lost since the last one, if anything has, whenever it is.
    pub fn report(&mut self, now: Instant) -> Option<String> {
        self.reported.resize(self.per_cpu.len(), 0);
        let new: Vec<(usize, u64)> = self
            .per_cpu
            .iter()
            .zip(&self.reported)
            .enumerate()
            .filter(|(_, (now, before))| now > before)
            .map(|(cpu, (now, before))| (cpu, now - before))
            .collect();
        if new.is_empty() {
            return None;
        }
        self.reported.clone_from(&self.per_cpu);
        self.last_report = Some(now);
        let total: u64 = new.iter().map(|(_, n)| n).sum();
        let cpus: Vec<String> = new
            .iter()
            .map(|(cpu, n)| format!("cpu {cpu}: {n}"))
            .collect();
        Some(format!(
            "lost {total} records {:.1} s into the trace ({}): {ADVICE}",
            now.duration_since(self.started).as_secs_f64(),
            cpus.join(", ")
        ))
    }

    /// Every record lost so far.
    pub fn total(&self) -> u64 {
        self.per_cpu.iter().sum::<u64>() + self.undecodable + self.skipped
    }

    /// The totals split by CPU, for `--verbose`.
    pub fn split(&self) -> String {
        let cpus: Vec<String> = self
            .per_cpu
            .iter()
            .enumerate()
            .map(|(cpu, n)| format!("cpu {cpu}: {n}"))
            .collect();
        format!(
            "{}; undecodable: {}; futex calls skipped: {}",
            cpus.join(", "),
            self.undecodable,
            self.skipped
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_new_losses_per_cpu_at_most_once_a_second() {
        let start = Instant::now();
        let mut losses = Losses::new(start);
        assert_eq!(losses.update(vec![0, 0], start), None);
        let first = losses
            .update(vec![0, 7], start + Duration::from_millis(500))
            .unwrap();
        assert!(first.starts_with("lost 7 records 0.5 s into the trace (cpu 1: 7): "));
        // Within the second: counted, not reported.
        assert_eq!(
            losses.update(vec![3, 9], start + Duration::from_millis(900)),
            None
        );
        assert_eq!(losses.total(), 12);
        let second = losses
            .update(vec![3, 10], start + Duration::from_millis(1600))
            .unwrap();
        assert!(
            second.starts_with("lost 6 records 1.6 s into the trace (cpu 0: 3, cpu 1: 3): "),
            "{second}"
        );
        losses.add_undecodable(2);
        assert_eq!(losses.total(), 15);
        assert_eq!(
            losses.split(),
            "cpu 0: 3, cpu 1: 10; undecodable: 2; futex calls skipped: 0"
        );
        assert_eq!(losses.report(start + Duration::from_secs(2)), None);
    }

    #[test]
    fn futex_calls_the_kernel_skipped_are_lost_and_said_as_they_are_learnt() {
        let start = Instant::now();
        let mut losses = Losses::new(start);
        assert_eq!(losses.update_skipped(0, start), None);
        let (new, report) = losses
            .update_skipped(3, start + Duration::from_millis(200))
            .unwrap();
        assert_eq!(new, 3);
        assert!(
            report.starts_with("up to 3 futex calls unseen 0.2 s into the trace: "),
            "{report}"
        );
        assert_eq!(
            losses.update_skipped(3, start + Duration::from_secs(1)),
            None
        );
        assert_eq!(
            losses
                .update_skipped(5, start + Duration::from_secs(1))
                .unwrap()
                .0,
            2
        );
        assert_eq!(losses.total(), 5);
        assert!(losses.split().ends_with("futex calls skipped: 5"));
    }
}
