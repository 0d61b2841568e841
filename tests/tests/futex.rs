//! The futex category (`docs/futex-design.md`): futex waits and wakes made outside traced
//! pthread calls, each recorded once at the syscall's exit, through each of the ways the tracer
//! can hook the futex syscalls (`--futex-hook`). The workloads' waits are certain (a thread of
//! theirs sees each waiter asleep in its wait, through /proc, before it ends it), so the
//! records are counted exactly: the raw futex calls of futex_raw.c, including a futex_waitv(2)
//! round where the kernel has it. Under `--contended` only the waits that blocked and the wakes
//! that woke one are recorded; a full trace records every futex call when `-e futex` names the
//! category, none otherwise; and a pthread call's wait or wake is its pthread event's alone.

use std::{
    collections::BTreeSet,
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Command, Stdio},
};

use thrtrace_tests::{
    TempDir, bpf_available, field, prerequisite, read_trace, start_tracer, workload,
};
use tracer_common::{
    Category,
    futex::{SYS_FUTEX_WAITV, command},
};
use tracer_model::TraceRecord;

const ROUNDS: u64 = 3;
const WAITERS: u64 = 3;
const HOLD_MS: i64 = 50;
const TIMEOUT_MS: i64 = 20;
const MS: i64 = 1_000_000;
/// The flag of the futex calls of one process, which every call here makes.
const PRIVATE: i64 = libc::FUTEX_PRIVATE_FLAG as i64;
const WAIT: i64 = command::WAIT as i64 | PRIVATE;
const WAIT_BITSET: i64 = command::WAIT_BITSET as i64 | PRIVATE;
const WAKE: i64 = command::WAKE as i64 | PRIVATE;
/// What a wake that wakes every waiter asks for (`INT_MAX`).
const WAKE_ALL: i64 = i32::MAX as i64;

/// The ways the tracer can hook the futex syscalls (`--futex-hook`) that this kernel has: fentry
/// on the syscall's function (named in kernel BTF), the syscall's own tracepoints (in tracefs),
/// the raw syscall tracepoints (every kernel). A missing one skips its part of `test`, or
/// fails it in CI.
fn futex_hooks(test: &str) -> Vec<&'static str> {
    let btf = std::fs::read("/sys/kernel/btf/vmlinux").unwrap_or_default();
    let function: &[u8] = b"\0__x64_sys_futex\0";
    let fentry = btf.windows(function.len()).any(|name| name == function);
    let tracepoint = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .any(|tracefs| {
            Path::new(tracefs)
                .join("events/syscalls/sys_enter_futex")
                .exists()
        });
    [
        ("fentry", fentry, "kernel BTF has no __x64_sys_futex"),
        (
            "syscall-tracepoints",
            tracepoint,
            "no syscalls:sys_enter_futex in tracefs (CONFIG_FTRACE_SYSCALLS, tracefs mounted)",
        ),
        ("raw-syscalls", true, ""),
    ]
    .into_iter()
    .filter(|(hook, has, why)| prerequisite(&format!("{test} {hook}"), (!has).then_some(*why)))
    .map(|(hook, ..)| hook)
    .collect()
}

/// Whether this kernel has futex_waitv(2) (5.16): asked to wait on no words, it refuses them
/// (EINVAL) rather than not knowing the call (ENOSYS).
fn kernel_has_futex_waitv() -> bool {
    // SAFETY: with no words (a null array of 0) and no timeout, the call reads no memory.
    let result = unsafe {
        libc::syscall(
            SYS_FUTEX_WAITV as libc::c_long,
            std::ptr::null::<u8>(),
            0,
            0,
            std::ptr::null::<u8>(),
            0,
        )
    };
    result == -1 && std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
}

/// A traced run of a workload.
struct Traced {
    /// Every record, in time order.
    records: Vec<TraceRecord>,
    /// Its process id, which is its main thread's lwpid.
    pid: u32,
    /// The line it printed first.
    first_line: String,
}

/// A run of `program` with `args`, a workload that prints a line and waits for one on stdin
/// before it starts, traced with `options` from then on.
fn traced_run(program: &Path, args: &[String], options: &[&str]) -> Traced {
    let mut child = Command::new(program)
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
    assert!(child.wait().unwrap().success(), "{}", program.display());
    assert!(tracer.wait().unwrap().success());
    let mut records: Vec<TraceRecord> = read_trace(dir.path()).into_values().flatten().collect();
    records.sort_by_key(TraceRecord::time_ns);
    Traced {
        records,
        pid: child.id(),
        first_line,
    }
}

