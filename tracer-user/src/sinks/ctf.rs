//! The sink that writes a CTF 1.8 trace (the Common Trace Format of LTTng, which babeltrace2
//! and Trace Compass read): a `metadata` file in TSDL, and one stream file per process, plus
//! `trace` for the events of no process (start, stop, overflows).
//!
//! Everything is byte-aligned and little-endian, so that an event is its fields one after the
//! other. Events lost where the log says so (an overflow event) are counted in the
//! `events_discarded` field of the packets of the `trace` stream: a packet ends before each
//! overflow, and the next one's count includes it, which readers report as discarded events.

use std::{
    collections::HashMap,
    fmt::Write as _,
    fs::File,
    io::{self, Write},
    path::{Path, PathBuf},
};

use tracer_model::{
    TraceRecord,
    event::{EventType, FieldType, SystemEvent, SystemKind, THREAD_PAYLOAD, Value},
    field_names::{CALLER, LWPID, PID, TID},
    log::TypeIds,
};

use super::{
    Sink, SinkState, Summary, TraceEnd, Written,
    output_dir::{OutputDir, OutputDirError, head},
};
use crate::error::UsageError;

/// The trace's files: its metadata, the stream of the events of no process, and each
/// process's stream (`process-PID`, `process-PID.N` for a pid used again).
const METADATA_FILE: &str = "metadata";
const TRACE_STREAM_FILE: &str = "trace";
const PROCESS_STREAM: &str = "process-";

