//! Other Debian releases' C libraries for the tests, as `tests/c_libraries.rs` lists them per
//! architecture, each unpacked into `target/` (`glibc-VERSION`, `glibc-VERSION-arm64`,
//! `musl-VERSION-arm64`) from its packages, fetched as `debian` fetches any other release's, so
//! that the tests build and trace workloads against the C libraries that production runs.

use std::{
    fs,
    os::unix::fs::symlink,
    path::{Component, Path, PathBuf},
};

use anyhow::{Context, Result};

#[path = "../../tests/c_libraries.rs"]
mod table;
pub use table::{C_LIBRARIES, CLibrary, Family};

use crate::{arch::Arch, debian::Suite, shell::workspace_root};

/// What a glibc sysroot holds: the libraries, their headers and the kernel's, and the
/// libgcc_s that its pthread_cancel loads.
const GLIBC_PACKAGES: [&str; 4] = ["libc6", "libc6-dev", "linux-libc-dev", "libgcc-s1"];
/// The library with its loader, and its headers, start files and `musl-gcc` wrapper.
const MUSL_PACKAGES: [&str; 2] = ["musl", "musl-dev"];

impl CLibrary {
    /// The architecture it is built for.
    pub fn arch(&self) -> Arch {
        Arch::ALL
            .into_iter()
            .find(|arch| arch.debian() == self.arch)
            .expect("tests/c_libraries.rs names an architecture of Arch")
    }

    /// Where it is unpacked; the tests' build script looks there.
    pub fn root(&self) -> PathBuf {
        workspace_root()
            .join("target")
            .join(self.dir_name(Arch::HOST.debian()))
    }

    /// Downloads and unpacks it unless it is already there (it is moved into place only once
    /// complete).
    fn ensure(&self) -> Result<()> {
        let root = self.root();
        if root.exists() {
            return Ok(());
        }
        let name = self.dir_name(Arch::HOST.debian());
        eprintln!("xtask: fetching {name} for the tests");
        let work = workspace_root().join(format!("target/{name}.partial"));
        let _ = fs::remove_dir_all(&work);
        let packages: &[&str] = match self.family {
            Family::Glibc => &GLIBC_PACKAGES,
            Family::Musl => &MUSL_PACKAGES,
        };
        let unpacked = work.join("root");
        let suite = Suite::open(self.suite, self.arch())?;
        suite
            .unpack(packages, &unpacked)
            .with_context(|| format!("cannot fetch Debian's {} {name}", self.suite))?;
        relativize_symlinks(&unpacked, &unpacked)?;
        merge_usr(&unpacked)?;
        if self.family == Family::Musl {
            point_musl_gcc_at(&unpacked, &root)?;
        }
        let _ = fs::remove_dir_all(&root);
        fs::rename(&unpacked, &root)?;
        fs::remove_dir_all(&work)?;
        Ok(())
    }
}

/// The C libraries of `arch`.
pub fn of(arch: Arch) -> impl Iterator<Item = &'static CLibrary> {
    C_LIBRARIES
        .iter()
        .filter(move |library| library.arch() == arch)
}

/// Fetches every C library of `arch` that is not there yet.
pub fn ensure(arch: Arch) -> Result<()> {
    of(arch).try_for_each(CLibrary::ensure)
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

/// Lays the unpacked tree `root` out as a merged-/usr system (Debian 12 and later): `lib` and
/// `lib64` links into `usr/`, where the files of packages that still ship them at the top
/// (musl's libc.so, which its musl-gcc links with from `usr/lib`) are moved. A merged-/usr
/// release's own links are base-files', which its libc.so linker script and its loader's path
/// go through.
fn merge_usr(root: &Path) -> Result<()> {
    for dir in ["lib", "lib64"] {
        let top = root.join(dir);
        let under_usr = root.join("usr").join(dir);
        if top.is_dir() && !top.is_symlink() {
            move_into(&top, &under_usr)?;
            fs::remove_dir(&top)?;
        }
        if under_usr.exists() && !top.is_symlink() {
            symlink(Path::new("usr").join(dir), top)?;
        }
    }
    Ok(())
}

/// Moves every entry of directory `from` into directory `to`, merging subdirectories.
fn move_into(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let path = entry?.path();
        let moved = to.join(path.file_name().context("an entry with no name")?);
        if path.is_dir() && !path.is_symlink() && moved.is_dir() {
            move_into(&path, &moved)?;
            fs::remove_dir(&path)?;
        } else {
            fs::rename(&path, &moved)?;
        }
    }
    Ok(())
}

/// Points the musl-gcc wrapper (`usr/bin/TRIPLE-gcc`, which runs the GNU cross gcc with musl's
/// specs) and its specs at the files under `root`, where the tree unpacked in `unpacked` will
/// be, instead of /usr. The dynamic linker stays `/lib/ld-musl-ARCH.so.1`, the path on the
/// machines that run what it builds.
fn point_musl_gcc_at(unpacked: &Path, root: &Path) -> Result<()> {
    let usr = format!("{}/usr/", root.display());
    let specs = fs::read_dir(unpacked.join("usr/lib"))?
        .filter_map(Result::ok)
        .map(|dir| dir.path().join("musl-gcc.specs"))
        .filter(|specs| specs.exists());
    let wrappers = fs::read_dir(unpacked.join("usr/bin"))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.to_string_lossy().ends_with("-musl-gcc"));
    for file in specs.chain(wrappers) {
        let text = fs::read_to_string(&file)?;
        fs::write(&file, text.replace("/usr/", &usr))?;
    }
    Ok(())
}
