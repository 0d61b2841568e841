//! Attaching the BPF programs to a process's pthread functions, and detaching them.
//!
//! For each process, one uprobe_multi link puts the entry program at every traced offset of its
//! pthread library (the attach layer takes any file offset, not only a symbol's), each offset
//! with its event's cookie, and one more puts the return program at the functions whose record
//! needs the return value. Links are scoped to the process, so no other process on the host pays
//! for them, and they are file-descriptor owned: if the tracer dies, the kernel removes them.
//!
//! Shared links have no process filter: one pair per library file serves system-wide tracing,
//! `--follow` (whose children must be covered before the tracer could learn of them), and a
//! process whose main thread has exited. The kernel filters a process's links by its main
//! thread's memory, so once that thread is gone they miss the process: new mappings get no
//! breakpoints, and the next time any other link on the same functions is detached, the
//! process's breakpoints go too.

use std::{
    collections::{HashMap, HashSet},
    ops::Range,
    os::fd::OwnedFd,
};

use aya::maps::MapError;
use tracer_common::{
    CallRole, Category, ContendedProbe, EVENTS, EventDef, Field, FunctionSpan,
    LAYOUT_COND_WITHOUT_G_REFS, LAYOUT_GLIBC, LAYOUT_MUSL, ProbeCookie, ProbeFlags, ProcessLibrary,
    TracedThrough,
    object_layout::{GLIBC, GLIBC_2_41},
};
use tracer_model::selection::EventSet;

use super::{
    PLANS_FAST_PATHS,
    fast_path::{self, Processes, Role},
    machine_code,
    placement::{self, DEFAULT_FUNCTION_BYTES, Needs, Placement},
    slow_path::{self, ReturnAddress, WaitEnd},
    symbols::Function,
    targets::{self, OpenedFile, PthreadLibrary},
    uprobe_links::{Hook, LinkError, Linker, UprobeError},
};
use crate::capture::{
    CaptureError,
    datapath::DataPath,
    decode::ThreadDescriptors,
    programs::{Programs, UprobeMechanism},
};
use crate::error::io_errors;

/// Why probes could not be attached in a library, or the BPF side told of a process.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error(transparent)]
    Uprobes(#[from] UprobeError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error("cannot tell the BPF side where {path} calls traced functions itself")]
    CallSites { path: String, source: MapError },
    #[error("cannot tell the BPF side of pid {pid}'s C library (errno, its own calls)")]
    ProcessLibrary { pid: u32, source: MapError },
    #[error("fast-path probes were planned in {path}, but their program was not loaded")]
    NoFastPathProgram { path: String },
    #[error("{path}, found mapped by pid {pid}, is not traced")]
    FoundLibrary {
        path: String,
        pid: u32,
        source: Box<AttachError>,
    },
}

type Result<T, E = AttachError> = std::result::Result<T, E>;

/// One probe to attach: an event's function and where in it the probe goes.
pub struct PlannedProbe {
    pub event: &'static EventDef,
    pub function: Function,
    pub placement: Placement,
    /// Set when another traced function is the same code: that one's probe records the calls.
    pub same_code_as: Option<&'static EventDef>,
    /// How the library lays out its objects
    /// ([`RawRecord::object_layout`](tracer_common::RawRecord::object_layout)).
    pub object_layout: u8,
    /// Cookie flags that this library's code decides, not the event table
    /// ([`ProbeFlags::LOCKED_AT_FIRST_TRY_IF_NZ`], [`ProbeFlags::CALLED_INSIDE`]).
    pub code_flags: u16,
    /// Set when the function calls other traced functions: its code, kept with its open call.
    pub span: FunctionSpan,
    /// The traced functions whose calls from inside this one are part of its call.
    pub calls_inside: Vec<&'static str>,
    /// Its event is not selected: the probe only opens the call
    /// ([`ProbeFlags::ONLY_OPENS_CALL`]), for the selected functions it calls.
    pub only_opens_call: bool,
    /// `--contended`: the probe is on the call's slow path, not at its entry.
    pub slow_path: Option<slow_path::Site>,
    /// A full trace: the probe is one of the plan that writes the call where its fast path
    /// completes ([`fast_path`]).
    pub fast: Option<fast_path::Site>,
    /// Why the function of an event that could have it has no fast-path plan.
    pub no_fast_path: Option<String>,
}

/// How the probes of a run are planned.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlanOptions {
    /// `--probe-at-entry`: every probe at its function's first instruction.
    pub at_entry: bool,
    /// `--contended`: lock calls on their slow paths only ([`ContendedProbe`]).
    pub contended: bool,
    /// Lock calls written where their fast path completes them, where that is proved
    /// ([`fast_path`]); not with `at_entry` or `contended`.
    pub fast_paths: bool,
}

impl PlanOptions {
    /// Whether the plans may place fast-path probes, which the fast-path program records.
    pub fn plans_fast_paths(self) -> bool {
        self.fast_paths && !self.at_entry && !self.contended && PLANS_FAST_PATHS
    }
}

impl PlannedProbe {
    /// Whether this probe is attached: not refused by the kernel, not another function's code.
    pub fn attached(&self) -> bool {
        !self.placement.refused && self.same_code_as.is_none()
    }

    /// The file offset of the probed instruction.
    pub fn file_offset(&self) -> u64 {
        self.function.offset.wrapping_add(self.placement.offset)
    }

    /// What a pass costs the traced thread, by class, for `--list-probes`: the trap of an
    /// instruction the kernel emulates, or of one it single-steps (a second trap), and the
    /// return probe's trampoline (or a second probe where a wait ends) where the call's return
    /// half is recorded apart.
    pub fn cost_class(&self) -> String {
        let trap = match self.placement.emulated {
            true => "emulated",
            false => "single-stepped",
        };
        // A return probe alone is hit where it is attached too, as a return probe's entry.
        match self.fast_role() {
            Some(Role::Completes(_)) => trap.to_owned(),
            Some(Role::ReturnOnly) => format!("{trap}+return"),
            Some(Role::WholeCall) | None if !self.flags().has(ProbeFlags::RETURN) => {
                trap.to_owned()
            }
            Some(Role::WholeCall) | None => match self.return_probe() {
                (_, Hook::Return) => format!("{trap}+return"),
                (_, Hook::Instruction) => format!("{trap}+wait-end"),
            },
        }
    }

