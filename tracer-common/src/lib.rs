//! What the BPF side and userspace agree on: the settings the programs are loaded with
//! ([`config`]), the raw record that crosses the ring buffers ([`record`]), the one table of
//! events, their a1..a5 fields and categories ([`events`]), and how each C library lays out
//! the objects a record copies ([`object_layout`]).
#![no_std]

pub mod arch;
pub mod config;
pub mod events;
pub mod futex;
pub mod kfuncs;
pub mod object_layout;
pub mod record;

pub use config::{MAX_CGROUPS, ProgramConfig, SelectedCgroup};
pub use events::{
    Access, Blocking, CallRole, Category, Completion, Condition, ContendedProbe, EVENTS, EventDef,
    Field, FoundInRax, FunctionSpan, ObjectRegister, Outcome, PackedOutcome, ProbeCookie,
    ProbeFlags, RECORDING_SLOTS, RecordingMasks, TypeRegister, recording_masks,
};
pub use object_layout::{
    LAYOUT_COND_WITHOUT_G_REFS, LAYOUT_GLIBC, LAYOUT_MUSL, MUTEX_RECURSIVE, MUTEX_TYPE_MASK,
};
pub use record::{RawRecord, WHICH_BOTH_HALVES, Which};

/// Names of the BPF maps and globals, shared so that neither side spells them twice.
pub mod names {
    /// `ARRAY_OF_MAPS` indexed by CPU, each slot one BPF ring buffer.
    pub const RING_BUFFERS: &str = "RING_BUFFERS";
    /// Per CPU: [`LOST_TOTAL`] records could not be reserved in the ring buffer so far, and
    /// [`LOST_PENDING`] of them since the last record that could (which carries that count).
    pub const LOST: &str = "LOST";
    /// Where each thread's stack begins, by thread id, which sizes its stack copies.
    pub const STACK_TOPS: &str = "STACK_TOPS";
    /// Per process: what the BPF side needs of its C library ([`crate::ProcessLibrary`]).
    pub const LIBRARIES: &str = "LIBRARIES";
    /// The return addresses of the C library's own calls of traced functions, as
    /// [`crate::call_site_key`]s: a hit that returns to one is not the program's call.
    pub const CALL_SITES: &str = "CALL_SITES";
    /// The read-only global that holds the programs' [`crate::ProgramConfig`].
    pub const CONFIG: &str = "CONFIG";
    /// The map of the threads `--lossless` has stopped: thread id to process id (with [`crate::STOP_SENT`]).
    pub const STOPPED: &str = "STOPPED";
    /// The processes recorded, each with the links it is recorded through
    /// ([`TracedThrough`]), and the raw tracepoint program (on `sched_process_fork`) that adds
    /// `--follow`'s children.
    pub const TRACED: &str = "TRACED";
    /// See [`TRACED`].
    pub const FORK_PROGRAM: &str = "thr_fork";
    /// The raw tracepoint program (on `sched_process_exec`) that forgets an exec'ing process's
    /// errno slot and notes in [`EXECS`] a target that exec'd.
    pub const EXEC_PROGRAM: &str = "thr_exec";
    /// The targets (`-p`, a launched command) that exec'd, each with the monotonic time of its
    /// exec: their new image is not probed without `--follow`. Userspace takes them out.
    pub const EXECS: &str = "EXECS";
    /// The entry program (a uprobe) and the return program (a uretprobe).
    pub const ENTRY_PROGRAM: &str = "thr_entry";
    /// See [`ENTRY_PROGRAM`].
    pub const RETURN_PROGRAM: &str = "thr_return";
    /// The program where a lock call's fast path completes (a uprobe inside the function).
    pub const FAST_PROGRAM: &str = "thr_fast";
    /// The section of the global `RECORDING`, per category code the probes that record now
    /// ([`crate::RecordingMasks`]): to userspace an array map of one entry, written to stop,
    /// start and filter a live trace.
    pub const RECORDING: &str = ".bss.recording";
    /// The section of the global `OWN_TARGETS` ([`crate::OwnTargets`]): to userspace an
    /// array map of one entry, written as processes are traced through their own links.
    pub const OWN_TARGETS: &str = ".bss.own_targets";
    /// A program that does nothing, to measure the cost of the probes themselves.
    pub const EMPTY_PROGRAM: &str = "thr_empty";
    /// The futex category's programs, a pair (entry, exit) per way of hooking the futex
    /// syscalls: fentry/fexit on their functions.
    pub const FUTEX_FENTRY_PROGRAM: &str = "thr_futex_fentry";
    /// See [`FUTEX_FENTRY_PROGRAM`].
    pub const FUTEX_FEXIT_PROGRAM: &str = "thr_futex_fexit";
    /// The futex syscalls' own tracepoints (`syscalls:sys_enter_futex`, ...).
    pub const FUTEX_TP_ENTER_PROGRAM: &str = "thr_futex_tp_enter";
    /// See [`FUTEX_TP_ENTER_PROGRAM`].
    pub const FUTEX_TP_EXIT_PROGRAM: &str = "thr_futex_tp_exit";
    /// `raw_syscalls:sys_enter` and `sys_exit`.
    pub const FUTEX_RAW_ENTER_PROGRAM: &str = "thr_futex_raw_enter";
    /// See [`FUTEX_RAW_ENTER_PROGRAM`].
    pub const FUTEX_RAW_EXIT_PROGRAM: &str = "thr_futex_raw_exit";
}

