//! Where records are written. Each output format implements [`RecordWriter`]; the session hands
//! it every decoded record and tells it when a process has exited and when tracing ends.

pub mod output_dir;
pub mod tr;

use std::io;

use tracer_model::TraceRecord;

/// What a writer produced, for the summary line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterSummary {
    pub records: u64,
    pub files: u64,
}

pub trait RecordWriter {
    fn write(&mut self, record: &TraceRecord) -> io::Result<()>;
    /// Called after each batch drained from the kernel; unbuffered writers push it to the files.
    fn batch_done(&mut self) -> io::Result<()>;
    /// The process has exited and its last records have been written: complete its files.
    fn process_exited(&mut self, pid: u32) -> io::Result<()>;
    /// Tracing has ended: complete every file.
    fn finish(&mut self) -> io::Result<WriterSummary>;
}
