//! The sink that writes UnixWare's `tr.xxxxxxx.yyy` files: one per thread, one record a line,
//! named and laid out as `tracer_model::tr` says; the lines of one file are in the order the
//! records were drained.

use std::{
    fs::File,
    io::{self, Write},
    path::Path,
};

// foldhash, not the standard SipHash: the open file is looked up for every record.
use foldhash::{HashMap, HashMapExt};

use tracer_model::{
    TraceRecord,
    tr::{self, LineWriter, file_name, parse_line},
};

use super::{
    Buffering, Sink, SinkState, Summary, TraceEnd, Written,
    output_dir::{FileIdentity, FileKind, OutputDir, head},
};

/// The buffer of each open file (unbuffered, it is written out after each drain pass).
const FILE_BUFFER_BYTES: usize = 64 * 1024;

/// A tr file's kind: what `--dir` keeps as `NAME.old` when a thread's file takes its name, as
/// far as its first line tells (an empty file too: a thread that wrote nothing).
pub const TR_FILE: FileKind = FileKind {
    name: "tr file",
    is_one: is_tr_file,
};

fn is_tr_file(file: &File) -> io::Result<bool> {
    let head = head(file, LineWriter::MAX_LEN + 1)?;
    Ok(match head.iter().position(|&byte| byte == b'\n') {
        Some(end) => std::str::from_utf8(&head[..end]).is_ok_and(|line| parse_line(line).is_ok()),
        None => head.is_empty(),
    })
}

/// Per-thread trace files in one directory.
///
/// At most `max_open` are open at once, whatever the number of threads (a JVM has thousands,
/// a host traced system-wide more): when one more is needed, the least recently written
/// quarter is flushed and closed, and a closed file is opened again to append when its thread
/// writes again, provided it is still the file created (see [`OutputDir::reopen`]).
pub struct TrFiles {
    dir: OutputDir,
    buffering: Buffering,
    max_open: usize,
    open: HashMap<FileKey, OpenFile>,
    /// Every file created in this run, open or not; for a closed one, how many bytes it holds.
    created: HashMap<FileKey, Created>,
    /// Earlier tr files that had the name of one created, kept as `NAME.old`.
    kept_old: usize,
    /// Counts writes; an open file's `last_write` says how recently it was written.
    clock: u64,
    /// Formats every file's lines, keeping the fields a line shares with the one before.
    lines: LineWriter,
}

/// A file and the lines not yet written to it. Lines are formatted straight into the buffer
/// (not through a `BufWriter`, which would copy each one in), and the buffer is written out
/// only whole: a killed tracer leaves whole lines up to its last write.
struct OpenFile {
    file: File,
    buffer: Vec<u8>,
    last_write: u64,
    /// The bytes the file holds once its buffer is written.
    length: u64,
}

impl OpenFile {
    /// Adds the line of `record`, written at `clock` (see `TrFiles::clock`).
    fn append(
        &mut self,
        lines: &mut LineWriter,
        record: &TraceRecord,
        clock: u64,
    ) -> io::Result<()> {
        // Room for the longest line and its newline: the buffer never grows.
        if FILE_BUFFER_BYTES - self.buffer.len() <= LineWriter::MAX_LEN {
            self.flush()?;
        }
        let before = self.buffer.len();
        lines.append(record, &mut self.buffer);
        self.buffer.push(b'\n');
        self.length += (self.buffer.len() - before) as u64;
        self.last_write = clock;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        let written = self.file.write_all(&self.buffer);
        if written.is_err() {
            // A write cut short (the file system filled up) left part of a line: the file is
            // cut back to its last whole one, and the buffer's lines are not written.
            let whole = self.length - self.buffer.len() as u64;
            if self.file.set_len(whole).is_ok() {
                self.length = whole;
            }
        }
        self.buffer.clear();
        written
    }
}

/// A run that ends in an error still writes the lines it had (as a `BufWriter` would).
impl Drop for OpenFile {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

struct Created {
    identity: FileIdentity,
    length: u64,
}

/// Which file a record goes to: the file name's digits, so threads whose names share them
/// share a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct FileKey {
    pid: u32,
    lwpid: u32,
}

impl FileKey {
    pub(super) fn of(record: &TraceRecord) -> Self {
        FileKey {
            pid: record.pid & tr::PID_MASK,
            lwpid: record.lwpid & tr::LWPID_MASK,
        }
    }

    /// Which of `shards` writers owns this file (see `tr_writers`).
    pub(super) fn shard(self, shards: usize) -> usize {
        (self.pid as usize)
            .wrapping_mul(31)
            .wrapping_add(self.lwpid as usize)
            % shards.max(1)
    }

    fn name(self) -> String {
        file_name(self.pid, self.lwpid)
    }
}

