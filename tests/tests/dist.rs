//! `cargo xtask dist`: the static tracer traces exactly in an old userland with no
//! other C library than its own, the .deb installs and removes cleanly and ships the agent
//! disabled, and the analyzer library needs nothing newer than glibc 2.17 and loads with an
//! older glibc than the host's. The arm64 release, which runs only in the kernel matrix's
//! guests, is the x86-64 one laid out alike, built for AArch64.

use std::{
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};
use tracer_common::Which;

use thrtrace_tests::{
    TempDir, TraceRecord, bpf_available, cargo_xtask, corpus, field, paired_calls,
    program_available, read_trace, succeeded, workspace_root,
};
use tracer_model::{event::Event, log::LogReader, tr::Line};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// One architecture's release: the names its archive and package carry, and the machine
/// `readelf` names in its ELF files.
struct Release {
    arch: &'static str,
    debian: &'static str,
    machine: &'static str,
}

const X86_64: Release = Release {
    arch: "x86_64",
    debian: "amd64",
    machine: "Advanced Micro Devices X86-64",
};
const AARCH64: Release = Release {
    arch: "aarch64",
    debian: "arm64",
    machine: "AArch64",
};

impl Release {
    /// The archive's top directory, as `dist` leaves it unpacked in target/dist.
    fn tree(&self) -> PathBuf {
        dist().join(format!("thrtrace-bpf-{VERSION}-{}-linux", self.arch))
    }

    fn archive(&self) -> PathBuf {
        dist().join(format!("thrtrace-bpf-{VERSION}-{}-linux.tar.gz", self.arch))
    }

    fn deb(&self) -> PathBuf {
        dist().join(format!("thrtrace-bpf_{VERSION}_{}.deb", self.debian))
    }
}

/// target/dist, made once for every test of this binary.
fn dist() -> &'static Path {
    static DIST: OnceLock<PathBuf> = OnceLock::new();
    DIST.get_or_init(|| {
        succeeded(&mut cargo_xtask("dist"));
        workspace_root().join("target/dist")
    })
}

/// Debian 11's glibc 2.31, as `cargo xtask test` fetches it; `None` skips `test` (a failure in
/// CI).
fn glibc_2_31(test: &str) -> Option<PathBuf> {
    let sysroot = workspace_root().join("target/glibc-2.31");
    thrtrace_tests::prerequisite(
        test,
        (!sysroot.join("usr/include/pthread.h").exists())
            .then_some("no glibc 2.31 in target/ (`cargo xtask test` fetches it)"),
    )
    .then_some(sysroot)
}

/// `cc` options that build against the glibc in `sysroot`.
fn against(sysroot: &Path) -> Vec<String> {
    let libraries = sysroot.join("usr/lib/x86_64-linux-gnu");
    vec![
        format!("--sysroot={}", sysroot.display()),
        format!("-B{}/", libraries.display()),
        format!("-L{}", libraries.display()),
    ]
}

/// A Debian 11 userland in miniature: its C library and nothing else, entered with chroot.
/// The release's static tracer, run there, traces a program built against that C library
/// (its pthread functions in libpthread.so.0) with exact counts.
#[test]
fn the_static_tracer_traces_exactly_in_a_debian_11_root() {
    if !bpf_available("dist_old_userland") {
        return;
    }
    let Some(sysroot) = glibc_2_31("dist_old_userland") else {
        return;
    };
    let tracer = X86_64.tree().join("bin/thrtrace-bpf");
    assert_static(&tracer, &X86_64);

    let root = TempDir::new("debian-11-root");
    // The whole tree, as fetched: merged into /usr or not, the loader's path resolves in it.
    succeeded(
        Command::new("cp")
            .arg("-a")
            .arg(sysroot.join("."))
            .arg(root.path()),
    );
    for dir in ["proc", "sys", "run", "out"] {
        std::fs::create_dir(root.path().join(dir)).unwrap();
    }
    std::fs::copy(&tracer, root.path().join("thrtrace-bpf")).unwrap();
    // Built as on Debian 11: its loader at the standard path, its libraries found there.
    succeeded(
        Command::new("cc")
            .args(["-O2", "-pthread"])
            .args(against(&sysroot))
            .arg(workspace_root().join("tests/workloads/mutex_contend.c"))
            .arg("-o")
            .arg(root.path().join("mutex_contend")),
    );
    let inside = format!(
        "mount -t proc proc {root}/proc && mount -t sysfs sysfs {root}/sys && \
         exec chroot {root} /thrtrace-bpf -e mutex -d /out -- /mutex_contend 2 1000",
        root = root.path().display()
    );
    let run = succeeded(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private"])
            .args(["sh", "-c", &inside]),
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("lib/x86_64-linux-gnu/libpthread-2.31.so"),
        "{stderr}"
    );
    assert!(stderr.contains(" 0 lost"), "{stderr}");
    let mutex: i64 = field(&String::from_utf8_lossy(&run.stdout), "mutex");
    let files = read_trace(&root.path().join("out"));
    assert_eq!(files.len(), 2, "a file per thread: {:?}", files.keys());
    for lines in files.values() {
        assert_eq!(paired_calls(lines, "mutex_lock", mutex).len(), 1000);
        let unlocks = lines
            .iter()
            .filter(|l: &&TraceRecord| l.is("mutex_unlock", Which::Whole) && l.a[0] == mutex)
            .count();
        assert_eq!(unlocks, 1000);
    }
}

