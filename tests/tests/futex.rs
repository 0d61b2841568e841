//! The futex category (`docs/futex-design.md`): futex waits and wakes made outside traced
//! pthread calls, each recorded once at the syscall's exit, through each of the ways the tracer
//! can hook the futex syscalls (`--futex-hook`). The workloads' waits are certain (a thread of
//! theirs sees each waiter asleep in its wait, through /proc, before it ends it), so the
//! records are counted exactly: the raw futex calls of futex_raw.c, including a futex_waitv(2)
//! round where the kernel has it; Rust's `std::sync::Mutex` and `Condvar` (src/bin/futex_std.rs),
//! which the workload counts itself; glibc's own lock of a FILE (stdio_lock.c); and, at least
//! once, malloc's lock of an arena (malloc_arena.c). Under `--contended` only the waits that
//! blocked and the wakes that woke one are recorded, with their stacks; a full trace records
//! every futex call when `-e futex` names the category, none otherwise; and a pthread call's
//! wait or wake is its pthread event's alone.

use std::{collections::BTreeSet, path::Path, sync::OnceLock};

use serde_json::Value;
use thrtrace_tests::{
    TempDir, Traced, bpf_available, field, kernel_refuses_tracing_programs, prerequisite,
    read_trace, report_futex_row, report_idle_wait, report_json, report_lock, run_tracer, skips,
    stack_functions, trace_launched, traced_run, workload,
};
use tracer_common::{
    Category, Which,
    futex::{SYS_FUTEX_WAITV, command},
};
use tracer_model::TraceRecord;

const ROUNDS: u64 = 3;
const WAITERS: u64 = 3;
const HOLD_MS: i64 = 50;
/// Long enough that a starved emulated CPU (three guests on two cores) still reaches the wait
/// before its deadline: a wait that times out before it sleeps is not recorded `--contended`.
const TIMEOUT_MS: i64 = 200;
const MS: i64 = 1_000_000;
/// The flag of the futex calls of one process, which every call here makes.
const PRIVATE: i64 = libc::FUTEX_PRIVATE_FLAG as i64;
const WAIT: i64 = command::WAIT as i64 | PRIVATE;
const WAIT_BITSET: i64 = command::WAIT_BITSET as i64 | PRIVATE;
const WAKE: i64 = command::WAKE as i64 | PRIVATE;
/// What a wake that wakes every waiter asks for (`INT_MAX`).
const WAKE_ALL: i64 = i32::MAX as i64;

/// The ways the tracer can hook the futex syscalls (`--futex-hook`), each with why this kernel
/// does not have it, as the tracer says when asked for it alone (on a trace of `true`), if it
/// does not. Asked once per test binary.
fn hook_refusals() -> &'static [(&'static str, Option<String>)] {
    static REFUSALS: OnceLock<Vec<(&'static str, Option<String>)>> = OnceLock::new();
    REFUSALS.get_or_init(|| {
        ["fentry", "syscall-tracepoints", "raw-syscalls"]
            .into_iter()
            .map(|hook| {
                let dir = TempDir::new("futex-hook");
                let args = ["--contended", "--futex-hook", hook, "--", "true"];
                let run = run_tracer(dir.path(), &args);
                let refusal = (!run.status.success()).then(|| {
                    // Any other failure is the tracer's own.
                    assert!(
                        run.stderr.contains("cannot be used on this kernel"),
                        "{args:?}: {run:?}"
                    );
                    run.stderr.trim().to_owned()
                });
                (hook, refusal)
            })
            .collect()
    })
}

/// The ways to hook the futex syscalls that this kernel has, for `test` to run under each; one
/// it has not skips its part of `test`, or fails it in CI.
fn futex_hooks(test: &str) -> Vec<&'static str> {
    hook_refusals()
        .iter()
        .filter(|(hook, refusal)| {
            // A machine that lets no tracing program load has no fentry hook, CI or not: the
            // kernel guests run it.
            if *hook == "fentry" && refusal.is_some() && kernel_refuses_tracing_programs() {
                eprintln!("{test}: not under fentry: this kernel refuses every tracing program");
                return false;
            }
            // Nor one whose kernel answered the attach itself that it has no trampolines
            // into its functions (arm64 before 6.5: Debian 12's).
            if *hook == "fentry"
                && let Some(refusal) = refusal
                && refusal.contains("cannot attach tracing programs to its own functions (ENOTSUPP")
            {
                eprintln!("{test}: not under fentry: {refusal}");
                return false;
            }
            prerequisite(&format!("{test} {hook}"), refusal.as_deref())
        })
        .map(|(hook, _)| *hook)
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

/// Runs `check` under each futex hook this kernel has (`futex_hooks`), its skips accounted
/// for (`skips::accounted`); `test` names it in what is said.
fn under_each_hook(test: &str, check: impl Fn(&str)) {
    if !bpf_available(test) {
        return;
    }
    for hook in futex_hooks(test) {
        skips::accounted(&format!("{test} {hook}"), || check(hook));
    }
}

/// The `name` records (`futex_wait`, ...) among `records`; each is one record (`which` 0).
fn named<'a>(records: &'a [TraceRecord], name: &str) -> Vec<&'a TraceRecord> {
    records
        .iter()
        .filter(|r| r.is(name, Which::Whole))
        .collect()
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

