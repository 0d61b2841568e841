/* N threads each lock and unlock one shared mutex ITERS times.
 * Usage: mutex_contend THREADS ITERS [count-sleeps]
 * Prints "mutex=<address> threads=N iters=M" then one "lwpid=<tid>" line per worker.
 * With count-sleeps, each worker also reads its voluntary context switches (what the kernel
 * counts when a thread sleeps) before each lock call and after the unlock that follows it,
 * and one "slept=<lwpid>:<i>" line is printed per lock call i that slept there, at most
 * MAX_SLEPT per worker, then "sleeps=<lwpid>:<count>" with the worker's count of them all. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_SLEPT 64

struct worker {
    long tid;
    long sleeps;
    long slept[MAX_SLEPT];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long iters;
static int count_sleeps;
static volatile long counter;

static long voluntary_switches(void) {
    struct rusage usage;
    if (getrusage(RUSAGE_THREAD, &usage) != 0) abort();
    return usage.ru_nvcsw;
}

static void *worker(void *arg) {
    struct worker *self = arg;
    self->tid = syscall(SYS_gettid);
    for (long i = 0; i < iters; i++) {
        long before = count_sleeps ? voluntary_switches() : 0;
        pthread_mutex_lock(&lock);
        counter++;
        pthread_mutex_unlock(&lock);
        /* After the unlock, so that the two calls stay a few instructions apart (tests read
         * their callers): the window still holds the lock call's. */
        if (count_sleeps && voluntary_switches() != before) {
            if (self->sleeps < MAX_SLEPT) self->slept[self->sleeps] = i;
            self->sleeps++;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    iters = argc > 2 ? atol(argv[2]) : 10000;
    count_sleeps = argc > 3 && strcmp(argv[3], "count-sleeps") == 0;
    pthread_t ids[64];
    static struct worker workers[64];
    if (threads < 1 || threads > 64) return 2;
    printf("mutex=%lu threads=%d iters=%ld\n", (unsigned long)&lock, threads, iters);
    fflush(stdout);
    for (int t = 0; t < threads; t++) pthread_create(&ids[t], NULL, worker, &workers[t]);
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    for (int t = 0; t < threads; t++) {
        struct worker *w = &workers[t];
        printf("lwpid=%ld\n", w->tid);
        if (!count_sleeps) continue;
        for (long s = 0; s < w->sleeps && s < MAX_SLEPT; s++) printf("slept=%ld:%ld\n", w->tid, w->slept[s]);
        printf("sleeps=%ld:%ld\n", w->tid, w->sleeps);
    }
    if (counter != (long)threads * iters) return 1;
    return 0;
}
