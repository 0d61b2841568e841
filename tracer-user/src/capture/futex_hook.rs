//! Where the futex category's programs run in the kernel, and what each place costs the
//! processes that are not traced. Tried in this order, the first that attaches is used:
//!
//! 1. fentry/fexit on the futex syscalls' own functions (`__x64_sys_futex`,
//!    `__x64_sys_futex_waitv`), found in kernel BTF: only futex calls run the programs.
//! 2. The futex syscalls' tracepoints (`syscalls:sys_enter_futex`, ...), which need
//!    `CONFIG_FTRACE_SYSCALLS` and tracefs: while one is on, every syscall of every process
//!    takes the kernel's slower syscall path.
//! 3. `raw_syscalls:sys_enter`/`sys_exit`, attached by name: every syscall of every process
//!    takes the slower path and runs the programs, which return at their first compare.

use std::{
    collections::BTreeMap,
    fs, io,
    mem::MaybeUninit,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use aya_obj::generated::{
    bpf_attach_type::{BPF_PERF_EVENT, BPF_TRACE_FENTRY, BPF_TRACE_FEXIT},
    bpf_attr, bpf_cmd,
    bpf_prog_type::{BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_PROG_TYPE_TRACEPOINT},
    perf_event_attr,
};
use tracer_common::names;

use super::loader::{self, Loaded, bpf};

/// How the futex programs are hooked into the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FutexHook {
    /// fentry/fexit on the syscalls' functions.
    Fentry,
    /// The syscalls' own tracepoints.
    SyscallTracepoints,
    /// `raw_syscalls:sys_enter`/`sys_exit`.
    RawSyscalls,
}

/// The futex syscalls' functions, as fentry hooks them (kernel BTF names them so on x86-64).
pub const SYSCALL_FUNCTIONS: [&str; 2] = ["__x64_sys_futex", "__x64_sys_futex_waitv"];

/// The futex syscalls' tracepoints, each an entry and an exit. The first is needed; the
/// second exists from Linux 5.16.
const SYSCALL_TRACEPOINTS: [(&str, &str); 2] = [
    ("sys_enter_futex", "sys_exit_futex"),
    ("sys_enter_futex_waitv", "sys_exit_futex_waitv"),
];

/// Where tracefs is mounted, in the order looked at.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// `PERF_TYPE_TRACEPOINT`: a perf event whose config is a tracepoint's id.
const PERF_TYPE_TRACEPOINT: u32 = 2;

/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

impl FutexHook {
    /// Every hook, in the order tried.
    pub const ALL: [FutexHook; 3] = [
        FutexHook::Fentry,
        FutexHook::SyscallTracepoints,
        FutexHook::RawSyscalls,
    ];

    /// Its `--futex-hook` name.
    pub fn name(self) -> &'static str {
        match self {
            FutexHook::Fentry => "fentry",
            FutexHook::SyscallTracepoints => "syscall-tracepoints",
            FutexHook::RawSyscalls => "raw-syscalls",
        }
    }

    /// What it is and what it costs the processes that are not traced, for `-v`.
    pub fn describe(self) -> &'static str {
        match self {
            FutexHook::Fentry => {
                "fentry/fexit on __x64_sys_futex and __x64_sys_futex_waitv (other processes' \
                 futex calls run a trampoline and a few compares; their other syscalls nothing)"
            }
            FutexHook::SyscallTracepoints => {
                "the tracepoints syscalls:sys_enter_futex and sys_exit_futex (while they are \
                 on, every syscall of every process takes the kernel's slower syscall path)"
            }
            FutexHook::RawSyscalls => {
                "raw_syscalls:sys_enter and sys_exit (every syscall of every process takes the \
                 slower syscall path and runs a compare)"
            }
        }
    }
}

/// Why a hook could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FutexHookError {
    /// Kernel BTF has no such function (another architecture's names, or a kernel without it).
    #[error("kernel BTF has no function {name}")]
    NoFunction {
        /// The function's name.
        name: &'static str,
    },
    /// No tracefs mount has the tracepoint.
    #[error(
        "the tracepoint syscalls:{name} is not in tracefs (looked in {}): tracefs is not \
         mounted, or this kernel lacks CONFIG_FTRACE_SYSCALLS",
        TRACEFS.join(" and ")
    )]
    NoTracepoint {
        /// The tracepoint's name.
        name: &'static str,
    },
    /// The kernel refused the program or its attachment.
    #[error("{what}: {source:#}")]
    Refused {
        /// What was refused.
        what: String,
        /// Why.
        source: anyhow::Error,
    },
}

impl FutexHookError {
    fn refused(what: impl Into<String>, source: impl Into<anyhow::Error>) -> Self {
        FutexHookError::Refused {
            what: what.into(),
            source: source.into(),
        }
    }
}

/// The futex programs, attached.
#[derive(Default)]
pub struct Hooked {
    /// The links, which detach the programs when closed.
    pub links: Vec<OwnedFd>,
    /// The programs, whose skipped runs are read from them ([`loader::program_info`]).
    pub programs: Vec<OwnedFd>,
}

