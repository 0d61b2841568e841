//! Which file holds a process's pthread functions, found through `/proc/PID/maps`.
//!
//! glibc >= 2.34 has them in `libc.so.6`, older glibc in `libpthread.so.0`, a static binary in
//! the executable: whichever mapped file defines them is the one probed. The file is opened
//! through `/proc/PID/map_files/`, so a library in another mount namespace or one that has been
//! deleted since is still the one the process really runs.

use std::{fs, path::PathBuf};

use anyhow::{Context, Result};
use iced_x86::{Decoder, DecoderOptions, Mnemonic};

use crate::symbols::FunctionOffsets;

/// The symbol whose definition marks the pthread implementation.
const MARKER: &str = "pthread_mutex_lock";
/// glibc's function that returns the calling thread's errno address.
const ERRNO_LOCATION: &str = "__errno_location";

/// A file mapped executable into a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedFile {
    /// The path as `/proc/PID/maps` shows it (possibly in another mount namespace).
    pub path: String,
    /// `/proc/PID/map_files/START-END`: opens the very file the process maps.
    pub open_path: PathBuf,
    /// Device and inode: which file it is, whatever its path in whichever mount namespace.
    pub identity: (String, u64),
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
        let (Some(_offset), Some(device), Some(inode)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let path = fields.collect::<Vec<_>>().join(" ");
        if !perms.contains('x') || !path.starts_with('/') || files.iter().any(|f| f.path == path) {
            continue;
        }
        // maps pads addresses to 8 digits; map_files names them unpadded ("401000-47a000").
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        else {
            continue;
        };
        files.push(MappedFile {
            path,
            open_path: format!("/proc/{pid}/map_files/{start:x}-{end:x}").into(),
            identity: (device.to_owned(), inode.parse().unwrap_or(0)),
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
        let names: Vec<&str> = functions
            .iter()
            .copied()
            .chain([MARKER, ERRNO_LOCATION])
            .collect();
        let Ok(offsets) = FunctionOffsets::parse(&data, &names) else {
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

/// Where, in process `pid`, the GOT slot is from which `library`'s `__errno_location` loads
/// errno's offset from the thread pointer (`mov slot(%rip),%rax; add %fs:0,%rax`). The slot
/// is filled by ld.so, possibly after this is called: the BPF side reads it when it needs it.
/// `None` where the library has no such function (a static binary, another libc).
pub fn errno_slot(pid: u32, library: &PthreadLibrary) -> Option<u64> {
    let function = library.functions.functions(ERRNO_LOCATION).next()?;
    let code = library.image.get(function.offset as usize..)?;
    let mut decoder = Decoder::with_ip(64, code, function.address, DecoderOptions::NONE);
    let load = decoder.decode();
    if load.mnemonic() != Mnemonic::Mov || !load.is_ip_rel_memory_operand() {
        return None;
    }
    let slot = load.ip_rel_memory_address();
    let bias = load_address(pid, &library.file.path)?
        .checked_sub(library.functions.first_segment_address)?;
    Some(bias + slot)
}

/// Where the start of `path` (its mapping at file offset 0) is in process `pid`.
fn load_address(pid: u32, path: &str) -> Option<u64> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        let (range, offset) = (fields.first()?, fields.get(2)?);
        let mapped = fields.get(5..).map(|p| p.join(" "))?;
        (mapped == path && u64::from_str_radix(offset, 16).ok()? == 0)
            .then(|| u64::from_str_radix(range.split('-').next()?, 16).ok())
            .flatten()
    })
}

/// Every distinct pthread library that some process maps now (by device and inode), with a
/// process that maps it, except the files in `known` (not even read). Processes that vanish
/// while being read are skipped.
pub fn all_pthread_libraries(
    functions: &[&str],
    except_pid: u32,
    known: &[(String, u64)],
) -> Vec<(u32, PthreadLibrary)> {
    let mut libraries: Vec<(u32, PthreadLibrary)> = Vec::new();
    let mut checked: Vec<(String, u64)> = known.to_vec();
    let Ok(entries) = fs::read_dir("/proc") else {
        return libraries;
    };
    for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        if pid == except_pid {
            continue;
        }
        let Ok(mappings) = executable_mappings(pid) else {
            continue;
        };
        if mappings.iter().all(|m| checked.contains(&m.identity)) {
            continue;
        }
        checked.extend(mappings.into_iter().map(|m| m.identity));
        // A process that maps something new may still have its pthread functions in a known
        // file: only new files are returned.
        if let Ok(Some(library)) = find_pthread_library(pid, functions)
            && !known.contains(&library.file.identity)
            && !libraries
                .iter()
                .any(|(_, l)| l.file.identity == library.file.identity)
        {
            libraries.push((pid, library));
        }
    }
    libraries
}

/// Whether a process with this pid exists now.
pub fn process_exists(pid: u32) -> bool {
    fs::metadata(format!("/proc/{pid}")).is_ok()
}
