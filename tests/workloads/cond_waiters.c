/* waiters? of a condition variable, known at each call: a signal with no waiter, a broadcast
 * once both waiters are in pthread_cond_wait (they count themselves under the mutex, and
 * pthread_cond_wait registers a waiter before it lets the mutex go), and a signal after they
 * are gone.
 * Prints "cond=ADDR". */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int waiting, go;

static void *waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mutex);
    waiting++;
    while (!go) pthread_cond_wait(&cond, &mutex);
    pthread_mutex_unlock(&mutex);
    return NULL;
}

int main(void) {
    pthread_cond_signal(&cond); /* no waiter */
    pthread_t ids[2];
    for (int t = 0; t < 2; t++) pthread_create(&ids[t], NULL, waiter, NULL);
    for (;;) {
        pthread_mutex_lock(&mutex);
        if (waiting == 2) break;
        pthread_mutex_unlock(&mutex);
        usleep(1000);
    }
    go = 1;
    pthread_cond_broadcast(&cond); /* two waiters */
    pthread_mutex_unlock(&mutex);
    for (int t = 0; t < 2; t++) pthread_join(ids[t], NULL);
    pthread_cond_signal(&cond); /* no waiter again */
    printf("cond=%lu\n", (unsigned long)&cond);
    return 0;
}
