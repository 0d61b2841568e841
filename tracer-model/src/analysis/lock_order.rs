//! Lock order: the graph of "held A while acquiring B" of each process, across its threads, and
//! its cycles, the deadlocks that have not happened yet (as the kernel's lockdep and helgrind
//! find them). `Analysis` feeds it each outermost acquisition and each last release.
//!
//! What makes an edge, and which cycles are potential deadlocks:
//! - An acquisition that can wait without end (a lock, read or write lock, spin lock, and a
//!   condvar wait taking its mutex back) makes an edge from each other lock its thread holds.
//!   A trylock makes none, as it cannot wait and so cannot close a cycle, nor does a timed
//!   lock, which gives up at its deadline; the lock either took is held like any other, so
//!   what its thread then acquires is ordered after it. A recursive
//!   re-lock is no acquisition: no edge from a lock to itself.
//! - Read sides: two read holds never exclude each other (glibc's rwlocks prefer readers by
//!   default: a reader never waits for a reader), so a cycle is one only if, at each of its
//!   locks, the acquisition that would wait and the hold it would wait for are not both reads.
//! - A gate: a lock held exclusively at every acquisition that made an edge of the cycle,
//!   the same lock for all of them, lets only one thread into the cycle at a time: such a
//!   cycle cannot deadlock and is not reported (until an acquisition without the gate is seen).
//! - Threads are not compared: one thread that took A then B and later B then A is reported
//!   too (it deadlocks as soon as two threads run that code), as lockdep and helgrind do.
//!
//! Each edge keeps its first witness; each cycle is reported once, when the edge that closes it
//! (or the acquisition that takes its gate away) is seen.

use foldhash::{HashMap, HashSet};
use serde::Serialize;

use super::LockKind;

/// Edges kept at most (all processes): past it, no new edge is made and `full` says so.
pub const MAX_EDGES: usize = 1 << 20;

/// Locks in one cycle at most: longer cycles are not searched for.
const MAX_CYCLE: usize = 8;

/// Steps one search takes at most, so that a dense graph cannot stall the tracer.
const SEARCH_BUDGET: u32 = 10_000;

/// A lock as a thread took it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Acquisition {
    /// The lock's address in its process.
    pub lock: u64,
    /// What it is.
    pub kind: LockKind,
    /// Taken for writing or alone; false for a read lock.
    pub exclusive: bool,
    /// Where it was taken (0: unknown).
    pub caller: u64,
}

/// "Held `held` while acquiring `acquired`", as first seen.
#[derive(Clone, Debug, Serialize)]
pub struct OrderEdge {
    /// The process.
    pub pid: u32,
    /// The thread that first did it.
    pub lwpid: u32,
    /// The lock held, and where it was taken.
    pub held: Acquisition,
    /// The lock acquired while holding it, and where.
    pub acquired: Acquisition,
    /// When (CLOCK_REALTIME ns) `acquired` was taken.
    pub time_ns: i64,
    /// Locks held exclusively at every acquisition that made this edge (besides its own two).
    #[serde(skip)]
    gates: Vec<u64>,
}

/// A cycle of edges, each acquiring the lock the next one holds, the last the first's: a
/// potential deadlock. Edges in cycle order, the earliest seen first.
#[derive(Clone, Debug, Serialize)]
pub struct Inversion {
    /// The process.
    pub pid: u32,
    /// The orders that contradict each other.
    pub edges: Vec<OrderEdge>,
}

/// The graph and what it found.
#[derive(Default)]
pub struct LockOrder {
    /// Each thread's locks, in the order taken: by (pid, lwpid).
    held: HashMap<(u32, u32), Vec<Acquisition>>,
    /// By (pid, held lock, acquired lock): one edge per pair of modes.
    edges: HashMap<(u32, u64, u64), Vec<OrderEdge>>,
    /// By (pid, lock): the locks acquired while holding it.
    successors: HashMap<(u32, u64), Vec<u64>>,
    edge_count: usize,
    /// `MAX_EDGES` was reached: edges seen after it were not kept.
    pub full: bool,
    found: Vec<Inversion>,
    /// The found cycles' locks, so each is found once.
    reported: HashSet<(u32, Vec<u64>)>,
    /// How many of `found` `new_inversions` has handed out.
    handed_out: usize,
}

