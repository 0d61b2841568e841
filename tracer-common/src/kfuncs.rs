//! Kernel functions the BPF programs call where the kernel offers them (kfuncs). The BPF side
//! calls each by a helper number no kernel has; the loader turns that call into the kfunc's,
//! found by name in kernel BTF, or into nothing where the kernel lacks it.

/// A kfunc the programs call, and the helper number that stands for it in their code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kfunc {
    /// Its name in kernel BTF.
    pub name: &'static str,
    /// The helper number its call carries until the loader replaces it: above every helper a
    /// kernel has, so that a call left unreplaced is refused, not run as another.
    pub placeholder: i32,
    /// The first Linux version with it, for messages.
    pub since: &'static str,
}

/// Turns preemption off. A futex program preempted while it runs makes the kernel skip that
/// program on that CPU, for every other thread, until it resumes (the recursion check of
/// fentry, tracepoint and raw tracepoint programs): a futex call lost. Preemptible kernels run
/// fentry programs preemptibly, and recent ones (Debian's 7.3) the syscall tracepoints' too.
pub const PREEMPT_DISABLE: Kfunc = Kfunc {
    name: "bpf_preempt_disable",
    placeholder: 0x7fff_0000,
    since: "6.10",
};

/// Turns it back on; every path through a program that turned it off does.
pub const PREEMPT_ENABLE: Kfunc = Kfunc {
    name: "bpf_preempt_enable",
    placeholder: 0x7fff_0001,
    since: "6.10",
};

/// Every kfunc the programs may call.
pub const ALL: [Kfunc; 2] = [PREEMPT_DISABLE, PREEMPT_ENABLE];
