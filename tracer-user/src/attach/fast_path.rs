//! Where a lock call's fast path completes it (full traces): one probe there writes the whole
//! call, where today's placement takes two traps (the entry probe, and the return probe's
//! trampoline).
//!
//! The plan comes from the function's code, and is used only where it is proved:
//!
//! 1. The *tails*: the code from which every way runs straight to a `ret` with a known value in
//!    `eax` (and, for -1, a known errno stored), with no call, no system call, no locked
//!    instruction and no loop on the way. A call that reaches a tail has completed.
//! 2. A *completion* on each way into a tail: the conditional branch that enters it (its flags
//!    say whether it did: `lock cmpxchg; jne slow`), a jump into it, or the instruction a wait
//!    returns to. A branch that tests no atomic instruction completes the call where the way
//!    into the tail begins instead, where only it leads, so that the calls going on pass no
//!    probe there.
//! 3. Then every way through the function is followed with what the thread has of the call:
//!    nothing yet, the call opened, or the call written. A way that would wait (a call, a
//!    system call) or return from outside a tail must have the call opened first: by the last
//!    completion it passed, where that branch goes the other way, or else by a probe where
//!    its way left the others (`Condition::Never`). A way that leaves the function by a jump
//!    with nothing on the stack (a tail call) gets today's probes there: the entry and the
//!    return probe, or the return probe alone when the call is open.
//! 4. The plan stands only if, on every way, the call is written exactly once, and never
//!    completed before it was opened where it waits.
//!
//! A function that only jumps elsewhere (glibc's `pthread_mutex_unlock`, to the code it shares
//! with the condition variables) is planned in the code it jumps to. Its probes there are hit
//! by the library's own calls of that code too, which the BPF side tells apart
//! ([`ProbeFlags::CALLED_INSIDE`]): each such site says where that code starts
//! ([`Site::shared_code`]), so that each traced function calling it has its call open then.
//!
//! A function where that fails keeps today's probes; `--list-probes` says why.

use std::{
    collections::{HashMap, HashSet},
    ops::Range,
};

use iced_x86::{
    ConditionCode, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory,
    Mnemonic, OpKind, Register, UsedMemory,
};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable};
use tracer_common::{
    Category, Completion, Condition, EVENTS, EventDef, Field, FoundInRax, MUTEX_RECURSIVE,
    MUTEX_TYPE_MASK, ObjectRegister, Outcome, ProbeFlags, TypeRegister,
};

use super::{
    placement,
    slow_path::{self, PathState, REGISTERS, StackChange, register_index},
};

/// The C library's functions that never return, whose calls end a way through a function
/// (an assertion that fails).
pub const NEVER_RETURN: [&str; 6] = [
    "__assert_fail",
    "abort",
    "__libc_fatal",
    "__stack_chk_fail",
    "__fortify_fail",
    "__chk_fail",
];

/// The PLT stubs (`.plt`, `.plt.sec`) through which the library calls [`NEVER_RETURN`]'s
/// functions in another library (glibc 2.31's libpthread calls libc's `__libc_fatal`), by file
/// offset: each stub's `jmp *slot(%rip)` reads a GOT slot that a dynamic relocation fills with
/// one of them.
pub fn never_returning_plt_stubs(image: &[u8]) -> HashSet<u64> {
    /// A PLT entry's size on x86-64, with or without IBT's `.plt.sec`.
    const ENTRY: usize = 16;
    let Ok(file) = object::File::parse(image) else {
        return HashSet::new();
    };
    let (Some(symbols), Some(relocations)) =
        (file.dynamic_symbol_table(), file.dynamic_relocations())
    else {
        return HashSet::new();
    };
    let slots: HashSet<u64> = relocations
        .filter_map(|(slot, relocation)| match relocation.target() {
            object::RelocationTarget::Symbol(index) => {
                let name = symbols.symbol_by_index(index).ok()?.name().ok()?;
                NEVER_RETURN.contains(&name).then_some(slot)
            }
            _ => None,
        })
        .collect();
    let mut stubs = HashSet::new();
    for section in file.sections() {
        let (Ok(".plt" | ".plt.sec"), Some((file_start, _)), Ok(code)) =
            (section.name(), section.file_range(), section.data())
        else {
            continue;
        };
        for (n, entry) in code.chunks(ENTRY).enumerate() {
            let at = section.address() + (n * ENTRY) as u64;
            let mut decoder = Decoder::with_ip(64, entry, at, DecoderOptions::NONE);
            let jumps_through_slot = decoder.iter().take(2).any(|i| {
                i.mnemonic() == Mnemonic::Jmp
                    && i.is_ip_rel_memory_operand()
                    && slots.contains(&i.ip_rel_memory_address())
            });
            if jumps_through_slot {
                stubs.insert(file_start + (n * ENTRY) as u64);
            }
        }
    }
    stubs
}

/// glibc's byte that says whether the process has only ever had one thread ([`Processes`]).
pub const SINGLE_THREADED_FLAG: &str = "__libc_single_threaded";

/// How many instructions of a function are walked at most (glibc's mutex lock is about 700).
const MAX_INSTRUCTIONS: usize = 4096;
/// How many instructions a tail has at most, on any way through it.
const MAX_TAIL: usize = 48;
/// How many times the plan is revised (a probe added or made to open the call) at most.
const MAX_REVISIONS: usize = 32;
/// How many instructions a completion is moved on at most to reach one the kernel emulates.
const MAX_SLIDE: usize = 4;

/// A probe of a proved plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    /// Where it goes (an address in the library's file offsets).
    pub offset: u64,
    /// Bytes pushed since the function's entry: its return address is at `[rsp + this]`.
    pub stack_offset: u16,
    /// The register that holds the call's object there.
    pub object_register: ObjectRegister,
    pub role: Role,
    /// The code the site lies in, when that is not the function's own but code it jumps to,
    /// which the library's other functions call too.
    pub shared_code: Option<SharedCode>,
    /// The processes it is for.
    pub processes: Processes,
}

/// Which processes a site of a plan is for. glibc takes ways of its own while a process has
/// one thread, and never again once it has made a second (it clears `__libc_single_threaded`
/// then, for good); a completion there is on the branch to that way in a process with one
/// thread, where its probe is emulated, and on the way itself in the others, which never pass
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Processes {
    /// Every process.
    Every,
    /// A process that has one thread: its own probes, dropped once it has a second.
    SingleThreaded,
    /// A process that has had a second thread, and every process through shared probes.
    Threaded,
}

/// Code a function only jumps to ([`only_jumps_to`]), as far as its plan walked it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedCode {
    /// Where the function jumps.
    pub start: u64,
    /// The lowest address walked there, and the end of the highest instruction walked there.
    pub walked: (u64, u64),
}

impl SharedCode {
    /// Whether `address` lies in the code walked there.
    pub fn contains(&self, address: u64) -> bool {
        (self.walked.0..self.walked.1).contains(&address)
    }
}

/// What a probe of the plan does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Writes the call whole, or completes it, or opens it ([`Completion`]).
    Completes(Completion),
    /// The entry and return probes of today's placement, on a tail call with nothing pushed.
    WholeCall,
    /// A return probe alone, on a tail call reached with the call open.
    ReturnOnly,
}

/// What the thread has of the call at a point of a way through the function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Held {
    Nothing,
    Open,
    Written,
}

/// How an instruction ends, for the walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// Goes on to the next instruction.
    Next,
    /// A conditional branch: to its target, or on.
    Branches { target: u64 },
    /// A jump inside the function.
    Jumps { target: u64 },
    /// A call that returns (to the next instruction): of a function that waits on a futex
    /// (or one that cannot be told), or not.
    Calls { waits: bool },
    /// A system call.
    SystemCall,
    /// `ret`.
    Returns,
    /// A jump out of the function with nothing pushed: a tail call.
    TailCall,
    /// Goes nowhere: a call of a function that does not return, `ud2`, `hlt`.
    Stops,
}

struct Node {
    instruction: Instruction,
    /// The kernel takes a probe on it (no lock prefix).
    probed_by_kernel: bool,
    /// The kernel emulates it when probed: no single step, whose trap costs as much again.
    emulated_by_kernel: bool,
    /// Bytes pushed since the entry, before it runs.
    depth: u64,
    end: End,
    /// Where it goes on to.
    successors: Vec<u64>,
}

/// A tail's outcome ([`Walk::tail`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tail {
    Returns {
        outcome: Outcome,
        /// It stores to memory other than the stack before returning.
        stores: bool,
    },
    /// Every way from here stops (an assertion that fails).
    Stops,
    No,
}

/// What a tail's stores to memory mean for a completion before them, by what the event's
/// return half reads of the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoresAfter {
    /// It reads the object as the call left it: code that stores is no tail, so that a
    /// completion comes after the call's stores.
    NoTail,
    /// It reads a recursive mutex's count, which the BPF side counts
    /// ([`Completion::stores_after`]).
    Counted,
    /// It reads nothing of the object after the call.
    Irrelevant,
}

impl StoresAfter {
    fn of(flags: ProbeFlags) -> StoresAfter {
        match (
            flags.has(ProbeFlags::OBJECT_AT_RETURN),
            flags.has(ProbeFlags::ONLY_IF_RECURSIVE),
        ) {
            (true, false) => StoresAfter::NoTail,
            (_, true) => StoresAfter::Counted,
            (false, false) => StoresAfter::Irrelevant,
        }
    }
}

/// A planned probe, by where it goes, before the plan is proved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Planned {
    /// Completes the call: on every hit (`into` None), or on the way to `into`.
    Completes {
        into: Option<u64>,
        outcome: Outcome,
        stores_after: bool,
        opens_otherwise: bool,
        may_be_open: bool,
        /// Reached with nothing of the call: it writes the call whole, or opens it, from the
        /// registers (else it completes what was opened, and needs no object).
        reached_with_nothing: bool,
    },
    /// Opens the call on every hit ([`Condition::Never`]).
    Opens,
    WholeCall,
    ReturnOnly,
}

/// Why a way through the function needs the plan revised.
#[derive(Clone, Copy)]
enum Revision {
    /// Open the call at the completion at this address, where it goes the other way.
    OpenOtherwise(u64),
    /// Open the call on every hit of this address.
    OpenAt(u64),
    /// Put today's probes (or the return probe alone) on this tail call.
    TailCall(u64, Held),
    /// Complete the open call on this `ret`.
    CloseAt(u64),
}

/// What the plan needs to know of the library's functions.
pub struct Library {
    /// Those that never return ([`NEVER_RETURN`]).
    pub stops: HashSet<u64>,
    /// Where its named functions start (a jump to one is a tail call).
    pub named: HashSet<u64>,
    /// Where a mutex's type is in its object, for glibc's mutexes (whose fast paths test
    /// it): a completion of a normal mutex's call, or of an unlock whose type a register
    /// holds, then needs no copy of the object ([`Completion::object_from_rax`]).
    pub mutex_kind_offset: Option<i64>,
    /// Where glibc's `__libc_single_threaded` is, as the code addresses it (its address
    /// relative to the code's file offsets): a branch on it is planned both ways
    /// ([`Processes`]).
    pub single_threaded_flag: Option<u64>,
}

