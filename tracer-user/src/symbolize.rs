//! Caller addresses to module, offset, function, file and line. An address is normalized
//! through the mapped files the log recorded for its process (`thrtrace_mapping`: path,
//! build-id, base, file offset) to a file offset in a module, so that a report works after the
//! process is gone and on another machine with the same files; a file whose build-id is not the
//! recorded one is not trusted. The function and the offset into it come from the module's ELF
//! symbols (as perf and gdb name them), the file:line and the functions inlined at the address
//! from its DWARF, read by blazesym. Debug information stripped into a separate file is found
//! as gdb finds it: under a debug directory (`/usr/lib/debug`, where Debian's -dbg and -dbgsym
//! packages put it, or one the user names) as `.build-id/xx/rest.debug` by the module's
//! build-id, or through its `.gnu_debuglink`; for a reader, where a module has neither its
//! symbols nor its lines here, from the debuginfod servers the environment names, as gdb and
//! perf fetch them (`debuginfod.rs`). Whatever is not known, the module, offset and
//! build-id are, so that the address can be symbolized later: never a bare address inside a
//! recorded mapping. A live process (deadlock messages while tracing without a log) is
//! symbolized by blazesym through its own maps: its places have a module, but no offset or
//! build-id.

mod debuginfod;
mod member_path;

use std::{
    collections::{HashMap, HashSet, hash_map::Entry},
    fmt::Write as _,
    path::PathBuf,
};

use blazesym::{
    Pid,
    symbolize::{
        CodeInfo, Input, Sym, Symbolized, Symbolizer,
        source::{Elf, Process, Source},
    },
};
use debuginfod::Debuginfod;
use member_path::MemberPaths;
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use serde::{Serialize, Serializer};
use tracer_model::event::{SystemEvent, SystemKind};

/// Where separate debug files are looked for after the directories the user names: where
/// Debian's -dbg and -dbgsym packages install them, as gdb looks.
const DEFAULT_DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

/// Where an address is, as far as can be told.
///
/// `offset` is a **file offset**: the address's distance into its mapping plus the mapping's
/// file offset. That is what pprof's profiles expect (a location's address placed by its
/// mapping's start, limit and file offset) and what blazesym's and perf's file-offset inputs
/// take; `llvm-symbolizer` and `addr2line` want the ELF virtual address instead, which for the
/// usual layouts (each loaded segment at an address equal to its file offset, as GNU ld lays
/// out PIE executables and shared libraries) is the same number. With `module` and
/// `build_id`, it names the instruction on any machine that has that build of the file.
/// `function_offset` and `offset` are those of the address itself (a return address: the call
/// is the instruction before it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Location {
    /// The address in the process (where ASLR put it).
    #[serde(serialize_with = "hex")]
    pub address: u64,
    /// The mapped file it is in.
    pub module: Option<String>,
    /// That file's GNU build-id, in hex.
    pub build_id: Option<String>,
    /// Its file offset in `module`.
    #[serde(serialize_with = "hex_option")]
    pub offset: Option<u64>,
    /// The function (ELF symbol) it is in, and how far into it.
    pub function: Option<String>,
    #[serde(serialize_with = "hex_option")]
    pub function_offset: Option<u64>,
    /// The source line of `function` it is on; with inlined functions, the line where the
    /// first of them was inlined.
    pub file: Option<String>,
    pub line: Option<u32>,
    /// The functions inlined at it, outermost first, each with its line: the last one's is
    /// where the address is.
    pub inlined: Vec<InlinedFrame>,
}

/// A function inlined at an address (DWARF's inlined subroutines), and the line in it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InlinedFrame {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's serialize_with passes a reference"
)]
fn hex<S: Serializer>(value: &u64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format!("{value:#x}"))
}

#[allow(
    clippy::ref_option,
    reason = "serde's serialize_with passes a reference"
)]
fn hex_option<S: Serializer>(value: &Option<u64>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => hex(value, serializer),
        None => serializer.serialize_none(),
    }
}

/// `4da092e8...`: bytes (a build-id) as hex digits.
pub fn hex_digits(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut digits, byte| {
        let _ = write!(digits, "{byte:02x}");
        digits
    })
}

