//! A record's call stack, from what the BPF side copied with it (the registers at the probe and
//! the top of the thread's stack, `capture::draw::CopiedStack`): unwound with framehop from the CFI (`.eh_frame`,
//! `.debug_frame`) of the files the process maps, so that code built without frame pointers
//! (Debian's C library, most distribution C and C++) unwinds right. Each file's unwind sections
//! are read once and shared by the processes that map it. Stacks are then interned: the stream
//! holds each distinct stack of a process once (`thrtrace_stack`), and records name it by id.

mod cfi;

use std::{
    borrow::Cow,
    collections::{HashMap, hash_map::Entry},
    fs,
    ops::Range,
    sync::Arc,
    time::{Duration, Instant},
};

use framehop::{ExplicitModuleSectionInfo, Module, Unwinder as _};
use gimli::{BaseAddresses, DebugFrame, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
use object::{Architecture, Object, ObjectSection, ObjectSegment, ReadCache, SegmentFlags, elf};
use tracer_model::event::{MAX_FRAMES, SystemEvent, SystemKind};

use self::cfi::Section;
use crate::{
    attach::targets::{self, MappedFile},
    capture::draw::CopiedStack,
    place::{self, RETURN_PROBE},
};

/// framehop's unwinder for the architecture the tracer runs on, and the registers it starts
/// from.
#[cfg(target_arch = "x86_64")]
mod native {
    use framehop::x86_64::UnwindRegsX86_64;
    pub use framehop::x86_64::{CacheX86_64 as Cache, UnwinderX86_64 as ArchUnwinder};

    use crate::capture::draw::CopiedStack;

    pub fn registers(stack: &CopiedStack) -> UnwindRegsX86_64 {
        UnwindRegsX86_64::new(stack.ip, stack.sp, stack.bp)
    }
}

/// See the x86-64 module. The link register holds a leaf frame's return address, signed where
/// the code authenticates its returns: framehop strips that as the BPF side does.
#[cfg(target_arch = "aarch64")]
mod native {
    pub use framehop::aarch64::{CacheAarch64 as Cache, UnwinderAarch64 as ArchUnwinder};
    use framehop::aarch64::{PtrAuthMask, UnwindRegsAarch64};

    use crate::capture::{draw::CopiedStack, kernel::code_address_mask};

    pub fn registers(stack: &CopiedStack) -> UnwindRegsAarch64 {
        UnwindRegsAarch64::new_with_ptr_auth_mask(
            PtrAuthMask(code_address_mask()),
            stack.lr,
            stack.sp,
            stack.bp,
        )
    }
}

/// A stack as far as it could be unwound.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Unwound {
    /// The probed instruction, then each caller's return address.
    pub frames: Vec<u64>,
    /// Empty when the unwind reached the thread's start; otherwise why it stopped.
    pub end: String,
}

impl Unwound {
    /// The stack of a record that came without the copy it was to carry: no frame, and why.
    pub fn left_out() -> Self {
        Unwound {
            frames: Vec::new(),
            end: LEFT_OUT.to_owned(),
        }
    }

    /// Whether it reaches its thread's start.
    pub fn is_whole(&self) -> bool {
        self.end.is_empty()
    }
}

/// How far an unwind read the copied stack: what the copies of its thread need to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// It reached the thread's start, reading nothing at or above `top`.
    Whole { top: u64 },
    /// It stopped for another reason than the copy's end (see `Unwound::end`), reading nothing
    /// at or above `top`: a larger copy would not have taken it further.
    Stopped { top: u64 },
    /// It needed a word past the copy's end.
    CopyEnded,
    /// It read no word of the copy.
    Unread,
}

/// The unwind sections of one mapped file, shared by the processes that map it.
struct FileSections {
    /// Where the file's code mapping starts, from the start of its first loaded segment's
    /// address: added to a mapping's start, it gives where the file's address 0 is.
    code_address: u64,
    eh_frame: Option<(Range<u64>, Arc<[u8]>)>,
    eh_frame_hdr: Option<(Range<u64>, Arc<[u8]>)>,
    debug_frame: Option<Arc<[u8]>>,
    text: Option<Range<u64>>,
    got: Option<Range<u64>>,
    /// The file's entry point (0: none): a program's `_start`, where its main thread begins.
    entry: u64,
}

