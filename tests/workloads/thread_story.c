/* The thread calls, each with a known result:
 *  - 3 threads created; each locks and unlocks a mutex (so it has records of its own) and
 *    calls pthread_exit(100 + i); main joins each and gets that value;
 *  - pthread_kill(self, 0), pthread_sigmask, pthread_self, sched_yield;
 *  - a key: create, setspecific(0x1234), getspecific, delete;
 *  - scheduling of self: getschedparam, setschedparam(SCHED_OTHER, 0), setschedprio(0);
 *    setconcurrency(4), getconcurrency;
 *  - a sleeper thread: tryjoin -> EBUSY, timedjoin with a 20 ms deadline -> ETIMEDOUT,
 *    then cancel and join (PTHREAD_CANCELED); a detached thread.
 * Prints "t0=ID t1=ID t2=ID key=K deadline=SEC.NSEC" and exits 0 if glibc agreed. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "deadline.h"

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
    pthread_mutex_lock(&mutex);
    pthread_mutex_unlock(&mutex);
    pthread_exit((void *)(100 + (long)arg));
}

static void *sleeper(void *arg) {
    (void)arg;
    for (;;) pause();
    return NULL;
}

static void *detached(void *arg) {
    return arg;
}

int main(void) {
    pthread_t ids[3], sleeping, loose;
    void *value;
    int ok = 1;
    for (long i = 0; i < 3; i++) ok &= pthread_create(&ids[i], NULL, worker, (void *)i) == 0;
    for (long i = 0; i < 3; i++) {
        ok &= pthread_join(ids[i], &value) == 0;
        ok &= value == (void *)(100 + i);
    }
    ok &= pthread_kill(pthread_self(), 0) == 0;
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    ok &= pthread_sigmask(SIG_BLOCK, &set, &old) == 0;
    ok &= sched_yield() == 0;

    pthread_key_t key;
    ok &= pthread_key_create(&key, NULL) == 0;
    ok &= pthread_setspecific(key, (void *)0x1234) == 0;
    ok &= pthread_getspecific(key) == (void *)0x1234;
    ok &= pthread_key_delete(key) == 0;

    int policy;
    struct sched_param param;
    ok &= pthread_getschedparam(pthread_self(), &policy, &param) == 0;
    ok &= policy == SCHED_OTHER && param.sched_priority == 0;
    ok &= pthread_setschedparam(pthread_self(), SCHED_OTHER, &param) == 0;
    ok &= pthread_setschedprio(pthread_self(), 0) == 0;
#ifdef __GLIBC__
    ok &= pthread_setconcurrency(4) == 0;
    ok &= pthread_getconcurrency() == 4;
#else
    /* musl keeps no concurrency level: it refuses any but 0. */
    ok &= pthread_setconcurrency(4) == EAGAIN;
    ok &= pthread_getconcurrency() == 0;
#endif

    pthread_create(&sleeping, NULL, sleeper, NULL);
    ok &= pthread_tryjoin_np(sleeping, &value) == EBUSY;
    struct timespec deadline = deadline_in_ms(CLOCK_REALTIME, 20);
    ok &= pthread_timedjoin_np(sleeping, &value, &deadline) == ETIMEDOUT;
    ok &= pthread_cancel(sleeping) == 0;
    ok &= pthread_join(sleeping, &value) == 0 && value == PTHREAD_CANCELED;
    pthread_create(&loose, NULL, detached, NULL);
    ok &= pthread_detach(loose) == 0;

    printf("t0=%lu t1=%lu t2=%lu key=%u deadline=%ld.%09ld\n", (unsigned long)ids[0],
           (unsigned long)ids[1], (unsigned long)ids[2], key, (long)deadline.tv_sec,
           deadline.tv_nsec);
    return ok ? 0 : 1;
}