fn file_line(file: Option<&String>, line: Option<u32>) -> Option<String> {
    match (file, line) {
        (Some(file), Some(line)) => Some(format!("{file}:{line}")),
        _ => None,
    }
}

impl Location {
    /// `queue.c:88`, if the line is known.
    pub fn source_line(&self) -> Option<String> {
        file_line(self.file.as_ref(), self.line)
    }

    /// `, inlined take (queue.c:40)` for each function inlined at the address.
    pub fn inlined_text(&self) -> String {
        let mut text = String::new();
        for frame in &self.inlined {
            let _ = write!(text, ", inlined {}", frame.function);
            if let Some(line) = file_line(frame.file.as_ref(), frame.line) {
                let _ = write!(text, " ({line})");
            }
        }
        text
    }
}

impl std::fmt::Display for Location {
    /// `worker+0x1c (queue.c:88)`, `worker+0x1c`, `queue.c:88`, then each inlined function
    /// (`, inlined take (queue.c:40)`); where nothing names it,
    /// `/usr/bin/app+0x1234 (build-id 9f3c...)`; outside every recorded mapping,
    /// `0x55d0c0a4e0c0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let function = self
            .function
            .as_ref()
            .map(|name| match self.function_offset {
                Some(offset) => format!("{name}+{offset:#x}"),
                None => name.clone(),
            });
        match (function, self.source_line()) {
            (Some(function), Some(line)) => write!(f, "{function} ({line})")?,
            (Some(place), None) | (None, Some(place)) => f.write_str(&place)?,
            (None, None) => match (&self.module, self.offset) {
                (Some(module), Some(offset)) => {
                    write!(f, "{module}+{offset:#x}")?;
                    if let Some(build_id) = &self.build_id {
                        write!(f, " (build-id {build_id})")?;
                    }
                }
                _ => write!(f, "{:#x}", self.address)?,
            },
        }
        f.write_str(&self.inlined_text())
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

/// What names a lock besides its address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LockName {
    /// The lock's address in its process.
    #[serde(serialize_with = "hex")]
    pub address: u64,
    /// The data symbol of a module that holds it (a lock defined at file scope, in data or
    /// bss): `queue_lock`, or `table+0x8` inside one.
    pub symbol: Option<String>,
    /// For a lock no symbol holds (heap, stack): a frame that places it, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frame: Option<Location>,
}

impl LockName {
    /// How messages and reports name a lock: `0x5596d0a54180`, `0x5596d0a54180 (queue_lock)`
    /// for a global, `0x5596d0a54180 (at worker+0x1c (queue.c:88))` for one placed by a frame,
    /// with `read` for a read hold: `0x5596d0a54180 (table, read)`.
    pub fn label(&self, exclusive: bool) -> String {
        let placed = self.frame.as_ref().map(|frame| format!("at {frame}"));
        let notes: Vec<&str> = self
            .symbol
            .as_deref()
            .or(placed.as_deref())
            .into_iter()
            .chain((!exclusive).then_some("read"))
            .collect();
        match notes.is_empty() {
            true => format!("{:#x}", self.address),
            false => format!("{:#x} ({})", self.address, notes.join(", ")),
        }
    }
}

/// A mapped file as read once: where its loaded segments are, its separate debug file, its
/// symbols. A file that is not the one mapped (its build-id is not the recorded one; a file
/// with none recorded is taken as it is), or cannot be read, has none of them.
#[derive(Default)]
struct Module {
    /// Loaded segments: file offset, bytes in the file, virtual address.
    segments: Vec<(u64, u64, u64)>,
    /// Its debug information stripped into a file under a debug directory or fetched into
    /// debuginfod's cache, found by build-id.
    debug_file: Option<DebugFile>,
    /// Its build-id, where it has no such file and lacks its symbols or its lines: a debug
    /// file is worth fetching.
    missing_debug_file: Option<Vec<u8>>,
    /// Its functions and its data (the debug file's symbol tables, else its own).
    functions: SymbolTable,
    data: SymbolTable,
    /// Its variables' types, from the debug file's DWARF, else its own: read when a lock in
    /// its data is first named.
    member_paths: Option<MemberPaths>,
}