impl FileSections {
    /// The sections of the ELF file `file`, mapped from `file_offset`; `None` if it has no
    /// unwind information at all. Only its headers and those sections are read: a large
    /// program's (mariadbd's 25 MB) whole file would hold the first stack up.
    fn read(file: fs::File, file_offset: u64) -> Option<Self> {
        let image = ReadCache::new(file);
        let file = object::File::parse(&image).ok()?;
        // A mapping starts at a page; a segment need not (LLD, the linker of Rust programs,
        // places them at any offset that agrees with their address within the page). Of two
        // segments sharing the mapping's first page, the code's.
        let page = rustix::param::page_size() as u64;
        let code = file
            .segments()
            .filter(|segment| {
                let (offset, size) = segment.file_range();
                (offset & !(page - 1)..offset + size).contains(&file_offset)
            })
            .max_by_key(|segment| match segment.flags() {
                SegmentFlags::Elf { p_flags } => p_flags & elf::PF_X != 0,
                _ => false,
            })?;
        let section = |name: &str| {
            let section = file.section_by_name(name)?;
            let range = section.address()..section.address() + section.size();
            Some((range, section.uncompressed_data().ok()?))
        };
        // framehop does not read AArch64's return-signing operations (see `cfi`).
        let signing = file.architecture() == Architecture::Aarch64;
        let cfi = |data: Cow<[u8]>, kind| -> Arc<[u8]> {
            match signing {
                true => cfi::without_return_signing(&data, kind).into(),
                false => data.as_ref().into(),
            }
        };
        let range = |name: &str| {
            let section = file.section_by_name(name)?;
            Some(section.address()..section.address() + section.size())
        };
        let sections = FileSections {
            code_address: (code.address() + file_offset).wrapping_sub(code.file_range().0),
            eh_frame: section(".eh_frame")
                .map(|(range, data)| (range, cfi(data, Section::EhFrame))),
            eh_frame_hdr: section(".eh_frame_hdr")
                .map(|(range, data)| (range, data.as_ref().into())),
            debug_frame: section(".debug_frame").map(|(_, data)| cfi(data, Section::DebugFrame)),
            text: range(".text"),
            got: range(".got"),
            entry: file.entry(),
        };
        (sections.eh_frame.is_some() || sections.debug_frame.is_some()).then_some(sections)
    }

    /// The module framehop unwinds through, for the file mapped at `mapping`.
    fn module(&self, mapping: &MappedFile) -> Module<Arc<[u8]>> {
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text.clone(),
            got_svma: self.got.clone(),
            eh_frame_svma: self.eh_frame.as_ref().map(|(range, _)| range.clone()),
            eh_frame: self.eh_frame.as_ref().map(|(_, data)| data.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|(range, _)| range.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|(_, data)| data.clone()),
            debug_frame: self.debug_frame.clone(),
            ..ExplicitModuleSectionInfo::default()
        };
        let code = mapping.start..mapping.end;
        let bias = self.bias(&code);
        Module::new(mapping.path.clone(), code, bias, info)
    }

    /// What is added to the file's addresses where its code is mapped at `code`.
    fn bias(&self, code: &Range<u64>) -> u64 {
        code.start.wrapping_sub(self.code_address)
    }

    /// Whether the CFI framehop unwinds by describes the code at `address` (the file's own
    /// address): `.eh_frame`, else `.debug_frame`, as framehop takes them. Where it does not,
    /// framehop goes on by frame pointers, which such code need not keep: musl's C library as
    /// Debian builds it has CFI for four functions, and on x86-64 no frame pointers.
    fn describes(&self, address: u64) -> bool {
        let bases = BaseAddresses::default()
            .set_text(self.text.as_ref().map_or(0, |text| text.start))
            .set_got(self.got.as_ref().map_or(0, |got| got.start));
        if let Some((range, data)) = &self.eh_frame {
            let eh_frame = EhFrame::new(data, LittleEndian);
            let bases = bases.clone().set_eh_frame(range.start);
            // The header's sorted table finds the entry without reading every one before it.
            let header = self.eh_frame_hdr.as_ref().and_then(|(range, data)| {
                let bases = bases.clone().set_eh_frame_hdr(range.start);
                let parsed = EhFrameHdr::new(data, LittleEndian).parse(&bases, 8).ok()?;
                let table = parsed.table()?;
                Some(
                    table
                        .fde_for_address(&eh_frame, &bases, address, EhFrame::cie_from_offset)
                        .is_ok(),
                )
            });
            return header.unwrap_or_else(|| {
                eh_frame
                    .fde_for_address(&bases, address, EhFrame::cie_from_offset)
                    .is_ok()
            });
        }
        self.debug_frame.as_ref().is_some_and(|data| {
            DebugFrame::new(data, LittleEndian)
                .fde_for_address(&bases, address, DebugFrame::cie_from_offset)
                .is_ok()
        })
    }

    /// Where the file's entry point is, its code mapped at `code`, if it is in that mapping (a
    /// program's `_start`, where its main thread begins).
    fn entry_at(&self, code: &Range<u64>) -> Option<u64> {
        let entry = self.bias(code).wrapping_add(self.entry);
        (self.entry != 0 && code.contains(&entry)).then_some(entry)
    }
}

