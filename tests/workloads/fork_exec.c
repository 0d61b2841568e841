/* Every way a process makes a child, each child's calls known:
 * - the parent makes 100 lock/unlock pairs;
 * - a fork()ed child makes 300, fails a sem_trywait (EAGAIN) and exits;
 * - a fork()ed child execs PROGRAM 1 250;
 * - a vfork()ed child execs PROGRAM 1 150;
 * - a posix_spawn()ed child (glibc: clone3 with CLONE_VM|CLONE_VFORK) runs PROGRAM 1 200;
 * - a clone()d child with no exit signal (ptrace's "clone" event, not "fork") makes 50.
 * PROGRAM is a build of mutex_contend: one thread, the given pairs, its own mutex line.
 * Usage: fork_exec PROGRAM
 * Prints "mutex=ADDR child=PID execer=PID vforker=PID spawned=PID cloned=PID" after every
 * child is gone. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char clone_stack[64 * 1024] __attribute__((aligned(16)));

static void pairs(int n) {
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&lock);
        pthread_mutex_unlock(&lock);
    }
}

static int cloned_child(void *unused) {
    (void)unused;
    pairs(50);
    return 0;
}

/* Waits for `child` (options: __WCLONE for one with no exit signal); 1 if it exited with 0. */
static int reaped(pid_t child, int options) {
    int status;
    return child > 0 && waitpid(child, &status, options) == child && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv) {
    int ok = 1;
    if (argc < 2) return 2;
    pairs(100);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        sem_t empty;
        pairs(300);
        sem_init(&empty, 0, 0);
        _exit(sem_trywait(&empty) == -1 ? 0 : 1);
    }
    ok &= reaped(child, 0);

    pid_t execer = fork();
    if (execer == 0) {
        execl(argv[1], argv[1], "1", "250", (char *)NULL);
        _exit(127);
    }
    ok &= reaped(execer, 0);

    pid_t vforker = vfork();
    if (vforker == 0) {
        execl(argv[1], argv[1], "1", "150", (char *)NULL);
        _exit(127);
    }
    ok &= reaped(vforker, 0);

    pid_t spawned;
    char *spawn_argv[] = {argv[1], "1", "200", NULL};
    ok &= posix_spawn(&spawned, argv[1], NULL, NULL, spawn_argv, environ) == 0;
    ok &= reaped(spawned, 0);

    pid_t cloned = clone(cloned_child, clone_stack + sizeof clone_stack, 0, NULL);
    ok &= reaped(cloned, __WCLONE);

    printf("mutex=%lu child=%d execer=%d vforker=%d spawned=%d cloned=%d\n",
           (unsigned long)&lock, child, execer, vforker, spawned, cloned);
    return ok ? 0 : 1;
}
