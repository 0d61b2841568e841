//! The session's side of the controller (`crate::control`): requests arrive from the socket's
//! connections as [`Asked`], and the session answers each once it is in force.
//!
//! Stop, start and filter change which probes record in BPF, then answer: a probe hit after
//! the answer sees the change. The same change reaches the decoder through the reorder stage,
//! with its system event (STOP, START, FILTER), so that the records stamped before it are
//! written as before and a record racing the change is not. Flush and clear go through the
//! reorder stage too, and answer when done: everything stamped before the request is in the
//! log when `ctl flush` returns.

use std::{os::unix::net::UnixListener, time::Duration};

use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::UnixStream,
    sync::{mpsc, oneshot},
    task::JoinSet,
};
use tracer_common::RecordingMasks;
use tracer_model::{
    event::{SystemEvent, SystemKind},
    selection::EventSet,
};

use super::{
    Session,
    flow::{Action, FlushCause, Staged},
};
use crate::{
    capture::{CaptureError, kernel},
    control::{FilterHow, MAX_REQUEST_BYTES, Reply, Request, StatusReport, socket::ControlSocket},
    sinks::Sink,
};

/// How long a connection may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the last answers (a shutdown's) may take to be written at the end.
const LAST_ANSWERS_TIMEOUT: Duration = Duration::from_secs(2);

/// A request from a controller, and where its answer goes.
pub struct Asked {
    pub request: Request,
    pub answer: oneshot::Sender<Reply>,
}

/// The control socket, listening.
pub struct Controller {
    socket: ControlSocket,
    requests: mpsc::Receiver<Asked>,
    /// Ends the accept loop, which then waits for the connections it serves.
    stop: Option<oneshot::Sender<()>>,
    accepting: Option<tokio::task::JoinHandle<()>>,
}

impl Controller {
    /// Accepts on `socket`; needs a tokio runtime's context.
    pub fn listen(mut socket: ControlSocket) -> std::io::Result<Controller> {
        let listener: UnixListener = socket
            .take_listener()
            .ok_or_else(|| std::io::Error::other("the control socket is listened on already"))?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::UnixListener::from_std(listener)?;
        let (sender, requests) = mpsc::channel(16);
        let (stop, stopped) = oneshot::channel();
        let accepting = tokio::spawn(accept(listener, socket.owner_uid, sender, stopped));
        Ok(Controller {
            socket,
            requests,
            stop: Some(stop),
            accepting: Some(accepting),
        })
    }

    pub async fn next(&mut self) -> Option<Asked> {
        self.requests.recv().await
    }

    /// Refuses the requests not answered, stops accepting, lets the connections write their
    /// last answers, and removes the socket.
    pub async fn close(mut self) {
        self.requests.close();
        while let Ok(asked) = self.requests.try_recv() {
            let _ = asked.answer.send(Reply::refused("the trace is ending"));
        }
        drop(self.stop.take());
        if let Some(accepting) = self.accepting.take() {
            let _ = tokio::time::timeout(LAST_ANSWERS_TIMEOUT, accepting).await;
        }
        drop(self.socket);
    }
}

async fn accept(
    listener: tokio::net::UnixListener,
    owner_uid: u32,
    requests: mpsc::Sender<Asked>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve(stream, owner_uid, requests.clone()));
                }
                // Out of descriptors, or the like: the trace goes on; try the next.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            },
            Some(_) = connections.join_next() => {}
        }
    }
    drop(requests);
    while connections.join_next().await.is_some() {}
}

/// One connection: one request, one answer. Only root and the trace's owner are served.
async fn serve(stream: UnixStream, owner_uid: u32, requests: mpsc::Sender<Asked>) {
    let allowed = stream
        .peer_cred()
        .is_ok_and(|cred| cred.uid() == 0 || cred.uid() == owner_uid);
    let (read, mut write) = stream.into_split();
    let reply = match allowed {
        false => Reply::refused(
            "permission denied: only root or the user who started the trace may control it",
        ),
        true => match read_request(read).await {
            Err(message) => Reply::refused(message),
            Ok(request) => {
                let (answer, answered) = oneshot::channel();
                match requests.send(Asked { request, answer }).await {
                    Ok(()) => answered
                        .await
                        .unwrap_or_else(|_| Reply::refused("the trace is ending")),
                    Err(_) => Reply::refused("the trace is ending"),
                }
            }
        },
    };
    if let Ok(mut line) = serde_json::to_string(&reply) {
        line.push('\n');
        let _ = write.write_all(line.as_bytes()).await;
    }
}

