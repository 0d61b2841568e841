/* Uncontended pairs of one kind of lock, made by the main thread of a process that has one
 * thread or a second, idle one: glibc takes other paths while a process has one thread.
 * Usage: uncontended_pairs KIND THREADS PAIRS; KIND is mutex (lock, unlock), rwlock (read
 * lock, unlock, write lock, unlock) or sem (post, wait); THREADS is 1 or 2. With "gate" it
 * prints "ready pid=PID mutex=ADDR" first and waits for a line on stdin, prints "done" after
 * the pairs and exits when stdin reaches end of file (as mutex_gate does). */
#include <pthread.h>
#include <stdio.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>

#include "second_thread.h"

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rwlock = PTHREAD_RWLOCK_INITIALIZER;
static sem_t sem;

int main(int argc, char **argv) {
    char line[64];
    if (argc != 4 && argc != 5) return 2;
    int gated = argc == 5 && strcmp(argv[4], "gate") == 0;
    const char *kind = argv[1];
    int threads = atoi(argv[2]);
    long pairs = atol(argv[3]);
    int mutexes = strcmp(kind, "mutex") == 0, rwlocks = strcmp(kind, "rwlock") == 0;
    if (!mutexes && !rwlocks && strcmp(kind, "sem") != 0) return 2;
    if (threads != 1 && threads != 2) return 2;
    if (sem_init(&sem, 0, 0) != 0) return 1;
    if (threads == 2 && second_thread_start() != 0) return 1;
    if (gated) {
        printf("ready pid=%d mutex=%lu\n", getpid(), (unsigned long)&mutex);
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 1;
    }
    for (long i = 0; i < pairs; i++) {
        if (mutexes) {
            pthread_mutex_lock(&mutex);
            pthread_mutex_unlock(&mutex);
        } else if (rwlocks) {
            pthread_rwlock_rdlock(&rwlock);
            pthread_rwlock_unlock(&rwlock);
            pthread_rwlock_wrlock(&rwlock);
            pthread_rwlock_unlock(&rwlock);
        } else {
            sem_post(&sem);
            sem_wait(&sem);
        }
    }
    if (threads == 2) second_thread_stop();
    if (gated) {
        printf("done\n");
        fflush(stdout);
        while (fgets(line, sizeof line, stdin)) {
        }
    }
    return 0;
}
