//! `report --format pprof -o FILE`: the stack_chains workload's contended waits on `big_lock`,
//! traced with `--contended`, as a pprof contention profile that Go's own `go tool pprof` reads
//! back. The waiters view has one sample per waiting chain (alpha_5 .. alpha_1, beta_5 ..
//! beta_1), each one contention, their delays adding up to the report's wait total for the
//! lock; the releasers view has the holder's chain, whose unlock ended the first wait.
//! Without `-o` the profile is refused, in one line, with nothing written.

use std::process::Command;

use serde_json::Value;
use thrtrace_tests::{
    TempDir, bpf_available, run_tracer, trace_stack_chains_big_lock, workload_arg,
};

/// A sample of `go tool pprof -raw`: its values, its frames' functions (innermost first, inlined
/// functions before their callers) and its labels as printed.
#[derive(Debug)]
struct Sample {
    count: u64,
    delay_ns: u64,
    functions: Vec<String>,
    labels: String,
}

/// A profile as `go tool pprof -raw` prints it: its comments, samples and mappings (each as
/// its line: `1: start/limit/offset file build-id [FN]...`).
#[derive(Debug)]
struct RawProfile {
    comments: Vec<String>,
    samples: Vec<Sample>,
    mappings: Vec<String>,
}

/// `go tool pprof -raw` of `file` in `dir`, with the profile's own symbols (nothing looked up
/// again by pprof).
fn pprof_raw(dir: &TempDir, file: &str) -> RawProfile {
    let run = Command::new("go")
        .args(["tool", "pprof", "-raw", "-symbolize=none", file])
        .current_dir(dir.path())
        .output()
        .expect("go tool pprof runs (`cargo xtask setup` installs golang-go)");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    parse_raw(&stdout)
}

/// Parses `-raw` output: a `Samples:` section (a `count delay: location ids` line, then label
/// lines), then `Locations` (`id: address M=mapping function file:line s=0`, then a line per
/// caller of an inlined function).
fn parse_raw(text: &str) -> RawProfile {
    let mut comments = Vec::new();
    let mut samples: Vec<(u64, u64, Vec<u64>, String)> = Vec::new();
    let mut locations: Vec<(u64, Vec<String>)> = Vec::new();
    let mut mappings = Vec::new();
    let mut section = "";
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("Comment: ") {
            comments.push(comment.to_owned());
            continue;
        }
        match line.trim() {
            heading @ ("Samples:" | "Locations" | "Mappings") => {
                section = heading;
                continue;
            }
            "" => continue,
            _ => {}
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match section {
            "Samples:" => {
                if let Some(count) = fields[0].parse::<u64>().ok()
                    && let Some(delay) = fields.get(1).and_then(|f| f.strip_suffix(':'))
                {
                    let ids = fields[2..].iter().map(|id| id.parse().unwrap()).collect();
                    samples.push((count, delay.parse().unwrap(), ids, String::new()));
                } else if let Some(sample) = samples.last_mut() {
                    sample.3 += line.trim();
                    sample.3 += " ";
                }
            }
            "Locations" => match fields[0].strip_suffix(':') {
                // `id: 0x55.. M=2 alpha_5 stack_chains.c:55 s=0`; unnamed: `id: 0x55.. M=2`.
                Some(id) => locations.push((
                    id.parse().unwrap(),
                    fields.get(3).map(|f| (*f).to_owned()).into_iter().collect(),
                )),
                // The function an inlined one above was inlined into.
                None => locations.last_mut().unwrap().1.push(fields[0].to_owned()),
            },
            "Mappings" => mappings.push(line.to_owned()),
            _ => {}
        }
    }
    let samples = samples
        .into_iter()
        .map(|(count, delay_ns, ids, labels)| Sample {
            count,
            delay_ns,
            functions: ids
                .iter()
                .flat_map(|id| {
                    locations
                        .iter()
                        .find(|(location, _)| location == id)
                        .unwrap_or_else(|| panic!("no location {id} in {text}"))
                        .1
                        .clone()
                })
                .collect(),
            labels,
        })
        .collect();
    RawProfile {
        comments,
        samples,
        mappings,
    }
}

/// The chain `prefix`_5 .. `prefix`_1 then `run`, innermost first.
fn chain(prefix: &str) -> Vec<String> {
    (1..=5)
        .rev()
        .map(|n| format!("{prefix}_{n}"))
        .chain(["run".to_owned()])
        .collect()
}

