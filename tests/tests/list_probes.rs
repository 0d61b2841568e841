//! `--list-probes` shows where each probe goes, and the probes it says the kernel single-steps
//! are off the uncontended paths. The listings need no privileges: they read the tracer's own
//! C library; counting the single steps taken needs root (BPF, tracefs). The listings expected
//! (and the fixtures) are x86-64's: on the host.
#![cfg(target_arch = "x86_64")]

use std::process::Command;

use thrtrace_tests::{
    Gated, Run, TempDir, bpf_available, codes, every_libc, is_musl, read_trace, run_tracer,
    summary_count, tracer, workload, workspace_root,
};
use tracer_common::{EVENTS, record::Which};
use tracer_model::TraceRecord;

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

/// The tracefs group of the uprobes [`single_steps_taken`] places.
const STEP_GROUP: &str = "thrtrace_single_steps";

/// The probes of musl's code that the kernel single-steps on its uncontended pairs, by kind:
/// `pthread_rwlock_wrlock` calls `pthread_rwlock_trywrlock`, which returns
/// `cas(...) ? EBUSY : 0` with no branch (its probe is on the `ret`). No instruction of it is
/// one the kernel emulates, and a probe cannot tell the program's calls of it, which it must
/// record, from `pthread_rwlock_wrlock`'s.
const MUSL_SINGLE_STEPS: [(&str, &str); 1] = [("rwlock", "pthread_rwlock_trywrlock+0x16")];

/// An uncontended mutex, rwlock or semaphore pair hits no probe the kernel single-steps (a
/// second trap on every call, ~10 µs in a VM), in a process with one thread (glibc's own
/// paths) and in one with a second, in every glibc (musl: [`MUSL_SINGLE_STEPS`]); and each
/// call is recorded once. Counted, not timed: every site `--list-probes` calls single-stepped
/// gets a tracefs uprobe of its own beside the tracer's, and the sites whose hits grow with the
/// pairs made are the pairs' (the C library's own calls as a process starts and exits may hit
/// others). Sites only for processes that have had a second thread are left out: a process
/// with one thread runs that code without the tracer's probe there.
#[test]
fn no_uncontended_pair_hits_a_single_stepped_probe() {
    const TEST: &str = "list_probes_single_steps";
    if !bpf_available(TEST) {
        return;
    }
    let events = "mutex,rwlock,sema";
    let mut unexpected = Vec::new();
    for build in every_libc(TEST, "uncontended_pairs") {
        let mut gate =
            Gated::spawn(Command::new(workload(&build)).args(["mutex", "1", "0", "gate"]));
        let cwd = TempDir::new("list-single-steps");
        let pid = gate.pid.to_string();
        let run = run_tracer(cwd.path(), &["--list-probes", "-e", events, "-p", &pid]);
        gate.run_phase_two();
        gate.finish();
        assert!(run.status.success(), "{build}: {run:?}");
        let sites = single_stepped_sites(&run.stdout);
        for (kind, calls) in [
            ("mutex", &[("mutex_lock", 1), ("mutex_unlock", 1)][..]),
            (
                "rwlock",
                &[("rw_rdlock", 1), ("rw_wrlock", 1), ("rw_unlock", 2)],
            ),
            ("sem", &[("sema_post", 1), ("sema_wait", 1)]),
        ] {
            for threads in ["1", "2"] {
                let hits: Vec<Vec<(String, usize)>> = [100, 300]
                    .into_iter()
                    .map(|pairs| {
                        let args = [kind, threads, &pairs.to_string()];
                        let (hits, records) = single_steps_taken(&sites, &build, events, &args);
                        for &(name, per_pair) in calls {
                            let code = codes(name);
                            let made = records
                                .iter()
                                .filter(|r| {
                                    (r.event1, r.event2) == code && r.which != Which::Return
                                })
                                .count();
                            assert_eq!(made, pairs * per_pair, "{build} {args:?}: {name}");
                        }
                        hits
                    })
                    .collect();
                let per_pair: Vec<&str> = hits[1]
                    .iter()
                    .filter(|hit| !hits[0].contains(hit))
                    .map(|(site, _)| site.as_str())
                    .collect();
                let expected: Vec<&str> = MUSL_SINGLE_STEPS
                    .iter()
                    .filter(|(k, _)| is_musl(&build) && *k == kind)
                    .map(|(_, site)| *site)
                    .collect();
                if per_pair != expected {
                    unexpected.push(format!(
                        "{build} {kind} {threads}: {per_pair:?} (expected {expected:?})"
                    ));
                }
            }
        }
    }
    assert!(
        unexpected.is_empty(),
        "single-stepped probes hit on every pair:\n{}",
        unexpected.join("\n")
    );
}

