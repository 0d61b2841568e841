//! What an analyzer needs to know about a traced process besides its calls, read from /proc
//! while it lives: its executable and command line, its cgroup, its threads' names, the
//! files it maps executable with their build-ids (so that caller addresses can be symbolized
//! after it is gone), and in a PID namespace of its own, its threads' ids there (which the
//! mutex owners it stores are). Each becomes a system event. /proc is another process's to change:
//! whatever cannot be read is left out, never guessed.

use std::{
    collections::{HashMap, HashSet},
    fs,
};

use object::{Object, read::File as ElfFile};
use tracer_model::event::{MAX_STRING, SystemEvent, SystemKind};

use crate::attach::{
    cgroups::ProcessCgroups,
    targets::{self, MappedFile},
};

/// Reads facts, remembering the build-id of each file (by device and inode) once read.
#[derive(Default)]
pub struct Facts {
    build_ids: HashMap<(String, u64), Vec<u8>>,
    /// The traced processes in PID namespaces of their own, with the threads whose ids there
    /// have been told.
    namespaced: HashMap<u32, HashSet<u32>>,
}

impl Facts {
    /// Process `pid` is traced from now (`time_ns`): its executable, command line, cgroup and
    /// mapped files.
    pub fn attached(&mut self, pid: u32, time_ns: i64) -> Vec<SystemEvent> {
        let event = |kind| SystemEvent::of_process(time_ns, pid, 0, kind);
        let mut events = Vec::new();
        let arguments = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline: Vec<String> = arguments
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let mut attach = event(SystemKind::ProcessAttach {
            exe: executable(pid),
            cmdline,
        });
        attach.truncated = arguments.len() > MAX_STRING;
        events.push(attach);
        if let Some(cgroups) = ProcessCgroups::of_process(pid) {
            events.push(event(SystemKind::ProcessCgroup {
                container: cgroups.container().unwrap_or_default().to_owned(),
                path: cgroups.path,
                systemd: cgroups.systemd,
            }));
        }
        events.extend(self.mappings(pid, time_ns));
        events.extend(self.namespace_ids(pid, time_ns));
        events
    }

    /// In a process in a PID namespace of its own, the id there of each of its threads not
    /// told yet: they hold locks that later records find held (by that id).
    fn namespace_ids(&mut self, pid: u32, time_ns: i64) -> Vec<SystemEvent> {
        let Some(main) = namespace_event(pid, pid, time_ns) else {
            return Vec::new();
        };
        let told = self.namespaced.entry(pid).or_default();
        told.insert(pid);
        let others = targets::threads_of(pid)
            .filter(|&lwpid| told.insert(lwpid))
            .filter_map(|lwpid| namespace_event(pid, lwpid, time_ns));
        std::iter::once(main).chain(others).collect()
    }

    /// A run of thread `lwpid`'s records is drawn (`time_ns`): its id in its process's PID
    /// namespace, if it has one of its own and the id was not told yet.
    pub fn thread_seen(&mut self, pid: u32, lwpid: u32, time_ns: i64) -> Option<SystemEvent> {
        let told = self.namespaced.get_mut(&pid)?;
        told.insert(lwpid)
            .then(|| namespace_event(pid, lwpid, time_ns))
            .flatten()
    }

    /// Process `pid` has exited: its threads' ids go with it.
    pub fn exited(&mut self, pid: u32) {
        self.namespaced.remove(&pid);
    }

    /// Process `pid` exec'd: its new executable and mapped files.
    pub fn exec(&mut self, pid: u32, time_ns: i64) -> Vec<SystemEvent> {
        let mut events = vec![exec_event(pid, time_ns)];
        events.extend(self.mappings(pid, time_ns));
        events
    }

    /// A snapshot of the files `pid` maps executable.
    fn mappings(&mut self, pid: u32, time_ns: i64) -> Vec<SystemEvent> {
        let files = targets::executable_mappings(pid).unwrap_or_default();
        files
            .into_iter()
            .map(|file| {
                let build_id = self
                    .build_ids
                    .entry(file.identity.clone())
                    .or_insert_with(|| build_id(&file))
                    .clone();
                let mapping = SystemKind::Mapping {
                    start: file.start,
                    end: file.end,
                    file_offset: file.file_offset,
                    build_id,
                    path: file.path,
                };
                SystemEvent::of_process(time_ns, pid, 0, mapping)
            })
            .collect()
    }
}

/// Process `pid` exec'd: what it runs now.
pub fn exec_event(pid: u32, time_ns: i64) -> SystemEvent {
    let exec = SystemKind::Exec {
        exe: executable(pid),
    };
    SystemEvent::of_process(time_ns, pid, 0, exec)
}

/// The name (comm) of thread `lwpid` of `pid` now, if it still exists.
pub fn comm(pid: u32, lwpid: u32) -> Option<String> {
    let name = fs::read_to_string(format!("/proc/{pid}/task/{lwpid}/comm")).ok()?;
    Some(name.trim_end_matches('\n').to_owned())
}

/// Thread `lwpid` of `pid`'s id in the innermost PID namespace of its process, where that is
/// not the tracer's: its `NSpid` lists one id per namespace, the tracer's first.
fn namespace_id(pid: u32, lwpid: u32) -> Option<u32> {
    let path = format!("/proc/{pid}/task/{lwpid}/status");
    let ids: Vec<u32> = targets::status_field(&path, "NSpid")?
        .split_whitespace()
        .map(|id| id.parse().ok().filter(|&id| id != 0))
        .collect::<Option<_>>()?;
    match ids[..] {
        [_, .., own] => Some(own),
        _ => None,
    }
}

