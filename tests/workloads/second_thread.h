/* A second thread that does nothing until told to end: glibc takes some paths only while a
 * process has one thread, and a workload with this one running measures the others. */
#ifndef SECOND_THREAD_H
#define SECOND_THREAD_H
#include <pthread.h>
#include <unistd.h>

static int second_thread_pipe[2];
static pthread_t second_thread_id;

/* Waits until the pipe's writing end is closed. */
static void *second_thread_idle(void *arg) {
    char byte;
    ssize_t got = read(second_thread_pipe[0], &byte, 1);
    (void)arg;
    (void)got;
    return NULL;
}

/* Starts the second thread; 0 on success. */
static inline int second_thread_start(void) {
    if (pipe(second_thread_pipe) != 0) return -1;
    return pthread_create(&second_thread_id, NULL, second_thread_idle, NULL);
}

/* Ends it and waits for it. */
static inline void second_thread_stop(void) {
    close(second_thread_pipe[1]);
    pthread_join(second_thread_id, NULL);
}
#endif
