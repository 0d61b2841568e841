//! `cargo xtask dist`: the release, for hosts that have none of the build's prerequisites.
//! `target/dist/` gets an archive (`thrtrace-bpf-VERSION-x86_64-linux.tar.gz`) and a Debian
//! package (`thrtrace-bpf_VERSION_amd64.deb`) of the same files, laid out as
//! `cargo xtask install` lays them out: the tracer, its man pages and completions, and the C
//! analyzer library with trace.h and posixtrace.pc.
//!
//! The tracer is one static executable (glibc's static-pie): it runs on any x86-64 Linux
//! userland, whatever its C library. Static glibc rather than musl keeps glibc's allocator and
//! its memcpy, chosen at start-up for the CPU, which the consumer's speed rests on (`cargo
//! xtask bench` compares the two builds run by run). The analyzer library is loaded into the
//! analyzer's process, so it cannot be static: it is linked against Debian 11's glibc 2.31
//! (as `glibcs` fetches it), so that it loads with glibc [`NEWEST_GLIBC_NEEDED`] and later
//! (Debian 11, Ubuntu 20.04, RHEL 9), not only with the build host's.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, bail};

use crate::{
    glibcs::{self, OTHER_GLIBCS},
    install::{self, VERSION},
    setup,
    shell::{command, output, run, workspace_root},
};

/// The glibc whose libraries the analyzer library is linked against.
const LINKED_GLIBC: &str = "2.31";
/// The newest glibc symbol version the analyzer library may need. Linked against 2.31, Rust's
/// standard library asks for gettid (2.30) and a few older functions weakly, but the linker
/// still records their versions as needs the loader checks.
const NEWEST_GLIBC_NEEDED: (u32, u32) = (2, 30);
/// The host triple, named so that the static build's flags do not reach build scripts.
const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// What `dist` made.
pub struct Release {
    /// The static tracer, as packed.
    pub tracer: PathBuf,
    pub archive: PathBuf,
    pub deb: PathBuf,
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
pub fn make_release() -> Result<Release> {
    setup::ensure_prerequisites()?;
    glibcs::ensure_sysroots()?;
    let build_dir = workspace_root().join("target/dist-build");
    let tracer = build_static_tracer(&build_dir)?;
    let library = build_analyzer_library(&build_dir)?;
    check_glibc_versions(&library)?;

    let dist = workspace_root().join("target/dist");
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
    fs::create_dir_all(deb_root.join("DEBIAN"))?;
    fs::write(deb_root.join("DEBIAN/control"), control(&deb_root)?)?;
    // dpkg runs ldconfig once the package's files are in place or gone.
    fs::write(
        deb_root.join("DEBIAN/triggers"),
        "activate-noawait ldconfig\n",
    )?;
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

/// libposixtrace.so, linked against the sysroot of glibc [`LINKED_GLIBC`].
fn build_analyzer_library(build_dir: &Path) -> Result<PathBuf> {
    let glibc = OTHER_GLIBCS
        .iter()
        .find(|g| g.version == LINKED_GLIBC)
        .context("no sysroot of the glibc the analyzer library is linked against")?;
    let sysroot = glibc.sysroot();
    let libraries = sysroot.join("usr/lib/x86_64-linux-gnu");
    run(command("cargo")
        .args([
            "rustc",
            "--release",
            "--package",
            "posixtrace",
            "--lib",
            "--",
        ])
        .arg(format!("-Clink-arg=--sysroot={}", sysroot.display()))
        // The compiler driver's own search path names the host's crt files first.
        .arg(format!("-Clink-arg=-B{}/", libraries.display()))
        .arg(format!("-Clink-arg=-L{}", libraries.display()))
        .env("CARGO_TARGET_DIR", build_dir))?;
    Ok(build_dir.join("release/libposixtrace.so"))
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