/// One process's modules, as its maps showed them when last read.
struct ProcessModules {
    unwinder: native::ArchUnwinder<Arc<[u8]>>,
    /// The code of each file mapped, and what the unwinder has of the file.
    mapped: Vec<(Range<u64>, MappedCode)>,
    read_at: Instant,
    /// Its maps could not be read: it had exited.
    gone: bool,
    /// Whether these maps were read again for an address in no file they showed, or in one
    /// that could not be opened.
    reread: bool,
}

/// How far past a program's entry point the return address of its first call lies: `_start`
/// calls the C library's start within a few dozen bytes (glibc's x86-64 one returns to +0x21,
/// musl's to +0x16).
const ENTRY_CALL_REACH: u64 = 64;

impl ProcessModules {
    /// Whether `frame` is a return address into a program's entry point: the main thread's
    /// first frame, below which there is no caller. musl's `_start` has no unwind information,
    /// so the unwind fails there rather than ending.
    fn is_thread_start(&self, frame: u64) -> bool {
        self.mapped.iter().any(|(code, mapped)| match mapped {
            MappedCode::Unwinds { file, .. } => file
                .entry_at(code)
                .is_some_and(|entry| (entry + 1..=entry + ENTRY_CALL_REACH).contains(&frame)),
            _ => false,
        })
    }

    /// The path of the file whose code holds `frame` (the probed instruction if `first`,
    /// otherwise a return address) where the file's CFI does not describe it.
    fn file_without_cfi_at(&self, frame: u64, first: bool) -> Option<&str> {
        // A return address may be just past its function's end: its call is the byte before.
        let call = if first { frame } else { frame - 1 };
        self.mapped.iter().find_map(|(code, mapped)| match mapped {
            MappedCode::Unwinds { file, path }
                if code.contains(&frame) && !file.describes(call.wrapping_sub(file.bias(code))) =>
            {
                Some(path.as_str())
            }
            _ => None,
        })
    }
}

/// What the unwinder has of a file a process maps.
enum MappedCode {
    /// Its unwind information (with its entry point, and where its code starts), and its path.
    Unwinds {
        file: Arc<FileSections>,
        path: String,
    },
    /// Nothing: the file has neither `.eh_frame` nor `.debug_frame`.
    NoUnwindInformation,
    /// Nothing: the file (at this path) could not be opened when the maps were read.
    Unopened(String),
}

/// How often a process's maps are read again for an address in no file they showed (a library
/// it loaded since), or in one that could not be opened. The first such address has them read
/// again at once: the maps are read a page at a time, and a process mapping or unmapping
/// meanwhile (a thread's stack as it starts) can leave a file out of a reading; a file may be
/// opened where it could not be.
const REREAD_AFTER: Duration = Duration::from_secs(1);

/// Unwinds stacks, keeping each traced process's modules.
#[derive(Default)]
pub struct Unwinder {
    processes: HashMap<u32, ProcessModules>,
    /// Each file's sections by device and inode; `None` for one with no unwind information.
    files: HashMap<(String, u64), Option<Arc<FileSections>>>,
    cache: Option<native::Cache>,
}

