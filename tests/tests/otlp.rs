//! `--otlp URL`: each interval's contention pushed as OpenTelemetry profiles (OTLP/HTTP,
//! `v1development`), which a loopback receiver decodes with the official `opentelemetry-proto`
//! package (PyPI, which `cargo xtask setup` installs in a virtual environment).

use std::{
    io::BufReader,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::mpsc::Receiver,
    time::Duration,
};

use serde_json::Value;
use thrtrace_tests::{
    Run, TempDir, bpf_available, lines_as_they_come, prerequisite, pushed_service, report_json,
    tracer, workload_arg, workspace_root,
};

/// The Python that has `opentelemetry-proto` (`cargo xtask setup` makes it).
fn python() -> PathBuf {
    workspace_root().join("target/otel-venv/bin/python")
}

/// A running receiver: its process, the lines it prints (a JSON object per request), its URL.
struct OtlpReceiver {
    child: Child,
    lines: Receiver<String>,
    url: String,
}

impl OtlpReceiver {
    /// Starts one (`refuse`: answering 400 to all), or skips `test` where there is no Python
    /// with the package.
    fn start(test: &str, refuse: bool) -> Option<OtlpReceiver> {
        let missing = (!python().exists())
            .then_some("no Python with opentelemetry-proto (cargo xtask setup makes it)");
        if !prerequisite(test, missing) {
            return None;
        }
        let mut command = Command::new(python());
        command.arg(workspace_root().join("tests/src/otlp_receiver.py"));
        if refuse {
            command.arg("--refuse");
        }
        let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
        let lines = lines_as_they_come(BufReader::new(child.stdout.take().unwrap()));
        let first: Value = serde_json::from_str(&lines.recv().unwrap()).unwrap();
        let url = format!("http://127.0.0.1:{}", first["port"]);
        Some(OtlpReceiver { child, lines, url })
    }

    /// The requests it has told of, once it has told of `at_least` (its lines may come after
    /// the tracer has ended: they are read on a thread of their own).
    fn requests(&self, at_least: usize) -> Vec<Value> {
        let mut lines: Vec<String> = Vec::new();
        while lines.len() < at_least {
            match self.lines.recv_timeout(Duration::from_secs(10)) {
                Ok(line) => lines.push(line),
                Err(_) => break,
            }
        }
        lines.extend(self.lines.try_iter());
        lines
            .iter()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The tracer's `--contended --otlp URL --log app.ptl` trace of `contention ROUNDS 10 2`, with
/// `options`, in the directory returned.
fn traced(receiver: &OtlpReceiver, options: &[&str], rounds: &str) -> (Run, TempDir) {
    let dir = TempDir::new("otlp");
    let run = Command::new(tracer())
        .args(["--contended", "--otlp", &receiver.url, "--log", "app.ptl"])
        .args(options)
        .arg("--")
        .arg(workload_arg("contention"))
        .args([rounds, "10", "2"])
        .current_dir(dir.path())
        .output()
        .unwrap()
        .into();
    (run, dir)
}

#[test]
fn each_push_decodes_with_the_official_package_and_holds_the_workloads_waits() {
    if !bpf_available("otlp") {
        return;
    }
    let Some(receiver) = OtlpReceiver::start("otlp", false) else {
        return;
    };
    let (run, dir) = traced(&receiver, &[], "3");
    assert!(run.status.success(), "{run:?}");
    let requests = receiver.requests(1);
    // One interval: the trace is shorter than the default 15 s.
    assert_eq!(requests.len(), 1, "{requests:?}\n{}", run.stderr);
    let request = &requests[0];
    assert_eq!(request["path"], "/v1development/profiles", "{request}");
    assert_eq!(request["content_type"], "application/x-protobuf");
    assert!(request.get("error").is_none(), "{request}");
    let resources = request["resources"].as_array().unwrap();
    assert_eq!(resources.len(), 1, "{request:#}");
    let attributes = &resources[0]["attributes"];
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        attributes["service.name"],
        pushed_service("contention").as_str(),
        "{attributes}"
    );
    assert_eq!(attributes["process.executable.name"], "contention");
    assert_eq!(attributes["host.name"], host.trim());
    assert!(
        attributes["process.pid"].as_i64().unwrap() > 0,
        "{attributes}"
    );
    let profiles = resources[0]["profiles"].as_array().unwrap();
    let types: Vec<(&str, &str)> = profiles
        .iter()
        .map(|p| (p["type"].as_str().unwrap(), p["unit"].as_str().unwrap()))
        .collect();
    assert_eq!(types, [("contentions", "count"), ("delay", "nanoseconds")]);
    // Both over the same samples: the waiters' stacks of the contended lock waits, as many
    // and as long as the report of the same trace counts them.
    assert_eq!(profiles[0]["samples"], profiles[1]["samples"]);
    let report = report_json(&dir, &["app.ptl"]);
    let (waits, waited) = report["locks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|lock| lock["waiting_stacks"].as_array().unwrap())
        .fold((0, 0), |(waits, waited), stack| {
            (
                waits + stack["count"].as_i64().unwrap(),
                waited + stack["wait_total_ns"].as_i64().unwrap(),
            )
        });
    // 3 rounds of 2 waiters on the mutex the main thread holds, at the least.
    assert!(waits >= 6, "{report:#}");
    assert_eq!(profiles[0]["total"], waits, "{profiles:#?}");
    assert_eq!(profiles[1]["total"], waited, "{profiles:#?}");
    for profile in profiles {
        let functions: Vec<&str> = profile["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        for function in ["waiter", "pthread_mutex_lock", "lock first (mutex)"] {
            assert!(functions.contains(&function), "{function} in {functions:?}");
        }
        assert!(
            profile["attributes"]
                .as_array()
                .unwrap()
                .contains(&"thrtrace.lock.kind=mutex".into()),
            "{profile}"
        );
    }
    assert!(
        run.stderr
            .contains(&format!("1 contention profile pushed to {}", receiver.url)),
        "{}",
        run.stderr
    );
}

#[test]
fn a_receiver_that_refuses_is_said_once_with_its_reason() {
    if !bpf_available("otlp_refused") {
        return;
    }
    let Some(receiver) = OtlpReceiver::start("otlp_refused", true) else {
        return;
    };
    let (run, _dir) = traced(&receiver, &["--push-interval", "1s"], "40");
    assert!(run.status.success(), "{run:?}");
    let said = "refused a contention profile: 400 Bad Request: profiles are not accepted here";
    assert_eq!(run.stderr.matches(said).count(), 1, "{}", run.stderr);
    assert!(receiver.requests(2).len() > 1, "{}", run.stderr);
}
