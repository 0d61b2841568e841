//! What records mean for locks and threads: who acquired what, who waited how long, who held
//! it and for how long, who is blocked on whom. One engine for the offline report (fed from a
//! log or tr files) and for the tracer's live deadlock detection (fed the records it writes,
//! with its statistics off).
//!
//! A record's role comes from its event (the event table's rows); its fields are read through
//! the event's fields (`Field::Rval`, `Field::Block`), never by position, so that the table
//! stays the one definition.

mod futex_pairs;
mod futex_use;
mod lock_order;
mod namespace_ids;

use std::{collections::BTreeMap, sync::OnceLock};

use foldhash::{HashMap, HashMapExt, HashSet};

use serde::{Deserialize, Serialize};
use tracer_common::{Access, Blocking, CallRole, Category, EVENTS, EventDef, Field, Which};

use crate::{
    TraceRecord,
    event::{SystemEvent, SystemKind},
    stack::LeftOut,
};
use futex_pairs::{FutexPairs, FutexWait, FutexWake};
use futex_use::FutexUse;
pub use lock_order::{Acquisition, Inversion, LockOrder, MAX_EDGES, OrderEdge};
use namespace_ids::NamespaceIds;

/// A kind of lock, or of object a thread waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LockKind {
    /// A non-recursive mutex.
    Mutex,
    /// A recursive mutex.
    Rmutex,
    /// A read-write lock.
    Rwlock,
    /// A spin lock.
    Spin,
    /// A semaphore.
    Sema,
    /// A futex word a program waits on through the futex syscall itself, outside pthread
    /// calls (its own locks, Rust's `std::sync`, glibc's internal locks), used as a lock.
    Futex,
    /// A futex word used as an event: waited on for other threads' signals.
    FutexEvent,
    /// A condition variable.
    Cond,
    /// A barrier.
    Barrier,
    /// A thread, as its joiners wait for its end (by its `pthread_t`).
    Join,
}

impl LockKind {
    /// Every kind: the locks first, as reports list them.
    pub const ALL: [LockKind; 10] = [
        LockKind::Mutex,
        LockKind::Rmutex,
        LockKind::Rwlock,
        LockKind::Spin,
        LockKind::Sema,
        LockKind::Futex,
        LockKind::FutexEvent,
        LockKind::Cond,
        LockKind::Barrier,
        LockKind::Join,
    ];

    /// How reports name it: `mutex`, `rmutex`, ...
    pub fn name(self) -> &'static str {
        // As the event category of its calls is named (`--events mutex`), but a join, whose
        // calls are the thread category's.
        match self {
            LockKind::Mutex => Category::Mutex.name(),
            LockKind::Rmutex => Category::Rmutex.name(),
            LockKind::Rwlock => Category::Rwlock.name(),
            LockKind::Spin => Category::Spin.name(),
            LockKind::Sema => Category::Sema.name(),
            LockKind::Futex => Category::Futex.name(),
            LockKind::FutexEvent => "futex event",
            LockKind::Cond => Category::Cond.name(),
            LockKind::Barrier => Category::Barrier.name(),
            LockKind::Join => "join",
        }
    }

    /// Whether a wait on it is a wait for a lock, which its holder (or, for a semaphore, the
    /// threads that have taken its units) keeps from the waiter: contention. The others are
    /// waits for work or an event (a condition, a futex word used as one, a barrier's last
    /// thread, a thread's end), which an idle thread makes by design.
    pub fn is_lock(self) -> bool {
        !matches!(
            self,
            LockKind::FutexEvent | LockKind::Cond | LockKind::Barrier | LockKind::Join
        )
    }

    /// Whether its records are futex calls, not pthread calls: a lock or an event, as its
    /// waits and wakes tell.
    pub fn is_futex_word(self) -> bool {
        matches!(self, LockKind::Futex | LockKind::FutexEvent)
    }

    /// Whether the trace says when it is held: a futex word's records are its waits and the
    /// wakes that end them, which say nothing of who holds it from when to when.
    pub fn holds_recorded(self) -> bool {
        !self.is_futex_word()
    }
}

/// What a thread is blocked in, for its time-blocked totals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    /// Waiting for a lock (mutex, rwlock, spin, futex).
    LockWait,
    /// Waiting on a condition variable.
    CondWait,
    /// Waiting for a thread to exit (`pthread_join`).
    Join,
    /// Waiting on a semaphore.
    SemWait,
    /// Waiting at a barrier.
    Barrier,
}

impl BlockKind {
    /// Every kind, in the order reports list them.
    pub const ALL: [BlockKind; 5] = [
        BlockKind::LockWait,
        BlockKind::CondWait,
        BlockKind::Join,
        BlockKind::SemWait,
        BlockKind::Barrier,
    ];

    /// How reports name it: `lock wait`, `cond wait`, ...
    pub fn name(self) -> &'static str {
        match self {
            BlockKind::LockWait => "lock wait",
            BlockKind::CondWait => "cond wait",
            BlockKind::Join => "join",
            BlockKind::SemWait => "sem wait",
            BlockKind::Barrier => "barrier",
        }
    }
}

/// What a call does, as far as the analysis goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Takes a lock; `exclusive` unless a read lock; `waits` unless a trylock or a timed lock:
    /// whether it can wait without end, and so close a cycle of waits.
    Acquire {
        kind: LockKind,
        exclusive: bool,
        waits: bool,
    },
    Release(LockKind),
    SemWait,
    SemPost,
    CondWait,
    CondSignal,
    Join,
    Barrier,
    /// A futex wait (one record, at its end): a contended acquisition of the word's lock.
    FutexWait,
    /// A futex wake: the release that ends waits on the word.
    FutexWake,
    Other,
}

fn kind_of(category: Category) -> Option<LockKind> {
    Some(match category {
        Category::Mutex => LockKind::Mutex,
        Category::Rmutex => LockKind::Rmutex,
        Category::Rwlock => LockKind::Rwlock,
        Category::Spin => LockKind::Spin,
        _ => return None,
    })
}

/// What a call does as the analysis reads it, from the event table's typed columns: a lock's
/// acquisition closes a cycle of waits only if it can wait without end (not a trylock, not a
/// timed lock).
fn role(event: &EventDef) -> Role {
    match (event.role, kind_of(event.category), event.category) {
        (CallRole::Release, Some(kind), _) => Role::Release(kind),
        (CallRole::Acquire(access, blocking), Some(kind), _) => Role::Acquire {
            kind,
            exclusive: access == Access::Exclusive,
            waits: blocking == Blocking::Unbounded,
        },
        (CallRole::Signal, _, Category::Sema) => Role::SemPost,
        (CallRole::Wait(_), _, Category::Sema) => Role::SemWait,
        (CallRole::Wait(_), _, Category::Cond) => Role::CondWait,
        (CallRole::Signal, _, Category::Cond) => Role::CondSignal,
        (CallRole::Wait(blocking), _, Category::Thread) if blocking.can_block() => Role::Join,
        (CallRole::Wait(_), _, Category::Barrier | Category::BarrierSpin) => Role::Barrier,
        (CallRole::Signal, _, Category::Futex) => Role::FutexWake,
        (CallRole::Wait(_), _, Category::Futex) => Role::FutexWait,
        _ => Role::Other,
    }
}

/// An event's row and role, by its codes: the row by the event table's index, the role from
/// a list made once in the table's order, so a record is looked up without searching the
/// table, matching names or hashing.
fn lookup(event1: u16, event2: u16) -> Option<(&'static EventDef, Role)> {
    static ROLES: OnceLock<Vec<Role>> = OnceLock::new();
    let row = EventDef::row(event1, event2)?;
    let roles = ROLES.get_or_init(|| EVENTS.iter().map(role).collect());
    Some((&EVENTS[row], roles[row]))
}

/// The value of `field` in `record`, if the record has that field.
fn field(record: &TraceRecord, event: &EventDef, field: Field) -> Option<i64> {
    record.field_in(event, field)
}

/// Durations: how many, their total and maximum, and a log2 histogram (bucket n: [2^n, 2^(n+1))
/// ns; bucket 0 also holds 0).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Durations {
    /// How many.
    pub count: u64,
    /// Their sum.
    pub total_ns: u64,
    /// The longest.
    pub max_ns: u64,
    /// Per log2 bucket, how many.
    #[serde(skip)]
    pub log2: Vec<u64>,
}

impl Durations {
    fn add(&mut self, ns: u64) {
        self.add_tallied(1, ns);
    }

    /// `count` more of `total_ns` in all, whose lengths one by one are not known: each at
    /// their mean, which is also the least the longest of them lasted.
    fn add_tallied(&mut self, count: u64, total_ns: u64) {
        let Some(mean) = total_ns.checked_div(count) else {
            return;
        };
        self.count += count;
        self.total_ns += total_ns;
        self.max_ns = self.max_ns.max(mean);
        let bucket = mean.max(1).ilog2() as usize;
        if self.log2.len() <= bucket {
            self.log2.resize(bucket + 1, 0);
        }
        self.log2[bucket] += count;
    }

    /// The mean (0 when there are none).
    pub fn average_ns(&self) -> u64 {
        self.total_ns.checked_div(self.count).unwrap_or(0)
    }
}

/// Waits shorter than `--min-wait`: how many, how long in all, and the bound.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ShortWaits {
    /// How many.
    pub count: u64,
    /// Their sum.
    pub total_ns: u64,
    /// Each lasted less than this.
    pub below_ns: u64,
}

/// A holder that a lock's contended acquisitions waited for.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OwnerStats {
    /// Acquisitions that found it holding the lock.
    pub count: u64,
    /// Nanoseconds they waited, in total.
    pub wait_total_ns: u64,
    /// Where it took the lock, the last time a wait began while it held it and its taking was
    /// recorded (0: not recorded, as an uncontended acquisition under `--contended`).
    pub taken_at: u64,
}

/// A call site's share of a lock's acquisitions and waits.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CallerStats {
    /// Acquisitions from this call site.
    pub count: u64,
    /// Nanoseconds its callers waited, in total.
    pub wait_total_ns: u64,
}

/// A call stack's share of a lock's contended waits: those it waited with, or those that the
/// release it made ended.
#[derive(Clone, Debug, Default)]
pub struct StackStats {
    /// Waits.
    pub count: u64,
    /// Nanoseconds they lasted, in total.
    pub wait_total_ns: u64,
    /// Of them, by the thread that waited (or released).
    pub threads: HashMap<u32, ThreadWaits>,
}

impl StackStats {
    /// `count` more waits by `lwpid`, `total_ns` in all.
    fn add(&mut self, lwpid: u32, count: u64, total_ns: u64) {
        self.count += count;
        self.wait_total_ns += total_ns;
        *self.threads.entry(lwpid).or_default() += ThreadWaits {
            count,
            wait_total_ns: total_ns,
        };
    }
}

/// One thread's share of a stack's waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadWaits {
    /// Waits.
    pub count: u64,
    /// Nanoseconds they lasted, in total.
    pub wait_total_ns: u64,
}

impl std::ops::AddAssign for ThreadWaits {
    fn add_assign(&mut self, more: ThreadWaits) {
        self.count += more.count;
        self.wait_total_ns += more.wait_total_ns;
    }
}

/// One lock (or semaphore, or condvar) of one process.
#[derive(Clone, Debug, Serialize)]
pub struct LockStats {
    /// The process whose memory the lock is in.
    pub pid: u32,
    /// Its address there.
    pub address: u64,
    /// What it is.
    pub kind: LockKind,
    /// Successful lock calls (waits, for a semaphore, condvar, barrier or thread joined).
    pub acquisitions: u64,
    /// Of those, the ones whose caller blocked or spun (for a semaphore: found it at 0).
    pub contended: u64,
    /// Outermost acquisitions by another thread than the one before.
    pub owner_changes: u64,
    /// Time from a lock call's entry to its return (for a semaphore or condvar: the wait).
    pub wait: Durations,
    /// Time from acquisition to release.
    pub hold: Durations,
    /// Signals and broadcasts (condvar), posts (semaphore).
    pub wakeups: u64,
    /// Of its contended waits, those shorter than `--min-wait`, tallied and not written: in
    /// `acquisitions`, `contended` and `wait`, with no stack or holder.
    pub short_waits: ShortWaits,
    /// By caller address (0: unknown, as in tr files).
    #[serde(skip)]
    pub callers: HashMap<u64, CallerStats>,
    /// The threads its contended acquisitions found holding it as they began to wait (the
    /// owner a lock's entry read, or in a full trace the holder the records name; for a futex
    /// word, the thread whose wake ended the wait), by thread id.
    #[serde(skip)]
    pub owners: HashMap<u32, OwnerStats>,
    /// Its contended waits by the call stack they waited with (`TraceRecord::stack`; 0:
    /// none recorded), but for those whose stack was left out (`left_out_waiting`).
    #[serde(skip)]
    pub waiting_stacks: HashMap<u32, StackStats>,
    /// Its contended waits whose stack was left out (the tracer was behind: the record came
    /// without it), by caller address (0: unknown).
    #[serde(skip)]
    pub left_out_waiting: HashMap<u64, StackStats>,
    /// Its short waits (`short_waits`), whose stacks were not recorded, by caller address (0:
    /// unknown).
    #[serde(skip)]
    pub short_waits_by_caller: HashMap<u64, StackStats>,
    /// Its contended waits by the call stack of the release (unlock, post) that ended them:
    /// the last release by another thread after the wait began. The time is the waits'. But
    /// for those whose release's stack was left out (`left_out_releasing`).
    #[serde(skip)]
    pub releasing_stacks: HashMap<u32, StackStats>,
    /// Its contended waits ended by a release whose stack was left out, by the release's
    /// caller address (0: unknown).
    #[serde(skip)]
    pub left_out_releasing: HashMap<u64, StackStats>,
    /// The stack its first contended wait waited with (0: none): where a lock that is no
    /// global variable is named from.
    #[serde(skip)]
    pub first_waiting_stack: u32,
    #[serde(skip)]
    last_owner: Option<u32>,
    /// For a futex word, who waited and who woke: whether it is a lock or an event.
    #[serde(skip)]
    futex_use: FutexUse,
}

