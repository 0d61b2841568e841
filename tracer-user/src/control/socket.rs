//! Where controllers find traces: one Unix socket per trace, `NAME.sock`, in a runtime
//! directory that is root's alone (`/run/thrtrace-bpf`, or `$THRTRACE_RUNTIME_DIR`).
//!
//! The directory is made mode 0700 if missing and refused unless it is root's and no one
//! else's; it is opened once, without following a link, and the socket is bound relative to
//! it (through `/proc/self/fd`, as `bind` takes no directory descriptor). `bind` never follows
//! a link at the last component and fails on any existing name, so nothing is replaced by
//! accident: a name left by a killed tracer (nobody accepts on it) is removed and bound again,
//! a live one is a name already taken. The socket is mode 0600 and belongs to the sudo user.

use std::{
    io,
    os::{
        fd::{AsRawFd, OwnedFd},
        unix::net::{UnixListener, UnixStream},
    },
    path::PathBuf,
};

use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, Uid};

use crate::sudo;

/// The runtime directory without `THRTRACE_RUNTIME_DIR`.
pub const DEFAULT_RUNTIME_DIR: &str = "/run/thrtrace-bpf";

const SOCKET_SUFFIX: &str = ".sock";

/// Why a trace cannot be controlled, or listen for a controller. The system's error is said
/// within the message, before the advice, so it is not a source as well (a chain would say it
/// twice).
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot use the control directory {path}: {io_error}{}", advice(.io_error))]
    Directory { path: PathBuf, io_error: io::Error },
    #[error(
        "the control directory {path} is not root's alone (owner uid {uid}, mode {mode:04o}): \
         remove it, or set THRTRACE_RUNTIME_DIR to another"
    )]
    NotPrivate { path: PathBuf, uid: u32, mode: u32 },
    #[error(
        "a trace named {name} is already running{}: choose another --name, or end it with \
         `thrtrace-bpf ctl {name} shutdown`", pid.map(|p| format!(" (tracer pid {p})")).unwrap_or_default()
    )]
    NameTaken { name: String, pid: Option<u32> },
    #[error("cannot create the control socket {path}: {io_error}")]
    Create { path: PathBuf, io_error: io::Error },
    #[error("no trace named {name} is running: `thrtrace-bpf ctl --list` lists them")]
    NoSuchTrace { name: String },
    #[error("cannot reach trace {name}: {io_error}{}", advice(.io_error))]
    Connect { name: String, io_error: io::Error },
}

impl ControlError {
    /// Whether the runtime directory does not exist: no trace has run since boot.
    pub fn is_missing_directory(&self) -> bool {
        matches!(
            self,
            ControlError::Directory { io_error, .. } if io_error.kind() == io::ErrorKind::NotFound
        )
    }
}

/// What to do about an error the system gave.
fn advice(error: &io::Error) -> &'static str {
    match error.kind() {
        io::ErrorKind::PermissionDenied => " (run it as root, with sudo)",
        _ => "",
    }
}

/// The runtime directory, opened.
pub struct RuntimeDir {
    dir: OwnedFd,
    path: PathBuf,
}

impl RuntimeDir {
    /// The directory's path: `THRTRACE_RUNTIME_DIR` if set.
    pub fn path() -> PathBuf {
        std::env::var_os("THRTRACE_RUNTIME_DIR")
            .filter(|p| !p.is_empty())
            .map_or_else(|| PathBuf::from(DEFAULT_RUNTIME_DIR), PathBuf::from)
    }

    /// Opens it, first making it (mode 0700) with `make` if it is missing; refuses one that
    /// anyone but root could write to or read.
    pub fn open(make: bool) -> Result<Self, ControlError> {
        let path = Self::path();
        let failed = |io_error: io::Error| ControlError::Directory {
            path: path.clone(),
            io_error,
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir = match rustix::fs::open(&path, flags, Mode::empty()) {
            Err(rustix::io::Errno::NOENT) if make => {
                match rustix::fs::mkdir(&path, Mode::from_raw_mode(0o700)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(error) => return Err(failed(error.into())),
                }
                rustix::fs::open(&path, flags, Mode::empty()).map_err(|e| failed(e.into()))?
            }
            result => result.map_err(|e| failed(e.into()))?,
        };
        let stat = rustix::fs::fstat(&dir).map_err(|e| failed(e.into()))?;
        let mode = stat.st_mode & 0o7777;
        if stat.st_uid != 0 || mode & 0o077 != 0 {
            return Err(ControlError::NotPrivate {
                path,
                uid: stat.st_uid,
                mode,
            });
        }
        Ok(RuntimeDir { dir, path })
    }

    /// `name`'s socket, as a path that resolves through the opened directory.
    fn socket_path(&self, name: &str) -> PathBuf {
        PathBuf::from(format!(
            "/proc/self/fd/{}/{name}{SOCKET_SUFFIX}",
            self.dir.as_raw_fd()
        ))
    }

    fn file_name(name: &str) -> String {
        format!("{name}{SOCKET_SUFFIX}")
    }

    /// Connects to the trace `name`.
    pub fn connect(&self, name: &str) -> Result<UnixStream, ControlError> {
        match UnixStream::connect(self.socket_path(name)) {
            Ok(stream) => Ok(stream),
            // No socket, or one that nobody accepts on (its tracer was killed).
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                ) =>
            {
                Err(ControlError::NoSuchTrace {
                    name: name.to_owned(),
                })
            }
            Err(io_error) => Err(ControlError::Connect {
                name: name.to_owned(),
                io_error,
            }),
        }
    }

