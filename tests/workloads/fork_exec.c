/* A parent that makes 100 lock/unlock pairs, forks a child that makes 300, fails a sem_trywait
 * (EAGAIN) and exits, then forks a child that execs PROGRAM 1 250 (mutex_contend: one thread,
 * 250 pairs).
 * Usage: fork_exec PROGRAM
 * Prints "mutex=ADDR child=PID execer=PID" after both children are gone. */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void pairs(int n) {
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&lock);
        pthread_mutex_unlock(&lock);
    }
}

int main(int argc, char **argv) {
    int status, ok = 1;
    if (argc < 2) return 2;
    pairs(100);
    pid_t child = fork();
    if (child == 0) {
        sem_t empty;
        pairs(300);
        sem_init(&empty, 0, 0);
        _exit(sem_trywait(&empty) == -1 ? 0 : 1);
    }
    ok &= waitpid(child, &status, 0) == child && status == 0;
    fflush(stdout);
    pid_t execer = fork();
    if (execer == 0) {
        execl(argv[1], argv[1], "1", "250", (char *)NULL);
        _exit(127);
    }
    ok &= waitpid(execer, &status, 0) == execer && status == 0;
    printf("mutex=%lu child=%d execer=%d\n", (unsigned long)&lock, child, execer);
    return ok ? 0 : 1;
}
