//! The rwlock category: rw_readers, block?, waiters?, EBUSY and a timed-out timedwrlock, from a
//! workload whose story is fixed (tests/workloads/rwlock_story.c).

use thrtrace_tests::{
    TraceRecord, bpf_available, codes, deadline_field, every_libc_and_placement, field,
    trace_workload,
};
use tracer_common::Which;

const EBUSY: i64 = 16;
const ETIMEDOUT: i64 = 110;

#[test]
fn readers_writers_and_try_locks_are_recorded_as_they_happened() {
    if !bpf_available("rwlock_story") {
        return;
    }
    for (build, placement) in every_libc_and_placement("rwlock_story", "rwlock_story") {
        let options = [&["--events", "rwlock"], placement].concat();
        let (run, lines) = trace_workload(&options, &build, &[]);
        let rw: i64 = field(&run.stdout, "rwlock");
        let fields = |name: &str, which: Which| -> Vec<[i64; 5]> {
            lines
                .iter()
                .filter(|l| l.is(name, which))
                .map(|l| l.a)
                .collect()
        };
        let (main_pid, timed) = (lines[0].pid, codes("pthread_rwlock_timedwrlock"));
        assert_eq!(
            fields("rwlock_init", Which::Whole),
            [[rw, 0, 0, 0, 0]],
            "{build} {placement:?}"
        );
        // The readers took the lock one after another and kept it: 1, 2, 3 readers.
        assert_eq!(
            fields("rw_rdlock", Which::Entry),
            [[rw, 0, 0, 0, 0]; 3],
            "{build} {placement:?}"
        );
        assert_eq!(
            fields("rw_rdlock", Which::Return),
            [[0, 0, 1, 0, 0], [0, 0, 2, 0, 0], [0, 0, 3, 0, 0]],
            "{build} {placement:?}"
        );
        assert_eq!(fields("rw_trywrlock", Which::Whole), [[rw, EBUSY, 0, 0, 0]]);
        let (sec, nsec) = deadline_field(&run.stdout, "deadline");
        let timed_lines: Vec<&TraceRecord> = lines
            .iter()
            .filter(|l| (l.event1, l.event2) == timed)
            .collect();
        assert_eq!(timed_lines.len(), 2);
        assert_eq!(timed_lines[0].a, [rw, sec, nsec, 0, 0]);
        assert_eq!(timed_lines[1].a[0], ETIMEDOUT);
        assert!(
            timed_lines
                .iter()
                .all(|l| l.pid == main_pid && l.lwpid == main_pid)
        );
        // The writer slept behind the readers.
        assert_eq!(fields("rw_wrlock", Which::Return), [[0, 1, 0, 0, 0]]);
        assert_eq!(fields("rw_tryrdlock", Which::Whole), [[rw, EBUSY, 0, 0, 0]]);
        // Each reader let go while the writer waited; the writer let go with nobody waiting.
        assert_eq!(
            fields("rw_unlock", Which::Whole),
            [
                [rw, 0, 1, 0, 0],
                [rw, 0, 1, 0, 0],
                [rw, 0, 1, 0, 0],
                [rw, 0, 0, 0, 0]
            ]
        );
        assert_eq!(fields("rwlock_destroy", Which::Whole), [[rw, 0, 0, 0, 0]]);
    }
}
