/* Lock/unlock pairs on one mutex, in two phases separated by a line on stdin, so that a tracer
 * can attach to the running process between them.
 * Usage: mutex_gate BEFORE AFTER
 * Does BEFORE pairs, prints "ready pid=PID mutex=ADDR", waits for a line on stdin, does AFTER
 * pairs, prints "done", and exits when stdin reaches end of file. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void pairs(long n) {
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&lock);
        pthread_mutex_unlock(&lock);
    }
}

int main(int argc, char **argv) {
    long before = argc > 1 ? atol(argv[1]) : 100;
    long after = argc > 2 ? atol(argv[2]) : 1000;
    char line[64];
    pairs(before);
    printf("ready pid=%d mutex=%lu\n", getpid(), (unsigned long)&lock);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
    pairs(after);
    printf("done\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
    }
    return 0;
}
