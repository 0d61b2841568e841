//! `cargo xtask kernels`: boots Debian's own kernels, x86-64 and arm64, under qemu (TCG: no
//! KVM is needed, and an arm64 guest runs on this x86-64 host) with the release tracer of the
//! guest's architecture, and checks inside each what users run: exact records of a contended
//! workload, plain and `--lossless`, start and exit with every category, and the
//! integration-test binaries as they are built here (every category's exact counts, `-p`, a
//! launched command, `--follow`, `--log` with `dump`), each followed by a check that no BPF
//! program of the tracer's is left. The newest kernel of each architecture is also booted
//! several times, on 2 and 4 vCPUs, tracing more threads than vCPUs locking shared and own
//! mutexes, plain and `--lossless`, so that the BPF programs are often preempted: x86-64's
//! under `preempt=full`, arm64's as Debian builds it (lazy preemption; it has no
//! PREEMPT_DYNAMIC to switch). Debian 11's kernel, below the floor, must be refused in one
//! line. A kernel oops, a lost or duplicated record, or a failed check fails the run. Boots run
//! side by side, one more than the host has CPUs: each guest is one host thread, and often idle.
//! `Coverage` says how much of that each kernel runs: what depends on the kernel (CI's), or
//! the whole matrix (`--full`).
//!
//! `cargo xtask bench --guest` boots an architecture's newest kernel once, to measure in it
//! (`boot_bench`).
//!
//! The guest (`guest`) is a busybox initramfs: `xtask/guest/init.sh` as init, the tracer, the
//! test binaries and the workloads at the paths they were built at, and the libraries they
//! link. Kernel packages come through `debian`'s apt configuration, never the machine's.

mod guest;

use std::{
    fs,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::{
    arch::Arch,
    debian::Suite,
    setup,
    shell::{command, workspace_root},
    timing::Phases,
};
use guest::Guest;

/// The kernels booted, each a Debian suite and the architectures booted with it: Debian 11's
/// stock kernel, below the floor, where the tracer must refuse in one line; Debian 12's and
/// 13's stock kernels, and the newest in trixie-backports. Debian 11's arm64 kernel is not
/// booted: the archive here cannot serve its current package (bullseye-security's arm64
/// kernel answers 404), and the refusal it would check is the x86-64 boot's.
const KERNELS: [(&str, &str, &[Arch]); 4] = [
    ("bullseye", "Debian 11 stock", &[Arch::X86_64]),
    ("bookworm", "Debian 12 stock", &Arch::ALL),
    ("trixie", "Debian 13 stock", &Arch::ALL),
    ("trixie-backports", "trixie-backports newest", &Arch::ALL),
];

/// The suite whose kernel is below the floor.
const BELOW_FLOOR: &str = "bullseye";

/// The suite whose kernel is also booted preempted often (`Machine::preempt_boots`).
const NEWEST: &str = "trixie-backports";

/// How much of the matrix a run boots.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// What depends on the kernel, as CI runs it: every kernel of `KERNELS` boots and runs
    /// the checks whose outcome depends on it (`TESTS`), against its architecture's own C
    /// library. The rest runs once for each architecture: on the host for x86-64, in one
    /// kernel's full boot for arm64 (`Machine::every_c_library`). Fewer boots are preempted
    /// often (`Machine::preempt_boots`).
    Kernel,
    /// The whole matrix, for a change to the BPF side or to how probes attach: every check
    /// against every C library in every kernel's boot, and every preempted boot.
    Full,
}

/// How qemu boots one architecture's Debian kernels, where the architectures differ.
struct Machine {
    /// qemu's program, and the Debian package that has it.
    qemu: (&'static str, &'static str),
    /// The board and CPU emulated.
    board: &'static [&'static str],
    /// The serial console the guest's lines come out of.
    console: &'static str,
    /// Boots of the newest kernel with more threads than vCPUs, in the whole matrix and in
    /// what depends on the kernel (half on 2 vCPUs, half on 4).
    preempt_boots: (u32, u32),
    /// The suite whose boot runs every check against every C library of the architecture
    /// when the others boot only what depends on the kernel; none where the host runs them.
    every_c_library: Option<&'static str>,
    /// The command-line word that makes those boots fully preemptible, on kernels built to
    /// choose at boot (PREEMPT_DYNAMIC); without one they run as the kernel was built.
    preempt_word: Option<&'static str>,
    /// Each CPU's ring, in KiB, that the exact-count tests give the tracer
    /// (`THRTRACE_TEST_BUFFER_KIB`), and the measuring boot's traced runs: the emulated
    /// tracer drains slower than the emulated workloads fill the default ring, the more so
    /// while the other boots share the host's CPUs.
    test_ring_kib: u32,
}

