//! uprobe_multi links: one BPF link attaches a program to every traced offset of a file in one
//! process, and closing it removes them all after a single kernel grace period. Perf-event
//! uprobes (aya 0.14's only kind) pay that grace period once per probe, serialized: ~90 ms each
//! on kernel 6.18, seconds for a full set.
//!
//! aya 0.14 cannot load a program with the `BPF_TRACE_UPROBE_MULTI` attach type that such links
//! need, so the two programs are relocated with aya-obj against the maps aya created and loaded
//! here with the `bpf(2)` syscall; aya still owns the object, the maps and the ring buffers.

use std::{
    collections::HashSet,
    ffi::CString,
    io,
    mem::MaybeUninit,
    os::{
        fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
};

use anyhow::{Context, Result, anyhow, bail};
use aya::{Ebpf, maps::Map};
use aya_obj::generated::{
    BPF_F_UPROBE_MULTI_RETURN, bpf_attach_type::BPF_TRACE_UPROBE_MULTI, bpf_attr, bpf_cmd,
    bpf_prog_type::BPF_PROG_TYPE_KPROBE,
};

/// Size of the verifier log kept when the kernel rejects a program.
const VERIFIER_LOG_BYTES: usize = 1 << 20;

/// The loaded entry and return programs.
pub struct Programs {
    pub entry: MultiProgram,
    pub exit: MultiProgram,
}

impl Programs {
    /// Loads programs `entry` and `exit` (a uretprobe) of `object`, their map references bound
    /// to the maps aya created for the same object in `ebpf`. The object is parsed and
    /// relocated once for both.
    pub fn load(object: &[u8], ebpf: &Ebpf, entry: &str, exit: &str) -> Result<Self> {
        let mut obj = aya_obj::Object::parse(object).context("cannot parse the BPF object")?;
        let definitions: Vec<(String, aya_obj::Map)> = obj
            .maps
            .iter()
            .map(|(n, m)| (n.clone(), m.clone()))
            .collect();
        let mut bound = Vec::with_capacity(definitions.len());
        for (map_name, definition) in &definitions {
            let map = ebpf
                .map(map_name)
                .ok_or_else(|| anyhow!("aya has no map {map_name}"))?;
            bound.push((map_name.as_str(), map_fd(map)?, definition));
        }
        let text_sections: HashSet<usize> =
            obj.functions.keys().map(|(section, _)| *section).collect();
        obj.relocate_maps(bound.into_iter(), &text_sections)?;
        obj.relocate_calls(&text_sections)?;
        let load = |name: &str, is_return: bool| -> Result<MultiProgram> {
            let program = obj
                .programs
                .get(name)
                .ok_or_else(|| anyhow!("no BPF program {name}"))?;
            let function = &obj.functions[&program.function_key()];
            let fd = prog_load(name, &function.instructions)
                .with_context(|| format!("the kernel rejected BPF program {name}"))?;
            Ok(MultiProgram { fd, is_return })
        };
        Ok(Programs {
            entry: load(entry, false)?,
            exit: load(exit, true)?,
        })
    }
}

/// A program loaded for uprobe_multi links.
pub struct MultiProgram {
    fd: OwnedFd,
    is_return: bool,
}

impl MultiProgram {
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

/// The descriptor of a map aya created.
fn map_fd(map: &Map) -> Result<i32> {
    use Map::*;
    match map {
        Array(data) | ArrayOfMaps(data) | PerCpuArray(data) | LruHashMap(data) | HashMap(data)
        | PerCpuHashMap(data) | RingBuf(data)
        // CALLS: task-local storage, which aya creates but does not wrap.
        | Unsupported(data) => Ok(data.fd().as_fd().as_raw_fd()),
        other => bail!("unexpected map kind {other:?}"),
    }
}

/// Loads a program without a verifier log (formatting one costs the verifier more than the
/// verifying does), and only if the kernel rejects it loads it again with one, to say why.
fn prog_load(name: &str, instructions: &[aya_obj::generated::bpf_insn]) -> Result<OwnedFd> {
    let license = c"GPL";
    // SAFETY: bpf_attr is plain data; all-zero is its "unset" value.
    let mut attr: bpf_attr = unsafe { MaybeUninit::zeroed().assume_init() };
    // SAFETY: writing the prog-load member of a zeroed union.
    unsafe {
        let load = &mut attr.__bindgen_anon_3;
        load.prog_type = BPF_PROG_TYPE_KPROBE as u32;
        load.expected_attach_type = BPF_TRACE_UPROBE_MULTI as u32;
        load.insns = instructions.as_ptr() as u64;
        load.insn_cnt = instructions.len() as u32;
        load.license = license.as_ptr() as u64;
        for (dst, src) in load.prog_name.iter_mut().zip(name.bytes().take(15)) {
            *dst = src as libc::c_char;
        }
    }
    if let Ok(program) = bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr) {
        return Ok(program);
    }
    let mut log = vec![0u8; VERIFIER_LOG_BYTES];
    // SAFETY: as above; `log` outlives the call that reads these.
    unsafe {
        let load = &mut attr.__bindgen_anon_3;
        load.log_level = 1;
        load.log_buf = log.as_mut_ptr() as u64;
        load.log_size = log.len() as u32;
    }
    bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr).map_err(|error| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let log = String::from_utf8_lossy(&log[..end]);
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        anyhow!(
            "{error}; verifier: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )
    })
}

fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid bpf_attr for `cmd`, and every pointer in it outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_int,
            attr as *mut bpf_attr,
            size_of::<bpf_attr>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
