//! Where in a function to put its probe so that the kernel need not single-step.
//!
//! A uprobe on an instruction the kernel cannot emulate is executed out of line with a
//! single-step: a second trap. The kernel emulates a few instructions instead
//! (`arch/x86/kernel/uprobes.c`: `branch_setup_xol_ops` and `push_setup_xol_ops`): the
//! canonical nops, `jmp`, `call rel32`, `jcc` without a 0x66 prefix, and `push` of a register.
//!
//! So each probe goes to the first such instruction of the function's straight-line start,
//! provided that the instructions before it (the prefix):
//! - neither branch nor call, so every call of the function reaches the probe;
//! - are not the target of any branch in the function, so no loop reaches the probe again
//!   without a call (a jump back to the entry itself re-runs the entry probe just the same);
//! - leave the argument registers the event's record uses untouched;
//! - move the stack pointer only by `push` or `sub $imm, %rsp`, by an amount the BPF program is
//!   told, and not at all where a uretprobe shares the point (the kernel finds the return
//!   address to hijack at `[rsp]`);
//! - write no memory outside the stack where the entry program reads memory (object state).
//!
//! Where no such point exists, the probe stays at the entry.

use iced_x86::{
    ConditionCode, Decoder, DecoderOptions, FlowControl, Formatter, GasFormatter, Instruction,
    InstructionInfo, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register,
};
use tracer_common::{EventDef, ProbeFlags};

use super::{
    aarch64,
    fast_path::{self, Processes, Role},
    machine_code::ErrnoAt,
    slow_path,
};
use tracer_common::{Completion, Condition, Outcome};

/// How far into a function a probe may move.
const MAX_PREFIX_INSTRUCTIONS: usize = 16;
/// How much of a function is decoded when its symbol has no size.
pub const DEFAULT_FUNCTION_BYTES: u64 = 64;

/// The System V argument registers, argument 1 first.
const ARGUMENT_REGISTERS: [Register; 5] = [
    Register::RDI,
    Register::RSI,
    Register::RDX,
    Register::RCX,
    Register::R8,
];

/// The nops the kernel emulates: `x86_nops[len]` in the kernel, indexed by length.
const KERNEL_NOPS: [&[u8]; 9] = [
    &[],
    &[0x90],
    &[0x66, 0x90],
    &[0x0f, 0x1f, 0x00],
    &[0x0f, 0x1f, 0x40, 0x00],
    &[0x0f, 0x1f, 0x44, 0x00, 0x00],
    &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
    &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
    &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
];

/// What the probes of one event need to stay correct at a point past the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// Argument registers read, bit N-1 for argument N.
    pub argument_registers: u8,
    /// A uretprobe shares the point: the stack pointer must not have moved.
    pub return_probe: bool,
    /// The entry program reads memory (object state, or what an argument points to).
    pub reads_memory: bool,
}

impl Needs {
    pub fn of(event: &EventDef) -> Needs {
        let flags = event.flags;
        Needs {
            argument_registers: event.argument_registers(),
            return_probe: flags.has(ProbeFlags::RETURN),
            reads_memory: flags.0 & ProbeFlags::READS_MEMORY != 0,
        }
    }
}

/// Where a function's probe goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Bytes from the function's first instruction.
    pub offset: u64,
    /// Bytes the prefix pushed: the caller's return address is at `[rsp + stack_offset]`.
    pub stack_offset: u16,
    /// Whether the kernel emulates the probed instruction (no single-step).
    pub emulated: bool,
    /// Whether the kernel refuses a uprobe on the probed instruction (a lock or segment
    /// prefix, as `pthread_spin_lock`'s `lock decl`): then the function cannot be traced.
    pub refused: bool,
    /// Whether the probe is on a `je`/`jne` right after a locked read-modify-write of memory
    /// (`lock decl; jne spin`): its zero flag then tells what that locked operation found
    /// ([`ProbeFlags::LOCKED_AT_FIRST_TRY_IF_NZ`] for a spin lock).
    pub after_locked_update: bool,
    /// The probed instruction; none if the code could not be decoded.
    probed: Option<Instruction>,
    why: Why,
}

