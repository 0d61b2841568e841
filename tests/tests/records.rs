//! Records of launched workloads: exact counts and field values, the same
//! with probes placed past the entry and at the entry.

use std::collections::BTreeMap;
use tracer_common::Which;

use thrtrace_tests::{
    Run, TempDir, TraceRecord, assert_files_hold_the_summary, assert_realtime_and_ordered,
    bpf_available, contending_threads, deadline_field, every_libc_and_placement, field,
    paired_calls, read_trace, run_tracer, run_workload, trace_workload,
};

type Files = BTreeMap<String, Vec<TraceRecord>>;

/// Traces `workload args` with `options`; returns the run and the files, their stamps checked
/// (realtime, of this run, in order).
fn trace(options: &[&str], workload: &str, args: &[&str]) -> (Run, Files) {
    let (dir, run) = run_workload(options, workload, args);
    let files = read_trace(dir.path());
    assert_realtime_and_ordered(&files);
    assert_files_hold_the_summary(&run.stderr, &files);
    (run, files)
}

#[test]
fn four_threads_contending_give_exact_pairs_in_per_thread_files() {
    if !bpf_available("four_threads_contending") {
        return;
    }
    for (build, placement) in every_libc_and_placement("four_threads_contending", "mutex_contend") {
        let options = [&["--events", "mutex"], placement].concat();
        let (run, files) = trace(&options, &build, &["4", "10000"]);
        let (mutex, threads) = contending_threads(&run, &files, 4);
        let (mut blocked, mut waited, mut locks, mut unlocks) = (0, 0, 0, 0);
        for (name, lines) in &threads {
            let calls = paired_calls(lines, "mutex_lock", mutex);
            let count = |which| lines.iter().filter(|l| l.is("mutex_lock", which)).count();
            assert_eq!(
                calls.len(),
                10_000,
                "{name} {build} {placement:?}: {} lock entries, {} returns, {} lines",
                count(Which::Entry),
                count(Which::Return),
                lines.len()
            );
            for (entry, exit) in &calls {
                assert_eq!((entry.tid, exit.a[0]), (exit.tid, 0), "{entry:?} {exit:?}");
                blocked += exit.a[1];
            }
            let thread_unlocks: Vec<&TraceRecord> = lines
                .iter()
                .filter(|l| l.is("mutex_unlock", Which::Whole) && l.a[0] == mutex)
                .collect();
            assert_eq!(thread_unlocks.len(), 10_000, "{name} {build} {placement:?}");
            assert!(thread_unlocks.iter().all(|l| l.a[1] == 0), "unlock failed");
            waited += thread_unlocks.iter().map(|l| l.a[2]).sum::<i64>();
            locks += calls.len();
            unlocks += thread_unlocks.len();
        }
        assert_eq!((locks, unlocks), (40_000, 40_000));
        assert!(
            blocked > 0,
            "4 threads on 2 CPUs never blocked ({build} {placement:?})"
        );
        assert!(
            waited > 0,
            "no unlock ever saw a waiter ({build} {placement:?})"
        );
    }
}

/// `block?` says the caller slept during the call, which a lone thread does in a lock call
/// only where the kernel made it wait for something else (memory, its own uprobe work): rarely,
/// and never on a call the workload saw it not sleep in (its voluntary switches, read before
/// the lock and after the unlock, unchanged).
#[test]
fn a_single_thread_blocks_only_where_it_slept_and_never_sees_waiters() {
    if !bpf_available("single_thread") {
        return;
    }
    for (build, placement) in every_libc_and_placement("single_thread", "mutex_contend") {
        let (run, files) = trace(placement, &build, &["1", "10000", "count-sleeps"]);
        let mutex: i64 = field(&run.stdout, "mutex");
        let lines: Vec<TraceRecord> = files.values().flatten().copied().collect();
        let locks = paired_calls(&lines, "mutex_lock", mutex);
        let unlocks: Vec<&TraceRecord> = lines
            .iter()
            .filter(|l| l.is("mutex_unlock", Which::Whole) && l.a[0] == mutex)
            .collect();
        assert_eq!(
            (locks.len(), unlocks.len()),
            (10_000, 10_000),
            "{build} {placement:?}"
        );
        let said = |key: &str| -> Vec<usize> {
            run.stdout
                .lines()
                .filter_map(|line| line.strip_prefix(key))
                .map(|value| value.split_once(':').unwrap().1.parse().unwrap())
                .collect()
        };
        let slept = said("slept=");
        assert_eq!(
            said("sleeps="),
            [slept.len()],
            "{build} {placement:?}: more sleeps than the workload lists"
        );
        let blocked_where_awake: Vec<_> = locks
            .iter()
            .enumerate()
            .filter(|(call, (_, exit))| exit.a[1] != 0 && !slept.contains(call))
            .collect();
        assert!(
            blocked_where_awake.is_empty(),
            "block? set on calls that did not sleep ({build} {placement:?}, slept in \
             {slept:?}): {blocked_where_awake:?}"
        );
        assert!(
            unlocks.iter().all(|l| l.a[2] == 0),
            "waiters? set without contention"
        );
    }
}

