//! Builds `tracer-ebpf` for the BPF target with the nightly toolchain and bpf-linker, into
//! OUT_DIR, where `datapath.rs` embeds it. `cargo xtask setup` installs what this needs.
fn main() -> anyhow::Result<()> {
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
    aya_build::build_ebpf([ebpf], aya_build::Toolchain::default())
}
