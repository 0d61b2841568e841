/* A tight loop of sem_post + sem_wait on one semaphore (never blocking), timed inside.
 * Usage: bench_sem PAIRS [SECOND]; SECOND 1: a second thread, idle, runs meanwhile (glibc takes
 * some paths only while a process has one thread).
 * Prints "ns_per_op=X ops=N": wall time per post+wait pair. */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "second_thread.h"

int main(int argc, char **argv) {
    long pairs = argc > 1 ? atol(argv[1]) : 1000000;
    int second = argc > 2 && atoi(argv[2]) == 1;
    if (second && second_thread_start() != 0) return 2;
    sem_t sem;
    struct timespec start, end;
    sem_init(&sem, 0, 0);
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < pairs; i++) {
        sem_post(&sem);
        sem_wait(&sem);
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    if (second) second_thread_stop();
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("ns_per_op=%.1f ops=%ld\n", ns / pairs, pairs);
    return 0;
}
