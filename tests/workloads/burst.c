/* Bursts of known calls on demand, so that a test can interleave them with `thrtrace-bpf ctl`.
 * Usage: burst
 * Prints "ready pid=PID mutex=ADDR cond=ADDR", then reads commands from stdin, one a line:
 *   N        N rounds of pthread_mutex_lock, pthread_cond_signal, pthread_mutex_unlock on one
 *            mutex and one condvar (no waiters: the signal wakes no one); prints "done N"
 *   hold MS  a second thread locks the mutex and keeps it MS milliseconds while this thread
 *            waits for it in pthread_mutex_lock, then unlocks it; prints "held MS"
 * Exits at end of file. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static atomic_int holding;

static void rounds(long n) {
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&lock);
        pthread_cond_signal(&cond);
        pthread_mutex_unlock(&lock);
    }
}

static void *holder(void *arg) {
    long ms = (long)arg;
    pthread_mutex_lock(&lock);
    atomic_store(&holding, 1);
    usleep(ms * 1000);
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* This thread waits MS milliseconds in pthread_mutex_lock for the holder. */
static void wait_for_holder(long ms) {
    pthread_t thread;
    atomic_store(&holding, 0);
    if (pthread_create(&thread, NULL, holder, (void *)ms) != 0) exit(2);
    while (!atomic_load(&holding)) usleep(100);
    pthread_mutex_lock(&lock);
    pthread_mutex_unlock(&lock);
    pthread_join(thread, NULL);
}

int main(void) {
    char line[64];
    printf("ready pid=%d mutex=%lu cond=%lu\n", getpid(), (unsigned long)&lock,
           (unsigned long)&cond);
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "hold ", 5) == 0) {
            long ms = atol(line + 5);
            wait_for_holder(ms);
            printf("held %ld\n", ms);
        } else {
            long n = atol(line);
            rounds(n);
            printf("done %ld\n", n);
        }
        fflush(stdout);
    }
    return 0;
}