/// Purges the package if a test installed it and stopped half-way.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg")
            .args(["--purge", "thrtrace-bpf"])
            .output();
    }
}

const AGENT_UNIT: &str = "/usr/lib/systemd/system/thrtrace-bpf-agent.service";
const AGENT_CONFIG: &str = "/etc/thrtrace-bpf/agent.conf";

/// A C analyzer's printed tr lines and the log's own, for `corpus::good_log`.
fn analyzer_and_log_lines(analyzer: &Path, scratch: &Path) -> (Vec<String>, Vec<String>) {
    let log = scratch.join("good.ptl");
    std::fs::write(&log, corpus::good_log(scratch)).unwrap();
    let printed = succeeded(Command::new(analyzer).arg(&log));
    let printed = String::from_utf8(printed.stdout).unwrap();
    let printed: Vec<String> = printed
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let lines = LogReader::open(&log)
        .unwrap()
        .events()
        .filter_map(|e| match e.unwrap() {
            Event::Thread(record) => Some(Line(&record).to_string()),
            Event::System(_) => None,
        })
        .collect();
    (printed, lines)
}

/// The shell completions the .deb installs where bash, zsh and fish look, each with an option
/// it completes.
const COMPLETIONS: [(&str, &str); 3] = [
    (
        "/usr/share/bash-completion/completions/thrtrace-bpf",
        "--print",
    ),
    ("/usr/share/zsh/vendor-completions/_thrtrace-bpf", "--print"),
    (
        "/usr/share/fish/vendor_completions.d/thrtrace-bpf.fish",
        "print",
    ),
];

/// The .deb as a user installs it: the tracer on PATH, its manual and completions, pkg-config finding the
/// analyzer library, a C analyzer built with it alone and run without LD_LIBRARY_PATH, the
/// agent's unit as systemd accepts it, disabled, its configuration only root reads; and
/// purged, nothing of it left.
#[test]
fn the_deb_installs_and_removes_cleanly() {
    if !bpf_available("dist_deb")
        || !program_available("dist_deb", "pkg-config")
        || !program_available("dist_deb", "man")
        || !program_available("dist_deb", "systemd-analyze")
    {
        return;
    }
    let deb = X86_64.deb();
    let installed = Installed;
    succeeded(Command::new("dpkg").arg("--install").arg(&deb));
    let version = succeeded(Command::new("/usr/bin/thrtrace-bpf").arg("--version"));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        format!("thrtrace-bpf {VERSION}\n")
    );
    let page = succeeded(Command::new("man").args(["-w", "thrtrace-bpf"]));
    assert_eq!(
        String::from_utf8_lossy(&page.stdout).trim(),
        "/usr/share/man/man1/thrtrace-bpf.1"
    );
    for (path, option) in COMPLETIONS {
        let script = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(script.contains(option), "{path} lacks {option}");
    }
    let flags = succeeded(Command::new("pkg-config").args(["--cflags", "--libs", "posixtrace"]));
    let flags = String::from_utf8(flags.stdout).unwrap();
    assert!(flags.contains("-lposixtrace"), "{flags}");
    let scratch = TempDir::new("dist-deb");
    let analyzer = scratch.path().join("print_tr");
    succeeded(
        Command::new("cc")
            .arg(workspace_root().join("tests/analyzers/print_tr.c"))
            .arg("-o")
            .arg(&analyzer)
            .args(flags.split_whitespace()),
    );
    let (printed, lines) = analyzer_and_log_lines(&analyzer, scratch.path());
    assert_eq!(printed, lines);
    assert_eq!(lines.len(), 12);

    let verified = succeeded(Command::new("systemd-analyze").args(["verify", AGENT_UNIT]));
    assert_eq!(String::from_utf8_lossy(&verified.stderr), "");
    // Read from the files, as systemd is not running here: installed, not enabled.
    let enabled = Command::new("systemctl")
        .args(["--root=/", "is-enabled", "thrtrace-bpf-agent.service"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&enabled.stdout), "disabled\n");
    let config = std::fs::metadata(AGENT_CONFIG).unwrap();
    assert_eq!(config.permissions().mode() & 0o7777, 0o600);
    assert_eq!((config.uid(), config.gid()), (0, 0));

    succeeded(Command::new("dpkg").args(["--purge", "thrtrace-bpf"]));
    drop(installed);
    let status = Command::new("dpkg")
        .args(["--status", "thrtrace-bpf"])
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(!status.contains("Status: install ok installed"), "{status}");
    for path in [
        "/usr/bin/thrtrace-bpf",
        "/usr/lib/libposixtrace.so.0",
        "/usr/include/trace.h",
        "/usr/lib/pkgconfig/posixtrace.pc",
        "/usr/share/man/man1/thrtrace-bpf.1",
        AGENT_UNIT,
        "/etc/thrtrace-bpf",
    ]
    .into_iter()
    .chain(COMPLETIONS.map(|(path, _)| path))
    {
        assert!(!Path::new(path).exists(), "{path} is left");
    }
}

