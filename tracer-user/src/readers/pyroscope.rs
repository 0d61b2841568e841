//! `--pyroscope URL` and `--otlp URL`: continuous contention profiling. A sink that feeds the
//! records into the report's analysis and, every `--push-interval`, cuts the interval's contended
//! lock waits into profiles (the waiters' stacks, as Go's block profile: the same samples as
//! `report --format pprof`), which [`delivery`] sends: to Pyroscope's ingest API, one pprof profile
//! per series, a service in a cgroup ([`ingest`]); or to an OpenTelemetry endpoint, one OTLP
//! request with a resource per process ([`otlp`]). The session's thread only hands records over;
//! the profiles are made on a thread of their own (`push-profile`, which keeps the symbols and
//! stacks) and sent from another, so that neither symbolizing nor a slow endpoint holds the drain.
//! What is kept is bounded by what runs, not by how long: the analysis's statistics begin again at
//! each cut; a process's stacks, mappings, names and labels are dropped once it has exited and its
//! last interval was made; every hour the symbols begin again from the live processes' mappings and
//! the names of threads gone are dropped.

mod credentials;
mod delivery;
mod ingest;
pub(super) mod otlp;

use std::{
    collections::{BTreeMap, HashMap},
    io, mem,
    sync::{Arc, Condvar, Mutex, PoisonError},
    thread::JoinHandle,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use thiserror::Error;
use tracer_model::{
    TraceRecord,
    analysis::{Analysis, LockKind, LockStats},
    event::{SystemEvent, SystemKind},
    stack::{LeftOut, Stacks},
};

pub use self::credentials::{Credentials, OTLP_URL_VARIABLE, URL_VARIABLE, environment};
use self::{
    delivery::{Deliveries, Delivery, Push},
    ingest::Ingest,
    otlp::ProcessProfile,
};
use super::{
    pprof::{self, Labels, Span},
    report::{KindArg, KindFilter},
    samples::{View, contention_samples},
};
use crate::{
    sinks::{Sink, Summary, TraceEnd, Written},
    symbolize::{Mapping, Symbols},
};

/// What a push speaks, and to what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// Pyroscope's ingest API: a pprof profile per series.
    Pyroscope,
    /// OpenTelemetry's profiles signal over HTTP (OTLP `v1development`): a request per push.
    Otlp,
}

impl Wire {
    /// The option that names its URL.
    pub fn option(self) -> &'static str {
        match self {
            Wire::Pyroscope => "--pyroscope",
            Wire::Otlp => "--otlp",
        }
    }

    /// The path below the URL that takes profiles.
    fn path(self) -> &'static str {
        match self {
            Wire::Pyroscope => "/ingest",
            Wire::Otlp => otlp::PROFILES_PATH,
        }
    }

    /// What it pushes to, in messages.
    fn server(self) -> &'static str {
        match self {
            Wire::Pyroscope => "the Pyroscope server",
            Wire::Otlp => "the OTLP endpoint",
        }
    }
}

/// Where profiles go, checked.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// As the user gave it, for messages.
    pub url: String,
    pub wire: Wire,
    /// Where profiles are posted: its ingest API, or its profiles path.
    target: String,
    credentials: Credentials,
}

#[derive(Debug, Error)]
#[error("{option} {url}: {problem}")]
pub struct EndpointError {
    option: &'static str,
    url: String,
    problem: String,
}

