//! The tr files written by threads of their own (`--consumer-threads N`, N > 1): formatting a
//! line and writing it is most of what a record costs the consumer (perf: about 60% with tr
//! files), so it moves off the session's thread, which drains, decodes and analyses. Each
//! writer thread owns the files of the threads whose file key falls to it ([`FileKey::shard`]):
//! a file is written by one thread, in the order the session hands its records over, which is
//! time order.

use std::{
    io,
    path::PathBuf,
    sync::{
        Arc, Mutex,
        mpsc::{self, Receiver, SyncSender},
    },
    thread::JoinHandle,
};

use tracer_model::{TraceRecord, event::SystemEvent};

use super::{
    Sink, SinkState, TraceEnd,
    output_dir::OutputDir,
    tr::{self, FileKey, TrFiles},
};

/// Records handed to a writer at once: few enough that a writer is never idle for long, many
/// enough that the hand-over costs little per record.
const BATCH: usize = 1024;
/// Batches that may wait for a writer before the session waits for it.
const QUEUED_BATCHES: usize = 16;

/// What a writer thread is asked to do, in the order asked.
enum Work {
    Records(Vec<TraceRecord>),
    /// The session's batch ended: an unbuffered writer pushes its lines to the files.
    BatchDone,
    ProcessExited(u32),
    Flush(mpsc::Sender<io::Result<()>>),
    /// How many files it has created.
    Count(mpsc::Sender<usize>),
    /// Complete every file, answer how many were created, and end.
    Finish(mpsc::Sender<io::Result<usize>>),
}

struct Writer {
    /// Records for this writer not yet handed over.
    batch: Vec<TraceRecord>,
    work: SyncSender<Work>,
    thread: Option<JoinHandle<()>>,
}

/// Per-thread trace files, written by `threads` writer threads.
pub struct TrWriters {
    writers: Vec<Writer>,
    path: PathBuf,
    /// The first error a writer met (it writes nothing more), for the session's next call.
    failed: Arc<Mutex<Option<io::Error>>>,
}

impl TrWriters {
    /// Files in `dir`, written by `threads` threads (at least 1) sharing `max_open` open files.
    pub fn new(
        dir: OutputDir,
        unbuffered: bool,
        max_open: usize,
        threads: usize,
    ) -> io::Result<Self> {
        let threads = threads.max(1);
        let failed = Arc::new(Mutex::new(None));
        let mut writers = Vec::with_capacity(threads);
        for n in 0..threads {
            let files = TrFiles::new(dir.try_clone()?, unbuffered, (max_open / threads).max(1));
            let (work, queue) = mpsc::sync_channel(QUEUED_BATCHES);
            let failed = Arc::clone(&failed);
            let thread = std::thread::Builder::new()
                .name(format!("tr-writer-{n}"))
                .spawn(move || serve(files, queue, &failed))?;
            writers.push(Writer {
                batch: Vec::with_capacity(BATCH),
                work,
                thread: Some(thread),
            });
        }
        Ok(TrWriters {
            writers,
            path: dir.path().to_owned(),
            failed,
        })
    }

    /// The first error a writer met, if any.
    fn check(&self) -> io::Result<()> {
        match self.failed.lock().map(|mut failed| failed.take()) {
            Ok(None) => Ok(()),
            Ok(Some(error)) => Err(error),
            Err(_) => Err(io::Error::other("a tr writer thread panicked")),
        }
    }

    /// Hands every writer its pending records, then `work()`.
    fn send_all(&mut self, work: impl Fn() -> Work) -> io::Result<()> {
        for writer in &mut self.writers {
            if !writer.batch.is_empty() {
                let batch = std::mem::replace(&mut writer.batch, Vec::with_capacity(BATCH));
                send(&writer.work, Work::Records(batch))?;
            }
            send(&writer.work, work())?;
        }
        self.check()
    }

    /// Asks every writer (after its pending records) and gathers their answers.
    fn ask_all<T>(&mut self, ask: impl Fn(mpsc::Sender<T>) -> Work) -> io::Result<Vec<T>> {
        let (answer, answers) = mpsc::channel();
        self.send_all(|| ask(answer.clone()))?;
        drop(answer);
        let answers: Vec<T> = answers.iter().collect();
        if answers.len() != self.writers.len() {
            return Err(io::Error::other("a tr writer thread ended early"));
        }
        // Each writer answered after doing all it was given: any error of that is known now.
        self.check()?;
        Ok(answers)
    }
}

fn send(work: &SyncSender<Work>, item: Work) -> io::Result<()> {
    work.send(item)
        .map_err(|_| io::Error::other("a tr writer thread ended early"))
}

