/* One producer (main) and CONSUMERS consumers hand ITEMS items over a queue guarded by a mutex
 * and a condition variable; then one pthread_cond_timedwait that must time out.
 * Usage: cond_prodcons CONSUMERS ITEMS
 * Prints the workload's own counts of each call, which a trace must match exactly:
 *   cond=ADDR mutex=ADDR never=ADDR waits=N signals=N broadcasts=N deadline=SEC.NSEC timedwait=RC */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "deadline.h"

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nonempty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static long queue, done, waits, signals, broadcasts, consumed;

static void *consumer(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mutex);
        while (queue == 0 && !done) {
            waits++;
            pthread_cond_wait(&nonempty, &mutex);
        }
        if (queue == 0) {
            pthread_mutex_unlock(&mutex);
            return NULL;
        }
        queue--;
        consumed++;
        pthread_mutex_unlock(&mutex);
    }
}

int main(int argc, char **argv) {
    int consumers = argc > 1 ? atoi(argv[1]) : 2;
    long items = argc > 2 ? atol(argv[2]) : 1000;
    pthread_t ids[64];
    if (consumers < 1 || consumers > 64) return 2;
    for (int t = 0; t < consumers; t++) pthread_create(&ids[t], NULL, consumer, NULL);
    for (long i = 0; i < items; i++) {
        pthread_mutex_lock(&mutex);
        queue++;
        signals++;
        pthread_cond_signal(&nonempty);
        pthread_mutex_unlock(&mutex);
    }
    pthread_mutex_lock(&mutex);
    done = 1;
    broadcasts++;
    pthread_cond_broadcast(&nonempty);
    pthread_mutex_unlock(&mutex);
    for (int t = 0; t < consumers; t++) pthread_join(ids[t], NULL);

    struct timespec deadline = deadline_in_ms(CLOCK_REALTIME, 20);
    pthread_mutex_lock(&mutex);
    int rc = pthread_cond_timedwait(&never, &mutex, &deadline);
    pthread_mutex_unlock(&mutex);

    printf("cond=%lu mutex=%lu never=%lu waits=%ld signals=%ld broadcasts=%ld deadline=%ld.%09ld "
           "timedwait=%d\n",
           (unsigned long)&nonempty, (unsigned long)&mutex, (unsigned long)&never, waits, signals,
           broadcasts, (long)deadline.tv_sec, deadline.tv_nsec, rc);
    return consumed == items && rc == ETIMEDOUT ? 0 : 1;
}
