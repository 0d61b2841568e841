//! Facts about the running kernel that the BPF programs need: `task_struct` offsets from BTF,
//! and the clock offset that turns `bpf_ktime_get_ns` into realtime. Nothing here reads tracefs,
//! which a fresh machine may not have mounted.

use std::{collections::BTreeMap, io, os::fd::AsRawFd};

use btf_rs::{Backend, Btf, Type};
use rustix::time::{ClockId, clock_getres, clock_gettime};
use tracer_common::arch;

use super::features::KernelTooOld;

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Why kernel BTF did not give what the BPF programs need.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error(transparent)]
    KernelTooOld(#[from] KernelTooOld),
    #[error("cannot read kernel BTF at {VMLINUX_BTF}")]
    Copy(#[source] io::Error),
    // btf-rs says its own source in its message (`i/o error: ...`): said once, as its text.
    #[error("cannot read kernel BTF at {VMLINUX_BTF}: {0}")]
    Unreadable(btf_rs::Error),
    #[error("{0}")]
    Lookup(btf_rs::Error),
    #[error("kernel BTF has no struct {0}")]
    NoStruct(&'static str),
    #[error("kernel BTF has no member {name} in struct {owner}")]
    NoMember {
        owner: &'static str,
        name: &'static str,
    },
    #[error("kernel BTF's task_struct.thread is not a struct")]
    ThreadNotAStruct,
}

impl BtfError {
    /// A kernel without BTF is the user's to change, as bad input is; anything else is not.
    pub fn exit_code(&self) -> i32 {
        match self {
            BtfError::KernelTooOld(_) => crate::error::EXIT_USAGE,
            _ => crate::error::EXIT_FAILURE,
        }
    }
}

/// How kernel BTF was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BtfAccess {
    /// `/sys/kernel/btf/vmlinux` mapped in place (kernels from 2025 on).
    Mapped,
    /// Older kernels refuse to map it (ENODEV): read into memory (a memfd), mapped from there.
    Copied,
}

impl BtfAccess {
    pub fn describe(self) -> &'static str {
        match self {
            BtfAccess::Mapped => "kernel BTF: mapped in place",
            BtfAccess::Copied => {
                "kernel BTF: read into memory (this kernel does not map /sys/kernel/btf/vmlinux)"
            }
        }
    }
}

/// Kernel BTF, mapped where the kernel allows it, else read into memory first. No BTF at all
/// (a kernel built without `CONFIG_DEBUG_INFO_BTF`) is a [`KernelTooOld`] that says so.
fn kernel_btf() -> Result<(Btf, BtfAccess), BtfError> {
    if !std::path::Path::new(VMLINUX_BTF).exists() {
        return Err(KernelTooOld::lacking(format!(
            "kernel BTF ({VMLINUX_BTF}: built without CONFIG_DEBUG_INFO_BTF=y)"
        ))
        .into());
    }
    // Whatever refused the mapping (ENODEV before 2025), a copy is the answer.
    if let Ok(btf) = Btf::from_file_with_backend(VMLINUX_BTF, Backend::Mmap) {
        return Ok((btf, BtfAccess::Mapped));
    }
    let copy = copy_to_memory(VMLINUX_BTF).map_err(BtfError::Copy)?;
    // The memfd by its /proc path: btf-rs maps a file it opens by name.
    let path = format!("/proc/self/fd/{}", copy.as_raw_fd());
    let btf = Btf::from_file_with_backend(&path, Backend::Mmap).map_err(BtfError::Unreadable)?;
    Ok((btf, BtfAccess::Copied))
}

/// The bytes of `path` in a new memfd (sysfs files report a size but may refuse `mmap`).
fn copy_to_memory(path: &str) -> io::Result<std::fs::File> {
    let memfd = rustix::fs::memfd_create(c"thrtrace-btf", rustix::fs::MemfdFlags::CLOEXEC)?;
    let mut copy = std::fs::File::from(memfd);
    io::copy(&mut std::fs::File::open(path)?, &mut copy)?;
    Ok(copy)
}

/// Byte offsets in `task_struct`, handed to the BPF programs in their `ProgramConfig`.
#[derive(Clone, Copy, Debug)]
pub struct TaskOffsets {
    /// The thread pointer the kernel saves in `thread` ([`arch::Arch::thread_pointer`]),
    /// from which the thread's `pthread_self()` is known.
    pub thread_pointer: u64,
    /// `nvcsw`: voluntary context switches, which grow when the thread sleeps in a futex.
    pub nvcsw: u64,
    /// `pid` and `tgid`: a task's thread and process ids, read from the current task (with
    /// no helper call) and from a forked child's.
    pub pid: u64,
    pub tgid: u64,
}

/// What the tracer reads of kernel BTF at start.
pub struct KernelBtf {
    /// Offsets in `task_struct`.
    pub offsets: TaskOffsets,
    /// How the BTF was read.
    pub access: BtfAccess,
    /// The BTF ids of the kernel functions asked for (to hook with fentry, to call as kfuncs)
    /// that the kernel has, by name.
    pub functions: BTreeMap<&'static str, u32>,
}