/// Reads one request line: at most `MAX_REQUEST_BYTES`, within `REQUEST_TIMEOUT`.
async fn read_request(read: tokio::net::unix::OwnedReadHalf) -> Result<Request, String> {
    let mut line = Vec::new();
    let mut limited = BufReader::new(read.take(MAX_REQUEST_BYTES as u64 + 1));
    match tokio::time::timeout(REQUEST_TIMEOUT, limited.read_until(b'\n', &mut line)).await {
        Err(_) => return Err(format!("no request within {REQUEST_TIMEOUT:?}")),
        Ok(Err(error)) => return Err(format!("cannot read the request: {error}")),
        Ok(Ok(_)) => {}
    }
    if line.len() > MAX_REQUEST_BYTES {
        return Err(format!(
            "malformed request: longer than {MAX_REQUEST_BYTES} bytes; use thrtrace-bpf ctl"
        ));
    }
    serde_json::from_slice(&line)
        .map_err(|error| format!("malformed request ({error}); use thrtrace-bpf ctl"))
}

/// Which events are recorded, as the controller changes it.
pub struct Recording {
    /// What a filter can select: the events the placed probes record.
    recordable: EventSet,
    /// What the filter selects.
    selected: EventSet,
    running: bool,
    /// `--contended`: only contended calls are recorded.
    contended: bool,
}

impl Recording {
    /// `selected` of the events the probes placed for `probed` record; stopped with `stopped`;
    /// contended calls only with `contended`.
    pub fn new(probed: EventSet, selected: EventSet, stopped: bool, contended: bool) -> Self {
        Recording {
            recordable: probed.recordable(),
            selected,
            running: !stopped,
            contended,
        }
    }

    /// START: POSIX's filter (the event types not recorded), and whether only contended
    /// calls are.
    pub fn start_event(&self, time_ns: i64) -> SystemEvent {
        let kind = SystemKind::Start {
            filter: self.selected.filtered_out(),
            contended: self.contended,
        };
        SystemEvent::new(time_ns, kind)
    }

    pub fn running(&self) -> bool {
        self.running
    }

    /// What the BPF side lets record now.
    pub fn masks(&self) -> RecordingMasks {
        self.decoded().masks()
    }

    /// What the decoder keeps now: nothing while stopped.
    pub fn decoded(&self) -> EventSet {
        match self.running {
            true => self.selected,
            false => EventSet::EMPTY,
        }
    }

    /// What the filter selects, stopped or not.
    pub fn selected(&self) -> EventSet {
        self.selected
    }

    /// Starts or stops; the system event to record, if that changed anything.
    pub fn set_running(&mut self, running: bool, time_ns: i64) -> Option<SystemEvent> {
        if self.running == running {
            return None;
        }
        self.running = running;
        Some(match running {
            true => self.start_event(time_ns),
            false => SystemEvent::new(time_ns, SystemKind::Stop { auto: 0 }),
        })
    }

    /// The events a filter request names, as `--events` reads them: under `--contended`, a
    /// category stands for those of its events it traces, and an event it does not trace is
    /// refused.
    fn named(&self, events: &str) -> Result<EventSet, String> {
        if !self.contended {
            return EventSet::parse_named(events).map_err(|e| e.to_string());
        }
        let (traced, untraced) = EventSet::parse_contended(events).map_err(|e| e.to_string())?;
        match untraced.events().next() {
            Some(event) => Err(format!(
                "{} is not probed in this trace (--contended does not trace it): start a trace \
                 without --contended",
                event.name
            )),
            None => Ok(traced),
        }
    }

