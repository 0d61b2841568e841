//! The whole test suite: formatting, lints (host and BPF crates), unit and integration tests,
//! stress trials, and the tracer on Debian's own kernels under qemu (`kernels`).
//! Tests that need BPF skip with a message when not root, and fail instead under `CI=true`.
//! Ends with the wall time of each phase, then one closing line that adds up every test
//! binary: `tests: N passed, N failed, N skipped`.

use std::{
    fs,
    io::{BufRead, BufReader},
    process::Stdio,
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::{
    arch::Arch,
    c_libraries,
    kernels::{self, Coverage},
    setup,
    shell::{build_tracer, command, is_root, run, workspace_root},
    stress,
    timing::Phases,
};

/// Stress trials in the test suite (`cargo xtask stress` runs 100 by default).
const STRESS_TRIALS: usize = 10;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// What the suite counted.
#[derive(Default)]
struct Counts {
    passed: usize,
    failed: usize,
    skipped: usize,
}

/// Runs every phase, the kernels' boots with `coverage`; prints the phases' times and the
/// closing line whether or not a phase failed.
pub fn run_all(coverage: Coverage) -> Result<()> {
    let mut phases = Phases::start();
    let mut counts = Counts::default();
    let result = run_phases(&mut phases, &mut counts, coverage);
    println!("\nwhere the time went:\n{}", phases.table());
    println!(
        "tests: {} passed, {} failed, {} skipped",
        counts.passed - counts.skipped,
        counts.failed,
        counts.skipped
    );
    result?;
    if counts.failed > 0 {
        bail!("{} of the tests failed", counts.failed);
    }
    Ok(())
}

fn run_phases(phases: &mut Phases, counts: &mut Counts, coverage: Coverage) -> Result<()> {
    phases.time("prerequisites", || {
        setup::ensure_prerequisites()?;
        setup::ensure_otlp_python()?;
        c_libraries::ensure(Arch::HOST)
    })?;
    phases.time("fmt", || {
        run(command("cargo").args(["fmt", "--all", "--check"]))
    })?;
    phases.time("layers", crate::layers::run)?;
    // `dist`'s static builds, both architectures' (the arm64 guests run that one), take
    // minutes of CPU that the checks' and builds' serial stretches and most host tests leave
    // idle (the tests wait on their workloads): they run beside them from here, at the lowest
    // priority so that the tests' runs are as fast as alone, and the tests of the release run
    // last, once they are built. Stopped if the run ends before them.
    let dist_builds = DistBuilds::start()?;
    phases.time("clippy", || {
        run(command("cargo").args([
            "clippy",
            "--release",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    })?;
    // The BPF programs once for each architecture they run on: aya-build's `--cfg`, which the
    // real build passes, is not there for a bare clippy.
    for arch in Arch::ALL {
        phases.time(&format!("clippy, BPF programs for {}", arch.name()), || {
            run(command("cargo")
                .args([
                    "+nightly",
                    "clippy",
                    "--package",
                    "tracer-ebpf",
                    "--release",
                    "--target",
                    "bpfel-unknown-none",
                    "-Z",
                    "build-std=core",
                    "--",
                    "-D",
                    "warnings",
                ])
                .env(
                    "RUSTFLAGS",
                    format!("--cfg bpf_target_arch=\"{}\"", arch.name()),
                ))
        })?;
    }
    let tracer = phases.time("build the tracer", build_tracer)?;
    phases.time("build the tests", || {
        run(command("cargo").args(["test", "--release", "--no-run"]))
    })?;

    let skip_log = workspace_root().join("target/skipped-tests.log");
    let _ = fs::remove_file(&skip_log);
    let cargo_test = || {
        let mut cargo = command("cargo");
        cargo
            .args(["test", "--release", "--no-fail-fast"])
            .env("THRTRACE_BIN", &tracer)
            .env("THRTRACE_SKIP_LOG", &skip_log);
        cargo
    };
    let mut results = vec![
        cargo_test_each_binary(
            phases,
            cargo_test().args(every_test_but(&[DIST_TESTS, SYSTEM_WIDE_TESTS])?),
        )?,
        cargo_test_each_binary(phases, cargo_test().arg("--doc"))?,
    ];
    let mut after_the_builds = vec!["--test", SYSTEM_WIDE_TESTS];
    match phases.time("dist's builds, waited for after the tests", || {
        dist_builds.wait()
    }) {
        Ok(took) => {
            phases.record("dist's builds, beside the checks and tests", took);
            after_the_builds.extend(["--test", DIST_TESTS]);
        }
        Err(error) => {
            println!("dist: {error:#}");
            counts.failed += 1;
        }
    }
    results.push(cargo_test_each_binary(
        phases,
        cargo_test().args(after_the_builds),
    )?);
    for result in results {
        counts.passed += result.passed;
        counts.failed += result.failed;
        if !result.succeeded && result.failed == 0 {
            // cargo itself failed (a binary that did not build, a crashed test binary).
            counts.failed += 1;
        }
    }
    counts.skipped += fs::read_to_string(&skip_log).map_or(0, |log| log.lines().count());
    // Signals at random moments, after the tests: it checks that no program of the tracer's is
    // left in the kernel, which tracers running beside it would confuse. Counted as one test.
    if is_root() || in_ci() {
        match phases.time("stress trials", || stress::run(STRESS_TRIALS, None)) {
            Ok(()) => counts.passed += 1,
            Err(error) => {
                println!("stress: {error:#}");
                counts.failed += 1;
            }
        }
    } else {
        println!("skipping the stress trials: not running as root (BPF tracing needs root)");
        // Counted like the skipped cargo tests, which pass by returning early.
        counts.skipped += 1;
        counts.passed += 1;
    }
    // Debian's own kernels under qemu, each boot counted as a test. Emulated, they need no
    // privilege here, but installing qemu does.
    if is_root() || in_ci() {
        match kernels::run_matrix(None, None, coverage, phases) {
            Ok((boots_passed, boots_failed)) => {
                counts.passed += boots_passed;
                counts.failed += boots_failed;
            }
            Err(error) => {
                println!("kernels: {error:#}");
                counts.failed += 1;
            }
        }
    } else {
        println!("skipping the kernel boots: not running as root (installing qemu needs it)");
        counts.skipped += 1;
        counts.passed += 1;
    }
    Ok(())
}

/// The integration tests of the release `dist` makes (tests/dist.rs).
const DIST_TESTS: &str = "dist";

/// The integration tests that trace every process of the host and count what they lost
/// (tests/system_wide.rs): run once `dist`'s builds, whose compilers lock mutexes by the
/// thousand a second, are over.
const SYSTEM_WIDE_TESTS: &str = "system_wide";

/// `cargo test`'s options that select every unit test and every integration test but the
/// `excluded` (doc-tests, which cannot be selected beside them, aside).
fn every_test_but(excluded: &[&str]) -> Result<Vec<String>> {
    let dir = workspace_root().join("tests/tests");
    let mut names = Vec::new();
    for entry in fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|extension| extension == "rs")
            && let Some(name) = path.file_stem().and_then(|stem| stem.to_str())
            && !excluded.contains(&name)
        {
            names.push(name.to_owned());
        }
    }
    names.sort();
    let mut options = vec!["--lib".to_owned(), "--bins".to_owned()];
    for name in names {
        options.extend(["--test".to_owned(), name]);
    }
    Ok(options)
}

/// `cargo xtask dist` under way in a child process at the lowest CPU priority, its output kept
/// in target/dist-beside-tests.log. Dropped before it was waited for (a phase failed), it is
/// killed rather than left building for minutes after the run. It stays in the run's process
/// group, where Ctrl-C reaches it.
struct DistBuilds {
    builder: Option<std::thread::JoinHandle<Result<Duration>>>,
    pid: i32,
}

impl DistBuilds {
    fn start() -> Result<Self> {
        let log_path = workspace_root().join("target/dist-beside-tests.log");
        let log = fs::File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let started = Instant::now();
        let mut dist = command("nice")
            .args(["-n", "19"])
            .arg(std::env::current_exe().context("xtask's own executable")?)
            .arg("dist")
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start `cargo xtask dist`")?;
        let pid = i32::try_from(dist.id()).context("a process id beyond i32")?;
        let builder = std::thread::spawn(move || {
            let status = dist.wait().context("cannot wait for `cargo xtask dist`")?;
            if !status.success() {
                let output = fs::read_to_string(&log_path).unwrap_or_default();
                let tail: Vec<&str> = output.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                bail!(
                    "`cargo xtask dist` failed ({status}); the end of {}:\n{}",
                    log_path.display(),
                    tail.join("\n")
                );
            }
            Ok(started.elapsed())
        });
        Ok(DistBuilds {
            builder: Some(builder),
            pid,
        })
    }

    /// Waits for the builds to end; how long they took.
    fn wait(mut self) -> Result<Duration> {
        self.builder
            .take()
            .expect("waited for once")
            .join()
            .expect("running `cargo xtask dist` does not panic")
    }
}

impl Drop for DistBuilds {
    fn drop(&mut self) {
        if self
            .builder
            .as_ref()
            .is_some_and(|builder| !builder.is_finished())
        {
            // SAFETY: kill(2) of the child its thread still waits for, so its id is its own.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
    }
}

/// What `cargo test` counted in its summaries, and whether it exited 0.
struct CargoTest {
    passed: usize,
    failed: usize,
    succeeded: bool,
}

/// Runs `cargo_test`, showing its output, and records in `phases` how long each test binary
/// ran: from the line cargo prints as it starts one (`Running tests/attach.rs (…)`,
/// `Doc-tests posixtrace`) to the next such line, or to cargo's exit.
fn cargo_test_each_binary(
    phases: &mut Phases,
    cargo_test: &mut std::process::Command,
) -> Result<CargoTest> {
    let mut child = cargo_test
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start cargo test")?;
    let stdout = child.stdout.take().context("cargo test's stdout")?;
    let stderr = child.stderr.take().context("cargo test's stderr")?;
    // cargo names each binary on stderr as it starts it; the tests print on stdout.
    let (starts, started) = mpsc::channel();
    let names = std::thread::spawn(move || -> Result<()> {
        for line in BufReader::new(stderr).lines() {
            let line = line?;
            eprintln!("{line}");
            if let Some(name) = binary_started(&line) {
                let _ = starts.send((name, Instant::now()));
            }
        }
        Ok(())
    });
    let (mut passed, mut failed) = (0, 0);
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        if let Some(counts) = line.strip_prefix("test result: ") {
            passed += count(counts, " passed")?;
            failed += count(counts, " failed")?;
        }
    }
    let status = child.wait()?;
    names.join().expect("the stderr reader does not panic")?;
    let ended = Instant::now();
    let starts: Vec<(String, Instant)> = started.try_iter().collect();
    for (at, (name, began)) in starts.iter().enumerate() {
        let next = starts.get(at + 1).map_or(ended, |(_, next)| *next);
        phases.record(format!("test: {name}"), next - *began);
    }
    Ok(CargoTest {
        passed,
        failed,
        succeeded: status.success(),
    })
}

/// The test binary a line of cargo's names as it starts it: `tests/attach.rs` and
/// `unittests src/lib.rs` with their crate's name, `doc-tests posixtrace`.
fn binary_started(line: &str) -> Option<String> {
    let line = line.trim();
    if let Some(krate) = line.strip_prefix("Doc-tests ") {
        return Some(format!("doc-tests {krate}"));
    }
    let (source, binary) = line.strip_prefix("Running ")?.split_once(" (")?;
    let file = binary.trim_end_matches(')').rsplit('/').next()?;
    let krate = file.rsplit_once('-').map_or(file, |(krate, _hash)| krate);
    Some(match source.strip_prefix("unittests ") {
        Some(_) => format!("unit tests of {krate}"),
        None => source.to_owned(),
    })
}

/// The number before `label` in a libtest summary such as "ok. 3 passed; 0 failed; ...".
fn count(summary: &str, label: &str) -> Result<usize> {
    let before = summary.split(label).next().context("summary")?;
    let number = before
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .context("count")?;
    Ok(number.parse()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_s_lines_name_the_binaries_they_start() {
        assert_eq!(
            binary_started(
                "     Running tests/attach.rs (target/release/deps/attach-0a1b2c3d4e5f6789)"
            )
            .as_deref(),
            Some("tests/attach.rs")
        );
        assert_eq!(
            binary_started(
                "     Running unittests src/lib.rs (target/release/deps/tracer_model-0a1b2c3d)"
            )
            .as_deref(),
            Some("unit tests of tracer_model")
        );
        assert_eq!(
            binary_started("   Doc-tests posixtrace").as_deref(),
            Some("doc-tests posixtrace")
        );
        assert_eq!(binary_started("   Compiling tracer-user v0.1.0"), None);
    }
}
