//! `--flush-on-block`: a sink that finds the traced calls blocked longer than a threshold, from
//! the records (a paired call's entry and return) and, as time passes, from the entries not
//! yet returned. Each call is reported to the session once; the flushes the session makes of
//! them are at most one per threshold ([`BlockFlushes`]).

use std::{
    collections::HashMap,
    io,
    time::{Duration, Instant},
};

use tracer_common::{EventDef, Which};
use tracer_model::{
    TraceRecord,
    event::{SystemEvent, SystemKind},
};

use super::flow::{Finding, Findings};
use crate::sinks::Sink;

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
    findings: Findings,
}

impl BlockWatch {
    /// A watch that reports to `findings`.
    pub fn new(threshold: Duration, findings: Findings) -> Self {
        BlockWatch {
            threshold,
            calls: HashMap::new(),
            findings,
        }
    }

    fn threshold_ns(&self) -> i64 {
        self.threshold.as_nanos().min(i64::MAX as u128) as i64
    }
}

impl Sink for BlockWatch {
    /// A paired call's entry starts a call, its return ends it: a call that returned past the
    /// threshold is reported, unless it was reported as still blocked.
    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
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
            }
            Which::Return => {
                if let Some(call) = self.calls.remove(&key) {
                    let blocked_ns = time_ns - call.entry_ns;
                    if !call.reported && blocked_ns > self.threshold_ns() {
                        let event = blocked(key, &call, blocked_ns, true, time_ns);
                        self.findings.report(Finding::LongBlock(event));
                    }
                }
            }
            Which::Whole => {}
        }
        Ok(())
    }

    /// Process `pid` is gone: its calls will not return.
    fn process_exited(&mut self, pid: u32) -> io::Result<()> {
        self.calls.retain(|_, call| call.pid != pid);
        Ok(())
    }

    /// The calls blocked past the threshold at `now_ns` and not reported yet, reported now, in
    /// the order of their threads.
    fn time_passed(&mut self, now_ns: i64) {
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
        for event in events {
            self.findings.report(Finding::LongBlock(event));
        }
    }
}

/// The flushes long blocks cause: at most one per threshold. Decided when the session comes to
/// flush, not when the block is found: a block found as time passes waits in the reorder stage,
/// and a record released before it can end another long block, which flushes first.
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
    use crate::session::flow::Found;

    const MS: i64 = 1_000_000;

    /// A watch with a threshold of 200 ms, and the session's end of what it reports.
    fn watch() -> (BlockWatch, Found) {
        let (findings, found) = Findings::new();
        (BlockWatch::new(Duration::from_millis(200), findings), found)
    }

    /// The long blocks reported since the last look.
    fn reported(found: &Found) -> Vec<SystemEvent> {
        std::iter::from_fn(|| found.take())
            .map(|finding| match finding {
                Finding::LongBlock(event) => event,
                Finding::Event(event) => panic!("not a long block: {event:?}"),
            })
            .collect()
    }

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
        let (mut watch, found) = watch();
        let start = 1_000 * MS;
        watch
            .record(&record(7, "mutex_lock", Which::Entry, start))
            .unwrap();
        watch
            .record(&record(8, "mutex_lock", Which::Entry, start))
            .unwrap();
        // Returned within the threshold: nothing.
        watch
            .record(&record(8, "mutex_lock", Which::Return, start + 150 * MS))
            .unwrap();
        assert!(reported(&found).is_empty());
        watch
            .record(&record(7, "mutex_lock", Which::Return, start + 250 * MS))
            .unwrap();
        let events = reported(&found);
        assert_eq!(events.len(), 1);
        assert_eq!(
            call_and_time(&events[0]),
            (7, "mutex_lock", 250 * MS as u64, true)
        );
        assert_eq!(events[0].time_ns, start + 250 * MS);
        watch.time_passed(start + 10_000 * MS);
        assert!(reported(&found).is_empty());
    }

    #[test]
    fn a_call_still_blocked_is_reported_once() {
        let (mut watch, found) = watch();
        let start = 1_000 * MS;
        watch
            .record(&record(7, "cond_wait", Which::Entry, start))
            .unwrap();
        watch.time_passed(start + 100 * MS);
        assert!(reported(&found).is_empty());
        watch.time_passed(start + 300 * MS);
        let events = reported(&found);
        assert_eq!(events.len(), 1);
        assert_eq!(
            call_and_time(&events[0]),
            (7, "cond_wait", 300 * MS as u64, false)
        );
        assert_eq!(events[0].time_ns, start + 300 * MS);
        watch.time_passed(start + 400 * MS);
        watch
            .record(&record(7, "cond_wait", Which::Return, start + 500 * MS))
            .unwrap();
        assert!(reported(&found).is_empty());
    }

    #[test]
    fn flushes_are_at_most_one_per_threshold_and_exits_forget_calls() {
        let mut flushes = BlockFlushes::new(Duration::from_millis(200));
        let now = Instant::now();
        assert!(flushes.may_flush(now));
        assert!(!flushes.may_flush(now + Duration::from_millis(100)));
        assert!(flushes.may_flush(now + Duration::from_millis(200)));
        let (mut watch, found) = watch();
        watch
            .record(&record(7, "thr_join", Which::Entry, 0))
            .unwrap();
        watch.process_exited(100).unwrap();
        watch.time_passed(i64::MAX / 2);
        assert!(reported(&found).is_empty());
    }
}
