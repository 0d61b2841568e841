//! Where a call blocks or wakes a waiter (`--contended`): the slow path inside a pthread
//! function, which an uncontended call never reaches, so that a probe there costs it nothing.
//!
//! glibc's lock takes a free mutex with one `cmpxchg` and returns; only a lock that finds it
//! held calls the function that waits on its futex (`__lll_lock_wait`), and only an unlock that
//! finds waiters calls the one that wakes them (`__lll_lock_wake`, or on 2.31 a futex syscall
//! in line). The functions have no exported names, so they are told by what they do: they make
//! the futex system call themselves. A read-write lock waits in its own loop, on futexes inside
//! the lock (`lea 8(%rbx), %rdi`), calling `__futex_abstimed_wait64` (or on 2.31 making the
//! call in line): each wait is a site, which ends at the instruction after it.
//!
//! The walk follows the function's control flow from its entry, keeping the bytes pushed so far
//! at each instruction, so that a probe in the middle knows where the caller's return address
//! is. It follows direct jumps (pthread_mutex_unlock jumps to the code it shares with the
//! condition variables; a lock jumps to its robust and priority-inheriting variants), but not
//! a tail call from there on: a jump to another named function, or a far jump with nothing
//! pushed (glibc's unlock of a priority-protected mutex ends in a jump to the code that changes
//! priorities, whose futex calls are on a lock of its own).
//!
//! One walk reads every instruction set, through its [`Path`]: x86-64's here ([`PathState`],
//! iced-x86), arm64's in `aarch64` (yaxpeax-arm), where the futex call is `svc #0` with the
//! number in `x8` and the operation in `x1`, and glibc's lock functions call the outline-atomics
//! helpers before they wait: `x30` no longer holds the return address there, which the prologue
//! saved (`stp x29, x30, [sp, #-n]!`), so an arm64 site says where ([`ReturnAddress`]). No
//! arm64 site lies between a load-exclusive and its store-exclusive.

use std::{
    collections::{HashMap, HashSet},
    marker::PhantomData,
};

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register};
use tracer_common::{ObjectRegister, ProbeCookie, arch};

/// How many instructions a walk decodes at most: glibc's lock with its robust and
/// priority-protected paths is about 1,000.
const MAX_WALKED: usize = 8192;
/// A jump with nothing pushed further than this, outside the traced function, is a tail call.
pub(super) const LOCAL_JUMP_BYTES: u64 = 512;
/// How many calls down a function jumped to is looked at for a futex wait.
const CALLEE_LEVELS: u32 = 3;
/// How many instructions of a called function are looked at for its own futex call.
const MAX_CALLEE_INSTRUCTIONS: usize = 64;
/// How many instructions a walk of a called function decodes at most.
const MAX_WALKED_IN_CALLEE: usize = 1024;

/// A point on a call's slow path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    /// Where the probe goes (an address in the library's file offsets).
    pub offset: u64,
    /// Bytes pushed since the traced function's entry (on arm64, the bytes the stack pointer
    /// moved down by): the entry's stack pointer is `sp + stack_offset`.
    pub stack_offset: u16,
    /// Where the call's return address is there.
    pub return_address: ReturnAddress,
    /// The register that holds the call's object there: the futex waited on may be a word inside it (a read-write
    /// lock's), passed to the futex call as the object plus an offset.
    pub object_register: ObjectRegister,
    /// How many bytes past the object that register points: where the code keeps only the
    /// futex word's address (glibc 2.36's rwlock unlock on arm64, `add x19, x19, #8`).
    pub object_offset: u8,
    /// The futex function called there, or `None` for a futex call in line (the probe is
    /// then on the first instruction of the straight run that makes it).
    pub calls: Option<u64>,
    /// What the futex call does.
    pub futex: Futex,
    /// Where a wait ends, for the call's return half; `None` for a wake.
    pub wait_ends: Option<WaitEnd>,
}

impl Site {
    /// What the probe does, for `--list-probes`; `register` names the object's register in
    /// the library's instruction set.
    pub fn reason(&self, register: impl Fn(ObjectRegister) -> String) -> String {
        let made = match self.calls {
            Some(futex_function) => format!("calls the futex function at {futex_function:#x}"),
            None => "makes the futex call".into(),
        };
        let object = match self.object_offset {
            0 => format!("object in {}", register(self.object_register)),
            offset => format!(
                "object {offset:#x} below {}",
                register(self.object_register)
            ),
        };
        let what = match self.wait_ends {
            Some(WaitEnd::PassedOn(waiting)) => format!(
                "slow path: passes the call on to {waiting:#x}, which waits (its return is the \
                 call's); {object}"
            ),
            Some(WaitEnd::After(end)) => {
                format!("slow path: {made}; the wait ends at {end:#x}; {object}")
            }
            Some(WaitEnd::ReturnOf(_)) => {
                format!("slow path: {made}; the wait ends at its return; {object}")
            }
            None => format!("slow path: {made}; {object}"),
        };
        match self.return_address {
            ReturnAddress::AsAtEntry => what,
            ReturnAddress::SavedBelowEntry(below) => format!(
                "{what}; the return address is saved at [sp+{:#x}]",
                self.stack_offset.saturating_sub(below)
            ),
        }
    }
}

/// Where a wait ends: the return half of a call that blocked is probed there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitEnd {
    /// At the instruction right after the call of the futex function (or the futex system
    /// call), which nothing else jumps to: a plain uprobe, hit only after a wait.
    After(u64),
    /// At the return of the function at this offset (a uretprobe): the futex function's,
    /// where the instruction after its call is also reached from elsewhere.
    ReturnOf(u64),
    /// The call passed itself on to the function at this offset (sem_wait jumps to its slow
    /// path): that function's return is the call's own, with the call's result.
    PassedOn(u64),
}

/// What a futex call does, from its operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Futex {
    /// Sleeps until woken (FUTEX_WAIT, WAIT_BITSET, LOCK_PI, LOCK_PI2, WAIT_REQUEUE_PI).
    Waits,
    /// Wakes sleepers (FUTEX_WAKE, WAKE_OP, UNLOCK_PI, WAKE_BITSET).
    Wakes,
}

