//! Caller addresses to function, file and line. An address is normalized through the mapped
//! files the log recorded for its process (`thrtrace_mapping`: path, build-id, base, file
//! offset) to a file offset, so that a report works after the process is gone and on another
//! machine with the same files; a file whose build-id is not the recorded one is not trusted.
//! blazesym reads DWARF where there is some (file:line), ELF symbols where not
//! (function+offset); otherwise the raw address stays. A live process (deadlock messages while
//! tracing) is symbolized through its own maps.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};
use tracer_model::event::SystemKind;

use blazesym::{
    Pid,
    symbolize::{
        Input, Symbolized, Symbolizer,
        source::{Elf, Process, Source},
    },
};
use serde::Serialize;

/// Where an address is, as far as can be told.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Location {
    pub address: u64,
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
}

impl std::fmt::Display for Location {
    /// `queue.c:88`, `worker+0x1c`, or `0x55d0c0a4e0c0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.file, self.line, &self.function) {
            (Some(file), Some(line), _) => write!(f, "{file}:{line}"),
            (_, _, Some(function)) => write!(f, "{function}"),
            _ => write!(f, "{:#x}", self.address),
        }
    }
}

/// A file mapped executable in a process.
#[derive(Clone, Debug)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
    pub path: PathBuf,
    pub build_id: Vec<u8>,
}

/// How messages and reports name a lock: `0x5596d0a54180`, `0x5596d0a54180 (queue_lock)` for
/// a global, with `read` for a read hold: `0x5596d0a54180 (table, read)`.
pub fn lock_label(
    address: impl std::fmt::Display,
    variable: Option<&str>,
    exclusive: bool,
) -> String {
    let notes: Vec<&str> = variable
        .into_iter()
        .chain((!exclusive).then_some("read"))
        .collect();
    match notes.is_empty() {
        true => address.to_string(),
        false => format!("{address} ({})", notes.join(", ")),
    }
}

impl Mapping {
    /// The mapping a `thrtrace_mapping` event records.
    pub fn of(kind: &SystemKind) -> Option<Mapping> {
        match kind {
            SystemKind::Mapping {
                start,
                end,
                file_offset,
                build_id,
                path,
            } => Some(Mapping {
                start: *start,
                end: *end,
                file_offset: *file_offset,
                path: PathBuf::from(path),
                build_id: build_id.clone(),
            }),
            _ => None,
        }
    }
}

#[derive(Default)]
pub struct Symbols {
    symbolizer: Symbolizer,
    mappings: HashMap<u32, Vec<Mapping>>,
    /// Files whose build-id is the recorded one, by path.
    trusted: HashMap<PathBuf, bool>,
    cache: HashMap<(u32, u64), Location>,
}

impl Symbols {
    pub fn new() -> Self {
        Symbols::default()
    }

    /// Whether any process has mappings recorded (a log has; tr files have none).
    pub fn has_mappings(&self) -> bool {
        !self.mappings.is_empty()
    }

    pub fn add_mapping(&mut self, pid: u32, mapping: Mapping) {
        self.mappings.entry(pid).or_default().push(mapping);
    }

    /// Process `pid` exited or exec'd: its mappings, and what was found through them, are gone.
    pub fn forget(&mut self, pid: u32) {
        self.mappings.remove(&pid);
        self.cache.retain(|&(p, _), _| p != pid);
    }

    /// Where `address` of process `pid` is while tracing: from its recorded mappings where
    /// there are some (they outlive the process), else through its own maps.
    pub fn locate_traced(&mut self, pid: u32, address: u64) -> Location {
        match self.mappings.contains_key(&pid) {
            true => self.locate(pid, address),
            false => self.locate_live(pid, address),
        }
    }

    /// The global variable at `address` of process `pid` (a lock defined at file scope), as
    /// `name` or `name+0x8`: the ELF symbol table of the mapped file whose loaded segments hold
    /// it, placed by the recorded mapping of its code.
    pub fn variable(&mut self, pid: u32, address: u64) -> Option<String> {
        let mappings = self.mappings.get(&pid)?.clone();
        mappings
            .iter()
            .filter(|m| self.trust(m))
            .find_map(|mapping| variable_in(mapping, address))
    }

    /// Where `address` of process `pid` is, from the recorded mappings. A return address: the
    /// call is the byte before it.
    pub fn locate(&mut self, pid: u32, address: u64) -> Location {
        if let Some(known) = self.cache.get(&(pid, address)) {
            return known.clone();
        }
        let raw = Location {
            address,
            ..Location::default()
        };
        let mapping = self.mappings.get(&pid).and_then(|maps| {
            maps.iter()
                .find(|m| (m.start..m.end).contains(&address))
                .cloned()
        });
        let location = match mapping {
            Some(mapping) if address != 0 && self.trust(&mapping) => {
                let offset = address - mapping.start + mapping.file_offset;
                let source = Source::Elf(Elf::new(&mapping.path));
                self.lookup(
                    &source,
                    Input::FileOffset(offset.saturating_sub(1)),
                    address,
                )
            }
            _ => raw,
        };
        self.cache.insert((pid, address), location.clone());
        location
    }

    /// Where `address` is in the running process `pid`, through its own maps.
    pub fn locate_live(&mut self, pid: u32, address: u64) -> Location {
        let source = Source::Process(Process::new(Pid::from(pid)));
        self.lookup(&source, Input::AbsAddr(address.saturating_sub(1)), address)
    }

    fn lookup(&self, source: &Source, input: Input<u64>, address: u64) -> Location {
        let mut location = Location {
            address,
            ..Location::default()
        };
        if let Ok(Symbolized::Sym(sym)) = self.symbolizer.symbolize_single(source, input) {
            location.function = Some(format!("{}+{:#x}", sym.name, sym.offset + 1));
            if let Some(code) = sym.code_info {
                location.file = Some(code.file.to_string_lossy().into_owned());
                location.line = code.line;
            }
        }
        location
    }

    /// Whether the file on this machine is the one mapped: its build-id is the recorded one
    /// (a file with none recorded is taken as it is).
    fn trust(&mut self, mapping: &Mapping) -> bool {
        if mapping.build_id.is_empty() {
            return Path::new(&mapping.path).exists();
        }
        *self.trusted.entry(mapping.path.clone()).or_insert_with(|| {
            blazesym::helper::read_elf_build_id(&mapping.path)
                .ok()
                .flatten()
                .is_some_and(|id| *id == *mapping.build_id)
        })
    }
}

/// The data symbol of `mapping`'s file that holds `address`, if that file holds it. The load
/// bias comes from the code mapping: its file offset lies in a loaded segment whose address
/// is known.
fn variable_in(mapping: &Mapping, address: u64) -> Option<String> {
    use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
    let data = std::fs::read(&mapping.path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let code = file.segments().find(|segment| {
        let (offset, size) = segment.file_range();
        (offset..offset + size).contains(&mapping.file_offset)
    })?;
    let code_address = code.address() + (mapping.file_offset - code.file_range().0);
    let bias = mapping.start.wrapping_sub(code_address);
    let wanted = address.wrapping_sub(bias);
    let symbol = file.symbols().find(|symbol| {
        symbol.kind() == SymbolKind::Data
            && (symbol.address()..symbol.address() + symbol.size().max(1)).contains(&wanted)
    })?;
    let name = symbol.name().ok()?;
    Some(match wanted - symbol.address() {
        0 => name.to_owned(),
        offset => format!("{name}+{offset:#x}"),
    })
}
