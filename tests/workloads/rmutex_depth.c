/* A recursive mutex locked three deep (rm_depth 1, 2, 3), a trylock from another thread that
 * fails with EBUSY, three unlocks; beside it a plain mutex locked and unlocked once.
 * Prints "rmutex=ADDR plain=ADDR". */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t rmutex, plain = PTHREAD_MUTEX_INITIALIZER;
static int trylock_result;

static void *other(void *arg) {
    (void)arg;
    trylock_result = pthread_mutex_trylock(&rmutex);
    return NULL;
}

int main(void) {
    pthread_mutexattr_t attr;
    pthread_t thread;
    int ok = 1;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    ok &= pthread_mutex_init(&rmutex, &attr) == 0;
    for (int depth = 0; depth < 3; depth++) ok &= pthread_mutex_lock(&rmutex) == 0;
    pthread_create(&thread, NULL, other, NULL);
    pthread_join(thread, NULL);
    ok &= trylock_result == EBUSY;
    for (int depth = 0; depth < 3; depth++) ok &= pthread_mutex_unlock(&rmutex) == 0;
    ok &= pthread_mutex_destroy(&rmutex) == 0;
    ok &= pthread_mutex_lock(&plain) == 0;
    ok &= pthread_mutex_unlock(&plain) == 0;
    printf("rmutex=%lu plain=%lu\n", (unsigned long)&rmutex, (unsigned long)&plain);
    return ok ? 0 : 1;
}