impl KernelBtf {
    /// Reads kernel BTF once, for the offsets and the ids of `functions`.
    pub fn read(functions: &[&'static str]) -> Result<Self, BtfError> {
        let (btf, access) = kernel_btf()?;
        let offsets = TaskOffsets::from_btf(&btf)?;
        // Each a scan of the type table: asked only when the futex programs are loaded.
        let functions = functions
            .iter()
            .filter_map(|&name| {
                let id = btf
                    .resolve_ids_by_name(name)
                    .ok()?
                    .into_iter()
                    .find(|&id| matches!(btf.resolve_type_by_id(id), Ok(Type::Func(_))))?;
                Some((name, id))
            })
            .collect();
        Ok(KernelBtf {
            offsets,
            access,
            functions,
        })
    }
}

impl TaskOffsets {
    /// Looks `task_struct` up by name once: a lookup by name scans the kernel's whole type
    /// table, a good part of the tracer's start-up. `thread_struct` is reached through the type
    /// of `task_struct.thread`.
    fn from_btf(btf: &Btf) -> Result<Self, BtfError> {
        let task = struct_named(btf, "task_struct")?;
        let member = |s: &btf_rs::Struct, owner: &'static str, name: &'static str| {
            find_member(btf, s, name).ok_or(BtfError::NoMember { owner, name })
        };
        let offset = |s: &btf_rs::Struct, owner: &'static str, name: &'static str| {
            member(s, owner, name).map(|(bits, _)| u64::from(bits / 8))
        };
        let (thread_bits, thread) = member(&task, "task_struct", "thread")?;
        let Ok(Type::Struct(thread_struct)) = btf.resolve_chained_type(&thread) else {
            return Err(BtfError::ThreadNotAStruct);
        };
        let offsets = TaskOffsets {
            thread_pointer: u64::from(thread_bits / 8)
                + member_path(btf, &thread_struct, arch::HOST.thread_pointer)?,
            nvcsw: offset(&task, "task_struct", "nvcsw")?,
            pid: offset(&task, "task_struct", "pid")?,
            tgid: offset(&task, "task_struct", "tgid")?,
        };
        Ok(offsets)
    }
}

/// The struct called `name`.
fn struct_named(btf: &Btf, name: &'static str) -> Result<btf_rs::Struct, BtfError> {
    let types = btf.resolve_types_by_name(name).map_err(BtfError::Lookup)?;
    types
        .into_iter()
        .find_map(|ty| match ty {
            Type::Struct(s) => Some(s),
            _ => None,
        })
        .ok_or(BtfError::NoStruct(name))
}

/// The byte offset in `thread_struct` of the member that `path` names, each name a member of
/// the one before it (and of the anonymous structs and unions inside it).
fn member_path(btf: &Btf, s: &btf_rs::Struct, path: &[&'static str]) -> Result<u64, BtfError> {
    let mut bits = 0;
    let mut owner = s.clone();
    let mut owner_name = "thread_struct";
    for (i, &name) in path.iter().enumerate() {
        let (at, member) = find_member(btf, &owner, name).ok_or(BtfError::NoMember {
            owner: owner_name,
            name,
        })?;
        bits += at;
        if i + 1 < path.len() {
            let Ok(Type::Struct(inner)) = btf.resolve_chained_type(&member) else {
                return Err(BtfError::NoMember {
                    owner: name,
                    name: path[i + 1],
                });
            };
            owner = inner;
            owner_name = name;
        }
    }
    Ok(u64::from(bits / 8))
}

/// The bit offset of `member` in `s`, looking into anonymous structs and unions, and the
/// member itself.
fn find_member(btf: &Btf, s: &btf_rs::Struct, member: &str) -> Option<(u32, btf_rs::Member)> {
    for m in &s.members {
        match btf.resolve_name(m) {
            Ok(n) if n == member => return Some((m.bit_offset(), m.clone())),
            Ok(n) if !n.is_empty() => continue,
            _ => {}
        }
        // An anonymous struct or union: its members are the parent's.
        if let Ok(Type::Struct(inner) | Type::Union(inner)) = btf.resolve_chained_type(m)
            && let Some((bits, found)) = find_member(btf, &inner, member)
        {
            return Some((m.bit_offset() + bits, found));
        }
    }
    None
}

/// The bits a user code address can have set ([`tracer_common::ProgramConfig::code_address_mask`]):
/// those below the highest bit of this thread's stack address, which the kernel places at the
/// top of the user address space. Above them, arm64 puts a return address's pointer
/// authentication code and tag byte.
pub fn code_address_mask() -> u64 {
    let on_the_stack = 0u8;
    let top = std::hint::black_box(&raw const on_the_stack).addr() as u64;
    u64::MAX >> top.leading_zeros()
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC` in nanoseconds, taken once at start: BPF stamps records with
/// the monotonic clock, the files carry realtime (as perf does, a later clock step is not applied).
pub fn realtime_offset_ns() -> i128 {
    // Bracket the realtime reading between two monotonic ones to halve the error.
    let before = now(ClockId::Monotonic);
    let real = now(ClockId::Realtime);
    let after = now(ClockId::Monotonic);
    real - i128::midpoint(before, after)
}

/// CLOCK_MONOTONIC now, the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    now(ClockId::Monotonic) as u64
}

/// The resolution of CLOCK_MONOTONIC, the clock records are stamped with.
pub fn clock_resolution_ns() -> u64 {
    let ts = clock_getres(ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn now(clock: ClockId) -> i128 {
    let ts = clock_gettime(clock);
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}