    /// The fast-path probe's role, if it is one.
    fn fast_role(&self) -> Option<Role> {
        self.fast.map(|site| site.role)
    }

    /// The processes the probe is for.
    fn processes(&self) -> Processes {
        self.fast.map_or(Processes::Every, |site| site.processes)
    }

    /// Keeps the function's code (`bytes` long) with its open call ([`FunctionSpan`]), where
    /// the span fits the cookie.
    fn keep_span(&mut self, bytes: u64) {
        let most = match self.slow_path {
            Some(_) => ProbeCookie::MAX_SLOW_PATH_SPAN,
            None => u16::MAX,
        };
        if let (Ok(before_probe), Ok(bytes)) =
            (u8::try_from(self.placement.offset), u16::try_from(bytes))
            && bytes <= most
        {
            self.span = FunctionSpan {
                before_probe,
                bytes,
            };
        }
    }

    /// Where the call's return half is recorded, and how: at the function's return, or on a
    /// slow path where its wait ends (the instruction after it, or the return of the function
    /// that waits).
    fn return_probe(&self) -> (u64, Hook) {
        match self.slow_path.and_then(|site| site.wait_ends) {
            Some(WaitEnd::After(offset)) => (offset, Hook::Instruction),
            Some(WaitEnd::ReturnOf(offset) | WaitEnd::PassedOn(offset)) => (offset, Hook::Return),
            None => (self.file_offset(), Hook::Return),
        }
    }

    /// The cookie flags: the event's and the code's, or only what opening the call needs. A
    /// waking slow path is the call's one record, written there.
    fn flags(&self) -> ProbeFlags {
        let event_flags = match self.event.contended() {
            ContendedProbe::Wakes if self.slow_path.is_some() => {
                self.event.flags.0 & !ProbeFlags::RETURN
            }
            _ => self.event.flags.0,
        };
        ProbeFlags(match self.only_opens_call {
            true => ProbeFlags::RETURN | ProbeFlags::ONLY_OPENS_CALL,
            false => event_flags | self.code_flags,
        })
    }
}

/// Where the probes of `events` go in `library`: every definition of each function, each
/// placed (or at its entry with `at_entry`; with `contended`, on its slow paths where the event
/// has them); then the calls traced functions make to each other inside the library, which are
/// no calls of the program's ([`mark_calls_inside`]).
pub fn plan(library: &PthreadLibrary, events: EventSet, options: PlanOptions) -> Vec<PlannedProbe> {
    let object_layout = object_layout(library);
    let at_entry = options.at_entry;
    // Where the library's named functions start, for the slow-path walks (a tail call to one
    // is not followed): read once for the whole plan.
    let named = match options.contended {
        true => library.functions.starts(),
        false => HashSet::new(),
    };
    let fast_paths = FastPaths::of(library, options);
    let mut probes: Vec<PlannedProbe> = Vec::new();
    for event in events.events() {
        for function in library.functions.functions(event.symbol) {
            if options.contended && event.contended() != ContendedProbe::Whole {
                plan_slow_path(library, &named, event, function, object_layout, &mut probes);
                continue;
            }
            let no_fast_path = match fast_paths.plan(library, event, function, object_layout) {
                Some(Ok(planned)) => {
                    probes.extend(planned);
                    continue;
                }
                Some(Err(why)) => Some(why),
                None => None,
            };
            // Two names, one code (glibc aliases pthread_spin_init to pthread_spin_unlock): a
            // call cannot be told apart, so the address gets the probe of the first event.
            let same_code_as = probes
                .iter()
                .find(|p| p.function.offset == function.offset && p.same_code_as.is_none())
                .map(|p| p.event);
            let mut probe = place(library, event, function, object_layout, at_entry);
            probe.same_code_as = same_code_as;
            probe.no_fast_path = no_fast_path;
            probes.push(probe);
        }
    }
    mark_calls_inside(library, object_layout, at_entry, &mut probes);
    if options.contended {
        keep_spans(&mut probes);
    }
    // musl's libc.so is its dynamic linker too, which takes pthread_mutex_lock, and any of its
    // functions may call a pthread function: a call from its own call sites is not the
    // program's (`targets::own_call_sites`).
    if library.is_musl_shared_object() {
        for probe in &mut probes {
            probe.code_flags |= ProbeFlags::CALLED_INSIDE;
        }
    }
    probes
}

/// What a full trace needs to plan fast paths in a library ([`fast_path`]).
struct FastPaths {
    /// Not planned: `--no-fast-paths`, `--probe-at-entry`, `--contended`.
    off: bool,
    /// Why none is planned in this library at all.
    refused: Option<&'static str>,
    /// What the plans need to know of the library's functions.
    library: fast_path::Library,
    /// The library's traced functions' code. A function that calls one keeps today's probes,
    /// whose open call marks those calls as its own; one that calls code a plan shares has its
    /// call open then.
    traced: Vec<Range<u64>>,
}

impl FastPaths {
    fn of(library: &PthreadLibrary, options: PlanOptions) -> FastPaths {
        let off = !options.plans_fast_paths();
        FastPaths {
            off,
            refused: None,
            library: fast_path::Library {
                stops: fast_path::NEVER_RETURN
                    .iter()
                    .flat_map(|name| library.functions.functions(name))
                    .map(|f| f.offset)
                    .chain(fast_path::never_returning_plt_stubs(&library.image))
                    .collect(),
                named: match off {
                    true => HashSet::new(),
                    false => library.functions.starts(),
                },
                mutex_kind_offset: (!library.is_musl())
                    .then_some(GLIBC.mutex_kind.byte_offset() as i64),
                single_threaded_flag: single_threaded_flag_in_code(library),
            },
            traced: EVENTS
                .iter()
                .flat_map(|e| library.functions.functions(e.symbol))
                .map(|f| f.offset..f.offset + f.size)
                .collect(),
        }
    }

