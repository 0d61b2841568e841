/* Contention known by construction, for `thrtrace-bpf report` (built with -g: callers have
 * file:line). Usage: lock_story ROUNDS HOLD_MS WAITERS
 * 1. ROUNDS rounds on `contended`: the main thread locks it (line HOLD), lets the WAITERS
 *    threads ("waiter-1"...) go, keeps it HOLD_MS and unlocks it; each waiter locks it (line
 *    WAIT), blocks until then, unlocks it; the next round starts once every waiter is done.
 * 2. A recursive mutex locked three deep (line RLOCK) and unlocked three times.
 * 3. Two reader threads ("reader-1", "reader-2") read-lock `rw` and keep it HOLD_MS while the
 *    main thread write-locks it (line WRLOCK) and waits for them.
 * Prints "contended=ADDR recursive=ADDR rw=ADDR" first, then "done". The threads wait for one
 * another with atomics and usleep, not with traced calls. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t contended = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t recursive;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static atomic_int round_open, done, readers_in;
static int rounds, hold_ms;

static void *waiter(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "waiter-%ld", (long)arg);
    pthread_setname_np(pthread_self(), name);
    for (int r = 1; r <= rounds; r++) {
        while (atomic_load(&round_open) < r) usleep(100);
        pthread_mutex_lock(&contended); /* WAIT */
        pthread_mutex_unlock(&contended);
        atomic_fetch_add(&done, 1);
    }
    return NULL;
}

static void *reader(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "reader-%ld", (long)arg);
    pthread_setname_np(pthread_self(), name);
    pthread_rwlock_rdlock(&rw);
    atomic_fetch_add(&readers_in, 1);
    usleep(hold_ms * 1000);
    pthread_rwlock_unlock(&rw);
    return NULL;
}

int main(int argc, char **argv) {
    rounds = argc > 1 ? atoi(argv[1]) : 3;
    hold_ms = argc > 2 ? atoi(argv[2]) : 100;
    long waiters = argc > 3 ? atol(argv[3]) : 2;
    pthread_t ids[16];
    pthread_mutexattr_t attr;
    if (waiters < 1 || waiters > 16) return 2;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&recursive, &attr);
    printf("contended=%lu recursive=%lu rw=%lu\n", (unsigned long)&contended,
           (unsigned long)&recursive, (unsigned long)&rw);
    fflush(stdout);
    /* Let a tracer attach first (it is told the pid by the line above). */
    if (getenv("LOCK_STORY_WAIT")) {
        char line[8];
        if (!fgets(line, sizeof line, stdin)) return 1;
    }

    for (long w = 0; w < waiters; w++) pthread_create(&ids[w], NULL, waiter, (void *)(w + 1));
    for (int r = 1; r <= rounds; r++) {
        pthread_mutex_lock(&contended); /* HOLD */
        atomic_store(&round_open, r);
        usleep(hold_ms * 1000);
        pthread_mutex_unlock(&contended);
        while (atomic_load(&done) < r * waiters) usleep(100);
    }
    for (long w = 0; w < waiters; w++) pthread_join(ids[w], NULL);

    for (int i = 0; i < 3; i++) pthread_mutex_lock(&recursive); /* RLOCK */
    for (int i = 0; i < 3; i++) pthread_mutex_unlock(&recursive);

    for (long r = 0; r < 2; r++) pthread_create(&ids[r], NULL, reader, (void *)(r + 1));
    while (atomic_load(&readers_in) < 2) usleep(100);
    pthread_rwlock_wrlock(&rw); /* WRLOCK */
    pthread_rwlock_unlock(&rw);
    for (long r = 0; r < 2; r++) pthread_join(ids[r], NULL);
    printf("done\n");
    return 0;
}
