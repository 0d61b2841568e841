//! The futex syscalls as the futex category's programs read them: which syscalls, which of
//! `futex(2)`'s commands wait and which wake, and the event each is recorded as. One
//! definition for the BPF side (which sorts calls) and userspace (which names them).

/// `futex(2)`'s number on the architecture the code runs on.
pub const SYS_FUTEX: u64 = crate::arch::HOST.sys_futex;
/// `futex_waitv(2)`'s number (Linux 5.16), the same on every architecture.
pub const SYS_FUTEX_WAITV: u64 = 449;

/// `op`'s flags, `FUTEX_PRIVATE_FLAG` and `FUTEX_CLOCK_REALTIME`, which are not its command.
pub const OP_FLAGS: u64 = 128 | 256;

/// `futex(2)`'s commands (`op` without [`OP_FLAGS`]), as `linux/futex.h` numbers them.
pub mod command {
    /// Sleeps while the word holds `val`.
    pub const WAIT: u64 = 0;
    /// Wakes up to `val` waiters.
    pub const WAKE: u64 = 1;
    /// Wakes `val` waiters and moves the rest to a second word.
    pub const REQUEUE: u64 = 3;
    /// `REQUEUE` if the word still holds `val3`.
    pub const CMP_REQUEUE: u64 = 4;
    /// Changes a second word and wakes waiters on both.
    pub const WAKE_OP: u64 = 5;
    /// Takes a priority-inheritance lock, sleeping while another thread holds it.
    pub const LOCK_PI: u64 = 6;
    /// Lets a priority-inheritance lock go, to its first waiter if it has one.
    pub const UNLOCK_PI: u64 = 7;
    /// `WAIT` for the wakes whose bits meet `val3`.
    pub const WAIT_BITSET: u64 = 9;
    /// `WAKE` of the waiters whose bits meet `val3`.
    pub const WAKE_BITSET: u64 = 10;
    /// Waits to be requeued to, and take, a priority-inheritance lock.
    pub const WAIT_REQUEUE_PI: u64 = 11;
    /// Requeues waiters to a priority-inheritance lock.
    pub const CMP_REQUEUE_PI: u64 = 12;
    /// `LOCK_PI` on the clock the flags name (Linux 5.14).
    pub const LOCK_PI2: u64 = 13;
}

/// `futex_wait`'s event2: a wait of `futex(2)` (`WAIT`, `WAIT_BITSET`, the PI locks,
/// `WAIT_REQUEUE_PI`).
pub const WAIT_EVENT2: u16 = 1;
/// `futex_wake`'s event2: a wake of `futex(2)` that woke (or requeued, or handed a PI lock
/// to) a waiter.
pub const WAKE_EVENT2: u16 = 2;
/// `futex_waitv`'s event2: a wait of `futex_waitv(2)` on several words.
pub const WAITV_EVENT2: u16 = 3;

/// The event a `futex(2)` call of `op` is recorded as, if any: [`WAIT_EVENT2`],
/// [`WAKE_EVENT2`], or none (`TRYLOCK_PI` never sleeps, `FUTEX_FD` is gone).
#[inline(always)]
#[allow(
    clippy::inline_always,
    reason = "the BPF side has no calls to spare: inlined, as its verifier likes"
)]
pub const fn event_of_op(op: u64) -> Option<u16> {
    match op & !OP_FLAGS {
        command::WAIT
        | command::WAIT_BITSET
        | command::LOCK_PI
        | command::LOCK_PI2
        | command::WAIT_REQUEUE_PI => Some(WAIT_EVENT2),
        command::WAKE
        | command::WAKE_BITSET
        | command::WAKE_OP
        | command::REQUEUE
        | command::CMP_REQUEUE
        | command::CMP_REQUEUE_PI
        | command::UNLOCK_PI => Some(WAKE_EVENT2),
        _ => None,
    }
}

/// The event a call of syscall `nr` with `op` is recorded as, if any.
#[inline(always)]
#[allow(
    clippy::inline_always,
    reason = "the BPF side has no calls to spare: inlined, as its verifier likes"
)]
pub const fn event_of_call(nr: u64, op: u64) -> Option<u16> {
    match nr {
        SYS_FUTEX => event_of_op(op),
        SYS_FUTEX_WAITV => Some(WAITV_EVENT2),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_and_wakes_are_told_apart_with_any_flags() {
        for flags in [0, 128, 256, 384] {
            for wait in [0, 6, 9, 11, 13] {
                assert_eq!(event_of_op(wait | flags), Some(WAIT_EVENT2));
            }
            for wake in [1, 3, 4, 5, 7, 10, 12] {
                assert_eq!(event_of_op(wake | flags), Some(WAKE_EVENT2));
            }
            for neither in [2, 8, 14] {
                assert_eq!(event_of_op(neither | flags), None);
            }
        }
        assert_eq!(event_of_call(SYS_FUTEX_WAITV, 0), Some(WAITV_EVENT2));
        assert_eq!(event_of_call(SYS_FUTEX, 9 | 128), Some(WAIT_EVENT2));
        assert_eq!(event_of_call(0, 0), None);
    }
}
