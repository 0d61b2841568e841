/* A forwarding interposer, as profilers and wrappers are: preloaded (LD_PRELOAD), it defines
 * pthread_mutex_lock and pthread_mutex_unlock, counts the calls, and forwards each to the next
 * definition (the C library's). Built as libinterpose.so. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>

static atomic_long locks, unlocks;

int pthread_mutex_lock(pthread_mutex_t *mutex) {
    static int (*next)(pthread_mutex_t *);
    if (!next) next = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    atomic_fetch_add(&locks, 1);
    return next(mutex);
}

int pthread_mutex_unlock(pthread_mutex_t *mutex) {
    static int (*next)(pthread_mutex_t *);
    if (!next) next = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_unlock");
    atomic_fetch_add(&unlocks, 1);
    return next(mutex);
}
