//! Which file holds a process's pthread functions, found through `/proc/PID/maps`.
//!
//! glibc >= 2.34 has them in `libc.so.6`, older glibc in `libpthread.so.0`, a static binary in
//! the executable: whichever mapped file defines them is the one probed. The file is opened
//! through `/proc/PID/map_files/`, so a library in another mount namespace or one that has been
//! deleted since is still the one the process really runs.

use std::{fs, path::PathBuf};

use anyhow::{Context, Result};

use crate::symbols::FunctionOffsets;

/// The symbol whose definition marks the pthread implementation.
const MARKER: &str = "pthread_mutex_lock";

/// A file mapped executable into a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedFile {
    /// The path as `/proc/PID/maps` shows it (possibly in another mount namespace).
    pub path: String,
    /// `/proc/PID/map_files/START-END`: opens the very file the process maps.
    pub open_path: PathBuf,
}

/// The pthread library of a process, its contents, and the functions asked for.
pub struct PthreadLibrary {
    pub file: MappedFile,
    pub image: Vec<u8>,
    pub functions: FunctionOffsets,
}

/// Executable file mappings of `pid`, each file once, in address order.
pub fn executable_mappings(pid: u32) -> Result<Vec<MappedFile>> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))
        .with_context(|| format!("cannot read /proc/{pid}/maps"))?;
    let mut files: Vec<MappedFile> = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        // offset, dev, inode, then the path (which may contain spaces).
        let path = fields.skip(3).collect::<Vec<_>>().join(" ");
        if !perms.contains('x') || !path.starts_with('/') || files.iter().any(|f| f.path == path) {
            continue;
        }
        files.push(MappedFile {
            path,
            open_path: format!("/proc/{pid}/map_files/{range}").into(),
        });
    }
    Ok(files)
}

/// The mapped file that defines the pthread functions, with the offsets of `functions`.
/// `None` if the process maps no such file (yet).
pub fn find_pthread_library(pid: u32, functions: &[&str]) -> Result<Option<PthreadLibrary>> {
    for file in executable_mappings(pid)? {
        // map_files needs CAP_SYS_ADMIN; without it (--list-probes as a user) go by the path.
        let data = fs::read(&file.open_path)
            .or_else(|_| fs::read(format!("/proc/{pid}/root{}", file.path)));
        let Ok(data) = data else {
            continue;
        };
        let Ok(offsets) = FunctionOffsets::parse(&data, functions) else {
            continue;
        };
        if offsets.defines(MARKER) {
            return Ok(Some(PthreadLibrary {
                file,
                image: data,
                functions: offsets,
            }));
        }
    }
    Ok(None)
}

/// Whether a process with this pid exists now.
pub fn process_exists(pid: u32) -> bool {
    fs::metadata(format!("/proc/{pid}")).is_ok()
}
