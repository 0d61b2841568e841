//! uprobe_multi links: one BPF link attaches a program to every traced offset of a file in one
//! process, and closing it removes them all after a single kernel grace period. Perf-event
//! uprobes (aya 0.14's only kind) pay that grace period once per probe, serialized: ~90 ms each
//! on kernel 6.18, seconds for a full set.
//!
//! aya 0.14 cannot load a program with the `BPF_TRACE_UPROBE_MULTI` attach type that such links
//! need: the object's loader (`capture::loader`) loads them, and links are made here with the
//! `bpf(2)` syscall.

use std::{
    ffi::CString,
    mem::MaybeUninit,
    os::{
        fd::{AsRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
};

use anyhow::{Context, Result};
use aya_obj::generated::{
    BPF_F_UPROBE_MULTI_RETURN, bpf_attach_type::BPF_TRACE_UPROBE_MULTI, bpf_attr, bpf_cmd,
    bpf_prog_info, bpf_prog_type::BPF_PROG_TYPE_KPROBE,
};

use crate::capture::loader::{Loaded, bpf, bpf_no_fd};

/// The loaded entry and return programs.
pub struct Programs {
    pub entry: MultiProgram,
    pub exit: MultiProgram,
}

impl Programs {
    /// Loads programs `entry` and `exit` (a uretprobe) of the loaded object.
    pub fn load(loaded: &Loaded, entry: &'static str, exit: &'static str) -> Result<Self> {
        let load = |name: &'static str, is_return: bool| -> Result<MultiProgram> {
            let fd =
                loaded.load_program(name, BPF_PROG_TYPE_KPROBE, Some(BPF_TRACE_UPROBE_MULTI))?;
            Ok(MultiProgram {
                name,
                fd,
                is_return,
            })
        };
        Ok(Programs {
            entry: load(entry, false)?,
            exit: load(exit, true)?,
        })
    }

    /// Each program's runs and the nanoseconds they took, as the kernel counts them while
    /// `kernel.bpf_stats_enabled` is set (none otherwise).
    pub fn run_times(&self) -> Result<Vec<RunTime>> {
        [&self.entry, &self.exit]
            .into_iter()
            .map(MultiProgram::run_time)
            .collect()
    }
}

/// What the kernel counted of a program's runs.
#[derive(Clone, Copy, Debug)]
pub struct RunTime {
    pub program: &'static str,
    pub runs: u64,
    pub ns: u64,
}

/// A program loaded for uprobe_multi links.
pub struct MultiProgram {
    name: &'static str,
    fd: OwnedFd,
    is_return: bool,
}

impl MultiProgram {
    fn run_time(&self) -> Result<RunTime> {
        // SAFETY: both are plain data; all-zero is their "unset" value.
        let mut info: bpf_prog_info = unsafe { MaybeUninit::zeroed().assume_init() };
        let mut attr: bpf_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        attr.info.bpf_fd = self.fd.as_raw_fd() as u32;
        attr.info.info_len = size_of::<bpf_prog_info>() as u32;
        attr.info.info = (&raw mut info) as u64;
        bpf_no_fd(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr)
            .with_context(|| format!("cannot read BPF program {}'s run times", self.name))?;
        Ok(RunTime {
            program: self.name,
            runs: info.run_cnt,
            ns: info.run_time_ns,
        })
    }

    /// Attaches at `offsets` of `file` for process `pid`, each with its cookie.
    pub fn attach(
        &self,
        file: &Path,
        offsets: &[u64],
        cookies: &[u64],
        pid: u32,
    ) -> Result<OwnedFd> {
        assert_eq!(offsets.len(), cookies.len());
        let path = CString::new(file.as_os_str().as_bytes())?;
        // SAFETY: bpf_attr is plain data; all-zero is its "unset" value.
        let mut attr: bpf_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: writing the link_create member of a zeroed union.
        unsafe {
            let link = &mut attr.link_create;
            link.__bindgen_anon_1.prog_fd = self.fd.as_raw_fd() as u32;
            link.attach_type = BPF_TRACE_UPROBE_MULTI as u32;
            let multi = &mut link.__bindgen_anon_3.uprobe_multi;
            multi.path = path.as_ptr() as u64;
            multi.offsets = offsets.as_ptr() as u64;
            multi.cookies = cookies.as_ptr() as u64;
            multi.cnt = offsets.len() as u32;
            multi.flags = if self.is_return {
                BPF_F_UPROBE_MULTI_RETURN
            } else {
                0
            };
            multi.pid = pid;
        }
        bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)
            .with_context(|| format!("cannot attach uprobes to {} of pid {pid}", file.display()))
    }
}
