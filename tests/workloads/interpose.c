/* A forwarding interposer, as profilers and wrappers are: preloaded (LD_PRELOAD), it defines
 * pthread_mutex_lock, pthread_mutex_trylock and pthread_mutex_unlock, counts the calls, and
 * forwards each to the next definition (the C library's). Built as libinterpose.so. With
 * INTERPOSE_COUNTS set, it prints its counts on stderr as the process exits:
 * "interposed: locks=N trylocks=N unlocks=N", an independent count of the program's calls. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_long locks, trylocks, unlocks;

int pthread_mutex_lock(pthread_mutex_t *mutex) {
    static int (*next)(pthread_mutex_t *);
    if (!next) next = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    atomic_fetch_add(&locks, 1);
    return next(mutex);
}

int pthread_mutex_trylock(pthread_mutex_t *mutex) {
    static int (*next)(pthread_mutex_t *);
    if (!next) next = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_trylock");
    atomic_fetch_add(&trylocks, 1);
    return next(mutex);
}

int pthread_mutex_unlock(pthread_mutex_t *mutex) {
    static int (*next)(pthread_mutex_t *);
    if (!next) next = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_unlock");
    atomic_fetch_add(&unlocks, 1);
    return next(mutex);
}

__attribute__((destructor)) static void print_counts(void) {
    if (getenv("INTERPOSE_COUNTS"))
        fprintf(stderr, "interposed: locks=%ld trylocks=%ld unlocks=%ld\n", atomic_load(&locks),
                atomic_load(&trylocks), atomic_load(&unlocks));
}
