//! `report --format pprof -o FILE`: the locks' contended waits as a pprof profile (gzipped
//! `profile.proto`), as Go's contention profiles are: values `contentions/count` and
//! `delay/nanoseconds`, one sample per lock, call stack and thread (and per caller for waits
//! shorter than `--min-wait`, whose stacks were not recorded), labelled with the lock, its
//! kind, its process and the thread ([`Labels`]). The waiters view holds the stacks that
//! waited (Go's block profile); the releasers view, the stacks of the releases that ended the
//! waits (Go's mutex profile). The profiles pushed to Pyroscope are encoded here too, with
//! bounded labels.

mod proto;

use std::{
    collections::HashMap,
    io::{self, Write as _},
    path::PathBuf,
};

use flate2::{Compression, write::GzEncoder};
use prost::Message as _;
use tracer_model::{
    analysis::{Analysis, LockStats, ProcessCgroup},
    stack::LeftOut,
};

use super::{
    OutputFile, ReadError,
    samples::{LockSamples, View, left_out_note},
};
use crate::{
    sinks::output_dir::{FileKind, head},
    symbolize::{Location, Symbols},
};

/// What the profile says it is, in its comments.
fn comment(view: View) -> &'static str {
    match view {
        View::Waiters => {
            "thrtrace-bpf waiters view: the call stacks that waited for each lock, \
             as Go's block profile"
        }
        View::Releasers => {
            "thrtrace-bpf releasers view: the call stacks of the releases that ended \
             each lock's waits, as Go's mutex profile"
        }
    }
}

/// The time a profile covers: when it starts (CLOCK_REALTIME ns) and how long.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub start_ns: i64,
    pub duration_ns: i64,
}

impl Span {
    /// From the first record `analysis` saw to its last.
    pub fn of(analysis: &Analysis) -> Span {
        Span {
            start_ns: analysis.first_ns.unwrap_or(0),
            duration_ns: analysis
                .first_ns
                .map_or(0, |first| (analysis.last_ns - first).max(0)),
        }
    }
}

/// The names of the threads (comm) whose waits some locks hold and of their processes (the
/// executable's file name): a profile's labels.
#[derive(Debug, Default)]
pub struct Names {
    threads: HashMap<u32, String>,
    processes: HashMap<u32, String>,
    cgroups: HashMap<u32, ProcessCgroup>,
}

impl Names {
    /// As `analysis` knows them, for `locks`.
    pub fn of<'a>(analysis: &Analysis, locks: impl IntoIterator<Item = &'a LockStats>) -> Names {
        let mut names = Names::default();
        for lock in locks {
            if let Some(name) = analysis.process_name(lock.pid) {
                names.processes.insert(lock.pid, name.to_owned());
            }
            if let Some(cgroup) = analysis.cgroup(lock.pid) {
                names.cgroups.insert(lock.pid, cgroup.clone());
            }
            let threads = lock
                .waiting_stacks
                .values()
                .chain(lock.releasing_stacks.values())
                .chain(lock.short_waits_by_caller.values())
                .chain(lock.left_out_waiting.values())
                .chain(lock.left_out_releasing.values())
                .flat_map(|stats| stats.threads.keys());
            for &lwpid in threads {
                if let Some(name) = analysis.thread_name(lwpid) {
                    names.threads.insert(lwpid, name.to_owned());
                }
            }
        }
        names
    }

    /// The name of process `pid`, if known.
    pub fn process(&self, pid: u32) -> Option<&str> {
        self.processes.get(&pid).map(String::as_str)
    }

    /// The name of thread `lwpid`, if known.
    pub fn thread(&self, lwpid: u32) -> Option<&str> {
        self.threads.get(&lwpid).map(String::as_str)
    }

    /// The cgroup of process `pid`, if known.
    pub fn cgroup(&self, pid: u32) -> Option<&ProcessCgroup> {
        self.cgroups.get(&pid)
    }
}