/// The plan of `event`'s function at `entry` (`size` bytes) in `image` (a library's bytes at
/// their file offsets). An error says why none is proved.
pub fn plan(
    image: &[u8],
    entry: u64,
    size: u64,
    library: &Library,
    event: &EventDef,
) -> Result<Vec<Site>, String> {
    let flags = event.flags;
    let mut walk = Walk::new(image, entry, size, library, flags.has(ProbeFlags::ERRNO))?;
    if event.category == Category::Mutex {
        walk.mutex_kind_offset = library.mutex_kind_offset;
        walk.type_from_register = reads_only_lock_word_and_type(event);
    }
    let tails = walk.tails(StoresAfter::of(flags));
    if matches!(tails.get(&entry), Some(Tail::Returns { .. })) {
        return Err("it returns without a decision: nothing to complete".into());
    }
    let mut planned = walk.completions(&tails)?;
    if !planned
        .values()
        .any(|p| matches!(p, Planned::Completes { .. }))
    {
        return Err("no branch into code that returns a known value".into());
    }
    for _ in 0..MAX_REVISIONS {
        match walk.follow(&mut planned)? {
            None => {
                let processes = walk.complete_past_checks(&mut planned, &tails);
                walk.complete_where_emulated(&mut planned, &tails);
                walk.open_where_emulated(&mut planned, &tails);
                return walk.sites(&planned, &processes);
            }
            Some(revision) => walk.revise(&mut planned, revision)?,
        }
    }
    Err("the plan did not settle".into())
}

/// The plan of `event`'s function at `entry` when its one record can be written whole at its
/// entry: the record reads nothing at the return but the value returned, and every way
/// through the function returns the same known value (glibc's rwlock unlock returns 0,
/// whether it wakes a waiter or not). Its one probe goes where the entry's would (`probe`:
/// its address, and the bytes pushed there), past instructions that leave what the record
/// reads intact. An error says why not.
pub fn whole_at_entry(
    image: &[u8],
    entry: u64,
    size: u64,
    library: &Library,
    probe: (u64, u16),
) -> Result<Vec<Site>, String> {
    let walk = Walk::new(image, entry, size, library, false)?;
    if walk.shared_code.is_some() {
        return Err("it jumps to code the library's other functions share".into());
    }
    let outcome = walk.one_outcome(&walk.tails(StoresAfter::Irrelevant))?;
    Ok(vec![Site {
        offset: probe.0,
        stack_offset: probe.1,
        object_register: ObjectRegister::Rdi,
        role: Role::Completes(Completion::always(outcome)),
        shared_code: None,
        processes: Processes::Every,
    }])
}

/// Where the code at `entry` (`size` bytes) jumps, if it is nothing but a jump elsewhere after
/// setting registers (the stack as it was: the code jumped to finds the return address where
/// its callers' is): to code no named function starts (`named`).
fn only_jumps_to(image: &[u8], entry: u64, size: u64, named: &HashSet<u64>) -> Option<u64> {
    let mut ip = entry;
    while ip < entry + size {
        let instruction = slow_path::decode_one(image, ip)?;
        match instruction.flow_control() {
            FlowControl::Next
                if matches!(slow_path::stack_change(&instruction), StackChange::None) =>
            {
                ip = instruction.next_ip();
            }
            FlowControl::UnconditionalBranch => {
                return slow_path::near_target(&instruction).filter(|target| {
                    !(entry..entry + size).contains(target) && !named.contains(target)
                });
            }
            _ => return None,
        }
    }
    None
}

/// A function's code, walked from its entry.
struct Walk {
    entry: u64,
    /// The function's own code.
    own: Range<u64>,
    /// The code the function only jumps to ([`only_jumps_to`]), walked as its own.
    shared_code: Option<SharedCode>,
    /// The event reads errno after a call that returns -1: a tail must say which.
    errno_matters: bool,
    /// The call's object is a glibc mutex, whose type is this many bytes into it.
    mutex_kind_offset: Option<i64>,
    /// [`Library::single_threaded_flag`].
    single_threaded_flag: Option<u64>,
    /// The call's records read nothing of the mutex but its lock word and its type: where
    /// the type is not proved, a register that holds it serves ([`Completion::type_register`]).
    type_from_register: bool,
    nodes: HashMap<u64, Node>,
    /// How many ways lead to each instruction (edges from others).
    predecessors: HashMap<u64, usize>,
    /// The registers that hold the object at each instruction on every way there.
    object_masks: HashMap<u64, u32>,
}

impl Walk {
    fn new(
        image: &[u8],
        entry: u64,
        size: u64,
        library: &Library,
        errno_matters: bool,
    ) -> Result<Self, String> {
        let own = entry..entry + size.max(1);
        let shared_code = only_jumps_to(image, entry, size, &library.named);
        // The code walked: the function's own, the code it only jumps to, and from there the
        // near jumps to code no named function starts (not another function's tail call).
        let follows = |from: u64, target: u64| {
            own.contains(&target)
                || shared_code == Some(target)
                || !own.contains(&from)
                    && !library.named.contains(&target)
                    && from.abs_diff(target) <= slow_path::LOCAL_JUMP_BYTES
        };
        // A function's code does not fall off its end: a call that would return there never
        // returns (an assertion's failure, called by an internal name). The code it jumps to
        // ends where padding after a call leads to a function's start (padding inside it
        // aligns a loop, which the call returns into).
        let falls_off = |from: u64, next: u64| {
            if own.contains(&from) {
                return !own.contains(&next);
            }
            let mut at = next;
            while let Some(padding) = slow_path::decode_one(image, at)
                .filter(|i| matches!(i.mnemonic(), Mnemonic::Nop | Mnemonic::Int3))
            {
                at = padding.next_ip();
            }
            at != next && (at == entry || library.named.contains(&at))
        };
        let mut stopping: HashMap<u64, bool> = HashMap::new();
        let mut stops = |target: u64| {
            *stopping.entry(target).or_insert_with(|| {
                library.stops.contains(&target) || never_returns(image, target, &library.stops)
            })
        };
        let mut waiting: HashMap<u64, bool> = HashMap::new();
        let mut waits = |target: u64| {
            *waiting
                .entry(target)
                .or_insert_with(|| slow_path::waits(image, target, &library.named))
        };
        let mut nodes: HashMap<u64, Node> = HashMap::new();
        let mut predecessors: HashMap<u64, usize> = HashMap::new();
        let mut object_masks: HashMap<u64, u32> = HashMap::new();
        let mut states: HashMap<u64, PathState> = HashMap::new();
        let mut pending = vec![(entry, 0u64, PathState::at_entry())];
        while let Some((ip, depth, mut state)) = pending.pop() {
            let arriving = state.object_mask();
            if let Some(node) = nodes.get(&ip) {
                if node.depth != depth {
                    return Err(format!(
                        "{} is reached with {} and {depth} bytes pushed",
                        relative(ip, entry),
                        node.depth
                    ));
                }
                let mask = object_masks[&ip];
                if mask & arriving == mask {
                    continue;
                }
                // A way in brings the object in fewer registers: walked on again with those.
                let narrowed = mask & arriving;
                object_masks.insert(ip, narrowed);
                state = states[&ip];
                state.keep_object_only_in(narrowed);
            } else {
                if nodes.len() >= MAX_INSTRUCTIONS {
                    return Err("too much code to follow".into());
                }
                let instruction = slow_path::decode_one(image, ip)
                    .ok_or_else(|| format!("{} does not decode", relative(ip, entry)))?;
                let (end, successors) = ending(
                    &instruction,
                    depth,
                    &follows,
                    &falls_off,
                    &mut stops,
                    &mut waits,
                )
                .map_err(|why| format!("{why} at {}", relative(ip, entry)))?;
                for successor in &successors {
                    *predecessors.entry(*successor).or_default() += 1;
                }
                nodes.insert(
                    ip,
                    Node {
                        instruction,
                        probed_by_kernel: placement::kernel_accepts(image, ip),
                        emulated_by_kernel: placement::kernel_emulates(image, ip),
                        depth,
                        end,
                        successors,
                    },
                );
                object_masks.insert(ip, arriving);
                states.insert(ip, state);
            }
            let node = &nodes[&ip];
            let mut after = state;
            let mut depth_after = depth;
            match node.end {
                End::Calls { .. } => after.after_call(),
                End::SystemCall => after.after_syscall(),
                _ => {
                    after.note(&node.instruction, depth);
                    match slow_path::stack_change(&node.instruction) {
                        StackChange::None => {}
                        StackChange::By(bytes) => {
                            depth_after = depth.checked_add_signed(bytes).ok_or_else(|| {
                                format!("{} pops more than was pushed", relative(ip, entry))
                            })?;
                        }
                        StackChange::Unknown => {
                            return Err(format!(
                                "{} moves the stack pointer by an unknown amount",
                                relative(ip, entry)
                            ));
                        }
                    }
                }
            }
            for &successor in &node.successors {
                pending.push((successor, depth_after, after));
            }
        }
        let shared_code = shared_code.map(|start| {
            let outside = || nodes.iter().filter(|(ip, _)| !own.contains(ip));
            SharedCode {
                start,
                walked: (
                    outside().map(|(ip, _)| *ip).min().unwrap_or(start),
                    outside()
                        .map(|(_, n)| n.instruction.next_ip())
                        .max()
                        .unwrap_or(start),
                ),
            }
        });
        Ok(Walk {
            entry,
            own,
            shared_code,
            errno_matters,
            mutex_kind_offset: None,
            single_threaded_flag: library.single_threaded_flag,
            type_from_register: false,
            nodes,
            predecessors,
            object_masks,
        })
    }

    /// Where `ip` is in the function, for a message.
    fn at(&self, ip: u64) -> String {
        relative(ip, self.entry)
    }

    /// The value every way from the entry returns: each reaches a tail that returns that
    /// value, or stops; none returns, or leaves the function, before a tail.
    fn one_outcome(&self, tails: &HashMap<u64, Tail>) -> Result<Outcome, String> {
        let mut outcomes: Vec<Outcome> = Vec::new();
        let mut seen = HashSet::from([self.entry]);
        let mut pending = vec![self.entry];
        while let Some(ip) = pending.pop() {
            match tails.get(&ip) {
                Some(Tail::Returns { outcome, .. }) => {
                    if !outcomes.contains(outcome) {
                        outcomes.push(*outcome);
                    }
                    continue;
                }
                Some(Tail::Stops) => continue,
                _ => {}
            }
            let node = &self.nodes[&ip];
            match node.end {
                End::Returns => {
                    return Err(format!("it returns what is not known at {}", self.at(ip)));
                }
                End::TailCall => {
                    return Err(format!("it passes the call on at {}", self.at(ip)));
                }
                _ => {}
            }
            for &successor in &node.successors {
                if seen.insert(successor) {
                    pending.push(successor);
                }
            }
        }
        match outcomes[..] {
            [outcome @ Outcome::Returns(_)] => Ok(outcome),
            [Outcome::Fails(_) | Outcome::ReturnsRegister(_)] => {
                Err("it returns no value known at its entry".into())
            }
            [] => Err("it never returns".into()),
            _ => Err("it returns more than one value".into()),
        }
    }

    /// Each instruction's [`Tail`], its stores taken as `stores_after` says.
    fn tails(&self, stores_after: StoresAfter) -> HashMap<u64, Tail> {
        self.nodes
            .keys()
            .map(|&ip| {
                let mut on_way = HashSet::new();
                let tail = match self.tail(ip, Values::at_start(), None, &mut on_way, 0) {
                    Tail::Returns { stores: true, .. } if stores_after == StoresAfter::NoTail => {
                        Tail::No
                    }
                    Tail::Returns { outcome, stores } => Tail::Returns {
                        outcome,
                        stores: stores && stores_after == StoresAfter::Counted,
                    },
                    tail => tail,
                };
                (ip, tail)
            })
            .collect()
    }

