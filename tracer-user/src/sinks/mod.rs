//! Where records go. Each output implements [`Sink`] ([`tr`]: the `tr.*` files); the session
//! hands it every decoded record and tells it when a process has exited and when tracing ends.
//! [`output_dir`] creates every file a sink writes, safely; [`descriptors`] bounds how many
//! stay open.

pub mod descriptors;
pub mod output_dir;
pub mod tr;

use std::io;

use tracer_model::TraceRecord;

/// What a sink produced, for the summary line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SinkSummary {
    pub records: u64,
    pub files: u64,
}

pub trait Sink {
    fn write(&mut self, record: &TraceRecord) -> io::Result<()>;
    /// Called after each batch drained from the kernel; unbuffered sinks push it to the files.
    fn batch_done(&mut self) -> io::Result<()>;
    /// The process has exited and its last records have been written: complete its files.
    fn process_exited(&mut self, pid: u32) -> io::Result<()>;
    /// Tracing has ended: complete every file.
    fn finish(&mut self) -> io::Result<SinkSummary>;
}