impl Endpoint {
    /// The server at `url` (`http://host:4040`, or `https://…/prefix`) that speaks `wire`.
    pub fn new(url: &str, credentials: Credentials, wire: Wire) -> Result<Endpoint, EndpointError> {
        let refuse = |problem: &str| EndpointError {
            option: wire.option(),
            url: without_userinfo(url),
            problem: problem.to_owned(),
        };
        let uri: ureq::http::Uri = url
            .parse()
            .map_err(|_| refuse("not a URL: give http://HOST:PORT or https://HOST[/PATH]"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(refuse(
                "not a URL: give http://HOST:PORT or https://HOST[/PATH]",
            ));
        }
        if uri.query().is_some() || url.contains('#') {
            return Err(refuse(&format!(
                "give the server's address without a query or fragment: the tracer adds {}",
                match wire {
                    Wire::Pyroscope => "/ingest and its own query",
                    Wire::Otlp => otlp::PROFILES_PATH,
                }
            )));
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            let (file, variables) = credentials::given_by(wire);
            return Err(refuse(&format!(
                "credentials do not go in the URL (messages and other users would see them): use \
                 {file} FILE or {variables}"
            )));
        }
        Ok(Endpoint {
            url: url.to_owned(),
            wire,
            target: format!("{}{}", url.trim_end_matches('/'), wire.path()),
            credentials,
        })
    }
}

/// `url` with what stands between its `//` and an `@` (a user and password) left out, for
/// messages.
fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("//") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}//…@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// `--pyroscope` and its options, checked.
#[derive(Clone, Debug)]
pub struct PushOptions {
    pub endpoint: Endpoint,
    /// `--push-interval`.
    pub interval: Duration,
}

/// What the profiler has not yet taken from the session's thread.
struct Interval {
    analysis: Analysis,
    /// The events the profiler keeps (stacks, mappings, processes), in order.
    events: Vec<SystemEvent>,
}

impl Interval {
    fn new() -> Interval {
        Interval {
            analysis: Analysis::new(true).without_lock_order(),
            events: Vec::new(),
        }
    }
}

/// The profiler's stop signal: set, and the thread woken, at the end of the trace.
type Stop = (Mutex<bool>, Condvar);

pub struct ContentionPush {
    shared: Arc<Mutex<Interval>>,
    stop: Arc<Stop>,
    /// Given to the profiler when the trace begins.
    options: Option<PushOptions>,
    url: String,
    wire: Wire,
    profiler: Option<JoinHandle<Deliveries>>,
    /// The profiler thread ended before the trace did (a bug): records are no longer kept.
    profiler_failed: bool,
}

impl ContentionPush {
    pub fn new(options: PushOptions) -> ContentionPush {
        ContentionPush {
            shared: Arc::new(Mutex::new(Interval::new())),
            stop: Arc::new((Mutex::new(false), Condvar::new())),
            url: options.endpoint.url.clone(),
            wire: options.endpoint.wire,
            options: Some(options),
            profiler: None,
            profiler_failed: false,
        }
    }

    fn interval(&self) -> std::sync::MutexGuard<'_, Interval> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Sink for ContentionPush {
    fn begin(&mut self) -> io::Result<()> {
        let Some(options) = self.options.take() else {
            return Ok(());
        };
        let delivery = Delivery::start(options.endpoint.clone())?;
        let (shared, stop) = (Arc::clone(&self.shared), Arc::clone(&self.stop));
        let profiler = std::thread::Builder::new()
            .name("push-profile".into())
            .spawn(move || {
                Profiler::new(delivery, options.endpoint.wire).run(options.interval, &shared, &stop)
            })?;
        self.profiler = Some(profiler);
        Ok(())
    }