/// Why a probe is where it is. Made into text only when shown: formatting a first
/// instruction costs iced-x86's formatter the reading of its tables, a millisecond or two of
/// every run's start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Why {
    Undecodable,
    AtEntryAsked,
    /// Placed in arm64 code: the instruction and the reason as text, which yaxpeax-arm makes
    /// at no cost worth deferring.
    A64 {
        instruction: String,
        reason: String,
    },
    FirstEmulated(&'static str),
    BranchTarget(u64),
    Emulated {
        kind: &'static str,
        prefix: usize,
    },
    Blocked {
        instruction: Instruction,
        offset: u64,
        by: Blocker,
    },
    NothingEmulated,
    /// `--contended`: on a slow path.
    SlowPath(slow_path::Site),
    /// `--contended`: no slow path was found.
    NoSlowPath,
    /// A full trace: one of the probes of a fast-path plan.
    FastPath(fast_path::Site),
    /// A full trace: the one probe of a call written whole where its entry is probed.
    WholeAtEntry(fast_path::Site),
}

/// What a prefix instruction does that the probe cannot move past.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blocker {
    Branches,
    MovesStack,
    /// Argument index from 0, and its register.
    WritesArgument(usize, Register),
    WritesMemory,
}

impl Placement {
    /// Where a probe goes in arm64 code ([`aarch64::place`]).
    pub fn a64(placed: aarch64::Placed) -> Placement {
        Placement {
            offset: placed.offset,
            stack_offset: placed.stack_offset,
            emulated: placed.probe == aarch64::KernelProbe::Simulated,
            refused: placed.probe == aarch64::KernelProbe::Refused,
            after_locked_update: false,
            probed: None,
            why: Why::A64 {
                instruction: placed.instruction,
                reason: placed.why,
            },
        }
    }

    /// The probed instruction, in AT&T syntax (arm64's in its own).
    pub fn instruction(&self) -> String {
        if let Why::A64 { instruction, .. } = &self.why {
            return instruction.clone();
        }
        self.probed
            .map_or_else(|| "(undecodable)".into(), |i| format_gas(&i))
    }

    /// Why the probe is there, for `--list-probes`.
    pub fn reason(&self) -> String {
        let why = match &self.why {
            Why::Undecodable => "the code could not be decoded; probed at the entry".into(),
            Why::AtEntryAsked => "--probe-at-entry".into(),
            Why::A64 { reason, .. } => reason.clone(),
            Why::FirstEmulated(kind) => format!("the first instruction is emulated ({kind})"),
            Why::BranchTarget(offset) => format!(
                "single-stepped at the entry: +{offset:#x} is a branch target (a loop) before \
                 any emulated instruction"
            ),
            Why::Emulated { kind, prefix } => format!(
                "emulated {kind}; the {prefix}-instruction prefix leaves what the record reads \
                 intact"
            ),
            Why::Blocked {
                instruction,
                offset,
                by,
            } => {
                let instruction = format_gas(instruction);
                let what = match by {
                    Blocker::Branches => format!("{instruction} branches"),
                    Blocker::MovesStack => format!("{instruction} moves the stack pointer"),
                    Blocker::WritesArgument(n, register) => format!(
                        "{instruction} writes argument {} ({register:?}), which the record uses",
                        n + 1
                    ),
                    Blocker::WritesMemory => {
                        format!("{instruction} writes memory the entry program reads")
                    }
                };
                format!("single-stepped at the entry: {what} at +{offset:#x}")
            }
            Why::NothingEmulated => {
                "single-stepped at the entry: no emulated instruction near it".into()
            }
            Why::SlowPath(site) => site.reason(|register| format!("{register:?}").to_lowercase()),
            Why::NoSlowPath => "--contended: no call of a futex function found in it".into(),
            Why::FastPath(site) => fast_path_reason(site, false),
            Why::WholeAtEntry(site) => fast_path_reason(site, true),
        };
        if self.refused && self.why != Why::NoSlowPath {
            format!("{why}; the kernel refuses a uprobe on this instruction: not traced")
        } else {
            why
        }
    }
}

impl Placement {
    /// A probe on a slow-path `site` (`--contended`) of the function at `function_offset` in
    /// `image`: its offset from the function's start wraps below it when the site is in code
    /// the function jumps back to.
    pub fn on_slow_path(image: &[u8], function_offset: u64, site: slow_path::Site) -> Placement {
        Placement::inside(
            image,
            function_offset,
            site.offset,
            site.stack_offset,
            Why::SlowPath(site),
        )
    }