impl Futex {
    /// The kind of the operation `op` (FUTEX_PRIVATE_FLAG and the clock flag aside).
    pub(super) fn of(op: u64) -> Option<Futex> {
        match op & 0x7f {
            0 | 6 | 9 | 11 | 13 => Some(Futex::Waits),
            1 | 5 | 7 | 10 => Some(Futex::Wakes),
            _ => None,
        }
    }
}

/// Where a probe on a slow path finds the call's return address, which the record's caller
/// and the test for a call made inside the library read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReturnAddress {
    /// Where the function's entry has it: x86-64's `[rsp + stack_offset]`, arm64's `x30`,
    /// written by nothing since (or loaded back).
    AsAtEntry,
    /// arm64: saved by the prologue this many bytes below the entry's stack pointer, `x30`
    /// having been overwritten since (by a call).
    SavedBelowEntry(u16),
}

/// The most registers an instruction set numbers in a [`Holding`].
const HELD_REGISTERS: usize = 32;

/// Which registers hold the object's address plus how many bytes, by the instruction set's
/// numbering: on one path, or what every path walked to an instruction agrees on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Holding([Option<u8>; HELD_REGISTERS]);

impl Holding {
    /// From a path state's registers, each the object's address plus this many bytes.
    pub(super) fn of(object_plus: &[Option<u8>]) -> Self {
        let mut held = [None; HELD_REGISTERS];
        for (to, from) in held.iter_mut().zip(object_plus) {
            *to = *from;
        }
        Holding(held)
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }

    /// What both paths bring.
    fn meet(&self, other: &Holding) -> Holding {
        let mut both = *self;
        for (mine, theirs) in both.0.iter_mut().zip(other.0) {
            if *mine != theirs {
                *mine = None;
            }
        }
        both
    }

    /// The first register of `registers` (each with its number) that holds the object itself,
    /// else the first whose offset a cookie carries (`ProbeCookie::object_offset`).
    pub(super) fn choose(
        &self,
        registers: &[(ObjectRegister, usize)],
    ) -> Option<(ObjectRegister, u8)> {
        let at = |wanted: &dyn Fn(u8) -> bool| {
            registers.iter().find_map(|&(register, number)| {
                let offset = self.0.get(number).copied().flatten()?;
                wanted(offset).then_some((register, offset))
            })
        };
        at(&|offset| offset == 0)
            .or_else(|| at(&|offset| offset % 4 == 0 && offset <= ProbeCookie::MAX_OBJECT_OFFSET))
    }
}

/// What one instruction does to the way through a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    /// Goes on to the next instruction.
    Next,
    /// A system call, after which the next instruction runs.
    Syscall,
    /// Returns to the caller.
    Return,
    /// A way the walk cannot follow: an indirect jump, an exception.
    Stop,
    /// Jumps there; `None`: somewhere not known (a far jump).
    Jump(Option<u64>),
    /// Jumps there or goes on.
    Branch(Option<u64>),
    /// Calls there and goes on.
    Call(Option<u64>),
}

/// One instruction set's path state: what a path through a function has set up (the futex
/// call's number and operation, where the object is, where the return address is) and how
/// each instruction changes it. The walk is the same for every instruction set
/// ([`PathState`] for x86-64's, `aarch64::PathState` for arm64's).
pub(super) trait Path: Copy + Default {
    type Instruction;
    /// The instruction at `ip` of `image`, where the next one is, and what it does to the flow.
    fn decode(image: &[u8], ip: u64) -> Option<(Self::Instruction, u64, Flow)>;
    /// At a function's entry: the object is its first argument.
    fn at_function_entry() -> Self;
    /// Follows what a [`Flow::Next`] instruction writes, `depth` bytes below the entry's stack
    /// pointer: the depth after it, or `None` if the walk cannot know it.
    fn follow(&mut self, instruction: &Self::Instruction, depth: u64) -> Option<u64>;
    /// What a call leaves.
    fn past_call(&mut self);
    /// What a system call leaves.
    fn past_syscall(&mut self);
    /// The kind of futex call a system call made now makes, if it is one of a known operation.
    fn futex_made(&self) -> Option<Futex>;
    /// The kind of futex call the function at `callee` of `image` makes when called now, if it
    /// makes whatever system call its caller names (glibc 2.41's `__syscall_cancel` on arm64,
    /// whose number is its 7th argument).
    fn futex_passed_on(&self, image: &[u8], callee: u64) -> Option<Futex>;
    /// Whether a futex call made now is on the object: its first argument points into it.
    fn futex_on_object(&self) -> bool;
    /// The registers that hold the object or an address inside it, by the instruction set's
    /// numbering.
    fn holding_object(&self) -> Holding;
    /// The register of `holding` the record can take the object from, and how many bytes
    /// past the object it points: the first that holds the object itself, else the first
    /// whose offset the cookie can carry.
    fn object_register_in(holding: &Holding) -> Option<(ObjectRegister, u8)>;
    /// Where a probe here, `depth` bytes below the entry's stack pointer, reads the return
    /// address; `None` where no probe may go (the return address is lost, or the probe
    /// would break an exclusive load's loop) or the depth does not fit the cookie.
    fn return_address(&self, depth: u64) -> Option<ReturnAddress>;
}

/// The slow-path sites of the function at `entry`, `size` bytes, in `image` (a library's bytes,
/// at their file offsets, which are also its addresses), read as `P`'s instruction set: each
/// direct call of a function that makes a futex call of a known operation, and each such
/// futex call made in line, on the call's object or a word inside it. A tail call from outside
/// the function (to one of `named`, other functions' starts, or far with nothing pushed) is not
/// followed. A function that waits in no call of its own but jumps to another that waits
/// (itself or in the functions it calls) is probed at that jump. Sites whose stack depth or
/// return address cannot be followed (a frame pointer, an aligned stack), and waits whose end
/// has no probe of its own, are left out.
pub(super) fn sites<P: Path>(
    image: &[u8],
    entry: u64,
    size: u64,
    named: &HashSet<u64>,
    wanted: Futex,
) -> Vec<Site> {
    let mut walker = Walker::<P>::new(image, named, wanted == Futex::Waits);
    let walked = walker.walk(entry, Some(size), 0, MAX_WALKED);
    let mut sites: Vec<Site> = walked
        .sites
        .into_iter()
        .filter(|s| s.futex == wanted)
        .collect();
    // The instruction after a wait ends it only if nothing else jumps there; else the futex
    // function's return does, and a wait in line has no end of its own.
    for site in &mut sites {
        if let Some(WaitEnd::After(after)) = site.wait_ends
            && walked.targets.contains(&after)
        {
            site.wait_ends = site.calls.map(WaitEnd::ReturnOf);
        }
    }
    sites.retain(|s| s.futex == Futex::Wakes || s.wait_ends.is_some());
    if wanted == Futex::Waits && sites.is_empty() {
        sites.extend(walked.passed_on);
    }
    sites.sort_by_key(|s| s.offset);
    sites.dedup();
    sites
}

