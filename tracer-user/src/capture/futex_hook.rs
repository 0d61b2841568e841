//! Where the futex category's programs run in the kernel, and what each place costs the
//! processes that are not traced. Tried in this order, the first that attaches is used:
//!
//! 1. fentry/fexit on the futex syscalls' own functions (`__x64_sys_futex`,
//!    `__x64_sys_futex_waitv` on x86-64, `__arm64_sys_*` on arm64), found in kernel BTF: only
//!    futex calls run the programs.
//! 2. The futex syscalls' tracepoints (`syscalls:sys_enter_futex`, ...), which need
//!    `CONFIG_FTRACE_SYSCALLS` and tracefs: while one is on, every syscall of every process
//!    takes the kernel's slower syscall path.
//! 3. `raw_syscalls:sys_enter`/`sys_exit`, attached by name: every syscall of every process
//!    takes the slower path and runs the programs, which return at their first compare.

use std::{
    collections::BTreeMap,
    fs,
    os::fd::{AsFd, OwnedFd},
};

use aya_obj::generated::{
    bpf_attach_type::{BPF_TRACE_FENTRY, BPF_TRACE_FEXIT},
    bpf_prog_type::{BPF_PROG_TYPE_RAW_TRACEPOINT, BPF_PROG_TYPE_TRACEPOINT},
};
use rustix::mount::{MountFlags, mount};
use tracer_common::{arch, names};

use super::loader::{self, LoadError, Loaded};
use crate::{
    error::OneLine,
    sys::{SyscallError, bpf, perf},
};

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

/// The futex syscalls' functions, as fentry hooks them (kernel BTF names them by architecture).
pub const SYSCALL_FUNCTIONS: [&str; 2] = arch::HOST.futex_syscall_functions;

/// The futex syscalls' tracepoints, each an entry and an exit. The first is needed; the
/// second exists from Linux 5.16.
const SYSCALL_TRACEPOINTS: [(&str, &str); 2] = [
    ("sys_enter_futex", "sys_exit_futex"),
    ("sys_enter_futex_waitv", "sys_exit_futex_waitv"),
];

/// Where tracefs is mounted, in the order looked at.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

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
                "fentry/fexit on the futex and futex_waitv syscalls' functions (other \
                 processes' futex calls run a trampoline and a few compares; their other \
                 syscalls nothing)"
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
    // The session says these within lines of its own ("not fentry: ..."): each says its
    // cause whole, which is therefore not its source too.
    /// The program could not be loaded, or attached by name.
    #[error("{what}: {}", OneLine(.cause))]
    ProgramRefused {
        /// What was refused.
        what: String,
        cause: Box<LoadError>,
    },
    /// The kernel has no BPF trampolines into its own functions: it answers the attach with
    /// ENOTSUPP (arm64 before Linux 6.5, which has them for BPF programs only).
    #[error(
        "{what}: this kernel cannot attach tracing programs to its own functions (ENOTSUPP; \
         arm64 can from Linux 6.5)"
    )]
    NoTrampolines {
        /// What was refused.
        what: String,
    },
    /// The kernel refused to attach the program.
    #[error("{what}: {}", OneLine(.cause))]
    AttachRefused {
        /// What was refused.
        what: String,
        cause: SyscallError,
    },
}

impl FutexHookError {
    fn program(what: String) -> impl FnOnce(LoadError) -> Self {
        |cause| FutexHookError::ProgramRefused {
            what,
            cause: Box::new(cause),
        }
    }

    fn attach(what: String) -> impl FnOnce(SyscallError) -> Self {
        |cause| FutexHookError::AttachRefused { what, cause }
    }

    /// A tracing program's attach refused.
    fn attach_tracing(what: String) -> impl FnOnce(SyscallError) -> Self {
        |cause| match cause.io_error.raw_os_error() {
            Some(ENOTSUPP) => FutexHookError::NoTrampolines { what },
            _ => FutexHookError::AttachRefused { what, cause },
        }
    }
}

/// The kernel's own "operation not supported" (not `EOPNOTSUPP`), which userspace has no
/// name for.
const ENOTSUPP: i32 = 524;

/// The futex programs, attached.
#[derive(Default)]
pub struct Hooked {
    /// The links, which detach the programs when closed.
    pub links: Vec<OwnedFd>,
    /// The programs, whose skipped runs are read from them ([`bpf::prog_info`]).
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
                    .map_err(FutexHookError::program(what()))?;
                let link = loader::attach_raw_tracepoint(&fd, tracepoint)
                    .map_err(FutexHookError::program(what()))?;
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
                .map_err(FutexHookError::program(what()))?;
            let link = attach_tracing(&fd).map_err(FutexHookError::attach_tracing(what()))?;
            hooked.add(fd, link);
        }
    }
    Ok(hooked)
}

/// Attaches a tracing program (fentry, fexit) to the function it was loaded for.
fn attach_tracing(program: &OwnedFd) -> Result<OwnedFd, SyscallError> {
    // No name: the program's own target, given at load.
    bpf::raw_tracepoint_open(program.as_fd(), None)
}

/// The exit, then the entry tracepoint of each futex syscall tracefs has; the first is needed.
/// Each program is loaded once and attached to every syscall's tracepoint: the verifier's
/// work on it is much of a `--contended` start.
fn attach_syscall_tracepoints(loaded: &Loaded) -> Result<Hooked, FutexHookError> {
    let mut programs: [Option<OwnedFd>; 2] = [None, None];
    let mut links = Vec::new();
    for (at, (enter, exit)) in SYSCALL_TRACEPOINTS.into_iter().enumerate() {
        let ids = (tracepoint_id(exit), tracepoint_id(enter));
        let (Some(exit_id), Some(enter_id)) = ids else {
            if at == 0 {
                return Err(FutexHookError::NoTracepoint { name: enter });
            }
            continue;
        };
        let hooks = [
            (names::FUTEX_TP_EXIT_PROGRAM, exit, exit_id),
            (names::FUTEX_TP_ENTER_PROGRAM, enter, enter_id),
        ];
        for ((program, name, id), loaded_once) in hooks.into_iter().zip(&mut programs) {
            let what = || format!("{program} on syscalls:{name}");
            let fd = match loaded_once {
                Some(fd) => fd,
                None => loaded_once.insert(
                    loaded
                        .load_program(program, BPF_PROG_TYPE_TRACEPOINT, None)
                        .map_err(FutexHookError::program(what()))?,
                ),
            };
            let link = attach_perf_tracepoint(fd, id).map_err(FutexHookError::attach(what()))?;
            links.push(link);
        }
    }
    Ok(Hooked {
        links,
        programs: programs.into_iter().flatten().collect(),
    })
}

/// Attaches the tracepoint program `program` to the tracepoint whose id is `id`, on every
/// CPU, through a perf event and a BPF link. Closing the link detaches it.
fn attach_perf_tracepoint(program: &OwnedFd, id: u64) -> Result<OwnedFd, SyscallError> {
    let event = perf::open_tracepoint(id)?;
    // The link holds the event: closing the link detaches the program and removes the event.
    bpf::link_perf_event(program.as_fd(), event.as_fd(), 0)
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
    mount(
        "tracefs",
        "/sys/kernel/tracing",
        "tracefs",
        MountFlags::empty(),
        None,
    )
    .is_ok()
}
