//! `report --format folded` and `report --flamegraph FILE.svg`: the stack_chains workload's
//! contended waits on `big_lock`, traced with `--contended`, as collapsed stacks and as a flame
//! graph. The waiters view folds to exactly one stack per waiting chain (run, alpha_1 ..
//! alpha_5 and run, beta_1 .. beta_5, root first), each topped by the lock it waited on, their
//! weights adding up to the report's wait total for the lock; the releasers view has the
//! holder's chain. The flame graph is titled with the workload and draws each chain's functions
//! with their nanoseconds and share. Without BPF: refusals, and a trace without stacks.

use std::os::unix::fs::PermissionsExt as _;

use thrtrace_tests::{
    TempDir, bpf_available, run_tracer, trace_stack_chains_big_lock, workspace_root,
};

/// The leaf-most frame of the stacks that waited on `big_lock`.
const BIG_LOCK: &str = "lock big_lock (mutex)";

/// A line of folded stacks: its frames, root first, and its weight.
#[derive(Debug)]
struct Folded {
    frames: Vec<String>,
    weight: u64,
}

fn parse_folded(text: &str) -> Vec<Folded> {
    text.lines()
        .map(|line| {
            let (stack, weight) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("not a folded stack: {line:?}"));
            Folded {
                frames: stack.split(';').map(str::to_owned).collect(),
                weight: weight
                    .parse()
                    .unwrap_or_else(|_| panic!("no weight: {line:?}")),
            }
        })
        .collect()
}

/// `run`, then the chain `prefix`_1 .. `prefix`_5: root first, as a folded stack holds it.
fn chain(prefix: &str) -> Vec<String> {
    std::iter::once("run".to_owned())
        .chain((1..=5).map(|n| format!("{prefix}_{n}")))
        .collect()
}

/// Which of alpha, beta and holder `stack` goes through, whole and in order; panics if none.
fn chain_of(stack: &Folded) -> &'static str {
    ["alpha", "beta", "holder"]
        .into_iter()
        .find(|prefix| {
            stack
                .frames
                .windows(6)
                .any(|window| window == chain(prefix))
        })
        .unwrap_or_else(|| panic!("no whole chain in {stack:#?}"))
}

/// The stacks of `stacks` that waited on big_lock, checked for what every stack must be: a
/// frame with no function is never a bare address.
fn big_lock_stacks(stacks: &[Folded]) -> Vec<&Folded> {
    for stack in stacks {
        assert!(
            stack
                .frames
                .iter()
                .all(|f| !f.is_empty() && !f.starts_with("0x")),
            "{stack:#?}"
        );
    }
    stacks
        .iter()
        .filter(|stack| stack.frames.last().map(String::as_str) == Some(BIG_LOCK))
        .collect()
}

/// `n` with a comma between each group of three digits, as the flame graph writes counts.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut text = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
}

/// The text of every element `tag` of `svg`, in order.
fn elements<'a>(svg: &'a str, tag: &str) -> Vec<&'a str> {
    let open = format!("<{tag}");
    let close = format!("</{tag}>");
    let mut found = Vec::new();
    let mut rest = svg;
    while let Some(at) = rest.find(&open) {
        let element = &rest[at..];
        let Some(start) = element.find('>') else {
            break;
        };
        let Some(end) = element.find(&close) else {
            break;
        };
        found.push(&element[start + 1..end]);
        rest = &element[end + close.len()..];
    }
    found
}

