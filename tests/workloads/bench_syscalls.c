/* Cheap syscalls in tight loops, timed inside: what a process that is not traced pays while a
 * trace hooks the futex syscall elsewhere. getppid is any syscall (a syscall tracepoint puts
 * every one on the slow path); a FUTEX_WAKE_PRIVATE on a word nobody waits on is a futex call
 * that returns at once (a hook on the futex syscall runs for it).
 * Usage: bench_syscalls CALLS
 * Prints "getppid_ns=X futex_wake_ns=Y ops=N": wall time per call of each loop. */
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int word;

static double now_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1e9 + now.tv_nsec;
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 1000000;
    double start = now_ns();
    for (long i = 0; i < calls; i++) syscall(SYS_getppid);
    double getppid_ns = (now_ns() - start) / calls;
    start = now_ns();
    for (long i = 0; i < calls; i++) syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    double futex_wake_ns = (now_ns() - start) / calls;
    printf("getppid_ns=%.1f futex_wake_ns=%.1f ops=%ld\n", getppid_ns, futex_wake_ns, calls);
    return 0;
}
