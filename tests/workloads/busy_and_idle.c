/* Lock contention beside idle threads that wait longer, for `report` and `top`: the contended
 * lock must come first.
 * Usage: busy_and_idle IDLERS LOCKERS ROUNDS HOLD_MS
 * IDLERS threads ("idler-N") wait on condvar `work_ready` (line IDLE) under mutex `queue` until
 * the main thread has work for them, which it has only at the end: each waits about the whole
 * run. Meanwhile, ROUNDS times, the main thread locks mutex `hot` (line HOLD), lets the LOCKERS
 * threads ("locker-N") go, keeps it HOLD_MS and unlocks it; each locker locks it (line
 * CONTEND), blocks until then and unlocks it. Then the main thread broadcasts `work_ready` once
 * (line WAKE) and joins every thread.
 * `hot`: ROUNDS * (LOCKERS + 1) acquisitions, ROUNDS * LOCKERS of them blocked, about HOLD_MS
 * each; `work_ready`: IDLERS waits of about ROUNDS * HOLD_MS each (an idler counts itself with
 * `queue` held, which it lets go only inside its wait; the main thread takes `queue` to
 * broadcast), one broadcast. With IDLERS at least LOCKERS, the idle waits last longer in total.
 * Prints "ready hot=ADDR work_ready=ADDR" first, then "done". The threads wait for one another
 * with atomics and usleep, not with traced calls, but for the idlers' wait. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_THREADS 16

static pthread_mutex_t hot = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t queue = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_ready = PTHREAD_COND_INITIALIZER;
static int work, rounds;
static atomic_int idle, round_open, done;

static void *idler(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "idler-%ld", (long)arg);
    pthread_setname_np(pthread_self(), name);
    pthread_mutex_lock(&queue);
    atomic_fetch_add(&idle, 1);
    while (!work) pthread_cond_wait(&work_ready, &queue); /* IDLE */
    pthread_mutex_unlock(&queue);
    return NULL;
}

static void *locker(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "locker-%ld", (long)arg);
    pthread_setname_np(pthread_self(), name);
    for (int r = 1; r <= rounds; r++) {
        while (atomic_load(&round_open) < r) usleep(100);
        pthread_mutex_lock(&hot); /* CONTEND */
        pthread_mutex_unlock(&hot);
        atomic_fetch_add(&done, 1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    long idlers = atol(argv[1]), lockers = atol(argv[2]);
    rounds = atoi(argv[3]);
    int hold_ms = atoi(argv[4]);
    if (idlers < 1 || lockers < 1 || idlers + lockers > MAX_THREADS || rounds < 1) return 2;
    pthread_t ids[MAX_THREADS];
    printf("ready hot=%lu work_ready=%lu\n", (unsigned long)&hot, (unsigned long)&work_ready);
    fflush(stdout);
    for (long i = 0; i < idlers; i++) pthread_create(&ids[i], NULL, idler, (void *)(i + 1));
    while (atomic_load(&idle) < idlers) usleep(100);
    for (long i = 0; i < lockers; i++)
        pthread_create(&ids[idlers + i], NULL, locker, (void *)(i + 1));
    for (int r = 1; r <= rounds; r++) {
        pthread_mutex_lock(&hot); /* HOLD */
        atomic_store(&round_open, r);
        usleep(hold_ms * 1000);
        pthread_mutex_unlock(&hot);
        while (atomic_load(&done) < r * lockers) usleep(100);
    }
    pthread_mutex_lock(&queue);
    work = 1;
    pthread_cond_broadcast(&work_ready); /* WAKE */
    pthread_mutex_unlock(&queue);
    for (long i = 0; i < idlers + lockers; i++) pthread_join(ids[i], NULL);
    printf("done\n");
    return 0;
}