impl Machine {
    fn of(arch: Arch) -> Machine {
        match arch {
            Arch::X86_64 => Machine {
                qemu: ("qemu-system-x86_64", "qemu-system-x86"),
                board: &["-cpu", "max"],
                console: "ttyS0",
                preempt_boots: (10, 4),
                every_c_library: None,
                preempt_word: Some("preempt=full"),
                // 7.3.4's boot lost 1,917 of 30,000 records in 0.7 s at the default, beside
                // the other boots.
                test_ring_kib: 16384,
            },
            Arch::Aarch64 => Machine {
                qemu: ("qemu-system-aarch64", "qemu-system-arm"),
                // `max` has BTI and pointer authentication, as recent Arm server cores do;
                // QARMA, the architected signing algorithm, is so slow under TCG that every
                // signed return of Debian's kernels and userland would count: the
                // implementation-defined one is not.
                board: &["-M", "virt", "-cpu", "max,pauth-impdef=on"],
                console: "ttyAMA0",
                // Half of x86-64's: they come on top of its boots in the CI run, whose time is
                // budgeted.
                preempt_boots: (5, 2),
                // The arm64 kernel that boots and runs the tests fastest.
                every_c_library: Some("trixie"),
                preempt_word: None,
                // 7.3.4's boots lost 3,000 to 14,000 of 120,000 records in 0.6 s at the default.
                test_ring_kib: 16384,
            },
        }
    }
}

/// The integration tests the guests run: each a test binary, the tests of it a full boot runs,
/// and those a boot of what depends on the kernel (`BootKind::Kernel`) runs. Those of every
/// category's exact counts (the probes' placements, which the kernel emulates or
/// single-steps), `-p` on a running process and a launched command (attaching and detaching),
/// `--follow` (the kernel's fork and exec events), `--contended`'s slow-path probes, futex
/// calls under each hook the kernel has, and the call stacks copied with records (under load
/// too) depend on the kernel. Those of `--log` and `dump`, and of stopping by signal, check the
/// tracer's own doings, as do some of the others' (a command's exit status, a usage error,
/// which C library's lock a futex wait is in, what a stack's frames are named, what a summary
/// says): a kernel's boot leaves them out, the host and one full boot of each architecture
/// run them. `--lossless` is checked by the guest itself, on lock_mix through a small ring:
/// the test binary's stalled-tracer runs take minutes under emulation.
const TESTS: [GuestTests; 13] = [
    GuestTests::on_each_kernel("records", ALL).but(&[
        "a_launched_commands_exit_status",
        "as_each_glibc_lays_it_out",
        "built_against_the_old_pthread_cond_wait",
    ]),
    GuestTests::on_each_kernel("thread", ALL),
    GuestTests::on_each_kernel("rwlock", ALL),
    GuestTests::on_each_kernel("sema", ALL),
    GuestTests::on_each_kernel("barrier_spin", ALL),
    GuestTests::on_each_kernel("rmutex", ALL),
    GuestTests::on_each_kernel("attach", ALL).but(&[
        "unbuffered_records_reach_the_file",
        "several_pids_are_traced_at_once",
    ]),
    GuestTests::on_each_kernel("follow", ALL).but(&[
        "follow_needs_a_target",
        "an_exec_into_another_glibc",
        "what_the_tracer_starts_runs_at_the_normal_policy",
    ]),
    GuestTests::in_full_boots("log", ALL),
    GuestTests::in_full_boots("stopping", ALL),
    GuestTests::on_each_kernel("contended", ALL)
        .but(&["cannot_trace_is_refused_by_name", "musl_has_no_slow_path"]),
    GuestTests::on_each_kernel("futex", ALL).but(&[
        "rust_std_mutex_and_condvar",
        "glibc_internal_lock_waits",
        "glibc_malloc_arena_lock_waits",
    ]),
    // The stripped program's test needs binutils, which the guests do not carry.
    GuestTests::on_each_kernel(
        "stacks",
        &[
            "waits_and_the_releases",
            "at_full_speed",
            "ten_threads",
            "hundred_frames_deep",
            "short_of_whole",
            "first_stacks_of_new_threads",
        ],
    )
    .but(&["waits_and_the_releases", "short_of_whole"]),
];

