//! Starting `-- COMMAND ARGS` so that it is traced from before its `main` runs.
//!
//! The child stops at exec under ptrace; the tracer steps it from syscall to syscall while the
//! dynamic loader maps its libraries. Once it has mapped them all (at once for a static
//! binary) the probes are attached to the files with the pthread functions and the child is
//! released. No code of the C library has run by then. With sudo, the command runs as the
//! invoking user (SUDO_UID/SUDO_GID).

use std::{
    ffi::{OsStr, OsString},
    io,
    os::unix::{
        ffi::OsStrExt,
        fs::PermissionsExt,
        process::{CommandExt, ExitStatusExt},
    },
    path::PathBuf,
    process::{Child, Command, ExitStatus},
};

use tracer_common::arch;

use super::targets::{self, MapsError, PthreadLibrary};
use crate::{
    error::EXIT_FAILURE,
    signals, sudo,
    sys::{SyscallError, process, ptrace},
};

/// How many syscall stops the loader may take before we stop waiting for it.
const MAX_SYSCALL_STOPS: u32 = 20_000;

/// Why the command could not be started, or not be stepped to where its probes go.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Not found, or not executable.
    #[error("cannot run '{command}'")]
    CannotRun { command: String, source: io::Error },
    #[error("the command exited before it could be traced")]
    ExitedAtStart,
    #[error("the command stopped at its exit under ptrace")]
    StoppedAtExit,
    #[error("cannot step the command")]
    Step(#[source] SyscallError),
    #[error("cannot read the syscall the command is making")]
    Syscall(#[source] SyscallError),
    #[error("cannot wait for the command")]
    Wait(#[source] SyscallError),
    #[error("cannot release the command from ptrace")]
    Release(#[source] SyscallError),
    #[error("the command ended as it was handed over")]
    EndedAtHandOver,
    #[error(transparent)]
    Maps(#[from] MapsError),
}

impl LaunchError {
    /// A command that cannot be run exits 127 (not found) or 126 (not executable), as shells
    /// and `env` do; any other failure 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::CannotRun { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                127
            }
            LaunchError::CannotRun { .. } => 126,
            _ => EXIT_FAILURE,
        }
    }
}

/// Fails as the shell would if `program` cannot be run: not found on PATH, or not executable.
pub fn check_runnable(program: &OsStr) -> Result<(), LaunchError> {
    // Said as the shell says it, not as `io::ErrorKind` names it ("entity not found").
    let error = |errno: i32| LaunchError::CannotRun {
        command: program.to_string_lossy().into_owned(),
        source: io::Error::from_raw_os_error(errno),
    };
    let candidates: Vec<PathBuf> = if program.as_bytes().contains(&b'/') {
        vec![PathBuf::from(program)]
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .collect()
    };
    let Some(found) = candidates.iter().find(|c| c.is_file()) else {
        return Err(error(libc::ENOENT));
    };
    let mode = found.metadata().map_or(0, |m| m.permissions().mode());
    if mode & 0o111 == 0 {
        return Err(error(libc::EACCES));
    }
    Ok(())
}

/// The started command.
pub struct Launched {
    pub child: Child,
    /// Set when the command exited before it mapped a pthread library (its status is reaped).
    pub exited: Option<ExitStatus>,
}

/// How stepping a new command through its loader ended.
enum Stepped {
    Library(Vec<PthreadLibrary>),
    Exited(ExitStatus),
    NoLibrary,
}

/// Starts `argv`, calls `attach` with each of its pthread libraries once they are mapped (not
/// at all if none is), then lets it run; or, with `hand_over`, leaves it stopped by SIGSTOP
/// and out of ptrace, for another thread to trace (see `exec_follow`). Fails with the error
/// `attach` failed with, or with a [`LaunchError`] made into one.
pub fn launch<E: From<LaunchError>>(
    argv: &[OsString],
    functions: &[&str],
    mut attach: impl FnMut(u32, &PthreadLibrary) -> Result<(), E>,
    hand_over: bool,
) -> Result<Launched, E> {
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    if let Some(user) = sudo::invoking_user() {
        command.uid(user.uid).gid(user.gid);
    }
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls
    // (sigemptyset, sigaddset, pthread_sigmask, ptrace), and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            // The tracer holds SIGINT and SIGTERM until its session runs; the command must not.
            signals::set_blocked(false).map_err(|error| error.io_error)?;
            ptrace::trace_me().map_err(|error| error.io_error)
        });
    }
    let mut child = command.spawn().map_err(|source| LaunchError::CannotRun {
        command: argv[0].to_string_lossy().into_owned(),
        source,
    })?;
    let pid = child.id();
    let stepped = step_until_pthread_library(pid, functions).map_err(E::from);
    let result = stepped.and_then(|stepped| match stepped {
        Stepped::Library(libraries) => libraries
            .iter()
            .try_for_each(|library| attach(pid, library))
            .map(|()| None),
        Stepped::NoLibrary => {
            say!("thrtrace-bpf: {}", targets::no_pthread_functions(pid));
            Ok(None)
        }
        Stepped::Exited(status) => {
            say!("thrtrace-bpf: pid {pid} exited before it mapped a pthread library");
            Ok(Some(status))
        }
    });
    match result {
        Ok(Some(status)) => Ok(Launched {
            child,
            exited: Some(status),
        }),
        Ok(None) => {
            let stop = if hand_over { libc::SIGSTOP } else { 0 };
            ptrace::detach(pid as libc::pid_t, stop).map_err(LaunchError::Release)?;
            // Handed over only once stopped: a SIGCONT sent before the SIGSTOP is acted on
            // would leave the command stopped for good.
            if hand_over {
                wait_until_stopped(pid as libc::pid_t)?;
            }
            Ok(Launched {
                child,
                exited: None,
            })
        }
        Err(error) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(error)
        }
    }
}

