//! The initramfs images an architecture's kernels boot: busybox, `xtask/guest/init.sh` as
//! init, the tracer, lock_mix, the test binaries and their workloads at the paths they were
//! built at, and what these load; or, for a measuring boot (`cargo xtask bench --guest`), the
//! bench's programs and its list of runs. The host's own files for the host's architecture;
//! for another, the same packages of the host's Debian release for that architecture.

use std::{
    collections::BTreeSet,
    ffi::OsString,
    fs,
    io::Read,
    os::unix::fs::{PermissionsExt, symlink},
    path::{Component, Path, PathBuf},
};

use anyhow::{Context, Result, bail};

use super::{Machine, ROUNDS, TESTS, THREADS};
use crate::{
    arch::Arch,
    debian::Suite,
    dist, setup,
    shell::{build_tracer, command, output, run, workspace_root},
    test_binaries::{self, TestBinaries},
};

/// The packages of another architecture's userland: the shell and its tools, the shell the
/// tests' `sh -c` runs (a glibc program, as on a distribution), glibc and the libgcc_s Rust
/// programs link, and musl's dynamic loader.
const USERLAND: [&str; 5] = ["busybox-static", "dash", "libc6", "libgcc-s1", "musl"];

/// The two initramfs images of one architecture: one with the test binaries, and a small one,
/// with the tracer and lock_mix only, for the preemption and below-the-floor boots.
pub struct Guest {
    pub arch: Arch,
    pub full: PathBuf,
    pub small: PathBuf,
}

impl Guest {
    pub fn build(arch: Arch, work: &Path) -> Result<Self> {
        let base = Base::build(arch, work)?;
        let machine = Machine::of(arch);
        let TestBinaries {
            tests,
            programs,
            workloads,
        } = test_binaries::build(arch, &TESTS.map(|tests| tests.binary))?;
        let conf = |runs: &[String], kernel_runs: &[String]| {
            let conf = format!(
                "THREADS={THREADS}\nROUNDS={ROUNDS}\nTESTS=\"{}\"\nKERNEL_TESTS=\"{}\"\n",
                runs.join(" "),
                kernel_runs.join(" ")
            );
            conf + &format!(
                "export THRTRACE_TEST_BUFFER_KIB={}\n",
                machine.test_ring_kib
            )
        };
        let runs = |in_a_kernels_boot: bool| -> Vec<String> {
            TESTS
                .iter()
                .filter(|tests| tests.on_each_kernel || !in_a_kernels_boot)
                .map(|tests| tests.run(in_a_kernels_boot))
                .collect()
        };
        let full = base.image("full", &conf(&runs(false), &runs(true)), |files| {
            for (name, binary) in &tests {
                files.add(binary, &Path::new("/tests").join(name))?;
            }
            // At the path the test binaries were built to find them at; and their sources,
            // where the tests read the lines they mark (`line_of`).
            files.add_tree(&workloads)?;
            for program in &programs {
                files.add(program, program)?;
            }
            files.add_tree(&workspace_root().join("tests/workloads"))?;
            files.add(&base.userland.join("bin/dash"), Path::new("/bin/sh"))
        })?;
        Ok(Guest {
            arch,
            full,
            small: base.image("small", &conf(&[], &[]), |_| Ok(()))?,
        })
    }
}

/// The image of a measuring boot (`kt=bench`): the small image's files, the C `programs`
/// (sources from the workspace root) compiled for `arch` at the guest's `/NAME`, and `etc`'s
/// files (a name and its text) in the guest's `/etc`.
pub fn bench_image(
    arch: Arch,
    work: &Path,
    programs: &[&str],
    etc: &[(&str, String)],
) -> Result<PathBuf> {
    let base = Base::build(arch, work)?;
    let compiled = programs
        .iter()
        .map(|source| compile(arch, source, &base.work))
        .collect::<Result<Vec<_>>>()?;
    base.image("bench", "", |files| {
        for program in &compiled {
            let name = program.file_name().context("a program without a name")?;
            files.add(program, &Path::new("/").join(name))?;
        }
        for (name, text) in etc {
            fs::write(files.root.join("etc").join(name), text)?;
        }
        Ok(())
    })
}

