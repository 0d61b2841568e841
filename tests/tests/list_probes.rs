//! `--list-probes` shows where each probe goes. Needs no privileges: it reads the
//! tracer's own C library. The listings expected (and the fixtures) are x86-64's: on the host.
#![cfg(target_arch = "x86_64")]

use std::process::Command;

use thrtrace_tests::{Gated, TempDir, every_libc, run_tracer, workload, workspace_root};
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
    // Where a lock call's fast path completes it: the uncontended lock is written at the
    // emulated branch after its compare-and-exchange, and opened there when it goes on to wait.
    let fast = listing(&["--list-probes"]);
    for event in EVENTS.iter().filter(|e| e.category.is_probed_in_library()) {
        assert!(
            fast.iter().any(|(f, _, _)| f == event.symbol),
            "{} missing",
            event.symbol
        );
    }
    let completions: Vec<&String> = fast
        .iter()
        .filter(|(f, _, _)| f == "pthread_mutex_lock")
        .map(|(_, _, line)| line)
        .collect();
    assert!(
        completions.iter().any(|line| line.contains(
            "fast path: the call returns 0 from here when ZF=1; else opens it; object in rdi"
        ) && !line.contains("single-stepped")),
        "{completions:#?}"
    );

    let placed = listing(&["--list-probes", "--no-fast-paths"]);
    // The futex category's records come from the kernel, with no probe.
    for event in EVENTS.iter().filter(|e| e.category.is_probed_in_library()) {
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

/// The C library of a build of a workload (see `every_libc`), as its expectations are named:
/// `glibc-VERSION` (the host's, as glibc says, or the one its name's suffix gives), `musl`, or
/// `musl-static`.
fn libc_name(build: &str) -> String {
    if let Some((_, musl)) = build.split_once("_musl") {
        return format!("musl{}", musl.replace('_', "-"));
    }
    if let Some((_, digits)) = build.rsplit_once("_glibc") {
        return format!("glibc-{}.{}", &digits[..1], &digits[1..]);
    }
    let said = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .unwrap();
    let said = String::from_utf8(said.stdout).unwrap();
    format!("glibc-{}", said.trim().trim_start_matches("glibc "))
}

/// A listing as kept in the expectations: each library by its file name, and each probe
/// without the addresses a rebuild of the same code moves (the function's offset, branch
/// targets and RIP-relative operands), so that what remains is the placement decision.
fn placement_decisions(stdout: &str) -> String {
    let mut kept = String::new();
    for line in stdout.lines() {
        if line.starts_with("function") {
            kept += line.split_whitespace().next().unwrap_or_default();
        } else if let Some((library, _)) = line.split_once(" (pid ") {
            kept += library.rsplit('/').next().unwrap_or(library);
        } else {
            let mut fields = line.split_whitespace();
            let function = fields.next().unwrap_or_default();
            let _offset = fields.next();
            let rest: Vec<String> = fields.map(without_address).collect();
            kept += &format!("{function} {}", rest.join(" "));
        }
        kept.push('\n');
    }
    kept
}

/// `word` with a hexadecimal number of four digits or more (an address) left out.
fn without_address(word: &str) -> String {
    let Some(at) = word.find("0x") else {
        return word.to_owned();
    };
    let digits = word[at + 2..]
        .bytes()
        .take_while(u8::is_ascii_hexdigit)
        .count();
    match digits >= 4 {
        true => format!("{}0x_{}", &word[..at], &word[at + 2 + digits..]),
        false => word.to_owned(),
    }
}

/// Where each probe goes, in a process of every C library the tests build against, is what the
/// expectations in tests/fixtures/list-probes/ say: a placement that changes with a glibc
/// update or a change to the analysis is seen, and looked at, before it is accepted (rerun with
/// THRTRACE_BLESS=1 to write what is listed now).
#[test]
fn each_c_librarys_placements_are_as_expected() {
    for build in every_libc("list_probes_each_libc", "mutex_gate") {
        let mut gate = Gated::spawn(Command::new(workload(&build)).args(["0", "0"]));
        let cwd = TempDir::new("list-glibc");
        let pid = gate.pid.to_string();
        let run = run_tracer(cwd.path(), &["--list-probes", "-p", &pid]);
        gate.run_phase_two();
        gate.finish();
        assert!(run.status.success(), "{build}: {run:?}");
        let listed = placement_decisions(&run.stdout);
        let expected = workspace_root().join(format!(
            "tests/fixtures/list-probes/{}.txt",
            libc_name(&build)
        ));
        if std::env::var_os("THRTRACE_BLESS").is_some() {
            std::fs::write(&expected, &listed).unwrap();
        }
        let kept = std::fs::read_to_string(&expected).unwrap_or_default();
        assert!(
            kept == listed,
            "{build}: the placements differ from {} (rerun with THRTRACE_BLESS=1 to keep them \
             if the change is meant):\n{}",
            expected.display(),
            first_difference(&kept, &listed)
        );
    }
}

/// The first line where `kept` and `listed` differ, both ways.
fn first_difference(kept: &str, listed: &str) -> String {
    let (mut kept_lines, mut listed_lines) = (kept.lines(), listed.lines());
    loop {
        match (kept_lines.next(), listed_lines.next()) {
            (None, None) => return String::from("(none)"),
            (k, l) if k == l => {}
            (k, l) => {
                return format!(
                    "expected: {}\nlisted:   {}",
                    k.unwrap_or("(end)"),
                    l.unwrap_or("(end)")
                );
            }
        }
    }
}
