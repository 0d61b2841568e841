//! `bpf(2)`: one function per command the tracer uses, each filling its member of `bpf_attr`
//! from typed arguments, so that every pointer the kernel is given is to memory the arguments
//! borrow for the call, and every length is that memory's.

use std::{
    ffi::CStr,
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
};

use aya_obj::generated::{
    BPF_F_UPROBE_MULTI_RETURN,
    bpf_attach_type::{self, BPF_PERF_EVENT, BPF_TRACE_UPROBE_MULTI},
    bpf_attr, bpf_cmd, bpf_insn, bpf_prog_info, bpf_prog_type,
};

use super::SyscallError;

/// What `BPF_MAP_CREATE` is told of a map besides its name and inner map.
#[derive(Clone, Copy, Debug)]
pub struct MapShape {
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
}

/// Creates a map named `name` (its first 15 bytes) with no BTF; `inner`: the map a
/// map-of-maps takes its kind of inner map from.
pub fn map_create(
    name: &str,
    shape: MapShape,
    inner: Option<BorrowedFd<'_>>,
) -> Result<OwnedFd, SyscallError> {
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the map-create member of a zeroed union.
    unsafe {
        let create = &mut attr.__bindgen_anon_1;
        create.map_type = shape.map_type;
        create.key_size = shape.key_size;
        create.value_size = shape.value_size;
        create.max_entries = shape.max_entries;
        create.map_flags = shape.map_flags;
        create.inner_map_fd = inner.map_or(0, |fd| fd.as_raw_fd() as u32);
        copy_name(&mut create.map_name, name);
    }
    // SAFETY: the attr holds no pointers.
    unsafe { bpf_fd(bpf_cmd::BPF_MAP_CREATE, &mut attr) }
}

/// Sets the element of array map `map` at `key` to `value`.
///
/// # Safety
/// `value` is at least as long as `map`'s values: the kernel reads that many bytes from it.
pub unsafe fn map_update_elem(
    map: BorrowedFd<'_>,
    key: u32,
    value: &[u8],
) -> Result<(), SyscallError> {
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the element member of a zeroed union.
    unsafe {
        let element = &mut attr.__bindgen_anon_2;
        element.map_fd = map.as_raw_fd() as u32;
        element.key = (&raw const key) as u64;
        element.__bindgen_anon_1.value = value.as_ptr() as u64;
    }
    // SAFETY: the kernel only reads through the key and value pointers, which point to live
    // memory for the call, as long as it reads (the function's contract).
    unsafe { bpf_no_fd(bpf_cmd::BPF_MAP_UPDATE_ELEM, &mut attr) }
}

/// Freezes map `map`: userspace can no longer write it, and the verifier knows its values.
pub fn map_freeze(map: BorrowedFd<'_>) -> Result<(), SyscallError> {
    let mut attr = zeroed_attr();
    attr.__bindgen_anon_2.map_fd = map.as_raw_fd() as u32;
    // SAFETY: the attr holds no pointers.
    unsafe { bpf_no_fd(bpf_cmd::BPF_MAP_FREEZE, &mut attr) }
}

/// Loads BTF (`bytes`, a BTF blob) into the kernel.
pub fn btf_load(bytes: &[u8]) -> Result<OwnedFd, SyscallError> {
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the BTF-load member of a zeroed union.
    unsafe {
        let load = &mut attr.__bindgen_anon_7;
        load.btf = bytes.as_ptr() as u64;
        load.btf_size = bytes.len() as u32;
    }
    // SAFETY: the kernel reads `btf_size` bytes from `bytes`, which is that long and lives
    // through the call.
    unsafe { bpf_fd(bpf_cmd::BPF_BTF_LOAD, &mut attr) }
}

/// A program for `BPF_PROG_LOAD`: all it is told but the verifier log.
#[derive(Clone, Copy, Debug)]
pub struct Program<'a> {
    /// Its name (the first 15 bytes).
    pub name: &'a str,
    pub prog_type: bpf_prog_type,
    /// The attach type, where the program type needs one.
    pub attach_type: Option<bpf_attach_type>,
    /// For a tracing program, the BTF id of the kernel function it hooks; else 0.
    pub attach_btf_id: u32,
    pub instructions: &'a [bpf_insn],
}

