//! Where a call blocks or wakes a waiter (`--contended`): the slow path inside a pthread
//! function, which an uncontended call never reaches, so that a probe there costs it nothing.
//!
//! glibc's lock takes a free mutex with one `cmpxchg` and returns; only a lock that finds it
//! held calls the function that waits on its futex (`__lll_lock_wait`), and only an unlock that
//! finds waiters calls the one that wakes them (`__lll_lock_wake`, or on 2.31 a futex syscall
//! in line). The functions have no exported names, so they are told by what they do: they make
//! the futex system call themselves.
//!
//! The walk follows the function's control flow from its entry, keeping the bytes pushed so far
//! at each instruction, so that a probe in the middle knows where the caller's return address
//! is. It follows direct jumps (pthread_mutex_unlock jumps to the code it shares with the
//! condition variables; a lock jumps to its robust and priority-inheriting variants), but not
//! a tail call from there on: a jump to another named function, or a far jump with nothing
//! pushed (glibc's unlock of a priority-protected mutex ends in a jump to the code that changes
//! priorities, whose futex calls are on a lock of its own).

use std::collections::{HashMap, HashSet};

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register};

/// The futex system call's number on x86-64.
const SYS_FUTEX: u64 = 202;
/// How many instructions a walk decodes at most: glibc's lock with its robust and
/// priority-protected paths is about 1,000.
const MAX_WALKED: usize = 8192;
/// A jump with nothing pushed further than this, outside the traced function, is a tail call.
const LOCAL_JUMP_BYTES: u64 = 512;
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
    /// Bytes pushed since the traced function's entry: its return address is at
    /// `[rsp + stack_offset]`.
    pub stack_offset: u16,
    /// The futex function called there, whose return ends the wait; `None` for a futex call
    /// in line (the probe is then on the first instruction of the straight run that makes it).
    pub calls: Option<u64>,
    /// What the futex call does.
    pub futex: Futex,
    /// The site is the function's jump to the one that waits (sem_wait's to its slow path),
    /// whose return is the call's own: its value is the call's result.
    pub passes_on: bool,
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
    fn of(op: u64) -> Option<Futex> {
        match op & 0x7f {
            0 | 6 | 9 | 11 | 13 => Some(Futex::Waits),
            1 | 5 | 7 | 10 => Some(Futex::Wakes),
            _ => None,
        }
    }
}

/// The slow-path sites of the function at `entry`, `size` bytes, in `image` (a library's bytes,
/// at their file offsets, which are also its addresses): each direct call of a function that
/// makes a futex call of a known operation, and each such futex call made in line. A tail call
/// from outside the function (to one of `named`, other functions' starts, or far with nothing
/// pushed) is not followed. A function that waits in no call of its own but jumps to another
/// that waits (itself or in the functions it calls) is probed at that jump. Sites whose stack
/// depth cannot be followed (a frame pointer, an aligned stack) are left out.
pub fn sites(
    image: &[u8],
    entry: u64,
    size: u64,
    named: &HashSet<u64>,
    wanted: Futex,
) -> Vec<Site> {
    let mut walker = Walker {
        image,
        named,
        futex_of: HashMap::new(),
        passes_on_waits: wanted == Futex::Waits,
    };
    let (sites, passed_on) = walker.walk(entry, Some(size), 0, MAX_WALKED);
    let mut sites: Vec<Site> = sites.into_iter().filter(|s| s.futex == wanted).collect();
    // A lock waits only in a called function, whose return is the wait's end.
    if wanted == Futex::Waits {
        sites.retain(|s| s.calls.is_some());
    }
    if wanted == Futex::Waits && sites.is_empty() {
        sites.extend(passed_on);
    }
    sites.sort_by_key(|s| s.offset);
    sites.dedup();
    sites
}

/// Walks functions' code, remembering what futex call each called function makes.
struct Walker<'a> {
    image: &'a [u8],
    named: &'a HashSet<u64>,
    /// By function and how many calls down was looked.
    futex_of: HashMap<(u64, u32), Option<Futex>>,
    /// Whether a jump to a function that waits is a site (sought for a lock), not followed.
    passes_on_waits: bool,
}

