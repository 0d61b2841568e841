//! The ids that threads of a process in a PID namespace of its own have there. What the
//! tracer reads from a target's memory is in the target's namespace (glibc's mutex owner is
//! the `gettid()` of the thread that took the lock); the records' pid and lwpid are the
//! host's. The tracer tells each such thread's id in a `thrtrace_thread_ns_id` event.

use foldhash::{HashMap, HashSet};

/// What the `thrtrace_thread_ns_id` events told.
#[derive(Debug, Default)]
pub(super) struct NamespaceIds {
    /// By process and id in its namespace, the thread's host id.
    hosts: HashMap<(u32, u32), u32>,
    /// By host id, the process and the id in its namespace.
    own: HashMap<u32, (u32, u32)>,
    /// The processes in a PID namespace of their own.
    processes: HashSet<u32>,
}

impl NamespaceIds {
    /// Thread `lwpid` of process `pid` is `id` in its process's namespace.
    pub(super) fn learn(&mut self, pid: u32, lwpid: u32, id: u32) {
        if id == 0 {
            return;
        }
        self.processes.insert(pid);
        self.own.insert(lwpid, (pid, id));
        self.hosts.insert((pid, id), lwpid);
    }

    /// The host's id of the thread that process `pid` reads as `id` (0: none): `id` itself
    /// where the process is in the host's namespace; none where it is not and no thread of
    /// it was told to have that id (yet: a thread's id is told as it is first seen).
    pub(super) fn host(&self, pid: u32, id: u32) -> Option<u32> {
        match (id, self.processes.contains(&pid)) {
            (0, _) => None,
            (id, false) => Some(id),
            (id, true) => self.hosts.get(&(pid, id)).copied(),
        }
    }

    /// Thread `lwpid` of `pid`'s id in its process's namespace, where it has one of its own.
    pub(super) fn own(&self, pid: u32, lwpid: u32) -> Option<u32> {
        self.own
            .get(&lwpid)
            .filter(|&&(of, _)| of == pid)
            .map(|&(_, id)| id)
    }

    /// Process `pid` has exited: a process that takes its pid next is another.
    pub(super) fn process_exited(&mut self, pid: u32) {
        if self.processes.remove(&pid) {
            self.hosts.retain(|&(of, _), _| of != pid);
        }
    }

    /// Keeps what was told of the threads `alive` says still run.
    pub(super) fn retain(&mut self, mut alive: impl FnMut(u32, u32) -> bool) {
        self.own.retain(|&lwpid, &mut (pid, _)| alive(pid, lwpid));
        let own = &self.own;
        self.hosts.retain(|_, lwpid| own.contains_key(lwpid));
        // Only ever fewer: a process that exited stays out, though its threads' labels stay.
        let told: HashSet<u32> = self.own.values().map(|&(pid, _)| pid).collect();
        self.processes.retain(|pid| told.contains(pid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_read_in_a_namespace_is_the_host_thread_told_to_have_it() {
        let mut ids = NamespaceIds::default();
        assert_eq!(ids.host(500, 4), Some(4), "a host process reads host ids");
        ids.learn(900, 20931, 4);
        assert_eq!(ids.host(900, 4), Some(20931));
        assert_eq!(ids.host(900, 5), None, "no thread was told to be 5");
        assert_eq!(ids.host(900, 0), None);
        assert_eq!(ids.host(500, 4), Some(4), "another process's 4 is its own");
        assert_eq!(ids.own(900, 20931), Some(4));
        assert_eq!((ids.own(901, 20931), ids.own(900, 4)), (None, None));
        ids.process_exited(900);
        assert_eq!(
            ids.host(900, 4),
            Some(4),
            "a pid taken again is another process's"
        );
        assert_eq!(
            ids.own(900, 20931),
            Some(4),
            "the threads keep their labels"
        );
        ids.retain(|_, _| true);
        assert_eq!(
            ids.host(900, 4),
            Some(4),
            "keeping the labels brings no process back"
        );
        ids.learn(900, 20931, 4);
        ids.retain(|pid, _| pid != 900);
        assert_eq!((ids.host(900, 4), ids.own(900, 20931)), (Some(4), None));
    }
}