impl TrFiles {
    /// Files in `dir`, at most `max_open` (at least 1) open at once.
    pub fn new(dir: OutputDir, buffering: Buffering, max_open: usize) -> Self {
        TrFiles {
            dir,
            buffering,
            max_open: max_open.max(1),
            open: HashMap::new(),
            created: HashMap::new(),
            kept_old: 0,
            clock: 0,
            lines: LineWriter::default(),
        }
    }

    /// Opens the file of `key` (not open now), closing others first if too many are.
    fn open_new(&mut self, key: FileKey) -> io::Result<()> {
        if self.open.len() >= self.max_open {
            self.close_least_recent(self.max_open.div_ceil(4))?;
        }
        let (file, length) = match self.open_file(key) {
            // Descriptors taken by something else (pidfds, links): make room and retry.
            Err(error) if error.raw_os_error() == Some(libc::EMFILE) && !self.open.is_empty() => {
                self.close_least_recent(self.open.len().div_ceil(2))?;
                self.open_file(key)
            }
            result => result,
        }
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{}: {e}", self.dir.shown(&key.name()).display()),
            )
        })?;
        self.open.insert(
            key,
            OpenFile {
                file,
                buffer: Vec::with_capacity(FILE_BUFFER_BYTES),
                last_write: 0,
                length,
            },
        );
        Ok(())
    }

    /// Creates the file of `key` the first time, appends to it after; returns it and the bytes
    /// it holds.
    fn open_file(&mut self, key: FileKey) -> io::Result<(File, u64)> {
        let name = key.name();
        if let Some(created) = self.created.get(&key) {
            let file = self.dir.reopen(&name, created.identity, created.length)?;
            return Ok((file, created.length));
        }
        let kept_old = self
            .dir
            .keep_earlier(&name, &TR_FILE)
            .map_err(io::Error::other)?;
        self.kept_old += usize::from(kept_old.is_some());
        let (file, identity) = self.dir.create(&name)?;
        self.created.insert(
            key,
            Created {
                identity,
                length: 0,
            },
        );
        Ok((file, 0))
    }

    /// How many files this has created, and how many earlier ones it kept as `NAME.old`.
    pub(super) fn created(&self) -> FilesMade {
        FilesMade {
            files: self.created.len(),
            kept_old: self.kept_old,
        }
    }

    /// Flushes and closes the `count` open files written least recently.
    fn close_least_recent(&mut self, count: usize) -> io::Result<()> {
        let mut by_age: Vec<(u64, FileKey)> =
            self.open.iter().map(|(k, f)| (f.last_write, *k)).collect();
        by_age.sort_unstable_by_key(|&(last_write, _)| last_write);
        for (_, key) in by_age.into_iter().take(count) {
            self.close(key)?;
        }
        Ok(())
    }

    fn close(&mut self, key: FileKey) -> io::Result<()> {
        let mut file = self.open.remove(&key).expect("an open file");
        if let Some(created) = self.created.get_mut(&key) {
            created.length = file.length;
        }
        file.flush()
    }
}

impl Sink for TrFiles {
    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        let key = FileKey::of(record);
        self.clock += 1;
        // One lookup for a file that is open, nearly always the case.
        if let Some(file) = self.open.get_mut(&key) {
            return file.append(&mut self.lines, record, self.clock);
        }
        self.open_new(key)?;
        let file = self.open.get_mut(&key).expect("opened above");
        file.append(&mut self.lines, record, self.clock)
    }

    fn batch_done(&mut self) -> io::Result<()> {
        if self.buffering == Buffering::EachRecord {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.open.values_mut().try_for_each(OpenFile::flush)
    }

    fn state(&self) -> SinkState {
        state(self.dir.path(), self.created.len())
    }

    fn destinations(&self) -> Vec<String> {
        vec![destination(self.dir.path())]
    }

    fn process_exited(&mut self, pid: u32) -> io::Result<()> {
        let pid = pid & tr::PID_MASK;
        let keys: Vec<FileKey> = self.open.keys().filter(|k| k.pid == pid).copied().collect();
        keys.into_iter().try_for_each(|key| self.close(key))
    }

    fn finish(&mut self, _end: &TraceEnd) -> io::Result<Summary> {
        let keys: Vec<FileKey> = self.open.keys().copied().collect();
        keys.into_iter().try_for_each(|key| self.close(key))?;
        Ok(written(self.dir.path(), self.created()).into())
    }
}

/// What `ctl status` says of `created` tr files in `dir`.
pub(super) fn state(dir: &Path, created: usize) -> SinkState {
    SinkState {
        descriptions: vec![format!("tr files in {} ({created} so far)", dir.display())],
        status: None,
    }
}

/// Where tr files in `dir` go, for the line that says a trace has begun.
pub(super) fn destination(dir: &Path) -> String {
    format!("tr files in {}", dir.display())
}

/// Tr files created, and earlier ones kept as `NAME.old`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilesMade {
    pub files: usize,
    pub kept_old: usize,
}

