//! The registers of the architecture the programs are built for (aya-build's
//! `bpf_target_arch`, the loader's own): the one file that names `pt_regs`' fields. Everything
//! else asks these functions for the instruction pointer, the arguments, the return value or
//! the call's return address, and reads the same meaning on x86-64 and arm64.
//!
//! A uprobe's context is the user registers at the probed instruction (the kernel's `pt_regs` on
//! x86-64, its first part `user_pt_regs` on arm64). A syscall hook's is the kernel's whole
//! `pt_regs`, whose syscall number lies past that part on arm64: [`syscall_number`] reads it.

use core::{mem::offset_of, ptr};

use aya_ebpf::{bindings::pt_regs, helpers::bpf_probe_read_kernel};
use tracer_common::{ObjectRegister, ProbeCookie};

use crate::read_user_into;

/// One register of the context, by its field: a volatile load at a constant offset, which the
/// verifier allows and LLVM keeps as one load.
macro_rules! field {
    ($regs:expr, $($field:tt)+) => {
        // SAFETY: `regs` is the program's context, and the read is of one of its fields.
        unsafe { ptr::read_volatile(&raw const (*$regs).$($field)+) }
    };
}

/// The x86-64 side: System V's argument registers, the return address on the stack.
#[cfg(not(bpf_target_arch = "aarch64"))]
mod registers {
    use super::{
        ProbeCookie, REGISTER_SLOTS, bpf_probe_read_kernel, offset_of, pt_regs, ptr, read_user_into,
    };

    /// Where the instruction pointer is in the context (a syscall hook's, read by a helper).
    pub const INSTRUCTION_POINTER: usize = offset_of!(pt_regs, rip);

    #[inline(always)]
    pub fn instruction_pointer(regs: *const pt_regs) -> u64 {
        field!(regs, rip)
    }

    #[inline(always)]
    pub fn stack_pointer(regs: *const pt_regs) -> u64 {
        field!(regs, rsp)
    }

    #[inline(always)]
    pub fn frame_pointer(regs: *const pt_regs) -> u64 {
        field!(regs, rbp)
    }

    /// x86-64 has no link register: the return address is on the stack.
    #[inline(always)]
    pub fn link_register(_regs: *const pt_regs) -> u64 {
        0
    }

    #[inline(always)]
    pub fn flags(regs: *const pt_regs) -> u64 {
        field!(regs, eflags)
    }

    #[inline(always)]
    pub fn return_value(regs: *const pt_regs) -> u64 {
        field!(regs, rax)
    }

    #[inline(always)]
    pub fn arguments(regs: *const pt_regs) -> [u64; 5] {
        [
            field!(regs, rdi),
            field!(regs, rsi),
            field!(regs, rdx),
            field!(regs, rcx),
            field!(regs, r8),
        ]
    }

    /// Where the call's return address is: `rsp`, past the bytes the instructions before the
    /// probe pushed.
    #[inline(always)]
    pub fn call_frame(regs: *const pt_regs, stack_offset: u16) -> u64 {
        stack_pointer(regs) + u64::from(stack_offset)
    }

    /// Reads the return address of the call whose probe's cookie is `raw_cookie`, from
    /// [`call_frame`], into `destination`.
    #[inline(always)]
    pub fn read_return_address(destination: *mut u64, regs: *const pt_regs, raw_cookie: u64) {
        let stack_offset = ProbeCookie::decode(raw_cookie).stack_offset;
        read_user_into(destination, call_frame(regs, stack_offset));
    }

    /// Where each register an object may be in ([`ObjectRegister`], by its code) lies in the
    /// context; the first again, up to [`REGISTER_SLOTS`].
    pub static REGISTER_OFFSETS: [usize; REGISTER_SLOTS] = [
        offset_of!(pt_regs, rdi),
        offset_of!(pt_regs, rbx),
        offset_of!(pt_regs, rbp),
        offset_of!(pt_regs, r12),
        offset_of!(pt_regs, r13),
        offset_of!(pt_regs, r14),
        offset_of!(pt_regs, r15),
        offset_of!(pt_regs, r8),
        offset_of!(pt_regs, r9),
        offset_of!(pt_regs, r10),
        offset_of!(pt_regs, r11),
        offset_of!(pt_regs, rax),
        offset_of!(pt_regs, rcx),
        offset_of!(pt_regs, rdx),
        offset_of!(pt_regs, rsi),
        offset_of!(pt_regs, rdi),
    ];

