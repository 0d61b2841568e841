//! Creating files where users point us, as root, safely.
//!
//! The directory is opened once (following a link there is the user's choice) and every file
//! is created relative to it, exclusively and without following links, so that a link planted
//! under a predictable name by anyone who can write to the directory is never written through
//! (the bpftrace/bcc CVE-2024-2313 class). A name already taken, by an earlier run's file or by
//! a planted link, is replaced: the new file is made under a fresh temporary name and renamed
//! over it, which swaps the directory entry and never touches what it pointed to. A name held
//! by anything else (a device node such as `/dev/null`, a FIFO, a socket, a directory) is never
//! replaced: that is refused. Files are mode 0600 and, under sudo, belong to the invoking user.

use std::{
    fmt,
    fs::File,
    io,
    os::fd::{AsFd, OwnedFd},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

use rustix::{
    fs::{Gid, Mode, OFlags, Uid},
    io::Errno,
};

use crate::{
    error::UsageError,
    sudo::{self, InvokingUser},
};

/// Read and write for the owner only: traces hold other people's addresses and arguments.
const FILE_MODE: u32 = 0o600;

/// An output directory, opened once.
pub struct OutputDir {
    dir: OwnedFd,
    path: PathBuf,
    owner: Option<InvokingUser>,
}

/// The file system a directory is on: its size, and what is free of it to users other than
/// root (root's reserve is the system's, not the trace's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    pub free: u64,
    pub size: u64,
}

/// What a file was when we created it, to tell it from one put in its place later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileIdentity {
    device: u64,
    inode: u64,
}

/// A kind of file we write, told from any other by its beginning: where one is written, an
/// earlier file of its kind is kept as `NAME.old` (as `perf record` keeps `perf.data.old`),
/// and anything else that has the name is left as it is and the file refused.
pub struct FileKind {
    /// What it is called in messages ("trace log").
    pub name: &'static str,
    /// Whether `file` is one.
    pub is_one: fn(&File) -> io::Result<bool>,
}

/// The first bytes of `file`, up to `len`, for a [`FileKind`]'s test.
pub fn head(file: &File, len: usize) -> io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(len);
    file.take(len as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// Whether `bytes` hold `part`, for a [`FileKind`]'s test.
pub fn holds(bytes: &[u8], part: &[u8]) -> bool {
    bytes.windows(part.len()).any(|window| window == part)
}

/// Why a file of a [`FileKind`] cannot be written: whatever has its name is left as it is.
#[derive(Debug, thiserror::Error)]
pub enum ReplaceError {
    #[error(
        "{} is a symbolic link: a {kind} is never written through one, nor put in its place \
         (name the file itself, or remove the link)",
        .path.display()
    )]
    Link { path: PathBuf, kind: &'static str },
    #[error(
        "{} exists and is not a {kind}: it is left as it is (name a new file, or move it away)",
        .path.display()
    )]
    Foreign { path: PathBuf, kind: &'static str },
    #[error(
        "{} is a {kind}, kept as {} when a new one is written, but {} is a symbolic link, never \
         replaced (remove it, or name another file)",
        .path.display(), .old.display(), .old.display()
    )]
    OldIsLink {
        path: PathBuf,
        old: PathBuf,
        kind: &'static str,
    },
    /// Reading what has the name failed, or it is not a file (`OutputDir::check_replaceable`).
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Why the output directory cannot be used. The system's error is said within the message,
/// before the advice `usage` adds, so it is not a source as well (a chain would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum OutputDirError {
    #[error("trace directory {path}: {io_error}")]
    Open { path: PathBuf, io_error: io::Error },
    #[error("trace directory {path} is not writable ({})", refusal(.io_error))]
    NotWritable { path: PathBuf, io_error: io::Error },
}

/// Why a directory took no file: a file system that makes none (`/proc`, `/sys`) says the
/// name does not exist, which would read as if the directory did not.
fn refusal(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => "its file system takes no new files".to_owned(),
        _ => error.to_string(),
    }
}

