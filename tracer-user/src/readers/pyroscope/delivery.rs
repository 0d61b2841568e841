//! Sends profiles to Pyroscope's ingest API or an OTLP endpoint from a thread of its own, so that
//! the trace never waits for the network: the profiler hands each one to a bounded queue (a profile
//! that finds it full is dropped and counted), and the thread sends them in order, retrying one
//! that did not arrive with a growing pause until the endpoint answers again. An outage is said
//! once, when it begins; a profile the server refuses (a 3xx or 4xx answer: bad credentials, a
//! redirect, a profile it cannot read) is dropped, counted and said once, since sending it again
//! would be refused again. When the trace ends the queue gets [`DRAIN_AT_END`] to drain, whatever
//! the endpoint does; what is left is counted as not delivered.

use std::{
    borrow::Cow,
    io::Read as _,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::{Receiver, SyncSender, TrySendError, sync_channel},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use super::{Endpoint, ingest::Ingest, otlp};

/// A push to make: a profile for Pyroscope's ingest API, or an OTLP request (protobuf).
#[derive(Debug)]
pub enum Push {
    Pyroscope(Ingest),
    Otlp(Vec<u8>),
}

impl Push {
    /// Sends it to `endpoint` with `agent`, giving up after `timeout`.
    fn send(
        &self,
        agent: &ureq::Agent,
        endpoint: &Endpoint,
        timeout: Duration,
    ) -> Result<(), Failure> {
        // A retry sends an OTLP request as it is, without a copy.
        let (mut request, body) = match self {
            Push::Pyroscope(ingest) => {
                let (request, body) = ingest.request(agent, &endpoint.target);
                (request, Cow::Owned(body))
            }
            Push::Otlp(request) => (
                agent
                    .post(&endpoint.target)
                    .header("Content-Type", "application/x-protobuf"),
                Cow::Borrowed(request.as_slice()),
            ),
        };
        if let Some(authorization) = endpoint.credentials.authorization() {
            request = request.header("Authorization", authorization);
        }
        if let Some(tenant) = endpoint.credentials.tenant() {
            request = request.header("X-Scope-OrgID", tenant);
        }
        let mut response = request
            .config()
            .timeout_global(Some(timeout))
            .build()
            .send(&body[..])
            .map_err(|error| Failure::Unreachable(error.to_string()))?;
        let status = response.status();
        // What the server says of it: its first bytes (an OTLP answer is protobuf, read whole
        // up to a bound).
        let most = match self {
            Push::Pyroscope(_) => 512,
            Push::Otlp(_) => 64 << 10,
        };
        let mut said = Vec::new();
        let _ = response
            .body_mut()
            .as_reader()
            .take(most)
            .read_to_end(&mut said);
        if status.is_success() {
            // An OTLP server that took the request may still have dropped some of it.
            return match otlp::rejected(&said).filter(|_| matches!(self, Push::Otlp(_))) {
                Some((profiles, why)) => Err(Failure::Refused(format!(
                    "it rejected {profiles} profiles: {}",
                    one_line(&why)
                ))),
                None => Ok(()),
            };
        }
        let said = match (response.headers().get("location"), self) {
            (Some(location), _) => format!(
                "it redirects to {}",
                String::from_utf8_lossy(location.as_bytes())
            ),
            (None, Push::Otlp(_)) if response_is_protobuf(&response) => {
                otlp::refusal(&said).unwrap_or_default()
            }
            (None, _) => String::from_utf8_lossy(&said).into_owned(),
        };
        let why = match one_line(&said).as_str() {
            "" => status.to_string(),
            said => format!("{status}: {said}"),
        };
        let retried = match self {
            Push::Pyroscope(_) => matches!(status.as_u16(), 408 | 429 | 500..),
            Push::Otlp(_) => otlp::retried(status.as_u16()),
        };
        match retried {
            true => Err(Failure::Unreachable(why)),
            false => Err(Failure::Refused(why)),
        }
    }
}

/// Whether an answer's body is protobuf, as OTLP/HTTP servers answer.
fn response_is_protobuf(response: &ureq::http::Response<ureq::Body>) -> bool {
    response
        .headers()
        .get("content-type")
        .is_some_and(|kind| kind.as_bytes().starts_with(b"application/x-protobuf"))
}

/// What a server said, as one short line of text.
fn one_line(said: &str) -> String {
    let line: String = said
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    line.trim().to_owned()
}

/// Profiles waiting to be sent: at the default interval, half an hour of an outage; at one
/// profile a second, two minutes. What they can take is bounded by this times a profile's size.
pub const QUEUE_PROFILES: usize = 128;
/// The first pause after a failed send, doubled each time up to the longest.
const FIRST_PAUSE: Duration = Duration::from_secs(1);
const LONGEST_PAUSE: Duration = Duration::from_secs(30);
/// A send that has not finished in this long has failed.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the queue may take to drain once the trace has ended.
const DRAIN_AT_END: Duration = Duration::from_secs(5);

/// What became of the profiles.
#[derive(Debug, Default)]
pub struct Deliveries {
    pub sent: u64,
    /// Dropped: refused by the server, left in the queue at the end, or finding it full.
    pub not_delivered: u64,
    /// Why the last one that failed did.
    pub last_error: Option<String>,
}

/// The sending thread and its queue.
pub struct Delivery {
    queue: Option<SyncSender<Push>>,
    /// Profiles dropped on a full queue.
    dropped: u64,
    /// Set when the trace has ended: the thread then has [`DRAIN_AT_END`] left.
    ending: Arc<AtomicBool>,
    said_full: bool,
    thread: Option<JoinHandle<Deliveries>>,
}

impl Delivery {
    pub fn start(endpoint: Endpoint) -> std::io::Result<Delivery> {
        let (queue, profiles) = sync_channel(QUEUE_PROFILES);
        let ending = Arc::new(AtomicBool::new(false));
        let thread = {
            let ending = Arc::clone(&ending);
            std::thread::Builder::new()
                .name("push-send".into())
                .spawn(move || send_all(&endpoint, &profiles, &ending))?
        };
        Ok(Delivery {
            queue: Some(queue),
            dropped: 0,
            ending,
            said_full: false,
            thread: Some(thread),
        })
    }

    /// Queues `ingest`, or drops it if the queue is full.
    pub fn push(&mut self, ingest: Push) {
        let Some(queue) = &self.queue else {
            return;
        };
        match queue.try_send(ingest) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped += 1;
                if !std::mem::replace(&mut self.said_full, true) {
                    say!(
                        "thrtrace-bpf: {QUEUE_PROFILES} contention profiles are waiting to be \
                         pushed: the newest are dropped until the endpoint takes them"
                    );
                }
            }
            // The sending thread is gone (it cannot be but by a bug): its count says so.
            Err(TrySendError::Disconnected(_)) => self.dropped += 1,
        }
    }

    /// Counts a profile that could not be made.
    pub fn not_made(&mut self) {
        self.dropped += 1;
    }

    /// No more profiles: waits for the queue to drain (at most [`DRAIN_AT_END`]), and says
    /// what became of them all.
    pub fn finish(&mut self) -> Deliveries {
        self.queue = None;
        self.ending.store(true, Ordering::Relaxed);
        let mut delivered = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(delivered)) => delivered,
            _ => Deliveries {
                last_error: Some("the sending thread failed".into()),
                ..Deliveries::default()
            },
        };
        delivered.not_delivered += self.dropped;
        delivered
    }
}

