//! Compiles the C workloads in `workloads/` for the target's architecture into
//! OUT_DIR/workloads with its C compiler and default glibc (Debian 12's: the host's, or the
//! cross compiler's), the ones in `STATIC` a second time as static executables (`NAME_static`),
//! the ones in `OTHER_GLIBC` against each other glibc of that architecture whose sysroot is
//! there (`NAME_glibc231`, `NAME_glibc241`: xtask fetches them into target/, as
//! `c_libraries.rs` lists them), and those of them not `GLIBC_ONLY` with musl, dynamic and
//! static (`NAME_musl`, `NAME_musl_static`), if it is there (the host's musl-gcc, which
//! `cargo xtask setup` installs, or one of `c_libraries.rs`).
use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

// xtask's architectures and the tests' C libraries, shared by path: a build script cannot
// import xtask. It reads only some of their names.
#[allow(dead_code)]
#[path = "../xtask/src/arch.rs"]
mod arch;
#[allow(dead_code)]
mod c_libraries;

use arch::Arch;
use c_libraries::{C_LIBRARIES, CLibrary, Family};

/// Workloads also built with `-static`: glibc inside the executable itself.
const STATIC: [&str; 1] = ["mutex_contend"];
/// Workloads with no C library at all, built only with `-nostdlib -static`.
const FREESTANDING: [&str; 1] = ["no_pthread"];
/// Workloads also built with frame pointers (`NAME_fp`): every build is without them otherwise,
/// as distributions build C (the stack tests unwind both).
const FRAME_POINTERS: [&str; 1] = ["stack_chains"];
/// Shared objects to preload, built only as `libNAME.so`.
const SHARED: [&str; 1] = ["interpose"];
/// Workloads also built against each other glibc, and with musl: every category's story, what
/// the tests of glibc 2.31's libpthread.so.0 trace, and the pairs that take no single step.
const OTHER_GLIBC: [&str; 16] = [
    "barrier_rounds",
    "cond_prodcons",
    "cond_waiters",
    "contention",
    "handler_call",
    "lock_story",
    "mutex_contend",
    "mutex_gate",
    "rmutex_depth",
    "rwlock_story",
    "sem_sequence",
    "spin_story",
    "stack_chains",
    "thread_story",
    "timed_waits",
    "uncontended_pairs",
];
/// The workloads of `OTHER_GLIBC` not built with musl: they call glibc's `*_clock*` functions,
/// which musl does not have.
const GLIBC_ONLY: [&str; 1] = ["timed_waits"];
/// The musl builds' suffixes, and their compiler options.
const MUSL_BUILDS: [(&str, &[&str]); 2] = [("_musl", &[]), ("_musl_static", &["-static"])];
/// Workloads built for x86-64 only: they bind to x86-64 glibc's oldest symbol versions
/// (GLIBC_2.2.5), which arm64's glibc, from 2.17, never had.
const X86_64_ONLY: [&str; 1] = ["cond_compat"];

/// The C compiler of one architecture, with the options that build against one C library.
struct Compiler {
    program: PathBuf,
    options: Vec<String>,
}

impl Compiler {
    /// The architecture's own compiler, with its default C library.
    fn default_for(arch: Arch) -> Self {
        Compiler {
            program: PathBuf::from(arch.c_compiler()),
            options: Vec::new(),
        }
    }

