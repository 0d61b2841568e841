//! The futex category (`docs/futex-design.md`): futex waits made outside traced pthread calls,
//! recorded from the futex syscall's tracepoints. The raw futex workload's waits are certain
//! (its main thread sees each waiter asleep in its wait before it wakes it), so `--contended`
//! records exactly them: each round's waits, woken after at least HOLD_MS, and each waiter's
//! timed wait, timed out; never the wait that returned EAGAIN at once, and none of the main
//! thread's `pthread_join` waits, which are that call's.

use std::{
    collections::BTreeSet,
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
};

use thrtrace_tests::{TempDir, bpf_available, codes, field, read_trace, start_tracer, workload};
use tracer_model::TraceRecord;

const ROUNDS: u64 = 3;
const WAITERS: u64 = 3;
const HOLD_MS: i64 = 50;
const TIMEOUT_MS: i64 = 20;
/// Linux's `ETIMEDOUT` and `EAGAIN`.
const ETIMEDOUT: i64 = 110;
const EAGAIN: i64 = 11;
/// `FUTEX_PRIVATE_FLAG`, and the commands the workload waits with.
const FUTEX_PRIVATE_FLAG: i64 = 128;
const FUTEX_WAIT: i64 = 0;
const FUTEX_WAIT_BITSET: i64 = 9;

/// A run of `name` with `args`, a workload that prints a line and waits for one on stdin
/// before it starts, traced with `options` from then on: its records, in time order, and the
/// line it printed.
fn traced_run(name: &str, args: &[String], options: &[&str]) -> (Vec<TraceRecord>, String) {
    let mut child = Command::new(workload(name))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first_line = String::new();
    out.read_line(&mut first_line).unwrap();
    let dir = TempDir::new("futex");
    let (mut tracer, _) = start_tracer(dir.path(), &[child.id()], options);
    writeln!(child.stdin.take().unwrap(), "go").unwrap();
    // Read to its end, so that its last line does not meet a closed pipe.
    std::io::copy(&mut out, &mut std::io::sink()).unwrap();
    assert!(child.wait().unwrap().success(), "{name} failed");
    assert!(tracer.wait().unwrap().success());
    let mut records: Vec<TraceRecord> = read_trace(dir.path()).into_values().flatten().collect();
    records.sort_by_key(TraceRecord::time_ns);
    (records, first_line)
}

fn futex_waits(records: &[TraceRecord]) -> Vec<&TraceRecord> {
    records
        .iter()
        .filter(|r| (r.event1, r.event2) == codes("futex_wait"))
        .collect()
}

#[test]
fn contended_records_exactly_the_raw_futex_waits_that_blocked() {
    if !bpf_available("futex_contended") {
        return;
    }
    let args = [ROUNDS, WAITERS, HOLD_MS as u64, TIMEOUT_MS as u64].map(|n| n.to_string());
    let (records, first_line) = traced_run("futex_raw", &args, &["--contended"]);
    let waits = futex_waits(&records);
    let words: u64 = field(&first_line, "words");
    let lonely: u64 = field(&first_line, "lonely");
    let on_words: Vec<&TraceRecord> = waits
        .iter()
        .copied()
        .filter(|r| (words..words + 4 * WAITERS).contains(&(r.a[0] as u64)))
        .collect();
    assert_eq!(on_words.len() as u64, ROUNDS * WAITERS, "{waits:#?}");
    for wait in &on_words {
        assert_eq!(wait.which, 0, "{wait:?}");
        assert_eq!(wait.a[1], FUTEX_WAIT | FUTEX_PRIVATE_FLAG, "{wait:?}");
        assert!(wait.a[2] >= HOLD_MS * 1_000_000, "blocked ns: {wait:?}");
        assert_eq!(wait.a[3], 0, "woken: {wait:?}");
        assert_eq!(wait.a[4], -1, "no timeout: {wait:?}");
    }
    let timed: Vec<&TraceRecord> = waits
        .iter()
        .copied()
        .filter(|r| r.a[0] as u64 == lonely)
        .collect();
    assert_eq!(
        timed.len() as u64,
        WAITERS,
        "one timed wait per waiter, and no wait that returned EAGAIN: {waits:#?}"
    );
    for wait in &timed {
        assert_eq!(
            wait.a[1],
            FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG,
            "{wait:?}"
        );
        assert_eq!(wait.a[3], -ETIMEDOUT, "{wait:?}");
        assert!(wait.a[2] >= (TIMEOUT_MS - 1) * 1_000_000, "{wait:?}");
        assert!(wait.a[4] > 0, "an absolute deadline: {wait:?}");
    }
    assert_eq!(
        waits.len(),
        on_words.len() + timed.len(),
        "no other futex wait: {waits:#?}"
    );
    let threads: BTreeSet<u32> = waits.iter().map(|r| r.lwpid).collect();
    assert_eq!(threads.len() as u64, WAITERS, "each waiter's own");
}

