//! Live deadlock detection: a sink whose records feed `tracer_model::analysis` (without
//! statistics); each pass ([`Sink::time_passed`]) asks it for new cycles of threads blocked
//! longer than `--deadlock-after`, and each is said once, with the threads' names and where each
//! waits and locked, and reported to the session, which writes it to the trace as a
//! `thrtrace_deadlock` event. With `--lock-order` (on by default), each lock-order inversion
//! the records show is said once as it appears, and written as a `thrtrace_lock_order` event.

use std::{io, time::Duration};

use tracer_model::{
    TraceRecord,
    analysis::{Analysis, Deadlock, Inversion, MAX_EDGES},
    event::{SystemEvent, SystemKind},
};

use super::{
    facts,
    flow::{Finding, Findings},
};
use crate::{place::Place, say::duration, sinks::Sink, symbolize::Symbols};

pub struct DeadlockWatch {
    analysis: Analysis,
    threshold: Duration,
    symbols: Symbols,
    /// The lock-order graph's bound was said.
    said_full: bool,
    findings: Findings,
}

impl DeadlockWatch {
    /// A watch that reports to `findings`.
    pub fn new(threshold: Duration, lock_order: bool, findings: Findings) -> Self {
        let analysis = Analysis::new(false);
        DeadlockWatch {
            analysis: match lock_order {
                true => analysis,
                false => analysis.without_lock_order(),
            },
            threshold,
            symbols: Symbols::new(),
            said_full: false,
            findings,
        }
    }

    /// The lock as messages name it (`symbolize::LockName::label`).
    fn lock_named(&mut self, pid: u32, lock: u64, exclusive: bool) -> String {
        self.symbols.name_lock(pid, lock, None).label(exclusive)
    }

    /// A thread's name: as first seen, else now; "?" if neither is known.
    fn name(&self, pid: u32, lwpid: u32) -> String {
        match self.analysis.thread_name(lwpid) {
            Some(name) => name.to_owned(),
            None => comm(pid, lwpid),
        }
    }

    /// The deadlocks found at `now_ns`, not said before, said and as events.
    fn deadlocks(&mut self, now_ns: i64) -> Vec<SystemEvent> {
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

    /// The inversions found since the last pass, said and as events.
    fn inversions(&mut self, now_ns: i64) -> Vec<SystemEvent> {
        let Some(order) = self.analysis.lock_order() else {
            return Vec::new();
        };
        if order.full && !self.said_full {
            self.said_full = true;
            say!(
                "thrtrace-bpf: lock order: {MAX_EDGES} lock pairs seen; later pairs are not \
                 checked for inversions (--lock-order off leaves the analysis out)"
            );
        }
        let found: Vec<Inversion> = order.new_inversions().to_vec();
        found
            .into_iter()
            .map(|inversion| {
                let message = self.describe_inversion(&inversion);
                say!("thrtrace-bpf: {message}");
                let kind = SystemKind::LockOrder {
                    orders: serde_json::to_string(&inversion.edges).unwrap_or_default(),
                    message,
                };
                SystemEvent::of_process(now_ns, inversion.pid, 0, kind)
            })
            .collect()
    }

    /// "lock order inversion (a potential deadlock): thread 4251 (worker-3) took
    /// 0x55d0c0a4e0c0 at put+0x1c (queue.c:88), then 0x55d0c0a4e100 at put+0x2a (queue.c:90);
    /// thread 4252 (worker-4) took 0x55d0c0a4e100 at ...".
    fn describe_inversion(&mut self, inversion: &Inversion) -> String {
        let pid = inversion.pid;
        let parts: Vec<String> = inversion
            .edges
            .iter()
            .map(|edge| {
                format!(
                    "thread {} ({}) took {} at {}, then {} at {}",
                    edge.lwpid,
                    self.name(pid, edge.lwpid),
                    self.lock_named(pid, edge.held.lock, edge.held.exclusive),
                    Place::locate_traced(&mut self.symbols, pid, edge.held.caller),
                    self.lock_named(pid, edge.acquired.lock, edge.acquired.exclusive),
                    Place::locate_traced(&mut self.symbols, pid, edge.acquired.caller),
                )
            })
            .collect();
        format!(
            "lock order inversion (a potential deadlock) in process {pid}: {}",
            parts.join("; ")
        )
    }

    /// "deadlock: thread 4251 (worker-3) waits in pthread_mutex_lock(0x55d0c0a4e0c0) at
    /// put+0x1c (queue.c:88), held by 4252 (worker-4) since 12.4 s, locked at take+0x3e
    /// (queue.c:131); thread 4252 waits in ...".
    fn describe(&mut self, deadlock: &Deadlock, now_ns: i64) -> String {
        let threads = &deadlock.threads;
        let parts: Vec<String> = (0..threads.len())
            .map(|i| {
                let waiter = &threads[i];
                let holder = &threads[(i + 1) % threads.len()];
                let waits_at =
                    Place::locate_traced(&mut self.symbols, waiter.pid, waiter.wait_caller);
                let holder_named =
                    format!("{} ({})", holder.lwpid, self.name(holder.pid, holder.lwpid));
                let by = match (waiter.waits_to_be_woken, holder.locked_at) {
                    (true, _) => format!("which only {holder_named} ever woke"),
                    // Under --contended an uncontended acquisition is not recorded: the lock
                    // may have been taken at any time, traced or not.
                    (false, 0) if self.analysis.contended_only => format!(
                        "held by {holder_named}, taken without waiting (which --contended does \
                         not record) at an unknown place"
                    ),
                    (false, 0) => format!(
                        "held by {holder_named} since before the trace began, locked at an \
                         unknown place"
                    ),
                    (false, at) => format!(
                        "held by {holder_named} since {}, locked at {}",
                        duration((now_ns - holder.holding_since_ns).max(0) as u64),
                        Place::locate_traced(&mut self.symbols, holder.pid, at)
                    ),
                };
                format!(
                    "thread {} ({}) waits in {}({:#x}) at {waits_at}, {by}",
                    waiter.lwpid,
                    self.name(waiter.pid, waiter.lwpid),
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

/// Not `wants_system_events`: the names and mappings that come are used, but not worth
/// reading /proc for when no output keeps them (a message names a thread from /proc then).
impl Sink for DeadlockWatch {
    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        self.analysis.record(record);
        Ok(())
    }

    /// Thread names, whether the trace is contended-only (its START), and the mappings that
    /// place callers after their process is gone.
    fn system_event(&mut self, event: &SystemEvent) -> io::Result<()> {
        match &event.kind {
            SystemKind::ThreadName { .. }
            | SystemKind::ThreadNamespaceId { .. }
            | SystemKind::Start { .. } => {
                self.analysis.system_event(event);
            }
            _ => {
                self.symbols.learn(event);
            }
        }
        Ok(())
    }

    fn process_exited(&mut self, pid: u32) -> io::Result<()> {
        self.analysis.process_exited(pid);
        self.symbols.forget(pid);
        Ok(())
    }

    /// The lock-order inversions found since the last pass, then the deadlocks found now,
    /// each said and reported once.
    fn time_passed(&mut self, now_ns: i64) {
        let inversions = self.inversions(now_ns);
        let deadlocks = self.deadlocks(now_ns);
        for event in inversions.into_iter().chain(deadlocks) {
            self.findings.report(Finding::Event(event));
        }
    }
}

/// A thread's name now; "?" if it cannot be read.
fn comm(pid: u32, lwpid: u32) -> String {
    facts::comm(pid, lwpid).unwrap_or_else(|| "?".to_owned())
}