/// The facts of processes first seen, held until no record of the process stamped before the
/// earliest drawn so far can still come: they are placed just before that one. Records come
/// from one CPU's ring after another, so a process's first record drawn need not be its
/// first: another thread's earlier one may be in a ring read later. And its records are read
/// by its facts (a mutex's owner by the ids of its threads in its PID namespace).
#[derive(Default)]
pub struct HeldFacts(HashMap<u32, (u64, Vec<SystemEvent>)>);

impl HeldFacts {
    /// Holds `events`, the facts of process `pid`, whose first record drawn is stamped
    /// `ktime_ns`.
    pub fn hold(&mut self, pid: u32, ktime_ns: u64, events: Vec<SystemEvent>) {
        let (earliest, held) = self.0.entry(pid).or_insert((ktime_ns, Vec::new()));
        *earliest = (*earliest).min(ktime_ns);
        held.extend(events);
    }

    /// A record of process `pid` stamped `ktime_ns` is drawn. `told`, a fact that came with
    /// it, joins those held, if any; otherwise it is given back, to be placed with the record.
    pub fn drawn(
        &mut self,
        pid: u32,
        ktime_ns: u64,
        told: Option<SystemEvent>,
    ) -> Option<SystemEvent> {
        let Some((earliest, events)) = self.0.get_mut(&pid) else {
            return told;
        };
        *earliest = (*earliest).min(ktime_ns);
        events.extend(told);
        None
    }

    /// Hands `place` the facts that must be placed for a release of all that is stamped
    /// before `before`, each with the stamp it goes at (CLOCK_MONOTONIC), and `time_ns` made
    /// its time by `realtime_ns`. That stamp is a nanosecond before the process's first
    /// record's: the record came first, and items stamped alike go in the order they came.
    pub fn release(
        &mut self,
        before: u64,
        realtime_ns: impl Fn(u64) -> i64,
        mut place: impl FnMut(u64, SystemEvent),
    ) {
        self.0.retain(|_, (earliest, events)| {
            if *earliest >= before {
                return true;
            }
            let at = earliest.saturating_sub(1);
            for mut event in events.drain(..) {
                event.time_ns = realtime_ns(at);
                place(at, event);
            }
            false
        });
    }
}

/// The event that tells thread `lwpid` of `pid`'s id in its process's namespace, if it has one.
fn namespace_event(pid: u32, lwpid: u32, time_ns: i64) -> Option<SystemEvent> {
    let ns_lwpid = namespace_id(pid, lwpid)?;
    let kind = SystemKind::ThreadNamespaceId { ns_lwpid };
    Some(SystemEvent::of_process(time_ns, pid, lwpid, kind))
}

/// What process `pid` runs now (its /proc/PID/exe); empty if that cannot be read.
pub fn executable(pid: u32) -> String {
    fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The GNU build-id note of a mapped ELF file; empty if it has none or cannot be read.
fn build_id(file: &MappedFile) -> Vec<u8> {
    let Some(image) = targets::read_mapped(file) else {
        return Vec::new();
    };
    ElfFile::parse(image.as_slice())
        .ok()
        .and_then(|elf| elf.build_id().ok().flatten().map(<[u8]>::to_vec))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_facts_go_just_before_the_earliest_record_of_their_process() {
        let fact = |pid, lwpid| {
            SystemEvent::of_process(0, pid, lwpid, SystemKind::ThreadNamespaceId { ns_lwpid: 1 })
        };
        let mut held = HeldFacts::default();
        held.hold(7, 200, vec![fact(7, 7)]);
        // An earlier record of another of its threads, from a ring read later.
        assert_eq!(held.drawn(7, 150, None), None);
        assert_eq!(
            held.drawn(7, 300, Some(fact(7, 9))),
            None,
            "joins those held"
        );
        assert_eq!(held.drawn(8, 300, Some(fact(8, 8))), Some(fact(8, 8)));
        let mut placed = Vec::new();
        let realtime_ns = |ktime_ns| ktime_ns as i64 + 1000;
        held.release(150, realtime_ns, |at, event| placed.push((at, event)));
        assert!(
            placed.is_empty(),
            "a record stamped before 150 may still come"
        );
        held.release(151, realtime_ns, |at, event| placed.push((at, event)));
        let mut expected = [fact(7, 7), fact(7, 9)];
        for event in &mut expected {
            event.time_ns = 1149;
        }
        assert_eq!(placed, expected.map(|event| (149, event)));
        held.release(u64::MAX, realtime_ns, |at, event| placed.push((at, event)));
        assert_eq!(placed.len(), 2, "placed once");
    }

    #[test]
    fn reads_this_process_as_a_target() {
        let pid = std::process::id();
        let events = Facts::default().attached(pid, 5);
        let kinds: Vec<&SystemKind> = events.iter().map(|e| &e.kind).collect();
        let SystemKind::ProcessAttach { exe, cmdline } = kinds[0] else {
            panic!("{kinds:?}")
        };
        assert_eq!(exe, &std::env::current_exe().unwrap().to_string_lossy());
        assert!(!cmdline.is_empty());
        // The test binary and the C library at least, each with the build-id the linker gave.
        let mapped: Vec<(&str, usize)> = kinds
            .iter()
            .filter_map(|k| match k {
                SystemKind::Mapping { path, build_id, .. } => Some((path.as_str(), build_id.len())),
                _ => None,
            })
            .collect();
        assert!(
            mapped.iter().any(|(p, _)| p.contains("libc.so")),
            "{mapped:?}"
        );
        assert!(
            mapped
                .iter()
                .any(|(p, id)| p.contains("libc.so") && *id == 20),
            "{mapped:?}"
        );
        let name = comm(pid, pid).unwrap();
        assert!(!name.is_empty() && !name.ends_with('\n'), "{name:?}");
    }
}