/// The .deb ships the agent as Debian ships a service, without installing it: the unit under
/// /usr/lib/systemd/system, the configuration a conffile only root reads, and maintainer scripts
/// none of which enables or starts the agent.
#[test]
fn the_deb_ships_the_agent_disabled_its_config_a_conffile() {
    for release in [X86_64, AARCH64] {
        debian_package_ships_the_agent_disabled(&release.deb());
    }
}

fn debian_package_ships_the_agent_disabled(deb: &Path) {
    let contents = succeeded(Command::new("dpkg-deb").arg("--contents").arg(deb));
    let contents = String::from_utf8(contents.stdout).unwrap();
    for (path, mode) in [(AGENT_UNIT, "-rw-r--r--"), (AGENT_CONFIG, "-rw-------")] {
        let entry = contents
            .lines()
            .find(|line| line.ends_with(&format!(".{path}")))
            .unwrap_or_else(|| panic!("no {path} in the package:\n{contents}"));
        assert!(entry.starts_with(&format!("{mode} root/root ")), "{entry}");
    }

    let control = TempDir::new("dist-deb-control");
    succeeded(
        Command::new("dpkg-deb")
            .arg("--control")
            .arg(deb)
            .arg(control.path()),
    );
    let conffiles = std::fs::read_to_string(control.path().join("conffiles")).unwrap();
    assert_eq!(conffiles, format!("{AGENT_CONFIG}\n"));
    for script in ["postinst", "prerm", "postrm"] {
        let text = std::fs::read_to_string(control.path().join(script)).unwrap();
        let commands = text
            .lines()
            .filter(|line| !line.trim_start().starts_with('#'));
        for word in commands.flat_map(str::split_whitespace) {
            assert!(
                !["enable", "reenable", "start", "--now"].contains(&word),
                "{script} runs {word}:\n{text}"
            );
        }
    }
}

/// The release's analyzer library needs no glibc symbol version newer than 2.17, and a C
/// analyzer built and run with an older glibc than the host's (2.31: its loader, its
/// libraries) loads it and reads a log.
#[test]
fn the_analyzer_library_needs_glibc_2_17_and_loads_with_2_31() {
    let Some(sysroot) = glibc_2_31("dist_library_old_glibc") else {
        return;
    };
    let lib = X86_64.tree().join("lib");
    assert_needs_glibc_2_17_at_most(&lib.join(format!("libposixtrace.so.{VERSION}")), &X86_64);
    let include = lib.with_file_name("include");
    let libraries = sysroot.join("lib/x86_64-linux-gnu");
    let scratch = TempDir::new("dist-old-glibc");
    let analyzer = scratch.path().join("print_tr");
    succeeded(
        Command::new("cc")
            .args(against(&sysroot))
            .arg(format!(
                "-Wl,--dynamic-linker={}",
                libraries.join("ld-linux-x86-64.so.2").display()
            ))
            .arg(format!(
                "-Wl,--disable-new-dtags,-rpath={}:{}",
                lib.display(),
                libraries.display()
            ))
            .arg(format!("-I{}", include.display()))
            .arg(workspace_root().join("tests/analyzers/print_tr.c"))
            .arg("-o")
            .arg(&analyzer)
            .arg(format!("-L{}", lib.display()))
            .arg("-lposixtrace"),
    );
    let (printed, lines) = analyzer_and_log_lines(&analyzer, scratch.path());
    assert_eq!(printed, lines);
    assert_eq!(lines.len(), 12);
}

