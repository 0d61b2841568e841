//! What the planner reads of arm64 code (decoded by yaxpeax-arm): the answers
//! [`super::machine_code`] gives for an arm64 library. Every A64 instruction is 4 bytes, so a
//! word that decodes to nothing is skipped, not the rest of the function.

use tracer_common::{ObjectRegister, ProbeCookie, arch};
use yaxpeax_arm::armv8::a64::{InstDecoder, Instruction, Opcode, Operand, SizeCode};

use super::{
    machine_code::ErrnoAt,
    placement::Needs,
    slow_path::{self, Flow, Futex, Holding, ReturnAddress},
};

/// `TPIDR_EL0`, the thread pointer, as `mrs` names it (op0 3, op1 3, CRn 13, CRm 0, op2 2).
const TPIDR_EL0: u16 = 0x5e82;

/// The first argument's register, `x0`.
const ARGUMENT_1: u16 = 0;

/// Instructions looked at from a function's start for what it loads or computes first.
const PREFIX_INSTRUCTIONS: usize = 16;

/// Each instruction of `code` that decodes, with its address in the space of `base`.
fn instructions(code: &[u8], base: u64) -> impl Iterator<Item = (u64, Instruction)> + '_ {
    let decoder = InstDecoder::default();
    code.chunks_exact(4)
        .enumerate()
        .filter_map(move |(n, word)| {
            let mut reader = yaxpeax_arch::U8Reader::new(word);
            let instruction = yaxpeax_arch::Decoder::decode(&decoder, &mut reader).ok()?;
            Some((base + 4 * n as u64, instruction))
        })
}

/// Where a direct branch at `address` lands, and whether it is a call (`bl`).
fn branch(address: u64, instruction: &Instruction) -> Option<(u64, bool)> {
    let offset = instruction
        .operands
        .iter()
        .find_map(|operand| match operand {
            Operand::PCOffset(offset) => Some(*offset),
            _ => None,
        })?;
    let is_branch = matches!(
        instruction.opcode,
        Opcode::B | Opcode::BL | Opcode::Bcc(_) | Opcode::CBZ | Opcode::CBNZ | Opcode::TBZ
    ) || instruction.opcode == Opcode::TBNZ;
    is_branch.then(|| {
        (
            address.wrapping_add_signed(offset),
            instruction.opcode == Opcode::BL,
        )
    })
}

/// See [`super::machine_code::direct_branch_destinations`].
pub fn direct_branch_destinations(code: &[u8], base: u64) -> Vec<u64> {
    instructions(code, base)
        .filter_map(|(address, i)| branch(address, &i))
        .map(|(destination, _)| destination)
        .collect()
}

/// See [`super::machine_code::calls`]: each `bl`, and the address after it, where the callee
/// returns.
pub fn calls(code: &[u8], base: u64) -> Vec<(u64, u64)> {
    instructions(code, base)
        .filter_map(|(address, i)| match branch(address, &i) {
            Some((destination, true)) => Some((destination, address + 4)),
            _ => None,
        })
        .collect()
}

/// A register's number, if `operand` is a general-purpose register (or the stack pointer).
fn register(operand: &Operand) -> Option<u16> {
    match operand {
        Operand::Register(_, n) | Operand::RegisterOrSP(_, n) | Operand::RegisterPair(_, n) => {
            Some(*n)
        }
        _ => None,
    }
}

/// A register operand not shifted (`add x0, x1, x0` decodes its last as `x0, lsl #0`).
fn unshifted_register(operand: &Operand) -> Option<u16> {
    match operand {
        Operand::Register(_, n) | Operand::RegShift(_, 0, _, n) => Some(*n),
        _ => None,
    }
}

/// `adrp xd, page` at `address` as (d, the page's address).
fn adrp_page(address: u64, instruction: &Instruction) -> Option<(u16, u64)> {
    match (instruction.opcode, &instruction.operands) {
        (Opcode::ADRP, [Operand::Register(_, to), Operand::PCOffset(offset), ..]) => {
            Some((*to, (address & !0xfff).wrapping_add_signed(*offset)))
        }
        _ => None,
    }
}

/// An immediate operand's value.
fn immediate(operand: &Operand) -> Option<u64> {
    match operand {
        Operand::Immediate(value) => Some(u64::from(*value)),
        Operand::Imm64(value) => Some(*value),
        Operand::Imm16(value) => Some(u64::from(*value)),
        Operand::ImmShift(value, shift) => Some(u64::from(*value) << shift),
        _ => None,
    }
}

/// `add xd, xn, #k` or `sub xd, xn, #k` as (d, n, k), k negative for `sub`.
fn add_immediate(instruction: &Instruction) -> Option<(u16, u16, i64)> {
    let sign = match instruction.opcode {
        Opcode::ADD => 1,
        Opcode::SUB => -1,
        _ => return None,
    };
    let [to, from, amount, _] = &instruction.operands;
    let amount = i64::try_from(immediate(amount)?).ok()?;
    Some((register(to)?, register(from)?, sign * amount))
}

/// A load of a 32-bit register from `[xn, #k]` as (n, k).
fn word_load(instruction: &Instruction) -> Option<(u16, i64)> {
    if !matches!(
        instruction.opcode,
        Opcode::LDR | Opcode::LDAR | Opcode::LDUR
    ) {
        return None;
    }
    let [Operand::Register(SizeCode::W, _), address, _, _] = &instruction.operands else {
        return None;
    };
    match address {
        Operand::RegPreIndex(base, offset, false) => Some((*base, i64::from(*offset))),
        _ => None,
    }
}

/// See [`super::machine_code::first_load_through_argument_1`]: the offset from `x0` of the first
/// 32-bit load through it, directly (`ldr w, [x0, #k]`) or through a register it was added
/// to (`add xn, x0, #k; ldr w, [xn]`), as glibc's pthread_cond_signal loads `__wrefs`.
pub fn first_load_through_argument_1(code: &[u8], base: u64) -> Option<u64> {
    // What each register holds as an offset from the first argument, where known.
    let mut from_argument = [None::<i64>; 32];
    from_argument[usize::from(ARGUMENT_1)] = Some(0);
    for (_, instruction) in instructions(code, base).take(PREFIX_INSTRUCTIONS) {
        if let Some((register, offset)) = word_load(&instruction)
            && let Some(base_offset) = from_argument[usize::from(register)]
        {
            return u64::try_from(base_offset + offset).ok();
        }
        if let Some((to, from, amount)) = add_immediate(&instruction) {
            from_argument[usize::from(to)] = from_argument[usize::from(from)].map(|k| k + amount);
        } else if let Some(to) = instruction.operands.first().and_then(register)
            && to < 32
        {
            // Anything else written to a register: no longer known.
            from_argument[usize::from(to)] = None;
        }
    }
    None
}

/// See [`super::machine_code::addresses_taken`]: the addresses the function computes from its
/// own (`adrp xn, page; add xn, xn, #low`), as pthread_create its thread's start.
pub fn addresses_taken(code: &[u8], base: u64) -> Vec<u64> {
    let mut pages = [None::<u64>; 32];
    let mut taken = Vec::new();
    for (address, instruction) in instructions(code, base) {
        if let Some((to, page)) = adrp_page(address, &instruction) {
            pages[usize::from(to)] = Some(page);
        } else if let Some((to, from, amount)) = add_immediate(&instruction)
            && let Some(page) = pages[usize::from(from)]
        {
            taken.push(page.wrapping_add_signed(amount));
            pages[usize::from(to)] = None;
        }
    }
    taken
}