/// Checks the raw futex workload's waits on the rounds' words: one per waiter and round, each
/// woken after blocking at least the hold. Returns every `futex_wait` record of the run.
fn assert_raw_round_waits<'a>(
    run: &'a Traced,
    raw: &RawWords,
    context: &str,
) -> Vec<&'a TraceRecord> {
    let waits = named(&run.records, "futex_wait");
    let on_words = within(&waits, raw.words, 4 * WAITERS);
    assert_eq!(
        on_words.len() as u64,
        ROUNDS * WAITERS,
        "{context}: {waits:#?}"
    );
    assert_woken(&on_words, WAIT, HOLD_MS * MS, context);
    waits
}

fn contended_raw_futex_calls(hook: &str) {
    let (run, raw) = raw_run(ROUNDS, WAITERS, &["--contended", "--futex-hook", hook]);
    let context = format!("--futex-hook {hook}");
    let waits = assert_raw_round_waits(&run, &raw, &context);
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
        // It slept until its deadline, which the workload set TIMEOUT_MS ahead just before
        // the call: blocked for most of that (under emulation, the call began up to
        // milliseconds after the deadline was set), not returned at once.
        assert!(wait.a[2] >= TIMEOUT_MS / 2 * MS, "{context}: {wait:?}");
        assert!(wait.a[4] > 0, "{context}: an absolute deadline: {wait:?}");
    }
    assert_eq!(
        waits.len() as u64,
        ROUNDS * WAITERS + timed.len() as u64,
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
    under_each_hook("futex_contended", contended_raw_futex_calls);
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
    let waits = assert_raw_round_waits(&run, &raw, &context);
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
    under_each_hook("futex_full", every_raw_futex_call);
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
        run.records.iter().any(|r| r.is("thr_create", Which::Entry)),
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
            .filter(|r| r.is(name, Which::Entry) && on.iter().any(|&(at, _)| r.a[0] as u64 == at))
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
    under_each_hook("futex_pthread_once", pthread_waits_and_wakes_recorded_once);
}

/// Checks that each of a JSON report's stacks of the futex word at `address` (the
/// `waiting_stacks` of its row, of one of `kinds`) starts with one of `chains` (functions,
/// innermost first) and was unwound to its thread's start, and that they are `waits` waits in
/// all.
fn assert_waiting_stacks(
    report: &Value,
    (address, kinds): (i64, &[&str]),
    chains: &[&[&str]],
    waits: u64,
    at: &str,
) {
    let lock = report_futex_row(report, &Value::from(format!("{address:#x}")));
    assert!(
        kinds.iter().any(|kind| lock["kind"] == *kind),
        "{at}: {lock:#}"
    );
    let stacks = lock["waiting_stacks"].as_array().unwrap();
    // A generic function's frame names its instance's arguments where the program's symbols
    // are mangled as Rust's v0 (nightly's default, which the arm64 cross builds use):
    // `__rust_begin_short_backtrace::<…>`.
    let names = |function: &str, named: &str| {
        function
            .strip_prefix(named)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::<"))
    };
    for stack in stacks {
        let functions = stack_functions(stack);
        assert!(
            chains.iter().any(|chain| chain.len() <= functions.len()
                && chain
                    .iter()
                    .zip(&functions)
                    .all(|(named, f)| names(f, named))),
            "{at}: none of {chains:?} in {functions:#?}"
        );
        assert_eq!(stack["end"], Value::Null, "{at}: {stack:#}");
    }
    let counted: u64 = stacks.iter().map(|s| s["count"].as_u64().unwrap()).sum();
    assert_eq!(counted, waits, "{at}: {lock:#}");
}