/// Whether the x86-64 function at `address` in `image` waits on a futex, itself or in the
/// functions it calls, so many calls down as a slow path's walk looks. `named`: the library's
/// functions' starts.
pub(super) fn waits(image: &[u8], address: u64, named: &HashSet<u64>) -> bool {
    let mut walker = Walker::<PathState>::new(image, named, false);
    walker.futex_of(address, CALLEE_LEVELS) == Some(Futex::Waits)
}

/// Walks functions' code, remembering what futex call each called function makes.
struct Walker<'a, P> {
    image: &'a [u8],
    named: &'a HashSet<u64>,
    /// By function and how many calls down was looked.
    futex_of: HashMap<(u64, u32), Option<Futex>>,
    /// Whether a jump to a function that waits is a site (sought for a lock), not followed.
    passes_on_waits: bool,
    path: PhantomData<P>,
}

/// What a walk found.
struct Walked {
    sites: Vec<Site>,
    /// The jumps from the traced function with nothing pushed to another that waits, which
    /// are not followed.
    passed_on: Vec<Site>,
    /// Where the branches walked land.
    targets: HashSet<u64>,
    /// The futex calls made in line: each site's, by its offset.
    in_line: HashMap<u64, u64>,
}

impl<'a, P: Path> Walker<'a, P> {
    fn new(image: &'a [u8], named: &'a HashSet<u64>, passes_on_waits: bool) -> Self {
        Walker {
            image,
            named,
            futex_of: HashMap::new(),
            passes_on_waits,
            path: PhantomData,
        }
    }

    /// The futex call the function at `address` makes: itself, on the straight way from its
    /// entry, or with `levels` above 0 anywhere in it or in the functions it calls, so many
    /// calls down. A wait if it makes any.
    fn futex_of(&mut self, address: u64, levels: u32) -> Option<Futex> {
        if let Some(&known) = self.futex_of.get(&(address, levels)) {
            return known;
        }
        if levels == 0 {
            let futex = own_futex_call::<P>(self.image, address);
            self.futex_of.insert((address, levels), futex);
            return futex;
        }
        // Not in the middle of its own analysis: a function that calls itself.
        self.futex_of.insert((address, levels), None);
        let sites = self.walk(address, None, levels, MAX_WALKED_IN_CALLEE).sites;
        let futex = [Futex::Waits, Futex::Wakes]
            .into_iter()
            .find(|&kind| sites.iter().any(|s| s.futex == kind));
        self.futex_of.insert((address, levels), futex);
        futex
    }

