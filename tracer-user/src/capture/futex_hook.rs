//! Where the futex category's programs run: the futex syscall's own tracepoints
//! (`syscalls:sys_enter_futex` and `sys_exit_futex`, which need `CONFIG_FTRACE_SYSCALLS`),
//! each attached through a perf event, by the id tracefs gives it, with a BPF link
//! (`docs/futex-design.md` says which hooks come next where these are missing).

use std::{
    fs, io,
    mem::MaybeUninit,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use aya_obj::generated::{bpf_attach_type::BPF_PERF_EVENT, bpf_attr, bpf_cmd, perf_event_attr};

use super::loader::bpf;

/// Where tracefs is mounted, in the order looked at.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// `PERF_TYPE_TRACEPOINT`: a perf event whose config is a tracepoint's id.
const PERF_TYPE_TRACEPOINT: u32 = 2;

/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

/// A syscall tracepoint the futex programs could not be attached to.
#[derive(Debug, thiserror::Error)]
pub enum FutexHookError {
    /// No tracefs mount has the tracepoint: tracefs is not mounted, or the kernel has no
    /// syscall tracepoints.
    #[error(
        "the tracepoint syscalls:{name} is not in tracefs (looked in {}): tracefs is not \
         mounted, or this kernel lacks CONFIG_FTRACE_SYSCALLS",
        TRACEFS.join(" and ")
    )]
    NotFound {
        /// The tracepoint's name.
        name: &'static str,
    },
    /// The kernel refused the perf event.
    #[error("perf_event_open of the tracepoint syscalls:{name}: {source}")]
    Open {
        /// The tracepoint's name.
        name: &'static str,
        /// Why.
        source: io::Error,
    },
    /// The kernel refused the link of the program to the event.
    #[error("cannot attach a BPF program to the tracepoint syscalls:{name}: {source}")]
    Link {
        /// The tracepoint's name.
        name: &'static str,
        /// Why.
        source: io::Error,
    },
}

/// Attaches the tracepoint program `program` to the syscall tracepoint `name`
/// (`sys_enter_futex`, ...), on every CPU. Closing the link detaches it.
pub fn attach_syscall_tracepoint(
    program: &OwnedFd,
    name: &'static str,
) -> Result<OwnedFd, FutexHookError> {
    let id = tracepoint_id(name).ok_or(FutexHookError::NotFound { name })?;
    // SAFETY: perf_event_attr is plain data; all-zero is its "unset" value.
    let mut attr: perf_event_attr = unsafe { MaybeUninit::zeroed().assume_init() };
    attr.type_ = PERF_TYPE_TRACEPOINT;
    attr.size = size_of::<perf_event_attr>() as u32;
    attr.config = id;
    // Every process, on CPU 0: a tracepoint's program runs wherever it fires, as libbpf's do.
    // SAFETY: `attr` is a valid perf_event_attr.
    let event = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &raw const attr,
            -1,
            0,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if event < 0 {
        return Err(FutexHookError::Open {
            name,
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    let event = unsafe { OwnedFd::from_raw_fd(event as i32) };
    // SAFETY: bpf_attr is plain data; all-zero is its "unset" value.
    let mut link: bpf_attr = unsafe { MaybeUninit::zeroed().assume_init() };
    // SAFETY: writing the link_create member of a zeroed union.
    unsafe {
        let create = &mut link.link_create;
        create.__bindgen_anon_1.prog_fd = program.as_raw_fd() as u32;
        create.__bindgen_anon_2.target_fd = event.as_raw_fd() as u32;
        create.attach_type = BPF_PERF_EVENT as u32;
    }
    // The link holds the event: closing the link detaches the program and removes the event.
    bpf(bpf_cmd::BPF_LINK_CREATE, &mut link).map_err(|source| FutexHookError::Link { name, source })
}

/// The id of the syscall tracepoint `name`, from the first tracefs that has it. Where none
/// is mounted (a minimal system's init), tracefs is mounted where systemd would mount it,
/// and left there as systemd would leave it.
fn tracepoint_id(name: &str) -> Option<u64> {
    let id = || {
        TRACEFS.iter().find_map(|tracefs| {
            fs::read_to_string(format!("{tracefs}/events/syscalls/{name}/id"))
                .ok()?
                .trim()
                .parse()
                .ok()
        })
    };
    id().or_else(|| mount_tracefs().then(id).flatten())
}

/// Mounts tracefs on the first of `TRACEFS`; whether it could.
fn mount_tracefs() -> bool {
    // SAFETY: NUL-terminated strings that outlive the call; no mount data.
    unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            c"/sys/kernel/tracing".as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        ) == 0
    }
}