    /// The outcome of every way from `ip`, with `values` in registers and `errno` stored so
    /// far.
    fn tail(
        &self,
        ip: u64,
        mut values: Values,
        mut errno: Option<i64>,
        on_way: &mut HashSet<u64>,
        steps: usize,
    ) -> Tail {
        let mut ip = ip;
        let mut stores = false;
        let mut steps = steps;
        let mut entered = Vec::new();
        let tail = loop {
            steps += 1;
            let Some(node) = self.nodes.get(&ip) else {
                break Tail::No;
            };
            if steps > MAX_TAIL || !on_way.insert(ip) {
                break Tail::No;
            }
            entered.push(ip);
            let instruction = &node.instruction;
            if is_atomic(instruction) {
                break Tail::No;
            }
            match node.end {
                End::Stops => break Tail::Stops,
                End::Calls { .. } | End::SystemCall | End::TailCall => break Tail::No,
                End::Returns => {
                    let outcome = match (values.rax(), errno) {
                        (Value::Constant(-1), Some(errno))
                            if (0..=i64::from(Outcome::MAX_ERRNO)).contains(&errno) =>
                        {
                            Some(Outcome::Fails(errno as u8))
                        }
                        (Value::Constant(value), _)
                            if (0..=i64::from(Outcome::MAX_RETURNED)).contains(&value) =>
                        {
                            Some(Outcome::Returns(value as u8))
                        }
                        // A value known only at run time, which could be -1 with an errno
                        // the tail sets: not where errno matters.
                        (Value::Initial(index), None) if !self.errno_matters => {
                            slow_path::object_register_in(1 << index).map(Outcome::ReturnsRegister)
                        }
                        _ => None,
                    };
                    break match outcome {
                        Some(outcome) => Tail::Returns { outcome, stores },
                        None => Tail::No,
                    };
                }
                _ => {}
            }
            if let Some(stored) = errno_stored(instruction) {
                errno = Some(stored);
            } else if placement::writes_memory_off_stack(
                InstructionInfoFactory::new().info(instruction),
            ) {
                stores = true;
            }
            values.note(instruction);
            match node.end {
                End::Branches { target } => {
                    let next = instruction.next_ip();
                    let taken = self.tail(target, values, errno, on_way, steps);
                    let on = self.tail(next, values, errno, on_way, steps);
                    break match (taken, on) {
                        (Tail::No, _) | (_, Tail::No) => Tail::No,
                        (Tail::Stops, other) | (other, Tail::Stops) => with_stores(other, stores),
                        (
                            Tail::Returns {
                                outcome: a,
                                stores: a_stores,
                            },
                            Tail::Returns {
                                outcome: b,
                                stores: b_stores,
                            },
                        ) if a == b => Tail::Returns {
                            outcome: a,
                            stores: stores || a_stores || b_stores,
                        },
                        _ => Tail::No,
                    };
                }
                End::Jumps { target } => ip = target,
                _ => ip = instruction.next_ip(),
            }
        };
        for ip in entered {
            on_way.remove(&ip);
        }
        with_stores(tail, stores)
    }

    /// A completion on each way into a tail from code that is none.
    fn completions(&self, tails: &HashMap<u64, Tail>) -> Result<HashMap<u64, Planned>, String> {
        let in_tail = |ip: &u64| match tails.get(ip) {
            Some(Tail::Returns { outcome, stores }) => Some((*outcome, *stores)),
            _ => None,
        };
        let completes =
            |into: Option<u64>, (outcome, stores_after): (Outcome, bool)| Planned::Completes {
                into,
                outcome,
                stores_after,
                opens_otherwise: false,
                may_be_open: false,
                reached_with_nothing: false,
            };
        let mut planned = HashMap::new();
        let mut ips: Vec<u64> = self.nodes.keys().copied().collect();
        ips.sort_unstable();
        for ip in ips {
            let node = &self.nodes[&ip];
            if in_tail(&ip).is_some() || matches!(tails.get(&ip), Some(Tail::Stops)) {
                continue;
            }
            let entering: Vec<(u64, (Outcome, bool))> = node
                .successors
                .iter()
                .filter_map(|s| Some((*s, in_tail(s)?)))
                .collect();
            let Some(&(first, first_tail)) = entering.first() else {
                continue;
            };
            let alone = |target: u64| self.predecessors.get(&target) == Some(&1);
            match node.end {
                End::Jumps { .. } => {
                    planned.insert(ip, completes(None, first_tail));
                }
                End::Branches { .. } => {
                    let both_same = entering.len() == 2 && entering[0].1.0 == entering[1].1.0;
                    if both_same {
                        planned.insert(ip, completes(None, first_tail));
                        continue;
                    }
                    if flag_of(&node.instruction).is_some() {
                        planned.insert(ip, completes(Some(first), first_tail));
                        // The other way enters another tail: its first instruction completes.
                        if let Some(&(second, second_tail)) = entering.get(1) {
                            if !alone(second) {
                                return Err(format!(
                                    "{}: both ways return, differently, into shared code",
                                    self.at(ip)
                                ));
                            }
                            planned.insert(second, completes(None, second_tail));
                        }
                        continue;
                    }
                    for (into, tail) in entering {
                        if !alone(into) {
                            return Err(format!(
                                "{}: a branch on a flag the probe cannot test ({}) enters \
                                 shared code",
                                self.at(ip),
                                mnemonic_text(&node.instruction)
                            ));
                        }
                        planned.insert(into, completes(None, tail));
                    }
                }
                // A wait returns into a tail: completed where it returns, if nothing else
                // comes there.
                End::Calls { .. } | End::SystemCall | End::Next => {
                    if !alone(first) {
                        return Err(format!(
                            "{}: the code after it is reached from elsewhere too",
                            self.at(ip)
                        ));
                    }
                    planned.insert(first, completes(None, first_tail));
                }
                End::Returns | End::TailCall | End::Stops => {}
            }
        }
        Ok(planned)
    }

    /// Follows every way through the function with what the thread has of the call. `None`
    /// when each way writes the call exactly once; else the first revision a way needs. Marks
    /// the completions reached with the call open, and the tail calls reached so.
    fn follow(&self, planned: &mut HashMap<u64, Planned>) -> Result<Option<Revision>, String> {
        // Revisions open the call on more ways: what reached a completion with nothing
        // before may no longer.
        for planned in planned.values_mut() {
            if let Planned::Completes {
                reached_with_nothing,
                ..
            } = planned
            {
                *reached_with_nothing = false;
            }
        }
        let mut seen: HashSet<(u64, Held)> = HashSet::new();
        // Each way: where it is, what it has, the last completion it passed the other way
        // with nothing held, and the last place it left the others, each with how far along
        // the way it was.
        let mut ways = vec![(
            self.entry,
            Held::Nothing,
            None::<(u64, usize)>,
            None::<(u64, usize)>,
            0,
        )];
        while let Some((ip, held, passed, left, along)) = ways.pop() {
            if !seen.insert((ip, held)) {
                continue;
            }
            let node = &self.nodes[&ip];
            let mut held = held;
            let mut passed = passed;
            if let Some(Planned::Completes {
                reached_with_nothing,
                ..
            }) = planned.get_mut(&ip)
                && held == Held::Nothing
            {
                // Written whole here, it needs the object: where no register holds it (a
                // call came between), the call is opened before.
                if slow_path::object_register_in(self.object_masks[&ip]).is_none() {
                    return Ok(Some(self.opening(passed, left, ip)?));
                }
                *reached_with_nothing = true;
            }
            match planned.get_mut(&ip) {
                Some(Planned::Completes {
                    into: None,
                    may_be_open,
                    ..
                }) => {
                    match held {
                        Held::Written => {
                            return Err(format!(
                                "{} completes a call already written",
                                self.at(ip)
                            ));
                        }
                        Held::Open => *may_be_open = true,
                        Held::Nothing => {}
                    }
                    held = Held::Written;
                }
                Some(Planned::Opens) => {
                    if held == Held::Written {
                        return Err(format!("{} opens a call already written", self.at(ip)));
                    }
                    held = Held::Open;
                }
                Some(Planned::WholeCall) => match held {
                    Held::Nothing => held = Held::Written,
                    Held::Open => return Err(reached_both_ways(&self.at(ip))),
                    Held::Written => {
                        return Err(format!("{} passes on a call already written", self.at(ip)));
                    }
                },
                Some(Planned::ReturnOnly) => match held {
                    Held::Open => held = Held::Written,
                    _ => return Ok(Some(Revision::TailCall(ip, held))),
                },
                _ => {}
            }
            match node.end {
                End::Returns => match held {
                    Held::Written => continue,
                    Held::Open => return Ok(Some(Revision::CloseAt(ip))),
                    Held::Nothing => return Ok(Some(self.opening(passed, left, ip)?)),
                },
                End::TailCall => match (planned.get(&ip), held) {
                    (None, Held::Nothing | Held::Open) => {
                        return Ok(Some(Revision::TailCall(ip, held)));
                    }
                    _ => continue,
                },
                End::Calls { waits: true } | End::SystemCall if held == Held::Nothing => {
                    return Ok(Some(self.opening(passed, left, ip)?));
                }
                // A spin waits too: the call's time runs from before it.
                _ if held == Held::Nothing && node.instruction.mnemonic() == Mnemonic::Pause => {
                    return Ok(Some(self.opening(passed, left, ip)?));
                }
                End::Stops => continue,
                _ => {}
            }
            let branches = matches!(node.end, End::Branches { .. } | End::Jumps { .. });
            for &next in &node.successors {
                let mut next_held = held;
                if let Some(Planned::Completes {
                    into: Some(into),
                    opens_otherwise,
                    may_be_open,
                    ..
                }) = planned.get_mut(&ip)
                {
                    if next == *into {
                        match held {
                            Held::Written => {
                                return Err(format!(
                                    "{} completes a call already written",
                                    self.at(ip)
                                ));
                            }
                            Held::Open => *may_be_open = true,
                            Held::Nothing => {}
                        }
                        next_held = Held::Written;
                    } else if held == Held::Nothing {
                        match *opens_otherwise {
                            true => next_held = Held::Open,
                            false => passed = Some((ip, along)),
                        }
                    }
                }
                let opens_there = self.predecessors.get(&next) == Some(&1)
                    && self.nodes.get(&next).is_some_and(|n| n.probed_by_kernel);
                let left = match branches && opens_there {
                    true => Some((next, along + 1)),
                    false => left,
                };
                ways.push((next, next_held, passed, left, along + 1));
            }
        }
        Ok(None)
    }

    /// How a way that reached `ip` with nothing of the call gets it opened: where it last left
    /// the other ways, unless the last completion it passed the other way is no earlier than
    /// that (the branch that left them), so that the ways that do not wait pass no probe more.
    fn opening(
        &self,
        passed: Option<(u64, usize)>,
        left: Option<(u64, usize)>,
        ip: u64,
    ) -> Result<Revision, String> {
        match (passed, left) {
            (Some((completion, at)), Some((_, left_at))) if at + 1 >= left_at => {
                Ok(Revision::OpenOtherwise(completion))
            }
            (_, Some((left, _))) => Ok(Revision::OpenAt(left)),
            (Some((completion, _)), None) => Ok(Revision::OpenOtherwise(completion)),
            (None, None) => Err(format!(
                "{} waits or returns on a way that meets nothing that could open the call",
                self.at(ip)
            )),
        }
    }