impl Unwinder {
    /// Unwinds `stack`, taken in process `pid`, and says how far it read.
    pub fn unwind(&mut self, pid: u32, stack: &CopiedStack) -> (Unwound, Reach) {
        let unwound = self.unwind_once(pid, stack);
        // A frame in no module the process had, or in a file that could not be opened then:
        // it may have mapped a library since its maps were read.
        let reread = self
            .processes
            .get(&pid)
            .is_some_and(|p| !p.reread || p.read_at.elapsed() >= REREAD_AFTER);
        let unknown_file = [OUTSIDE_FILES, UNOPENED_FILE]
            .iter()
            .any(|end| unwound.0.end.starts_with(end));
        if !(unknown_file && reread) {
            return unwound;
        }
        let modules = self.read_modules(pid);
        self.processes.insert(
            pid,
            ProcessModules {
                reread: true,
                ..modules
            },
        );
        self.unwind_once(pid, stack)
    }

    /// Process `pid` exited or exec'd: its modules are gone.
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// Reads the files process `pid` maps, unless they are known.
    pub fn prepare(&mut self, pid: u32) {
        if !self.processes.contains_key(&pid) {
            let modules = self.read_modules(pid);
            self.processes.insert(pid, modules);
        }
    }

    fn unwind_once(&mut self, pid: u32, stack: &CopiedStack) -> (Unwound, Reach) {
        self.prepare(pid);
        let process = &self.processes[&pid];
        if process.gone {
            let unwound = Unwound {
                frames: vec![stack.ip],
                end: PROCESS_GONE.to_owned(),
            };
            return (unwound, Reach::Unread);
        }
        let cache = self.cache.get_or_insert_with(native::Cache::new);
        let regs = native::registers(stack);
        // The highest word the copy gave the unwinder: a read it could not give ends the
        // unwind (`CouldNotReadStack`), and the copy's bytes are the target's, not trusted.
        let highest_read = std::cell::Cell::new(None);
        let mut read_stack = |address| {
            let word = stack.word(address);
            if word.is_some() {
                highest_read.set(highest_read.get().max(Some(address)));
            }
            word.ok_or(())
        };
        let mut frames = process
            .unwinder
            .iter_frames(stack.ip, regs, cache, &mut read_stack);
        let mut unwound = Unwound {
            frames: Vec::new(),
            end: String::new(),
        };
        // How far the unwind read, as it ends at the thread's start (`whole`) or elsewhere.
        let reach = |whole: bool| match highest_read.get().map(|word| word.saturating_add(8)) {
            Some(top) if whole => Reach::Whole { top },
            Some(top) => Reach::Stopped { top },
            None => Reach::Unread,
        };
        let stopped = |unwound| (unwound, reach(false));
        loop {
            let frame = match frames.next() {
                Ok(Some(frame)) => frame.address(),
                Ok(None) => return (unwound, reach(true)),
                Err(framehop::Error::CouldNotReadStack(address)) if address >= stack.sp => {
                    unwound.end = format!(
                        "the stack copied ({} bytes) ends before the thread's start",
                        stack.bytes.len()
                    );
                    return (unwound, Reach::CopyEnded);
                }
                Err(framehop::Error::CouldNotReadStack(address)) => {
                    unwound.end = format!("a frame's address {address:#x} is below the stack");
                    return stopped(unwound);
                }
                Err(_)
                    if unwound
                        .frames
                        .last()
                        .is_some_and(|&f| process.is_thread_start(f)) =>
                {
                    return (unwound, reach(true));
                }
                Err(error) => {
                    let last = unwound.frames.last().map(|&frame| {
                        let first = unwound.frames.len() == 1;
                        (frame, process.file_without_cfi_at(frame, first))
                    });
                    unwound.end = match last {
                        Some((frame, Some(path))) => {
                            format!("{CODE_WITHOUT_CFI} ({path}, at {frame:#x})")
                        }
                        _ => format!("unwinding failed: {error}"),
                    };
                    return stopped(unwound);
                }
            };
            if unwound.frames.len() == MAX_FRAMES {
                unwound.end = format!("more than {MAX_FRAMES} frames");
                return stopped(unwound);
            }
            // Another tool's uretprobe put the kernel's trampoline in this return address's
            // slot; the real one is the kernel's to know.
            if place::is_uretprobe_trampoline(frame) {
                unwound.end = format!("{RETURN_PROBE} replaced the next return address");
                return stopped(unwound);
            }
            unwound.frames.push(frame);
            // framehop unwinds an address outside every module by frame pointers, which code
            // built without them does not keep: stop rather than guess.
            match process
                .mapped
                .iter()
                .find(|(code, _)| code.contains(&frame))
            {
                Some((_, MappedCode::Unwinds { .. })) => {}
                Some((_, MappedCode::NoUnwindInformation)) => {
                    unwound.end = format!("{NO_UNWIND_INFORMATION} at {frame:#x}");
                    return stopped(unwound);
                }
                Some((_, MappedCode::Unopened(path))) => {
                    unwound.end = format!("{UNOPENED_FILE} ({path}, at {frame:#x})");
                    return stopped(unwound);
                }
                None => {
                    unwound.end = format!("{OUTSIDE_FILES} ({frame:#x}: generated code?)");
                    return stopped(unwound);
                }
            }
        }
    }

