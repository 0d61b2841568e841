//! The contention agent's systemd unit and configuration, as shipped (dist/systemd), checked
//! without systemd running: what the unit's start check does with the configuration's
//! variables, run as systemd would run it; the tracer, with no capability but the unit's,
//! tracing a process of another user; and the unit's command line, run with a configuration's
//! variables, pushing to a stand-in Pyroscope.

use std::{
    io::Read,
    os::unix::fs::{PermissionsExt, chown},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use thrtrace_tests::{
    Gated, TempDir, bpf_available, file_name, ingest::IngestServer, paired_calls, read_line,
    read_trace, signal, tracer, until_the_hosts_libc_is_traced, workload, workspace_root,
};

fn shipped(name: &str) -> String {
    std::fs::read_to_string(workspace_root().join("dist/systemd").join(name)).unwrap()
}

/// The values the unit gives `key`, in order.
fn directive<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|line| line.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

/// The variables a configuration sets, as `EnvironmentFile=` reads its KEY=value lines.
fn variables(config: &str) -> Vec<(&str, &str)> {
    config
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| line.split_once('=').expect("a KEY=value line"))
        .collect()
}

/// Runs the unit's `ExecStartPre=` command, `/bin/sh -c 'SCRIPT'`, as systemd does: the
/// quotes removed, `$$` made `$`, in an environment of `variables` alone.
fn start_check(variables: &[(&str, &str)]) -> Output {
    let unit = shipped("thrtrace-bpf-agent.service");
    let [check] = directive(&unit, "ExecStartPre")[..] else {
        panic!("not one ExecStartPre= in the unit");
    };
    let script = check
        .strip_prefix("/bin/sh -c '")
        .and_then(|rest| rest.strip_suffix('\''))
        .expect("ExecStartPre=/bin/sh -c 'SCRIPT'")
        .replace("$$", "$");
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .env_clear()
        .envs(variables.iter().copied())
        .output()
        .unwrap()
}

/// The shipped configuration names no server: the unit fails to start, with one line that says
/// what to set and where; an empty URL is refused alike, and a URL lets the tracer start.
#[test]
fn the_unit_refuses_to_start_without_a_server_in_one_line() {
    let config = shipped("agent.conf");
    let refused = start_check(&variables(&config));
    assert_eq!(refused.status.code(), Some(1));
    let said = String::from_utf8(refused.stderr).unwrap();
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains(
            "set THRTRACE_PYROSCOPE_URL or THRTRACE_OTLP_URL in @sysconfdir@/thrtrace-bpf/agent.conf"
        ),
        "{said}"
    );

    let empty = start_check(&[("THRTRACE_PYROSCOPE_URL", ""), ("THRTRACE_OTLP_URL", "")]);
    assert_eq!(empty.status.code(), Some(1));
    // Either server is enough.
    for named in [
        ("THRTRACE_PYROSCOPE_URL", "http://pyroscope.example:4040"),
        ("THRTRACE_OTLP_URL", "http://collector.example:4318"),
    ] {
        let named = start_check(&[named]);
        assert!(named.status.success());
        assert!(named.stdout.is_empty() && named.stderr.is_empty());
    }
}

/// The server's URL and the credentials reach the tracer through its environment, which only
/// root reads, never through its command line, which every user reads in /proc/PID/cmdline.
#[test]
fn the_unit_puts_no_url_or_credential_on_the_command_line() {
    let unit = shipped("thrtrace-bpf-agent.service");
    let [start] = directive(&unit, "ExecStart")[..] else {
        panic!("not one ExecStart= in the unit");
    };
    assert!(start.contains("--contended"), "{start}");
    assert!(!start.contains("PYROSCOPE"), "{start}");
    assert!(
        !start.contains("--pyroscope ") && !start.contains("--pyroscope="),
        "{start}"
    );
}

/// `setpriv` options that leave a root process the unit's capabilities alone, as systemd
/// leaves them to it (its bounding set).
fn with_the_units_capabilities(unit: &str) -> String {
    let [capabilities] = directive(unit, "CapabilityBoundingSet")[..] else {
        panic!("not one CapabilityBoundingSet= in the unit");
    };
    let bounding: Vec<String> = capabilities
        .split_whitespace()
        .map(|c| format!("+{}", c.strip_prefix("CAP_").unwrap().to_lowercase()))
        .collect();
    format!("--bounding-set=-all,{}", bounding.join(","))
}

