//! The whole test suite: formatting, lints (host and BPF crates), unit and integration tests,
//! stress trials, and the tracer on Debian's own kernels under qemu (`kernels`).
//! Tests that need BPF skip with a message when not root, and fail instead under `CI=true`.
//! Ends with one closing line that adds up every test binary: `tests: N passed, N failed, N skipped`.

use std::{
    fs,
    io::{BufRead, BufReader},
    process::Stdio,
};

use anyhow::{Context, Result, bail};

use crate::{
    arch::Arch,
    c_libraries, kernels, setup,
    shell::{build_tracer, command, is_root, run, workspace_root},
    stress,
};

/// Stress trials in the test suite (`cargo xtask stress` runs 100 by default).
const STRESS_TRIALS: usize = 10;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

pub fn run_all() -> Result<()> {
    setup::ensure_prerequisites()?;
    c_libraries::ensure(Arch::HOST)?;
    run(command("cargo").args(["fmt", "--all", "--check"]))?;
    crate::layers::run()?;
    run(command("cargo").args([
        "clippy",
        "--release",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    // The BPF programs once for each architecture they run on: aya-build's `--cfg`, which the
    // real build passes, is not there for a bare clippy.
    for arch in Arch::ALL {
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
            ))?;
    }
    let tracer = build_tracer()?;

    let skip_log = workspace_root().join("target/skipped-tests.log");
    let _ = fs::remove_file(&skip_log);
    let mut cargo_test = command("cargo")
        .args(["test", "--release", "--no-fail-fast"])
        .env("THRTRACE_BIN", tracer)
        .env("THRTRACE_SKIP_LOG", &skip_log)
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start cargo test")?;
    let (mut passed, mut failed) = (0, 0);
    for line in BufReader::new(cargo_test.stdout.take().context("stdout")?).lines() {
        let line = line?;
        println!("{line}");
        if let Some(counts) = line.strip_prefix("test result: ") {
            passed += count(counts, " passed")?;
            failed += count(counts, " failed")?;
        }
    }
    let status = cargo_test.wait()?;
    let mut skipped = fs::read_to_string(&skip_log).map_or(0, |log| log.lines().count());
    // Signals at random moments, after the tests: it checks that no program of the tracer's is
    // left in the kernel, which tracers running beside it would confuse. Counted as one test.
    if is_root() || in_ci() {
        match stress::run(STRESS_TRIALS, None) {
            Ok(()) => passed += 1,
            Err(error) => {
                println!("stress: {error:#}");
                failed += 1;
            }
        }
    } else {
        println!("skipping the stress trials: not running as root (BPF tracing needs root)");
        // Counted like the skipped cargo tests, which pass by returning early.
        skipped += 1;
        passed += 1;
    }
    // Debian's own kernels under qemu, each boot counted as a test. Emulated, they need no
    // privilege here, but installing qemu does.
    if is_root() || in_ci() {
        match kernels::run_matrix(None, None) {
            Ok((boots_passed, boots_failed)) => {
                passed += boots_passed;
                failed += boots_failed;
            }
            Err(error) => {
                println!("kernels: {error:#}");
                failed += 1;
            }
        }
    } else {
        println!("skipping the kernel boots: not running as root (installing qemu needs it)");
        skipped += 1;
        passed += 1;
    }
    println!(
        "\ntests: {} passed, {failed} failed, {skipped} skipped",
        passed - skipped
    );
    if !status.success() || failed > 0 {
        bail!("the tests failed: {status}");
    }
    Ok(())
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