    /// Process `pid`'s modules now (none if its maps cannot be read: it is gone).
    fn read_modules(&mut self, pid: u32) -> ProcessModules {
        let mut unwinder = native::ArchUnwinder::new();
        let mut mapped = Vec::new();
        let mappings = targets::executable_mappings(pid);
        // An exited process that is not yet reaped has maps, empty.
        let gone = mappings.as_ref().is_ok_and(Vec::is_empty) || mappings.is_err();
        for mapping in mappings.unwrap_or_default() {
            let code = mapping.start..mapping.end;
            // A file that cannot be opened now (its process exec'ing or exiting) is not one
            // without unwind information: it is tried again at the process's next read.
            if !self.files.contains_key(&mapping.identity) {
                let Some(file) = targets::open_mapped(&mapping) else {
                    mapped.push((code, MappedCode::Unopened(mapping.path)));
                    continue;
                };
                let sections = FileSections::read(file, mapping.file_offset).map(Arc::new);
                self.files.insert(mapping.identity.clone(), sections);
            }
            let known = match &self.files[&mapping.identity] {
                Some(sections) => {
                    unwinder.add_module(sections.module(&mapping));
                    MappedCode::Unwinds {
                        file: sections.clone(),
                        path: mapping.path.clone(),
                    }
                }
                None => MappedCode::NoUnwindInformation,
            };
            mapped.push((code, known));
        }
        ProcessModules {
            unwinder,
            mapped,
            read_at: Instant::now(),
            gone,
            reread: false,
        }
    }
}

/// How the stack of a process that exited before its records were drained ends: its files
/// are known by its maps, which are gone with it.
const PROCESS_GONE: &str = "the process had exited when its stack was unwound";
/// How a stack that reached code outside every file the process maps ends.
const OUTSIDE_FILES: &str = "an address outside every file the process maps";
/// How a stack that reached a file that could not be opened when its process's maps were read
/// ends.
const UNOPENED_FILE: &str = "a file the tracer could not open";
/// How a stack that reached a file with neither `.eh_frame` nor `.debug_frame` ends.
const NO_UNWIND_INFORMATION: &str = "a file with no unwind information (.eh_frame, .debug_frame)";

/// How a stack ends that reached code its file's CFI does not describe, where the frame
/// pointer did not lead on (musl's C library on x86-64, as Debian builds it, keeps none).
const CODE_WITHOUT_CFI: &str =
    "no unwind information (CFI) for this code, and its frame pointer did not lead to its caller";
/// How the stack of a record that came without its copy ends, at once.
const LEFT_OUT: &str =
    "left out: its CPU's ring was too full for the copy (the tracer behind; see --buffer-kib)";

/// The stacks in the stream, each with its id: a stack seen again is named by the id it got.
/// A stack's event is written just before the first record written that names it: records are
/// interned as they are drawn, CPU by CPU, but written in time order, so the record drawn first
/// need not be the first written.
#[derive(Default)]
pub struct StackIds {
    ids: HashMap<(u32, Unwound), u32>,
    unwritten: HashMap<u32, Unwritten>,
    last: u32,
}

/// A stack whose event no written record has come after yet.
struct Unwritten {
    event: SystemEvent,
    /// Records drawn naming it that are neither written nor withdrawn.
    naming: u32,
}