/// Checks that each of `waits` (none, as a rule) was on a lock of the runtime's own (glibc's,
/// or std's), which threads take as they start and end, and which one starting beside
/// another ending contends for by chance: none of its stacks in the JSON `report` passes
/// through the workload's own functions (those named with `workload`).
fn assert_runtime_waits(report: &Value, waits: &[&TraceRecord], workload: &str, context: &str) {
    for wait in waits {
        // Woken by a thread that never waited on it, a runtime word reads as an event.
        let lock = report_futex_row(report, &Value::from(format!("{:#x}", wait.a[0])));
        for stack in lock["waiting_stacks"].as_array().unwrap() {
            let functions = stack_functions(stack);
            assert!(
                !functions.iter().any(|f| f.starts_with(workload)),
                "{context}: a wait of the workload's on no object of its own: {functions:#?}"
            );
        }
    }
}

/// The one address that all of `records` are on.
fn the_address(records: &[&TraceRecord], context: &str) -> i64 {
    let addresses: BTreeSet<i64> = records.iter().map(|r| r.a[0]).collect();
    assert_eq!(addresses.len(), 1, "{context}: {records:#?}");
    addresses.into_iter().next().unwrap()
}

// std is mangled the v0 way, whose methods demangle as `<Type>::method`; the workload the
// legacy way (`futex_std::wait_for_permit`), and with it std's generic functions, such as the
// frame every thread's closure is called from. The innermost frame is the syscall's own
// instruction, in libc's `syscall`.
const LOCK_CONTENDED: &str = "<std::sys::sync::mutex::futex::Mutex>::lock_contended";
const CONDVAR_WAIT: &str = "<std::sys::sync::condvar::futex::Condvar>::wait";
const LOCK_HELD_MUTEX: &str = "futex_std::lock_held_mutex";
const WAIT_FOR_PERMIT: &str = "futex_std::wait_for_permit";
const THREAD_CLOSURE: &str = "std::sys::backtrace::__rust_begin_short_backtrace";

