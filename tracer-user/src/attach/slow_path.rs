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
/// How many instructions of a called function are looked at for its futex call.
const MAX_CALLEE_INSTRUCTIONS: usize = 64;

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
/// pushed) is not followed. Sites
/// whose stack depth cannot be followed (a frame pointer, an aligned stack) are left out.
pub fn sites(image: &[u8], entry: u64, size: u64, named: &HashSet<u64>) -> Vec<Site> {
    let mut futex_functions: HashMap<u64, Option<Futex>> = HashMap::new();
    let follows = |from: u64, target: u64, depth: u64| {
        (entry..entry + size.max(1)).contains(&from)
            || !(named.contains(&target)
                || (depth == 0 && from.abs_diff(target) > LOCAL_JUMP_BYTES))
    };
    let mut sites = Vec::new();
    let mut depths: HashMap<u64, u64> = HashMap::new();
    // Each run of instructions from where a branch lands, with the depth there.
    let mut runs = vec![(entry, 0u64)];
    let mut walked = 0;
    while let Some((start, depth)) = runs.pop() {
        let mut depth = depth;
        let mut ip = start;
        let mut futex_call = FutexCall::default();
        while walked < MAX_WALKED {
            if depths.contains_key(&ip) {
                break;
            }
            let Some(instruction) = decode_one(image, ip) else {
                break;
            };
            walked += 1;
            depths.insert(ip, depth);
            let next = instruction.next_ip();
            if instruction.mnemonic() == Mnemonic::Syscall {
                if let Some(futex) = futex_call.made()
                    && let Ok(stack_offset) = u16::try_from(depths[&start])
                {
                    sites.push(Site {
                        offset: start,
                        stack_offset,
                        calls: None,
                        futex,
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
                    if let Some(target) = near_target(&instruction)
                        && follows(ip, target, depth)
                    {
                        runs.push((target, depth));
                    }
                    break;
                }
                FlowControl::ConditionalBranch => {
                    if let Some(target) = near_target(&instruction) {
                        runs.push((target, depth));
                    }
                    runs.push((next, depth));
                    break;
                }
                FlowControl::Call => {
                    if let Some(target) = near_target(&instruction)
                        && let Some(futex) = *futex_functions
                            .entry(target)
                            .or_insert_with(|| futex_call_of(image, target))
                        && let Ok(stack_offset) = u16::try_from(depth)
                    {
                        sites.push(Site {
                            offset: ip,
                            stack_offset,
                            calls: Some(target),
                            futex,
                        });
                    }
                }
                _ => {
                    futex_call.note(&instruction);
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
    sites.sort_by_key(|s| s.offset);
    sites.dedup();
    sites
}

/// The futex call the function at `address` makes itself, if any (among its first
/// instructions, in the order they lie, before its first return).
fn futex_call_of(image: &[u8], address: u64) -> Option<Futex> {
    let mut ip = address;
    let mut futex_call = FutexCall::default();
    for _ in 0..MAX_CALLEE_INSTRUCTIONS {
        let instruction = decode_one(image, ip)?;
        if instruction.mnemonic() == Mnemonic::Syscall {
            return futex_call.made();
        }
        if instruction.flow_control() == FlowControl::Return {
            return None;
        }
        futex_call.note(&instruction);
        ip = instruction.next_ip();
    }
    None
}

/// What a run of instructions has set up for a system call: the futex call's number in `eax`,
/// and its operation in `esi` (`mov $op, %esi`, or glibc's `xor $op, %sil` of the private flag).
#[derive(Default)]
struct FutexCall {
    number_set: bool,
    op: Option<u64>,
}

impl FutexCall {
    fn note(&mut self, instruction: &Instruction) {
        let immediate = matches!(
            instruction.op1_kind(),
            OpKind::Immediate8 | OpKind::Immediate32 | OpKind::Immediate32to64
        );
        let destination = instruction.op0_register().full_register();
        match instruction.mnemonic() {
            Mnemonic::Mov | Mnemonic::Xor if immediate && destination == Register::RSI => {
                self.op = Some(instruction.immediate(1));
            }
            Mnemonic::Mov if immediate && destination == Register::RAX => {
                self.number_set = instruction.immediate(1) == SYS_FUTEX;
            }
            _ => {}
        }
    }

    /// The kind of futex call a `syscall` now makes, if it is one of a known operation.
    fn made(&self) -> Option<Futex> {
        self.op.filter(|_| self.number_set).and_then(Futex::of)
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

/// The sites where a lock waits: calls of a waiting futex function, whose return is the wait's
/// end (a futex wait in line has no such end to probe).
pub fn waiting_sites(sites: &[Site]) -> Vec<Site> {
    sites
        .iter()
        .filter(|s| s.futex == Futex::Waits && s.calls.is_some())
        .copied()
        .collect()
}

/// The sites where an unlock wakes a waiter.
pub fn waking_sites(sites: &[Site]) -> Vec<Site> {
    sites
        .iter()
        .filter(|s| s.futex == Futex::Wakes)
        .copied()
        .collect()
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

    fn sites_of(image: &[u8]) -> Vec<Site> {
        sites(image, 0, 0x20, &HashSet::new())
    }

    #[test]
    fn finds_the_call_of_a_futex_function_with_the_bytes_pushed_before_it() {
        // push %rbx; sub $0x10,%rsp; test %eax,%eax; je +7 (to the add); call 0x40; add
        // $0x10,%rsp; pop %rbx; ret
        let entry = [
            0x53, 0x48, 0x83, 0xec, 0x10, 0x85, 0xc0, 0x74, 0x05, 0xe8, 0x32, 0x00, 0x00, 0x00,
            0x48, 0x83, 0xc4, 0x10, 0x5b, 0xc3,
        ];
        let sites = sites_of(&image(&entry, &FUTEX_FUNCTION));
        let wait = Site {
            offset: 9,
            stack_offset: 24,
            calls: Some(0x40),
            futex: Futex::Waits,
        };
        assert_eq!(sites, [wait]);
        assert_eq!(waiting_sites(&sites), [wait]);
        assert!(waking_sites(&sites).is_empty());
    }

    #[test]
    fn a_futex_call_in_line_is_probed_where_its_straight_run_begins() {
        // test %eax,%eax; jg +1 (to 5); ret; at 5: xor $0x81,%sil (FUTEX_WAKE, private);
        // mov $202,%eax; syscall; ret
        let entry = [
            0x85, 0xc0, 0x7f, 0x01, 0xc3, 0x40, 0x80, 0xf6, 0x81, 0xb8, 0xca, 0x00, 0x00, 0x00,
            0x0f, 0x05, 0xc3,
        ];
        let sites = sites_of(&image(&entry, &[]));
        let wake = Site {
            offset: 5,
            stack_offset: 0,
            calls: None,
            futex: Futex::Wakes,
        };
        assert_eq!(sites, [wake]);
        assert_eq!(waking_sites(&sites), [wake]);
        assert!(
            waiting_sites(&sites).is_empty(),
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
        assert_eq!(sites_of(&bytes), []);
    }

    #[test]
    fn a_tail_call_from_outside_the_function_to_another_named_one_is_not_followed() {
        // jmp 0x10 (out of a 2-byte function); at 0x10: jmp 0x40; at 0x40: call 0x50, a
        // futex wait; ret.
        let mut bytes = image(&[0xeb, 0x0e], &[0xe8, 0x0b, 0x00, 0x00, 0x00, 0xc3]);
        bytes[0x10..0x12].copy_from_slice(&[0xeb, 0x2e]);
        bytes[0x50..0x5d].copy_from_slice(&FUTEX_FUNCTION);
        assert_eq!(sites(&bytes, 0, 2, &HashSet::new()).len(), 1);
        assert_eq!(sites(&bytes, 0, 2, &HashSet::from([0x40])), []);
    }
}