impl LockStats {
    /// One more contended wait of `ns` by `lwpid`, charged to the stack it waited with.
    fn waited_with(&mut self, stack: StackOf, lwpid: u32, ns: u64) {
        match stack {
            StackOf::Recorded(id) => {
                if self.first_waiting_stack == 0 {
                    self.first_waiting_stack = id;
                }
                charge(&mut self.waiting_stacks, id, lwpid, ns);
            }
            StackOf::LeftOut { caller } => charge(&mut self.left_out_waiting, caller, lwpid, ns),
        }
    }

    /// One more contended wait of `ns`, ended by a release `lwpid` made with `stack`.
    fn released_by(&mut self, stack: StackOf, lwpid: u32, ns: u64) {
        match stack {
            StackOf::Recorded(id) => charge(&mut self.releasing_stacks, id, lwpid, ns),
            StackOf::LeftOut { caller } => {
                charge(&mut self.left_out_releasing, caller, lwpid, ns);
            }
        }
    }

    /// Whether reports list it: a futex word that was only woken, never waited on (a
    /// condvar's, whose waits are pthread calls, not futex records), is no lock of the trace.
    pub fn is_reported(&self) -> bool {
        !self.kind.is_futex_word() || self.acquisitions > 0
    }

    /// A futex word's kind, as its waits and wakes so far tell it.
    fn futex_used(&mut self, update: impl FnOnce(&mut FutexUse)) {
        if self.kind.is_futex_word() {
            update(&mut self.futex_use);
            self.kind = match self.futex_use.is_event() {
                true => LockKind::FutexEvent,
                false => LockKind::Futex,
            };
        }
    }
}

/// One more wait of `ns` charged to `key` (a stack, or a caller), by `lwpid`.
fn charge<K: std::hash::Hash + Eq>(
    stacks: &mut HashMap<K, StackStats>,
    key: K,
    lwpid: u32,
    ns: u64,
) {
    stacks.entry(key).or_default().add(lwpid, 1, ns);
}

/// What a wait or a release is charged to: the call stack its record named, or, where that
/// stack was left out, its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StackOf {
    /// The stack's id (0: none was asked for).
    Recorded(u32),
    /// The record came without its stack (the tracer was behind): where it was called from.
    LeftOut { caller: u64 },
}

/// What a futex wait returns when its word no longer held the value it expected: it
/// returned at once, without sleeping.
const EAGAIN: i32 = -11;

/// A thread that holds a lock: since when, from where, how deep (recursive mutexes).
#[derive(Clone, Copy, Debug)]
pub struct Holder {
    /// The thread.
    pub lwpid: u32,
    /// When it took the lock (CLOCK_REALTIME ns).
    pub since_ns: i64,
    /// Where it took it from (0: unknown).
    pub caller: u64,
    depth: u32,
}

/// One thread.
#[derive(Clone, Debug, Serialize)]
pub struct ThreadStats {
    /// Its process.
    pub pid: u32,
    /// Its kernel thread id.
    pub lwpid: u32,
    /// Its name (comm), as the log last gave it; empty if none.
    pub name: String,
    /// Calls (records that start a call) per category.
    pub calls: BTreeMap<&'static str, u64>,
    /// Time blocked per kind.
    pub blocked: BTreeMap<BlockKind, u64>,
    /// The longest single wait: how long, in which call, on what, from where.
    pub longest_wait: Option<Wait>,
}

/// A finished wait.
#[derive(Clone, Debug, Serialize)]
pub struct Wait {
    /// How long it lasted.
    pub ns: u64,
    /// The call's event name (`mutex_lock`, `cond_wait`, ...).
    pub call: &'static str,
    /// The object waited on.
    pub object: u64,
    /// Where the call was made from (0: unknown).
    pub caller: u64,
}

/// A wait that ended, as its thread's time blocked and the timeline see it.
struct EndedWait {
    pid: u32,
    lwpid: u32,
    start_ns: i64,
    end_ns: i64,
    event: &'static EventDef,
    object: u64,
    caller: u64,
    stack: u32,
}

/// How a lock was taken.
#[derive(Clone, Copy, Debug)]
struct Taken {
    kind: LockKind,
    exclusive: bool,
    /// The call could wait for it (not a trylock).
    waits: bool,
    caller: u64,
}

/// A call between its entry and its return.
#[derive(Clone, Copy, Debug)]
struct Pending {
    event: &'static EventDef,
    role: Role,
    /// The caller's `pthread_t`: whom a join of it waits for.
    tid: u64,
    pid: u32,
    entry_ns: i64,
    object: u64,
    caller: u64,
    /// The second argument: a condvar wait's mutex.
    second: u64,
    /// The call stack it was taken with (0: none).
    stack: u32,
    /// The mutex's owner when the lock's entry found it (its `MutexOwner` field; 0 if none or
    /// unknown): the holder of a lock taken before the trace began, or while its taking was
    /// not recorded (`--contended`). The id in the process's PID namespace, as read.
    owner_hint: u32,
    /// For the report: the thread that held the lock when this wait began, and where it took
    /// the lock (0: not recorded). Looked up then, as the holder's unlock, before this call
    /// returns, forgets its hold.
    held_by: Option<(u32, u64)>,
}

impl Pending {
    /// Its process, object and caller: what a wait is counted by.
    fn waited_on(&self) -> (u32, u64, u64) {
        (self.pid, self.object, self.caller)
    }
}

/// The last release of a lock (an unlock, a post): whose, with which stack, when.
#[derive(Clone, Copy, Debug)]
struct Release {
    lwpid: u32,
    stack: u32,
    caller: u64,
    ns: i64,
}

/// A thread in a cycle of waits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadlockedThread {
    /// Its process.
    pub pid: u32,
    /// Its kernel thread id.
    pub lwpid: u32,
    /// The call it waits in (its C function), on what, from where, since when.
    pub call: String,
    /// The object it waits on.
    pub waits_for: u64,
    /// It waits to be woken (on a condition variable or a semaphore), which no holder owes
    /// it: the thread it waits for is the only one that ever woke it.
    pub waits_to_be_woken: bool,
    /// Where it called from.
    pub wait_caller: u64,
    /// When it began to wait (CLOCK_REALTIME ns).
    pub waiting_since_ns: i64,
    /// The locks it holds, and where it took the one the next thread in the cycle waits for.
    pub holds: Vec<u64>,
    /// Where it took that lock.
    pub locked_at: u64,
    /// When it took it (CLOCK_REALTIME ns).
    pub holding_since_ns: i64,
}

/// Threads each waiting for the next, the last for the first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Deadlock {
    /// Certain for locks and joins; possible when a condvar or semaphore wait is part of it
    /// (its thread waits for the only other thread that ever woke it).
    pub certain: bool,
    /// The cycle, each thread waiting for the next.
    pub threads: Vec<DeadlockedThread>,
}

/// A span of one thread's time: a wait or a hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    /// Its process.
    pub pid: u32,
    /// Its kernel thread id.
    pub lwpid: u32,
    /// When it began (CLOCK_REALTIME ns).
    pub start_ns: i64,
    /// When it ended.
    pub end_ns: i64,
    /// A wait, of this kind; `None` for a hold.
    pub waited: Option<BlockKind>,
    /// The call (or for a hold, the lock's kind) and its object.
    pub name: String,
    /// The call stack of a wait (`TraceRecord::stack`; 0 for none, and for a hold).
    pub stack: u32,
}

impl Slice {
    /// How timelines label it: its wait's kind (`lock wait`, `cond wait`, ...) or `hold`.
    pub fn category(&self) -> &'static str {
        self.waited.map_or("hold", BlockKind::name)
    }
}

/// An unlock that woke a waiter: from the releasing thread at `from_ns` to the thread that
/// then got the lock, at `to_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wake {
    /// The process.
    pub pid: u32,
    /// The thread that released the lock.
    pub from_lwpid: u32,
    /// When it did (CLOCK_REALTIME ns).
    pub from_ns: i64,
    /// The thread that then got the lock.
    pub to_lwpid: u32,
    /// When it returned with it.
    pub to_ns: i64,
    /// The call stack of the release (0 for none).
    pub stack: u32,
}

/// What a timeline shows (`convert --to perfetto`): every blocking wait (a lock wait only if
/// the caller blocked), every hold, and each contended lock's wakeup.
#[derive(Default)]
pub struct Timeline {
    /// The waits and holds.
    pub slices: Vec<Slice>,
    /// The wakeups of contended locks.
    pub wakes: Vec<Wake>,
    /// The last unlock of each lock: who, when.
    last_release: HashMap<(u32, u64), (u32, i64)>,
}

impl Deadlock {
    /// What tells one cycle from another, wherever it was found from: its threads and what
    /// each waits for.
    pub fn key(&self) -> Vec<(u32, u64)> {
        let mut key: Vec<(u32, u64)> = self
            .threads
            .iter()
            .map(|t| (t.lwpid, t.waits_for))
            .collect();
        key.sort_unstable();
        key
    }
}

/// How many records go by between sweeps of the entries kept empty (`Analysis::holders`):
/// what is kept is bounded by the locks and calls of this many records.
const SWEEP_EVERY: u32 = 1 << 16;

/// Where a traced process runs, as its `thrtrace_process_cgroup` event told.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProcessCgroup {
    /// Its cgroup (v2; on a hybrid host where that is the root, systemd's v1 one).
    pub path: String,
    /// The container id its runtime named the cgroup by; empty if none.
    pub container: String,
}

/// The engine.
#[derive(Default)]
pub struct Analysis {
    /// Set to draw a timeline as well.
    pub timeline: Option<Timeline>,
    /// Keep statistics (the report); off, only who holds and who waits (live detection).
    stats: bool,
    locks: HashMap<(u32, u64), LockStats>,
    /// Who holds each lock. A lock let go keeps its entry, empty, and a thread's call that
    /// returned keeps its `pending` entry, `None`: a lock taken and let go again, a call made
    /// again, neither inserts nor removes (perf: those, and the allocation of each holder list,
    /// were a third of the live deadlock watch). `sweep` bounds what is kept.
    holders: HashMap<(u32, u64), Vec<Holder>>,
    threads: HashMap<u32, ThreadStats>,
    pending: HashMap<(u32, u16, u16), Option<Pending>>,
    /// Records since the last `sweep`.
    unswept: u32,
    /// The threads that have signaled a condvar or posted a semaphore: whom a wait on it may
    /// be waiting for.
    wakers: HashMap<(u32, u64), HashSet<u32>>,
    /// Each lock's last release (statistics only): what ended a wait on it.
    last_releases: HashMap<(u32, u64), Release>,
    /// Futex waits and wakes not yet paired (statistics and timeline only).
    futex_pairs: FutexPairs,
    /// Each thread's name (comm), with its process.
    names: HashMap<u32, (u32, String)>,
    /// The stacks, by process and id, that records named where their copy was left out.
    left_out_stacks: HashSet<(u32, u32)>,
    /// The records that named one, and the rate they came at (statistics only).
    left_out: LeftOut,
    /// The ids of the threads of processes in PID namespaces of their own, there.
    namespace_ids: NamespaceIds,
    /// Each traced process's executable, as it was attached or last exec'd, by pid.
    executables: BTreeMap<u32, String>,
    /// Each traced process's cgroup, as it was attached, by pid.
    cgroups: BTreeMap<u32, ProcessCgroup>,
    /// Deadlocks already reported, by their threads and objects.
    reported: HashSet<Vec<(u32, u64)>>,
    /// Deadlocks found by the tracer while it ran, from the log.
    recorded_deadlocks: Vec<SystemEvent>,
    /// The lock-order graph, unless left off (`without_lock_order`).
    order: Option<LockOrder>,
    /// The trace records contended calls only (its START says so): an absent lock or unlock
    /// did not wait or wake.
    pub contended_only: bool,
    /// The time of the first record analysed (CLOCK_REALTIME ns).
    pub first_ns: Option<i64>,
    /// The time of the last.
    pub last_ns: i64,
}