/// The arm64 release holds what the x86-64 one holds, where it holds it, with the same modes:
/// its archive, and its package, whose Architecture is arm64. Its tracer and analyzer library,
/// the same in both, are AArch64's: the tracer static, the library needing no glibc newer than
/// 2.17.
#[test]
fn the_arm64_release_is_the_x86_64_one_built_for_aarch64() {
    assert_eq!(archive_listing(&X86_64), archive_listing(&AARCH64));
    assert_eq!(package_listing(&X86_64), package_listing(&AARCH64));
    for release in [X86_64, AARCH64] {
        let architecture = succeeded(
            Command::new("dpkg-deb")
                .arg("--field")
                .arg(release.deb())
                .arg("Architecture"),
        );
        assert_eq!(
            String::from_utf8_lossy(&architecture.stdout),
            format!("{}\n", release.debian)
        );
    }

    let unpacked = TempDir::new("dist-arm64");
    let (archive, package) = (unpacked.path().join("tar"), unpacked.path().join("deb"));
    std::fs::create_dir(&archive).unwrap();
    succeeded(
        Command::new("tar")
            .arg("-xzf")
            .arg(AARCH64.archive())
            .arg("-C")
            .arg(&archive),
    );
    succeeded(
        Command::new("dpkg-deb")
            .arg("--extract")
            .arg(AARCH64.deb())
            .arg(&package),
    );
    let prefix = archive.join(AARCH64.tree().file_name().unwrap());
    let (tracer, library) = (
        "bin/thrtrace-bpf",
        format!("lib/libposixtrace.so.{VERSION}"),
    );
    assert_static(&prefix.join(tracer), &AARCH64);
    assert_needs_glibc_2_17_at_most(&prefix.join(&library), &AARCH64);
    for file in [tracer, &library] {
        assert!(
            std::fs::read(prefix.join(file)).unwrap()
                == std::fs::read(package.join("usr").join(file)).unwrap(),
            "the package's {file} is not the archive's"
        );
    }
}

/// `release`'s archive as `tar` lists it, below its top directory: each entry's mode, owner,
/// path and link target.
fn archive_listing(release: &Release) -> Vec<String> {
    let listing = succeeded(
        Command::new("tar")
            .arg("--list")
            .arg("--verbose")
            .arg("--gzip")
            .arg("--file")
            .arg(release.archive()),
    );
    let top = format!("{}/", release.tree().file_name().unwrap().display());
    entries(&String::from_utf8_lossy(&listing.stdout), &top)
}

/// `release`'s package as `dpkg-deb --contents` lists it.
fn package_listing(release: &Release) -> Vec<String> {
    let listing = succeeded(
        Command::new("dpkg-deb")
            .arg("--contents")
            .arg(release.deb()),
    );
    entries(&String::from_utf8_lossy(&listing.stdout), "./")
}

/// The entries of a `tar --verbose` listing whose paths start with `top`, without `top`, the
/// size and the date (a tracer's size is its architecture's), sorted.
fn entries(listing: &str, top: &str) -> Vec<String> {
    let mut entries: Vec<String> = listing
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (mode, owner, path) = (fields[0], fields[1], &fields[5..]);
            let path = path.join(" ");
            let path = path.strip_prefix(top).unwrap_or_else(|| panic!("{line}"));
            format!("{mode} {owner} {path}")
        })
        .collect();
    entries.sort();
    assert!(
        entries
            .iter()
            .any(|entry| entry.ends_with("bin/thrtrace-bpf")),
        "{listing}"
    );
    entries
}

/// `file` is an ELF file of `release`'s machine.
fn assert_machine(file: &Path, release: &Release) {
    let header = succeeded(Command::new("readelf").arg("--file-header").arg(file));
    let header = String::from_utf8_lossy(&header.stdout);
    let machine = header
        .lines()
        .find_map(|line| line.trim().strip_prefix("Machine:"))
        .map(str::trim);
    assert_eq!(machine, Some(release.machine), "{}", file.display());
}

/// `tracer` is `release`'s machine's and static: it names no loader and no library.
fn assert_static(tracer: &Path, release: &Release) {
    assert_machine(tracer, release);
    let headers = succeeded(
        Command::new("readelf")
            .args(["--program-headers", "--dynamic"])
            .arg(tracer),
    );
    let headers = String::from_utf8_lossy(&headers.stdout);
    assert!(
        !headers.contains("INTERP") && !headers.contains("(NEEDED)"),
        "the release's tracer names a dynamic loader or libraries:\n{headers}"
    );
}

/// `library` is `release`'s machine's and needs no glibc symbol version newer than 2.17.
fn assert_needs_glibc_2_17_at_most(library: &Path, release: &Release) {
    assert_machine(library, release);
    let needs = succeeded(Command::new("readelf").arg("--version-info").arg(library));
    let needs = String::from_utf8_lossy(&needs.stdout);
    let glibc_versions: Vec<&str> = needs
        .split("Name: GLIBC_")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    assert!(!glibc_versions.is_empty(), "{needs}");
    for version in glibc_versions {
        let minor: u32 = version.split('.').nth(1).unwrap().parse().unwrap();
        assert!(minor <= 17, "libposixtrace needs GLIBC_{version}:\n{needs}");
    }
}
