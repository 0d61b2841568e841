//! A glibc 2.31 sysroot (Debian 11's libc6, libc6-dev, linux-libc-dev, and the libgcc_s that
//! its pthread_cancel loads) in
//! `target/glibc-2.31`, so that the tests can build and trace workloads of the
//! `libpthread.so.0` era, fetched as `debian` fetches any other release's packages.

use std::{
    fs,
    os::unix::fs::symlink,
    path::{Component, Path, PathBuf},
};

use anyhow::{Context, Result};

use crate::{debian::Suite, shell::workspace_root};

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
    Suite::open(SUITE, &work.join("apt"))
        .context("cannot read the package lists of Debian 11")?
        .unpack(&PACKAGES, &work.join("root"))
        .context("cannot fetch Debian 11's glibc")?;
    relativize_symlinks(&work.join("root"), &work.join("root"))?;
    let _ = fs::remove_dir_all(&sysroot);
    fs::rename(work.join("root"), &sysroot)?;
    fs::remove_dir_all(&work)?;
    Ok(())
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
