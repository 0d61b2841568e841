//! `--otlp URL`: an interval's contention as OpenTelemetry profiles (OTLP `v1development`, the
//! signal the OpenTelemetry eBPF profiler sends and the Collector and Pyroscope take), posted
//! as protobuf to `URL/v1development/profiles`. A request holds each process that waited as a
//! resource (`service.name`, `host.name`, `process.pid`, `process.executable.name`,
//! `container.id`), with two profiles: `contentions` (waits) and `delay` (nanoseconds waited),
//! whose samples are the waiters' stacks (and the callers of waits shorter than `--min-wait`),
//! each topped by the lock it waited on, as the Pyroscope push makes them.

mod proto;

use std::collections::HashMap;

use prost::Message as _;

use tracer_model::stack::LeftOut;

use self::proto::{AnyValue, KeyValue, KeyValueAndUnit, Value};
use super::super::{
    pprof::{Names, Span},
    samples::{LockSamples, View, left_out_note},
};
use crate::symbolize::{Location, Symbols, hex_digits};

/// The profile attribute that says how many waits' stacks were left out, as pprof's comments
/// do.
pub const LEFT_OUT_ATTRIBUTE: &str = "thrtrace.stacks_left_out";

/// The path below the endpoint's URL that takes profiles.
pub const PROFILES_PATH: &str = "/v1development/profiles";

/// What tells a sample from another: its stack and its attributes (table indices).
type SampleKey = (i32, Vec<i32>);

/// A process's samples and what its resource says of it.
pub struct ProcessProfile<'a> {
    pub pid: u32,
    pub service: &'a str,
    pub samples: Vec<LockSamples<'a>>,
}

/// The request (protobuf) of `processes`' samples over `span`, made on `host`; each profile
/// says how many of its waits' stacks were `left_out`.
pub fn encode(
    processes: &[ProcessProfile<'_>],
    names: &Names,
    symbols: &Symbols,
    span: Span,
    left_out: &LeftOut,
    host: &str,
) -> Vec<u8> {
    let mut builder = Builder::new();
    let sample_types = [("contentions", "count"), ("delay", "nanoseconds")];
    let value_types: Vec<proto::ValueType> = sample_types
        .iter()
        .map(|(kind, unit)| proto::ValueType {
            type_strindex: builder.string(kind),
            unit_strindex: builder.string(unit),
        })
        .collect();
    let mut resource_profiles = Vec::new();
    for process in processes {
        // Per sample, its stack and attributes, and the two values: threads of one name with
        // one stack are one sample, as the format asks.
        let mut samples: Vec<(SampleKey, [i64; 2])> = Vec::new();
        let mut sample_of: HashMap<SampleKey, usize> = HashMap::new();
        for lock in &process.samples {
            let kind = lock.lock.kind.name();
            let kind_attribute = builder.attribute("thrtrace.lock.kind", kind);
            let root = builder.named_location(&format!("lock {} ({kind})", lock.name));
            for sample in &lock.stacks {
                let unrecorded = sample
                    .unrecorded
                    .as_ref()
                    .map(|name| builder.named_location(name));
                let mut locations: Vec<i32> = unrecorded
                    .into_iter()
                    .chain(
                        sample
                            .frames
                            .iter()
                            .map(|frame| builder.location(process.pid, frame, symbols)),
                    )
                    .collect();
                locations.push(root);
                let stack = builder.stack(locations);
                for (lwpid, waits) in &sample.threads {
                    let mut attributes = vec![kind_attribute];
                    if let Some(name) = names.thread(*lwpid) {
                        attributes.push(builder.attribute("thread.name", name));
                    }
                    let at = *sample_of
                        .entry((stack, attributes))
                        .or_insert_with_key(|key| {
                            samples.push((key.clone(), [0; 2]));
                            samples.len() - 1
                        });
                    samples[at].1[0] += waits.count as i64;
                    samples[at].1[1] += waits.wait_total_ns as i64;
                }
            }
        }
        // As pprof's comments say it.
        let left_out = left_out_note(&process.samples, View::Waiters, left_out)
            .map(|note| builder.attribute(LEFT_OUT_ATTRIBUTE, &note));
        let profiles = value_types
            .iter()
            .enumerate()
            .map(|(n, value_type)| proto::Profile {
                sample_type: Some(value_type.clone()),
                samples: samples
                    .iter()
                    .map(|((stack, attributes), values)| proto::Sample {
                        stack_index: *stack,
                        attribute_indices: attributes.clone(),
                        values: vec![values[n]],
                    })
                    .collect(),
                time_unix_nano: span.start_ns.max(0) as u64,
                duration_nano: span.duration_ns.max(0) as u64,
                profile_id: profile_id(process.pid, span, n),
                attribute_indices: left_out.into_iter().collect(),
            })
            .collect();
        resource_profiles.push(proto::ResourceProfiles {
            resource: Some(resource(process, names, host)),
            scope_profiles: vec![proto::ScopeProfiles {
                scope: Some(proto::InstrumentationScope {
                    name: "thrtrace-bpf".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                }),
                profiles,
            }],
        });
    }
    proto::ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(builder.dictionary),
    }
    .encode_to_vec()
}

