//! Installs what building and testing need, only where it is missing, so that a second run
//! takes well under 5 seconds: the nightly toolchain's rust-src (for `-Z build-std`: the BPF
//! object's core, and the arm64 builds' standard library), bpf-linker built against LLVM 22
//! (rustc's LLVM), a C compiler for the workloads and the C analyzers, musl-gcc (the workloads
//! built with musl), the arm64 cross compiler and its glibc (the tracer, the tests and their
//! workloads built for arm64), qemu-system-aarch64 (which boots arm64 kernels with them),
//! pkg-config (the installed library's test), babeltrace2 (which reads the CTF traces
//! `convert` writes, in the tests), Go (whose `go tool pprof` reads the profiles `report
//! --format pprof` writes, in the tests), libc6-dbg (glibc's separate debug information:
//! reports name callers inside libc by line), systemd's systemd-analyze (which verifies
//! the agent's unit, in the tests; it runs without systemd running), elfutils' debuginfod
//! server (which serves a stripped workload's debug file to the reports, in the tests), and a
//! Python virtual
//! environment with OpenTelemetry's `opentelemetry-proto` from PyPI (whose decoder reads the
//! `--otlp` pushes, in the tests: made by `setup` and `test` alone).

use std::{path::Path, time::Instant};

use anyhow::{Context, Result, bail};

use crate::shell::{command, output, run, succeeds};

const LLVM_CONFIG: &str = "/usr/lib/llvm-22/bin/llvm-config";
const LLVM_PACKAGES: [&str; 2] = ["llvm-22-dev", "libpolly-22-dev"];

