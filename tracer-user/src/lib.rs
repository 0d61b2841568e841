//! thrtrace-bpf: traces the pthread calls of unmodified processes with uprobes.
//!
//! Follow one record: it is born in `tracer-ebpf` (a uprobe/uretprobe per traced function, put
//! there by [`attach`]), crosses to userspace through per-CPU ring buffers and becomes a
//! `tracer_model::TraceRecord` in [`capture`], and is written by the [`sinks`]. The
//! [`session`] runs the loop that moves records from one to the other; [`cli`] is the command
//! line.

#[macro_use]
mod say;
#[macro_use]
mod error;

mod attach;
mod capture;
mod cli;
mod control;
mod event_list;
mod http;
mod manual;
mod place;
mod priority;
mod readers;
mod session;
mod signals;
mod sinks;
mod sudo;
mod symbolize;
mod sys;

pub use cli::main;
