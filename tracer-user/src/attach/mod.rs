//! Finding the pthread functions of a process and putting probes on them: which mapped files
//! define them ([`targets`], [`symbols`]), which cgroups are traced ([`cgroups`]), where in each function a probe goes ([`placement`]),
//! the links that put them there ([`uprobe_links`], [`probes`]), and the processes
//! the tracer starts ([`launch`]) or follows through exec ([`exec_follow`]) so that they are
//! probed before their code runs.

use tracer_common::arch::{self, InstructionSet};

/// Whether a full trace plans lock calls' fast paths from the traced code on the architecture
/// this build runs on (x86-64, so far; slow paths, `--contended`, are planned on every one).
pub const PLANS_FAST_PATHS: bool = matches!(arch::HOST.instruction_set, InstructionSet::X86_64);

mod aarch64;
pub mod cgroups;
pub mod exec_follow;
pub mod fast_path;
pub mod launch;
pub mod machine_code;
pub mod placement;
pub mod probes;
pub mod slow_path;
pub mod symbols;
pub mod targets;
pub mod uprobe_links;
