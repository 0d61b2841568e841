/* THREADS threads each run a tight loop of pthread_mutex_lock + pthread_mutex_unlock on one
 * shared mutex, timed inside the process so that start-up and attach are not counted.
 * Usage: bench_mutex THREADS PAIRS
 * Prints "ns_per_op=X ops=N": wall time per lock+unlock pair over all threads. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long pairs;

static void *loop(void *arg) {
    (void)arg;
    for (long i = 0; i < pairs; i++) {
        pthread_mutex_lock(&lock);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    pairs = argc > 2 ? atol(argv[2]) : 1000000;
    pthread_t ids[64];
    struct timespec start, end;
    if (threads < 1 || threads > 64) return 2;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int t = 0; t < threads; t++) pthread_create(&ids[t], NULL, loop, NULL);
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("ns_per_op=%.1f ops=%ld\n", ns / (threads * pairs), threads * pairs);
    return 0;
}