/// Why a directory cannot take a CTF trace.
#[derive(Debug, thiserror::Error)]
pub enum CtfDirError {
    #[error(
        "{} holds files that are not a CTF trace: they are left as they are (name a new or \
         empty directory, or move them away)",
        .0.display()
    )]
    Foreign(PathBuf),
    #[error(
        "{} holds a CTF trace, kept as {} when a new one is written, but {} is not one: it is \
         left as it is (move it away, or name another directory)",
        .dir.display(), .old.display(), .old.display()
    )]
    OldIsForeign { dir: PathBuf, old: PathBuf },
    #[error(transparent)]
    Dir(#[from] OutputDirError),
    #[error("cannot read the directory {}", .dir.display())]
    Read {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot keep the CTF trace in {} as {}", .dir.display(), .old.display())]
    Keep {
        dir: PathBuf,
        old: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl CtfDirError {
    /// As one line of a command's usage error, `option` the directory's (`--ctf`), which an
    /// error of opening it names.
    pub fn usage(&self, option: &str) -> UsageError {
        match self {
            CtfDirError::Dir(error) => error.usage(option),
            error => UsageError(error.to_string()),
        }
    }
}

/// The directory a CTF trace is written in, `path`, made if missing; a CTF trace already
/// there is first moved to `PATH.old` (as `perf` keeps `perf.data.old`; an earlier `.old`
/// trace is removed), so that no stream of it is read as the new trace's. A directory that
/// holds anything else is refused. Returns the directory and where the earlier trace went.
pub fn ctf_dir(path: &Path) -> Result<(OutputDir, Option<PathBuf>), CtfDirError> {
    let read = |dir: &Path| {
        let dir = dir.to_owned();
        move |source| CtfDirError::Read { dir, source }
    };
    let dir = OutputDir::open_or_make(path)?;
    match contents(&dir).map_err(read(path))? {
        Contents::Empty => return Ok((dir, None)),
        Contents::Other => return Err(CtfDirError::Foreign(path.to_owned())),
        Contents::Trace(_) => {}
    }
    let mut old = path.as_os_str().to_owned();
    old.push(".old");
    let old = PathBuf::from(old);
    let keep = |source: io::Error| CtfDirError::Keep {
        dir: path.to_owned(),
        old: old.clone(),
        source,
    };
    if std::fs::symlink_metadata(&old).is_ok() {
        let earlier = OutputDir::open_no_follow(&old).map_err(keep)?;
        let Contents::Trace(files) = contents(&earlier).map_err(read(&old))? else {
            return Err(CtfDirError::OldIsForeign {
                dir: path.to_owned(),
                old,
            });
        };
        files
            .iter()
            .try_for_each(|name| earlier.remove(name))
            .map_err(keep)?;
        std::fs::remove_dir(&old).map_err(keep)?;
    }
    std::fs::rename(path, &old).map_err(keep)?;
    Ok((OutputDir::open_or_make(path)?, Some(old)))
}

/// What a directory given for a CTF trace holds.
enum Contents {
    Empty,
    /// A CTF trace of ours and nothing else: these regular files, named as the trace's files
    /// are, with a `metadata` that begins as ours does.
    Trace(Vec<String>),
    Other,
}

fn contents(dir: &OutputDir) -> io::Result<Contents> {
    let names = dir.names()?;
    if names.is_empty() {
        return Ok(Contents::Empty);
    }
    let ours = |name: &str| {
        name == METADATA_FILE || name == TRACE_STREAM_FILE || name.starts_with(PROCESS_STREAM)
    };
    for name in &names {
        if !ours(name) || dir.file_type(name)? != Some(rustix::fs::FileType::RegularFile) {
            return Ok(Contents::Other);
        }
    }
    let magic = metadata_magic();
    let trace = names.iter().any(|name| name == METADATA_FILE)
        && head(&dir.open_to_read(METADATA_FILE)?, magic.len())? == magic;
    Ok(if trace {
        Contents::Trace(names)
    } else {
        Contents::Other
    })
}

/// How our metadata begins: TSDL's magic comment, its preamble's first line.
fn metadata_magic() -> &'static [u8] {
    METADATA_PREAMBLE
        .lines()
        .next()
        .unwrap_or_default()
        .as_bytes()
}

/// CTF's packet magic.
const PACKET_MAGIC: u32 = 0xC1FC_1FC1;
/// Packets are cut at about this many bytes of events.
const PACKET_BYTES: usize = 64 << 10;
/// Packet header and context: magic, stream id, then the context fields of `METADATA_STREAM`.
const PACKET_PREAMBLE: usize = 4 + 4 + 8 * 6 + 4;

/// The stream of the events that belong to no process.
const TRACE_STREAM: u32 = 0;

/// One stream file and the packet being filled.
struct Stream {
    file: Option<File>,
    name: String,
    events: Vec<u8>,
    first_ns: Option<u64>,
    last_ns: u64,
    packets: u64,
    discarded: u64,
}

/// A CTF trace in one directory.
pub struct CtfTrace {
    dir: OutputDir,
    metadata: String,
    /// Event type ids, as the log gave them.
    ids: TypeIds,
    streams: HashMap<u32, Stream>,
    /// Per pid, how many of its streams have ended: a pid used again (a process that exited
    /// and a new one given its number) gets a stream of its own, `process-PID.N`.
    ended: HashMap<u32, u32>,
    events: u64,
    /// Events that came before the previous one of their stream in time.
    restamped: u64,
    /// Where the trace that was in its directory went ([`ctf_dir`]).
    earlier: Option<PathBuf>,
}

impl CtfTrace {
    /// A trace named `trace_name` of events of `types`, in `dir`: a live trace's, or a log's
    /// (its list).
    pub fn new(dir: OutputDir, trace_name: &str, types: &[EventType]) -> Self {
        CtfTrace {
            dir,
            metadata: metadata(trace_name, types),
            ids: TypeIds::new(types),
            streams: HashMap::new(),
            ended: HashMap::new(),
            events: 0,
            restamped: 0,
            earlier: None,
        }
    }

    /// Says in its summary that the trace that was in its directory is now at `earlier`.
    pub fn kept_earlier(mut self, earlier: Option<PathBuf>) -> Self {
        self.earlier = earlier;
        self
    }
}

impl Stream {
    /// The stream of `pid` among `streams`, made on its first event, named after the streams
    /// of the pid that have `ended` before it.
    fn of<'a>(
        streams: &'a mut HashMap<u32, Stream>,
        ended: &HashMap<u32, u32>,
        pid: u32,
    ) -> &'a mut Stream {
        let ended = ended.get(&pid).copied().unwrap_or(0);
        streams.entry(pid).or_insert_with(|| Stream {
            file: None,
            name: match (pid, ended) {
                (TRACE_STREAM, _) => TRACE_STREAM_FILE.to_owned(),
                (pid, 0) => format!("{PROCESS_STREAM}{pid}"),
                (pid, n) => format!("{PROCESS_STREAM}{pid}.{n}"),
            },
            events: Vec::new(),
            first_ns: None,
            last_ns: 0,
            packets: 0,
            discarded: 0,
        })
    }
}

