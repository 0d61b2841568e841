//! `cargo xtask dist`: the release, for hosts that have none of the build's prerequisites, for
//! each architecture of [`Arch::ALL`]. `target/dist/` gets, per architecture, an archive
//! (`thrtrace-bpf-VERSION-x86_64-linux.tar.gz`, `…-aarch64-linux.tar.gz`) and a Debian package
//! (`thrtrace-bpf_VERSION_amd64.deb`, `…_arm64.deb`) of the same files, laid out as
//! `cargo xtask install` lays them out: the tracer, its man pages and completions, and the C
//! analyzer library with trace.h and posixtrace.pc. The package also has the contention
//! agent, as Debian ships a service: its systemd unit, its configuration a conffile, installed
//! disabled. The archive has no agent: a unit names its tracer by an absolute path, which an
//! archive unpacked anywhere cannot know.
//!
//! The tracer is one static executable (glibc's static-pie on x86-64; on aarch64 at a fixed
//! address, as Rust's aarch64 target links no static-pie): it runs on any Linux userland of its
//! architecture, whatever its C library. Static glibc rather than musl keeps glibc's
//! allocator and its memcpy, chosen at start-up for the CPU, which the consumer's speed rests
//! on (`cargo xtask bench` compares the two builds run by run). The analyzer library is loaded
//! into the analyzer's process, so it cannot be static: it is linked by cargo-zigbuild against
//! zig's stubs of glibc 2.17's symbols, so that it loads with glibc 2.17 and later (RHEL 7 on;
//! 2.17 is also aarch64's first glibc), not only with the build host's. Linked against a real
//! older glibc (Debian 11's 2.31), Rust's standard library still needs the versions of the
//! newer functions it looks up weakly, and the loader refuses a library whose version needs it
//! does not define; zig's stubs have none of them. cargo-zigbuild and zig come from PyPI
//! (`ziglang`), installed into target/ by pip.
//!
//! Another architecture's build needs its Rust standard library: rustup's where installed
//! (`rustup target add`), else nightly's, built from its sources (`-Z build-std`).