impl Hooked {
    fn add(&mut self, program: OwnedFd, link: OwnedFd) {
        self.programs.push(program);
        self.links.push(link);
    }
}

/// Attaches the futex programs of `loaded` with `hook`. `functions` are the BTF ids of
/// kernel functions by name, [`SYSCALL_FUNCTIONS`] among them. The exits first: an exit with
/// no call noted records nothing, while a call noted with no exit program yet would wait for
/// the thread's next futex exit.
pub fn attach(
    loaded: &Loaded,
    hook: FutexHook,
    functions: &BTreeMap<&str, u32>,
) -> Result<Hooked, FutexHookError> {
    match hook {
        FutexHook::Fentry => attach_fentry(loaded, functions),
        FutexHook::SyscallTracepoints => attach_syscall_tracepoints(loaded),
        FutexHook::RawSyscalls => {
            let mut hooked = Hooked::default();
            for (program, tracepoint) in [
                (names::FUTEX_RAW_EXIT_PROGRAM, "sys_exit"),
                (names::FUTEX_RAW_ENTER_PROGRAM, "sys_enter"),
            ] {
                let what = || format!("{program} on raw_syscalls:{tracepoint}");
                let fd = loaded
                    .load_program(program, BPF_PROG_TYPE_RAW_TRACEPOINT, None)
                    .map_err(|e| FutexHookError::refused(what(), e))?;
                let link = loader::attach_raw_tracepoint(&fd, tracepoint)
                    .map_err(|e| FutexHookError::refused(what(), e))?;
                hooked.add(fd, link);
            }
            Ok(hooked)
        }
    }
}

/// fexit, then fentry, on each syscall function kernel BTF has; the first is needed.
fn attach_fentry(
    loaded: &Loaded,
    functions: &BTreeMap<&str, u32>,
) -> Result<Hooked, FutexHookError> {
    let mut hooked = Hooked::default();
    for (at, name) in SYSCALL_FUNCTIONS.into_iter().enumerate() {
        let Some(&id) = functions.get(name) else {
            if at == 0 {
                return Err(FutexHookError::NoFunction { name });
            }
            continue;
        };
        for (program, attach_type) in [
            (names::FUTEX_FEXIT_PROGRAM, BPF_TRACE_FEXIT),
            (names::FUTEX_FENTRY_PROGRAM, BPF_TRACE_FENTRY),
        ] {
            let what = || format!("{program} on {name}");
            let fd = loaded
                .load_tracing_program(program, attach_type, id)
                .map_err(|e| FutexHookError::refused(what(), e))?;
            let link = attach_tracing(&fd).map_err(|e| FutexHookError::refused(what(), e))?;
            hooked.add(fd, link);
        }
    }
    Ok(hooked)
}

/// Attaches a tracing program (fentry, fexit) to the function it was loaded for.
fn attach_tracing(program: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: bpf_attr is plain data; all-zero is its "unset" value.
    let mut attr: bpf_attr = unsafe { MaybeUninit::zeroed().assume_init() };
    // No name: the program's own target, given at load.
    attr.raw_tracepoint.prog_fd = program.as_raw_fd() as u32;
    bpf(bpf_cmd::BPF_RAW_TRACEPOINT_OPEN, &mut attr)
}

/// The exit, then the entry tracepoint of each futex syscall tracefs has; the first is needed.
fn attach_syscall_tracepoints(loaded: &Loaded) -> Result<Hooked, FutexHookError> {
    let mut hooked = Hooked::default();
    for (at, (enter, exit)) in SYSCALL_TRACEPOINTS.into_iter().enumerate() {
        let ids = (tracepoint_id(exit), tracepoint_id(enter));
        let (Some(exit_id), Some(enter_id)) = ids else {
            if at == 0 {
                return Err(FutexHookError::NoTracepoint { name: enter });
            }
            continue;
        };
        for (program, name, id) in [
            (names::FUTEX_TP_EXIT_PROGRAM, exit, exit_id),
            (names::FUTEX_TP_ENTER_PROGRAM, enter, enter_id),
        ] {
            let what = || format!("{program} on syscalls:{name}");
            let fd = loaded
                .load_program(program, BPF_PROG_TYPE_TRACEPOINT, None)
                .map_err(|e| FutexHookError::refused(what(), e))?;
            let link =
                attach_perf_tracepoint(&fd, id).map_err(|e| FutexHookError::refused(what(), e))?;
            hooked.add(fd, link);
        }
    }
    Ok(hooked)
}

/// Attaches the tracepoint program `program` to the tracepoint whose id is `id`, on every
/// CPU, through a perf event and a BPF link. Closing the link detaches it.
fn attach_perf_tracepoint(program: &OwnedFd, id: u64) -> io::Result<OwnedFd> {
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
        return Err(io::Error::last_os_error());
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
    bpf(bpf_cmd::BPF_LINK_CREATE, &mut link)
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