impl CtfTrace {
    /// Appends one event (its header, then `fields`) to the stream of `pid`.
    fn push(&mut self, pid: u32, id: u16, time_ns: i64, fields: &[u8]) -> io::Result<()> {
        self.events += 1;
        let stream = Stream::of(&mut self.streams, &self.ended, pid);
        // A stream's clock never goes back in CTF. A log can hold a record that reached the
        // tracer too late to be put in its place (an overloaded consumer): it takes the time
        // of the event before it.
        let time = time_ns.max(0) as u64;
        if time < stream.last_ns {
            self.restamped += 1;
        }
        let time = time.max(stream.last_ns);
        stream.first_ns.get_or_insert(time);
        stream.last_ns = time;
        stream.events.extend_from_slice(&id.to_le_bytes());
        stream.events.extend_from_slice(&time.to_le_bytes());
        stream.events.extend_from_slice(fields);
        if stream.events.len() >= PACKET_BYTES {
            stream.write_packet(&self.dir, pid)?;
        }
        Ok(())
    }
}

impl Stream {
    /// Writes the events gathered as one packet (an empty one too: it carries a count).
    fn write_packet(&mut self, dir: &OutputDir, pid: u32) -> io::Result<()> {
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(dir.create(&self.name)?.0),
        };
        let begin = self.first_ns.unwrap_or(self.last_ns);
        let bits = ((PACKET_PREAMBLE + self.events.len()) * 8) as u64;
        let mut packet = Vec::with_capacity(PACKET_PREAMBLE + self.events.len());
        packet.extend_from_slice(&PACKET_MAGIC.to_le_bytes());
        packet.extend_from_slice(&0u32.to_le_bytes());
        for word in [
            begin,
            self.last_ns,
            bits,
            bits,
            self.packets,
            self.discarded,
        ] {
            packet.extend_from_slice(&word.to_le_bytes());
        }
        packet.extend_from_slice(&pid.to_le_bytes());
        packet.extend_from_slice(&self.events);
        file.write_all(&packet)?;
        self.packets += 1;
        self.events.clear();
        self.first_ns = None;
        Ok(())
    }
}

impl Sink for CtfTrace {
    fn begin(&mut self) -> io::Result<()> {
        let (mut file, _) = self.dir.create(METADATA_FILE)?;
        file.write_all(self.metadata.as_bytes())
    }

    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        let Some(id) = self.ids.thread(record.event1, record.event2) else {
            return Ok(());
        };
        // In the order `metadata` declares them.
        let mut fields = Vec::with_capacity(70);
        fields.extend_from_slice(&record.pid.to_le_bytes());
        fields.extend_from_slice(&record.lwpid.to_le_bytes());
        fields.extend_from_slice(&record.tid.to_le_bytes());
        fields.extend_from_slice(&record.caller.to_le_bytes());
        fields.extend_from_slice(&record.which.code().to_le_bytes());
        record
            .a
            .iter()
            .for_each(|a| fields.extend_from_slice(&a.to_le_bytes()));
        fields.extend_from_slice(&record.stack.to_le_bytes());
        self.push(record.pid, id, record.time_ns() as i64, &fields)
    }

    fn system_event(&mut self, event: &SystemEvent) -> io::Result<()> {
        let Some(id) = self.ids.system(event.kind.name()) else {
            return Ok(());
        };
        let mut fields = Vec::new();
        fields.extend_from_slice(&event.pid.to_le_bytes());
        fields.extend_from_slice(&event.lwpid.to_le_bytes());
        fields.push(u8::from(event.truncated));
        for (value, &(_, ty)) in event.kind.values().iter().zip(event.kind.fields()) {
            put_field(value, ty, &mut fields);
        }
        if let SystemKind::Overflow { lost, .. } = event.kind {
            let stream = Stream::of(&mut self.streams, &self.ended, event.pid);
            // The packet that holds the overflow is the first to count what it lost.
            if !stream.events.is_empty() || stream.packets == 0 {
                stream.write_packet(&self.dir, event.pid)?;
            }
            stream.discarded += lost;
        }
        self.push(event.pid, id, event.time_ns, &fields)
    }

    fn wants_system_events(&self) -> bool {
        true
    }

    fn state(&self) -> SinkState {
        SinkState {
            descriptions: vec![format!("CTF trace in {}", self.dir.path().display())],
            status: None,
        }
    }

    fn destinations(&self) -> Vec<String> {
        vec![format!("a CTF trace in {}", self.dir.path().display())]
    }

    fn process_exited(&mut self, pid: u32) -> io::Result<()> {
        if let Some(mut stream) = self.streams.remove(&pid) {
            stream.write_packet(&self.dir, pid)?;
            *self.ended.entry(pid).or_default() += 1;
        }
        Ok(())
    }

    fn finish(&mut self, _end: &TraceEnd) -> io::Result<Summary> {
        for (pid, stream) in &mut self.streams {
            stream.write_packet(&self.dir, *pid)?;
        }
        Ok(Written::Ctf {
            events: self.events,
            dir: self.dir.path().to_owned(),
            restamped: self.restamped,
            earlier: self.earlier.clone(),
        }
        .into())
    }
}

