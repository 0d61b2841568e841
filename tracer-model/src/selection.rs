//! Which events a trace records: the one representation of `--events` (and of a controller's
//! filter) that every stage uses. The command line parses it, the probes are placed for its
//! [`EventSet::probed`] events, the BPF side is given its [`EventSet::masks`], the decoder keeps
//! the records it [`EventSet::selects`], and the log's START and FILTER events carry its
//! [`EventSet::filtered_out`] names.

use tracer_common::{Category, ContendedProbe, EVENTS, EventDef, RecordingMasks, recording_masks};

/// A set of rows of the event table (`tracer_common::EVENTS`), one bit each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventSet(u128);

/// `--events` (or a filter) named something that cannot be recorded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectionError {
    #[error(
        "event category '{name}' has no Linux counterpart (glibc has no such calls): choose \
         from {}",
        traced_categories()
    )]
    /// A category of UnixWare's that glibc has no calls for.
    NoLinuxCounterpart {
        /// The category named.
        name: String,
    },
    #[error(
        "unknown event or category '{name}': give categories ({}), event names (mutex_lock, \
         cond_wait, ...) or C library functions (pthread_mutex_lock, sem_wait, ...); \
         `thrtrace-bpf list` lists them",
        traced_categories()
    )]
    /// Neither a category, nor an event of the table, nor a function one is recorded from.
    Unknown {
        /// The name given.
        name: String,
    },
}

impl EventSet {
    /// No event.
    pub const EMPTY: EventSet = EventSet(0);

    /// Every event of the table.
    pub fn all() -> Self {
        Self::of(EVENTS)
    }

