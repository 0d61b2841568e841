/* A known spin lock story: another thread holds the lock; main's trylock fails with EBUSY and
 * its spin_lock spins until the holder lets go (block? = 1); then an uncontended lock and unlock
 * (block? = 0). The holder lets go 100 ms after main says its trylock failed, not after it took
 * the lock: a guest on a busy host may stall main longer than any fixed hold between the two.
 * Prints "spin=ADDR". */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <unistd.h>

static pthread_spinlock_t spin;
static sem_t held, refused;

static void *holder(void *arg) {
    (void)arg;
    pthread_spin_lock(&spin);
    sem_post(&held);
    sem_wait(&refused);
    usleep(100 * 1000);
    pthread_spin_unlock(&spin);
    return NULL;
}

int main(void) {
    pthread_t thread;
    int ok = 1;
    sem_init(&held, 0, 0);
    sem_init(&refused, 0, 0);
    ok &= pthread_spin_init(&spin, PTHREAD_PROCESS_PRIVATE) == 0;
    pthread_create(&thread, NULL, holder, NULL);
    sem_wait(&held);
    ok &= pthread_spin_trylock(&spin) == EBUSY;
    sem_post(&refused);
    ok &= pthread_spin_lock(&spin) == 0;
    ok &= pthread_spin_unlock(&spin) == 0;
    pthread_join(thread, NULL);
    ok &= pthread_spin_lock(&spin) == 0;
    ok &= pthread_spin_unlock(&spin) == 0;
    ok &= pthread_spin_destroy(&spin) == 0;
    printf("spin=%lu\n", (unsigned long)&spin);
    return ok ? 0 : 1;
}