    /// A probe of a fast-path plan (a full trace) of the function at `function_offset` in
    /// `image`; `whole_at_entry`, of a plan that writes the call where its entry is probed.
    pub fn on_fast_path(
        image: &[u8],
        function_offset: u64,
        site: fast_path::Site,
        whole_at_entry: bool,
    ) -> Placement {
        let why = match whole_at_entry {
            true => Why::WholeAtEntry(site),
            false => Why::FastPath(site),
        };
        Placement::inside(image, function_offset, site.offset, site.stack_offset, why)
    }

    /// A probe at `offset` of `image`, inside the function at `function_offset`, with
    /// `stack_offset` bytes pushed there.
    fn inside(
        image: &[u8],
        function_offset: u64,
        offset: u64,
        stack_offset: u16,
        why: Why,
    ) -> Placement {
        let (code, probed) = instruction_at(image, offset);
        Placement {
            offset: offset.wrapping_sub(function_offset),
            stack_offset,
            emulated: probed.is_some_and(|i| emulates(code, offset, &i).is_some()),
            refused: probed.is_none_or(|i| kernel_refuses(code, offset, &i)),
            after_locked_update: false,
            probed,
            why,
        }
    }

    /// `--contended`'s refusal of a function in which no slow path was found.
    pub fn without_slow_path() -> Placement {
        Placement {
            offset: 0,
            stack_offset: 0,
            emulated: false,
            refused: true,
            after_locked_update: false,
            probed: None,
            why: Why::NoSlowPath,
        }
    }

    /// Whether this is [`Placement::without_slow_path`].
    pub fn lacks_slow_path(&self) -> bool {
        self.why == Why::NoSlowPath
    }

    /// The probe's offset from the function's start, signed (a slow path can lie before it).
    pub fn signed_offset(&self) -> String {
        signed_hex(self.offset)
    }
}

/// An offset from a function's start, as `--list-probes` writes it: signed, as what a function
/// reaches can lie before it (`offset` wrapped below 0).
pub(super) fn signed_hex(offset: u64) -> String {
    match offset as i64 {
        offset if offset < 0 => format!("-{:#x}", offset.unsigned_abs()),
        offset => format!("+{offset:#x}"),
    }
}

/// What a fast-path plan's probe does (`whole_at_entry`: the probe of a call written whole
/// where its entry is probed), for `--list-probes`.
fn fast_path_reason(site: &fast_path::Site, whole_at_entry: bool) -> String {
    let object = format!("object in {:?}", site.object_register).to_lowercase();
    let what = match site.role {
        Role::WholeCall => {
            "passes the call on (a tail call): entry and return probes, as before".to_owned()
        }
        Role::ReturnOnly => "passes the call opened before on: its return probe".to_owned(),
        Role::Completes(Completion {
            condition: Condition::Never,
            ..
        }) => "opens the call: the way on is not proved".to_owned(),
        Role::Completes(completion) => {
            let returns = match completion.outcome.unpack() {
                Outcome::Returns(value) => format!("returns {value}"),
                Outcome::Fails(errno) => format!("returns -1, errno {errno}"),
                Outcome::ReturnsRegister(register) => {
                    format!("returns what {register:?} holds").to_lowercase()
                }
            };
            let set = u8::from(completion.when_set);
            let when = match completion.condition {
                Condition::Zero => format!("when ZF={set}"),
                Condition::Sign => format!("when SF={set}"),
                Condition::LessOrEqual => format!("when (ZF=1 or SF!=OF)={set}"),
                Condition::BelowOrEqual => format!("when (CF=1 or ZF=1)={set}"),
                Condition::Always | Condition::Never => "always".to_owned(),
            };
            let mut text = match whole_at_entry {
                true => format!(
                    "written whole where the entry is probed: every way through the call \
                     {returns}"
                ),
                false => format!("fast path: the call {returns} from here {when}"),
            };
            if completion.opens_otherwise {
                text += "; else opens it";
            }
            if completion.may_be_open {
                text += "; completes it if opened before";
            }
            if completion.object_from_rax {
                text += &match completion.type_register.unpack() {
                    Some(register) => {
                        format!("; no copy of the mutex: its type from {register:?}").to_lowercase()
                    }
                    None => "; no copy of the mutex: its type was tested".to_owned(),
                };
            }
            text
        }
    };
    let shared = match site.shared_code {
        Some(_) => {
            "; in the code it jumps to, which the library calls too (those calls are not recorded)"
        }
        None => "",
    };
    let processes = match site.processes {
        Processes::Every => "",
        Processes::SingleThreaded => "; only while a traced process has one thread",
        Processes::Threaded => {
            "; only once a traced process has a second thread, and in every process through \
             shared probes"
        }
    };
    format!("{what}; {object}{processes}{shared}")
}