/// The contention workload's waits are pthread calls' (two mutexes, a semaphore, a read-write
/// lock; see `contended.rs`): under `--contended` each is recorded as its pthread event, and
/// none again as a futex wait on a word of those objects.
#[test]
fn a_pthread_wait_is_recorded_once_as_its_pthread_event() {
    if !bpf_available("futex_pthread_once") {
        return;
    }
    const CONTENTION_ROUNDS: u64 = 2;
    const CONTENTION_WAITERS: u64 = 2;
    let args =
        [CONTENTION_ROUNDS, HOLD_MS as u64, CONTENTION_WAITERS, 10, 1].map(|n| n.to_string());
    let (records, first_line) = traced_run("contention", &args, &["--contended"]);
    let objects: Vec<u64> = ["first", "second", "sem", "rw"]
        .iter()
        .map(|name| field(&first_line, name))
        .collect();
    let lock_waits = records
        .iter()
        .filter(|r| r.is("mutex_lock", 1) && objects[..2].contains(&(r.a[0] as u64)))
        .count() as u64;
    assert_eq!(lock_waits, CONTENTION_ROUNDS * CONTENTION_WAITERS);
    // The largest of them, a read-write lock, is 56 bytes.
    let on_objects: Vec<&TraceRecord> = futex_waits(&records)
        .into_iter()
        .filter(|r| {
            objects
                .iter()
                .any(|&object| (object..object + 56).contains(&(r.a[0] as u64)))
        })
        .collect();
    assert!(on_objects.is_empty(), "recorded twice: {on_objects:#?}");
}

/// A full trace records the futex category only when named, and then every wait, blocked or
/// not: the same waits as under `--contended`, and each waiter's wait that returned EAGAIN.
#[test]
fn a_full_trace_that_names_futex_records_every_wait() {
    if !bpf_available("futex_full") {
        return;
    }
    let args = [ROUNDS, WAITERS, HOLD_MS as u64, TIMEOUT_MS as u64].map(|n| n.to_string());
    let (records, first_line) = traced_run("futex_raw", &args, &["--events", "futex"]);
    let waits = futex_waits(&records);
    assert_eq!(waits.len(), records.len(), "only futex waits");
    let words: u64 = field(&first_line, "words");
    let lonely: u64 = field(&first_line, "lonely");
    let on_words = waits
        .iter()
        .filter(|r| (words..words + 4 * WAITERS).contains(&(r.a[0] as u64)))
        .count() as u64;
    assert_eq!(on_words, ROUNDS * WAITERS, "{waits:#?}");
    let results = |result: i64| {
        waits
            .iter()
            .filter(|r| r.a[0] as u64 == lonely && r.a[3] == result)
            .count() as u64
    };
    assert_eq!(
        (results(-ETIMEDOUT), results(-EAGAIN)),
        (WAITERS, WAITERS),
        "{waits:#?}"
    );
}

#[test]
fn a_full_trace_without_events_named_records_no_futex_wait() {
    if !bpf_available("futex_not_by_default") {
        return;
    }
    let args = [1, 1, HOLD_MS as u64, TIMEOUT_MS as u64].map(|n| n.to_string());
    let (records, _) = traced_run("futex_raw", &args, &[]);
    assert!(futex_waits(&records).is_empty(), "{records:#?}");
    assert!(
        records.iter().any(|r| r.is("thr_create", 1)),
        "{records:#?}"
    );
}