/// What every image of an architecture has: its userland, the tracer, lock_mix, and the
/// counter of the tracer's BPF programs.
struct Base {
    arch: Arch,
    /// The architecture's directory under the guests' work directory.
    work: PathBuf,
    userland: PathBuf,
    tracer: PathBuf,
    lock_mix: PathBuf,
    bpf_programs: PathBuf,
}

impl Base {
    fn build(arch: Arch, work: &Path) -> Result<Self> {
        let work = work.join(arch.name());
        fs::create_dir_all(&work)?;
        Ok(Base {
            arch,
            userland: userland(arch, &work)?,
            tracer: build_release_tracer(arch)?,
            lock_mix: compile(arch, "tests/workloads/lock_mix.c", &work)?,
            bpf_programs: compile(arch, "xtask/guest/bpf_programs.c", &work)?,
            work,
        })
    }

    /// The image `name`: the base's files, `xtask/guest/init.sh` as init, `conf` as
    /// /etc/kt.conf, what `extra` adds, and the libraries all these load; packed.
    fn image(
        &self,
        name: &str,
        conf: &str,
        extra: impl FnOnce(&mut Files) -> Result<()>,
    ) -> Result<PathBuf> {
        let root = self.work.join(format!("initramfs-{name}"));
        let _ = fs::remove_dir_all(&root);
        let mut files = Files::new(&root, self.arch, &self.userland)?;
        files.add(&self.tracer, Path::new("/usr/local/bin/thrtrace-bpf"))?;
        files.add(&self.lock_mix, Path::new("/lock_mix"))?;
        files.add(&self.bpf_programs, Path::new("/bpf_programs"))?;
        files.add(
            &workspace_root().join("xtask/guest/init.sh"),
            Path::new("/init"),
        )?;
        fs::set_permissions(root.join("init"), fs::Permissions::from_mode(0o755))?;
        extra(&mut files)?;
        fs::write(root.join("etc/kt.conf"), conf)?;
        files.add_libraries()?;
        files.pack(&self.work.join(format!("initramfs-{name}.gz")))
    }
}

/// Where `arch`'s system files are, as a root directory: the host's own (with a static
/// busybox installed unless there), or `USERLAND`'s packages of the host's Debian release for
/// `arch` (the release of the cross compilers' glibc), unpacked into `work` unless there.
fn userland(arch: Arch, work: &Path) -> Result<PathBuf> {
    if arch == Arch::HOST {
        if !Path::new("/bin/busybox").exists() {
            setup::apt_install(&["busybox-static"])?;
        }
        return Ok(PathBuf::from("/"));
    }
    let root = work.join("userland");
    if root.exists() {
        return Ok(root);
    }
    let os_release = fs::read_to_string("/etc/os-release")?;
    let release = os_release
        .lines()
        .find_map(|line| line.strip_prefix("VERSION_CODENAME="))
        .context("/etc/os-release names no Debian release")?;
    eprintln!(
        "xtask: fetching {} ({release}, {}) for the guests",
        USERLAND.join(" "),
        arch.debian()
    );
    let partial = work.join("userland.partial");
    let _ = fs::remove_dir_all(&partial);
    Suite::open(release, arch)?.unpack(&USERLAND, &partial)?;
    fs::rename(&partial, &root)?;
    Ok(root)
}

/// The tracer the guests run: on the host's architecture the release build the tests test
/// here; on another, the static release executable `cargo xtask dist` ships, which needs no
/// library of the guest's.
fn build_release_tracer(arch: Arch) -> Result<PathBuf> {
    if arch == Arch::HOST {
        return build_tracer();
    }
    dist::build_static_tracer(
        &workspace_root().join("target").join(dist::STATIC_BUILD),
        arch,
    )
}

