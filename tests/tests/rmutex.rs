//! Recursive mutexes are told from plain ones at run time and recorded under rmutex; each
//! category alone records only its kind.

use thrtrace_tests::{
    TraceRecord, bpf_available, every_libc, every_libc_and_placement, field, paired_calls,
    trace_workload,
};
use tracer_common::Which;

const EBUSY: i64 = 16;

/// Traces `build`, a build of rmutex_depth.c.
fn trace(events: &str, build: &str, placement: &[&str]) -> (String, Vec<TraceRecord>) {
    let options = [&["--events", events], placement].concat();
    let (run, lines) = trace_workload(&options, build, &[]);
    (run.stdout, lines)
}

#[test]
fn a_recursive_mutex_is_an_rmutex_with_its_depth() {
    if !bpf_available("rmutex_depth") {
        return;
    }
    for (build, placement) in every_libc_and_placement("rmutex_depth", "rmutex_depth") {
        let (stdout, lines) = trace("rmutex", &build, placement);
        let rmutex: i64 = field(&stdout, "rmutex");
        assert!(
            lines.iter().all(|l| l.event1 == 6),
            "only rmutex records: {lines:?}"
        );
        // libc's own recursive locks show up at exit too: only calls on ours are counted.
        let ours = |name: &str| -> Vec<[i64; 5]> {
            lines
                .iter()
                .filter(|l| l.is(name, Which::Whole) && l.a[0] == rmutex)
                .map(|l| l.a)
                .collect()
        };
        assert_eq!(ours("rmutex_init").len(), 1, "{build} {placement:?}");
        let depths: Vec<[i64; 5]> = paired_calls(&lines, "rmutex_lock", rmutex)
            .iter()
            .map(|(_, exit)| exit.a)
            .collect();
        assert_eq!(
            depths,
            [[0, 0, 1, 0, 0], [0, 0, 2, 0, 0], [0, 0, 3, 0, 0]],
            "rm_depth"
        );
        assert_eq!(ours("rmutex_trylock"), [[rmutex, EBUSY, 0, 0, 0]]);
        let trylock = lines
            .iter()
            .find(|l| l.is("rmutex_trylock", Which::Whole))
            .unwrap();
        assert_ne!(trylock.lwpid, trylock.pid, "tried from the other thread");
        assert_eq!(ours("rmutex_unlock"), [[rmutex, 0, 0, 0, 0]; 3]);
        assert_eq!(ours("rmutex_destroy"), [[rmutex, 0, 0, 0, 0]]);
    }
}

#[test]
fn mutex_alone_records_only_the_plain_mutex() {
    if !bpf_available("mutex_not_rmutex") {
        return;
    }
    for build in every_libc("mutex_not_rmutex", "rmutex_depth") {
        let (stdout, lines) = trace("mutex", &build, &[]);
        let (rmutex, plain): (i64, i64) = (field(&stdout, "rmutex"), field(&stdout, "plain"));
        assert!(lines.iter().all(|l| l.event1 == 2), "{lines:?}");
        assert!(
            !lines.iter().any(|l| l.a[0] == rmutex),
            "no record of the recursive mutex"
        );
        let plain_calls: Vec<&TraceRecord> = lines.iter().filter(|l| l.a[0] == plain).collect();
        assert_eq!(
            plain_calls.len(),
            2,
            "its lock entry and its unlock: {plain_calls:?}"
        );
    }
}