    /// The names of the traces with a socket here, sorted (some may be stale).
    pub fn names(&self) -> Result<Vec<String>, ControlError> {
        let failed = |io_error: io::Error| ControlError::Directory {
            path: self.path.clone(),
            io_error,
        };
        let mut names = Vec::new();
        let mut entries = rustix::fs::Dir::read_from(&self.dir).map_err(|e| failed(e.into()))?;
        while let Some(entry) = entries.read() {
            let entry = entry.map_err(|e| failed(e.into()))?;
            let Ok(file) = entry.file_name().to_str() else {
                continue;
            };
            if let Some(name) = file.strip_suffix(SOCKET_SUFFIX)
                && parse_trace_name(name).is_ok()
            {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// Listens as trace `name`: a stale socket of that name is replaced, a live one refused.
    pub fn listen(self, name: &str) -> Result<ControlSocket, ControlError> {
        let path = self.path.join(Self::file_name(name));
        let failed = |io_error: io::Error| ControlError::Create {
            path: path.clone(),
            io_error,
        };
        let listener = match UnixListener::bind(self.socket_path(name)) {
            Err(error) if error.kind() == io::ErrorKind::AddrInUse => {
                match self.connect(name) {
                    Ok(live) => {
                        let pid = rustix::net::sockopt::socket_peercred(&live)
                            .ok()
                            .map(|cred| cred.pid.as_raw_nonzero().get() as u32);
                        return Err(ControlError::NameTaken {
                            name: name.to_owned(),
                            pid,
                        });
                    }
                    Err(ControlError::NoSuchTrace { .. }) => {}
                    Err(other) => return Err(other),
                }
                rustix::fs::unlinkat(&self.dir, Self::file_name(name), AtFlags::empty())
                    .map_err(|e| failed(e.into()))?;
                UnixListener::bind(self.socket_path(name)).map_err(failed)?
            }
            result => result.map_err(failed)?,
        };
        let file_name = Self::file_name(name);
        // In a directory only root can enter, so the name is still ours: 0600 whatever the
        // umask gave, and the sudo user's.
        rustix::fs::chmodat(
            &self.dir,
            &file_name,
            Mode::from_raw_mode(0o600),
            AtFlags::empty(),
        )
        .map_err(|e| failed(e.into()))?;
        let owner = sudo::invoking_user();
        if let Some(user) = owner {
            rustix::fs::chownat(
                &self.dir,
                &file_name,
                Some(Uid::from_raw(user.uid)),
                Some(Gid::from_raw(user.gid)),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(|e| failed(e.into()))?;
        }
        let stat = rustix::fs::statat(&self.dir, &file_name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| failed(e.into()))?;
        Ok(ControlSocket {
            listener: Some(listener),
            dir: self,
            file_name,
            identity: (stat.st_dev, stat.st_ino),
            owner_uid: owner.map_or(0, |user| user.uid),
        })
    }
}

/// A trace's listening socket; its name is removed when dropped, if still ours.
pub struct ControlSocket {
    listener: Option<UnixListener>,
    dir: RuntimeDir,
    file_name: String,
    identity: (u64, u64),
    /// Besides root, who may control the trace: the socket's owner.
    pub owner_uid: u32,
}

impl ControlSocket {
    /// The listener, to accept on (once).
    pub fn take_listener(&mut self) -> Option<UnixListener> {
        self.listener.take()
    }

    /// Where the socket is, for messages.
    pub fn path(&self) -> PathBuf {
        self.dir.path.join(&self.file_name)
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let ours = rustix::fs::statat(&self.dir.dir, &self.file_name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|stat| {
                FileType::from_raw_mode(stat.st_mode) == FileType::Socket
                    && (stat.st_dev, stat.st_ino) == self.identity
            });
        if ours {
            let _ = rustix::fs::unlinkat(&self.dir.dir, &self.file_name, AtFlags::empty());
        }
    }
}

/// A trace name names its control socket too: letters, digits, `.`, `_` and `-`, not first a
/// dot, at most 64 bytes.
pub fn parse_trace_name(name: &str) -> Result<String, String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > 64 || name.starts_with('.') || !name.chars().all(allowed) {
        return Err(format!(
            "'{name}' is not a trace name: use up to 64 letters, digits, '.', '_' and '-', \
             not starting with '.'"
        ));
    }
    Ok(name.to_owned())
}
