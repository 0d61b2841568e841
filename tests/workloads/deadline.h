/* Shared by the workloads that time out: a deadline `ms` milliseconds from now on `clock`. */
#ifndef DEADLINE_H
#define DEADLINE_H
#include <time.h>

static inline struct timespec deadline_in_ms(clockid_t clock, long ms) {
    struct timespec t;
    clock_gettime(clock, &t);
    t.tv_nsec += ms * 1000 * 1000;
    t.tv_sec += t.tv_nsec / 1000000000;
    t.tv_nsec %= 1000000000;
    return t;
}
#endif
