//! Running commands from the workspace root, and the paths xtask shares.

use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use anyhow::{Context, Result, bail};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

/// A command run from the workspace root, with cargo's bin directory on PATH (where
/// `cargo install` puts bpf-linker), and without the LD_LIBRARY_PATH that `cargo run` gives
/// xtask: it sends every dynamic loader through the toolchain's directories first, which
/// benchmarks would count (each start of a program under `--follow` steps through it).
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    command
        .current_dir(workspace_root())
        .env("PATH", path_with_cargo_bin())
        .env_remove("LD_LIBRARY_PATH");
    command
}

fn path_with_cargo_bin() -> std::ffi::OsString {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let mut dirs: Vec<PathBuf> = cargo_home.map(|h| h.join("bin")).into_iter().collect();
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).expect("PATH entries")
}

/// Runs `command` with its output shown; fails unless it exits 0.
pub fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot start {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}

/// Runs `command` capturing its output; fails unless it exits 0.
pub fn output(command: &mut Command) -> Result<Output> {
    let output = command
        .output()
        .with_context(|| format!("cannot start {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        );
    }
    Ok(output)
}

/// Whether `command` runs and exits 0 (its output discarded).
pub fn succeeds(command: &mut Command) -> bool {
    command.output().is_ok_and(|o| o.status.success())
}

/// Builds the release tracer, with its BPF object, and the C analyzer library beside it;
/// returns the tracer's path. Every package of the workspace is built, as `cargo test
/// --release` builds them: cargo enables a dependency's features by the packages a build
/// selects, and a build of fewer would build the dependencies they share again, with other
/// features, each time the two alternate (the tests, the stress trials, the guests).
pub fn build_tracer() -> Result<PathBuf> {
    run(command("cargo").args(["build", "--release"]))?;
    Ok(workspace_root().join("target/release/thrtrace-bpf"))
}

/// Compiles `tests/workloads/NAME.c` into `target/workloads/NAME`.
pub fn compile_workload(name: &str) -> Result<PathBuf> {
    let source = workspace_root()
        .join("tests/workloads")
        .join(format!("{name}.c"));
    compile(command("cc").args(["-O2", "-pthread"]), &source, name)
}

/// Compiles `tests/workloads/NAME.c` into the shared object `target/workloads/libNAME.so`, to
/// preload.
pub fn compile_preload(name: &str) -> Result<PathBuf> {
    let source = workspace_root()
        .join("tests/workloads")
        .join(format!("{name}.c"));
    compile(
        command("cc").args(["-O2", "-shared", "-fPIC"]),
        &source,
        &format!("lib{name}.so"),
    )
}

/// Compiles `xtask/workloads/NAME.rs`, a Rust program of the bench's, with the toolchain's rustc
/// into `target/workloads/NAME`.
pub fn compile_rust_workload(name: &str) -> Result<PathBuf> {
    let source = workspace_root()
        .join("xtask/workloads")
        .join(format!("{name}.rs"));
    compile(
        command("rustc").args(["-O", "--edition", "2024"]),
        &source,
        name,
    )
}

/// Compiles `source` with `compiler` into `target/workloads/NAME`.
fn compile(compiler: &mut Command, source: &Path, name: &str) -> Result<PathBuf> {
    let out_dir = workspace_root().join("target/workloads");
    std::fs::create_dir_all(&out_dir)?;
    let binary = out_dir.join(name);
    run(compiler.arg("-o").arg(&binary).arg(source))?;
    Ok(binary)
}

/// Fails with how to run as root unless we are root: BPF needs it.
pub fn require_root(task: &str) -> Result<()> {
    if !is_root() {
        bail!("tracing needs root: run `sudo -E env PATH=\"$PATH\" cargo xtask {task}`");
    }
    Ok(())
}

/// Whether xtask runs with effective user id 0.
pub fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().nth(1));
    euid == Some("0")
}
