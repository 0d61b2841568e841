/* Contention certain by construction, on two mutexes, a semaphore and a read-write lock, for
 * `--contended`.
 * Usage: contention ROUNDS HOLD_MS WAITERS [WORK [GATE]]
 * Each round: the main thread locks mutex `first` or `second` (alternately), lets the WAITERS
 * threads go, keeps it HOLD_MS and unlocks it; each waiter locks it (line WAIT_MUTEX), blocks
 * until then and unlocks it, then waits on `sem` (line WAIT_SEM, value 0); once every waiter
 * waits, the main thread sleeps HOLD_MS and posts once per waiter. Then the main thread
 * write-locks `rw`, lets the waiters read-lock it (line WAIT_RDLOCK), keeps it HOLD_MS and
 * unlocks it; then read-locks it, lets them write-lock it (line WAIT_WRLOCK) and keeps it
 * HOLD_MS: the first writer waits for it, the others for the writer before them. Every waiter's
 * lock, sem_wait, rdlock and wrlock therefore blocks: ROUNDS * WAITERS of each (the main thread
 * lets a lock go only once every waiter is asleep in its futex wait). The next round
 * starts once every waiter is through. Between rounds each thread makes WORK uncontended
 * lock+unlock pairs on a mutex of its own, post+wait pairs on a semaphore of its own, and
 * rdlock+unlock and wrlock+unlock pairs on a read-write lock of its own (default 0). With GATE
 * 1, it starts only once a line is read from stdin (after printing its first line), so that
 * tracers can attach; with GATE 2, its threads also wait after the last round, alive, until a
 * second line is read (so that a tracer can read what it needs of them while they live; the
 * time printed then includes the wait).
 * Prints "first=ADDR second=ADDR sem=ADDR rw=ADDR" first, then "ns_per_op=X ops=N": wall time
 * of the whole run per round. The threads wait for one another with atomics and usleep, not
 * with traced calls. */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "asleep.h"

static pthread_mutex_t first = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t second = PTHREAD_MUTEX_INITIALIZER;
static sem_t sem;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static atomic_int round_open, waiting, done, read_open, read_done, write_open, write_done;
static atomic_int let_go = 1;
static int rounds, hold_ms;
static long waiters;
/* Each waiter's thread id, for the main thread to see it asleep. */
static volatile pid_t waiter_tids[16];
static long work;

/* Uncontended calls: a mutex and a semaphore of the caller's own. */
static void uncontended(void) {
    pthread_mutex_t own = PTHREAD_MUTEX_INITIALIZER;
    pthread_rwlock_t own_rw = PTHREAD_RWLOCK_INITIALIZER;
    sem_t own_sem;
    sem_init(&own_sem, 0, 0);
    for (long i = 0; i < work; i++) {
        pthread_mutex_lock(&own);
        pthread_mutex_unlock(&own);
        sem_post(&own_sem);
        sem_wait(&own_sem);
        pthread_rwlock_rdlock(&own_rw);
        pthread_rwlock_unlock(&own_rw);
        pthread_rwlock_wrlock(&own_rw);
        pthread_rwlock_unlock(&own_rw);
    }
    sem_destroy(&own_sem);
}

static pthread_mutex_t *of_round(int r) { return r % 2 ? &first : &second; }

static void *waiter(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "waiter-%ld", (long)arg);
    pthread_setname_np(pthread_self(), name);
    waiter_tids[(long)arg - 1] = (pid_t)syscall(SYS_gettid);
    for (int r = 1; r <= rounds; r++) {
        while (atomic_load(&round_open) < r) usleep(100);
        pthread_mutex_lock(of_round(r)); /* WAIT_MUTEX */
        pthread_mutex_unlock(of_round(r));
        atomic_fetch_add(&waiting, 1);
        sem_wait(&sem); /* WAIT_SEM */
        atomic_fetch_add(&done, 1);
        while (atomic_load(&read_open) < r) usleep(100);
        pthread_rwlock_rdlock(&rw); /* WAIT_RDLOCK */
        pthread_rwlock_unlock(&rw);
        atomic_fetch_add(&read_done, 1);
        while (atomic_load(&write_open) < r) usleep(100);
        pthread_rwlock_wrlock(&rw); /* WAIT_WRLOCK */
        pthread_rwlock_unlock(&rw);
        atomic_fetch_add(&write_done, 1);
        uncontended();
    }
    while (!atomic_load(&let_go)) usleep(100);
    return NULL;
}

int main(int argc, char **argv) {
    rounds = argc > 1 ? atoi(argv[1]) : 3;
    hold_ms = argc > 2 ? atoi(argv[2]) : 50;
    waiters = argc > 3 ? atol(argv[3]) : 2;
    work = argc > 4 ? atol(argv[4]) : 0;
    int gate = argc > 5 ? atoi(argv[5]) : 0;
    pthread_t ids[16];
    struct timespec start, end;
    if (rounds < 1 || waiters < 1 || waiters > 16) return 2;
    sem_init(&sem, 0, 0);
    printf("first=%lu second=%lu sem=%lu rw=%lu\n", (unsigned long)&first,
           (unsigned long)&second, (unsigned long)&sem, (unsigned long)&rw);
    fflush(stdout);
    char line[16];
    if (gate && !fgets(line, sizeof line, stdin)) return 3;
    if (gate > 1) atomic_store(&let_go, 0);
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long t = 0; t < waiters; t++) pthread_create(&ids[t], NULL, waiter, (void *)(t + 1));
    for (int r = 1; r <= rounds; r++) {
        pthread_mutex_lock(of_round(r)); /* HOLD */
        atomic_store(&round_open, r);
        until_asleep_in_futex(waiter_tids, waiters);
        usleep(hold_ms * 1000);
        pthread_mutex_unlock(of_round(r));
        while (atomic_load(&waiting) < r * waiters) usleep(100);
        until_asleep_in_futex(waiter_tids, waiters);
        usleep(hold_ms * 1000);
        for (long t = 0; t < waiters; t++) sem_post(&sem); /* POST */
        while (atomic_load(&done) < r * waiters) usleep(100);
        pthread_rwlock_wrlock(&rw); /* HOLD_WRITE */
        atomic_store(&read_open, r);
        until_asleep_in_futex(waiter_tids, waiters);
        usleep(hold_ms * 1000);
        pthread_rwlock_unlock(&rw);
        while (atomic_load(&read_done) < r * waiters) usleep(100);
        pthread_rwlock_rdlock(&rw); /* HOLD_READ */
        atomic_store(&write_open, r);
        until_asleep_in_futex(waiter_tids, waiters);
        usleep(hold_ms * 1000);
        pthread_rwlock_unlock(&rw);
        while (atomic_load(&write_done) < r * waiters) usleep(100);
        uncontended();
    }
    if (gate > 1) {
        if (!fgets(line, sizeof line, stdin)) return 3;
        atomic_store(&let_go, 1);
    }
    for (long t = 0; t < waiters; t++) pthread_join(ids[t], NULL);
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("ns_per_op=%.1f ops=%d\n", ns / rounds, rounds);
    return 0;
}