/// See [`super::machine_code::errno_location`]: glibc's `adrp x0, page; ldr x0, [x0, #low];
/// mrs x1, TPIDR_EL0; add x0, x1, x0`, musl's `mrs x0, TPIDR_EL0; sub x0, x0, #k`.
pub fn errno_location(code: &[u8], base: u64) -> Option<ErrnoAt> {
    let mut pages = [None::<u64>; 32];
    let mut slots = [None::<u64>; 32];
    let mut thread_pointer = [false; 32];
    for (address, instruction) in instructions(code, base).take(PREFIX_INSTRUCTIONS) {
        let operands = &instruction.operands;
        match instruction.opcode {
            Opcode::ADRP => {
                if let Some((to, page)) = adrp_page(address, &instruction) {
                    pages[usize::from(to)] = Some(page);
                }
            }
            Opcode::LDR => {
                if let [
                    Operand::Register(SizeCode::X, to),
                    Operand::RegPreIndex(from, low, false),
                    ..,
                ] = operands
                    && let Some(page) = pages[usize::from(*from)]
                {
                    slots[usize::from(*to)] = Some(page.wrapping_add_signed(i64::from(*low)));
                }
            }
            Opcode::MRS => {
                if let [Operand::Register(_, to), Operand::SystemReg(TPIDR_EL0), ..] = operands {
                    thread_pointer[usize::from(*to)] = true;
                }
            }
            Opcode::ADD | Opcode::SUB => {
                if let Some((_, from, amount)) = add_immediate(&instruction) {
                    if thread_pointer[usize::from(from)] {
                        return Some(ErrnoAt::Offset(amount));
                    }
                } else if let [_, Operand::Register(_, a), b, _] = operands
                    && let Some(b) = unshifted_register(b)
                {
                    let (a, b) = (usize::from(*a), usize::from(b));
                    let slot = match (thread_pointer[a], thread_pointer[b]) {
                        (true, _) => slots[b],
                        (_, true) => slots[a],
                        _ => None,
                    };
                    return slot.map(ErrnoAt::SlotOffset);
                }
            }
            Opcode::RET => return None,
            _ => {}
        }
    }
    None
}

/// How far below the thread pointer the C library's thread descriptor is, which its
/// `pthread_self()` returns (arm64's TLS puts the descriptor before the thread pointer): the
/// `sub xd, xn, #k` after `mrs xn, TPIDR_EL0` in pthread_self's code.
pub fn thread_descriptor_offset(code: &[u8], base: u64) -> Option<u64> {
    let mut thread_pointer = [false; 32];
    for (_, instruction) in instructions(code, base).take(PREFIX_INSTRUCTIONS) {
        if instruction.opcode == Opcode::MRS
            && let [Operand::Register(_, to), Operand::SystemReg(TPIDR_EL0), ..] =
                &instruction.operands
        {
            thread_pointer[usize::from(*to)] = true;
        } else if let Some((_, from, amount)) = add_immediate(&instruction)
            && thread_pointer[usize::from(from)]
        {
            return u64::try_from(-amount).ok();
        }
    }
    None
}

/// What the kernel does with a uprobe on an instruction (`arm_probe_decode_insn` in
/// arch/arm64/kernel/probes/decode-insn.c, whose masks these are: the same from 6.1 on, with the
/// literal loads refused since the fix of CVE-2024-50099, in every kernel Debian ships).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelProbe {
    /// Simulated in the kernel: one trap.
    Simulated,
    /// Single-stepped out of line: two traps.
    Stepped,
    /// Refused: the probe cannot be attached.
    Refused,
}

/// `(mask, value)`: the instruction is one of a kind when `word & mask == value`.
type Kind = (u32, u32);

/// The branches the kernel simulates: `b.cond`, `cbz`, `cbnz`, `tbz`, `tbnz`, `adr`/`adrp`,
/// `b`, `bl`, `br`, `blr`, `ret`.
const SIMULATED: [Kind; 11] = [
    (0xff00_0010, 0x5400_0000),
    (0x7f00_0000, 0x3400_0000),
    (0x7f00_0000, 0x3500_0000),
    (0x7f00_0000, 0x3600_0000),
    (0x7f00_0000, 0x3700_0000),
    (0x1f00_0000, 0x1000_0000),
    (0xfc00_0000, 0x1400_0000),
    (0xfc00_0000, 0x9400_0000),
    (0xffff_fc1f, 0xd61f_0000),
    (0xffff_fc1f, 0xd63f_0000),
    (0xffff_fc1f, 0xd65f_0000),
];

/// Branches and system instructions the kernel never steps: the branches above and their
/// pointer-authenticating forms (`retaa`, `braa`, `blraa`...), `msr`, exceptions (`svc`,
/// `brk`...), `eret`.
const NOT_STEPPED_SYSTEM: [Kind; 8] = [
    (0xffff_fbff, 0xd65f_0bff),
    (0xfeff_f800, 0xd61f_0800),
    (0xfeff_f800, 0xd63f_0800),
    (0xfff8_f01f, 0xd500_401f),
    (0xfff0_0000, 0xd510_0000),
    (0xff00_0000, 0xd400_0000),
    (0xffff_ffff, 0xd69f_03e0),
    (0xffff_fbff, 0xd69f_0bff),
];

/// Loads and stores the kernel never steps: the literal loads (a PC-relative address, which
/// moves with the instruction; SIMD's too), `prfm (literal)`, and the exclusives (`ldxr`,
/// `stlxr`...), whose monitor the trap clears.
const NOT_STEPPED_MEMORY: [Kind; 3] = [
    (0x3b00_0000, 0x1800_0000),
    (0xff00_0000, 0xd800_0000),
    (0x3f80_0000, 0x0800_0000),
];

/// The hints the kernel steps: `nop`, `xpaclri`, the `paci*` that sign the return address,
/// the `bti`s (their `CRm:op2`, bits 11-5). Any other hint (`autiasp`, `yield`, `wfe`...) is
/// refused.
const STEPPED_HINTS: [u32; 12] = [
    0x00, 0x07, 0x08, 0x0a, 0x18, 0x19, 0x1a, 0x1b, 0x20, 0x22, 0x24, 0x26,
];

/// `mrs x, DAIF`, the one `mrs` the kernel does not step.
const MRS_DAIF: u32 = 0xd53b_4220;

/// What the kernel does with a uprobe on `word`.
pub fn kernel_probe(word: u32) -> KernelProbe {
    let is = |&(mask, value): &Kind| word & mask == value;
    if SIMULATED.iter().any(is) {
        return KernelProbe::Simulated;
    }
    // The class of branches, exceptions and system instructions.
    let system = (word >> 26) & 0b111 == 0b101;
    let stepped = if system {
        let hint = word & 0xffff_f01f == 0xd503_201f;
        !NOT_STEPPED_SYSTEM.iter().any(is)
            && word & 0xffff_ffe0 != MRS_DAIF
            && (!hint || STEPPED_HINTS.contains(&((word >> 5) & 0x7f)))
    } else {
        !NOT_STEPPED_MEMORY.iter().any(is)
    };
    match stepped {
        true => KernelProbe::Stepped,
        false => KernelProbe::Refused,
    }
}

