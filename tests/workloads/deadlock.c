/* Two named threads lock two mutexes in opposite orders (AB-BA) and deadlock.
 * Usage: deadlock before|after|cond
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

/* "cond": worker-c signals `cond` once, then worker-a takes `first` and waits on `cond`
 * (releasing `second`), and worker-c, which would signal it again, waits for `first`: a
 * possible deadlock through a condvar. */
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static atomic_int signaled, waiting_on_cond;

static void *cond_waiter(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "worker-a");
    atomic_store(&tids[0], (int)syscall(SYS_gettid));
    while (!atomic_load(&signaled)) usleep(100);
    pthread_mutex_lock(&first);
    pthread_mutex_lock(&second);
    atomic_store(&waiting_on_cond, 1);
    pthread_cond_wait(&cond, &second); /* COND */
    return NULL;
}

static void *signaler(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "worker-c");
    atomic_store(&tids[1], (int)syscall(SYS_gettid));
    while (!atomic_load(&go_first)) usleep(100);
    pthread_cond_signal(&cond);
    atomic_store(&signaled, 1);
    while (!atomic_load(&waiting_on_cond)) usleep(100);
    pthread_mutex_lock(&first); /* BLOCKED */
    pthread_cond_signal(&cond);
    return NULL;
}

int main(int argc, char **argv) {
    int before = argc > 1 && strcmp(argv[1], "before") == 0;
    int cond_mode = argc > 1 && strcmp(argv[1], "cond") == 0;
    struct worker a = {"worker-a", &first, &second, 0}, b = {"worker-b", &second, &first, 1};
    pthread_t ta, tb;
    char line[8];
    pthread_create(&ta, NULL, cond_mode ? cond_waiter : work, &a);
    pthread_create(&tb, NULL, cond_mode ? signaler : work, &b);
    if (before) atomic_store(&go_first, 1);
    while ((before && atomic_load(&holding) < 2) || !atomic_load(&tids[0]) || !atomic_load(&tids[1]))
        usleep(100);
    printf("ready pid=%d first=%lu second=%lu a=%d b=%d\n", getpid(), (unsigned long)&first,
           (unsigned long)&second, atomic_load(&tids[0]), atomic_load(&tids[1]));
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
    atomic_store(&go_first, 1);
    while (!cond_mode && atomic_load(&holding) < 2) usleep(100);
    atomic_store(&go_second, 1);
    pthread_join(ta, NULL);
    return 0;
}
