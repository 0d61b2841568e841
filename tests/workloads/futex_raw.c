/* Futex waits made with the syscall itself, not through a pthread call, each certain.
 * Usage: futex_raw ROUNDS WAITERS HOLD_MS TIMEOUT_MS
 * Prints "words=ADDR lonely=ADDR" and waits for a line on stdin, so that tracers can attach.
 * Then WAITERS threads each wait ROUNDS times on a word of their own (FUTEX_WAIT_PRIVATE while
 * it is 1). Each round, the main thread waits until every waiter is asleep in that wait (its
 * /proc/self/task/TID/stat says S and its /proc/self/task/TID/syscall says futex on its word),
 * sleeps HOLD_MS, and for each waiter sets its word to 0 and wakes it (FUTEX_WAKE_PRIVATE,
 * which must wake exactly one); the waiter sets its word back to 1 for the next round. So each
 * of those ROUNDS * WAITERS waits blocks at least HOLD_MS and returns 0. Then each waiter makes
 * one FUTEX_WAIT_BITSET_PRIVATE on `lonely` (0, which nobody changes) until an absolute
 * CLOCK_MONOTONIC deadline TIMEOUT_MS away: it blocks and times out. And one FUTEX_WAIT_PRIVATE
 * on `lonely` expecting 1: it returns EAGAIN at once, never blocking. Words are unsigned ints,
 * one after another from `words`. Exits 1 if any call does not do what is said here. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "deadline.h"

#define MAX_WAITERS 32

static _Atomic unsigned words[MAX_WAITERS];
static _Atomic unsigned lonely;
static _Atomic long rounds_done[MAX_WAITERS];
static _Atomic pid_t tids[MAX_WAITERS];
static long rounds, timeout_ms;

static long futex(_Atomic unsigned *word, int op, unsigned value, const struct timespec *timeout,
                  unsigned bitset) {
    return syscall(SYS_futex, word, op, value, timeout, NULL, bitset);
}

static void fail(const char *what) {
    fprintf(stderr, "futex_raw: %s (errno %d)\n", what, errno);
    exit(1);
}

static void *waiter(void *arg) {
    long i = (long)arg;
    tids[i] = (pid_t)syscall(SYS_gettid);
    for (long r = 0; r < rounds; r++) {
        while (words[i] == 1) {
            if (futex(&words[i], FUTEX_WAIT_PRIVATE, 1, NULL, 0) != 0 && errno != EAGAIN)
                fail("a wait failed");
        }
        words[i] = 1;
        rounds_done[i] = r + 1;
    }
    struct timespec deadline = deadline_in_ms(CLOCK_MONOTONIC, timeout_ms);
    if (futex(&lonely, FUTEX_WAIT_BITSET_PRIVATE, 0, &deadline, FUTEX_BITSET_MATCH_ANY) != -1 ||
        errno != ETIMEDOUT)
        fail("the timed wait did not time out");
    if (futex(&lonely, FUTEX_WAIT_PRIVATE, 1, NULL, 0) != -1 || errno != EAGAIN)
        fail("the wait on a changed word did not return EAGAIN");
    return NULL;
}

/* Whether thread `tid` is asleep in a futex wait on `word`. */
static int asleep_on(pid_t tid, _Atomic unsigned *word) {
    char path[64], text[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    size_t length = fread(text, 1, sizeof text - 1, file);
    fclose(file);
    text[length] = 0;
    /* The state follows the command's closing parenthesis. */
    char *end = strrchr(text, ')');
    if (!end || end[1] != ' ' || end[2] != 'S') return 0;
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    file = fopen(path, "r");
    if (!file) return 0;
    long number = -1;
    unsigned long address = 0;
    int read = fscanf(file, "%ld %lx", &number, &address);
    fclose(file);
    return read == 2 && number == SYS_futex && address == (unsigned long)word;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: futex_raw ROUNDS WAITERS HOLD_MS TIMEOUT_MS\n");
        return 2;
    }
    rounds = atol(argv[1]);
    long waiters = atol(argv[2]);
    long hold_ms = atol(argv[3]);
    timeout_ms = atol(argv[4]);
    if (waiters < 1 || waiters > MAX_WAITERS) return 2;
    alarm(120);
    for (long i = 0; i < waiters; i++) words[i] = 1;
    printf("words=%lu lonely=%lu\n", (unsigned long)&words[0], (unsigned long)&lonely);
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return 1;
    pthread_t threads[MAX_WAITERS];
    for (long i = 0; i < waiters; i++) pthread_create(&threads[i], NULL, waiter, (void *)i);
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < waiters; i++) {
            while (!tids[i] || !asleep_on(tids[i], &words[i])) usleep(1000);
        }
        usleep(hold_ms * 1000);
        for (long i = 0; i < waiters; i++) {
            words[i] = 0;
            if (futex(&words[i], FUTEX_WAKE_PRIVATE, 1, NULL, 0) != 1) fail("a wake woke none");
            while (rounds_done[i] != r + 1) usleep(1000);
        }
    }
    for (long i = 0; i < waiters; i++) pthread_join(threads[i], NULL);
    printf("done\n");
    fflush(stdout);
    return 0;
}
