//! Where events go. Each output implements [`Sink`] ([`tr`]: the `tr.*` files, or
//! [`tr_writers`]: the same written by several threads; [`log`]: the trace log, with the
//! stream's policies; [`ctf`]: a CTF trace, written live with `--ctf` or by `convert`);
//! [`Sinks`] hands every event to each of them, and [`threaded`] runs a sink on a thread of its own (`--consumer-threads`);
//! `top`'s live view (`readers::top`) and the profiles pushed to Pyroscope
//! (`readers::pyroscope`) are sinks too, given to the session by the command line, and so are
//! the readers' outputs that `dump` and `convert` replay a log into (`readers::dump::Printer`,
//! `readers::perfetto::PerfettoTimeline`, with the tr and CTF sinks above).
//! The session's watches (`session::deadlocks`, `session::blocks`) are sinks that write
//! nothing: they look at the events for deadlocks and long blocks, and send what they find back
//! to the session, which writes it to every sink.
//! The session calls `begin`, then `record` and `system_event` in time order,
//! `process_exited` once a process's last records are written, `time_passed` once per pass,
//! `flush` and `clear` when asked (SIGUSR1, `ctl`), and `finish`. [`output_dir`] creates every
//! file a sink writes, safely; [`descriptors`] bounds how many stay open.

pub mod ctf;
pub mod descriptors;
pub mod free_space;
pub mod log;
pub mod output_dir;
pub mod threaded;
pub mod tr;
pub mod tr_writers;

use std::{fmt, io, path::PathBuf};

use tracer_model::{TraceRecord, event::SystemEvent, log::Status};

use crate::say::counted;

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

/// When a sink's files get the records it is handed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffering {
    /// In large writes: at each drain's end at the latest for the log's stream, when its
    /// buffer fills for a tr file.
    Buffered,
    /// Each record as it arrives (`--unbuffered`, `THR_TRACE_BUF`).
    EachRecord,
}

/// What one sink wrote, for the line that ends a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// tr files: how many were created (and earlier ones kept as `NAME.old`), and where.
    TrFiles {
        created: tr::FilesMade,
        dir: PathBuf,
    },
    /// The trace log: its events, where (as the user named it), and what it left out.
    Log {
        events: u64,
        path: PathBuf,
        /// Events not written: `--log-size` was reached.
        past_size_limit: u64,
        /// Events not recorded: the stream filled under `--stream-full-policy until-full`.
        stream_full: u64,
        /// Where the log that was there before was moved, if it was.
        earlier: Option<PathBuf>,
    },
    /// A CTF trace: its events, where, and how many were stamped with the time of the event
    /// before them (the log had them out of time order).
    Ctf {
        events: u64,
        dir: PathBuf,
        restamped: u64,
        /// Where the trace that was in the directory was moved, if there was one.
        earlier: Option<PathBuf>,
    },
    /// Contention profiles pushed to a Pyroscope server.
    Profiles {
        pushed: u64,
        url: String,
        /// The profiler's thread ended early.
        profiler_failed: bool,
        not_delivered: u64,
        /// Why the last profile not delivered was not.
        last_error: Option<String>,
    },
    /// A timeline for Perfetto: its wait and hold slices, the wakeups drawn between threads,
    /// the threads, and where.
    Timeline {
        slices: usize,
        wakes: usize,
        threads: usize,
        path: PathBuf,
    },
    /// `top`'s live view, left on the screen.
    LiveView,
    /// Events printed to stdout (`--print`).
    Printed { events: u64 },
    /// Records, and other events, a sink did not write: the free space of its directory's
    /// file system fell below `floor` (`--min-free`), or it filled up.
    OutOfSpace {
        records: u64,
        others: u64,
        dir: PathBuf,
        /// `--min-free`'s floor, or none where the file system filled up first.
        floor: Option<u64>,
    },
}