    /// The set of `events`.
    pub fn of<'a>(events: impl IntoIterator<Item = &'a EventDef>) -> Self {
        events
            .into_iter()
            .fold(Self::EMPTY, |set, event| set.with_row(row_of(event)))
    }

    /// `--events` syntax (`THR_TRACE_EVENTS` too): categories (`mutex`), event names
    /// (`cond_wait`) and C library functions (`pthread_cond_wait`), separated by `:` or `,`;
    /// empty means a full trace's ([`EventSet::full_trace`]).
    pub fn parse(spec: &str) -> Result<Self, SelectionError> {
        let named = Self::parse_named(spec)?;
        Ok(match named.is_empty() {
            true => Self::full_trace(),
            false => named,
        })
    }

    /// What a full trace records when no event is named: every event but those of categories
    /// that must be named ([`Category::is_in_full_trace_by_default`]).
    pub fn full_trace() -> Self {
        Self::of(
            EVENTS
                .iter()
                .filter(|e| e.category.is_in_full_trace_by_default()),
        )
    }

    /// The events recorded by probes in the pthread library ([`Category::is_probed_in_library`]).
    pub fn in_library(self) -> Self {
        Self::of(self.events().filter(|e| e.category.is_probed_in_library()))
    }

    /// Like [`EventSet::parse`], but empty names nothing (a filter must name its events).
    pub fn parse_named(spec: &str) -> Result<Self, SelectionError> {
        list_names(spec).try_fold(Self::EMPTY, |set, name| Ok(set.union(Self::named(name)?)))
    }

    /// The events one name of [`EventSet::parse_named`] stands for: a category's, or the event
    /// of that name and every event the C library function of that name records
    /// (`pthread_mutex_lock`: `mutex_lock` and `rmutex_lock`).
    fn named(name: &str) -> Result<Self, SelectionError> {
        if let Some(category) = Category::from_name(name) {
            return match category.is_traced() {
                true => Ok(Self::of(category.events())),
                false => Err(SelectionError::NoLinuxCounterpart { name: name.into() }),
            };
        }
        let named = Self::of(EVENTS.iter().filter(|e| e.name == name || e.symbol == name));
        match named.is_empty() {
            true => Err(SelectionError::Unknown { name: name.into() }),
            false => Ok(named),
        }
    }

    fn with_row(self, row: usize) -> Self {
        EventSet(self.0 | 1 << row)
    }

    /// Whether it holds no event.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The events of either.
    pub fn union(self, other: Self) -> Self {
        EventSet(self.0 | other.0)
    }

    /// The events of `self` not in `other`.
    pub fn difference(self, other: Self) -> Self {
        EventSet(self.0 & !other.0)
    }

    /// The events in both.
    pub fn intersection(self, other: Self) -> Self {
        EventSet(self.0 & other.0)
    }

    /// Whether every event of `self` is in `other`.
    pub fn is_subset(self, other: Self) -> bool {
        self.difference(other).is_empty()
    }

    /// Whether `event` is in the set.
    pub fn contains(self, event: &EventDef) -> bool {
        self.0 & 1 << row_of(event) != 0
    }

    /// Whether the record with these codes is of an event in the set (a mutex probe records
    /// both kinds, told apart by the mutex's kind: `classify`); false for codes the table does
    /// not have.
    // Inlined across crates: the session asks it for every record.
    #[inline]
    pub fn selects(self, event1: u16, event2: u16) -> bool {
        EventDef::row(event1, event2).is_some_and(|row| self.0 & 1 << row != 0)
    }

    /// The events, in the event table's order.
    pub fn events(self) -> impl Iterator<Item = &'static EventDef> {
        EVENTS
            .iter()
            .enumerate()
            .filter(move |(row, _)| self.0 & 1 << row != 0)
            .map(|(_, event)| event)
    }

    /// The events' names, in table order.
    pub fn names(self) -> Vec<&'static str> {
        self.events().map(|e| e.name).collect()
    }

    /// The events whose probes record these: rmutex calls are recorded by the mutex probes.
    pub fn probed(self) -> Self {
        Self::of(self.events().map(EventDef::probed_as))
    }

    /// The events of the set that `--contended` traces ([`ContendedProbe`]).
    pub fn contended(self) -> Self {
        Self::of(
            self.events()
                .filter(|e| e.contended() != ContendedProbe::Untraced),
        )
    }

    /// `spec` (the [`EventSet::parse_named`] syntax) as `--contended` reads it: each name
    /// stands for those of its events it traces. The events it traces, and those asked for
    /// by a name it traces none of.
    pub fn parse_contended(spec: &str) -> Result<(Self, Self), SelectionError> {
        let mut traced = Self::EMPTY;
        let mut untraced = Self::EMPTY;
        for name in list_names(spec) {
            let asked = Self::named(name)?;
            let kept = asked.contended();
            traced = traced.union(kept);
            if kept.is_empty() {
                untraced = untraced.union(asked.difference(kept));
            }
        }
        Ok((traced, untraced))
    }

    /// What probes placed for `self` can record: a filter can select these.
    pub fn recordable(self) -> Self {
        Self::of(EVENTS.iter().filter(|e| self.contains(e.probed_as())))
    }

    /// What the BPF side lets record.
    pub fn masks(self) -> RecordingMasks {
        recording_masks(self.events())
    }

    /// POSIX's filter: the event types of the table not in the set.
    pub fn filtered_out(self) -> Vec<String> {
        EVENTS
            .iter()
            .filter(|e| !self.contains(e))
            .map(|e| e.name.to_owned())
            .collect()
    }

    /// The set as `--events` would say it: a category whose events are all in it by its
    /// name, the others' events by theirs (`mutex:cond_wait`); empty for nothing.
    pub fn spec(self) -> String {
        let mut parts = Vec::new();
        for category in Category::ALL.into_iter().filter(|c| c.is_traced()) {
            let events = Self::of(category.events());
            let chosen = self.0 & events.0;
            if chosen != 0 && chosen == events.0 {
                parts.push(category.name());
            } else {
                parts.extend(EventSet(chosen).names());
            }
        }
        parts.join(&SEPARATOR.to_string())
    }
}

/// What separates the names of `--events` (and of a controller's filter) as the tracer writes
/// them; a comma does too when they are read ([`list_names`]).
pub const SEPARATOR: char = ':';

/// The names of a list (`--events`, a filter, `dump --events`, `report --kind`), separated by
/// [`SEPARATOR`] or commas; empty names are skipped.
pub fn list_names(list: &str) -> impl Iterator<Item = &str> {
    list.split([SEPARATOR, ',']).filter(|name| !name.is_empty())
}

/// The row of `event` in the table.
fn row_of(event: &EventDef) -> usize {
    let row = EventDef::row(event.category.code(), event.event2);
    row.expect("an event of the table")
}

