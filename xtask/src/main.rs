//! `cargo xtask COMMAND`: what cargo alone cannot do for this workspace.

mod arch;
mod bench;
mod c_libraries;
mod debian;
mod demo;
mod dist;
mod fuzz;
mod install;
mod kernels;
mod layers;
mod server;
mod setup;
mod shell;
mod stress;
mod test;
mod test_binaries;
mod timing;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building needs and is missing: nightly rust-src, LLVM 22, bpf-linker, a C
    /// compiler; point git at the project's hooks
    Setup,
    /// Set up, build, trace a bundled multi-threaded workload and show the trace
    Demo,
    /// Set up, build, check formatting and lints, run every test; boot the kernels with what
    /// depends on the kernel (as `kernels` without `--full`)
    Test,
    /// Set up, build, and measure the cost per traced mutex lock+unlock pair
    Bench {
        /// Repetitions of each measurement (the median is shown)
        #[arg(long, default_value_t = 5)]
        reps: usize,
        /// Compare only the full trace's cost per pair, its BPF programs' run times, call stacks
        /// under load and a real server traced with the tracer of this commit, built apart,
        /// run after run
        #[arg(long, value_name = "REV", conflicts_with = "guest")]
        against: Option<String>,
        /// Measure instead the uncontended mutex pair inside a guest of this architecture
        /// (its newest Debian kernel under qemu, emulated): untraced, `--contended`, placed
        /// probes and `--probe-at-entry`
        #[arg(long, value_name = "ARCH")]
        guest: Option<arch::Arch>,
    },
    /// Build and install the binary, its man pages and completions, the C analyzer library
    /// with trace.h and posixtrace.pc, and the contention agent's systemd unit (disabled) with
    /// an example of its configuration
    Install {
        /// Where to install: bin/, lib/, include/ and share/ under it
        #[arg(long, default_value = "/usr/local")]
        prefix: std::path::PathBuf,
        /// Where the agent's configuration goes (thrtrace-bpf/agent.conf, kept if there)
        #[arg(long, default_value = "/etc")]
        sysconfdir: std::path::PathBuf,
    },
    /// Build the release into target/dist: a static thrtrace-bpf with its man pages,
    /// completions and the C analyzer library, as a .tar.gz and a .deb (which also has the
    /// contention agent's systemd unit, disabled)
    Dist,
    /// Fuzz the trace log reader (Rust and C APIs) with cargo-fuzz, from the malformed-log corpus
    Fuzz {
        /// How long to fuzz
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// Print which of the tracer's rooms imports which, and check that every import points down
    Layers,
    /// Boot Debian's x86-64 and arm64 kernels (11's, below the floor; 12's, 13's, trixie-backports' newest) under qemu and test the tracer in each: what depends on the kernel, as CI does, unless --full
    Kernels {
        /// The whole matrix, for a change to the BPF side or to how probes attach: every
        /// check against every C library in every boot, and every preempted boot
        #[arg(long)]
        full: bool,
        /// Boot only this Debian suite's kernels
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(kernels::suites()))]
        suite: Option<String>,
        /// Boot only this architecture's kernels
        #[arg(long)]
        arch: Option<arch::Arch>,
    },
    /// Send the tracer SIGINT, SIGTERM or SIGKILL at random moments and check what it leaves
    Stress {
        /// How many trials
        #[arg(long, default_value_t = 100)]
        trials: usize,
        /// Seed of the random choices, to repeat a run (default: from the clock)
        #[arg(long)]
        seed: Option<u64>,
    },
}

/// `--arch ARCH` and the like take an architecture by its [`arch::Arch::name`] (here, as
/// `arch.rs` is also built into the tests' build script, which has no clap).
impl clap::ValueEnum for arch::Arch {
    fn value_variants<'a>() -> &'a [Self] {
        &arch::Arch::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

fn main() {
    let result = match Cli::parse().command {
        Task::Setup => setup::ensure_prerequisites()
            .and_then(|()| setup::ensure_otlp_python())
            .and_then(|()| setup::use_the_project_hooks()),
        Task::Demo => demo::run_demo(),
        Task::Test => test::run_all(kernels::Coverage::Kernel),
        Task::Bench {
            reps,
            against: Some(rev),
            ..
        } => bench::against::run_against(&rev, reps),
        Task::Bench {
            reps,
            guest: Some(guest),
            ..
        } => bench::guest::run_guest(guest, reps),
        Task::Bench { reps, .. } => bench::run(reps),
        Task::Stress { trials, seed } => stress::run(trials, seed),
        Task::Kernels { suite, arch, full } => kernels::run_all(
            suite.as_deref(),
            arch,
            match full {
                true => kernels::Coverage::Full,
                false => kernels::Coverage::Kernel,
            },
        ),
        Task::Layers => layers::run(),
        Task::Dist => dist::run_dist(),
        Task::Fuzz { seconds } => fuzz::run_for(seconds),
        Task::Install { prefix, sysconfdir } => install::run_install(&prefix, &sysconfdir),
    };
    if let Err(error) = result {
        eprintln!("xtask: {error:#}");
        std::process::exit(1);
    }
}