    /// The probes of `event`'s plan in `function`, or why it has none; `None` where no plan
    /// is sought.
    fn plan(
        &self,
        library: &PthreadLibrary,
        event: &'static EventDef,
        function: Function,
        object_layout: u8,
    ) -> Option<Result<Vec<PlannedProbe>, String>> {
        if self.off || !event.completes_on_fast_path() && !event.completes_at_entry() {
            return None;
        }
        if let Some(why) = self.refused {
            return Some(Err(why.into()));
        }
        let code = function_code(library, function);
        // A jump to one is a tail call, which the plan probes as before (the call is open
        // while the function jumped to runs): only a call is refused.
        let calls_traced = placement::direct_call_destinations(code, function.offset)
            .iter()
            .any(|d| *d != function.offset && self.traced.iter().any(|c| c.start == *d));
        if calls_traced {
            return Some(Err("it calls traced functions".into()));
        }
        let planned = match event.completes_at_entry() {
            true => {
                let entry = placement::place(code, function.offset, Needs::of(event), false);
                fast_path::whole_at_entry(
                    &library.image,
                    function.offset,
                    function.size,
                    &self.library,
                    (function.offset + entry.offset, entry.stack_offset),
                )
            }
            false => fast_path::plan(
                &library.image,
                function.offset,
                function.size,
                &self.library,
                event,
            ),
        };
        let sites = match planned {
            Ok(sites) => sites,
            Err(why) => return Some(Err(why)),
        };
        // Code the plan shares is reached from traced functions only, whose open calls tell
        // those hits apart from the program's.
        if let Some(shared) = sites.iter().find_map(|s| s.shared_code) {
            let own = function.offset..function.offset + function.size;
            if let Some(from) = direct_jumps_into(library, shared, &self.library.named)
                .into_iter()
                .find(|at| {
                    !own.contains(at)
                        && !shared.contains(*at)
                        && !self.traced.iter().any(|c| c.contains(at))
                })
            {
                return Some(Err(format!(
                    "the code it jumps to is reached from {from:#x} too, outside the traced \
                     functions"
                )));
            }
        }
        let mut probes = Vec::new();
        for site in sites {
            let placement = Placement::on_fast_path(
                &library.image,
                function.offset,
                site,
                event.completes_at_entry(),
            );
            if placement.refused {
                return Some(Err(format!(
                    "the kernel refuses a probe at {} ({})",
                    placement.signed_offset(),
                    placement.instruction()
                )));
            }
            probes.push(PlannedProbe {
                event,
                function,
                placement,
                same_code_as: None,
                object_layout,
                // Code the library's other functions call too: their calls are not the
                // program's.
                code_flags: match site.shared_code {
                    Some(_) => ProbeFlags::CALLED_INSIDE,
                    None => 0,
                },
                span: FunctionSpan::default(),
                calls_inside: Vec::new(),
                only_opens_call: false,
                slow_path: None,
                fast: Some(site),
                no_fast_path: None,
            });
        }
        Some(Ok(probes))
    }
}

/// Where glibc's `__libc_single_threaded` is as the library's code addresses it, decoded at
/// its file offsets: its address, less how far the code's addresses are from those offsets.
/// (`targets::single_threaded_flag` is where it is in a process.)
fn single_threaded_flag_in_code(library: &PthreadLibrary) -> Option<u64> {
    let flag = library
        .functions
        .functions(fast_path::SINGLE_THREADED_FLAG)
        .next()?;
    let code = EVENTS
        .iter()
        .find_map(|e| library.functions.functions(e.symbol).next())?;
    Some(
        flag.address
            .wrapping_sub(code.address.wrapping_sub(code.offset)),
    )
}

/// Where the library's code calls or jumps into `shared`: by a `call`, `jmp` or conditional
/// jump with a 32-bit displacement (how code reaches other code of its library from afar),
/// found by its bytes anywhere; and by any branch of the code around it, decoded as far as a
/// short jump reaches ([`branches_into`]).
fn direct_jumps_into(
    library: &PthreadLibrary,
    shared: fast_path::SharedCode,
    named: &HashSet<u64>,
) -> Vec<u64> {
    let Some((code, base)) = library.executable_code() else {
        return Vec::new();
    };
    let from_afar = code.windows(6).enumerate().filter_map(|(at, bytes)| {
        // The opcode's length, then the displacement's four bytes.
        let opcode = match bytes {
            [0xe8 | 0xe9, ..] => 1,
            [0x0f, 0x80..=0x8f, ..] => 2,
            _ => return None,
        };
        let at = base + at as u64;
        let rel: [u8; 4] = bytes[opcode..opcode + 4].try_into().ok()?;
        let next = at + opcode as u64 + 4;
        let destination = next.checked_add_signed(i64::from(i32::from_le_bytes(rel)))?;
        shared.contains(destination).then_some(at)
    });
    let mut from = from_afar.collect::<Vec<_>>();
    from.extend(branches_into(code, base, shared, named));
    from
}

/// The bytes a short jump (an 8-bit displacement) reaches on either side of it.
const SHORT_JUMP_REACH: u64 = 128;

/// Where the code within a short jump of `shared` branches into it, decoded from the last
/// named function start at least that far before it (no byte pattern tells a short jump from
/// other bytes), anew from each function start, from the shared code's start, and from where
/// the walk began there, so that a stray decoding of padding or data does not carry over.
fn branches_into(
    code: &[u8],
    base: u64,
    shared: fast_path::SharedCode,
    named: &HashSet<u64>,
) -> Vec<u64> {
    let end_of_code = base + code.len() as u64;
    let before = shared.walked.0.saturating_sub(SHORT_JUMP_REACH).max(base);
    let after = shared
        .walked
        .1
        .saturating_add(SHORT_JUMP_REACH)
        .min(end_of_code);
    let first = named
        .iter()
        .copied()
        .filter(|&start| (base..=before).contains(&start))
        .max()
        .unwrap_or(base);
    let mut starts: Vec<u64> = named
        .iter()
        .copied()
        .chain([first, shared.start, shared.walked.0])
        .filter(|start| (first..after).contains(start))
        .collect();
    starts.sort_unstable();
    starts.dedup();
    let ends = starts.iter().skip(1).copied().chain([after]);
    starts
        .iter()
        .zip(ends)
        .flat_map(|(&start, end)| {
            let bytes = &code[(start - base) as usize..(end - base) as usize];
            placement::direct_branches_past_invalid(bytes, start)
        })
        .filter(|&(_, destination)| shared.contains(destination))
        .map(|(at, _)| at)
        .collect()
}