impl Analysis {
    /// With statistics (a report) or without (live detection).
    pub fn new(stats: bool) -> Self {
        Analysis {
            stats,
            order: Some(LockOrder::default()),
            ..Analysis::default()
        }
    }

    /// The records seen (since the lock statistics were last taken) that came without the
    /// stack they were to carry, and the rate they came at.
    pub fn left_out(&self) -> LeftOut {
        self.left_out
    }

    /// The same engine with no lock-order graph (`--lock-order off`).
    pub fn without_lock_order(self) -> Self {
        Analysis {
            order: None,
            ..self
        }
    }

    /// The lock-order graph and the potential deadlocks it found, unless left off.
    pub fn lock_order(&mut self) -> Option<&mut LockOrder> {
        self.order.as_mut()
    }

    /// What a system event says of the trace: how it was taken, a thread's name (comm), a
    /// process's executable, a deadlock the tracer found, a stack that records name but was
    /// left out.
    pub fn system_event(&mut self, event: &SystemEvent) {
        match &event.kind {
            SystemKind::Start { contended, .. } => self.contended_only |= *contended,
            SystemKind::ThreadName { name } => {
                self.names.insert(event.lwpid, (event.pid, name.clone()));
            }
            SystemKind::ThreadNamespaceId { ns_lwpid } => {
                self.namespace_ids.learn(event.pid, event.lwpid, *ns_lwpid);
            }
            SystemKind::ProcessAttach { exe, .. } => {
                self.executables.insert(event.pid, exe.clone());
                // A new process, whose cgroup follows if it could be read.
                self.cgroups.remove(&event.pid);
            }
            SystemKind::Exec { exe } => {
                self.executables.insert(event.pid, exe.clone());
            }
            SystemKind::ProcessCgroup {
                path,
                systemd,
                container,
            } => {
                let cgroup = ProcessCgroup {
                    // A host whose controllers are all v1 has its processes in v2's root, or
                    // no v2 at all: systemd's unit says more.
                    path: match path.as_str() {
                        "/" | "" if !systemd.is_empty() => systemd.clone(),
                        _ => path.clone(),
                    },
                    container: container.clone(),
                };
                self.cgroups.insert(event.pid, cgroup);
            }
            SystemKind::Deadlock { .. } => self.recorded_deadlocks.push(event.clone()),
            SystemKind::Stack { id, frames, .. } if frames.is_empty() => {
                self.left_out_stacks.insert((event.pid, *id));
            }
            SystemKind::ShortWaits {
                call,
                object,
                caller,
                waits,
                wait_total_ns,
                min_wait_ns,
            } => {
                let tally = ShortWaits {
                    count: *waits,
                    total_ns: *wait_total_ns,
                    below_ns: *min_wait_ns,
                };
                self.short_waits(event, call, (*object, *caller), tally);
            }
            _ => {}
        }
    }

    /// Waits of `event`'s thread in `call` on `object` from `caller` that were tallied, not
    /// written: counted as the contended waits they were (statistics only). They took what
    /// they waited for, but who held it and with what stack is not known.
    fn short_waits(
        &mut self,
        event: &SystemEvent,
        call: &str,
        (object, caller): (u64, u64),
        tally: ShortWaits,
    ) {
        let Some(row) = EventDef::by_name(call) else {
            return;
        };
        if !self.stats || tally.count == 0 {
            return;
        }
        // The waits a trace counts: slow paths' (locks, semaphores) and futex waits.
        let (kind, blocked) = match role(row) {
            Role::Acquire { kind, .. } => (kind, BlockKind::LockWait),
            Role::FutexWait => (LockKind::Futex, BlockKind::LockWait),
            Role::SemWait => (LockKind::Sema, BlockKind::SemWait),
            _ => return,
        };
        let (pid, lwpid) = (event.pid, event.lwpid);
        let lock = self.lock(pid, object, kind);
        lock.acquisitions += tally.count;
        lock.contended += tally.count;
        lock.wait.add_tallied(tally.count, tally.total_ns);
        lock.short_waits.count += tally.count;
        lock.short_waits.total_ns += tally.total_ns;
        lock.short_waits.below_ns = lock.short_waits.below_ns.max(tally.below_ns);
        lock.futex_used(|word| word.waited(lwpid));
        lock.short_waits_by_caller.entry(caller).or_default().add(
            lwpid,
            tally.count,
            tally.total_ns,
        );
        let from = lock.callers.entry(caller).or_default();
        from.count += tally.count;
        from.wait_total_ns += tally.total_ns;
        let thread = self.thread(pid, lwpid);
        *thread.calls.entry(row.category.name()).or_default() += tally.count;
        *thread.blocked.entry(blocked).or_default() += tally.total_ns;
    }

    /// A record, in time order with the others.
    pub fn record(&mut self, record: &TraceRecord) {
        let Some((event, role)) = lookup(record.event1, record.event2) else {
            return;
        };
        self.unswept += 1;
        if self.unswept >= SWEEP_EVERY {
            self.sweep();
        }
        let now = record.time_ns() as i64;
        self.first_ns.get_or_insert(now);
        self.last_ns = self.last_ns.max(now);
        if self.stats {
            let left_out =
                record.stack != 0 && self.left_out_stacks.contains(&(record.pid, record.stack));
            self.left_out.count(now, left_out);
        }
        if self.stats && record.which != Which::Return {
            *self
                .thread(record.pid, record.lwpid)
                .calls
                .entry(event.category.name())
                .or_default() += 1;
        }
        let key = (record.lwpid, record.event1, record.event2);
        match record.which {
            Which::Entry => {
                let object = record.a[0] as u64;
                let owner_hint = field(record, event, Field::MutexOwner).unwrap_or(0) as u32;
                let held_by = match (self.stats, role) {
                    (true, Role::Acquire { .. }) => {
                        self.holder_at_entry(record.pid, record.lwpid, object, owner_hint)
                    }
                    _ => None,
                };
                let pending = Pending {
                    event,
                    role,
                    tid: record.tid,
                    pid: record.pid,
                    entry_ns: now,
                    object,
                    caller: record.caller,
                    second: record.a[1] as u64,
                    stack: record.stack,
                    owner_hint,
                    held_by,
                };
                self.pending.insert(key, Some(pending));
                // A condvar wait lets its mutex go until it returns.
                if role == Role::CondWait {
                    self.release(record.pid, record.lwpid, record.a[1] as u64, now);
                }
            }
            Which::Return => {
                if let Some(pending) = self.pending.get_mut(&key).and_then(Option::take) {
                    self.returned(record, &pending, now);
                }
            }
            Which::Whole => self.single(record, event, role, now),
        }
    }

    /// A paired call returned.
    fn returned(&mut self, record: &TraceRecord, call: &Pending, now: i64) {
        let event = call.event;
        let rval = field(record, event, Field::Rval).unwrap_or(0);
        let blocked = field(record, event, Field::Block).unwrap_or(0) != 0;
        let wait = now.saturating_sub(call.entry_ns).max(0) as u64;
        let (pid, lwpid) = (call.pid, record.lwpid);
        let mut shown = true;
        let block_kind = match call.role {
            Role::Acquire {
                kind,
                exclusive,
                waits,
            } => {
                shown = blocked;
                if let Some(timeline) = self.timeline.as_mut()
                    && blocked
                    && let Some(&(from_lwpid, from_ns)) =
                        timeline.last_release.get(&(pid, call.object))
                    && from_ns >= call.entry_ns
                {
                    let stack = self
                        .last_releases
                        .get(&(pid, call.object))
                        .filter(|r| (r.lwpid, r.ns) == (from_lwpid, from_ns))
                        .map_or(0, |r| r.stack);
                    timeline.wakes.push(Wake {
                        pid,
                        from_lwpid,
                        from_ns,
                        to_lwpid: lwpid,
                        to_ns: now,
                        stack,
                    });
                }
                if rval as i32 == 0 {
                    let taken = Taken {
                        kind,
                        exclusive,
                        waits,
                        caller: call.caller,
                    };
                    self.acquire(pid, lwpid, call.object, taken, now);
                    if self.stats {
                        // The owner the call found held it; a holder the records name was
                        // waited for if the call blocked (two read holds do not exclude). An
                        // owner in a PID namespace whose id was not told at the entry has
                        // been by now: the holder's release that ended the wait was its
                        // record, whose thread was told as it was first seen.
                        let found = call.held_by.or_else(|| {
                            let owner = self.namespace_ids.host(pid, call.owner_hint)?;
                            (owner != lwpid).then_some((owner, 0))
                        });
                        let lock = self.lock(pid, call.object, kind);
                        if let Some((holder, taken_at)) = found
                            && (blocked || call.owner_hint != 0)
                        {
                            let owner = lock.owners.entry(holder).or_default();
                            owner.count += 1;
                            owner.wait_total_ns += wait;
                            if taken_at != 0 {
                                owner.taken_at = taken_at;
                            }
                        }
                        lock.contended += u64::from(blocked);
                        lock.wait.add(wait);
                        let caller = lock.callers.entry(call.caller).or_default();
                        caller.wait_total_ns += wait;
                    }
                    if blocked {
                        self.charge_stacks(call, lwpid, wait);
                    }
                }
                Some(BlockKind::LockWait)
            }
            Role::SemWait => {
                // s_count as the wait found it, in its entry half: a wait that found it 0
                // waited for a post (its record has no switch count to say it blocked).
                let empty = event.first[1] == Field::SemCount && call.second == 0;
                let contended = empty || wait > 0 && rval as i32 != 0;
                if let Some(sem) = self.waited(call.waited_on(), LockKind::Sema, wait) {
                    sem.contended += u64::from(contended);
                }
                if contended {
                    self.charge_stacks(call, lwpid, wait);
                }
                Some(BlockKind::SemWait)
            }
            Role::CondWait => {
                // The mutex is held again, taken inside the wait (which may wait for it).
                let taken = Taken {
                    kind: LockKind::Mutex,
                    exclusive: true,
                    waits: true,
                    caller: call.caller,
                };
                self.hold(pid, lwpid, call.second, taken, now);
                self.waited(call.waited_on(), LockKind::Cond, wait);
                Some(BlockKind::CondWait)
            }
            Role::Join => {
                self.waited(call.waited_on(), LockKind::Join, wait);
                Some(BlockKind::Join)
            }
            Role::Barrier => {
                self.waited(call.waited_on(), LockKind::Barrier, wait);
                Some(BlockKind::Barrier)
            }
            _ => None,
        };
        if let Some(kind) = block_kind {
            let ended = EndedWait {
                pid,
                lwpid,
                start_ns: call.entry_ns,
                end_ns: now,
                event,
                object: call.object,
                caller: call.caller,
                stack: call.stack,
            };
            self.wait_ended(&ended, kind, shown);
        }
    }

    /// A wait in `kind` ended: a slice of the timeline if `shown` (a lock wait, if it
    /// blocked); its thread's time blocked and longest wait.
    fn wait_ended(&mut self, wait: &EndedWait, kind: BlockKind, shown: bool) {
        if let (Some(timeline), true) = (self.timeline.as_mut(), shown) {
            timeline.slices.push(Slice {
                pid: wait.pid,
                lwpid: wait.lwpid,
                start_ns: wait.start_ns,
                end_ns: wait.end_ns,
                waited: Some(kind),
                name: format!("{} {:#x}", wait.event.name, wait.object),
                stack: wait.stack,
            });
        }
        if !self.stats {
            return;
        }
        let ns = wait.end_ns.saturating_sub(wait.start_ns).max(0) as u64;
        let thread = self.thread(wait.pid, wait.lwpid);
        *thread.blocked.entry(kind).or_default() += ns;
        if thread.longest_wait.as_ref().is_none_or(|w| ns > w.ns) {
            thread.longest_wait = Some(Wait {
                ns,
                call: wait.event.name,
                object: wait.object,
                caller: wait.caller,
            });
        }
    }

    /// What a record of process `pid` that named `stack`, called from `caller`, is charged to.
    fn stack_of(&self, pid: u32, stack: u32, caller: u64) -> StackOf {
        match self.left_out_stacks.contains(&(pid, stack)) {
            true => StackOf::LeftOut { caller },
            false => StackOf::Recorded(stack),
        }
    }