    fn revise(
        &self,
        planned: &mut HashMap<u64, Planned>,
        revision: Revision,
    ) -> Result<(), String> {
        match revision {
            Revision::OpenOtherwise(ip) => match planned.get_mut(&ip) {
                Some(Planned::Completes {
                    opens_otherwise, ..
                }) if !*opens_otherwise => *opens_otherwise = true,
                _ => return Err(format!("{} cannot open the call", self.at(ip))),
            },
            Revision::OpenAt(ip) => match planned.get(&ip) {
                None => {
                    planned.insert(ip, Planned::Opens);
                }
                Some(_) => {
                    return Err(format!(
                        "{} already has a probe to open the call",
                        self.at(ip)
                    ));
                }
            },
            Revision::TailCall(ip, held) => {
                let role = match (planned.get(&ip), held) {
                    (None, Held::Nothing) => Planned::WholeCall,
                    (None, Held::Open) => Planned::ReturnOnly,
                    _ => return Err(reached_both_ways(&self.at(ip))),
                };
                planned.insert(ip, role);
            }
            Revision::CloseAt(ip) => match planned.get(&ip) {
                None => {
                    planned.insert(
                        ip,
                        Planned::Completes {
                            into: None,
                            outcome: Outcome::ReturnsRegister(ObjectRegister::Rax),
                            stores_after: false,
                            opens_otherwise: false,
                            may_be_open: true,
                            reached_with_nothing: false,
                        },
                    );
                }
                Some(_) => {
                    return Err(format!(
                        "the return at {} is shared with a completion",
                        self.at(ip)
                    ));
                }
            },
        }
        Ok(())
    }

    /// The probes of a proved plan.
    fn sites(
        &self,
        planned: &HashMap<u64, Planned>,
        processes: &HashMap<u64, Processes>,
    ) -> Result<Vec<Site>, String> {
        let kind_facts = self
            .mutex_kind_offset
            .map(|offset| self.kind_facts(offset))
            .unwrap_or_default();
        // Whose record reads the count.
        let not_recursive_at = |ip: u64| {
            kind_facts
                .get(&ip)
                .is_some_and(|facts| facts.types & 1 << MUTEX_RECURSIVE == 0)
        };
        let type_register_at = |ip: u64| {
            let facts = kind_facts.get(&ip).filter(|_| self.type_from_register)?;
            Completion::TYPE_REGISTERS.into_iter().find(|&register| {
                let held = facts.in_register[register_index(slow_path::decoded_register(register))];
                held & MUTEX_TYPE_MASK == MUTEX_TYPE_MASK
            })
        };
        let mut sites = Vec::new();
        let mut planned: Vec<(&u64, &Planned)> = planned.iter().collect();
        planned.sort_by_key(|(ip, _)| **ip);
        for (&ip, planned) in planned {
            let node = &self.nodes[&ip];
            let at = self.at(ip);
            let needs_object = !matches!(
                planned,
                Planned::Completes {
                    reached_with_nothing: false,
                    ..
                } | Planned::ReturnOnly
            );
            let object_register = match slow_path::object_register_in(self.object_masks[&ip]) {
                Some(register) => register,
                None if !needs_object => ObjectRegister::Rdi,
                None => return Err(format!("the object is in no register at {at}")),
            };
            let stack_offset = self
                .stack_offset(ip)
                .ok_or_else(|| format!("too much is pushed at {at}"))?;
            let role = match *planned {
                Planned::Completes {
                    into,
                    outcome,
                    stores_after,
                    opens_otherwise,
                    may_be_open,
                    ..
                } => {
                    let (condition, when_set) = match into {
                        None => (Condition::Always, false),
                        Some(into) => completing_flag(&node.instruction, into)
                            .ok_or_else(|| format!("no flag says the way at {at}"))?,
                    };
                    let found_in_rax = self.found_in_rax(ip, object_register);
                    let from_rax =
                        found_in_rax == FoundInRax::Word && outcome == Outcome::Returns(0);
                    let not_recursive = not_recursive_at(ip);
                    let type_register = match from_rax && !not_recursive {
                        true => type_register_at(ip),
                        false => None,
                    };
                    Role::Completes(Completion {
                        condition,
                        when_set,
                        outcome: outcome.pack(),
                        may_be_open,
                        opens_otherwise,
                        found_in_rax,
                        stores_after,
                        // A call that succeeded on a mutex not recursive: the lock word is
                        // what its atomic instruction found; a lock found it free, with no
                        // owner. Or an unlock whose type a register holds.
                        object_from_rax: from_rax && (not_recursive || type_register.is_some()),
                        type_register: type_register.map_or(TypeRegister::NONE, TypeRegister::of),
                    })
                }
                Planned::Opens => Role::Completes(Completion {
                    condition: Condition::Never,
                    opens_otherwise: true,
                    ..Completion::always(Outcome::Returns(0))
                }),
                // Its entry program reads the object where an entry finds it.
                Planned::WholeCall => {
                    if object_register != ObjectRegister::Rdi {
                        return Err(format!("the object is not in rdi at the tail call at {at}"));
                    }
                    Role::WholeCall
                }
                Planned::ReturnOnly => Role::ReturnOnly,
            };
            sites.push(Site {
                offset: ip,
                stack_offset,
                object_register,
                role,
                shared_code: self.shared_code.filter(|_| !self.own.contains(&ip)),
                processes: processes.get(&ip).copied().unwrap_or(Processes::Every),
            });
        }
        Ok(sites)
    }

    /// Per instruction, what every way from the entry knows of the mutex's type word
    /// (`offset` bytes into the object): the types it leaves possible (bit `t` for type `t`,
    /// [`MUTEX_TYPE_MASK`]), from what it tested, and which registers hold which of the
    /// word's bits. glibc loads `__kind`, masks it (`and $0x17f,%edx`) and
    /// branches on the result (`test %edx,%edx; jne other_types`, or `cmp $2,%eax; jne` for
    /// an error-checking mutex, whose lock then joins the normal one's). A way that stores
    /// through a register other than the object's, or at the word itself, or calls, knows
    /// nothing of it any more.
    fn kind_facts(&self, offset: i64) -> HashMap<u64, KindFacts> {
        let mut facts: HashMap<u64, KindFacts> = HashMap::from([(self.entry, KindFacts::NONE)]);
        let mut pending = vec![self.entry];
        let mut factory = InstructionInfoFactory::new();
        while let Some(ip) = pending.pop() {
            let node = &self.nodes[&ip];
            let before = facts[&ip];
            let mut after = before;
            match node.end {
                End::Calls { .. } | End::SystemCall => after = KindFacts::NONE,
                _ => after.note(
                    &node.instruction,
                    factory.info(&node.instruction),
                    self.object_masks[&ip],
                    offset,
                ),
            }
            for &next in &node.successors {
                let mut arriving = after;
                // The way on which the zero flag was set: the bits it tested are as compared.
                // (A `loope`/`loopne` also tests rcx: no conclusion.)
                let zero_flag_set = match node.instruction.condition_code() {
                    ConditionCode::e => next != node.instruction.next_ip(),
                    ConditionCode::ne => next == node.instruction.next_ip(),
                    _ => false,
                };
                if node.instruction.is_jcc_short_or_near() && zero_flag_set {
                    let (mask, value) = before.in_flags;
                    arriving.types &= types_where(mask, value);
                }
                // The library's other callers enter the shared code there with registers of
                // their own: what this function knew stays behind.
                if self.shared_code.is_some_and(|shared| shared.start == next) {
                    arriving = KindFacts::NONE;
                }
                let merged = match facts.get(&next) {
                    Some(known) => known.meet(&arriving),
                    None => arriving,
                };
                if facts.get(&next) != Some(&merged) {
                    facts.insert(next, merged);
                    pending.push(next);
                }
            }
        }
        facts
    }

    /// The atomic instruction whose outcome the code at `ip` tests, on the only way there:
    /// the last to set the flags before it, or the one before a compare or test of what it
    /// left; and whether `rax` still holds what it left there.
    fn atomic_before(&self, ip: u64) -> Option<(&Instruction, bool)> {
        /// How many instructions back the atomic one is looked for.
        const LOOKED_BACK: usize = 4;
        let mut at = ip;
        let mut compared = false;
        let mut written: Vec<Register> = Vec::new();
        let mut factory = InstructionInfoFactory::new();
        for _ in 0..LOOKED_BACK {
            if self.predecessors.get(&at) != Some(&1) {
                return None;
            }
            let previous = &self
                .nodes
                .values()
                .find(|n| {
                    n.instruction.next_ip() == at && n.successors == [at] && n.end == End::Next
                })?
                .instruction;
            let kept = |register: Register| !written.contains(&register.full_register());
            if is_atomic(previous) {
                // Its address's register must still hold the object; `rax` what it left.
                return kept(previous.memory_base()).then_some((previous, kept(Register::RAX)));
            }
            let sets_flags = previous.rflags_modified() != 0;
            match previous.mnemonic() {
                Mnemonic::Cmp | Mnemonic::Test if !compared => compared = true,
                _ if sets_flags => return None,
                _ => {}
            }
            written.extend(
                factory
                    .info(previous)
                    .used_registers()
                    .iter()
                    .filter(|r| placement::writes(r.access()))
                    .map(|r| r.register().full_register()),
            );
            at = previous.ip();
        }
        None
    }

    /// What `rax` holds of the object at a completion after an atomic instruction on its
    /// first bytes: what it found there. A locked `cmpxchg` leaves that in `rax` (when it
    /// succeeded, what it expected); an `xchg` in its register, when that is `rax`.
    fn found_in_rax(&self, ip: u64, object: ObjectRegister) -> FoundInRax {
        let Some((atomic, true)) = self.atomic_before(ip) else {
            return FoundInRax::Nothing;
        };
        let register = (0..atomic.op_count())
            .find(|&n| atomic.op_kind(n) == OpKind::Register)
            .map(|n| atomic.op_register(n));
        let found = match atomic.mnemonic() {
            Mnemonic::Cmpxchg if atomic.has_lock_prefix() => register,
            Mnemonic::Xchg => register.filter(|r| r.full_register() == Register::RAX),
            _ => None,
        };
        let on_object = (0..atomic.op_count()).any(|n| atomic.op_kind(n) == OpKind::Memory)
            && atomic.memory_index() == Register::None
            && atomic.memory_displacement64() == 0
            && slow_path::object_register_in(1 << register_index(atomic.memory_base()))
                == Some(object);
        match (on_object, found.map(Register::size)) {
            (true, Some(4)) => FoundInRax::Word,
            (true, Some(8)) => FoundInRax::DoubleWord,
            _ => FoundInRax::Nothing,
        }
    }

    /// Moves each completion on a branch that tests no atomic instruction's outcome (the
    /// lock's type, whether the process has threads) and opens nothing onto the first
    /// instruction of the way it completes, where only that branch leads: the calls that go
    /// on pass no probe there.
    ///
    /// A branch on glibc's `__libc_single_threaded` into a way where the completion cannot
    /// move on to an instruction the kernel emulates (the single-threaded unlock stores the
    /// lock word and returns) is planned both ways: the completion on the branch, emulated,
    /// for processes that have one thread, which take that way on every call; moved, for the
    /// others, which never take it and so pass no probe ([`Processes`]). Returns which sites
    /// are for which processes, where not all.
    fn complete_past_checks(
        &self,
        planned: &mut HashMap<u64, Planned>,
        tails: &HashMap<u64, Tail>,
    ) -> HashMap<u64, Processes> {
        let moves: Vec<(u64, u64, bool)> = planned
            .iter()
            .filter_map(|(&ip, p)| match *p {
                Planned::Completes {
                    into: Some(into),
                    opens_otherwise: false,
                    outcome,
                    ..
                } if self.atomic_before(ip).is_none()
                    && self.predecessors.get(&into) == Some(&1)
                    && !planned.contains_key(&into)
                    && self.nodes.get(&into).is_some_and(|n| n.probed_by_kernel) =>
                {
                    let both_ways = self.tests_single_threaded_flag(ip)
                        && !self.emulated_from(into, outcome, planned, tails);
                    Some((ip, into, both_ways))
                }
                _ => None,
            })
            .collect();
        let mut processes = HashMap::new();
        for (ip, into, both_ways) in moves {
            if both_ways {
                let kept = planned[&ip];
                move_completion(planned, ip, into, None);
                planned.insert(ip, kept);
                processes.insert(ip, Processes::SingleThreaded);
                processes.insert(into, Processes::Threaded);
            } else {
                move_completion(planned, ip, into, None);
            }
        }
        processes
    }