    fn destinations(&self) -> Vec<String> {
        vec![format!("{} at {}", self.wire.server(), self.url)]
    }

    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        if !self.profiler_failed {
            self.interval().analysis.record(record);
        }
        Ok(())
    }

    fn system_event(&mut self, event: &SystemEvent) -> io::Result<()> {
        if self.profiler_failed {
            return Ok(());
        }
        let mut interval = self.interval();
        match &event.kind {
            SystemKind::ProcessDetach => interval.analysis.process_exited(event.pid),
            // How the trace was taken (a --contended one records no uncontended unlock) and
            // names, for the labels; not the deadlocks it would keep for a report.
            SystemKind::Start { .. }
            | SystemKind::ThreadName { .. }
            | SystemKind::ProcessAttach { .. }
            | SystemKind::ProcessCgroup { .. }
            | SystemKind::ShortWaits { .. }
            | SystemKind::Stack { .. }
            | SystemKind::Exec { .. } => interval.analysis.system_event(event),
            _ => {}
        }
        if matches!(
            event.kind,
            SystemKind::Stack { .. }
                | SystemKind::Mapping { .. }
                | SystemKind::ProcessAttach { .. }
                | SystemKind::Exec { .. }
                | SystemKind::ProcessDetach
        ) {
            interval.events.push(event.clone());
        }
        Ok(())
    }

    fn wants_system_events(&self) -> bool {
        true
    }

    fn batch_done(&mut self) -> io::Result<()> {
        if !self.profiler_failed && self.profiler.as_ref().is_some_and(JoinHandle::is_finished) {
            self.profiler_failed = true;
            *self.interval() = Interval::new();
            say!("thrtrace-bpf: the contention profiler failed: no more profiles are pushed");
        }
        Ok(())
    }

    fn finish(&mut self, _end: &TraceEnd) -> io::Result<Summary> {
        let (stopped, woken) = &*self.stop;
        *stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        woken.notify_all();
        let (delivered, profiler_failed) = match self.profiler.take().map(JoinHandle::join) {
            Some(Ok(delivered)) => (delivered, false),
            _ => (Deliveries::default(), true),
        };
        Ok(Written::Profiles {
            pushed: delivered.sent,
            url: self.url.clone(),
            profiler_failed,
            not_delivered: delivered.not_delivered,
            last_error: delivered.last_error,
        }
        .into())
    }
}

/// How often the profiler begins its symbols again (the files of processes gone, which it
/// would otherwise keep parsed forever) and drops the names of threads gone.
const RENEWED_EVERY: Duration = Duration::from_hours(1);

/// The profiler thread's own state.
struct Profiler {
    delivery: Delivery,
    wire: Wire,
    symbols: Symbols,
    /// The live processes' mappings, to give new symbols.
    mappings: HashMap<u32, Vec<Mapping>>,
    stacks: Stacks,
    host: String,
    /// Lock waits only: idle waits (condition variables, joins, barriers) are no contention.
    kinds: KindArg,
    said_not_made: bool,
}