    /// The sites of the function at `entry` (`size` bytes; `None` for a called function, all
    /// of whose jumps are followed, its tail calls being part of what it does), where a called
    /// function's futex call is looked for `levels` calls down.
    fn walk(&mut self, entry: u64, size: Option<u64>, levels: u32, budget: usize) -> Walked {
        let called = size.is_none();
        let in_function =
            |address: u64| (entry..entry + size.unwrap_or(0).max(1)).contains(&address);
        let mut walked = Walked {
            sites: Vec::new(),
            passed_on: Vec::new(),
            targets: HashSet::new(),
            in_line: HashMap::new(),
        };
        // The depth at each instruction walked, and the registers that hold the object (or an
        // address inside it, by the same offset) there on every path walked to it that brings
        // it ([`Path::holding_object`]; `None`: none does). An instruction is walked again
        // when a path brings the object where no path did, or leaves it out of a register that
        // held it: a probe there reads it from a register that holds it whichever way the
        // call came. A path that does not bring it does not hide one that does: it may only
        // seem to reach there (past a call that never returns, as `__assert_fail`).
        let mut depths: HashMap<u64, (u64, Option<Holding>)> = HashMap::new();
        // Each run of instructions from where a branch lands, with the depth there and what
        // the path to it set up for a system call.
        let mut runs = vec![(entry, 0u64, P::at_function_entry())];
        // Where each run walked starts, with the first path's depth and state there.
        let mut starts: HashMap<u64, (u64, P)> = HashMap::new();
        let mut decoded = 0;
        while let Some((start, depth, at_start)) = runs.pop() {
            starts.entry(start).or_insert((depth, at_start));
            let (mut depth, mut state) = (depth, at_start);
            let mut ip = start;
            while decoded < budget {
                // The traced function's entry is reached by calls: code before it falls into
                // it only past a call that does not return (`__stack_chk_fail`).
                if ip == entry && !called && (ip != start || decoded > 0) {
                    break;
                }
                let arriving = state.holding_object();
                match depths.get_mut(&ip) {
                    Some((_, seen)) => {
                        let narrowed = match seen {
                            _ if arriving.is_empty() => break,
                            None => arriving,
                            Some(held) => held.meet(&arriving),
                        };
                        if *seen == Some(narrowed) {
                            break;
                        }
                        *seen = Some(narrowed);
                    }
                    None => {
                        depths.insert(ip, (depth, (!arriving.is_empty()).then_some(arriving)));
                    }
                }
                let Some((instruction, next, flow)) = P::decode(self.image, ip) else {
                    break;
                };
                decoded += 1;
                match flow {
                    Flow::Syscall => {
                        // Probed where the run starts: the object must be in a register there.
                        let start_depth = depths[&start].0;
                        if let Some(futex) = state.futex_made()
                            && state.futex_on_object()
                            && let Some((object_register, object_offset)) =
                                P::object_register_in(&at_start.holding_object())
                            && let Some(return_address) = at_start.return_address(start_depth)
                            && let Ok(stack_offset) = u16::try_from(start_depth)
                        {
                            walked.in_line.insert(start, ip);
                            walked.sites.push(Site {
                                offset: start,
                                stack_offset,
                                return_address,
                                object_register,
                                object_offset,
                                calls: None,
                                futex,
                                wait_ends: (futex == Futex::Waits).then_some(WaitEnd::After(next)),
                            });
                        }
                        state.past_syscall();
                    }
                    Flow::Return | Flow::Stop | Flow::Jump(None) => break,
                    Flow::Jump(Some(target)) => {
                        walked.targets.insert(target);
                        if self.passes_on_waits
                            && !called
                            && in_function(ip)
                            && depth == 0
                            && !in_function(target)
                            && let Some((object_register, object_offset)) =
                                P::object_register_in(&state.holding_object())
                            && let Some(return_address) = state.return_address(depth)
                            && self.futex_of(target, CALLEE_LEVELS) == Some(Futex::Waits)
                        {
                            walked.passed_on.push(Site {
                                offset: ip,
                                stack_offset: 0,
                                return_address,
                                object_register,
                                object_offset,
                                calls: Some(target),
                                futex: Futex::Waits,
                                wait_ends: Some(WaitEnd::PassedOn(target)),
                            });
                        } else if called
                            || in_function(ip)
                            || !(self.named.contains(&target)
                                || (depth == 0 && ip.abs_diff(target) > LOCAL_JUMP_BYTES))
                        {
                            runs.push((target, depth, state));
                        }
                        break;
                    }
                    Flow::Branch(target) => {
                        if let Some(target) = target {
                            walked.targets.insert(target);
                            runs.push((target, depth, state));
                        }
                        runs.push((next, depth, state));
                        break;
                    }
                    Flow::Call(target) => {
                        let callee = target.and_then(|target| {
                            let futex = self
                                .futex_of(target, levels.saturating_sub(1))
                                .or_else(|| state.futex_passed_on(self.image, target))?;
                            Some((target, futex))
                        });
                        if let Some((target, futex)) = callee
                            && state.futex_on_object()
                            && let Some((object_register, object_offset)) =
                                P::object_register_in(&state.holding_object())
                            && let Some(return_address) = state.return_address(depth)
                            && let Ok(stack_offset) = u16::try_from(depth)
                        {
                            walked.sites.push(Site {
                                offset: ip,
                                stack_offset,
                                return_address,
                                object_register,
                                object_offset,
                                calls: Some(target),
                                futex,
                                wait_ends: (futex == Futex::Waits).then_some(WaitEnd::After(next)),
                            });
                        }
                        state.past_call();
                    }
                    Flow::Next => match state.follow(&instruction, depth) {
                        Some(new) => depth = new,
                        None => break,
                    },
                }
                ip = next;
            }
        }
        // A futex call in line is probed once, where the last run that reaches it starts: a
        // run that starts earlier falls through there, so every way to the call passes it.
        let mut last_start: HashMap<u64, u64> = HashMap::new();
        for (&start, &syscall) in &walked.in_line {
            let last = last_start.entry(syscall).or_insert(start);
            *last = (*last).max(start);
        }
        walked.sites.retain(|site| {
            site.calls.is_some()
                || walked
                    .in_line
                    .get(&site.offset)
                    .is_some_and(|syscall| last_start[syscall] == site.offset)
        });
        // Each site reads the object from a register that holds it on every way there.
        let object_register = |at: u64| match depths.get(&at) {
            Some((_, Some(held))) => P::object_register_in(held),
            _ => None,
        };
        // A futex call in line whose run has the object in no one register on every way in
        // is probed where each way into that run starts instead, if each goes there straight
        // (glibc 2.36's rwlock unlock on arm64 jumps to its wake of the writers with the lock
        // in x19 on one way and 8 bytes into it on another).
        let mut ways_in = Vec::new();
        let sites_at: HashSet<u64> = walked.sites.iter().map(|site| site.offset).collect();
        walked.sites.retain(|site| {
            if site.calls.is_some() || object_register(site.offset).is_some() {
                return true;
            }
            let holds = |at: u64| object_register(at).is_some();
            // Not where another site's probe is already.
            if let Some(ways) = ways_into(self.image, entry, *site, &starts, &holds, WAYS_IN_LEVELS)
                && !ways.iter().any(|way| sites_at.contains(&way.offset))
            {
                ways_in.extend(ways);
            }
            false
        });
        walked.sites.extend(ways_in);
        for sites in [&mut walked.sites, &mut walked.passed_on] {
            sites.retain_mut(|site| match object_register(site.offset) {
                Some((register, offset)) => {
                    site.object_register = register;
                    site.object_offset = offset;
                    true
                }
                None => false,
            });
        }
        walked
    }
}

/// Whether the function at `function` in `image` jumps to one of `traced` on some way through
/// it before it returns, read as `P`'s instruction set: conditional branches followed both
/// ways, jumps into the code they land in, calls stepped over. The traced function then
/// returns to the forwarder's caller. Compilers put such a tail call after an epilogue at a
/// function's end, past its loops and earlier returns (musl 1.2.3's `do_init_fini` on arm64
/// ends in `b pthread_mutex_unlock`).
pub(super) fn jumps_to<P: Path>(image: &[u8], function: u64, traced: &[u64]) -> bool {
    let mut pending = vec![function];
    let mut seen = HashSet::new();
    while let Some(mut ip) = pending.pop() {
        while seen.len() < MAX_WALKED_IN_CALLEE && seen.insert(ip) {
            let Some((_, next, flow)) = P::decode(image, ip) else {
                break;
            };
            ip = match flow {
                Flow::Jump(Some(target)) | Flow::Branch(Some(target))
                    if traced.contains(&target) =>
                {
                    return true;
                }
                Flow::Jump(Some(target)) => target,
                Flow::Branch(target) => {
                    pending.extend(target);
                    next
                }
                Flow::Next | Flow::Syscall | Flow::Call(_) => next,
                Flow::Jump(None) | Flow::Return | Flow::Stop => break,
            };
        }
    }
    false
}

/// How many runs back from an in-line futex call [`ways_into`] looks for the object in a
/// register.
const WAYS_IN_LEVELS: u32 = 2;

/// Where the code from a run's start goes, straight, up to the next run's start.
#[derive(PartialEq, Eq)]
enum Way {
    /// Into the run asked about, whenever it runs.
    Into,
    /// Never into it.
    Elsewhere,
    /// Maybe into it: a branch that may go there or not.
    Unknown,
}