    /// Applies a filter request; the FILTER event, or why it is refused.
    pub fn filter(
        &mut self,
        how: FilterHow,
        events: &str,
        time_ns: i64,
    ) -> Result<SystemEvent, String> {
        let named = self.named(events)?;
        if named.is_empty() {
            return Err("name the events: categories, event names or C library functions, separated by commas or colons".into());
        }
        if let Some(missing) = named.difference(self.recordable).events().next() {
            return Err(format!(
                "{} is not probed in this trace (its --events did not name it): start a trace \
                 whose --events include it",
                missing.name
            ));
        }
        let old = self.selected.filtered_out();
        self.selected = match how {
            FilterHow::Set => named,
            FilterHow::Add => self.selected.union(named),
            FilterHow::Sub => self.selected.difference(named),
        };
        let kind = SystemKind::Filter {
            old,
            new: self.selected.filtered_out(),
        };
        Ok(SystemEvent::new(time_ns, kind))
    }
}

impl Session {
    /// Answers a controller's request, or says it is to be answered at the end (shutdown).
    pub(super) fn answer(
        &mut self,
        asked: Asked,
    ) -> Result<Option<oneshot::Sender<Reply>>, CaptureError> {
        let Asked { request, answer } = asked;
        let now = kernel::monotonic_ns();
        let now_ns = self.decoder.realtime_ns(now);
        let change = match request {
            Request::Status => {
                let status = self.status();
                let _ = answer.send(Reply::Status(Box::new(status)));
                return Ok(None);
            }
            Request::Shutdown => return Ok(Some(answer)),
            Request::Flush | Request::Clear => {
                let action = match request {
                    Request::Flush => Action::Flush(FlushCause::Controller),
                    _ => Action::Clear,
                };
                // Done once everything stamped before now is written.
                let answer = Some(answer);
                self.flow.reorder.push(now, Staged::Act { action, answer });
                return Ok(None);
            }
            Request::Start => self
                .recording
                .set_running(true, now_ns)
                .ok_or("running already"),
            Request::Stop => self
                .recording
                .set_running(false, now_ns)
                .ok_or("stopped already"),
            Request::Filter { how, events } => match self.recording.filter(how, &events, now_ns) {
                Ok(event) => Ok(event),
                Err(refusal) => {
                    let _ = answer.send(Reply::refused(refusal));
                    return Ok(None);
                }
            },
        };
        let event = match change {
            Ok(event) => event,
            // Nothing to change: done, as POSIX's start of a running stream is.
            Err(already) => {
                let _ = answer.send(Reply::done(already));
                return Ok(None);
            }
        };
        self.datapath.set_recording(&self.recording.masks())?;
        let message = match &event.kind {
            SystemKind::Start { .. } => "started".to_owned(),
            SystemKind::Stop { .. } => "stopped".to_owned(),
            _ => format!("recording {}", self.recording.selected().spec()),
        };
        let action = Action::Select {
            events: self.recording.decoded(),
            event,
        };
        self.flow.reorder.push(
            now,
            Staged::Act {
                action,
                answer: None,
            },
        );
        let _ = answer.send(Reply::done(message));
        Ok(None)
    }

