/* Two futex words in one global struct, one used as a lock and one as an event, each with the
 * futex syscall itself, and a pthread mutex beside them; each wait certain.
 * Usage: futex_uses ROUNDS HOLD_MS TICKS TICK_MS
 * Prints "shared=ADDR lock=ADDR tick=ADDR mutex=ADDR" and waits for a line on stdin, so that
 * tracers can attach.
 * The lock (`shared[1].lock`, a three-state lock: 0 free, 1 held, 2 held with waiters) is taken by
 * three threads in ROUNDS rounds. In round r, thread r % 3 takes it, waits until the other two
 * are asleep in their futex waits on it, holds it HOLD_MS more and lets it go, waking one; that
 * one takes it and lets it go, waking the other, which takes it and lets it go (its wake wakes
 * none). So each round has two waits that block and return 0, and two wakes that wake one, made
 * by the thread that held the lock before: three threads that take turns.
 * Then the main thread locks the mutex (`shared[1].mutex`), waits until the three threads are
 * asleep in its lock, holds it HOLD_MS more and unlocks it: three contended locks.
 * The event (`shared[1].tick`, a count) is waited on by a fourth thread for each of TICKS ticks,
 * and ticked by a fifth: once the waiter is asleep in its wait, it sleeps TICK_MS, plus a share
 * of twice the time the lock's rounds took, adds one and wakes it. So the event is waited on
 * longer in all than the lock, where two threads at most wait at once, however slow the
 * machine. So TICKS waits block and return 0, each ended by one of TICKS wakes, all by a
 * thread that never waits on the word. The lock's rounds run first, then the ticks.
 * Exits 1 if any call does not do what is said here. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "asleep.h"

#define LOCKERS 3

struct shared {
    long padding;
    _Atomic unsigned lock;
    _Atomic unsigned tick;
    pthread_mutex_t mutex;
};

/* The second of two: its words' names go through an array's element and a member. */
struct shared shared[2] = {{.mutex = PTHREAD_MUTEX_INITIALIZER}, {.mutex = PTHREAD_MUTEX_INITIALIZER}};
static struct shared *const s = &shared[1];

static _Atomic pid_t locker_tids[LOCKERS];
static _Atomic pid_t waiter_tid;
static _Atomic long round_now = -1;
static _Atomic long held_in_round = -1;
static _Atomic long rounds_done;
static _Atomic int mutex_held;
static long rounds, hold_ms, ticks, tick_ms;
/* What each tick adds to TICK_MS: its share of twice the lock's rounds. */
static long tick_extra_us;

static long futex(_Atomic unsigned *word, int op, unsigned value) {
    return syscall(SYS_futex, word, op, value, NULL, NULL, 0);
}

static void fail(const char *what) {
    fprintf(stderr, "futex_uses: %s (errno %d)\n", what, errno);
    exit(1);
}

static void lock(void) {
    unsigned free = 0;
    if (atomic_compare_exchange_strong(&s->lock, &free, 1)) return;
    while (atomic_exchange(&s->lock, 2) != 0) {
        if (futex(&s->lock, FUTEX_WAIT_PRIVATE, 2) != 0 && errno != EAGAIN)
            fail("a wait on the lock failed");
    }
}

/* Lets the lock go; returns how many waiters the wake woke (0 when there was no wake). */
static long unlock(void) {
    if (atomic_fetch_sub(&s->lock, 1) == 1) return 0;
    s->lock = 0;
    long woken = futex(&s->lock, FUTEX_WAKE_PRIVATE, 1);
    if (woken < 0) fail("a wake of the lock failed");
    return woken;
}

static void *locker(void *arg) {
    long me = (long)arg;
    locker_tids[me] = (pid_t)syscall(SYS_gettid);
    for (long r = 0; r < rounds; r++) {
        while (round_now != r) usleep(1000);
        if (r % LOCKERS == me) {
            lock();
            held_in_round = r;
            for (long other = 0; other < LOCKERS; other++) {
                while (other != me && !asleep_in(locker_tids[other], SYS_futex, &s->lock))
                    usleep(1000);
            }
            usleep(hold_ms * 1000);
            if (unlock() != 1) fail("the holder's wake did not wake one");
        } else {
            while (held_in_round != r) usleep(1000);
            lock();
            long woken = unlock();
            /* The first woken wakes the other waiter; the last wakes none. */
            if (woken > 1) fail("a wake woke more than one");
        }
        rounds_done++;
    }
    while (!mutex_held) usleep(1000);
    pthread_mutex_lock(&s->mutex);
    pthread_mutex_unlock(&s->mutex);
    return NULL;
}

static void *tick_waiter(void *arg) {
    (void)arg;
    waiter_tid = (pid_t)syscall(SYS_gettid);
    for (unsigned t = 1; t <= ticks; t++) {
        while (s->tick < t) {
            if (futex(&s->tick, FUTEX_WAIT_PRIVATE, t - 1) != 0 && errno != EAGAIN)
                fail("a wait for a tick failed");
        }
    }
    return NULL;
}

static void *ticker(void *arg) {
    (void)arg;
    for (long t = 1; t <= ticks; t++) {
        while (!waiter_tid || !asleep_in(waiter_tid, SYS_futex, &s->tick)) usleep(1000);
        usleep(tick_ms * 1000 + tick_extra_us);
        s->tick = t;
        if (futex(&s->tick, FUTEX_WAKE_PRIVATE, 1) != 1) fail("a tick did not wake one");
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: futex_uses ROUNDS HOLD_MS TICKS TICK_MS\n");
        return 2;
    }
    rounds = atol(argv[1]);
    hold_ms = atol(argv[2]);
    ticks = atol(argv[3]);
    tick_ms = atol(argv[4]);
    alarm(120);
    printf("shared=%lu lock=%lu tick=%lu mutex=%lu\n", (unsigned long)s,
           (unsigned long)&s->lock, (unsigned long)&s->tick, (unsigned long)&s->mutex);
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return 1;
    pthread_t threads[LOCKERS + 2];
    for (long i = 0; i < LOCKERS; i++) pthread_create(&threads[i], NULL, locker, (void *)i);
    struct timespec began, ended;
    clock_gettime(CLOCK_MONOTONIC, &began);
    for (long r = 0; r < rounds; r++) {
        round_now = r;
        while (rounds_done != (r + 1) * LOCKERS) usleep(1000);
    }
    clock_gettime(CLOCK_MONOTONIC, &ended);
    long rounds_us = (ended.tv_sec - began.tv_sec) * 1000000 + (ended.tv_nsec - began.tv_nsec) / 1000;
    tick_extra_us = 2 * rounds_us / (ticks > 0 ? ticks : 1) + 1;
    pthread_mutex_lock(&s->mutex);
    mutex_held = 1;
    for (long i = 0; i < LOCKERS; i++)
        while (!asleep_in(locker_tids[i], SYS_futex, &s->mutex)) usleep(1000);
    usleep(hold_ms * 1000);
    pthread_mutex_unlock(&s->mutex);
    pthread_create(&threads[LOCKERS], NULL, tick_waiter, NULL);
    pthread_create(&threads[LOCKERS + 1], NULL, ticker, NULL);
    for (long i = 0; i < LOCKERS + 2; i++) pthread_join(threads[i], NULL);
    printf("done\n");
    fflush(stdout);
    return 0;
}
