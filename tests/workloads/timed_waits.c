/* Each Linux-only timed call times out: pthread_mutex_timedlock and pthread_mutex_clocklock on
 * a mutex another thread holds, pthread_cond_clockwait on a condition nobody signals.
 * Prints "mutex=ADDR other=ADDR cond=ADDR m1=SEC.NSEC m1_tries=N m2=SEC.NSEC m2_tries=N
 * c1=SEC.NSEC": the deadlines, and how many times each lock was tried until it slept. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

#include "deadline.h"

/* Long enough that the call is made, traced, before its deadline even on an emulated kernel:
 * a deadline already past when it is called returns at once, without sleeping. */
#define TIMEOUT_MS 200
/* A starved emulated CPU can still reach the futex wait after the deadline: such a try, which
 * did not sleep, is made again, up to this many times in all. */
#define MAX_TRIES 5

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER, other = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static sem_t held, done;

static void *holder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mutex);
    sem_post(&held);
    sem_wait(&done);
    pthread_mutex_unlock(&mutex);
    return NULL;
}

static long voluntary_switches(void) {
    struct rusage usage;
    getrusage(RUSAGE_THREAD, &usage);
    return usage.ru_nvcsw;
}

static int timedlock(clockid_t clock, const struct timespec *deadline) {
    (void)clock;
    return pthread_mutex_timedlock(&mutex, deadline);
}

static int clocklock(clockid_t clock, const struct timespec *deadline) {
    return pthread_mutex_clocklock(&mutex, clock, deadline);
}

/* Tries `lock` with a deadline TIMEOUT_MS ahead on `clock` until a try times out having slept
 * (the thread's voluntary context switches grew); 1 if one did. */
static int times_out_asleep(int (*lock)(clockid_t, const struct timespec *), clockid_t clock,
                            struct timespec *deadline, int *tries) {
    for (*tries = 1;; ++*tries) {
        *deadline = deadline_in_ms(clock, TIMEOUT_MS);
        long before = voluntary_switches();
        if (lock(clock, deadline) != ETIMEDOUT)
            return 0;
        if (voluntary_switches() != before)
            return 1;
        if (*tries == MAX_TRIES)
            return 0;
    }
}

int main(void) {
    pthread_t thread;
    int ok = 1;
    sem_init(&held, 0, 0);
    sem_init(&done, 0, 0);
    pthread_create(&thread, NULL, holder, NULL);
    sem_wait(&held);
    struct timespec m1, m2;
    int m1_tries, m2_tries;
    ok &= times_out_asleep(timedlock, CLOCK_REALTIME, &m1, &m1_tries);
    ok &= times_out_asleep(clocklock, CLOCK_MONOTONIC, &m2, &m2_tries);
    sem_post(&done);
    pthread_join(thread, NULL);
    pthread_mutex_lock(&other);
    struct timespec c1 = deadline_in_ms(CLOCK_MONOTONIC, TIMEOUT_MS);
    ok &= pthread_cond_clockwait(&cond, &other, CLOCK_MONOTONIC, &c1) == ETIMEDOUT;
    pthread_mutex_unlock(&other);
    printf("mutex=%lu other=%lu cond=%lu m1=%ld.%09ld m1_tries=%d m2=%ld.%09ld m2_tries=%d "
           "c1=%ld.%09ld\n",
           (unsigned long)&mutex, (unsigned long)&other, (unsigned long)&cond, (long)m1.tv_sec,
           m1.tv_nsec, m1_tries, (long)m2.tv_sec, m2.tv_nsec, m2_tries, (long)c1.tv_sec,
           c1.tv_nsec);
    return ok ? 0 : 1;
}
