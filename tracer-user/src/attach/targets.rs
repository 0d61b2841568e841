//! Which file holds a process's pthread functions, found through `/proc/PID/maps`.
//!
//! glibc >= 2.34 has them in `libc.so.6`, a static binary in the executable: the mapped C
//! library that defines them is the one probed. Older glibc splits them: `libpthread.so.0` has
//! most, and `libc.so.6` both forwarders to those (never called by programs, which bind to
//! libpthread's) and a few of its own (`pthread_self`), which are probed there. Any other file
//! that defines them is an interposer (a preloaded profiler, sanitizer or wrapper): its
//! definitions are never probed. What it forwards reaches the C library's and is recorded
//! there once, as are the C library's own calls, which never go through it. Files are
//! opened through `/proc/PID/map_files/`, so a library in another mount namespace or one that
//! has been deleted since is still the one the process really runs; a pthread library stays
//! open, and its probes are placed through the tracer's own descriptor, which outlives the
//! process it was found through. Once a process's main
//! thread has exited, `/proc/PID/maps` is empty (it shows that thread's memory, which is gone):
//! the process is then seen through a thread still running, as `/proc/TID/`.

use std::{
    fs, io,
    os::{fd::AsRawFd, unix::fs::FileExt},
    path::PathBuf,
    sync::Arc,
};

use tracer_common::{
    ERRNO_AT_OFFSET, EVENTS, LIBRARY_BASE, LIBRARY_ERRNO, LIBRARY_ID, ProcessLibrary,
};

use super::{
    fast_path,
    machine_code::{self, ErrnoAt},
    symbols::FunctionOffsets,
};

/// A process's mappings could not be read: it is gone, or not ours to read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read /proc/{pid}/maps")]
pub struct MapsError {
    pid: u32,
    source: io::Error,
}

/// The symbol whose definition marks the pthread implementation.
const MARKER: &str = "pthread_mutex_lock";
/// The symbol whose definition marks the C library proper: a file with [`MARKER`] but without
/// it is a separate libpthread (glibc < 2.34).
const LIBC_MARKER: &str = "__libc_start_main";
/// glibc's function that returns the calling thread's errno address.
const ERRNO_LOCATION: &str = "__errno_location";
/// Symbols only musl defines: its dynamic linker's last stage (in its `libc.so`, which is its
/// dynamic linker) and its start-up's (in a static executable's symbol table).
const MUSL_MARKERS: [&str; 2] = ["__dls3", "__init_libc"];
/// musl's thread start wrappers, which call `pthread_exit` when the thread function returns:
/// read so that the plan can find the one pthread_create passes on ([`THREAD_START`]).
///
/// [`THREAD_START`]: super::probes::THREAD_START
const MUSL_THREAD_STARTS: [&str; 2] = ["start", "start_c11"];
/// The C11 thread functions: the program calls them instead of the pthread functions they call
/// in turn, which are recorded.
const C11_FUNCTIONS: [&str; 21] = [
    "call_once",
    "cnd_broadcast",
    "cnd_destroy",
    "cnd_init",
    "cnd_signal",
    "cnd_timedwait",
    "cnd_wait",
    "mtx_destroy",
    "mtx_init",
    "mtx_lock",
    "mtx_timedlock",
    "mtx_trylock",
    "mtx_unlock",
    "thrd_create",
    "thrd_detach",
    "thrd_exit",
    "thrd_join",
    "tss_create",
    "tss_delete",
    "tss_get",
    "tss_set",
];

/// A file mapped executable into a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedFile {
    /// The path as `/proc/PID/maps` shows it (possibly in another mount namespace).
    pub path: String,
    /// `/proc/PID/map_files/START-END`: opens the very file the process maps.
    pub open_path: PathBuf,
    /// The thread whose `/proc/TID/` the file was found through (the process's, while its main
    /// thread runs).
    pub seen_through: u32,
    /// Device and inode: which file it is, whatever its path in whichever mount namespace.
    pub identity: (String, u64),
    /// Where it is mapped (its first executable mapping), and from which offset of the file.
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
}