/// Compiles the C program `source` (from the workspace root) for `arch` into `dir`, named as
/// the source is.
fn compile(arch: Arch, source: &str, dir: &Path) -> Result<PathBuf> {
    let source = workspace_root().join(source);
    let binary = dir.join(source.file_stem().context("a source without a name")?);
    run(command(arch.c_compiler())
        .args(["-O2", "-Wall", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source))?;
    Ok(binary)
}

/// An initramfs tree being filled.
struct Files {
    root: PathBuf,
    arch: Arch,
    /// Where the guest's system files are found (`userland`).
    userland: PathBuf,
    executables: Vec<PathBuf>,
}

impl Files {
    fn new(root: &Path, arch: Arch, userland: &Path) -> Result<Self> {
        for dir in [
            "bin",
            "proc",
            "sys",
            "dev",
            "tmp",
            "run",
            "etc",
            "usr/local/bin",
        ] {
            fs::create_dir_all(root.join(dir))?;
        }
        fs::copy(userland.join("bin/busybox"), root.join("bin/busybox"))?;
        Ok(Files {
            root: root.to_owned(),
            arch,
            userland: userland.to_owned(),
            executables: Vec::new(),
        })
    }

    /// Copies `from` to `to` (an absolute path in the guest).
    fn add(&mut self, from: &Path, to: &Path) -> Result<()> {
        let inside = self.root.join(to.strip_prefix("/")?);
        fs::create_dir_all(inside.parent().context("a path with no parent")?)?;
        fs::copy(from, &inside).with_context(|| format!("cannot copy {}", from.display()))?;
        self.executables.push(from.to_owned());
        Ok(())
    }

    /// Copies directory `dir` to the same path in the guest.
    fn add_tree(&mut self, dir: &Path) -> Result<()> {
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_file() {
                self.add(&path, &path)?;
            }
        }
        Ok(())
    }

    /// Where the guest's path `path` is on this machine: the same path inside the workspace
    /// and on the way to it (the guest holds the build tree at its own paths: the workloads,
    /// the other C libraries they were linked to load), else under the userland.
    fn source(&self, path: &Path) -> PathBuf {
        let workspace = workspace_root();
        if path.starts_with(&workspace) || workspace.starts_with(path) {
            return path.to_owned();
        }
        self.userland.join(path.strip_prefix("/").unwrap_or(path))
    }

    /// Copies the guest's file `path` from `source`, and every symbolic link on the way to it
    /// as a link, so that the guest resolves the path as its source does; what it resolves to.
    fn place(&self, path: &Path) -> Result<PathBuf> {
        let mut resolved = PathBuf::from("/");
        let mut rest: Vec<OsString> = Vec::new();
        let push = |rest: &mut Vec<OsString>, path: &Path| {
            for component in path.components().rev() {
                match component {
                    Component::Normal(name) => rest.push(name.to_owned()),
                    Component::ParentDir => rest.push("..".into()),
                    Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                }
            }
        };
        push(&mut rest, path);
        let mut links = 0;
        while let Some(name) = rest.pop() {
            if name == ".." {
                resolved.pop();
                continue;
            }
            let next = resolved.join(&name);
            let source = self.source(&next);
            let inside = self.root.join(next.strip_prefix("/")?);
            let metadata = fs::symlink_metadata(&source).with_context(|| {
                format!("no {} for the guest's {}", source.display(), path.display())
            })?;
            if metadata.is_symlink() {
                links += 1;
                if links > 40 {
                    bail!("{}: too many levels of symbolic links", path.display());
                }
                let target = fs::read_link(&source)?;
                if fs::symlink_metadata(&inside).is_err() {
                    fs::create_dir_all(inside.parent().context("a link with no parent")?)?;
                    symlink(&target, &inside)?;
                }
                if target.is_absolute() {
                    resolved = PathBuf::from("/");
                }
                push(&mut rest, &target);
                continue;
            }
            if metadata.is_dir() {
                fs::create_dir_all(&inside)?;
            } else if !inside.exists() {
                fs::create_dir_all(inside.parent().context("a file with no parent")?)?;
                fs::copy(&source, &inside)?;
            }
            resolved = next;
        }
        Ok(resolved)
    }

    /// Adds what the executables added load, found as their loader finds it: the program
    /// interpreter, and each shared library they and their libraries name (`DT_NEEDED`) in
    /// the first directory that has it of their `DT_RPATH` or `DT_RUNPATH`, the
    /// interpreter's own (where musl's `libc.so` is the loader itself), and `arch`'s library
    /// directories. Every shared object of an RPATH directory is added too: what glibc loads
    /// by itself (`libgcc_s.so.1`, for `pthread_cancel`) is named nowhere.
    fn add_libraries(&mut self) -> Result<()> {
        let triple = self.arch.gnu_triple();
        let system: Vec<PathBuf> = [
            format!("/lib/{triple}"),
            format!("/usr/lib/{triple}"),
            "/lib".to_owned(),
            "/usr/lib".to_owned(),
        ]
        .into_iter()
        .map(PathBuf::from)
        .collect();
        let mut placed = BTreeSet::new();
        let mut rpaths_copied = BTreeSet::new();
        // Each file to read, with the directories its executable's loader searches.
        let mut todo: Vec<(PathBuf, Vec<PathBuf>)> = self
            .executables
            .iter()
            .map(|executable| (executable.clone(), Vec::new()))
            .collect();
        while let Some((file, inherited)) = todo.pop() {
            let Some(linked) = Linked::read(&file)? else {
                continue;
            };
            let mut dirs = linked.search.clone();
            dirs.extend(inherited);
            for dir in &linked.search {
                if rpaths_copied.insert(dir.clone()) {
                    self.place_shared_objects(dir)?;
                }
            }
            if let Some(interpreter) = &linked.interpreter {
                let loader = self
                    .place(interpreter)
                    .with_context(|| format!("the loader of {}", file.display()))?;
                dirs.push(
                    loader
                        .parent()
                        .context("a loader with no directory")?
                        .to_owned(),
                );
            }
            for library in &linked.needed {
                let found = dirs
                    .iter()
                    .chain(&system)
                    .map(|dir| dir.join(library))
                    .find(|path| self.source(path).exists())
                    .with_context(|| {
                        format!(
                            "{} needs {library}, which is in none of its loader's directories",
                            file.display()
                        )
                    })?;
                if placed.insert(found.clone()) {
                    let at = self.place(&found)?;
                    todo.push((self.source(&at), dirs.clone()));
                }
            }
        }
        Ok(())
    }

    /// Places every shared object (`*.so*`, not the static libraries beside them) of the
    /// guest's directory `dir`.
    fn place_shared_objects(&self, dir: &Path) -> Result<()> {
        let Ok(entries) = fs::read_dir(self.source(dir)) else {
            return Ok(());
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_string_lossy().contains(".so") && !entry.path().is_dir() {
                self.place(&dir.join(name))?;
            }
        }
        Ok(())
    }

    /// The tree as a gzip'd cpio archive at `image`.
    fn pack(self, image: &Path) -> Result<PathBuf> {
        run(command("sh").arg("-c").arg(format!(
            "cd '{}' && find . | cpio -o -H newc --quiet | gzip -1 > '{}'",
            self.root.display(),
            image.display()
        )))?;
        Ok(image.to_owned())
    }
}