/// `--contended`: the probes of `event` on the slow paths of `function` (a site another
/// definition already has is not probed twice), or its refusal if it has none; `named` are
/// the library's functions' starts. A slow path is
/// also reached from inside the library (glibc's condition wait unlocks its mutex through the
/// code pthread_mutex_unlock jumps to): a hit from inside an open call records nothing.
fn plan_slow_path(
    library: &PthreadLibrary,
    named: &HashSet<u64>,
    event: &'static EventDef,
    function: Function,
    object_layout: u8,
    probes: &mut Vec<PlannedProbe>,
) {
    let wanted = match event.contended() {
        ContendedProbe::Waits => slow_path::Futex::Waits,
        _ => slow_path::Futex::Wakes,
    };
    // musl's slow paths are other functions', which spin before they wait (its lock passes
    // itself on to its timed lock): not what a slow-path record says of a call.
    let sites = match library.is_musl() {
        true => Vec::new(),
        false => machine_code::slow_path_sites(
            &library.image,
            function.offset,
            function.size,
            named,
            wanted,
        ),
    };
    let probe = |placement: Placement, site: Option<slow_path::Site>| PlannedProbe {
        event,
        function,
        placement,
        same_code_as: None,
        object_layout,
        code_flags: ProbeFlags::CALLED_INSIDE,
        span: FunctionSpan::default(),
        calls_inside: Vec::new(),
        only_opens_call: false,
        slow_path: site,
        fast: None,
        no_fast_path: None,
    };
    if sites.is_empty() {
        probes.push(probe(Placement::without_slow_path(), None));
        return;
    }
    // A wait's end on an instruction the kernel refuses to probe is the futex function's
    // return instead, if it has one.
    let sites = sites.into_iter().filter_map(|mut site| {
        if let Some(WaitEnd::After(end)) = site.wait_ends
            && !machine_code::kernel_accepts(&library.image, end)
        {
            site.wait_ends = Some(WaitEnd::ReturnOf(site.calls?));
        }
        Some(site)
    });
    for site in sites {
        let placement = machine_code::on_slow_path(&library.image, function.offset, site);
        let mut planned = probe(placement, Some(site));
        planned.same_code_as = probes
            .iter()
            .find(|p| p.slow_path.is_some() && p.file_offset() == site.offset)
            .map(|p| p.event);
        probes.push(planned);
    }
}

/// `--contended`: every probe of a whole call keeps its function's code with the open call,
/// so that a slow path its function reaches inside the library is known as part of it.
fn keep_spans(probes: &mut [PlannedProbe]) {
    for probe in probes
        .iter_mut()
        .filter(|p| p.slow_path.is_none() && p.flags().has(ProbeFlags::RETURN))
    {
        probe.keep_span(probe.function.size);
    }
}

/// `event`'s probe in `function` of `library`, whose objects are laid out as `object_layout` says,
/// placed (or at its entry with `at_entry`).
fn place(
    library: &PthreadLibrary,
    event: &'static EventDef,
    function: Function,
    object_layout: u8,
    at_entry: bool,
) -> PlannedProbe {
    let code = function_code(library, function);
    let placement = machine_code::place(code, function.offset, Needs::of(event), at_entry);
    let mut code_flags = 0;
    if event.flags.has(ProbeFlags::SPINS) && placement.after_locked_update {
        code_flags |= ProbeFlags::LOCKED_AT_FIRST_TRY_IF_NZ;
    }
    PlannedProbe {
        event,
        function,
        placement,
        same_code_as: None,
        object_layout,
        code_flags,
        span: FunctionSpan::default(),
        calls_inside: Vec::new(),
        only_opens_call: false,
        slow_path: None,
        fast: None,
        no_fast_path: None,
    }
}

/// The bytes of `function` in `library`'s image (its first bytes if its size is unknown).
fn function_code(library: &PthreadLibrary, function: Function) -> &[u8] {
    let size = match function.size {
        0 => DEFAULT_FUNCTION_BYTES,
        size => size,
    };
    let start = (function.offset as usize).min(library.image.len());
    let end = (start + size as usize).min(library.image.len());
    &library.image[start..end]
}

/// What a probe on a function the library passes on opens its call as: no event has its codes,
/// so no traced call is taken for it.
pub static THREAD_START: EventDef = EventDef {
    category: Category::Thread,
    event2: 63,
    name: "thread_start",
    symbol: "(thread_start)",
    role: CallRole::Other,
    flags: ProbeFlags(0),
    first: [Field::Zero; 5],
    second: [Field::Zero; 5],
};

/// How `library` lays out its objects: musl's, or glibc's, whose condition variable lost
/// `__g_refs` in 2.41 (seen where pthread_cond_signal loads `__wrefs` from).
fn object_layout(library: &PthreadLibrary) -> u8 {
    if library.is_musl() {
        return LAYOUT_MUSL;
    }
    let without_g_refs = library
        .functions
        .functions("pthread_cond_signal")
        .any(|signal| {
            machine_code::first_load_through_argument_1(
                function_code(library, signal),
                signal.offset,
            ) == Some(GLIBC_2_41.cond_waiter_refs.byte_offset() as u64)
        });
    match without_g_refs {
        true => LAYOUT_COND_WITHOUT_G_REFS,
        false => LAYOUT_GLIBC,
    }
}