/// Where an arm64 function's probe goes, and why: see [`place`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Bytes from the function's first instruction.
    pub offset: u64,
    /// Bytes the instructions before the probe moved the stack pointer down by.
    pub stack_offset: u16,
    /// What the kernel does with the probed instruction.
    pub probe: KernelProbe,
    /// The probed instruction, as text.
    pub instruction: String,
    /// Why the probe is there, for `--list-probes`.
    pub why: String,
}

/// The most the instructions before a probe may move the stack pointer: the cookie's 8 bits.
const MAX_STACK_OFFSET: u64 = 255;

/// The link register, `x30`, where the return address is at the entry.
const LINK: u16 = 30;

/// The stack pointer's number in an operand that can name it.
const SP: u16 = 31;

/// Where the probe of a function whose code is `code` (in the space of `base`) goes: the first
/// instruction the kernel simulates (one trap, not two), if every instruction before it leaves
/// what the probe's programs read as it was at the entry ([`prefix_effect`]); else the entry.
/// Never past a load-exclusive: a probe between it and its store-exclusive (which the kernel
/// does not refuse) would clear the exclusive monitor at every try, and the loop would never
/// end.
pub fn place(code: &[u8], base: u64, needs: Needs, at_entry: bool) -> Placed {
    let decoded: Vec<(u64, u32, Option<Instruction>)> = code
        .chunks_exact(4)
        .take(PREFIX_INSTRUCTIONS)
        .enumerate()
        .map(|(n, word)| {
            let word = u32::from_le_bytes(word.try_into().unwrap_or_default());
            let address = base + 4 * n as u64;
            let instruction = instructions(&word.to_le_bytes(), address)
                .next()
                .map(|(_, i)| i);
            (address, word, instruction)
        })
        .collect();
    let text = |word: u32, instruction: &Option<Instruction>| match instruction {
        Some(instruction) => instruction.to_string(),
        None => format!(".inst {word:#010x}"),
    };
    let at = |index: usize, stack_offset: u64, why: String| {
        let (address, word, instruction) = &decoded[index];
        Placed {
            offset: address - base,
            stack_offset: stack_offset as u16,
            probe: kernel_probe(*word),
            instruction: text(*word, instruction),
            why,
        }
    };
    let Some(&(_, first, _)) = decoded.first() else {
        return Placed {
            offset: 0,
            stack_offset: 0,
            probe: KernelProbe::Refused,
            instruction: "(no code)".into(),
            why: "the code could not be read; probed at the entry".into(),
        };
    };
    if at_entry {
        return at(0, 0, "--probe-at-entry".into());
    }
    if kernel_probe(first) == KernelProbe::Simulated {
        return at(0, 0, "the first instruction is simulated".into());
    }
    let targets = direct_branch_destinations(code, base);
    let mut stack_offset = 0;
    for (index, (address, word, instruction)) in decoded.iter().enumerate() {
        let offset = address - base;
        if index > 0 {
            if targets.contains(address) {
                return at(
                    0,
                    0,
                    format!(
                        "stepped at the entry: +{offset:#x} is a branch target (a loop) before \
                         any simulated instruction"
                    ),
                );
            }
            if kernel_probe(*word) == KernelProbe::Simulated
                && !(needs.return_probe && stack_offset != 0)
            {
                return at(
                    index,
                    stack_offset,
                    format!(
                        "simulated; the {index}-instruction prefix leaves what the record reads \
                         intact"
                    ),
                );
            }
        }
        let blocked = match instruction {
            Some(instruction) => prefix_effect(instruction, *word, needs, &mut stack_offset),
            None => Err("is not decoded"),
        };
        if let Err(what) = blocked {
            return at(
                0,
                0,
                format!(
                    "stepped at the entry: {} {what} at +{offset:#x}",
                    text(*word, instruction)
                ),
            );
        }
    }
    at(
        0,
        0,
        "stepped at the entry: no simulated instruction near it".into(),
    )
}

/// Checks one instruction before the probe against `needs`, adding how far it moves the stack
/// pointer down to `stack_offset`. Only the instructions of Debian's function prologues are
/// let pass, each for what it is known to write: the probe's programs read the arguments, the
/// return address in `x30`, and memory the arguments point to.
fn prefix_effect(
    instruction: &Instruction,
    word: u32,
    needs: Needs,
    stack_offset: &mut u64,
) -> Result<(), &'static str> {
    if kernel_probe(word) != KernelProbe::Stepped {
        return Err("is no instruction the kernel steps");
    }
    let operands = &instruction.operands;
    match instruction.opcode {
        Opcode::HINT => return Ok(()),
        // Signing the return address in x30 (the BPF side strips the signature) strands a
        // return probe: its trampoline's address would fail the authentication at the return.
        Opcode::PACIASP | Opcode::PACIBSP if !needs.return_probe => return Ok(()),
        Opcode::PACIASP | Opcode::PACIBSP => return Err("signs the return address"),
        _ => {}
    }
    // Stores: where, and whether they save x30 (a return probe's hijack of x30 would then
    // be undone by the restore before the return).
    if matches!(
        instruction.opcode,
        Opcode::STP | Opcode::STR | Opcode::STUR | Opcode::STRB | Opcode::STRH
    ) {
        let stored = operands.iter().filter_map(register);
        if needs.return_probe && stored.clone().any(|r| r == LINK) {
            return Err("saves the return address");
        }
        return match operands.iter().find(|o| memory_base(o).is_some()) {
            Some(Operand::RegPreIndex(SP, amount, true)) if *amount < 0 => {
                grow_stack(stack_offset, amount.unsigned_abs().into())
            }
            Some(Operand::RegPreIndex(SP, _, false)) => Ok(()),
            Some(_) if needs.reads_memory => Err("writes memory the entry program reads"),
            Some(Operand::RegPreIndex(_, _, true) | Operand::RegPostIndex(..)) => {
                Err("moves a register the record may use")
            }
            _ => Ok(()),
        };
    }
    let writes_register = matches!(
        instruction.opcode,
        Opcode::MOVZ
            | Opcode::MOVN
            | Opcode::MOVK
            | Opcode::ORR
            | Opcode::ADD
            | Opcode::SUB
            | Opcode::ADDS
            | Opcode::SUBS
            | Opcode::AND
            | Opcode::ANDS
            | Opcode::EOR
            | Opcode::LDR
            | Opcode::LDUR
            | Opcode::LDRB
            | Opcode::LDRH
            | Opcode::LDAR
            | Opcode::MRS
    );
    if !writes_register {
        return Err("is no instruction the prefix may hold");
    }
    if operands.iter().any(|o| {
        matches!(
            o,
            Operand::RegPreIndex(_, _, true) | Operand::RegPostIndex(..)
        )
    }) {
        return Err("moves a register the record may use");
    }
    let written = match &operands[0] {
        Operand::RegisterOrSP(_, SP) => {
            // `sub sp, sp, #n`: a frame of known size.
            return match add_immediate(instruction) {
                Some((SP, SP, amount)) if amount < 0 => {
                    grow_stack(stack_offset, amount.unsigned_abs())
                }
                _ => Err("moves the stack pointer"),
            };
        }
        operand => register(operand),
    };
    match written {
        Some(LINK) => Err("writes the return address"),
        Some(n) if n < 5 && needs.argument_registers & (1 << n) != 0 => {
            Err("writes an argument the record uses")
        }
        _ => Ok(()),
    }
}

