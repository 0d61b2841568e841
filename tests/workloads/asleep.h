/* Whether a thread of this process is asleep in a futex wait: the certain sign that a lock
 * call blocked, which a workload waits for before it lets the lock go, so that its contention
 * does not depend on how fast its threads run (emulated kernels run them very slowly). */
#ifndef ASLEEP_H
#define ASLEEP_H
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* Whether thread `tid` is asleep (state S) in the futex syscall. */
static int asleep_in_futex(pid_t tid) {
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
    long number = -1;
    int read = fscanf(file, "%ld", &number);
    fclose(file);
    return read == 1 && number == SYS_futex;
}

/* Returns once each of the `count` threads `tids` (0: not started yet) is asleep in a futex
 * wait. */
static void until_asleep_in_futex(const volatile pid_t *tids, long count) {
    for (long i = 0; i < count; i++)
        while (!tids[i] || !asleep_in_futex(tids[i])) usleep(1000);
}
#endif
