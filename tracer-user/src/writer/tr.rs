//! The UnixWare `tr.xxxxxxx.yyy` files: one per thread, one record a line (event map, "Record
//! line" and "File names and buffering").
//!
//! `xxxxxxx` is the low 28 bits of the pid, `yyy` the low 12 bits of the lwpid, so two threads of
//! a process whose lwpids agree in the low 12 bits share a file; every line still carries its
//! full lwpid, and the lines of one file are in the order the records were drained.

use std::{
    collections::{HashMap, HashSet},
    fs::{File, OpenOptions},
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
};

use super::{RecordWriter, WriterSummary};
use crate::decode::TraceRecord;

/// The buffer of each file in buffered mode (`THR_TRACE_BUF` unset).
const FILE_BUFFER_BYTES: usize = 64 * 1024;

/// Per-thread trace files in one directory.
pub struct TrFiles {
    dir: PathBuf,
    unbuffered: bool,
    open: HashMap<FileKey, BufWriter<File>>,
    /// Files created in this run: truncated on creation, appended to if reopened.
    created: HashSet<FileKey>,
    records: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FileKey {
    pid: u32,
    lwpid: u32,
}

impl FileKey {
    fn of(record: &TraceRecord) -> Self {
        FileKey {
            pid: record.pid & 0x0fff_ffff,
            lwpid: record.lwpid & 0xfff,
        }
    }
}

/// The file name for a thread: `tr.` + 7 hex digits of the pid + `.` + 3 of the lwpid.
pub fn file_name(pid: u32, lwpid: u32) -> String {
    format!("tr.{:07x}.{:03x}", pid & 0x0fff_ffff, lwpid & 0xfff)
}

/// One record as a line, without the newline.
pub fn format_line(r: &TraceRecord) -> String {
    format!(
        "{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}",
        r.sec,
        r.nsec,
        r.lwpid,
        r.pid,
        r.tid,
        r.event1,
        r.event2,
        r.which,
        r.a[0],
        r.a[1],
        r.a[2],
        r.a[3],
        r.a[4]
    )
}

impl TrFiles {
    pub fn new(dir: &Path, unbuffered: bool) -> Self {
        TrFiles {
            dir: dir.to_owned(),
            unbuffered,
            open: HashMap::new(),
            created: HashSet::new(),
            records: 0,
        }
    }

    fn file(&mut self, key: FileKey) -> io::Result<&mut BufWriter<File>> {
        if !self.open.contains_key(&key) {
            let path = self.dir.join(file_name(key.pid, key.lwpid));
            let first_time = self.created.insert(key);
            let file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(first_time)
                .append(!first_time)
                .open(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            self.open
                .insert(key, BufWriter::with_capacity(FILE_BUFFER_BYTES, file));
        }
        Ok(self.open.get_mut(&key).expect("inserted above"))
    }
}

impl RecordWriter for TrFiles {
    fn write(&mut self, record: &TraceRecord) -> io::Result<()> {
        let file = self.file(FileKey::of(record))?;
        writeln!(file, "{}", format_line(record))?;
        self.records += 1;
        Ok(())
    }

    fn batch_done(&mut self) -> io::Result<()> {
        if self.unbuffered {
            self.open.values_mut().try_for_each(BufWriter::flush)?;
        }
        Ok(())
    }

    fn process_exited(&mut self, pid: u32) -> io::Result<()> {
        let pid = pid & 0x0fff_ffff;
        let keys: Vec<FileKey> = self.open.keys().filter(|k| k.pid == pid).copied().collect();
        for key in keys {
            let mut file = self.open.remove(&key).expect("key listed above");
            file.flush()?;
        }
        Ok(())
    }

    fn open_processes(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.open.keys().map(|k| k.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    fn finish(&mut self) -> io::Result<WriterSummary> {
        for (_, mut file) in self.open.drain() {
            file.flush()?;
        }
        Ok(WriterSummary {
            records: self.records,
            files: self.created.len() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pid: u32, lwpid: u32, a1: i64) -> TraceRecord {
        TraceRecord {
            sec: 1_700_000_000,
            nsec: 42,
            lwpid,
            pid,
            tid: 139_800_000_000_000,
            event1: 2,
            event2: 4,
            which: 0,
            a: [a1, 0, 1, 0, 0],
            caller: 0,
        }
    }

    #[test]
    fn names_files_by_low_pid_and_lwpid_digits() {
        assert_eq!(file_name(0x1234, 0x1235), "tr.0001234.235");
        assert_eq!(file_name(0x3fff_ffff, 7), "tr.fffffff.007");
    }

    #[test]
    fn formats_colon_separated_decimal_fields() {
        assert_eq!(
            format_line(&record(100, 101, -3)),
            "1700000000:42:101:100:139800000000000:2:4:0:-3:0:1:0:0"
        );
    }

    #[test]
    fn threads_sharing_low_lwpid_bits_share_a_file_without_losing_records() {
        let dir = std::env::temp_dir().join(format!("thrtrace-tr-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut files = TrFiles::new(&dir, false);
        files.write(&record(100, 0x1005, 1)).unwrap();
        files.write(&record(100, 0x2005, 2)).unwrap();
        files.process_exited(100).unwrap();
        files.write(&record(100, 0x3005, 3)).unwrap();
        let summary = files.finish().unwrap();
        assert_eq!(
            summary,
            WriterSummary {
                records: 3,
                files: 1
            }
        );
        let text = std::fs::read_to_string(dir.join("tr.0000064.005")).unwrap();
        let lwpids: Vec<&str> = text.lines().map(|l| l.split(':').nth(2).unwrap()).collect();
        assert_eq!(lwpids, ["4101", "8197", "12293"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