/// What an ELF file's loader reads from it, as `readelf` shows it.
struct Linked {
    interpreter: Option<PathBuf>,
    needed: Vec<String>,
    /// Its `DT_RPATH` and `DT_RUNPATH` directories.
    search: Vec<PathBuf>,
}

impl Linked {
    /// `file`'s, if it is an ELF file.
    fn read(file: &Path) -> Result<Option<Linked>> {
        let mut magic = [0; 4];
        let is_elf = fs::File::open(file)
            .and_then(|mut opened| opened.read_exact(&mut magic))
            .is_ok_and(|()| magic == *b"\x7fELF");
        if !is_elf {
            return Ok(None);
        }
        let shown = output(
            command("readelf")
                .args(["--program-headers", "--dynamic", "--wide"])
                .arg(file),
        )?;
        let mut linked = Linked {
            interpreter: None,
            needed: Vec::new(),
            search: Vec::new(),
        };
        for line in String::from_utf8_lossy(&shown.stdout).lines() {
            let bracketed = || {
                let (_, value) = line.split_once('[')?;
                value.strip_suffix(']')
            };
            if line.contains("program interpreter:") {
                linked.interpreter = line
                    .trim()
                    .strip_prefix("[Requesting program interpreter: ")
                    .and_then(|value| value.strip_suffix(']'))
                    .map(PathBuf::from);
            } else if line.contains("(NEEDED)")
                && let Some(library) = bracketed()
            {
                linked.needed.push(library.to_owned());
            } else if (line.contains("(RPATH)") || line.contains("(RUNPATH)"))
                && let Some(dirs) = bracketed()
            {
                linked.search.extend(dirs.split(':').map(PathBuf::from));
            }
        }
        Ok(Some(linked))
    }
}
