//! `thrtrace-bpf convert LOG --to tr|ctf DIR`: the log's events replayed, in order, into the
//! sink that writes that format, the same sinks a live trace writes to. `--to perfetto FILE`:
//! a timeline drawn by `perfetto`.

use clap::{Args, ValueEnum};
use std::{io, path::PathBuf};

use tracer_model::{
    event::{Event, SystemKind},
    log::{LogError, LogReader},
};

use super::{ReadError, perfetto::PerfettoTimeline};
use crate::sinks::{
    Buffering, Sink, Summary, TraceEnd,
    ctf::{CtfTrace, ctf_dir},
    output_dir::OutputDir,
    tr::TrFiles,
};

/// Why replaying a log into a sink stopped: the log, read again, or the sink.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Sink(#[from] io::Error),
}

/// Converts the log; returns the exit status.
pub fn run(args: &ConvertArgs) -> Result<i32, ReadError> {
    let reader = super::open_log(&args.log)?;
    // Read once to the end first: a damaged log fails before any file is made.
    if let Some(error) = reader.events().find_map(Result::err) {
        return Err(ReadError::log(&args.log)(error));
    }
    let directory = || OutputDir::open_or_make(&args.dir).map_err(|e| e.usage("directory"));
    let mut sink: Box<dyn Sink> = match args.to {
        // Unbuffered or not, the bytes are the same; a few files open at once suffice.
        ConvertFormat::Tr => Box::new(TrFiles::new(directory()?, Buffering::Buffered, 64)),
        ConvertFormat::Ctf => {
            let (dir, earlier) = ctf_dir(&args.dir).map_err(|e| e.usage("directory"))?;
            let trace = CtfTrace::new(
                dir,
                &reader.metadata().attributes.trace_name,
                &reader.metadata().event_types,
            );
            Box::new(trace.kept_earlier(earlier))
        }
        ConvertFormat::Perfetto => Box::new(PerfettoTimeline::new(&args.dir)?),
    };
    let summary = replay(&reader, sink.as_mut()).map_err(|source| ReadError::Convert {
        log: args.log.clone(),
        dir: args.dir.clone(),
        source,
    })?;
    say!("thrtrace-bpf: {summary}");
    Ok(0)
}

/// Hands every event of `reader` to `sink`, as a live trace would; returns its summary.
pub fn replay(reader: &LogReader, sink: &mut dyn Sink) -> Result<Summary, ReplayError> {
    sink.begin()?;
    let system_events = sink.wants_system_events();
    for event in reader.events() {
        match event? {
            Event::Thread(record) => sink.record(&record)?,
            Event::System(event) => {
                if system_events {
                    sink.system_event(&event)?;
                }
                if event.kind == SystemKind::ProcessDetach {
                    sink.process_exited(event.pid)?;
                }
            }
        }
    }
    let end = TraceEnd {
        lost_per_cpu: reader
            .final_status()
            .map(|s| s.lost_per_cpu.clone())
            .unwrap_or_default(),
    };
    Ok(sink.finish(&end)?)
}

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The log
    pub log: PathBuf,
    /// tr: the tr.* files that --dir writes, byte for byte; ctf: a CTF 1.8 trace (babeltrace2,
    /// Trace Compass); perfetto: a timeline for ui.perfetto.dev (Trace Event JSON)
    #[arg(long, value_enum)]
    pub to: ConvertFormat,
    /// tr, ctf: the directory to write into (made if missing); perfetto: the file. Files of
    /// the same names are replaced
    #[arg(value_name = "DIR|FILE")]
    pub dir: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ConvertFormat {
    Tr,
    Ctf,
    Perfetto,
}