impl LockOrder {
    /// Thread `lwpid` of `pid` took `taken` (its outermost hold); `waits`: the call could wait
    /// for it without end (not a trylock or a timed lock).
    pub fn acquired(&mut self, pid: u32, lwpid: u32, taken: Acquisition, waits: bool, now: i64) {
        let held = self.held.entry((pid, lwpid)).or_default();
        // Most acquisitions hold nothing else: one lookup, nothing to witness.
        if !waits || held.iter().all(|h| h.lock == taken.lock) {
            held.push(taken);
            return;
        }
        // Witnessing needs the whole graph: the list leaves the map meanwhile.
        let mut held = std::mem::take(held);
        for from in held.iter().filter(|h| h.lock != taken.lock) {
            self.witness(pid, lwpid, *from, taken, &held, now);
        }
        held.push(taken);
        self.held.insert((pid, lwpid), held);
    }

    /// Thread `lwpid` of `pid` let `lock` go (its last hold).
    pub fn released(&mut self, pid: u32, lwpid: u32, lock: u64) {
        if let Some(held) = self.held.get_mut(&(pid, lwpid))
            && let Some(at) = held.iter().rposition(|h| h.lock == lock)
        {
            held.remove(at);
        }
    }

    /// Process `pid` has exited: its threads hold nothing, and its locks are gone.
    pub fn process_exited(&mut self, pid: u32) {
        self.held.retain(|&(p, _), _| p != pid);
        let before = self.edges.len();
        self.edges.retain(|&(p, _, _), _| p != pid);
        self.successors.retain(|&(p, _), _| p != pid);
        if self.edges.len() != before {
            self.edge_count = self.edges.values().map(Vec::len).sum();
        }
    }

    /// Every cycle found, in the order found.
    pub fn inversions(&self) -> &[Inversion] {
        &self.found
    }

    /// The cycles found since the last call.
    pub fn new_inversions(&mut self) -> &[Inversion] {
        let from = self.handed_out;
        self.handed_out = self.found.len();
        &self.found[from..]
    }

    /// One acquisition of `to` while holding `from` (among all of `held`): a new edge, or a
    /// known one whose gates this acquisition narrows; either way, a cycle it closes is
    /// looked for. A known edge with no gates left, the common case, costs one lookup.
    fn witness(
        &mut self,
        pid: u32,
        lwpid: u32,
        from: Acquisition,
        to: Acquisition,
        held: &[Acquisition],
        now: i64,
    ) {
        // The other locks held exclusively now: the gates this acquisition keeps.
        let gates = || {
            held.iter()
                .filter(move |h| h.exclusive && h.lock != from.lock && h.lock != to.lock)
                .map(|h| h.lock)
        };
        let key = (pid, from.lock, to.lock);
        let modes = (from.exclusive, to.exclusive);
        let known = self.edges.get_mut(&key).and_then(|variants| {
            variants
                .iter_mut()
                .find(|e| (e.held.exclusive, e.acquired.exclusive) == modes)
        });
        let edge = if let Some(edge) = known {
            if edge.gates.is_empty() {
                return;
            }
            let before = edge.gates.len();
            edge.gates.retain(|g| gates().any(|gate| gate == *g));
            if edge.gates.len() == before {
                return;
            }
            edge.clone()
        } else {
            if self.edge_count >= MAX_EDGES {
                self.full = true;
                return;
            }
            let edge = OrderEdge {
                pid,
                lwpid,
                held: from,
                acquired: to,
                time_ns: now,
                gates: gates().collect(),
            };
            let variants = self.edges.entry(key).or_default();
            if variants.is_empty() {
                self.successors
                    .entry((pid, from.lock))
                    .or_default()
                    .push(to.lock);
            }
            variants.push(edge.clone());
            self.edge_count += 1;
            edge
        };
        self.find_cycles(&edge);
    }