fn std_mutex_and_condvar(hook: &str) {
    let context = format!("--futex-hook {hook}");
    let args = [ROUNDS, WAITERS, HOLD_MS as u64].map(|n| n.to_string());
    let program = Path::new(env!("CARGO_BIN_EXE_futex_std"));
    let run = traced_run(program, &args, &["--contended", "--futex-hook", hook]);
    let mutex: u64 = field(&run.first_line, "mutex");
    let condvar: u64 = field(&run.first_line, "condvar");
    let mutex_waits: u64 = field(&run.rest, "mutex_waits");
    let condvar_waits: u64 = field(&run.rest, "condvar_waits");
    // Each round's mutex phase and notify_all phase block each waiter on the mutex; its
    // notify_one and notify_all phases, on the condition variable.
    assert_eq!(
        (mutex_waits, condvar_waits),
        (2 * ROUNDS * WAITERS, 2 * ROUNDS * WAITERS),
        "{}",
        run.rest
    );

    let all_waits = named(&run.records, "futex_wait");
    let on_mutex = within(&all_waits, mutex, field(&run.first_line, "mutex_size"));
    let on_condvar = within(&all_waits, condvar, field(&run.first_line, "condvar_size"));
    assert_eq!(
        on_mutex.len() as u64,
        mutex_waits,
        "{context}: {all_waits:#?}"
    );
    assert_eq!(
        on_condvar.len() as u64,
        condvar_waits,
        "{context}: {all_waits:#?}"
    );
    let waits: Vec<&TraceRecord> = on_mutex.iter().chain(&on_condvar).copied().collect();
    let report = report_json(&run.dir, &["app.ptl"]);
    let others: Vec<&TraceRecord> = all_waits
        .iter()
        .filter(|r| !waits.contains(r))
        .copied()
        .collect();
    assert_runtime_waits(&report, &others, "futex_std::", &context);
    // With no timeout here; none returned EAGAIN.
    assert_woken(&waits, WAIT_BITSET, 1, &context);

    // Each mutex wait was ended by an unlock's wake of one; the last waiter's unlock woke none.
    let wakes = named(&run.records, "futex_wake");
    let mutex_wakes = within(&wakes, mutex, field(&run.first_line, "mutex_size"));
    assert_eq!(
        mutex_wakes.len() as u64,
        mutex_waits,
        "{context}: {wakes:#?}"
    );
    assert_wakes(&mutex_wakes, 1, 1, &context);
    // The condition variable's: a notify_one per waiter, and a notify_all per round that woke
    // every waiter.
    let condvar_wakes = within(&wakes, condvar, field(&run.first_line, "condvar_size"));
    let (ones, alls): (Vec<&TraceRecord>, Vec<&TraceRecord>) =
        condvar_wakes.iter().partition(|r| r.a[3] == 1);
    assert_eq!(ones.len() as u64, ROUNDS * WAITERS, "{context}: {wakes:#?}");
    assert_wakes(&ones, 1, 1, &context);
    assert_eq!(alls.len() as u64, ROUNDS, "{context}: {wakes:#?}");
    assert_wakes(&alls, WAKE_ALL, WAITERS as i64, &context);
    let runtime_words: BTreeSet<i64> = others.iter().map(|r| r.a[0]).collect();
    let other_wakes: Vec<&&TraceRecord> = wakes
        .iter()
        .filter(|r| !runtime_words.contains(&r.a[0]))
        .collect();
    assert_eq!(
        other_wakes.len(),
        mutex_wakes.len() + condvar_wakes.len(),
        "{context}: no other wake than of the workload's objects and the runtime's own locks: \
         {wakes:#?}"
    );

    assert_waiting_stacks(
        &report,
        // Each waiter, once woken, wakes the next as it unlocks: a lock. But where a slow
        // machine has every waiter woken by the thread that held it first, its records are an
        // event's (docs/events.md): 6.12 arm64's emulated boot saw it so.
        (the_address(&on_mutex, &context), &["futex", "futex event"]),
        &[
            &["syscall", LOCK_CONTENDED, LOCK_HELD_MUTEX, THREAD_CLOSURE],
            // A woken waiter takes the mutex back in the condition variable's wait.
            &[
                "syscall",
                LOCK_CONTENDED,
                CONDVAR_WAIT,
                WAIT_FOR_PERMIT,
                THREAD_CLOSURE,
            ],
            // Where std is built with the program (the arm64 cross builds' -Zbuild-std), the
            // wait ends in a tail call of lock_contended (`b`): its frame is gone by then.
            &["syscall", LOCK_CONTENDED, WAIT_FOR_PERMIT, THREAD_CLOSURE],
        ],
        mutex_waits,
        &format!("{context}: the mutex"),
    );
    // Notified by the main thread, which never waits on it: an event.
    assert_waiting_stacks(
        &report,
        (the_address(&on_condvar, &context), &["futex event"]),
        &[&["syscall", CONDVAR_WAIT, WAIT_FOR_PERMIT, THREAD_CLOSURE]],
        condvar_waits,
        &format!("{context}: the condition variable"),
    );
}

/// Rust's std locks wait and wake with the futex syscall, in no pthread call: every wait the
/// workload saw blocked is recorded, on the mutex or the condition variable, with the wakes
/// that ended them, and each stack names std's lock function and the workload's, demangled.
#[test]
fn rust_std_mutex_and_condvar_waits_are_recorded_with_their_stacks() {
    under_each_hook("futex_std", std_mutex_and_condvar);
}

