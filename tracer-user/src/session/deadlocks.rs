//! Live deadlock detection: the records the session writes feed `tracer_model::analysis`
//! (without statistics); each pass asks it for new cycles of threads blocked longer than
//! `--deadlock-after`, and each is said once, with the threads' names and where each waits
//! and locked, and written to the trace as a `thrtrace_deadlock` event.

use std::time::Duration;

use tracer_model::{
    TraceRecord,
    analysis::{Analysis, Deadlock},
    event::{SystemEvent, SystemKind},
};

use super::facts;
use crate::{say::duration, symbolize::Symbols};

pub struct DeadlockWatch {
    analysis: Analysis,
    threshold: Duration,
    symbols: Symbols,
}

impl DeadlockWatch {
    pub fn new(threshold: Duration) -> Self {
        DeadlockWatch {
            analysis: Analysis::new(false),
            threshold,
            symbols: Symbols::new(),
        }
    }

    /// A record written, with its `owner_hint`.
    pub fn record(&mut self, record: &TraceRecord, owner_hint: u32) {
        self.analysis.record_with_owner(record, owner_hint);
    }

    pub fn process_exited(&mut self, pid: u32) {
        self.analysis.process_exited(pid);
    }

    /// The deadlocks found at `now_ns` not said before, as events (their message said).
    pub fn check(&mut self, now_ns: i64) -> Vec<SystemEvent> {
        let threshold_ns = self.threshold.as_nanos().min(i64::MAX as u128) as i64;
        let found = self.analysis.new_deadlocks(now_ns, threshold_ns);
        found
            .into_iter()
            .map(|deadlock| {
                let message = self.describe(&deadlock, now_ns);
                say!("thrtrace-bpf: {message}");
                let kind = SystemKind::Deadlock {
                    certain: deadlock.certain,
                    threads: serde_json::to_string(&deadlock.threads).unwrap_or_default(),
                    message,
                };
                let pid = deadlock.threads.first().map_or(0, |t| t.pid);
                SystemEvent::of_process(now_ns, pid, 0, kind)
            })
            .collect()
    }

    /// "deadlock: thread 4251 (worker-3) waits in pthread_mutex_lock(0x55d0c0a4e0c0) at
    /// queue.c:88, held by 4252 (worker-4) since 12.4 s, locked at queue.c:131; thread 4252
    /// waits in ...".
    fn describe(&mut self, deadlock: &Deadlock, now_ns: i64) -> String {
        let threads = &deadlock.threads;
        let parts: Vec<String> = (0..threads.len())
            .map(|i| {
                let waiter = &threads[i];
                let holder = &threads[(i + 1) % threads.len()];
                let waits_at = self.symbols.locate_live(waiter.pid, waiter.wait_caller);
                let woken = waiter.call.contains("cond_") || waiter.call.starts_with("sem_");
                let holder_named = format!("{} ({})", holder.lwpid, comm(holder.pid, holder.lwpid));
                let by = match (woken, holder.locked_at) {
                    (true, _) => format!("which {holder_named} woke before"),
                    (false, 0) => format!(
                        "held by {holder_named} since before the trace began, locked at an \
                         unknown place"
                    ),
                    (false, at) => format!(
                        "held by {holder_named} since {}, locked at {}",
                        duration((now_ns - holder.holding_since_ns).max(0) as u64),
                        self.symbols.locate_live(holder.pid, at)
                    ),
                };
                format!(
                    "thread {} ({}) waits in {}({:#x}) at {waits_at}, {by}",
                    waiter.lwpid,
                    comm(waiter.pid, waiter.lwpid),
                    waiter.call,
                    waiter.waits_for,
                )
            })
            .collect();
        let what = if deadlock.certain {
            "deadlock"
        } else {
            "possible deadlock"
        };
        format!("{what}: {}", parts.join("; "))
    }
}

/// A thread's name now; "?" if it cannot be read.
fn comm(pid: u32, lwpid: u32) -> String {
    facts::comm(pid, lwpid).unwrap_or_else(|| "?".to_owned())
}
