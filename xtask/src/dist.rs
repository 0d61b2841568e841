//! `cargo xtask dist`: the release, for hosts that have none of the build's prerequisites.
//! `target/dist/` gets an archive (`thrtrace-bpf-VERSION-x86_64-linux.tar.gz`) and a Debian
//! package (`thrtrace-bpf_VERSION_amd64.deb`) of the same files, laid out as
//! `cargo xtask install` lays them out: the tracer, its man pages and completions, and the C
//! analyzer library with trace.h and posixtrace.pc. The package also has the contention
//! agent, as Debian ships a service: its systemd unit, its configuration a conffile, installed
//! disabled. The archive has no agent: a unit names its tracer by an absolute path, which an
//! archive unpacked anywhere cannot know.
//!
//! The tracer is one static executable (glibc's static-pie): it runs on any x86-64 Linux
//! userland, whatever its C library. Static glibc rather than musl keeps glibc's allocator and
//! its memcpy, chosen at start-up for the CPU, which the consumer's speed rests on (`cargo
//! xtask bench` compares the two builds run by run). The analyzer library is loaded into the
//! analyzer's process, so it cannot be static: it is linked by cargo-zigbuild against zig's
//! stubs of glibc 2.17's symbols, so that it loads with glibc 2.17 and later (RHEL 7 on), not
//! only with the build host's. Linked against a real older glibc (Debian 11's 2.31), Rust's
//! standard library still needs the versions of the newer functions it looks up weakly, and
//! the loader refuses a library whose version needs it does not define; zig's stubs have none
//! of them. cargo-zigbuild and zig come from PyPI (`ziglang`), installed into target/ by pip.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, bail};

use crate::{
    install::{self, VERSION},
    setup,
    shell::{command, output, run, succeeds, workspace_root},
};

/// The oldest glibc the analyzer library loads with: the newest symbol version it may need.
const NEWEST_GLIBC_NEEDED: (u32, u32) = (2, 17);
/// What links the analyzer library, pinned: PyPI's packages of cargo-zigbuild and of zig.
const ZIGBUILD_PACKAGES: [&str; 2] = ["cargo-zigbuild==0.24.1", "ziglang==0.17.1"];
/// The host triple, named so that the static build's flags do not reach build scripts.
const TRIPLE: &str = "x86_64-unknown-linux-gnu";
/// Where under target/ the static tracer is built (its flags are its own: a build directory of
/// its own keeps others from rebuilding what they share).
pub const STATIC_BUILD: &str = "dist-build";

/// What `dist` made.
struct Release {
    /// The static tracer, as packed.
    tracer: PathBuf,
    archive: PathBuf,
    deb: PathBuf,
}

pub fn run_dist() -> Result<()> {
    let release = make_release()?;
    eprintln!(
        "xtask: thrtrace-bpf {VERSION}: {} (a static executable), {} and {}",
        release.tracer.display(),
        release.archive.display(),
        release.deb.display()
    );
    Ok(())
}

/// Builds and packs the release into target/dist/.
fn make_release() -> Result<Release> {
    setup::ensure_prerequisites()?;
    let target = workspace_root().join("target");
    let tracer = build_static_tracer(&target.join(STATIC_BUILD))?;
    let library = build_analyzer_library(&target.join("dist-library"))?;
    check_glibc_versions(&library)?;

    let dist = target.join("dist");
    let _ = fs::remove_dir_all(&dist);
    let name = format!("thrtrace-bpf-{VERSION}-x86_64-linux");
    let tree = dist.join(&name);
    // Relocatable: wherever the tree is unpacked, posixtrace.pc names it.
    install::lay_out(&tracer, &library, &tree, "${pcfiledir}/../..")?;
    let archive = dist.join(format!("{name}.tar.gz"));
    run(command("tar")
        .arg("-czf")
        .arg(&archive)
        .args(["--owner=0", "--group=0", "-C"])
        .arg(&dist)
        .arg(&name))?;

    let deb_root = dist.join("deb");
    install::lay_out(&tracer, &library, &deb_root.join("usr"), "/usr")?;
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
    fs::write(control_dir.join("control"), control(&deb_root)?)?;
    // dpkg runs ldconfig once the package's files are in place or gone.
    fs::write(control_dir.join("triggers"), "activate-noawait ldconfig\n")?;
    let deb = dist.join(format!("thrtrace-bpf_{VERSION}_amd64.deb"));
    run(command("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&deb_root)
        .arg(&deb))?;
    fs::remove_dir_all(&deb_root)?;
    Ok(Release {
        tracer: tree.join("bin/thrtrace-bpf"),
        archive,
        deb,
    })
}

/// The tracer as one static-pie executable, built in `build_dir`.
pub fn build_static_tracer(build_dir: &Path) -> Result<PathBuf> {
    run(command("cargo")
        .args([
            "build",
            "--release",
            "--package",
            "tracer-user",
            "--target",
            TRIPLE,
        ])
        .env("CARGO_TARGET_DIR", build_dir)
        .env("RUSTFLAGS", "-C target-feature=+crt-static"))?;
    let tracer = build_dir.join(TRIPLE).join("release/thrtrace-bpf");
    let headers = output(
        command("readelf")
            .args(["--program-headers", "--dynamic"])
            .arg(&tracer),
    )?;
    let headers = String::from_utf8_lossy(&headers.stdout);
    if headers.contains("INTERP") || headers.contains("(NEEDED)") {
        bail!(
            "{} is not static: it names a loader or libraries",
            tracer.display()
        );
    }
    Ok(tracer)
}

/// libposixtrace.so, linked against zig's glibc 2.17 stubs, built in `build_dir`.
fn build_analyzer_library(build_dir: &Path) -> Result<PathBuf> {
    let tools = ensure_zigbuild()?;
    let glibc = format!("{}.{}", NEWEST_GLIBC_NEEDED.0, NEWEST_GLIBC_NEEDED.1);
    run(command(tools.join("bin/cargo-zigbuild"))
        .args(["zigbuild", "--release", "--package", "posixtrace", "--lib"])
        .arg("--target")
        .arg(format!("{TRIPLE}.{glibc}"))
        .env("CARGO_TARGET_DIR", build_dir)
        // cargo-zigbuild runs zig as `python3 -m ziglang`, from where pip put it.
        .env("PYTHONPATH", &tools))?;
    Ok(build_dir.join(TRIPLE).join("release/libposixtrace.so"))
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
/// flagged weak) the process's glibc does not define.
fn check_glibc_versions(library: &Path) -> Result<()> {
    let needs = output(command("readelf").arg("--version-info").arg(library))?;
    let too_new: Vec<String> = String::from_utf8_lossy(&needs.stdout)
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

/// The package's control file; its installed size from the files under `root`.
fn control(root: &Path) -> Result<String> {
    let kib = output(command("du").args(["-sk", "--exclude=DEBIAN"]).arg(root))?;
    let kib = String::from_utf8_lossy(&kib.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("0")
        .to_owned();
    Ok(format!(
        "Package: thrtrace-bpf\n\
         Version: {VERSION}\n\
         Architecture: amd64\n\
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