    /// Whether the branch at `ip` tests glibc's `__libc_single_threaded`: the instruction
    /// before it, on the only way there, compares that byte with 0.
    fn tests_single_threaded_flag(&self, ip: u64) -> bool {
        let Some(flag) = self.single_threaded_flag else {
            return false;
        };
        self.predecessors.get(&ip) == Some(&1)
            && self.nodes.values().any(|n| {
                let compare = &n.instruction;
                compare.next_ip() == ip
                    && n.end == End::Next
                    && compare.mnemonic() == Mnemonic::Cmp
                    && compare.is_ip_rel_memory_operand()
                    && compare.ip_rel_memory_address() == flag
                    && compare.op_count() == 2
                    && compare.op1_kind() == OpKind::Immediate8
                    && compare.immediate8() == 0
            })
    }

    /// Moves each completion on every hit (no condition) from an instruction the kernel
    /// single-steps on to the first it emulates in the straight code that follows, where
    /// nothing else leads, within the same tail (glibc's single-threaded lock stores the lock
    /// word, then jumps): the trap of the single step is saved on every such call. What the
    /// call stores on the way is then in the object the probe copies, and no longer counted
    /// after it (`stores_after`, from the tail where it lands).
    fn complete_where_emulated(
        &self,
        planned: &mut HashMap<u64, Planned>,
        tails: &HashMap<u64, Tail>,
    ) {
        let moves: Vec<(u64, u64, bool)> = planned
            .iter()
            .filter_map(|(&ip, p)| match *p {
                Planned::Completes {
                    into: None,
                    opens_otherwise: false,
                    outcome,
                    ..
                } => {
                    let (to, stores) = self.next_emulated(ip, Some(outcome), planned, tails)?;
                    Some((ip, to, stores))
                }
                _ => None,
            })
            .collect();
        for (ip, to, stores) in moves {
            move_completion(planned, ip, to, Some(stores));
        }
    }

    /// The bytes pushed since the entry at `ip`, as a site's cookie carries them (in 8 bits):
    /// none where more were pushed.
    fn stack_offset(&self, ip: u64) -> Option<u16> {
        let depth = self.nodes.get(&ip)?.depth;
        u16::try_from(depth).ok().filter(|&d| d <= 0xff)
    }

    /// Moves each opening on every hit from an instruction the kernel single-steps on to the
    /// first it emulates in the straight code that follows, where nothing else leads and a
    /// register still holds the object (musl's `sem_post` opens its call on the test of its
    /// waiters, before the branch on it): the call is opened a few instructions later, with
    /// the same object, and the trap of the single step is saved on every such call.
    fn open_where_emulated(&self, planned: &mut HashMap<u64, Planned>, tails: &HashMap<u64, Tail>) {
        let holds_object = |ip: u64| {
            let registers = self.object_masks.get(&ip).copied().unwrap_or(0);
            slow_path::object_register_in(registers).is_some() && self.stack_offset(ip).is_some()
        };
        let moves: Vec<(u64, u64)> = planned
            .iter()
            .filter(|(_, p)| matches!(p, Planned::Opens))
            .filter_map(|(&ip, _)| Some((ip, self.next_emulated(ip, None, planned, tails)?.0)))
            .filter(|&(_, to)| holds_object(to))
            .collect();
        for (from, to) in moves {
            planned.remove(&from);
            planned.insert(to, Planned::Opens);
        }
    }

    /// Whether a completion at `ip`, in a tail that returns `outcome`, is taken by the kernel
    /// without a single step: `ip` is emulated, or the completion can move on to an
    /// instruction that is ([`Walk::next_emulated`]).
    fn emulated_from(
        &self,
        ip: u64,
        outcome: Outcome,
        planned: &HashMap<u64, Planned>,
        tails: &HashMap<u64, Tail>,
    ) -> bool {
        self.nodes.get(&ip).is_some_and(|n| n.emulated_by_kernel)
            || self
                .next_emulated(ip, Some(outcome), planned, tails)
                .is_some()
    }

    /// Whether the instruction at `ip` leaves alone what a completion after it reads: it
    /// writes no memory but the stack and the object's first word (the lock word, which no
    /// completion reports from the copy: a lock finds it free, an unlock's waiters come from
    /// an atomic instruction's result; an opening reads it, a semaphore's count, unless
    /// `lock_word_unread`), and not `rax`, where an atomic instruction's result may be read
    /// from. A count or owner it stored would be in the copy, and counted again.
    fn passes_unread(&self, ip: u64, lock_word_unread: bool) -> bool {
        let instruction = &self.nodes[&ip].instruction;
        let object_registers = self.object_masks.get(&ip).copied().unwrap_or(0);
        let mut factory = InstructionInfoFactory::new();
        let info = factory.info(instruction);
        let lock_word = |memory: &UsedMemory| {
            memory.index() == Register::None
                && memory.displacement() == 0
                && object_registers & 1 << register_index(memory.base()) != 0
                && lock_word_unread
        };
        let memory_unread = info.used_memory().iter().all(|memory| {
            !placement::writes(memory.access())
                || memory.base() == Register::RSP
                || lock_word(memory)
        });
        let rax_kept = info.used_registers().iter().all(|used| {
            used.register().full_register() != Register::RAX || !placement::writes(used.access())
        });
        memory_unread && rax_kept
    }

    /// From a single-stepped `ip` (in a tail that returns `outcome`, for a completion; none
    /// for an opening): the first instruction on that the kernel emulates, if the way there
    /// goes straight on (in the same tail), each instruction reached from the one before
    /// alone, none planned or atomic or calling, and none that changes what the record reads
    /// ([`Walk::passes_unread`]); with whether the tail still stores from there.
    fn next_emulated(
        &self,
        ip: u64,
        outcome: Option<Outcome>,
        planned: &HashMap<u64, Planned>,
        tails: &HashMap<u64, Tail>,
    ) -> Option<(u64, bool)> {
        let mut at = ip;
        for _ in 0..MAX_SLIDE {
            let node = self.nodes.get(&at)?;
            if node.emulated_by_kernel {
                let stores = matches!(tails.get(&at), Some(Tail::Returns { stores: true, .. }));
                return (at != ip).then_some((at, stores));
            }
            if !matches!(node.end, End::Next)
                || is_atomic(&node.instruction)
                || !self.passes_unread(at, outcome.is_some())
            {
                return None;
            }
            let next = node.instruction.next_ip();
            let lands = self.nodes.get(&next)?;
            let same_tail = outcome.is_none_or(|outcome| {
                matches!(
                    tails.get(&next),
                    Some(Tail::Returns { outcome: o, .. }) if *o == outcome
                )
            });
            if self.predecessors.get(&next) != Some(&1)
                || planned.contains_key(&next)
                || !lands.probed_by_kernel
                || !same_tail
            {
                return None;
            }
            at = next;
        }
        None
    }
}

/// Moves the completion planned at `from` to `to`, where it completes on every hit and opens
/// nothing; the code after it stores as `stores_after` says (None: as after `from`).
fn move_completion(
    planned: &mut HashMap<u64, Planned>,
    from: u64,
    to: u64,
    stores_after: Option<bool>,
) {
    if let Some(Planned::Completes {
        outcome,
        stores_after: stored_after_from,
        may_be_open,
        reached_with_nothing,
        ..
    }) = planned.remove(&from)
    {
        planned.insert(
            to,
            Planned::Completes {
                into: None,
                outcome,
                stores_after: stores_after.unwrap_or(stored_after_from),
                opens_otherwise: false,
                may_be_open,
                reached_with_nothing,
            },
        );
    }
}

/// Whether the records of `event`'s calls read nothing of the mutex but its lock word and
/// its type (which tells an rmutex call from a mutex call): an unlock's, whose `waiters?` is
/// in the lock word.
fn reads_only_lock_word_and_type(event: &EventDef) -> bool {
    EVENTS
        .iter()
        .filter(|e| e.symbol == event.symbol)
        .flat_map(|e| e.first.iter().chain(&e.second))
        .all(|field| {
            matches!(
                field,
                Field::Zero
                    | Field::Arg(_)
                    | Field::Rval
                    | Field::Errno
                    | Field::Block
                    | Field::MutexWaiters
            )
        })
}

/// The mutex types (bit `t` for type `t`) whose word has these bits (`mask`) as `value` has.
fn types_where(mask: u32, value: u32) -> u8 {
    (0..=MUTEX_TYPE_MASK)
        .filter(|t| (t ^ value) & mask & MUTEX_TYPE_MASK == 0)
        .fold(0, |types, t| types | 1 << t)
}

/// Every mutex type ([`types_where`]).
const ANY_TYPE: u8 = (1 << (MUTEX_TYPE_MASK + 1)) - 1;

/// What a way through a function knows of the mutex's type word ([`Walk::kind_facts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct KindFacts {
    /// The types the way leaves possible, bit `t` for type `t`.
    types: u8,
    /// By [`register_index`]: the bits of the word the register holds (the rest zeroed),
    /// 0 for none.
    in_register: [u32; REGISTERS],
    /// The zero flag says whether these bits of the word have this value ((0, 0): it says
    /// nothing of it).
    in_flags: (u32, u32),
}

impl KindFacts {
    const NONE: KindFacts = KindFacts {
        types: ANY_TYPE,
        in_register: [0; REGISTERS],
        in_flags: (0, 0),
    };

    /// What two ways that meet both know.
    fn meet(&self, other: &KindFacts) -> KindFacts {
        let mut in_register = [0; REGISTERS];
        for (i, held) in in_register.iter_mut().enumerate() {
            if self.in_register[i] == other.in_register[i] {
                *held = self.in_register[i];
            }
        }
        KindFacts {
            types: self.types | other.types,
            in_register,
            in_flags: match self.in_flags == other.in_flags {
                true => self.in_flags,
                false => (0, 0),
            },
        }
    }