/// Every test of a binary.
const ALL: &[&str] = &[];

/// A test binary the guests run, and which of its tests: a test runs if its name holds any of
/// the filters (none: every test), and is skipped if it holds any of the skips.
#[derive(Clone, Copy)]
struct GuestTests {
    binary: &'static str,
    filters: &'static [&'static str],
    /// Run in a full boot, not in a boot of what depends on the kernel.
    kernel_skips: &'static [&'static str],
    /// Its outcome depends on the kernel: a boot of what does runs it.
    on_each_kernel: bool,
}

impl GuestTests {
    const fn on_each_kernel(binary: &'static str, filters: &'static [&'static str]) -> Self {
        GuestTests {
            binary,
            filters,
            kernel_skips: &[],
            on_each_kernel: true,
        }
    }

    const fn in_full_boots(binary: &'static str, filters: &'static [&'static str]) -> Self {
        GuestTests {
            on_each_kernel: false,
            ..GuestTests::on_each_kernel(binary, filters)
        }
    }

    /// Its tests that check the tracer's own doings, left out of a kernel's boot.
    const fn but(self, kernel_skips: &'static [&'static str]) -> Self {
        GuestTests {
            kernel_skips,
            ..self
        }
    }

    /// How a boot's run of the binary is written in the guest's configuration:
    /// `NAME:FILTERS:SKIPS`, each list separated by commas. A filter that is also a skip is
    /// left out, as the guest checks that each filter ran a test.
    fn run(&self, in_a_kernels_boot: bool) -> String {
        let skips: &[&str] = match in_a_kernels_boot {
            true => self.kernel_skips,
            false => &[],
        };
        let filters: Vec<&str> = self
            .filters
            .iter()
            .copied()
            .filter(|filter| !skips.contains(filter))
            .collect();
        format!("{}:{}:{}", self.binary, filters.join(","), skips.join(","))
    }
}

/// lock_mix's threads and rounds: more threads than the guest's vCPUs.
const THREADS: u32 = 8;
const ROUNDS: u32 = 2000;

/// One host thread runs every vCPU in turn (the guest still preempts its threads between
/// any two instructions). With a host thread per vCPU, a vCPU could run a stale
/// translation of kernel text that another had just finished patching through int3: boots
/// oopsed on an int3 at static-branch sites on hardware-impossible timing (in
/// `sched_clock_cpu` at start-up with 4 vCPUs, before init; in `kernel_clone` with 2, as
/// a raw tracepoint was detached).
const ACCELERATOR: &str = "tcg,thread=single";

/// The guest's clock in a measuring boot: one nanosecond per instruction executed, as on a
/// 1 GHz core that runs an instruction a cycle (an exception's entry and return are free).
/// Its times count instructions, the same whatever else the host runs, where the host's clock
/// counted every moment the host ran something else as the guest's (on a 2-core host shared
/// with builds, the same runs' ratios went from 0.76 to 1.69).
const MEASURING_CLOCK: [&str; 2] = ["-icount", "shift=0"];

/// Longest a boot may take before it counts as hung: a boot of what depends on the kernel
/// runs the tests of `TESTS` against one C library, which took 14 minutes on Debian 12's x86-64
/// kernel in CI. A full boot runs every test against every C library: Debian 12's x86-64
/// kernel was still at it after 30 minutes, beside two other boots and nothing else.
const BOOT_TIMEOUT: Duration = Duration::from_mins(30);
const FULL_BOOT_TIMEOUT: Duration = Duration::from_mins(75);

/// Longest a guest may take to reach init (its first console line, `KT: kernel`), which it
/// does in a few seconds. About one emulated 4-vCPU boot in twenty hung before that, silent,
/// with nothing of ours started: such a guest is ended and booted again, and that is said.
const INIT_TIMEOUT: Duration = Duration::from_mins(2);

/// Boots of one kind that may never reach init before the run fails.
const BOOTS_BEFORE_INIT: u32 = 3;

/// What a kernel's console shows when it oopses or panics (arm64's oops line is `Internal
/// error: Oops: ...`).
const OOPS_MARKERS: [&str; 4] = ["BUG: ", "Oops: ", "Internal error:", "Kernel panic"];

/// The Debian suites whose kernels are booted, as `--suite` names them.
pub fn suites() -> impl Iterator<Item = &'static str> {
    KERNELS.iter().map(|(suite, _, _)| *suite)
}

