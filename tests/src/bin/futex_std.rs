//! Waits of Rust's own locks, `std::sync::Mutex` and `Condvar`, each certain: std waits on
//! them with the futex syscall itself, in no pthread call.
//!
//! Usage: `futex_std ROUNDS WAITERS HOLD_MS`. Prints `mutex=ADDR mutex_size=N condvar=ADDR
//! condvar_size=N` and waits for a line on stdin, so that tracers can attach. Each round then
//! has three phases, each with WAITERS new threads, which the main thread sees asleep in a
//! futex wait on the mutex's or the condition variable's bytes (`/proc/self/task/TID/stat`
//! says S, its `syscall` names the futex syscall and the word) before it ends that wait:
//!
//! - the mutex: the main thread holds the mutex while every waiter locks it
//!   (`lock_held_mutex`), sleeps HOLD_MS and unlocks it; each unlock wakes the next waiter.
//! - `notify_one`: each waiter waits on the condition variable for a permit (`wait_for_permit`),
//!   one after another; then, for each, the main thread adds a permit and notifies one.
//! - `notify_all`: the waiters wait likewise; the main thread, holding the mutex, adds a permit
//!   for each and notifies all, sees each woken waiter asleep again, in the mutex's wait that
//!   takes the mutex back, sleeps HOLD_MS and unlocks it.
//!
//! So every futex wait of the waiters blocks, and the main thread counts each: printed at the
//! end as `mutex_waits=N condvar_waits=N`.

use std::{
    io::BufRead,
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicU32, Ordering},
    },
    thread::{self, JoinHandle},
    time::Duration,
};

/// The mutex, holding the permits that the condition variable's waiters take.
static LOCK: Mutex<u32> = Mutex::new(0);
static CONDVAR: Condvar = Condvar::new();
/// Permits taken: how many condition variable waiters are done.
static PERMITS_TAKEN: AtomicU32 = AtomicU32::new(0);

/// How often the main thread looks at a thread it waits for.
const POLL: Duration = Duration::from_millis(1);

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|arg| arg.parse().expect("a number"))
        .collect();
    let [rounds, waiters, hold_ms] = args[..] else {
        eprintln!("usage: futex_std ROUNDS WAITERS HOLD_MS");
        std::process::exit(2);
    };
    let hold = Duration::from_millis(hold_ms);
    println!(
        "mutex={} mutex_size={} condvar={} condvar_size={}",
        Bytes::of(&LOCK).start,
        size_of_val(&LOCK),
        Bytes::of(&CONDVAR).start,
        size_of_val(&CONDVAR),
    );
    std::io::stdin().lock().lines().next();
    let mut seen = Seen::default();
    for _ in 0..rounds {
        mutex_phase(waiters, hold, &mut seen);
        notify_one_phase(waiters, &mut seen);
        notify_all_phase(waiters, hold, &mut seen);
    }
    println!(
        "mutex_waits={} condvar_waits={}",
        seen.mutex_waits, seen.condvar_waits
    );
}

/// The blocked waits the main thread saw, on each object.
#[derive(Default)]
struct Seen {
    mutex_waits: u64,
    condvar_waits: u64,
}

fn mutex_phase(waiters: u64, hold: Duration, seen: &mut Seen) {
    let held = LOCK.lock().unwrap();
    let threads: Vec<Waiter> = (0..waiters)
        .map(|_| Waiter::start(lock_held_mutex))
        .collect();
    for waiter in &threads {
        waiter.wait_until_asleep_on(Bytes::of(&LOCK));
        seen.mutex_waits += 1;
    }
    thread::sleep(hold);
    drop(held);
    threads.into_iter().for_each(Waiter::join);
}

fn notify_one_phase(waiters: u64, seen: &mut Seen) {
    let threads = condvar_waiters(waiters, seen);
    for _ in &threads {
        let taken = PERMITS_TAKEN.load(Ordering::SeqCst);
        // Unlocked before the notification, so that the waiter woken takes the mutex at once.
        *LOCK.lock().unwrap() += 1;
        CONDVAR.notify_one();
        while PERMITS_TAKEN.load(Ordering::SeqCst) == taken {
            thread::sleep(POLL);
        }
    }
    threads.into_iter().for_each(Waiter::join);
}

