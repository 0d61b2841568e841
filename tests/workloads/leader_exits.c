/* A process whose first thread exits while its others go on: it is not gone until they are.
 * Usage: leader_exits THREADS PAIRS
 * Prints "ready pid=PID mutex=ADDR", waits for a line on stdin, starts THREADS threads and ends
 * its main thread with pthread_exit. Once the main thread is a zombie, the first thread prints
 * "main exited" and waits for another line on stdin; then each thread makes PAIRS lock/unlock
 * pairs and prints "lwpid=TID"; the process exits with the last of them. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long pairs;
static atomic_int go_on;

/* Whether the main thread (task PID) has exited: its state in /proc is Z. */
static int main_thread_exited(void) {
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", getpid());
    FILE *file = fopen(path, "r");
    if (!file) return 1;
    size_t n = fread(stat, 1, sizeof stat - 1, file);
    fclose(file);
    stat[n] = '\0';
    const char *state = strrchr(stat, ')');
    return !state || state[2] == 'Z';
}

static void *worker(void *first) {
    if (first) {
        while (!main_thread_exited()) usleep(1000);
        printf("main exited\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) exit(1);
        atomic_store(&go_on, 1);
    }
    while (!atomic_load(&go_on)) usleep(1000);
    for (long i = 0; i < pairs; i++) {
        pthread_mutex_lock(&lock);
        pthread_mutex_unlock(&lock);
    }
    printf("lwpid=%ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int threads = atoi(argv[1]);
    pairs = atol(argv[2]);
    printf("ready pid=%d mutex=%lu\n", getpid(), (unsigned long)&lock);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    for (int t = 0; t < threads; t++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, worker, t == 0 ? &lock : NULL) != 0) return 1;
    }
    pthread_exit(NULL);
}
