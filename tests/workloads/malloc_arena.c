/* Contention on glibc malloc's own lock, likely but not certain: THREADS threads allocate and
 * free blocks too large for the thread caches (tcache) in one arena (M_ARENA_MAX 1), whose
 * lock each takes for every call; one preempted while holding it makes the others wait in
 * __lll_lock_wait_private, a futex wait that no pthread call makes.
 * Usage: malloc_arena THREADS ITERATIONS */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#define MAX_THREADS 64
/* Blocks each thread keeps at a time, each freed ITERATIONS / BLOCKS times. */
#define BLOCKS 16

static long iterations;

static void *worker(void *unused) {
    void *blocks[BLOCKS] = {0};
    for (long i = 0; i < iterations; i++) {
        free(blocks[i % BLOCKS]);
        /* From 2000 bytes up: above the largest the thread cache holds (1032). */
        blocks[i % BLOCKS] = malloc(2000 + (i % 256) * 8);
        if (!blocks[i % BLOCKS]) exit(1);
    }
    for (int b = 0; b < BLOCKS; b++) free(blocks[b]);
    return unused;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    long threads = atol(argv[1]);
    iterations = atol(argv[2]);
    if (threads < 1 || threads > MAX_THREADS) return 2;
    mallopt(M_ARENA_MAX, 1);
    pthread_t thread[MAX_THREADS];
    for (long t = 0; t < threads; t++)
        if (pthread_create(&thread[t], NULL, worker, NULL) != 0) return 1;
    for (long t = 0; t < threads; t++) pthread_join(thread[t], NULL);
    return 0;
}