/// The `name` records (`futex_wait`, ...) among `records`; each is one record (`which` 0).
fn named<'a>(records: &'a [TraceRecord], name: &str) -> Vec<&'a TraceRecord> {
    records.iter().filter(|r| r.is(name, 0)).collect()
}

/// Those of `records` on a word within `len` bytes from `start`.
fn within<'a>(records: &[&'a TraceRecord], start: u64, len: u64) -> Vec<&'a TraceRecord> {
    records
        .iter()
        .copied()
        .filter(|r| (start..start + len).contains(&(r.a[0] as u64)))
        .collect()
}

/// Checks that every wait of `waits` blocked at least `min_ns` with `op` and no timeout until
/// a wake woke it.
fn assert_woken(waits: &[&TraceRecord], op: i64, min_ns: i64, context: &str) {
    for wait in waits {
        assert_eq!(wait.a[1], op, "{context}: {wait:?}");
        assert!(wait.a[2] >= min_ns, "{context}: blocked ns: {wait:?}");
        assert_eq!(wait.a[3], 0, "{context}: woken: {wait:?}");
        assert_eq!(wait.a[4], -1, "{context}: no timeout: {wait:?}");
    }
}

/// Checks that every wake of `wakes` asked to wake `asked` with `FUTEX_WAKE_PRIVATE` and woke
/// `woke`, and says how long it took.
fn assert_wakes(wakes: &[&TraceRecord], asked: i64, woke: i64, context: &str) {
    for wake in wakes {
        assert_eq!(wake.a[1], WAKE, "{context}: {wake:?}");
        assert_eq!(wake.a[2], woke, "{context}: woken: {wake:?}");
        assert_eq!(wake.a[3], asked, "{context}: asked: {wake:?}");
        assert!(wake.a[4] >= 0, "{context}: ns: {wake:?}");
    }
}

/// The raw futex workload's words, as it printed them, and whether it made its futex_waitv
/// round.
struct RawWords {
    /// Each waiter's word of the rounds, an unsigned int each.
    words: u64,
    /// Each waiter's pair of words of its futex_waitv round, two unsigned ints each.
    pairs: u64,
    /// The word of the timed wait and of the wait that returns EAGAIN.
    lonely: u64,
    /// The word of the wake that wakes none.
    nobody: u64,
    waitv: bool,
}

fn raw_run(rounds: u64, waiters: u64, options: &[&str]) -> (Traced, RawWords) {
    let waitv = kernel_has_futex_waitv();
    let args = [
        rounds,
        waiters,
        HOLD_MS as u64,
        TIMEOUT_MS as u64,
        u64::from(waitv),
    ]
    .map(|n| n.to_string());
    let run = traced_run(&workload("futex_raw"), &args, options);
    let words = RawWords {
        words: field(&run.first_line, "words"),
        pairs: field(&run.first_line, "pairs"),
        lonely: field(&run.first_line, "lonely"),
        nobody: field(&run.first_line, "nobody"),
        waitv,
    };
    (run, words)
}

/// Checks the raw futex workload's futex_waitv records: one per waiter where the kernel has
/// the call, on its pair's first word, over the pair's two words, woken by the second (index
/// 1), with no timeout; none where it has not.
fn assert_raw_waitv_records(run: &Traced, raw: &RawWords, context: &str) {
    let waitvs = named(&run.records, "futex_waitv");
    let expected: BTreeSet<u64> = (0..WAITERS)
        .filter(|_| raw.waitv)
        .map(|i| raw.pairs + 8 * i)
        .collect();
    let first_words: BTreeSet<u64> = waitvs.iter().map(|r| r.a[0] as u64).collect();
    assert_eq!(first_words, expected, "{context}: {waitvs:#?}");
    assert_eq!(waitvs.len(), expected.len(), "{context}: {waitvs:#?}");
    for waitv in &waitvs {
        assert_eq!(waitv.a[1], 2, "{context}: words: {waitv:?}");
        assert!(waitv.a[2] > 0, "{context}: blocked ns: {waitv:?}");
        assert_eq!(
            waitv.a[3], 1,
            "{context}: the second word woke it: {waitv:?}"
        );
        assert_eq!(waitv.a[4], -1, "{context}: no timeout: {waitv:?}");
    }
}

