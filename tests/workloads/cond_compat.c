/* Built against the old pthread_cond_wait@GLIBC_2.2.5 and pthread_cond_signal@GLIBC_2.2.5,
 * which glibc keeps for old binaries: they call the new implementation on a condition
 * variable of their own. A waker sets a flag and signals; main waits for it.
 * Prints "cond=ADDR mutex=ADDR waits=N". */
#include <pthread.h>
#include <stdio.h>

__asm__(".symver pthread_cond_wait,pthread_cond_wait@GLIBC_2.2.5");
__asm__(".symver pthread_cond_signal,pthread_cond_signal@GLIBC_2.2.5");

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int ready;

static void *waker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mutex);
    ready = 1;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&mutex);
    return NULL;
}

int main(void) {
    pthread_t thread;
    int waits = 0;
    pthread_mutex_lock(&mutex);
    pthread_create(&thread, NULL, waker, NULL);
    while (!ready) {
        waits++;
        pthread_cond_wait(&cond, &mutex);
    }
    pthread_mutex_unlock(&mutex);
    pthread_join(thread, NULL);
    printf("cond=%lu mutex=%lu waits=%d\n", (unsigned long)&cond, (unsigned long)&mutex, waits);
    return 0;
}
