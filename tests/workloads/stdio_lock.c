/* Waits on glibc's own lock of a FILE, each certain: stdio locks a FILE with a lock of glibc's
 * (`_IO_lock_t`, whose first word is a futex), taken on its contended path by
 * __lll_lock_wait_private, a futex wait that no pthread call makes.
 * Usage: stdio_lock ROUNDS HOLD_MS
 * Prints "lock=ADDR" (the lock of a FILE open on /dev/null) and waits for a line on stdin, so
 * that tracers can attach. Then, ROUNDS times, the main thread locks the FILE (flockfile), lets
 * the writer thread call fputs on it, waits until the writer is asleep in a futex wait on the
 * lock (asleep.h), sleeps HOLD_MS and unlocks the FILE (funlockfile), whose one
 * FUTEX_WAKE_PRIVATE wakes the writer. So each round's fputs waits once, at least HOLD_MS, and
 * one wake wakes it. Exits 1 if a call fails. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "asleep.h"

static FILE *file;
static _Atomic long rounds_started, rounds_done;
static _Atomic pid_t writer_tid;
static long rounds;

static void *writer(void *unused) {
    (void)unused;
    writer_tid = (pid_t)syscall(SYS_gettid);
    for (long r = 0; r < rounds; r++) {
        while (rounds_started != r + 1) usleep(1000);
        if (fputs("a line\n", file) == EOF) exit(1);
        rounds_done = r + 1;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: stdio_lock ROUNDS HOLD_MS\n");
        return 2;
    }
    rounds = atol(argv[1]);
    long hold_ms = atol(argv[2]);
    alarm(120);
    file = fopen("/dev/null", "w");
    if (!file) return 1;
    printf("lock=%lu\n", (unsigned long)file->_lock);
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return 1;
    /* Before the first flockfile: with a second thread, glibc's stdio takes its locks. */
    pthread_t thread;
    if (pthread_create(&thread, NULL, writer, NULL) != 0) return 1;
    for (long r = 0; r < rounds; r++) {
        flockfile(file);
        rounds_started = r + 1;
        while (!writer_tid || !asleep_in(writer_tid, SYS_futex, file->_lock)) usleep(1000);
        usleep(hold_ms * 1000);
        funlockfile(file);
        while (rounds_done != r + 1) usleep(1000);
    }
    pthread_join(thread, NULL);
    printf("done\n");
    fflush(stdout);
    return 0;
}