/// Marks the calls traced functions make to each other inside `library` (musl's
/// pthread_mutex_lock jumps to its pthread_mutex_timedlock, which calls its
/// pthread_mutex_trylock; glibc's call internal code instead), found from the direct calls and
/// jumps in their code. A probed function called so is [`ProbeFlags::CALLED_INSIDE`]; each
/// function calling it keeps its code with its open call, and gets a probe that only opens the
/// call if its own event is not selected.
fn mark_calls_inside(
    library: &PthreadLibrary,
    object_layout: u8,
    at_entry: bool,
    probes: &mut Vec<PlannedProbe>,
) {
    // Every traced function the library defines, selected or not, once per address; then the
    // functions they pass on (musl's pthread_create its thread start, which calls pthread_exit
    // when the thread function returns).
    let mut callers: Vec<(&'static EventDef, Function)> = Vec::new();
    for event in EVENTS
        .iter()
        .filter(|e| e.category.probed_through() == e.category && e.category.is_probed_in_library())
    {
        for function in library.functions.functions(event.symbol) {
            if !callers.iter().any(|(_, f)| f.offset == function.offset) {
                callers.push((event, function));
            }
        }
    }
    let passed_on: Vec<Function> = callers
        .iter()
        .flat_map(|(_, f)| machine_code::addresses_taken(function_code(library, *f), f.offset))
        .filter_map(|address| library.functions.at_offset(address))
        .filter(|f| f.size > 0 && !callers.iter().any(|(_, c)| c.offset == f.offset))
        .collect();
    callers.extend(passed_on.into_iter().map(|f| (&THREAD_START, f)));
    for (event, caller) in callers {
        let callees: Vec<&'static str> = {
            let destinations = machine_code::direct_branch_destinations(
                function_code(library, caller),
                caller.offset,
            );
            let mut called: Vec<&'static str> = probes
                .iter_mut()
                // A call of the same event is the call itself going on, which the BPF side
                // tells by the event alone (glibc's compat pthread_cond_signal calls the new).
                .filter(|p| {
                    let shared = p.fast.and_then(|site| site.shared_code);
                    p.attached()
                        && (p.event.category, p.event.event2) != (event.category, event.event2)
                        && (destinations.contains(&p.function.offset)
                            || shared.is_some_and(|s| destinations.iter().any(|&d| s.contains(d))))
                })
                .map(|p| {
                    p.code_flags |= ProbeFlags::CALLED_INSIDE;
                    p.event.symbol
                })
                .collect();
            called.dedup();
            called
        };
        if callees.is_empty() {
            continue;
        }
        let opened = probes
            .iter()
            .position(|p| p.function.offset == caller.offset && p.attached());
        let index = opened.unwrap_or_else(|| {
            let mut probe = place(library, event, caller, object_layout, at_entry);
            probe.only_opens_call = true;
            probes.push(probe);
            probes.len() - 1
        });
        let probe = &mut probes[index];
        probe.keep_span(caller.size);
        probe.calls_inside = callees;
    }
}

/// The plan as a table: function, file offset, where the probe goes, the instruction there,
/// what a pass costs, and why.
pub fn describe(planned: &[PlannedProbe]) -> String {
    let mut table = format!(
        "{:<26} {:>10} {:>7}  {:<28} {:<23} {}\n",
        "function", "offset", "probe", "instruction", "cost", "why"
    );
    for probe in planned {
        let why = match (probe.same_code_as, &probe.no_fast_path) {
            (Some(other), _) => format!(
                "the same code as {}: calls are recorded as {}",
                other.symbol, other.name
            ),
            (None, Some(no_fast_path)) => {
                format!("{}; no fast path: {no_fast_path}", probe.placement.reason())
            }
            (None, None) => probe.placement.reason(),
        };
        let inside = probe.calls_inside.join(", ");
        let why = match (probe.only_opens_call, inside.is_empty()) {
            (true, _) => format!(
                "{why}; not selected: records nothing, opens the call for {inside} inside it"
            ),
            (false, false) => format!("{why}; its calls of {inside} are part of its call"),
            (false, true) => why,
        };
        let cost = match probe.attached() {
            true => probe.cost_class(),
            false => "-".to_owned(),
        };
        table += &format!(
            "{:<26} {:>#10x} {:>7}  {:<28} {cost:<23} {why}\n",
            probe.event.symbol,
            probe.function.offset,
            probe.placement.signed_offset(),
            probe.placement.instruction(),
        );
    }
    table
}

/// What to probe, and every link this run attached.
pub struct Probes {
    events: EventSet,
    options: PlanOptions,
    /// Each process's own links.
    process_links: HashMap<u32, Vec<OwnedFd>>,
    /// The processes that had one thread when their probes were placed, with the probes of
    /// the ways glibc takes only then, their own until they have a second thread.
    single_threaded: HashMap<u32, Vec<SingleThreadedWays>>,
    /// Links with no process filter.
    shared_links: Vec<OwnedFd>,
    /// Library files with shared links, by device and inode.
    everywhere: Vec<(String, u64)>,
    /// Library files whose shared links could not be made: said once, not tried again.
    refused_everywhere: Vec<(String, u64)>,
    /// Library files by device and inode, with the id of their own calls' return addresses
    /// in `CALL_SITES`, if they have any.
    call_site_ids: HashMap<(String, u64), Option<u64>>,
    mechanism: UprobeMechanism,
    linker: Linker,
    /// Where each process's thread descriptor is, told as its library is found.
    thread_descriptors: ThreadDescriptors,
}

impl Probes {
    /// Probes for `events`, planned as `options` say, attached by `mechanism`; each traced
    /// process's thread descriptor offset is told to `thread_descriptors`.
    pub fn new(
        events: EventSet,
        options: PlanOptions,
        mechanism: UprobeMechanism,
        thread_descriptors: ThreadDescriptors,
    ) -> Result<Self> {
        Ok(Probes {
            // The futex category's records come from the kernel, not from probes.
            events: events.in_library(),
            options,
            process_links: HashMap::new(),
            single_threaded: HashMap::new(),
            shared_links: Vec::new(),
            everywhere: Vec::new(),
            refused_everywhere: Vec::new(),
            call_site_ids: HashMap::new(),
            mechanism,
            linker: Linker::new(mechanism)?,
            thread_descriptors,
        })
    }

    /// The id under which `library`'s own calls of traced functions are known to the BPF side
    /// (`targets::own_call_sites`), told it the first time; `None` if it has none.
    fn call_sites_of(
        &mut self,
        datapath: &mut DataPath,
        library: &PthreadLibrary,
    ) -> Result<Option<u64>> {
        if let Some(&id) = self.call_site_ids.get(&library.file.identity) {
            return Ok(id);
        }
        let sites = targets::own_call_sites(library);
        let id = if sites.is_empty() {
            None
        } else {
            let id = self.call_site_ids.values().flatten().count() as u64 + 1;
            datapath
                .add_call_sites(id, &sites)
                .map_err(|source| AttachError::CallSites {
                    path: library.file.path.clone(),
                    source,
                })?;
            Some(id)
        };
        self.call_site_ids.insert(library.file.identity.clone(), id);
        Ok(id)
    }

    /// Tells the BPF side what it needs of process `pid`'s C library `library`: where errno is,
    /// and where the library's own calls of traced functions return to.
    fn tell_library(
        &mut self,
        datapath: &mut DataPath,
        pid: u32,
        library: &PthreadLibrary,
    ) -> Result<()> {
        self.tell_thread_descriptor(pid, library);
        let id = self.call_sites_of(datapath, library)?;
        let process = targets::process_library(pid, library, id);
        // glibc < 2.34 has two files, which both find errno: either one says.
        if process != ProcessLibrary::default() {
            datapath
                .set_library(pid, process)
                .map_err(|source| AttachError::ProcessLibrary { pid, source })?;
        }
        Ok(())
    }