    /// `arch`'s compiler building against the glibc in `sysroot`, and running with it.
    fn glibc(arch: Arch, sysroot: &Path) -> Self {
        // Through `lib`, which is `usr/lib` in a merged-/usr release (Debian 12 and later).
        let lib = sysroot.join("lib").join(arch.gnu_triple());
        let dev = sysroot.join("usr/lib").join(arch.gnu_triple());
        let loader = fs::read_dir(&lib)
            .expect("the sysroot's libraries")
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .find(|name| name.to_string_lossy().starts_with("ld-linux"))
            .expect("the sysroot's loader");
        let mut compiler = Compiler::default_for(arch);
        compiler.options = vec![
            format!("--sysroot={}", sysroot.display()),
            // gcc's own headers, then the sysroot's: a cross gcc searches its own C library's
            // headers (/usr/TRIPLE/include) before the sysroot's.
            "-nostdinc".to_owned(),
            format!("-isystem{}", compiler.headers().display()),
            format!(
                "-isystem{}",
                sysroot
                    .join("usr/include")
                    .join(arch.gnu_triple())
                    .display()
            ),
            format!("-isystem{}", sysroot.join("usr/include").display()),
            // gcc's own search path names its C library's crt files and libraries first.
            format!("-B{}/", dev.display()),
            format!("-L{}", dev.display()),
            format!("-Wl,--dynamic-linker={}", lib.join(loader).display()),
            // DT_RPATH, not RUNPATH: it also covers libgcc_s.so.1, which pthread_cancel dlopens.
            format!("-Wl,--disable-new-dtags,-rpath={}", lib.display()),
        ];
        compiler
    }

    /// musl's compiler for `arch`: the host's musl-gcc (Debian's musl-tools), or the wrapper of
    /// `arch`'s musl of `c_libraries.rs` (`usr/bin/TRIPLE-gcc`), if it is there.
    fn musl(arch: Arch, libraries: &[&CLibrary], target: &Path) -> Option<Self> {
        let program = match libraries.iter().find(|l| l.family == Family::Musl) {
            Some(musl) => {
                let root = target.join(musl.dir_name(Arch::HOST.debian()));
                println!("cargo:rerun-if-changed={}", root.display());
                fs::read_dir(root.join("usr/bin"))
                    .ok()?
                    .filter_map(Result::ok)
                    .map(|entry| entry.path())
                    .find(|path| path.to_string_lossy().ends_with("-musl-gcc"))?
            }
            None => PathBuf::from("musl-gcc"),
        };
        let runs = Command::new(&program)
            .arg("--version")
            .output()
            .is_ok_and(|run| run.status.success());
        let options = match arch {
            Arch::X86_64 => Vec::new(),
            // libgcc's outline atomics find the CPU's with glibc's __getauxval, which musl
            // has not: atomics inline, as musl's own.
            Arch::Aarch64 => vec!["-mno-outline-atomics".to_owned()],
        };
        runs.then_some(Compiler { program, options })
    }

    /// The directory of gcc's own headers (stddef.h, stdatomic.h).
    fn headers(&self) -> PathBuf {
        let run = Command::new(&self.program)
            .arg("-print-file-name=include")
            .output()
            .unwrap_or_else(|_| panic!("run {}", self.program.display()));
        PathBuf::from(String::from_utf8_lossy(&run.stdout).trim())
    }

    fn compile(&self, source: &Path, binary: &Path, extra: &[&str]) {
        let status = Command::new(&self.program)
            .args([
                "-O2",
                "-fomit-frame-pointer",
                "-g",
                "-Wall",
                "-Werror",
                "-pthread",
            ])
            .args(&self.options)
            .args(extra)
            .arg("-o")
            .arg(binary)
            .arg(source)
            .status()
            .unwrap_or_else(|_| {
                panic!(
                    "run {} (cargo xtask setup installs it)",
                    self.program.display()
                )
            });
        assert!(
            status.success(),
            "{} failed on {}",
            self.program.display(),
            source.display()
        );
    }
}

