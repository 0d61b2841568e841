/* A tight loop of pthread_rwlock_rdlock + pthread_rwlock_unlock on one read-write lock (never
 * contended), timed inside.
 * Usage: bench_rwlock PAIRS [SECOND]; SECOND 1: a second thread, idle, runs meanwhile (glibc takes
 * some paths only while a process has one thread).
 * Prints "ns_per_op=X ops=N": wall time per rdlock+unlock pair. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "second_thread.h"

int main(int argc, char **argv) {
    long pairs = argc > 1 ? atol(argv[1]) : 1000000;
    int second = argc > 2 && atoi(argv[2]) == 1;
    if (second && second_thread_start() != 0) return 2;
    pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < pairs; i++) {
        pthread_rwlock_rdlock(&lock);
        pthread_rwlock_unlock(&lock);
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    if (second) second_thread_stop();
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("ns_per_op=%.1f ops=%ld\n", ns / pairs, pairs);
    return 0;
}