use std::{
    ffi::OsStr,
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::{
    arch::Arch,
    install::{self, VERSION},
    setup,
    shell::{command, output, run, succeeds, workspace_root},
};

/// The oldest glibc the analyzer library loads with: the newest symbol version it may need.
const NEWEST_GLIBC_NEEDED: (u32, u32) = (2, 17);
/// What links the analyzer library, pinned: PyPI's packages of cargo-zigbuild and of zig.
const ZIGBUILD_PACKAGES: [&str; 2] = ["cargo-zigbuild==0.24.1", "ziglang==0.17.1"];
/// Where under target/ the static tracer is built (its flags are its own: a build directory of
/// its own keeps others from rebuilding what they share).
pub const STATIC_BUILD: &str = "dist-build";

/// One architecture's tracer and analyzer library, built and checked.
struct Build {
    arch: Arch,
    tracer: PathBuf,
    library: PathBuf,
    /// How long building them took: each architecture's share of a CI run.
    took: Duration,
}

/// What `dist` made for one architecture.
struct Release {
    arch: Arch,
    /// The static tracer, as packed.
    tracer: PathBuf,
    archive: PathBuf,
    deb: PathBuf,
    took: Duration,
}

pub fn run_dist() -> Result<()> {
    for release in make_releases()? {
        eprintln!(
            "xtask: thrtrace-bpf {VERSION} for {} (built in {} s): {} (a static executable), \
             {} and {}",
            release.arch.name(),
            release.took.as_secs(),
            release.tracer.display(),
            release.archive.display(),
            release.deb.display()
        );
    }
    Ok(())
}

/// Builds every architecture's release and packs each into target/dist/.
fn make_releases() -> Result<Vec<Release>> {
    setup::ensure_prerequisites()?;
    let target = workspace_root().join("target");
    let builds = Arch::ALL
        .into_iter()
        .map(|arch| build(arch, &target))
        .collect::<Result<Vec<_>>>()?;
    // Only the host's tracer runs here: it writes the man pages and completions of every
    // architecture's, which are the same.
    let host_tracer = &builds
        .iter()
        .find(|build| build.arch == Arch::HOST)
        .expect("the host is one of the architectures")
        .tracer;
    let dist = target.join("dist");
    let _ = fs::remove_dir_all(&dist);
    builds
        .iter()
        .map(|build| pack(build, host_tracer, &dist))
        .collect()
}

/// Builds `arch`'s static tracer and analyzer library, and checks them.
fn build(arch: Arch, target: &Path) -> Result<Build> {
    let started = Instant::now();
    let tracer = build_static_tracer(&target.join(STATIC_BUILD), arch)?;
    let library = build_analyzer_library(&target.join("dist-library"), arch)?;
    check_glibc_versions(&library, arch)?;
    Ok(Build {
        arch,
        tracer,
        library,
        took: started.elapsed(),
    })
}

/// Packs `build` into an archive and a Debian package in `dist`; `host_tracer` writes the man
/// pages and completions.
fn pack(build: &Build, host_tracer: &Path, dist: &Path) -> Result<Release> {
    let name = format!("thrtrace-bpf-{VERSION}-{}-linux", build.arch.name());
    let tree = dist.join(&name);
    let lay_out = |dir: &Path, prefix: &str| {
        install::lay_out(&build.tracer, host_tracer, &build.library, dir, prefix)
    };
    // Relocatable: wherever the tree is unpacked, posixtrace.pc names it.
    lay_out(&tree, "${pcfiledir}/../..")?;
    let archive = dist.join(format!("{name}.tar.gz"));
    run(command("tar")
        .arg("-czf")
        .arg(&archive)
        .args(["--owner=0", "--group=0", "-C"])
        .arg(dist)
        .arg(&name))?;

    let deb_root = dist.join("deb");
    lay_out(&deb_root.join("usr"), "/usr")?;
    install::lay_out_agent_unit(
        &deb_root.join("usr"),
        Path::new("/usr/bin"),
        Path::new("/etc"),
    )?;
    install::place_agent_config(&deb_root.join("etc").join(install::AGENT_CONFIG))?;
    let control_dir = deb_root.join("DEBIAN");
    fs::create_dir_all(&control_dir)?;
    // dpkg keeps an administrator's edits of a conffile on upgrade, and removes it on purge.
    fs::write(
        control_dir.join("conffiles"),
        format!("/etc/{}\n", install::AGENT_CONFIG),
    )?;
    // The maintainer scripts reload systemd, restart a running agent on upgrade and stop it
    // before removal; none enables or starts it.
    for script in ["postinst", "prerm", "postrm"] {
        let installed = control_dir.join(script);
        fs::copy(
            workspace_root().join("dist/debian").join(script),
            &installed,
        )?;
        fs::set_permissions(&installed, fs::Permissions::from_mode(0o755))?;
    }
    fs::write(control_dir.join("control"), control(&deb_root, build.arch)?)?;
    // dpkg runs ldconfig once the package's files are in place or gone.
    fs::write(control_dir.join("triggers"), "activate-noawait ldconfig\n")?;
    let deb = dist.join(format!(
        "thrtrace-bpf_{VERSION}_{}.deb",
        build.arch.debian()
    ));
    run(command("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&deb_root)
        .arg(&deb))?;
    fs::remove_dir_all(&deb_root)?;
    Ok(Release {
        arch: build.arch,
        tracer: tree.join("bin/thrtrace-bpf"),
        archive,
        deb,
        took: build.took,
    })
}

/// The tracer for `arch` as one static executable, built in `build_dir`.
pub fn build_static_tracer(build_dir: &Path, arch: Arch) -> Result<PathBuf> {
    // The target is named even for the host, so that the static flags reach only the tracer,
    // not the build scripts.
    run(cargo_for(arch, "cargo", "build")?
        .args(["--release", "--package", "tracer-user", "--target"])
        .arg(arch.rust_target())
        .env("CARGO_TARGET_DIR", build_dir)
        .env("RUSTFLAGS", "-C target-feature=+crt-static"))?;
    let tracer = build_dir
        .join(arch.rust_target())
        .join("release/thrtrace-bpf");
    let headers = elf_report(&tracer, arch, &["--program-headers", "--dynamic"])?;
    if headers.contains("INTERP") || headers.contains("(NEEDED)") {
        bail!(
            "{} is not static: it names a loader or libraries",
            tracer.display()
        );
    }
    Ok(tracer)
}

/// `program subcommand` (cargo, or cargo-zigbuild) building for `arch`: with the default
/// toolchain where rustup has `arch`'s standard library, else with nightly, which builds it
/// from its sources. `-Z build-std` goes on the command line, not into the environment
/// (CARGO_UNSTABLE_BUILD_STD): the tracer's build script runs cargo again for the BPF programs,
/// and that cargo inherits the environment.
fn cargo_for(arch: Arch, program: impl AsRef<OsStr>, subcommand: &str) -> Result<Command> {
    let installed = output(command("rustup").args(["target", "list", "--installed"]))?;
    let installed = String::from_utf8_lossy(&installed.stdout);
    if installed
        .lines()
        .any(|line| line.trim() == arch.rust_target())
    {
        let mut cargo = command(program);
        cargo.arg(subcommand);
        return Ok(cargo);
    }
    let mut cargo = command("rustup");
    cargo
        .args(["run", "nightly"])
        .arg(program)
        .args([subcommand, "-Z", "build-std"])
        // `cargo xtask` names the default toolchain's cargo in CARGO, which cargo-zigbuild would
        // run rather than nightly's.
        .env_remove("CARGO");
    Ok(cargo)
}

/// `readelf --file-header OPTIONS`'s report of `file`, once it names `arch`'s machine.
fn elf_report(file: &Path, arch: Arch, options: &[&str]) -> Result<String> {
    let report = output(
        command("readelf")
            .arg("--file-header")
            .args(options)
            .arg(file),
    )?;
    let report = String::from_utf8_lossy(&report.stdout).into_owned();
    let machine = report
        .lines()
        .find_map(|line| line.trim().strip_prefix("Machine:"))
        .map(str::trim);
    if machine != Some(arch.elf_machine()) {
        bail!(
            "{} is built for {}, not {}",
            file.display(),
            machine.unwrap_or("no machine readelf names"),
            arch.name()
        );
    }
    Ok(report)
}

/// libposixtrace.so for `arch`, linked against zig's glibc 2.17 stubs, built in `build_dir`.
fn build_analyzer_library(build_dir: &Path, arch: Arch) -> Result<PathBuf> {
    let tools = ensure_zigbuild()?;
    let glibc = format!("{}.{}", NEWEST_GLIBC_NEEDED.0, NEWEST_GLIBC_NEEDED.1);
    run(
        cargo_for(arch, tools.join("bin/cargo-zigbuild"), "zigbuild")?
            .args(["--release", "--package", "posixtrace", "--lib", "--target"])
            .arg(format!("{}.{glibc}", arch.rust_target()))
            .env("CARGO_TARGET_DIR", build_dir)
            // cargo-zigbuild runs zig as `python3 -m ziglang`, from where pip put it.
            .env("PYTHONPATH", &tools),
    )?;
    Ok(build_dir
        .join(arch.rust_target())
        .join("release/libposixtrace.so"))
}

/// cargo-zigbuild and zig, installed by pip into target/dist-tools unless there; the directory.
fn ensure_zigbuild() -> Result<PathBuf> {
    let tools = workspace_root().join("target/dist-tools");
    if tools.join("bin/cargo-zigbuild").exists() {
        return Ok(tools);
    }
    if !succeeds(command("python3").args(["-m", "pip", "--version"])) {
        setup::apt_install(&["python3-pip"])?;
    }
    eprintln!("xtask: installing cargo-zigbuild and zig (PyPI) into target/dist-tools");
    let partial = tools.with_extension("partial");
    let _ = fs::remove_dir_all(&partial);
    run(command("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--root-user-action=ignore",
            "--target",
        ])
        .arg(&partial)
        .args(ZIGBUILD_PACKAGES))
    .context("cannot install cargo-zigbuild and zig from PyPI")?;
    fs::rename(&partial, &tools)?;
    Ok(tools)
}

/// Fails if `library` needs a glibc symbol version newer than [`NEWEST_GLIBC_NEEDED`]: the
/// dynamic loader refuses a library one of whose version needs (`readelf -V`, those not
/// flagged weak) the process's glibc does not define; or if it is not built for `arch`.
fn check_glibc_versions(library: &Path, arch: Arch) -> Result<()> {
    let needs = elf_report(library, arch, &["--version-info"])?;
    let too_new: Vec<String> = needs
        .lines()
        .filter(|line| !line.contains("Flags: WEAK"))
        .filter_map(|line| {
            let version = line
                .split("Name: GLIBC_")
                .nth(1)?
                .split_whitespace()
                .next()?;
            let mut parts = version.split('.').map(|n| n.parse::<u32>().unwrap_or(0));
            let needed = (parts.next()?, parts.next().unwrap_or(0));
            (needed > NEWEST_GLIBC_NEEDED).then(|| format!("GLIBC_{version}"))
        })
        .collect();
    if !too_new.is_empty() {
        bail!(
            "{} needs glibc {} (newer than {}.{})",
            library.display(),
            too_new.join(", "),
            NEWEST_GLIBC_NEEDED.0,
            NEWEST_GLIBC_NEEDED.1
        );
    }
    Ok(())
}

/// The package's control file for `arch`; its installed size from the files under `root`.
fn control(root: &Path, arch: Arch) -> Result<String> {
    let kib = output(command("du").args(["-sk", "--exclude=DEBIAN"]).arg(root))?;
    let kib = String::from_utf8_lossy(&kib.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("0")
        .to_owned();
    let architecture = arch.debian();
    Ok(format!(
        "Package: thrtrace-bpf\n\
         Version: {VERSION}\n\
         Architecture: {architecture}\n\
         Maintainer: thrtrace-bpf maintainers <maintainers@users.noreply.a-seed-43e896a6.example>\n\
         Installed-Size: {kib}\n\
         Depends: libc6 (>= {}.{})\n\
         Section: devel\n\
         Priority: optional\n\
         Description: tracer for thread and synchronization events (BPF uprobes)\n \
         thrtrace-bpf attaches to running processes without restarting them and records\n \
         every pthread call they make, in the format of UnixWare's thread_trace(4) or as\n \
         POSIX trace logs; libposixtrace reads the logs from C (<trace.h>).\n",
        NEWEST_GLIBC_NEEDED.0, NEWEST_GLIBC_NEEDED.1
    ))
}