/// Where the straight code from `start` in `image` goes: into the run at `target`, or not,
/// before any other of `starts`. A jump the walk does not follow (an indirect one) is not
/// followed here either.
fn way_from<P: Path, T>(image: &[u8], start: u64, target: u64, starts: &HashMap<u64, T>) -> Way {
    let mut ip = start;
    for _ in 0..MAX_WALKED_IN_CALLEE {
        if ip != start && starts.contains_key(&ip) {
            return if ip == target {
                Way::Into
            } else {
                Way::Elsewhere
            };
        }
        let Some((_, next, flow)) = P::decode(image, ip) else {
            return Way::Elsewhere;
        };
        match flow {
            Flow::Next | Flow::Call(_) | Flow::Syscall => ip = next,
            Flow::Jump(Some(to)) if to == target => return Way::Into,
            Flow::Jump(_) | Flow::Return | Flow::Stop => return Way::Elsewhere,
            Flow::Branch(Some(to)) if to != target && next != target => return Way::Elsewhere,
            Flow::Branch(_) => return Way::Unknown,
        }
    }
    Way::Unknown
}

/// The in-line futex call's `site` probed instead where each way into its run starts (each run
/// of `starts`, walked from the function at `entry`, whose code goes straight there), each way
/// whose start `holds` no register with the object in turn by its own ways in, `levels` more;
/// `None` if a way in may also go elsewhere, or one has no such probe.
fn ways_into<P: Path>(
    image: &[u8],
    entry: u64,
    site: Site,
    starts: &HashMap<u64, (u64, P)>,
    holds: &dyn Fn(u64) -> bool,
    levels: u32,
) -> Option<Vec<Site>> {
    if site.offset == entry {
        return None;
    }
    let mut ways = Vec::new();
    for (&start, &(depth, state)) in starts.iter().filter(|(start, _)| **start != site.offset) {
        match way_from::<P, _>(image, start, site.offset, starts) {
            Way::Elsewhere => continue,
            Way::Unknown => return None,
            Way::Into => {}
        }
        let way = Site {
            offset: start,
            stack_offset: u16::try_from(depth).ok()?,
            return_address: state.return_address(depth)?,
            ..site
        };
        match holds(start) {
            true => ways.push(way),
            false if levels > 0 => {
                ways.extend(ways_into(image, entry, way, starts, holds, levels - 1)?);
            }
            false => return None,
        }
    }
    (!ways.is_empty()).then_some(ways)
}

/// The futex call the function at `address` makes itself (glibc's `__lll_lock_wait`), among
/// its first instructions in the order they lie, jumps followed, before its first return.
fn own_futex_call<P: Path>(image: &[u8], address: u64) -> Option<Futex> {
    let mut ip = address;
    let mut state = P::default();
    for _ in 0..MAX_CALLEE_INSTRUCTIONS {
        let (instruction, next, flow) = P::decode(image, ip)?;
        ip = match flow {
            Flow::Syscall => return state.futex_made(),
            Flow::Return => return None,
            Flow::Jump(target) => target?,
            _ => next,
        };
        // The depth does not matter here: nothing is probed.
        let _ = state.follow(&instruction, 0);
    }
    None
}

/// How many general-purpose registers [`register_index`] numbers.
pub(super) const REGISTERS: usize = 16;

/// What a path through a function has set up: the constants registers hold, for the futex
/// call's number (`mov $202, %eax`, or through another register) and its operation in `esi`
/// (`mov $op, %esi`; glibc's `xor $op, %esi` or `add $op, %esi` of the private flag, or the
/// flag xor'ed in from another register);
/// and which registers hold the function's first argument, the call's object, or an address
/// inside it (`lea 8(%rbx), %rdi`: a read-write lock's futexes are words inside it).
#[derive(Clone, Copy, Default)]
pub(super) struct PathState {
    /// By [`register_index`]: the constant the register holds, in the bits an operation's
    /// kind is told by (a flag or'ed or xor'ed in with it aside).
    constants: [Option<u64>; REGISTERS],
    /// By [`register_index`]: the object's address plus this many bytes.
    object_plus: [Option<u8>; REGISTERS],
    /// Stack slots holding the object (`mov %rdi, 8(%rsp)` around a call), by their place
    /// below the entry's stack pointer; 0 for none.
    object_saved: [i64; 2],
}

/// Registers a call leaves as they were (System V): rbx, rbp, r12 to r15.
const CALLEE_SAVED: [Register; 6] = [
    Register::RBX,
    Register::RBP,
    Register::R12,
    Register::R13,
    Register::R14,
    Register::R15,
];

impl PathState {
    pub(super) fn at_entry() -> Self {
        let mut state = PathState::default();
        state.object_plus[register_index(Register::RDI)] = Some(0);
        state
    }

    /// The registers that hold the object, a bit each by [`register_index`].
    pub(super) fn object_mask(&self) -> u32 {
        (0..REGISTERS)
            .filter(|&r| self.object_plus[r] == Some(0))
            .fold(0, |mask, r| mask | 1 << r)
    }

    /// Forgets the object in every register outside `mask` (a bit each by
    /// [`register_index`]): where another way in does not bring it there.
    pub(super) fn keep_object_only_in(&mut self, mask: u32) {
        for (register, object) in self.object_plus.iter_mut().enumerate() {
            if mask & 1 << register == 0 && *object == Some(0) {
                *object = None;
            }
        }
    }

    /// What a call leaves: only what the registers it keeps and the stack hold.
    pub(super) fn after_call(&mut self) {
        let mut after = PathState {
            object_saved: self.object_saved,
            ..PathState::default()
        };
        for register in CALLEE_SAVED.map(register_index) {
            after.constants[register] = self.constants[register];
            after.object_plus[register] = self.object_plus[register];
        }
        *self = after;
    }

    /// What a system call leaves: its result in `rax`; `rcx` and `r11` overwritten.
    pub(super) fn after_syscall(&mut self) {
        for register in [Register::RAX, Register::RCX, Register::R11].map(register_index) {
            self.constants[register] = None;
            self.object_plus[register] = None;
        }
    }

