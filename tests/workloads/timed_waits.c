/* Each Linux-only timed call times out: pthread_mutex_timedlock and pthread_mutex_clocklock on
 * a mutex another thread holds, pthread_cond_clockwait on a condition nobody signals.
 * Prints "mutex=ADDR cond=ADDR m1=SEC.NSEC m2=SEC.NSEC c1=SEC.NSEC" (the deadlines). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>

#include "deadline.h"

/* Long enough that the call is made, traced, before its deadline even on an emulated kernel:
 * a deadline already past when it is called returns at once, without sleeping. */
#define TIMEOUT_MS 200

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

int main(void) {
    pthread_t thread;
    int ok = 1;
    sem_init(&held, 0, 0);
    sem_init(&done, 0, 0);
    pthread_create(&thread, NULL, holder, NULL);
    sem_wait(&held);
    struct timespec m1 = deadline_in_ms(CLOCK_REALTIME, TIMEOUT_MS);
    ok &= pthread_mutex_timedlock(&mutex, &m1) == ETIMEDOUT;
    struct timespec m2 = deadline_in_ms(CLOCK_MONOTONIC, TIMEOUT_MS);
    ok &= pthread_mutex_clocklock(&mutex, CLOCK_MONOTONIC, &m2) == ETIMEDOUT;
    sem_post(&done);
    pthread_join(thread, NULL);
    pthread_mutex_lock(&other);
    struct timespec c1 = deadline_in_ms(CLOCK_MONOTONIC, TIMEOUT_MS);
    ok &= pthread_cond_clockwait(&cond, &other, CLOCK_MONOTONIC, &c1) == ETIMEDOUT;
    pthread_mutex_unlock(&other);
    printf("mutex=%lu other=%lu cond=%lu m1=%ld.%09ld m2=%ld.%09ld c1=%ld.%09ld\n",
           (unsigned long)&mutex, (unsigned long)&other, (unsigned long)&cond, (long)m1.tv_sec,
           m1.tv_nsec, (long)m2.tv_sec, m2.tv_nsec, (long)c1.tv_sec, c1.tv_nsec);
    return ok ? 0 : 1;
}
