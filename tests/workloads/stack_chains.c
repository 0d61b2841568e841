/* Waits with whole call stacks to tell apart, for the stack tests.
 * Usage: stack_chains [HOLD_MS]
 * Thread "holder" takes the global mutex `big_lock` through the chain holder_1 .. holder_5,
 * keeps it HOLD_MS (default 200) once both waiters are about to lock it, and unlocks it from
 * holder_5. Threads "alpha" and "beta" lock it through alpha_1 .. alpha_5 and beta_1 ..
 * beta_5, and unlock it at once from alpha_5 / beta_5. Both waiters block: two contended
 * waits, the first ended by the holder's unlock, the second by the first waiter's. Every chain
 * function is its own frame, so that built with -fomit-frame-pointer only the binary's CFI can
 * unwind them.
 * Prints "big_lock=ADDR" first. The threads wait for one another with atomics and usleep, not
 * with traced calls. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

pthread_mutex_t big_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int held, about_to_lock;
static int hold_ms = 200;
/* Added to after each call in a chain: the call is not the function's last act. */
static volatile int after_call;

/* Each link calls the next and then adds its own number: not a tail call, and no two links
 * alike (GCC's identical code folding would make one function of alike ones). */
__attribute__((noinline)) static void holder_5(void) {
    pthread_mutex_lock(&big_lock);
    atomic_store(&held, 1);
    while (atomic_load(&about_to_lock) < 2)
        usleep(1000);
    usleep(hold_ms * 1000);
    pthread_mutex_unlock(&big_lock);
    after_call += 5;
}
__attribute__((noinline)) static void holder_4(void) {
    holder_5();
    after_call += 6;
}
__attribute__((noinline)) static void holder_3(void) {
    holder_4();
    after_call += 7;
}
__attribute__((noinline)) static void holder_2(void) {
    holder_3();
    after_call += 8;
}
__attribute__((noinline)) static void holder_1(void) {
    holder_2();
    after_call += 9;
}

__attribute__((noinline)) static void alpha_5(void) {
    atomic_fetch_add(&about_to_lock, 1);
    pthread_mutex_lock(&big_lock);
    pthread_mutex_unlock(&big_lock);
    after_call += 10;
}
__attribute__((noinline)) static void alpha_4(void) {
    alpha_5();
    after_call += 11;
}
__attribute__((noinline)) static void alpha_3(void) {
    alpha_4();
    after_call += 12;
}
__attribute__((noinline)) static void alpha_2(void) {
    alpha_3();
    after_call += 13;
}
__attribute__((noinline)) static void alpha_1(void) {
    alpha_2();
    after_call += 14;
}

__attribute__((noinline)) static void beta_5(void) {
    atomic_fetch_add(&about_to_lock, 1);
    pthread_mutex_lock(&big_lock);
    pthread_mutex_unlock(&big_lock);
    after_call += 15;
}
__attribute__((noinline)) static void beta_4(void) {
    beta_5();
    after_call += 16;
}
__attribute__((noinline)) static void beta_3(void) {
    beta_4();
    after_call += 17;
}
__attribute__((noinline)) static void beta_2(void) {
    beta_3();
    after_call += 18;
}
__attribute__((noinline)) static void beta_1(void) {
    beta_2();
    after_call += 19;
}

/* A thread's name and the chain it runs. */
struct chain {
    const char *name;
    void (*run)(void);
};

static void *run(void *arg) {
    const struct chain *chain = arg;
    /* Named before its first traced call: named by its creator once pthread_create returned,
     * a thread was seen to make its calls first, under its process's name. */
    pthread_setname_np(pthread_self(), chain->name);
    chain->run();
    return NULL;
}

static pthread_t start(struct chain *chain) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, run, chain) != 0) {
        perror("pthread_create");
        exit(1);
    }
    return thread;
}

int main(int argc, char **argv) {
    if (argc > 1)
        hold_ms = atoi(argv[1]);
    printf("big_lock=%p\n", (void *)&big_lock);
    fflush(stdout);
    static struct chain holder_chain = {"holder", holder_1}, alpha_chain = {"alpha", alpha_1},
                        beta_chain = {"beta", beta_1};
    pthread_t holder = start(&holder_chain);
    while (!atomic_load(&held))
        usleep(1000);
    pthread_t alpha = start(&alpha_chain);
    pthread_t beta = start(&beta_chain);
    pthread_join(holder, NULL);
    pthread_join(alpha, NULL);
    pthread_join(beta, NULL);
    return 0;
}