#[test]
fn cond_records_match_the_workloads_own_counts() {
    if !bpf_available("cond_counts") {
        return;
    }
    for (build, placement) in every_libc_and_placement("cond_counts", "cond_prodcons") {
        let options = [&["--events", "mutex:cond"], placement].concat();
        let (run, files) = trace(&options, &build, &["3", "2000"]);
        let all: Vec<&TraceRecord> = files.values().flatten().collect();
        let cond: i64 = field(&run.stdout, "cond");
        let never: i64 = field(&run.stdout, "never");
        let count = |name: &str, which: Which, object: i64| {
            all.iter()
                .filter(|l| l.is(name, which) && l.a[0] == object)
                .count() as i64
        };
        let waits: i64 = field(&run.stdout, "waits");
        assert_eq!(
            count("cond_wait", Which::Entry, cond),
            waits,
            "{build} {placement:?}"
        );
        // The program's own mutex calls only, not those its waits make inside the C library
        // (musl's pthread_cond_timedwait calls pthread_mutex_unlock and pthread_mutex_lock): a
        // pair per item on each side, one more per consumer to see the end, and main's last two.
        let mutex: i64 = field(&run.stdout, "mutex");
        let (consumers, items) = (3, 2000);
        for name in ["mutex_lock", "mutex_unlock"] {
            let which = match name {
                "mutex_lock" => Which::Entry,
                _ => Which::Whole,
            };
            assert_eq!(
                count(name, which, mutex),
                2 * items + consumers + 2,
                "{build} {placement:?}: {name}"
            );
        }
        let wait_returns = all
            .iter()
            .filter(|l| l.is("cond_wait", Which::Return))
            .count() as i64;
        assert_eq!(wait_returns, waits, "every wait returned once");
        assert_eq!(
            count("cond_signal", Which::Whole, cond),
            field::<i64>(&run.stdout, "signals")
        );
        assert_eq!(
            count("cond_broadcast", Which::Whole, cond),
            field::<i64>(&run.stdout, "broadcasts")
        );

        let timed: Vec<&&TraceRecord> = all
            .iter()
            .filter(|l| l.event1 == 3 && l.event2 == 5)
            .collect();
        assert_eq!(timed.len(), 2, "{timed:?}");
        let (sec, nsec) = deadline_field(&run.stdout, "deadline");
        assert!(timed[0].is("cond_timedwait", Which::Entry) && timed[0].a[0] == never);
        assert_eq!(timed[0].a[1], field::<i64>(&run.stdout, "mutex"));
        assert_eq!((timed[0].a[2], timed[0].a[3]), (sec, nsec));
        assert!(timed[1].is("cond_timedwait", Which::Return));
        assert_eq!(timed[1].a[0], 110, "ETIMEDOUT");
    }
}

/// With the mutex category alone, the condition waits' own unlocks and relocks of their mutex
/// are still not the program's: glibc's fast-path probes of the unlock lie in the code the
/// waits call, and each wait's call is opened (recording nothing) for its hits to be told
/// apart.
#[test]
fn mutex_alone_records_the_programs_own_calls_beside_condition_waits() {
    if !bpf_available("mutex_beside_cond") {
        return;
    }
    for (build, placement) in every_libc_and_placement("mutex_beside_cond", "cond_prodcons") {
        let options = [&["--events", "mutex"], placement].concat();
        let (run, files) = trace(&options, &build, &["3", "2000"]);
        let all: Vec<&TraceRecord> = files.values().flatten().collect();
        let mutex: i64 = field(&run.stdout, "mutex");
        let (consumers, items) = (3, 2000);
        // Its one mutex, each lock's return half beside its entry.
        let other = all
            .iter()
            .find(|l| l.event1 != 2 || l.which != Which::Return && l.a[0] != mutex);
        assert!(
            other.is_none(),
            "{build} {placement:?}: a record not of the program's mutex {mutex:#x}: {other:?}"
        );
        for (name, which) in [
            ("mutex_lock", Which::Entry),
            ("mutex_lock", Which::Return),
            ("mutex_unlock", Which::Whole),
        ] {
            let calls = all.iter().filter(|l| l.is(name, which)).count();
            assert_eq!(
                calls,
                2 * items + consumers + 2,
                "{build} {placement:?}: {name} {which:?}"
            );
        }
    }
}

