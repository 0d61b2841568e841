//! `cargo xtask install --prefix DIR` (issue 10): what it installs, and a C analyzer built
//! against the installed library with nothing but `pkg-config --cflags --libs posixtrace`.

use std::process::Command;

use thrtrace_tests::{TempDir, corpus, program_available, succeeded, workspace_root};
use tracer_model::{event::Event, log::LogReader, tr::Line};

fn checked(command: &mut Command) -> String {
    String::from_utf8(succeeded(command).stdout).unwrap()
}

#[test]
fn installed_under_a_prefix_a_c_analyzer_builds_with_pkg_config_alone() {
    if !program_available("install", "pkg-config") {
        return;
    }
    let prefix = TempDir::new("install");
    let root = workspace_root();
    checked(
        Command::new("cargo")
            .current_dir(&root)
            .args(["xtask", "install", "--prefix"])
            .arg(prefix.path()),
    );
    let installed = |path: &str| prefix.path().join(path);

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
    let program = prefix.path().join("print_tr");
    checked(
        Command::new("cc")
            .arg(root.join("tests/analyzers/print_tr.c"))
            .arg("-o")
            .arg(&program)
            .args(flags.split_whitespace()),
    );
    let log = prefix.path().join("good.ptl");
    std::fs::write(&log, corpus::good_log(prefix.path())).unwrap();
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