/// `cargo xtask kernels`: every boot of `coverage` (or only `suite`'s, or only `arch`'s),
/// with the time each phase took; failing if any boot failed.
pub fn run_all(suite: Option<&str>, arch: Option<Arch>, coverage: Coverage) -> Result<()> {
    let mut phases = Phases::start();
    let result = run_matrix(suite, arch, coverage, &mut phases);
    println!("\nwhere the time went:\n{}", phases.table());
    let (passed, failed) = result?;
    if failed > 0 {
        bail!("{failed} of {} kernel boots failed", passed + failed);
    }
    Ok(())
}

/// Boots `arch`'s newest kernel once on `cpus` vCPUs to measure (`kt=bench`), its guest carrying the C
/// `programs` (sources from the workspace root) at `/NAME` and `etc`'s files in `/etc` (the
/// guest script's `run_bench` reads them); the guest's `KT` lines. Fails if the boot did.
pub fn boot_bench(
    arch: Arch,
    cpus: u32,
    programs: &[&str],
    etc: &[(&str, String)],
) -> Result<Vec<String>> {
    ensure_tools(&[arch])?;
    let work = work_dir();
    let initrd = guest::bench_image(arch, &work, programs, etc)?;
    let kernel = fetch_kernel(NEWEST, arch, &work)?;
    let outcome = Boot::new(&kernel, BootKind::Bench, &initrd, cpus, 0).run(&work)?;
    if !outcome.passed {
        bail!(
            "the measuring boot of {} failed:\n{}",
            kernel.abi,
            outcome.lines.join("\n")
        );
    }
    Ok(outcome.lines)
}

/// The ring, in KiB a CPU, that traces in `arch`'s guests need to lose no record
/// (`Machine::test_ring_kib`).
pub fn guest_ring_kib(arch: Arch) -> u32 {
    Machine::of(arch).test_ring_kib
}

/// Where the guests, the kernels and their consoles are kept.
fn work_dir() -> PathBuf {
    workspace_root().join("target/kernels")
}

/// Installs what booting `arches`' guests needs and is missing: cpio, and each one's qemu.
fn ensure_tools(arches: &[Arch]) -> Result<()> {
    setup::ensure_prerequisites()?;
    let mut needed = vec![("cpio", "cpio")];
    needed.extend(arches.iter().map(|&arch| Machine::of(arch).qemu));
    let missing: Vec<&str> = needed
        .into_iter()
        .filter(|(program, _)| !crate::shell::succeeds(command(program).arg("--help")))
        .map(|(_, package)| package)
        .collect();
    if !missing.is_empty() {
        setup::apt_install(&missing)?;
    }
    Ok(())
}

