//! A process with more threads than the tracer may have open files: a bounded set of files is
//! kept open, the rest reopened as their threads write again, and nothing is lost (issue 14,
//! part 2).

use std::process::Command;

use thrtrace_tests::{
    TempDir, bpf_available, by_thread, field, paired_calls, read_trace, summary_count, tracer,
    workload,
};

const THREADS: u32 = 10_000;
const PAIRS: usize = 10;

#[test]
fn ten_thousand_threads_under_a_256_descriptor_limit_lose_nothing() {
    if !bpf_available("many_threads") {
        return;
    }
    let dir = TempDir::new("many-threads");
    // `ulimit -n` sets the hard limit too: the tracer cannot raise it.
    let run = Command::new("sh")
        .args(["-c", "ulimit -n 256 && exec \"$@\"", "sh"])
        .arg(tracer())
        .args(["--events", "mutex", "--buffer-kib", "65536", "--"])
        .arg(workload("many_threads"))
        .arg(THREADS.to_string())
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{run:?}");
    assert_eq!(summary_count(&stderr, "lost"), 0, "{stderr}");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let mutex: i64 = field(&stdout, "mutex");
    let files = read_trace(dir.path());
    // A file per low-12-bit thread id: 10,000 thread ids span more than 4,096 values, though
    // other processes may take some of them (the suite runs tests side by side), so nearly
    // every name is used; far more files than the 256 descriptors can hold open at once.
    let records: Vec<&thrtrace_tests::TraceRecord> = files.values().flatten().collect();
    let names: std::collections::BTreeSet<u32> = records.iter().map(|r| r.lwpid & 0xfff).collect();
    assert_eq!(files.len(), names.len());
    assert!(files.len() > 4_000, "{} files", files.len());
    assert_eq!(summary_count(&stderr, "files"), files.len() as u64);
    let records = records.len();
    assert_eq!(records, THREADS as usize * PAIRS * 3);
    assert_eq!(summary_count(&stderr, "records") as usize, records);
    let mut pairs = 0;
    for lines in files.values() {
        // Threads that share a file (and, past pid_max, a thread id) each did PAIRS pairs.
        for (lwpid, thread) in by_thread(lines.iter().cloned()) {
            let calls = paired_calls(&thread, "mutex_lock", mutex).len();
            assert!(
                calls > 0 && calls.is_multiple_of(PAIRS),
                "thread {lwpid}: {calls} pairs"
            );
            pairs += calls;
        }
    }
    assert_eq!(pairs, THREADS as usize * PAIRS);
}