/// Loads `program` (GPL-licensed), with the verifier's log at `log_level` written into `log`.
pub fn prog_load(
    program: Program<'_>,
    log_level: u32,
    log: &mut [u8],
) -> Result<OwnedFd, SyscallError> {
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the prog-load member of a zeroed union.
    unsafe {
        let load = &mut attr.__bindgen_anon_3;
        load.prog_type = program.prog_type as u32;
        load.expected_attach_type = program.attach_type.map_or(0, |attach| attach as u32);
        load.attach_btf_id = program.attach_btf_id;
        load.insns = program.instructions.as_ptr() as u64;
        load.insn_cnt = program.instructions.len() as u32;
        load.license = c"GPL".as_ptr() as u64;
        load.log_level = log_level;
        load.log_buf = log.as_mut_ptr() as u64;
        load.log_size = log.len() as u32;
        copy_name(&mut load.prog_name, program.name);
    }
    // SAFETY: the kernel reads `insn_cnt` instructions from `instructions` and the static,
    // NUL-terminated license, and writes at most `log_size` bytes into `log`, which is that
    // long and borrowed mutably through the call.
    unsafe { bpf_fd(bpf_cmd::BPF_PROG_LOAD, &mut attr) }
}

/// Attaches `program` to raw tracepoint `name`, or with no name, a tracing program (fentry,
/// fexit) to the function it was loaded for. The link lives as long as the descriptor.
pub fn raw_tracepoint_open(
    program: BorrowedFd<'_>,
    name: Option<&CStr>,
) -> Result<OwnedFd, SyscallError> {
    let mut attr = zeroed_attr();
    attr.raw_tracepoint.name = name.map_or(0, |name| name.as_ptr() as u64);
    attr.raw_tracepoint.prog_fd = program.as_raw_fd() as u32;
    // SAFETY: the kernel reads the name, NUL-terminated and borrowed through the call.
    unsafe { bpf_fd(bpf_cmd::BPF_RAW_TRACEPOINT_OPEN, &mut attr) }
}

/// Uprobes for a uprobe_multi link: at `offsets` of the file at `path`.
#[derive(Clone, Copy, Debug)]
pub struct UprobeMulti<'a> {
    pub path: &'a CStr,
    pub offsets: &'a [u64],
    /// One per offset (`bpf_get_attach_cookie` in the program), or none.
    pub cookies: Option<&'a [u64]>,
    /// At the returns of the functions that start at `offsets` (uretprobes).
    pub at_return: bool,
    /// The process whose hits run the program; 0: every process.
    pub pid: u32,
}

/// Attaches `program` (loaded for `BPF_TRACE_UPROBE_MULTI`) at every one of `probes`: one
/// link, which detaches them all when closed.
pub fn link_uprobe_multi(
    program: BorrowedFd<'_>,
    probes: UprobeMulti<'_>,
) -> Result<OwnedFd, SyscallError> {
    if let Some(cookies) = probes.cookies {
        assert_eq!(cookies.len(), probes.offsets.len(), "one cookie per offset");
    }
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the link-create member of a zeroed union.
    unsafe {
        let link = &mut attr.link_create;
        link.__bindgen_anon_1.prog_fd = program.as_raw_fd() as u32;
        link.attach_type = BPF_TRACE_UPROBE_MULTI as u32;
        let multi = &mut link.__bindgen_anon_3.uprobe_multi;
        multi.path = probes.path.as_ptr() as u64;
        multi.offsets = probes.offsets.as_ptr() as u64;
        multi.cookies = probes.cookies.map_or(0, |cookies| cookies.as_ptr() as u64);
        multi.cnt = probes.offsets.len() as u32;
        multi.flags = if probes.at_return {
            BPF_F_UPROBE_MULTI_RETURN
        } else {
            0
        };
        multi.pid = probes.pid;
    }
    // SAFETY: the kernel reads the NUL-terminated path and `cnt` entries of the offsets and
    // of the cookies (as many as the offsets, checked above), all borrowed through the call.
    unsafe { bpf_fd(bpf_cmd::BPF_LINK_CREATE, &mut attr) }
}

