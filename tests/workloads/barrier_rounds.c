/* ROUNDS rounds of THREADS threads at one barrier. Within a round the threads arrive one after
 * another, 30 ms apart (the main thread paces them), so b_count at entry is 0, 1, ..., N-1.
 * Usage: barrier_rounds THREADS ROUNDS
 * Prints "barrier=ADDR serial=S" (S: PTHREAD_BARRIER_SERIAL_THREAD returns, one per round). */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_barrier_t barrier;
static sem_t turn[64];
static int rounds, serial;
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

static void *arrive(void *arg) {
    long me = (long)arg;
    for (int r = 0; r < rounds; r++) {
        sem_wait(&turn[me]);
        if (pthread_barrier_wait(&barrier) == PTHREAD_BARRIER_SERIAL_THREAD) {
            pthread_mutex_lock(&count_lock);
            serial++;
            pthread_mutex_unlock(&count_lock);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 3;
    rounds = argc > 2 ? atoi(argv[2]) : 3;
    pthread_t ids[64];
    if (threads < 1 || threads > 64) return 2;
    pthread_barrier_init(&barrier, NULL, threads);
    for (long t = 0; t < threads; t++) {
        sem_init(&turn[t], 0, 0);
        pthread_create(&ids[t], NULL, arrive, (void *)t);
    }
    for (int r = 0; r < rounds; r++) {
        for (int t = 0; t < threads; t++) {
            sem_post(&turn[t]);
            usleep(30 * 1000);
        }
    }
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    pthread_barrier_destroy(&barrier);
    printf("barrier=%lu serial=%d\n", (unsigned long)&barrier, serial);
    return serial == rounds ? 0 : 1;
}