/// What a server's answer to a request it took says it rejected of it, if anything:
/// `(profiles, why)` (a message alone is a warning, the request whole).
pub fn rejected(answer: &[u8]) -> Option<(i64, String)> {
    let response = proto::ExportProfilesServiceResponse::decode(answer).ok()?;
    let partial = response.partial_success?;
    (partial.rejected_profiles > 0).then_some((partial.rejected_profiles, partial.error_message))
}

/// Why a server refused a request, from its answer (a `google.rpc.Status`), if it says.
pub fn refusal(answer: &[u8]) -> Option<String> {
    let status = proto::Status::decode(answer).ok()?;
    Some(status.message).filter(|message| !message.is_empty())
}

/// Whether a request answered `status` may be sent again: OTLP/HTTP retries only these.
pub fn retried(status: u16) -> bool {
    matches!(status, 429 | 502 | 503 | 504)
}

/// The resource of `process`: OpenTelemetry's attributes for a process, and its host's and
/// container's.
fn resource(process: &ProcessProfile<'_>, names: &Names, host: &str) -> proto::Resource {
    let text = |key: &str, value: &str| KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(Value::String(value.to_owned())),
        }),
    };
    let mut attributes = vec![
        text("service.name", process.service),
        text("host.name", host),
        KeyValue {
            key: "process.pid".to_owned(),
            value: Some(AnyValue {
                value: Some(Value::Int(i64::from(process.pid))),
            }),
        },
    ];
    if let Some(name) = names.process(process.pid) {
        attributes.push(text("process.executable.name", name));
    }
    if let Some(cgroup) = names.cgroup(process.pid)
        && !cgroup.container.is_empty()
    {
        attributes.push(text("container.id", &cgroup.container));
    }
    proto::Resource { attributes }
}

/// 16 bytes unique to a process's profile of one sample type over an interval.
fn profile_id(pid: u32, span: Span, sample_type: usize) -> Vec<u8> {
    let mut id = Vec::with_capacity(16);
    id.extend_from_slice(&span.start_ns.to_be_bytes());
    id.extend_from_slice(&pid.to_be_bytes());
    id.extend_from_slice(&(sample_type as u32).to_be_bytes());
    id
}

/// The dictionary being built: each entry once, by what it is; every table's first entry is
/// its zero value, as the format asks.
struct Builder {
    dictionary: proto::ProfilesDictionary,
    strings: HashMap<String, i32>,
    attributes: HashMap<(i32, String), i32>,
    /// By process and start address.
    mappings: HashMap<(u32, u64), i32>,
    /// By process and address.
    locations: HashMap<(u32, u64), i32>,
    /// By name and file.
    functions: HashMap<(String, Option<String>), i32>,
    /// Locations that are a name alone (a lock's root frame), by the name.
    named: HashMap<String, i32>,
    stacks: HashMap<Vec<i32>, i32>,
}

impl Builder {
    fn new() -> Builder {
        let mut builder = Builder {
            dictionary: proto::ProfilesDictionary {
                mapping_table: vec![proto::Mapping::default()],
                location_table: vec![proto::Location::default()],
                function_table: vec![proto::Function::default()],
                link_table: vec![proto::Link {
                    trace_id: vec![0; 16],
                    span_id: vec![0; 8],
                }],
                string_table: Vec::new(),
                attribute_table: vec![KeyValueAndUnit::default()],
                stack_table: vec![proto::Stack::default()],
            },
            strings: HashMap::new(),
            attributes: HashMap::new(),
            mappings: HashMap::new(),
            locations: HashMap::new(),
            functions: HashMap::new(),
            named: HashMap::new(),
            stacks: HashMap::new(),
        };
        builder.string("");
        builder
    }

