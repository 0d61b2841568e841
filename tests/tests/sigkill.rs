//! A tracer killed with SIGKILL leaves nothing attached: its probes are file-descriptor-owned
//! uprobe_multi links, which the kernel removes with the last descriptor; and a second tracer
//! can start at once.

use std::{
    collections::BTreeSet,
    fs,
    process::Command,
    time::{Duration, Instant},
};

use thrtrace_tests::{
    Gated, TempDir, TraceRecord, bpf_available, file_name, paired_calls, read_trace, run_tracer,
    start_tracer,
};

/// The BPF links process `pid` holds descriptors to, id and type (from /proc/PID/fdinfo).
fn links_of(pid: u32) -> BTreeSet<(u32, String)> {
    let mut links = BTreeSet::new();
    for entry in fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        let Ok(info) = fs::read_to_string(entry.path()) else {
            continue;
        };
        let value = |key: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(str::trim)
        };
        if let (Some(id), Some(kind)) = (value("link_id:"), value("link_type:")) {
            links.insert((id.parse().unwrap(), kind.to_owned()));
        }
    }
    links
}

/// tracefs's list of uprobe events. It is one list for the whole kernel: read where the host
/// has tracefs mounted (most distributions do), or else through one mounted in a private mount
/// namespace (a fresh machine has none), leaving the host's mounts as they are.
fn uprobe_events() -> String {
    let read = Command::new("unshare")
        .args([
            "--mount",
            "sh",
            "-c",
            "cat /sys/kernel/tracing/uprobe_events 2>/dev/null || \
             { mount -t tracefs nodev /sys/kernel/tracing && \
               cat /sys/kernel/tracing/uprobe_events; }",
        ])
        .output()
        .unwrap();
    assert!(read.status.success(), "cannot read uprobe_events: {read:?}");
    String::from_utf8(read.stdout).unwrap()
}

fn live_link_ids() -> BTreeSet<u32> {
    aya::programs::loaded_links()
        .filter_map(|l| Some(l.ok()?.id()))
        .collect()
}

#[test]
fn a_killed_tracer_leaves_no_probe_and_a_new_one_starts_at_once() {
    if !bpf_available("sigkill") {
        return;
    }
    let events_before = uprobe_events();
    let mut target = Gated::start(0, 250);
    let (pid, mutex) = (target.pid, target.mutex);

    let first_dir = TempDir::new("killed");
    let (mut first, _first_stderr) = start_tracer(first_dir.path(), &[pid], &["--events", "mutex"]);
    let held = links_of(first.id());
    // The kernel names them uprobe_multi and uretprobe_multi; the exec tracepoint's is
    // raw_tracepoint. Three: the entry probes, the return probes, the probes where the locks'
    // fast paths complete; and a fourth for those of glibc's single-threaded ways where its
    // plan has them (the target has one thread), which go once it has a second.
    let listing = run_tracer(first_dir.path(), &["--list-probes", "-e", "mutex"]).stdout;
    let single_threaded_ways = listing.contains("only while a traced process has one thread");
    let uprobes = held
        .iter()
        .filter(|(_, kind)| kind.ends_with("probe_multi"))
        .count();
    assert_eq!(
        uprobes,
        3 + usize::from(single_threaded_ways),
        "an entry, a return and fast-path uprobe_multi links: {held:?}"
    );
    let links: BTreeSet<u32> = held.iter().map(|(id, _)| *id).collect();
    assert!(links.is_subset(&live_link_ids()));
    first.kill().unwrap();
    first.wait().unwrap();
    let give_up = Instant::now() + Duration::from_secs(5);
    while !links.is_disjoint(&live_link_ids()) {
        assert!(
            Instant::now() < give_up,
            "links {links:?} outlived the killed tracer"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        uprobe_events(),
        events_before,
        "the tracer left tracefs uprobe events"
    );

    // At once, a new tracer on the same process records its calls exactly.
    let second_dir = TempDir::new("rerun");
    let (mut second, _second_stderr) =
        start_tracer(second_dir.path(), &[pid], &["--events", "mutex"]);
    target.run_phase_two();
    target.finish();
    assert!(
        second.wait().unwrap().success(),
        "the tracer ends with its target"
    );
    let files = read_trace(second_dir.path());
    let lines: &Vec<TraceRecord> = &files[&file_name(pid, pid)];
    assert_eq!(paired_calls(lines, "mutex_lock", mutex).len(), 250);
    assert!(
        read_trace(first_dir.path())
            .values()
            .flatten()
            .all(|l| l.pid == pid)
    );
}
