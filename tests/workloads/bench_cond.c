/* Two threads pass a turn back and forth through one mutex and one condition variable:
 * each round is a signal and a wait on each side.
 * Usage: bench_cond ROUNDS
 * Prints "ns_per_op=X ops=N": wall time per round (there and back). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_changed = PTHREAD_COND_INITIALIZER;
static int turn;
static long rounds;

static void *player(void *arg) {
    int me = (int)(long)arg;
    for (long i = 0; i < rounds; i++) {
        pthread_mutex_lock(&mutex);
        while (turn != me) pthread_cond_wait(&turn_changed, &mutex);
        turn = !me;
        pthread_cond_signal(&turn_changed);
        pthread_mutex_unlock(&mutex);
    }
    return NULL;
}

int main(int argc, char **argv) {
    rounds = argc > 1 ? atol(argv[1]) : 100000;
    pthread_t ping, pong;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pthread_create(&ping, NULL, player, (void *)0L);
    pthread_create(&pong, NULL, player, (void *)1L);
    pthread_join(ping, NULL);
    pthread_join(pong, NULL);
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("ns_per_op=%.1f ops=%ld\n", ns / rounds, rounds);
    return 0;
}
