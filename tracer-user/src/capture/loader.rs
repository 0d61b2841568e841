//! Loads the BPF object: creates its maps (the programs' settings written in first) and
//! loads its programs. aya-obj parses and relocates, with no syscalls; the syscalls are made
//! from here (through `sys::bpf`), and aya wraps the maps for userspace.
//!
//! aya 0.14's `EbpfLoader` is not used: `EbpfLoader::new` parses all of the kernel's BTF for
//! CO-RE relocations (aya issue 1172), half of the tracer's start-up CPU, and this object has
//! none (a test checks). And the uprobe_multi programs need an attach type it cannot load.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    ffi::NulError,
    os::fd::{AsFd, AsRawFd, OwnedFd},
};

use aya::maps::{Map, MapData, MapError};
use aya_obj::{
    EbpfSectionKind, Object, ParseError,
    btf::BtfError,
    generated::{
        BPF_PSEUDO_KFUNC_CALL, bpf_attach_type, bpf_insn,
        bpf_map_type::{BPF_MAP_TYPE_ARRAY_OF_MAPS, BPF_MAP_TYPE_RINGBUF},
        bpf_prog_type::{self, BPF_PROG_TYPE_TRACING},
    },
    relocation::EbpfRelocationError,
};
use tracer_common::{ProgramConfig, kfuncs, names};

use crate::sys::{
    SyscallError,
    bpf::{self, MapShape},
};

/// Size of the verifier log kept when the kernel rejects a program.
const VERIFIER_LOG_BYTES: usize = 1 << 20;

/// Why the BPF object, one of its maps or one of its programs was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot parse the BPF object")]
    Parse(#[source] ParseError),
    #[error("the BPF object has CO-RE relocations, which this loader does not apply")]
    CoreRelocations,
    /// The programs' settings could not be written into the object's read-only data.
    #[error(transparent)]
    Config(ParseError),
    #[error(transparent)]
    Btf(#[from] BtfError),
    #[error("the kernel rejected the BPF object's BTF")]
    KernelRejectedBtf(#[source] SyscallError),
    #[error("the BPF object has no map {0}")]
    NoMap(String),
    #[error("cannot create BPF map {name}")]
    CreateMap { name: String, source: MapError },
    #[error("cannot create BPF map {name}")]
    CreateMapOfMaps { name: String, source: SyscallError },
    #[error("BPF map {0} defines no inner map")]
    NoInnerMap(String),
    #[error("cannot create the inner map of BPF map {name}")]
    CreateInnerMap { name: String, source: MapError },
    #[error(
        "cannot initialize BPF map {name}: BPF global data of {data} bytes for a map of \
         {value}-byte values"
    )]
    GlobalDataSize {
        name: String,
        data: usize,
        value: u32,
    },
    #[error("cannot initialize BPF map {name}")]
    InitializeMap { name: String, source: SyscallError },
    #[error(transparent)]
    Relocation(#[from] EbpfRelocationError),
    #[error(transparent)]
    Map(#[from] MapError),
    #[error("the BPF object has no program {0}")]
    NoProgram(String),
    #[error("cannot load BPF program {name}")]
    LoadProgram {
        name: String,
        source: ProgramRefused,
    },
    #[error(transparent)]
    TracepointName(#[from] NulError),
    #[error("cannot attach to the {name} raw tracepoint")]
    AttachTracepoint { name: String, source: SyscallError },
}

/// Why a program was not loaded: refused by the kernel, or by the check of its frames.
#[derive(Debug, thiserror::Error)]
pub enum ProgramRefused {
    #[error(
        "BPF program {name}: this kernel's verifier statistics do not give its stack depth in \
         a form thrtrace-bpf reads, so it cannot check that no frame would run on a per-CPU \
         stack a preempting run could overwrite; not loaded (please report the kernel version)"
    )]
    StackDepthUnread { name: String },
    #[error(
        "BPF program {name} has a {largest}-byte frame, which this kernel could run on a \
         per-CPU stack that a preempting run would overwrite; not loaded (a build error: the \
         programs keep frames, rounded up to 16 bytes, under {PRIVATE_STACK_FRAME}; its \
         subprograms' frames, in the verifier's order: {depths:?})"
    )]
    FrameTooLarge {
        name: String,
        largest: u32,
        depths: Vec<u32>,
    },
    // The call's error and errno are said before the verifier's words, so they are part of
    // the message rather than its source.
    #[error("{call}: {} (before the verifier ran)", .call.io_error)]
    BeforeVerifier { call: SyscallError },
    #[error("{call}: {}; verifier: {verifier}", .call.io_error)]
    Verifier {
        call: SyscallError,
        verifier: String,
    },
}