/// Places the probe of a function whose code is `code` (from its first instruction, as much
/// as its symbol's size says) at address `base`. `at_entry`: keep it at the entry regardless.
pub fn place(code: &[u8], base: u64, needs: Needs, at_entry: bool) -> Placement {
    let instructions = decode(code, base);
    let Some(first) = instructions.first() else {
        return Placement {
            offset: 0,
            stack_offset: 0,
            emulated: false,
            refused: false,
            after_locked_update: false,
            probed: None,
            why: Why::Undecodable,
        };
    };
    let at = |instruction: &Instruction, emulated: bool, stack_offset: u16, why: Why| Placement {
        offset: instruction.ip() - base,
        stack_offset,
        emulated,
        refused: kernel_refuses(code, base, instruction),
        after_locked_update: instructions
            .iter()
            .take_while(|i| i.ip() < instruction.ip())
            .last()
            .is_some_and(|previous| zero_flag_of_locked_update(previous, instruction)),
        probed: Some(*instruction),
        why,
    };
    let emulates = |instruction: &Instruction| emulates(code, base, instruction);
    let entry = |why: Why| at(first, emulates(first).is_some(), 0, why);
    if at_entry {
        return entry(Why::AtEntryAsked);
    }
    if let Some(kind) = emulates(first) {
        return entry(Why::FirstEmulated(kind));
    }

    let targets = branch_targets(&instructions, base, code.len() as u64);
    let mut stack_offset: u64 = 0;
    for (index, instruction) in instructions
        .iter()
        .enumerate()
        .take(MAX_PREFIX_INSTRUCTIONS)
    {
        let offset = instruction.ip() - base;
        if index > 0 {
            if targets.contains(&offset) {
                return entry(Why::BranchTarget(offset));
            }
            if let Some(kind) = emulates(instruction)
                && !(needs.return_probe && stack_offset != 0)
            {
                return at(
                    instruction,
                    true,
                    stack_offset as u16,
                    Why::Emulated {
                        kind,
                        prefix: index,
                    },
                );
            }
        }
        if let Err(by) = prefix_effect(instruction, needs, &mut stack_offset) {
            return entry(Why::Blocked {
                instruction: *instruction,
                offset,
                by,
            });
        }
    }
    entry(Why::NothingEmulated)
}

/// The displacement of the first 32-bit load through argument 1 (`mov disp(%rdi), %e..`) among
/// the function's first instructions: glibc's pthread_cond_signal and pthread_cond_broadcast
/// begin by loading `__wrefs` (to return at once without waiters), so this is where their
/// library keeps it.
pub fn first_load_through_argument_1(code: &[u8], base: u64) -> Option<u64> {
    decode(code, base)
        .iter()
        .take(MAX_PREFIX_INSTRUCTIONS)
        .find(|i| {
            i.mnemonic() == Mnemonic::Mov
                && i.op_count() == 2
                && i.op0_kind() == OpKind::Register
                && i.op0_register().is_gpr32()
                && i.op1_kind() == OpKind::Memory
                && i.memory_base() == Register::RDI
                && i.memory_index() == Register::None
        })
        .map(Instruction::memory_displacement64)
}

/// Where the function's direct calls and jumps, conditional or not, land (addresses in the
/// space of `base`): another function's start among them is a call, or a tail call, to it.
pub fn direct_branch_destinations(code: &[u8], base: u64) -> Vec<u64> {
    branches_of(&decode(code, base))
        .into_iter()
        .map(|(_, destination)| destination)
        .collect()
}

/// Where the function's direct calls land (not its jumps), in the space of `base`.
pub fn direct_call_destinations(code: &[u8], base: u64) -> Vec<u64> {
    decode(code, base)
        .iter()
        .filter(|i| i.flow_control() == FlowControl::Call)
        .map(Instruction::near_branch_target)
        .collect()
}

/// The direct calls and jumps, conditional or not, of code that may hold bytes that are no
/// instruction (padding, data), each as (where it is, where it lands), in the space of `base`:
/// decoding goes on past such bytes rather than stopping, so that no branch after them is
/// missed.
pub fn direct_branches_past_invalid(code: &[u8], base: u64) -> Vec<(u64, u64)> {
    branches_of(&decode_past_invalid(code, base))
}