    /// The syscall's arguments in the kernel's `pt_regs`, as the x86-64 syscall ABI passes
    /// them (`r10`, not `rcx`, for the fourth).
    pub const SYSCALL_ARGUMENTS: [usize; 5] = [
        offset_of!(pt_regs, rdi),
        offset_of!(pt_regs, rsi),
        offset_of!(pt_regs, rdx),
        offset_of!(pt_regs, r10),
        offset_of!(pt_regs, r8),
    ];

    /// The syscall's number, which the kernel keeps in `orig_ax` as `rax` becomes its value.
    #[inline(always)]
    pub fn syscall_number(regs: *const pt_regs) -> u64 {
        // SAFETY: the helper checks the kernel address.
        unsafe { bpf_probe_read_kernel(regs.byte_add(offset_of!(pt_regs, orig_rax)).cast()) }
            .unwrap_or(0)
    }
}

/// The arm64 side: AAPCS64's argument registers, the return address in `x30`.
#[cfg(bpf_target_arch = "aarch64")]
mod registers {
    use super::{
        ProbeCookie, REGISTER_SLOTS, bpf_probe_read_kernel, offset_of, pt_regs, ptr, read_user_into,
    };

    /// The link register, `x30`.
    const LINK: usize = 30;
    /// The frame pointer, `x29`.
    const FRAME: usize = 29;

    /// Where the instruction pointer is in the context (a syscall hook's, read by a helper).
    pub const INSTRUCTION_POINTER: usize = offset_of!(pt_regs, pc);

    #[inline(always)]
    pub fn instruction_pointer(regs: *const pt_regs) -> u64 {
        field!(regs, pc)
    }

    #[inline(always)]
    pub fn stack_pointer(regs: *const pt_regs) -> u64 {
        field!(regs, sp)
    }

    #[inline(always)]
    pub fn frame_pointer(regs: *const pt_regs) -> u64 {
        field!(regs, regs[FRAME])
    }

    #[inline(always)]
    pub fn link_register(regs: *const pt_regs) -> u64 {
        field!(regs, regs[LINK])
    }

    /// `PSTATE`, whose NZCV flags are bits 31 to 28.
    #[inline(always)]
    pub fn flags(regs: *const pt_regs) -> u64 {
        field!(regs, pstate)
    }

    #[inline(always)]
    pub fn return_value(regs: *const pt_regs) -> u64 {
        field!(regs, regs[0])
    }

    #[inline(always)]
    pub fn arguments(regs: *const pt_regs) -> [u64; 5] {
        [
            field!(regs, regs[0]),
            field!(regs, regs[1]),
            field!(regs, regs[2]),
            field!(regs, regs[3]),
            field!(regs, regs[4]),
        ]
    }

    /// The stack pointer the call was entered with: the same at every probe of one call, and
    /// at a function it jumps to after restoring its frame (a tail call). Probes are placed
    /// only where the instructions before them moved `sp` by `stack_offset` bytes.
    #[inline(always)]
    pub fn call_frame(regs: *const pt_regs, stack_offset: u16) -> u64 {
        stack_pointer(regs) + u64::from(stack_offset)
    }

    /// Writes the return address of the call whose probe's cookie is `raw_cookie` into
    /// `destination`: `x30`, or where the prologue saved it, `return_address_saved` 8-byte
    /// slots below the entry's stack pointer (a slow path's probe, past a call that overwrote
    /// `x30`); without the pointer-authentication code and tag bits that a user address does
    /// not have (`code_address_mask`). A call of its own, taking the raw cookie: inlined, or
    /// given the decoded fields, it made its callers' frames 56 bytes.
    #[inline(never)]
    pub fn read_return_address(destination: *mut u64, regs: *const pt_regs, raw_cookie: u64) {
        let cookie = ProbeCookie::decode(raw_cookie);
        // Read straight into `destination`, not through the stack, whose frames must stay small.
        match cookie.return_address_saved {
            // SAFETY: `destination` is writable memory of a `u64`, per the callers' contract.
            0 => unsafe { destination.write(link_register(regs)) },
            slots => read_user_into(
                destination,
                call_frame(regs, cookie.stack_offset) - 8 * u64::from(slots),
            ),
        }
        // SAFETY: as above; a read-only global that userspace sets before loading.
        unsafe {
            let mask = ptr::read_volatile(&raw const crate::CONFIG.code_address_mask);
            destination.write(destination.read() & mask);
        }
    }