impl Module {
    fn read(mapping: &Mapping, sources: &DebugSources) -> Module {
        let Ok(bytes) = std::fs::read(&mapping.path) else {
            return Module::default();
        };
        let Ok(elf) = object::File::parse(&*bytes) else {
            return Module::default();
        };
        let build_id = elf.build_id().ok().flatten().unwrap_or_default();
        if !mapping.build_id.is_empty() && build_id != mapping.build_id.as_slice() {
            return Module::default();
        }
        let segments = elf
            .segments()
            .map(|segment| {
                let (offset, size) = segment.file_range();
                (offset, size, segment.address())
            })
            .collect();
        let debug_file = sources.find(build_id);
        let has_section = |name| elf.section_by_name(name).is_some();
        let missing_debug_file = (debug_file.is_none()
            && !build_id.is_empty()
            && !(has_section(".symtab") && has_section(".debug_line")))
        .then(|| build_id.to_vec());
        let debug_bytes = debug_file
            .as_ref()
            .and_then(|file| std::fs::read(&file.path).ok());
        let debug_elf = debug_bytes
            .as_deref()
            .and_then(|bytes| object::File::parse(bytes).ok());
        let symbols = debug_elf.as_ref().unwrap_or(&elf);
        Module {
            segments,
            functions: SymbolTable::of(symbols, SymbolKind::Text),
            data: SymbolTable::of(symbols, SymbolKind::Data),
            debug_file,
            missing_debug_file,
            member_paths: None,
        }
    }

    /// The path to the byte `offset` into its variable `name` that starts at `start` (an ELF
    /// virtual address), as its DWARF describes it (`path` is the module's).
    fn member_path(
        &mut self,
        path: &PathBuf,
        name: &str,
        start: u64,
        offset: u64,
    ) -> Option<String> {
        let dwarf_file = self.debug_file.as_ref().map_or(path, |file| &file.path);
        self.member_paths
            .get_or_insert_with(|| {
                MemberPaths::read(&std::fs::read(dwarf_file).unwrap_or_default())
            })
            .path(name, start, offset)
    }

    /// The ELF virtual address of a file offset inside a loaded segment.
    fn virtual_address(&self, file_offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|(offset, size, _)| (*offset..offset + size).contains(&file_offset))
            .map(|(offset, _, address)| address + (file_offset - offset))
    }
}

/// Symbols of one kind (start, size, name), by start; of the names at one address, the one
/// people call it by (as perf chooses): global before weak before local, then the one with
/// fewer leading underscores, then the shorter (`dl_iterate_phdr`, not
/// `__GI___dl_iterate_phdr`).
#[derive(Default)]
struct SymbolTable(Vec<(u64, u64, String)>);

impl SymbolTable {
    /// The defined symbols of `kind` in `elf`'s symbol table and its dynamic one.
    fn of(elf: &object::File<'_>, kind: SymbolKind) -> SymbolTable {
        // Start, rank (the lowest is the name kept), size, name.
        type Ranked = (u64, (u8, usize, usize), u64, String);
        let mut symbols: Vec<Ranked> = elf
            .symbols()
            .chain(elf.dynamic_symbols())
            .filter(|symbol| symbol.kind() == kind && symbol.is_definition())
            .filter_map(|symbol| {
                // glibc's symbol table names versioned aliases `pthread_mutex_lock@@GLIBC_2.2.5`.
                let name = symbol.name().ok()?.split('@').next()?;
                let binding = match (symbol.is_global(), symbol.is_weak()) {
                    (true, false) => 0,
                    (_, true) => 1,
                    (false, false) => 2,
                };
                let underscores = name.len() - name.trim_start_matches('_').len();
                let rank = (binding, underscores, name.len());
                Some((symbol.address(), rank, symbol.size(), name.to_owned()))
            })
            .collect();
        symbols.sort_unstable();
        symbols.dedup_by_key(|(start, ..)| *start);
        SymbolTable(
            symbols
                .into_iter()
                .map(|(start, _, size, name)| (start, size, name))
                .collect(),
        )
    }

    /// The symbol holding `address`, and how far into it `address` is.
    fn find(&self, address: u64) -> Option<(&str, u64)> {
        let after = self.0.partition_point(|(start, _, _)| *start <= address);
        let (start, _, name) = self.0[..after]
            .iter()
            .rev()
            .find(|(start, size, _)| address < start + (*size).max(1))?;
        Some((name, address - start))
    }
}

