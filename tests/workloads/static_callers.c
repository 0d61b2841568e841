/* Locks taken from static functions, built with -O2 -fomit-frame-pointer (build.rs), so that
 * only the module, its symbols and its debug information place the callers: a global mutex
 * taken through an inlined helper, a heap mutex taken directly, and libc's own lock taken
 * inside libc by dl_iterate_phdr.
 * Usage: static_callers ROUNDS
 * Prints "global=<address> heap=<address>". */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile long counter;

static inline __attribute__((always_inline)) void take(pthread_mutex_t *lock) {
    pthread_mutex_lock(lock); /* TAKE */
}

static __attribute__((noipa)) void bump_global(void) {
    take(&global_lock); /* INLINED */
    counter++;
    pthread_mutex_unlock(&global_lock);
}

static __attribute__((noipa)) void bump_heap(pthread_mutex_t *lock) {
    pthread_mutex_lock(lock); /* HEAP */
    counter++;
    pthread_mutex_unlock(lock);
}

static int count_module(struct dl_phdr_info *info, size_t size, void *modules) {
    (void)info;
    (void)size;
    ++*(int *)modules;
    return 0;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    pthread_mutex_t *heap = malloc(sizeof *heap);
    if (heap == NULL || pthread_mutex_init(heap, NULL) != 0)
        return 1;
    printf("global=%lu heap=%lu\n", (unsigned long)&global_lock, (unsigned long)heap);
    fflush(stdout);
    int modules = 0;
    for (int i = 0; i < rounds; i++) {
        bump_global();
        bump_heap(heap);
        dl_iterate_phdr(count_module, &modules);
    }
    pthread_mutex_destroy(heap);
    free(heap);
    return modules > 0 ? 0 : 1;
}