impl OutputDirError {
    /// The error as bad input, with what the user can do, for the option that named the
    /// directory (`with --dir`).
    pub fn usage(&self, option: &str) -> UsageError {
        let advice = match self {
            OutputDirError::Open { .. } => format!("create it or choose another {option}"),
            OutputDirError::NotWritable { .. } => format!("choose another {option}"),
        };
        UsageError(format!("{self}: {advice}"))
    }
}

/// The directory a file path is in (`.` for a bare name), and the file's name, if the path
/// ends in one (as UTF-8).
pub fn split_file_path(path: &Path) -> Option<(&Path, &str)> {
    let name = path.file_name()?.to_str()?;
    Some((directory_of(path), name))
}

fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

impl OutputDir {
    /// Opens `path` and checks that files can be created in it, leaving nothing behind. Files
    /// created later belong to the sudo user, if any.
    pub fn open(path: &Path) -> Result<Self, OutputDirError> {
        let dir = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| OutputDirError::Open {
            path: path.to_owned(),
            io_error: e.into(),
        })?;
        Self::from_descriptor(path, dir)
    }

    /// The directory `dir`, opened at `path`, if the tracer may write in it.
    fn from_descriptor(path: &Path, dir: OwnedFd) -> Result<Self, OutputDirError> {
        let output = OutputDir {
            dir,
            path: path.to_owned(),
            owner: sudo::invoking_user(),
        };
        output
            .check_writable()
            .map_err(|io_error| OutputDirError::NotWritable {
                path: path.to_owned(),
                io_error,
            })?;
        Ok(output)
    }

    /// Opens `path`, first making it (mode 0700, the sudo user's) if it does not exist. The
    /// parent must exist: a mistyped path is an error, not a tree of new directories.
    pub fn open_or_make(path: &Path) -> Result<Self, OutputDirError> {
        let failed = |io_error: io::Error| OutputDirError::Open {
            path: path.to_owned(),
            io_error,
        };
        if let (Some(name), Err(error)) = (path.file_name(), std::fs::symlink_metadata(path))
            && error.kind() == io::ErrorKind::NotFound
        {
            let parent = directory_of(path);
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let parent =
                rustix::fs::open(parent, flags, Mode::empty()).map_err(|e| failed(e.into()))?;
            rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o700))
                .map_err(|e| failed(e.into()))?;
            if let Some(user) = sudo::invoking_user() {
                rustix::fs::chownat(
                    &parent,
                    name,
                    Some(Uid::from_raw(user.uid)),
                    Some(Gid::from_raw(user.gid)),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                )
                .map_err(|e| failed(e.into()))?;
            }
            // Opened from the parent it was made in, never through a link put in its place.
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
            let made = rustix::fs::openat(&parent, name, flags, Mode::empty())
                .map_err(|e| failed(e.into()))?;
            return OutputDir::from_descriptor(path, made);
        }
        OutputDir::open(path)
    }

    /// Opens `path`, a directory itself, not a link to one, as [`OutputDir::open`] does.
    pub fn open_no_follow(path: &Path) -> io::Result<Self> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir = rustix::fs::open(path, flags, Mode::empty())?;
        Self::from_descriptor(path, dir).map_err(io::Error::other)
    }

    /// The names of the directory's entries, sorted.
    pub fn names(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Removes the file `name` (a link itself, never what it points to).
    pub fn remove(&self, name: &str) -> io::Result<()> {
        Ok(rustix::fs::unlinkat(
            &self.dir,
            name,
            rustix::fs::AtFlags::empty(),
        )?)
    }

    /// The directory `name` in this one, opened relative to it and never through a link; made
    /// first (mode 0700, the invoking user's) if `make` and it does not exist.
    pub fn subdirectory(&self, name: &str, make: bool) -> io::Result<Self> {
        if make {
            match rustix::fs::mkdirat(&self.dir, name, Mode::from_raw_mode(0o700)) {
                Ok(()) => {
                    if let Some(user) = self.owner {
                        rustix::fs::chownat(
                            &self.dir,
                            name,
                            Some(Uid::from_raw(user.uid)),
                            Some(Gid::from_raw(user.gid)),
                            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                        )?;
                    }
                }
                // Made by another thread or process: opened as it is.
                Err(Errno::EXIST) => {}
                Err(error) => return Err(error.into()),
            }
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        Ok(OutputDir {
            dir: rustix::fs::openat(&self.dir, name, flags, Mode::empty())?,
            path: self.path.join(name),
            owner: self.owner,
        })
    }

    /// Removes the directory `name` if it is empty (a link is not followed, a directory that
    /// holds anything is kept).
    pub fn remove_if_empty(&self, name: &str) -> io::Result<()> {
        Ok(rustix::fs::unlinkat(
            &self.dir,
            name,
            rustix::fs::AtFlags::REMOVEDIR,
        )?)
    }

    /// The same opened directory through another descriptor, for another thread's files.
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(OutputDir {
            dir: self.dir.try_clone()?,
            path: self.path.clone(),
            owner: self.owner,
        })
    }

    /// The space of the directory's file system now.
    pub fn space(&self) -> io::Result<Space> {
        let stat = rustix::fs::fstatvfs(&self.dir)?;
        Ok(Space {
            free: stat.f_bavail.saturating_mul(stat.f_frsize),
            size: stat.f_blocks.saturating_mul(stat.f_frsize),
        })
    }

    /// The directory as the user named it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` in the directory, for messages: as a file path names it (`y.txt`, not
    /// `./y.txt`, for the working directory).
    pub fn shown(&self, name: &str) -> PathBuf {
        match self.path == Path::new(".") {
            true => PathBuf::from(name),
            false => self.path.join(name),
        }
    }

    /// Permission bits alone say nothing for root: try. An `O_TMPFILE` file has no name and
    /// vanishes when closed; where the filesystem lacks it, a temporary name is made and removed.
    fn check_writable(&self) -> io::Result<()> {
        let flags = OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.dir, ".", flags, Mode::from_raw_mode(FILE_MODE)) {
            Ok(_) => Ok(()),
            Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {
                let (_, temporary) = self.create_temporary("write-test")?;
                rustix::fs::unlinkat(&self.dir, &temporary, rustix::fs::AtFlags::empty())?;
                Ok(())
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Creates `name` for writing, new and empty, owned as the module says. A regular file or a
    /// link that had the name is replaced, never opened; anything else there is an error.
    /// `name` is a single component.
    pub fn create(&self, name: &str) -> io::Result<(File, FileIdentity)> {
        debug_assert!(!name.contains('/'), "{name} is not a single path component");
        let fd = match self.create_exclusive(name) {
            Err(error) if error.raw_os_error() == Some(libc::EEXIST) => {
                self.check_replaceable(name)?;
                let (fd, temporary) = self.create_temporary(name)?;
                if let Err(error) = rustix::fs::renameat(&self.dir, &temporary, &self.dir, name) {
                    let _ =
                        rustix::fs::unlinkat(&self.dir, &temporary, rustix::fs::AtFlags::empty());
                    return Err(error.into());
                }
                fd
            }
            result => result?,
        };
        let identity = identity(&fd)?;
        Ok((File::from(fd), identity))
    }

    /// Opens `name` again to append to it, provided it is still the file we created
    /// (`identity`) and holds the `length` bytes we wrote: a link or another file put in its
    /// place is refused, never written (the length tells ours from a file that got its inode
    /// number after ours was removed).
    pub fn reopen(&self, name: &str, identity: FileIdentity, length: u64) -> io::Result<File> {
        let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, name, flags, Mode::empty())?;
        let stat = rustix::fs::fstat(&fd)?;
        if self::identity(&fd)? != identity || u64::try_from(stat.st_size).ok() != Some(length) {
            return Err(io::Error::other(
                "replaced by another file during the trace; not written",
            ));
        }
        Ok(File::from(fd))
    }

    /// What has `name` now (a link is a link, not what it points to), if anything does.
    pub fn file_type(&self, name: &str) -> io::Result<Option<rustix::fs::FileType>> {
        match rustix::fs::statat(&self.dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(rustix::fs::FileType::from_raw_mode(stat.st_mode))),
            Err(Errno::NOENT) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// Opens the regular file `name` to read it, never through a link, and never waiting on a
    /// FIFO put in its place.
    pub fn open_to_read(&self, name: &str) -> io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, name, flags, Mode::empty())?;
        if !rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode).is_file() {
            return Err(io::Error::other(format!(
                "{} is not a regular file",
                self.shown(name).display()
            )));
        }
        Ok(File::from(fd))
    }

    /// Renames `from` to `to` in the directory; whatever had the name `to` is replaced (a link
    /// itself, not what it points to).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(rustix::fs::renameat(&self.dir, from, &self.dir, to)?)
    }

    /// Whether whatever has `name` now may be replaced by a file of ours: a regular file or a
    /// symbolic link (the link is replaced, not what it points to). Said before anything is
    /// attached for `--log`; checked again as the file is made.
    pub fn check_replaceable(&self, name: &str) -> io::Result<()> {
        let Some(file_type) = self.file_type(name)? else {
            return Ok(());
        };
        let kind = match file_type {
            rustix::fs::FileType::RegularFile | rustix::fs::FileType::Symlink => return Ok(()),
            rustix::fs::FileType::Directory => "a directory",
            rustix::fs::FileType::CharacterDevice => "a character device",
            rustix::fs::FileType::BlockDevice => "a block device",
            rustix::fs::FileType::Fifo => "a FIFO",
            rustix::fs::FileType::Socket => "a socket",
            rustix::fs::FileType::Unknown => "not a regular file",
        };
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} is {kind}: traces go only to regular files, and it is never replaced \
                 (name a new file)",
                self.shown(name).display()
            ),
        ))
    }

    /// What has `name`, as long as a file of `kind` may be written there: nothing, or an
    /// earlier one, to be kept under the name returned (whatever regular file had that name
    /// is replaced). Anything else is refused: a file of another kind, a link (at either
    /// name), a device, FIFO, socket or directory.
    pub fn check_kind(&self, name: &str, kind: &FileKind) -> Result<Option<String>, ReplaceError> {
        self.check_replaceable(name)?;
        let link = |path| ReplaceError::Link {
            path,
            kind: kind.name,
        };
        match self.file_type(name)? {
            None => return Ok(None),
            Some(rustix::fs::FileType::Symlink) => return Err(link(self.shown(name))),
            Some(_) => {}
        }
        if !(kind.is_one)(&self.open_to_read(name)?)? {
            return Err(ReplaceError::Foreign {
                path: self.shown(name),
                kind: kind.name,
            });
        }
        let old = format!("{name}.old");
        self.check_replaceable(&old)?;
        if self.file_type(&old)? == Some(rustix::fs::FileType::Symlink) {
            return Err(ReplaceError::OldIsLink {
                path: self.shown(name),
                old: self.shown(&old),
                kind: kind.name,
            });
        }
        Ok(Some(old))
    }

    /// Creates `name`, a file of `kind`, new and empty, an earlier one there first renamed to
    /// `NAME.old`; checked again now ([`OutputDir::check_kind`]), as it may have changed since
    /// it was first checked. Returns the file and where the earlier one is kept, if there was
    /// one.
    pub fn create_kind(
        &self,
        name: &str,
        kind: &FileKind,
    ) -> Result<(File, Option<PathBuf>), ReplaceError> {
        let kept = self.check_kind(name, kind)?;
        if let Some(old) = &kept {
            self.rename(name, old)?;
        }
        let (file, _) = self.create(name)?;
        Ok((file, kept.map(|old| self.shown(&old))))
    }

    /// For files whose names we choose (a thread's tr file), in a directory others may write
    /// to: an earlier file of `kind` under `name`, ours alone (one link), is renamed to
    /// `NAME.old`; any other regular file with one link is refused (someone's file); a link
    /// planted there (symbolic, or a second name of a file elsewhere) is left for
    /// [`OutputDir::create`] to replace. Returns where the earlier file went.
    pub fn keep_earlier(
        &self,
        name: &str,
        kind: &FileKind,
    ) -> Result<Option<PathBuf>, ReplaceError> {
        match rustix::fs::statat(&self.dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat)
                if rustix::fs::FileType::from_raw_mode(stat.st_mode).is_file()
                    && stat.st_nlink == 1 =>
            {
                let old = self.check_kind(name, kind)?;
                if let Some(old) = &old {
                    self.rename(name, old)?;
                }
                Ok(old.map(|old| self.shown(&old)))
            }
            Ok(_) | Err(Errno::NOENT) => Ok(None),
            Err(error) => Err(io::Error::from(error).into()),
        }
    }

    fn create_exclusive(&self, name: &str) -> io::Result<OwnedFd> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, name, flags, Mode::from_raw_mode(FILE_MODE))?;
        // The umask may have taken bits away; 0600 exactly, whatever it was.
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(FILE_MODE))?;
        if let Some(user) = self.owner {
            rustix::fs::fchown(
                &fd,
                Some(Uid::from_raw(user.uid)),
                Some(Gid::from_raw(user.gid)),
            )?;
        }
        Ok(fd)
    }

    /// A new file under an unused hidden name derived from `name`; returns it and the name.
    pub fn create_temporary(&self, name: &str) -> io::Result<(OwnedFd, String)> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let temporary = format!(".{name}.{}.{n}.tmp", std::process::id());
            match self.create_exclusive(&temporary) {
                // Taken (planted, or left by a tracer killed mid-rename): try the next.
                Err(error) if error.raw_os_error() == Some(libc::EEXIST) => {}
                result => return result.map(|fd| (fd, temporary)),
            }
        }
    }
}

