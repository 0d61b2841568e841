/* A signal handler's call made while the thread is inside a traced call is the program's own:
 * a worker blocks in pthread_mutex_lock on a mutex main holds; main signals it (SIGUSR1), and
 * its handler calls sem_post, which main waits for before it unlocks. The worker's records are
 * its lock's entry, the handler's sema_post, and the lock's return, with every C library
 * (musl's lock is inside its pthread_mutex_timedlock then).
 * Prints "sem=ADDR mutex=ADDR". */
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static sem_t posted;
static volatile sig_atomic_t waiting;
static volatile long worker_tid;

static void on_signal(int signal) {
    (void)signal;
    sem_post(&posted);
}

static void *worker(void *arg) {
    (void)arg;
    worker_tid = syscall(SYS_gettid);
    waiting = 1;
    pthread_mutex_lock(&mutex);
    pthread_mutex_unlock(&mutex);
    return NULL;
}

/* Whether thread `tid` of this process sleeps (state S in its stat line). */
static int asleep(long tid) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    FILE *stat = fopen(path, "r");
    if (!stat) {
        perror(path);
        exit(1);
    }
    size_t read = fread(line, 1, sizeof line - 1, stat);
    fclose(stat);
    line[read] = 0;
    /* The state follows the name, which is in parentheses and may hold any character. */
    const char *end = strrchr(line, ')');
    return end && end[1] == ' ' && end[2] == 'S';
}

int main(void) {
    struct sigaction action = {.sa_handler = on_signal};
    sigemptyset(&action.sa_mask);
    sigaction(SIGUSR1, &action, NULL);
    sem_init(&posted, 0, 0);
    pthread_mutex_lock(&mutex);
    pthread_t thread;
    pthread_create(&thread, NULL, worker, NULL);
    while (!waiting) usleep(1000);
    /* Until the worker sleeps in the lock, however slow the machine (an emulated guest on a
     * busy host took longer than any fixed delay). */
    while (!asleep(worker_tid)) usleep(1000);
    pthread_kill(thread, SIGUSR1);
    sem_wait(&posted);
    pthread_mutex_unlock(&mutex);
    pthread_join(thread, NULL);
    printf("sem=%lu mutex=%lu\n", (unsigned long)&posted, (unsigned long)&mutex);
    return 0;
}
