/* A thread other than the main one execs: the kernel ends the others, and the exec'ing thread
 * goes on as the process, under the process's pid.
 * Usage: thread_exec PROGRAM [ARGS...]   runs PROGRAM ARGS from a new thread.
 * The new thread execs only once the main thread's pthread_create has returned (told through a
 * pipe, which no probe sees), so the trace always holds that call's entry and return. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static char **program;
static int created[2];

static void *exec_program(void *unused) {
    (void)unused;
    char byte;
    if (read(created[0], &byte, 1) != 1) _exit(126);
    execv(program[0], program);
    perror("execv");
    _exit(127);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    program = argv + 1;
    if (pipe(created) != 0) return 1;
    pthread_t thread;
    if (pthread_create(&thread, NULL, exec_program, NULL) != 0) return 1;
    if (write(created[1], "", 1) != 1) return 1;
    for (;;) pause();
}