    /// The index of `text` in the string table.
    fn string(&mut self, text: &str) -> i32 {
        if let Some(&index) = self.strings.get(text) {
            return index;
        }
        let index = self.dictionary.string_table.len() as i32;
        self.dictionary.string_table.push(text.to_owned());
        self.strings.insert(text.to_owned(), index);
        index
    }

    /// The index of the attribute `key` = `value` (a string).
    fn attribute(&mut self, key: &str, value: &str) -> i32 {
        let key_strindex = self.string(key);
        if let Some(&index) = self.attributes.get(&(key_strindex, value.to_owned())) {
            return index;
        }
        let index = self.dictionary.attribute_table.len() as i32;
        self.dictionary.attribute_table.push(KeyValueAndUnit {
            key_strindex,
            value: Some(AnyValue {
                value: Some(Value::String(value.to_owned())),
            }),
        });
        self.attributes
            .insert((key_strindex, value.to_owned()), index);
        index
    }

    /// The index of the stack of `locations`, innermost first.
    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&index) = self.stacks.get(&locations) {
            return index;
        }
        let index = self.dictionary.stack_table.len() as i32;
        self.dictionary.stack_table.push(proto::Stack {
            location_indices: locations.clone(),
        });
        self.stacks.insert(locations, index);
        index
    }

    /// The index of the location of `frame` of process `pid`, with its mapping and functions.
    fn location(&mut self, pid: u32, frame: &Location, symbols: &Symbols) -> i32 {
        if let Some(&index) = self.locations.get(&(pid, frame.address)) {
            return index;
        }
        let mapping_index = self.mapping(pid, frame.address, symbols);
        let mut lines = Vec::new();
        if let Some(function) = &frame.function {
            // Innermost first: the inlined functions, then the one they are in.
            for inlined in frame.inlined.iter().rev() {
                lines.push(proto::Line {
                    function_index: self.function(&inlined.function, inlined.file.as_deref()),
                    line: inlined.line.map_or(0, i64::from),
                });
            }
            lines.push(proto::Line {
                function_index: self.function(function, frame.file.as_deref()),
                line: frame.line.map_or(0, i64::from),
            });
        }
        let index = self.push_location(proto::Location {
            mapping_index,
            address: frame.address,
            lines,
        });
        self.locations.insert((pid, frame.address), index);
        index
    }

    /// The index of a location in no mapping, at no address, that is the function `name`.
    fn named_location(&mut self, name: &str) -> i32 {
        if let Some(&index) = self.named.get(name) {
            return index;
        }
        let lines = vec![proto::Line {
            function_index: self.function(name, None),
            line: 0,
        }];
        let index = self.push_location(proto::Location {
            mapping_index: 0,
            address: 0,
            lines,
        });
        self.named.insert(name.to_owned(), index);
        index
    }

    fn push_location(&mut self, location: proto::Location) -> i32 {
        self.dictionary.location_table.push(location);
        self.dictionary.location_table.len() as i32 - 1
    }

    /// The index of the mapping of process `pid` that `address` is in (0: none recorded),
    /// with its file's build-id as an attribute.
    fn mapping(&mut self, pid: u32, address: u64, symbols: &Symbols) -> i32 {
        let Some(mapping) = symbols.mapping_of(pid, address) else {
            return 0;
        };
        if let Some(&index) = self.mappings.get(&(pid, mapping.start)) {
            return index;
        }
        let mut attribute_indices = Vec::new();
        if !mapping.build_id.is_empty() {
            let hex = hex_digits(&mapping.build_id);
            attribute_indices.push(self.attribute("process.executable.build_id.gnu", &hex));
        }
        let entry = proto::Mapping {
            memory_start: mapping.start,
            memory_limit: mapping.end,
            file_offset: mapping.file_offset,
            filename_strindex: self.string(&mapping.path.to_string_lossy()),
            attribute_indices,
        };
        let index = self.dictionary.mapping_table.len() as i32;
        self.dictionary.mapping_table.push(entry);
        self.mappings.insert((pid, mapping.start), index);
        index
    }

    /// The index of the function `name` in `file`.
    fn function(&mut self, name: &str, file: Option<&str>) -> i32 {
        let key = (name.to_owned(), file.map(str::to_owned));
        if let Some(&index) = self.functions.get(&key) {
            return index;
        }
        let name_strindex = self.string(name);
        let filename_strindex = file.map_or(0, |file| self.string(file));
        let index = self.dictionary.function_table.len() as i32;
        self.dictionary.function_table.push(proto::Function {
            name_strindex,
            system_name_strindex: name_strindex,
            filename_strindex,
        });
        self.functions.insert(key, index);
        index
    }
}
