//! Where events go. Each output implements [`Sink`] ([`tr`]: the `tr.*` files, or
//! [`tr_writers`]: the same written by several threads; [`log`]: the trace log, with the
//! stream's policies; [`ctf`]: a CTF trace, written by `convert`); [`Sinks`] hands every event
//! to each of them, and [`threaded`] runs a sink on a thread of its own (`--consumer-threads`);
//! `top`'s live view (`readers::top`) and the profiles pushed to Pyroscope
//! (`readers::pyroscope`) are sinks too, given to the session by the command line.
//! The session calls `begin`, then `record` and `system_event` in time order,
//! `process_exited` once a process's last records are written, `flush` and `clear` when asked
//! (SIGUSR1, `ctl`), and `finish`. [`output_dir`] creates every file a sink writes, safely;
//! [`descriptors`] bounds how many stay open.

pub mod ctf;
pub mod descriptors;
pub mod log;
pub mod output_dir;
pub mod threaded;
pub mod tr;
pub mod tr_writers;

use std::io;

use tracer_model::{TraceRecord, event::SystemEvent, log::Status};

/// What a sink is doing, for `ctl status`.
#[derive(Clone, Debug, Default)]
pub struct SinkState {
    /// What each sink writes where, and how far it has got ("log db.ptl (812 events
    /// written, ...)").
    pub descriptions: Vec<String>,
    /// The POSIX stream's status, for the sink that keeps a stream (the log).
    pub status: Option<Status>,
}

/// What the trace ended with, for the sinks that keep it.
#[derive(Clone, Debug, Default)]
pub struct TraceEnd {
    /// Records the kernel could not deliver, per CPU, over the whole trace.
    pub lost_per_cpu: Vec<u64>,
}

/// An output. Every sink takes records and completes its output at the end; the rest has
/// defaults for a sink that has nothing to do then (no system events, nothing held to flush
/// or clear).
pub trait Sink {
    /// Tracing begins: the output is opened by the time this returns.
    fn begin(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn record(&mut self, record: &TraceRecord) -> io::Result<()>;
    /// A system event, for the sinks that keep them ([`Sink::wants_system_events`]).
    fn system_event(&mut self, _event: &SystemEvent) -> io::Result<()> {
        Ok(())
    }
    /// Whether this sink keeps system events: those that cost reading /proc are made only then.
    fn wants_system_events(&self) -> bool {
        false
    }
    /// Called after each batch drained from the kernel; unbuffered sinks push it to the files.
    fn batch_done(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Asked for (SIGUSR1, `ctl flush`, a long block): write what is held now, the log's
    /// stream included.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Asked for (`ctl clear`): drop the events the stream holds, unwritten. Returns how many.
    fn clear(&mut self) -> io::Result<u64> {
        Ok(0)
    }
    /// What it writes where, for `ctl status`.
    fn state(&self) -> SinkState {
        SinkState::default()
    }
    /// The process has exited and its last records have been written: complete its files.
    fn process_exited(&mut self, _pid: u32) -> io::Result<()> {
        Ok(())
    }
    /// Waits until everything handed over so far is written, and says if writing it failed:
    /// a sink on a thread of its own ([`threaded`]) learns of a failed write after the call
    /// that handed it over. Others write as they are called.
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Tracing has ended: complete every file. Returns what was written, for the summary line
    /// ("4 files in /tmp/trace").
    fn finish(&mut self, end: &TraceEnd) -> io::Result<String>;
}

/// Several sinks at once, each given every event.
#[derive(Default)]
pub struct Sinks(pub Vec<Box<dyn Sink + Send>>);

impl Sink for Sinks {
    fn begin(&mut self) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.begin())
    }
    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.record(record))
    }
    fn system_event(&mut self, event: &SystemEvent) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.system_event(event))
    }
    fn wants_system_events(&self) -> bool {
        self.0.iter().any(|s| s.wants_system_events())
    }
    fn batch_done(&mut self) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.batch_done())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.flush())
    }
    fn clear(&mut self) -> io::Result<u64> {
        self.0.iter_mut().map(|s| s.clear()).sum()
    }
    /// The sinks' descriptions; the status of the one with a stream.
    fn state(&self) -> SinkState {
        let states: Vec<SinkState> = self.0.iter().map(|s| s.state()).collect();
        SinkState {
            descriptions: states.iter().flat_map(|s| s.descriptions.clone()).collect(),
            status: states.iter().find_map(|s| s.status),
        }
    }
    fn process_exited(&mut self, pid: u32) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.process_exited(pid))
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.sync())
    }
    fn finish(&mut self, end: &TraceEnd) -> io::Result<String> {
        let parts: Vec<String> = self
            .0
            .iter_mut()
            .map(|s| s.finish(end))
            .collect::<io::Result<_>>()?;
        Ok(parts.join(", "))
    }
}
