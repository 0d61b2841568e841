/* A known rwlock story:
 *  - 3 readers take the read lock one after another (rw_readers 1, 2, 3) and hold it;
 *  - main: trywrlock -> EBUSY; timedwrlock -> ETIMEDOUT after 20 ms;
 *  - a writer calls wrlock and must sleep behind the readers (block? = 1);
 *  - the readers let go one by one (a writer is waiting: waiters? = 1), the writer gets it;
 *  - main: tryrdlock -> EBUSY; the writer lets go (nobody waits: waiters? = 0).
 * Prints "rwlock=ADDR deadline=SEC.NSEC" and exits 0 if glibc agreed. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "deadline.h"

#define READERS 3

static pthread_rwlock_t rwlock;
static sem_t turn[READERS + 1], reader_holds, release_reader[READERS], writer_holds, release_writer;

static void *reader(void *arg) {
    long me = (long)arg;
    sem_wait(&turn[me]);
    pthread_rwlock_rdlock(&rwlock);
    sem_post(&turn[me + 1]);
    sem_post(&reader_holds);
    sem_wait(&release_reader[me]);
    pthread_rwlock_unlock(&rwlock);
    return NULL;
}

static void *writer(void *arg) {
    (void)arg;
    pthread_rwlock_wrlock(&rwlock);
    sem_post(&writer_holds);
    sem_wait(&release_writer);
    pthread_rwlock_unlock(&rwlock);
    return NULL;
}

int main(void) {
    pthread_t readers[READERS], writer_thread;
    int ok = 1;
    for (int i = 0; i <= READERS; i++) sem_init(&turn[i], 0, 0);
    for (int i = 0; i < READERS; i++) sem_init(&release_reader[i], 0, 0);
    sem_init(&reader_holds, 0, 0);
    sem_init(&writer_holds, 0, 0);
    sem_init(&release_writer, 0, 0);
    ok &= pthread_rwlock_init(&rwlock, NULL) == 0;

    for (long i = 0; i < READERS; i++) pthread_create(&readers[i], NULL, reader, (void *)i);
    sem_post(&turn[0]);
    for (int i = 0; i < READERS; i++) sem_wait(&reader_holds);

    ok &= pthread_rwlock_trywrlock(&rwlock) == EBUSY;
    struct timespec deadline = deadline_in_ms(CLOCK_REALTIME, 20);
    ok &= pthread_rwlock_timedwrlock(&rwlock, &deadline) == ETIMEDOUT;

    pthread_create(&writer_thread, NULL, writer, NULL);
    usleep(200 * 1000); /* the writer is asleep in wrlock behind the readers by then */
    for (int i = 0; i < READERS; i++) {
        sem_post(&release_reader[i]);
        pthread_join(readers[i], NULL);
    }
    sem_wait(&writer_holds);
    ok &= pthread_rwlock_tryrdlock(&rwlock) == EBUSY;
    sem_post(&release_writer);
    pthread_join(writer_thread, NULL);
    ok &= pthread_rwlock_destroy(&rwlock) == 0;
    printf("rwlock=%lu deadline=%ld.%09ld\n", (unsigned long)&rwlock, (long)deadline.tv_sec,
           deadline.tv_nsec);
    return ok ? 0 : 1;
}
