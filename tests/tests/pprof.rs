//! `report --format pprof -o FILE`: the stack_chains workload's contended waits on `big_lock`,
//! traced with `--contended`, as a pprof contention profile that Go's own `go tool pprof` reads
//! back. The waiters view has one sample per waiting chain (alpha_5 .. alpha_1, beta_5 ..
//! beta_1), each one contention, labelled with the thread that ran it and the process, their
//! delays adding up to the report's wait total for the lock; the releasers view has the
//! holder's chain, whose unlock ended the first wait.
//! Without `-o` the profile is refused, in one line, with nothing written.

use serde_json::Value;
use thrtrace_tests::{
    TempDir, bpf_available,
    pprof::{RawProfile, Sample, pprof_raw},
    run_tracer, trace_stack_chains_big_lock, workload_arg,
};

/// The chain `prefix`_5 .. `prefix`_1 then `run`, innermost first.
fn chain(prefix: &str) -> Vec<String> {
    (1..=5)
        .rev()
        .map(|n| format!("{prefix}_{n}"))
        .chain(["run".to_owned()])
        .collect()
}

/// Which of `prefixes` chains `sample`'s functions hold as consecutive frames; panics if none.
fn chain_of<'a>(sample: &Sample, prefixes: &[&'a str]) -> &'a str {
    prefixes
        .iter()
        .copied()
        .find(|prefix| {
            sample
                .functions
                .windows(6)
                .any(|window| window == chain(prefix))
        })
        .unwrap_or_else(|| panic!("no whole chain in {sample:#?}"))
}

/// The samples of `profile` on big_lock, checked for its other labels: a mutex of process
/// `pid`, named after `program`, each sample of one thread, named after the chain it ran
/// (threads alpha, beta and holder run the chains of their names).
fn big_lock_samples<'a>(profile: &'a RawProfile, pid: &Value, program: &str) -> Vec<&'a Sample> {
    let samples: Vec<&Sample> = profile
        .samples
        .iter()
        .filter(|s| s.labels.contains("lock:[big_lock]"))
        .collect();
    let name = program.rsplit('/').next().unwrap();
    for sample in &samples {
        assert!(sample.labels.contains("lock_kind:[mutex]"), "{sample:#?}");
        assert!(
            sample.labels.contains(&format!("pid:[{pid}]")),
            "{sample:#?}"
        );
        assert!(
            sample.labels.contains(&format!("process:[{name}]")),
            "{sample:#?}"
        );
        assert!(sample.labels.contains("thread:["), "{sample:#?}");
        // A thread gone before the tracer read its name has its id alone.
        let chain = chain_of(sample, &["alpha", "beta", "holder"]);
        assert!(
            !sample.labels.contains("thread_name:[")
                || sample.labels.contains(&format!("thread_name:[{chain}]")),
            "{sample:#?}"
        );
    }
    samples
}

#[test]
fn a_contention_profile_holds_each_chain_that_waited_and_released() {
    if !bpf_available("pprof") {
        return;
    }
    let dir = TempDir::new("pprof");
    let lock = &trace_stack_chains_big_lock(&dir);
    let program = workload_arg("stack_chains");
    let wait_total_ns = lock["wait_total_ns"].as_u64().unwrap();

    // The default view: the waiters'.
    let written = run_tracer(
        dir.path(),
        &[
            "report",
            "--format",
            "pprof",
            "-o",
            "waiters.pb.gz",
            "app.ptl",
        ],
    );
    assert!(written.status.success(), "{written:?}");
    let waiters = pprof_raw(&dir, "waiters.pb.gz");
    assert!(
        waiters.comments.iter().any(|c| c.contains("waiters view")),
        "{waiters:#?}"
    );
    let samples = big_lock_samples(&waiters, &lock["pid"], &program);
    assert_eq!(samples.len(), 2, "{waiters:#?}");
    let mut chains: Vec<&str> = samples
        .iter()
        .map(|s| chain_of(s, &["alpha", "beta", "holder"]))
        .collect();
    chains.sort_unstable();
    assert_eq!(chains, ["alpha", "beta"], "{waiters:#?}");
    assert!(samples.iter().all(|s| s.count == 1), "{waiters:#?}");
    // pprof takes the first mapping for the program's.
    assert!(
        waiters.mappings[0].contains(&format!(" {program} ")),
        "{waiters:#?}"
    );
    let delay: u64 = samples.iter().map(|s| s.delay_ns).sum();
    assert!(
        delay.abs_diff(wait_total_ns) * 1000 <= wait_total_ns,
        "delay {delay} ns, the report's wait total {wait_total_ns} ns"
    );

    let written = run_tracer(
        dir.path(),
        &[
            "report",
            "--format",
            "pprof",
            "--view",
            "releasers",
            "-o",
            "releasers.pb.gz",
            "app.ptl",
        ],
    );
    assert!(written.status.success(), "{written:?}");
    let releasers = pprof_raw(&dir, "releasers.pb.gz");
    assert!(
        releasers
            .comments
            .iter()
            .any(|c| c.contains("releasers view")),
        "{releasers:#?}"
    );
    let samples = big_lock_samples(&releasers, &lock["pid"], &program);
    assert_eq!(samples.len(), 2, "{releasers:#?}");
    assert!(samples.iter().all(|s| s.count == 1), "{releasers:#?}");
    // The holder's unlock ended the first wait; the first waiter's, the second.
    let chains: Vec<&str> = samples
        .iter()
        .map(|s| chain_of(s, &["alpha", "beta", "holder"]))
        .collect();
    assert!(chains.contains(&"holder"), "{releasers:#?}");
    assert!(
        chains.contains(&"alpha") || chains.contains(&"beta"),
        "{releasers:#?}"
    );
    let delay: u64 = samples.iter().map(|s| s.delay_ns).sum();
    assert!(
        delay.abs_diff(wait_total_ns) * 1000 <= wait_total_ns,
        "delay {delay} ns, the report's wait total {wait_total_ns} ns"
    );

    // Without -o: refused in one line, before the log is read, and nothing written.
    let refused = run_tracer(dir.path(), &["report", "--format", "pprof", "app.ptl"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
    assert!(refused.stderr.contains("-o FILE"), "{refused:?}");
    assert!(refused.stdout.is_empty(), "{refused:?}");
}
