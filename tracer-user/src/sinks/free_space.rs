//! The free-space floor (`--min-free`): a sink that writes files stops writing them once the
//! free space of their file system falls below it, completes them whole (every file ends at a
//! record's end; a log gets its closing status), says so once, and counts every event it did
//! not write, as lost; the trace and the target go on, as do the other sinks. Without the
//! option the floor is the larger of 1 GiB and 5% of the file system, but at most a tenth of
//! it: a trace left running cannot fill a disk, and a small file system still takes a trace.
//! A file system that reports no size (ramfs) has no floor. One that fills up before the floor
//! is seen (`--min-free 0`, or another writer faster than the looks) stops the writing alike,
//! where it filled: a tr file is cut back to its last whole line, a log, which cannot be
//! closed, reads to its last whole packet.

use std::{
    io,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use tracer_model::{
    TraceRecord,
    event::{LossSource, NO_CPU, SystemEvent, SystemKind},
};

use super::{
    Sink, SinkState, Summary, TraceEnd, Written,
    output_dir::{OutputDir, Space},
};
use crate::say;

/// How often the free space is looked at: after each drain of the rings, at most every
/// 100 ms, and every 16,384 records within one (a drain can bring hundreds of thousands),
/// so that at most some megabytes are written between two looks.
const CHECK_INTERVAL: Duration = Duration::from_millis(100);
const CHECK_RECORDS: u64 = 16_384;

/// The floor below which no more is written (`--min-free`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MinFree {
    /// The larger of 1 GiB and 5% of the file system, at most a tenth of it.
    Default,
    /// This many bytes; 0 writes until the file system is full.
    Bytes(u64),
}

impl MinFree {
    /// The floor on a file system of `size` bytes.
    pub fn floor(self, size: u64) -> u64 {
        match self {
            MinFree::Default => (1 << 30).max(size / 20).min(size / 10),
            MinFree::Bytes(bytes) => bytes,
        }
    }
}

