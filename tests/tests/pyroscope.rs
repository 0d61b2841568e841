//! `--pyroscope URL`: each interval's contention profile pushed to a Pyroscope ingest API, here
//! a stand-in on the loopback address (`thrtrace_tests::ingest`) that checks each request
//! against the API's reference (POST /ingest, `name`, `from`, `until`, `format=pprof`, a form
//! with the gzipped profile) and keeps it for `go tool pprof` to read back.
//!
//! The soak traces the contention workload (every round blocks on two mutexes, a semaphore and a
//! read-write lock) for over two minutes with a push every second, the endpoint down for 30 s
//! in the middle: every interval arrives, once, in order, the outage is said once, the tracer's
//! memory stays flat after the first minute, and the profiles pushed add up, wait for wait and
//! nanosecond for nanosecond, to the profile `report` makes of the log the same trace wrote.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    io::{BufReader, Write},
    process::{Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use thrtrace_tests::{
    Run, TempDir, bpf_available,
    ingest::{IngestServer, Request},
    pprof::{RawProfile, pprof_raw_of},
    prerequisite, pushed_service, read_line, run_tracer, tracer, workload_arg,
};

/// How long the soak traces, when the endpoint goes down and for how long, and when memory is
/// first measured.
const SOAK: Duration = Duration::from_secs(130);
const OUTAGE_AT: Duration = Duration::from_secs(50);
const OUTAGE: Duration = Duration::from_secs(30);
const FIRST_MINUTE: Duration = Duration::from_mins(1);

/// The tracer's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// Checks `request` against the ingest API, a profile of `service`: the method, path, query and
/// form; returns its
/// `from` and `until`.
fn checked_ingest(request: &Request, service: &str) -> (u64, u64) {
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/ingest")
    );
    assert_eq!(request.query("format"), Some("pprof"), "{request:?}");
    assert_eq!(
        request.query("spyName"),
        Some("thrtrace-bpf"),
        "{request:?}"
    );
    let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let name = request.query("name").expect("a name");
    // The service and host, and the cgroup where the process is in one: never its pid.
    let expected = format!(
        "thrtrace.contention{{service_name={service},host={}",
        host.trim()
    );
    assert!(name.starts_with(&expected), "{name} is not {expected}…");
    assert!(name.ends_with('}') && !name.contains("pid="), "{name}");
    let from: u64 = request.query("from").unwrap().parse().unwrap();
    let until: u64 = request.query("until").unwrap().parse().unwrap();
    let parts = request.parts();
    let names: Vec<&str> = parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["profile", "sample_type_config"]);
    assert_eq!(parts[0].file_name.as_deref(), Some("profile.pprof"));
    // gzip's magic: the profile is sent gzipped, as pprof files are.
    assert!(parts[0].content.starts_with(&[0x1f, 0x8b]), "not gzipped");
    let config = String::from_utf8_lossy(&parts[1].content);
    assert!(
        config.contains(r#""contentions":{"units":"lock_samples""#)
            && config.contains(r#""delay":{"units":"lock_nanoseconds""#)
            && config.contains(r#""cumulative":false"#),
        "{config}"
    );
    (from, until)
}

/// The totals of a profile: waits and nanoseconds.
fn totals(profile: &RawProfile) -> (u64, u64) {
    profile.samples.iter().fold((0, 0), |(count, delay), s| {
        (count + s.count, delay + s.delay_ns)
    })
}

#[test]
fn every_interval_is_pushed_through_an_outage_with_flat_memory() {
    if !bpf_available("pyroscope") {
        return;
    }
    let dir = TempDir::new("pyroscope-soak");
    let server = IngestServer::start();
    // Rounds enough to outlast the trace, 10 ms holds, two waiters, gated on stdin.
    let mut workload = Command::new(workload_arg("contention"))
        .args(["1000000", "10", "2", "0", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    read_line(&mut BufReader::new(workload.stdout.take().unwrap()));
    let mut traced = Command::new(tracer())
        .args(["--contended", "--push-interval", "1s", "--log"])
        .arg(dir.path().join("app.ptl"))
        .args(["--pyroscope", &server.url()])
        .args(["--duration", &SOAK.as_secs().to_string()])
        .args(["-p", &workload.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(traced.stderr.take().unwrap());
    let line = read_line(&mut stderr);
    assert!(line.starts_with("thrtrace-bpf: tracing pid"), "{line}");
    let started = Instant::now();
    writeln!(workload.stdin.as_mut().unwrap()).unwrap();

    let until = |at: Duration| sleep(at.saturating_sub(started.elapsed()));
    until(OUTAGE_AT);
    server.set_up(false);
    until(OUTAGE_AT + OUTAGE);
    server.set_up(true);
    until(FIRST_MINUTE.max(OUTAGE_AT + OUTAGE) + Duration::from_secs(5));
    let rss_after_first_minute = rss_kib(traced.id());
    until(SOAK.saturating_sub(Duration::from_secs(3)));
    let rss_at_end = rss_kib(traced.id());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = traced.wait().unwrap();
    workload.kill().unwrap();
    workload.wait().unwrap();
    assert!(status.success(), "{rest}");

    let requests = server.requests();
    // Every interval of the trace, once, one after the other: none lost to the outage.
    let mut spans: Vec<(u64, u64)> = requests
        .iter()
        .map(|request| checked_ingest(request, &pushed_service("contention")))
        .collect();
    spans.sort_unstable();
    for pair in spans.windows(2) {
        assert_eq!(pair[0].1, pair[1].0, "a gap or an overlap: {spans:?}");
    }
    let covered = spans.last().unwrap().1 - spans[0].0;
    assert!(
        covered + 2 >= SOAK.as_secs(),
        "{covered} s of {SOAK:?} pushed: {spans:?}"
    );
    // Said once, when it began, and the summary counts every profile sent.
    assert_eq!(
        rest.matches("cannot push contention profiles").count(),
        1,
        "{rest}"
    );
    assert!(
        rest.contains(&format!(
            "{} contention profiles pushed to {}",
            requests.len(),
            server.url()
        )),
        "{rest}"
    );
    assert!(!rest.contains("not delivered"), "{rest}");
    // Flat after the first minute: at most 5% more.
    assert!(
        rss_at_end * 100 <= rss_after_first_minute * 105,
        "RSS {rss_after_first_minute} KiB after the first minute, {rss_at_end} KiB at the end"
    );

    // Go's pprof reads each one, and together they are the log's own profile.
    let mut files = Vec::new();
    for (n, request) in requests.iter().enumerate() {
        let name = format!("push-{n}.pb.gz");
        fs::write(dir.path().join(&name), &request.parts()[0].content).unwrap();
        files.push(name);
    }
    let names: Vec<&str> = files.iter().map(String::as_str).collect();
    let pushed_profile = pprof_raw_of(&dir, &names);
    // Labels of a handful of values (the lock's kind, the thread's name); the lock a frame at
    // the root of its stacks.
    for sample in &pushed_profile.samples {
        assert!(
            sample.labels.contains("lock_kind:[")
                && sample.labels.contains("thread_name:[")
                && !sample.labels.contains("pid:")
                && !sample.labels.contains("thread:[")
                && !sample.labels.contains("lock:["),
            "{sample:?}"
        );
        let root = sample.functions.last().unwrap();
        assert!(
            root.starts_with("lock ") && root.ends_with(')'),
            "{sample:?}"
        );
    }
    let pushed = totals(&pushed_profile);
    let made = run_tracer(
        dir.path(),
        &[
            "report",
            "--format",
            "pprof",
            "--kind",
            "mutex,rmutex,rwlock,spin,sema",
            "-o",
            "log.pb.gz",
            "app.ptl",
        ],
    );
    assert!(made.status.success(), "{made:?}");
    let logged = totals(&pprof_raw_of(&dir, &["log.pb.gz"]));
    assert_eq!(pushed, logged, "pushed (waits, ns) against the log's");
    assert!(logged.0 > 1000, "{logged:?}");
}

#[test]
fn an_unreachable_or_refusing_endpoint_is_said_once_and_the_trace_ends_well() {
    if !bpf_available("pyroscope") {
        return;
    }
    let dir = TempDir::new("pyroscope-down");
    let refusing = IngestServer::start();
    refusing.answer(401);
    let unreachable = IngestServer::start();
    unreachable.set_up(false);
    for (server, said) in [
        (&refusing, "refused a contention profile: 401"),
        (&unreachable, "cannot push contention profiles to"),
    ] {
        let run: Run = Command::new(tracer())
            .args(["--contended", "--push-interval", "1s", "--pyroscope"])
            .arg(server.url())
            .arg("--")
            .arg(workload_arg("contention"))
            .args(["40", "10", "2"])
            .env("THRTRACE_PYROSCOPE_TOKEN", "t0ken")
            .env("THRTRACE_PYROSCOPE_TENANT", "team-a")
            .current_dir(dir.path())
            .output()
            .unwrap()
            .into();
        assert!(run.status.success(), "{run:?}");
        assert_eq!(run.stderr.matches(said).count(), 1, "{}", run.stderr);
        let summary = run.stderr.lines().last().unwrap();
        assert!(
            summary.contains(&format!("0 contention profiles pushed to {}", server.url()))
                && summary.contains(" not delivered (the last failure: "),
            "{summary}"
        );
        assert!(!run.stderr.contains("t0ken"), "{}", run.stderr);
        // No trace files: the pushes were the output.
        assert!(dir.entries().is_empty(), "{:?}", dir.entries());
    }
    // The credentials the environment gave, as headers.
    let requests = refusing.requests();
    assert!(!requests.is_empty());
    for request in &requests {
        assert_eq!(request.header("authorization"), Some("Bearer t0ken"));
        assert_eq!(request.header("x-scope-orgid"), Some("team-a"));
    }
    // ...and not to the command traced, which runs as the invoking user.
    let env = Command::new(tracer())
        .args([
            "--contended",
            "--pyroscope",
            &refusing.url(),
            "--",
            "/usr/bin/env",
        ])
        .env("THRTRACE_PYROSCOPE_TOKEN", "t0ken")
        .env("UNRELATED", "kept")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&env.stdout);
    assert!(printed.contains("UNRELATED=kept"), "{printed}");
    assert!(!printed.contains("THRTRACE_PYROSCOPE"), "{printed}");
}

#[test]
fn a_credentials_file_gives_basic_auth() {
    if !bpf_available("pyroscope") {
        return;
    }
    let dir = TempDir::new("pyroscope-basic");
    let server = IngestServer::start();
    let credentials = dir.path().join("credentials");
    fs::write(
        &credentials,
        "# the proxy's\nuser = alice\npassword = s3cret\n",
    )
    .unwrap();
    fs::set_permissions(
        &credentials,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let run = run_tracer(
        dir.path(),
        &[
            "--contended",
            "--pyroscope",
            &server.url(),
            "--pyroscope-credentials",
            &credentials.to_string_lossy(),
            "--",
            &workload_arg("contention"),
            "3",
            "10",
            "2",
        ],
    );
    assert!(run.status.success(), "{run:?}");
    let requests = server.requests();
    // One interval: the trace is shorter than the default 15 s.
    assert_eq!(requests.len(), 1, "{}", run.stderr);
    // base64("alice:s3cret")
    assert_eq!(
        requests[0].header("authorization"),
        Some("Basic YWxpY2U6czNjcmV0")
    );
    assert_eq!(requests[0].header("x-scope-orgid"), None);
    assert!(
        run.stderr
            .contains(&format!("1 contention profile pushed to {}", server.url())),
        "{}",
        run.stderr
    );
}

#[test]
fn bad_push_options_are_refused_in_one_line_before_tracing() {
    let dir = TempDir::new("pyroscope-refused");
    let credentials = dir.path().join("credentials");
    fs::write(&credentials, "token = secret\n").unwrap();
    fs::set_permissions(
        &credentials,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let credentials = credentials.to_string_lossy().into_owned();
    let url = "http://127.0.0.1:4040";
    for (args, said) in [
        (
            vec!["--pyroscope", url],
            "--pyroscope pushes the call stacks of lock waits: add --contended",
        ),
        (
            vec!["--contended", "--pyroscope", "localhost:4040"],
            "--pyroscope localhost:4040: not a URL",
        ),
        (
            vec!["--contended", "--pyroscope", "http://u:p@host:4040"],
            "credentials do not go in the URL",
        ),
        (
            vec![
                "--contended",
                "--pyroscope",
                url,
                "--push-interval",
                "100ms",
            ],
            "--push-interval 100ms: give at least 1s",
        ),
        (
            vec![
                "--contended",
                "--pyroscope",
                url,
                "--pyroscope-credentials",
                &credentials,
            ],
            "can be read by other users (mode 644): chmod 600 it",
        ),
        (
            vec!["--contended", "--pyroscope-credentials", &credentials],
            "--pyroscope-credentials is for --pyroscope URL",
        ),
        (
            vec!["--contended", "--push-interval", "5s"],
            "--push-interval is for --pyroscope or --otlp URL",
        ),
        (
            vec!["--contended", "--otlp-credentials", &credentials],
            "--otlp-credentials is for --otlp URL",
        ),
        (
            vec!["--contended", "--otlp", "localhost:4318"],
            "--otlp localhost:4318: not a URL",
        ),
        (
            vec!["--otlp", "http://127.0.0.1:4318"],
            "--otlp pushes the call stacks of lock waits: add --contended",
        ),
        (
            vec!["--contended", "--stacks", "off", "--pyroscope", url],
            "leave out --stacks off",
        ),
    ] {
        let mut args = args;
        args.extend(["--", "/bin/true"]);
        let run = run_tracer(dir.path(), &args);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {run:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{args:?}: {run:?}");
        assert!(run.stderr.contains(said), "{args:?}: {}", run.stderr);
        assert!(!run.stderr.contains("secret"), "{}", run.stderr);
        assert!(!run.stderr.contains("u:p@"), "{}", run.stderr);
    }
}

/// A process waiting on thousands of distinct futex words makes no label with more than a
/// handful of values: a backend makes a series of each value, and ids and addresses would make
/// one per word. Each word stays apart in the profile, as its own root frame.
#[test]
fn many_locks_make_no_label_with_many_values() {
    if !bpf_available("pyroscope") {
        return;
    }
    const WORDS: usize = 3000;
    let dir = TempDir::new("pyroscope-cardinality");
    let server = IngestServer::start();
    // Two threads taking turns at each of many fresh words, as at a lock (a word waited on
    // for another thread's wake alone is an event, which the push leaves out): most waits block.
    let run = Command::new(tracer())
        .args(["--contended", "--push-interval", "1s", "--pyroscope"])
        .arg(server.url())
        .arg("--")
        .arg(workload_arg("stack_load"))
        .args(["futex-turns", &WORDS.to_string()])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let no_hook = stderr
        .lines()
        .find(|line| line.contains("futex waits outside pthread calls are not recorded"));
    if !prerequisite("pyroscope_cardinality", no_hook) {
        return;
    }

    let mut files = Vec::new();
    for (n, request) in server.requests().iter().enumerate() {
        checked_ingest(request, &pushed_service("stack_load"));
        let name = format!("push-{n}.pb.gz");
        fs::write(dir.path().join(&name), &request.parts()[0].content).unwrap();
        files.push(name);
    }
    let names: Vec<&str> = files.iter().map(String::as_str).collect();
    let profile = pprof_raw_of(&dir, &names);
    let mut values: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut roots = BTreeSet::new();
    for sample in &profile.samples {
        for label in sample.labels.split_whitespace() {
            let (key, value) = label.split_once(':').unwrap_or((label, ""));
            values
                .entry(key.to_owned())
                .or_default()
                .insert(value.to_owned());
        }
        roots.insert(sample.functions.last().unwrap().clone());
    }
    assert!(roots.len() >= WORDS / 4, "{} words apart", roots.len());
    assert!(values.contains_key("lock_kind"), "{values:?}");
    for (key, values) in &values {
        assert!(values.len() <= 3, "label {key} has {} values", values.len());
    }
}
