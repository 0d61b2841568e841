//! Uncontended lock+unlock pairs of a `std::sync::Mutex` on one thread, timed inside so that
//! start-up and attach are not counted. None reaches the futex syscall: std's mutex takes a
//! free lock with one atomic compare-exchange and frees it with one swap.
//! Usage: std_mutex PAIRS
//! Prints "ns_per_op=X ops=N": wall time per lock+unlock pair.

use std::{hint::black_box, sync::Mutex, time::Instant};

fn main() {
    let pairs: u32 = std::env::args()
        .nth(1)
        .and_then(|pairs| pairs.parse().ok())
        .unwrap_or(10_000_000);
    let lock = Mutex::new(0_u32);
    let start = Instant::now();
    for _ in 0..pairs {
        *black_box(&lock)
            .lock()
            .expect("never poisoned: nothing panics holding it") += 1;
    }
    let ns = start.elapsed().as_nanos() as f64;
    println!("ns_per_op={:.1} ops={pairs}", ns / f64::from(pairs));
}
