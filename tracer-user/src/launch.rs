//! Starting `-- COMMAND ARGS` so that it is traced from before its `main` runs.
//!
//! The child stops at exec under ptrace; the tracer steps it from syscall to syscall while the
//! dynamic loader maps its libraries, and as soon as the file with the pthread functions is
//! mapped (the executable itself, for a static binary) the probes are attached and the child is
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

use crate::targets::{self, PthreadLibrary};

/// How many syscall stops the loader may take before we conclude no pthread library is coming.
const MAX_SYSCALL_STOPS: u32 = 20_000;

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
    let mode = found
        .metadata()
        .map(|m| m.permissions().mode())
        .unwrap_or(0);
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
    Library(PthreadLibrary),
    Exited(ExitStatus),
    NoLibrary,
}

/// Starts `argv`, calls `attach` with its pthread library once that is mapped (not at all if
/// it never is), then lets it run.
pub fn launch(
    argv: &[OsString],
    functions: &[&str],
    attach: impl FnOnce(u32, &PthreadLibrary) -> Result<()>,
) -> Result<Launched> {
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    if let (Some(uid), Some(gid)) = (sudo_id("SUDO_UID"), sudo_id("SUDO_GID")) {
        command.uid(uid).gid(gid);
    }
    // SAFETY: the closure runs between fork and exec and only makes one async-signal-safe call.
    unsafe {
        command.pre_exec(|| {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|source| LaunchError {
        command: argv[0].to_string_lossy().into_owned(),
        source,
    })?;
    let pid = child.id();
    let result = step_until_pthread_library(pid, functions).and_then(|stepped| match stepped {
        Stepped::Library(library) => attach(pid, &library).map(|()| None),
        Stepped::NoLibrary => {
            eprintln!("thrtrace-bpf: pid {pid} maps no pthread library; not traced");
            Ok(None)
        }
        Stepped::Exited(status) => {
            eprintln!("thrtrace-bpf: pid {pid} exited before it mapped a pthread library");
            Ok(Some(status))
        }
    });
    match result {
        Ok(Some(status)) => Ok(Launched {
            child,
            exited: Some(status),
        }),
        Ok(None) => {
            // SAFETY: plain ptrace request on our stopped tracee.
            if unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0) } == -1 {
                return Err(io::Error::last_os_error())
                    .context("cannot release the command from ptrace");
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

fn sudo_id(variable: &str) -> Option<u32> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root.then(|| std::env::var(variable).ok()?.parse().ok())
        .flatten()
}

/// Steps the stopped tracee through its syscalls until a mapped file defines the pthread
/// functions, the process exits (reaped here), or the loader is long done.
fn step_until_pthread_library(pid: u32, functions: &[&str]) -> Result<Stepped> {
    let pid = pid as libc::pid_t;
    let mut status = wait_for(pid)?;
    if !libc::WIFSTOPPED(status) {
        bail!("the command exited before it could be traced");
    }
    // SAFETY: plain ptrace request on our stopped tracee.
    unsafe {
        libc::ptrace(
            libc::PTRACE_SETOPTIONS,
            pid,
            0,
            libc::PTRACE_O_TRACESYSGOOD | libc::PTRACE_O_EXITKILL,
        )
    };
    let mut checked: Vec<String> = Vec::new();
    for _ in 0..MAX_SYSCALL_STOPS {
        let mappings = targets::executable_mappings(pid as u32)?;
        if mappings.iter().any(|m| !checked.contains(&m.path)) {
            if let Some(library) = targets::find_pthread_library(pid as u32, functions)? {
                return Ok(Stepped::Library(library));
            }
            checked = mappings.into_iter().map(|m| m.path).collect();
        }
        // Forward any signal other than our own syscall and exec traps.
        let stop_signal = libc::WSTOPSIG(status);
        let forward = if stop_signal == libc::SIGTRAP || stop_signal == libc::SIGTRAP | 0x80 {
            0
        } else {
            stop_signal
        };
        // SAFETY: plain ptrace request on our stopped tracee.
        if unsafe { libc::ptrace(libc::PTRACE_SYSCALL, pid, 0, forward) } == -1 {
            return Err(io::Error::last_os_error()).context("cannot step the command");
        }
        status = wait_for(pid)?;
        if !libc::WIFSTOPPED(status) {
            return Ok(Stepped::Exited(ExitStatus::from_raw(status)));
        }
    }
    Ok(Stepped::NoLibrary)
}

fn wait_for(pid: libc::pid_t) -> Result<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status we pass. __WALL: the tracee is our child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r == pid {
            return Ok(status);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error).context("cannot wait for the command");
        }
    }
}
