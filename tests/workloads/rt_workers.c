/* Fork-heavy work at a real-time priority, as stress-ng's mutex stressor does it: CHILDREN
 * forked children one after the other, each with THREADS SCHED_FIFO threads (priority 50)
 * making PAIRS lock/unlock pairs each on one mutex. Real-time threads on every CPU leave no
 * CPU to a tracer's threads at the normal policy.
 * Usage: rt_workers CHILDREN THREADS PAIRS   (root: SCHED_FIFO)
 * Prints "mutex=ADDR pairs=TOTAL" once every child is gone (the mutex is at the same address in
 * every child, a copy of the parent). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static long pairs;

static void *work(void *arg) {
    (void)arg;
    for (long i = 0; i < pairs; i++) {
        pthread_mutex_lock(&mutex);
        pthread_mutex_unlock(&mutex);
    }
    return NULL;
}

static void child(int threads) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
    pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
    struct sched_param param = {.sched_priority = 50};
    pthread_attr_setschedparam(&attr, &param);
    pthread_t ids[64];
    for (int t = 0; t < threads; t++)
        if (pthread_create(&ids[t], &attr, work, NULL) != 0) _exit(3);
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int children = atoi(argv[1]), threads = atoi(argv[2]);
    pairs = atol(argv[3]);
    if (threads < 1 || threads > 64) return 2;
    for (int c = 0; c < children; c++) {
        pid_t pid = fork();
        if (pid == 0) child(threads);
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 1;
    }
    printf("mutex=%p pairs=%ld\n", (void *)&mutex, (long)children * threads * pairs);
    return 0;
}
