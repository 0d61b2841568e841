/* Shared by the workloads whose waits must be certain: whether thread `tid` of this process is
 * asleep (its /proc/self/task/TID/stat says S) inside syscall `number` called with `first` as
 * its first argument (its /proc/self/task/TID/syscall). A thread seen so is blocked in that
 * call: a futex wait that returns at once (EAGAIN) never sleeps. */
#ifndef ASLEEP_H
#define ASLEEP_H
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

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
    return read == 2 && called == number && argument == (unsigned long)first;
}
#endif