/// The pthread library of a process, held open, its contents, and the functions asked for.
pub struct PthreadLibrary {
    pub file: MappedFile,
    pub opened: OpenedFile,
    pub image: Vec<u8>,
    pub functions: FunctionOffsets,
}

/// A mapped file the tracer holds open. Its probes are placed through it: its
/// `/proc/PID/map_files/` entry goes with the process it was found through, which may exit
/// before they are (a short-lived process, the only one to map the file at that moment).
#[derive(Clone, Debug)]
pub struct OpenedFile(Arc<fs::File>);

impl OpenedFile {
    /// A path to the file, valid while this (or a clone) is held: the tracer's descriptor.
    pub fn path(&self) -> PathBuf {
        format!("/proc/self/fd/{}", self.0.as_raw_fd()).into()
    }
}

/// The ids of process `pid`'s threads, as /proc lists them now (none once it is gone).
pub fn threads_of(pid: u32) -> impl Iterator<Item = u32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
}

/// What follows `field:` (`Tgid`, `NSpid`) in the /proc status file at `path`, trimmed. Read
/// as bytes: its `Name:` line is the thread's to set, valid UTF-8 or not.
pub fn status_field(path: &str, field: &str) -> Option<String> {
    let status = fs::read(path).ok()?;
    let value = status
        .split(|&byte| byte == b'\n')
        .find_map(|line| line.strip_prefix(field.as_bytes())?.strip_prefix(b":"))?;
    Some(std::str::from_utf8(value).ok()?.trim().to_owned())
}

/// `/proc/.../maps` of process `pid`, and the thread it was read through: the process's own
/// entry while its main thread runs, else a thread that still does.
fn read_maps(pid: u32) -> Result<(u32, String), MapsError> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|source| MapsError { pid, source })?;
    if !maps.is_empty() {
        return Ok((pid, maps));
    }
    for tid in threads_of(pid).filter(|&tid| tid != pid) {
        if let Ok(maps) = fs::read_to_string(format!("/proc/{tid}/maps"))
            && !maps.is_empty()
        {
            return Ok((tid, maps));
        }
    }
    Ok((pid, maps))
}

/// Whether process `pid`'s main thread has exited while others still run: the process's own
/// links then no longer apply (see `probes`).
pub fn main_thread_exited(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command name, which is in parentheses and may hold any byte.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        matches!(state, Some('Z' | 'X'))
    })
}

/// Executable file mappings of `pid`, each file once, in address order.
pub fn executable_mappings(pid: u32) -> Result<Vec<MappedFile>, MapsError> {
    let (seen_through, maps) = read_maps(pid)?;
    let mut files: Vec<MappedFile> = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        // offset, dev, inode, then the path (which may contain spaces).
        let (Some(offset), Some(device), Some(inode)) =
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
            open_path: format!("/proc/{seen_through}/map_files/{start:x}-{end:x}").into(),
            seen_through,
            identity: (device.to_owned(), inode.parse().unwrap_or(0)),
            start,
            end,
            file_offset: u64::from_str_radix(offset, 16).unwrap_or(0),
        });
    }
    Ok(files)
}

/// The functions of every event probed in the pthread library.
fn library_symbols<'a>() -> impl Iterator<Item = &'a str> {
    EVENTS
        .iter()
        .filter(|event| event.category.is_probed_in_library())
        .map(|event| event.symbol)
}

