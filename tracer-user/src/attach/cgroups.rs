//! Cgroups: the one each traced process is in (`/proc/PID/cgroup`), the container its runtime
//! named it after, and the cgroups `--cgroup` names, found in the cgroup2 file system so that
//! the BPF programs can tell a thread under one by the kernel's ids.

use std::{
    ffi::OsString,
    fs,
    io::Read as _,
    os::unix::{ffi::OsStringExt as _, fs::MetadataExt as _},
    path::{Path, PathBuf},
};

use thiserror::Error;
use tracer_common::{MAX_CGROUPS, SelectedCgroup};

/// The most of `/proc/PID/cgroup` read: a line per hierarchy, a few hundred bytes each.
const MOST_READ: u64 = 64 * 1024;

/// Where a process is, as `/proc/PID/cgroup` says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessCgroups {
    /// Its cgroup v2 path (the `0::` line), `/` for the root.
    pub path: String,
    /// Its path in the v1 `name=systemd` hierarchy of a hybrid host (where systemd keeps its
    /// units while controllers are v1), empty where there is none.
    pub systemd: String,
}

impl ProcessCgroups {
    /// Process `pid`'s, if it can be read. What the file holds is not trusted: its size is
    /// bounded, and a path that is not plain text is left out.
    pub fn of_process(pid: u32) -> Option<ProcessCgroups> {
        let file = fs::File::open(format!("/proc/{pid}/cgroup")).ok()?;
        let mut text = String::new();
        file.take(MOST_READ).read_to_string(&mut text).ok()?;
        let mut cgroups = ProcessCgroups::default();
        for line in text.lines() {
            let mut fields = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            if !path.starts_with('/') || path.chars().any(char::is_control) {
                continue;
            }
            match controllers {
                "" => path.clone_into(&mut cgroups.path),
                "name=systemd" => path.clone_into(&mut cgroups.systemd),
                _ => {}
            }
        }
        (!cgroups.path.is_empty() || !cgroups.systemd.is_empty()).then_some(cgroups)
    }

    /// The container its cgroups name, if a runtime made one of them (v2's first).
    pub fn container(&self) -> Option<&str> {
        container_id(&self.path).or_else(|| container_id(&self.systemd))
    }
}

/// The container a cgroup path belongs to, as container runtimes name its cgroup
/// (`docker-<64 hex>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`,
/// `libpod-<id>.scope`, `/docker/<id>`, `/kubepods/…/<id>`): the id's first 12 characters, as
/// `docker ps` and `crictl ps` show them.
pub fn container_id(cgroup: &str) -> Option<&str> {
    cgroup.split('/').rev().find_map(|component| {
        let bytes = component.as_bytes();
        (0..bytes.len().saturating_sub(63)).find_map(|at| {
            let run = &bytes[at..at + 64];
            let boundary = |i: Option<&u8>| i.is_none_or(|c| !c.is_ascii_hexdigit());
            (run.iter().all(u8::is_ascii_hexdigit)
                && boundary(at.checked_sub(1).and_then(|i| bytes.get(i)))
                && boundary(bytes.get(at + 64)))
            .then(|| &component[at..at + 12])
        })
    })
}

/// A cgroup `--cgroup` named, found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selected {
    /// Its path as `/proc/PID/cgroup` shows it: `/system.slice/mariadb.service`.
    pub path: String,
    /// What the BPF programs compare a thread's ancestors with.
    pub cgroup: SelectedCgroup,
}

#[derive(Debug, Error)]
pub enum CgroupError {
    #[error(
        "--cgroup {0}: this host mounts no cgroup2 file system (cgroup v2), whose cgroups \
         --cgroup names: mount one, or trace by -p PID"
    )]
    NoHierarchy(String),
    #[error(
        "--cgroup {given}: no such cgroup in {}: give its path as /proc/PID/cgroup shows it \
         (/system.slice/NAME.service) or its directory",
        mount.display()
    )]
    NotFound { given: String, mount: PathBuf },
    #[error(
        "--cgroup {given}: this tracer sees the cgroups from inside a cgroup namespace (its \
         root is the host's {root}), where a cgroup's depth is not the kernel's: run it in the \
         host's cgroup namespace"
    )]
    Namespaced { given: String, root: String },
    #[error("--cgroup names at most {MAX_CGROUPS} cgroups: name one that holds them all")]
    TooMany,
}

/// The cgroups named by `given`, each a cgroup v2 path (`/system.slice/x.service`, as
/// `/proc/PID/cgroup` shows it) or its directory in the cgroup2 file system.
pub fn select(given: &[String]) -> Result<Vec<Selected>, CgroupError> {
    if given.len() > MAX_CGROUPS {
        return Err(CgroupError::TooMany);
    }
    let Some(first) = given.first() else {
        return Ok(Vec::new());
    };
    let (mount, root) = cgroup2_mount().ok_or_else(|| CgroupError::NoHierarchy(first.clone()))?;
    // The BPF programs count a cgroup's depth from the hierarchy's true root.
    if root != "/" {
        return Err(CgroupError::Namespaced {
            given: first.clone(),
            root,
        });
    }
    given.iter().map(|path| find(&mount, path)).collect()
}

