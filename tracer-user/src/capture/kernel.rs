//! Facts about the running kernel that the BPF programs need: `task_struct` offsets from BTF,
//! and the clock offset that turns `bpf_ktime_get_ns` into realtime. Nothing here reads tracefs,
//! which a fresh machine may not have mounted.

use anyhow::{Context, Result, anyhow, bail};
use btf_rs::{Backend, Btf, Type};

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Byte offsets in `task_struct`, handed to the BPF programs as read-only globals.
#[derive(Clone, Copy, Debug)]
pub struct TaskOffsets {
    /// `thread.fsbase`: the FS base, which x86-64 glibc's `pthread_self()` returns.
    pub fsbase: u64,
    /// `nvcsw`: voluntary context switches, which grow when the thread sleeps in a futex.
    pub nvcsw: u64,
    /// `pid` and `tgid`: a task's thread and process ids, read from the current task (with
    /// no helper call) and from a forked child's.
    pub pid: u64,
    pub tgid: u64,
}

impl TaskOffsets {
    pub fn from_kernel_btf() -> Result<Self> {
        let btf = Btf::from_file_with_backend(VMLINUX_BTF, Backend::Mmap)
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("cannot read kernel BTF at {VMLINUX_BTF}"))?;
        let thread = member_offset(&btf, "task_struct", "thread")?;
        let fsbase = member_offset(&btf, "thread_struct", "fsbase")?;
        let nvcsw = member_offset(&btf, "task_struct", "nvcsw")?;
        Ok(TaskOffsets {
            fsbase: thread + fsbase,
            nvcsw,
            pid: member_offset(&btf, "task_struct", "pid")?,
            tgid: member_offset(&btf, "task_struct", "tgid")?,
        })
    }
}

/// Byte offset of `member` in struct `name`, looking into anonymous structs and unions.
fn member_offset(btf: &Btf, name: &str, member: &str) -> Result<u64> {
    let types = btf
        .resolve_types_by_name(name)
        .map_err(|e| anyhow!("{e}"))?;
    for ty in types {
        if let Type::Struct(s) = ty
            && let Some(bits) = find_member(btf, &s, member)
        {
            return Ok(u64::from(bits / 8));
        }
    }
    bail!("kernel BTF has no member {member} in struct {name}")
}

fn find_member(btf: &Btf, s: &btf_rs::Struct, member: &str) -> Option<u32> {
    for m in &s.members {
        match btf.resolve_name(m) {
            Ok(n) if n == member => return Some(m.bit_offset()),
            Ok(n) if !n.is_empty() => continue,
            _ => {}
        }
        // An anonymous struct or union: its members are the parent's.
        if let Ok(Type::Struct(inner) | Type::Union(inner)) = btf.resolve_chained_type(m)
            && let Some(bits) = find_member(btf, &inner, member)
        {
            return Some(m.bit_offset() + bits);
        }
    }
    None
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC` in nanoseconds, taken once at start: BPF stamps records with
/// the monotonic clock, the files carry realtime (as perf does, a later clock step is not applied).
pub fn realtime_offset_ns() -> i128 {
    // Bracket the realtime reading between two monotonic ones to halve the error.
    let before = now(libc::CLOCK_MONOTONIC);
    let real = now(libc::CLOCK_REALTIME);
    let after = now(libc::CLOCK_MONOTONIC);
    real - (before + after) / 2
}

/// CLOCK_MONOTONIC now, the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    now(libc::CLOCK_MONOTONIC) as u64
}

/// The resolution of CLOCK_MONOTONIC, the clock records are stamped with.
pub fn clock_resolution_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_getres writes the timespec we pass; the clock always exists.
    unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn now(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass; both clocks always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}