/// The thread: sends each profile queued, in order, until the queue is closed and empty, or
/// [`DRAIN_AT_END`] after the trace has ended.
fn send_all(endpoint: &Endpoint, profiles: &Receiver<Push>, ending: &AtomicBool) -> Deliveries {
    let agent = crate::http::agent_config()
        .max_redirects(0)
        .build()
        .new_agent();
    let mut delivered = Deliveries::default();
    let mut in_outage = false;
    let mut said_refused = false;
    let mut drain_until: Option<Instant> = None;
    // What is left of the time to drain, once the trace has ended (`None` before).
    let mut time_left = || {
        ending.load(Ordering::Relaxed).then(|| {
            drain_until
                .get_or_insert_with(|| Instant::now() + DRAIN_AT_END)
                .saturating_duration_since(Instant::now())
        })
    };
    while let Ok(ingest) = profiles.recv() {
        let mut pause = FIRST_PAUSE;
        loop {
            let timeout = match time_left() {
                Some(left) if left.is_zero() => {
                    // This one and every one still queued.
                    delivered.not_delivered += 1 + profiles.try_iter().count() as u64;
                    return delivered;
                }
                Some(left) => left.min(SEND_TIMEOUT),
                None => SEND_TIMEOUT,
            };
            match ingest.send(&agent, endpoint, timeout) {
                Ok(()) => {
                    delivered.sent += 1;
                    if std::mem::take(&mut in_outage) {
                        say!(
                            "thrtrace-bpf: {} takes contention profiles again",
                            endpoint.url
                        );
                    }
                    break;
                }
                Err(Failure::Refused(why)) => {
                    delivered.not_delivered += 1;
                    if !std::mem::replace(&mut said_refused, true) {
                        say!(
                            "thrtrace-bpf: {} refused a contention profile: {why}; \
                             profiles it refuses are dropped",
                            endpoint.url
                        );
                    }
                    delivered.last_error = Some(why);
                    break;
                }
                Err(Failure::Unreachable(why)) => {
                    if !std::mem::replace(&mut in_outage, true) {
                        say!(
                            "thrtrace-bpf: cannot push contention profiles to {}: {why}; \
                             keeping up to {QUEUE_PROFILES} and trying again",
                            endpoint.url
                        );
                    }
                    delivered.last_error = Some(why);
                }
            }
            pause_unless_ending(pause, ending);
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    }
    delivered
}

/// Sleeps `pause`, or at most half a second once the trace has ended (the queue then has
/// [`DRAIN_AT_END`], not the longest pause).
fn pause_unless_ending(pause: Duration, ending: &AtomicBool) {
    const STEP: Duration = Duration::from_millis(100);
    const AT_END: Duration = Duration::from_millis(500);
    let mut until = Instant::now() + pause;
    loop {
        let now = Instant::now();
        if ending.load(Ordering::Relaxed) {
            until = until.min(now + AT_END);
        }
        if now >= until {
            return;
        }
        std::thread::sleep(STEP.min(until - now));
    }
}

/// Why a send failed.
pub enum Failure {
    /// The server answered no (3xx, or a 4xx or 5xx its protocol does not send again: for
    /// Pyroscope, 4xx but 408 and 429; for OTLP, all but 429, 502, 503 and 504): this
    /// profile will never be taken.
    Refused(String),
    /// No answer, or one that says to come back: try again.
    Unreachable(String),
}
