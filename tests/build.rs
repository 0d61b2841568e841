//! Compiles the C workloads in `workloads/` into OUT_DIR/workloads with the system C compiler,
//! the ones in `STATIC` a second time as static executables (`NAME_static`), and the ones in
//! `OLD_GLIBC` against glibc 2.31 (`NAME_glibc231`) when its sysroot is there (`cargo xtask
//! test` fetches it into target/glibc-2.31).
use std::{env, fs, path::PathBuf, process::Command};

/// Workloads also built with `-static`: glibc inside the executable itself.
const STATIC: [&str; 1] = ["mutex_contend"];
/// Workloads with no C library at all, built only with `-nostdlib -static`.
const FREESTANDING: [&str; 1] = ["no_pthread"];
/// Shared objects to preload, built only as `libNAME.so`.
const SHARED: [&str; 1] = ["interpose"];
/// Workloads also built for glibc 2.31, whose pthread functions are in libpthread.so.0.
const OLD_GLIBC: [&str; 3] = ["mutex_contend", "mutex_gate", "thread_story"];

/// Compiler options that build against the glibc 2.31 in `sysroot`, and run with it.
fn old_glibc_options(sysroot: &std::path::Path) -> Vec<String> {
    let lib = sysroot.join("lib/x86_64-linux-gnu");
    let dev = sysroot.join("usr/lib/x86_64-linux-gnu");
    vec![
        format!("--sysroot={}", sysroot.display()),
        // gcc's own search path names the host's crt files and libraries first.
        format!("-B{}/", dev.display()),
        format!("-L{}", dev.display()),
        format!("-Wl,--dynamic-linker={}", lib.join("ld-2.31.so").display()),
        // DT_RPATH, not RUNPATH: it also covers libgcc_s.so.1, which pthread_cancel dlopens.
        format!("-Wl,--disable-new-dtags,-rpath={}", lib.display()),
    ]
}

fn compile(source: &std::path::Path, binary: &std::path::Path, extra: &[&str]) {
    let status = Command::new("cc")
        .args(["-O2", "-g", "-Wall", "-Werror", "-pthread"])
        .args(extra)
        .arg("-o")
        .arg(binary)
        .arg(source)
        .status()
        .expect("run cc (install gcc: cargo xtask setup does)");
    assert!(status.success(), "cc failed on {}", source.display());
}

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("workloads");
    fs::create_dir_all(&out).expect("create OUT_DIR/workloads");
    println!("cargo:rerun-if-changed=workloads");
    let sysroot = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("manifest dir"))
        .join("../target/glibc-2.31");
    println!("cargo:rerun-if-changed={}", sysroot.display());
    let old_glibc = sysroot.exists().then(|| old_glibc_options(&sysroot));
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
        if STATIC.contains(&stem.as_str()) {
            compile(&source, &out.join(format!("{stem}_static")), &["-static"]);
        }
        if let Some(options) = old_glibc
            .as_ref()
            .filter(|_| OLD_GLIBC.contains(&stem.as_str()))
        {
            let options: Vec<&str> = options.iter().map(String::as_str).collect();
            compile(&source, &out.join(format!("{stem}_glibc231")), &options);
        }
    }
}
