//! The tr files written by threads of their own (N-1 with `--consumer-threads N`, N > 1): each writer
//! thread ([`Threaded`]) owns the files of the threads whose file key falls to it
//! ([`FileKey::shard`]), so a file is written by one thread, in the order the session hands its
//! records over, which is time order.

use std::{io, path::PathBuf};

use tracer_model::TraceRecord;

use super::{
    Buffering, Sink, SinkState, Summary, TraceEnd,
    output_dir::OutputDir,
    threaded::Threaded,
    tr::{self, FileKey, TrFiles},
};

/// Per-thread trace files, written by several writer threads.
pub struct TrWriters {
    writers: Vec<Threaded<TrFiles>>,
    path: PathBuf,
}

impl TrWriters {
    /// Files in `dir`, written by `threads` threads (at least 1) sharing `max_open` open files.
    pub fn new(
        dir: &OutputDir,
        buffering: Buffering,
        max_open: usize,
        threads: usize,
    ) -> io::Result<Self> {
        let threads = threads.max(1);
        let writers = (0..threads)
            .map(|n| {
                let files = TrFiles::new(dir.try_clone()?, buffering, (max_open / threads).max(1));
                Threaded::new(files, &format!("tr-writer-{n}"))
            })
            .collect::<io::Result<_>>()?;
        Ok(TrWriters {
            writers,
            path: dir.path().to_owned(),
        })
    }

    /// Files created so far, by every writer.
    fn created(&self) -> io::Result<tr::FilesMade> {
        self.writers
            .iter()
            .try_fold(tr::FilesMade::default(), |sum, writer| {
                Ok(sum + writer.query(|files| files.created())?)
            })
    }
}

impl Sink for TrWriters {
    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        let shard = FileKey::of(record).shard(self.writers.len());
        self.writers[shard].record(record)
    }

    fn batch_done(&mut self) -> io::Result<()> {
        self.writers
            .iter_mut()
            .try_for_each(super::Sink::batch_done)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writers.iter_mut().try_for_each(super::Sink::flush)
    }

    fn state(&self) -> SinkState {
        tr::state(&self.path, self.created().map_or(0, |made| made.files))
    }

    fn destinations(&self) -> Vec<String> {
        vec![tr::destination(&self.path)]
    }

    fn process_exited(&mut self, pid: u32) -> io::Result<()> {
        self.writers
            .iter_mut()
            .try_for_each(|w| w.process_exited(pid))
    }

    fn sync(&mut self) -> io::Result<()> {
        self.writers.iter_mut().try_for_each(super::Sink::sync)
    }

    fn finish(&mut self, end: &TraceEnd) -> io::Result<Summary> {
        let created = self.created()?;
        for writer in &mut self.writers {
            writer.finish(end)?;
        }
        Ok(tr::written(&self.path, created).into())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tracer_model::tr::file_name;

    use super::{
        super::tr::tests::{files_in, record},
        *,
    };

    /// An empty directory for one test, and its writers.
    fn writers(label: &str, max_open: usize, threads: usize) -> (PathBuf, TrWriters) {
        let dir = std::env::temp_dir().join(format!("thrtrace-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let files = TrWriters::new(
            &OutputDir::open(&dir).unwrap(),
            Buffering::Buffered,
            max_open,
            threads,
        );
        (dir, files.unwrap())
    }

    fn a1_of(dir: &Path, lwpid: u32) -> Vec<i64> {
        let text = std::fs::read_to_string(dir.join(file_name(100, lwpid))).unwrap();
        text.lines()
            .map(|l| l.split(':').nth(8).unwrap().parse().unwrap())
            .collect()
    }

    #[test]
    fn each_file_gets_its_lines_in_order_whichever_writer_owns_it() {
        // 3 writers sharing 3 open files: most writes reopen a file; more rounds than a batch.
        let (dir, mut files) = writers("tr-writers", 3, 3);
        let rounds = 2 * 1024;
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
        assert_eq!(summary.0, [files_in(&dir, 10)]);
        for lwpid in 200..210 {
            let written = a1_of(&dir, lwpid);
            assert_eq!(written, (0..rounds).collect::<Vec<_>>(), "thread {lwpid}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_writer_error_reaches_the_session() {
        let (dir, mut files) = writers("tr-fail", 4, 2);
        // A directory where the file should be: creating it fails in its writer.
        std::fs::create_dir(dir.join(file_name(100, 201))).unwrap();
        std::fs::write(dir.join(file_name(100, 201)).join("keep"), "x").unwrap();
        files.record(&record(100, 201, 0)).unwrap();
        // Handed over without waiting: learned at the next call, or once the session waits
        // for the writers.
        let error = files
            .batch_done()
            .and_then(|()| files.sync())
            .expect_err("the failed create was not reported");
        assert!(error.to_string().contains(&file_name(100, 201)), "{error}");
        // Reported once; the writer writes nothing more, and the rest ends cleanly.
        files.record(&record(100, 202, 0)).unwrap();
        files.batch_done().unwrap();
        files.finish(&TraceEnd::default()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