#[test]
fn a_launched_commands_exit_status_is_the_tracers() {
    if !bpf_available("exit_status") {
        return;
    }
    let dir = TempDir::new("status");
    let run = run_tracer(dir.path(), &["--", "sh", "-c", "exit 7"]);
    assert_eq!(run.status.code(), Some(7), "{run:?}");
    let run = run_tracer(dir.path(), &["--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(run.status.code(), Some(128 + 15), "{run:?}");
}

/// `waiters?` of cond_signal and cond_broadcast, read from the condition variable as each
/// glibc lays it out (2.41 dropped `__g_refs`, which moved `__wrefs` 8 bytes closer).
#[test]
fn a_condition_variables_waiters_are_read_as_each_glibc_lays_it_out() {
    if !bpf_available("cond_waiters") {
        return;
    }
    for (build, placement) in every_libc_and_placement("cond_waiters", "cond_waiters") {
        let options = [&["--events", "cond"], placement].concat();
        let (run, files) = trace(&options, &build, &[]);
        let cond: i64 = field(&run.stdout, "cond");
        let calls: Vec<(&str, [i64; 5])> = files
            .values()
            .flatten()
            .filter(|l| {
                (l.is("cond_signal", Which::Whole) || l.is("cond_broadcast", Which::Whole))
                    && l.a[0] == cond
            })
            .map(|l| {
                (
                    if l.is("cond_signal", Which::Whole) {
                        "signal"
                    } else {
                        "broadcast"
                    },
                    l.a,
                )
            })
            .collect();
        assert_eq!(
            calls,
            [
                ("signal", [cond, 0, 0, 0, 0]),
                ("broadcast", [cond, 0, 1, 0, 0]),
                ("signal", [cond, 0, 0, 0, 0]),
            ],
            "{build} {placement:?}"
        );
    }
}

#[test]
fn timed_and_clock_variants_that_time_out_record_etimedout_and_their_deadline() {
    if !bpf_available("timed_variants") {
        return;
    }
    for (build, placement) in every_libc_and_placement("timed_variants", "timed_waits") {
        let options = [&["--events", "mutex:cond"], placement].concat();
        let (run, files) = trace(&options, &build, &[]);
        let deadline = |key: &str| deadline_field(&run.stdout, key);
        let (mutex, other, cond): (i64, i64, i64) = (
            field(&run.stdout, "mutex"),
            field(&run.stdout, "other"),
            field(&run.stdout, "cond"),
        );
        let lines: Vec<&TraceRecord> = files.values().flatten().collect();
        let calls = |name: &str| -> Vec<([i64; 5], [i64; 5])> {
            let entries = lines.iter().filter(|l| l.is(name, Which::Entry));
            let returns = lines.iter().filter(|l| l.is(name, Which::Return));
            entries.zip(returns).map(|(e, r)| (e.a, r.a)).collect()
        };
        const ETIMEDOUT: i64 = 110;
        const CLOCK_MONOTONIC: i64 = 1;
        // Each lock was tried until a try slept until its deadline (the workload counted its
        // own voluntary context switches); the tries before it timed out without sleeping.
        let tries_then_the_sleep = |name: &str, key: &str, clock: i64| {
            let tries: usize = field(&run.stdout, &format!("{key}_tries"));
            let (sec, nsec) = deadline(key);
            let mut records = calls(name);
            let slept = records.pop();
            assert_eq!(
                slept,
                Some(([mutex, sec, nsec, clock, 0], [ETIMEDOUT, 1, 0, 0, 0])),
                "{build} {placement:?} {name}: it slept until the deadline"
            );
            let without_sleeping: Vec<(i64, [i64; 5])> = records
                .iter()
                .map(|(entry, ret)| (entry[0], *ret))
                .collect();
            assert_eq!(
                without_sleeping,
                vec![(mutex, [ETIMEDOUT, 0, 0, 0, 0]); tries - 1],
                "{build} {placement:?} {name}: the tries that did not sleep"
            );
        };
        tries_then_the_sleep("pthread_mutex_timedlock", "m1", 0);
        tries_then_the_sleep("pthread_mutex_clocklock", "m2", CLOCK_MONOTONIC);
        let (sec, nsec) = deadline("c1");
        assert_eq!(
            calls("pthread_cond_clockwait"),
            [(
                [cond, other, sec, nsec, CLOCK_MONOTONIC],
                [ETIMEDOUT, 0, 0, 0, 0]
            )]
        );
    }
}

// arm64's glibc has no older pthread_cond_wait: it began at 2.17 (see build.rs).
#[cfg(target_arch = "x86_64")]
#[test]
fn a_program_built_against_the_old_pthread_cond_wait_is_traced_like_any_other() {
    if !bpf_available("cond_compat") {
        return;
    }
    for placement in thrtrace_tests::PLACEMENTS {
        let options = [&["--events", "cond"], placement].concat();
        let (run, files) = trace(&options, "cond_compat", &[]);
        let (cond, mutex): (i64, i64) = (field(&run.stdout, "cond"), field(&run.stdout, "mutex"));
        let waits: usize = field(&run.stdout, "waits");
        let lines: Vec<&TraceRecord> = files.values().flatten().collect();
        // The compat functions call the new ones on a condition variable of their own: those
        // inner calls are glibc's, and leave no records.
        let entries: Vec<[i64; 5]> = lines
            .iter()
            .filter(|l| l.is("cond_wait", Which::Entry))
            .map(|l| l.a)
            .collect();
        assert_eq!(
            entries,
            vec![[cond, mutex, 0, 0, 0]; waits],
            "{placement:?}"
        );
        let returns = lines
            .iter()
            .filter(|l| l.is("cond_wait", Which::Return))
            .count();
        assert_eq!(returns, waits);
        let signals: Vec<i64> = lines
            .iter()
            .filter(|l| l.is("cond_signal", Which::Whole))
            .map(|l| l.a[0])
            .collect();
        assert_eq!(signals, [cond]);
    }
}

#[test]
fn a_static_binary_is_traced_through_its_own_executable() {
    if !bpf_available("static_binary") {
        return;
    }
    let (run, lines) = trace_workload(
        &["--events", "mutex"],
        "mutex_contend_static",
        &["2", "500"],
    );
    assert!(
        run.stderr.contains("probes in ") && run.stderr.contains("mutex_contend_static"),
        "{}",
        run.stderr
    );
    let mutex: i64 = field(&run.stdout, "mutex");
    let by_thread = thrtrace_tests::by_thread(lines);
    let locks: usize = by_thread
        .values()
        .map(|l| paired_calls(l, "mutex_lock", mutex).len())
        .sum();
    let unlocks = by_thread
        .values()
        .flatten()
        .filter(|l| l.is("mutex_unlock", Which::Whole) && l.a[0] == mutex)
        .count();
    assert_eq!((locks, unlocks), (1000, 1000));
}

/// A call a signal handler makes while its thread is in a traced call is the program's: with
/// every C library (musl's lock is then inside its own pthread_mutex_timedlock, whose calls
/// inside are not recorded), the worker's records are its lock's entry, the handler's
/// sema_post, and the lock's return, which slept.
#[test]
fn a_signal_handlers_call_inside_a_traced_call_is_recorded() {
    if !bpf_available("handler_call") {
        return;
    }
    for (build, placement) in every_libc_and_placement("handler_call", "handler_call") {
        let options = [&["--events", "mutex:sema"], placement].concat();
        let (run, lines) = trace_workload(&options, &build, &[]);
        let (sem, mutex): (i64, i64) = (field(&run.stdout, "sem"), field(&run.stdout, "mutex"));
        let main = lines[0].lwpid;
        let worker: Vec<(&str, Which, i64)> = lines
            .iter()
            .filter(|l| l.lwpid != main)
            .map(|l| {
                let name = ["mutex_lock", "mutex_unlock", "sema_post"]
                    .into_iter()
                    .find(|name| l.is(name, l.which))
                    .unwrap_or("other");
                (name, l.which, l.a[0])
            })
            .collect();
        assert_eq!(
            worker,
            [
                ("mutex_lock", Which::Entry, mutex),
                ("sema_post", Which::Whole, sem),
                ("mutex_lock", Which::Return, 0),
                ("mutex_unlock", Which::Whole, mutex)
            ],
            "{build} {placement:?}"
        );
        let slept = lines
            .iter()
            .find(|l| l.lwpid != main && l.is("mutex_lock", Which::Return));
        assert_eq!(slept.map(|l| l.a[1]), Some(1), "{build}: block?");
    }
}
