/* Two named threads lock two mutexes in opposite orders (AB-BA) and deadlock.
 * Usage: deadlock before|after
 * "worker-a" takes `first` then `second`, "worker-b" `second` then `first`. With "before" they
 * take their first mutex before the line "ready pid=PID first=ADDR second=ADDR a=TID b=TID"
 * is printed (a tracer attached then sees only their second lock: the owners are known from
 * glibc's __owner); with "after", only once a line is read from stdin. Either way, a line on
 * stdin then lets them take their second mutex: they deadlock, and the process waits to be
 * killed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t first = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t second = PTHREAD_MUTEX_INITIALIZER;
static atomic_int holding, go_first, go_second;
static atomic_int tids[2];

struct worker {
    const char *name;
    pthread_mutex_t *mine, *other;
    int index;
};

static void *work(void *arg) {
    struct worker *w = arg;
    pthread_setname_np(pthread_self(), w->name);
    atomic_store(&tids[w->index], (int)syscall(SYS_gettid));
    while (!atomic_load(&go_first)) usleep(100);
    pthread_mutex_lock(w->mine); /* FIRST */
    atomic_fetch_add(&holding, 1);
    while (!atomic_load(&go_second)) usleep(100);
    pthread_mutex_lock(w->other); /* SECOND */
    return NULL;
}

int main(int argc, char **argv) {
    int before = argc > 1 && strcmp(argv[1], "before") == 0;
    struct worker a = {"worker-a", &first, &second, 0}, b = {"worker-b", &second, &first, 1};
    pthread_t ta, tb;
    char line[8];
    pthread_create(&ta, NULL, work, &a);
    pthread_create(&tb, NULL, work, &b);
    if (before) atomic_store(&go_first, 1);
    while ((before && atomic_load(&holding) < 2) || !atomic_load(&tids[0]) || !atomic_load(&tids[1]))
        usleep(100);
    printf("ready pid=%d first=%lu second=%lu a=%d b=%d\n", getpid(), (unsigned long)&first,
           (unsigned long)&second, atomic_load(&tids[0]), atomic_load(&tids[1]));
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
    atomic_store(&go_first, 1);
    while (atomic_load(&holding) < 2) usleep(100);
    atomic_store(&go_second, 1);
    pthread_join(ta, NULL);
    return 0;
}