    /// The cycles through `first`: the paths back from the lock it acquires to the lock it
    /// holds, along which every lock can be waited for.
    fn find_cycles(&mut self, first: &OrderEdge) {
        let mut search = Search {
            graph: self,
            pid: first.pid,
            target: first.held.lock,
            closes_exclusive: first.held.exclusive,
            visited: vec![first.held.lock, first.acquired.lock],
            path: vec![first.clone()],
            budget: SEARCH_BUDGET,
            cycles: Vec::new(),
        };
        search.from(first.acquired.lock, first.acquired.exclusive);
        for mut cycle in search.cycles {
            let gated = cycle[0]
                .gates
                .iter()
                .any(|gate| cycle.iter().all(|edge| edge.gates.contains(gate)));
            if gated {
                continue;
            }
            let mut locks: Vec<u64> = cycle.iter().map(|edge| edge.held.lock).collect();
            locks.sort_unstable();
            if !self.reported.insert((first.pid, locks)) {
                continue;
            }
            let earliest = (0..cycle.len())
                .min_by_key(|&i| cycle[i].time_ns)
                .unwrap_or(0);
            cycle.rotate_left(earliest);
            self.found.push(Inversion {
                pid: first.pid,
                edges: cycle,
            });
        }
    }
}

/// A depth-first search for the paths that close a cycle.
struct Search<'a> {
    graph: &'a LockOrder,
    pid: u32,
    /// The lock the first edge holds: where a cycle ends.
    target: u64,
    /// Whether the first edge holds it exclusively.
    closes_exclusive: bool,
    visited: Vec<u64>,
    path: Vec<OrderEdge>,
    budget: u32,
    cycles: Vec<Vec<OrderEdge>>,
}

