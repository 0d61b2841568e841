//! `cargo xtask kernels`: boots Debian's own kernels under qemu (TCG: no KVM is needed) with the
//! release tracer, and checks inside each what users run: exact records of a contended
//! workload, plain and `--lossless`, start and exit with every category, and the
//! integration-test binaries as they are built here (every category's exact counts, `-p`, a
//! launched command, `--follow`, `--log` with `dump`), each followed by a check that no BPF
//! program of the tracer's is left. The newest kernel is also booted `PREEMPT_BOOTS` times
//! with `preempt=full`, on 2 and 4 vCPUs, tracing more threads than vCPUs locking shared and
//! own mutexes, plain and `--lossless`, so that the BPF programs are often preempted. Debian
//! 11's kernel, below the floor, must be refused in one line. A kernel oops, a lost or
//! duplicated record, or a failed check fails the run. Boots run side by side, one a host CPU:
//! each guest is one host thread.
//!
//! The guest is a busybox initramfs: `xtask/guest/init.sh` as init, the tracer, the test
//! binaries and the workloads at the paths they were built at, and the host libraries they
//! link. Kernel packages come through `debian`'s apt configuration, never the machine's.

use std::{
    collections::BTreeSet,
    fs,
    os::unix::fs::{PermissionsExt, symlink},
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
    c_libraries,
    debian::Suite,
    setup,
    shell::{build_tracer, command, compile_workload, run, workspace_root},
    test_binaries,
};

/// The kernels booted: Debian 11's stock kernel, below the floor, where the tracer must refuse
/// in one line; Debian 12's and 13's stock kernels, and the newest in trixie-backports.
const KERNELS: [(&str, &str); 4] = [
    ("bullseye", "Debian 11 stock"),
    ("bookworm", "Debian 12 stock"),
    ("trixie", "Debian 13 stock"),
    ("trixie-backports", "trixie-backports newest"),
];

/// The suite whose kernel is below the floor.
const BELOW_FLOOR: &str = "bullseye";

/// Boots of the newest kernel under `preempt=full`.
const PREEMPT_BOOTS: u32 = 10;

/// The integration tests run in each kernel's full boot, each a test binary and the filter
/// it is given: every category's exact counts, `-p` on a running process, a launched command,
/// `--follow`, `--log` and `dump`, stopping by signal, `--contended`'s slow-path probes, futex calls
/// under each hook the kernel has, the
/// call stacks copied with records. `--lossless` is checked by the guest
/// itself, on lock_mix through a small ring: the test binary's stalled-tracer runs take minutes
/// under emulation.
const TESTS: [(&str, &str); 13] = [
    ("records", ""),
    ("thread", ""),
    ("rwlock", ""),
    ("sema", ""),
    ("barrier_spin", ""),
    ("rmutex", ""),
    ("attach", ""),
    ("follow", ""),
    ("log", ""),
    ("stopping", ""),
    ("contended", ""),
    ("futex", ""),
    // The stripped program's test needs binutils, which the guests do not carry.
    ("stacks", "waits_and_the_releases"),
];

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

/// Longest a boot may take before it counts as hung: a full boot runs every test of `TESTS`,
/// which took 17 minutes on Debian 12's kernel here with builds beside it, and more than 20 in
/// CI.
const BOOT_TIMEOUT: Duration = Duration::from_mins(30);

/// Longest a guest may take to reach init (its first console line, `KT: kernel`), which it
/// does in a few seconds. About one emulated 4-vCPU boot in twenty hung before that, silent,
/// with nothing of ours started: such a guest is ended and booted again, and that is said.
const INIT_TIMEOUT: Duration = Duration::from_mins(2);

/// Boots of one kind that may never reach init before the run fails.
const BOOTS_BEFORE_INIT: u32 = 3;

/// The Debian suites whose kernels are booted, as `--suite` names them.
pub fn suites() -> impl Iterator<Item = &'static str> {
    KERNELS.iter().map(|(suite, _)| *suite)
}

