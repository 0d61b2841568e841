//! SIGUSR1 flushes a running trace: the flight recorder's stream goes to the log,
//! and the tr files' buffers to their files, while the targets run on.

use std::time::Duration;

use thrtrace_tests::{Gated, TempDir, bpf_available, read_line, read_trace, signal, start_tracer};
use tracer_model::{
    event::{Event, SystemKind},
    log::LogReader,
};

/// Thread records, and FLUSH_START events, in the log as it is now.
fn log_now(path: &std::path::Path) -> (usize, usize) {
    let reader = LogReader::open(path).unwrap();
    let events: Vec<Event> = reader.events().map(Result::unwrap).collect();
    let records = events
        .iter()
        .filter(|e| matches!(e, Event::Thread(_)))
        .count();
    let flushes = events
        .iter()
        .filter(|e| matches!(e, Event::System(s) if s.kind == SystemKind::FlushStart))
        .count();
    (records, flushes)
}

#[test]
fn sigusr1_writes_the_flight_recorder_and_the_tr_buffers_now() {
    if !bpf_available("sigusr1_flush") {
        return;
    }
    let dir = TempDir::new("flush");
    let log = dir.path().join("app.ptl");
    let mut gate = Gated::start(0, 1_000);
    let (mut tracer, mut stderr) = start_tracer(
        dir.path(),
        &[gate.pid],
        &[
            "--events",
            "mutex",
            "--log",
            &log.to_string_lossy(),
            "--stream-full-policy",
            "loop",
        ],
    );
    gate.run_phase_two();
    // The records pass the reorder stage within two drain passes and its margin.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        log_now(&log),
        (0, 0),
        "the flight recorder writes nothing by itself"
    );
    signal(tracer.id(), "-USR1");
    assert_eq!(
        read_line(&mut stderr).trim(),
        "thrtrace-bpf: flushed (SIGUSR1)"
    );

    // 1,000 lock+unlock pairs: lock entry, lock return, unlock.
    assert_eq!(log_now(&log), (3_000, 1));
    let files = read_trace(dir.path());
    assert_eq!(files.values().map(Vec::len).sum::<usize>(), 3_000);

    gate.finish();
    assert!(tracer.wait().unwrap().success());
    let (records, flushes) = log_now(&log);
    assert_eq!(records, 3_000, "the end writes only what came after");
    assert_eq!(flushes, 2);
}