    /// Follows the instruction's writes: a constant moved, xor'ed, or'ed or added in, or
    /// copied from another register; the object copied between 64-bit registers (`mov %rdi,
    /// %rbx`), offset within it (`lea 8(%rbx), %r12`), saved in a stack slot and loaded back.
    /// Any other write to a register loses what it held. `depth`: the bytes pushed since the
    /// entry.
    pub(super) fn note(&mut self, instruction: &Instruction, depth: u64) {
        let stack_slot = |operand: u32| {
            (instruction.op_kind(operand) == OpKind::Memory
                && instruction.memory_base() == Register::RSP
                && instruction.memory_index() == Register::None)
                .then(|| depth as i64 + 1 - instruction.memory_displacement64() as i64)
        };
        let mnemonic = instruction.mnemonic();
        if mnemonic == Mnemonic::Mov
            && let Some(slot) = stack_slot(0)
        {
            let saved = instruction.op1_kind() == OpKind::Register
                && instruction.op1_register().is_gpr64()
                && self.object_plus[register_index(instruction.op1_register())] == Some(0);
            self.object_saved = match saved {
                true => [slot, self.object_saved[0]],
                false => self.object_saved.map(|s| if s == slot { 0 } else { s }),
            };
            return;
        }
        // Registers written other than as the first operand.
        match mnemonic {
            Mnemonic::Xchg | Mnemonic::Xadd => self.forget(instruction.op1_register()),
            Mnemonic::Cmpxchg => self.forget(Register::RAX),
            _ => {}
        }
        if instruction.op0_kind() != OpKind::Register {
            return;
        }
        let destination = instruction.op0_register();
        let index = register_index(destination);
        if index >= REGISTERS {
            return;
        }
        let immediate = matches!(
            instruction.op1_kind(),
            OpKind::Immediate8
                | OpKind::Immediate8to32
                | OpKind::Immediate8to64
                | OpKind::Immediate32
                | OpKind::Immediate32to64
        )
        .then(|| instruction.immediate(1));
        let source = (instruction.op1_kind() == OpKind::Register)
            .then(|| register_index(instruction.op1_register()))
            .filter(|&source| source < REGISTERS);
        let wide = destination.is_gpr64();
        let (constant, object) = match (mnemonic, immediate, source) {
            // Compares and tests write no register.
            (Mnemonic::Cmp | Mnemonic::Test, _, _) => return,
            (Mnemonic::Mov | Mnemonic::Xor | Mnemonic::Or | Mnemonic::Add, Some(value), _) => {
                (Some(value), None)
            }
            // The zeroing idiom.
            (Mnemonic::Xor, None, Some(source)) if source == index => (Some(0), None),
            // A flag from another register (glibc's private flag, `xor %r8d, %esi`).
            (Mnemonic::Xor | Mnemonic::Or, None, Some(_)) => (self.constants[index], None),
            (Mnemonic::Mov, None, Some(source)) => (
                self.constants[source],
                self.object_plus[source].filter(|_| wide),
            ),
            (Mnemonic::Lea, _, _)
                if wide
                    && instruction.memory_index() == Register::None
                    && instruction.memory_base().is_gpr64() =>
            {
                let base = self.object_plus[register_index(instruction.memory_base())];
                let plus = base.and_then(|b| {
                    u8::try_from(i64::from(b) + instruction.memory_displacement64() as i64).ok()
                });
                (None, plus)
            }
            (Mnemonic::Mov, None, None) if wide => match stack_slot(1) {
                Some(slot) if self.object_saved.contains(&slot) => (None, Some(0)),
                _ => (None, None),
            },
            _ => (None, None),
        };
        self.constants[index] = constant;
        self.object_plus[index] = object;
    }

    fn forget(&mut self, register: Register) {
        let index = register_index(register);
        if index < REGISTERS {
            self.constants[index] = None;
            self.object_plus[index] = None;
        }
    }
}

impl Path for PathState {
    type Instruction = Instruction;

    fn decode(image: &[u8], ip: u64) -> Option<(Instruction, u64, Flow)> {
        let instruction = decode_one(image, ip)?;
        let flow = match instruction.flow_control() {
            _ if instruction.mnemonic() == Mnemonic::Syscall => Flow::Syscall,
            FlowControl::Return => Flow::Return,
            FlowControl::IndirectBranch | FlowControl::Exception => Flow::Stop,
            FlowControl::UnconditionalBranch => Flow::Jump(near_target(&instruction)),
            FlowControl::ConditionalBranch => Flow::Branch(near_target(&instruction)),
            FlowControl::Call => Flow::Call(near_target(&instruction)),
            _ => Flow::Next,
        };
        Some((instruction, instruction.next_ip(), flow))
    }

    fn at_function_entry() -> Self {
        PathState::at_entry()
    }

    fn follow(&mut self, instruction: &Instruction, depth: u64) -> Option<u64> {
        self.note(instruction, depth);
        match stack_change(instruction) {
            StackChange::None => Some(depth),
            StackChange::By(bytes) => depth.checked_add_signed(bytes),
            StackChange::Unknown => None,
        }
    }

    fn past_call(&mut self) {
        self.after_call();
    }

    fn past_syscall(&mut self) {
        self.after_syscall();
    }

    fn futex_made(&self) -> Option<Futex> {
        let number = self.constants[register_index(Register::RAX)];
        let op = self.constants[register_index(Register::RSI)];
        op.filter(|_| number == Some(arch::X86_64.sys_futex))
            .and_then(Futex::of)
    }

    /// glibc's `__syscall_cancel` takes the number on the stack on x86-64, where the futex
    /// functions that call it also make the call in line.
    fn futex_passed_on(&self, _image: &[u8], _callee: u64) -> Option<Futex> {
        None
    }

    /// `rdi` points into it.
    fn futex_on_object(&self) -> bool {
        self.object_plus[register_index(Register::RDI)].is_some()
    }

    /// Only the registers that hold the object itself: glibc keeps it in one at each of its
    /// x86-64 sites.
    fn holding_object(&self) -> Holding {
        Holding::of(
            &self
                .object_plus
                .map(|plus| plus.filter(|&bytes| bytes == 0)),
        )
    }

    fn object_register_in(holding: &Holding) -> Option<(ObjectRegister, u8)> {
        holding.choose(
            &ObjectRegister::ALL.map(|object| (object, register_index(decoded_register(object)))),
        )
    }

    /// Always at `[rsp + depth]`.
    fn return_address(&self, _depth: u64) -> Option<ReturnAddress> {
        Some(ReturnAddress::AsAtEntry)
    }
}

