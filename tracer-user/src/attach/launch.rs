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

use anyhow::{Context, Result, bail};

use super::targets::{self, PthreadLibrary};
use crate::{
    signals, sudo,
    sys::{process, ptrace},
};

/// How many syscall stops the loader may take before we stop waiting for it.
const MAX_SYSCALL_STOPS: u32 = 20_000;

/// arch_prctl's request that sets the FS base, the thread pointer (asm/prctl.h).
const ARCH_SET_FS: u64 = 0x1002;

/// The command could not be started: exit status 127 (not found) or 126 (not executable),
/// as shells and `env` use.
#[derive(Debug, thiserror::Error)]
#[error("cannot run '{command}'")]
pub struct LaunchError {
    pub command: String,
    pub source: io::Error,
}

impl LaunchError {
    pub fn exit_code(&self) -> i32 {
        if self.source.kind() == io::ErrorKind::NotFound {
            127
        } else {
            126
        }
    }
}

/// Fails as the shell would if `program` cannot be run: not found on PATH, or not executable.
pub fn check_runnable(program: &OsStr) -> Result<(), LaunchError> {
    let error = |kind: io::ErrorKind| LaunchError {
        command: program.to_string_lossy().into_owned(),
        source: io::Error::from(kind),
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
        return Err(error(io::ErrorKind::NotFound));
    };
    let mode = found.metadata().map_or(0, |m| m.permissions().mode());
    if mode & 0o111 == 0 {
        return Err(error(io::ErrorKind::PermissionDenied));
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
/// and out of ptrace, for another thread to trace (see `exec_follow`).
pub fn launch(
    argv: &[OsString],
    functions: &[&str],
    mut attach: impl FnMut(u32, &PthreadLibrary) -> Result<()>,
    hand_over: bool,
) -> Result<Launched> {
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
    let mut child = command.spawn().map_err(|source| LaunchError {
        command: argv[0].to_string_lossy().into_owned(),
        source,
    })?;
    let pid = child.id();
    let result = step_until_pthread_library(pid, functions).and_then(|stepped| match stepped {
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
            ptrace::detach(pid as libc::pid_t, stop)
                .context("cannot release the command from ptrace")?;
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
fn step_until_pthread_library(pid: u32, functions: &[&str]) -> Result<Stepped> {
    let status = wait_for(pid as libc::pid_t)?;
    if !libc::WIFSTOPPED(status) {
        bail!("the command exited before it could be traced");
    }
    // A tracee that is gone fails its first step below, which says so.
    let _ = ptrace::set_options(
        pid as libc::pid_t,
        libc::PTRACE_O_TRACESYSGOOD | libc::PTRACE_O_EXITKILL,
    );
    match step_through_loader(pid, status)? {
        Loader::Done => {}
        Loader::Exited(status) => return Ok(Stepped::Exited(status)),
        Loader::ExitStop(_) => bail!("the command stopped at its exit under ptrace"),
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
/// until the loader sets the thread pointer (`arch_prctl(ARCH_SET_FS)`), which it does after
/// mapping them.
pub fn step_through_loader(pid: u32, mut status: libc::c_int) -> Result<Loader> {
    // Only the executable is mapped when there is no loader to map more.
    if targets::executable_mappings(pid)?.len() <= 1 {
        return Ok(Loader::Done);
    }
    for _ in 0..MAX_SYSCALL_STOPS {
        let stop_signal = libc::WSTOPSIG(status);
        if stop_signal == libc::SIGTRAP | 0x80 && sets_thread_pointer(pid)? {
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
        ptrace::step_to_syscall(pid as libc::pid_t, forward).context("cannot step the command")?;
        status = wait_for(pid as libc::pid_t)?;
        if !libc::WIFSTOPPED(status) {
            return Ok(Loader::Exited(ExitStatus::from_raw(status)));
        }
    }
    Ok(Loader::Done)
}

/// Whether the tracee, at a syscall stop, is in `arch_prctl(ARCH_SET_FS, ...)`.
fn sets_thread_pointer(pid: u32) -> Result<bool> {
    let registers =
        ptrace::registers(pid as libc::pid_t).context("cannot read the command's registers")?;
    Ok(registers.orig_rax == libc::SYS_arch_prctl as u64 && registers.rdi == ARCH_SET_FS)
}

/// Waits until our (untraced) child `pid` is stopped.
fn wait_until_stopped(pid: libc::pid_t) -> Result<()> {
    loop {
        let status = wait_with(pid, libc::WUNTRACED)?;
        if libc::WIFSTOPPED(status) {
            return Ok(());
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            bail!("the command ended as it was handed over");
        }
    }
}

fn wait_for(pid: libc::pid_t) -> Result<libc::c_int> {
    wait_with(pid, libc::__WALL)
}

fn wait_with(pid: libc::pid_t, options: libc::c_int) -> Result<libc::c_int> {
    loop {
        match process::waitpid(pid, options) {
            Ok((_, status)) => return Ok(status),
            Err(error) if error.io_error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error).context("cannot wait for the command"),
        }
    }
}