/// `cargo xtask kernels`: every boot (or only `suite`'s), failing if any failed.
pub fn run_all(suite: Option<&str>) -> Result<()> {
    let (passed, failed) = run_matrix(suite)?;
    if failed > 0 {
        bail!("{failed} of {} kernel boots failed", passed + failed);
    }
    Ok(())
}

/// Every boot (or only `only`'s suite's), with a table of them at the end; how many passed
/// and failed.
pub fn run_matrix(only: Option<&str>) -> Result<(usize, usize)> {
    setup::ensure_prerequisites()?;
    let missing: Vec<&str> = [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("/bin/busybox", "busybox-static"),
        ("cpio", "cpio"),
    ]
    .into_iter()
    .filter(|(program, _)| !crate::shell::succeeds(command(program).arg("--help")))
    .map(|(_, package)| package)
    .collect();
    if !missing.is_empty() {
        setup::apt_install(&missing)?;
    }
    let work = workspace_root().join("target/kernels");
    let guest = Guest::build(&work)?;
    let mut kernels = Vec::new();
    for (suite, label) in KERNELS {
        if only.is_none_or(|only| only == suite) {
            kernels.push((suite, label, fetch_kernel(suite, &work)?));
        }
    }
    let mut boots = Vec::new();
    for (suite, label, kernel) in &kernels {
        let mut add = |kind, cpus| {
            let number = boots.len();
            boots.push((*label, Boot::new(kernel, kind, cpus, number)));
        };
        match *suite {
            BELOW_FLOOR => add(BootKind::BelowFloor, 2),
            _ => add(BootKind::Full, 2),
        }
        if *suite == "trixie-backports" {
            (0..PREEMPT_BOOTS).for_each(|n| add(BootKind::Preempt, 2 + 2 * (n % 2)));
        }
    }
    // The longest first, so that the lanes end together.
    boots.sort_by_key(|(_, boot)| boot.kind.longest_first());
    let outcomes = run_in_lanes(&boots, &guest, &work)?;
    let mut rows = Vec::new();
    let mut failures = 0;
    for ((label, boot), outcome) in boots.iter().zip(outcomes) {
        if !outcome.passed {
            failures += 1;
        }
        rows.push((
            boot.number,
            format!(
                "| {label} ({}) | {} | {} | {} | {} | {:.0} s |",
                boot.kernel.abi,
                boot.kind.what(),
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

/// Runs `boots` in order, as many at once as the host has CPUs: each guest is one host thread
/// (`ACCELERATOR`). Prints each boot's lines as it ends; the outcomes, in the order of `boots`.
fn run_in_lanes(boots: &[(&str, Boot)], guest: &Guest, work: &Path) -> Result<Vec<Outcome>> {
    let lanes = std::thread::available_parallelism().map_or(1, usize::from);
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
                        let outcome = boot.run(guest, work)?;
                        println!(
                            "xtask: {} ({}, {} vCPUs) ended {}:\n{}",
                            boot.kernel.abi,
                            boot.kind.what(),
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
    abi: String,
    vmlinuz: PathBuf,
}

/// The kernel of `suite`'s `linux-image-amd64`, downloaded and unpacked unless it is there.
fn fetch_kernel(suite: &str, work: &Path) -> Result<Kernel> {
    let apt = Suite::open(suite, Arch::X86_64, &work.join(format!("apt-{suite}")))?;
    let image = apt.dependency("linux-image-amd64", "linux-image-")?;
    let abi = image
        .strip_prefix("linux-image-")
        .unwrap_or(&image)
        .trim_end_matches("-unsigned")
        .to_owned();
    let root = work.join("k").join(&abi);
    let candidates = [
        root.join(format!("boot/vmlinuz-{abi}")),
        // Newer packages put it under modules/, in linux-binary-ABI.
        root.join(format!("usr/lib/modules/{abi}/vmlinuz")),
    ];
    let find = || candidates.iter().find(|path| path.exists()).cloned();
    if find().is_none() {
        eprintln!("xtask: fetching {image} from Debian's {suite}");
        apt.unpack(&[&image], &root)?;
        if find().is_none() {
            apt.unpack(&[&format!("linux-binary-{abi}")], &root)?;
        }
    }
    let vmlinuz = find().with_context(|| format!("no vmlinuz in {image}"))?;
    Ok(Kernel { abi, vmlinuz })
}

/// The two initramfs images: one with the test binaries, and a small one, with the tracer and
/// lock_mix only, for the preemption and below-the-floor boots.
struct Guest {
    full: PathBuf,
    small: PathBuf,
}

impl Guest {
    fn build(work: &Path) -> Result<Self> {
        let tracer = build_tracer()?;
        let test_binaries::TestBinaries {
            tests,
            programs,
            workloads,
        } = test_binaries::build(Arch::X86_64, &TESTS.map(|(test, _)| test))?;
        let lock_mix = compile_workload("lock_mix")?;
        let bpf_programs = work.join("bpf_programs");
        fs::create_dir_all(work)?;
        run(command("cc")
            .args(["-O2", "-Wall", "-o"])
            .arg(&bpf_programs)
            .arg(workspace_root().join("xtask/guest/bpf_programs.c")))?;
        let image = |name: &str, full: bool| -> Result<PathBuf> {
            let root = work.join(format!("initramfs-{name}"));
            let _ = fs::remove_dir_all(&root);
            let mut files = Files::new(&root)?;
            files.add(&tracer, Path::new("/usr/local/bin/thrtrace-bpf"))?;
            files.add(&lock_mix, Path::new("/lock_mix"))?;
            files.add(&bpf_programs, Path::new("/bpf_programs"))?;
            files.add(
                &workspace_root().join("xtask/guest/init.sh"),
                Path::new("/init"),
            )?;
            fs::set_permissions(root.join("init"), fs::Permissions::from_mode(0o755))?;
            let mut runs = Vec::new();
            if full {
                for (name, binary) in &tests {
                    files.add(binary, &Path::new("/tests").join(name))?;
                }
                for (name, filter) in TESTS {
                    runs.push(format!("{name}:{filter}"));
                }
                // At the path the test binaries were built to find them at; and their sources,
                // where the tests read the lines they mark (`line_of`).
                files.add_tree(&workloads)?;
                for program in &programs {
                    files.add(program, program)?;
                }
                files.add_tree(&workspace_root().join("tests/workloads"))?;
                // What the other glibcs' workloads load, at the path they were linked to load
                // it: `lib` and `lib64` (links into usr/ in a merged-/usr release).
                for glibc in c_libraries::of(Arch::X86_64) {
                    let sysroot = glibc.root();
                    for dir in ["lib", "lib64"] {
                        files.copy_tree(&sysroot.join(dir))?;
                    }
                    if sysroot.join("lib").is_symlink() {
                        files.copy_shared_objects(&sysroot.join("usr/lib/x86_64-linux-gnu"))?;
                        files.copy_tree(&sysroot.join("usr/lib64"))?;
                    }
                }
                // The tests' `sh -c` is a glibc program, as on a distribution, not busybox.
                files.add(Path::new("/bin/dash"), Path::new("/bin/sh"))?;
            }
            fs::write(
                root.join("etc/kt.conf"),
                format!(
                    "THREADS={THREADS}\nROUNDS={ROUNDS}\nTESTS=\"{}\"\n",
                    runs.join(" ")
                ),
            )?;
            files.add_libraries()?;
            files.pack(&work.join(format!("initramfs-{name}.gz")))
        };
        Ok(Guest {
            full: image("full", true)?,
            small: image("small", false)?,
        })
    }
}

/// An initramfs tree being filled.
struct Files {
    root: PathBuf,
    executables: Vec<PathBuf>,
}

impl Files {
    fn new(root: &Path) -> Result<Self> {
        for dir in [
            "bin",
            "proc",
            "sys",
            "dev",
            "tmp",
            "run",
            "etc",
            "usr/local/bin",
        ] {
            fs::create_dir_all(root.join(dir))?;
        }
        fs::copy("/bin/busybox", root.join("bin/busybox"))?;
        // The host's merged-/usr layout, so that libraries keep their paths.
        for dir in ["lib", "lib64", "sbin"] {
            if let Ok(target) = fs::read_link(Path::new("/").join(dir)) {
                symlink(&target, root.join(dir))?;
                fs::create_dir_all(
                    root.join("usr")
                        .join(target.file_name().unwrap_or_default()),
                )?;
            }
        }
        Ok(Files {
            root: root.to_owned(),
            executables: Vec::new(),
        })
    }

    /// Copies `from` to `to` (an absolute path in the guest).
    fn add(&mut self, from: &Path, to: &Path) -> Result<()> {
        let inside = self.root.join(to.strip_prefix("/")?);
        fs::create_dir_all(inside.parent().context("a path with no parent")?)?;
        fs::copy(from, &inside).with_context(|| format!("cannot copy {}", from.display()))?;
        self.executables.push(from.to_owned());
        Ok(())
    }

    /// Copies directory `dir` to the same path in the guest.
    fn add_tree(&mut self, dir: &Path) -> Result<()> {
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_file() {
                self.add(&path, &path)?;
            }
        }
        Ok(())
    }

    /// Copies directory `dir`, with everything under it and its symbolic links as they are,
    /// to the same path in the guest.
    fn copy_tree(&mut self, dir: &Path) -> Result<()> {
        let inside = self.root.join(dir.strip_prefix("/")?);
        fs::create_dir_all(inside.parent().context("a path with no parent")?)?;
        run(command("cp").arg("-a").arg(dir).arg(&inside))
    }

    /// Copies the shared objects in directory `dir` (`*.so*`, not the static libraries beside
    /// them), links as they are, to the same path in the guest.
    fn copy_shared_objects(&mut self, dir: &Path) -> Result<()> {
        let inside = self.root.join(dir.strip_prefix("/")?);
        fs::create_dir_all(&inside)?;
        let mut shared = Vec::new();
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if name.contains(".so") && !path.is_dir() {
                shared.push(path);
            }
        }
        run(command("cp").arg("-a").args(shared).arg(&inside))
    }

    /// The shared libraries every copied executable links, from the host: what glibc's ldd
    /// lists, and the program interpreter, which is all a musl executable needs (musl's
    /// `libc.so` is its dynamic linker, and glibc's ldd cannot run one).
    fn add_libraries(&mut self) -> Result<()> {
        let mut libraries = BTreeSet::new();
        for executable in &self.executables {
            for lister in [
                command("ldd").arg(executable),
                command("readelf").arg("-lW").arg(executable),
            ] {
                let Ok(listed) = lister.output() else {
                    continue;
                };
                let listed = String::from_utf8_lossy(&listed.stdout).replace(']', " ");
                libraries.extend(
                    listed
                        .split_whitespace()
                        .filter(|word| word.starts_with('/'))
                        .map(PathBuf::from)
                        .filter(|path| path.is_file()),
                );
            }
        }
        for library in libraries {
            for path in [library.clone(), fs::canonicalize(&library)?] {
                let inside = self.root.join(path.strip_prefix("/")?);
                if !inside.exists() {
                    fs::create_dir_all(inside.parent().context("a library path")?)?;
                    fs::copy(&path, &inside)?;
                }
            }
        }
        Ok(())
    }

    /// The tree as a gzip'd cpio archive at `image`.
    fn pack(self, image: &Path) -> Result<PathBuf> {
        run(command("sh").arg("-c").arg(format!(
            "cd '{}' && find . | cpio -o -H newc --quiet | gzip -1 > '{}'",
            self.root.display(),
            image.display()
        )))?;
        Ok(image.to_owned())
    }
}

/// What a boot checks; the guest reads it from the kernel command line (`kt=`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum BootKind {
    /// Every check: lock_mix traced plain and `--lossless`, start and exit with every
    /// category, the integration tests.
    Full,
    /// lock_mix under `preempt=full`, plain and `--lossless`, the programs often preempted.
    Preempt,
    /// A kernel below the floor: one line, exit status 2, nothing written or left loaded.
    BelowFloor,
}

impl BootKind {
    fn what(self) -> &'static str {
        match self {
            BootKind::Full => "default preemption, all checks",
            BootKind::Preempt => "preempt=full, lock_mix plain and lossless",
            BootKind::BelowFloor => "below the floor: refused",
        }
    }

    /// Sorts the boots that take longest first: a full boot runs for minutes, the others for
    /// about one.
    fn longest_first(self) -> u8 {
        match self {
            BootKind::Full => 0,
            BootKind::Preempt => 1,
            BootKind::BelowFloor => 2,
        }
    }

    fn word(self) -> &'static str {
        match self {
            BootKind::Full => "full",
            BootKind::Preempt => "preempt",
            BootKind::BelowFloor => "floor",
        }
    }
}

/// One boot of a kernel.
struct Boot<'a> {
    kernel: &'a Kernel,
    kind: BootKind,
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
    fn new(kernel: &'a Kernel, kind: BootKind, cpus: u32, number: usize) -> Self {
        Boot {
            kernel,
            kind,
            cpus,
            number,
        }
    }

    /// Boots until the guest reaches init, at most `BOOTS_BEFORE_INIT` times.
    fn run(&self, guest: &Guest, work: &Path) -> Result<Outcome> {
        let mut hung_before_init = 0;
        loop {
            let mut outcome = self.boot_once(guest, work)?;
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

    fn boot_once(&self, guest: &Guest, work: &Path) -> Result<Outcome> {
        let console = work.join(format!(
            "console-{}-{}-{}-{}.log",
            self.number,
            self.kernel.abi,
            self.kind.word(),
            self.cpus
        ));
        let initrd = match self.kind {
            BootKind::Full => &guest.full,
            BootKind::Preempt | BootKind::BelowFloor => &guest.small,
        };
        let mut append = format!(
            "console=ttyS0 panic=-1 oops=panic loglevel=4 rdinit=/init kt={}",
            self.kind.word()
        );
        if self.kind == BootKind::Preempt {
            append += " preempt=full";
        }
        println!(
            "xtask: booting {} ({}, {} vCPUs)",
            self.kernel.abi,
            self.kind.what(),
            self.cpus
        );
        let start = Instant::now();
        let mut qemu = command("qemu-system-x86_64")
            .args(["-accel", ACCELERATOR, "-cpu", "max", "-m", "3072"])
            .args(["-smp", &self.cpus.to_string()])
            .args(["-display", "none", "-monitor", "none", "-no-reboot"])
            .arg("-serial")
            .arg(format!("file:{}", console.display()))
            .arg("-kernel")
            .arg(&self.kernel.vmlinuz)
            .arg("-initrd")
            .arg(initrd)
            .args(["-append", &append])
            .stdin(Stdio::null())
            .spawn()
            .context("cannot start qemu-system-x86_64")?;
        let reached_init =
            || fs::read(&console).is_ok_and(|log| log.windows(10).any(|w| w == b"KT: kernel"));
        let status = loop {
            if let Some(status) = qemu.try_wait()? {
                break status.to_string();
            }
            let waited = start.elapsed();
            let hung = match reached_init() {
                true => waited > BOOT_TIMEOUT,
                false => waited > INIT_TIMEOUT,
            };
            if hung {
                let _ = qemu.kill();
                qemu.wait()?;
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
        let oops = log.lines().position(|line| {
            ["BUG: ", "Oops: ", "Kernel panic"]
                .iter()
                .any(|w| line.contains(w))
        });
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