/// XML text as it reads: its five predefined entities replaced.
fn unescaped(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&apos;", "'")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

/// The text of the `<text>` element whose id is `id`.
fn text_with_id(svg: &str, id: &str) -> String {
    let at = svg
        .find(&format!("<text id=\"{id}\""))
        .unwrap_or_else(|| panic!("no text {id} in {svg}"));
    unescaped(elements(&svg[at..], "text")[0])
}

#[test]
fn folded_stacks_and_the_flame_graph_hold_each_chain_that_waited_and_released() {
    if !bpf_available("flamegraph") {
        return;
    }
    let dir = TempDir::new("flamegraph");
    let lock = &trace_stack_chains_big_lock(&dir);
    let wait_total_ns = lock["wait_total_ns"].as_u64().unwrap();

    // The default view, the waiters', printed.
    let printed = run_tracer(dir.path(), &["report", "--format", "folded", "app.ptl"]);
    assert!(printed.status.success(), "{printed:?}");
    assert_eq!(printed.stderr.lines().count(), 1, "{printed:?}");
    let waiters = parse_folded(&printed.stdout);
    let waited = big_lock_stacks(&waiters);
    let mut chains: Vec<&str> = waited.iter().map(|stack| chain_of(stack)).collect();
    chains.sort_unstable();
    assert_eq!(chains, ["alpha", "beta"], "{waiters:#?}");
    let weight: u64 = waited.iter().map(|stack| stack.weight).sum();
    assert_eq!(weight, wait_total_ns, "{waiters:#?}");

    // The same, written to a file.
    let written = run_tracer(
        dir.path(),
        &[
            "report",
            "--format",
            "folded",
            "-o",
            "waiters.folded",
            "app.ptl",
        ],
    );
    assert!(written.status.success(), "{written:?}");
    assert!(written.stdout.is_empty(), "{written:?}");
    let path = dir.path().join("waiters.folded");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), printed.stdout);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // The holder's unlock ended the first wait; the first waiter's, the second.
    let printed = run_tracer(
        dir.path(),
        &[
            "report",
            "--format",
            "folded",
            "--view",
            "releasers",
            "app.ptl",
        ],
    );
    assert!(printed.status.success(), "{printed:?}");
    let releasers = parse_folded(&printed.stdout);
    let released = big_lock_stacks(&releasers);
    let chains: Vec<&str> = released.iter().map(|stack| chain_of(stack)).collect();
    assert_eq!(chains.len(), 2, "{releasers:#?}");
    assert!(chains.contains(&"holder"), "{releasers:#?}");
    assert!(
        chains.contains(&"alpha") || chains.contains(&"beta"),
        "{releasers:#?}"
    );
    let weight: u64 = released.iter().map(|stack| stack.weight).sum();
    assert_eq!(weight, wait_total_ns, "{releasers:#?}");

    // The flame graph of the waiters' stacks: titled, and each chain function a frame with
    // its time and share of all the time drawn.
    let drawn = run_tracer(
        dir.path(),
        &["report", "--flamegraph", "waiters.svg", "app.ptl"],
    );
    assert!(drawn.status.success(), "{drawn:?}");
    assert!(drawn.stderr.contains("waiters.svg"), "{drawn:?}");
    let svg = std::fs::read_to_string(dir.path().join("waiters.svg")).unwrap();
    let title = text_with_id(&svg, "title");
    let pid = lock["pid"].as_u64().unwrap();
    assert!(
        title.contains(&format!("stack_chains (pid {pid})")),
        "{title}"
    );
    assert!(title.contains("all kinds"), "{title}");
    assert!(title.contains("traced"), "{title}");
    assert_eq!(
        text_with_id(&svg, "subtitle"),
        "waiters' stacks, weighted by time waited (ns)"
    );
    let titles: Vec<String> = elements(&svg, "title").into_iter().map(unescaped).collect();
    let all_ns: u64 = waiters.iter().map(|stack| stack.weight).sum();
    for stack in &waited {
        for function in &chain(chain_of(stack))[1..] {
            let share = 100.0 * stack.weight as f64 / all_ns as f64;
            let expected = format!("{function} ({} ns, {share:.2}%)", grouped(stack.weight));
            assert!(titles.contains(&expected), "{expected} in {titles:#?}");
        }
    }
    // The lock tops each tower, in its own colour.
    let lock_frames: Vec<&str> = svg
        .split("<g><title>")
        .filter(|frame| frame.starts_with(BIG_LOCK))
        .collect();
    assert_eq!(lock_frames.len(), 2, "{svg}");
    for frame in lock_frames {
        assert!(frame.contains("fill=\"rgb(150,190,240)\""), "{frame}");
    }
}