/// Which of `prefixes` chains `sample`'s functions hold as consecutive frames; panics if none.
fn chain_of<'a>(sample: &Sample, prefixes: &[&'a str]) -> &'a str {
    prefixes
        .iter()
        .copied()
        .find(|prefix| {
            sample
                .functions
                .windows(6)
                .any(|window| window == chain(prefix))
        })
        .unwrap_or_else(|| panic!("no whole chain in {sample:#?}"))
}

/// The samples of `profile` on big_lock, checked for its other labels (a mutex of process
/// `pid`).
fn big_lock_samples<'a>(profile: &'a RawProfile, pid: &Value) -> Vec<&'a Sample> {
    let samples: Vec<&Sample> = profile
        .samples
        .iter()
        .filter(|s| s.labels.contains("lock:[big_lock]"))
        .collect();
    for sample in &samples {
        assert!(sample.labels.contains("lock_kind:[mutex]"), "{sample:#?}");
        assert!(
            sample.labels.contains(&format!("pid:[{pid}]")),
            "{sample:#?}"
        );
    }
    samples
}

#[test]
fn a_contention_profile_holds_each_chain_that_waited_and_released() {
    if !bpf_available("pprof") {
        return;
    }
    let dir = TempDir::new("pprof");
    let lock = &trace_stack_chains_big_lock(&dir);
    let wait_total_ns = lock["wait_total_ns"].as_u64().unwrap();

    // The default view: the waiters'.
    let written = run_tracer(
        dir.path(),
        &[
            "report",
            "--format",
            "pprof",
            "-o",
            "waiters.pb.gz",
            "app.ptl",
        ],
    );
    assert!(written.status.success(), "{written:?}");
    let waiters = pprof_raw(&dir, "waiters.pb.gz");
    assert!(
        waiters.comments.iter().any(|c| c.contains("waiters view")),
        "{waiters:#?}"
    );
    let samples = big_lock_samples(&waiters, &lock["pid"]);
    assert_eq!(samples.len(), 2, "{waiters:#?}");
    let mut chains: Vec<&str> = samples
        .iter()
        .map(|s| chain_of(s, &["alpha", "beta", "holder"]))
        .collect();
    chains.sort_unstable();
    assert_eq!(chains, ["alpha", "beta"], "{waiters:#?}");
    assert!(samples.iter().all(|s| s.count == 1), "{waiters:#?}");
    // pprof takes the first mapping for the program's.
    assert!(
        waiters.mappings[0].contains(&format!(" {} ", workload_arg("stack_chains"))),
        "{waiters:#?}"
    );
    let delay: u64 = samples.iter().map(|s| s.delay_ns).sum();
    assert!(
        delay.abs_diff(wait_total_ns) * 1000 <= wait_total_ns,
        "delay {delay} ns, the report's wait total {wait_total_ns} ns"
    );

    let written = run_tracer(
        dir.path(),
        &[
            "report",
            "--format",
            "pprof",
            "--view",
            "releasers",
            "-o",
            "releasers.pb.gz",
            "app.ptl",
        ],
    );
    assert!(written.status.success(), "{written:?}");
    let releasers = pprof_raw(&dir, "releasers.pb.gz");
    assert!(
        releasers
            .comments
            .iter()
            .any(|c| c.contains("releasers view")),
        "{releasers:#?}"
    );
    let samples = big_lock_samples(&releasers, &lock["pid"]);
    assert_eq!(samples.len(), 2, "{releasers:#?}");
    assert!(samples.iter().all(|s| s.count == 1), "{releasers:#?}");
    // The holder's unlock ended the first wait; the first waiter's, the second.
    let chains: Vec<&str> = samples
        .iter()
        .map(|s| chain_of(s, &["alpha", "beta", "holder"]))
        .collect();
    assert!(chains.contains(&"holder"), "{releasers:#?}");
    assert!(
        chains.contains(&"alpha") || chains.contains(&"beta"),
        "{releasers:#?}"
    );
    let delay: u64 = samples.iter().map(|s| s.delay_ns).sum();
    assert!(
        delay.abs_diff(wait_total_ns) * 1000 <= wait_total_ns,
        "delay {delay} ns, the report's wait total {wait_total_ns} ns"
    );

    // Without -o: refused in one line, before the log is read, and nothing written.
    let refused = run_tracer(dir.path(), &["report", "--format", "pprof", "app.ptl"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
    assert!(refused.stderr.contains("-o FILE"), "{refused:?}");
    assert!(refused.stdout.is_empty(), "{refused:?}");
}
