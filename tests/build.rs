//! Compiles the C workloads in `workloads/` into OUT_DIR/workloads with the system C compiler,
//! the ones in `STATIC` a second time as static executables (`NAME_static`), the ones in
//! `OTHER_GLIBC` against each other glibc whose sysroot is there (`NAME_glibc231`,
//! `NAME_glibc241`: `cargo xtask test` fetches them into target/glibc-VERSION), and those of
//! them not `GLIBC_ONLY` with musl-gcc, dynamic and static (`NAME_musl`, `NAME_musl_static`), if
//! it is there (`cargo xtask setup` installs it).
use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

/// Workloads also built with `-static`: glibc inside the executable itself.
const STATIC: [&str; 1] = ["mutex_contend"];
/// Workloads with no C library at all, built only with `-nostdlib -static`.
const FREESTANDING: [&str; 1] = ["no_pthread"];
/// Workloads also built with frame pointers (`NAME_fp`): every build is without them otherwise,
/// as distributions build C (the stack tests unwind both).
const FRAME_POINTERS: [&str; 1] = ["stack_chains"];
/// Shared objects to preload, built only as `libNAME.so`.
const SHARED: [&str; 1] = ["interpose"];
/// Workloads also built against each other glibc, and with musl: every category's story, and
/// what the tests of glibc 2.31's libpthread.so.0 trace.
const OTHER_GLIBC: [&str; 15] = [
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
];
/// The workloads of `OTHER_GLIBC` not built with musl: they call glibc's `*_clock*` functions,
/// which musl does not have.
const GLIBC_ONLY: [&str; 1] = ["timed_waits"];
/// The musl builds' suffixes, and their compiler options.
const MUSL_BUILDS: [(&str, &[&str]); 2] = [("_musl", &[]), ("_musl_static", &["-static"])];

/// The other glibcs' versions, as `xtask/src/glibcs.rs` fetches them.
const OTHER_GLIBCS: [&str; 2] = ["2.31", "2.41"];

/// Compiler options that build against the glibc in `sysroot`, and run with it.
fn other_glibc_options(sysroot: &Path) -> Vec<String> {
    // Through `lib`, which is `usr/lib` in a merged-/usr release (Debian 12 and later).
    let lib = sysroot.join("lib/x86_64-linux-gnu");
    let dev = sysroot.join("usr/lib/x86_64-linux-gnu");
    vec![
        format!("--sysroot={}", sysroot.display()),
        // gcc's own search path names the host's crt files and libraries first.
        format!("-B{}/", dev.display()),
        format!("-L{}", dev.display()),
        format!(
            "-Wl,--dynamic-linker={}",
            lib.join("ld-linux-x86-64.so.2").display()
        ),
        // DT_RPATH, not RUNPATH: it also covers libgcc_s.so.1, which pthread_cancel dlopens.
        format!("-Wl,--disable-new-dtags,-rpath={}", lib.display()),
    ]
}

fn compile(source: &Path, binary: &Path, extra: &[&str]) {
    compile_with("cc", source, binary, extra);
}

fn compile_with(compiler: &str, source: &Path, binary: &Path, extra: &[&str]) {
    let status = Command::new(compiler)
        .args([
            "-O2",
            "-fomit-frame-pointer",
            "-g",
            "-Wall",
            "-Werror",
            "-pthread",
        ])
        .args(extra)
        .arg("-o")
        .arg(binary)
        .arg(source)
        .status()
        .unwrap_or_else(|_| panic!("run {compiler} (cargo xtask setup installs it)"));
    assert!(
        status.success(),
        "{compiler} failed on {}",
        source.display()
    );
}

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("workloads");
    fs::create_dir_all(&out).expect("create OUT_DIR/workloads");
    println!("cargo:rerun-if-changed=workloads");
    // Every other glibc's suffix, built or not, for the tests (`every_libc`).
    let suffixes: Vec<String> = OTHER_GLIBCS
        .iter()
        .map(|version| format!("_glibc{}", version.replace('.', "")))
        .collect();
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
    let musl = Command::new("musl-gcc")
        .arg("--version")
        .output()
        .is_ok_and(|run| run.status.success());
    let target =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir")).join("../target");
    // Each other glibc there: the workloads' name suffix and the compiler's options.
    let other_glibcs: Vec<(&String, Vec<String>)> = OTHER_GLIBCS
        .iter()
        .zip(&suffixes)
        .filter_map(|(version, suffix)| {
            let sysroot = target.join(format!("glibc-{version}"));
            println!("cargo:rerun-if-changed={}", sysroot.display());
            sysroot
                .join("usr/include/pthread.h")
                .exists()
                .then(|| (suffix, other_glibc_options(&sysroot)))
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
        if FREESTANDING.contains(&stem.as_str()) {
            compile(&source, &out.join(&stem), &["-nostdlib", "-static"]);
            continue;
        }
        if SHARED.contains(&stem.as_str()) {
            let library = out.join(format!("lib{stem}.so"));
            compile(&source, &library, &["-shared", "-fPIC", "-ldl"]);
            continue;
        }
        compile(&source, &out.join(&stem), &[]);
        if FRAME_POINTERS.contains(&stem.as_str()) {
            let binary = out.join(format!("{stem}_fp"));
            compile(&source, &binary, &["-fno-omit-frame-pointer"]);
        }
        if STATIC.contains(&stem.as_str()) {
            compile(&source, &out.join(format!("{stem}_static")), &["-static"]);
        }
        if musl && musl_workloads.contains(&stem.as_str()) {
            for (suffix, options) in MUSL_BUILDS {
                let binary = out.join(format!("{stem}{suffix}"));
                compile_with("musl-gcc", &source, &binary, options);
            }
        }
        if OTHER_GLIBC.contains(&stem.as_str()) {
            for (suffix, options) in &other_glibcs {
                let options: Vec<&str> = options.iter().map(String::as_str).collect();
                compile(&source, &out.join(format!("{stem}{suffix}")), &options);
            }
        }
    }
}
