//! A sink run on a thread of its own: every sink that writes files runs so. Creating files and
//! writing them must never stall the session's thread, which drains the rings; and
//! formatting, encoding and writing are most of what a record costs the consumer (perf: about
//! 60% with tr files), so they move off the thread that drains, decodes and analyses. The session hands
//! the sink's thread records and system events in batches, in the order it writes them, so the
//! sink sees exactly what it would have seen in the session's thread; requests that answer
//! (flush, clear, state, finish) wait for the thread to have done everything before them.

use std::{
    io,
    sync::{
        Arc, Mutex,
        mpsc::{self, Receiver, Sender, SyncSender},
    },
    thread::JoinHandle,
};

use tracer_model::{TraceRecord, event::SystemEvent};

use super::{Sink, SinkState, Summary, TraceEnd};
use crate::priority::Rank;

/// Events handed over at once: few enough that the thread is never idle for long, many
/// enough that the hand-over costs little per event.
const BATCH: usize = 1024;
/// Batches that may wait for the thread before the session waits for it: 64 MiB of events.
/// The session drains the rings, so it must not wait on the file system: a burst of thousands
/// of new threads, each a file to create (and chown), took long enough with 16 batches for the
/// rings to overflow. Memory, not the rings, absorbs a slow disk, up to this bound.
const QUEUED_BATCHES: usize = (64 << 20) / (BATCH * std::mem::size_of::<Item>());

/// An event for the sink, in the session's order; a system event boxed, so that the many
/// records take no more room than a record.
enum Item {
    Record(TraceRecord),
    System(Box<SystemEvent>),
}

/// Something the sink's thread does whose error, if any, the session learns at its next call.
type Act<S> = Box<dyn FnOnce(&mut S) -> io::Result<()> + Send>;

/// What the sink's thread is asked to do, in the order asked.
enum Work<S> {
    Items(Vec<Item>),
    Do(Act<S>),
    /// Something that answers through the channel it holds.
    Call(Box<dyn FnOnce(&mut S) + Send>),
}

/// Sink `S`, run on a thread of its own.
pub struct Threaded<S> {
    pending: Vec<Item>,
    /// Batches the thread has emptied, to fill again: fresh buffers cost page faults and
    /// cache misses, and a buffer freed by another thread costs the allocator a lock.
    spares: Receiver<Vec<Item>>,
    /// `None` once finished: the thread has ended.
    work: Option<SyncSender<Work<S>>>,
    thread: Option<JoinHandle<()>>,
    /// The first error the sink met (it is given no more events), for the session's next call.
    failed: Arc<Mutex<Option<io::Error>>>,
    wants_system_events: bool,
}

impl<S: Sink + 'static> Threaded<S> {
    /// Starts `sink`'s thread, named `name`.
    pub fn new(sink: S, name: &str) -> io::Result<Self>
    where
        S: Send,
    {
        let wants_system_events = sink.wants_system_events();
        Threaded::made_there(move || sink, wants_system_events, name)
    }

    /// Starts a thread named `name` whose sink `make` makes there: one that cannot be moved
    /// between threads (it keeps blazesym's symbolizer), and wants system events if
    /// `wants_system_events`.
    pub fn made_there(
        make: impl FnOnce() -> S + Send + 'static,
        wants_system_events: bool,
        name: &str,
    ) -> io::Result<Self> {
        let failed = Arc::new(Mutex::new(None));
        let (work, queue) = mpsc::sync_channel(QUEUED_BATCHES);
        let (emptied, spares) = mpsc::channel();
        // Below the threads that drain the rings, so that on busy CPUs the rings are drained
        // first, and above the targets, so that what the session waits on is never held up by
        // them (see `crate::priority`).
        let thread = crate::priority::spawn(name, Rank::Second, {
            let failed = Arc::clone(&failed);
            move || serve(make(), queue, &emptied, &failed)
        })?;
        Ok(Threaded {
            pending: Vec::with_capacity(BATCH),
            spares,
            work: Some(work),
            thread: Some(thread),
            failed,
            wants_system_events,
        })
    }

    fn send(&self, work: Work<S>) -> io::Result<()> {
        self.work
            .as_ref()
            .and_then(|sender| sender.send(work).ok())
            .ok_or_else(|| io::Error::other("a sink's thread has ended"))
    }

    /// Hands the thread the events not handed over yet.
    fn send_pending(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let next = self
            .spares
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let items = std::mem::replace(&mut self.pending, next);
        self.send(Work::Items(items))
    }

    fn push(&mut self, item: Item) -> io::Result<()> {
        self.pending.push(item);
        if self.pending.len() >= BATCH {
            self.send_pending()?;
        }
        Ok(())
    }

    /// The first error the sink met, if any.
    fn check(&self) -> io::Result<()> {
        match self.failed.lock().map(|mut failed| failed.take()) {
            Ok(None) => Ok(()),
            Ok(Some(error)) => Err(error),
            Err(_) => Err(io::Error::other("a sink's thread panicked")),
        }
    }

    /// Has the thread do `act` after everything before; its error comes with a later call.
    fn then(
        &mut self,
        act: impl FnOnce(&mut S) -> io::Result<()> + Send + 'static,
    ) -> io::Result<()> {
        self.send_pending()?;
        self.send(Work::Do(Box::new(act)))?;
        self.check()
    }

    /// Hands the thread what is pending, has it do `ask` after everything before, and waits
    /// for its answer (and for any error met before it).
    pub fn call<T: Send + 'static>(
        &mut self,
        ask: impl FnOnce(&mut S) -> T + Send + 'static,
    ) -> io::Result<T> {
        self.send_pending()?;
        self.query(ask)
    }

    /// Like [`Threaded::call`], but for what has been handed over only: for a caller that
    /// cannot hand over (`state(&self)`), after the session has ended its batch.
    pub fn query<T: Send + 'static>(
        &self,
        ask: impl FnOnce(&mut S) -> T + Send + 'static,
    ) -> io::Result<T> {
        let (answer, answered) = mpsc::sync_channel(1);
        self.send(Work::Call(Box::new(move |sink| {
            let _ = answer.send(ask(sink));
        })))?;
        let answer = answered
            .recv()
            .map_err(|_| io::Error::other("a sink's thread ended without answering"))?;
        self.check()?;
        Ok(answer)
    }
}