/// A symbol's name as people read it: a C++ or Rust name demangled (`tc_acquire_table(THD*,
/// TDC_element*)`, not `_Z16tc_acquire_tableP3THDP11TDC_element`), any other as it is. Done
/// when a name is shown, not for a whole symbol table.
fn demangled(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name)
        && (name.starts_with("_R") || name.ends_with('E') && name.contains("17h"))
    {
        return format!("{rust:#}");
    }
    // Only an Itanium-mangled name: the demangler reads any other as a type (`a` is `signed
    // char`).
    name.starts_with("_Z")
        .then(|| cpp_demangle::Symbol::new(name).ok()?.demangle().ok())
        .flatten()
        .unwrap_or_else(|| name.to_owned())
}

/// `DIR/.build-id/xx/rest.debug` for the first debug directory that has it, and whose build-id
/// is `build_id`.
fn debug_file_of(build_id: &[u8], debug_dirs: &[PathBuf]) -> Option<PathBuf> {
    let (first, rest) = build_id.split_first()?;
    let rest = hex_digits(rest);
    debug_dirs
        .iter()
        .map(|dir| {
            dir.join(".build-id")
                .join(format!("{first:02x}"))
                .join(format!("{rest}.debug"))
        })
        .find(|path| has_build_id(path, build_id))
}

/// Whether `path` is an ELF file whose build-id is `build_id`: a debug file is trusted no
/// further.
fn has_build_id(path: &std::path::Path, build_id: &[u8]) -> bool {
    blazesym::helper::read_elf_build_id(path)
        .ok()
        .flatten()
        .is_some_and(|id| *id == *build_id)
}

/// A module's separate debug file.
struct DebugFile {
    /// Where it is read: for a file of debuginfod's cache, through its descriptor.
    path: PathBuf,
    /// A file of debuginfod's cache, held open: what is read is the file whose build-id was
    /// checked, whatever is put at its name later.
    _open: Option<std::fs::File>,
}

/// Where a module's separate debug file is looked for.
struct DebugSources {
    /// Directories laid out as /usr/lib/debug, in order.
    dirs: Vec<PathBuf>,
    /// The debuginfod servers the environment names, if any.
    debuginfod: Option<Debuginfod>,
}

impl DebugSources {
    fn new(dirs: &[PathBuf], debuginfod: Option<Debuginfod>) -> Self {
        DebugSources {
            dirs: dirs
                .iter()
                .cloned()
                .chain(DEFAULT_DEBUG_DIRS.map(PathBuf::from))
                .collect(),
            debuginfod,
        }
    }

    /// The modules `mappings` map, read. Those that want a debug file have theirs fetched side
    /// by side from debuginfod's servers, when they are asked, and are read again if any came.
    fn read_modules(&self, mappings: &[Mapping]) -> Vec<Module> {
        let mut modules: Vec<Module> = mappings
            .iter()
            .map(|mapping| Module::read(mapping, self))
            .collect();
        let Some(debuginfod) = &self.debuginfod else {
            return modules;
        };
        let build_ids: Vec<Vec<u8>> = modules
            .iter()
            .filter_map(|module| module.missing_debug_file.clone())
            .collect();
        if debuginfod.fetch(&build_ids) > 0 {
            for (module, mapping) in modules.iter_mut().zip(mappings) {
                if module.missing_debug_file.is_some() {
                    *module = Module::read(mapping, self);
                }
            }
        }
        modules
    }

    /// The debug file of `build_id` here: under a debug directory, else fetched earlier.
    fn find(&self, build_id: &[u8]) -> Option<DebugFile> {
        if let Some(path) = debug_file_of(build_id, &self.dirs) {
            return Some(DebugFile { path, _open: None });
        }
        let file = self.debuginfod.as_ref()?.cached(build_id)?;
        Some(DebugFile {
            path: debuginfod::fd_path(&file),
            _open: Some(file),
        })
    }
}