impl fmt::Display for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Written::TrFiles { created, dir } => {
                write!(
                    f,
                    "{} in {}",
                    counted(created.files as u64, "file"),
                    dir.display()
                )?;
                match created.kept_old {
                    0 => Ok(()),
                    1 => write!(f, " (an earlier tr file of its name kept as NAME.old)"),
                    kept => write!(
                        f,
                        " ({kept} earlier tr files of their names kept as NAME.old)"
                    ),
                }
            }
            Written::Log {
                events,
                path,
                past_size_limit,
                stream_full,
                earlier,
            } => {
                write!(f, "{events} events in {}", path.display())?;
                if *past_size_limit > 0 {
                    write!(f, " ({past_size_limit} not written: --log-size reached)")?;
                }
                if *stream_full > 0 {
                    write!(
                        f,
                        " ({stream_full} not recorded: the stream filled, --stream-full-policy \
                         until-full)"
                    )?;
                }
                if let Some(earlier) = earlier {
                    write!(f, " (the earlier log is {})", earlier.display())?;
                }
                Ok(())
            }
            Written::Ctf {
                events,
                dir,
                restamped,
                earlier,
            } => {
                write!(f, "{events} events in a CTF trace in {}", dir.display())?;
                if *restamped > 0 {
                    write!(
                        f,
                        " ({restamped} stamped with the time of the event before them: the log \
                         has them out of time order)"
                    )?;
                }
                if let Some(earlier) = earlier {
                    write!(f, " (the earlier trace is {})", earlier.display())?;
                }
                Ok(())
            }
            Written::Profiles {
                pushed,
                url,
                profiler_failed,
                not_delivered,
                last_error,
            } => {
                let plural = if *pushed == 1 { "" } else { "s" };
                write!(f, "{pushed} contention profile{plural} pushed to {url}")?;
                if *profiler_failed {
                    write!(f, " (the contention profiler failed)")?;
                }
                if *not_delivered > 0 {
                    write!(f, ", {not_delivered} not delivered")?;
                    if let Some(why) = last_error {
                        write!(f, " (the last failure: {why})")?;
                    }
                }
                Ok(())
            }
            Written::Timeline {
                slices,
                wakes,
                threads,
                path,
            } => write!(
                f,
                "{}, {} on {} in {}",
                counted(*slices as u64, "slice"),
                counted(*wakes as u64, "wakeup"),
                counted(*threads as u64, "thread"),
                path.display()
            ),
            Written::LiveView => write!(f, "the live view"),
            Written::Printed { events } => write!(f, "{events} events printed"),
            Written::OutOfSpace {
                records,
                others,
                dir,
                floor,
            } => {
                write!(
                    f,
                    "{} and {} not written: ",
                    counted(*records, "record"),
                    counted(*others, "other event"),
                )?;
                match floor {
                    Some(floor) => write!(
                        f,
                        "the free space of {} fell below --min-free's {}",
                        dir.display(),
                        crate::say::bytes(*floor)
                    ),
                    None => write!(f, "{} filled up", dir.display()),
                }
            }
        }
    }
}

/// What the sinks wrote, each its part: "4 files in /tmp/trace, 812 events in app.ptl".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary(pub Vec<Written>);

impl From<Written> for Summary {
    fn from(written: Written) -> Self {
        Summary(vec![written])
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, written) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{written}")?;
        }
        Ok(())
    }
}

/// An output, or a watch. Every sink takes records ([`Sink::record`], the one method it must
/// have); the rest has defaults for a sink that has nothing to do then (no system events,
/// nothing to look for as time passes, nothing held to flush or clear, nothing to complete or
/// tell at the end).
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
    /// Where it writes, for the line that says a trace has begun ("tr files in /tmp/trace");
    /// nothing for a sink that only watches, or that draws on the terminal.
    fn destinations(&self) -> Vec<String> {
        Vec::new()
    }
    /// The process has exited and its last records have been written: complete its files.
    fn process_exited(&mut self, _pid: u32) -> io::Result<()> {
        Ok(())
    }
    /// Once per pass, with the time now (ns since the epoch): a watch looks for what only time
    /// passing shows, threads blocked past its threshold with nobody releasing them. The
    /// watches run on the session's thread; outputs have nothing to look for.
    fn time_passed(&mut self, _now_ns: i64) {}
    /// Waits until everything handed over so far is written, and says if writing it failed:
    /// a sink on a thread of its own ([`threaded`]) learns of a failed write after the call
    /// that handed it over. Others write as they are called.
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Tracing has ended: complete every file. Returns what was written, for the summary line
    /// ("4 files in /tmp/trace").
    fn finish(&mut self, _end: &TraceEnd) -> io::Result<Summary> {
        Ok(Summary::default())
    }
}

/// Several sinks at once, each given every event. Those a writer thread runs are `Send` (the
/// default); the session's are `Sinks<dyn Sink>`: its deadlock watch holds a symbolizer, which
/// cannot leave the thread it was made on.
pub struct Sinks<S: Sink + ?Sized = dyn Sink + Send>(pub Vec<Box<S>>);

impl<S: Sink + ?Sized> Sink for Sinks<S> {
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
    fn destinations(&self) -> Vec<String> {
        self.0.iter().flat_map(|s| s.destinations()).collect()
    }
    fn process_exited(&mut self, pid: u32) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.process_exited(pid))
    }
    fn time_passed(&mut self, now_ns: i64) {
        self.0.iter_mut().for_each(|s| s.time_passed(now_ns));
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.iter_mut().try_for_each(|s| s.sync())
    }
    fn finish(&mut self, end: &TraceEnd) -> io::Result<Summary> {
        let mut summary = Summary::default();
        for sink in &mut self.0 {
            summary.0.extend(sink.finish(end)?.0);
        }
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_each_sinks_part_and_only_what_it_left_out() {
        let summary = Summary(vec![
            Written::TrFiles {
                created: tr::FilesMade {
                    files: 4,
                    kept_old: 0,
                },
                dir: "/tmp/trace".into(),
            },
            Written::Log {
                events: 812,
                path: "app.ptl".into(),
                past_size_limit: 0,
                stream_full: 3,
                earlier: None,
            },
            Written::Profiles {
                pushed: 1,
                url: "http://pyroscope:4040".into(),
                profiler_failed: false,
                not_delivered: 0,
                last_error: None,
            },
        ]);
        assert_eq!(
            summary.to_string(),
            "4 files in /tmp/trace, 812 events in app.ptl (3 not recorded: the stream filled, \
             --stream-full-policy until-full), 1 contention profile pushed to \
             http://pyroscope:4040"
        );
        assert_eq!(Summary::default().to_string(), "");
    }
}
