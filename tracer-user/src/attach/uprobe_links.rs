//! The links that put the BPF programs at the probed instructions, made the way the running
//! kernel offers (found at start by asking it, not by its version):
//!
//! - **uprobe_multi links** (6.10 on; 6.6 had them, but their process filter matched one
//!   thread): one link per library file and program puts it at every traced offset of the
//!   file, each with its cookie, and closing it removes them all after a single kernel grace
//!   period.
//! - **perf-event uprobes** (5.15 on): one perf event per probe, the program attached to it by
//!   a BPF link that carries the probe's cookie. Each waits for kernel grace periods as it is
//!   made and as it goes, so a file's probes are attached on many threads at once, and
//!   detached by a child process the tracer leaves to close them (`Probes::detach_all`).
//!
//! Either way the links' process filter is not relied on alone: the entry program checks the
//! process too (`TRACED`). aya 0.14 can make neither kind with cookies: the object's loader
//! (`capture::loader`) loads the programs and links are made here with `bpf(2)` and
//! `perf_event_open(2)` (`sys::bpf`, `sys::perf`).

use std::{
    ffi::{CString, NulError},
    fs, io,
    num::ParseIntError,
    os::{
        fd::{AsFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::{Path, PathBuf},
};

use crate::{
    capture::programs::{UprobeMechanism, UprobeProgram},
    sys::{
        SyscallError,
        bpf::{self, UprobeMulti},
        perf,
    },
};

/// Why uprobes could not be attached, or the kernel's uprobe PMU not be read.
#[derive(Debug, thiserror::Error)]
pub enum UprobeError {
    #[error("cannot read {path}")]
    ReadPmu { path: String, source: io::Error },
    #[error("the uprobe PMU's type")]
    PmuType(#[source] ParseIntError),
    #[error("unexpected uprobe PMU format/retprobe: {0:?}")]
    PmuFormat(String),
    #[error(transparent)]
    Path(#[from] NulError),
    #[error("cannot attach uprobes to {} {}", .file.display(), for_whom(*.pid))]
    Attach {
        file: PathBuf,
        pid: u32,
        source: LinkError,
    },
}

/// Whose calls a link records: process `pid`'s, or (0) every process's.
fn for_whom(pid: u32) -> String {
    match pid {
        0 => "for every process".to_owned(),
        pid => format!("of pid {pid}"),
    }
}

/// Why the links of a file's probes were not made.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error(transparent)]
    Multi(#[from] SyscallError),
    #[error("perf_event_open of a uprobe at {offset:#x}")]
    PerfEvent { offset: u64, source: SyscallError },
    #[error("cannot attach a BPF program to the uprobe at {offset:#x}")]
    PerfLink { offset: u64, source: SyscallError },
    #[error("a thread attaching uprobes panicked")]
    Panicked,
}

/// Most threads that make one file's perf-event uprobes at once.
const ATTACH_THREADS: usize = 32;

/// Where a program runs at the offset it is attached to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// Before the instruction there runs (a uprobe).
    Instruction,
    /// When the function starting there returns (a uretprobe).
    Return,
}

/// Makes the links of the mechanism chosen at start.
pub struct Linker {
    /// The uprobe PMU, when probes are perf events.
    pmu: Option<UprobePmu>,
}

impl Linker {
    /// Links made by `mechanism`.
    pub fn new(mechanism: UprobeMechanism) -> Result<Self, UprobeError> {
        let pmu = match mechanism {
            UprobeMechanism::MultiLink => None,
            UprobeMechanism::PerfEvent => Some(UprobePmu::read()?),
        };
        Ok(Linker { pmu })
    }

    /// Attaches `program` at `offsets` of `file` (at the instructions, or at the returns of
    /// the functions there), each with its cookie, for process `pid` (0: every process).
    /// Returns the links: closing them detaches.
    pub fn attach(
        &self,
        program: &UprobeProgram,
        hook: Hook,
        file: &Path,
        offsets: &[u64],
        cookies: &[u64],
        pid: u32,
    ) -> Result<Vec<OwnedFd>, UprobeError> {
        assert_eq!(offsets.len(), cookies.len());
        let path = CString::new(file.as_os_str().as_bytes())?;
        let attached = match self.pmu {
            None => {
                attach_multi(program, hook, &path, offsets, cookies, pid).map(|link| vec![link])
            }
            Some(pmu) => attach_perf_events(program, hook, pmu, &path, offsets, cookies, pid),
        };
        attached.map_err(|source| UprobeError::Attach {
            file: file.to_owned(),
            pid,
            source,
        })
    }
}

fn attach_multi(
    program: &UprobeProgram,
    hook: Hook,
    path: &CString,
    offsets: &[u64],
    cookies: &[u64],
    pid: u32,
) -> Result<OwnedFd, LinkError> {
    let probes = UprobeMulti {
        path,
        offsets,
        cookies: Some(cookies),
        at_return: hook == Hook::Return,
        pid,
    };
    Ok(bpf::link_uprobe_multi(program.fd().as_fd(), probes)?)
}

/// One perf-event uprobe and BPF link per offset, made on up to `ATTACH_THREADS` threads.
fn attach_perf_events(
    program: &UprobeProgram,
    hook: Hook,
    pmu: UprobePmu,
    path: &CString,
    offsets: &[u64],
    cookies: &[u64],
    pid: u32,
) -> Result<Vec<OwnedFd>, LinkError> {
    let probes: Vec<(u64, u64)> = offsets
        .iter()
        .copied()
        .zip(cookies.iter().copied())
        .collect();
    let per_thread = probes.len().div_ceil(ATTACH_THREADS).max(1);
    std::thread::scope(|scope| {
        let threads: Vec<_> = probes
            .chunks(per_thread)
            .map(|chunk| {
                scope.spawn(move || {
                    // CPU-bound in the kernel: not ahead of everything else, whichever thread
                    // attaches (the session's drains at a real-time priority).
                    crate::priority::run_normally();
                    // A trace asked to stop (its signal held meanwhile) attaches no more:
                    // each probe here can wait a grace period.
                    chunk
                        .iter()
                        .take_while(|_| !crate::signals::stop_pending())
                        .map(|&(offset, cookie)| {
                            attach_perf_event(program, hook, pmu, path, offset, cookie, pid)
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        let mut links = Vec::with_capacity(probes.len());
        for thread in threads {
            let made = thread.join().map_err(|_| LinkError::Panicked)?;
            links.extend(made?);
        }
        Ok(links)
    })
}

fn attach_perf_event(
    program: &UprobeProgram,
    hook: Hook,
    pmu: UprobePmu,
    path: &CString,
    offset: u64,
    cookie: u64,
    pid: u32,
) -> Result<OwnedFd, LinkError> {
    let config = if hook == Hook::Return {
        1 << pmu.retprobe_bit
    } else {
        0
    };
    let event = perf::open_uprobe(pmu.kind, config, path, offset, pid)
        .map_err(|source| LinkError::PerfEvent { offset, source })?;
    // The link holds the event: closing the link detaches the probe and removes it.
    bpf::link_perf_event(program.fd().as_fd(), event.as_fd(), cookie)
        .map_err(|source| LinkError::PerfLink { offset, source })
}

/// The kernel's uprobe PMU: its perf event type, and the config bit that makes a uretprobe.
#[derive(Clone, Copy, Debug)]
struct UprobePmu {
    kind: u32,
    retprobe_bit: u32,
}

impl UprobePmu {
    const DIR: &str = "/sys/bus/event_source/devices/uprobe";

    fn read() -> Result<Self, UprobeError> {
        let read = |name: &str| {
            let path = format!("{}/{name}", Self::DIR);
            fs::read_to_string(&path).map_err(|source| UprobeError::ReadPmu { path, source })
        };
        let kind = read("type")?.trim().parse().map_err(UprobeError::PmuType)?;
        // "config:0": the bit of perf_event_attr.config that asks for a return probe.
        let retprobe = read("format/retprobe")?;
        let retprobe_bit = retprobe
            .trim()
            .strip_prefix("config:")
            .and_then(|bit| bit.parse().ok())
            .filter(|&bit: &u32| bit < 64)
            .ok_or_else(|| UprobeError::PmuFormat(retprobe.clone()))?;
        Ok(UprobePmu { kind, retprobe_bit })
    }
}
