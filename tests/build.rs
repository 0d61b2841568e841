//! Compiles the C workloads in `workloads/` into OUT_DIR/workloads with the system C compiler.
use std::{env, fs, path::PathBuf, process::Command};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("workloads");
    fs::create_dir_all(&out).expect("create OUT_DIR/workloads");
    println!("cargo:rerun-if-changed=workloads");
    for entry in fs::read_dir("workloads").expect("workloads/") {
        let source = entry.expect("workloads entry").path();
        if source.extension().is_none_or(|e| e != "c") {
            continue;
        }
        let binary = out.join(source.file_stem().expect("file stem"));
        let status = Command::new("cc")
            .args(["-O2", "-g", "-Wall", "-Werror", "-pthread", "-o"])
            .arg(&binary)
            .arg(&source)
            .status()
            .expect("run cc (install gcc: cargo xtask setup does)");
        assert!(status.success(), "cc failed on {}", source.display());
    }
}