    /// A wait of `waiter` on `call`'s object that blocked `wait` ns: charged to the stack it
    /// waited with and to that of the release that ended it (statistics only).
    fn charge_stacks(&mut self, call: &Pending, waiter: u32, wait: u64) {
        if !self.stats {
            return;
        }
        let released = self
            .last_releases
            .get(&(call.pid, call.object))
            .filter(|r| r.lwpid != waiter && r.ns >= call.entry_ns)
            .map(|r| (self.stack_of(call.pid, r.stack, r.caller), r.lwpid));
        let waited = self.stack_of(call.pid, call.stack, call.caller);
        let Some(lock) = self.locks.get_mut(&(call.pid, call.object)) else {
            return;
        };
        lock.waited_with(waited, waiter, wait);
        if let Some((stack, lwpid)) = released {
            lock.released_by(stack, lwpid, wait);
        }
    }

    /// A wait on an object that is no lock one holds (a semaphore, condvar, barrier, thread
    /// joined, futex word) ended: counted as an acquisition of it, from `caller`. Its
    /// statistics, if kept.
    fn waited(
        &mut self,
        (pid, object, caller): (u32, u64, u64),
        kind: LockKind,
        wait: u64,
    ) -> Option<&mut LockStats> {
        if !self.stats {
            return None;
        }
        let stats = self.lock(pid, object, kind);
        stats.acquisitions += 1;
        stats.wait.add(wait);
        let caller = stats.callers.entry(caller).or_default();
        caller.count += 1;
        caller.wait_total_ns += wait;
        Some(stats)
    }

    /// A call with one record (trylocks, unlocks, posts, signals).
    fn single(&mut self, record: &TraceRecord, event: &'static EventDef, role: Role, now: i64) {
        let object = record.a[0] as u64;
        if self.stats && matches!(role, Role::Release(_) | Role::SemPost) {
            let release = Release {
                lwpid: record.lwpid,
                stack: record.stack,
                caller: record.caller,
                ns: now,
            };
            self.last_releases.insert((record.pid, object), release);
        }
        let succeeded = field(record, event, Field::Rval).is_none_or(|r| r as i32 == 0);
        match role {
            Role::Acquire {
                kind,
                exclusive,
                waits,
            } if succeeded => {
                let taken = Taken {
                    kind,
                    exclusive,
                    waits,
                    caller: record.caller,
                };
                self.acquire(record.pid, record.lwpid, object, taken, now);
            }
            Role::Release(_) => self.release(record.pid, record.lwpid, object, now),
            Role::SemPost | Role::CondSignal => {
                self.wakers
                    .entry((record.pid, object))
                    .or_default()
                    .insert(record.lwpid);
                if self.stats {
                    let kind = match role {
                        Role::SemPost => LockKind::Sema,
                        _ => LockKind::Cond,
                    };
                    self.lock(record.pid, object, kind).wakeups += 1;
                }
            }
            // Waits and wakes to pair, for the statistics and the timeline: they hold
            // nothing, so the live watch has no use for them.
            Role::FutexWait | Role::FutexWake if !self.stats && self.timeline.is_none() => {}
            Role::FutexWait => self.futex_wait(record, event, now),
            Role::FutexWake => self.futex_wake(record, event, now),
            _ => {}
        }
    }

    /// A futex wait ended: an acquisition of its word's lock, contended unless the word had
    /// changed (it never slept). One that was woken is paired with the wake that ended it.
    /// Nothing is held: the word's release is not recorded, only wakes.
    fn futex_wait(&mut self, record: &TraceRecord, event: &'static EventDef, now: i64) {
        let value = |of: Field| field(record, event, of).unwrap_or(0);
        let (pid, object) = (record.pid, value(Field::Arg(1)) as u64);
        let wait = FutexWait {
            lwpid: record.lwpid,
            start_ns: now.saturating_sub(value(Field::ElapsedNs).max(0)),
            end_ns: now,
        };
        let result = value(Field::Rval) as i32;
        let contended = result != EAGAIN;
        let waited_on = (pid, object, record.caller);
        let stack = self.stack_of(pid, record.stack, record.caller);
        if let Some(lock) = self.waited(waited_on, LockKind::Futex, wait.ns()) {
            lock.contended += u64::from(contended);
            if contended {
                lock.waited_with(stack, record.lwpid, wait.ns());
                lock.futex_used(|word| word.waited(record.lwpid));
            }
        }
        let ended = EndedWait {
            pid,
            lwpid: record.lwpid,
            start_ns: wait.start_ns,
            end_ns: wait.end_ns,
            event,
            object,
            caller: record.caller,
            stack: record.stack,
        };
        self.wait_ended(&ended, BlockKind::LockWait, contended);
        if result == 0
            && let Some(wake) = self.futex_pairs.wait((pid, object), wait)
        {
            self.futex_woken(pid, object, wait, wake);
        }
    }

    /// A futex wake: a wakeup of its word, paired with the waits it ended.
    fn futex_wake(&mut self, record: &TraceRecord, event: &'static EventDef, now: i64) {
        let value = |of: Field| field(record, event, of).unwrap_or(0);
        let (pid, object) = (record.pid, value(Field::Arg(1)) as u64);
        let woken = value(Field::Rval).max(0) as u64;
        if self.stats {
            let lock = self.lock(pid, object, LockKind::Futex);
            lock.wakeups += 1;
            lock.futex_used(|word| word.woke(record.lwpid, woken));
        }
        if woken == 0 {
            return;
        }
        let wake = FutexWake {
            lwpid: record.lwpid,
            begin_ns: now.saturating_sub(value(Field::ElapsedNs).max(0)),
            end_ns: now,
            stack: record.stack,
            caller: record.caller,
            woken,
        };
        for wait in self.futex_pairs.wake((pid, object), wake) {
            self.futex_woken(pid, object, wait, wake);
        }
    }

    /// `wake` ended `wait` on `object`: its thread released the word to the waiter.
    fn futex_woken(&mut self, pid: u32, object: u64, wait: FutexWait, wake: FutexWake) {
        if let Some(timeline) = self.timeline.as_mut() {
            timeline.wakes.push(Wake {
                pid,
                from_lwpid: wake.lwpid,
                from_ns: wake.begin_ns,
                to_lwpid: wait.lwpid,
                to_ns: wait.end_ns,
                stack: wake.stack,
            });
        }
        let stack = self.stack_of(pid, wake.stack, wake.caller);
        if self.stats
            && let Some(lock) = self.locks.get_mut(&(pid, object))
        {
            lock.released_by(stack, wake.lwpid, wait.ns());
            let owner = lock.owners.entry(wake.lwpid).or_default();
            owner.count += 1;
            owner.wait_total_ns += wait.ns();
        }
    }

    /// A lock call succeeded: `lwpid` holds `object`, counted as an acquisition.
    fn acquire(&mut self, pid: u32, lwpid: u32, object: u64, taken: Taken, now: i64) {
        let Taken { kind, caller, .. } = taken;
        let outermost = self.hold(pid, lwpid, object, taken, now);
        if !self.stats {
            return;
        }
        let lock = self.lock(pid, object, kind);
        lock.acquisitions += 1;
        lock.callers.entry(caller).or_default().count += 1;
        if outermost {
            if lock.last_owner.is_some_and(|owner| owner != lwpid) {
                lock.owner_changes += 1;
            }
            lock.last_owner = Some(lwpid);
        }
    }

    /// `lwpid` holds `object` (once more, if it did: a recursive mutex). Whether this is the
    /// outermost hold, which the lock order sees.
    fn hold(&mut self, pid: u32, lwpid: u32, object: u64, taken: Taken, now: i64) -> bool {
        // A contended-only trace has no uncontended lock or unlock: its acquisitions say
        // nothing of who holds a lock later, nor of the order locks are held in. A waiter's
        // holder is the owner it found.
        if self.contended_only {
            return true;
        }
        let holders = self.holders.entry((pid, object)).or_default();
        if let Some(holder) = holders.iter_mut().find(|h| h.lwpid == lwpid) {
            holder.depth += 1;
            return false;
        }
        // Taken alone: any other holder is stale (its unlock was not recorded).
        if taken.exclusive && taken.kind != LockKind::Rwlock {
            for stale in holders.drain(..) {
                if let Some(order) = self.order.as_mut() {
                    order.released(pid, stale.lwpid, object);
                }
            }
        }
        holders.push(Holder {
            lwpid,
            since_ns: now,
            caller: taken.caller,
            depth: 1,
        });
        if let Some(order) = self.order.as_mut() {
            let acquisition = Acquisition {
                lock: object,
                kind: taken.kind,
                exclusive: taken.exclusive,
                caller: taken.caller,
            };
            order.acquired(pid, lwpid, acquisition, taken.waits, now);
        }
        true
    }

    fn release(&mut self, pid: u32, lwpid: u32, object: u64, now: i64) {
        let Some(holders) = self.holders.get_mut(&(pid, object)) else {
            return;
        };
        let Some(at) = holders.iter().position(|h| h.lwpid == lwpid) else {
            return;
        };
        holders[at].depth -= 1;
        if holders[at].depth > 0 {
            return;
        }
        let holder = holders.remove(at);
        if let Some(order) = self.order.as_mut() {
            order.released(pid, lwpid, object);
        }
        if let Some(timeline) = self.timeline.as_mut() {
            timeline.last_release.insert((pid, object), (lwpid, now));
            let kind = self
                .locks
                .get(&(pid, object))
                .map_or("lock", |l| l.kind.name());
            timeline.slices.push(Slice {
                pid,
                lwpid,
                start_ns: holder.since_ns,
                end_ns: now,
                waited: None,
                name: format!("hold {kind} {object:#x}"),
                stack: 0,
            });
        }
        if self.stats
            && let Some(lock) = self.locks.get_mut(&(pid, object))
        {
            lock.hold
                .add(now.saturating_sub(holder.since_ns).max(0) as u64);
        }
    }

    /// Who holds `object` as `lwpid` begins to wait for it, and where that thread took it (0:
    /// not recorded): the owner the call found (glibc's `__owner`), else, in a full trace, the
    /// one thread the records say holds it. The holder's own lock call may not have returned
    /// yet (it took the lock, its return was not yet seen): its place is then that call's.
    fn holder_at_entry(
        &self,
        pid: u32,
        lwpid: u32,
        object: u64,
        owner_hint: u32,
    ) -> Option<(u32, u64)> {
        let holders = self.holders_of(pid, object);
        // An owner in a PID namespace whose thread was not told (yet) is found as none is.
        let holder = match self.namespace_ids.host(pid, owner_hint) {
            None => match holders {
                [only] if only.lwpid != lwpid => only.lwpid,
                _ => return None,
            },
            Some(owner) if owner == lwpid => return None,
            Some(owner) => owner,
        };
        let taken_at = holders
            .iter()
            .find(|h| h.lwpid == holder)
            .map(|h| h.caller)
            .or_else(|| {
                self.pending
                    .iter()
                    .filter_map(|(&(waiter, _, _), call)| Some((waiter, call.as_ref()?)))
                    .find(|(waiter, call)| {
                        *waiter == holder
                            && call.pid == pid
                            && call.object == object
                            && matches!(call.role, Role::Acquire { .. })
                    })
                    .map(|(_, call)| call.caller)
            })
            .unwrap_or(0);
        Some((holder, taken_at))
    }

    fn lock(&mut self, pid: u32, address: u64, kind: LockKind) -> &mut LockStats {
        let lock = self
            .locks
            .entry((pid, address))
            .or_insert_with(|| LockStats {
                pid,
                address,
                kind,
                acquisitions: 0,
                contended: 0,
                owner_changes: 0,
                wait: Durations::default(),
                hold: Durations::default(),
                wakeups: 0,
                short_waits: ShortWaits::default(),
                callers: HashMap::new(),
                owners: HashMap::new(),
                waiting_stacks: HashMap::new(),
                left_out_waiting: HashMap::new(),
                short_waits_by_caller: HashMap::new(),
                releasing_stacks: HashMap::new(),
                left_out_releasing: HashMap::new(),
                first_waiting_stack: 0,
                last_owner: None,
                futex_use: FutexUse::default(),
            });
        // A mutex first seen unlocked and later locked recursively is an rmutex; a word first
        // seen as a futex and later through a pthread call (a mutex's word, woken by its
        // unlock) is that call's object.
        if (lock.kind == LockKind::Mutex && kind == LockKind::Rmutex)
            || (lock.kind.is_futex_word() && !kind.is_futex_word())
        {
            lock.kind = kind;
        }
        lock
    }

    fn thread(&mut self, pid: u32, lwpid: u32) -> &mut ThreadStats {
        self.threads.entry(lwpid).or_insert_with(|| ThreadStats {
            pid,
            lwpid,
            name: String::new(),
            calls: BTreeMap::new(),
            blocked: BTreeMap::new(),
            longest_wait: None,
        })
    }

    /// Every lock seen.
    pub fn locks(&self) -> impl Iterator<Item = &LockStats> {
        self.locks.values()
    }