/// Which labels a profile's samples carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Labels {
    /// The lock, its kind, the process and thread by id and name: a file read on its own.
    Detailed,
    /// Only labels with a handful of values, the lock's kind and the thread's name: for a
    /// backend that makes a series of every label value, as Pyroscope does, so that a process
    /// waiting on thousands of locks does not make thousands of series. Each lock is then a
    /// frame at the root of its stacks (`lock NAME (KIND)`), so that its waits stay apart.
    Bounded,
}

/// The profile of `samples` (gzipped profile.proto) over `span`: a sample per lock, stack and
/// thread, labelled as `labels` says with the `names` of the threads and processes; its
/// comments say how many waits' stacks were `left_out`.
pub fn encode(
    samples: &[LockSamples<'_>],
    names: &Names,
    symbols: &Symbols,
    view: View,
    span: Span,
    left_out: &LeftOut,
    labels: Labels,
) -> io::Result<Vec<u8>> {
    let mut builder = Builder::default();
    for lock in samples {
        let kind = lock.lock.kind.name();
        let mut lock_labels = vec![builder.string_label("lock_kind", kind)];
        let root = match labels {
            Labels::Detailed => {
                lock_labels.push(builder.string_label("lock", &lock.name));
                lock_labels.push(builder.number_label("pid", lock.lock.pid));
                if let Some(process) = names.processes.get(&lock.lock.pid) {
                    lock_labels.push(builder.string_label("process", process));
                }
                None
            }
            Labels::Bounded => {
                Some(builder.named_location(&format!("lock {} ({kind})", lock.name)))
            }
        };
        for sample in &lock.stacks {
            let unrecorded = sample
                .unrecorded
                .as_ref()
                .map(|name| builder.named_location(name));
            // The first frame of a recorded stack is the probed instruction; a caller is a
            // return address.
            let location_id: Vec<u64> = unrecorded
                .into_iter()
                .chain(sample.frames.iter().enumerate().map(|(n, frame)| {
                    let first = n == 0 && sample.unrecorded.is_none();
                    builder.location(sample.pid, first, frame, symbols)
                }))
                .chain(root)
                .collect();
            for &(lwpid, waits) in &sample.threads {
                let mut label = lock_labels.clone();
                if labels == Labels::Detailed {
                    label.push(builder.number_label("thread", lwpid));
                }
                if let Some(name) = names.threads.get(&lwpid) {
                    label.push(builder.string_label("thread_name", name));
                }
                builder.profile.sample.push(proto::Sample {
                    location_id: location_id.clone(),
                    value: vec![waits.count as i64, waits.wait_total_ns as i64],
                    label,
                });
            }
        }
    }
    let profile = builder.finish(span, view, left_out_note(samples, view, left_out));
    let mut gzip = GzEncoder::new(Vec::new(), Compression::default());
    gzip.write_all(&profile.encode_to_vec())?;
    gzip.finish()
}

/// A profile's kind: gzip's magic, as `go tool pprof` writes its own too.
pub static PROFILE: FileKind = FileKind {
    name: "pprof profile",
    is_one: |file| Ok(head(file, 2)? == [0x1f, 0x8b]),
};

/// Writes the profile of `samples`, of what `analysis` saw, to `file`; returns where it is.
pub fn write(
    analysis: &Analysis,
    samples: &[LockSamples<'_>],
    symbols: &Symbols,
    view: View,
    file: OutputFile,
) -> Result<PathBuf, ReadError> {
    let names = Names::of(analysis, samples.iter().map(|lock| lock.lock));
    let span = Span::of(analysis);
    let left_out = analysis.left_out();
    let profile = encode(
        samples,
        &names,
        symbols,
        view,
        span,
        &left_out,
        Labels::Detailed,
    )
    .map_err(ReadError::Compress)?;
    file.write(&profile)
}

/// A profile being built: its tables, each entry once, by what it is.
#[derive(Default)]
struct Builder {
    profile: proto::Profile,
    strings: HashMap<String, i64>,
    /// By process and start address.
    mappings: HashMap<(u32, u64), u64>,
    /// By process, whether it is a stack's first frame (the probed instruction rather than a
    /// return address), and address.
    locations: HashMap<(u32, bool, u64), u64>,
    /// By name and file.
    functions: HashMap<(String, Option<String>), u64>,
    /// Locations that are a name alone (a lock's root frame), by the name.
    named: HashMap<String, u64>,
}

impl Builder {
    /// The index of `text` in the string table.
    fn string(&mut self, text: &str) -> i64 {
        if self.profile.string_table.is_empty() {
            // pprof's rule: the table starts with the empty string.
            self.profile.string_table.push(String::new());
            self.strings.insert(String::new(), 0);
        }
        if let Some(&index) = self.strings.get(text) {
            return index;
        }
        let index = self.profile.string_table.len() as i64;
        self.profile.string_table.push(text.to_owned());
        self.strings.insert(text.to_owned(), index);
        index
    }

    fn string_label(&mut self, key: &str, value: &str) -> proto::Label {
        proto::Label {
            key: self.string(key),
            str: self.string(value),
            ..proto::Label::default()
        }
    }

    fn number_label(&mut self, key: &str, value: u32) -> proto::Label {
        proto::Label {
            key: self.string(key),
            num: i64::from(value),
            ..proto::Label::default()
        }
    }

    fn value_type(&mut self, kind: &str, unit: &str) -> proto::ValueType {
        proto::ValueType {
            r#type: self.string(kind),
            unit: self.string(unit),
        }
    }

    /// The id of the location of `frame` of process `pid`, with its mapping and functions.
    fn location(&mut self, pid: u32, first: bool, frame: &Location, symbols: &Symbols) -> u64 {
        let key = (pid, first, frame.address);
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        let mapping_id = self.mapping(pid, frame, symbols);
        let mut line = Vec::new();
        if let Some(function) = &frame.function {
            // pprof's order: the innermost inlined function first, the one they are in last.
            for inlined in frame.inlined.iter().rev() {
                line.push(proto::Line {
                    function_id: self.function(&inlined.function, inlined.file.as_ref()),
                    line: inlined.line.map_or(0, i64::from),
                });
            }
            line.push(proto::Line {
                function_id: self.function(function, frame.file.as_ref()),
                line: frame.line.map_or(0, i64::from),
            });
        }
        let id = self.profile.location.len() as u64 + 1;
        self.profile.location.push(proto::Location {
            id,
            mapping_id,
            address: frame.address,
            line,
        });
        self.locations.insert(key, id);
        id
    }

    /// The id of a location in no mapping, at no address, that is the function `name` alone.
    fn named_location(&mut self, name: &str) -> u64 {
        if let Some(&id) = self.named.get(name) {
            return id;
        }
        let line = vec![proto::Line {
            function_id: self.function(name, None),
            line: 0,
        }];
        let id = self.profile.location.len() as u64 + 1;
        self.profile.location.push(proto::Location {
            id,
            mapping_id: 0,
            address: 0,
            line,
        });
        self.named.insert(name.to_owned(), id);
        id
    }

    /// The id of the mapping `frame` is in (0: in none recorded); what it says of the code it
    /// holds grows with each frame in it that was named.
    fn mapping(&mut self, pid: u32, frame: &Location, symbols: &Symbols) -> u64 {
        let Some(mapping) = symbols.mapping_of(pid, frame.address) else {
            return 0;
        };
        let id = if let Some(&id) = self.mappings.get(&(pid, mapping.start)) {
            id
        } else {
            let id = self.profile.mapping.len() as u64 + 1;
            let build_id = frame.build_id.clone().unwrap_or_default();
            let entry = proto::Mapping {
                id,
                memory_start: mapping.start,
                memory_limit: mapping.end,
                file_offset: mapping.file_offset,
                filename: self.string(&mapping.path.to_string_lossy()),
                build_id: self.string(&build_id),
                ..proto::Mapping::default()
            };
            self.profile.mapping.push(entry);
            self.mappings.insert((pid, mapping.start), id);
            id
        };
        let entry = &mut self.profile.mapping[id as usize - 1];
        entry.has_functions |= frame.function.is_some();
        entry.has_filenames |= frame.file.is_some();
        entry.has_line_numbers |= frame.line.is_some();
        entry.has_inline_frames |= !frame.inlined.is_empty();
        id
    }

    /// The id of the function `name` in `file`.
    fn function(&mut self, name: &str, file: Option<&String>) -> u64 {
        let key = (name.to_owned(), file.cloned());
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.profile.function.len() as u64 + 1;
        let name_index = self.string(name);
        let filename = file.map_or(0, |file| self.string(file));
        self.profile.function.push(proto::Function {
            id,
            name: name_index,
            system_name: name_index,
            filename,
        });
        self.functions.insert(key, id);
        id
    }

    /// The profile, with its value types, period and comment.
    fn finish(mut self, span: Span, view: View, left_out: Option<String>) -> proto::Profile {
        // pprof takes the first mapping for the program's own (its name heads every view):
        // a program is mapped below the libraries it loads, PIE or not.
        self.profile.mapping.sort_by_key(|m| m.memory_start);
        let new_ids: HashMap<u64, u64> = self
            .profile
            .mapping
            .iter_mut()
            .zip(1..)
            .map(|(mapping, id)| (std::mem::replace(&mut mapping.id, id), id))
            .collect();
        for location in &mut self.profile.location {
            if let Some(&id) = new_ids.get(&location.mapping_id) {
                location.mapping_id = id;
            }
        }
        let sample_type = vec![
            self.value_type("contentions", "count"),
            self.value_type("delay", "nanoseconds"),
        ];
        let period_type = Some(self.value_type("contentions", "count"));
        let comment = std::iter::once(comment(view).to_owned())
            .chain(left_out)
            .map(|text| self.string(&text))
            .collect();
        proto::Profile {
            sample_type,
            period_type,
            period: 1,
            comment,
            time_nanos: span.start_ns,
            duration_nanos: span.duration_ns,
            ..self.profile
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::InlinedFrame;

    /// A frame with `take` inlined into `pop` inlined into `worker`: pprof wants its lines
    /// innermost first, each function once in the table, and the frame once as a location.
    #[test]
    fn inlined_functions_are_lines_innermost_first() {
        let frame = Location {
            address: 0x1234,
            function: Some("worker".to_owned()),
            file: Some("queue.c".to_owned()),
            line: Some(88),
            inlined: vec![
                InlinedFrame {
                    function: "pop".to_owned(),
                    file: Some("queue.h".to_owned()),
                    line: Some(12),
                },
                InlinedFrame {
                    function: "take".to_owned(),
                    file: Some("queue.h".to_owned()),
                    line: Some(40),
                },
            ],
            ..Location::default()
        };
        let mut builder = Builder::default();
        let symbols = Symbols::new();
        let id = builder.location(7, false, &frame, &symbols);
        assert_eq!(builder.location(7, false, &frame, &symbols), id);
        let profile = &builder.profile;
        assert_eq!(profile.location.len(), 1);
        let lines: Vec<(&str, &str, i64)> = profile.location[0]
            .line
            .iter()
            .map(|line| {
                let function = &profile.function[line.function_id as usize - 1];
                (
                    profile.string_table[function.name as usize].as_str(),
                    profile.string_table[function.filename as usize].as_str(),
                    line.line,
                )
            })
            .collect();
        assert_eq!(
            lines,
            [
                ("take", "queue.h", 40),
                ("pop", "queue.h", 12),
                ("worker", "queue.c", 88)
            ]
        );
        // Outside every recorded mapping: no mapping named.
        assert_eq!(profile.location[0].mapping_id, 0);
        assert_eq!(profile.string_table[0], "");
    }
}
