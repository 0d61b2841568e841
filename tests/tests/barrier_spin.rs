//! The barrier and spin categories.

use std::collections::BTreeMap;
use tracer_common::Which;

use thrtrace_tests::{
    TempDir, TraceRecord, bpf_available, every_libc, every_libc_and_placement, field, is_musl,
    read_trace, run_tracer, trace_workload, workload_arg,
};

fn trace(
    events: &str,
    options: &[&str],
    workload: &str,
    args: &[&str],
) -> (String, Vec<TraceRecord>) {
    let options = [&["--events", events], options].concat();
    let (run, lines) = trace_workload(&options, workload, args);
    (run.stdout, lines)
}

#[test]
fn each_round_has_one_serial_thread_and_counts_its_arrivals() {
    if !bpf_available("barrier_rounds") {
        return;
    }
    for build in every_libc("barrier_rounds", "barrier_rounds") {
        let (threads, rounds) = (3, 3);
        let (stdout, lines) = trace("barrier", &[], &build, &["3", "3"]);
        let barrier: i64 = field(&stdout, "barrier");
        let is = |l: &&TraceRecord, name, which| l.is(name, which);
        assert_eq!(
            lines
                .iter()
                .filter(|l| is(l, "barrier_init", Which::Whole))
                .map(|l| l.a)
                .collect::<Vec<_>>(),
            [[barrier, threads, 0, 0, 0]]
        );
        // Arrivals are paced: within each round, b_count at entry is 0, 1, 2. musl counts them
        // outside the barrier object: 0, as docs/events.md says.
        let counts: Vec<i64> = lines
            .iter()
            .filter(|l| is(l, "barrier_wait", Which::Entry) && l.a[0] == barrier)
            .map(|l| l.a[1])
            .collect();
        let paced = match is_musl(&build) {
            true => [0, 0, 0],
            false => [0, 1, 2],
        };
        assert_eq!(counts, paced.repeat(rounds as usize), "{build}");
        // Each thread's returns, in order, are its rounds: exactly one serial thread (-1) a round.
        let mut returns_by_thread: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
        for line in lines
            .iter()
            .filter(|l| is(l, "barrier_wait", Which::Return))
        {
            returns_by_thread
                .entry(line.lwpid)
                .or_default()
                .push(line.a[0]);
        }
        assert_eq!(returns_by_thread.len(), threads as usize);
        for round in 0..rounds as usize {
            let serial = returns_by_thread
                .values()
                .filter(|r| r[round] == -1)
                .count();
            let others = returns_by_thread.values().filter(|r| r[round] == 0).count();
            assert_eq!((serial, others), (1, threads as usize - 1), "round {round}");
        }
        assert_eq!(field::<i64>(&stdout, "serial"), rounds);
        assert_eq!(
            lines
                .iter()
                .filter(|l| is(l, "barrier_destroy", Which::Whole))
                .map(|l| l.a)
                .collect::<Vec<_>>(),
            [[barrier, 0, 0, 0, 0]]
        );
    }
}

/// `block?` is whether the lock was held at the call's first try, wherever the probe is: on the
/// jump after glibc's locked decrement (its flags), or at an entry that the kernel can probe
/// (glibc 2.41's, which reads the lock word; 2.31's and 2.36's begin with the `lock decl`
/// itself, see below).
#[test]
fn a_contended_spin_lock_spun_and_an_uncontended_one_did_not() {
    if !bpf_available("spin_story") {
        return;
    }
    const EBUSY: i64 = 16;
    for (build, placement) in every_libc_and_placement("spin_story", "spin_story") {
        let options = [&["--events", "spin"], placement].concat();
        let (run, lines) = trace_workload(&options, &build, &[]);
        if run
            .stderr
            .contains("pthread_spin_lock cannot be probed at +0x0")
        {
            assert!(!build.ends_with("_glibc241"), "{build}: {}", run.stderr);
            continue;
        }
        let stdout = run.stdout;
        let spin: i64 = field(&stdout, "spin");
        let main_pid = lines[0].pid;
        let main: Vec<&TraceRecord> = lines.iter().filter(|l| l.lwpid == main_pid).collect();
        let fields = |name: &str, which: Which| -> Vec<[i64; 5]> {
            main.iter()
                .filter(|l| l.is(name, which))
                .map(|l| l.a)
                .collect()
        };
        // On x86-64, pthread_spin_init is glibc's pthread_spin_unlock under another name:
        // recorded as one. musl's, and glibc's on arm64, is a function of its own.
        let (inits, unlocks) = match is_musl(&build) || cfg!(target_arch = "aarch64") {
            true => (vec![[spin, 0, 0, 0, 0]], 2),
            false => (Vec::new(), 3),
        };
        assert_eq!(fields("_spin_init", Which::Whole), inits, "{build}");
        assert_eq!(
            fields("_spin_unlock", Which::Whole),
            vec![[spin, 0, 0, 0, 0]; unlocks],
            "{build}: init, then two unlocks"
        );
        assert_eq!(
            fields("_spin_trylock", Which::Whole),
            [[spin, EBUSY, 0, 0, 0]]
        );
        assert_eq!(
            fields("_spin_lock", Which::Entry),
            [[spin, 0, 0, 0, 0]; 2],
            "one entry per call, spun or not"
        );
        assert_eq!(
            fields("_spin_lock", Which::Return),
            [[1, 0, 0, 0, 0], [0, 0, 0, 0, 0]],
            "{build} {placement:?}: block?: spun, then not"
        );
        assert_eq!(fields("_spin_destroy", Which::Whole), [[spin, 0, 0, 0, 0]]);
    }
}

/// x86-64's glibc lock begins with its `lock decl`, which the kernel refuses; arm64's with a
/// store of its frame, which it steps.
#[test]
#[cfg(target_arch = "x86_64")]
fn spin_lock_at_its_entry_cannot_be_probed_and_says_so() {
    if !bpf_available("spin_at_entry") {
        return;
    }
    let dir = TempDir::new("spin-entry");
    let argv = [
        "--events",
        "spin",
        "--probe-at-entry",
        "--",
        &workload_arg("spin_story"),
    ];
    let run = run_tracer(dir.path(), &argv);
    assert!(run.status.success(), "{run:?}");
    assert!(
        run.stderr
            .contains("pthread_spin_lock cannot be probed at +0x0 (lock decl"),
        "{}",
        run.stderr
    );
    let lines: Vec<TraceRecord> = read_trace(dir.path()).into_values().flatten().collect();
    assert!(!lines.iter().any(|l| l.is("_spin_lock", Which::Entry)));
    assert!(
        lines.iter().any(|l| l.is("_spin_trylock", Which::Whole)),
        "the other spin calls are traced"
    );
}