/// The sink's thread: does what it is asked, in order, until the session lets go of it, and
/// hands each emptied batch back. After an error the sink is given no more events, and the
/// session is told.
fn serve<S: Sink>(
    mut sink: S,
    queue: Receiver<Work<S>>,
    emptied: &Sender<Vec<Item>>,
    failed: &Mutex<Option<io::Error>>,
) {
    let mut healthy = true;
    for work in queue {
        let done = match work {
            Work::Items(mut items) if healthy => {
                let written = items.iter().try_for_each(|item| match item {
                    Item::Record(record) => sink.record(record),
                    Item::System(event) => sink.system_event(event),
                });
                items.clear();
                let _ = emptied.send(items);
                written
            }
            Work::Do(act) if healthy => act(&mut sink),
            Work::Items(_) | Work::Do(_) => Ok(()),
            Work::Call(ask) => {
                ask(&mut sink);
                Ok(())
            }
        };
        if let Err(error) = done {
            healthy = false;
            if let Ok(mut first) = failed.lock() {
                first.get_or_insert(error);
            }
        }
    }
}

impl<S: Sink + 'static> Sink for Threaded<S> {
    fn begin(&mut self) -> io::Result<()> {
        self.call(super::Sink::begin)?
    }

    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        self.push(Item::Record(*record))
    }

    fn system_event(&mut self, event: &SystemEvent) -> io::Result<()> {
        if !self.wants_system_events {
            return Ok(());
        }
        self.push(Item::System(Box::new(event.clone())))
    }

    fn wants_system_events(&self) -> bool {
        self.wants_system_events
    }

    fn batch_done(&mut self) -> io::Result<()> {
        self.then(super::Sink::batch_done)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.call(super::Sink::flush)?
    }

    fn clear(&mut self) -> io::Result<u64> {
        self.call(super::Sink::clear)?
    }

    /// What the thread has done: the session ends each batch (handing everything over)
    /// before it asks.
    fn state(&self) -> SinkState {
        self.query(|sink| sink.state()).unwrap_or_default()
    }

    fn destinations(&self) -> Vec<String> {
        self.query(|sink| sink.destinations()).unwrap_or_default()
    }

    fn process_exited(&mut self, pid: u32) -> io::Result<()> {
        self.then(move |sink| sink.process_exited(pid))
    }

    fn sync(&mut self) -> io::Result<()> {
        self.call(|_| ())
    }

    fn finish(&mut self, end: &TraceEnd) -> io::Result<Summary> {
        let end = end.clone();
        let summary = self.call(move |sink| sink.finish(&end));
        // The queue closed, the thread ends once it has done everything.
        self.work = None;
        if let Some(thread) = self.thread.take() {
            thread
                .join()
                .map_err(|_| io::Error::other("a sink's thread panicked"))?;
        }
        summary?
    }
}