impl StackIds {
    /// The id of `unwound` in process `pid`; a new one's `thrtrace_stack` event waits for
    /// `written_before`.
    pub fn intern(&mut self, pid: u32, unwound: Unwound) -> u32 {
        let slot = match self.ids.entry((pid, unwound)) {
            Entry::Occupied(known) => {
                let id = *known.get();
                if let Some(unwritten) = self.unwritten.get_mut(&id) {
                    unwritten.naming += 1;
                }
                return id;
            }
            Entry::Vacant(slot) => slot,
        };
        self.last += 1;
        let id = self.last;
        let (_, unwound) = slot.key();
        let kind = SystemKind::Stack {
            id,
            frames: unwound.frames.clone(),
            end: unwound.end.clone(),
        };
        let unwritten = Unwritten {
            event: SystemEvent::of_process(0, pid, 0, kind),
            naming: 1,
        };
        self.unwritten.insert(id, unwritten);
        slot.insert(id);
        id
    }

    /// A record naming stack `id` will not be written (a short wait's, `--min-wait`): a stack
    /// no other record drawn names is forgotten, to be made anew if it comes again.
    pub fn withdrawn(&mut self, id: u32) {
        let Some(unwritten) = self.unwritten.get_mut(&id) else {
            return;
        };
        unwritten.naming -= 1;
        if unwritten.naming > 0 {
            return;
        }
        let Some(Unwritten { event, .. }) = self.unwritten.remove(&id) else {
            return;
        };
        if let SystemKind::Stack { frames, end, .. } = event.kind {
            self.ids.remove(&(event.pid, Unwound { frames, end }));
        }
    }

    /// The event of stack `id`, stamped `time_ns`, if no record naming it has been written:
    /// the record about to be written, at `time_ns`, names it.
    pub fn written_before(&mut self, id: u32, time_ns: i64) -> Option<SystemEvent> {
        // Asked for every record written: most name no stack, or one already written, and
        // nothing waits; no lookup then.
        if self.unwritten.is_empty() {
            return None;
        }
        let mut event = self.unwritten.remove(&id)?.event;
        event.time_ns = time_ns;
        Some(event)
    }

