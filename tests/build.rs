//! Compiles the C workloads in `workloads/` into OUT_DIR/workloads with the system C compiler,
//! and the ones in `STATIC` a second time as static executables (`NAME_static`).
use std::{env, fs, path::PathBuf, process::Command};

/// Workloads also built with `-static`: glibc inside the executable itself.
const STATIC: [&str; 1] = ["mutex_contend"];

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
        compile(&source, &out.join(&stem), &[]);
        if STATIC.contains(&stem.as_str()) {
            compile(&source, &out.join(format!("{stem}_static")), &["-static"]);
        }
    }
}