/// A payload value in its CTF type: integers as they are, strings NUL-terminated (their own
/// NULs, which separate a command line's words, become spaces), bytes as a length and bytes.
fn put_field(value: &Value, ty: FieldType, out: &mut Vec<u8>) {
    match (ty, value) {
        (FieldType::U16, _) => out.extend_from_slice(&(value.as_u64() as u16).to_le_bytes()),
        (FieldType::U32, _) => out.extend_from_slice(&(value.as_u64() as u32).to_le_bytes()),
        (FieldType::U64 | FieldType::I64, _) => {
            out.extend_from_slice(&value.as_u64().to_le_bytes());
        }
        (FieldType::Str, _) => {
            let text = value.as_str().trim_end_matches('\0');
            out.extend(text.bytes().map(|b| if b == 0 { b' ' } else { b }));
            out.push(0);
        }
        (FieldType::Bytes, Value::Bytes(bytes)) => {
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        (FieldType::Bytes, _) => out.extend_from_slice(&0u32.to_le_bytes()),
    }
}

/// The TSDL description of the trace. Field names take CTF's leading underscore, which
/// readers strip, so that no name can clash with a TSDL keyword.
fn metadata(trace_name: &str, types: &[EventType]) -> String {
    let mut tsdl = String::from(METADATA_PREAMBLE);
    let _ = writeln!(
        tsdl,
        "env {{\n\ttracer_name = \"thrtrace-bpf\";\n\ttrace_name = \"{}\";\n}};\n",
        quotable(trace_name)
    );
    tsdl.push_str(METADATA_STREAM);
    for event_type in types {
        let mut fields = format!("\t\tuint32_t _{PID};\n\t\tuint32_t _{LWPID};\n");
        if event_type.is_system() {
            fields.push_str("\t\tuint8_t _truncated;\n");
            for field in &event_type.payload {
                declare(&mut fields, &identifier(&field.name), field.ty);
            }
        } else {
            // What `record` writes: this build's thread payload, whatever the log's was.
            let _ = write!(fields, "\t\thex64_t _{TID};\n\t\thex64_t _{CALLER};\n");
            for (name, ty) in THREAD_PAYLOAD {
                declare(&mut fields, name, ty);
            }
        }
        let _ = writeln!(
            tsdl,
            "event {{\n\tname = \"{}\";\n\tid = {};\n\tstream_id = 0;\n\tfields := struct {{\n{fields}\t}};\n}};\n",
            quotable(&event_type.name),
            event_type.id
        );
    }
    tsdl
}

/// Declares the field `name` (an identifier) of type `ty` in a TSDL struct's `fields`.
fn declare(fields: &mut String, name: &str, ty: FieldType) {
    let _ = match ty {
        FieldType::U16 => writeln!(fields, "\t\tuint16_t _{name};"),
        FieldType::U32 => writeln!(fields, "\t\tuint32_t _{name};"),
        FieldType::U64 => writeln!(fields, "\t\tuint64_t _{name};"),
        FieldType::I64 => writeln!(fields, "\t\tint64_t _{name};"),
        FieldType::Str => writeln!(fields, "\t\tstring _{name};"),
        FieldType::Bytes => writeln!(
            fields,
            "\t\tuint32_t _{name}_length;\n\t\thex8_t _{name}[_{name}_length];"
        ),
    };
}

/// A log's text as a TSDL string's contents: a name from another machine's log cannot end the
/// string or the line.
fn quotable(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control() && *c != '"' && *c != '\\')
        .collect()
}

