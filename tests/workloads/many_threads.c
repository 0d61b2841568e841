/* THREADS threads, each locking and unlocking one shared mutex PAIRS times (default 10), made
 * in waves of up to 500 that run at once, so that the tracer sees thousands of threads, many of
 * them writing at the same time.
 * Usage: many_threads THREADS [PAIRS]
 * Prints "mutex=ADDR threads=N pairs=M", and exits 0 once every thread has done its pairs. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define WAVE 500

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long pairs;
static long done;

static void *worker(void *arg) {
    (void)arg;
    for (long i = 0; i < pairs; i++) {
        pthread_mutex_lock(&lock);
        done++;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long threads = argc > 1 ? atol(argv[1]) : 1000;
    pairs = argc > 2 ? atol(argv[2]) : 10;
    pthread_t ids[WAVE];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    printf("mutex=%lu threads=%ld pairs=%ld\n", (unsigned long)&lock, threads, pairs);
    fflush(stdout);
    for (long made = 0; made < threads;) {
        int wave = threads - made < WAVE ? (int)(threads - made) : WAVE;
        for (int t = 0; t < wave; t++)
            if (pthread_create(&ids[t], &attr, worker, NULL) != 0) return 1;
        for (int t = 0; t < wave; t++) pthread_join(ids[t], NULL);
        made += wave;
    }
    return done == threads * pairs ? 0 : 1;
}