/// The object's maps, created, and its programs, relocated to them and ready to load.
pub struct Loaded {
    object: Object,
    maps: HashMap<String, MapData>,
    /// Each kfunc's placeholder, and its BTF id where the kernel has it.
    kfuncs: Vec<(i32, Option<u32>)>,
    /// The object's BTF in the kernel, which the maps' types refer to.
    _btf: Option<OwnedFd>,
}

impl Loaded {
    /// Parses `object`, writes `config` into its read-only global `names::CONFIG` (which must
    /// exist, of that size), loads its BTF and creates its maps, those of `sizes` (name,
    /// entries) with that many entries. `functions`: kernel functions' BTF ids by name, the
    /// kfuncs the programs call among them where the kernel has them.
    pub fn new(
        object: &[u8],
        config: &ProgramConfig,
        sizes: &[(&str, u32)],
        functions: &BTreeMap<&str, u32>,
    ) -> Result<Self, LoadError> {
        let mut obj = Object::parse(object).map_err(LoadError::Parse)?;
        if obj.has_btf_relocations() {
            return Err(LoadError::CoreRelocations);
        }
        obj.patch_map_data(HashMap::from([(names::CONFIG, (config.as_bytes(), true))]))
            .map_err(LoadError::Config)?;
        let btf = match aya::features().btf() {
            Some(features) => match obj.fixup_and_sanitize_btf(features)? {
                Some(btf) => Some(load_btf(&btf.to_bytes())?),
                None => None,
            },
            None => None,
        };
        let btf_fd = btf.as_ref().map(AsFd::as_fd);
        let mut maps = HashMap::new();
        // Map-of-maps last: creating one takes an inner map like the maps it will hold.
        let mut definitions: Vec<(String, aya_obj::Map)> = obj.maps.drain().collect();
        // As the config must exist, so must every map sized.
        for (sized, _) in sizes {
            if !definitions.iter().any(|(name, _)| name == sized) {
                return Err(LoadError::NoMap((*sized).to_owned()));
            }
        }
        definitions.sort_by_key(|(_, map)| map.map_type() == BPF_MAP_TYPE_ARRAY_OF_MAPS as u32);
        for (name, definition) in &mut definitions {
            if let Some(&(_, entries)) = sizes.iter().find(|(sized, _)| sized == name) {
                definition.set_max_entries(entries);
            }
            as_the_kernel_takes_it(definition);
            let map = if definition.map_type() == BPF_MAP_TYPE_ARRAY_OF_MAPS as u32 {
                create_map_of_maps(name, definition, btf_fd)?
            } else {
                MapData::create(definition.clone(), name, btf_fd).map_err(|source| {
                    LoadError::CreateMap {
                        name: name.clone(),
                        source,
                    }
                })?
            };
            initialize(name, &map, definition)?;
            maps.insert(name.clone(), map);
        }
        let text_sections: HashSet<usize> =
            obj.functions.keys().map(|(section, _)| *section).collect();
        obj.relocate_maps(
            definitions.iter().map(|(name, definition)| {
                (
                    name.as_str(),
                    maps[name].fd().as_fd().as_raw_fd(),
                    definition,
                )
            }),
            &text_sections,
        )?;
        obj.relocate_calls(&text_sections)?;
        obj.sanitize_functions(aya::features());
        let kfuncs = kfuncs::ALL
            .iter()
            .map(|kfunc| (kfunc.placeholder, functions.get(kfunc.name).copied()))
            .collect();
        Ok(Loaded {
            object: obj,
            maps,
            kfuncs,
            _btf: btf,
        })
    }