fn notify_all_phase(waiters: u64, hold: Duration, seen: &mut Seen) {
    let threads = condvar_waiters(waiters, seen);
    let mut permits = LOCK.lock().unwrap();
    *permits += threads.len() as u32;
    CONDVAR.notify_all();
    for waiter in &threads {
        waiter.wait_until_asleep_on(Bytes::of(&LOCK));
        seen.mutex_waits += 1;
    }
    thread::sleep(hold);
    drop(permits);
    threads.into_iter().for_each(Waiter::join);
}

/// `waiters` threads asleep on the condition variable, started one after another so that none
/// finds the mutex held by another.
fn condvar_waiters(waiters: u64, seen: &mut Seen) -> Vec<Waiter> {
    (0..waiters)
        .map(|_| {
            let waiter = Waiter::start(wait_for_permit);
            waiter.wait_until_asleep_on(Bytes::of(&CONDVAR));
            seen.condvar_waits += 1;
            waiter
        })
        .collect()
}

#[inline(never)]
fn lock_held_mutex() {
    drop(LOCK.lock().unwrap());
}

#[inline(never)]
fn wait_for_permit() {
    let mut permits = LOCK.lock().unwrap();
    while *permits == 0 {
        permits = CONDVAR.wait(permits).unwrap();
    }
    *permits -= 1;
    drop(permits);
    PERMITS_TAKEN.fetch_add(1, Ordering::SeqCst);
}

/// A thread running `work`, and its thread id once it has told it.
struct Waiter {
    tid: Arc<AtomicU32>,
    thread: JoinHandle<()>,
}

impl Waiter {
    fn start(work: fn()) -> Waiter {
        let tid = Arc::new(AtomicU32::new(0));
        let told = Arc::clone(&tid);
        let thread = thread::spawn(move || {
            told.store(own_tid(), Ordering::SeqCst);
            work();
        });
        Waiter { tid, thread }
    }

    fn wait_until_asleep_on(&self, object: Bytes) {
        loop {
            let tid = self.tid.load(Ordering::SeqCst);
            if tid != 0 && asleep_in_futex_on(tid, object) {
                return;
            }
            thread::sleep(POLL);
        }
    }

    fn join(self) {
        self.thread.join().unwrap();
    }
}

/// The addresses of a static's bytes.
#[derive(Clone, Copy)]
struct Bytes {
    start: usize,
    end: usize,
}

impl Bytes {
    fn of<T>(object: &'static T) -> Bytes {
        let start = std::ptr::from_ref(object).addr();
        Bytes {
            start,
            end: start + size_of::<T>(),
        }
    }
}

/// The calling thread's id (`/proc/thread-self` is `PID/task/TID`).
fn own_tid() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").unwrap();
    link.file_name().unwrap().to_str().unwrap().parse().unwrap()
}

/// Whether thread `tid` of this process is asleep in a futex syscall on a word of `object`: a
/// wait seen so is blocked (one that returns at once, EAGAIN, never sleeps).
fn asleep_in_futex_on(tid: u32, object: Bytes) -> bool {
    let task = format!("/proc/self/task/{tid}");
    let Ok(stat) = std::fs::read_to_string(format!("{task}/stat")) else {
        return false;
    };
    // The state follows the command's closing parenthesis.
    let asleep = stat
        .rfind(')')
        .is_some_and(|end| stat[end + 1..].starts_with(" S"));
    let Ok(syscall) = std::fs::read_to_string(format!("{task}/syscall")) else {
        return false;
    };
    let mut fields = syscall.split_whitespace();
    let number = fields.next().and_then(|n| n.parse::<i64>().ok());
    let word = fields
        .next()
        .and_then(|a| usize::from_str_radix(a.trim_start_matches("0x"), 16).ok());
    asleep
        && number == Some(libc::SYS_futex)
        && word.is_some_and(|word| (object.start..object.end).contains(&word))
}