/// Checks the raw futex workload's wakes that woke a waiter: one per wait on the rounds' words
/// and one per futex_waitv, each made by the main thread, each waking the one waiter it asked
/// for.
fn assert_raw_wakes_that_woke(run: &Traced, raw: &RawWords, context: &str) {
    let wakes = named(&run.records, "futex_wake");
    let on_words = within(&wakes, raw.words, 4 * WAITERS);
    assert_eq!(
        on_words.len() as u64,
        ROUNDS * WAITERS,
        "{context}: {wakes:#?}"
    );
    assert_wakes(&on_words, 1, 1, context);
    let on_pairs = within(&wakes, raw.pairs, 8 * WAITERS);
    let waitv_wakes = if raw.waitv { WAITERS } else { 0 };
    assert_eq!(on_pairs.len() as u64, waitv_wakes, "{context}: {wakes:#?}");
    assert_wakes(&on_pairs, 1, 1, context);
    assert!(
        on_words.iter().chain(&on_pairs).all(|r| r.lwpid == run.pid),
        "{context}: the main thread's: {wakes:#?}"
    );
}

fn contended_raw_futex_calls(hook: &str) {
    let (run, raw) = raw_run(ROUNDS, WAITERS, &["--contended", "--futex-hook", hook]);
    let context = format!("--futex-hook {hook}");
    let waits = named(&run.records, "futex_wait");
    let on_words = within(&waits, raw.words, 4 * WAITERS);
    assert_eq!(
        on_words.len() as u64,
        ROUNDS * WAITERS,
        "{context}: {waits:#?}"
    );
    assert_woken(&on_words, WAIT, HOLD_MS * MS, &context);
    let timed = within(&waits, raw.lonely, 4);
    assert_eq!(
        timed.len() as u64,
        WAITERS,
        "{context}: one timed wait per waiter, and no wait that returned EAGAIN: {waits:#?}"
    );
    for wait in &timed {
        assert_eq!(wait.a[1], WAIT_BITSET, "{context}: {wait:?}");
        assert_eq!(
            wait.a[3],
            -i64::from(libc::ETIMEDOUT),
            "{context}: {wait:?}"
        );
        assert!(wait.a[2] >= (TIMEOUT_MS - 1) * MS, "{context}: {wait:?}");
        assert!(wait.a[4] > 0, "{context}: an absolute deadline: {wait:?}");
    }
    assert_eq!(
        waits.len(),
        on_words.len() + timed.len(),
        "{context}: no other futex wait (none of pthread_join's): {waits:#?}"
    );
    let threads: BTreeSet<u32> = waits.iter().map(|r| r.lwpid).collect();
    assert_eq!(
        threads.len() as u64,
        WAITERS,
        "{context}: each waiter's own"
    );
    assert_raw_waitv_records(&run, &raw, &context);
    assert_raw_wakes_that_woke(&run, &raw, &context);
    assert_eq!(
        named(&run.records, "futex_wake").len() as u64,
        ROUNDS * WAITERS + if raw.waitv { WAITERS } else { 0 },
        "{context}: no wake that woke none"
    );
}

#[test]
fn contended_records_exactly_the_raw_futex_waits_that_blocked_and_the_wakes_that_woke() {
    if !bpf_available("futex_contended") {
        return;
    }
    for hook in futex_hooks("futex_contended") {
        contended_raw_futex_calls(hook);
    }
}

