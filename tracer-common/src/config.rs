//! What the BPF programs are told once, before they are loaded: one read-only global of type
//! [`ProgramConfig`], which userspace writes into the object's `.rodata` whole. The loader then
//! freezes that map, so the verifier knows every field's value; the programs read each field
//! volatile, where they need it, at a constant offset into it.

use bytemuck::{Pod, Zeroable};

use crate::STACKS_NONE;

/// The programs' settings for one load. `Pod` makes the compiler refuse a field that is not
/// plain data or a layout with implicit padding, so every byte userspace writes is a field's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct ProgramConfig {
    /// Byte offset in `task_struct` of the thread pointer, as the kernel saved it (from kernel
    /// BTF; `thread.fsbase` on x86-64, `thread.uw.tp_value` on arm64): each record carries it,
    /// and userspace makes it the thread's `pthread_self()`.
    pub thread_pointer_offset: u64,
    /// The bits of a user code address: a return address read where the code may have signed
    /// it (arm64's pointer authentication) or tagged it is masked with this. All ones where
    /// addresses carry no such bits.
    pub code_address_mask: u64,
    /// Byte offset of `nvcsw` in `task_struct` (from kernel BTF): voluntary context switches,
    /// counted at a call's entry and again at its return to tell whether it blocked.
    pub nvcsw_offset: u64,
    /// Byte offset of `pid` in `task_struct` (from kernel BTF): the current thread's id with no
    /// helper call.
    pub pid_offset: u64,
    /// Byte offset of `tgid` in `task_struct` (from kernel BTF): the current process's id with
    /// no helper call, and a forked child's, to tell a new process from a new thread.
    pub tgid_offset: u64,
    /// Bytes of each CPU's ring buffer: how full a ring is, without asking the kernel its size
    /// at every record.
    pub ring_bytes: u64,
    /// The tracer's own process id: never traced (system-wide, its runtime's locks would feed
    /// back).
    pub tracer_tgid: u32,
    /// 1 when tracing system-wide: shared links (no process filter) record every process.
    pub system_wide: u32,
    /// Which records carry their thread's user stack ([`crate::record::StackedRecord`]):
    /// [`crate::STACKS_NONE`], [`crate::STACKS_SLOW_PATHS`] or [`crate::STACKS_ALL`].
    pub stacks: u32,
    /// 1 with `--lossless`: a thread that writes to a ring more than half full is stopped
    /// until the tracer has drained the rings.
    pub lossless: u32,
    /// 1 when only the futex waits that blocked and the wakes that woke are recorded
    /// (`--contended`), 0 when every futex call is.
    pub futex_contended_only: u32,
    /// How many of `cgroups` are given (`--cgroup`): 0 records every cgroup's processes.
    pub cgroup_count: u32,
    /// With `cgroup_count` above 0, only threads in one of the first `cgroup_count` of these
    /// cgroups (v2), or below one, are recorded, whenever they entered it.
    pub cgroups: [SelectedCgroup; MAX_CGROUPS],
}

/// The most cgroups `--cgroup` can name.
pub const MAX_CGROUPS: usize = 8;

/// A cgroup whose threads are recorded, as the kernel tells a thread's ancestors apart.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct SelectedCgroup {
    /// Its id: the inode number of its directory in the cgroup2 file system.
    pub id: u64,
    /// Its depth below the root (the root is 0): a thread is under it when its ancestor at
    /// that depth has its id.
    pub level: u32,
    /// Rounds the size up to the alignment of `id`, as a field: always zero.
    pub padding: u32,
}

/// Six `u64`s, six `u32`s and the cgroups: a field added or resized changes this.
const _: () = assert!(
    size_of::<ProgramConfig>() == 6 * 8 + 6 * 4 + MAX_CGROUPS * size_of::<SelectedCgroup>()
);

impl ProgramConfig {
    /// What the object holds before userspace writes its settings: all zero.
    pub const UNSET: ProgramConfig = ProgramConfig {
        thread_pointer_offset: 0,
        code_address_mask: 0,
        nvcsw_offset: 0,
        pid_offset: 0,
        tgid_offset: 0,
        ring_bytes: 0,
        tracer_tgid: 0,
        system_wide: 0,
        stacks: STACKS_NONE,
        lossless: 0,
        futex_contended_only: 0,
        cgroup_count: 0,
        cgroups: [SelectedCgroup {
            id: 0,
            level: 0,
            padding: 0,
        }; MAX_CGROUPS],
    };

    /// Its bytes as the BPF side lays them out, for the loader to write into `.rodata`.
    pub fn as_bytes(&self) -> &[u8] {
        bytemuck::bytes_of(self)
    }
}