/// The fixture log: thread records and no stacks.
fn log_without_stacks() -> String {
    workspace_root()
        .join("tests/fixtures/log-ids-by-table-row.ptl")
        .display()
        .to_string()
}

#[test]
fn a_trace_without_stacks_says_so_and_writes_no_stack() {
    let dir = TempDir::new("flamegraph-none");
    let log = log_without_stacks();
    let printed = run_tracer(dir.path(), &["report", "--format", "folded", &log]);
    assert_eq!(printed.status.code(), Some(0), "{printed:?}");
    assert!(printed.stdout.is_empty(), "{printed:?}");
    assert_eq!(printed.stderr.lines().count(), 1, "{printed:?}");
    assert!(
        printed
            .stderr
            .contains("no contended wait has a call stack"),
        "{printed:?}"
    );
    // A link at the name is refused, never written through nor replaced.
    std::fs::write(dir.path().join("kept"), "kept").unwrap();
    std::os::unix::fs::symlink("kept", dir.path().join("none.folded")).unwrap();
    let write = || {
        run_tracer(
            dir.path(),
            &["report", "--format", "folded", "-o", "none.folded", &log],
        )
    };
    let refused = write();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        refused.stderr.contains("none.folded is a symbolic link"),
        "{refused:?}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("kept")).unwrap(),
        "kept"
    );
    std::fs::remove_file(dir.path().join("none.folded")).unwrap();
    assert_eq!(write().status.code(), Some(0));
    let folded = std::fs::symlink_metadata(dir.path().join("none.folded")).unwrap();
    assert!(folded.is_file() && folded.len() == 0, "{folded:?}");
    assert_eq!(folded.permissions().mode() & 0o777, 0o600);
    // Written again: the empty one is kept as .old.
    assert_eq!(write().status.code(), Some(0));
    assert!(dir.path().join("none.folded.old").is_file());
    let drawn = run_tracer(dir.path(), &["report", "--flamegraph", "none.svg", &log]);
    assert_eq!(drawn.status.code(), Some(0), "{drawn:?}");
    assert_eq!(drawn.stderr.lines().count(), 1, "{drawn:?}");
    assert!(
        drawn.stderr.contains("no contended wait has a call stack"),
        "{drawn:?}"
    );
    // Nothing to draw: no file, rather than an SVG of an error.
    assert!(!dir.path().join("none.svg").exists(), "{drawn:?}");
    // Where --kind left every stack out, the note says so, not how stacks are taken.
    let filtered = run_tracer(
        dir.path(),
        &["report", "--format", "folded", "--kind", "rwlock", &log],
    );
    assert_eq!(filtered.status.code(), Some(0), "{filtered:?}");
    assert!(filtered.stderr.contains("(--kind)"), "{filtered:?}");
}

#[test]
fn a_flame_graph_beside_another_output_or_where_it_cannot_go_is_refused() {
    let dir = TempDir::new("flamegraph-refused");
    let log = log_without_stacks();
    std::fs::create_dir(dir.path().join("taken.svg")).unwrap();
    for (args, says) in [
        (
            &["--flamegraph", "a.svg", "--format", "json"][..],
            "--format",
        ),
        (&["--flamegraph", "a.svg", "-o", "a.folded"], "--output"),
        (&["--flamegraph", "missing/a.svg"], "missing"),
        (&["--flamegraph", "taken.svg"], "taken.svg is a directory"),
        (&["--format", "json", "-o", "a.json"], "-o FILE"),
    ] {
        let mut all = vec!["report"];
        all.extend_from_slice(args);
        all.push(&log);
        let refused = run_tracer(dir.path(), &all);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {refused:?}");
        assert_eq!(refused.stderr.lines().count(), 1, "{args:?}: {refused:?}");
        assert!(refused.stderr.contains(says), "{args:?}: {refused:?}");
        assert!(refused.stdout.is_empty(), "{args:?}: {refused:?}");
    }
    assert_eq!(dir.entries(), ["taken.svg"]);
}
