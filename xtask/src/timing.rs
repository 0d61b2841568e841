//! The wall time of each phase of a long task (`cargo xtask test`), printed as one table at
//! its end, so that a closing note can quote it and a phase that grew shows.

use std::time::{Duration, Instant};

/// The phases timed so far, in the order they ended, since the task began.
pub struct Phases {
    began: Instant,
    rows: Vec<(String, Duration)>,
}

impl Phases {
    /// No phase yet; the task's time counts from now.
    pub fn start() -> Self {
        Phases {
            began: Instant::now(),
            rows: Vec::new(),
        }
    }

    /// Runs `phase` and records how long it took, whether it succeeded or not.
    pub fn time<T>(&mut self, name: &str, phase: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let result = phase();
        self.record(name, start.elapsed());
        result
    }

    /// Records a phase timed elsewhere (a test binary, a kernel boot).
    pub fn record(&mut self, name: impl Into<String>, took: Duration) {
        self.rows.push((name.into(), took));
    }

    /// The table: each phase with its wall time, and the whole task's so far.
    pub fn table(&self) -> String {
        self.table_with_total(self.began.elapsed())
    }

    fn table_with_total(&self, total: Duration) -> String {
        let mut table = String::from("| phase | wall time |\n|---|---|\n");
        for (name, took) in &self.rows {
            table += &format!("| {name} | {} |\n", minutes_and_seconds(*took));
        }
        table += &format!("| **total** | **{}** |\n", minutes_and_seconds(total));
        table
    }
}

/// `12:05` for 725 s: the form durations of minutes are read in.
fn minutes_and_seconds(took: Duration) -> String {
    let seconds = took.as_secs_f64().round() as u64;
    format!("{}:{:02}", seconds / 60, seconds % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_each_phase_in_order_and_the_total() {
        let mut phases = Phases::start();
        let answer = phases.time("fmt", || 42);
        assert_eq!(answer, 42);
        phases.record("kernel 6.1", Duration::from_secs(725));
        let table = phases.table_with_total(Duration::from_millis(3_599_600));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[2], "| fmt | 0:00 |");
        assert_eq!(lines[3], "| kernel 6.1 | 12:05 |");
        assert_eq!(lines[4], "| **total** | **60:00** |");
        assert_eq!(lines.len(), 5);
    }
}
