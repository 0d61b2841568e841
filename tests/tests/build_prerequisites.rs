//! Building without the BPF toolchain says, in one line, what to run, instead of a
//! backtrace. The tracer's build script (the newest one cargo built) is run with nothing on
//! its PATH: no bpf-linker, no rustup.

use std::{fs, process::Command, time::SystemTime};

use thrtrace_tests::workspace_root;

#[test]
fn a_build_without_bpf_linker_says_to_run_cargo_xtask_setup_in_one_line() {
    let builds = workspace_root().join("target/release/build");
    let script = fs::read_dir(&builds)
        .expect("target/release/build: build the workspace first")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("tracer-user-"))
        .map(|e| e.path().join("build-script-build"))
        .filter(|p| p.exists())
        .max_by_key(|p| {
            p.metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        })
        .expect("the tracer's build script");
    let run = Command::new(&script)
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        "error: building thrtrace-bpf's BPF programs needs bpf-linker: run `cargo xtask setup` \
         (it installs what is missing), then build again\n"
    );
}