/// The first register of [`ObjectRegister::ALL`] in `mask` (a bit by [`register_index`]).
pub(super) fn object_register_in(mask: u32) -> Option<ObjectRegister> {
    ObjectRegister::ALL
        .into_iter()
        .find(|&object| mask & 1 << register_index(decoded_register(object)) != 0)
}

/// The decoder's name of a register the cookie names by its code.
pub(super) fn decoded_register(object: ObjectRegister) -> Register {
    match object {
        ObjectRegister::Rdi => Register::RDI,
        ObjectRegister::Rbx => Register::RBX,
        ObjectRegister::Rbp => Register::RBP,
        ObjectRegister::R12 => Register::R12,
        ObjectRegister::R13 => Register::R13,
        ObjectRegister::R14 => Register::R14,
        ObjectRegister::R15 => Register::R15,
        ObjectRegister::R8 => Register::R8,
        ObjectRegister::R9 => Register::R9,
        ObjectRegister::R10 => Register::R10,
        ObjectRegister::R11 => Register::R11,
        ObjectRegister::Rax => Register::RAX,
        ObjectRegister::Rcx => Register::RCX,
        ObjectRegister::Rdx => Register::RDX,
        ObjectRegister::Rsi => Register::RSI,
    }
}

/// A general-purpose register's number (of its 64-bit name, rax 0 to r15 15); [`REGISTERS`]
/// or more for the others.
pub(super) fn register_index(register: Register) -> usize {
    let full = register.full_register();
    match full.is_gpr64() {
        true => full as usize - Register::RAX as usize,
        false => REGISTERS,
    }
}

pub(super) fn near_target(instruction: &Instruction) -> Option<u64> {
    matches!(instruction.op0_kind(), OpKind::NearBranch64).then(|| instruction.near_branch_target())
}

pub(super) fn decode_one(image: &[u8], ip: u64) -> Option<Instruction> {
    let code = image.get(usize::try_from(ip).ok()?..)?;
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let instruction = decoder.decode();
    (!instruction.is_invalid()).then_some(instruction)
}

/// How an instruction moves the stack pointer.
pub(super) enum StackChange {
    None,
    /// Bytes pushed (negative: popped).
    By(i64),
    /// Moved by an amount the walk cannot know (`leave`, `and $-16, %rsp`, `mov %rbp, %rsp`).
    Unknown,
}

