/* Lock/unlock pairs on one mutex, in two phases separated by a line on stdin, so that a tracer
 * can attach to the running process between them.
 * Usage: mutex_gate BEFORE AFTER [THREADS [early]]
 * Does BEFORE pairs, prints "ready pid=PID mutex=ADDR", waits for a line on stdin, then
 * THREADS new threads (default: none, the main thread) each do AFTER pairs; prints "done" and
 * exits when stdin reaches end of file. With "early" the threads are created before "ready"
 * and wait for the line reading a pipe, which makes no pthread call: no thread is created
 * while a tracer watches. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long after;
static int gate[2];

static void pairs(long n) {
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&lock);
        pthread_mutex_unlock(&lock);
    }
}

static void *phase_two(void *arg) {
    char go;
    if (arg && read(gate[0], &go, 1) != 1) return NULL;
    pairs(after);
    return NULL;
}

int main(int argc, char **argv) {
    long before = argc > 1 ? atol(argv[1]) : 100;
    after = argc > 2 ? atol(argv[2]) : 1000;
    int threads = argc > 3 ? atoi(argv[3]) : 0;
    int early = argc > 4 && strcmp(argv[4], "early") == 0;
    pthread_t ids[64];
    char line[64];
    if (threads < 0 || threads > 64 || pipe(gate) != 0) return 2;
    pairs(before);
    for (int t = 0; early && t < threads; t++) pthread_create(&ids[t], NULL, phase_two, gate);
    printf("ready pid=%d mutex=%lu\n", getpid(), (unsigned long)&lock);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
    if (threads == 0) pairs(after);
    for (int t = 0; early && t < threads; t++)
        if (write(gate[1], "g", 1) != 1) return 1;
    for (int t = 0; !early && t < threads; t++) pthread_create(&ids[t], NULL, phase_two, NULL);
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    printf("done\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
    }
    return 0;
}