/// The glibc builds' suffix: `_glibc241`.
fn glibc_suffix(glibc: &CLibrary) -> String {
    format!("_glibc{}", glibc.version.replace('.', ""))
}

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("workloads");
    // Emptied first: a build for another architecture or C library may have left its own.
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).expect("create OUT_DIR/workloads");
    println!("cargo:rerun-if-changed=workloads");
    let target_arch = env::var("CARGO_CFG_TARGET_ARCH").expect("CARGO_CFG_TARGET_ARCH");
    let arch = Arch::ALL
        .into_iter()
        .find(|arch| arch.name() == target_arch)
        .unwrap_or_else(|| panic!("no C toolchain for {target_arch} in xtask/src/arch.rs"));
    // Where the tests find Debian's own libraries (`LIBC`).
    println!("cargo:rustc-env=GNU_TRIPLE={}", arch.gnu_triple());
    let libraries: Vec<&CLibrary> = C_LIBRARIES
        .iter()
        .filter(|library| library.arch == arch.debian())
        .collect();
    let glibcs: Vec<&CLibrary> = libraries
        .iter()
        .copied()
        .filter(|library| library.family == Family::Glibc)
        .collect();
    // Every other glibc's suffix, built or not, for the tests (`every_libc`).
    let suffixes: Vec<String> = glibcs.iter().map(|glibc| glibc_suffix(glibc)).collect();
    println!(
        "cargo:rustc-env=OTHER_GLIBC_SUFFIXES={}",
        suffixes.join(",")
    );
    let musl_workloads: Vec<&str> = OTHER_GLIBC
        .into_iter()
        .filter(|workload| !GLIBC_ONLY.contains(workload))
        .collect();
    println!(
        "cargo:rustc-env=MUSL_WORKLOADS={}",
        musl_workloads.join(",")
    );
    println!(
        "cargo:rustc-env=MUSL_SUFFIXES={}",
        MUSL_BUILDS.map(|(suffix, _)| suffix).join(",")
    );
    let target =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir")).join("../target");
    let compiler = Compiler::default_for(arch);
    let musl = Compiler::musl(arch, &libraries, &target);
    // Each other glibc there: the workloads' name suffix and its compiler.
    let other_glibcs: Vec<(String, Compiler)> = glibcs
        .iter()
        .filter_map(|glibc| {
            let sysroot = target.join(glibc.dir_name(Arch::HOST.debian()));
            println!("cargo:rerun-if-changed={}", sysroot.display());
            sysroot
                .exists()
                .then(|| (glibc_suffix(glibc), Compiler::glibc(arch, &sysroot)))
        })
        .collect();
    for entry in fs::read_dir("workloads").expect("workloads/") {
        let source = entry.expect("workloads entry").path();
        if source.extension().is_none_or(|e| e != "c") {
            continue;
        }
        let stem = source
            .file_stem()
            .expect("file stem")
            .to_string_lossy()
            .into_owned();
        if X86_64_ONLY.contains(&stem.as_str()) && arch != Arch::X86_64 {
            continue;
        }
        if FREESTANDING.contains(&stem.as_str()) {
            compiler.compile(&source, &out.join(&stem), &["-nostdlib", "-static"]);
            continue;
        }
        if SHARED.contains(&stem.as_str()) {
            let library = out.join(format!("lib{stem}.so"));
            compiler.compile(&source, &library, &["-shared", "-fPIC", "-ldl"]);
            continue;
        }
        compiler.compile(&source, &out.join(&stem), &[]);
        if FRAME_POINTERS.contains(&stem.as_str()) {
            let binary = out.join(format!("{stem}_fp"));
            compiler.compile(&source, &binary, &["-fno-omit-frame-pointer"]);
        }
        if STATIC.contains(&stem.as_str()) {
            let binary = out.join(format!("{stem}_static"));
            compiler.compile(&source, &binary, &["-static"]);
        }
        if let Some(musl) = &musl
            && musl_workloads.contains(&stem.as_str())
        {
            for (suffix, options) in MUSL_BUILDS {
                musl.compile(&source, &out.join(format!("{stem}{suffix}")), options);
            }
        }
        if OTHER_GLIBC.contains(&stem.as_str()) {
            for (suffix, glibc) in &other_glibcs {
                glibc.compile(&source, &out.join(format!("{stem}{suffix}")), &[]);
            }
        }
    }
}