/// Every boot of `coverage` (or only `only_suite`'s, or only `only_arch`'s), with a table of
/// them at the end, each phase's time recorded in `phases`; how many passed and failed.
pub fn run_matrix(
    only_suite: Option<&str>,
    only_arch: Option<Arch>,
    coverage: Coverage,
    phases: &mut Phases,
) -> Result<(usize, usize)> {
    let selected = |suite: &str, arch: Arch| {
        only_suite.is_none_or(|only| only == suite) && only_arch.is_none_or(|only| only == arch)
    };
    let arches: Vec<Arch> = Arch::ALL
        .into_iter()
        .filter(|&arch| KERNELS.iter().any(|(suite, _, _)| selected(suite, arch)))
        .collect();
    if arches.is_empty() {
        bail!("no kernel of the suite and architecture asked for is booted");
    }
    phases.time("qemu and cpio", || ensure_tools(&arches))?;
    let work = work_dir();
    // The kernels are downloaded while the guests build: the one waits on the network, the
    // other on the CPUs.
    let (guests, kernels) = std::thread::scope(|scope| {
        let fetching = scope.spawn(|| {
            let start = Instant::now();
            let mut kernels = Vec::new();
            for (suite, label, booted) in KERNELS {
                for &arch in booted {
                    if selected(suite, arch) {
                        kernels.push((suite, label, fetch_kernel(suite, arch, &work)?));
                    }
                }
            }
            anyhow::Ok((kernels, start.elapsed()))
        });
        let guests = arches
            .iter()
            .map(|&arch| {
                phases.time(&format!("guests for {}", arch.name()), || {
                    Guest::build(arch, &work)
                })
            })
            .collect::<Result<Vec<_>>>();
        let (kernels, took) = fetching
            .join()
            .expect("fetching the kernels does not panic")?;
        phases.record("kernel packages, beside the guests' builds", took);
        anyhow::Ok((guests?, kernels))
    })?;
    let mut boots = Vec::new();
    for (suite, label, kernel) in &kernels {
        let machine = Machine::of(kernel.arch);
        let guest = guests
            .iter()
            .find(|guest| guest.arch == kernel.arch)
            .context("a kernel without its architecture's guest")?;
        let mut add = |kind, cpus| {
            let number = boots.len();
            let initrd = match kind {
                BootKind::Full | BootKind::Kernel => &guest.full,
                _ => &guest.small,
            };
            boots.push((*label, Boot::new(kernel, kind, initrd, cpus, number)));
        };
        let every_c_library = coverage == Coverage::Full || machine.every_c_library == Some(*suite);
        match *suite {
            BELOW_FLOOR => add(BootKind::BelowFloor, 2),
            _ if every_c_library => add(BootKind::Full, 2),
            _ => add(BootKind::Kernel, 2),
        }
        if *suite == NEWEST {
            let preempt_boots = match coverage {
                Coverage::Full => machine.preempt_boots.0,
                Coverage::Kernel => machine.preempt_boots.1,
            };
            (0..preempt_boots).for_each(|n| add(BootKind::Preempt, 2 + 2 * (n % 2)));
        }
    }
    // The longest first, so that the lanes end together.
    boots.sort_by_key(|(_, boot)| boot.kind.longest_first());
    let started = Instant::now();
    let outcomes = run_in_lanes(&boots, &work)?;
    phases.record(
        format!("kernel boots, {} in all, side by side", boots.len()),
        started.elapsed(),
    );
    let mut rows = Vec::new();
    let mut failures = 0;
    for ((label, boot), outcome) in boots.iter().zip(outcomes) {
        if !outcome.passed {
            failures += 1;
        }
        phases.record(
            format!(
                "    boot {}: {} ({}), {} vCPUs",
                boot.number,
                boot.kernel.abi,
                boot.what(),
                boot.cpus
            ),
            outcome.elapsed,
        );
        rows.push((
            boot.number,
            format!(
                "| {label} ({}) | {} | {} | {} | {} | {:.0} s |",
                boot.kernel.abi,
                boot.what(),
                boot.cpus,
                match (outcome.passed, outcome.hung_before_init) {
                    (true, 0) => "pass".to_owned(),
                    (true, hung) => format!("pass ({hung} boot(s) hung before init)"),
                    (false, _) => "FAIL".to_owned(),
                },
                outcome.timing.as_deref().unwrap_or("-"),
                outcome.elapsed.as_secs_f64()
            ),
        ));
    }
    rows.sort();
    let rows: Vec<String> = rows.into_iter().map(|(_, row)| row).collect();
    println!("\n| kernel | boot | vCPUs | result | start+exit, every category | boot and checks |");
    println!("|---|---|---|---|---|---|");
    for row in &rows {
        println!("{row}");
    }
    let passed = rows.len() - failures;
    println!("\nkernels: {passed} passed, {failures} failed");
    Ok((passed, failures))
}