impl Profiler {
    fn new(delivery: Delivery, wire: Wire) -> Profiler {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|name| name.trim().to_owned())
            .unwrap_or_default();
        Profiler {
            delivery,
            wire,
            symbols: Symbols::fetching(&[]),
            mappings: HashMap::new(),
            stacks: Stacks::default(),
            host,
            kinds: KindArg {
                kind: Some(KindFilter(
                    LockKind::ALL.into_iter().filter(|k| k.is_lock()).collect(),
                )),
            },
            said_not_made: false,
        }
    }

    /// Cuts and queues a profile per series every `every`, and once more when stopped;
    /// returns what became of them.
    fn run(mut self, every: Duration, shared: &Mutex<Interval>, stop: &Stop) -> Deliveries {
        let mut from = SystemTime::now();
        let mut renewed = Instant::now();
        loop {
            let stopped = {
                let (stopped, woken) = stop;
                let guard = stopped.lock().unwrap_or_else(PoisonError::into_inner);
                let (guard, _) = woken
                    .wait_timeout_while(guard, every, |stopped| !*stopped)
                    .unwrap_or_else(PoisonError::into_inner);
                *guard
            };
            let until = SystemTime::now();
            let (locks, names, events, left_out) = {
                let mut interval = shared.lock().unwrap_or_else(PoisonError::into_inner);
                let left_out = interval.analysis.left_out();
                let locks = interval.analysis.take_lock_stats();
                let names = pprof::Names::of(&interval.analysis, &locks);
                let events = mem::take(&mut interval.events);
                for pid in gone(&events) {
                    interval.analysis.forget_names(pid);
                }
                if renewed.elapsed() >= RENEWED_EVERY {
                    interval.analysis.retain_names(thread_exists);
                }
                (locks, names, events, left_out)
            };
            self.take_events(&events);
            self.push_interval(&locks, &names, from, until, &left_out);
            for pid in gone(&events) {
                self.symbols.forget(pid);
                self.mappings.remove(&pid);
                self.stacks.forget(pid);
            }
            if renewed.elapsed() >= RENEWED_EVERY {
                renewed = Instant::now();
                self.symbols = std::mem::take(&mut self.symbols).renewed();
                for (&pid, mappings) in &self.mappings {
                    for mapping in mappings {
                        self.symbols.add_mapping(pid, mapping.clone());
                    }
                }
            }
            from = until;
            if stopped {
                return self.delivery.finish();
            }
        }
    }

    /// Keeps what `events` say of stacks, mappings, processes and their cgroups.
    fn take_events(&mut self, events: &[SystemEvent]) {
        for event in events {
            if self.stacks.take(event) {
                continue;
            }
            if let Some(mapping) = Mapping::of(&event.kind) {
                self.symbols.add_mapping(event.pid, mapping.clone());
                self.mappings.entry(event.pid).or_default().push(mapping);
                continue;
            }
            if let SystemKind::ProcessAttach { .. } | SystemKind::Exec { .. } = event.kind {
                // A new image, or a new process with a pid seen before: its own mappings follow.
                self.symbols.forget(event.pid);
                self.mappings.remove(&event.pid);
            }
        }
    }

    /// Queues the interval's profiles: for Pyroscope, one per series with contended lock
    /// waits in `locks` (the processes of one service in one cgroup make one, as they make one
    /// series); for OTLP, one request of every process that waited. Each says of the waits whose
    /// stacks were `left_out` in the interval.
    fn push_interval(
        &mut self,
        locks: &[LockStats],
        names: &pprof::Names,
        from: SystemTime,
        until: SystemTime,
        left_out: &LeftOut,
    ) {
        let seconds = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let (start, end) = (seconds(from), seconds(until));
        let span = Span {
            start_ns: start.as_nanos() as i64,
            duration_ns: end.saturating_sub(start).as_nanos() as i64,
        };
        if self.wire == Wire::Otlp {
            let mut by_process: BTreeMap<u32, Vec<&LockStats>> = BTreeMap::new();
            for lock in locks {
                by_process.entry(lock.pid).or_default().push(lock);
            }
            let (symbols, stacks, kinds) = (&mut self.symbols, &self.stacks, &self.kinds);
            let processes: Vec<ProcessProfile> = by_process
                .into_iter()
                .filter_map(|(pid, locks)| {
                    let samples = contention_samples(locks, symbols, stacks, kinds, View::Waiters);
                    (!samples.is_empty()).then(|| ProcessProfile {
                        pid,
                        service: service(pid, names),
                        samples,
                    })
                })
                .collect();
            if !processes.is_empty() {
                let request =
                    otlp::encode(&processes, names, &self.symbols, span, left_out, &self.host);
                self.delivery.push(Push::Otlp(request));
            }
            return;
        }
        let mut by_series: BTreeMap<String, Vec<&LockStats>> = BTreeMap::new();
        for lock in locks {
            by_series
                .entry(self.series(lock.pid, names))
                .or_default()
                .push(lock);
        }
        for (name, locks) in by_series {
            let samples = contention_samples(
                locks,
                &mut self.symbols,
                &self.stacks,
                &self.kinds,
                View::Waiters,
            );
            if samples.is_empty() {
                continue;
            }
            let encoded = pprof::encode(
                &samples,
                names,
                &self.symbols,
                View::Waiters,
                span,
                left_out,
                Labels::Bounded,
            );
            let profile = match encoded {
                Ok(profile) => profile,
                Err(error) => {
                    self.delivery.not_made();
                    if !mem::replace(&mut self.said_not_made, true) {
                        say!("thrtrace-bpf: cannot make a contention profile: {error}");
                    }
                    continue;
                }
            };
            self.delivery.push(Push::Pyroscope(Ingest {
                name,
                from: start.as_secs(),
                until: end.as_secs().max(start.as_secs() + 1),
                profile,
            }));
        }
    }

    /// The series of process `pid`'s profile: its service, the host and its container, never
    /// its pid, a thread or a lock (a fleet pays for each series, and ids make new ones all
    /// the time).
    fn series(&self, pid: u32, names: &pprof::Names) -> String {
        let mut labels = vec![
            ("service_name", service(pid, names)),
            ("host", self.host.as_str()),
        ];
        // The root is no cgroup to tell a series by.
        if let Some(cgroup) = names.cgroup(pid).filter(|c| c.path != "/") {
            labels.push(("cgroup", cgroup.path.as_str()));
            if !cgroup.container.is_empty() {
                labels.push(("container_id", cgroup.container.as_str()));
            }
        }
        Ingest::series(&labels)
    }
}