/// The mapped files that define the pthread functions, each with the offsets of the
/// `functions` it is the one to probe for: one file, or libpthread and then libc for glibc <
/// 2.34. Empty if the process maps no such file (yet).
pub fn find_pthread_libraries(
    pid: u32,
    functions: &[&str],
) -> Result<Vec<PthreadLibrary>, MapsError> {
    // Every traced function is read, selected or not: the plan looks for calls between them.
    let mut names: Vec<&str> = functions
        .iter()
        .copied()
        .chain(library_symbols())
        .chain([MARKER, LIBC_MARKER, ERRNO_LOCATION])
        .chain(MUSL_MARKERS)
        .chain(MUSL_THREAD_STARTS)
        .chain(C11_FUNCTIONS)
        .chain(fast_path::NEVER_RETURN)
        .chain([fast_path::SINGLE_THREADED_FLAG])
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut defining: Vec<PthreadLibrary> = defining_pthread_functions(pid, &names)?
        .into_iter()
        .filter(|library| !library.is_interposer())
        .collect();
    let Some(split) = defining
        .iter()
        .position(|library| !library.functions.defines(LIBC_MARKER))
    else {
        defining.truncate(1);
        return Ok(defining);
    };
    let libpthread = defining.remove(split);
    let libc = defining
        .into_iter()
        .find(|library| library.functions.defines(LIBC_MARKER));
    let mut found = Vec::new();
    // Of libc, only the functions libpthread does not have.
    if let Some(mut libc) = libc {
        libc.functions
            .retain(|name| !libpthread.functions.defines(name));
        if functions.iter().any(|name| libc.functions.defines(name)) {
            found.push(libc);
        }
    }
    found.insert(0, libpthread);
    Ok(found)
}

/// The mapped files of `pid` that implement pthread functions, each with the offsets
/// of `names`: the C library, a separate libpthread, and any interposer.
fn defining_pthread_functions(pid: u32, names: &[&str]) -> Result<Vec<PthreadLibrary>, MapsError> {
    Ok(executable_mappings(pid)?
        .into_iter()
        .filter_map(|file| {
            let (opened, image) = open_and_read_mapped(&file)?;
            let functions = FunctionOffsets::parse(&image, names).ok()?;
            Some(PthreadLibrary {
                file,
                opened: OpenedFile(Arc::new(opened)),
                image,
                functions,
            })
        })
        .filter(PthreadLibrary::implements_pthreads)
        .collect())
}

/// The files of `pid` that define pthread functions of their own but are not its C library
/// or libpthread (an interposer): by their paths, in mapping order.
pub fn pthread_interposers(pid: u32) -> Vec<String> {
    defining_pthread_functions(pid, &[MARKER, LIBC_MARKER])
        .unwrap_or_default()
        .into_iter()
        .filter(PthreadLibrary::is_interposer)
        .map(|library| library.file.path)
        .collect()
}

impl PthreadLibrary {
    /// Whether the file implements pthread functions: it defines `MARKER`, or it is a C
    /// library that defines traced functions (a static musl executable has only those it
    /// calls).
    fn implements_pthreads(&self) -> bool {
        self.functions.defines(MARKER)
            || (self.functions.defines(LIBC_MARKER)
                && library_symbols().any(|symbol| self.functions.defines(symbol)))
    }

    /// Whether this is musl (its `libc.so`, or a static executable with its symbol table).
    pub fn is_musl(&self) -> bool {
        MUSL_MARKERS.iter().any(|name| self.functions.defines(name))
    }

    /// The file's executable segment as mapped (its first executable mapping), and the file
    /// offset it starts at; `None` if the file read is shorter than its start.
    pub fn executable_code(&self) -> Option<(&[u8], u64)> {
        let start = self.file.file_offset as usize;
        let end = (start + (self.file.end - self.file.start) as usize).min(self.image.len());
        Some((self.image.get(start..end)?, self.file.file_offset))
    }

    /// Whether this is musl's `libc.so` (its dynamic linker's marker), not a static executable
    /// with the program's code beside it.
    pub fn is_musl_shared_object(&self) -> bool {
        self.functions.defines(MUSL_MARKERS[0])
    }

    /// Neither the C library (it has `__libc_start_main`: libc.so.6, or a static executable)
    /// nor glibc's separate `libpthread` (glibc < 2.34, by its file name).
    fn is_interposer(&self) -> bool {
        let libpthread = std::path::Path::new(&self.file.path)
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("libpthread"));
        !self.functions.defines(LIBC_MARKER) && !libpthread
    }
}

/// The contents of a mapped file. map_files needs CAP_SYS_ADMIN; without it (--list-probes as
/// a user) the file is read by its path in the process's root.
pub fn read_mapped(file: &MappedFile) -> Option<Vec<u8>> {
    open_and_read_mapped(file).map(|(_, contents)| contents)
}