/// Runs `boots` in order, one more at once than the host has CPUs: each guest is one host
/// thread (`ACCELERATOR`), and a guest waits often (for grace periods, for the probes' closing,
/// for its tests' timers), idle: with one boot a CPU, the 2-core host was 20-45% idle through
/// the boots. Prints each boot's lines as it ends; the outcomes, in the order of `boots`.
fn run_in_lanes(boots: &[(&str, Boot)], work: &Path) -> Result<Vec<Outcome>> {
    let lanes = std::thread::available_parallelism().map_or(1, usize::from) + 1;
    let next = AtomicUsize::new(0);
    let outcomes: Mutex<Vec<Option<Outcome>>> = Mutex::new(boots.iter().map(|_| None).collect());
    std::thread::scope(|scope| -> Result<()> {
        let lanes: Vec<_> = (0..lanes.min(boots.len()))
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let at = next.fetch_add(1, Ordering::SeqCst);
                        let Some((_, boot)) = boots.get(at) else {
                            return Ok(());
                        };
                        let outcome = boot.run(work)?;
                        println!(
                            "xtask: {} ({}, {} vCPUs) ended {}:\n{}",
                            boot.kernel.abi,
                            boot.what(),
                            boot.cpus,
                            if outcome.passed { "passing" } else { "FAILING" },
                            outcome.lines.join("\n")
                        );
                        outcomes.lock().expect("no lane panicked")[at] = Some(outcome);
                    }
                })
            })
            .collect();
        for lane in lanes {
            lane.join().expect("a lane does not panic")?;
        }
        Ok(())
    })?;
    outcomes
        .into_inner()
        .expect("no lane panicked")
        .into_iter()
        .map(|outcome| outcome.context("a boot that never ran"))
        .collect()
}

/// A kernel image unpacked from Debian's package.
struct Kernel {
    arch: Arch,
    abi: String,
    vmlinuz: PathBuf,
    /// The preemption model it was built with: its configuration's `CONFIG_PREEMPT*=y` lines
    /// that choose one.
    preemption: String,
}

/// The kernel of `suite`'s `linux-image-ARCH` (amd64, arm64), downloaded and unpacked unless
/// it is there. Both arm64 and x86-64 images boot as Debian ships them (arm64's is a plain
/// Image, with an EFI stub's header qemu skips).
fn fetch_kernel(suite: &str, arch: Arch, work: &Path) -> Result<Kernel> {
    let apt = Suite::open(suite, arch)?;
    let image = apt.dependency(&format!("linux-image-{}", arch.debian()), "linux-image-")?;
    let abi = image
        .strip_prefix("linux-image-")
        .unwrap_or(&image)
        .trim_end_matches("-unsigned")
        .to_owned();
    let root = work.join("k").join(&abi);
    // linux-image-ABI has both before 7.x, whose packages put them under modules/: vmlinuz in
    // linux-binary-ABI, the configuration in linux-base-ABI.
    let vmlinuz = [
        root.join(format!("boot/vmlinuz-{abi}")),
        root.join(format!("usr/lib/modules/{abi}/vmlinuz")),
    ];
    let config = [
        root.join(format!("boot/config-{abi}")),
        root.join(format!("usr/lib/modules/{abi}/config")),
    ];
    let find = |candidates: &[PathBuf]| candidates.iter().find(|path| path.exists()).cloned();
    for package in [
        image.clone(),
        format!("linux-binary-{abi}"),
        format!("linux-base-{abi}"),
    ] {
        if find(&vmlinuz).is_some() && find(&config).is_some() {
            break;
        }
        eprintln!("xtask: fetching {package} from Debian's {suite}");
        apt.unpack(&[&package], &root)?;
    }
    let vmlinuz = find(&vmlinuz).with_context(|| format!("no vmlinuz in {image}"))?;
    let config = find(&config).with_context(|| format!("no kernel configuration in {image}"))?;
    let preemption = fs::read_to_string(&config)?
        .lines()
        .filter(|line| {
            line.strip_prefix("CONFIG_PREEMPT")
                .and_then(|model| model.strip_suffix("=y"))
                .is_some_and(|model| {
                    ["_NONE", "_VOLUNTARY", "", "_LAZY", "_RT", "_DYNAMIC"].contains(&model)
                })
        })
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!("xtask: {abi} ({suite}): {preemption}");
    Ok(Kernel {
        arch,
        abi,
        vmlinuz,
        preemption,
    })
}