/// A writer thread: does what it is asked, in order, until the session lets go of it. After
/// an error it writes nothing more and the session is told.
fn serve(mut files: TrFiles, queue: Receiver<Work>, failed: &Mutex<Option<io::Error>>) {
    let mut healthy = true;
    let fail = |error: io::Error| {
        if let Ok(mut first) = failed.lock() {
            first.get_or_insert(error);
        }
    };
    for work in queue {
        let done = match work {
            Work::Records(records) if healthy => records.iter().try_for_each(|r| files.record(r)),
            Work::BatchDone if healthy => files.batch_done(),
            Work::ProcessExited(pid) if healthy => files.process_exited(pid),
            Work::Records(_) | Work::BatchDone | Work::ProcessExited(_) => Ok(()),
            Work::Flush(answer) => {
                let _ = answer.send(if healthy { files.flush() } else { Ok(()) });
                Ok(())
            }
            Work::Count(answer) => {
                let _ = answer.send(files.created());
                Ok(())
            }
            Work::Finish(answer) => {
                let finished = files.finish(&TraceEnd::default()).map(|_| files.created());
                let _ = answer.send(finished);
                return;
            }
        };
        if let Err(error) = done {
            healthy = false;
            fail(error);
        }
    }
}

impl Sink for TrWriters {
    fn begin(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        let shard = FileKey::of(record).shard(self.writers.len());
        let writer = &mut self.writers[shard];
        writer.batch.push(record.clone());
        if writer.batch.len() >= BATCH {
            let batch = std::mem::replace(&mut writer.batch, Vec::with_capacity(BATCH));
            send(&writer.work, Work::Records(batch))?;
        }
        Ok(())
    }

    /// A tr line has no room for them.
    fn system_event(&mut self, _event: &SystemEvent) -> io::Result<()> {
        Ok(())
    }

    fn wants_system_events(&self) -> bool {
        false
    }

    fn batch_done(&mut self) -> io::Result<()> {
        self.send_all(|| Work::BatchDone)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.ask_all(Work::Flush)?.into_iter().collect()
    }

    /// Lines go to their files as they come: no stream holds them.
    fn clear(&mut self) -> io::Result<u64> {
        Ok(0)
    }

    fn state(&self) -> SinkState {
        let (answer, answers) = mpsc::channel();
        for writer in &self.writers {
            let _ = writer.work.send(Work::Count(answer.clone()));
        }
        drop(answer);
        tr::state(&self.path, answers.iter().sum())
    }

    fn process_exited(&mut self, pid: u32) -> io::Result<()> {
        self.send_all(|| Work::ProcessExited(pid))
    }

    fn finish(&mut self, _end: &TraceEnd) -> io::Result<String> {
        let created = self.ask_all(Work::Finish)?;
        for writer in &mut self.writers {
            if let Some(thread) = writer.thread.take() {
                thread
                    .join()
                    .map_err(|_| io::Error::other("a tr writer thread panicked"))?;
            }
        }
        let created = created.into_iter().sum::<io::Result<usize>>()?;
        self.check()?;
        Ok(tr::summary(&self.path, created))
    }
}

#[cfg(test)]
mod tests {
    use tracer_model::tr::file_name;

    use super::*;

    fn record(pid: u32, lwpid: u32, round: i64) -> TraceRecord {
        TraceRecord {
            sec: 1_700_000_000,
            nsec: round,
            lwpid,
            pid,
            tid: 139_800_000_000_000,
            event1: 2,
            event2: 4,
            which: 0,
            a: [round, 0, 1, 0, 0],
            caller: 0,
        }
    }

    #[test]
    fn each_file_gets_its_lines_in_order_whichever_writer_owns_it() {
        let dir = std::env::temp_dir().join(format!("thrtrace-tr-writers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // 3 writers sharing 3 open files: most writes reopen a file; more rounds than a batch.
        let mut files = TrWriters::new(OutputDir::open(&dir).unwrap(), false, 3, 3).unwrap();
        let rounds = 2 * BATCH as i64;
        for round in 0..rounds {
            for lwpid in 200..210 {
                files.record(&record(100, lwpid, round)).unwrap();
            }
            if round == 7 {
                // Completes the process's open files; its threads write on after it.
                files.process_exited(100).unwrap();
            }
        }
        files.flush().unwrap();
        assert_eq!(
            files.state().descriptions,
            [format!("tr files in {} (10 so far)", dir.display())]
        );
        let summary = files.finish(&TraceEnd::default()).unwrap();
        assert_eq!(summary, format!("10 files in {}", dir.display()));
        for lwpid in 200..210 {
            let text = std::fs::read_to_string(dir.join(file_name(100, lwpid))).unwrap();
            let rounds_written: Vec<i64> = text
                .lines()
                .map(|l| l.split(':').nth(8).unwrap().parse().unwrap())
                .collect();
            assert_eq!(
                rounds_written,
                (0..rounds).collect::<Vec<_>>(),
                "thread {lwpid}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_writer_error_reaches_the_session() {
        let dir = std::env::temp_dir().join(format!("thrtrace-tr-fail-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut files = TrWriters::new(OutputDir::open(&dir).unwrap(), false, 4, 2).unwrap();
        // A directory where the file should be: creating it fails in its writer.
        std::fs::create_dir(dir.join(file_name(100, 201))).unwrap();
        std::fs::write(dir.join(file_name(100, 201)).join("keep"), "x").unwrap();
        files.record(&record(100, 201, 0)).unwrap();
        let error = files
            .flush()
            .expect_err("the failed create was not reported");
        assert!(error.to_string().contains(&file_name(100, 201)), "{error}");
        // Reported once; the writer writes nothing more, and the rest ends cleanly.
        files.record(&record(100, 202, 0)).unwrap();
        files.batch_done().unwrap();
        files.finish(&TraceEnd::default()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
