/* Futex waits and wakes made with the syscalls themselves, not through a pthread call, each
 * certain.
 * Usage: futex_raw ROUNDS WAITERS HOLD_MS TIMEOUT_MS WAITV
 * Prints "words=ADDR pairs=ADDR lonely=ADDR nobody=ADDR" and waits for a line on stdin, so that
 * tracers can attach. Then WAITERS threads each wait ROUNDS times on a word of their own
 * (FUTEX_WAIT_PRIVATE while it is 1). Each round, the main thread waits until every waiter is
 * asleep in that wait (asleep.h), sleeps HOLD_MS, and for each waiter sets its word to 0 and
 * wakes it (FUTEX_WAKE_PRIVATE of 1, which must wake exactly one); the waiter sets its word
 * back to 1 for the next round. So each of those ROUNDS * WAITERS waits blocks at least HOLD_MS
 * and returns 0, and each of as many wakes wakes one. If WAITV is 1 (a kernel with
 * futex_waitv(2), 5.16), each waiter then waits with futex_waitv on its pair of words (two
 * unsigned ints from `pairs`, both 1), and the main thread, once it is asleep there, sets the
 * second to 0 and wakes it the same way: the call returns 1, the index of the word woken.
 * Then each waiter makes one FUTEX_WAIT_BITSET_PRIVATE on `lonely` (0, which nobody changes)
 * until an absolute CLOCK_MONOTONIC deadline TIMEOUT_MS away: it blocks and times out; one
 * FUTEX_WAIT_PRIVATE on `lonely` expecting 1: it returns EAGAIN at once, never blocking; and
 * one FUTEX_WAKE_PRIVATE of INT_MAX on `nobody`, which nobody waits on: it wakes none. Words
 * are unsigned ints, one after another from `words`. Exits 1 if any call does not do what is
 * said here. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "asleep.h"
#include "deadline.h"

#define MAX_WAITERS 32

static _Atomic unsigned words[MAX_WAITERS];
static _Atomic unsigned pairs[MAX_WAITERS][2];
static struct futex_waitv waitvs[MAX_WAITERS][2];
static _Atomic unsigned lonely, nobody;
static _Atomic long rounds_done[MAX_WAITERS];
static _Atomic int waitv_done[MAX_WAITERS];
static _Atomic pid_t tids[MAX_WAITERS];
static long rounds, timeout_ms, waitv;

static long futex(_Atomic unsigned *word, int op, unsigned value, const struct timespec *timeout,
                  unsigned bitset) {
    return syscall(SYS_futex, word, op, value, timeout, NULL, bitset);
}

static void fail(const char *what) {
    fprintf(stderr, "futex_raw: %s (errno %d)\n", what, errno);
    exit(1);
}

/* Sets `word` to 0 and wakes its one waiter. */
static void wake_one(_Atomic unsigned *word) {
    *word = 0;
    if (futex(word, FUTEX_WAKE_PRIVATE, 1, NULL, 0) != 1) fail("a wake did not wake one");
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
    if (waitv) {
        for (int w = 0; w < 2; w++)
            waitvs[i][w] = (struct futex_waitv){
                .val = 1,
                .uaddr = (uintptr_t)&pairs[i][w],
                .flags = FUTEX_32 | FUTEX_PRIVATE_FLAG,
            };
        if (syscall(SYS_futex_waitv, waitvs[i], 2, 0, NULL, CLOCK_MONOTONIC) != 1)
            fail("futex_waitv did not return the second word's index");
        waitv_done[i] = 1;
    }
    struct timespec deadline = deadline_in_ms(CLOCK_MONOTONIC, timeout_ms);
    if (futex(&lonely, FUTEX_WAIT_BITSET_PRIVATE, 0, &deadline, FUTEX_BITSET_MATCH_ANY) != -1 ||
        errno != ETIMEDOUT)
        fail("the timed wait did not time out");
    if (futex(&lonely, FUTEX_WAIT_PRIVATE, 1, NULL, 0) != -1 || errno != EAGAIN)
        fail("the wait on a changed word did not return EAGAIN");
    if (futex(&nobody, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, 0) != 0)
        fail("the wake of a word nobody waits on woke one");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: futex_raw ROUNDS WAITERS HOLD_MS TIMEOUT_MS WAITV\n");
        return 2;
    }
    rounds = atol(argv[1]);
    long waiters = atol(argv[2]);
    long hold_ms = atol(argv[3]);
    timeout_ms = atol(argv[4]);
    waitv = atol(argv[5]);
    if (waiters < 1 || waiters > MAX_WAITERS) return 2;
    alarm(120);
    for (long i = 0; i < waiters; i++) words[i] = pairs[i][0] = pairs[i][1] = 1;
    printf("words=%lu pairs=%lu lonely=%lu nobody=%lu\n", (unsigned long)&words[0],
           (unsigned long)&pairs[0][0], (unsigned long)&lonely, (unsigned long)&nobody);
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return 1;
    pthread_t threads[MAX_WAITERS];
    for (long i = 0; i < waiters; i++) pthread_create(&threads[i], NULL, waiter, (void *)i);
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < waiters; i++) {
            while (!tids[i] || !asleep_in(tids[i], SYS_futex, &words[i])) usleep(1000);
        }
        usleep(hold_ms * 1000);
        for (long i = 0; i < waiters; i++) {
            wake_one(&words[i]);
            while (rounds_done[i] != r + 1) usleep(1000);
        }
    }
    for (long i = 0; i < waiters && waitv; i++) {
        while (!asleep_in(tids[i], SYS_futex_waitv, waitvs[i])) usleep(1000);
        wake_one(&pairs[i][1]);
        while (!waitv_done[i]) usleep(1000);
    }
    for (long i = 0; i < waiters; i++) pthread_join(threads[i], NULL);
    printf("done\n");
    fflush(stdout);
    return 0;
}
