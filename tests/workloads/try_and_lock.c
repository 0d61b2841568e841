/* THREADS threads each make ROUNDS rounds on one mutex they all share: a
 * pthread_mutex_trylock, then, when it finds the mutex taken (EBUSY), a pthread_mutex_lock;
 * then the unlock. The trylocks that fail and the locks that wait are frequent on any number
 * of CPUs, so that fast paths, slow paths and failed tries all meet.
 * Usage: try_and_lock THREADS ROUNDS
 * Prints "ready", waits for a line on stdin (the tracer is attached by then), runs, and prints
 * "mutex=ADDR locks=N trylocks=N unlocks=N": its own count of its calls on the mutex.
 * Exits 1 if the counter it guards is off. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_THREADS 64

static pthread_mutex_t shared = PTHREAD_MUTEX_INITIALIZER;
static long rounds;
static long guarded;
static long locks, trylocks;

static void *worker(void *arg) {
    long my_locks = 0;
    (void)arg;
    for (long i = 0; i < rounds; i++) {
        if (pthread_mutex_trylock(&shared) == EBUSY) {
            pthread_mutex_lock(&shared);
            my_locks++;
        }
        guarded++;
        pthread_mutex_unlock(&shared);
    }
    pthread_mutex_lock(&shared);
    locks += my_locks + 1;
    trylocks += rounds;
    pthread_mutex_unlock(&shared);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    rounds = argc > 2 ? atol(argv[2]) : 10000;
    pthread_t ids[MAX_THREADS];
    char line[16];
    if (threads < 1 || threads > MAX_THREADS || rounds < 1) {
        fprintf(stderr, "try_and_lock: 1 to %d threads, at least one round\n", MAX_THREADS);
        return 2;
    }
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 2;
    for (int t = 0; t < threads; t++) pthread_create(&ids[t], NULL, worker, NULL);
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    /* Each try that took the mutex and each lock are unlocked once. */
    printf("mutex=%lu locks=%ld trylocks=%ld unlocks=%ld\n", (unsigned long)&shared, locks,
           trylocks, trylocks + threads);
    return guarded == threads * rounds ? 0 : 1;
}