impl Walker<'_> {
    /// The futex call the function at `address` makes: itself, on the straight way from its
    /// entry, or with `levels` above 0 anywhere in it or in the functions it calls, so many
    /// calls down. A wait if it makes any.
    fn futex_of(&mut self, address: u64, levels: u32) -> Option<Futex> {
        if let Some(&known) = self.futex_of.get(&(address, levels)) {
            return known;
        }
        if levels == 0 {
            let futex = own_futex_call(self.image, address);
            self.futex_of.insert((address, levels), futex);
            return futex;
        }
        // Not in the middle of its own analysis: a function that calls itself.
        self.futex_of.insert((address, levels), None);
        let (sites, _) = self.walk(address, None, levels, MAX_WALKED_IN_CALLEE);
        let futex = [Futex::Waits, Futex::Wakes]
            .into_iter()
            .find(|&kind| sites.iter().any(|s| s.futex == kind));
        self.futex_of.insert((address, levels), futex);
        futex
    }

    /// The sites of the function at `entry` (`size` bytes; `None` for a called function, all
    /// of whose jumps are followed, its tail calls being part of what it does), where a called
    /// function's futex call is looked for `levels` calls down; and the jumps from the traced
    /// function with nothing pushed to another that waits, which are not followed.
    fn walk(
        &mut self,
        entry: u64,
        size: Option<u64>,
        levels: u32,
        budget: usize,
    ) -> (Vec<Site>, Vec<Site>) {
        let called = size.is_none();
        let in_function =
            |address: u64| (entry..entry + size.unwrap_or(0).max(1)).contains(&address);
        let mut passed_on = Vec::new();
        let mut sites = Vec::new();
        // The depth at each instruction walked, and whether the argument was in rdi there. An
        // instruction is walked again when a path brings the argument where the first did not:
        // a path that only seems to reach it (past a call that never returns, as
        // `__assert_fail`) must not hide one that does.
        let mut depths: HashMap<u64, (u64, bool)> = HashMap::new();
        // Each run of instructions from where a branch lands, with the depth there and what
        // the path to it set up for a system call.
        let mut runs = vec![(entry, 0u64, PathState::at_entry())];
        let mut walked = 0;
        while let Some((start, depth, at_start)) = runs.pop() {
            let (mut depth, mut state) = (depth, at_start);
            let mut ip = start;
            while walked < budget {
                if depths
                    .get(&ip)
                    .is_some_and(|&(_, had)| had || !state.has_first_argument())
                {
                    break;
                }
                let Some(instruction) = decode_one(self.image, ip) else {
                    break;
                };
                walked += 1;
                depths.insert(ip, (depth, state.has_first_argument()));
                let next = instruction.next_ip();
                if instruction.mnemonic() == Mnemonic::Syscall {
                    // Probed where the run starts: the argument must be in rdi there.
                    if let Some(futex) = state.made()
                        && at_start.has_first_argument()
                        && let Ok(stack_offset) = u16::try_from(depths[&start].0)
                    {
                        sites.push(Site {
                            offset: start,
                            stack_offset,
                            calls: None,
                            futex,
                            passes_on: false,
                        });
                    }
                    ip = next;
                    continue;
                }
                match instruction.flow_control() {
                    FlowControl::Return | FlowControl::IndirectBranch | FlowControl::Exception => {
                        break;
                    }
                    FlowControl::UnconditionalBranch => {
                        let Some(target) = near_target(&instruction) else {
                            break;
                        };
                        if self.passes_on_waits
                            && !called
                            && in_function(ip)
                            && depth == 0
                            && state.has_first_argument()
                            && !in_function(target)
                            && self.futex_of(target, CALLEE_LEVELS) == Some(Futex::Waits)
                        {
                            passed_on.push(Site {
                                offset: ip,
                                stack_offset: 0,
                                calls: Some(target),
                                futex: Futex::Waits,
                                passes_on: true,
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
                    FlowControl::ConditionalBranch => {
                        if let Some(target) = near_target(&instruction) {
                            runs.push((target, depth, state));
                        }
                        runs.push((next, depth, state));
                        break;
                    }
                    FlowControl::Call => {
                        let callee = near_target(&instruction).and_then(|target| {
                            Some((target, self.futex_of(target, levels.saturating_sub(1))?))
                        });
                        if let Some((target, futex)) = callee
                            && state.has_first_argument()
                            && let Ok(stack_offset) = u16::try_from(depth)
                        {
                            sites.push(Site {
                                offset: ip,
                                stack_offset,
                                calls: Some(target),
                                futex,
                                passes_on: false,
                            });
                        }
                        state.after_call();
                    }
                    _ => {
                        state.note(&instruction, depth);
                        match stack_change(&instruction) {
                            StackChange::None => {}
                            StackChange::By(bytes) => match depth.checked_add_signed(bytes) {
                                Some(new) => depth = new,
                                None => break,
                            },
                            StackChange::Unknown => break,
                        }
                    }
                }
                ip = next;
            }
        }
        (sites, passed_on)
    }
}

/// The futex call the function at `address` makes itself (glibc's `__lll_lock_wait`), among
/// its first instructions in the order they lie, jumps followed, before its first return.
fn own_futex_call(image: &[u8], address: u64) -> Option<Futex> {
    let mut ip = address;
    let mut state = PathState::default();
    for _ in 0..MAX_CALLEE_INSTRUCTIONS {
        let instruction = decode_one(image, ip)?;
        if instruction.mnemonic() == Mnemonic::Syscall {
            return state.made();
        }
        ip = match instruction.flow_control() {
            FlowControl::Return => return None,
            FlowControl::UnconditionalBranch => near_target(&instruction)?,
            _ => instruction.next_ip(),
        };
        state.note(&instruction, 0);
    }
    None
}

/// What a path through a function has set up: which registers hold the futex call's number
/// (`mov $202, %eax`, or through another register), its operation in `esi` (`mov $op, %esi`,
/// or glibc's `xor $op, %esi` of the private flag), and which still hold the function's first
/// argument, which a probe there records as the object (`a1`): a lock's futex is its first
/// word, so the futex function is passed the object itself, but a probe is placed only where
/// `rdi` is known to hold it.
#[derive(Clone, Copy, Default)]
struct PathState {
    /// Registers holding 202, by [`register_bit`].
    number_in: u32,
    op: Option<u64>,
    /// Registers holding the first argument.
    first_argument_in: u32,
    /// Stack slots holding it (`mov %rdi, 8(%rsp)` around a call), by their place below the
    /// entry's stack pointer; 0 for none.
    first_argument_saved: [i64; 2],
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
    fn at_entry() -> Self {
        PathState {
            first_argument_in: register_bit(Register::RDI),
            ..PathState::default()
        }
    }

    fn has_first_argument(&self) -> bool {
        self.first_argument_in & register_bit(Register::RDI) != 0
    }

    /// What a call leaves: no futex call set up; the argument only where it is saved.
    fn after_call(&mut self) {
        let saved = CALLEE_SAVED
            .iter()
            .fold(0, |bits, &r| bits | register_bit(r));
        *self = PathState {
            first_argument_in: self.first_argument_in & saved,
            first_argument_saved: self.first_argument_saved,
            ..PathState::default()
        };
    }

    fn note(&mut self, instruction: &Instruction, depth: u64) {
        self.note_argument(instruction, depth);
        let immediate = matches!(
            instruction.op1_kind(),
            OpKind::Immediate8 | OpKind::Immediate32 | OpKind::Immediate32to64
        );
        let destination = register_bit(instruction.op0_register());
        match instruction.mnemonic() {
            Mnemonic::Mov | Mnemonic::Xor
                if immediate && instruction.op0_register().full_register() == Register::RSI =>
            {
                self.op = Some(instruction.immediate(1));
            }
            Mnemonic::Mov if immediate => match instruction.immediate(1) {
                SYS_FUTEX => self.number_in |= destination,
                _ => self.number_in &= !destination,
            },
            Mnemonic::Mov if instruction.op1_kind() == OpKind::Register => {
                match self.number_in & register_bit(instruction.op1_register()) {
                    0 => self.number_in &= !destination,
                    _ => self.number_in |= destination,
                }
            }
            _ if instruction.op0_kind() == OpKind::Register => self.number_in &= !destination,
            _ => {}
        }
    }

    /// Follows the first argument through 64-bit register copies (`mov %rdi, %rbx`, `lea
    /// (%rdi), %rdi`) and stack slots it is saved in and loaded back from; any other write to
    /// a register loses it there. `depth`: the bytes pushed since the entry.
    fn note_argument(&mut self, instruction: &Instruction, depth: u64) {
        let stack_slot = |operand: u32| {
            (instruction.op_kind(operand) == OpKind::Memory
                && instruction.memory_base() == Register::RSP
                && instruction.memory_index() == Register::None)
                .then(|| depth as i64 + 1 - instruction.memory_displacement64() as i64)
        };
        if instruction.mnemonic() == Mnemonic::Mov
            && let Some(slot) = stack_slot(0)
        {
            let saved = instruction.op1_kind() == OpKind::Register
                && instruction.op1_register().is_gpr64()
                && self.first_argument_in & register_bit(instruction.op1_register()) != 0;
            self.first_argument_saved = match saved {
                true => [slot, self.first_argument_saved[0]],
                false => self
                    .first_argument_saved
                    .map(|s| if s == slot { 0 } else { s }),
            };
            return;
        }
        if instruction.op0_kind() != OpKind::Register {
            return;
        }
        let destination = register_bit(instruction.op0_register());
        let source = match instruction.mnemonic() {
            Mnemonic::Mov
                if instruction.op1_kind() == OpKind::Register
                    && instruction.op0_register().is_gpr64() =>
            {
                register_bit(instruction.op1_register())
            }
            Mnemonic::Lea
                if instruction.memory_index() == Register::None
                    && instruction.memory_displacement64() == 0
                    && instruction.op0_register().is_gpr64() =>
            {
                register_bit(instruction.memory_base())
            }
            Mnemonic::Mov if instruction.op0_register().is_gpr64() => match stack_slot(1) {
                Some(slot) if self.first_argument_saved.contains(&slot) => {
                    self.first_argument_in |= destination;
                    return;
                }
                _ => 0,
            },
            // Compares and tests write no register.
            Mnemonic::Cmp | Mnemonic::Test => return,
            _ => 0,
        };
        match self.first_argument_in & source {
            0 => self.first_argument_in &= !destination,
            _ => self.first_argument_in |= destination,
        }
    }

    /// The kind of futex call a `syscall` now makes, if it is one of a known operation.
    fn made(&self) -> Option<Futex> {
        let number_set = self.number_in & register_bit(Register::RAX) != 0;
        self.op.filter(|_| number_set).and_then(Futex::of)
    }
}

/// A bit per general-purpose register (its 64-bit name), 0 for the others.
fn register_bit(register: Register) -> u32 {
    let full = register.full_register();
    if full.is_gpr64() {
        1 << (full as u32 - Register::RAX as u32)
    } else {
        0
    }
}

fn near_target(instruction: &Instruction) -> Option<u64> {
    matches!(instruction.op0_kind(), OpKind::NearBranch64).then(|| instruction.near_branch_target())
}

fn decode_one(image: &[u8], ip: u64) -> Option<Instruction> {
    let code = image.get(usize::try_from(ip).ok()?..)?;
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let instruction = decoder.decode();
    (!instruction.is_invalid()).then_some(instruction)
}

/// How an instruction moves the stack pointer.
enum StackChange {
    None,
    /// Bytes pushed (negative: popped).
    By(i64),
    /// Moved by an amount the walk cannot know (`leave`, `and $-16, %rsp`, `mov %rbp, %rsp`).
    Unknown,
}

fn stack_change(instruction: &Instruction) -> StackChange {
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
        sites(image, 0, 0x20, &HashSet::new(), wanted)
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
        let wait = Site {
            offset: 9,
            stack_offset: 24,
            calls: Some(0x40),
            futex: Futex::Waits,
            passes_on: false,
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
            calls: None,
            futex: Futex::Wakes,
            passes_on: false,
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
            calls: Some(0x50),
            futex: Futex::Waits,
            passes_on: false,
        };
        assert_eq!(sites(&bytes, 0, 3, &HashSet::new(), Futex::Waits), [call]);
        let named = HashSet::from([0x40]);
        assert_eq!(sites(&bytes, 0, 3, &named, Futex::Waits), []);
    }

    #[test]
    fn a_function_that_only_jumps_to_one_that_waits_is_probed_at_the_jump() {
        // jmp 0x40; at 0x40: call 0x50, a futex wait; ret.
        let mut bytes = image(&[0xeb, 0x3e], &[0xe8, 0x0b, 0x00, 0x00, 0x00, 0xc3]);
        bytes[0x50..0x5d].copy_from_slice(&FUTEX_FUNCTION);
        let jump = Site {
            offset: 0,
            stack_offset: 0,
            calls: Some(0x40),
            futex: Futex::Waits,
            passes_on: true,
        };
        assert_eq!(sites(&bytes, 0, 2, &HashSet::new(), Futex::Waits), [jump]);
        assert_eq!(sites(&bytes, 0, 2, &HashSet::new(), Futex::Wakes), []);
    }
}