/// The service process `pid` is: the systemd unit its cgroup is (`mariadb` of
/// `/system.slice/mariadb.service`), else its command's name, as Pyroscope's own agents name
/// a service, else `unknown`.
fn service(pid: u32, names: &pprof::Names) -> &str {
    let unit = names
        .cgroup(pid)
        .and_then(|cgroup| systemd_unit(&cgroup.path));
    unit.or_else(|| names.process(pid).filter(|name| !name.is_empty()))
        .unwrap_or("unknown")
}

/// The systemd service a cgroup path is, or is below (a service's own sub-cgroups), without
/// its instance (`getty` of `getty@tty1.service`: an instance per launch would be a series
/// per launch); not a user's service manager (`user@1000.service`), under which a desktop's
/// apps run.
fn systemd_unit(cgroup: &str) -> Option<&str> {
    cgroup
        .split('/')
        .filter_map(|component| component.strip_suffix(".service"))
        .filter(|unit| !unit.starts_with("user@"))
        .map(|unit| unit.split_once('@').map_or(unit, |(template, _)| template))
        .rfind(|unit| !unit.is_empty())
}

/// The processes `events` say exited, and were not attached again after (a new process with
/// the same pid).
fn gone(events: &[SystemEvent]) -> Vec<u32> {
    let mut gone = Vec::new();
    for event in events {
        match event.kind {
            SystemKind::ProcessDetach => gone.push(event.pid),
            SystemKind::ProcessAttach { .. } => gone.retain(|&pid| pid != event.pid),
            _ => {}
        }
    }
    gone
}

/// Whether thread `lwpid` of process `pid` still runs.
fn thread_exists(pid: u32, lwpid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/task/{lwpid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_in_a_systemd_unit_is_named_by_the_unit() {
        assert_eq!(
            systemd_unit("/system.slice/mariadb.service"),
            Some("mariadb")
        );
        assert_eq!(
            systemd_unit("/system.slice/docker.service/payload"),
            Some("docker")
        );
        assert_eq!(
            systemd_unit("/user.slice/user-1000.slice/session-2.scope"),
            None
        );
        assert_eq!(systemd_unit("/x/.service"), None);
        let desktop = "/user.slice/user-1000.slice/user@1000.service/app.slice/app-x.scope";
        assert_eq!(systemd_unit(desktop), None);
        let user_service = "/user.slice/user-1000.slice/user@1000.service/app.slice/sync.service";
        assert_eq!(systemd_unit(user_service), Some("sync"));
        let instance = "/user.slice/user-1000.slice/user@1000.service/app.slice/app-k@3f9a.service";
        assert_eq!(systemd_unit(instance), Some("app-k"));
    }

    #[test]
    fn an_endpoint_is_a_plain_http_url_and_its_ingest_is_below_it() {
        let endpoint = |url: &str| Endpoint::new(url, Credentials::default(), Wire::Pyroscope);
        assert_eq!(
            endpoint("http://127.0.0.1:4040").unwrap().target,
            "http://127.0.0.1:4040/ingest"
        );
        assert_eq!(
            endpoint("https://profiles.example.com/pyroscope/")
                .unwrap()
                .target,
            "https://profiles.example.com/pyroscope/ingest"
        );
        let otlp = Endpoint::new("http://collector:4318/", Credentials::default(), Wire::Otlp);
        assert_eq!(
            otlp.unwrap().target,
            "http://collector:4318/v1development/profiles"
        );
        for (url, said) in [
            ("localhost:4040", "not a URL"),
            ("ftp://host", "not a URL"),
            ("http://host/?a=b", "without a query"),
            (
                "https://user:secret@host",
                "credentials do not go in the URL",
            ),
        ] {
            let error = endpoint(url).unwrap_err().to_string();
            assert!(error.contains(said), "{url}: {error}");
            assert!(!error.contains("secret"), "{error}");
        }
    }
}
