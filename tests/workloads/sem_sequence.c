/* A fixed sequence of semaphore calls whose every s_count, return value and errno is known:
 *   sem_init(2); wait (s_count 2); wait (1); trywait -> -1 EAGAIN; post (-> 1); post (-> 2);
 *   trywait -> 0; wait (1); timedwait on 0 -> -1 ETIMEDOUT; clockwait on 0 -> -1 ETIMEDOUT
 *   (glibc only: musl has no sem_clockwait); destroy.
 * Prints "sem=ADDR deadline=SEC.NSEC clockdeadline=SEC.NSEC" and exits 0 if the C library
 * agreed. */
#define _GNU_SOURCE
#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>

#include "deadline.h"

int main(void) {
    sem_t sem;
    int ok = 1;
    ok &= sem_init(&sem, 0, 2) == 0;
    ok &= sem_wait(&sem) == 0;
    ok &= sem_wait(&sem) == 0;
    ok &= sem_trywait(&sem) == -1 && errno == EAGAIN;
    ok &= sem_post(&sem) == 0;
    ok &= sem_post(&sem) == 0;
    ok &= sem_trywait(&sem) == 0;
    ok &= sem_wait(&sem) == 0;
    struct timespec deadline = deadline_in_ms(CLOCK_REALTIME, 20);
    ok &= sem_timedwait(&sem, &deadline) == -1 && errno == ETIMEDOUT;
#ifdef __GLIBC__
    struct timespec clock_deadline = deadline_in_ms(CLOCK_MONOTONIC, 20);
    ok &= sem_clockwait(&sem, CLOCK_MONOTONIC, &clock_deadline) == -1 && errno == ETIMEDOUT;
#else
    struct timespec clock_deadline = {0, 0};
#endif
    ok &= sem_destroy(&sem) == 0;
    printf("sem=%lu deadline=%ld.%09ld clockdeadline=%ld.%09ld\n", (unsigned long)&sem,
           (long)deadline.tv_sec, deadline.tv_nsec, (long)clock_deadline.tv_sec,
           clock_deadline.tv_nsec);
    return ok ? 0 : 1;
}
