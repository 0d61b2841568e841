//! Which events of a log to read: by event type or category, process, thread and time.

use crate::{
    event::{Event, EventType},
    selection::list_names,
};

/// Events to read from a log; the default reads every event.
///
/// Each part that is set must match: an event is read if its type or category is one of
/// `events` (or `events` is empty), its pid one of `pids`, and so on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Event type names (`mutex_lock`, `posix_trace_overflow`) or categories (`mutex`,
    /// `system`), as the log's event-type list names them.
    pub events: Vec<String>,
    /// Processes whose events pass (none: every process).
    pub pids: Vec<u32>,
    /// Threads whose events pass (none: every thread).
    pub lwpids: Vec<u32>,
    /// CLOCK_REALTIME nanoseconds: events at or after `from_ns`, before `until_ns`.
    pub from_ns: Option<i64>,
    /// See `from_ns`.
    pub until_ns: Option<i64>,
}

/// A filter names an event type or category the log does not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{name}' is neither an event type nor a category of this log: it has {known}")]
pub struct UnknownEvent {
    /// The name given.
    pub name: String,
    /// The log's categories, comma-separated.
    pub known: String,
}

impl Filter {
    /// Events of these types or categories, separated by `:` or `,` (`mutex:cond_wait`).
    ///
    /// Not the parser of `--events` ([`EventSet::parse_named`]), on purpose: the names are the
    /// log's own ([`EventType::is_named`]), which has system events (`posix_trace_overflow`, the
    /// `system` category) and, written by another build, event types this build's table may
    /// not have; and a reader's list takes commas too.
    ///
    /// [`EventSet::parse_named`]: crate::selection::EventSet::parse_named
    pub fn events(mut self, names: &str) -> Self {
        self.events.extend(list_names(names).map(str::to_owned));
        self
    }

    /// Events of process `pid` too.
    pub fn pid(mut self, pid: u32) -> Self {
        self.pids.push(pid);
        self
    }

    /// Events of thread `lwpid` too.
    pub fn lwpid(mut self, lwpid: u32) -> Self {
        self.lwpids.push(lwpid);
        self
    }

    /// Events from `from_ns` (inclusive) until `until_ns` (exclusive).
    pub fn between(mut self, from_ns: Option<i64>, until_ns: Option<i64>) -> Self {
        self.from_ns = from_ns;
        self.until_ns = until_ns;
        self
    }

    /// Whether every name is a type or category of `types`.
    pub fn check(&self, types: &[EventType]) -> Result<(), UnknownEvent> {
        let known = |name: &String| types.iter().any(|t| t.is_named(name));
        match self.events.iter().find(|name| !known(name)) {
            None => Ok(()),
            Some(name) => {
                let mut categories: Vec<&str> = Vec::new();
                for event_type in types {
                    if !categories.contains(&event_type.category.as_str()) {
                        categories.push(&event_type.category);
                    }
                }
                Err(UnknownEvent {
                    name: name.clone(),
                    known: categories.join(", "),
                })
            }
        }
    }

    /// Whether `event`, whose type `event_type` gives, is one to read. The type is looked up
    /// only for a filter that names types: reading a whole log costs no lookup an event.
    pub fn matches<'t>(
        &self,
        event: &Event,
        event_type: impl FnOnce() -> Option<&'t EventType>,
    ) -> bool {
        let (pid, lwpid) = match event {
            Event::Thread(record) => (record.pid, record.lwpid),
            Event::System(system) => (system.pid, system.lwpid),
        };
        let time_ns = event.time_ns();
        let of_type = self.events.is_empty()
            || event_type().is_some_and(|t| self.events.iter().any(|name| t.is_named(name)));
        of_type
            && (self.pids.is_empty() || self.pids.contains(&pid))
            && (self.lwpids.is_empty() || self.lwpids.contains(&lwpid))
            && self.from_ns.is_none_or(|from| time_ns >= from)
            && self.until_ns.is_none_or(|until| time_ns < until)
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::Which;

    use super::*;
    use crate::{
        TraceRecord,
        event::{SystemEvent, SystemKind, event_types},
    };

    fn lock(pid: u32, lwpid: u32, sec: i64) -> Event {
        Event::Thread(TraceRecord {
            sec,
            nsec: 0,
            lwpid,
            pid,
            tid: 1,
            event1: 2,
            event2: 2,
            which: Which::Entry,
            a: [0; 5],
            caller: 0,
            stack: 0,
        })
    }

    #[test]
    fn each_part_of_a_filter_must_match() {
        let types = event_types();
        let type_of = |name: &str| types.iter().find(|t| t.name == name);
        let lock_type = type_of("mutex_lock");
        let event = lock(10, 11, 5);
        let matches = |filter: Filter| filter.matches(&event, || lock_type);
        assert!(matches(Filter::default()));
        assert!(matches(Filter::default().events("cond:mutex_lock")));
        assert!(matches(Filter::default().events("mutex").pid(10).lwpid(11)));
        assert!(!matches(Filter::default().events("cond")));
        assert!(!matches(Filter::default().pid(9)));
        assert!(!matches(Filter::default().lwpid(12)));
        let second = 1_000_000_000;
        assert!(matches(
            Filter::default().between(Some(5 * second), Some(6 * second))
        ));
        assert!(!matches(
            Filter::default().between(Some(5 * second + 1), None)
        ));
        assert!(!matches(Filter::default().between(None, Some(5 * second))));
        let start = Event::System(SystemEvent::new(
            0,
            SystemKind::Start {
                filter: Vec::new(),
                contended: false,
            },
        ));
        let system = Filter::default().events("system");
        assert!(system.matches(&start, || type_of("posix_trace_start")));
        assert!(!system.matches(&event, || lock_type));
    }

    #[test]
    fn names_the_log_does_not_have_are_refused_with_its_categories() {
        let types = event_types();
        assert_eq!(
            Filter::default()
                .events("mutex:posix_trace_stop")
                .check(&types),
            Ok(())
        );
        let error = Filter::default()
            .events("mutex:bogus")
            .check(&types)
            .unwrap_err();
        assert_eq!(error.name, "bogus");
        assert!(
            error.known.starts_with("thread, mutex, cond"),
            "{}",
            error.known
        );
    }
}