/// The mapped file opened (see [`open_mapped`]) and its contents: for a reader that holds on to
/// the file it read.
fn open_and_read_mapped(file: &MappedFile) -> Option<(fs::File, Vec<u8>)> {
    let mut opened = open_mapped(file)?;
    let mut contents = Vec::new();
    io::Read::read_to_end(&mut opened, &mut contents).ok()?;
    Some((opened, contents))
}

/// The mapped file itself, opened for reading (see [`read_mapped`]): for a reader that needs
/// only parts of it.
pub fn open_mapped(file: &MappedFile) -> Option<fs::File> {
    fs::File::open(&file.open_path)
        .or_else(|_| fs::File::open(format!("/proc/{}/root{}", file.seen_through, file.path)))
        .ok()
}

/// What the BPF side needs of `library` in process `pid`: where errno is, and, if the library
/// has its own calls of traced functions listed in `CALL_SITES` as `id`, where it is mapped.
pub fn process_library(pid: u32, library: &PthreadLibrary, id: Option<u64>) -> ProcessLibrary {
    let mut process = ProcessLibrary::default();
    process[LIBRARY_ERRNO] = errno_location(pid, library).unwrap_or(0);
    if let Some(id) = id {
        process[LIBRARY_BASE] = library.file.start - library.file.file_offset;
        process[LIBRARY_ID] = id;
    }
    process
}

/// The C library's own calls of traced functions, which are never the program's, as the file
/// offsets of their return addresses: in musl's `libc.so` (its dynamic linker takes
/// `pthread_mutex_lock`; any of its functions may call a pthread function), every direct call
/// of a traced function but those of the C11 functions, which the program calls in its stead
/// (`mtx_lock` and the like: those are recorded through the pthread calls they make). Empty for
/// any other library: glibc's own calls go to internal code, and in a static executable the
/// library's code cannot be told from the program's. (The BPF side looks them up only for
/// probes of musl's object layout.)
pub fn own_call_sites(library: &PthreadLibrary) -> Vec<u64> {
    if !library.is_musl_shared_object() {
        return Vec::new();
    }
    let traced: Vec<u64> = library_symbols()
        .flat_map(|symbol| library.functions.functions(symbol))
        .map(|function| function.offset)
        .collect();
    let c11: Vec<(u64, u64)> = C11_FUNCTIONS
        .iter()
        .flat_map(|name| library.functions.functions(name))
        .map(|function| (function.offset, function.offset + function.size))
        .collect();
    let Some((code, base)) = library.executable_code() else {
        return Vec::new();
    };
    // A call made in a C11 function returns to past that function's start, and at most to its
    // end.
    let calls: Vec<(u64, u64)> = machine_code::calls(code, base)
        .into_iter()
        .filter(|&(_, returns_to)| {
            !c11.iter()
                .any(|&(from, to)| from < returns_to && returns_to <= to)
        })
        .collect();
    // A function that jumps to a traced one (musl's `__acquire_ptc`, which pthread_create
    // calls, is `jmp pthread_rwlock_rdlock`) returns where it was called from. Each target is
    // looked at once: most are called from many places.
    let mut reaches_traced = std::collections::HashMap::new();
    calls
        .iter()
        .filter(|&&(target, _)| {
            *reaches_traced.entry(target).or_insert_with(|| {
                traced.contains(&target) || machine_code::forwards_to(code, base, target, &traced)
            })
        })
        .map(|&(_, returns_to)| returns_to)
        .collect()
}

/// Where the calling thread's errno is, from `library`'s `__errno_location`
/// ([`machine_code::errno_location`]): the address in process `pid` of the GOT slot holding its
/// offset from the thread pointer (ld.so fills it, possibly after this is called: the BPF side
/// reads it when it needs it), or the offset itself with [`ERRNO_AT_OFFSET`], its low 63 bits
/// a signed number. `None` where the library has no such function (a static glibc binary,
/// another libc).
fn errno_location(pid: u32, library: &PthreadLibrary) -> Option<u64> {
    let function = library.functions.functions(ERRNO_LOCATION).next()?;
    let code = library.image.get(function.offset as usize..)?;
    match machine_code::errno_location(code, function.address)? {
        ErrnoAt::Offset(offset) => Some(ERRNO_AT_OFFSET | (offset as u64 & !ERRNO_AT_OFFSET)),
        ErrnoAt::SlotOffset(slot) => address_in(pid, library, slot),
    }
}