impl Search<'_> {
    /// On from `lock`, which the path acquired exclusively or not.
    fn from(&mut self, lock: u64, came_exclusive: bool) {
        if self.budget == 0 || self.path.len() >= MAX_CYCLE {
            return;
        }
        self.budget -= 1;
        let graph = self.graph;
        let Some(successors) = graph.successors.get(&(self.pid, lock)) else {
            return;
        };
        for &next in successors {
            let Some(variants) = graph.edges.get(&(self.pid, lock, next)) else {
                continue;
            };
            // Someone waits at `lock` only if the two holds exclude each other.
            for edge in variants
                .iter()
                .filter(|e| came_exclusive || e.held.exclusive)
            {
                if next == self.target {
                    if edge.acquired.exclusive || self.closes_exclusive {
                        let mut cycle = self.path.clone();
                        cycle.push(edge.clone());
                        self.cycles.push(cycle);
                    }
                } else if !self.visited.contains(&next) {
                    self.visited.push(next);
                    self.path.push(edge.clone());
                    self.from(next, edge.acquired.exclusive);
                    self.path.pop();
                    self.visited.pop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PID: u32 = 7;
    const A: u64 = 0xa0;
    const B: u64 = 0xb0;
    const C: u64 = 0xc0;
    const G: u64 = 0x60;

    fn mutex(lock: u64) -> Acquisition {
        Acquisition {
            lock,
            kind: LockKind::Mutex,
            exclusive: true,
            caller: lock + 1,
        }
    }

    fn read(lock: u64) -> Acquisition {
        Acquisition {
            kind: LockKind::Rwlock,
            exclusive: false,
            ..mutex(lock)
        }
    }

    /// Thread `lwpid` takes `locks` in order (each waiting), then lets them go.
    fn nest(order: &mut LockOrder, lwpid: u32, locks: &[Acquisition], at: i64) {
        for (n, lock) in locks.iter().enumerate() {
            order.acquired(PID, lwpid, *lock, true, at + n as i64);
        }
        for lock in locks.iter().rev() {
            order.released(PID, lwpid, lock.lock);
        }
    }

    fn pairs(inversion: &Inversion) -> Vec<(u64, u64, u32)> {
        inversion
            .edges
            .iter()
            .map(|e| (e.held.lock, e.acquired.lock, e.lwpid))
            .collect()
    }

    #[test]
    fn ab_then_ba_is_one_inversion_with_both_witnesses() {
        let mut order = LockOrder::default();
        nest(&mut order, 1, &[mutex(A), mutex(B)], 10);
        assert!(order.inversions().is_empty());
        nest(&mut order, 2, &[mutex(B), mutex(A)], 20);
        assert_eq!(order.inversions().len(), 1);
        assert_eq!(pairs(&order.inversions()[0]), [(A, B, 1), (B, A, 2)]);
        let first = &order.inversions()[0].edges[0];
        assert_eq!((first.held.caller, first.acquired.caller), (A + 1, B + 1));
        assert_eq!(first.time_ns, 11);
        // Said once, however often the orders are taken again.
        nest(&mut order, 1, &[mutex(A), mutex(B)], 30);
        nest(&mut order, 2, &[mutex(B), mutex(A)], 40);
        assert_eq!(order.inversions().len(), 1);
        assert_eq!(order.new_inversions().len(), 1);
        assert!(order.new_inversions().is_empty());
    }

    #[test]
    fn three_locks_in_a_ring_are_one_cycle_of_three() {
        let mut order = LockOrder::default();
        nest(&mut order, 1, &[mutex(A), mutex(B)], 10);
        nest(&mut order, 2, &[mutex(B), mutex(C)], 20);
        assert!(order.inversions().is_empty());
        nest(&mut order, 3, &[mutex(C), mutex(A)], 30);
        assert_eq!(order.inversions().len(), 1);
        assert_eq!(
            pairs(&order.inversions()[0]),
            [(A, B, 1), (B, C, 2), (C, A, 3)]
        );
    }

    #[test]
    fn a_consistent_order_a_trylock_and_a_relock_make_no_cycle() {
        let mut order = LockOrder::default();
        nest(&mut order, 1, &[mutex(A), mutex(B), mutex(C)], 10);
        nest(&mut order, 2, &[mutex(A), mutex(C)], 20);
        nest(&mut order, 3, &[mutex(B), mutex(C)], 30);
        // B held, A taken by trylock: no B -> A edge.
        order.acquired(PID, 4, mutex(B), true, 40);
        order.acquired(PID, 4, mutex(A), false, 41);
        assert!(order.inversions().is_empty());
        assert!(!order.edges.contains_key(&(PID, B, A)));
        // But what is held after a trylock orders what follows: A (tried) then C is A -> C.
        order.acquired(PID, 4, mutex(C), true, 42);
        assert_eq!(order.edges[&(PID, A, C)].len(), 1);
        assert!(order.edges.keys().all(|&(_, from, to)| from != to));
    }

    #[test]
    fn a_gate_held_around_both_orders_hides_the_cycle_until_one_order_goes_without() {
        let mut order = LockOrder::default();
        nest(&mut order, 1, &[mutex(G), mutex(A), mutex(B)], 10);
        nest(&mut order, 2, &[mutex(G), mutex(B), mutex(A)], 20);
        assert!(order.inversions().is_empty());
        nest(&mut order, 2, &[mutex(B), mutex(A)], 30);
        assert_eq!(order.inversions().len(), 1);
        assert_eq!(pairs(&order.inversions()[0]), [(A, B, 1), (B, A, 2)]);
    }

    #[test]
    fn read_holds_on_both_sides_cannot_deadlock_but_a_writer_can() {
        let mut order = LockOrder::default();
        nest(&mut order, 1, &[read(A), read(B)], 10);
        nest(&mut order, 2, &[read(B), read(A)], 20);
        assert!(order.inversions().is_empty());
        // A writer of B while holding A waits for thread 2's read hold of B.
        let write_b = Acquisition {
            exclusive: true,
            ..read(B)
        };
        nest(&mut order, 3, &[read(A), write_b], 30);
        assert!(
            order.inversions().is_empty(),
            "A is still read on both sides"
        );
        nest(&mut order, 4, &[mutex(B), mutex(A)], 40);
        assert_eq!(order.inversions().len(), 1);
    }

    #[test]
    fn an_exited_process_leaves_no_edges() {
        let mut order = LockOrder::default();
        nest(&mut order, 1, &[mutex(A), mutex(B)], 10);
        order.process_exited(PID);
        nest(&mut order, 2, &[mutex(B), mutex(A)], 20);
        assert!(order.inversions().is_empty());
        assert_eq!(order.edge_count, 1);
    }
}
