/* THREADS threads each run a tight loop of pthread_mutex_lock + pthread_mutex_unlock on one
 * shared mutex, timed inside the process so that start-up and attach are not counted.
 * Usage: bench_mutex THREADS PAIRS; THREADS 0: the main thread runs the loop, alone (glibc takes
 * its single-threaded paths then).
 * Prints "ns_per_op=X cpu_ns_per_op=Y ops=N": wall time per lock+unlock pair over all
 * threads, and the process's CPU time per pair (which leaves out what other processes ran
 * on its CPU meanwhile: a tracer's consumer, where the CPUs are fewer than the threads). */
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
    struct timespec start, end, cpu_start, cpu_end;
    if (threads < 0 || threads > 64) return 2;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_start);
    clock_gettime(CLOCK_MONOTONIC, &start);
    if (threads == 0) loop(NULL);
    for (int t = 0; t < threads; t++) pthread_create(&ids[t], NULL, loop, NULL);
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    clock_gettime(CLOCK_MONOTONIC, &end);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_end);
    long ops = (threads > 0 ? threads : 1) * pairs;
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    double cpu_ns = (cpu_end.tv_sec - cpu_start.tv_sec) * 1e9 + (cpu_end.tv_nsec - cpu_start.tv_nsec);
    printf("ns_per_op=%.1f cpu_ns_per_op=%.1f ops=%ld\n", ns / ops, cpu_ns / ops, ops);
    return 0;
}