    /// Map `name`, for userspace to read and write; it stays in the programs either way.
    pub fn take_map(&mut self, name: &str) -> Result<Map, LoadError> {
        let data = self
            .maps
            .remove(name)
            .ok_or_else(|| LoadError::NoMap(name.to_owned()))?;
        Ok(Map::from_map_data(data)?)
    }

    /// Loads program `name` as a `prog_type` program, for `attach_type` if the type needs one.
    pub fn load_program(
        &self,
        name: &str,
        prog_type: bpf_prog_type,
        attach_type: Option<bpf_attach_type>,
    ) -> Result<OwnedFd, LoadError> {
        self.load(name, prog_type, attach_type, 0)
    }

    /// Loads program `name` as a tracing program (fentry, fexit: `attach_type`) of the kernel
    /// function whose BTF id is `function`.
    pub fn load_tracing_program(
        &self,
        name: &str,
        attach_type: bpf_attach_type,
        function: u32,
    ) -> Result<OwnedFd, LoadError> {
        self.load(name, BPF_PROG_TYPE_TRACING, Some(attach_type), function)
    }

    fn load(
        &self,
        name: &str,
        prog_type: bpf_prog_type,
        attach_type: Option<bpf_attach_type>,
        attach_btf_id: u32,
    ) -> Result<OwnedFd, LoadError> {
        let program = self
            .object
            .programs
            .get(name)
            .ok_or_else(|| LoadError::NoProgram(name.to_owned()))?;
        let function = &self.object.functions[&program.function_key()];
        let attach = Attach {
            attach_type,
            attach_btf_id,
        };
        let mut instructions = function.instructions.clone();
        for instruction in &mut instructions {
            link_kfunc_call(instruction, &self.kfuncs);
        }
        prog_load(name, prog_type, attach, &instructions).map_err(|source| LoadError::LoadProgram {
            name: name.to_owned(),
            source,
        })
    }
}

/// Turns a call of a kfunc's placeholder (a helper call, `kfuncs`' first) into a call of the
/// kfunc (its BTF id in kernel BTF, `kfuncs`' second) or, where the kernel has none, into
/// nothing: a move of 0 into the return register, which the kfuncs called so return nothing
/// in.
fn link_kfunc_call(insn: &mut bpf_insn, kfuncs: &[(i32, Option<u32>)]) {
    if insn.code != CALL || insn.src_reg() != 0 {
        return;
    }
    let Some(&(_, id)) = kfuncs
        .iter()
        .find(|(placeholder, _)| insn.imm == *placeholder)
    else {
        return;
    };
    *insn = match id {
        Some(id) => instruction(
            u32::from(CALL),
            0,
            BPF_PSEUDO_KFUNC_CALL as u8,
            0,
            id as i32,
        ),
        None => mov_imm(0, 0),
    };
}

/// A ring buffer's value size is 0 to the kernel, whatever the BTF type its definition names.
fn as_the_kernel_takes_it(definition: &mut aya_obj::Map) {
    if definition.map_type() == BPF_MAP_TYPE_RINGBUF as u32 {
        definition.set_value_size(0);
    }
}

/// A map-of-maps, with an inner map made from its definition of the maps it holds.
fn create_map_of_maps(
    name: &str,
    definition: &aya_obj::Map,
    btf_fd: Option<std::os::fd::BorrowedFd<'_>>,
) -> Result<MapData, LoadError> {
    let mut inner = definition
        .inner()
        .ok_or_else(|| LoadError::NoInnerMap(name.to_owned()))?;
    as_the_kernel_takes_it(&mut inner);
    let inner = MapData::create(inner, &format!("{name}.inner"), btf_fd).map_err(|source| {
        LoadError::CreateInnerMap {
            name: name.to_owned(),
            source,
        }
    })?;
    let fd = bpf::map_create(
        name,
        MapShape {
            map_type: definition.map_type(),
            key_size: definition.key_size(),
            value_size: definition.value_size(),
            max_entries: definition.max_entries(),
            map_flags: definition.map_flags(),
        },
        Some(inner.fd().as_fd()),
    )
    .map_err(|source| LoadError::CreateMapOfMaps {
        name: name.to_owned(),
        source,
    })?;
    Ok(MapData::from_fd(fd)?)
}