/// The tracer with the unit's capabilities alone (its bounding set, as systemd leaves it to a
/// root service) traces a program another user runs from a directory only that user can
/// enter: its /proc entries and mapped files are read, its calls recorded, none lost. (By
/// `-p`, not system-wide as the agent does, so that the other processes here, which the same
/// capabilities let it read, do not fill its rings.)
#[test]
fn the_units_capabilities_suffice_to_trace_another_users_process() {
    if !bpf_available("agent_capabilities") {
        return;
    }
    let nobody = 65534;
    let private = TempDir::new("agent-capabilities-program");
    let program = private.path().join("mutex_gate");
    std::fs::copy(workload("mutex_gate"), &program).unwrap();
    for path in [private.path(), program.as_path()] {
        chown(path, Some(nobody), Some(nobody)).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    // setpriv runs the program in its own process.
    let mut gate = Gated::spawn(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&program)
            .args(["0", "300", "0"]),
    );

    let unit = shipped("thrtrace-bpf-agent.service");
    let dir = TempDir::new("agent-capabilities");
    let mut traced = Command::new("setpriv")
        .arg(with_the_units_capabilities(&unit))
        .arg("--")
        .arg(tracer())
        .args(["--events", "mutex", "-p", &gate.pid.to_string(), "--dir"])
        .arg(dir.path())
        // As under systemd: files are the tracer's, not handed to a sudo user (CAP_CHOWN).
        .env_remove("SUDO_UID")
        .env_remove("SUDO_GID")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(traced.stderr.take().unwrap());
    let line = read_line(&mut stderr);
    assert!(
        line.starts_with(&format!("thrtrace-bpf: tracing pid {}", gate.pid)),
        "{line:?}"
    );
    let (pid, mutex) = (gate.pid, gate.mutex);
    gate.run_phase_two();
    gate.finish();

    signal(traced.id(), "-INT");
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(traced.wait().unwrap().success(), "{rest}");
    assert!(rest.contains(" 0 lost"), "{rest}");
    let files = read_trace(dir.path());
    let lines = &files[&file_name(pid, pid)];
    assert_eq!(
        paired_calls(lines, "mutex_lock", mutex).len(),
        300,
        "{rest}"
    );
}

/// The unit's `ExecStart=` as systemd runs it with `variables` (the configuration's, over the
/// unit's `Environment=`): the installed tracer, `${VARIABLE}` replaced by its value.
fn start_command(unit: &str, variables: &[(&str, &str)]) -> Vec<String> {
    let [start] = directive(unit, "ExecStart")[..] else {
        panic!("not one ExecStart= in the unit");
    };
    let defaults = directive(unit, "Environment")
        .into_iter()
        .map(|setting| setting.split_once('=').expect("VARIABLE=value"));
    let mut environment: Vec<(&str, &str)> = defaults.collect();
    environment.extend(variables.iter().copied());
    let mut words: Vec<String> = start.split_whitespace().map(str::to_owned).collect();
    words[0] = tracer().display().to_string();
    for word in &mut words {
        if let Some(name) = word.strip_prefix("${").and_then(|w| w.strip_suffix('}')) {
            let value = environment.iter().rev().find(|(key, _)| *key == name);
            *word = value.map_or("", |(_, value)| value).to_owned();
        }
    }
    words
}

/// The agent as an administrator configures it (a URL, a token, a tenant, an interval) pushes
/// the host's contention to the server with its credentials, writes no trace file, and ends
/// cleanly when systemd stops it (SIGTERM). It runs the unit's command line, with the unit's
/// capabilities and environment alone, from an empty directory that stays empty.
#[test]
fn the_agent_as_configured_pushes_with_its_credentials_and_writes_no_file() {
    if !bpf_available("agent_pushes") {
        return;
    }
    let server = IngestServer::start();
    let unit = shipped("thrtrace-bpf-agent.service");
    let url = server.url();
    let configured = [
        ("THRTRACE_PYROSCOPE_URL", url.as_str()),
        ("THRTRACE_PUSH_INTERVAL", "1s"),
        ("THRTRACE_PYROSCOPE_TOKEN", "agent-token"),
        ("THRTRACE_PYROSCOPE_TENANT", "team-a"),
    ];
    let command = start_command(&unit, &configured);
    let cwd = TempDir::new("agent-cwd");
    let mut agent = Command::new("setpriv")
        .arg(with_the_units_capabilities(&unit))
        .arg("--")
        .args(&command)
        .current_dir(cwd.path())
        .env_clear()
        .envs(configured)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(agent.stderr.take().unwrap());
    until_the_hosts_libc_is_traced(&mut stderr);

    // A process started after the agent, contended (10 ms holds, two waiters).
    let contended = Command::new(workload("contention"))
        .args(["50", "10", "2"])
        .output()
        .unwrap();
    assert!(contended.status.success(), "{contended:?}");
    let give_up = Instant::now() + Duration::from_secs(20);
    while server.requests().is_empty() {
        assert!(Instant::now() < give_up, "nothing pushed in 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    signal(agent.id(), "-TERM");
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(agent.wait().unwrap().success(), "{rest}");

    for request in server.requests() {
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            ("POST", "/ingest")
        );
        assert_eq!(request.header("authorization"), Some("Bearer agent-token"));
        assert_eq!(request.header("x-scope-orgid"), Some("team-a"));
    }
    assert_eq!(cwd.entries(), Vec::<String>::new(), "{rest}");
}
