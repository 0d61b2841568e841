//! What the planner reads of a traced library's machine code, in the instruction set of the
//! architecture the tracer runs on ([`arch::HOST`]): each question answered by x86-64's reader
//! ([`placement`], iced-x86) or arm64's ([`aarch64`], yaxpeax-arm). Addresses are in the space
//! of `base`, the code's first byte.

use std::collections::HashSet;

use tracer_common::arch::{self, InstructionSet};

use super::{
    aarch64,
    placement::{self, Needs, Placement},
    slow_path::{self, Futex, Site},
};

/// Where errno is, as the C library's `__errno_location` computes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrnoAt {
    /// glibc's: the thread pointer plus the offset this GOT slot holds (ld.so fills it).
    SlotOffset(u64),
    /// musl's: the thread pointer plus a constant.
    Offset(i64),
}

/// Where errno is, from the code of `__errno_location`.
pub fn errno_location(code: &[u8], base: u64) -> Option<ErrnoAt> {
    match arch::HOST.instruction_set {
        InstructionSet::X86_64 => placement::errno_location(code, base),
        InstructionSet::A64 => aarch64::errno_location(code, base),
    }
}

/// The offset from the first argument of the first 32-bit load through it among the function's
/// first instructions: glibc's pthread_cond_signal and pthread_cond_broadcast begin by loading
/// `__wrefs` (to return at once without waiters), so this is where their library keeps it.
pub fn first_load_through_argument_1(code: &[u8], base: u64) -> Option<u64> {
    match arch::HOST.instruction_set {
        InstructionSet::X86_64 => placement::first_load_through_argument_1(code, base),
        InstructionSet::A64 => aarch64::first_load_through_argument_1(code, base),
    }
}

/// Where the function's direct calls and jumps, conditional or not, land: another function's
/// start among them is a call, or a tail call, to it.
pub fn direct_branch_destinations(code: &[u8], base: u64) -> Vec<u64> {
    match arch::HOST.instruction_set {
        InstructionSet::X86_64 => placement::direct_branch_destinations(code, base),
        InstructionSet::A64 => aarch64::direct_branch_destinations(code, base),
    }
}

/// The addresses the function computes relative to its own: a function among them is one it
/// passes on, as pthread_create its thread's start.
pub fn addresses_taken(code: &[u8], base: u64) -> Vec<u64> {
    match arch::HOST.instruction_set {
        InstructionSet::X86_64 => placement::addresses_taken(code, base),
        InstructionSet::A64 => aarch64::addresses_taken(code, base),
    }
}

/// Each direct call in the code, as (where it lands, where the callee returns to).
pub fn calls(code: &[u8], base: u64) -> Vec<(u64, u64)> {
    match arch::HOST.instruction_set {
        InstructionSet::X86_64 => placement::calls(code, base),
        InstructionSet::A64 => aarch64::calls(code, base),
    }
}

/// Whether the function at `function` (an address in the space of `base`) jumps to one of
/// `traced` on some way through it before it returns: a forwarder, whose caller the traced
/// function returns to ([`slow_path::jumps_to`]).
pub fn forwards_to(code: &[u8], base: u64, function: u64, traced: &[u64]) -> bool {
    let Some(start) = function.checked_sub(base) else {
        return false;
    };
    let traced: Vec<u64> = traced.iter().filter_map(|t| t.checked_sub(base)).collect();
    match arch::HOST.instruction_set {
        InstructionSet::X86_64 => slow_path::jumps_to::<slow_path::PathState>(code, start, &traced),
        InstructionSet::A64 => slow_path::jumps_to::<aarch64::PathState>(code, start, &traced),
    }
}

/// Where the probe of an event that `needs` this goes in a function whose code is `code`: the
/// first instruction the kernel emulates or simulates past a prefix that leaves what the probe
/// reads intact, or the entry (always, with `at_entry`).
pub fn place(code: &[u8], base: u64, needs: Needs, at_entry: bool) -> Placement {
    match arch::HOST.instruction_set {
        InstructionSet::X86_64 => placement::place(code, base, needs, at_entry),
        InstructionSet::A64 => Placement::a64(aarch64::place(code, base, needs, at_entry)),
    }
}

/// How far below the thread pointer the C library's thread descriptor, its `pthread_self()`,
/// is, from pthread_self's code: 0 on x86-64, where the thread pointer is the descriptor.
pub fn thread_descriptor_offset(code: &[u8], base: u64) -> Option<u64> {
    match arch::HOST.instruction_set {
        InstructionSet::X86_64 => Some(0),
        InstructionSet::A64 => aarch64::thread_descriptor_offset(code, base),
    }
}

/// `--contended`: where the function at `entry` (`size` bytes) of `image` (a library's bytes at
/// their file offsets) blocks or wakes a waiter, as `wanted` says ([`slow_path::sites`]);
/// `named`: the library's functions' starts.
pub fn slow_path_sites(
    image: &[u8],
    entry: u64,
    size: u64,
    named: &HashSet<u64>,
    wanted: Futex,
) -> Vec<Site> {
    match arch::HOST.instruction_set {
        InstructionSet::X86_64 => {
            slow_path::sites::<slow_path::PathState>(image, entry, size, named, wanted)
        }
        InstructionSet::A64 => {
            slow_path::sites::<aarch64::PathState>(image, entry, size, named, wanted)
        }
    }
}

/// The probe on a slow-path `site` of the function at `function_offset` in `image`.
pub fn on_slow_path(image: &[u8], function_offset: u64, site: Site) -> Placement {
    match arch::HOST.instruction_set {
        InstructionSet::X86_64 => Placement::on_slow_path(image, function_offset, site),
        InstructionSet::A64 => Placement::a64(aarch64::on_slow_path(image, function_offset, site)),
    }
}

/// Whether the kernel takes a uprobe on the instruction at `offset` of `image`.
pub fn kernel_accepts(image: &[u8], offset: u64) -> bool {
    match arch::HOST.instruction_set {
        InstructionSet::X86_64 => placement::kernel_accepts(image, offset),
        InstructionSet::A64 => aarch64::probe_at(image, offset).0 != aarch64::KernelProbe::Refused,
    }
}