/// Writes the initial bytes of global-data map `name`, and freezes read-only data, so that
/// the verifier knows its values.
fn initialize(name: &str, map: &MapData, definition: &aya_obj::Map) -> Result<(), LoadError> {
    let failed = |source| LoadError::InitializeMap {
        name: name.to_owned(),
        source,
    };
    let data = definition.data();
    if !data.is_empty() {
        // A global-data map's one value is its section's data, which aya-obj sizes it for.
        if usize::try_from(definition.value_size()) != Ok(data.len()) {
            return Err(LoadError::GlobalDataSize {
                name: name.to_owned(),
                data: data.len(),
                value: definition.value_size(),
            });
        }
        // SAFETY: `data` is as long as the map's values (checked above).
        unsafe { bpf::map_update_elem(map.fd().as_fd(), 0, data) }.map_err(failed)?;
    }
    if definition.section_kind() == EbpfSectionKind::Rodata {
        bpf::map_freeze(map.fd().as_fd()).map_err(failed)?;
    }
    Ok(())
}

fn load_btf(bytes: &[u8]) -> Result<OwnedFd, LoadError> {
    bpf::btf_load(bytes).map_err(LoadError::KernelRejectedBtf)
}

/// Bytes of the statistics-only verifier log every load asks for: a few lines.
const STATS_LOG_BYTES: usize = 4096;

/// The verifier's `log_level` for statistics alone (`BPF_LOG_STATS`): a few lines, cheap to
/// format, among them each subprogram's stack depth.
const LOG_STATS: u32 = 4;

/// The smallest frame that kernels with BPF private stacks (x86-64 and arm64 JITs, 6.13 on)
/// move to a per-CPU stack (`BPF_PRIV_STACK_MIN_SIZE`), compared with the frame as the
/// verifier rounds it for the JIT (up to 16 bytes): a 56-byte frame is moved. Uprobe programs
/// can be preempted, and a second run on the same CPU would share that stack: the programs
/// keep every frame smaller.
pub const PRIVATE_STACK_FRAME: u32 = 64;

/// A frame's size as the verifier weighs it for a private stack (`round_up_stack_depth`).
pub fn jit_frame(depth: u32) -> u32 {
    depth.next_multiple_of(16)
}

/// The verifier's `log_level` for the whole log of its work (`BPF_LOG_LEVEL1`).
const LOG_FULL: u32 = 1;

/// What a program is loaded for, where its type needs it: an attach type, and for a tracing
/// program the BTF id of the kernel function it hooks.
#[derive(Clone, Copy, Debug, Default)]
pub struct Attach {
    pub attach_type: Option<bpf_attach_type>,
    pub attach_btf_id: u32,
}

impl From<Option<bpf_attach_type>> for Attach {
    fn from(attach_type: Option<bpf_attach_type>) -> Self {
        Attach {
            attach_type,
            attach_btf_id: 0,
        }
    }
}

/// What `BPF_PROG_LOAD` is told of `instructions`, program `name`.
fn program<'a>(
    name: &'a str,
    prog_type: bpf_prog_type,
    attach: Attach,
    instructions: &'a [bpf_insn],
) -> bpf::Program<'a> {
    bpf::Program {
        name,
        prog_type,
        attach_type: attach.attach_type,
        attach_btf_id: attach.attach_btf_id,
        instructions,
    }
}

