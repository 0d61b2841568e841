//! `--flush-on-block`: finds the traced calls blocked longer than a threshold, from the records
//! as they are written (a paired call's entry and return) and, for calls still blocked, from
//! the entries not yet returned. Each call is reported once; the flushes the session makes of
//! them are at most one per threshold ([`BlockFlushes`]).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use tracer_common::{EventDef, Which};
use tracer_model::{
    TraceRecord,
    event::{SystemEvent, SystemKind},
};

/// A call in progress: its thread and event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct CallKey {
    lwpid: u32,
    event1: u16,
    event2: u16,
}

struct Call {
    pid: u32,
    entry_ns: i64,
    object: u64,
    /// Already reported as still blocked: its return is not reported again.
    reported: bool,
}

pub struct BlockWatch {
    threshold: Duration,
    calls: HashMap<CallKey, Call>,
}

impl BlockWatch {
    pub fn new(threshold: Duration) -> Self {
        BlockWatch {
            threshold,
            calls: HashMap::new(),
        }
    }

    fn threshold_ns(&self) -> i64 {
        self.threshold.as_nanos().min(i64::MAX as u128) as i64
    }

    /// A record written: a paired call's entry starts a call, its return ends it. Returns the
    /// BLOCKED event of a call that returned past the threshold, unless already reported.
    pub fn record(&mut self, record: &TraceRecord) -> Option<SystemEvent> {
        let key = CallKey {
            lwpid: record.lwpid,
            event1: record.event1,
            event2: record.event2,
        };
        let time_ns = record.time_ns() as i64;
        match record.which {
            Which::Entry => {
                let call = Call {
                    pid: record.pid,
                    entry_ns: time_ns,
                    object: record.a[0] as u64,
                    reported: false,
                };
                self.calls.insert(key, call);
                None
            }
            Which::Return => {
                let call = self.calls.remove(&key)?;
                let blocked_ns = time_ns - call.entry_ns;
                (!call.reported && blocked_ns > self.threshold_ns())
                    .then(|| blocked(key, &call, blocked_ns, true, time_ns))
            }
            Which::Whole => None,
        }
    }

    /// The calls blocked past the threshold at `now_ns` and not reported yet, reported now.
    pub fn still_blocked(&mut self, now_ns: i64) -> Vec<SystemEvent> {
        let threshold_ns = self.threshold_ns();
        let mut events: Vec<SystemEvent> = self
            .calls
            .iter_mut()
            .filter(|(_, call)| !call.reported && now_ns - call.entry_ns > threshold_ns)
            .map(|(key, call)| {
                call.reported = true;
                blocked(*key, call, now_ns - call.entry_ns, false, now_ns)
            })
            .collect();
        events.sort_by_key(|e| e.lwpid);
        events
    }

    /// Process `pid` is gone: its calls will not return.
    pub fn process_exited(&mut self, pid: u32) {
        self.calls.retain(|_, call| call.pid != pid);
    }
}

/// The flushes long blocks cause: at most one per threshold. Decided when the session comes to
/// flush, not when the block is found: a block found by time passing waits in the reorder
/// stage, and records released before it may find one that flushes first.
pub struct BlockFlushes {
    threshold: Duration,
    last: Option<Instant>,
}

impl BlockFlushes {
    pub fn new(threshold: Duration) -> Self {
        BlockFlushes {
            threshold,
            last: None,
        }
    }

    /// Whether a flush may happen at `now`: at most one per threshold.
    pub fn may_flush(&mut self, now: Instant) -> bool {
        let due = self
            .last
            .is_none_or(|last| now.duration_since(last) >= self.threshold);
        if due {
            self.last = Some(now);
        }
        due
    }
}

fn blocked(
    key: CallKey,
    call: &Call,
    blocked_ns: i64,
    returned: bool,
    time_ns: i64,
) -> SystemEvent {
    let name = EventDef::find(key.event1, key.event2).map_or("unknown", |e| e.name);
    let kind = SystemKind::Blocked {
        call: name.to_owned(),
        object: call.object,
        blocked_ns: blocked_ns.max(0) as u64,
        returned,
    };
    SystemEvent::of_process(time_ns, call.pid, key.lwpid, kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    fn record(lwpid: u32, name: &str, which: Which, time_ns: i64) -> TraceRecord {
        let event = EventDef::by_name(name).unwrap();
        TraceRecord {
            sec: time_ns / 1_000_000_000,
            nsec: time_ns % 1_000_000_000,
            lwpid,
            pid: 100,
            tid: 0,
            event1: event.category.code(),
            event2: event.event2,
            which,
            a: [0x5000, 0, 0, 0, 0],
            caller: 0,
            stack: 0,
        }
    }

    fn call_and_time(event: &SystemEvent) -> (u32, &str, u64, bool) {
        let SystemKind::Blocked {
            call,
            blocked_ns,
            returned,
            object,
        } = &event.kind
        else {
            panic!("{event:?}")
        };
        assert_eq!(*object, 0x5000);
        (event.lwpid, call.as_str(), *blocked_ns, *returned)
    }

    #[test]
    fn a_call_that_returns_past_the_threshold_is_reported_at_its_return() {
        let mut watch = BlockWatch::new(Duration::from_millis(200));
        let start = 1_000 * MS;
        assert!(
            watch
                .record(&record(7, "mutex_lock", Which::Entry, start))
                .is_none()
        );
        assert!(
            watch
                .record(&record(8, "mutex_lock", Which::Entry, start))
                .is_none()
        );
        // Returned within the threshold: nothing.
        assert!(
            watch
                .record(&record(8, "mutex_lock", Which::Return, start + 150 * MS))
                .is_none()
        );
        let event = watch
            .record(&record(7, "mutex_lock", Which::Return, start + 250 * MS))
            .unwrap();
        assert_eq!(
            call_and_time(&event),
            (7, "mutex_lock", 250 * MS as u64, true)
        );
        assert_eq!(event.time_ns, start + 250 * MS);
        assert!(watch.still_blocked(start + 10_000 * MS).is_empty());
    }

    #[test]
    fn a_call_still_blocked_is_reported_once() {
        let mut watch = BlockWatch::new(Duration::from_millis(200));
        let start = 1_000 * MS;
        watch.record(&record(7, "cond_wait", Which::Entry, start));
        assert!(watch.still_blocked(start + 100 * MS).is_empty());
        let events = watch.still_blocked(start + 300 * MS);
        assert_eq!(events.len(), 1);
        assert_eq!(
            call_and_time(&events[0]),
            (7, "cond_wait", 300 * MS as u64, false)
        );
        assert!(watch.still_blocked(start + 400 * MS).is_empty());
        assert!(
            watch
                .record(&record(7, "cond_wait", Which::Return, start + 500 * MS))
                .is_none()
        );
    }

    #[test]
    fn flushes_are_at_most_one_per_threshold_and_exits_forget_calls() {
        let mut flushes = BlockFlushes::new(Duration::from_millis(200));
        let now = Instant::now();
        assert!(flushes.may_flush(now));
        assert!(!flushes.may_flush(now + Duration::from_millis(100)));
        assert!(flushes.may_flush(now + Duration::from_millis(200)));
        let mut watch = BlockWatch::new(Duration::from_millis(200));
        watch.record(&record(7, "thr_join", Which::Entry, 0));
        watch.process_exited(100);
        assert!(watch.still_blocked(i64::MAX / 2).is_empty());
    }
}
