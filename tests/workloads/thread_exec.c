/* A thread other than the main one execs: the kernel ends the others, and the exec'ing thread
 * goes on as the process, under the process's pid.
 * Usage: thread_exec PROGRAM [ARGS...]   runs PROGRAM ARGS from a new thread. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static char **program;

static void *exec_program(void *unused) {
    (void)unused;
    execv(program[0], program);
    perror("execv");
    _exit(127);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    program = argv + 1;
    pthread_t thread;
    if (pthread_create(&thread, NULL, exec_program, NULL) != 0) return 1;
    for (;;) pause();
}
