//! `cargo xtask install [--prefix DIR]`: installs thrtrace-bpf as a Linux tool is installed,
//! under DIR (default /usr/local): the binary, its manual pages and shell completions (made by
//! the binary from its own command-line definition), and the C analyzer library with its
//! header and pkg-config file; and the contention agent, disabled: its systemd unit under
//! DIR/lib/systemd/system and an example of its configuration under --sysconfdir (default
//! /etc), never replacing one that is there.

use std::{
    fs,
    io::{self, Write},
    os::unix::fs::{OpenOptionsExt, PermissionsExt, symlink},
    path::Path,
};

use anyhow::{Context, Result};

use crate::{
    setup,
    shell::{build_tracer, command, is_root, output, run, workspace_root},
};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
const MAJOR: &str = env!("CARGO_PKG_VERSION_MAJOR");

/// The agent's unit, as systemd names it.
pub const AGENT_UNIT: &str = "thrtrace-bpf-agent.service";
/// The agent's configuration, under the system configuration directory.
pub const AGENT_CONFIG: &str = "thrtrace-bpf/agent.conf";

pub fn run_install(prefix: &Path, sysconfdir: &Path) -> Result<()> {
    setup::ensure_prerequisites()?;
    let tracer = build_tracer()?;
    let library = tracer.with_file_name("libposixtrace.so");
    // The unit names the tracer and its configuration by absolute paths.
    let prefix = &std::path::absolute(prefix)?;
    let sysconfdir = std::path::absolute(sysconfdir)?;
    lay_out(
        &tracer,
        &tracer,
        &library,
        prefix,
        &prefix.display().to_string(),
    )?;
    lay_out_agent_unit(prefix, &prefix.join("bin"), &sysconfdir)?;
    let config = sysconfdir.join(AGENT_CONFIG);
    let config_state = if place_agent_config(&config)? {
        "an example of its configuration"
    } else {
        "its configuration as it was"
    };
    // The dynamic loader's cache, for a prefix it searches.
    if is_root()
        && ["/usr", "/usr/local"]
            .iter()
            .any(|p| prefix == Path::new(p))
    {
        run(&mut command("ldconfig"))?;
    }
    eprintln!(
        "xtask: installed thrtrace-bpf {VERSION} under {}: bin/thrtrace-bpf, lib/libposixtrace.so, \
         include/trace.h, lib/pkgconfig/posixtrace.pc, man pages, bash/zsh/fish completions; \
         the agent, disabled: lib/systemd/system/{AGENT_UNIT}, {config_state} in {}",
        prefix.display(),
        config.display()
    );
    Ok(())
}

/// Lays out what is installed under `dir`: `tracer` in bin/, `library` (libposixtrace.so) with
/// its version links, trace.h and posixtrace.pc (whose prefix is `prefix`, as pkg-config
/// reads it) in lib/ and include/, and the man pages and shell completions that
/// `host_tracer`, a build of the tracer this machine runs (`tracer`, unless that is another
/// architecture's), makes from its command-line definition in share/.
pub fn lay_out(
    tracer: &Path,
    host_tracer: &Path,
    library: &Path,
    dir: &Path,
    prefix: &str,
) -> Result<()> {
    let root = workspace_root();
    install(tracer, &dir.join("bin/thrtrace-bpf"), 0o755)?;

    let lib = dir.join("lib");
    let versioned = format!("libposixtrace.so.{VERSION}");
    install(library, &lib.join(&versioned), 0o755)?;
    link(&versioned, &lib.join(format!("libposixtrace.so.{MAJOR}")))?;
    link(
        &format!("libposixtrace.so.{MAJOR}"),
        &lib.join("libposixtrace.so"),
    )?;
    install(
        &root.join("posixtrace/include/trace.h"),
        &dir.join("include/trace.h"),
        0o644,
    )?;
    let pkg_config = format!(
        "prefix={prefix}\nincludedir=${{prefix}}/include\nlibdir=${{prefix}}/lib\n\n\
         Name: posixtrace\n\
         Description: The POSIX trace analyzer API (<trace.h>) for thrtrace-bpf trace logs\n\
         Version: {VERSION}\nCflags: -I${{includedir}}\nLibs: -L${{libdir}} -lposixtrace\n"
    );
    write(
        &lib.join("pkgconfig/posixtrace.pc"),
        pkg_config.as_bytes(),
        0o644,
    )?;

    let pages = root.join("target/man");
    let _ = fs::remove_dir_all(&pages);
    fs::create_dir_all(&pages)?;
    run(command(host_tracer).args(["generate", "man"]).arg(&pages))?;
    for page in fs::read_dir(&pages)? {
        let page = page?.path();
        let name = page.file_name().expect("a page's name");
        install(&page, &dir.join("share/man/man1").join(name), 0o644)?;
    }
    // Debian's zsh reads a package's completions from vendor-completions, a local install's
    // from site-functions (of /usr/local).
    let zsh = match prefix {
        "/usr" => "share/zsh/vendor-completions/_thrtrace-bpf",
        _ => "share/zsh/site-functions/_thrtrace-bpf",
    };
    let completions = [
        ("bash", "share/bash-completion/completions/thrtrace-bpf"),
        ("zsh", zsh),
        ("fish", "share/fish/vendor_completions.d/thrtrace-bpf.fish"),
    ];
    for (shell, path) in completions {
        let script = output(command(host_tracer).args(["generate", "completions", shell]))?.stdout;
        write(&dir.join(path), &script, 0o644)?;
    }
    Ok(())
}