    /// The statistics of every lock and thread seen since the last call, handed over and
    /// begun again (a profile per interval). Who holds and who waits is kept: a wait that
    /// spans the cut is charged, whole, to the interval it ends in (with its waiting stack;
    /// the release that ends it is charged only if made after the cut).
    pub fn take_lock_stats(&mut self) -> Vec<LockStats> {
        self.threads.clear();
        self.left_out.restart();
        // Kept to charge a wait to the release that ended it and to find who a wait waits
        // for: one that spans the cut is charged its own stack, not the release's.
        self.last_releases.clear();
        self.wakers.clear();
        // Likewise a futex wait and its wake on either side of the cut are not paired.
        self.futex_pairs.clear();
        self.first_ns = None;
        std::mem::take(&mut self.locks).into_values().collect()
    }

    /// Every thread seen, with its name where known.
    pub fn threads(&self) -> Vec<ThreadStats> {
        let mut threads: Vec<ThreadStats> = self
            .threads
            .values()
            .cloned()
            .map(|mut t| {
                t.name = self
                    .names
                    .get(&t.lwpid)
                    .map(|(_, name)| name.clone())
                    .unwrap_or_default();
                t
            })
            .collect();
        threads.sort_by_key(|t| (t.pid, t.lwpid));
        threads
    }

    /// The name (comm) the log gave thread `lwpid`, if any.
    pub fn thread_name(&self, lwpid: u32) -> Option<&str> {
        self.names.get(&lwpid).map(|(_, name)| name.as_str())
    }

    /// Thread `lwpid` of `pid`'s id in its process's PID namespace, where that is one of its
    /// own.
    pub fn namespace_id(&self, pid: u32, lwpid: u32) -> Option<u32> {
        self.namespace_ids.own(pid, lwpid)
    }

    /// Drops the names of process `pid` and its threads: for an analysis that runs as long as
    /// the host does (the profiles pushed), once the process has exited and its last profile
    /// is made. A report keeps them, to name what it lists.
    pub fn forget_names(&mut self, pid: u32) {
        self.names.retain(|_, (of, _)| *of != pid);
        self.namespace_ids.retain(|of, _| of != pid);
        self.executables.remove(&pid);
        self.cgroups.remove(&pid);
    }

    /// Keeps the names of the threads `alive` says still run.
    pub fn retain_names(&mut self, mut alive: impl FnMut(u32, u32) -> bool) {
        self.names.retain(|&lwpid, (pid, _)| alive(*pid, lwpid));
        self.namespace_ids.retain(alive);
    }

    /// The file name of process `pid`'s executable, if the log gave it.
    pub fn process_name(&self, pid: u32) -> Option<&str> {
        let exe = self.executables.get(&pid)?;
        exe.rsplit('/').next()
    }

    /// The cgroup process `pid` was in as it was attached, if the log told it.
    pub fn cgroup(&self, pid: u32) -> Option<&ProcessCgroup> {
        self.cgroups.get(&pid)
    }

    /// The traced processes' executables (as attached, or last exec'd), by pid.
    pub fn executables(&self) -> &BTreeMap<u32, String> {
        &self.executables
    }

    /// The locks `lwpid` holds now (at the end of a trace: held at the end).
    pub fn held_by(&self, lwpid: u32) -> Vec<u64> {
        let mut held: Vec<u64> = self
            .holders
            .iter()
            .filter(|(_, holders)| holders.iter().any(|h| h.lwpid == lwpid))
            .map(|(&(_, object), _)| object)
            .collect();
        held.sort_unstable();
        held
    }

    /// Drops the entries kept empty (see `holders`).
    fn sweep(&mut self) {
        self.unswept = 0;
        self.holders.retain(|_, holders| !holders.is_empty());
        self.pending.retain(|_, call| call.is_some());
        self.futex_pairs.expire(self.last_ns);
    }

    /// Who holds `object` of `pid` now.
    pub fn holders_of(&self, pid: u32, object: u64) -> &[Holder] {
        self.holders.get(&(pid, object)).map_or(&[], Vec::as_slice)
    }

    /// The deadlocks the tracer found while it ran, as the log recorded them.
    pub fn recorded_deadlocks(&self) -> &[SystemEvent] {
        &self.recorded_deadlocks
    }

    /// Process `pid` has exited: its calls will not return, its locks are gone.
    pub fn process_exited(&mut self, pid: u32) {
        self.pending
            .retain(|_, call| call.is_some_and(|call| call.pid != pid));
        self.holders.retain(|&(p, _), _| p != pid);
        self.wakers.retain(|&(p, _), _| p != pid);
        self.last_releases.retain(|&(p, _), _| p != pid);
        self.left_out_stacks.retain(|&(p, _)| p != pid);
        self.futex_pairs.process_exited(pid);
        self.namespace_ids.process_exited(pid);
        if let Some(order) = self.order.as_mut() {
            order.process_exited(pid);
        }
    }