fn every_raw_futex_call(hook: &str) {
    let (run, raw) = raw_run(
        ROUNDS,
        WAITERS,
        &["--events", "futex", "--futex-hook", hook],
    );
    let context = format!("--futex-hook {hook}");
    let futex = Category::Futex.code();
    assert!(
        run.records.iter().all(|r| r.event1 == futex),
        "{context}: only futex records: {:#?}",
        run.records
    );
    let waits = named(&run.records, "futex_wait");
    let on_words = within(&waits, raw.words, 4 * WAITERS);
    assert_eq!(
        on_words.len() as u64,
        ROUNDS * WAITERS,
        "{context}: {waits:#?}"
    );
    assert_woken(&on_words, WAIT, HOLD_MS * MS, &context);
    let results = |result: i32| {
        within(&waits, raw.lonely, 4)
            .iter()
            .filter(|r| r.a[3] == -i64::from(result))
            .count() as u64
    };
    assert_eq!(
        (results(libc::ETIMEDOUT), results(libc::EAGAIN)),
        (WAITERS, WAITERS),
        "{context}: {waits:#?}"
    );
    assert_raw_waitv_records(&run, &raw, &context);
    assert_raw_wakes_that_woke(&run, &raw, &context);
    // And each waiter's wake of a word nobody waits on, which woke none.
    let unheard = within(&named(&run.records, "futex_wake"), raw.nobody, 4);
    assert_eq!(unheard.len() as u64, WAITERS, "{context}: {unheard:#?}");
    assert_wakes(&unheard, WAKE_ALL, 0, &context);
}

/// A full trace records the futex category only when named, and then every call, blocked or
/// not, woke or not: the same as under `--contended`, each waiter's wait that returned EAGAIN,
/// and its wake that woke none.
#[test]
fn a_full_trace_that_names_futex_records_every_call() {
    if !bpf_available("futex_full") {
        return;
    }
    for hook in futex_hooks("futex_full") {
        every_raw_futex_call(hook);
    }
}

#[test]
fn a_full_trace_without_events_named_records_no_futex_call() {
    if !bpf_available("futex_not_by_default") {
        return;
    }
    let (run, _) = raw_run(1, 1, &[]);
    let futex = Category::Futex.code();
    let calls: Vec<&TraceRecord> = run.records.iter().filter(|r| r.event1 == futex).collect();
    assert!(calls.is_empty(), "{calls:#?}");
    assert!(
        run.records.iter().any(|r| r.is("thr_create", 1)),
        "{:#?}",
        run.records
    );
}

fn pthread_waits_and_wakes_recorded_once(hook: &str) {
    const CONTENTION_ROUNDS: u64 = 2;
    const CONTENTION_WAITERS: u64 = 2;
    let context = format!("--futex-hook {hook}");
    let args =
        [CONTENTION_ROUNDS, HOLD_MS as u64, CONTENTION_WAITERS, 10, 1].map(|n| n.to_string());
    let run = traced_run(
        &workload("contention"),
        &args,
        &["--contended", "--futex-hook", hook],
    );
    let object = |name: &str, size: usize| (field::<u64>(&run.first_line, name), size as u64);
    let mutex_size = size_of::<libc::pthread_mutex_t>();
    let objects = [
        object("first", mutex_size),
        object("second", mutex_size),
        object("sem", size_of::<libc::sem_t>()),
        object("rw", size_of::<libc::pthread_rwlock_t>()),
    ];
    let waits = [
        ("mutex_lock", &objects[..2]),
        ("sema_wait", &objects[2..3]),
        ("rw_rdlock", &objects[3..]),
        ("rw_wrlock", &objects[3..]),
    ];
    for (name, on) in waits {
        let recorded = run
            .records
            .iter()
            .filter(|r| r.is(name, 1) && on.iter().any(|&(at, _)| r.a[0] as u64 == at))
            .count() as u64;
        assert_eq!(
            recorded,
            CONTENTION_ROUNDS * CONTENTION_WAITERS,
            "{context}: {name}"
        );
    }
    for name in ["futex_wait", "futex_wake"] {
        let on_objects: Vec<&TraceRecord> = objects
            .iter()
            .flat_map(|&(at, size)| within(&named(&run.records, name), at, size))
            .collect();
        assert!(
            on_objects.is_empty(),
            "{context}: recorded twice: {on_objects:#?}"
        );
    }
}

/// The contention workload's waits are pthread calls' (two mutexes, a semaphore, a read-write
/// lock; see `contended.rs`), and so are the wakes of the unlocks and posts that end them: under
/// `--contended` each wait is recorded as its pthread event, and none of them, nor their wakes,
/// again as a futex call on a word of those objects.
#[test]
fn a_pthread_wait_or_wake_is_recorded_once_as_its_pthread_event() {
    if !bpf_available("futex_pthread_once") {
        return;
    }
    for hook in futex_hooks("futex_pthread_once") {
        pthread_waits_and_wakes_recorded_once(hook);
    }
}
