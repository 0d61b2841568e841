//! `perf_event_open(2)`, for the two kinds of event the BPF programs are attached through: a
//! uprobe, and a tracepoint.

use std::{
    ffi::CStr,
    os::fd::{FromRawFd, OwnedFd},
};

use aya_obj::generated::perf_event_attr;

use super::SyscallError;

/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

/// `PERF_TYPE_TRACEPOINT`: a perf event whose config is a tracepoint's id.
const PERF_TYPE_TRACEPOINT: u32 = 2;

/// A uprobe of the kernel's uprobe PMU (perf event type `pmu`) at `offset` of the file at
/// `path`, with `config` (the PMU's retprobe bit for a uretprobe, else 0), for process `pid`
/// (0: every process).
pub fn open_uprobe(
    pmu: u32,
    config: u64,
    path: &CStr,
    offset: u64,
    pid: u32,
) -> Result<OwnedFd, SyscallError> {
    let mut attr = sized_attr();
    attr.type_ = pmu;
    attr.config = config;
    attr.__bindgen_anon_3.uprobe_path = path.as_ptr() as u64;
    attr.__bindgen_anon_4.probe_offset = offset;
    // A process's probe follows its memory; every process's needs a CPU named instead.
    let (target, cpu) = match pid {
        0 => (-1, 0),
        pid => (pid as libc::pid_t, -1),
    };
    // SAFETY: the kernel reads the NUL-terminated path, borrowed through the call.
    unsafe { perf_event_open(&attr, target, cpu) }
}

/// Tracepoint `id` (its id in tracefs), for every process, on CPU 0: a tracepoint's program
/// runs wherever it fires, as libbpf's do.
pub fn open_tracepoint(id: u64) -> Result<OwnedFd, SyscallError> {
    let mut attr = sized_attr();
    attr.type_ = PERF_TYPE_TRACEPOINT;
    attr.config = id;
    // SAFETY: the attr holds no pointers.
    unsafe { perf_event_open(&attr, -1, 0) }
}

/// A zeroed perf_event_attr that says its size.
fn sized_attr() -> perf_event_attr {
    // SAFETY: perf_event_attr is plain data; all-zero is its "unset" value.
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.size = size_of::<perf_event_attr>() as u32;
    attr
}

/// # Safety
///
/// Every pointer in `attr` is valid for what the kernel reads through it until the call
/// returns.
unsafe fn perf_event_open(
    attr: &perf_event_attr,
    pid: libc::pid_t,
    cpu: libc::c_int,
) -> Result<OwnedFd, SyscallError> {
    // SAFETY: `attr` is a whole perf_event_attr whose size field says so, and its pointers
    // are the caller's to vouch for; no group (-1).
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            std::ptr::from_ref(attr),
            pid,
            cpu,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(SyscallError::last("perf_event_open"));
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