impl fmt::Debug for OutputDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputDir")
            .field("path", &self.path)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

fn identity(fd: impl AsFd) -> io::Result<FileIdentity> {
    let stat = rustix::fs::fstat(fd)?;
    Ok(FileIdentity {
        device: stat.st_dev,
        inode: stat.st_ino,
    })
}

#[cfg(test)]
mod tests {
    use std::{fs, io::Write, os::unix::fs::PermissionsExt};

    use super::*;

    struct Scratch(PathBuf);

    impl Scratch {
        fn new(label: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "thrtrace-output-dir-{label}-{}",
                std::process::id()
            ));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir_all(&path).unwrap();
            Scratch(path)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_planted_symlink_is_replaced_not_written_through() {
        let scratch = Scratch::new("symlink");
        let victim = scratch.0.join("victim");
        fs::write(&victim, "precious\n").unwrap();
        let dir = scratch.0.join("out");
        fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("tr.x")).unwrap();
        let output = OutputDir::open(&dir).unwrap();
        let (mut file, _) = output.create("tr.x").unwrap();
        file.write_all(b"trace\n").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
        let written = dir.join("tr.x");
        assert!(!fs::symlink_metadata(&written).unwrap().is_symlink());
        assert_eq!(fs::read_to_string(&written).unwrap(), "trace\n");
        assert_eq!(
            fs::metadata(&written).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // Nothing else is left in the directory: the temporary name is gone.
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
    }

