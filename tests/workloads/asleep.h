/* Whether a thread of this process is asleep in a syscall (a futex wait): the certain sign that
 * a lock call blocked, which a workload waits for before it lets the lock go, so that its
 * contention does not depend on how fast its threads run (emulated kernels run them very
 * slowly). A futex wait that returns at once (EAGAIN) never sleeps. */
#ifndef ASLEEP_H
#define ASLEEP_H
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* Whether thread `tid` is asleep (its /proc/self/task/TID/stat says S) in syscall `number`,
 * called with `first` as its first argument unless it is NULL (its /proc/self/task/TID/syscall). */
static inline int asleep_in(pid_t tid, long number, const void *first) {
    char path[64], text[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    size_t length = fread(text, 1, sizeof text - 1, file);
    fclose(file);
    text[length] = 0;
    /* The state follows the command's closing parenthesis. */
    char *end = strrchr(text, ')');
    if (!end || end[1] != ' ' || end[2] != 'S') return 0;
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    file = fopen(path, "r");
    if (!file) return 0;
    long called = -1;
    unsigned long argument = 0;
    int read = fscanf(file, "%ld %lx", &called, &argument);
    fclose(file);
    return read == 2 && called == number && (!first || argument == (unsigned long)first);
}

/* Returns once each of the `count` threads `tids` (0: not started yet) is asleep in a futex
 * wait. */
static inline void until_asleep_in_futex(const volatile pid_t *tids, long count) {
    for (long i = 0; i < count; i++)
        while (!tids[i] || !asleep_in(tids[i], SYS_futex, NULL)) usleep(1000);
}
#endif