    /// Cycles of threads each blocked longer than `threshold_ns` at `now_ns`, each waiting for
    /// the next; each reported once. A thread in a lock waits for the lock's holders (for a
    /// mutex taken before the trace began, for glibc's `__owner`); one in a join, for the
    /// thread it joins. A condvar or semaphore has no owner: a thread waiting on one is taken
    /// to wait for a thread only when that thread is the only other one that ever signaled
    /// (posted) it, and a cycle counts only if it also has a wait for a lock or a join: threads
    /// waiting only on condvars are idle, waiting for work that may come from anyone (a
    /// thread pool's workers, woken by each other before). Timed waits give up at their
    /// deadline: they never make a cycle.
    pub fn new_deadlocks(&mut self, now_ns: i64, threshold_ns: i64) -> Vec<Deadlock> {
        // Blocked long enough, with no deadline, in a lock, a join or a wait: lwpid -> the call.
        let waiting: HashMap<u32, Pending> = self
            .pending
            .iter()
            .filter_map(|(key, call)| Some((key, call.as_ref()?)))
            .filter(|(_, call)| {
                now_ns - call.entry_ns > threshold_ns && call.event.blocking() != Blocking::Timed
            })
            .filter(|(_, call)| {
                matches!(
                    call.role,
                    Role::Acquire { .. } | Role::Join | Role::CondWait | Role::SemWait
                )
            })
            .map(|(&(lwpid, _, _), call)| (lwpid, *call))
            .collect();
        let waits_for = |lwpid: u32| -> Vec<(u32, Option<Holder>)> {
            let call = &waiting[&lwpid];
            match call.role {
                // The joined thread, if it waits too (only then can it be in a cycle).
                Role::Join => waiting
                    .iter()
                    .filter(|(_, other)| other.pid == call.pid && other.tid == call.object)
                    .map(|(&joined, _)| (joined, None))
                    .collect(),
                // The only other thread that ever woke it may be the one it waits for (a possible
                // deadlock); of several, none is.
                Role::CondWait | Role::SemWait => {
                    let wakers = self.wakers.get(&(call.pid, call.object));
                    let mut others = wakers.into_iter().flatten().filter(|&&w| w != lwpid);
                    match (others.next(), others.next()) {
                        (Some(&only), None) => vec![(only, None)],
                        _ => Vec::new(),
                    }
                }
                _ => {
                    let holders = self.holders_of(call.pid, call.object);
                    if holders.is_empty() {
                        let owner = self.namespace_ids.host(call.pid, call.owner_hint);
                        owner.map(|owner| (owner, None)).into_iter().collect()
                    } else {
                        holders
                            .iter()
                            .filter(|h| h.lwpid != lwpid)
                            .map(|h| (h.lwpid, Some(*h)))
                            .collect()
                    }
                }
            }
        };
        let mut found = Vec::new();
        let mut starts: Vec<u32> = waiting.keys().copied().collect();
        starts.sort_unstable();
        for start in starts {
            // Follow the first edge that stays among the waiting threads, until a thread
            // repeats: a cycle if it is the start.
            let mut path: Vec<(u32, Option<Holder>)> = vec![(start, None)];
            let mut seen: HashSet<u32> = [start].into_iter().collect();
            loop {
                let current = path.last().unwrap().0;
                let Some((next, holder)) = waits_for(current)
                    .into_iter()
                    .find(|(next, _)| waiting.contains_key(next))
                else {
                    break;
                };
                path.last_mut().unwrap().1 = holder;
                if next == start {
                    found.push(path.clone());
                    break;
                }
                if !seen.insert(next) {
                    break;
                }
                path.push((next, None));
            }
        }
        let mut deadlocks = Vec::new();
        for cycle in found {
            let waits_for_thread = |(lwpid, _): &(u32, Option<Holder>)| {
                matches!(waiting[lwpid].role, Role::Acquire { .. } | Role::Join)
            };
            // Only condvars and semaphores: idle threads, not a deadlock.
            if !cycle.iter().any(waits_for_thread) {
                continue;
            }
            let n = cycle.len();
            let threads = (0..n)
                .map(|i| {
                    let (lwpid, _) = cycle[i];
                    let call = &waiting[&lwpid];
                    // How this thread holds what the thread before it waits for.
                    let before = cycle[(i + n - 1) % n];
                    let held = before.1;
                    let mut holds = self.held_by(lwpid);
                    let waited_for = waiting[&before.0].object;
                    let lock_waited = matches!(waiting[&before.0].role, Role::Acquire { .. });
                    if lock_waited && !holds.contains(&waited_for) {
                        // Known from glibc's __owner: taken before the trace began.
                        holds.push(waited_for);
                        holds.sort_unstable();
                    }
                    DeadlockedThread {
                        pid: call.pid,
                        lwpid,
                        call: call.event.symbol.to_owned(),
                        waits_for: call.object,
                        waits_to_be_woken: matches!(call.role, Role::CondWait | Role::SemWait),
                        wait_caller: call.caller,
                        waiting_since_ns: call.entry_ns,
                        holds,
                        locked_at: held.map_or(0, |h| h.caller),
                        holding_since_ns: held.map_or(0, |h| h.since_ns),
                    }
                })
                .collect();
            let certain = cycle.iter().all(waits_for_thread);
            let deadlock = Deadlock { certain, threads };
            if self.reported.insert(deadlock.key()) {
                deadlocks.push(deadlock);
            }
        }
        deadlocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;
    const PID: u32 = 100;
    const M1: i64 = 0x1000;
    const M2: i64 = 0x2000;

    /// A record of event `name` by thread `lwpid` at `ms` milliseconds.
    fn rec(lwpid: u32, name: &str, which: Which, ms: i64, a: [i64; 5]) -> TraceRecord {
        let event = EventDef::by_name(name).unwrap();
        let ns = ms * MS;
        TraceRecord {
            sec: ns / 1_000_000_000,
            nsec: ns % 1_000_000_000,
            lwpid,
            pid: PID,
            tid: u64::from(lwpid) << 8,
            event1: event.category.code(),
            event2: event.event2,
            which,
            a,
            caller: 0x400_000 + u64::from(lwpid),
            stack: 0,
        }
    }

    fn lock(analysis: &mut Analysis, lwpid: u32, mutex: i64, from: i64, to: i64, blocked: bool) {
        analysis.record(&rec(
            lwpid,
            "mutex_lock",
            Which::Entry,
            from,
            [mutex, 0, 0, 0, 0],
        ));
        analysis.record(&rec(
            lwpid,
            "mutex_lock",
            Which::Return,
            to,
            [0, i64::from(blocked), 0, 0, 0],
        ));
    }

    fn unlock(analysis: &mut Analysis, lwpid: u32, mutex: i64, at: i64) {
        analysis.record(&rec(
            lwpid,
            "mutex_unlock",
            Which::Whole,
            at,
            [mutex, 0, 0, 0, 0],
        ));
    }

    /// A record of futex event `name` by thread `lwpid`, ended at `ms` milliseconds, with
    /// `stack`: each value at its field's position in the event's fields.
    fn futex(lwpid: u32, name: &str, ms: i64, stack: u32, fields: &[(Field, i64)]) -> TraceRecord {
        let event = EventDef::by_name(name).unwrap();
        let mut a = [0; 5];
        for &(of, value) in fields {
            a[event
                .fields(Which::Whole)
                .iter()
                .position(|f| *f == of)
                .unwrap()] = value;
        }
        TraceRecord {
            stack,
            ..rec(lwpid, name, Which::Whole, ms, a)
        }
    }

    /// A futex wait on `word` that ended at `ms` with `result`, having waited `waited_ns`.
    fn futex_wait(lwpid: u32, word: i64, ms: i64, waited_ns: i64, result: i64) -> TraceRecord {
        let fields = [
            (Field::Arg(1), word),
            (Field::ElapsedNs, waited_ns),
            (Field::Rval, result),
        ];
        futex(lwpid, "futex_wait", ms, 10 + lwpid, &fields)
    }

    /// A futex wake of `word` that ended at `ms`, began `took_ns` before, and woke `woken`.
    fn futex_wake(lwpid: u32, word: i64, ms: i64, took_ns: i64, woken: i64) -> TraceRecord {
        let fields = [
            (Field::Arg(1), word),
            (Field::ElapsedNs, took_ns),
            (Field::Rval, woken),
        ];
        futex(lwpid, "futex_wake", ms, 10 + lwpid, &fields)
    }

    const WORD: i64 = 0x7000;

    fn word(analysis: &Analysis, address: i64) -> &LockStats {
        analysis
            .locks()
            .find(|l| l.address == address as u64)
            .unwrap()
    }

    /// Per stack and thread that waited (or released) with it, sorted: (stack, its waits, their
    /// ns, thread, its waits, their ns).
    fn stack_charges(stacks: &HashMap<u32, StackStats>) -> Vec<(u32, u64, u64, u32, u64, u64)> {
        let mut charges: Vec<_> = stacks
            .iter()
            .flat_map(|(&id, s)| {
                s.threads
                    .iter()
                    .map(move |(&t, w)| (id, s.count, s.wait_total_ns, t, w.count, w.wait_total_ns))
            })
            .collect();
        charges.sort_unstable();
        charges
    }

    #[test]
    fn a_futex_wait_is_an_acquisition_of_its_word_contended_unless_it_never_slept() {
        let mut analysis = Analysis::new(true);
        analysis.timeline = Some(Timeline::default());
        // Woken (no wake recorded), timed out, and EAGAIN (the word had changed).
        analysis.record(&futex_wait(1, WORD, 100, 40 * MS, 0));
        analysis.record(&futex_wait(2, WORD, 200, 60 * MS, -110));
        analysis.record(&futex_wait(3, WORD, 210, 1000, -11));
        let lock = word(&analysis, WORD);
        assert_eq!(lock.kind, LockKind::Futex);
        assert!(lock.kind.is_lock() && lock.is_reported());
        assert_eq!((lock.acquisitions, lock.contended, lock.wakeups), (3, 2, 0));
        assert_eq!(
            (lock.wait.count, lock.wait.total_ns, lock.wait.max_ns),
            (3, 100 * MS as u64 + 1000, 60 * MS as u64)
        );
        let caller = &lock.callers[&0x400_002];
        assert_eq!((caller.count, caller.wait_total_ns), (1, 60 * MS as u64));
        // The EAGAIN one's stack (13) is no contended wait's.
        assert_eq!(
            stack_charges(&lock.waiting_stacks),
            [
                (11, 1, 40 * MS as u64, 1, 1, 40 * MS as u64),
                (12, 1, 60 * MS as u64, 2, 1, 60 * MS as u64),
            ]
        );
        assert_eq!(lock.first_waiting_stack, 11);
        assert!(lock.releasing_stacks.is_empty() && lock.owners.is_empty());
        let threads = analysis.threads();
        let blocked: Vec<u64> = threads
            .iter()
            .map(|t| t.blocked[&BlockKind::LockWait])
            .collect();
        assert_eq!(blocked, [40 * MS as u64, 60 * MS as u64, 1000]);
        let longest = threads[1].longest_wait.as_ref().unwrap();
        assert_eq!(
            (longest.ns, longest.call, longest.object, longest.caller),
            (60 * MS as u64, "futex_wait", WORD as u64, 0x400_002)
        );
        assert_eq!(threads[0].calls["futex"], 1);
        let timeline = analysis.timeline.as_ref().unwrap();
        let slices: Vec<(u32, i64, i64, &str, &str, u32)> = timeline
            .slices
            .iter()
            .map(|s| {
                let (start, end) = (s.start_ns / MS, s.end_ns / MS);
                (s.lwpid, start, end, s.category(), s.name.as_str(), s.stack)
            })
            .collect();
        assert_eq!(
            slices,
            [
                (1, 60, 100, "lock wait", "futex_wait 0x7000", 11),
                (2, 140, 200, "lock wait", "futex_wait 0x7000", 12),
            ]
        );
        assert!(timeline.wakes.is_empty());
        assert!(analysis.held_by(1).is_empty() && analysis.holders_of(PID, WORD as u64).is_empty());
    }

    #[test]
    fn a_futex_wake_releases_the_wait_it_ended_whichever_record_comes_first() {
        // The waiter returns before the waker's call does, or after it.
        let wait_first = [
            futex_wait(1, WORD, 100, 50 * MS, 0),
            futex_wake(9, WORD, 101, 2 * MS, 1),
        ];
        let wake_first = [
            futex_wake(9, WORD, 100, 3 * MS, 1),
            futex_wait(1, WORD, 101, 50 * MS, 0),
        ];
        for (records, wake_began, wait_ended) in [(wait_first, 99, 100), (wake_first, 97, 101)] {
            let mut analysis = Analysis::new(true);
            analysis.timeline = Some(Timeline::default());
            for record in &records {
                analysis.record(record);
            }
            let lock = word(&analysis, WORD);
            assert_eq!((lock.acquisitions, lock.wakeups), (1, 1));
            assert_eq!(
                stack_charges(&lock.releasing_stacks),
                [(19, 1, 50 * MS as u64, 9, 1, 50 * MS as u64)]
            );
            let owner = &lock.owners[&9];
            assert_eq!(
                (lock.owners.len(), owner.count, owner.wait_total_ns),
                (1, 1, 50 * MS as u64)
            );
            assert_eq!(
                analysis.timeline.as_ref().unwrap().wakes,
                [Wake {
                    pid: PID,
                    from_lwpid: 9,
                    from_ns: wake_began * MS,
                    to_lwpid: 1,
                    to_ns: wait_ended * MS,
                    stack: 19,
                }]
            );
            assert_eq!(analysis.futex_pairs.len(), 0, "nothing left to pair");
        }
    }

    #[test]
    fn a_futex_wake_that_woke_two_of_three_waiters_releases_two_the_earliest_ending() {
        // Waiter 1 returns before the wake's record comes, 2 and 3 after it.
        let mut analysis = Analysis::new(true);
        analysis.record(&futex_wait(1, WORD, 100, 50 * MS, 0));
        analysis.record(&futex_wake(9, WORD, 101, 10 * MS, 2));
        analysis.record(&futex_wait(2, WORD, 102, 60 * MS, 0));
        analysis.record(&futex_wait(3, WORD, 103, 70 * MS, 0));
        let lock = word(&analysis, WORD);
        assert_eq!((lock.acquisitions, lock.contended), (3, 3));
        assert_eq!(
            stack_charges(&lock.releasing_stacks),
            [(19, 2, 110 * MS as u64, 9, 2, 110 * MS as u64)]
        );
        assert_eq!(lock.owners[&9].count, 2);
        assert_eq!(analysis.futex_pairs.len(), 1, "waiter 3, unpaired");
    }

    #[test]
    fn a_futex_word_whose_waiters_wake_each_other_is_a_lock_one_signalled_an_event() {
        const EVENT: i64 = 0x9000;
        let mut analysis = Analysis::new(true);
        // Threads 1, 2 and 3 take turns at WORD: 1 wakes 2, which wakes 3, which wakes 1.
        // Thread 4 waits on EVENT for 5's ticks, twice.
        for (at, waiter, waker) in [(100, 2, 1), (200, 3, 2), (300, 1, 3)] {
            analysis.record(&futex_wake(waker, WORD, at, 1000, 1));
            analysis.record(&futex_wait(waiter, WORD, at + 1, MS, 0));
            analysis.record(&futex_wake(5, EVENT, at + 2, 1000, 1));
            analysis.record(&futex_wait(4, EVENT, at + 3, 2 * MS, 0));
        }
        let (lock, event) = (word(&analysis, WORD), word(&analysis, EVENT));
        assert_eq!((lock.kind, lock.contended), (LockKind::Futex, 3));
        assert_eq!((event.kind, event.contended), (LockKind::FutexEvent, 3));
        assert!(lock.kind.is_lock() && !event.kind.is_lock());
        assert!(!event.kind.holds_recorded() && event.is_reported());
    }

    #[test]
    fn a_futex_word_only_woken_is_counted_but_not_reported_and_a_mutex_stays_one() {
        let mut analysis = Analysis::new(true);
        // A condvar's word, woken by cond_signal (whose waits are cond_wait calls).
        analysis.record(&futex_wake(9, 0x8000, 10, MS, 1));
        analysis.record(&futex_wake(9, 0x8000, 20, MS, 1));
        analysis.record(&futex_wait(1, WORD, 30, MS, -110));
        // A mutex's word, woken by its unlock before its waiter's lock returns.
        analysis.record(&rec(2, "mutex_lock", Which::Entry, 40, [M1, 3, 0, 0, 0]));
        analysis.record(&futex_wake(3, M1, 50, MS, 1));
        analysis.record(&rec(2, "mutex_lock", Which::Return, 51, [0, 1, 0, 0, 0]));
        let only_woken = word(&analysis, 0x8000);
        assert_eq!(
            (only_woken.kind, only_woken.acquisitions, only_woken.wakeups),
            (LockKind::FutexEvent, 0, 2)
        );
        assert!(!only_woken.is_reported());
        assert!(word(&analysis, WORD).is_reported());
        let mutex = word(&analysis, M1);
        assert_eq!(
            (
                mutex.kind,
                mutex.acquisitions,
                mutex.contended,
                mutex.wakeups
            ),
            (LockKind::Mutex, 1, 1, 1)
        );
        assert!(mutex.is_reported());
    }

    #[test]
    fn futex_pairing_is_forgotten_with_the_stats_the_process_and_in_time() {
        let mut analysis = Analysis::new(true);
        analysis.record(&futex_wait(1, WORD, 100, MS, 0));
        assert_eq!(analysis.futex_pairs.len(), 1);
        analysis.take_lock_stats();
        assert_eq!(analysis.futex_pairs.len(), 0);
        analysis.record(&futex_wake(9, WORD, 200, MS, 1));
        assert_eq!(analysis.futex_pairs.len(), 1);
        analysis.process_exited(PID);
        assert_eq!(analysis.futex_pairs.len(), 0);
        // Kept past a sweep within a second, not past one after it.
        analysis.record(&futex_wait(1, WORD, 300, MS, 0));
        for _ in 0..SWEEP_EVERY {
            analysis.record(&futex_wait(2, 0x9000, 1299, MS, -110));
        }
        assert_eq!(analysis.futex_pairs.len(), 1);
        for _ in 0..SWEEP_EVERY {
            analysis.record(&futex_wait(2, 0x9000, 1301, MS, -110));
        }
        assert_eq!(analysis.futex_pairs.len(), 0);
    }

    #[test]
    fn futex_records_hold_nothing_and_pair_nothing_in_the_live_watch() {
        let mut analysis = Analysis::new(false);
        lock(&mut analysis, 1, M1, 0, 0, false);
        // Thread 2 waits on M1's word and is woken by 1; then both wait on M2's word.
        analysis.record(&futex_wait(2, M1, 10, 5 * MS, 0));
        analysis.record(&futex_wake(1, M1, 11, MS, 1));
        analysis.record(&futex_wait(1, M2, 20, 5 * MS, 0));
        analysis.record(&futex_wake(2, M2, 21, 2 * MS, 1));
        assert_eq!(analysis.held_by(1), [M1 as u64]);
        assert!(analysis.held_by(2).is_empty());
        assert!(analysis.holders_of(PID, M2 as u64).is_empty());
        assert_eq!(analysis.locks().count(), 0);
        assert_eq!(analysis.futex_pairs.len(), 0);
        assert!(analysis.new_deadlocks(60_000 * MS, 1000 * MS).is_empty());
    }

    #[test]
    fn names_are_kept_until_forgotten_with_their_process() {
        let mut analysis = Analysis::new(true);
        let name = |lwpid, name: &str| {
            let kind = SystemKind::ThreadName {
                name: name.to_owned(),
            };
            SystemEvent::of_process(1, 5, lwpid, kind)
        };
        analysis.system_event(&name(5, "server"));
        analysis.system_event(&name(6, "worker"));
        let attach = SystemKind::ProcessAttach {
            exe: "/usr/sbin/server".to_owned(),
            cmdline: Vec::new(),
        };
        analysis.system_event(&SystemEvent::of_process(1, 5, 5, attach));
        analysis.process_exited(5);
        assert_eq!(analysis.thread_name(6), Some("worker"));
        assert_eq!(analysis.process_name(5), Some("server"));
        analysis.forget_names(4);
        assert_eq!(analysis.thread_name(6), Some("worker"));
        analysis.forget_names(5);
        assert_eq!(analysis.thread_name(6), None);
        assert_eq!(analysis.thread_name(5), None);
        assert_eq!(analysis.process_name(5), None);
    }

    #[test]
    fn a_contended_lock_counts_its_wait_hold_and_owner_change() {
        let mut analysis = Analysis::new(true);
        lock(&mut analysis, 1, M1, 0, 0, false);
        analysis.record(&rec(2, "mutex_lock", Which::Entry, 10, [M1, 0, 0, 0, 0]));
        unlock(&mut analysis, 1, M1, 100);
        analysis.record(&rec(2, "mutex_lock", Which::Return, 101, [0, 1, 0, 0, 0]));
        unlock(&mut analysis, 2, M1, 111);
        let stats = analysis.locks().next().unwrap();
        assert_eq!(
            (stats.acquisitions, stats.contended, stats.owner_changes),
            (2, 1, 1)
        );
        assert_eq!(stats.wait.max_ns, 91 * MS as u64);
        assert_eq!(stats.hold.max_ns, 100 * MS as u64);
        assert_eq!(stats.hold.count, 2);
        assert_eq!(stats.callers[&0x400_002].wait_total_ns, 91 * MS as u64);
        let threads = analysis.threads();
        assert_eq!(threads[1].blocked[&BlockKind::LockWait], 91 * MS as u64);
        assert_eq!(threads[1].calls["mutex"], 2);
        assert!(analysis.held_by(2).is_empty());
    }

    #[test]
    fn short_waits_count_as_the_contended_waits_they_were_without_stacks() {
        let mut analysis = Analysis::new(true);
        // One wait written (91 ms), three counted (30 µs in all) on the same mutex and caller.
        lock(&mut analysis, 2, M1, 10, 101, true);
        let counted = SystemKind::ShortWaits {
            call: "mutex_lock".into(),
            object: M1 as u64,
            caller: 0x400_002,
            waits: 3,
            wait_total_ns: 30_000,
            min_wait_ns: 100_000,
        };
        analysis.system_event(&SystemEvent::of_process(200 * MS, PID, 2, counted));
        let stats = analysis.locks().next().unwrap();
        assert_eq!((stats.acquisitions, stats.contended), (4, 4));
        assert_eq!(stats.wait.count, 4);
        assert_eq!(stats.wait.total_ns, 91 * MS as u64 + 30_000);
        assert_eq!(stats.wait.max_ns, 91 * MS as u64);
        assert_eq!(
            (stats.short_waits.count, stats.short_waits.total_ns),
            (3, 30_000)
        );
        assert_eq!(stats.short_waits.below_ns, 100_000);
        assert_eq!(stats.callers[&0x400_002].count, 4);
        assert_eq!(
            stats.callers[&0x400_002].wait_total_ns,
            91 * MS as u64 + 30_000
        );
        // Their mean, 10 µs, is in the histogram's bucket of 2^13 ns.
        assert_eq!(stats.wait.log2[13], 3);
        assert_eq!(
            stack_charges(&stats.waiting_stacks).len(),
            1,
            "the written wait's"
        );
        let by_caller = &stats.short_waits_by_caller[&0x400_002];
        assert_eq!((by_caller.count, by_caller.wait_total_ns), (3, 30_000));
        assert_eq!(
            by_caller.threads[&2],
            ThreadWaits {
                count: 3,
                wait_total_ns: 30_000
            }
        );
        let threads = analysis.threads();
        assert_eq!(threads[0].calls["mutex"], 4);
        assert_eq!(
            threads[0].blocked[&BlockKind::LockWait],
            91 * MS as u64 + 30_000
        );
    }

    #[test]
    fn a_semaphore_wait_that_found_it_at_zero_is_charged_to_its_stack() {
        let mut analysis = Analysis::new(true);
        let mut entry = rec(3, "sema_wait", Which::Entry, 10, [M2, 0, 0, 0, 0]);
        entry.stack = 7;
        analysis.record(&entry);
        analysis.record(&rec(3, "sema_wait", Which::Return, 60, [0; 5]));
        let sem = analysis.locks().next().unwrap();
        assert_eq!((sem.acquisitions, sem.contended), (1, 1));
        assert_eq!(
            stack_charges(&sem.waiting_stacks),
            [(7, 1, 50 * MS as u64, 3, 1, 50 * MS as u64)]
        );
    }

    #[test]
    fn an_owner_read_in_a_pid_namespace_is_the_host_thread_with_that_id_there() {
        let mut analysis = Analysis::new(true);
        let told = |analysis: &mut Analysis, lwpid: u32, ns_lwpid: u32, ms: i64| {
            let kind = SystemKind::ThreadNamespaceId { ns_lwpid };
            analysis.system_event(&SystemEvent::of_process(ms * MS, PID, lwpid, kind));
        };
        // Host thread 2002 (2 in the namespace) waits for M1, which 1 holds: 2001, told only
        // as it is first seen, by its unlock (its lock was not recorded, as under
        // --contended). Host thread 3 of this process does not exist: 3 is no one here.
        told(&mut analysis, 2002, 2, 0);
        analysis.record(&rec(2002, "mutex_lock", Which::Entry, 10, [M1, 1, 0, 0, 0]));
        told(&mut analysis, 2001, 1, 100);
        unlock(&mut analysis, 2001, M1, 100);
        analysis.record(&rec(
            2002,
            "mutex_lock",
            Which::Return,
            101,
            [0, 1, 0, 0, 0],
        ));
        // Then 2001 waits for M1, which 2 holds, told by now.
        analysis.record(&rec(
            2001,
            "mutex_lock",
            Which::Entry,
            200,
            [M1, 2, 0, 0, 0],
        ));
        unlock(&mut analysis, 2002, M1, 300);
        analysis.record(&rec(
            2001,
            "mutex_lock",
            Which::Return,
            301,
            [0, 1, 0, 0, 0],
        ));
        analysis.record(&rec(
            2001,
            "mutex_lock",
            Which::Entry,
            400,
            [M2, 3, 0, 0, 0],
        ));
        analysis.record(&rec(
            2001,
            "mutex_lock",
            Which::Return,
            401,
            [0, 1, 0, 0, 0],
        ));
        let owners = |mutex: i64| -> Vec<(u32, u64)> {
            let lock = analysis
                .locks()
                .find(|l| l.address == mutex as u64)
                .unwrap();
            let mut owners: Vec<(u32, u64)> =
                lock.owners.iter().map(|(&t, o)| (t, o.count)).collect();
            owners.sort_unstable();
            owners
        };
        assert_eq!(owners(M1), [(2001, 1), (2002, 1)]);
        assert_eq!(owners(M2), []);
        assert_eq!(
            (
                analysis.namespace_id(PID, 2001),
                analysis.namespace_id(PID, 2002)
            ),
            (Some(1), Some(2))
        );
    }

    #[test]
    fn the_holder_a_wait_found_is_named_with_where_it_took_the_lock_after_its_unlock() {
        let mut analysis = Analysis::new(true);
        // Thread 1 holds M1 (taken at its caller) when 2 begins to wait; 1 unlocks before 2
        // returns. Thread 3 begins to wait for M2 between 4's taking it and 4's return.
        lock(&mut analysis, 1, M1, 0, 0, false);
        analysis.record(&rec(2, "mutex_lock", Which::Entry, 10, [M1, 1, 0, 0, 0]));
        unlock(&mut analysis, 1, M1, 100);
        analysis.record(&rec(2, "mutex_lock", Which::Return, 101, [0, 1, 0, 0, 0]));
        analysis.record(&rec(4, "mutex_lock", Which::Entry, 200, [M2, 0, 0, 0, 0]));
        analysis.record(&rec(3, "mutex_lock", Which::Entry, 201, [M2, 4, 0, 0, 0]));
        analysis.record(&rec(4, "mutex_lock", Which::Return, 202, [0, 0, 0, 0, 0]));
        unlock(&mut analysis, 4, M2, 300);
        analysis.record(&rec(3, "mutex_lock", Which::Return, 301, [0, 1, 0, 0, 0]));
        // A read-write lock (no owner in its words): its one holder, as the records say.
        analysis.record(&rec(
            5,
            "rw_wrlock",
            Which::Entry,
            400,
            [0x5000, 0, 0, 0, 0],
        ));
        analysis.record(&rec(5, "rw_wrlock", Which::Return, 400, [0, 0, 0, 0, 0]));
        analysis.record(&rec(
            6,
            "rw_rdlock",
            Which::Entry,
            410,
            [0x5000, 0, 0, 0, 0],
        ));
        analysis.record(&rec(
            5,
            "rw_unlock",
            Which::Whole,
            500,
            [0x5000, 0, 0, 0, 0],
        ));
        analysis.record(&rec(6, "rw_rdlock", Which::Return, 501, [0, 1, 1, 0, 0]));
        let owners = |address: i64| {
            let lock = analysis
                .locks()
                .find(|l| l.address == address as u64)
                .unwrap();
            let mut owners: Vec<(u32, u64, u64, u64)> = lock
                .owners
                .iter()
                .map(|(&lwpid, o)| (lwpid, o.count, o.wait_total_ns, o.taken_at))
                .collect();
            owners.sort_unstable();
            owners
        };
        assert_eq!(owners(M1), [(1, 1, 91 * MS as u64, 0x400_001)]);
        assert_eq!(owners(M2), [(4, 1, 100 * MS as u64, 0x400_004)]);
        assert_eq!(owners(0x5000), [(5, 1, 91 * MS as u64, 0x400_005)]);
    }

    #[test]
    fn barriers_and_joins_are_waits_of_their_own_apart_from_locks() {
        let mut analysis = Analysis::new(true);
        analysis.record(&rec(
            1,
            "barrier_wait",
            Which::Entry,
            0,
            [0x6000, 0, 0, 0, 0],
        ));
        analysis.record(&rec(1, "barrier_wait", Which::Return, 30, [0, 0, 0, 0, 0]));
        analysis.record(&rec(2, "thr_join", Which::Entry, 0, [1 << 8, 0, 0, 0, 0]));
        analysis.record(&rec(2, "thr_join", Which::Return, 50, [1 << 8, 0, 0, 0, 0]));
        lock(&mut analysis, 3, M1, 0, 0, false);
        let mut seen: Vec<(LockKind, u64, u64, u64, bool)> = analysis
            .locks()
            .map(|l| {
                let kind = l.kind;
                (
                    kind,
                    l.address,
                    l.acquisitions,
                    l.wait.total_ns,
                    kind.is_lock(),
                )
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(
            seen,
            [
                (LockKind::Mutex, M1 as u64, 1, 0, true),
                (LockKind::Barrier, 0x6000, 1, 30 * MS as u64, false),
                (LockKind::Join, 1 << 8, 1, 50 * MS as u64, false),
            ]
        );
        let threads = analysis.threads();
        assert_eq!(threads[0].blocked[&BlockKind::Barrier], 30 * MS as u64);
        assert_eq!(threads[1].blocked[&BlockKind::Join], 50 * MS as u64);
    }

    #[test]
    fn a_condvar_wait_lets_its_mutex_go_and_takes_it_back() {
        let mut analysis = Analysis::new(true);
        lock(&mut analysis, 1, M1, 0, 0, false);
        analysis.record(&rec(
            1,
            "cond_wait",
            Which::Entry,
            10,
            [0x3000, M1, 0, 0, 0],
        ));
        assert!(analysis.held_by(1).is_empty());
        analysis.record(&rec(1, "cond_wait", Which::Return, 50, [0, 0, 0, 0, 0]));
        assert_eq!(analysis.held_by(1), [M1 as u64]);
        let threads = analysis.threads();
        assert_eq!(threads[0].blocked[&BlockKind::CondWait], 40 * MS as u64);
    }

    #[test]
    fn ab_ba_is_a_deadlock_once_both_have_waited_long_enough() {
        let mut analysis = Analysis::new(false);
        lock(&mut analysis, 1, M1, 0, 0, false);
        lock(&mut analysis, 2, M2, 0, 0, false);
        analysis.record(&rec(1, "mutex_lock", Which::Entry, 10, [M2, 0, 0, 0, 0]));
        analysis.record(&rec(2, "mutex_lock", Which::Entry, 20, [M1, 0, 0, 0, 0]));
        assert!(analysis.new_deadlocks(500 * MS, 1000 * MS).is_empty());
        let found = analysis.new_deadlocks(2000 * MS, 1000 * MS);
        assert_eq!(found.len(), 1, "one cycle, found from either thread");
        let deadlock = &found[0];
        assert!(deadlock.certain);
        let one = deadlock.threads.iter().find(|t| t.lwpid == 1).unwrap();
        assert_eq!(
            (one.waits_for, one.holds.clone()),
            (M2 as u64, vec![M1 as u64])
        );
        assert_eq!(one.call, "pthread_mutex_lock");
        assert!(
            analysis.new_deadlocks(3000 * MS, 1000 * MS).is_empty(),
            "said once"
        );
    }

    #[test]
    fn a_process_is_in_its_v2_cgroup_or_where_a_hybrid_hosts_systemd_put_it() {
        let mut analysis = Analysis::new(true);
        let told = |pid, path: &str, systemd: &str, container: &str| {
            let kind = SystemKind::ProcessCgroup {
                path: path.into(),
                systemd: systemd.into(),
                container: container.into(),
            };
            SystemEvent::of_process(1, pid, 0, kind)
        };
        analysis.system_event(&told(5, "/kubepods/pod1/cri-containerd-3f2a", "", "3f2a"));
        analysis.system_event(&told(6, "/", "/system.slice/mariadb.service", ""));
        analysis.system_event(&told(7, "/", "/", ""));
        let cgroup = |pid| {
            analysis
                .cgroup(pid)
                .map(|c| (c.path.as_str(), c.container.as_str()))
        };
        assert_eq!(
            cgroup(5),
            Some(("/kubepods/pod1/cri-containerd-3f2a", "3f2a"))
        );
        assert_eq!(cgroup(6), Some(("/system.slice/mariadb.service", "")));
        assert_eq!(cgroup(7), Some(("/", "")));
        assert_eq!(cgroup(8), None);
        analysis.forget_names(5);
        assert_eq!(analysis.cgroup(5), None);
    }

    #[test]
    fn a_process_is_known_by_the_executable_it_was_attached_with_or_last_execd() {
        let mut analysis = Analysis::new(true);
        let attach = SystemKind::ProcessAttach {
            exe: "/usr/bin/sh".into(),
            cmdline: vec!["sh".into()],
        };
        analysis.system_event(&SystemEvent::of_process(0, 7, 7, attach));
        let attach = SystemKind::ProcessAttach {
            exe: "/usr/bin/make".into(),
            cmdline: vec!["make".into()],
        };
        analysis.system_event(&SystemEvent::of_process(1, 9, 9, attach));
        let exec = SystemKind::Exec {
            exe: "/usr/bin/cc".into(),
        };
        analysis.system_event(&SystemEvent::of_process(2, 7, 7, exec));
        let executables: Vec<(u32, &str)> = analysis
            .executables()
            .iter()
            .map(|(&pid, exe)| (pid, exe.as_str()))
            .collect();
        assert_eq!(executables, [(7, "/usr/bin/cc"), (9, "/usr/bin/make")]);
    }

    #[test]
    fn a_contended_only_trace_keeps_no_holds_its_unlocks_would_have_ended() {
        let mut analysis = Analysis::new(false);
        let start = SystemKind::Start {
            filter: Vec::new(),
            contended: true,
        };
        analysis.system_event(&SystemEvent::new(0, start));
        // Each waited for the other once; their unlocks, waking nobody, were not recorded.
        for (lwpid, at) in [(1, 0), (2, 10)] {
            analysis.record(&rec(lwpid, "rw_rdlock", Which::Entry, at, [M1, 0, 0, 0, 0]));
            analysis.record(&rec(
                lwpid,
                "rw_rdlock",
                Which::Return,
                at + 5,
                [0, 1, 1, 0, 0],
            ));
        }
        analysis.record(&rec(1, "rw_wrlock", Which::Entry, 100, [M1, 0, 0, 0, 0]));
        analysis.record(&rec(2, "rw_wrlock", Which::Entry, 110, [M1, 0, 0, 0, 0]));
        assert!(analysis.held_by(1).is_empty() && analysis.held_by(2).is_empty());
        assert!(analysis.new_deadlocks(5000 * MS, 1000 * MS).is_empty());
        // A mutex waiter's holder is the owner it found.
        analysis.record(&rec(3, "mutex_lock", Which::Entry, 200, [M2, 4, 0, 0, 0]));
        analysis.record(&rec(
            4,
            "mutex_lock",
            Which::Entry,
            210,
            [M2 + 64, 3, 0, 0, 0],
        ));
        assert_eq!(analysis.new_deadlocks(5000 * MS, 1000 * MS).len(), 1);
    }

    #[test]
    fn locks_let_go_are_swept_and_what_is_held_across_a_sweep_stays_known() {
        let mut analysis = Analysis::new(false);
        // Held from before the sweeps to after them.
        lock(&mut analysis, 1, M1, 0, 0, false);
        // More locks taken and let go than a sweep keeps (3 records each).
        let let_go = i64::from(SWEEP_EVERY) + 1;
        for n in 0..let_go {
            lock(&mut analysis, 2, 0x10_0000 + n * 64, 1, 1, false);
            unlock(&mut analysis, 2, 0x10_0000 + n * 64, 1);
        }
        assert!(analysis.holders.len() <= SWEEP_EVERY as usize);
        assert_eq!(analysis.held_by(1), [M1 as u64]);
        assert!(analysis.held_by(2).is_empty());
        // The AB-BA cycle is found as without the sweeps.
        lock(&mut analysis, 2, M2, 2, 2, false);
        analysis.record(&rec(1, "mutex_lock", Which::Entry, 10, [M2, 0, 0, 0, 0]));
        analysis.record(&rec(2, "mutex_lock", Which::Entry, 20, [M1, 0, 0, 0, 0]));
        let found = analysis.new_deadlocks(2000 * MS, 1000 * MS);
        assert_eq!(found.len(), 1);
        let two = found[0].threads.iter().find(|t| t.lwpid == 2).unwrap();
        assert_eq!(
            (two.waits_for, two.holds.clone()),
            (M1 as u64, vec![M2 as u64])
        );
    }

    #[test]
    fn lock_order_is_read_from_the_records_and_a_trylock_orders_nothing() {
        let mut analysis = Analysis::new(true);
        lock(&mut analysis, 1, M1, 0, 0, false);
        lock(&mut analysis, 1, M2, 1, 1, false);
        unlock(&mut analysis, 1, M2, 2);
        unlock(&mut analysis, 1, M1, 3);
        // Thread 2 holds M2 and tries M1: no edge; relocks M2 under M1: no self-edge.
        lock(&mut analysis, 2, M2, 4, 4, false);
        analysis.record(&rec(2, "mutex_trylock", Which::Whole, 5, [M1, 0, 0, 0, 0]));
        lock(&mut analysis, 2, M2, 6, 6, false);
        assert!(analysis.lock_order().unwrap().inversions().is_empty());
        unlock(&mut analysis, 2, M2, 7);
        unlock(&mut analysis, 2, M1, 8);
        unlock(&mut analysis, 2, M2, 9);
        // Held M2 while locking M1: the inversion, with both witnesses.
        lock(&mut analysis, 3, M2, 10, 10, false);
        lock(&mut analysis, 3, M1, 11, 11, false);
        let found = analysis.lock_order().unwrap().inversions();
        assert_eq!(found.len(), 1);
        let edges: Vec<(u64, u64, u32, i64)> = found[0]
            .edges
            .iter()
            .map(|e| (e.held.lock, e.acquired.lock, e.lwpid, e.time_ns / MS))
            .collect();
        assert_eq!(
            edges,
            [(M1 as u64, M2 as u64, 1, 1), (M2 as u64, M1 as u64, 3, 11)]
        );
        assert_eq!(found[0].edges[1].held.caller, 0x400_003);
        assert!(
            Analysis::new(true)
                .without_lock_order()
                .lock_order()
                .is_none()
        );
    }

    #[test]
    fn an_owner_from_glibc_closes_a_cycle_the_records_cannot() {
        let mut analysis = Analysis::new(false);
        analysis.record(&rec(1, "mutex_lock", Which::Entry, 10, [M2, 2, 0, 0, 0]));
        analysis.record(&rec(2, "mutex_lock", Which::Entry, 10, [M1, 1, 0, 0, 0]));
        let found = analysis.new_deadlocks(2000 * MS, 1000 * MS);
        assert_eq!(found.len(), 1);
        let two = found[0].threads.iter().find(|t| t.lwpid == 2).unwrap();
        assert_eq!((two.holds.clone(), two.locked_at), (vec![M2 as u64], 0));
    }

    #[test]
    fn idle_workers_woken_by_each_other_are_no_deadlock_timed_or_not() {
        const WORKERS: u32 = 4;
        for wait in ["cond_wait", "pthread_cond_clockwait", "cond_timedwait"] {
            let mut analysis = Analysis::new(false);
            // Worker n signals worker n+1's condvar, then waits on its own, as a thread
            // pool's workers hand work on: each condvar's only waker is the worker before.
            for n in 1..=WORKERS {
                let next = 0x3000 + i64::from(n % WORKERS) * 64;
                analysis.record(&rec(n, "cond_signal", Which::Whole, 0, [next, 0, 0, 0, 0]));
            }
            for n in 1..=WORKERS {
                let own = 0x3000 + i64::from(n - 1) * 64;
                analysis.record(&rec(n, wait, Which::Entry, 1, [own, M1, 0, 0, 0]));
            }
            assert!(
                analysis.new_deadlocks(60_000 * MS, 1000 * MS).is_empty(),
                "{wait}"
            );
        }
    }

    #[test]
    fn timed_waits_close_no_cycle() {
        // A lock waited for, or a condvar waited on whose only waker waits for a lock the
        // waiter holds: a cycle, unless the wait is timed (it gives up at its deadline).
        for (wait, object, cycles) in [
            ("mutex_lock", M2, 1),
            ("pthread_mutex_timedlock", M2, 0),
            ("cond_wait", 0x3000, 1),
            ("pthread_cond_clockwait", 0x3000, 0),
        ] {
            let mut analysis = Analysis::new(false);
            analysis.record(&rec(
                2,
                "cond_signal",
                Which::Whole,
                0,
                [0x3000, 0, 0, 0, 0],
            ));
            lock(&mut analysis, 1, M1, 1, 1, false);
            lock(&mut analysis, 2, M2, 1, 1, false);
            analysis.record(&rec(1, wait, Which::Entry, 2, [object, M2 + 64, 0, 0, 0]));
            analysis.record(&rec(2, "mutex_lock", Which::Entry, 3, [M1, 0, 0, 0, 0]));
            let found = analysis.new_deadlocks(60_000 * MS, 1000 * MS);
            assert_eq!(found.len(), cycles, "{wait}");
        }
        // Nor does a timed lock order locks: AB, then BA timed, is no inversion.
        let mut order = Analysis::new(false);
        lock(&mut order, 1, M1, 0, 0, false);
        lock(&mut order, 1, M2, 1, 1, false);
        unlock(&mut order, 1, M2, 2);
        unlock(&mut order, 1, M1, 3);
        lock(&mut order, 2, M2, 4, 4, false);
        order.record(&rec(
            2,
            "pthread_mutex_timedlock",
            Which::Entry,
            5,
            [M1, 0, 0, 0, 0],
        ));
        order.record(&rec(
            2,
            "pthread_mutex_timedlock",
            Which::Return,
            6,
            [0, 0, 0, 0, 0],
        ));
        assert!(order.lock_order().unwrap().inversions().is_empty());
    }

    #[test]
    fn a_condvar_signaled_by_several_threads_waits_for_none_of_them() {
        let mut analysis = Analysis::new(false);
        analysis.record(&rec(
            2,
            "cond_signal",
            Which::Whole,
            0,
            [0x3000, 0, 0, 0, 0],
        ));
        analysis.record(&rec(
            3,
            "cond_signal",
            Which::Whole,
            0,
            [0x3000, 0, 0, 0, 0],
        ));
        lock(&mut analysis, 1, M1, 1, 1, false);
        analysis.record(&rec(1, "cond_wait", Which::Entry, 2, [0x3000, M2, 0, 0, 0]));
        analysis.record(&rec(2, "mutex_lock", Which::Entry, 3, [M1, 0, 0, 0, 0]));
        analysis.record(&rec(3, "mutex_lock", Which::Entry, 3, [M1, 0, 0, 0, 0]));
        assert!(analysis.new_deadlocks(2000 * MS, 1000 * MS).is_empty());
    }

    #[test]
    fn a_cycle_through_a_condvar_is_possible_and_a_join_cycle_certain() {
        let mut analysis = Analysis::new(false);
        analysis.record(&rec(
            2,
            "cond_signal",
            Which::Whole,
            0,
            [0x3000, 0, 0, 0, 0],
        ));
        lock(&mut analysis, 1, M1, 1, 1, false);
        analysis.record(&rec(1, "cond_wait", Which::Entry, 2, [0x3000, M2, 0, 0, 0]));
        analysis.record(&rec(2, "mutex_lock", Which::Entry, 3, [M1, 0, 0, 0, 0]));
        let found = analysis.new_deadlocks(2000 * MS, 1000 * MS);
        assert_eq!(found.len(), 1);
        assert!(!found[0].certain);

        let mut joins = Analysis::new(false);
        // Thread 3 joins 4 while 4 joins 3.
        joins.record(&rec(3, "thr_join", Which::Entry, 0, [4 << 8, 0, 0, 0, 0]));
        joins.record(&rec(4, "thr_join", Which::Entry, 0, [3 << 8, 0, 0, 0, 0]));
        let found = joins.new_deadlocks(2000 * MS, 1000 * MS);
        assert_eq!(found.len(), 1);
        assert!(found[0].certain);
    }
}