/// Each site `--list-probes` printed as single-stepped (but those only for processes that have
/// had a second thread): as tracefs names it (`FILE:0xOFFSET`), and as `FUNCTION+0xOFFSET`.
fn single_stepped_sites(listing: &str) -> Vec<(String, String)> {
    let mut library = "";
    let mut sites = Vec::new();
    for line in listing.lines() {
        if let Some((path, _)) = line.split_once(" (pid ") {
            library = path;
            continue;
        }
        if !line.contains("single-stepped") || line.contains("once a traced process has a second") {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let function = u64::from_str_radix(fields[1].trim_start_matches("0x"), 16).unwrap();
        let (sign, probe) = fields[2].split_at(1);
        let probe = u64::from_str_radix(probe.trim_start_matches("0x"), 16).unwrap();
        let site = match sign {
            "-" => function - probe,
            _ => function + probe,
        };
        sites.push((
            format!("{library}:{site:#x}"),
            format!("{}{}", fields[0], fields[2]),
        ));
    }
    sites
}

/// Traces `build ARGS` launched with `-e events`, while a tracefs uprobe sits on each of
/// `sites` in a tracing instance of its own, which records only the tracer and its command;
/// returns how often the command hit each site hit
/// (by its name, in the order of `sites`), and its records. tracefs is mounted in a mount
/// namespace of the run's own where the host has none, and the events are removed after.
fn single_steps_taken(
    sites: &[(String, String)],
    build: &str,
    events: &str,
    args: &[&str],
) -> (Vec<(String, usize)>, Vec<TraceRecord>) {
    let dir = TempDir::new("single-steps");
    let script = format!(
        r#"set -e
t=/sys/kernel/tracing
[ -e $t/uprobe_events ] || mount -t tracefs nodev $t
group={STEP_GROUP}_$$
instance=$t/instances/$group
remove() {{
    [ -d $instance ] && {{ echo 0 > $instance/events/$group/enable || true; rmdir $instance; }}
    grep "^p:$group/" $t/uprobe_events | cut -d' ' -f1 | sed 's/^p:/-:/' | while read -r event; do
        echo "$event" >> $t/uprobe_events
    done
}}
trap remove EXIT
mkdir $instance
# Only this shell's children, the tracer and its command, each line with its process's id.
echo $$ > $instance/set_event_pid
echo 1 > $instance/options/event-fork
echo 1 > $instance/options/record-tgid
count=0
for site in $SITES; do
    echo "p:$group/s$count $site" >> $t/uprobe_events
    count=$((count + 1))
done
[ $count -eq 0 ] || echo 1 > $instance/events/$group/enable
"$@"
[ $count -eq 0 ] || echo 0 > $instance/events/$group/enable
cat $instance/trace > "$STEPS""#
    );
    let steps = dir.path().join("steps");
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "sh", "-c", &script, "sh"])
        .arg(tracer())
        .args(["-e", events, "--dir"])
        .arg(dir.path())
        .arg("--")
        .arg(workload(build))
        .args(args)
        .env(
            "SITES",
            sites
                .iter()
                .map(|(site, _)| site.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        )
        .env("STEPS", &steps);
    let run: Run = command.output().unwrap().into();
    assert!(run.status.success(), "{build} {args:?}: {run:?}");
    assert_eq!(summary_count(&run.stderr, "lost"), 0, "{}", run.stderr);
    let records: Vec<TraceRecord> = read_trace(dir.path()).into_values().flatten().collect();
    let pid = records.first().expect("records of the command").pid;
    // A line: `TASK-TID (TGID) [CPU] FLAGS TIME: sN: (ADDRESS)`.
    let of_command = |line: &&str| {
        line.split_once('(')
            .and_then(|(_, rest)| rest.split_once(')'))
            .is_some_and(|(tgid, _)| tgid.trim() == pid.to_string())
    };
    let trace = std::fs::read_to_string(&steps).unwrap();
    let hits = sites
        .iter()
        .enumerate()
        .filter_map(|(n, (_, name))| {
            let event = format!(" s{n}: ");
            let count = trace
                .lines()
                .filter(of_command)
                .filter(|line| line.contains(&event))
                .count();
            (count > 0).then(|| (name.clone(), count))
        })
        .collect();
    (hits, records)
}
