/* N threads each lock and unlock one shared mutex ITERS times.
 * Usage: mutex_contend THREADS ITERS
 * Prints "mutex=<address> threads=N iters=M" then one "lwpid=<tid>" line per worker. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long iters;
static volatile long counter;

static void *worker(void *arg) {
    long *tid = arg;
    *tid = syscall(SYS_gettid);
    for (long i = 0; i < iters; i++) {
        pthread_mutex_lock(&lock);
        counter++;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    iters = argc > 2 ? atol(argv[2]) : 10000;
    pthread_t ids[64];
    long tids[64];
    if (threads < 1 || threads > 64) return 2;
    printf("mutex=%lu threads=%d iters=%ld\n", (unsigned long)&lock, threads, iters);
    fflush(stdout);
    for (int t = 0; t < threads; t++) pthread_create(&ids[t], NULL, worker, &tids[t]);
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    for (int t = 0; t < threads; t++) printf("lwpid=%ld\n", tids[t]);
    if (counter != (long)threads * iters) return 1;
    return 0;
}
