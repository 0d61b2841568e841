//! Attaching the BPF programs to a process's pthread functions, and detaching them.
//!
//! For each process, one uprobe_multi link puts the entry program at every traced offset of its
//! pthread library (the attach layer takes any file offset, not only a symbol's), each offset
//! with its event's cookie, and one more puts the return program at the functions whose record
//! needs the return value. Links are scoped to the process, so no other process on the host pays
//! for them, and they are file-descriptor owned: if the tracer dies, the kernel removes them.

use std::os::fd::OwnedFd;

use anyhow::Result;
use tracer_common::{EventDef, ProbeFlags};

use crate::{multi_link::MultiProgram, targets::PthreadLibrary};

/// The loaded entry and return programs.
pub struct Programs {
    pub entry: MultiProgram,
    pub exit: MultiProgram,
}

/// Every link this run attached.
#[derive(Default)]
pub struct Probes {
    links: Vec<OwnedFd>,
    probe_count: usize,
}

impl Probes {
    /// Attaches the probes of `events` in `library` for process `pid`; returns how many.
    pub fn attach(
        &mut self,
        programs: &Programs,
        pid: u32,
        library: &PthreadLibrary,
        events: &[&'static EventDef],
    ) -> Result<usize> {
        let mut entry = ProbeSet::default();
        let mut exit = ProbeSet::default();
        for event in events {
            for offset in library.functions.offsets(event.symbol) {
                entry.push(offset, event);
                if event.probe_flags().has(ProbeFlags::RETURN) {
                    exit.push(offset, event);
                }
            }
        }
        let file = &library.file.open_path;
        for (program, set) in [(&programs.entry, &entry), (&programs.exit, &exit)] {
            if !set.offsets.is_empty() {
                self.links
                    .push(program.attach(file, &set.offsets, &set.cookies, pid)?);
            }
        }
        let count = entry.offsets.len() + exit.offsets.len();
        self.probe_count += count;
        Ok(count)
    }

    /// How many probes (entry and return) are attached.
    pub fn count(&self) -> usize {
        self.probe_count
    }

    /// Detaches every probe. Each link waits for one kernel grace period when it goes away, so
    /// the links of several processes are closed concurrently.
    pub fn detach_all(&mut self) {
        let links = std::mem::take(&mut self.links);
        std::thread::scope(|scope| {
            for link in links {
                scope.spawn(move || drop(link));
            }
        });
        self.probe_count = 0;
    }
}

#[derive(Default)]
struct ProbeSet {
    offsets: Vec<u64>,
    cookies: Vec<u64>,
}

impl ProbeSet {
    fn push(&mut self, offset: u64, event: &EventDef) {
        self.offsets.push(offset);
        self.cookies.push(event.cookie().encode());
    }
}