/// Adds `bytes` to what the prefix moved the stack pointer down by, within what the cookie
/// holds.
fn grow_stack(stack_offset: &mut u64, bytes: u64) -> Result<(), &'static str> {
    *stack_offset += bytes;
    match *stack_offset <= MAX_STACK_OFFSET {
        true => Ok(()),
        false => Err("moves the stack pointer further than a probe records"),
    }
}

/// The base register of a memory operand.
fn memory_base(operand: &Operand) -> Option<u16> {
    match operand {
        Operand::RegPreIndex(base, ..)
        | Operand::RegPostIndex(base, _)
        | Operand::RegRegOffset(base, ..)
        | Operand::RegPostIndexReg(base, _) => Some(*base),
        _ => None,
    }
}

/// The general-purpose registers a [`PathState`] follows: `x0` to `x30` (31, in an operand,
/// is the zero register or the stack pointer, which the walk follows as its depth).
const REGISTERS: usize = 31;

/// The frame pointer, `x29`.
const FRAME: u16 = 29;

/// The syscall number's register, `x8`.
const SYSCALL_NUMBER: usize = 8;

/// Where glibc's `__syscall_cancel` takes the number of the system call it makes: its 7th
/// argument, `x6`.
const SYSCALL_CANCEL_NUMBER: u16 = 6;

/// The first register a call keeps, `x19` (to `x28`).
const FIRST_CALLEE_SAVED: u16 = 19;

/// The arm64 register the cookie's `code` names (tracer-ebpf's `register_value`): 0 the first
/// argument (`x0`), 1 to 10 those a call keeps (`x19` to `x28`), 11 to 14 `x1` to `x4`.
pub fn register_of(register: ObjectRegister) -> u16 {
    match register as u16 {
        0 => 0,
        code @ 1..=10 => FIRST_CALLEE_SAVED + code - 1,
        code => code - 10,
    }
}

/// What a path through arm64 code has set up for a slow path's walk ([`slow_path::Path`]):
/// the constants registers hold (the futex call's number in `x8`, `mov x8, #0x62`; its
/// operation in `x1`, `mov x1, #0x80` or glibc's `eor w1, w20, #0x80; sxtw x1, w1` of the
/// private flag), which registers hold the object or an address inside it (`add x0, x19, #8`),
/// where the return address is (`x30`, or the slot a prologue saved it in), where `x29`
/// points, and whether the path is between a load-exclusive and its store-exclusive.
#[derive(Clone, Copy, Default)]
pub struct PathState {
    /// By register: the constant it holds, in the bits an operation's kind is told by.
    constants: [Option<u64>; REGISTERS],
    /// By register: the object's address plus this many bytes.
    object_plus: [Option<u8>; REGISTERS],
    /// `x30` holds the return address, as at the entry.
    link_intact: bool,
    /// The slot the return address was saved in, by its bytes below the entry's stack pointer.
    link_saved: Option<u64>,
    /// `x29` is this many bytes below the entry's stack pointer (`mov x29, sp`).
    frame: Option<u64>,
    /// After a load-exclusive and before its store-exclusive: a probe here would clear the
    /// exclusive monitor at every try, and the loop would never end.
    exclusive: bool,
}

impl PathState {
    /// The kind of futex call a system call numbered `number` makes now, with its operation
    /// in `x1`, if it is futex(2) and one of a known operation.
    fn futex_numbered(&self, number: Option<u64>) -> Option<Futex> {
        self.constants[1]
            .filter(|_| number == Some(arch::AARCH64.sys_futex))
            .and_then(Futex::of)
    }

    fn forget(&mut self, register: u16) {
        let index = usize::from(register);
        if index < REGISTERS {
            self.constants[index] = None;
            self.object_plus[index] = None;
        }
        match register {
            LINK => self.link_intact = false,
            FRAME => self.frame = None,
            _ => {}
        }
    }

    /// Follows a load or store (the one operand of `memory`): the stack pointer's writeback,
    /// the return address saved and loaded back, and the registers loaded. The depth after
    /// it, or `None` if the walk cannot know it.
    fn follow_memory(
        &mut self,
        instruction: &Instruction,
        memory: &Operand,
        depth: u64,
    ) -> Option<u64> {
        // Anything else that names registers beside memory (a load, a swap, an atomic
        // operation, a compare-and-swap) is taken to write each of them.
        let stores =
            STORES.contains(&instruction.opcode) || EXCLUSIVE_STORES.contains(&instruction.opcode);
        // Where the access is, in bytes below the entry's stack pointer, and the depth after.
        let (slot, after) = match *memory {
            Operand::RegPreIndex(SP, offset, true) => {
                let after = depth.checked_add_signed(-i64::from(offset))?;
                (Some(after), after)
            }
            Operand::RegPreIndex(SP, offset, false) => {
                (depth.checked_add_signed(-i64::from(offset)), depth)
            }
            Operand::RegPostIndex(SP, offset) => {
                (Some(depth), depth.checked_add_signed(-i64::from(offset))?)
            }
            Operand::RegPostIndexReg(SP, _) => return None,
            Operand::RegPreIndex(base, _, true) | Operand::RegPostIndex(base, _) => {
                self.forget(base);
                (None, depth)
            }
            _ => (None, depth),
        };
        // The registers transferred, each with its slot (a pair's second is 8 or 4 bytes up).
        let transferred = instruction
            .operands
            .iter()
            .take_while(|o| memory_base(o).is_none())
            .filter_map(|o| match o {
                Operand::Register(size, n) => Some((*n, *size)),
                _ => None,
            })
            .collect::<Vec<_>>();
        // A store-exclusive's first register is its status, written.
        let data = match EXCLUSIVE_STORES.contains(&instruction.opcode) {
            true => {
                if let Some(&(status, _)) = transferred.first() {
                    self.forget(status);
                }
                transferred.get(1..).unwrap_or_default()
            }
            false => &transferred[..],
        };
        let mut at = slot;
        for &(register, size) in data {
            match stores {
                true if register == LINK && size == SizeCode::X => self.link_saved = at,
                true if at.is_some() && at == self.link_saved => self.link_saved = None,
                true => {}
                false => {
                    let restores = register == LINK && at.is_some() && at == self.link_saved;
                    self.forget(register);
                    self.link_intact |= restores;
                }
            }
            let width = match size {
                SizeCode::X => 8,
                SizeCode::W => 4,
            };
            at = at.and_then(|k| k.checked_sub(width));
        }
        Some(after)
    }
}

/// Plain stores: they write memory only (and a writeback base).
const STORES: [Opcode; 19] = [
    Opcode::STR,
    Opcode::STRB,
    Opcode::STRH,
    Opcode::STRW,
    Opcode::STP,
    Opcode::STNP,
    Opcode::STUR,
    Opcode::STURB,
    Opcode::STURH,
    Opcode::STTR,
    Opcode::STTRB,
    Opcode::STTRH,
    Opcode::STLR,
    Opcode::STLRB,
    Opcode::STLRH,
    Opcode::STLLR,
    Opcode::STLLRB,
    Opcode::STLLRH,
    Opcode::STLUR,
];