pub struct Symbols {
    symbolizer: Symbolizer,
    sources: DebugSources,
    mappings: HashMap<u32, Vec<Mapping>>,
    /// Each mapped file read so far, by path and recorded build-id.
    modules: HashMap<(PathBuf, Vec<u8>), Module>,
    cache: HashMap<(u32, u64), Location>,
}

impl Default for Symbols {
    fn default() -> Self {
        Symbols::new()
    }
}

impl Symbols {
    /// Debug files looked for in the default directories, never fetched: for a trace's own
    /// messages, which must not wait on a server.
    pub fn new() -> Self {
        Symbols::with_sources(DebugSources::new(&[], None))
    }

    /// For a reader: debug files looked for in `dirs` first, then in the default directories,
    /// then fetched from the debuginfod servers `DEBUGINFOD_URLS` names, which it may wait on.
    pub fn fetching(dirs: &[PathBuf]) -> Self {
        Symbols::with_sources(DebugSources::new(dirs, Debuginfod::from_env(true)))
    }

    /// For a live view: debug files looked for in the default directories and in the cache of
    /// debuginfod's servers, never fetched: it must not wait on a server.
    pub fn live() -> Self {
        Symbols::with_sources(DebugSources::new(&[], Debuginfod::from_env(false)))
    }

    /// The same sources of debug files (and what debuginfod's servers did), and nothing else:
    /// every file read and place found so far is dropped.
    #[must_use]
    pub fn renewed(self) -> Self {
        Symbols::with_sources(self.sources)
    }

    fn with_sources(sources: DebugSources) -> Self {
        Symbols {
            symbolizer: Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                .set_debug_dirs(Some(&sources.dirs))
                .build(),
            sources,
            mappings: HashMap::new(),
            modules: HashMap::new(),
            cache: HashMap::new(),
        }
    }

    /// Whether any process has mappings recorded (a log has; tr files have none).
    pub fn has_mappings(&self) -> bool {
        !self.mappings.is_empty()
    }

    pub fn add_mapping(&mut self, pid: u32, mapping: Mapping) {
        self.mappings.entry(pid).or_default().push(mapping);
    }