fn stdio_lock_waits(hook: &str) {
    let context = format!("--futex-hook {hook}");
    let args = [ROUNDS, HOLD_MS as u64].map(|n| n.to_string());
    let run = traced_run(
        &workload("stdio_lock"),
        &args,
        &["--contended", "--futex-hook", hook],
    );
    let lock: u64 = field(&run.first_line, "lock");
    // glibc's lll_lock: FUTEX_WAIT_PRIVATE on the lock's word, for the value 2 (contended).
    let waits = named(&run.records, "futex_wait");
    assert_eq!(
        within(&waits, lock, 4).len() as u64,
        ROUNDS,
        "{context}: {waits:#?}"
    );
    assert_eq!(
        waits.len() as u64,
        ROUNDS,
        "{context}: none from a pthread call: {waits:#?}"
    );
    assert_woken(&waits, WAIT, HOLD_MS * MS, &context);
    let writer: BTreeSet<u32> = waits.iter().map(|r| r.lwpid).collect();
    assert!(
        writer.len() == 1 && !writer.contains(&run.pid),
        "{context}: the writer thread's: {waits:#?}"
    );
    // Each funlockfile woke the writer; the writer's own unlocks woke none.
    let wakes = named(&run.records, "futex_wake");
    assert_eq!(
        within(&wakes, lock, 4).len() as u64,
        ROUNDS,
        "{context}: {wakes:#?}"
    );
    assert_eq!(wakes.len() as u64, ROUNDS, "{context}: {wakes:#?}");
    assert_wakes(&wakes, 1, 1, &context);
    assert!(
        wakes.iter().all(|r| r.lwpid == run.pid),
        "{context}: the main thread's: {wakes:#?}"
    );
    let report = report_json(&run.dir, &["app.ptl"]);
    // fputs's global name, before its weak alias (the symbolizer names an address so). Only
    // the writer ever waits, only for the main thread, which never waits: the records are an
    // event's, and the lock is told as one (docs/events.md says so).
    assert_waiting_stacks(
        &report,
        (lock as i64, &["futex event"]),
        &[&["__lll_lock_wait_private", "_IO_fputs", "writer"]],
        ROUNDS,
        &format!("{context}: the FILE's lock"),
    );
}

/// glibc's stdio locks its FILEs with a lock of its own, whose contended path waits with the
/// futex syscall in no pthread call: each round's fputs on a FILE locked by another thread is
/// one futex wait, through `__lll_lock_wait_private` and fputs, and the unlock's wake ends it.
#[test]
fn glibc_internal_lock_waits_are_recorded_with_their_stacks() {
    under_each_hook("futex_stdio", stdio_lock_waits);
}

/// The words of futex_uses.c: a lock three threads take turns at, and a count one thread
/// waits on for another's ticks. Each wait and wake is recorded; the report lists the lock among
/// the locks, the event after them among the idle waits (though it was waited on longer), each
/// with its exact waits and wakes and named by its path in the global array of structs it is
/// in, as is the mutex beside them.
fn futex_lock_and_event(hook: &str) {
    const LOCK_ROUNDS: u64 = 3;
    const TICKS: u64 = 4;
    let context = format!("--futex-hook {hook}");
    let args = [LOCK_ROUNDS, 20, TICKS, 60].map(|n| n.to_string());
    let run = traced_run(
        &workload("futex_uses"),
        &args,
        &["--contended", "--futex-hook", hook],
    );
    let (lock, tick): (u64, u64) = (
        field(&run.first_line, "lock"),
        field(&run.first_line, "tick"),
    );
    let (waits, wakes) = (
        named(&run.records, "futex_wait"),
        named(&run.records, "futex_wake"),
    );
    // Each round, two waiters block and are woken, each by the thread that held the lock.
    assert_eq!(
        within(&waits, lock, 4).len() as u64,
        2 * LOCK_ROUNDS,
        "{context}: {waits:#?}"
    );
    assert_eq!(
        within(&wakes, lock, 4).len() as u64,
        2 * LOCK_ROUNDS,
        "{context}: {wakes:#?}"
    );
    assert_eq!(
        within(&waits, tick, 4).len() as u64,
        TICKS,
        "{context}: {waits:#?}"
    );
    assert_eq!(
        within(&wakes, tick, 4).len() as u64,
        TICKS,
        "{context}: {wakes:#?}"
    );
    // Only the workload's words: glibc's own locks may be waited on as its threads end.
    assert_woken(&within(&waits, lock, 4), WAIT, 20 * MS, &context);
    assert_woken(&within(&waits, tick, 4), WAIT, 60 * MS, &context);
    assert_wakes(&within(&wakes, lock, 8), 1, 1, &context);

    let report = report_json(&run.dir, &["app.ptl"]);
    let as_lock = report_lock(&report, &Value::from(format!("{lock:#x}")));
    let as_event = report_idle_wait(&report, &Value::from(format!("{tick:#x}")));
    let counts =
        |row: &Value, keys: &[&str]| -> Value { keys.iter().map(|key| row[key].clone()).collect() };
    let keys = ["kind", "symbol", "acquisitions", "contended", "wakeups"];
    assert_eq!(
        counts(as_lock, &keys),
        serde_json::json!(["futex", "shared[1].lock", 6, 6, 6]),
        "{context}: {as_lock:#}"
    );
    assert_eq!(
        counts(as_event, &keys),
        serde_json::json!(["futex event", "shared[1].tick", 4, 4, 4]),
        "{context}: {as_event:#}"
    );
    let mutex: u64 = field(&run.first_line, "mutex");
    let mutex = report_lock(&report, &Value::from(format!("{mutex:#x}")));
    assert_eq!(
        counts(mutex, &["kind", "symbol", "contended"]),
        serde_json::json!(["mutex", "shared[1].mutex", 3]),
        "{context}: {mutex:#}"
    );
    let waited = |row: &Value| row["wait_total_ns"].as_u64().unwrap();
    assert!(waited(as_event) > waited(as_lock), "{context}: {report:#}");
    // The text: the lock's row in the lock table, the event's after it, among the idle waits.
    let text = run_tracer(run.dir.path(), &["report", "app.ptl"]).stdout;
    let line = |starts: &str| {
        text.lines()
            .position(|l| l.starts_with(starts))
            .unwrap_or_else(|| panic!("{context}: no line {starts:?} in {text}"))
    };
    let idle = line("idle waits, for work or an event (futex event, cond, barrier, join)");
    assert!(line("shared[1].lock   futex ") < idle, "{context}: {text}");
    assert!(
        line("shared[1].tick   futex event ") > idle,
        "{context}: {text}"
    );
}

