/* A thread pool whose workers hand work on to each other, then sit idle, as MariaDB's tpool
 * does: no deadlock, however long they wait.
 * Usage: idle_pool WORKERS ROUNDS IDLE_MS timed|untimed
 * Each worker ("worker-N") has a condition variable of its own, all under one mutex `pool`.
 * A token goes round the workers ROUNDS times: the main thread gives it to worker 0 once every
 * worker waits; a worker that gets it passes it on to the next one (signals the next one's
 * condvar, line PASS) and waits on its own again, the last worker of the last round to nobody.
 * Then every worker waits on its own condvar for IDLE_MS, which only the worker before it ever
 * signaled, until the main thread sets `quit` and signals each condvar (line QUIT). With "timed", each wait is a pthread_cond_clockwait(CLOCK_MONOTONIC) with a
 * deadline a minute away (line TIMED_WAIT; none times out); with "untimed", a pthread_cond_wait
 * (line WAIT).
 * Each condvar is waited on ROUNDS + 1 times and signaled ROUNDS + 1 times: a worker is always
 * waiting when its condvar is signaled (the one before it took the mutex after it began to
 * wait).
 * Prints "ready pid=PID pool=ADDR cond0=ADDR" first, then "idle" when every worker is idle,
 * then "done". The main thread waits for the workers with atomics and usleep. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 16

static pthread_mutex_t pool = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake[MAX_WORKERS];
static int token = -1, quit, workers, rounds, timed;
static atomic_int waiting, idle;

/* Waits on worker `me`'s condvar until the token is its own or the pool quits; `pool` held. */
static void wait_for_work(int me) {
    while (token != me && !quit) {
        if (timed) {
            struct timespec deadline;
            clock_gettime(CLOCK_MONOTONIC, &deadline);
            deadline.tv_sec += 60;
            pthread_cond_clockwait(&wake[me], &pool, CLOCK_MONOTONIC, &deadline); /* TIMED_WAIT */
        } else {
            pthread_cond_wait(&wake[me], &pool); /* WAIT */
        }
    }
}

static void *worker(void *arg) {
    int me = (int)(long)arg;
    char name[16];
    snprintf(name, sizeof name, "worker-%d", me);
    pthread_setname_np(pthread_self(), name);
    pthread_mutex_lock(&pool);
    atomic_fetch_add(&waiting, 1);
    for (int r = 0; r < rounds; r++) {
        wait_for_work(me);
        int last = r == rounds - 1 && me == workers - 1;
        token = last ? -1 : (me + 1) % workers;
        if (!last) pthread_cond_signal(&wake[token]); /* PASS */
    }
    atomic_fetch_add(&idle, 1);
    wait_for_work(me);
    pthread_mutex_unlock(&pool);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    workers = atoi(argv[1]);
    rounds = atoi(argv[2]);
    int idle_ms = atoi(argv[3]);
    timed = strcmp(argv[4], "timed") == 0;
    if (workers < 2 || workers > MAX_WORKERS || rounds < 1) return 2;
    pthread_t ids[MAX_WORKERS];
    for (int i = 0; i < workers; i++) pthread_cond_init(&wake[i], NULL);
    printf("ready pid=%d pool=%lu cond0=%lu\n", getpid(), (unsigned long)&pool,
           (unsigned long)&wake[0]);
    fflush(stdout);
    for (long i = 0; i < workers; i++) pthread_create(&ids[i], NULL, worker, (void *)i);
    /* A worker counts itself with `pool` held and lets it go only inside its wait. */
    while (atomic_load(&waiting) < workers) usleep(100);
    pthread_mutex_lock(&pool);
    token = 0;
    pthread_cond_signal(&wake[0]);
    pthread_mutex_unlock(&pool);
    while (atomic_load(&idle) < workers) usleep(100);
    printf("idle\n");
    fflush(stdout);
    usleep(idle_ms * 1000);
    pthread_mutex_lock(&pool);
    quit = 1;
    for (int i = 0; i < workers; i++) pthread_cond_signal(&wake[i]); /* QUIT */
    pthread_mutex_unlock(&pool);
    for (int i = 0; i < workers; i++) pthread_join(ids[i], NULL);
    printf("done\n");
    return 0;
}