    /// Process `pid` is gone: its stacks will not be seen again. Their events not yet written
    /// stay: records drawn before the exit was written (a new process given the same pid) may
    /// name them.
    pub fn forget(&mut self, pid: u32) {
        self.ids.retain(|&(p, _), _| p != pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SAFETY: `_start` is only ever taken the address of, never called.
    unsafe extern "C" {
        /// This test program's entry point (the C library's start files define it).
        fn _start();
    }

    /// Where this test program's code holding `address` is mapped, its path, and its sections.
    fn own_code_at(address: u64) -> (Range<u64>, String, FileSections) {
        let mappings = targets::executable_mappings(std::process::id()).unwrap();
        let mapping = mappings
            .into_iter()
            .find(|m| (m.start..m.end).contains(&address))
            .expect("the program's code is mapped");
        let file = targets::open_mapped(&mapping).unwrap();
        let sections = FileSections::read(file, mapping.file_offset).expect("unwind information");
        (mapping.start..mapping.end, mapping.path, sections)
    }

    /// The entry point of the program a process maps is found where it is mapped, and a
    /// return address a few bytes past it is the main thread's first frame; the entry itself,
    /// or an address past `_start`'s first call, is not.
    #[test]
    fn a_return_address_just_past_the_programs_entry_point_is_its_main_threads_start() {
        let entry = _start as *const () as u64;
        let (code, path, sections) = own_code_at(entry);
        assert_eq!(sections.entry_at(&code), Some(entry));
        let mapped = MappedCode::Unwinds {
            file: Arc::new(sections),
            path,
        };
        let modules = ProcessModules {
            unwinder: native::ArchUnwinder::new(),
            mapped: vec![(code, mapped)],
            read_at: Instant::now(),
            gone: false,
            reread: false,
        };
        for (frame, start) in [(entry, false), (entry + 0x16, true), (entry + 0x41, false)] {
            assert_eq!(
                modules.is_thread_start(frame),
                start,
                "{:#x}",
                frame - entry
            );
        }
    }

    /// This program's CFI describes its functions, and not an address past its code.
    #[test]
    fn a_files_cfi_describes_its_functions_code_only() {
        let function = Unwinder::unwind as *const () as u64;
        let (code, _, sections) = own_code_at(function);
        let bias = sections.bias(&code);
        assert!(sections.describes(function - bias));
        assert!(sections.describes(function + 1 - bias));
        let text_end = sections.text.as_ref().expect(".text").end;
        assert!(!sections.describes(text_end + 0x100));
    }

    /// A process gone before its stack is unwound has no maps to read its files by: its stack
    /// says so, with the probed instruction alone, rather than that the address is in no file.
    #[test]
    fn the_stack_of_a_process_gone_says_it_was_gone() {
        let stack = CopiedStack {
            ip: 0x7f00_0000_1234,
            sp: 0x7ffe_0000_0000,
            bp: 0,
            lr: 0,
            bytes: vec![0; 64],
            top_hint: 0,
        };
        // Above the kernel's pid_max: no such process.
        let (unwound, _) = Unwinder::default().unwind(u32::MAX - 1, &stack);
        assert_eq!(unwound.frames, [0x7f00_0000_1234]);
        assert_eq!(unwound.end, PROCESS_GONE);
    }

    /// A reading of a process's maps that left out the file a frame is in (taken as the
    /// process mapped a thread's stack), or that could not open it, is read again at once,
    /// once; a later reading short of a file stands for `REREAD_AFTER`, and says which.
    #[test]
    fn maps_read_short_of_a_frames_file_are_read_again_at_once_once() {
        let pid = std::process::id();
        let stack = CopiedStack {
            ip: Unwinder::unwind as *const () as u64,
            sp: 0x7ffe_0000_0000,
            bp: 0,
            lr: 0,
            bytes: vec![0; 64],
            top_hint: 0,
        };
        let short = |reread, mapped| ProcessModules {
            unwinder: native::ArchUnwinder::new(),
            mapped,
            read_at: Instant::now(),
            gone: false,
            reread,
        };
        let unopened = || {
            let file = MappedCode::Unopened("/lib/libc.so.6".to_owned());
            vec![(stack.ip..stack.ip + 1, file)]
        };
        let mut unwinder = Unwinder::default();
        for mapped in [Vec::new(), unopened()] {
            unwinder.processes.insert(pid, short(false, mapped));
            let (unwound, _) = unwinder.unwind(pid, &stack);
            assert_eq!(unwound.frames.first(), Some(&stack.ip));
            assert!(!unwound.end.starts_with(OUTSIDE_FILES), "{unwound:?}");
            assert!(!unwound.end.starts_with(UNOPENED_FILE), "{unwound:?}");
        }
        unwinder.processes.insert(pid, short(true, Vec::new()));
        let (unwound, _) = unwinder.unwind(pid, &stack);
        assert_eq!(unwound.frames, [stack.ip]);
        assert!(unwound.end.starts_with(OUTSIDE_FILES), "{unwound:?}");
        unwinder.processes.insert(pid, short(true, unopened()));
        let (unwound, _) = unwinder.unwind(pid, &stack);
        assert_eq!(unwound.frames, [stack.ip]);
        let end = format!("{UNOPENED_FILE} (/lib/libc.so.6, at {:#x})", stack.ip);
        assert_eq!(unwound.end, end);
    }

    /// A stack's event goes before the first record written that names it, stamped with that
    /// record's time, whichever record was drawn first; once only. A process gone has its
    /// stacks named anew.
    #[test]
    fn a_stack_is_written_once_before_the_first_record_written_naming_it() {
        let mut ids = StackIds::default();
        let id = ids.intern(42, Unwound::left_out());
        assert_eq!(ids.intern(42, Unwound::left_out()), id);
        let other = ids.intern(43, Unwound::left_out());
        assert_ne!(other, id);
        assert_eq!(ids.written_before(0, 5), None);
        let event = ids.written_before(id, 5).expect("not yet written");
        assert_eq!((event.time_ns, event.pid), (5, 42));
        let SystemKind::Stack {
            id: named,
            frames,
            end,
        } = event.kind
        else {
            panic!("{event:?}");
        };
        assert_eq!((named, frames.len(), end.as_str()), (id, 0, LEFT_OUT));
        assert_eq!(ids.written_before(id, 6), None);
        ids.forget(43);
        let anew = ids.intern(43, Unwound::left_out());
        assert_ne!(anew, other);
        assert!(ids.written_before(other, 7).is_some());
        assert!(ids.written_before(anew, 7).is_some());
    }
}