/// Where `address` of `library`'s file (a virtual address before the load bias) is in process
/// `pid`.
fn address_in(pid: u32, library: &PthreadLibrary, address: u64) -> Option<u64> {
    let bias = load_address(pid, &library.file.path)?
        .checked_sub(library.functions.first_segment_address)?;
    bias.checked_add(address)
}

/// Where glibc's `__libc_single_threaded` is in process `pid`, if `library` defines it.
pub fn single_threaded_flag(pid: u32, library: &PthreadLibrary) -> Option<u64> {
    let flag = library
        .functions
        .functions(fast_path::SINGLE_THREADED_FLAG)
        .next()?;
    address_in(pid, library, flag.address)
}

/// The byte at `address` in process `pid`'s memory (through /proc/PID/mem), if it can be read.
pub fn read_byte(pid: u32, address: u64) -> Option<u8> {
    let memory = fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut byte = [0];
    memory.read_exact_at(&mut byte, address).ok()?;
    Some(byte[0])
}

/// Where the start of `path` (its mapping at file offset 0) is in process `pid`.
fn load_address(pid: u32, path: &str) -> Option<u64> {
    let (_, maps) = read_maps(pid).ok()?;
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
/// process that maps it, except the files in `known` (not even read). A process that vanishes
/// while being read is skipped, and its files read through another that maps them.
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
        // A process that maps something new may still have its pthread functions in a known
        // file: only new files are returned.
        let found = find_pthread_libraries(pid, functions).unwrap_or_default();
        // A process gone while its files were read (a zombie maps nothing) may have left some
        // unread, and what was read could not be probed through it: its files are read
        // through the next process that maps them.
        if !executable_mappings(pid).is_ok_and(|still| !still.is_empty()) {
            continue;
        }
        checked.extend(mappings.into_iter().map(|m| m.identity));
        for library in found {
            if !known.contains(&library.file.identity)
                && !libraries
                    .iter()
                    .any(|(_, l)| l.file.identity == library.file.identity)
            {
                libraries.push((pid, library));
            }
        }
    }
    libraries
}

/// What the tracer says of a process none of whose files has pthread functions.
pub fn no_pthread_functions(pid: u32) -> String {
    let name = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    format!(
        "pid {pid} ({}) has no pthread functions in any file it maps: nothing to trace",
        name.trim()
    )
}

/// Whether a process with this pid exists now.
pub fn process_exists(pid: u32) -> bool {
    fs::metadata(format!("/proc/{pid}")).is_ok()
}

#[cfg(test)]
mod tests {
    use std::{os::unix::fs::MetadataExt, process::Command, time::Duration};

    use super::*;

    /// A library found through a process that has exited since is still reached by the path
    /// its probes are placed through, though the process's `map_files` entry went with it.
    #[test]
    fn a_found_library_is_reached_after_the_process_it_was_found_through_is_gone() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        // Within a second of its start the child maps a C library: the test binary's, until
        // it has exec'd, then sleep's.
        let found =
            (0..100).find_map(
                |_| match find_pthread_libraries(pid, &["pthread_mutex_lock"]) {
                    Ok(found) if !found.is_empty() => Some(found),
                    _ => {
                        std::thread::sleep(Duration::from_millis(10));
                        None
                    }
                },
            );
        child.kill().unwrap();
        child.wait().unwrap();
        let libraries = found.expect("no C library found in `sleep` within a second");
        let library = &libraries[0];
        assert!(!library.file.open_path.exists());
        let reached = fs::metadata(library.opened.path()).unwrap();
        assert_eq!(reached.ino(), library.file.identity.1);
    }
}