/// Writes the agent's systemd unit into `dir`/lib/systemd/system, naming the tracer in
/// `bindir` and its configuration under `sysconfdir`. Enabling it is the administrator's
/// choice, once the configuration names a server.
pub fn lay_out_agent_unit(dir: &Path, bindir: &Path, sysconfdir: &Path) -> Result<()> {
    let template = workspace_root().join("dist/systemd").join(AGENT_UNIT);
    let unit = fs::read_to_string(&template)
        .with_context(|| format!("cannot read {}", template.display()))?
        .replace("@bindir@", &bindir.display().to_string())
        .replace("@sysconfdir@", &sysconfdir.display().to_string());
    write(
        &dir.join("lib/systemd/system").join(AGENT_UNIT),
        unit.as_bytes(),
        0o644,
    )
}

/// Writes the example of the agent's configuration at `config`, mode 0600 as it may come to
/// hold credentials, unless a file is there: a configuration is the administrator's, never
/// replaced. Whether it was written.
pub fn place_agent_config(config: &Path) -> Result<bool> {
    let example = workspace_root().join("dist/systemd/agent.conf");
    let bytes = fs::read(&example).with_context(|| format!("cannot read {}", example.display()))?;
    let dir = config.parent().expect("the configuration's directory");
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let created = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(config);
    let mut file = match created {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
        Err(error) => {
            return Err(error).with_context(|| format!("cannot create {}", config.display()));
        }
    };
    if let Err(error) = file.write_all(&bytes) {
        // Half an example would read as the administrator's own configuration next time.
        let _ = fs::remove_file(config);
        return Err(error).with_context(|| format!("cannot write {}", config.display()));
    }
    Ok(true)
}

/// Copies `from` to `to` with `mode`: a new file renamed into place, so that a program running
/// from the old one (or a library loaded from it) is not changed under it.
fn install(from: &Path, to: &Path, mode: u32) -> Result<()> {
    let bytes = fs::read(from).with_context(|| format!("cannot read {}", from.display()))?;
    write(to, &bytes, mode)
}

fn write(to: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = to.parent().expect("an installed file's directory");
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = to.file_name().expect("a file name").to_string_lossy();
    let temporary = dir.join(format!(".{name}.{}.new", std::process::id()));
    fs::write(&temporary, bytes)
        .and_then(|()| fs::set_permissions(&temporary, fs::Permissions::from_mode(mode)))
        .and_then(|()| fs::rename(&temporary, to))
        .with_context(|| format!("cannot install {}", to.display()))
}

/// Makes `link` point to `target` (a name in the same directory), replacing what was there.
fn link(target: &str, link: &Path) -> Result<()> {
    let temporary = link.with_extension(format!("{}.new", std::process::id()));
    let _ = fs::remove_file(&temporary);
    symlink(target, &temporary)
        .and_then(|()| fs::rename(&temporary, link))
        .with_context(|| format!("cannot link {}", link.display()))
}