/// `given` in the cgroup2 file system mounted at `mount`.
fn find(mount: &Path, given: &str) -> Result<Selected, CgroupError> {
    let not_found = || CgroupError::NotFound {
        given: given.to_owned(),
        mount: mount.to_owned(),
    };
    let relative = Path::new(given)
        .strip_prefix(mount)
        .unwrap_or(Path::new(given.trim_start_matches('/')));
    // A path that climbs out of the hierarchy is none of its cgroups.
    let components: Vec<&str> = relative
        .iter()
        .map(|c| c.to_str().filter(|&c| c != ".." && c != "."))
        .collect::<Option<_>>()
        .ok_or_else(not_found)?;
    let directory = fs::metadata(mount.join(relative)).map_err(|_| not_found())?;
    // A directory of another file system mounted below (a v1 hierarchy) is no v2 cgroup.
    let hierarchy = fs::metadata(mount).map_err(|_| not_found())?;
    if !directory.is_dir() || directory.dev() != hierarchy.dev() {
        return Err(not_found());
    }
    Ok(Selected {
        path: format!("/{}", components.join("/")),
        cgroup: SelectedCgroup {
            // The kernel's id of a cgroup is its directory's inode number.
            id: directory.ino(),
            level: components.len() as u32,
            padding: 0,
        },
    })
}

/// Where the cgroup2 file system is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on
/// a hybrid host), and which of its cgroups is the mount's root (`/`, but in a cgroup
/// namespace), as this process's mounts say.
fn cgroup2_mount() -> Option<(PathBuf, String)> {
    let mounts = fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|line| {
        // `ID PARENT MAJ:MIN ROOT MOUNT OPTIONS [TAGS…] - TYPE SOURCE SUPER_OPTIONS`
        let (before, after) = line.split_once(" - ")?;
        if after.split(' ').next()? != "cgroup2" {
            return None;
        }
        let mut fields = before.split(' ').skip(3);
        let root = unescape(fields.next()?)?;
        let mount = unescape(fields.next()?)?;
        Some((mount, root.to_string_lossy().into_owned()))
    })
}

/// A mount point as mountinfo writes it: space, tab, newline and backslash as octal escapes.
fn unescape(field: &str) -> Option<PathBuf> {
    let mut bytes = Vec::with_capacity(field.len());
    let mut rest = field.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if let (b'\\', [a, b, c, ..]) = (byte, tail) {
            let octal = std::str::from_utf8(&[*a, *b, *c]).ok()?.to_owned();
            bytes.push(u8::from_str_radix(&octal, 8).ok()?);
            rest = &tail[3..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    Some(PathBuf::from(OsString::from_vec(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_are_found_in_the_cgroups_their_runtimes_make() {
        let id = "3f2a9c0d1e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f";
        for path in [
            format!("/system.slice/docker-{id}.scope"),
            format!("/kubepods.slice/kubepods-burstable.slice/cri-containerd-{id}.scope"),
            format!("/kubepods.slice/kubepods-besteffort.slice/crio-{id}.scope"),
            format!("/machine.slice/libpod-{id}.scope/container"),
            format!("/docker/{id}"),
        ] {
            assert_eq!(container_id(&path), Some("3f2a9c0d1e8b"), "{path}");
        }
        assert_eq!(
            container_id("/user.slice/user-1000.slice/session-2.scope"),
            None
        );
        assert_eq!(container_id(&format!("/x/{id}0")), None);
    }

    #[test]
    fn this_process_is_in_a_cgroup() {
        let cgroups = ProcessCgroups::of_process(std::process::id()).unwrap();
        assert!(
            cgroups.path.starts_with('/') || cgroups.systemd.starts_with('/'),
            "{cgroups:?}"
        );
    }

    #[test]
    fn a_cgroup_is_found_by_its_path_or_its_directory() {
        let Some((mount, _)) = cgroup2_mount() else {
            return;
        };
        let root = find(&mount, "/").unwrap();
        assert_eq!((root.path.as_str(), root.cgroup.level), ("/", 0));
        let by_directory = find(&mount, &mount.to_string_lossy()).unwrap();
        assert_eq!(by_directory, root);
        assert!(matches!(
            find(&mount, "/no/such/cgroup"),
            Err(CgroupError::NotFound { .. })
        ));
        assert!(matches!(
            find(&mount, "/.."),
            Err(CgroupError::NotFound { .. })
        ));
    }

    #[test]
    fn a_mount_point_with_a_space_reads_back() {
        assert_eq!(unescape("/mnt/a\\040b").unwrap(), PathBuf::from("/mnt/a b"));
    }
}