/// Why a directory cannot be written in at the start.
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    /// Its free space is below the floor already.
    #[error(
        "{}: free some space, trace into another file system, or give a lower --min-free (0 \
         writes until it is full)",
        below(.dir, .space.free, *.floor)
    )]
    Below {
        dir: PathBuf,
        space: Space,
        floor: u64,
    },
    #[error("cannot read the free space of {}", .dir.display())]
    Unreadable {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What is said of `dir` once its free space is below the floor, at the start or later.
fn below(dir: &Path, free: u64, floor: u64) -> String {
    format!(
        "{} has {} free, below the {} that --min-free keeps free there",
        dir.display(),
        say::bytes(free),
        say::bytes(floor)
    )
}

/// The floor `min_free` sets in `dir`; refused if the free space there is below it already.
pub fn floor_in(dir: &OutputDir, min_free: MinFree) -> Result<u64, FloorError> {
    let unreadable = |source| FloorError::Unreadable {
        dir: dir.path().to_owned(),
        source,
    };
    let space = dir.space().map_err(unreadable)?;
    let floor = min_free.floor(space.size);
    if space.free < floor {
        return Err(FloorError::Below {
            dir: dir.path().to_owned(),
            space,
            floor,
        });
    }
    Ok(floor)
}

/// `inner`, the sink that writes files in one directory, stopped at its file system's floor.
pub struct FloorGuard<S> {
    inner: S,
    dir: OutputDir,
    floor: u64,
    last_check: Instant,
    /// Records written since the last look.
    since_check: u64,
    /// Once stopped: what was not written since.
    stopped: Option<Stopped>,
}

#[derive(Default)]
struct Stopped {
    /// The time of the first record not written.
    first_ns: i64,
    records: u64,
    /// System events not written (processes attached and gone, mappings).
    others: u64,
    /// Whether the file system filled up before the floor was seen (`--min-free 0`, or
    /// another writer faster than the looks): the files end where it did.
    full: bool,
}

impl<S: Sink> FloorGuard<S> {
    /// Guards `inner`, which writes in `dir`; refused as [`floor_in`] refuses.
    pub fn new(inner: S, dir: &OutputDir, min_free: MinFree) -> Result<Self, FloorError> {
        let floor = floor_in(dir, min_free)?;
        let dir = dir.try_clone().map_err(|source| FloorError::Unreadable {
            dir: dir.path().to_owned(),
            source,
        })?;
        Ok(FloorGuard {
            inner,
            dir,
            floor,
            last_check: Instant::now(),
            since_check: 0,
            stopped: None,
        })
    }

    /// Counts `record` as not written if the sink has stopped; whether it has.
    fn record_left_out(&mut self, record: &TraceRecord) -> bool {
        let Some(stopped) = &mut self.stopped else {
            return false;
        };
        if stopped.records == 0 {
            stopped.first_ns = record.time_ns() as i64;
        }
        stopped.records += 1;
        true
    }

    /// Passes on what a call of the sink came to, but a full file system: writing stops
    /// there as at the floor (said once), and the trace goes on.
    fn unless_full(&mut self, result: io::Result<()>) -> io::Result<()> {
        match result {
            Err(error) if error.kind() == io::ErrorKind::StorageFull => {
                if self.stopped.is_none() {
                    say!(
                        "thrtrace-bpf: {} is full: no more is written to {}; the trace goes \
                         on, and counts what is not written (--min-free keeps space free)",
                        self.dir.path().display(),
                        self.inner.destinations().join(", ")
                    );
                    self.stopped = Some(Stopped {
                        full: true,
                        ..Stopped::default()
                    });
                }
                Ok(())
            }
            other => other,
        }
    }

    /// Stops writing if the free space has fallen below the floor since the last look.
    fn check(&mut self) -> io::Result<()> {
        self.last_check = Instant::now();
        self.since_check = 0;
        let space = self.dir.space()?;
        if space.free >= self.floor {
            return Ok(());
        }
        // What the sink holds is written now, within the floor, so that its files end whole.
        self.inner.flush()?;
        say!(
            "thrtrace-bpf: {}: no more is written to {}; the trace goes on, and counts what is \
             not written",
            below(self.dir.path(), space.free, self.floor),
            self.inner.destinations().join(", ")
        );
        self.stopped = Some(Stopped::default());
        Ok(())
    }
}

impl<S: Sink> Sink for FloorGuard<S> {
    fn begin(&mut self) -> io::Result<()> {
        self.inner.begin()
    }

    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        if self.record_left_out(record) {
            return Ok(());
        }
        let written = self.inner.record(record);
        self.unless_full(written)?;
        if self.record_left_out(record) {
            return Ok(());
        }
        self.since_check += 1;
        if self.since_check >= CHECK_RECORDS {
            self.check()?;
        }
        Ok(())
    }

    fn system_event(&mut self, event: &SystemEvent) -> io::Result<()> {
        if let Some(stopped) = &mut self.stopped {
            stopped.others += 1;
            return Ok(());
        }
        let written = self.inner.system_event(event);
        self.unless_full(written)
    }

    fn wants_system_events(&self) -> bool {
        self.inner.wants_system_events()
    }

    fn batch_done(&mut self) -> io::Result<()> {
        if self.stopped.is_some() {
            return Ok(());
        }
        let written = self.inner.batch_done();
        self.unless_full(written)?;
        if self.stopped.is_none() && self.last_check.elapsed() >= CHECK_INTERVAL {
            self.check()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.stopped.is_some() {
            return Ok(());
        }
        let written = self.inner.flush();
        self.unless_full(written)
    }

    fn clear(&mut self) -> io::Result<u64> {
        self.inner.clear()
    }

    fn state(&self) -> SinkState {
        let mut state = self.inner.state();
        if let Some(stopped) = &self.stopped {
            let why = match stopped.full {
                true => "filled up",
                false => "fell below --min-free",
            };
            state.descriptions.push(format!(
                "{} not written: the free space of {} {why}",
                say::counted(stopped.records, "record"),
                self.dir.path().display()
            ));
        }
        state
    }

    fn destinations(&self) -> Vec<String> {
        self.inner.destinations()
    }

    /// A process's files are closed, which writes what they hold.
    fn process_exited(&mut self, pid: u32) -> io::Result<()> {
        let written = self.inner.process_exited(pid);
        self.unless_full(written)
    }

    fn time_passed(&mut self, now_ns: i64) {
        self.inner.time_passed(now_ns);
    }

    fn sync(&mut self) -> io::Result<()> {
        let written = self.inner.sync();
        self.unless_full(written)
    }

    /// A log is told, where its records stop, how many were not written after; on a full
    /// file system, which takes no more, the files end where it filled up.
    fn finish(&mut self, end: &TraceEnd) -> io::Result<Summary> {
        let stopped = self.stopped.take();
        if let Some(stopped) = &stopped
            && stopped.records > 0
            && !stopped.full
            && self.inner.wants_system_events()
        {
            self.inner.system_event(&SystemEvent::new(
                stopped.first_ns,
                SystemKind::Overflow {
                    lost: stopped.records,
                    cpu: NO_CPU,
                    source: LossSource::FreeSpace,
                    first_lost_ns: stopped.first_ns,
                },
            ))?;
        }
        let mut summary = match self.inner.finish(end) {
            Err(error)
                if error.kind() == io::ErrorKind::StorageFull
                    && stopped.as_ref().is_some_and(|s| s.full) =>
            {
                Summary::default()
            }
            finished => finished?,
        };
        if let Some(stopped) = stopped {
            summary.0.push(Written::OutOfSpace {
                records: stopped.records,
                others: stopped.others,
                dir: self.dir.path().to_owned(),
                floor: (!stopped.full).then_some(self.floor),
            });
        }
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_floor_is_a_gib_or_a_twentieth_at_most_a_tenth() {
        const GIB: u64 = 1 << 30;
        assert_eq!(MinFree::Default.floor(100 * GIB), 5 * GIB);
        assert_eq!(MinFree::Default.floor(15 * GIB), GIB);
        assert_eq!(MinFree::Default.floor(4 * GIB), 4 * GIB / 10);
        assert_eq!(MinFree::Default.floor(0), 0);
        assert_eq!(MinFree::Bytes(8 << 20).floor(100 * GIB), 8 << 20);
    }
}
