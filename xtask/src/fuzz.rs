//! `cargo xtask fuzz --seconds N`: fuzzes the trace log reader (`fuzz/fuzz_targets`) with
//! cargo-fuzz (libFuzzer, on the nightly toolchain) for N seconds, starting from the tests'
//! malformed-log corpus. Fails, naming the input, if the reader panicked, hung or allocated
//! more than a log's largest packet could need.

use anyhow::{Context, Result};

use crate::{
    setup,
    shell::{command, run, succeeds, workspace_root},
};

/// No single allocation of the reader may be larger (a packet is at most 16 MiB).
const MALLOC_LIMIT_MB: u32 = 64;

pub fn run_for(seconds: u64) -> Result<()> {
    setup::ensure_prerequisites()?;
    if !succeeds(command("cargo").args(["+nightly", "fuzz", "--version"])) {
        eprintln!("xtask: installing cargo-fuzz");
        run(command("cargo").args(["install", "cargo-fuzz", "--locked"]))
            .context("cannot install cargo-fuzz")?;
    }
    let root = workspace_root();
    let corpus = root.join("fuzz/corpus/log_reader");
    run(command("cargo")
        .args(["+nightly", "run", "--quiet", "--release", "--manifest-path"])
        .arg(root.join("fuzz/Cargo.toml"))
        .args(["--bin", "seeds", "--"])
        .arg(&corpus))
    .context("cannot write the seed corpus")?;
    run(command("cargo")
        .current_dir(&root)
        .args(["+nightly", "fuzz", "run", "--release", "log_reader"])
        .arg(&corpus)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-malloc_limit_mb={MALLOC_LIMIT_MB}"))
        .args(["-rss_limit_mb=2048", "-timeout=10", "-print_final_stats=1"]))
    .context("the fuzzer found an input the reader does not survive (see fuzz/artifacts)")
}