/// The store-exclusives, which end an exclusive region and write their status register.
const EXCLUSIVE_STORES: [Opcode; 8] = [
    Opcode::STXR,
    Opcode::STXRB,
    Opcode::STXRH,
    Opcode::STXP,
    Opcode::STLXR,
    Opcode::STLXRB,
    Opcode::STLXRH,
    Opcode::STLXP,
];

/// The load-exclusives, which begin one.
const EXCLUSIVE_LOADS: [Opcode; 8] = [
    Opcode::LDXR,
    Opcode::LDXRB,
    Opcode::LDXRH,
    Opcode::LDXP,
    Opcode::LDAXR,
    Opcode::LDAXRB,
    Opcode::LDAXRH,
    Opcode::LDAXP,
];

impl slow_path::Path for PathState {
    type Instruction = Instruction;

    fn decode(image: &[u8], ip: u64) -> Option<(Instruction, u64, Flow)> {
        let start = usize::try_from(ip).ok()?;
        let word = image.get(start..start.checked_add(4)?)?;
        let (_, instruction) = instructions(word, ip).next()?;
        let target = branch(ip, &instruction).map(|(target, _)| target);
        let flow = match instruction.opcode {
            Opcode::SVC => Flow::Syscall,
            Opcode::RET => Flow::Return,
            Opcode::B => Flow::Jump(target),
            Opcode::BL => Flow::Call(target),
            Opcode::BLR | Opcode::BLRAA | Opcode::BLRAAZ | Opcode::BLRAB | Opcode::BLRABZ => {
                Flow::Call(None)
            }
            Opcode::Bcc(_) | Opcode::CBZ | Opcode::CBNZ | Opcode::TBZ | Opcode::TBNZ => {
                Flow::Branch(target)
            }
            Opcode::BR
            | Opcode::BRAA
            | Opcode::BRAAZ
            | Opcode::BRAB
            | Opcode::BRABZ
            | Opcode::RETAA
            | Opcode::RETAB
            | Opcode::ERET
            | Opcode::BRK
            | Opcode::HLT
            | Opcode::UDF => Flow::Stop,
            _ => Flow::Next,
        };
        Some((instruction, ip + 4, flow))
    }

    fn at_function_entry() -> Self {
        let mut state = PathState {
            link_intact: true,
            ..PathState::default()
        };
        state.object_plus[usize::from(ARGUMENT_1)] = Some(0);
        state
    }

    /// Follows the instruction's writes: the stack pointer moved by an immediate (`sub sp,
    /// sp, #n`, `stp x29, x30, [sp, #-n]!`, `ldp x29, x30, [sp], #n`) or back to the frame
    /// pointer (`mov sp, x29`); a constant moved (`movz`, `orr` from the zero register),
    /// added, or'ed or xor'ed in, sign-extended (`sxtw`), or copied; the object copied between
    /// 64-bit registers (`mov x19, x0`) or offset within it (`add x0, x19, #8`). Any other
    /// write to a register loses what it held.
    fn follow(&mut self, instruction: &Instruction, depth: u64) -> Option<u64> {
        let opcode = instruction.opcode;
        if EXCLUSIVE_LOADS.contains(&opcode) {
            self.exclusive = true;
        } else if EXCLUSIVE_STORES.contains(&opcode) || opcode == Opcode::CLREX {
            self.exclusive = false;
        }
        let operands = &instruction.operands;
        if let Some(memory) = operands.iter().find(|o| memory_base(o).is_some()) {
            return self.follow_memory(instruction, memory, depth);
        }
        let Some(destination) = operands.first().and_then(register) else {
            return Some(depth);
        };
        // Writes to the stack pointer (an operand that can name it, as `add`'s).
        if let Operand::RegisterOrSP(_, SP) = operands[0] {
            return match add_immediate(instruction) {
                Some((_, SP, amount)) => depth.checked_add_signed(-amount),
                Some((_, FRAME, amount)) => self.frame?.checked_add_signed(-amount),
                _ => None,
            };
        }
        let index = usize::from(destination);
        if index >= REGISTERS {
            // The zero register: a compare or test.
            return Some(depth);
        }
        let wide = matches!(
            operands[0],
            Operand::Register(SizeCode::X, _) | Operand::RegisterOrSP(SizeCode::X, _)
        );
        let known = |register: u16| {
            self.constants
                .get(usize::from(register))
                .copied()
                .flatten()
                .or((register == SP).then_some(0))
        };
        let (constant, object) = match (opcode, &operands[1..]) {
            (Opcode::MOVZ, [value, ..]) => (immediate(value), None),
            (Opcode::ADD | Opcode::SUB, _) => match add_immediate(instruction) {
                Some((_, SP, amount)) if destination == FRAME => {
                    self.frame = depth.checked_add_signed(-amount);
                    self.constants[index] = None;
                    self.object_plus[index] = None;
                    return Some(depth);
                }
                Some((_, from, amount)) if from != SP => (
                    known(from).map(|value| value.wrapping_add_signed(amount)),
                    self.object_plus[usize::from(from)]
                        .and_then(|plus| u8::try_from(i64::from(plus) + amount).ok())
                        .filter(|_| wide),
                ),
                _ => (None, None),
            },
            // `mov xd, xn` (from the zero register) or a constant or'ed, xor'ed in; with a
            // register not known, the constant is its operation's (a flag xor'ed in).
            (Opcode::ORR | Opcode::EOR, [Operand::Register(_, from), other, ..]) => {
                let combine = |a: u64, b: u64| match opcode {
                    Opcode::ORR => a | b,
                    _ => a ^ b,
                };
                let other_value =
                    immediate(other).or_else(|| unshifted_register(other).and_then(known));
                match (known(*from), other_value) {
                    _ if *from == SP && opcode == Opcode::ORR => match unshifted_register(other) {
                        Some(source) if usize::from(source) < REGISTERS => (
                            known(source),
                            self.object_plus[usize::from(source)].filter(|_| wide),
                        ),
                        _ => (other_value, None),
                    },
                    (Some(a), Some(b)) => (Some(combine(a, b)), None),
                    (a, b) => (a.or(b), None),
                }
            }
            // `sxtw xd, wn`: a small constant keeps its value.
            (Opcode::SBFM, [Operand::Register(_, from), first, last, ..])
                if immediate(first) == Some(0) && immediate(last) == Some(31) =>
            {
                (known(*from), None)
            }
            _ => (None, None),
        };
        self.forget(destination);
        self.constants[index] = constant;
        self.object_plus[index] = object;
        if let Operand::RegisterPair(_, n) = operands[0] {
            self.forget(n + 1);
        }
        Some(depth)
    }

    /// A call keeps `x19` to `x29` (and the stack); `x30` is its return address.
    fn past_call(&mut self) {
        for register in 0..FIRST_CALLEE_SAVED {
            self.forget(register);
        }
        self.forget(LINK);
    }

    /// The kernel returns the result in `x0` and keeps the rest.
    fn past_syscall(&mut self) {
        self.forget(0);
    }

