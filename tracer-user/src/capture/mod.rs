//! How a record crosses from the kernel to a decoded record: what the kernel offers
//! ([`features`]), the BPF object, its per-CPU rings and maps ([`datapath`], with
//! `task_struct` offsets from [`kernel`]), time order across rings ([`reorder`]), raw record
//! to `tracer_model::TraceRecord` ([`decode`], through each C library's object layout,
//! `tracer_common::object_layout`), and what could not cross ([`loss`]; [`lossless`] makes the target wait instead). A record
//! taken with its stack crosses with the stack's bytes ([`draw`]), which the session unwinds.
//! The futex category's programs are on the futex syscall's tracepoints ([`futex_hook`]).

pub mod datapath;
pub mod decode;
pub mod draw;
pub mod features;
pub mod futex_hook;
pub mod kernel;
pub mod loader;
pub mod loss;
pub mod lossless;
pub mod programs;
pub mod reorder;
pub mod ring;
pub mod stack_tops;

use std::io;

use aya::maps::MapError;
use tracer_common::{MAX_CPUS, names};

use self::loader::LoadError;
use crate::sys::SyscallError;

/// Why the way records cross failed: the object loaded, the rings made or drained, the maps
/// that steer the programs read or written.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("cannot load the BPF object (run as root, or with CAP_BPF and CAP_PERFMON)")]
    LoadObject(#[source] LoadError),
    /// A map or program of the object once parsed and its BTF loaded: the error names which.
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Map(#[from] MapError),
    #[error("cannot duplicate the descriptor of a ring or map")]
    Duplicate(#[from] io::Error),
    #[error("{path}")]
    Cpus {
        path: &'static str,
        source: io::Error,
    },
    #[error("{cpus} CPUs: at most {MAX_CPUS} are supported")]
    TooManyCpus { cpus: usize },
    #[error("cannot create a {bytes}-byte ring buffer")]
    CreateRing { bytes: u32, source: MapError },
    #[error("a ring buffer of {0} bytes: not a power of two of pages")]
    RingSize(usize),
    #[error("cannot map a ring buffer")]
    MapRing(#[source] rustix::io::Errno),
    #[error("a ring buffer mapped at address 0")]
    RingAtZero,
    #[error("cannot set up the traced processes")]
    SetUpTraced(#[source] MapError),
    #[error("cannot add pid {pid} to the traced processes")]
    TraceProcess { pid: u32, source: MapError },
    #[error("cannot change which probes record")]
    SetRecording(#[source] MapError),
    #[error("cannot read the lost-record counters")]
    ReadLost(#[source] MapError),
    #[error("the {} map is not a hash map", names::STOPPED)]
    StoppedNotAHashMap,
    #[error("cannot read BPF program {program}'s run times")]
    RunTimes {
        program: &'static str,
        source: SyscallError,
    },
    #[error("cannot start a thread to drain the rings")]
    StartDrawer(#[source] io::Error),
    /// A drawing thread is gone: it panicked (said on stderr).
    #[error("a thread that drains the ring buffers has stopped")]
    DrawerStopped,
}