    /// `ctl status`.
    fn status(&self) -> StatusReport {
        let state = self.sinks.state();
        let status = state.status.unwrap_or_default();
        // The recording's state is the stream's as soon as a controller changes it; the log
        // hears of a START or STOP only once everything stamped before it is written, but it
        // alone knows that its full policy (until-full) stopped the stream.
        let stopped_full = status.full && !status.running;
        let running = self.recording.running() && !stopped_full;
        let flag =
            |set: bool, yes: &str, no: &str| format!("POSIX_TRACE_{}", if set { yes } else { no });
        let mut targets: Vec<u32> = self.watched.running.iter().copied().collect();
        targets.sort_unstable();
        StatusReport {
            name: self.name.clone(),
            pid: std::process::id(),
            posix_stream_status: flag(running, "RUNNING", "SUSPENDED"),
            posix_stream_full_status: flag(status.full, "FULL", "NOT_FULL"),
            posix_stream_overrun_status: flag(status.overrun, "OVERRUN", "NO_OVERRUN"),
            posix_stream_flush_status: flag(status.flushing, "FLUSHING", "NOT_FLUSHING"),
            posix_stream_flush_error: i32::from(status.flush_error),
            posix_log_overrun_status: flag(status.log_overrun, "OVERRUN", "NO_OVERRUN"),
            posix_log_full_status: flag(status.log_full, "FULL", "NOT_FULL"),
            events: self.recording.selected().spec(),
            recorded: self
                .recording
                .selected()
                .names()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            filtered_out: self.recording.selected().filtered_out(),
            records: self.flow.records,
            lost: self.flow.losses.total(),
            rate: self.flow.rate.per_second,
            uptime_s: self.flow.started.elapsed().as_secs_f64(),
            targets,
            system_wide: self.until_stopped,
            sinks: state.descriptions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_common::Category;

    #[test]
    fn filters_set_add_and_subtract_within_the_probed_events() {
        let probed = EventSet::of(
            [Category::Mutex, Category::Cond]
                .into_iter()
                .flat_map(Category::events),
        );
        let mut recording = Recording::new(probed, probed, false, false);
        let event = recording.filter(FilterHow::Set, "cond_signal", 7).unwrap();
        assert_eq!(recording.decoded().names(), ["cond_signal"]);
        let SystemKind::Filter { old, new } = event.kind else {
            panic!("{event:?}")
        };
        assert!(!old.contains(&"mutex_lock".to_owned()));
        assert!(new.contains(&"mutex_lock".to_owned()));
        assert!(!new.contains(&"cond_signal".to_owned()));
        recording.filter(FilterHow::Add, "mutex_lock", 8).unwrap();
        assert_eq!(recording.decoded().names(), ["mutex_lock", "cond_signal"]);
        assert_eq!(recording.selected().spec(), "mutex_lock:cond_signal");
        recording.filter(FilterHow::Add, "cond", 9).unwrap();
        assert_eq!(recording.selected().spec(), "mutex_lock:cond");
        recording.filter(FilterHow::Sub, "cond", 9).unwrap();
        assert_eq!(recording.decoded().names(), ["mutex_lock"]);
        // rmutex calls are recorded through the mutex probes, which are placed.
        recording.filter(FilterHow::Add, "rmutex_lock", 9).unwrap();
        let error = recording.filter(FilterHow::Add, "rwlock", 10).unwrap_err();
        assert!(error.contains("is not probed in this trace"), "{error}");
        assert!(recording.filter(FilterHow::Set, "bogus", 11).is_err());
        assert!(recording.filter(FilterHow::Set, "", 11).is_err());
        assert_eq!(recording.decoded().names(), ["mutex_lock", "rmutex_lock"]);
    }

    #[test]
    fn a_contended_trace_filters_a_category_to_the_events_it_traces() {
        let traced = EventSet::all().contended();
        let mut recording = Recording::new(traced, traced, false, true);
        recording.filter(FilterHow::Set, "rwlock:sema", 5).unwrap();
        assert_eq!(
            recording.decoded().names(),
            [
                "sema_wait",
                "sema_post",
                "rw_rdlock",
                "rw_wrlock",
                "rw_unlock"
            ]
        );
        let error = recording
            .filter(FilterHow::Add, "rw_tryrdlock", 6)
            .unwrap_err();
        assert!(
            error.contains("rw_tryrdlock is not probed in this trace (--contended does not"),
            "{error}"
        );
        let error = recording.filter(FilterHow::Set, "spin", 7).unwrap_err();
        assert!(
            error.starts_with(
                "_spin_unlock is not probed in this trace (--contended does not trace it)"
            ),
            "{error}"
        );
        // Traced under --contended, but not asked for by this trace's --events.
        let (mutex, _) = EventSet::parse_contended("mutex").unwrap();
        let mut recording = Recording::new(mutex, mutex, false, true);
        let error = recording.filter(FilterHow::Add, "sema", 8).unwrap_err();
        assert!(
            error.starts_with("sema_wait is not probed in this trace (its --events did not"),
            "{error}"
        );
    }

    #[test]
    fn a_stopped_trace_records_nothing_and_starts_with_its_filter() {
        let all = EventSet::all();
        let mut recording = Recording::new(all, all, true, true);
        assert_eq!(recording.masks(), [0; 16]);
        assert!(recording.decoded().is_empty());
        let start = recording.set_running(true, 5).unwrap();
        assert_eq!(
            start.kind,
            SystemKind::Start {
                filter: Vec::new(),
                contended: true
            }
        );
        assert_eq!(recording.set_running(true, 6), None);
        assert_ne!(recording.masks(), [0; 16]);
        let stop = recording.set_running(false, 7).unwrap();
        assert_eq!(stop.kind, SystemKind::Stop { auto: 0 });
    }
}
