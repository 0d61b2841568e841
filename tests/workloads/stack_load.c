/* Records that must each carry a whole call stack, at full speed or from deep down, for the
 * stack tests.
 * Usage: stack_load futex ROUNDS [PER_SECOND] | stack_load futex-turns ROUNDS |
 *        stack_load mutex THREADS ITERS | stack_load deep DEPTH
 * futex: a waiter and a waker thread, each round on a fresh futex word (ROUNDS words, all 0):
 *   the waiter says it has reached the round and waits on the word (FUTEX_WAIT_PRIVATE) while
 *   it is 0; the waker, once the waiter has reached the round and 20 us more have passed (so
 *   most waits sleep; whether one does is a race), sets the word to 1 and wakes one waiter
 *   (FUTEX_WAKE_PRIVATE); with PER_SECOND, the waker ends round i no sooner than
 *   i / PER_SECOND seconds after it started (a paced load, for a rate a bench aims at). Prints
 *   "woken_waits=N wakes_that_woke=M": the waits that returned 0, the wakes that returned 1.
 * futex-turns: as futex, but two threads take turns at each word, as at a lock: one waits while
 *   it is 0 and the other sets it to 1 and wakes it, then the other waits while it is 1 and the
 *   first sets it to 2 and wakes it. Prints the same counts.
 * mutex: THREADS threads each lock and unlock one mutex ITERS times, working a little inside
 *   and outside. Prints "done".
 * deep: a thread descends DEPTH frames (`descend`, each with 512 bytes of stack of its own: deep
 *   in bytes as well as in frames) and locks `deep_lock`, which the main thread holds until the
 *   thread is asleep in its wait (asleep.h). Prints "deep_lock=ADDR". */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "asleep.h"

static _Atomic unsigned *words;
static long rounds, per_second, iters, depth;
static _Atomic long woken_waits, wakes_that_woke;
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t deep_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic pid_t deep_tid;
static _Atomic long reached = -1;
/* Per thread of futex-turns, the turn it has reached to wait at. */
static _Atomic long turn_reached[2] = {-1, -1};
static volatile long work;
/* Added to after each descent: the call is not the function's last act (no tail call). */
static volatile long after_call;

static long long now_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1000000000LL + now.tv_nsec;
}

static long futex(_Atomic unsigned *word, int op, unsigned value) {
    return syscall(SYS_futex, word, op, value, NULL, NULL, 0);
}

static void *waiter(void *unused) {
    (void)unused;
    for (long i = 0; i < rounds; i++) {
        atomic_store(&reached, i);
        while (atomic_load(&words[i]) == 0)
            if (futex(&words[i], FUTEX_WAIT_PRIVATE, 0) == 0) woken_waits++;
    }
    return NULL;
}

static void *waker(void *unused) {
    (void)unused;
    long long start = now_ns();
    for (long i = 0; i < rounds; i++) {
        while (atomic_load(&reached) < i) {
        }
        long long since = now_ns();
        long long due = per_second > 0 ? start + i * 1000000000LL / per_second : 0;
        while (now_ns() - since < 20000 || now_ns() < due) {
        }
        atomic_store(&words[i], 1);
        if (futex(&words[i], FUTEX_WAKE_PRIVATE, 1) == 1) wakes_that_woke++;
    }
    return NULL;
}

/* Thread `me` (0 or 1) of futex-turns. */
static void *take_turns(void *me_as_pointer) {
    long me = (long)me_as_pointer;
    for (long i = 0; i < rounds; i++) {
        for (unsigned phase = 0; phase < 2; phase++) {
            long turn = 2 * i + phase;
            if (phase == me) {
                atomic_store(&turn_reached[me], turn);
                while (atomic_load(&words[i]) == phase)
                    if (futex(&words[i], FUTEX_WAIT_PRIVATE, phase) == 0) woken_waits++;
                continue;
            }
            while (atomic_load(&turn_reached[1 - me]) < turn) {
            }
            long long since = now_ns();
            while (now_ns() - since < 20000) {
            }
            atomic_store(&words[i], phase + 1);
            if (futex(&words[i], FUTEX_WAKE_PRIVATE, 1) == 1) wakes_that_woke++;
        }
    }
    return NULL;
}

static void *contender(void *unused) {
    (void)unused;
    for (long i = 0; i < iters; i++) {
        pthread_mutex_lock(&shared_lock);
        for (int j = 0; j < 100; j++) work++;
        pthread_mutex_unlock(&shared_lock);
        for (int j = 0; j < 100; j++) work++;
    }
    return NULL;
}

__attribute__((noinline)) static void descend(long left) {
    volatile char frame[512];
    frame[0] = (char)left;
    if (left > 1)
        descend(left - 1);
    else {
        atomic_store(&deep_tid, (pid_t)syscall(SYS_gettid));
        pthread_mutex_lock(&deep_lock);
        pthread_mutex_unlock(&deep_lock);
    }
    after_call += frame[0];
}

static void *deep(void *unused) {
    (void)unused;
    descend(depth);
    return NULL;
}


static void join_all(pthread_t *threads, long count) {
    for (long i = 0; i < count; i++)
        if (pthread_join(threads[i], NULL) != 0) exit(1);
}

/* The two threads of a futex mode (`first` and `second`, with their arguments) over `count`
 * fresh words, all 0; prints the counts. Its exit status. */
static int futex_pair(long count, void *(*first)(void *), void *first_arg,
                      void *(*second)(void *), void *second_arg) {
    rounds = count;
    words = calloc((size_t)rounds, sizeof *words);
    pthread_t threads[2];
    if (!words || pthread_create(&threads[0], NULL, first, first_arg) != 0 ||
        pthread_create(&threads[1], NULL, second, second_arg) != 0)
        return 1;
    join_all(threads, 2);
    printf("woken_waits=%ld wakes_that_woke=%ld\n", atomic_load(&woken_waits),
           atomic_load(&wakes_that_woke));
    return 0;
}

int main(int argc, char **argv) {
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "futex") == 0) {
        per_second = argc == 4 ? atol(argv[3]) : 0;
        return futex_pair(atol(argv[2]), waiter, NULL, waker, NULL);
    } else if (argc == 3 && strcmp(argv[1], "futex-turns") == 0) {
        return futex_pair(atol(argv[2]), take_turns, (void *)0, take_turns, (void *)1);
    } else if (argc == 4 && strcmp(argv[1], "mutex") == 0) {
        long count = atol(argv[2]);
        iters = atol(argv[3]);
        pthread_t threads[64];
        if (count < 1 || count > 64) return 1;
        for (long i = 0; i < count; i++)
            if (pthread_create(&threads[i], NULL, contender, NULL) != 0) return 1;
        join_all(threads, count);
        printf("done\n");
    } else if (argc == 3 && strcmp(argv[1], "deep") == 0) {
        depth = atol(argv[2]);
        printf("deep_lock=%p\n", (void *)&deep_lock);
        fflush(stdout);
        pthread_t thread;
        pthread_mutex_lock(&deep_lock);
        if (depth < 1 || pthread_create(&thread, NULL, deep, NULL) != 0) return 1;
        while (atomic_load(&deep_tid) == 0 || !asleep_in(atomic_load(&deep_tid), SYS_futex, &deep_lock))
            usleep(1000);
        pthread_mutex_unlock(&deep_lock);
        join_all(&thread, 1);
    } else {
        fprintf(stderr, "usage: stack_load futex ROUNDS [PER_SECOND] | futex-turns ROUNDS | "
                        "mutex THREADS ITERS | deep DEPTH\n");
        return 2;
    }
    return 0;
}