    #[test]
    fn reopening_refuses_a_file_put_in_place_of_ours() {
        let scratch = Scratch::new("reopen");
        let output = OutputDir::open(&scratch.0).unwrap();
        let (_, identity) = output.create("tr.y").unwrap();
        assert!(output.reopen("tr.y", identity, 0).is_ok());
        assert!(output.reopen("tr.y", identity, 1).is_err());
        fs::remove_file(scratch.0.join("tr.y")).unwrap();
        fs::write(scratch.0.join("other"), "other\n").unwrap();
        std::os::unix::fs::symlink(scratch.0.join("other"), scratch.0.join("tr.y")).unwrap();
        assert!(output.reopen("tr.y", identity, 0).is_err());
        fs::remove_file(scratch.0.join("tr.y")).unwrap();
        fs::hard_link(scratch.0.join("other"), scratch.0.join("tr.y")).unwrap();
        assert!(output.reopen("tr.y", identity, 0).is_err());
        assert_eq!(
            fs::read_to_string(scratch.0.join("other")).unwrap(),
            "other\n"
        );
    }

    #[test]
    fn directory_checks_leave_nothing_behind() {
        let scratch = Scratch::new("check");
        OutputDir::open(&scratch.0).unwrap();
        assert_eq!(fs::read_dir(&scratch.0).unwrap().count(), 0);
        assert!(OutputDir::open(&scratch.0.join("missing")).is_err());
        assert!(OutputDir::open(Path::new("/proc")).is_err());
    }
}
