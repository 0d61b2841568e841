//! Finding the pthread functions of a process and putting probes on them: which mapped files
//! define them ([`targets`], [`symbols`]), where in each function a probe goes ([`placement`]),
//! the links that put them there ([`uprobe_links`], [`probes`]), and the processes
//! the tracer starts ([`launch`]) or follows through exec ([`exec_follow`]) so that they are
//! probed before their code runs.

/// Whether the planner reads the traced libraries' machine code on the architecture this build
/// runs on (x86-64's, so far). Where it does not, every probe goes at its function's entry,
/// and nothing that only the code tells is planned: fast paths, slow paths, calls a library
/// makes to its own traced functions, where errno is, glibc 2.41's condition variable.
pub const READS_MACHINE_CODE: bool = cfg!(target_arch = "x86_64");

pub mod exec_follow;
pub mod fast_path;
pub mod launch;
pub mod placement;
pub mod probes;
pub mod slow_path;
pub mod symbols;
pub mod targets;
pub mod uprobe_links;
