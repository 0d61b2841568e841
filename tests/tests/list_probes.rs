//! `--list-probes` shows where each probe goes (issue 3). Needs no privileges: it reads the
//! tracer's own C library.

use thrtrace_tests::{TempDir, run_tracer};
use tracer_common::EVENTS;

fn listing(options: &[&str]) -> Vec<(String, String, String)> {
    let cwd = TempDir::new("list");
    let run = run_tracer(cwd.path(), options);
    assert!(run.status.success(), "{run:?}");
    assert!(cwd.entries().is_empty(), "listing created files");
    let mut lines = run.stdout.lines();
    assert!(
        lines.next().unwrap().contains("libc.so.6 (pid "),
        "{}",
        run.stdout
    );
    assert!(
        lines.next().unwrap().starts_with("function"),
        "{}",
        run.stdout
    );
    lines
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields[0].to_owned(), fields[2].to_owned(), line.to_owned())
        })
        .collect()
}

#[test]
fn every_traced_function_is_listed_with_its_probe_point() {
    let placed = listing(&["--list-probes"]);
    for event in EVENTS {
        assert!(
            placed.iter().any(|(f, _, _)| f == event.symbol),
            "{} missing",
            event.symbol
        );
    }
    // Both versions of pthread_cond_wait (GLIBC_2.2.5 and GLIBC_2.3.2) get a probe.
    assert_eq!(
        placed
            .iter()
            .filter(|(f, _, _)| f == "pthread_cond_wait")
            .count(),
        2
    );
    // On x86-64 glibc, pthread_mutex_lock starts with a mov the kernel must single-step.
    let lock = placed
        .iter()
        .find(|(f, _, _)| f == "pthread_mutex_lock")
        .unwrap();
    assert_ne!(lock.1, "+0x0", "{}", lock.2);
    assert!(lock.2.contains("emulated"), "{}", lock.2);

    let at_entry = listing(&["--list-probes", "--probe-at-entry"]);
    assert_eq!(at_entry.len(), placed.len());
    for (function, at, line) in &at_entry {
        assert_eq!(at, "+0x0", "{line}");
        let alias = function == "pthread_spin_init";
        assert!(alias || line.contains("--probe-at-entry"), "{line}");
    }
    // glibc's pthread_spin_init is pthread_spin_unlock's code: one probe records both.
    let init = placed
        .iter()
        .find(|(f, _, _)| f == "pthread_spin_init")
        .unwrap();
    assert!(
        init.2.contains("the same code as pthread_spin_unlock"),
        "{}",
        init.2
    );
    // pthread_spin_lock starts with `lock decl`, which the kernel refuses to probe.
    let spin = at_entry
        .iter()
        .find(|(f, _, _)| f == "pthread_spin_lock")
        .unwrap();
    assert!(spin.2.contains("refuses"), "{}", spin.2);
}
