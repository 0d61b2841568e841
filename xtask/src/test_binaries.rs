//! The integration-test binaries, built for one architecture as `cargo test` builds them, with
//! the C workloads and the C libraries they were built to find: what a kernel's guest runs.

use std::{
    io::BufRead,
    path::{Path, PathBuf},
    process::Stdio,
};

use anyhow::{Context, Result, bail};

use crate::{
    arch::Arch,
    c_libraries,
    shell::{command, output},
};

/// What [`build`] built.
pub struct TestBinaries {
    /// Each test binary asked for, by name.
    pub tests: Vec<(String, PathBuf)>,
    /// The tests crate's own programs (Rust workloads), which the tests find where they
    /// were built.
    pub programs: Vec<PathBuf>,
    /// The directory of the C workloads.
    pub workloads: PathBuf,
}

/// Builds the test binaries `tests` of thrtrace-tests for `arch`, in release, after fetching
/// the C libraries its workloads are built against (each one's are built only where it is).
/// The host's are those `cargo test --release` builds, every package's, so that nothing is
/// built again with other features (see `build_tracer`). Another architecture's are built with
/// nightly's `-Z build-std`, its standard library from source: rustup has none to install here.
pub fn build(arch: Arch, tests: &[&str]) -> Result<TestBinaries> {
    c_libraries::ensure(arch)?;
    let mut cargo = command("cargo");
    if arch != Arch::HOST {
        cargo.arg("+nightly");
    }
    cargo.args(["test", "--release", "--no-run", "--message-format=json"]);
    if arch != Arch::HOST {
        cargo.args(["-Z", "build-std", "--target", arch.rust_target()]);
        cargo.args(["--package", "thrtrace-tests"]);
        for test in tests {
            cargo.args(["--test", test]);
        }
    }
    let built = output(cargo.stderr(Stdio::inherit()))?;
    let mut binaries = Vec::new();
    let mut programs = Vec::new();
    let mut workloads = None;
    for line in built.stdout.lines() {
        let message: serde_json::Value = serde_json::from_str(&line?)?;
        let target = &message["target"];
        let of_the_tests = message["package_id"]
            .as_str()
            .is_some_and(|id| id.contains("/tests#"));
        if let Some(executable) = message["executable"].as_str()
            && of_the_tests
        {
            let name = target["name"].as_str().context("a target without a name")?;
            if target["kind"][0] == "test" && tests.contains(&name) {
                binaries.push((name.to_owned(), PathBuf::from(executable)));
            } else if target["kind"][0] == "bin" {
                programs.push(PathBuf::from(executable));
            }
        }
        if message["reason"] == "build-script-executed"
            && of_the_tests
            && let Some(out) = message["out_dir"].as_str()
        {
            workloads = Some(Path::new(out).join("workloads"));
        }
    }
    if binaries.len() != tests.len() {
        bail!(
            "cargo built {} of the {} test binaries",
            binaries.len(),
            tests.len()
        );
    }
    Ok(TestBinaries {
        tests: binaries,
        programs,
        workloads: workloads.context("where the tests' workloads were built")?,
    })
}
