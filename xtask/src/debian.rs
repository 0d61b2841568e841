//! Packages of other Debian releases, fetched through an apt configuration of our own under
//! `target/apt/`: the machine's sources, package lists and installed state are left alone. From
//! the Debian archive apt already uses. Each suite's lists are read once for an architecture,
//! whatever needs its packages (the tests' C libraries, the kernels, the guests' userland).

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    sync::{Mutex, MutexGuard},
};

use anyhow::{Context, Result, anyhow};

use crate::{
    arch::Arch,
    shell::{command, output, run, workspace_root},
};

/// Held while apt reads or downloads: the kernels are fetched beside the guests' builds, which
/// fetch packages too, and two apts in one suite's directory would overwrite each other's
/// files.
static APT: Mutex<()> = Mutex::new(());

fn apt_turn() -> MutexGuard<'static, ()> {
    APT.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One Debian suite (with its security updates, for a stable release) for one architecture.
pub struct Suite {
    name: String,
    dir: PathBuf,
    arch: Arch,
}

impl Suite {
    /// `name` (`bookworm`, `trixie-backports`…) for `arch`; its lists are read into
    /// `target/apt/NAME-ARCH` unless there.
    pub fn open(name: &str, arch: Arch) -> Result<Self> {
        let _turn = apt_turn();
        let dir = &workspace_root()
            .join("target/apt")
            .join(format!("{name}-{}", arch.debian()));
        for sub in ["lists/partial", "cache/archives/partial", "debs"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let mirror = debian_mirror()?;
        let mut sources = format!(
            "Types: deb\nURIs: {mirror}\nSuites: {name}\nComponents: main\n\
             Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        );
        // A stable release's kernel and glibc updates come through its security suite.
        if !name.contains('-') {
            sources += &format!(
                "\nTypes: deb\nURIs: {mirror}-security\nSuites: {name}-security\n\
                 Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
            );
        }
        fs::write(dir.join("suite.sources"), sources)?;
        let suite = Suite {
            name: name.to_owned(),
            dir: dir.to_owned(),
            arch,
        };
        let has_lists = fs::read_dir(dir.join("lists"))?
            .filter_map(Result::ok)
            .any(|entry| entry.file_name().to_string_lossy().ends_with("_Packages"));
        if !has_lists {
            run(suite.apt("apt-get").arg("update"))
                .with_context(|| format!("cannot read the package lists of Debian's {name}"))?;
        }
        Ok(suite)
    }

    /// An apt command (`apt-get`, `apt-cache`) reading this suite only.
    fn apt(&self, program: &str) -> Command {
        let options = [
            "Dir::Etc::SourceList=/dev/null".to_owned(),
            format!("Dir::Etc::SourceParts={}", self.dir.display()),
            format!("Dir::State::Lists={}", self.dir.join("lists").display()),
            format!("Dir::Cache={}", self.dir.join("cache").display()),
            "Dir::State::Status=/dev/null".to_owned(),
            format!("APT::Architecture={}", self.arch.debian()),
            format!("APT::Architectures={}", self.arch.debian()),
            "Debug::NoLocking=1".to_owned(),
            // Downloads into our own directory, which apt's sandbox user may not write.
            "APT::Sandbox::User=root".to_owned(),
        ];
        let mut apt = command(program);
        for option in &options {
            apt.args(["-o", option]);
        }
        apt.arg("-qq").current_dir(self.dir.join("debs"));
        apt
    }

    /// What package `package` depends on whose name starts with `prefix` (the first such).
    pub fn dependency(&self, package: &str, prefix: &str) -> Result<String> {
        let _turn = apt_turn();
        let depends = output(self.apt("apt-cache").args(["depends", package]))?;
        String::from_utf8_lossy(&depends.stdout)
            .lines()
            .filter_map(|line| line.trim().strip_prefix("Depends: "))
            .find(|name| name.starts_with(prefix))
            .map(str::to_owned)
            .ok_or_else(|| {
                anyhow!(
                    "{package} of Debian's {} depends on no {prefix}*",
                    self.name
                )
            })
    }

    /// Downloads `packages` and unpacks them all into `root`.
    pub fn unpack(&self, packages: &[&str], root: &Path) -> Result<()> {
        let _turn = apt_turn();
        let debs = self.dir.join("debs");
        for old in fs::read_dir(&debs)? {
            fs::remove_file(old?.path())?;
        }
        run(self.apt("apt-get").arg("download").args(packages)).with_context(|| {
            format!(
                "cannot download {} from Debian's {}",
                packages.join(" "),
                self.name
            )
        })?;
        fs::create_dir_all(root)?;
        for deb in fs::read_dir(&debs)? {
            run(command("dpkg-deb").arg("-x").arg(deb?.path()).arg(root))?;
        }
        Ok(())
    }
}

/// The URI of the Debian archive in apt's own sources.
fn debian_mirror() -> Result<String> {
    let deb822 = fs::read_to_string("/etc/apt/sources.list.d/debian.sources").unwrap_or_default();
    let one_line = fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    deb822
        .lines()
        .find_map(|line| line.strip_prefix("URIs:"))
        .and_then(|uris| uris.split_whitespace().next())
        .or_else(|| {
            one_line
                .lines()
                .find_map(|line| line.strip_prefix("deb "))
                .and_then(|rest| rest.split_whitespace().find(|w| w.contains("://")))
        })
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no Debian archive in apt's sources"))
}
