//! Other Debian releases' glibc, each a sysroot in `target/glibc-VERSION` (its libc6, libc6-dev,
//! linux-libc-dev, and the libgcc_s that its pthread_cancel loads), fetched as `debian` fetches
//! any other release's packages, so that the tests build and trace workloads against the C
//! libraries that production runs: 2.31, of the `libpthread.so.0` era, and the newest
//! stable's. (The host's own glibc, Debian 12's 2.36, is the third.)

use std::{
    fs,
    os::unix::fs::symlink,
    path::{Component, Path, PathBuf},
};

use anyhow::{Context, Result};

use crate::{arch::Arch, debian::Suite, shell::workspace_root};

/// A glibc of another Debian release.
pub struct Glibc {
    /// Its version, which names its sysroot (`target/glibc-VERSION`) and the workloads the
    /// tests build against it (`NAME_glibcVERSION`, without the dot).
    pub version: &'static str,
    /// The Debian release that ships it.
    suite: &'static str,
}

/// Debian 11's glibc 2.31, whose pthread functions are in libpthread.so.0, and Debian 13's 2.41.
pub const OTHER_GLIBCS: [Glibc; 2] = [
    Glibc {
        version: "2.31",
        suite: "bullseye",
    },
    Glibc {
        version: "2.41",
        suite: "trixie",
    },
];

const PACKAGES: [&str; 4] = ["libc6", "libc6-dev", "linux-libc-dev", "libgcc-s1"];

impl Glibc {
    /// Where its sysroot is; the tests' build script looks there.
    pub fn sysroot(&self) -> PathBuf {
        workspace_root().join(format!("target/glibc-{}", self.version))
    }

    /// Downloads and unpacks the sysroot unless it is already there (it is moved into place
    /// only once complete).
    fn ensure(&self) -> Result<()> {
        let sysroot = self.sysroot();
        if sysroot.join("usr/include/pthread.h").exists() {
            return Ok(());
        }
        eprintln!("xtask: fetching glibc {} for the tests", self.version);
        let work = workspace_root().join(format!("target/glibc-{}.partial", self.version));
        let _ = fs::remove_dir_all(&work);
        let suite = Suite::open(self.suite, Arch::X86_64, &work.join("apt"))
            .with_context(|| format!("cannot read the package lists of Debian's {}", self.suite))?;
        suite
            .unpack(&PACKAGES, &work.join("root"))
            .with_context(|| format!("cannot fetch Debian's {} glibc", self.suite))?;
        relativize_symlinks(&work.join("root"), &work.join("root"))?;
        // A merged-/usr release ships its libraries under usr/ and leaves the links from /
        // to base-files, which its libc.so linker script and the loader's path go through.
        for dir in ["lib", "lib64"] {
            let top = work.join("root").join(dir);
            if !top.exists() && work.join("root/usr").join(dir).exists() {
                symlink(Path::new("usr").join(dir), top)?;
            }
        }
        let _ = fs::remove_dir_all(&sysroot);
        fs::rename(work.join("root"), &sysroot)?;
        fs::remove_dir_all(&work)?;
        Ok(())
    }
}

/// Fetches every other glibc that is not there yet.
pub fn ensure_sysroots() -> Result<()> {
    OTHER_GLIBCS.iter().try_for_each(Glibc::ensure)
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