/// What a boot checks; the guest reads it from the kernel command line (`kt=`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum BootKind {
    /// Every check: lock_mix traced plain and `--lossless`, start and exit with every
    /// category, the integration tests against every C library of the architecture.
    Full,
    /// What depends on the kernel: every check as `Full`, but of the integration tests only
    /// those whose outcome depends on the kernel (`TESTS`), against the architecture's own C
    /// library only (`THRTRACE_TEST_LIBCS=own`).
    Kernel,
    /// lock_mix with more threads than vCPUs, plain and `--lossless`, the programs often
    /// preempted.
    Preempt,
    /// A kernel below the floor: one line, exit status 2, nothing written or left loaded.
    BelowFloor,
    /// No check: the runs of a measurement (`cargo xtask bench --guest`), each one's output.
    Bench,
}

impl BootKind {
    /// Sorts the boots that take longest first: a full boot runs for minutes, the others for
    /// about one.
    fn longest_first(self) -> u8 {
        match self {
            BootKind::Full => 0,
            BootKind::Kernel => 1,
            BootKind::Preempt | BootKind::Bench => 2,
            BootKind::BelowFloor => 3,
        }
    }

    /// Longest a boot of this kind may take once the guest has reached init.
    fn timeout(self) -> Duration {
        match self {
            BootKind::Full => FULL_BOOT_TIMEOUT,
            _ => BOOT_TIMEOUT,
        }
    }

    fn word(self) -> &'static str {
        match self {
            BootKind::Full => "full",
            BootKind::Kernel => "kernel",
            BootKind::Preempt => "preempt",
            BootKind::BelowFloor => "floor",
            BootKind::Bench => "bench",
        }
    }
}

/// One boot of a kernel.
struct Boot<'a> {
    kernel: &'a Kernel,
    kind: BootKind,
    /// The initramfs image it boots.
    initrd: &'a Path,
    cpus: u32,
    /// Its place in the matrix, which names its console log.
    number: usize,
}

/// What a boot showed.
struct Outcome {
    passed: bool,
    lines: Vec<String>,
    timing: Option<String>,
    elapsed: Duration,
    /// Whether the guest's init ran: if not, nothing of ours ran either.
    reached_init: bool,
    /// Boots before this one that never reached init.
    hung_before_init: u32,
}

impl<'a> Boot<'a> {
    fn new(kernel: &'a Kernel, kind: BootKind, initrd: &'a Path, cpus: u32, number: usize) -> Self {
        Boot {
            kernel,
            kind,
            initrd,
            cpus,
            number,
        }
    }

    /// What it checks, under which preemption.
    fn what(&self) -> String {
        match self.kind {
            BootKind::Full => "default preemption, all checks, every C library".to_owned(),
            BootKind::Kernel => "default preemption, the kernel's checks, own C library".to_owned(),
            BootKind::Preempt => format!(
                "{}, lock_mix plain and lossless",
                Machine::of(self.kernel.arch)
                    .preempt_word
                    .unwrap_or(&self.kernel.preemption)
            ),
            BootKind::BelowFloor => "below the floor: refused".to_owned(),
            BootKind::Bench => "measurements".to_owned(),
        }
    }

    /// Boots until the guest reaches init, at most `BOOTS_BEFORE_INIT` times.
    fn run(&self, work: &Path) -> Result<Outcome> {
        let mut hung_before_init = 0;
        loop {
            let mut outcome = self.boot_once(work)?;
            outcome.hung_before_init = hung_before_init;
            let oops = outcome
                .lines
                .iter()
                .any(|line| line.starts_with("--- kernel oops"));
            if outcome.reached_init || oops || hung_before_init + 1 == BOOTS_BEFORE_INIT {
                return Ok(outcome);
            }
            hung_before_init += 1;
            println!(
                "xtask: the guest did not reach init in {} s (nothing of ours had started): \
                 booting it again",
                INIT_TIMEOUT.as_secs()
            );
        }
    }