impl std::ops::Add for FilesMade {
    type Output = FilesMade;
    fn add(self, other: FilesMade) -> FilesMade {
        FilesMade {
            files: self.files + other.files,
            kept_old: self.kept_old + other.kept_old,
        }
    }
}

/// The summary line's words for the tr files `created` in `dir`.
pub(super) fn written(dir: &Path, created: FilesMade) -> Written {
    Written::TrFiles {
        created,
        dir: dir.to_owned(),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use tracer_common::Which;

    use super::*;

    /// The summary's words for `files` new tr files in `dir`.
    pub(in crate::sinks) fn files_in(dir: &Path, files: usize) -> Written {
        written(dir, FilesMade { files, kept_old: 0 })
    }

    /// A mutex_unlock record of thread `lwpid` of `pid`, `a1` telling it from others.
    pub(in crate::sinks) fn record(pid: u32, lwpid: u32, a1: i64) -> TraceRecord {
        TraceRecord {
            sec: 1_700_000_000,
            nsec: 42,
            lwpid,
            pid,
            tid: 139_800_000_000_000,
            event1: 2,
            event2: 4,
            which: Which::Whole,
            a: [a1, 0, 1, 0, 0],
            caller: 0,
            stack: 0,
        }
    }

    #[test]
    fn threads_sharing_low_lwpid_bits_share_a_file_without_losing_records() {
        let dir = std::env::temp_dir().join(format!("thrtrace-tr-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut files = TrFiles::new(OutputDir::open(&dir).unwrap(), Buffering::Buffered, 4);
        files.record(&record(100, 0x1005, 1)).unwrap();
        files.record(&record(100, 0x2005, 2)).unwrap();
        files.process_exited(100).unwrap();
        files.record(&record(100, 0x3005, 3)).unwrap();
        let summary = files.finish(&TraceEnd::default()).unwrap();
        assert_eq!(summary.0, [files_in(&dir, 1)]);
        let text = std::fs::read_to_string(dir.join("tr.0000064.005")).unwrap();
        let lwpids: Vec<&str> = text.lines().map(|l| l.split(':').nth(2).unwrap()).collect();
        assert_eq!(lwpids, ["4101", "8197", "12293"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_earlier_tr_file_is_kept_as_old_and_any_other_file_is_left_and_refused() {
        let dir = std::env::temp_dir().join(format!("thrtrace-tr-old-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let earlier = "1700000000:000000042:101:100:139800000000000:2:4:0:7:0:1:0:0\n";
        assert!(parse_line(earlier.trim_end()).is_ok(), "the test's tr line");
        std::fs::write(dir.join(file_name(100, 101)), earlier).unwrap();
        std::fs::write(dir.join(file_name(100, 102)), "").unwrap();
        std::fs::write(dir.join(file_name(100, 103)), "notes\n").unwrap();
        let mut files = TrFiles::new(OutputDir::open(&dir).unwrap(), Buffering::Buffered, 4);
        files.record(&record(100, 101, 1)).unwrap();
        files.record(&record(100, 102, 2)).unwrap();
        let refused = files.record(&record(100, 103, 3)).unwrap_err().to_string();
        assert!(refused.contains("exists and is not a tr file"), "{refused}");
        let summary = files.finish(&TraceEnd::default()).unwrap();
        assert_eq!(
            summary.to_string(),
            format!(
                "2 files in {} (2 earlier tr files of their names kept as NAME.old)",
                dir.display()
            )
        );
        let read = |name: String| std::fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(read(format!("{}.old", file_name(100, 101))), earlier);
        assert_eq!(read(format!("{}.old", file_name(100, 102))), "");
        assert_eq!(read(file_name(100, 103)), "notes\n");
        assert_eq!(
            parse_line(read(file_name(100, 101)).trim_end()).unwrap().a[0],
            1
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn more_threads_than_open_files_keep_every_record_in_order() {
        let dir = std::env::temp_dir().join(format!("thrtrace-tr-lru-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut files = TrFiles::new(OutputDir::open(&dir).unwrap(), Buffering::Buffered, 3);
        // 10 threads written round-robin, 5 rounds: every write past the third file reopens one.
        for round in 0..5 {
            for lwpid in 200..210 {
                files.record(&record(100, lwpid, round)).unwrap();
                assert!(files.open.len() <= 3);
            }
        }
        let summary = files.finish(&TraceEnd::default()).unwrap();
        assert_eq!(summary.0, [files_in(&dir, 10)]);
        for lwpid in 200..210 {
            let text = std::fs::read_to_string(dir.join(file_name(100, lwpid))).unwrap();
            let rounds: Vec<&str> = text.lines().map(|l| l.split(':').nth(8).unwrap()).collect();
            assert_eq!(rounds, ["0", "1", "2", "3", "4"], "thread {lwpid}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