    /// Tells the decoders where process `pid`'s thread descriptor is (0: any process's not told
    /// its own), from `library`'s pthread_self: a static executable that does not call it has
    /// none, and its records carry the thread pointer.
    fn tell_thread_descriptor(&self, pid: u32, library: &PthreadLibrary) {
        let offset = library.functions.functions("pthread_self").find_map(|f| {
            machine_code::thread_descriptor_offset(function_code(library, f), f.offset)
        });
        if let Some(offset) = offset {
            self.thread_descriptors.set(pid, offset);
        }
    }

    /// The processes traced through links of their own.
    pub fn with_own_links(&self) -> Vec<u32> {
        self.process_links.keys().copied().collect()
    }

    /// The functions probed.
    pub fn symbols(&self) -> Vec<&'static str> {
        self.events.events().map(|e| e.symbol).collect()
    }

    /// Plans and attaches the probes in `library` for process `pid` (0: every process that
    /// maps it, now or later), and says so on stderr.
    pub fn attach_library(
        &mut self,
        datapath: &mut DataPath,
        pid: u32,
        library: &PthreadLibrary,
    ) -> Result<()> {
        let planned = plan(library, self.events, self.options);
        let why = match library.is_musl() {
            true => "only glibc's slow paths are probed",
            false => "no call of a function making the futex call",
        };
        for refused in planned.iter().filter(|p| p.placement.lacks_slow_path()) {
            say!(
                "thrtrace-bpf: --contended: no slow path found in {} of {} ({why}): its calls \
                 are not traced; trace them without --contended",
                refused.event.symbol,
                library.file.path
            );
        }
        for refused in planned
            .iter()
            .filter(|p| p.placement.refused && !p.placement.lacks_slow_path())
        {
            say!(
                "thrtrace-bpf: {} cannot be probed at +{:#x} ({}): not traced",
                refused.event.symbol,
                refused.placement.offset,
                refused.placement.instruction()
            );
        }
        if pid != 0 {
            datapath.trace_through(pid, TracedThrough::OwnLinks)?;
        }
        let count = self.attach(datapath.programs(), pid, library, &planned)?;
        let path = &library.file.path;
        if pid == 0 {
            self.tell_thread_descriptor(0, library);
            self.everywhere.push(library.file.identity.clone());
            let (device, inode) = &library.file.identity;
            // A file none of whose functions could be probed is not traced: not said to be.
            if count > 0 {
                say!(
                    "thrtrace-bpf: tracing every process that maps {path} (device {device}, \
                     inode {inode}): {count} probes"
                );
            }
            return Ok(());
        }
        self.tell_library(datapath, pid, library)?;
        say!("thrtrace-bpf: tracing pid {pid}: {count} probes in {path}");
        Ok(())
    }

    /// Traces process `pid` through the shared links of `library` (attached now if the file
    /// has none yet), which the BPF side lets record only the processes put in its
    /// shared-traced set: `--follow`'s (and the children they fork), and a process whose main
    /// thread has exited. The process's own links, if any, are then detached: the BPF side
    /// already ignores them for it, so each call is recorded once throughout. Returns how many
    /// probes were attached: none if the file already had them.
    pub fn attach_shared(
        &mut self,
        datapath: &mut DataPath,
        pid: u32,
        library: &PthreadLibrary,
    ) -> Result<usize> {
        let mut count = 0;
        if !self.everywhere.contains(&library.file.identity) {
            let planned = plan(library, self.events, self.options);
            count = self.attach(datapath.programs(), 0, library, &planned)?;
            self.everywhere.push(library.file.identity.clone());
        }
        datapath.trace_through(pid, TracedThrough::SharedLinks)?;
        self.tell_library(datapath, pid, library)?;
        self.keep_single_threaded_ways(pid);
        if let Some(links) = self.process_links.remove(&pid) {
            close_aside(links);
        }
        Ok(count)
    }

    /// System-wide: probes every pthread library file that some process maps and that is not
    /// probed yet (a container started after the tracer brings its own). Never the tracer's.
    /// A file that cannot be probed does not keep the others from being probed: each is
    /// returned, once, with the process it was found through. A file is held open from when
    /// it is found, so a process gone since (a short-lived one, the only one to map it) does
    /// not take it away before its probes are placed.
    pub fn attach_new_libraries(&mut self, datapath: &mut DataPath) -> Vec<(u32, AttachError)> {
        let symbols = self.symbols();
        let known = [self.everywhere.as_slice(), &self.refused_everywhere].concat();
        let found = targets::all_pthread_libraries(&symbols, std::process::id(), &known);
        let mut failures = Vec::new();
        for (pid, library) in found {
            let Err(error) = self.attach_library(datapath, 0, &library) else {
                continue;
            };
            self.refused_everywhere.push(library.file.identity.clone());
            let path = library.file.path.clone();
            let source = Box::new(error);
            failures.push((pid, AttachError::FoundLibrary { path, pid, source }));
        }
        failures
    }

    /// Whether some file is probed for every process that maps it.
    pub fn probes_everywhere(&self) -> bool {
        !self.everywhere.is_empty()
    }

    /// Process `pid`'s main thread has exited, found at attach or later: traces it through the
    /// shared links of `library` (its own no longer apply), and says so, as every process that
    /// maps the file now takes their trap.
    pub fn attach_after_main_thread(
        &mut self,
        datapath: &mut DataPath,
        pid: u32,
        library: &PthreadLibrary,
    ) -> Result<()> {
        self.attach_shared(datapath, pid, library)?;
        say!(
            "thrtrace-bpf: tracing pid {pid}: its main thread has exited, so its probes in {} are \
             shared: every process that maps the file takes their trap (the kernel applies a \
             process's own probes through its main thread)",
            library.file.path
        );
        Ok(())
    }

    /// Attaches the `planned` probes in `library` for process `pid` (0: shared, for every
    /// process); returns how many.
    fn attach(
        &mut self,
        programs: &Programs,
        pid: u32,
        library: &PthreadLibrary,
        planned: &[PlannedProbe],
    ) -> Result<usize> {
        let shared = pid == 0;
        // Shared probes serve processes of both kinds; a process that has one thread now gets
        // the ways of one thread, and the others once it has a second. Its thread count, not
        // the flag's value: that is 0 until the C library's early start-up has run, where a
        // launched command is attached. The flag's place (its maps read) only where the plan
        // has such ways.
        let has_one_thread_ways = planned
            .iter()
            .any(|p| p.processes() == Processes::SingleThreaded);
        let single_threaded_flag = match shared {
            false if has_one_thread_ways && targets::threads_of(pid).nth(1).is_none() => {
                targets::single_threaded_flag(pid, library)
            }
            _ => None,
        };
        let single_threaded = single_threaded_flag.is_some();
        let mut entry = ProbeSet::default();
        let mut at_returns = ProbeSet::default();
        let mut after_waits = ProbeSet::default();
        let mut fast = ProbeSet::default();
        let mut one_thread_ways = ProbeSet::default();
        let mut threaded_ways = ProbeSet::default();
        // A function that waits, shared by slow paths, gets a return probe per event: the
        // return program completes the open call of its probe's event.
        let mut returns_probed = HashSet::new();
        for probe in planned.iter().filter(|p| p.attached()) {
            match probe.fast_role() {
                Some(Role::Completes(_)) => {
                    let set = match (probe.processes(), single_threaded) {
                        (Processes::Every, _) | (Processes::Threaded, false) => &mut fast,
                        (Processes::SingleThreaded, true) => &mut one_thread_ways,
                        (Processes::Threaded, true) => &mut threaded_ways,
                        (Processes::SingleThreaded, false) => continue,
                    };
                    set.push(probe.file_offset(), probe, shared);
                    continue;
                }
                Some(Role::ReturnOnly) => {}
                Some(Role::WholeCall) | None => entry.push(probe.file_offset(), probe, shared),
            }
            if !probe.flags().has(ProbeFlags::RETURN) {
                continue;
            }
            match probe.return_probe() {
                (at, Hook::Instruction) => after_waits.push(at, probe, shared),
                (at, Hook::Return) => {
                    if returns_probed.insert((at, probe.event.name)) {
                        at_returns.push(at, probe, shared);
                    }
                }
            }
        }
        let file = library.opened.path();
        // Each set, and whether its links go once the process has a second thread.
        let sets = [
            (Some(&programs.entry), Hook::Instruction, &entry, false),
            (Some(&programs.exit), Hook::Return, &at_returns, false),
            (Some(&programs.exit), Hook::Instruction, &after_waits, false),
            (programs.fast.as_ref(), Hook::Instruction, &fast, false),
            (
                programs.fast.as_ref(),
                Hook::Instruction,
                &one_thread_ways,
                true,
            ),
        ];
        // All of the file's probes or none: a file left half probed would be probed again,
        // whole, when it is next found, and the calls through the half recorded twice.
        let mut links = Vec::new();
        let mut one_thread_links = Vec::new();
        for (program, hook, set, until_threaded) in sets {
            if set.offsets.is_empty() {
                continue;
            }
            let made_for = match until_threaded {
                true => &mut one_thread_links,
                false => &mut links,
            };
            let attached = match program {
                Some(program) => self
                    .linker
                    .attach(program, hook, &file, &set.offsets, &set.cookies, pid)
                    .map_err(AttachError::from),
                None => Err(AttachError::NoFastPathProgram {
                    path: library.file.path.clone(),
                }),
            };
            match attached {
                Ok(made) => made_for.extend(made),
                Err(error) => {
                    close_aside(links);
                    close_aside(one_thread_links);
                    return Err(error);
                }
            }
        }
        match shared {
            true => self.shared_links.extend(links),
            false => self.process_links.entry(pid).or_default().extend(links),
        }
        let count = entry.offsets.len()
            + at_returns.offsets.len()
            + after_waits.offsets.len()
            + fast.offsets.len()
            + one_thread_ways.offsets.len();
        if let Some(flag) = single_threaded_flag
            && !one_thread_links.is_empty()
        {
            self.single_threaded
                .entry(pid)
                .or_default()
                .push(SingleThreadedWays {
                    links: one_thread_links,
                    file: library.opened.clone(),
                    flag,
                    threaded: threaded_ways,
                });
        }
        Ok(count)
    }

    /// Stops watching process `pid` for its move to glibc's threaded ways: its probes of the
    /// single-threaded ways stay among its own links, as they are (after an exec, which keeps
    /// the old image's probes as a whole; or before its own links are closed).
    pub fn keep_single_threaded_ways(&mut self, pid: u32) {
        let kept = self.single_threaded.remove(&pid).into_iter().flatten();
        let links = kept.flat_map(|ways| ways.links).collect::<Vec<_>>();
        if !links.is_empty() {
            self.process_links.entry(pid).or_default().extend(links);
        }
    }

    /// Moves each process that had one thread when its probes were placed, and has a second
    /// now with its `__libc_single_threaded` clear (glibc clears it as it makes a second
    /// thread, and never sets it again: the one-thread ways are not taken any more), to the
    /// probes of the ways glibc takes with threads. They are attached first, then those of the
    /// one-thread ways closed: no call goes unrecorded, none is recorded twice. The thread
    /// count alone would not do: io_uring's workers and threads made by a bare `clone` leave
    /// the flag set. Nor the flag alone: it is clear until the C library's start-up sets it.
    ///
    /// A process that is gone only has its links closed; one whose main thread has exited is
    /// left to move to the shared probes ([`Probes::attach_shared`]: the kernel takes no new
    /// probe of its own for it), also when its main thread exits as the move is made. Returns
    /// what could not be attached, by process: its one-thread probes then stay, correct, a
    /// trap dearer on its every unlock.
    pub fn leave_single_threaded_ways(&mut self, programs: &Programs) -> Vec<(u32, AttachError)> {
        let mut failures = Vec::new();
        let Some(program) = programs.fast.as_ref() else {
            return failures;
        };
        // Each process to move, and whether it is gone.
        let moving: Vec<(u32, bool)> = self
            .single_threaded
            .iter()
            .filter_map(|(&pid, ways)| {
                let gone = !targets::process_exists(pid);
                let threaded = !gone
                    && targets::threads_of(pid).nth(1).is_some()
                    && ways
                        .iter()
                        .any(|way| targets::read_byte(pid, way.flag) == Some(0))
                    && !targets::main_thread_exited(pid);
                (gone || threaded).then_some((pid, gone))
            })
            .collect();
        for (pid, gone) in moving {
            for way in self.single_threaded.remove(&pid).into_iter().flatten() {
                if gone {
                    close_aside(way.links);
                    continue;
                }
                let attached = self.linker.attach(
                    program,
                    Hook::Instruction,
                    &way.file.path(),
                    &way.threaded.offsets,
                    &way.threaded.cookies,
                    pid,
                );
                let own = self.process_links.entry(pid).or_default();
                match attached {
                    Ok(made) => {
                        own.extend(made);
                        close_aside(way.links);
                    }
                    Err(error) => {
                        own.extend(way.links);
                        // A main thread on its way out (the kernel finds no process to probe):
                        // the process moves to the shared probes, or ends, on its own.
                        if !no_such_process(&error) {
                            failures.push((pid, AttachError::from(error)));
                        }
                    }
                }
            }
        }
        failures
    }

    /// Detaches every probe, and the `tracepoints`' links, once nothing is recorded any more.
    /// Each link waits for the kernel's grace periods as it goes away, one after the other for
    /// perf-event uprobes and tracepoints (the kernel holds a mutex across each one's): 85 ms
    /// for each perf-event uprobe on the development VM (11 s for every category), 200-350 ms
    /// for `--contended`'s links, seconds under emulation.
    ///
    /// A child process closes them and the tracer goes on at once, unless `in_flight`: a traced
    /// thread may still be running a program, whose record the caller reads once the grace
    /// periods are over, so the links are closed here, concurrently. Perf-event uprobes go to
    /// the child either way: they take too long to wait for.
    pub fn detach_all(&mut self, tracepoints: Vec<OwnedFd>, in_flight: bool) {
        let probes: Vec<OwnedFd> = std::mem::take(&mut self.process_links)
            .into_values()
            .flatten()
            .chain(
                std::mem::take(&mut self.single_threaded)
                    .into_values()
                    .flatten()
                    .flat_map(|ways| ways.links),
            )
            .chain(std::mem::take(&mut self.shared_links))
            .collect();
        // What the child closes, in groups that go concurrently: the links whose closes the
        // kernel serializes together, each uprobe_multi link alone.
        let mut to_child: Vec<Vec<OwnedFd>> = Vec::new();
        let mut here = Vec::new();
        match in_flight {
            true => here.extend(tracepoints),
            false => to_child.push(tracepoints),
        }
        match (in_flight, self.mechanism) {
            (true, UprobeMechanism::MultiLink) => here.extend(probes),
            (false, UprobeMechanism::MultiLink) => {
                to_child.extend(probes.into_iter().map(|link| vec![link]));
            }
            (_, UprobeMechanism::PerfEvent) => to_child.push(probes),
        }
        to_child.retain(|group| !group.is_empty());
        if !to_child.is_empty()
            && let Err((_, links)) = crate::sys::process::fork_to_close(to_child)
        {
            here.extend(links);
        }
        std::thread::scope(|scope| {
            for link in here {
                scope.spawn(move || drop(link));
            }
        });
    }
}