pub fn ensure_prerequisites() -> Result<()> {
    let start = Instant::now();
    ensure_nightly_rust_src()?;
    ensure_bpf_linker()?;
    // Each program, how it says its version (so that it runs), and its packages.
    let mut missing: Vec<&str> = [
        ("cc", "--version", &["gcc", "libc6-dev"][..]),
        ("musl-gcc", "--version", &["musl-tools"]),
        (
            "aarch64-linux-gnu-gcc",
            "--version",
            &["gcc-aarch64-linux-gnu"],
        ),
        ("qemu-system-aarch64", "--version", &["qemu-system-arm"]),
        ("pkg-config", "--version", &["pkgconf"]),
        ("babeltrace2", "--version", &["babeltrace2"]),
        ("tmux", "-V", &["tmux"]),
        ("go", "version", &["golang-go"]),
        ("systemd-analyze", "--version", &["systemd"]),
        ("debuginfod", "--version", &["debuginfod"]),
    ]
    .into_iter()
    .filter(|(program, version, _)| !succeeds(command(program).arg(version)))
    .flat_map(|(_, _, packages)| packages.iter().copied())
    .collect();
    missing.extend(DATA_PACKAGES.into_iter().filter(|p| !package_installed(p)));
    if !missing.is_empty() {
        apt_install(&missing)?;
    }
    eprintln!(
        "xtask: prerequisites present (checked in {:.1} s)",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Where the tests' Python with `opentelemetry-proto` is, below the workspace.
const OTLP_PYTHON_ENV: &str = "target/otel-venv";

/// The release of `opentelemetry-proto` whose profiles messages the `--otlp` push speaks (the
/// dictionary of stacks at the request's level).
const OTLP_PROTO_RELEASE: &str = "opentelemetry-proto==1.45.2";

/// Makes [`OTLP_PYTHON_ENV`] with [`OTLP_PROTO_RELEASE`] from PyPI, for the tests alone (the
/// other tasks need no network), unless it has it already.
pub fn ensure_otlp_python() -> Result<()> {
    let venv = crate::shell::workspace_root().join(OTLP_PYTHON_ENV);
    let python = venv.join("bin/python");
    let imports = |python: &Path| {
        succeeds(command(python).args([
            "-c",
            "from opentelemetry.proto.profiles.v1development.profiles_pb2 import Stack\n\
             from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2",
        ]))
    };
    if imports(&python) {
        return Ok(());
    }
    // Debian's python3 makes environments only with python3-venv (ensurepip).
    if !succeeds(command("python3").args(["-c", "import ensurepip"])) {
        apt_install(&["python3-venv"])?;
    }
    run(command("python3").args(["-m", "venv"]).arg(&venv))
        .context("cannot make the tests' Python environment")?;
    run(command(venv.join("bin/pip")).args(["install", "--quiet", OTLP_PROTO_RELEASE]))
        .context("cannot install opentelemetry-proto from PyPI into the tests' Python")?;
    if !imports(&python) {
        bail!(
            "opentelemetry-proto from PyPI has no profiles v1development: the --otlp tests need it"
        );
    }
    Ok(())
}

/// Points git at the project's hooks (.githooks: a reminder of the full kernel matrix when a
/// commit changes the BPF side), in a clone whose hooks git has not been pointed elsewhere.
pub fn use_the_project_hooks() -> Result<()> {
    let root = crate::shell::workspace_root();
    if !root.join(".git").exists() {
        return Ok(());
    }
    let hooks =
        output(
            command("git")
                .arg("-C")
                .arg(&root)
                .args(["config", "--get", "core.hooksPath"]),
        );
    if hooks.is_err() {
        run(command("git")
            .arg("-C")
            .arg(&root)
            .args(["config", "core.hooksPath", ".githooks"]))?;
        eprintln!("xtask: git runs the project's hooks (.githooks)");
    }
    Ok(())
}

/// Packages of files, not programs: glibc's debug information, which the tests of callers
/// inside libc read, and the arm64 glibc that the cross compiler builds against.
const DATA_PACKAGES: [&str; 2] = ["libc6-dbg", "libc6-dev-arm64-cross"];

/// Whether dpkg has `package` installed (never, where there is no dpkg).
fn package_installed(package: &str) -> bool {
    output(command("dpkg-query").args(["-W", "-f=${db:Status-Status}", package]))
        .is_ok_and(|run| run.stdout == b"installed")
}

fn ensure_nightly_rust_src() -> Result<()> {
    if !succeeds(command("rustup").args(["run", "nightly", "rustc", "--version"])) {
        eprintln!("xtask: installing the nightly toolchain");
        run(command("rustup").args(["toolchain", "install", "nightly", "--profile", "minimal"]))?;
    }
    let sysroot =
        output(command("rustup").args(["run", "nightly", "rustc", "--print", "sysroot"]))?;
    let sysroot = String::from_utf8(sysroot.stdout)?;
    let core = Path::new(sysroot.trim()).join("lib/rustlib/src/rust/library/core/Cargo.toml");
    if !core.exists() {
        eprintln!("xtask: adding rust-src to the nightly toolchain");
        run(command("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))?;
    }
    Ok(())
}

fn ensure_bpf_linker() -> Result<()> {
    if succeeds(command("bpf-linker").arg("--version")) {
        return Ok(());
    }
    if !Path::new(LLVM_CONFIG).exists() {
        apt_install(&LLVM_PACKAGES)?;
    }
    eprintln!("xtask: building bpf-linker against LLVM 22 (about a minute)");
    let path = format!(
        "/usr/lib/llvm-22/bin:{}",
        std::env::var("PATH").unwrap_or_default()
    );
    run(command("cargo")
        .args([
            "install",
            "bpf-linker",
            "--no-default-features",
            "--features",
            "llvm-22",
        ])
        .env("PATH", path))
    .context("cannot build bpf-linker")
}

pub fn apt_install(packages: &[&str]) -> Result<()> {
    if !succeeds(command("apt-get").arg("--version")) {
        bail!(
            "{} missing and no apt-get here: install them by hand",
            packages.join(" ")
        );
    }
    eprintln!("xtask: installing {}", packages.join(" "));
    run(command("apt-get").arg("update").arg("-qq"))
        .context("apt-get update failed (installing packages needs root)")?;
    // Waits for another apt (a developer's, unattended upgrades) rather than fail at once.
    run(command("apt-get")
        .args(["install", "-y", "-qq", "-o", "DPkg::Lock::Timeout=600"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}
