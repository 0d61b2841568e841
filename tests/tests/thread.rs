//! The thread category: create, exit and join tie together through pthread_t values and exit
//! values; the other calls carry their arguments and results. The same holds with
//! glibc 2.31, whose thread functions are split between libpthread.so.0 and libc.so.6,
//! and with musl, dynamic and static, whose join, tryjoin and detach go through its timedjoin
//! and whose thread start calls pthread_exit: none of that is a record of its own.

use std::collections::BTreeMap;
use tracer_common::Which;

use thrtrace_tests::{
    bpf_available, codes, deadline_field, every_libc_and_placement, field, is_musl, trace_workload,
};

const EAGAIN: i64 = 11;
const EBUSY: i64 = 16;
const ETIMEDOUT: i64 = 110;
const PTHREAD_CANCELED: i64 = -1;

/// With every glibc: 2.31's thread functions are split between libpthread.so.0 and libc.so.6.
#[test]
fn create_exit_join_and_the_other_thread_calls_are_recorded_as_they_happened() {
    if !bpf_available("thread_story") {
        return;
    }
    for (build, placement) in every_libc_and_placement("thread_story", "thread_story") {
        assert_thread_story(&build, placement);
    }
}

/// Traces `workload` (a build of thread_story.c) with `placement` and checks every record.
fn assert_thread_story(workload: &str, placement: &[&str]) {
    let options = [&["--events", "thread"], placement].concat();
    let (run, lines) = trace_workload(&options, workload, &[]);
    let main = lines[0].pid;
    let of_main = |name: &str, which: Which| -> Vec<[i64; 5]> {
        lines
            .iter()
            .filter(|l| l.lwpid == main && l.is(name, which))
            .map(|l| l.a)
            .collect()
    };

    // The three workers: the new pthread_t that thr_create reports is the tid of the
    // records the new thread writes, and thr_join gets what it passed to pthread_exit.
    let workers: Vec<i64> = ["t0", "t1", "t2"]
        .iter()
        .map(|k| field(&run.stdout, k))
        .collect();
    let created: Vec<i64> = of_main("thr_create", Which::Return)
        .iter()
        .map(|a| a[1])
        .collect();
    assert_eq!(created[..3], workers[..], "{placement:?}");
    // Each thread's first exit: musl gives a later thread a joined one's pthread_t again.
    let mut exits: BTreeMap<u64, i64> = BTreeMap::new();
    for exit in lines.iter().filter(|l| l.is("thr_exit", Which::Whole)) {
        exits.entry(exit.tid).or_insert(exit.a[0]);
    }
    for (i, &worker) in workers.iter().enumerate() {
        assert_eq!(
            exits.get(&(worker as u64)),
            Some(&(100 + i as i64)),
            "{workload}: worker {i}'s own records"
        );
    }
    let joins = of_main("thr_join", Which::Return);
    assert_eq!(
        joins[..3],
        [
            [workers[0], 100, 0, 0, 0],
            [workers[1], 101, 0, 0, 0],
            [workers[2], 102, 0, 0, 0]
        ]
    );

    let self_tid = lines[0].tid as i64;
    assert_eq!(of_main("thr_kill", Which::Whole), [[self_tid, 0, 0, 0, 0]]);
    assert_eq!(of_main("thr_sigsetmask", Which::Whole).len(), 1);
    assert_eq!(
        of_main("thr_sigsetmask", Which::Whole)[0][0],
        0,
        "SIG_BLOCK"
    );
    assert_eq!(of_main("thr_yield", Which::Whole).len(), 1);
    // pthread_self is declared const: gcc calls it once for the four uses in main.
    assert_eq!(of_main("thr_self", Which::Whole), [[0; 5]]);
    assert_eq!(
        of_main("thr_setspecific", Which::Whole)[0][1..3],
        [0x1234, 0]
    );
    assert_eq!(
        of_main("thr_getspecific", Which::Whole)[0][1],
        0x1234,
        "the value returned"
    );
    assert_eq!(of_main("thr_keycreate", Which::Whole)[0][2], 0);
    assert_eq!(of_main("thr_keydelete", Which::Whole)[0][1], 0);
    assert_eq!(
        of_main("thr_getscheduler", Which::Whole),
        [[self_tid, 0, 0, 0, 0]],
        "SCHED_OTHER, priority 0"
    );
    assert_eq!(
        of_main("thr_setscheduler", Which::Whole),
        [[self_tid, 0, 0, 0, 0]]
    );
    assert_eq!(
        of_main("thr_setprio", Which::Whole),
        [[self_tid, 0, 0, 0, 0]]
    );
    // musl keeps no concurrency level: it refuses 4, and says 0.
    let (refused, level) = match is_musl(workload) {
        true => (EAGAIN, 0),
        false => (0, 4),
    };
    assert_eq!(
        of_main("thr_setconcurrency", Which::Whole),
        [[4, refused, 0, 0, 0]]
    );
    assert_eq!(
        of_main("thr_getconcurrency", Which::Whole),
        [[level, 0, 0, 0, 0]]
    );

    // The sleeper: tryjoin EBUSY (nothing stored: a2 0), timedjoin ETIMEDOUT at its
    // deadline, cancel, and a join that gets PTHREAD_CANCELED; then a detach.
    let sleeper = of_main("thr_create", Which::Return)[3][1];
    let pairs = |name: &str| {
        let (event1, event2) = codes(name);
        lines
            .iter()
            .filter(|l| (l.event1, l.event2) == (event1, event2))
            .map(|l| l.a)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        pairs("pthread_tryjoin_np"),
        [[sleeper, 0, 0, 0, 0], [sleeper, 0, EBUSY, 0, 0]]
    );
    let (sec, nsec) = deadline_field(&run.stdout, "deadline");
    assert_eq!(
        pairs("pthread_timedjoin_np"),
        [[sleeper, sec, nsec, 0, 0], [sleeper, 0, ETIMEDOUT, 0, 0]]
    );
    assert_eq!(pairs("pthread_cancel"), [[sleeper, 0, 0, 0, 0]]);
    assert_eq!(joins[3], [sleeper, PTHREAD_CANCELED, 0, 0, 0]);
    let loose = of_main("thr_create", Which::Return)[4][1];
    assert_eq!(pairs("pthread_detach"), [[loose, 0, 0, 0, 0]]);
}