/// The instructions of code that may hold bytes that are no instruction, each such byte
/// skipped.
fn decode_past_invalid(code: &[u8], base: u64) -> Vec<Instruction> {
    Decoder::with_ip(64, code, base, DecoderOptions::NONE)
        .into_iter()
        .filter(|i| !i.is_invalid())
        .collect()
}

/// Each direct branch among `instructions`, as (where it is, where it lands).
fn branches_of(instructions: &[Instruction]) -> Vec<(u64, u64)> {
    instructions
        .iter()
        .filter(|i| i.op_count() > 0 && matches!(i.op0_kind(), OpKind::NearBranch64))
        .map(|i| (i.ip(), i.near_branch_target()))
        .collect()
}

/// The addresses the function computes relative to its own (`lea disp(%rip)`, in the space of
/// `base`): a function among them is one it passes on, as pthread_create its thread's start.
pub fn addresses_taken(code: &[u8], base: u64) -> Vec<u64> {
    decode(code, base)
        .iter()
        .filter(|i| i.mnemonic() == Mnemonic::Lea && i.is_ip_rel_memory_operand())
        .map(Instruction::ip_rel_memory_address)
        .collect()
}

/// Each direct call, as (where it lands, where it returns to).
pub fn calls(code: &[u8], base: u64) -> Vec<(u64, u64)> {
    decode_past_invalid(code, base)
        .iter()
        .filter(|i| i.mnemonic() == Mnemonic::Call && i.op0_kind() == OpKind::NearBranch64)
        .map(|i| (i.near_branch_target(), i.next_ip()))
        .collect()
}

/// Where `__errno_location` says errno is: glibc's loads errno's offset from the thread
/// pointer from a GOT slot (`mov slot(%rip),%rax; add %fs:0,%rax`); musl's adds a constant to
/// the thread pointer (`mov %fs:0,%rax; add $offset,%rax`).
pub fn errno_location(code: &[u8], base: u64) -> Option<ErrnoAt> {
    let mut decoder = Decoder::with_ip(64, code, base, DecoderOptions::NONE);
    let load = decoder.decode();
    if load.mnemonic() != Mnemonic::Mov {
        return None;
    }
    if load.segment_prefix() == Register::FS && load.memory_displacement64() == 0 {
        let add = decoder.decode();
        let adds_constant = add.mnemonic() == Mnemonic::Add
            && add.op0_register() == load.op0_register()
            && matches!(
                add.op1_kind(),
                OpKind::Immediate8to64 | OpKind::Immediate32to64
            );
        return adds_constant.then(|| ErrnoAt::Offset(add.immediate(1) as i64));
    }
    load.is_ip_rel_memory_operand()
        .then(|| ErrnoAt::SlotOffset(load.ip_rel_memory_address()))
}

/// Whether `jump` tests the zero flag that `previous`, a locked read-modify-write of memory,
/// set.
fn zero_flag_of_locked_update(previous: &Instruction, jump: &Instruction) -> bool {
    let writes_memory = (0..previous.op_count()).any(|n| previous.op_kind(n) == OpKind::Memory);
    previous.has_lock_prefix()
        && writes_memory
        && matches!(jump.condition_code(), ConditionCode::e | ConditionCode::ne)
}

fn decode(code: &[u8], base: u64) -> Vec<Instruction> {
    let mut decoder = Decoder::with_ip(64, code, base, DecoderOptions::NONE);
    let mut instructions = Vec::new();
    let mut instruction = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() {
            break;
        }
        instructions.push(instruction);
    }
    instructions
}

/// The kind of emulation the kernel does for this instruction, if any.
fn emulates(code: &[u8], base: u64, instruction: &Instruction) -> Option<&'static str> {
    let start = (instruction.ip() - base) as usize;
    let bytes = &code[start..start + instruction.len()];
    if KERNEL_NOPS.get(bytes.len()) == Some(&bytes) {
        return Some("nop");
    }
    match bytes {
        [0xeb, _] | [0xe9, _, _, _, _] => Some("jmp"),
        [0xe8, _, _, _, _] => Some("call"),
        [0x70..=0x7f, _] | [0x0f, 0x80..=0x8f, _, _, _, _] => Some("jcc"),
        [0x50..=0x57] | [0x41, 0x50..=0x57] => Some("push"),
        _ => None,
    }
}

