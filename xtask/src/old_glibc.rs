//! A glibc 2.31 sysroot (Debian 11's libc6, libc6-dev, linux-libc-dev, and the libgcc_s that
//! its pthread_cancel loads) in
//! `target/glibc-2.31`, so that the tests can build and trace workloads of the
//! `libpthread.so.0` era. The packages come from the Debian mirror apt already uses, through an
//! apt configuration of their own: the machine's sources and package lists are left alone.

use std::{
    fs,
    os::unix::fs::symlink,
    path::{Component, Path, PathBuf},
};

use anyhow::{Context, Result};

use crate::shell::{command, run, workspace_root};

/// The Debian release whose glibc (2.31) still has a separate libpthread.so.0.
const SUITE: &str = "bullseye";
const PACKAGES: [&str; 4] = ["libc6", "libc6-dev", "linux-libc-dev", "libgcc-s1"];

/// Where the sysroot is; the tests' build script looks there.
pub fn sysroot() -> PathBuf {
    workspace_root().join("target/glibc-2.31")
}

/// Downloads and unpacks the sysroot unless it is already complete.
pub fn ensure_sysroot() -> Result<()> {
    let sysroot = sysroot();
    if sysroot
        .join("lib/x86_64-linux-gnu/libpthread.so.0")
        .exists()
    {
        return Ok(());
    }
    eprintln!("xtask: fetching glibc 2.31 for the libpthread.so.0 tests");
    let work = workspace_root().join("target/glibc-2.31.partial");
    let _ = fs::remove_dir_all(&work);
    for dir in ["lists/partial", "cache/archives/partial", "debs", "root"] {
        fs::create_dir_all(work.join(dir))?;
    }
    fs::write(
        work.join("old.sources"),
        format!(
            "Types: deb\nURIs: {}\nSuites: {SUITE}\nComponents: main\n\
             Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
            debian_mirror()?
        ),
    )?;
    let options = [
        "Dir::Etc::SourceList=/dev/null".to_owned(),
        format!("Dir::Etc::SourceParts={}", work.display()),
        format!("Dir::State::Lists={}", work.join("lists").display()),
        format!("Dir::Cache={}", work.join("cache").display()),
        "Dir::State::Status=/dev/null".to_owned(),
        "APT::Architecture=amd64".to_owned(),
        "Debug::NoLocking=1".to_owned(),
        // Downloads into our own directory, which apt's sandbox user may not write.
        "APT::Sandbox::User=root".to_owned(),
    ];
    let apt = |args: &[&str]| {
        let mut apt = command("apt-get");
        for option in &options {
            apt.args(["-o", option]);
        }
        apt.arg("-qq").args(args).current_dir(work.join("debs"));
        run(&mut apt)
    };
    apt(&["update"]).context("cannot read the package lists of Debian 11")?;
    apt(&["download"]
        .iter()
        .chain(&PACKAGES)
        .copied()
        .collect::<Vec<_>>())
    .context("cannot download Debian 11's glibc")?;
    for deb in fs::read_dir(work.join("debs"))? {
        run(command("dpkg-deb")
            .arg("-x")
            .arg(deb?.path())
            .arg(work.join("root")))?;
    }
    relativize_symlinks(&work.join("root"), &work.join("root"))?;
    let _ = fs::remove_dir_all(&sysroot);
    fs::rename(work.join("root"), &sysroot)?;
    fs::remove_dir_all(&work)?;
    Ok(())
}

/// The URI of the Debian archive in apt's own sources.
fn debian_mirror() -> Result<String> {
    let deb822 = fs::read_to_string("/etc/apt/sources.list.d/debian.sources").unwrap_or_default();
    let one_line = fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    deb822
        .lines()
        .find_map(|line| line.strip_prefix("URIs:"))
        .and_then(|uris| uris.split_whitespace().next())
        .or_else(|| {
            one_line
                .lines()
                .find_map(|line| line.strip_prefix("deb "))
                .and_then(|rest| rest.split_whitespace().find(|w| w.contains("://")))
        })
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no Debian archive in apt's sources"))
}

/// Rewrites the absolute symlinks under `dir` of the unpacked package tree `root`
/// (`libpthread.so -> /lib/x86_64-linux-gnu/libpthread.so.0`) to point inside the tree, not
/// at the host's files.
fn relativize_symlinks(root: &Path, dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let metadata = fs::symlink_metadata(&path)?;
        if metadata.is_dir() {
            relativize_symlinks(root, &path)?;
            continue;
        }
        if !metadata.is_symlink() {
            continue;
        }
        let target = fs::read_link(&path)?;
        if !target.is_absolute() {
            continue;
        }
        let depth = path
            .parent()
            .and_then(|parent| parent.strip_prefix(root).ok())
            .context("a symlink outside the tree")?
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .count();
        let mut relative: PathBuf = std::iter::repeat_n("..", depth).collect();
        relative.push(target.strip_prefix("/")?);
        fs::remove_file(&path)?;
        symlink(&relative, &path)?;
    }
    Ok(())
}
