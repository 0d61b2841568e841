/* Busy threads for the stress command: THREADS threads each do ROUNDS rounds of a mutex
 * lock/unlock, an rwlock read and write lock/unlock, a sem post/wait and a yield; then the main
 * thread prints the totals, which depend on the arguments alone, so that a run traced by a
 * tracer killed at any moment must print exactly what an untraced run prints.
 * Usage: stress_work THREADS ROUNDS
 * Prints "mutex=N rwlock=N sem=N" and exits 0 if the counts add up. */
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rwlock = PTHREAD_RWLOCK_INITIALIZER;
static sem_t sem;
static long rounds, mutex_count, rwlock_count, sem_count;

static void *worker(void *arg) {
    (void)arg;
    for (long i = 0; i < rounds; i++) {
        pthread_mutex_lock(&lock);
        mutex_count++;
        pthread_mutex_unlock(&lock);
        pthread_rwlock_rdlock(&rwlock);
        pthread_rwlock_unlock(&rwlock);
        pthread_rwlock_wrlock(&rwlock);
        rwlock_count++;
        pthread_rwlock_unlock(&rwlock);
        sem_post(&sem);
        sem_wait(&sem);
        __atomic_fetch_add(&sem_count, 1, __ATOMIC_RELAXED);
        if (i % 64 == 0) sched_yield();
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    rounds = argc > 2 ? atol(argv[2]) : 10000;
    pthread_t ids[64];
    if (threads < 1 || threads > 64) return 2;
    sem_init(&sem, 0, 0);
    for (int t = 0; t < threads; t++) pthread_create(&ids[t], NULL, worker, NULL);
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    printf("mutex=%ld rwlock=%ld sem=%ld\n", mutex_count, rwlock_count, sem_count);
    long expected = threads * rounds;
    return mutex_count == expected && rwlock_count == expected && sem_count == expected ? 0 : 1;
}