/// A log's field name as a TSDL identifier: letters, digits and underscores only.
fn identifier(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

const METADATA_PREAMBLE: &str = "/* CTF 1.8 */

typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
typealias integer { size = 8; align = 8; signed = false; base = 16; } := hex8_t;
typealias integer { size = 16; align = 8; signed = false; } := uint16_t;
typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
typealias integer { size = 64; align = 8; signed = false; } := uint64_t;
typealias integer { size = 64; align = 8; signed = false; base = 16; } := hex64_t;
typealias integer { size = 64; align = 8; signed = true; } := int64_t;

trace {
\tmajor = 1;
\tminor = 8;
\tbyte_order = le;
\tpacket.header := struct {
\t\tuint32_t magic;
\t\tuint32_t stream_id;
\t};
};

clock {
\tname = realtime;
\tdescription = \"CLOCK_REALTIME, nanoseconds since the epoch\";
\tfreq = 1000000000;
\toffset = 0;
};

typealias integer { size = 64; align = 8; signed = false; map = clock.realtime.value; } := clock_t;

";

const METADATA_STREAM: &str = "stream {
\tid = 0;
\tpacket.context := struct {
\t\tclock_t timestamp_begin;
\t\tclock_t timestamp_end;
\t\tuint64_t content_size;
\t\tuint64_t packet_size;
\t\tuint64_t packet_seq_num;
\t\tuint64_t events_discarded;
\t\tuint32_t pid;
\t};
\tevent.header := struct {
\t\tuint16_t id;
\t\tclock_t timestamp;
\t};
};

";

#[cfg(test)]
mod tests {
    use tracer_model::event::{FieldSpec, event_types};

    use super::*;

    #[test]
    fn an_earlier_ctf_trace_is_kept_as_old_and_any_other_directory_refused() {
        let root = std::env::temp_dir().join(format!("thrtrace-ctf-old-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let dir = root.join("trace");
        let old = root.join("trace.old");
        let write_trace = |dir: &Path, stream: &str| {
            std::fs::write(dir.join("metadata"), "/* CTF 1.8 */\ntrace {};\n").unwrap();
            std::fs::write(dir.join(stream), "packets").unwrap();
        };
        let (_, earlier) = ctf_dir(&dir).unwrap();
        assert_eq!(earlier, None, "made new");
        write_trace(&dir, "process-1");
        let (made, earlier) = ctf_dir(&dir).unwrap();
        assert_eq!(earlier.as_deref(), Some(old.as_path()));
        assert!(made.names().unwrap().is_empty());
        assert!(old.join("process-1").exists());
        // Again: the newer trace becomes the .old one, the older is gone.
        write_trace(&dir, "process-2");
        ctf_dir(&dir).unwrap();
        assert!(old.join("process-2").exists() && !old.join("process-1").exists());

        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let refused = ctf_dir(&dir).unwrap_err().to_string();
        assert!(
            refused.contains("holds files that are not a CTF trace"),
            "{refused}"
        );
        assert!(dir.join("notes.txt").exists());
        std::fs::remove_file(dir.join("notes.txt")).unwrap();
        write_trace(&dir, "process-3");
        std::fs::write(old.join("notes.txt"), "mine").unwrap();
        let refused = ctf_dir(&dir).unwrap_err().to_string();
        assert!(
            refused.contains("is not one: it is left as it is"),
            "{refused}"
        );
        assert!(old.join("notes.txt").exists() && dir.join("process-3").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn names_from_a_hostile_log_stay_inside_their_strings_and_identifiers() {
        let mut types = event_types();
        types[0].name = "evil\";\n}; event { name = \"x".to_owned();
        let last = types.last_mut().unwrap();
        last.payload.push(FieldSpec {
            name: "a b;}".to_owned(),
            ty: FieldType::U32,
        });
        let tsdl = metadata("trace\"\n", &types);
        assert!(
            tsdl.contains("\tname = \"evil;}; event { name = x\";\n"),
            "{tsdl}"
        );
        assert!(tsdl.contains("\t\tuint32_t _a_b__;\n"), "{tsdl}");
        assert!(tsdl.contains("\ttrace_name = \"trace\";\n"), "{tsdl}");
        assert_eq!(tsdl.matches("\nevent {").count(), types.len());
    }

    #[test]
    fn a_pid_used_again_gets_a_stream_of_its_own() {
        let dir = std::env::temp_dir().join(format!("thrtrace-ctf-pids-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let mut trace = CtfTrace::new(OutputDir::open(&dir).unwrap(), "t", &event_types());
        trace.begin().unwrap();
        for (n, pid) in [(1, 7), (2, 7), (3, 7)] {
            trace
                .record(&super::super::tr::tests::record(pid, 70, n))
                .unwrap();
            trace.process_exited(pid).unwrap();
        }
        trace.finish(&TraceEnd::default()).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["metadata", "process-7", "process-7.1", "process-7.2"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