/// Whether the kernel refuses to probe this instruction: `uprobe_init_insn` rejects the lock
/// and segment-override prefixes (`is_prefix_bad` in arch/x86/kernel/uprobes.c).
fn kernel_refuses(code: &[u8], base: u64, instruction: &Instruction) -> bool {
    // LOCK, ES, CS, SS, DS; the FS and GS overrides (TLS accesses) are fine.
    const BAD_PREFIXES: [u8; 5] = [0xf0, 0x26, 0x2e, 0x36, 0x3e];
    let start = (instruction.ip() - base) as usize;
    let bytes = &code[start..start + instruction.len()];
    let opcode_start = bytes
        .iter()
        .position(|b| {
            !matches!(
                b,
                0xf0 | 0xf2 | 0xf3 | 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67
            )
        })
        .unwrap_or(bytes.len());
    bytes[..opcode_start]
        .iter()
        .any(|b| BAD_PREFIXES.contains(b))
}

/// The code of `image` from `offset` on, and the instruction there if it decodes.
fn instruction_at(image: &[u8], offset: u64) -> (&[u8], Option<Instruction>) {
    let code = image.get(offset as usize..).unwrap_or_default();
    let instruction = decode(&code[..code.len().min(16)], offset).first().copied();
    (code, instruction)
}

/// Whether the kernel takes a uprobe on the instruction at `offset` of `image`.
pub fn kernel_accepts(image: &[u8], offset: u64) -> bool {
    let (code, instruction) = instruction_at(image, offset);
    instruction.is_some_and(|i| !kernel_refuses(code, offset, &i))
}

/// Whether the kernel emulates the instruction at `offset` of `image` when it is probed, with
/// no single step after the probe (which costs a second trap).
pub fn kernel_emulates(image: &[u8], offset: u64) -> bool {
    let (code, instruction) = instruction_at(image, offset);
    instruction.is_some_and(|i| emulates(code, offset, &i).is_some())
}

/// Offsets (after the entry) that a direct branch or call in the function lands on.
fn branch_targets(instructions: &[Instruction], base: u64, size: u64) -> Vec<u64> {
    instructions
        .iter()
        .filter(|i| i.op_count() > 0 && matches!(i.op0_kind(), OpKind::NearBranch64))
        .map(|i| i.near_branch_target().wrapping_sub(base))
        .filter(|&target| target > 0 && target < size)
        .collect()
}

/// Checks one prefix instruction against `needs`, adding what it pushes to `stack_offset`.
fn prefix_effect(
    instruction: &Instruction,
    needs: Needs,
    stack_offset: &mut u64,
) -> Result<(), Blocker> {
    if instruction.flow_control() != FlowControl::Next {
        return Err(Blocker::Branches);
    }
    let mut factory = InstructionInfoFactory::new();
    let info = factory.info(instruction);
    for used in info.used_registers() {
        if !writes(used.access()) {
            continue;
        }
        let register = used.register().full_register();
        if register == Register::RSP {
            *stack_offset += stack_growth(instruction).ok_or(Blocker::MovesStack)?;
        } else if let Some(n) = ARGUMENT_REGISTERS.iter().position(|&r| r == register)
            && needs.argument_registers & (1 << n) != 0
        {
            return Err(Blocker::WritesArgument(n, register));
        }
    }
    if needs.reads_memory && writes_memory_off_stack(info) {
        return Err(Blocker::WritesMemory);
    }
    Ok(())
}

/// Whether an operand of this access is written.
pub(super) fn writes(access: OpAccess) -> bool {
    matches!(
        access,
        OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
    )
}

/// Whether the instruction `info` describes writes memory other than the stack.
pub(super) fn writes_memory_off_stack(info: &InstructionInfo) -> bool {
    info.used_memory()
        .iter()
        .any(|m| writes(m.access()) && m.base() != Register::RSP)
}

/// Bytes a `push reg` or `sub $imm, %rsp` moves the stack pointer down.
fn stack_growth(instruction: &Instruction) -> Option<u64> {
    match instruction.mnemonic() {
        Mnemonic::Push if instruction.op0_kind() == OpKind::Register => Some(8),
        Mnemonic::Sub
            if instruction.op0_register() == Register::RSP
                && matches!(
                    instruction.op1_kind(),
                    OpKind::Immediate8to64 | OpKind::Immediate32to64
                ) =>
        {
            u64::try_from(instruction.immediate(1) as i64).ok()
        }
        _ => None,
    }
}