/// Steps the stopped tracee through its loader: from exec until the loader has mapped every
/// library the program needs at start-up, or the process exits (reaped here); then finds
/// its pthread libraries.
fn step_until_pthread_library(pid: u32, functions: &[&str]) -> Result<Stepped, LaunchError> {
    let status = wait_for(pid as libc::pid_t)?;
    if !libc::WIFSTOPPED(status) {
        return Err(LaunchError::ExitedAtStart);
    }
    // A tracee that is gone fails its first step below, which says so.
    let _ = ptrace::set_options(
        pid as libc::pid_t,
        libc::PTRACE_O_TRACESYSGOOD | libc::PTRACE_O_EXITKILL,
    );
    match step_through_loader(pid, status, functions)? {
        Loader::Done => {}
        Loader::Exited(status) => return Ok(Stepped::Exited(status)),
        Loader::ExitStop(_) => return Err(LaunchError::StoppedAtExit),
    }
    let libraries = targets::find_pthread_libraries(pid, functions)?;
    Ok(if libraries.is_empty() {
        Stepped::NoLibrary
    } else {
        Stepped::Library(libraries)
    })
}

/// How stepping through the loader ended.
pub enum Loader {
    /// The start-up libraries are mapped; the tracee is stopped.
    Done,
    /// The process exited (and was reaped).
    Exited(ExitStatus),
    /// The tracee is stopped at its exit (PTRACE_O_TRACEEXIT), with this status.
    ExitStop(libc::c_int),
}

/// Steps a tracee stopped at exec (`status`, with PTRACE_O_TRACESYSGOOD set) from syscall to
/// syscall until its start-up libraries are all mapped: at once for a static executable, else
/// until the syscall that follows the thread pointer's setting ([`arch::Arch::start_up_done`]),
/// which the loader does after mapping them. A static program that defines some of
/// `functions` is stepped to that syscall too where the kernel saves the thread pointer late
/// ([`arch::Arch::thread_pointer_saved_at_switch`]).
pub fn step_through_loader(
    pid: u32,
    mut status: libc::c_int,
    functions: &[&str],
) -> Result<Loader, LaunchError> {
    // Only the executable is mapped when there is no loader to map more.
    let is_static = targets::executable_mappings(pid)?.len() <= 1;
    if is_static
        && (!arch::HOST.thread_pointer_saved_at_switch
            || targets::find_pthread_libraries(pid, functions)?.is_empty())
    {
        return Ok(Loader::Done);
    }
    for _ in 0..MAX_SYSCALL_STOPS {
        let stop_signal = libc::WSTOPSIG(status);
        if stop_signal == libc::SIGTRAP | 0x80 && start_up_done(pid)? {
            return Ok(Loader::Done);
        }
        if status >> 16 == libc::PTRACE_EVENT_EXIT {
            return Ok(Loader::ExitStop(status));
        }
        // Forward any signal other than our own syscall and exec traps.
        let forward = if stop_signal == libc::SIGTRAP || stop_signal == libc::SIGTRAP | 0x80 {
            0
        } else {
            stop_signal
        };
        ptrace::step_to_syscall(pid as libc::pid_t, forward).map_err(LaunchError::Step)?;
        status = wait_for(pid as libc::pid_t)?;
        if !libc::WIFSTOPPED(status) {
            return Ok(Loader::Exited(ExitStatus::from_raw(status)));
        }
    }
    Ok(Loader::Done)
}

/// Whether the tracee, at a syscall stop, is entering [`arch::Arch::start_up_done`]'s syscall.
fn start_up_done(pid: u32) -> Result<bool, LaunchError> {
    let entry = ptrace::syscall_entry(pid as libc::pid_t).map_err(LaunchError::Syscall)?;
    let (number, first_argument) = arch::HOST.start_up_done;
    Ok(entry.is_some_and(|(nr, args)| {
        nr == number && first_argument.is_none_or(|wanted| args[0] == wanted)
    }))
}

/// Waits until our (untraced) child `pid` is stopped.
fn wait_until_stopped(pid: libc::pid_t) -> Result<(), LaunchError> {
    loop {
        let status = wait_with(pid, libc::WUNTRACED)?;
        if libc::WIFSTOPPED(status) {
            return Ok(());
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            return Err(LaunchError::EndedAtHandOver);
        }
    }
}

fn wait_for(pid: libc::pid_t) -> Result<libc::c_int, LaunchError> {
    wait_with(pid, libc::__WALL)
}

fn wait_with(pid: libc::pid_t, options: libc::c_int) -> Result<libc::c_int, LaunchError> {
    loop {
        match process::waitpid(pid, options) {
            Ok((_, status)) => return Ok(status),
            Err(error) if error.io_error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(LaunchError::Wait(error)),
        }
    }
}