    /// After `instruction`, where the registers of `object_mask` hold the object and its
    /// type word is `offset` bytes into it.
    fn note(
        &mut self,
        instruction: &Instruction,
        info: &iced_x86::InstructionInfo,
        object_mask: u32,
        offset: i64,
    ) {
        let on_object = |base: Register| {
            let index = register_index(base);
            index < REGISTERS && object_mask & (1 << index) != 0
        };
        let memory = (0..instruction.op_count()).any(|n| instruction.op_kind(n) == OpKind::Memory);
        let at_kind = memory
            // Not through fs or gs, whose bases are not 0.
            && !matches!(instruction.segment_prefix(), Register::FS | Register::GS)
            && on_object(instruction.memory_base())
            && instruction.memory_index() == Register::None
            && instruction.memory_displacement64() as i64 == offset;
        // A store that could reach the word: through another register, indexed, over its
        // bytes, or a string store (`rep stos`, which is described by one element).
        let reaches_word = |m: &iced_x86::UsedMemory| {
            let start = m.displacement() as i64;
            let end = start.saturating_add(m.memory_size().size() as i64);
            instruction.is_string_instruction()
                || !on_object(m.base())
                || m.index() != Register::None
                || m.memory_size().size() == 0
                || start < offset + 4 && offset < end
        };
        if info
            .used_memory()
            .iter()
            .any(|m| placement::writes(m.access()) && m.base() != Register::RSP && reaches_word(m))
        {
            *self = KindFacts::NONE;
            return;
        }
        let op0 = instruction.op0_register();
        let held = |facts: &KindFacts, register: Register| {
            let index = register_index(register);
            let high_byte = matches!(
                register,
                Register::AH | Register::BH | Register::CH | Register::DH
            );
            match register.size() {
                _ if index >= REGISTERS => 0,
                4 => facts.in_register[index],
                1 if !high_byte => facts.in_register[index] & 0xff,
                _ => 0,
            }
        };
        let immediate = || (instruction.immediate(1) & 0xffff_ffff) as u32;
        let mut value = None;
        let mut flags = (0, 0);
        match (instruction.mnemonic(), instruction.op1_kind()) {
            (Mnemonic::Mov, OpKind::Memory) if at_kind && op0.size() == 4 => value = Some(!0),
            (Mnemonic::Mov, OpKind::Register) if op0.size() == 4 => {
                value = Some(held(self, instruction.op1_register()));
            }
            (Mnemonic::And, OpKind::Immediate32 | OpKind::Immediate8to32) if op0.size() == 4 => {
                let masked = held(self, op0) & immediate();
                value = Some(masked);
                flags = (masked, 0);
            }
            (Mnemonic::Test, OpKind::Register) if instruction.op1_register() == op0 => {
                flags = (held(self, op0), 0);
            }
            (Mnemonic::Test, OpKind::Immediate8 | OpKind::Immediate32) => {
                flags = (held(self, op0) & immediate(), 0);
            }
            // Equal only if the bits held are the constant's, which has no others.
            (Mnemonic::Cmp, OpKind::Immediate32 | OpKind::Immediate8to32) => {
                let mask = held(self, op0);
                if mask != 0 && immediate() & !mask == 0 {
                    flags = (mask, immediate());
                }
            }
            _ => {}
        }
        for used in info.used_registers() {
            let index = register_index(used.register());
            if placement::writes(used.access()) && index < REGISTERS {
                self.in_register[index] = 0;
            }
        }
        let destination = register_index(op0);
        if let Some(value) = value
            && destination < REGISTERS
        {
            self.in_register[destination] = value;
        }
        if instruction.rflags_modified() != 0 {
            self.in_flags = flags;
        }
    }
}

/// `ip` as an offset from the function's `entry`, as `--list-probes` writes offsets.
fn relative(ip: u64, entry: u64) -> String {
    placement::signed_hex(ip.wrapping_sub(entry))
}

/// Why a plan fails whose tail call at `at` some ways reach with the call open, and others
/// without: neither today's probes nor a return probe alone serve both.
fn reached_both_ways(at: &str) -> String {
    format!("the tail call at {at} is reached both with the call open and without")
}

/// How `instruction` (with `depth` bytes pushed) ends, and where it goes on to; an error for
/// what the walk cannot follow.
fn ending(
    instruction: &Instruction,
    depth: u64,
    follows: &dyn Fn(u64, u64) -> bool,
    falls_off: &dyn Fn(u64, u64) -> bool,
    stops: &mut dyn FnMut(u64) -> bool,
    waits: &mut dyn FnMut(u64) -> bool,
) -> Result<(End, Vec<u64>), String> {
    let ip = instruction.ip();
    let next = instruction.next_ip();
    if instruction.mnemonic() == Mnemonic::Syscall {
        return Ok((End::SystemCall, vec![next]));
    }
    Ok(match instruction.flow_control() {
        FlowControl::Next => (End::Next, vec![next]),
        FlowControl::Return => {
            if depth != 0 {
                return Err(format!("a return with {depth} bytes pushed"));
            }
            (End::Returns, Vec::new())
        }
        FlowControl::UnconditionalBranch => {
            let target = slow_path::near_target(instruction).ok_or("a far jump")?;
            match (follows(ip, target), depth) {
                (true, _) => (End::Jumps { target }, vec![target]),
                (false, 0) => (End::TailCall, Vec::new()),
                (false, _) => return Err("a jump out of the function with the stack moved".into()),
            }
        }
        FlowControl::ConditionalBranch => {
            let target = slow_path::near_target(instruction).ok_or("a far branch")?;
            if !follows(ip, target) {
                return Err("a conditional branch out of the function".into());
            }
            (End::Branches { target }, vec![target, next])
        }
        FlowControl::Call => match slow_path::near_target(instruction) {
            _ if falls_off(ip, next) => (End::Stops, Vec::new()),
            Some(target) if stops(target) => (End::Stops, Vec::new()),
            Some(target) => (
                End::Calls {
                    waits: waits(target),
                },
                vec![next],
            ),
            None => (End::Calls { waits: true }, vec![next]),
        },
        FlowControl::IndirectBranch => return Err("an indirect jump".into()),
        FlowControl::IndirectCall => (End::Calls { waits: true }, vec![next]),
        FlowControl::Interrupt | FlowControl::Exception => (End::Stops, Vec::new()),
        FlowControl::XbeginXabortXend => return Err("a transaction".into()),
    })
}

/// How many instructions of a called function are looked at to tell that it never returns.
const MAX_CALLEE_INSTRUCTIONS: usize = 256;

/// Whether the function at `address` never returns: no way through it reaches a `ret` or
/// leaves it by a jump it cannot follow; each ends in a call of one of `stops`, or in a call
/// the compiler put padding after (a call it knows does not return, as glibc's internal
/// `__assert_fail` ends in one).
fn never_returns(image: &[u8], address: u64, stops: &HashSet<u64>) -> bool {
    let mut seen = HashSet::new();
    let mut pending = vec![address];
    while let Some(ip) = pending.pop() {
        if !seen.insert(ip) {
            continue;
        }
        if seen.len() > MAX_CALLEE_INSTRUCTIONS {
            return false;
        }
        let Some(instruction) = slow_path::decode_one(image, ip) else {
            return false;
        };
        let next = instruction.next_ip();
        match instruction.flow_control() {
            FlowControl::Next => pending.push(next),
            FlowControl::UnconditionalBranch => match slow_path::near_target(&instruction) {
                Some(target) => pending.push(target),
                None => return false,
            },
            FlowControl::ConditionalBranch => match slow_path::near_target(&instruction) {
                Some(target) => pending.extend([target, next]),
                None => return false,
            },
            FlowControl::Call => {
                let ends = slow_path::near_target(&instruction).is_some_and(|t| stops.contains(&t))
                    || slow_path::decode_one(image, next).is_none_or(|after| {
                        matches!(
                            after.mnemonic(),
                            Mnemonic::Nop | Mnemonic::Int3 | Mnemonic::Ud2
                        )
                    });
                if !ends {
                    pending.push(next);
                }
            }
            FlowControl::Interrupt | FlowControl::Exception => {}
            _ => return false,
        }
    }
    true
}

/// Whether the instruction is atomic on memory (a lock prefix, or `xchg` with memory), which
/// no tail has: it is where a lock is taken.
fn is_atomic(instruction: &Instruction) -> bool {
    instruction.has_lock_prefix()
        || instruction.mnemonic() == Mnemonic::Xchg
            && (0..instruction.op_count()).any(|n| instruction.op_kind(n) == OpKind::Memory)
        || instruction.mnemonic() == Mnemonic::Pause
}

/// The errno a `movl $imm, %fs:(%reg)` stores (glibc's errno is thread-local, at `%fs` plus an
/// offset read from the GOT).
fn errno_stored(instruction: &Instruction) -> Option<i64> {
    (instruction.mnemonic() == Mnemonic::Mov
        && instruction.op0_kind() == OpKind::Memory
        && instruction.memory_segment() == Register::FS
        && matches!(
            instruction.op1_kind(),
            OpKind::Immediate32 | OpKind::Immediate8to32
        ))
    .then(|| i64::from(instruction.immediate(1) as i32))
}

/// `tail` with its stores said to be `stores` and its own.
fn with_stores(tail: Tail, stores: bool) -> Tail {
    match tail {
        Tail::Returns {
            outcome,
            stores: later,
        } => Tail::Returns {
            outcome,
            stores: stores || later,
        },
        other => other,
    }
}

/// The flags a conditional branch tests, and whether the condition holds when the branch is
/// taken: those the probe can read from `eflags`.
fn flag_of(instruction: &Instruction) -> Option<(Condition, bool)> {
    match instruction.condition_code() {
        ConditionCode::e => Some((Condition::Zero, true)),
        ConditionCode::ne => Some((Condition::Zero, false)),
        ConditionCode::s => Some((Condition::Sign, true)),
        ConditionCode::ns => Some((Condition::Sign, false)),
        ConditionCode::le => Some((Condition::LessOrEqual, true)),
        ConditionCode::g => Some((Condition::LessOrEqual, false)),
        ConditionCode::be => Some((Condition::BelowOrEqual, true)),
        ConditionCode::a => Some((Condition::BelowOrEqual, false)),
        _ => None,
    }
}

/// The flag, and its value, that sends the branch `instruction` to `into`.
fn completing_flag(instruction: &Instruction, into: u64) -> Option<(Condition, bool)> {
    let (condition, when_taken) = flag_of(instruction)?;
    let taken = slow_path::near_target(instruction) == Some(into);
    Some((condition, if taken { when_taken } else { !when_taken }))
}

fn mnemonic_text(instruction: &Instruction) -> String {
    format!("{:?}", instruction.mnemonic()).to_lowercase()
}

/// What a general-purpose register holds on a way through a tail, exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Value {
    Unknown,
    Constant(i64),
    /// What the register of this index ([`register_index`]) held where the tail began.
    Initial(usize),
}

/// What general-purpose registers hold on a way through a tail: a constant `mov`ed in or the
/// zeroing `xor`, a copy by `mov` between registers, or what a register held where the tail
/// began; any other write forgets.
#[derive(Clone, Copy)]
struct Values {
    by_register: [Value; REGISTERS],
}

impl Values {
    /// Where a tail begins: each register holds what it holds.
    fn at_start() -> Self {
        Values {
            by_register: core::array::from_fn(Value::Initial),
        }
    }

    /// What `eax` holds.
    fn rax(&self) -> Value {
        match self.by_register[register_index(Register::RAX)] {
            // The C function returns an int.
            Value::Constant(v) => Value::Constant(i64::from(v as i32)),
            other => other,
        }
    }

