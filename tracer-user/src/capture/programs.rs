//! The uprobe programs of the BPF object, loaded for the way the running kernel attaches them
//! (uprobe_multi links or perf-event uprobes: [`UprobeMechanism`]); `attach::uprobe_links`
//! makes the links.

use std::os::fd::{AsFd, OwnedFd};

use aya_obj::generated::{
    bpf_attach_type::{self, BPF_TRACE_UPROBE_MULTI},
    bpf_prog_type::BPF_PROG_TYPE_KPROBE,
};

use super::{
    CaptureError,
    loader::{LoadError, Loaded, trivial_program},
};
use crate::sys::bpf::{self, UprobeMulti};

/// How probes are attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UprobeMechanism {
    MultiLink,
    PerfEvent,
}

impl UprobeMechanism {
    /// uprobe_multi links where the kernel has them with the process filter of 6.10 on (before,
    /// a link's filter matched only the thread whose id it was given), else perf-event uprobes;
    /// those too if `force_perf_events`, to measure and test them on any kernel.
    pub fn detect(force_perf_events: bool) -> Self {
        match !force_perf_events && kernel_has_uprobe_multi() {
            true => UprobeMechanism::MultiLink,
            false => UprobeMechanism::PerfEvent,
        }
    }

    /// What `-v` says of it; `forced`: chosen by `--perf-event-probes`.
    pub fn describe(self, forced: bool) -> &'static str {
        match (self, forced) {
            (UprobeMechanism::MultiLink, _) => "probes: uprobe_multi links, one per library file",
            (UprobeMechanism::PerfEvent, true) => {
                "probes: perf-event uprobes with BPF cookies, one per probe (--perf-event-probes)"
            }
            (UprobeMechanism::PerfEvent, false) => {
                "probes: perf-event uprobes with BPF cookies, one per probe (this kernel has no \
                 uprobe_multi links that filter by process, which came with 6.10)"
            }
        }
    }

    /// The attach type the programs are loaded for.
    fn attach_type(self) -> Option<bpf_attach_type> {
        match self {
            UprobeMechanism::MultiLink => Some(BPF_TRACE_UPROBE_MULTI),
            UprobeMechanism::PerfEvent => None,
        }
    }
}

/// The loaded entry, return and fast-path programs (this last only if fast paths are planned).
pub struct Programs {
    pub entry: UprobeProgram,
    pub exit: UprobeProgram,
    pub fast: Option<UprobeProgram>,
}

/// The names of the programs [`Programs`] loads: an entry program, a return program (a
/// uretprobe) and, if fast paths are planned, one for where a fast path completes.
#[derive(Clone, Copy)]
pub struct ProgramNames {
    pub entry: &'static str,
    pub exit: &'static str,
    pub fast: Option<&'static str>,
}

impl Programs {
    /// Loads the programs `names` of the loaded object, to be attached by `mechanism`. The
    /// kernel verifies each for up to a few hundred milliseconds, more under emulation: they
    /// are loaded side by side, one thread each.
    pub fn load(
        loaded: &Loaded,
        names: ProgramNames,
        mechanism: UprobeMechanism,
    ) -> Result<Self, LoadError> {
        let load = |name: &'static str| -> Result<UprobeProgram, LoadError> {
            let fd = loaded.load_program(name, BPF_PROG_TYPE_KPROBE, mechanism.attach_type())?;
            Ok(UprobeProgram { name, fd })
        };
        std::thread::scope(|scope| {
            let entry = scope.spawn(|| load(names.entry));
            let exit = scope.spawn(|| load(names.exit));
            let fast = names.fast.map(load).transpose()?;
            Ok(Programs {
                entry: joined(entry)?,
                exit: joined(exit)?,
                fast,
            })
        })
    }

    /// Each program's runs and the nanoseconds they took, as the kernel counts them while
    /// `kernel.bpf_stats_enabled` is set (none otherwise).
    pub fn run_times(&self) -> Result<Vec<RunTime>, CaptureError> {
        [Some(&self.entry), Some(&self.exit), self.fast.as_ref()]
            .into_iter()
            .flatten()
            .map(UprobeProgram::run_time)
            .collect()
    }
}

/// What a scoped thread returned; its panic, carried on.
pub fn joined<T>(thread: std::thread::ScopedJoinHandle<'_, T>) -> T {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// What the kernel counted of a program's runs.
#[derive(Clone, Copy, Debug)]
pub struct RunTime {
    pub program: &'static str,
    pub runs: u64,
    pub ns: u64,
}

/// A loaded uprobe program.
pub struct UprobeProgram {
    name: &'static str,
    fd: OwnedFd,
}

impl UprobeProgram {
    /// The loaded program, for the links that attach it.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    fn run_time(&self) -> Result<RunTime, CaptureError> {
        let info = bpf::prog_info(self.fd.as_fd()).map_err(|source| CaptureError::RunTimes {
            program: self.name,
            source,
        })?;
        Ok(RunTime {
            program: self.name,
            runs: info.run_cnt,
            ns: info.run_time_ns,
        })
    }
}

/// Asks the kernel as libbpf does: a kernel that has uprobe_multi links refuses one on the
/// directory `/` with EBADF (older ones do not know the attach type: EINVAL, whatever a kprobe
/// program was loaded for), and, once its process filter was fixed (6.10), refuses a pid of
/// -1 with EINVAL before it looks at the file.
fn kernel_has_uprobe_multi() -> bool {
    let Some(program) = trivial_program(BPF_PROG_TYPE_KPROBE, Some(BPF_TRACE_UPROBE_MULTI)) else {
        return false;
    };
    let refusal = |pid: u32| {
        let probes = UprobeMulti {
            path: c"/",
            offsets: &[0],
            cookies: None,
            at_return: false,
            pid,
        };
        bpf::link_uprobe_multi(program.as_fd(), probes)
            .err()
            .and_then(|e| e.raw_os_error())
    };
    refusal(0) == Some(libc::EBADF) && refusal(u32::MAX) == Some(libc::EINVAL)
}