    /// Where each register an object may be in ([`ObjectRegister`], by its code) lies in the
    /// context. The codes name arm64's registers as they name x86-64's by use: 0 the first
    /// argument (`x0`), 1 to 10 those a call keeps (`x19` to `x28`), 11 to 14 `x1` to `x4`;
    /// the first again, up to [`REGISTER_SLOTS`].
    pub static REGISTER_OFFSETS: [usize; REGISTER_SLOTS] = {
        const fn x(n: usize) -> usize {
            offset_of!(pt_regs, regs) + 8 * n
        }
        [
            x(0),
            x(19),
            x(20),
            x(21),
            x(22),
            x(23),
            x(24),
            x(25),
            x(26),
            x(27),
            x(28),
            x(1),
            x(2),
            x(3),
            x(4),
            x(0),
        ]
    };

    /// The syscall's arguments in the kernel's `pt_regs`: `x0` to `x4`.
    pub const SYSCALL_ARGUMENTS: [usize; 5] = {
        const X0: usize = offset_of!(pt_regs, regs);
        [X0, X0 + 8, X0 + 16, X0 + 24, X0 + 32]
    };

    /// Where the kernel's `struct pt_regs` keeps the syscall's number (`syscallno`, an `s32`
    /// after `user_pt_regs` and `orig_x0`; arch/arm64/include/asm/ptrace.h, the same in every
    /// kernel the tracer runs on).
    const SYSCALL_NUMBER: usize = size_of::<pt_regs>() + 8;

    /// The syscall's number, or -1 (no syscall) sign-extended, which matches none.
    #[inline(always)]
    pub fn syscall_number(regs: *const pt_regs) -> u64 {
        // SAFETY: the helper checks the kernel address.
        unsafe { bpf_probe_read_kernel(regs.byte_add(SYSCALL_NUMBER).cast::<i32>()) }
            .map_or(0, |number| i64::from(number) as u64)
    }
}

pub use registers::*;

/// The entries of [`REGISTER_OFFSETS`]: a power of two at or above the registers' count, so
/// that the index, taken modulo it, is bounded as the verifier sees it (modulo 15, the
/// verifiers of Linux 6.1 and 6.12 allowed an index of 15: a read past the table, refused).
const REGISTER_SLOTS: usize = 16;
const _: () = assert!(ObjectRegister::ALL.len() <= REGISTER_SLOTS);

/// A power of two above every register's offset in the context, which bounds an offset read
/// at run time.
const CONTEXT_BYTES: usize = 512;

/// What the register of code `code` holds ([`ObjectRegister::from_code`]; taken modulo the
/// table, whose last entry is the first's): read by a helper at the register's offset in the
/// context. The verifier allows a plain load from the context only at a constant offset, and
/// each way to pick one of fifteen such loads by the code costs more than the helper saves: a
/// ladder of comparisons made the verifier walk the rest of the program once per code, and a
/// match that leaves nothing to compare after it still took it a third more time than the
/// helper's programs (a hundred milliseconds of a trace's start), for a few nanoseconds a
/// record. The code is taken as a number for the same reason: an `ObjectRegister` made from
/// a cookie is a ladder too.
#[inline(always)]
pub fn register_value(code: u64, regs: *const pt_regs) -> u64 {
    let at = &raw const REGISTER_OFFSETS[code as usize % REGISTER_OFFSETS.len()];
    // SAFETY: `at` is an element of the table. Read as memory, whose value the verifier does
    // not know, and bounded, as it must be to be added to the context: LLVM, which knows the
    // table, would drop the bound from a plain read.
    let offset = unsafe { ptr::read_volatile(at) } % CONTEXT_BYTES;
    // SAFETY: the helper checks the kernel address, within the context.
    unsafe { bpf_probe_read_kernel(regs.byte_add(offset).cast::<u64>()) }.unwrap_or(0)
}