/// Loads a program, asking the verifier only for its statistics (a full log costs the verifier
/// more than the verifying does), and refuses it if a frame is as large as the kernel would
/// move to a per-CPU stack. Only if the kernel rejects it, loads it again with a full log, to
/// say why.
fn prog_load(
    name: &str,
    prog_type: bpf_prog_type,
    attach: Attach,
    instructions: &[aya_obj::generated::bpf_insn],
) -> Result<OwnedFd, ProgramRefused> {
    let request = program(name, prog_type, attach, instructions);
    let mut stats = vec![0u8; STATS_LOG_BYTES];
    if let Ok(program) = bpf::prog_load(request, LOG_STATS, &mut stats) {
        let depths = stack_depths(&log_text(&stats));
        let largest = depths.iter().copied().max();
        // Unread, the frames could not be checked: a kernel that words its statistics in a
        // third way is refused, not trusted.
        let Some(largest) = largest else {
            return Err(ProgramRefused::StackDepthUnread {
                name: name.to_owned(),
            });
        };
        if jit_frame(largest) >= PRIVATE_STACK_FRAME {
            return Err(ProgramRefused::FrameTooLarge {
                name: name.to_owned(),
                largest,
                depths,
            });
        }
        return Ok(program);
    }
    let mut log = vec![0u8; VERIFIER_LOG_BYTES];
    bpf::prog_load(request, LOG_FULL, &mut log).map_err(|call| {
        let log = log_text(&log);
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        // Refused before the verifier ran (a policy, a missing kernel feature): no log.
        if tail.is_empty() {
            return ProgramRefused::BeforeVerifier { call };
        }
        ProgramRefused::Verifier {
            call,
            verifier: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
        }
    })
}

/// A verifier log's text, up to its NUL.
fn log_text(log: &[u8]) -> std::borrow::Cow<'_, str> {
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    String::from_utf8_lossy(&log[..end])
}

/// Each subprogram's stack depth, from the verifier's statistics, which kernels word in two
/// ways: `stack depth 40+24` (one number per subprogram, on some kernels followed by
/// ` max 64`), or `stack depth max 64` (the deepest chain of calls) and then a line per
/// subprogram ending in `stack 40` (Debian's 7.3.4, for one).
fn stack_depths(log: &str) -> Vec<u32> {
    let mut depths = Vec::new();
    for line in log.lines() {
        if let Some(listed) = line.strip_prefix("stack depth ") {
            let listed = listed.split_whitespace().next().unwrap_or_default();
            if listed != "max" {
                depths.extend(
                    listed
                        .split('+')
                        .filter_map(|depth| depth.parse::<u32>().ok()),
                );
            }
        } else if line.starts_with("subprog ")
            && let Some((_, depth)) = line.rsplit_once(" stack ")
            && let Ok(depth) = depth.trim().parse()
        {
            depths.push(depth);
        }
    }
    depths
}

/// A program of `prog_type` for `attach_type` that only returns 0, if the kernel loads one: to
/// ask the kernel what it offers.
pub fn trivial_program(
    prog_type: bpf_prog_type,
    attach_type: Option<bpf_attach_type>,
) -> Option<OwnedFd> {
    load_to_ask(prog_type, attach_type.into(), &[mov_imm(0, 0), exit()]).ok()
}

/// `BPF_JMP | BPF_CALL`: a call of a helper (source register 0), of a function of the program
/// (1) or of a kfunc (2).
pub const CALL: u8 = 0x85;

/// One instruction written here: of a program that asks the kernel what it offers, or in
/// place of a kfunc's placeholder.
pub fn instruction(code: u32, dst: u8, src: u8, off: i16, imm: i32) -> bpf_insn {
    // SAFETY: bpf_insn is plain data; all-zero is a valid instruction to overwrite.
    let mut insn: bpf_insn = unsafe { std::mem::zeroed() };
    insn.code = code as u8;
    insn.set_dst_reg(dst);
    insn.set_src_reg(src);
    insn.off = off;
    insn.imm = imm;
    insn
}

/// `dst = imm`.
pub fn mov_imm(dst: u8, imm: i32) -> bpf_insn {
    instruction(0xb7, dst, 0, 0, imm) // BPF_ALU64 | BPF_MOV | BPF_K
}

/// `exit` (return r0).
pub fn exit() -> bpf_insn {
    instruction(0x95, 0, 0, 0, 0) // BPF_JMP | BPF_EXIT
}

/// Loads `instructions`, written to ask the kernel whether it has something, with a verifier
/// log: the program, or the log's text (or the error, when the kernel wrote none).
pub fn load_to_ask(
    prog_type: bpf_prog_type,
    attach: Attach,
    instructions: &[aya_obj::generated::bpf_insn],
) -> Result<OwnedFd, String> {
    let mut log = vec![0u8; STATS_LOG_BYTES];
    let request = program("thr_feature", prog_type, attach, instructions);
    bpf::prog_load(request, LOG_FULL, &mut log).map_err(|error| {
        let text = log_text(&log);
        match text.trim().is_empty() {
            true => format!("{error}: {}", error.io_error),
            false => text.into_owned(),
        }
    })
}