    /// Keeps what `event` says of where a process's code is: a mapping is added; a process
    /// attached (a pid seen before, now another process) or a new image (exec) has the
    /// earlier ones forgotten, its own following. Whether they were forgotten.
    pub fn learn(&mut self, event: &SystemEvent) -> bool {
        match &event.kind {
            SystemKind::ProcessAttach { .. } | SystemKind::Exec { .. } => {
                self.forget(event.pid);
                true
            }
            kind => {
                if let Some(mapping) = Mapping::of(kind) {
                    self.add_mapping(event.pid, mapping);
                }
                false
            }
        }
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

    /// Names the lock at `address` of process `pid`: by the data symbol holding it, when a
    /// module's data or bss does (placed by the recorded mapping of that module's code);
    /// otherwise by its address, with `fallback` (a frame that places it) if there is one.
    pub fn name_lock(&mut self, pid: u32, address: u64, fallback: Option<Location>) -> LockName {
        let symbol = self.data_symbol(pid, address);
        LockName {
            address,
            frame: fallback.filter(|_| symbol.is_none()),
            symbol,
        }
    }

    /// The data symbol holding `address`: the path to the member it is in where the module's
    /// DWARF describes the symbol's type (`stats.update_lock`), else the symbol and the offset
    /// into it (`stats+0x18`).
    fn data_symbol(&mut self, pid: u32, address: u64) -> Option<String> {
        let mappings = self.mappings.get(&pid)?.clone();
        mappings.iter().find_map(|mapping| {
            let module = self.module(mapping);
            // The load bias, from the code mapping: its start is its file offset's address.
            let code_address = module.virtual_address(mapping.file_offset)?;
            let at = address.wrapping_sub(mapping.start.wrapping_sub(code_address));
            let (name, offset) = module.data.find(at)?;
            let name = demangled(name);
            let path = module.member_path(&mapping.path, &name, at - offset, offset);
            Some(path.unwrap_or_else(|| match offset {
                0 => name,
                offset => format!("{name}+{offset:#x}"),
            }))
        })
    }

    /// The module `mapping` maps, read the first time, its debug file fetched then if it
    /// wants one.
    fn module(&mut self, mapping: &Mapping) -> &mut Module {
        let key = (mapping.path.clone(), mapping.build_id.clone());
        match self.modules.entry(key) {
            Entry::Occupied(read) => read.into_mut(),
            Entry::Vacant(unread) => {
                let read = self.sources.read_modules(std::slice::from_ref(mapping));
                unread.insert(read.into_iter().next().unwrap_or_default())
            }
        }
    }

    /// Reads the modules that `places` (process, address) are in, first fetching side by side
    /// the debug files of those that want one from the debuginfod servers, if any: a module
    /// read when first named fetches its own alone.
    pub fn fetch_debug_files(&mut self, places: impl IntoIterator<Item = (u32, u64)>) {
        if self.sources.debuginfod.is_none() {
            return;
        }
        let mut seen = HashSet::new();
        let unread: Vec<Mapping> = places
            .into_iter()
            .filter_map(|(pid, address)| self.mapping_of(pid, address))
            .filter(|mapping| {
                let key = (mapping.path.clone(), mapping.build_id.clone());
                !self.modules.contains_key(&key) && seen.insert(key)
            })
            .cloned()
            .collect();
        let modules = self.sources.read_modules(&unread);
        for (module, mapping) in modules.into_iter().zip(unread) {
            self.modules
                .insert((mapping.path, mapping.build_id), module);
        }
    }

    /// The recorded mapping of process `pid` that holds `address`.
    pub fn mapping_of(&self, pid: u32, address: u64) -> Option<&Mapping> {
        self.mappings
            .get(&pid)?
            .iter()
            .find(|m| (m.start..m.end).contains(&address))
    }

    /// Where `address` of process `pid` is, from the recorded mappings. A return address: the
    /// call is the byte before it.
    pub fn locate(&mut self, pid: u32, address: u64) -> Location {
        if let Some(known) = self.cache.get(&(pid, address)) {
            return known.clone();
        }
        let mapping = self.mapping_of(pid, address).cloned();
        let location = match mapping {
            Some(mapping) if address != 0 => self.locate_in(&mapping, address),
            _ => Location {
                address,
                ..Location::default()
            },
        };
        self.cache.insert((pid, address), location.clone());
        location
    }

    /// Where `address`, inside `mapping`, is: its module and offset always; its function and
    /// line from the module's debug file found by build-id, else from the module (and the
    /// debug file its debug link names), if the module here is the one mapped.
    fn locate_in(&mut self, mapping: &Mapping, address: u64) -> Location {
        let offset = address - mapping.start + mapping.file_offset;
        let mut location = Location {
            address,
            module: Some(mapping.path.to_string_lossy().into_owned()),
            build_id: (!mapping.build_id.is_empty()).then(|| hex_digits(&mapping.build_id)),
            offset: Some(offset),
            ..Location::default()
        };
        let module = self.module(mapping);
        let Some(call) = module.virtual_address(offset).map(|a| a.saturating_sub(1)) else {
            return location;
        };
        // The function from the ELF symbols, as perf and gdb name it: blazesym's from DWARF
        // has no start when its code is in pieces (a hot and a cold part).
        let function = module
            .functions
            .find(call)
            .map(|(name, offset)| (name.to_owned(), offset + 1));
        let source = module
            .debug_file
            .as_ref()
            .map_or(mapping.path.clone(), |file| file.path.clone());
        let source = Source::Elf(Elf::new(source));
        if let Ok(Symbolized::Sym(sym)) = self
            .symbolizer
            .symbolize_single(&source, Input::VirtOffset(call))
        {
            fill(&mut location, &sym);
        }
        if let Some((name, offset)) = function {
            location.function = Some(demangled(&name));
            location.function_offset = Some(offset);
        }
        location
    }

    /// Where `address` is in the running process `pid`, through its own maps.
    pub fn locate_live(&mut self, pid: u32, address: u64) -> Location {
        let mut location = Location {
            address,
            ..Location::default()
        };
        let source = Source::Process(Process::new(Pid::from(pid)));
        let input = Input::AbsAddr(address.saturating_sub(1));
        if let Ok(Symbolized::Sym(sym)) = self.symbolizer.symbolize_single(&source, input) {
            location.module = sym
                .module
                .as_ref()
                .map(|module| module.to_string_lossy().into_owned());
            fill(&mut location, &sym);
        }
        location
    }
}

/// `location`'s function, line and inlined functions from what blazesym found at the byte
/// before it.
fn fill(location: &mut Location, sym: &Sym<'_>) {
    let file = |code: &CodeInfo<'_>| code.file.to_string_lossy().into_owned();
    location.function = Some(sym.name.to_string());
    // An offset past the function's size is from no start at all (see `locate_in`).
    location.function_offset = sym
        .size
        .is_some_and(|size| sym.offset < size)
        .then_some(sym.offset as u64 + 1);
    if let Some(code) = &sym.code_info {
        location.file = Some(file(code));
        location.line = code.line;
    }
    location.inlined = sym
        .inlined
        .iter()
        .map(|inlined| InlinedFrame {
            function: inlined.name.to_string(),
            file: inlined.code_info.as_ref().map(file),
            line: inlined.code_info.as_ref().and_then(|code| code.line),
        })
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_module() -> Location {
        Location {
            address: 0x55d0_c0a4_e2d0,
            module: Some("/usr/bin/app".into()),
            build_id: Some("4da092e8".into()),
            offset: Some(0x12d0),
            ..Location::default()
        }
    }

    #[test]
    fn a_place_is_named_by_what_is_known_and_never_by_a_bare_address_in_a_module() {
        let mut at = in_module();
        assert_eq!(at.to_string(), "/usr/bin/app+0x12d0 (build-id 4da092e8)");
        at.function = Some("worker".into());
        at.function_offset = Some(0x1c);
        assert_eq!(at.to_string(), "worker+0x1c");
        at.file = Some("queue.c".into());
        at.line = Some(88);
        assert_eq!(at.to_string(), "worker+0x1c (queue.c:88)");
        at.inlined = vec![InlinedFrame {
            function: "take".into(),
            file: Some("queue.h".into()),
            line: Some(12),
        }];
        assert_eq!(
            at.to_string(),
            "worker+0x1c (queue.c:88), inlined take (queue.h:12)"
        );
        at.function = None;
        assert_eq!(at.to_string(), "queue.c:88, inlined take (queue.h:12)");
        let nowhere = Location {
            address: 0x55d0_c0a4_e2d0,
            ..Location::default()
        };
        assert_eq!(nowhere.to_string(), "0x55d0c0a4e2d0");
    }

    #[test]
    fn names_are_demangled_and_unversioned() {
        assert_eq!(
            demangled("_Z16tc_acquire_tableP3THDP11TDC_element"),
            "tc_acquire_table(THD*, TDC_element*)"
        );
        assert_eq!(demangled("pthread_mutex_lock"), "pthread_mutex_lock");
        // Plain C names that read as types or ill-formed mangled names stay as they are.
        for plain in ["a", "b", "i", "_Z"] {
            assert_eq!(demangled(plain), plain);
        }
        assert_eq!(
            demangled("_ZN4core9panicking5panic17h0123456789abcdefE"),
            "core::panicking::panic"
        );
    }

    #[test]
    fn addresses_and_offsets_are_hex_strings_in_json() {
        let json = serde_json::to_value(in_module()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "address": "0x55d0c0a4e2d0", "module": "/usr/bin/app", "build_id": "4da092e8",
                "offset": "0x12d0", "function": null, "function_offset": null, "file": null,
                "line": null, "inlined": []
            })
        );
    }

    #[test]
    fn a_lock_is_named_by_its_symbol_else_by_a_frame_given_else_by_its_address() {
        let global = LockName {
            address: 0x5596_d0a5_4180,
            symbol: Some("queue_lock".into()),
            frame: None,
        };
        assert_eq!(global.label(true), "0x5596d0a54180 (queue_lock)");
        assert_eq!(global.label(false), "0x5596d0a54180 (queue_lock, read)");
        let heap = LockName {
            symbol: None,
            ..global
        };
        assert_eq!(heap.label(true), "0x5596d0a54180");
        let placed = LockName {
            frame: Some(in_module()),
            ..heap
        };
        assert_eq!(
            placed.label(true),
            "0x5596d0a54180 (at /usr/bin/app+0x12d0 (build-id 4da092e8))"
        );
    }
}