    fn futex_made(&self) -> Option<Futex> {
        self.futex_numbered(self.constants[SYSCALL_NUMBER])
    }

    /// A callee that copies `x6` into `x8` among its first instructions, before any branch,
    /// makes the system call its caller numbers in `x6`, with the caller's `x0` to `x5`.
    fn futex_passed_on(&self, image: &[u8], callee: u64) -> Option<Futex> {
        let number = self.constants[usize::from(SYSCALL_CANCEL_NUMBER)]?;
        let mut ip = callee;
        for _ in 0..PREFIX_INSTRUCTIONS {
            let (instruction, next, flow) = <PathState as slow_path::Path>::decode(image, ip)?;
            if flow != Flow::Next {
                return None;
            }
            if let (
                Opcode::ORR,
                [
                    Operand::Register(SizeCode::X, 8),
                    Operand::Register(_, 31),
                    source,
                    _,
                ],
            ) = (instruction.opcode, &instruction.operands)
                && unshifted_register(source) == Some(SYSCALL_CANCEL_NUMBER)
            {
                return self.futex_numbered(Some(number));
            }
            ip = next;
        }
        None
    }

    /// `x0` points into it.
    fn futex_on_object(&self) -> bool {
        self.object_plus[0].is_some()
    }

    fn holding_object(&self) -> Holding {
        Holding::of(&self.object_plus)
    }

    fn object_register_in(holding: &Holding) -> Option<(ObjectRegister, u8)> {
        holding
            .choose(&ObjectRegister::ALL.map(|object| (object, usize::from(register_of(object)))))
    }

    /// `x30` while it holds it; else the slot the prologue saved it in, while the stack
    /// holds that and the cookie can say where it is (8-byte slots below the entry's stack
    /// pointer, 4 bits). Never inside an exclusive region, nor deeper than the cookie's 8
    /// bits.
    fn return_address(&self, depth: u64) -> Option<ReturnAddress> {
        if self.exclusive || depth > MAX_STACK_OFFSET {
            return None;
        }
        match self.link_saved {
            _ if self.link_intact => Some(ReturnAddress::AsAtEntry),
            Some(below)
                if below > 0
                    && below <= depth
                    && below % 8 == 0
                    && below / 8 <= u64::from(ProbeCookie::MAX_RETURN_ADDRESS_SLOTS) =>
            {
                Some(ReturnAddress::SavedBelowEntry(u16::try_from(below).ok()?))
            }
            _ => None,
        }
    }
}

/// The probe on a slow-path `site` of the function at `function_offset` in `image`: its
/// offset from the function's start wraps below it when the site is in code the function
/// jumps back to.
pub fn on_slow_path(image: &[u8], function_offset: u64, site: slow_path::Site) -> Placed {
    let (probe, instruction) = probe_at(image, site.offset);
    Placed {
        offset: site.offset.wrapping_sub(function_offset),
        stack_offset: site.stack_offset,
        probe,
        instruction,
        why: site.reason(|register| format!("x{}", register_of(register))),
    }
}