fn format_gas(instruction: &Instruction) -> String {
    let mut formatter = GasFormatter::new();
    formatter.options_mut().set_uppercase_hex(false);
    formatter.options_mut().set_branch_leading_zeros(false);
    let mut text = String::new();
    formatter.format(instruction, &mut text);
    text
}

#[cfg(test)]
mod tests {
    use tracer_common::object_layout::{GLIBC, GLIBC_2_41};

    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The first bytes of functions of Debian 12's glibc 2.36 libc.so.6.
    const MUTEX_LOCK: &str = "8b471089c281e27f01000083e07c0f85ac000000534883ec1085d20f85a7000000448b0d989614004585c975638b7710";
    const MUTEX_UNLOCK: &str = "be01000000e9f6feffff";
    const SPIN_LOCK: &str = "f0ff0f750b31c0c30f1f840000000000f390833f007fe9ebf7";
    const SEM_POST: &str = "8b7708488b073dffffff7f7433488d5001f0480fb11775ee48c1e820741b4080f6814531d2ba01000000b8ca0000000f";
    const COND_WAIT: &str = "4157415641be02000000415541544989";

    const ARG1_WITH_RETURN: Needs = Needs {
        argument_registers: 0b1,
        return_probe: true,
        reads_memory: false,
    };

    #[test]
    fn mutex_lock_moves_to_its_first_jcc() {
        let placement = place(&hex(MUTEX_LOCK), 0x8c370, ARG1_WITH_RETURN, false);
        assert_eq!(
            (placement.offset, placement.stack_offset, placement.emulated),
            (0xe, 0, true)
        );
        assert_eq!(placement.instruction(), "jne 0x8c430");
    }

    #[test]
    fn mutex_unlock_moves_to_its_tail_jump_past_a_write_to_an_unused_register() {
        let needs = Needs {
            reads_memory: true,
            ..ARG1_WITH_RETURN
        };
        let placement = place(&hex(MUTEX_UNLOCK), 0x8dd50, needs, false);
        assert_eq!((placement.offset, placement.emulated), (5, true));
        assert!(placement.instruction().starts_with("jmp"), "{placement:?}");
        // The same prefix is wrong for an event that reads the second argument (%esi).
        let reads_rsi = Needs {
            argument_registers: 0b11,
            ..needs
        };
        let placement = place(&hex(MUTEX_UNLOCK), 0x8dd50, reads_rsi, false);
        assert_eq!(placement.offset, 0);
        assert!(
            placement.reason().contains("writes argument 2"),
            "{placement:?}"
        );
    }

    #[test]
    fn spin_lock_skips_the_locked_decrement_it_cannot_probe_unless_memory_is_read() {
        let placement = place(&hex(SPIN_LOCK), 0x8ff70, ARG1_WITH_RETURN, false);
        assert_eq!(
            (
                placement.offset,
                placement.emulated,
                placement.after_locked_update
            ),
            (3, true, true),
            "{placement:?}"
        );
        // The loop jumps back to the entry only, which the entry probe would see too.
        let reads_lock = Needs {
            reads_memory: true,
            ..ARG1_WITH_RETURN
        };
        let placement = place(&hex(SPIN_LOCK), 0x8ff70, reads_lock, false);
        assert_eq!(placement.offset, 0);
        assert!(
            placement.reason().contains("writes memory"),
            "{placement:?}"
        );
    }

    #[test]
    fn glibc_2_41s_spin_lock_is_probed_past_its_decrement_whose_flags_say_if_it_spins() {
        // xor %eax,%eax; lock decl (%rdi); jne +0x10; ret; ... the retry loop of its own at
        // +0x10, which never reaches the probe again.
        const SPIN_LOCK_2_41: &str = "31c0f0ff0f7509c30f1f840000000000f39039077efaf0ff0f75f5c3";
        let placement = place(&hex(SPIN_LOCK_2_41), 0x998f0, ARG1_WITH_RETURN, false);
        assert_eq!(
            (placement.offset, placement.after_locked_update),
            (5, true),
            "{placement:?}"
        );
        let at_entry = place(&hex(SPIN_LOCK_2_41), 0x998f0, ARG1_WITH_RETURN, true);
        assert!(
            !at_entry.refused && !at_entry.after_locked_update,
            "{at_entry:?}"
        );
        // A jcc after an unlocked compare says nothing of a lock.
        let mutex_lock = place(&hex(MUTEX_LOCK), 0x8c370, ARG1_WITH_RETURN, false);
        assert!(!mutex_lock.after_locked_update, "{mutex_lock:?}");
    }

