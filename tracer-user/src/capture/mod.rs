//! How a record crosses from the kernel to a decoded record: what the kernel offers
//! ([`features`]), the BPF object, its per-CPU rings and maps ([`datapath`], with
//! `task_struct` offsets from [`kernel`]), time order across rings ([`reorder`]), raw record
//! to `tracer_model::TraceRecord` ([`decode`], through each C library's object layout, `tracer_common::object_layout`),
//! and what could not cross ([`loss`]; [`lossless`] makes the target wait instead). A record
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