/// The instruction at `offset` of `image` (a library's bytes at their file offsets), as text,
/// and what the kernel does with a uprobe there.
pub fn probe_at(image: &[u8], offset: u64) -> (KernelProbe, String) {
    let word = usize::try_from(offset)
        .ok()
        .and_then(|start| image.get(start..start.checked_add(4)?))
        .map(|bytes| u32::from_le_bytes(bytes.try_into().unwrap_or_default()));
    let Some(word) = word else {
        return (KernelProbe::Refused, "(no code)".into());
    };
    let text = match instructions(&word.to_le_bytes(), offset).next() {
        Some((_, instruction)) => instruction.to_string(),
        None => format!(".inst {word:#010x}"),
    };
    (kernel_probe(word), text)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// Little-endian instruction words as the library holds them.
    fn code(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn a_tail_branch_after_a_loop_and_an_epilogue_forwards() {
        // As musl's do_init_fini ends: stp x29, x30, [sp, #-16]!; cbz x0, 0x10; bl 0x100;
        // b 0x4; ldp x29, x30, [sp], #16; then b 0x200, or ret.
        let looped = [
            0xa9bf_7bfd,
            0xb400_0060,
            0x9400_003e,
            0x17ff_fffe,
            0xa8c1_7bfd,
        ];
        let forwarder = code(&[&looped[..], &[0x1400_007b]].concat());
        assert!(slow_path::jumps_to::<PathState>(&forwarder, 0, &[0x200]));
        assert!(
            !slow_path::jumps_to::<PathState>(&forwarder, 0, &[0x100]),
            "a call"
        );
        let returner = code(&[&looped[..], &[0xd65f_03c0]].concat());
        assert!(!slow_path::jumps_to::<PathState>(&returner, 0, &[0x200]));
    }

    #[test]
    fn glibc_2_36_pthread_self_is_0x740_below_the_thread_pointer() {
        // mrs x0, TPIDR_EL0; sub x0, x0, #0x740; ret (Debian 12's libc.so.6, 0x0008_5980)
        let bytes = code(&[0xd53b_d040, 0xd11d_0000, 0xd65f_03c0]);
        assert_eq!(thread_descriptor_offset(&bytes, 0x0008_5980), Some(0x740));
    }

    #[test]
    fn glibc_errno_is_the_thread_pointer_plus_a_got_slot() {
        // adrp x0, 0x19f000; ldr x0, [x0, #0xdc0]; mrs x1, TPIDR_EL0; add x0, x1, x0; ret
        // (Debian 12's libc.so.6, __errno_location at 0x0002_7c20)
        let bytes = code(&[
            0x9000_0bc0,
            0xf946_e000,
            0xd53b_d041,
            0x8b00_0020,
            0xd65f_03c0,
        ]);
        assert_eq!(
            errno_location(&bytes, 0x0002_7c20),
            Some(ErrnoAt::SlotOffset(0x0019_f000 + 0xdc0))
        );
    }

    #[test]
    fn musl_errno_is_below_the_thread_pointer() {
        // mrs x0, TPIDR_EL0; sub x0, x0, #0xa4; ret (musl 1.2.3's __errno_location)
        let bytes = code(&[0xd53b_d040, 0xd102_9000, 0xd65f_03c0]);
        assert_eq!(errno_location(&bytes, 0), Some(ErrnoAt::Offset(-0xa4)));
        assert_eq!(thread_descriptor_offset(&bytes, 0), Some(0xa4));
    }

    #[test]
    fn glibc_2_36_cond_signal_loads_wrefs_at_0x24() {
        // stp x29, x30, [sp, #-0x80]!; mov x29, sp; stp x19, x20, [sp, #0x10]; mov x19, x0;
        // add x0, x0, #0x24; stp x21, x22, [sp, #0x20]; ldr w21, [x0] (Debian 12, 0x0007_d800)
        let bytes = code(&[
            0xa9b8_7bfd,
            0x9100_03fd,
            0xa901_53f3,
            0xaa00_03f3,
            0x9100_9000,
            0xa902_5bf5,
            0xb940_0015,
        ]);
        assert_eq!(
            first_load_through_argument_1(&bytes, 0x0007_d800),
            Some(0x24)
        );
    }

    #[test]
    fn the_kernel_simulates_branches_steps_prologues_and_refuses_what_debian_s_code_shows() {
        let cases = [
            (0x5400_0720, KernelProbe::Simulated), // b.eq
            (0x9400_0010, KernelProbe::Simulated), // bl
            (0xd65f_03c0, KernelProbe::Simulated), // ret
            (0x9000_0bc0, KernelProbe::Simulated), // adrp x0, ...
            (0x3400_0040, KernelProbe::Simulated), // cbz w0
            (0xa9b8_7bfd, KernelProbe::Stepped),   // stp x29, x30, [sp, #-0x80]!
            (0xd503_233f, KernelProbe::Stepped),   // paciasp
            (0xd503_245f, KernelProbe::Stepped),   // bti c
            (0xd503_201f, KernelProbe::Stepped),   // nop
            (0xd53b_d040, KernelProbe::Stepped),   // mrs x0, TPIDR_EL0
            (0xb940_0015, KernelProbe::Stepped),   // ldr w21, [x0]
            (0x88a0_7c41, KernelProbe::Stepped),   // cas w0, w1, [x2]
            (0xd503_23bf, KernelProbe::Refused),   // autiasp
            (0xd65f_0bff, KernelProbe::Refused),   // retaa
            (0xd400_0001, KernelProbe::Refused),   // svc #0
            (0x885f_fc22, KernelProbe::Refused),   // ldaxr w2, [x1]
            (0x8802_fc23, KernelProbe::Refused),   // stlxr w2, w3, [x1]
            (0x1800_0040, KernelProbe::Refused),   // ldr w0, <literal>
            (0xd53b_4220, KernelProbe::Refused),   // mrs x0, DAIF
        ];
        for (word, expected) in cases {
            assert_eq!(kernel_probe(word), expected, "{word:#010x}");
        }
    }

    /// What a lock call's probes need: its object's address, and a return probe.
    const LOCK: Needs = Needs {
        argument_registers: 0b1,
        return_probe: true,
        reads_memory: true,
    };

    #[test]
    fn glibc_2_36_unlock_is_probed_on_its_branch_past_a_mov() {
        // mov w1, #1; b pthread_mutex_trylock+0xb14 (Debian 12, 0x83974)
        let bytes = code(&[0x5280_0021, 0x17ff_ffa3, 0xd503_201f]);
        let unlock = Needs {
            return_probe: false,
            ..LOCK
        };
        let placed = place(&bytes, 0x0008_3974, unlock, false);
        assert_eq!((placed.offset, placed.stack_offset), (4, 0));
        assert_eq!(placed.probe, KernelProbe::Simulated);
        assert_eq!(place(&bytes, 0x0008_3974, unlock, true).offset, 0);
    }

    #[test]
    fn a_prefix_that_saves_the_return_address_keeps_a_return_probe_at_the_entry() {
        // stp x29, x30, [sp, #-0x30]!; mov x29, sp; stp x21, x22, [sp, #0x20];
        // add x21, x0, #0x10; ldr w2, [x21]; mov w1, #0x17f (Debian 12's lock, 0x81e14)
        let bytes = code(&[
            0xa9bd_7bfd,
            0x9100_03fd,
            0xa902_5bf5,
            0x9100_4015,
            0xb940_02a2,
            0x5280_2fe1,
        ]);
        let placed = place(&bytes, 0x0008_1e14, LOCK, false);
        assert_eq!((placed.offset, placed.probe), (0, KernelProbe::Stepped));
        assert!(
            placed.why.contains("saves the return address"),
            "{}",
            placed.why
        );
    }

    #[test]
    fn musl_lock_is_probed_on_its_first_test_and_never_inside_its_exclusive_loop() {
        // ldr w1, [x0]; tst x1, #0xf; b.ne timed; add x1, x0, #4; mov w3, #16; b 1f;
        // 2: stlxr w2, w3, [x1]; cbz w2, done; 1: ldaxr w2, [x1]; cbz w2, 2b (musl 1.2.3)
        let words = [
            0xb940_0001,
            0xf240_0c3f,
            0x5400_0121,
            0x9100_1001,
            0x5280_0203,
            0x1400_0003,
            0x8802_fc23,
            0x3400_00c2,
            0x885f_fc22,
            0x34ff_ffa2,
        ];
        let placed = place(&code(&words), 0x0006_a880, LOCK, false);
        assert_eq!((placed.offset, placed.probe), (8, KernelProbe::Simulated));
        // Without the test and its branch, the first simulated instruction is the b into the
        // loop; past it, the store-exclusive stops the walk: never the cbz inside the loop.
        let loop_only = code(&words[3..]);
        let placed = place(&loop_only, 0, LOCK, false);
        assert_eq!(placed.offset, 8, "{placed:?}");
        let from_the_store = code(&words[6..]);
        assert_eq!(place(&from_the_store, 0, LOCK, false).offset, 0);
    }

    #[test]
    fn branches_land_where_their_offsets_say() {
        // b.eq +0xe4 at 0x0007_d820; bl -0x10 at 0x0007_d824
        let bytes = code(&[0x5400_0720, 0x97ff_fffc]);
        assert_eq!(
            direct_branch_destinations(&bytes, 0x0007_d820),
            vec![0x0007_d820 + 0xe4, 0x0007_d824 - 0x10]
        );
        assert_eq!(
            calls(&bytes, 0x0007_d820),
            vec![(0x0007_d824 - 0x10, 0x0007_d828)]
        );
    }

    /// A library's bytes at their file offsets, from an excerpt of the code its slow paths'
    /// walks read (`testdata/*.excerpt`: each range as its offset and length, `u32`
    /// little-endian, then its bytes, cut from Debian's arm64 packages); zeros elsewhere, which
    /// decode to `udf`, where a walk stops (the outline-atomics helpers, which make no system
    /// call).
    fn library(excerpt: &[u8]) -> Vec<u8> {
        let mut image = Vec::new();
        let mut rest = excerpt;
        while let [a, b, c, d, e, f, g, h, tail @ ..] = rest {
            let offset = u32::from_le_bytes([*a, *b, *c, *d]) as usize;
            let length = u32::from_le_bytes([*e, *f, *g, *h]) as usize;
            image.resize(image.len().max(offset + length), 0);
            image[offset..offset + length].copy_from_slice(&tail[..length]);
            rest = &tail[length..];
        }
        image
    }

    const GLIBC_2_36: &[u8] = include_bytes!("testdata/glibc-2.36-arm64.excerpt");
    const GLIBC_2_41: &[u8] = include_bytes!("testdata/glibc-2.41-arm64.excerpt");
    const MUSL_1_2_3: &[u8] = include_bytes!("testdata/musl-1.2.3-arm64.excerpt");

    fn slow_paths(image: &[u8], entry: u64, size: u64, wanted: Futex) -> Vec<slow_path::Site> {
        slow_path::sites::<PathState>(image, entry, size, &HashSet::new(), wanted)
    }

    /// The sites of a lock's calls of `__lll_lock_wait` (`mov x0, x19; bl`), deep in a frame
    /// of 0x30 bytes whose return address `stp x29, x30, [sp, #-0x30]!` saved 0x28 below the
    /// entry's stack pointer (x30 holds an outline-atomics helper's return by then).
    fn lock_waits(offsets: [u64; 3], lock_wait: u64) -> Vec<slow_path::Site> {
        offsets
            .into_iter()
            .map(|offset| slow_path::Site {
                offset,
                stack_offset: 0x30,
                return_address: ReturnAddress::SavedBelowEntry(0x28),
                object_register: ObjectRegister::Rdi,
                object_offset: 0,
                calls: Some(lock_wait),
                futex: Futex::Waits,
                wait_ends: Some(slow_path::WaitEnd::After(offset + 4)),
            })
            .collect()
    }

    #[test]
    fn glibc_2_36_mutex_lock_waits_in_its_three_calls_of_lll_lock_wait() {
        let image = library(GLIBC_2_36);
        assert_eq!(
            slow_paths(&image, 0x81e14, 0x2ec, Futex::Waits),
            lock_waits([0x81f0c, 0x81f6c, 0x820b0], 0x7b8f4)
        );
    }

    #[test]
    fn glibc_2_41_mutex_lock_waits_past_paciasp_as_2_36_does() {
        let image = library(GLIBC_2_41);
        assert_eq!(
            slow_paths(&image, 0x89628, 0x300, Futex::Waits),
            lock_waits([0x8972c, 0x89794, 0x898d8], 0x82f00)
        );
    }

    #[test]
    fn glibc_2_41_mutex_unlock_wakes_in_the_code_it_jumps_back_to() {
        // mov w1, #1; b __pthread_mutex_unlock_usercnt, which calls __lll_lock_wake for a
        // normal mutex and for an elided one.
        let image = library(GLIBC_2_41);
        let wake = |offset| slow_path::Site {
            offset,
            stack_offset: 0x20,
            return_address: ReturnAddress::SavedBelowEntry(0x18),
            object_register: ObjectRegister::Rdi,
            object_offset: 0,
            calls: Some(0x82fa0),
            futex: Futex::Wakes,
            wait_ends: None,
        };
        assert_eq!(
            slow_paths(&image, 0x8b1a4, 0xc, Futex::Wakes),
            [wake(0x8b0b4), wake(0x8b0f8)]
        );
    }

    #[test]
    fn glibc_2_36_rwlock_unlock_wakes_in_line_with_the_lock_or_a_word_of_it_in_a_register() {
        // add x22, x19, #8; ... mov w1, #0x81; eor w1, w23, w1; mov x0, x22; ...; sxtw x1, w1;
        // mov x8, #0x62; svc #0: each wake is probed where the straight run to it begins. The
        // writer's unlock wakes the readers after `add x19, x19, #8` (the lock 8 bytes below
        // x19), then the writers through a jump to the run at 0x852a0, which the readers'
        // wake falls into with the lock in x19: no register holds it on both ways, so each
        // way in is probed, where it starts (the jump's with the lock 0xc below x23).
        let image = library(GLIBC_2_36);
        let wake = |offset, object_register, object_offset| slow_path::Site {
            offset,
            stack_offset: 0x40,
            return_address: ReturnAddress::SavedBelowEntry(0x38),
            object_register,
            object_offset,
            calls: None,
            futex: Futex::Wakes,
            wait_ends: None,
        };
        assert_eq!(
            slow_paths(&image, 0x85210, 0x22c, Futex::Wakes),
            [
                wake(0x85290, ObjectRegister::Rbx, 0),
                wake(0x852fc, ObjectRegister::Rbx, 0),
                wake(0x85398, ObjectRegister::R14, 0xc),
                wake(0x853ec, ObjectRegister::Rbx, 8),
            ]
        );
        assert_eq!(register_of(ObjectRegister::Rbx), 19);
        assert_eq!(register_of(ObjectRegister::R14), 23);
    }

    /// The site of a wait that jumps from `offset`, its frame undone and `x30` as at the
    /// entry, to `waiting`, whose return is the call's.
    fn passed_on(offset: u64, waiting: u64) -> slow_path::Site {
        slow_path::Site {
            offset,
            stack_offset: 0,
            return_address: ReturnAddress::AsAtEntry,
            object_register: ObjectRegister::Rdi,
            object_offset: 0,
            calls: Some(waiting),
            futex: Futex::Waits,
            wait_ends: Some(slow_path::WaitEnd::PassedOn(waiting)),
        }
    }

    #[test]
    fn glibc_2_36_sem_wait_passes_itself_on_to_its_slow_path_with_x30_restored() {
        // ldp x19, x20, [sp, #0x10]; ldp x29, x30, [sp], #0x20; b __new_sem_wait_slow
        let image = library(GLIBC_2_36);
        assert_eq!(
            slow_paths(&image, 0x87380, 0x54, Futex::Waits),
            [passed_on(0x873d0, 0x87274)]
        );
    }

    #[test]
    fn glibc_2_41_sem_wait_waits_through_syscall_cancel_which_takes_the_number_in_x6() {
        // sem_wait passes itself on (ldp x29, x30, [sp], #0x20; autiasp; b) to
        // __new_sem_wait_slow, which reaches __futex_abstimed_wait_common: mov x6, #0x62;
        // ...; bl __syscall_cancel, whose mov x8, x6 makes the futex call the caller numbers.
        let image = library(GLIBC_2_41);
        assert_eq!(
            slow_paths(&image, 0x8f0e0, 0x60, Futex::Waits),
            [passed_on(0x8f13c, 0x8efc0)]
        );
    }

    #[test]
    fn musl_sem_post_wakes_in_line_after_its_exclusive_loop() {
        // The object is copied to x4 (`mov x4, x0`) before the ldaxr/stlxr loop; the wake
        // (`ubfiz x1, x1, #7, #1; orr x1, x1, x2` of the private flag) and its retry without
        // the flag are each probed where their runs begin, past the loop.
        let image = library(MUSL_1_2_3);
        let wake = |offset| slow_path::Site {
            offset,
            stack_offset: 0,
            return_address: ReturnAddress::AsAtEntry,
            object_register: ObjectRegister::Rsi,
            object_offset: 0,
            calls: None,
            futex: Futex::Wakes,
            wait_ends: None,
        };
        assert_eq!(
            slow_paths(&image, 0x6c2e0, 0xc8, Futex::Wakes),
            [wake(0x6c370), wake(0x6c398)]
        );
        assert_eq!(register_of(ObjectRegister::Rsi), 4);
    }

    #[test]
    fn no_probe_goes_between_a_load_exclusive_and_its_store_exclusive() {
        // ldaxr w1, [x0]; cbnz w1, 0x18; mov x1, #0x81; mov x8, #0x62; svc #0;
        // stlxr w2, w1, [x0]; ret: the run to the futex call starts inside the region.
        let mut words = [
            0x885f_fc01,
            0x3500_00a1,
            0xd280_1021,
            0xd280_0c48,
            0xd400_0001,
            0x8802_fc01,
            0xd65f_03c0,
        ];
        assert_eq!(slow_paths(&code(&words), 0, 0x1c, Futex::Wakes), []);
        // With a plain load (ldr w1, [x0]) in its place, the run is probed.
        words[0] = 0xb940_0001;
        let sites = slow_paths(&code(&words), 0, 0x1c, Futex::Wakes);
        assert_eq!(sites.iter().map(|s| s.offset).collect::<Vec<_>>(), [8]);
    }
}