/// Attaches `program` to perf event `event` (a uprobe, a tracepoint) with `cookie`. The link
/// holds the event: closing the link detaches the program and removes the event.
pub fn link_perf_event(
    program: BorrowedFd<'_>,
    event: BorrowedFd<'_>,
    cookie: u64,
) -> Result<OwnedFd, SyscallError> {
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the link-create member of a zeroed union.
    unsafe {
        let create = &mut attr.link_create;
        create.__bindgen_anon_1.prog_fd = program.as_raw_fd() as u32;
        create.__bindgen_anon_2.target_fd = event.as_raw_fd() as u32;
        create.attach_type = BPF_PERF_EVENT as u32;
        create.__bindgen_anon_3.perf_event.bpf_cookie = cookie;
    }
    // SAFETY: the attr holds no pointers.
    unsafe { bpf_fd(bpf_cmd::BPF_LINK_CREATE, &mut attr) }
}

/// What the kernel tells of loaded program `program`: how often it ran and for how long (with
/// `kernel.bpf_stats_enabled`), and how many runs it skipped (`recursion_misses`).
pub fn prog_info(program: BorrowedFd<'_>) -> Result<bpf_prog_info, SyscallError> {
    // SAFETY: bpf_prog_info is plain data; all-zero is its "unset" value.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr = zeroed_attr();
    attr.info.bpf_fd = program.as_raw_fd() as u32;
    attr.info.info_len = size_of::<bpf_prog_info>() as u32;
    attr.info.info = (&raw mut info) as u64;
    // SAFETY: the kernel writes at most `info_len` bytes, one bpf_prog_info, into `info`,
    // which lives through the call.
    unsafe {
        bpf_no_fd(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    }
    Ok(info)
}

fn zeroed_attr() -> bpf_attr {
    // SAFETY: bpf_attr is plain data; all-zero is its "unset" value.
    unsafe { std::mem::zeroed() }
}

/// A kernel object name: at most 15 bytes and a NUL.
fn copy_name(destination: &mut [libc::c_char; 16], name: &str) {
    for (dst, src) in destination.iter_mut().zip(name.bytes().take(15)) {
        *dst = src as libc::c_char;
    }
}

/// A `bpf(2)` command that returns a new descriptor.
///
/// # Safety
///
/// Every pointer in `attr` is valid, for the command, for as many bytes as `attr` says the
/// kernel may read or write through it, until the call returns.
unsafe fn bpf_fd(cmd: bpf_cmd, attr: &mut bpf_attr) -> Result<OwnedFd, SyscallError> {
    // SAFETY: the caller's word.
    let fd = unsafe { bpf(cmd, attr) }?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A `bpf(2)` command that returns no descriptor.
///
/// # Safety
///
/// As [`bpf_fd`].
unsafe fn bpf_no_fd(cmd: bpf_cmd, attr: &mut bpf_attr) -> Result<(), SyscallError> {
    // SAFETY: the caller's word.
    unsafe { bpf(cmd, attr) }.map(drop)
}

/// # Safety
///
/// As [`bpf_fd`].
unsafe fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> Result<libc::c_long, SyscallError> {
    // SAFETY: `attr` is a whole bpf_attr, and its pointers are the caller's to vouch for.
    let result = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_int,
            std::ptr::from_mut::<bpf_attr>(attr),
            size_of::<bpf_attr>(),
        )
    };
    match result {
        ..0 => Err(SyscallError::last(call_name(cmd))),
        fd => Ok(fd),
    }
}

/// How an error names the call: `bpf(BPF_PROG_LOAD)`.
fn call_name(cmd: bpf_cmd) -> &'static str {
    match cmd {
        bpf_cmd::BPF_MAP_CREATE => "bpf(BPF_MAP_CREATE)",
        bpf_cmd::BPF_MAP_UPDATE_ELEM => "bpf(BPF_MAP_UPDATE_ELEM)",
        bpf_cmd::BPF_MAP_FREEZE => "bpf(BPF_MAP_FREEZE)",
        bpf_cmd::BPF_BTF_LOAD => "bpf(BPF_BTF_LOAD)",
        bpf_cmd::BPF_PROG_LOAD => "bpf(BPF_PROG_LOAD)",
        bpf_cmd::BPF_RAW_TRACEPOINT_OPEN => "bpf(BPF_RAW_TRACEPOINT_OPEN)",
        bpf_cmd::BPF_LINK_CREATE => "bpf(BPF_LINK_CREATE)",
        bpf_cmd::BPF_OBJ_GET_INFO_BY_FD => "bpf(BPF_OBJ_GET_INFO_BY_FD)",
        _ => "bpf",
    }
}