pub(super) fn stack_change(instruction: &Instruction) -> StackChange {
    let immediate = || match instruction.op1_kind() {
        OpKind::Immediate8to64 | OpKind::Immediate32to64 | OpKind::Immediate32 => {
            Some(instruction.immediate(1) as i64)
        }
        _ => None,
    };
    let on_rsp =
        instruction.op0_kind() == OpKind::Register && instruction.op0_register() == Register::RSP;
    match instruction.mnemonic() {
        Mnemonic::Push | Mnemonic::Pushfq => StackChange::By(8),
        Mnemonic::Pop | Mnemonic::Popfq if !on_rsp => StackChange::By(-8),
        Mnemonic::Sub if on_rsp => immediate().map_or(StackChange::Unknown, StackChange::By),
        Mnemonic::Add if on_rsp => {
            immediate().map_or(StackChange::Unknown, |n| StackChange::By(-n))
        }
        Mnemonic::Lea
            if on_rsp
                && instruction.memory_base() == Register::RSP
                && instruction.memory_index() == Register::None =>
        {
            StackChange::By(-(instruction.memory_displacement64() as i64))
        }
        _ if on_rsp || instruction.mnemonic() == Mnemonic::Leave => StackChange::Unknown,
        _ => StackChange::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes at address 0 of a small image: `entry` at 0, a futex-waiting function at 0x40.
    fn image(entry: &[u8], callee: &[u8]) -> Vec<u8> {
        let mut image = vec![0xcc; 0x80];
        image[..entry.len()].copy_from_slice(entry);
        image[0x40..0x40 + callee.len()].copy_from_slice(callee);
        image
    }

    /// `mov $0x80, %esi` (FUTEX_WAIT, private); `mov $202, %eax; syscall; ret`
    const FUTEX_FUNCTION: [u8; 13] = [
        0xbe, 0x80, 0x00, 0x00, 0x00, 0xb8, 0xca, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xc3,
    ];

    fn sites_of(image: &[u8], wanted: Futex) -> Vec<Site> {
        sites::<PathState>(image, 0, 0x20, &HashSet::new(), wanted)
    }

    #[test]
    fn a_tail_jump_after_a_loop_forwards_and_a_return_does_not() {
        // test %rdi,%rdi; je 0xc; call 0x100; jmp 0x0; then at 0xc: jmp 0x200, or ret
        let looped = [
            0x48, 0x85, 0xff, 0x74, 0x07, 0xe8, 0xf6, 0x00, 0x00, 0x00, 0xeb, 0xf4,
        ];
        let forwarder = [&looped[..], &[0xe9, 0xef, 0x01, 0x00, 0x00]].concat();
        assert!(jumps_to::<PathState>(&forwarder, 0, &[0x200]));
        assert!(!jumps_to::<PathState>(&forwarder, 0, &[0x100]), "a call");
        let returner = [&looped[..], &[0xc3]].concat();
        assert!(!jumps_to::<PathState>(&returner, 0, &[0x200]));
    }

    #[test]
    fn finds_the_call_of_a_futex_function_with_the_bytes_pushed_before_it() {
        // push %rbx; sub $0x10,%rsp; test %eax,%eax; je +7 (to the add); call 0x40; add
        // $0x10,%rsp; pop %rbx; ret
        let entry = [
            0x53, 0x48, 0x83, 0xec, 0x10, 0x85, 0xc0, 0x74, 0x05, 0xe8, 0x32, 0x00, 0x00, 0x00,
            0x48, 0x83, 0xc4, 0x10, 0x5b, 0xc3,
        ];
        let image = image(&entry, &FUTEX_FUNCTION);
        let sites = sites_of(&image, Futex::Waits);
        // The instruction after the call is the je's target too: the wait ends at the futex
        // function's return.
        let wait = Site {
            offset: 9,
            stack_offset: 24,
            return_address: ReturnAddress::AsAtEntry,
            object_register: ObjectRegister::Rdi,
            object_offset: 0,
            calls: Some(0x40),
            futex: Futex::Waits,
            wait_ends: Some(WaitEnd::ReturnOf(0x40)),
        };
        assert_eq!(sites, [wait]);
        assert!(sites_of(&image, Futex::Wakes).is_empty());
    }

    #[test]
    fn a_futex_call_in_line_is_probed_where_its_straight_run_begins() {
        // test %eax,%eax; jg +1 (to 5); ret; at 5: xor $0x81,%sil (FUTEX_WAKE, private);
        // mov $202,%eax; syscall; ret
        let entry = [
            0x85, 0xc0, 0x7f, 0x01, 0xc3, 0x40, 0x80, 0xf6, 0x81, 0xb8, 0xca, 0x00, 0x00, 0x00,
            0x0f, 0x05, 0xc3,
        ];
        let image = image(&entry, &[]);
        let sites = sites_of(&image, Futex::Wakes);
        let wake = Site {
            offset: 5,
            stack_offset: 0,
            return_address: ReturnAddress::AsAtEntry,
            object_register: ObjectRegister::Rdi,
            object_offset: 0,
            calls: None,
            futex: Futex::Wakes,
            wait_ends: None,
        };
        assert_eq!(sites, [wake]);

        assert!(
            sites_of(&image, Futex::Waits).is_empty(),
            "a lock waits only in a call"
        );
    }

    #[test]
    fn a_call_of_another_function_and_an_unknown_stack_are_no_sites() {
        // call 0x40 (no futex call there: ret); push %rbp; and $-16,%rsp; call 0x50 (futex);
        // leave; ret
        let mut bytes = image(
            &[
                0xe8, 0x3b, 0x00, 0x00, 0x00, 0x55, 0x48, 0x83, 0xe4, 0xf0, 0xe8, 0x41, 0x00, 0x00,
                0x00, 0xc9, 0xc3,
            ],
            &[0xc3],
        );
        bytes[0x50..0x5d].copy_from_slice(&FUTEX_FUNCTION);
        assert_eq!(sites_of(&bytes, Futex::Waits), []);
    }

    #[test]
    fn a_jump_from_outside_the_function_to_another_named_one_is_not_followed() {
        // push %rbx; jmp 0x10 (out of the 3-byte function); at 0x10: jmp 0x40; at 0x40: call
        // 0x50, a futex wait; ret.
        let mut bytes = image(&[0x53, 0xeb, 0x0d], &[0xe8, 0x0b, 0x00, 0x00, 0x00, 0xc3]);
        bytes[0x10..0x12].copy_from_slice(&[0xeb, 0x2e]);
        bytes[0x50..0x5d].copy_from_slice(&FUTEX_FUNCTION);
        let call = Site {
            offset: 0x40,
            stack_offset: 8,
            return_address: ReturnAddress::AsAtEntry,
            object_register: ObjectRegister::Rdi,
            object_offset: 0,
            calls: Some(0x50),
            futex: Futex::Waits,
            wait_ends: Some(WaitEnd::After(0x45)),
        };
        assert_eq!(
            sites::<PathState>(&bytes, 0, 3, &HashSet::new(), Futex::Waits),
            [call]
        );
        let named = HashSet::from([0x40]);
        assert_eq!(sites::<PathState>(&bytes, 0, 3, &named, Futex::Waits), []);
    }

    #[test]
    fn a_wait_in_line_on_a_word_inside_the_object_is_probed_once_with_its_register() {
        // push %rbx; mov %rdi,%rbx; test %eax,%eax; je 0xe; lea 8(%rbx),%rdi; jmp 0x11;
        // at 0xe: mov %rbx,%rdi; at 0x11: mov $0x80,%esi; add $0x109,%esi (FUTEX_WAIT_BITSET,
        // glibc 2.31's way); mov $202,%eax; syscall; at 0x23: cmp $-4096,%rax; pop %rbx; ret.
        // The run from 0xe falls through 0x11, where the run from the jump starts: one probe,
        // at 0x11, where only rbx holds the object on both ways (rdi points 8 bytes into it on
        // one).
        let entry = [
            0x53, 0x48, 0x89, 0xfb, 0x85, 0xc0, 0x74, 0x06, 0x48, 0x8d, 0x7b, 0x08, 0xeb, 0x03,
            0x48, 0x89, 0xdf, 0xbe, 0x80, 0x00, 0x00, 0x00, 0x81, 0xc6, 0x09, 0x01, 0x00, 0x00,
            0xb8, 0xca, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff, 0x5b,
            0xc3,
        ];
        let mut bytes = vec![0xcc; 0x80];
        bytes[..entry.len()].copy_from_slice(&entry);
        let wait = Site {
            offset: 0x11,
            stack_offset: 8,
            return_address: ReturnAddress::AsAtEntry,
            object_register: ObjectRegister::Rbx,
            object_offset: 0,
            calls: None,
            futex: Futex::Waits,
            wait_ends: Some(WaitEnd::After(0x23)),
        };
        assert_eq!(
            sites::<PathState>(&bytes, 0, 0x2b, &HashSet::new(), Futex::Waits),
            [wait]
        );
        assert!(sites::<PathState>(&bytes, 0, 0x2b, &HashSet::new(), Futex::Wakes).is_empty());
    }

    #[test]
    fn a_function_that_only_jumps_to_one_that_waits_is_probed_at_the_jump() {
        // jmp 0x40; at 0x40: call 0x50, a futex wait; ret.
        let mut bytes = image(&[0xeb, 0x3e], &[0xe8, 0x0b, 0x00, 0x00, 0x00, 0xc3]);
        bytes[0x50..0x5d].copy_from_slice(&FUTEX_FUNCTION);
        let jump = Site {
            offset: 0,
            stack_offset: 0,
            return_address: ReturnAddress::AsAtEntry,
            object_register: ObjectRegister::Rdi,
            object_offset: 0,
            calls: Some(0x40),
            futex: Futex::Waits,
            wait_ends: Some(WaitEnd::PassedOn(0x40)),
        };
        assert_eq!(
            sites::<PathState>(&bytes, 0, 2, &HashSet::new(), Futex::Waits),
            [jump]
        );
        assert_eq!(
            sites::<PathState>(&bytes, 0, 2, &HashSet::new(), Futex::Wakes),
            []
        );
    }
}