#[test]
fn a_futex_word_used_as_a_lock_is_listed_before_one_used_as_an_event() {
    under_each_hook("futex_uses", futex_lock_and_event);
}

/// Threads allocating in one arena wait for its lock: likely, not certain, so at least one
/// wait is asked for. Each is glibc's lock wait (FUTEX_WAIT_PRIVATE, woken, no timeout), none
/// the main thread's (it is in pthread_join, a pthread call), and each stack starts in
/// `__lll_lock_wait_private` and is unwound to its thread's start, some through the workload's
/// `worker` (the others through the threads' exit, which takes malloc's locks too). The threads
/// are gone a moment after their last wait: their stacks must be unwound all the same.
#[test]
fn glibc_malloc_arena_lock_waits_are_recorded_with_their_stacks() {
    if !bpf_available("futex_malloc") {
        return;
    }
    // At least one wait is asked for, not a count: a futex call the kernel skipped (counted
    // lost) is no failure here.
    let (dir, _) = trace_launched(
        &["--contended", "--log", "app.ptl", "--dir", "."],
        "malloc_arena",
        &["4", "200000"],
    );
    let records: Vec<TraceRecord> = read_trace(dir.path()).into_values().flatten().collect();
    let waits = named(&records, "futex_wait");
    assert!(!waits.is_empty(), "no wait for malloc's arena lock");
    assert_woken(&waits, WAIT, 1, "malloc");
    assert!(
        waits.iter().all(|r| r.lwpid != r.pid),
        "none of the main thread's: {waits:#?}"
    );
    let report = report_json(&dir, &["app.ptl"]);
    let stacks: Vec<&Value> = report["locks"]
        .as_array()
        .unwrap()
        .iter()
        .chain(report["idle_waits"].as_array().unwrap())
        .filter(|lock| {
            lock["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("futex"))
        })
        .flat_map(|lock| lock["waiting_stacks"].as_array().unwrap())
        .collect();
    for stack in &stacks {
        let functions = stack_functions(stack);
        assert_eq!(
            functions.first().map(String::as_str),
            Some("__lll_lock_wait_private"),
            "{stack:#}"
        );
        assert_eq!(
            stack["end"],
            Value::Null,
            "unwound to its thread's start: {stack:#}"
        );
    }
    assert!(
        stacks
            .iter()
            .any(|stack| stack_functions(stack).iter().any(|f| f == "worker")),
        "{stacks:#?}"
    );
}