/// [`ProgramConfig::stacks`]: no record carries its stack.
pub const STACKS_NONE: u32 = 0;
/// [`ProgramConfig::stacks`]: the records of slow paths carry their stack (`--contended`'s
/// waits and wakes), not those of calls traced whole (a thread pool's condition waits, at any
/// rate).
pub const STACKS_SLOW_PATHS: u32 = 1;
/// [`ProgramConfig::stacks`]: every record written at a call's entry, or at its return for a
/// call written only there, carries its stack.
pub const STACKS_ALL: u32 = 2;

/// The processes traced through their own links that the entry program finds with a few
/// compares instead of a `TRACED` lookup (a hash map's lookup is an eighth of its run): up to
/// `OWN_TARGET_SLOTS` process ids (0: a free slot), then at `OWN_TARGETS_SPILLED` a word set
/// once a traced process is not among them (more were traced, one moved to shared links, or
/// `--follow` traces children), from when the programs look any other process up in `TRACED`.
pub type OwnTargets = [u32; OWN_TARGET_SLOTS + 1];
/// Process ids [`OwnTargets`] holds.
pub const OWN_TARGET_SLOTS: usize = 8;
/// The index of [`OwnTargets`]' spill word.
pub const OWN_TARGETS_SPILLED: usize = OWN_TARGET_SLOTS;

/// A `TRACED` entry: which links record a process. The kernel's own process filter on a link
/// is not relied on alone (uprobe_multi links before 6.10 filter by thread, not process), so
/// the entry program checks the process for every hit: in [`OwnTargets`] first, for its own
/// links.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TracedThrough {
    /// The process's own links (`-p`, a launched command).
    OwnLinks = 1,
    /// Links shared by every process that maps the library (`--follow` and the children it
    /// forks, a `-p` target whose main thread has exited). Its own links, if any, record
    /// nothing from then on, so that a call is recorded once while a target moves over.
    SharedLinks = 2,
}

/// Set in a `STOPPED` entry's process id once the thread's SIGSTOP has been sent (process ids
/// stay below 2^22).
pub const STOP_SENT: u32 = 1 << 31;

/// A `LIBRARIES` entry: what the BPF side needs of a process's C library, at these indexes.
pub type ProcessLibrary = [u64; 3];
/// Where errno is: the address of the GOT slot holding its offset from the thread pointer
/// (glibc), or that offset itself with [`ERRNO_AT_OFFSET`] set, in the low 63 bits as a signed
/// number (musl's; below the thread pointer on arm64); 0 if unknown.
pub const LIBRARY_ERRNO: usize = 0;
/// Set in [`LIBRARY_ERRNO`] when it is the offset itself (user addresses never have it).
pub const ERRNO_AT_OFFSET: u64 = 1 << 63;
/// Where the file offset 0 of the C library is mapped, when its own calls of traced functions
/// are known by their return addresses (`CALL_SITES`: musl's `libc.so`, whose dynamic linker
/// takes `pthread_mutex_lock`); 0 otherwise.
pub const LIBRARY_BASE: usize = 1;
/// Which library's `CALL_SITES` keys apply ([`call_site_key`]).
pub const LIBRARY_ID: usize = 2;

/// A `CALL_SITES` key: the file offset of a return address in library `library`.
pub const fn call_site_key(library: u64, file_offset: u64) -> u64 {
    (library << 48) | (file_offset & ((1 << 48) - 1))
}

/// The slots of the per-CPU `LOST` array.
pub const LOST_TOTAL: u32 = 0;
/// Lost since the last record that could be written (which carries the count).
pub const LOST_PENDING: u32 = 1;

/// Most CPUs the ring-buffer array has slots for.
pub const MAX_CPUS: u32 = 1024;