    fn note(&mut self, instruction: &Instruction) {
        let mut factory = InstructionInfoFactory::new();
        let written: Vec<usize> = factory
            .info(instruction)
            .used_registers()
            .iter()
            .filter(|used| placement::writes(used.access()))
            .map(|used| register_index(used.register()))
            .filter(|&index| index < REGISTERS)
            .collect();
        let destination = (instruction.op0_kind() == OpKind::Register)
            .then(|| register_index(instruction.op0_register()))
            .filter(|&index| index < REGISTERS);
        let value = match (instruction.mnemonic(), instruction.op1_kind()) {
            (
                Mnemonic::Mov,
                OpKind::Immediate32 | OpKind::Immediate32to64 | OpKind::Immediate64,
            ) => Value::Constant(instruction.immediate(1) as i64),
            (Mnemonic::Xor, OpKind::Register)
                if Some(register_index(instruction.op1_register())) == destination =>
            {
                Value::Constant(0)
            }
            (Mnemonic::Mov, OpKind::Register) => {
                let source = register_index(instruction.op1_register());
                match self.by_register.get(source) {
                    // A 32-bit move keeps the low half.
                    Some(Value::Constant(v)) if instruction.op1_register().size() == 4 => {
                        Value::Constant(i64::from(*v as u32))
                    }
                    Some(value) => *value,
                    None => Value::Unknown,
                }
            }
            _ => Value::Unknown,
        };
        for register in written {
            self.by_register[register] = Value::Unknown;
        }
        if let Some(destination) = destination {
            self.by_register[destination] = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_common::object_layout::GLIBC;

    fn event(name: &str) -> &'static EventDef {
        EventDef::by_name(name).unwrap()
    }

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// An image with `code` at `offset` and glibc's futex-waiting function of the lock's slow
    /// path at 0x86100 (`mov $0x80,%esi; mov $202,%eax; syscall; ret`); any other function
    /// it calls returns at once.
    fn image(offset: u64, code: &[u8]) -> Vec<u8> {
        let start = offset as usize;
        let mut image = vec![0xc3; (start + code.len()).max(0x86200)];
        image[start..start + code.len()].copy_from_slice(code);
        image[0x86100..0x86100 + 13].copy_from_slice(&[
            0xbe, 0x80, 0x00, 0x00, 0x00, 0xb8, 0xca, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xc3,
        ]);
        image
    }

    fn library() -> Library {
        Library {
            stops: HashSet::new(),
            named: HashSet::new(),
            mutex_kind_offset: None,
            single_threaded_flag: None,
        }
    }

    fn completes(offset: u64, stack_offset: u16, register: ObjectRegister, c: Completion) -> Site {
        Site {
            offset,
            stack_offset,
            object_register: register,
            role: Role::Completes(c),
            shared_code: None,
            processes: Processes::Every,
        }
    }

    /// A completion on the zero flag being `when_set`, returning `outcome`, that neither
    /// opens nor meets an open call.
    fn on_zero(when_set: bool, outcome: Outcome) -> Completion {
        Completion {
            condition: Condition::Zero,
            when_set,
            ..Completion::always(outcome)
        }
    }

    /// glibc 2.36's `sem_trywait`: `je` to the EAGAIN return when the count is 0, and the
    /// compare-and-exchange loop's `jne`, whose fall-through returns 0.
    const SEM_TRYWAIT: &str =
        "488b0785c07411488d50fff0480fb11775f131c0c30f1f00488b05c11f140064c7000b000000b8ffffffffc3";
    /// glibc 2.36's `sem_wait`: `pthread_testcancel`, the compare-and-exchange, and the slow
    /// path passed on by a tail jump.
    const SEM_WAIT: &str =
        "534889fbe8e7f1ffff488b0385c07410488d50fff0480fb113750531c05bc3904889df5be907ffffff";
    /// musl 1.2.3's `sem_post` (at 0x6c330): the compare-and-exchange loop, then (+0x50)
    /// `test %esi,%esi; jne wake` on the waiters it read, `test %r8b,%r8b; jne wake`, and the
    /// return of 0; the EOVERFLOW way calls `__errno_location`.
    const MUSL_SEM_POST: [&str; 3] = [
        "448b4f08eb20662e0f1f84000000000089d0c1e81f4189c08d4c020189d0f00fb10f39c2742a8b178b770481faffffff",
        "7f75dd4883ec08e854f0faffc7004b000000b8ffffffff4883c408c30f1f400085f6750c4584c0750731c0c30f1f4000",
        "31f64585c941b8ca000000ba01000000400f95c64c89c0c1e60783ce010f054883f8da75d44c89c04889d60f05ebca",
    ];
    /// glibc 2.36's `pthread_mutex_lock`.
    const MUTEX_LOCK: [&str; 16] = [
        "8b471089c281e27f01000083e07c0f85ac000000534883ec1085d20f85a7000000448b0d989614004585c975638b7710",
        "81e6800000007509803d29f2140000753731c0ba01000000f00fb1170f85b60000008b4f0885c90f8561010000648b04",
        "25d002000083470c0189470831c04883c4105bc30f1f4000448b074585c075c1c70701000000ebca0f1f840000000000",
        "8b4710f6c4037408f6c4017490eb079080cc018947108b57104883c410488d77165b81e280000000e99397ffff0f1f00",
        "e93bf8ffff0f1f0081fa0001000074d68b571083e27f83fa010f8592000000648b0425d002000039470875308b470483",
        "f8ff0f84bc00000083c001894704e969ffffff0f1f44000048897c2408e87e9cffff488b7c2408e936ffffff8b771081",
        "e680000000752c803d3af114000074238b1785d2751dc707010000008b470885c00f8551010000c7470401000000e90a",
        "ffffff31c0ba01000000f00fb11774dc48897c2408e8269cffff488b7c2408ebcb8b571083e27f83fa030f85cb000000",
        "ba01000000f00fb1177552837f08000f84c8feffff488d0da43d1100baa7000000488d35d4b91000488d3df8b91000e8",
        "5c89faffb80b000000e9b0feffff488d0d7b3d1100ba5e000000488d35abb91000488d3dcfb91000e83389faff0fbf47",
        "140fbf15346d14008d44000a89d139d00f4ec80f31ba0100000031db89c68d42ff21f001d001c339d97e66f39083e801",
        "85c07ff783fa0f7f0201d28b0785c075dd41b801000000f0440fb10775d00fbf571489d8be0800000029d089d199f7fe",
        "01c166894f14e940ffffff648b1425d00200008b471083e07f83f80275593957080f85c6fdffffb823000000e9fdfdff",
        "ff31c0ba01000000f00fb11774b08b771048897c240881e680000000e8ff9affff488b7c2408eb96488d0da13c1100ba",
        "82000000488d35d1b81000488d3df5b81000e85988faff488d0d823c1100baac000000488d35b2b81000488d3df70111",
        "00e83a88faff",
    ];

    /// glibc 2.36's `pthread_mutex_unlock` (`mov $1,%esi; jmp`, at 0x8dd50) and the code it
    /// jumps to (at 0x8dc50), which the condition variables call: a normal mutex is released
    /// by `xchg` (or a plain store while the process has one thread), and `jle` tests whether
    /// the old value said it had waiters.
    const MUTEX_UNLOCK: [&str; 6] = [
        "8b471089c281e27f010000a87c75514883ec0885d27551c747080000000085f67404836f0c018b771081e68000000075",
        "1f803d50d91400007416c7070000000031c04883c408c3660f1f84000000000031c0870783f8017ee7e8d284ffffebe0",
        "e95bfbffff0f1f0081fa0001000075128b77104883c40881e680000000e92e81ffff8b471083e07f83f801751f648b04",
        "25d00200003947087407b801000000eba1836f04017599e96bffffff8b471083e07f83f8030f845cffffff83fa027517",
        "648b0425d002000039470875cd833f0074c8e940ffffff488d0dc2251100ba62000000488d352aa21000488d3dd7eb10",
        "00e83a71faff662e0f1f840000000000be01000000e9f6feffff",
    ];

    /// glibc 2.36's `pthread_rwlock_unlock` (at 0x8f090): a reader's and a writer's way, each
    /// with loops of `lock cmpxchg` and futex wakes, every one ending in `xor %eax,%eax; ...;
    /// ret` at +0x76, or in `__libc_fatal` (0x7f440).
    const RWLOCK_UNLOCK: [&str; 10] = [
        "554989f8534883ec088b5718648b0425d002000039c20f84bc0000008b471c31f685c08b07400f95c6c1e60789f5448d",
        "48f84489c9c1e9037446f0450fb10889c375eb41f6c101754f4131d94183e104742489ee4531d2baffffff7f4c89c740",
        "80f681b8ca0000000f05483d00f0ffff0f87d80000004883c40831c05b5dc3904489ca83ca0141f6c102440f45ca4183",
        "e1fbeba60f1f4000498d7808b8010000008707a80274a289ee4531d2baffffff7fb8ca0000004080f6810f05483d00f0",
        "ffff768583c01683e0f70f858a000000e974ffffff0f1f008b571c4531c9488d5f0cc747180000000085d2410f95c131",
        "c041c1e10787038b4f3083e00289c585c9756d418b0089c131d2c1e9030f95c231c283f202f0410fb11075eac1e80375",
        "6f85ed0f844dffffff4489ce4531d2ba010000004889df4080f681b8ca0000000f05483d00f0ffff0f8628ffffff83c0",
        "1683e0f70f841cffffff488d3dafd41000e84a02ffff662e0f1f8400000000008b4704488d570485c0748889c181c900",
        "000080f00fb10a7498ebec0f1f440000498d780831c08707a80274854489ce4531d2baffffff7fb8ca0000004080f681",
        "0f05483d00f0ffff0f8663ffffff83c01683e0f77594e956ffffff",
    ];

    #[test]
    fn a_call_that_returns_one_value_on_every_way_is_written_whole_at_its_entry() {
        let library = Library {
            stops: HashSet::from([0x7f440]),
            ..library()
        };
        let code = RWLOCK_UNLOCK.concat();
        let planned = |code: &str| {
            whole_at_entry(
                &image(0x8f090, &hex(code)),
                0x8f090,
                0x1cb,
                &library,
                (0x8f090, 0),
            )
        };
        let always = Completion::always(Outcome::Returns(0));
        assert_eq!(
            planned(&code),
            Ok(vec![completes(0x8f090, 0, ObjectRegister::Rdi, always)])
        );
        // The same code returning what ebx holds there returns what the entry cannot know.
        let refused = planned(&code.replace("4883c40831c05b5dc3", "4883c40889d85b5dc3"));
        assert_eq!(
            refused,
            Err("it returns no value known at its entry".into())
        );
    }

    #[test]
    fn an_unlock_that_only_jumps_is_planned_in_the_code_it_shares() {
        let code = hex(&MUTEX_UNLOCK.concat());
        let image = image(0x8dc50, &code);
        let library = Library {
            stops: HashSet::from([0x34e80]),
            ..library()
        };
        let sites = plan(&image, 0x8dd50, 10, &library, event("mutex_unlock")).unwrap();
        let at = |offset: u64| sites.iter().find(|s| s.offset == offset).copied();
        // The uncontended unlock: written whole at the jle, with the lock word the xchg found
        // (2: waiters) in eax; a call with waiters is opened there, and completed after the
        // wake.
        let released = Completion {
            condition: Condition::LessOrEqual,
            opens_otherwise: true,
            found_in_rax: FoundInRax::Word,
            ..on_zero(true, Outcome::Returns(0))
        };
        assert_eq!(
            at(0x8dca7),
            Some(Site {
                shared_code: sites[0].shared_code,
                ..completes(0x8dca7, 8, ObjectRegister::Rdi, released)
            })
        );
        let Some(Site {
            role: Role::Completes(woken),
            ..
        }) = at(0x8dcae)
        else {
            panic!("{sites:#x?}");
        };
        assert_eq!(
            (woken.condition, woken.may_be_open, woken.opens_otherwise),
            (Condition::Always, true, false)
        );
        // While the process has one thread, a plain store releases it: completed there, not
        // on the check of the thread count, which every other unlock passes.
        assert!(at(0x8dc88).is_none(), "{sites:#x?}");
        assert_eq!(
            at(0x8dc8a).map(|s| s.role),
            Some(Role::Completes(Completion {
                condition: Condition::Always,
                ..on_zero(false, Outcome::Returns(0))
            }))
        );
        // The robust and elision unlocks pass the call on.
        for tail_call in [0x8dcb0, 0x8dccd] {
            assert_eq!(at(tail_call).map(|s| s.role), Some(Role::WholeCall));
        }
        let shared = sites[0].shared_code.expect("in the shared code");
        assert_eq!(shared.start, 0x8dc50);
        assert!(
            shared.walked.0 == 0x8dc50 && shared.walked.1 <= 0x8dd50,
            "{shared:#x?}"
        );
        assert!(sites.iter().all(|s| s.shared_code == Some(shared)));
        assert!(sites.iter().all(|s| s.processes == Processes::Every));

        // Told where `__libc_single_threaded` is (the `cmpb $0` before the check reads it),
        // the plan keeps both: the check's branch completes the single-threaded way for a
        // process with one thread (emulated: no single step on its every unlock), the store
        // for the others.
        let told = Library {
            single_threaded_flag: Some(0x001d_b5d8),
            ..library
        };
        let sites = plan(&image, 0x8dd50, 10, &told, event("mutex_unlock")).unwrap();
        let at = |offset: u64| sites.iter().find(|s| s.offset == offset).copied();
        let check = at(0x8dc88).expect("a completion on the check");
        assert_eq!(
            (check.processes, check.role),
            (
                Processes::SingleThreaded,
                Role::Completes(on_zero(false, Outcome::Returns(0)))
            )
        );
        assert_eq!(at(0x8dc8a).map(|s| s.processes), Some(Processes::Threaded));
        assert_eq!(at(0x8dca7).map(|s| s.processes), Some(Processes::Every));
        // A branch on another byte is no such check.
        let other = Library {
            single_threaded_flag: Some(0x001d_b5d0),
            ..told
        };
        let sites = plan(&image, 0x8dd50, 10, &other, event("mutex_unlock")).unwrap();
        assert!(sites.iter().all(|s| s.processes == Processes::Every));
    }

    /// Whether `sites` complete the call at `offset` without a copy of the object, and the
    /// register they take its type from.
    fn object_from_rax_at(sites: &[Site], offset: u64) -> Option<(bool, Option<ObjectRegister>)> {
        sites
            .iter()
            .find(|s| s.offset == offset)
            .map(|s| match s.role {
                Role::Completes(c) => (c.object_from_rax, c.type_register.unpack()),
                _ => (false, None),
            })
    }

    #[test]
    fn a_normal_mutex_completed_where_its_type_was_tested_needs_no_copy_of_it() {
        let library = Library {
            stops: HashSet::from([0x34e80]),
            mutex_kind_offset: Some(GLIBC.mutex_kind.byte_offset() as i64),
            ..library()
        };
        let lock = hex(&MUTEX_LOCK.concat());
        let plan_lock = |library: &Library| {
            plan(
                &image(0x8c370, &lock),
                0x8c370,
                lock.len() as u64,
                library,
                event("mutex_lock"),
            )
            .unwrap()
        };
        let sites = plan_lock(&library);
        // The normal mutex's lock (`test %edx,%edx; jne` on `__kind & 0x17f` passed), and
        // the recursive mutex's first lock, whose count the copy must show.
        assert_eq!(
            object_from_rax_at(&sites, 0x8c3bc),
            Some((true, None)),
            "{sites:#x?}"
        );
        assert_eq!(
            object_from_rax_at(&sites, 0x8c4ce),
            Some((false, None)),
            "{sites:#x?}"
        );
        // The unlock's xchg releases the recursive mutex too, whose last unlock joins the
        // normal one's; `edx` holds `__kind & 0x17f` on every way there, which tells them
        // apart.
        let plan_unlock = |code: &str| {
            let unlock = hex(code);
            plan(
                &image(0x8dc50, &unlock),
                0x8dd50,
                10,
                &library,
                event("mutex_unlock"),
            )
            .unwrap()
        };
        let sites = plan_unlock(&MUTEX_UNLOCK.concat());
        assert_eq!(
            object_from_rax_at(&sites, 0x8dca7),
            Some((true, Some(ObjectRegister::Rdx))),
            "{sites:#x?}"
        );
        // No register holds the type where, on the way, `edx` is masked to the pshared bit
        // (`mov 0x10(%rdi),%edx; and $0x80,%edx` in place of the same on `esi`), or its low
        // byte is set (`sete %dl` in place of `mov 0x10(%rdi),%esi`), or the type word is
        // stored to (`movl $0,0x10(%rdi)` in place of the owner's `movl $0,0x8(%rdi)`): a copy.
        for (from, to) in [
            ("8b771081e680000000", "8b571081e280000000"),
            ("8b771081e6", "0f94c281e6"),
            ("c7470800000000", "c7471000000000"),
        ] {
            let changed = MUTEX_UNLOCK.concat().replacen(from, to, 1);
            assert_ne!(changed, MUTEX_UNLOCK.concat());
            let sites = plan_unlock(&changed);
            assert_eq!(
                object_from_rax_at(&sites, 0x8dca7),
                Some((false, None)),
                "{to}: {sites:#x?}"
            );
        }
        // Without the type's place (musl), a copy as before.
        let sites = plan_lock(&Library {
            mutex_kind_offset: None,
            ..library
        });
        assert_eq!(
            object_from_rax_at(&sites, 0x8c3bc),
            Some((false, None)),
            "{sites:#x?}"
        );
    }

    #[test]
    fn a_try_lock_completes_after_its_exchange_and_where_its_check_fails() {
        let code = hex(SEM_TRYWAIT);
        let image = image(0x90e00, &code);
        let sites = plan(
            &image,
            0x90e00,
            code.len() as u64,
            &library(),
            event("sema_trywait"),
        );
        // A count of 0 fails with EAGAIN: completed where that code starts, so that a call
        // that takes the semaphore passes one probe.
        assert_eq!(
            sites,
            Ok(vec![
                completes(
                    0x90e10,
                    0,
                    ObjectRegister::Rdi,
                    Completion {
                        found_in_rax: FoundInRax::DoubleWord,
                        ..on_zero(true, Outcome::Returns(0))
                    }
                ),
                completes(
                    0x90e18,
                    0,
                    ObjectRegister::Rdi,
                    Completion {
                        condition: Condition::Always,
                        ..on_zero(false, Outcome::Fails(11))
                    }
                ),
            ])
        );
    }

    #[test]
    fn a_wait_that_passes_its_slow_path_on_keeps_the_entry_and_return_probes_there() {
        let code = hex(SEM_WAIT);
        let image = image(0x90dd0, &code);
        let sites = plan(
            &image,
            0x90dd0,
            code.len() as u64,
            &library(),
            event("sema_wait"),
        );
        // The object is in rbx past pthread_testcancel; rax holds the count the exchange found.
        let fast = Completion {
            found_in_rax: FoundInRax::DoubleWord,
            ..on_zero(true, Outcome::Returns(0))
        };
        let whole = Site {
            offset: 0x90df4,
            stack_offset: 0,
            object_register: ObjectRegister::Rdi,
            role: Role::WholeCall,
            shared_code: None,
            processes: Processes::Every,
        };
        assert_eq!(
            sites,
            Ok(vec![
                completes(0x90de9, 8, ObjectRegister::Rbx, fast),
                whole
            ])
        );
    }

    /// musl's `sem_post` opens its call where it may wake a waiter, on the test of the
    /// waiters it read (+0x50), which the kernel single-steps: the opening moves on to the
    /// `jne` after it, which the kernel emulates, and reads the same object.
    #[test]
    fn an_opening_on_an_instruction_the_kernel_single_steps_moves_to_the_branch_after_it() {
        let code = hex(&MUSL_SEM_POST.concat());
        let site_at = |code: &[u8], offset: u64| {
            let image = image(0x6c330, code);
            let sites = plan(
                &image,
                0x6c330,
                code.len() as u64,
                &library(),
                event("sema_post"),
            );
            let sites = sites.unwrap();
            sites.iter().find(|s| s.offset == 0x6c330 + offset).copied()
        };
        let opens = Completion {
            condition: Condition::Never,
            opens_otherwise: true,
            ..Completion::always(Outcome::Returns(0))
        };
        assert_eq!(site_at(&code, 0x50), None);
        assert_eq!(
            site_at(&code, 0x52),
            Some(completes(0x6c382, 0, ObjectRegister::Rdi, opens))
        );
        // Were the semaphore's count stored on the way (`mov %esi,(%rdi)` for the test), the
        // opening, whose record copies it, would stay before the store.
        let mut stored = code.clone();
        stored[0x50..0x52].copy_from_slice(&[0x89, 0x37]);
        assert_eq!(site_at(&stored, 0x52), None);
        assert_eq!(
            site_at(&stored, 0x50),
            Some(completes(0x6c380, 0, ObjectRegister::Rdi, opens))
        );
    }

    #[test]
    fn a_lock_that_waits_is_opened_where_it_leaves_the_fast_path_and_completed_where_the_wait_ends()
    {
        let code = hex(&MUTEX_LOCK.concat());
        let image = image(0x8c370, &code);
        // Its assertions call __assert_fail, at 0x34e80.
        let library = Library {
            stops: HashSet::from([0x34e80]),
            ..library()
        };
        let sites = plan(
            &image,
            0x8c370,
            code.len() as u64,
            &library,
            event("mutex_lock"),
        )
        .unwrap();
        let at = |offset: u64| sites.iter().find(|s| s.offset == 0x8c370 + offset).copied();
        // The uncontended lock: written whole at the jne after its cmpxchg, or opened there.
        let fast = Completion {
            opens_otherwise: true,
            found_in_rax: FoundInRax::Word,
            stores_after: true,
            ..on_zero(true, Outcome::Returns(0))
        };
        assert_eq!(
            at(0x4c),
            Some(completes(0x8c3bc, 0x18, ObjectRegister::Rdi, fast))
        );
        // A process with one thread stores the lock word (+0x80) and jumps on: completed on
        // the jump, which the kernel emulates, not on the store, which it single-steps.
        assert_eq!(at(0x80), None);
        assert_eq!(
            at(0x86),
            Some(completes(0x8c3f6, 0x18, ObjectRegister::Rdi, {
                Completion {
                    stores_after: true,
                    ..Completion::always(Outcome::Returns(0))
                }
            }))
        );
        // Where __lll_lock_wait_private returns, the mutex reloaded (+0x112), the open call
        // completes, on the jump that follows.
        assert_eq!(at(0x112), None);
        let Some(Site {
            role: Role::Completes(ended),
            ..
        }) = at(0x117)
        else {
            panic!("{sites:#x?}");
        };
        assert_eq!(
            (ended.condition, ended.may_be_open, ended.opens_otherwise),
            (Condition::Always, true, false)
        );
        // The robust and elision paths pass the call on with nothing pushed.
        for tail_call in [0xb8, 0xc0] {
            assert_eq!(at(tail_call).map(|s| s.role), Some(Role::WholeCall));
        }
        // Every way through it meets exactly one of its probes that writes the call.
        assert!(sites.len() > 8, "{sites:#x?}");
    }

    #[test]
    fn an_indirect_jump_is_no_plan() {
        // cmp $1,%edi; ja +2; jmp *%rax; xor %eax,%eax; ret
        let code = hex("83ff017702ffe031c0c3");
        let image = image(0x90000, &code);
        let planned = plan(
            &image,
            0x90000,
            code.len() as u64,
            &library(),
            event("mutex_trylock"),
        );
        assert_eq!(planned, Err("an indirect jump at +0x5".into()));
    }
}
