/* What tracing must not break:
 *   cancel   a thread cancelled while blocked in pthread_cond_wait (unwinds through it);
 *   exit     pthread_exit from deep in a call chain, with a cleanup handler;
 *   longjmp  a signal handler that longjmps out of an interrupted pthread_cond_timedwait.
 * Usage: do_no_harm cancel|exit|longjmp
 * Prints what happened; the output and exit status must be the same traced and untraced. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int cleanups;

static void unlock_on_cancel(void *arg) {
    cleanups++;
    pthread_mutex_unlock(arg);
}

static void *wait_forever(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mutex);
    pthread_cleanup_push(unlock_on_cancel, &mutex);
    for (;;) pthread_cond_wait(&cond, &mutex);
    pthread_cleanup_pop(1);
    return NULL;
}

static int cancel(void) {
    pthread_t thread;
    void *result;
    pthread_create(&thread, NULL, wait_forever, NULL);
    usleep(100 * 1000);
    pthread_cancel(thread);
    pthread_join(thread, &result);
    printf("cancelled=%d cleanups=%d\n", result == PTHREAD_CANCELED, cleanups);
    return result == PTHREAD_CANCELED && cleanups == 1 ? 0 : 1;
}

/* Every path of leave() ends in pthread_exit, which never returns: GCC calls that infinite
 * recursion, and here it is the point. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winfinite-recursion"
static void leave(int depth) {
    pthread_mutex_lock(&mutex);
    pthread_mutex_unlock(&mutex);
    if (depth > 0)
        leave(depth - 1);
    else
        pthread_exit((void *)42);
}
#pragma GCC diagnostic pop

static void count_cleanup(void *arg) {
    (void)arg;
    cleanups++;
}

static void *deep(void *arg) {
    (void)arg;
    pthread_cleanup_push(count_cleanup, NULL);
    leave(20);
    pthread_cleanup_pop(0);
    return NULL;
}

static int exit_deep(void) {
    pthread_t thread;
    void *result;
    pthread_create(&thread, NULL, deep, NULL);
    pthread_join(thread, &result);
    printf("exit=%ld cleanups=%d\n", (long)result, cleanups);
    return result == (void *)42 && cleanups == 1 ? 0 : 1;
}

static sigjmp_buf escape;

static void on_alarm(int signal) {
    (void)signal;
    siglongjmp(escape, 1);
}

static int longjmp_out(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_alarm;
    sigaction(SIGALRM, &action, NULL);
    int escaped = 0;
    for (int round = 0; round < 3; round++) {
        if (sigsetjmp(escape, 1) == 0) {
            struct timespec deadline;
            clock_gettime(CLOCK_REALTIME, &deadline);
            deadline.tv_sec += 10;
            pthread_mutex_lock(&mutex);
            ualarm(50 * 1000, 0);
            pthread_cond_timedwait(&cond, &mutex, &deadline);
        } else {
            escaped++;
        }
        /* Leaving the wait from a signal handler leaves the mutex in whatever state the wait
         * had it: make sure it is held, then release it. */
        pthread_mutex_trylock(&mutex);
        pthread_mutex_unlock(&mutex);
    }
    printf("escaped=%d\n", escaped);
    /* A traced call works normally afterwards. */
    pthread_mutex_lock(&mutex);
    pthread_mutex_unlock(&mutex);
    return escaped == 3 ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "cancel")) return cancel();
    if (!strcmp(what, "exit")) return exit_deep();
    if (!strcmp(what, "longjmp")) return longjmp_out();
    fprintf(stderr, "usage: do_no_harm cancel|exit|longjmp\n");
    return 2;
}