fn traced_categories() -> String {
    let names: Vec<&str> = Category::ALL
        .into_iter()
        .filter(|c| c.is_traced())
        .map(tracer_common::Category::name)
        .collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_fits_in_the_set() {
        assert!(EVENTS.len() <= 128);
        assert_eq!(EventSet::all().events().count(), EVENTS.len());
    }

    #[test]
    fn empty_means_every_event_but_the_futex_waits() {
        let futex = EventSet::of(Category::Futex.events());
        assert_eq!(EventSet::parse(""), Ok(EventSet::all().difference(futex)));
        assert_eq!(EventSet::parse("futex"), Ok(futex));
        assert!(EventSet::all().contended().is_subset(EventSet::all()));
        assert_eq!(
            EventSet::all().contended().intersection(futex),
            futex,
            "--contended records the futex waits that blocked"
        );
        assert!(EventSet::all().in_library().intersection(futex).is_empty());
        assert_eq!(EventSet::parse_named("::"), Ok(EventSet::EMPTY));
    }

    #[test]
    fn categories_and_event_names_select_each_event_once_in_table_order() {
        let events = EventSet::parse("cond_wait:mutex_lock:cond_wait").unwrap();
        assert_eq!(events.names(), ["mutex_lock", "cond_wait"]);
        let rwlock = EventSet::parse("rwlock:rw_rdlock").unwrap();
        assert_eq!(rwlock, EventSet::of(Category::Rwlock.events()));
        assert_eq!(rwlock.spec(), "rwlock");
        let mixed = EventSet::parse("mutex:cond_wait").unwrap();
        assert_eq!(mixed.spec(), "mutex:cond_wait");
    }

    #[test]
    fn contended_reads_a_category_as_its_traced_events_and_refuses_others_named() {
        let parse = |spec| EventSet::parse_contended(spec).unwrap();
        let (traced, untraced) = parse("rwlock:sema_wait");
        assert_eq!(
            traced.names(),
            ["sema_wait", "rw_rdlock", "rw_wrlock", "rw_unlock"]
        );
        assert!(untraced.is_empty());
        let (traced, untraced) = parse("rw_rdlock:rw_tryrdlock:spin");
        assert_eq!(traced.names(), ["rw_rdlock"]);
        assert_eq!(
            untraced.names(),
            [
                "rw_tryrdlock",
                "_spin_unlock",
                "_spin_init",
                "_spin_lock",
                "_spin_trylock",
                "_spin_destroy"
            ]
        );
        assert!(EventSet::parse_contended("bogus").is_err());
    }

    #[test]
    fn c_library_functions_and_commas_name_events_as_users_type_them() {
        let parse = |spec| EventSet::parse(spec).unwrap();
        assert_eq!(
            parse("pthread_mutex_lock").names(),
            ["mutex_lock", "rmutex_lock"]
        );
        assert_eq!(
            parse("pthread_mutex_timedlock").names(),
            ["pthread_mutex_timedlock", "rmutex_timedlock"]
        );
        assert_eq!(parse("sem_wait,cond"), parse("sema_wait:cond"));
        assert_eq!(parse("futex,futex_wait").names(), parse("futex").names());
        let (traced, untraced) = EventSet::parse_contended("pthread_mutex_lock,sem_post").unwrap();
        assert_eq!(traced.names(), ["mutex_lock", "sema_post", "rmutex_lock"]);
        assert!(untraced.is_empty());
        let (_, untraced) = EventSet::parse_contended("pthread_mutex_trylock").unwrap();
        assert_eq!(untraced.names(), ["mutex_trylock", "rmutex_trylock"]);
    }

    #[test]
    fn unknown_names_list_the_valid_categories() {
        let error = EventSet::parse("mutex:bogus").unwrap_err().to_string();
        assert!(
            error.contains("unknown event or category 'bogus'"),
            "{error}"
        );
        assert!(error.contains("barrier, spin"), "{error}");
    }

    #[test]
    fn rmutex_events_are_probed_through_the_mutex_probes() {
        let rmutex = EventSet::of(Category::Rmutex.events());
        let probed = rmutex.probed();
        assert!(probed.events().all(|e| e.category == Category::Mutex));
        assert!(rmutex.is_subset(probed.recordable()));
    }
}
