//! The sema category: exact s_count, rval and errno for a known sequence of calls.

use thrtrace_tests::{
    TraceRecord, bpf_available, deadline_field, every_libc_and_placement, field, is_musl,
    trace_workload,
};
use tracer_common::Which;

const EAGAIN: i64 = 11;
const ETIMEDOUT: i64 = 110;
const CLOCK_MONOTONIC: i64 = 1;

#[test]
fn a_known_sequence_gives_the_expected_s_counts_return_values_and_errnos() {
    if !bpf_available("sema_sequence") {
        return;
    }
    for (build, placement) in every_libc_and_placement("sema_sequence", "sem_sequence") {
        let options = [&["--events", "sema"], placement].concat();
        let (run, lines) = trace_workload(&options, &build, &[]);
        let sem: i64 = field(&run.stdout, "sem");
        assert!(lines.iter().all(|l| l.lwpid == l.pid), "one thread");
        let lines: Vec<&TraceRecord> = lines
            .iter()
            .filter(|l| l.a[0] == sem || l.which == Which::Return)
            .collect();
        let fields = |name: &str, which: Which| -> Vec<[i64; 5]> {
            lines
                .iter()
                .filter(|l| l.is(name, which))
                .map(|l| l.a)
                .collect()
        };
        assert_eq!(
            fields("sema_init", Which::Whole),
            [[sem, 2, 0, 0, 0]],
            "{build} {placement:?}"
        );
        let case = format!("{build} {placement:?}");
        assert_eq!(
            fields("sema_wait", Which::Entry),
            [[sem, 2, 0, 0, 0], [sem, 1, 0, 0, 0], [sem, 1, 0, 0, 0]],
            "{case}"
        );
        assert_eq!(fields("sema_wait", Which::Return), [[0; 5]; 3], "{case}");
        assert_eq!(
            fields("sema_trywait", Which::Whole),
            [[sem, -1, EAGAIN, 0, 0], [sem, 0, 0, 0, 0]],
            "{case}"
        );
        assert_eq!(
            fields("sema_post", Which::Whole),
            [[sem, 0, 1, 0, 0], [sem, 0, 2, 0, 0]],
            "{case}"
        );
        let (sec, nsec) = deadline_field(&run.stdout, "deadline");
        assert_eq!(
            fields("sem_timedwait", Which::Entry),
            [[sem, 0, sec, nsec, 0]]
        );
        assert_eq!(
            fields("sem_timedwait", Which::Return),
            [[-1, ETIMEDOUT, 0, 0, 0]]
        );
        // musl has no sem_clockwait.
        let (clockwaits, clock_returns) = if is_musl(&build) {
            (vec![], vec![])
        } else {
            let (sec, nsec) = deadline_field(&run.stdout, "clockdeadline");
            (
                vec![[sem, 0, sec, nsec, CLOCK_MONOTONIC]],
                vec![[-1, ETIMEDOUT, 0, 0, 0]],
            )
        };
        assert_eq!(
            fields("sem_clockwait", Which::Entry),
            clockwaits,
            "{build} {placement:?}"
        );
        assert_eq!(
            fields("sem_clockwait", Which::Return),
            clock_returns,
            "{build} {placement:?}"
        );
        assert_eq!(fields("sema_destroy", Which::Whole), [[sem, 0, 0, 0, 0]]);
    }
}
