//! `cargo xtask install [--prefix DIR]`: installs thrtrace-bpf as a Linux tool is installed,
//! under DIR (default /usr/local): the binary, its manual pages and shell completions (made by
//! the binary from its own command-line definition), and the C analyzer library with its
//! header and pkg-config file.

use std::{
    fs,
    os::unix::fs::{PermissionsExt, symlink},
    path::Path,
};

use anyhow::{Context, Result};

use crate::{
    setup,
    shell::{build_tracer, command, is_root, output, run, workspace_root},
};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
const MAJOR: &str = env!("CARGO_PKG_VERSION_MAJOR");

pub fn run_install(prefix: &Path) -> Result<()> {
    setup::ensure_prerequisites()?;
    let tracer = build_tracer()?;
    let library = tracer.with_file_name("libposixtrace.so");
    lay_out(&tracer, &library, prefix, &prefix.display().to_string())?;
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
         include/trace.h, lib/pkgconfig/posixtrace.pc, man pages, bash/zsh/fish completions",
        prefix.display()
    );
    Ok(())
}

/// Lays out what is installed under `dir`: `tracer` in bin/, `library` (libposixtrace.so) with
/// its version links, trace.h and posixtrace.pc (whose prefix is `prefix`, as pkg-config
/// reads it) in lib/ and include/, and the man pages and shell completions that `tracer`
/// makes from its own command-line definition in share/.
pub fn lay_out(tracer: &Path, library: &Path, dir: &Path, prefix: &str) -> Result<()> {
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
    run(command(tracer).args(["generate", "man"]).arg(&pages))?;
    for page in fs::read_dir(&pages)? {
        let page = page?.path();
        let name = page.file_name().expect("a page's name");
        install(&page, &dir.join("share/man/man1").join(name), 0o644)?;
    }
    let completions = [
        ("bash", "share/bash-completion/completions/thrtrace-bpf"),
        ("zsh", "share/zsh/site-functions/_thrtrace-bpf"),
        ("fish", "share/fish/vendor_completions.d/thrtrace-bpf.fish"),
    ];
    for (shell, path) in completions {
        let script = output(command(tracer).args(["generate", "completions", shell]))?.stdout;
        write(&dir.join(path), &script, 0o644)?;
    }
    Ok(())
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
