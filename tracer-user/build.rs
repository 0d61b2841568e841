//! Builds `tracer-ebpf` for the BPF target with the nightly toolchain and bpf-linker, into
//! OUT_DIR, where `datapath.rs` embeds it. `cargo xtask setup` installs what this needs; where
//! something is missing, or the BPF build fails, the build stops with one line saying what to
//! run, not a backtrace.
use std::{path::Path, process::Command};

fn main() {
    if let Some(missing) = missing_prerequisite() {
        stop(&format!(
            "building thrtrace-bpf's BPF programs needs {missing}: run `cargo xtask setup` (it \
             installs what is missing), then build again"
        ));
    }
    let ebpf = aya_build::Package {
        name: "tracer-ebpf",
        root_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../tracer-ebpf"),
        ..Default::default()
    };
    // The BPF programs include the shared types: rebuild when they change too.
    println!(
        "cargo:rerun-if-changed={}/../tracer-common",
        env!("CARGO_MANIFEST_DIR")
    );
    if let Err(error) = aya_build::build_ebpf([ebpf], aya_build::Toolchain::default()) {
        stop(&format!(
            "building thrtrace-bpf's BPF programs failed ({error:#}); `cargo xtask setup` \
             installs what they need"
        ));
    }
}

/// What the BPF build needs and this machine lacks: bpf-linker, the nightly toolchain, or its
/// rust-src (for `-Z build-std=core`).
fn missing_prerequisite() -> Option<&'static str> {
    let runs = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .is_ok_and(|output| output.status.success())
    };
    if !runs("bpf-linker", &["--version"]) {
        return Some("bpf-linker");
    }
    let sysroot = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--print", "sysroot"])
        .output()
        .ok()
        .filter(|output| output.status.success());
    let Some(sysroot) = sysroot else {
        return Some("the nightly Rust toolchain");
    };
    let sysroot = String::from_utf8_lossy(&sysroot.stdout);
    let core = Path::new(sysroot.trim()).join("lib/rustlib/src/rust/library/core/Cargo.toml");
    (!core.exists()).then_some("the nightly toolchain's rust-src")
}

/// Ends the build with `message` as its one line of explanation.
fn stop(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1);
}