    #[test]
    fn cond_signal_loads_wrefs_where_its_glibc_keeps_it() {
        // push %rbp; push %rbx; sub $8,%rsp; mov 0x1c(%rdi),%eax: glibc 2.41, no __g_refs.
        const SIGNAL_2_41: &str = "55534883ec088b471c89c3c1eb030f84930000004989f8c1";
        // push %r15 ... sub $0x28,%rsp; mov 0x24(%rdi),%ebx: glibc 2.36.
        const SIGNAL_2_36: &str = "415741564155415455534883ec288b5f2489d8c1e8030f84";
        assert_eq!(
            first_load_through_argument_1(&hex(SIGNAL_2_41), 0x91880),
            Some(GLIBC_2_41.cond_waiter_refs.byte_offset() as u64)
        );
        assert_eq!(
            first_load_through_argument_1(&hex(SIGNAL_2_36), 0x87e20),
            Some(GLIBC.cond_waiter_refs.byte_offset() as u64)
        );
        assert_eq!(first_load_through_argument_1(&hex(MUTEX_UNLOCK), 0), None);
    }

    #[test]
    fn spin_lock_at_its_entry_is_refused_by_the_kernel() {
        let placement = place(&hex(SPIN_LOCK), 0x8ff70, ARG1_WITH_RETURN, true);
        assert_eq!(placement.offset, 0);
        assert!(placement.refused, "{placement:?}");
        assert!(!place(&hex(SPIN_LOCK), 0x8ff70, ARG1_WITH_RETURN, false).refused);
        assert!(!place(&hex(MUTEX_LOCK), 0x8c370, ARG1_WITH_RETURN, true).refused);
        // pthread_self: mov %fs:0x10,%rax; ret -- a TLS access is probed like any other.
        assert!(
            !place(
                &hex("64488b042510000000c3"),
                0x8f690,
                ARG1_WITH_RETURN,
                true
            )
            .refused
        );
    }

    #[test]
    fn sem_post_stays_at_the_entry_because_its_retry_loop_lands_in_the_prefix() {
        let placement = place(&hex(SEM_POST), 0x905c0, ARG1_WITH_RETURN, false);
        assert_eq!((placement.offset, placement.emulated), (0, false));
        assert!(
            placement.reason().contains("+0x6 is a branch target"),
            "{placement:?}"
        );
    }

    #[test]
    fn cond_wait_starts_with_an_emulated_push() {
        let needs = Needs {
            argument_registers: 0b11,
            ..ARG1_WITH_RETURN
        };
        let placement = place(&hex(COND_WAIT), 0x883f0, needs, false);
        assert_eq!((placement.offset, placement.emulated), (0, true));
        assert_eq!(placement.instruction(), "push %r15");
    }

    #[test]
    fn a_moved_stack_is_told_to_the_program_but_not_allowed_under_a_uretprobe() {
        // mov %edi,%eax; sub $0x10,%rsp; jmp .+2 -- the jmp is 0x10 bytes below the entry's %rsp.
        let code = hex("89f84883ec10eb00");
        let entry_only = Needs {
            argument_registers: 0b1,
            return_probe: false,
            reads_memory: false,
        };
        let placement = place(&code, 0x1000, entry_only, false);
        assert_eq!((placement.offset, placement.stack_offset), (6, 0x10));
        let placement = place(&code, 0x1000, ARG1_WITH_RETURN, false);
        assert_eq!(
            (placement.offset, placement.stack_offset),
            (0, 0),
            "{placement:?}"
        );
    }

    #[test]
    fn probe_at_entry_keeps_the_entry() {
        let placement = place(&hex(MUTEX_LOCK), 0x8c370, ARG1_WITH_RETURN, true);
        assert_eq!((placement.offset, placement.emulated), (0, false));
    }

    #[test]
    fn calls_and_branches_end_the_prefix() {
        // mov %edi,%eax; call .+0; nop -- the call could skip nothing, but it leaves the function.
        let code = hex("89f8e80000000090");
        let placement = place(&code, 0x1000, ARG1_WITH_RETURN, false);
        assert_eq!(
            placement.offset, 2,
            "a call itself is emulated and may be probed"
        );
        let code = hex("89f8ffd090");
        let placement = place(&code, 0x1000, ARG1_WITH_RETURN, false);
        assert_eq!(
            placement.offset, 0,
            "an indirect call ends the prefix: {placement:?}"
        );
    }
}
