/* THREADS threads each make ITERS rounds of: lock and unlock one mutex all threads share,
 * then lock and unlock a mutex of the thread's own. With more threads than CPUs, the traced
 * calls are often preempted: the kernel tests run it under preempt=full.
 * Usage: lock_mix THREADS ITERS
 * Each worker's calls: 2*ITERS pthread_mutex_lock and 2*ITERS pthread_mutex_unlock.
 * Exits 1 if a counter is off (a lock that did not exclude). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_THREADS 64

static pthread_mutex_t shared = PTHREAD_MUTEX_INITIALIZER;
static long iters;
static long shared_count;

struct own {
    pthread_mutex_t mutex;
    long count;
};

static void *worker(void *arg) {
    struct own *own = arg;
    for (long i = 0; i < iters; i++) {
        pthread_mutex_lock(&shared);
        shared_count++;
        pthread_mutex_unlock(&shared);
        pthread_mutex_lock(&own->mutex);
        own->count++;
        pthread_mutex_unlock(&own->mutex);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    iters = argc > 2 ? atol(argv[2]) : 1000;
    if (threads < 1 || threads > MAX_THREADS) {
        fprintf(stderr, "lock_mix: 1 to %d threads\n", MAX_THREADS);
        return 2;
    }
    pthread_t ids[MAX_THREADS];
    static struct own owns[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        pthread_mutex_init(&owns[t].mutex, NULL);
        pthread_create(&ids[t], NULL, worker, &owns[t]);
    }
    int ok = 1;
    for (int t = 0; t < threads; t++) {
        pthread_join(ids[t], NULL);
        ok &= owns[t].count == iters;
    }
    ok &= shared_count == threads * iters;
    printf("lock_mix: %d threads, %ld rounds each: %s\n", threads, iters, ok ? "ok" : "COUNTS OFF");
    return ok ? 0 : 1;
}
