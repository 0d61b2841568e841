//! What differs between the architectures the tracer runs on, as the BPF programs and userspace
//! both need it: one table per architecture, and [`HOST`], the one this build runs on (for the
//! BPF programs, the architecture aya-build names in `bpf_target_arch`, as the BPF target's own
//! is "bpf"). The registers themselves are named only in tracer-ebpf's `arch` module and in the
//! instruction decoders.

/// One architecture's facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arch {
    /// Its name, as `uname -m` says it.
    pub name: &'static str,
    /// Its machine code, which the planner reads.
    pub instruction_set: InstructionSet,
    /// `futex(2)`'s number.
    pub sys_futex: u64,
    /// The kernel functions of the futex syscalls (`futex`, `futex_waitv`), as fentry hooks them.
    pub futex_syscall_functions: [&'static str; 2],
    /// The path in `task_struct.thread` to the thread pointer the kernel saves: x86-64's FS
    /// base, arm64's `TPIDR_EL0` (a named member of an anonymous struct).
    pub thread_pointer: &'static [&'static str],
    /// The syscall that the C libraries' start-up makes once the dynamic loader has mapped
    /// every library and set the thread pointer, by number and first argument (`None`: any):
    /// a launched command is stepped to it before its probes are placed. On arm64 the thread
    /// pointer the kernel saves is only right after a context switch, which that syscall's
    /// stop is.
    pub start_up_done: (u64, Option<u64>),
    /// Whether the kernel saves the thread pointer only when the thread is switched out: a
    /// static program is then stepped to [`Arch::start_up_done`]'s syscall too, or its main
    /// thread's first records would carry the thread pointer of before its start-up.
    pub thread_pointer_saved_at_switch: bool,
    /// The widths its user address spaces can have, in bits (with each depth of paging).
    pub user_address_bits: &'static [u32],
    /// How far below the end of the user address space `TASK_SIZE` is: x86-64 keeps a guard
    /// page there.
    pub task_size_gap: u64,
    /// Whether glibc's spin lock is 1 when free, taken by a decrement (x86-64's own lock); else
    /// it is the generic one, 0 when free (arm64's, and musl's everywhere).
    pub glibc_spin_lock_free_is_one: bool,
}

/// An architecture's instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstructionSet {
    /// x86-64's.
    X86_64,
    /// arm64's A64.
    A64,
}

/// x86-64.
pub const X86_64: Arch = Arch {
    name: "x86_64",
    instruction_set: InstructionSet::X86_64,
    sys_futex: 202,
    futex_syscall_functions: ["__x64_sys_futex", "__x64_sys_futex_waitv"],
    thread_pointer: &["fsbase"],
    // arch_prctl(ARCH_SET_FS, ...), the thread pointer's setting.
    start_up_done: (158, Some(0x1002)),
    thread_pointer_saved_at_switch: false,
    // 4-level paging, and 5-level (`la57`).
    user_address_bits: &[47, 56],
    task_size_gap: 4096,
    glibc_spin_lock_free_is_one: true,
};

/// arm64 (AArch64).
pub const AARCH64: Arch = Arch {
    name: "aarch64",
    instruction_set: InstructionSet::A64,
    sys_futex: 98,
    futex_syscall_functions: ["__arm64_sys_futex", "__arm64_sys_futex_waitv"],
    thread_pointer: &["uw", "tp_value"],
    // set_tid_address, right after the thread pointer's setting in glibc (2.34 on) and musl.
    start_up_done: (96, None),
    thread_pointer_saved_at_switch: true,
    // 48-bit virtual addresses, and 52-bit (`ARM64_VA_BITS_52`).
    user_address_bits: &[48, 52],
    task_size_gap: 0,
    glibc_spin_lock_free_is_one: false,
};

/// The architecture this build runs on. Where the BPF programs are only checked, not built
/// (`cargo clippy --target bpfel-unknown-none`, which names no architecture), x86-64's, so that
/// the code is checked as it is built for the usual host.
#[cfg(any(
    target_arch = "x86_64",
    bpf_target_arch = "x86_64",
    all(
        target_arch = "bpf",
        not(any(bpf_target_arch = "x86_64", bpf_target_arch = "aarch64"))
    )
))]
pub const HOST: Arch = X86_64;
/// The architecture this build runs on.
#[cfg(any(target_arch = "aarch64", bpf_target_arch = "aarch64"))]
pub const HOST: Arch = AARCH64;