/// Whether the kernel said of `error`'s process that there is none (ESRCH): its main thread
/// has exited, or is exiting.
fn no_such_process(error: &(dyn std::error::Error + 'static)) -> bool {
    io_errors(error).any(|e| e.raw_os_error() == Some(libc::ESRCH))
}

/// Closes `links` on a thread of their own: each waits for a kernel grace period as it goes,
/// which is not the session's time to spend.
fn close_aside(links: Vec<OwnedFd>) {
    std::thread::spawn(move || drop(links));
}

/// A library's probes of the ways glibc takes while a process has one thread, and those of
/// the ways it takes instead once it has a second, to be attached then ([`Processes`]).
struct SingleThreadedWays {
    links: Vec<OwnedFd>,
    file: OpenedFile,
    /// Where `__libc_single_threaded` is in the process.
    flag: u64,
    threaded: ProbeSet,
}

#[derive(Default)]
struct ProbeSet {
    offsets: Vec<u64>,
    cookies: Vec<u64>,
}

impl ProbeSet {
    fn push(&mut self, offset: u64, probe: &PlannedProbe, shared: bool) {
        let mut cookie = probe
            .event
            .cookie(probe.object_layout, probe.placement.stack_offset);
        cookie.flags = probe.flags();
        if shared {
            cookie.flags.0 |= ProbeFlags::SHARED;
        }
        cookie.function = probe.span;
        if let Some(fast_path::Site {
            role: Role::Completes(completion),
            object_register,
            ..
        }) = probe.fast
        {
            cookie.completion = Some(completion);
            cookie.object_register = object_register;
        }
        if let Some(site) = probe.slow_path {
            cookie.slow_path = true;
            cookie.returns_result = matches!(site.wait_ends, Some(WaitEnd::PassedOn(_)));
            cookie.object_register = site.object_register;
            cookie.object_offset = site.object_offset;
            if let ReturnAddress::SavedBelowEntry(bytes) = site.return_address {
                cookie.return_address_saved = (bytes / 8) as u8;
            }
        }
        self.offsets.push(offset);
        self.cookies.push(cookie.encode());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A named function at 0x1000 that may jump short to 0x1020, where unnamed shared code
    /// (one `ret`) is walked, and code after it that jumps back into it.
    fn library_around_shared_code(first_jump: u8) -> Vec<u8> {
        let mut code = vec![0x31, 0xc0, 0x74, first_jump, 0xc3];
        code.resize(0x20, 0x90);
        code.push(0xc3);
        code.extend([0x85, 0xc0, 0x75, 0xfb, 0xc3]);
        code
    }

    const SHARED: fast_path::SharedCode = fast_path::SharedCode {
        start: 0x1020,
        walked: (0x1020, 0x1021),
    };

    #[test]
    fn short_jumps_into_shared_code_from_either_side_are_found() {
        let named = HashSet::from([0x1000]);
        let code = library_around_shared_code(0x1c);
        assert_eq!(
            branches_into(&code, 0x1000, SHARED, &named),
            [0x1002, 0x1023]
        );
        let code = library_around_shared_code(0x01);
        assert_eq!(branches_into(&code, 0x1000, SHARED, &named), [0x1023]);
    }
}