    fn boot_once(&self, work: &Path) -> Result<Outcome> {
        let machine = Machine::of(self.kernel.arch);
        let console = work.join(format!(
            "console-{}-{}-{}-{}.log",
            self.number,
            self.kernel.abi,
            self.kind.word(),
            self.cpus
        ));
        let mut append = format!(
            "console={} panic=-1 oops=panic loglevel=4 rdinit=/init kt={}",
            machine.console,
            self.kind.word()
        );
        if let (BootKind::Preempt, Some(word)) = (self.kind, machine.preempt_word) {
            append = format!("{append} {word}");
        }
        println!(
            "xtask: booting {} ({}, {} vCPUs)",
            self.kernel.abi,
            self.what(),
            self.cpus
        );
        let start = Instant::now();
        let (qemu, _) = machine.qemu;
        let mut guest = command(qemu)
            .args(machine.board)
            .args(["-accel", ACCELERATOR, "-m", "3072"])
            .args(["-smp", &self.cpus.to_string()])
            .args(match self.kind {
                BootKind::Bench => &MEASURING_CLOCK[..],
                _ => &[],
            })
            .args(["-display", "none", "-monitor", "none", "-no-reboot"])
            .arg("-serial")
            .arg(format!("file:{}", console.display()))
            .arg("-kernel")
            .arg(&self.kernel.vmlinuz)
            .arg("-initrd")
            .arg(self.initrd)
            .args(["-append", &append])
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {qemu}"))?;
        let reached_init =
            || fs::read(&console).is_ok_and(|log| log.windows(10).any(|w| w == b"KT: kernel"));
        let status = loop {
            if let Some(status) = guest.try_wait()? {
                break status.to_string();
            }
            let waited = start.elapsed();
            let hung = match reached_init() {
                true => waited > self.kind.timeout(),
                false => waited > INIT_TIMEOUT,
            };
            if hung {
                let _ = guest.kill();
                guest.wait()?;
                break format!("ended after {} s", waited.as_secs());
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        let elapsed = start.elapsed();
        let log = String::from_utf8_lossy(&fs::read(&console)?).replace('\r', "");
        let mut lines: Vec<String> = log
            .lines()
            .filter(|line| line.starts_with("KT"))
            .map(str::to_owned)
            .collect();
        let oops = log
            .lines()
            .position(|line| OOPS_MARKERS.iter().any(|w| line.contains(w)));
        if let Some(at) = oops {
            lines.push("--- kernel oops (the guest stops there: oops=panic):".to_owned());
            lines.extend(log.lines().skip(at).take(40).map(str::to_owned));
        }
        let passed = oops.is_none() && lines.iter().any(|line| line == "KT: RESULT PASS");
        if !passed && !lines.iter().any(|line| line.starts_with("KT: RESULT")) {
            lines.push(format!(
                "--- the guest did not finish ({status}); the console's end:"
            ));
            let all: Vec<&str> = log.lines().collect();
            lines.extend(
                all[all.len().saturating_sub(30)..]
                    .iter()
                    .map(std::string::ToString::to_string),
            );
        }
        let timing = lines
            .iter()
            .find_map(|line| line.strip_prefix("KT: TIMING start+exit with every category: "))
            .map(str::to_owned);
        Ok(Outcome {
            passed,
            reached_init: reached_init(),
            hung_before_init: 0,
            lines,
            timing,
            elapsed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::TESTS;
    use crate::shell::workspace_root;

    /// Each filter and skip the guests are given names a test of its binary, read from the
    /// binary's source: a renamed test is caught here, not half an hour into the boots.
    #[test]
    fn every_filter_and_skip_names_a_test() {
        for tests in TESTS {
            let path = workspace_root().join(format!("tests/tests/{}.rs", tests.binary));
            let source = std::fs::read_to_string(&path).unwrap();
            let names: Vec<&str> = source
                .split("#[test]\nfn ")
                .skip(1)
                .filter_map(|rest| rest.split('(').next())
                .collect();
            assert!(!names.is_empty(), "{}: no test", path.display());
            for word in tests.filters.iter().chain(tests.kernel_skips) {
                assert!(
                    names.iter().any(|name| name.contains(word)),
                    "{}: no test's name holds {word}",
                    tests.binary
                );
            }
        }
    }
}
