//! `cargo xtask install --prefix DIR`: what it installs, and a C analyzer built
//! against the installed library with nothing but `pkg-config --cflags --libs posixtrace`;
//! the contention agent's unit, which systemd accepts, and its configuration, an example only
//! root reads that never replaces the administrator's.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use thrtrace_tests::{TempDir, cargo_xtask, corpus, program_available, succeeded, workspace_root};
use tracer_model::{event::Event, log::LogReader, tr::Line};

fn checked(command: &mut Command) -> String {
    String::from_utf8(succeeded(command).stdout).unwrap()
}

/// `cargo xtask install` under `scratch`: the prefix `scratch/usr`, the agent's configuration
/// under `scratch/etc`, not the host's /etc. The prefix and that directory.
fn install_under(scratch: &Path) -> (PathBuf, PathBuf) {
    let (prefix, sysconfdir) = (scratch.join("usr"), scratch.join("etc"));
    checked(
        cargo_xtask("install")
            .arg("--prefix")
            .arg(&prefix)
            .arg("--sysconfdir")
            .arg(&sysconfdir),
    );
    (prefix, sysconfdir)
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn installed_under_a_prefix_a_c_analyzer_builds_with_pkg_config_alone() {
    if !program_available("install", "pkg-config") {
        return;
    }
    let scratch = TempDir::new("install");
    let root = workspace_root();
    let (prefix, _) = install_under(scratch.path());
    let installed = |path: &str| prefix.join(path);

    let version = checked(Command::new(installed("bin/thrtrace-bpf")).arg("--version"));
    assert_eq!(
        version,
        format!("thrtrace-bpf {}\n", env!("CARGO_PKG_VERSION"))
    );
    let page = std::fs::read_to_string(installed("share/man/man1/thrtrace-bpf.1")).unwrap();
    for section in [
        "SYNOPSIS",
        "OPTIONS",
        "SUBCOMMANDS",
        "ENVIRONMENT",
        "FILES",
        "SIGNALS",
        "EXIT STATUS",
    ] {
        let titled = page
            .lines()
            .any(|l| l.starts_with(".SH") && l.contains(section));
        assert!(titled, "no {section} in the man page");
    }
    for option in [
        "\\-\\-log",
        "\\-\\-stream\\-full\\-policy",
        "THR_TRACE_LOSSLESS",
    ] {
        assert!(page.contains(option), "{option} is not in the man page");
    }
    for subcommand in ["dump", "info", "convert"] {
        let page = installed(&format!("share/man/man1/thrtrace-bpf-{subcommand}.1"));
        assert!(
            std::fs::read_to_string(page)
                .unwrap()
                .contains(".SH OPTIONS")
        );
    }
    let bash = std::fs::read_to_string(installed("share/bash-completion/completions/thrtrace-bpf"));
    assert!(bash.unwrap().contains("--stream-full-policy"));
    assert!(installed("share/zsh/site-functions/_thrtrace-bpf").exists());
    assert!(installed("share/fish/vendor_completions.d/thrtrace-bpf.fish").exists());

    // A C analyzer, built from the installed header and library alone.
    let flags = checked(
        Command::new("pkg-config")
            .args(["--cflags", "--libs", "posixtrace"])
            .env("PKG_CONFIG_PATH", installed("lib/pkgconfig")),
    );
    let program = scratch.path().join("print_tr");
    checked(
        Command::new("cc")
            .arg(root.join("tests/analyzers/print_tr.c"))
            .arg("-o")
            .arg(&program)
            .args(flags.split_whitespace()),
    );
    let log = scratch.path().join("good.ptl");
    std::fs::write(&log, corpus::good_log(scratch.path())).unwrap();
    let printed = checked(
        Command::new(&program)
            .arg(&log)
            .env("LD_LIBRARY_PATH", installed("lib")),
    );
    let reader = LogReader::open(&log).unwrap();
    let lines: Vec<String> = reader
        .events()
        .filter_map(|e| match e.unwrap() {
            Event::Thread(record) => Some(Line(&record).to_string()),
            Event::System(_) => None,
        })
        .collect();
    let printed: Vec<&str> = printed.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(printed, lines);
    assert_eq!(lines.len(), 12);
}

/// The agent's unit names the installed tracer and configuration, and `systemd-analyze verify`
/// finds nothing to say about it (the tracer there, its man page found); the configuration is
/// the shipped example, mode 0600.
#[test]
fn the_agents_unit_is_verified_and_its_config_is_an_example_only_root_reads() {
    if !program_available("install_agent", "systemd-analyze") {
        return;
    }
    let scratch = TempDir::new("install-agent");
    let (prefix, sysconfdir) = install_under(scratch.path());
    let unit = prefix.join("lib/systemd/system/thrtrace-bpf-agent.service");
    let config = sysconfdir.join("thrtrace-bpf/agent.conf");
    assert_eq!(mode(&unit), 0o644);
    assert_eq!(mode(&config), 0o600);
    assert_eq!(
        fs::read(&config).unwrap(),
        fs::read(workspace_root().join("dist/systemd/agent.conf")).unwrap()
    );
    let text = fs::read_to_string(&unit).unwrap();
    let tracer = prefix.join("bin/thrtrace-bpf");
    for line in [
        format!("ExecStart={} --contended ", tracer.display()),
        format!("EnvironmentFile={}\n", config.display()),
    ] {
        assert!(text.contains(&line), "no {line:?} in the unit:\n{text}");
    }
    assert!(!text.contains('@'), "a placeholder is left:\n{text}");

    let verified = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .env("MANPATH", prefix.join("share/man"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&verified.stderr);
    assert!(verified.status.success(), "{said}");
    assert_eq!(said, "", "systemd-analyze verify warns");
}

/// An administrator's configuration is never replaced, nor its mode changed, by installing
/// again; the unit is installed beside it all the same.
#[test]
fn installing_keeps_the_administrators_agent_config() {
    let scratch = TempDir::new("install-agent-kept");
    let config = scratch.path().join("etc/thrtrace-bpf/agent.conf");
    fs::create_dir_all(config.parent().unwrap()).unwrap();
    let theirs = "THRTRACE_PYROSCOPE_URL=http://pyroscope.internal:4040\n";
    fs::write(&config, theirs).unwrap();
    fs::set_permissions(&config, fs::Permissions::from_mode(0o640)).unwrap();
    let (prefix, _) = install_under(scratch.path());
    assert_eq!(fs::read_to_string(&config).unwrap(), theirs);
    assert_eq!(mode(&config), 0o640);
    assert!(
        prefix
            .join("lib/systemd/system/thrtrace-bpf-agent.service")
            .exists()
    );
}