/// Attaches a raw tracepoint program to tracepoint `name` (no tracefs needed); the link lives
/// as long as the descriptor.
pub fn attach_raw_tracepoint(program: &OwnedFd, name: &str) -> Result<OwnedFd, LoadError> {
    let name_c = std::ffi::CString::new(name)?;
    bpf::raw_tracepoint_open(program.as_fd(), Some(&name_c)).map_err(|source| {
        LoadError::AttachTracepoint {
            name: name.to_owned(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aya_obj::generated::bpf_prog_type::BPF_PROG_TYPE_KPROBE;

    #[test]
    fn stack_depths_are_read_from_the_verifiers_statistics() {
        let log = "processed 1234 insns (limit 1000000) max_states_per_insn 4\n\
                   stack depth 40+24\nverification time 512 usec\n";
        assert_eq!(stack_depths(log), [40, 24]);
        assert_eq!(stack_depths("stack depth 0\n"), [0]);
        assert_eq!(stack_depths("stack depth 40+24 max 64\n"), [40, 24]);
        // As Debian's 7.3.4 says it: the chain's total is not a frame.
        let log = "verification time 62104 usec\nstack depth max 80\n\
                   subprog 0 (<unknown>) main insns_self 1548 insns_total 2649 stack 48\n\
                   subprog 1 (<unknown>) static insns_self 1101 insns_total 1101 stack 24\n\
                   processed 2649 insns (limit 1000000) max_states_per_insn 4\n";
        assert_eq!(stack_depths(log), [48, 24]);
        let oversized = log.replace("stack 48", "stack 80");
        assert_eq!(stack_depths(&oversized).into_iter().max(), Some(80));
        assert!(stack_depths("no such line").is_empty());
    }

    /// The deepest stack byte each function of the object touches: through the frame pointer
    /// (r10), or through a register set from it and moved by constants (a key's address for a
    /// map lookup). What the verifier counts as the frame's depth, or more.
    fn frame_depths(object: &Object) -> Vec<(String, i64)> {
        const FRAME_POINTER: u8 = 10;
        let class = |insn: &aya_obj::generated::bpf_insn| insn.code & 0x07;
        object
            .functions
            .values()
            .map(|function| {
                // Registers that hold r10 plus a constant, and that constant.
                let mut from_frame: [Option<i64>; 11] = [None; 11];
                from_frame[usize::from(FRAME_POINTER)] = Some(0);
                let mut depth = 0i64;
                for insn in &function.instructions {
                    let (dst, src) = (usize::from(insn.dst_reg()), usize::from(insn.src_reg()));
                    let (dst, src) = (dst.min(10), src.min(10));
                    // Loads (LDX), stores (ST, STX) and atomics address memory at reg + off.
                    let base = match class(insn) {
                        0x01 => from_frame[src],
                        0x02 | 0x03 => from_frame[dst],
                        _ => None,
                    };
                    if let Some(base) = base {
                        depth = depth.max(-(base + i64::from(insn.off)));
                    }
                    // ALU64: a copy of a frame address, a constant added to it; anything else
                    // written to a register makes it something else.
                    match (class(insn), insn.code & 0xf8) {
                        (0x07, 0xb8) => from_frame[dst] = from_frame[src], // mov reg
                        (0x07, 0x00) => {
                            from_frame[dst] = from_frame[dst].map(|b| b + i64::from(insn.imm));
                        }
                        (0x07 | 0x04 | 0x01, _) if dst != usize::from(FRAME_POINTER) => {
                            from_frame[dst] = None;
                        }
                        // A call clobbers r0 to r5.
                        (0x05, 0x80) => from_frame[..6].fill(None),
                        _ => {}
                    }
                    if let Some(base) = from_frame[dst].filter(|_| class(insn) == 0x07) {
                        depth = depth.max(-base);
                    }
                }
                (function.name.clone(), depth)
            })
            .collect()
    }

    /// The guard in `prog_load` is the kernel's own view; this says the same of the object,
    /// without a kernel, so that a change that grows a frame fails here first.
    #[test]
    fn every_bpf_frame_is_smaller_than_a_private_stack_is_given_for() {
        let object = Object::parse(crate::capture::datapath::BPF_OBJECT).unwrap();
        let depths = frame_depths(&object);
        assert!(
            depths.iter().any(|(name, _)| name == "thr_entry"),
            "{depths:?}"
        );
        for (name, depth) in depths {
            assert!(
                jit_frame(u32::try_from(depth).unwrap()) < PRIVATE_STACK_FRAME,
                "{name} uses {depth} bytes of stack: a kernel with BPF private stacks would run \
                 it on a per-CPU stack that preempting runs share"
            );
        }
    }

    /// The guard itself, on this kernel's wording of its statistics: a program that touches
    /// 80 bytes of stack is refused, one that touches 48 is loaded.
    #[test]
    fn the_kernel_loads_no_frame_a_private_stack_is_given_for() {
        if trivial_program(BPF_PROG_TYPE_KPROBE, None).is_none() {
            assert!(
                std::env::var_os("CI").is_none_or(|ci| ci != "true"),
                "BPF programs cannot be loaded here, and CI=true"
            );
            return;
        }
        let touching = |depth: i16| {
            // *(u64 *)(r10 - depth) = r1 (BPF_STX | BPF_MEM | BPF_DW), then return 0.
            let program = [
                mov_imm(1, 0),
                instruction(0x7b, 10, 1, -depth, 0),
                mov_imm(0, 0),
                exit(),
            ];
            prog_load(
                "frame_check",
                BPF_PROG_TYPE_KPROBE,
                Attach::default(),
                &program,
            )
        };
        assert!(touching(48).is_ok());
        let refused = touching(80).unwrap_err().to_string();
        assert!(refused.contains("has a 80-byte frame"), "{refused}");
    }

    /// The futex programs call each kfunc by its placeholder, which becomes the kfunc's call
    /// where the kernel has it and nothing where it has not; no other call changes.
    #[test]
    fn kfunc_placeholders_become_kfunc_calls_or_nothing() {
        let object = Object::parse(crate::capture::datapath::BPF_OBJECT).unwrap();
        let program = &object.programs[tracer_common::names::FUTEX_TP_EXIT_PROGRAM];
        let instructions = &object.functions[&program.function_key()].instructions;
        let placeholders = |kfunc: kfuncs::Kfunc| {
            instructions
                .iter()
                .filter(|insn| insn.code == CALL && insn.imm == kfunc.placeholder)
                .count()
        };
        assert_eq!(placeholders(kfuncs::PREEMPT_DISABLE), 1);
        assert_eq!(placeholders(kfuncs::PREEMPT_ENABLE), 1);
        let with_ids = [
            (kfuncs::PREEMPT_DISABLE.placeholder, Some(7)),
            (kfuncs::PREEMPT_ENABLE.placeholder, Some(8)),
        ];
        let without = with_ids.map(|(placeholder, _)| (placeholder, None));
        for (kfuncs, expected) in [(with_ids, "kfunc calls"), (without, "nothing")] {
            let mut linked = instructions.clone();
            for insn in &mut linked {
                link_kfunc_call(insn, &kfuncs);
            }
            let changed: Vec<(i32, u8, u8)> = instructions
                .iter()
                .zip(&linked)
                .filter(|(before, after)| before.imm != after.imm || before.code != after.code)
                .map(|(_, after)| (after.imm, after.code, after.src_reg()))
                .collect();
            let want = match kfuncs[0].1 {
                Some(_) => vec![(7, CALL, 2), (8, CALL, 2)],
                None => vec![(0, 0xb7, 0), (0, 0xb7, 0)],
            };
            assert_eq!(changed, want, "placeholders become {expected}");
        }
    }

    #[test]
    fn the_bpf_object_needs_no_kernel_btf() {
        let object = Object::parse(crate::capture::datapath::BPF_OBJECT).unwrap();
        assert!(!object.has_btf_relocations());
    }
}
