/* A tight loop of pthread_mutex_lock + pthread_mutex_unlock on one mutex, timed inside the
 * process so that start-up and attach are not counted.
 * Usage: bench_mutex PAIRS
 * Prints "ns_per_pair=X pairs=N". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

int main(int argc, char **argv) {
    long pairs = argc > 1 ? atol(argv[1]) : 1000000;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < pairs; i++) {
        pthread_mutex_lock(&lock);
        pthread_mutex_unlock(&lock);
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("ns_per_pair=%.1f pairs=%ld\n", ns / pairs, pairs);
    return 0;
}
