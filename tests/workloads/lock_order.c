/* Lock orders that never deadlock in this run: each scenario's threads run one after the other
 * (each is joined before the next starts), so no call ever waits, yet the orders they take
 * locks in are what a lock-order analysis judges.
 * Usage: lock_order abba|ring|consistent|gate|recursive|trylock
 *   abba        "first" takes a then b; "second" b then a: one inversion.
 *   ring        "first" a then b, "second" b then c, "third" c then a: one cycle of three.
 *   consistent  "first" a then b, "second" a then b, "third" b then c: none.
 *   gate        "first" gate, a, b; "second" gate, b, a: both orders serialized by gate.
 *   recursive   "first" takes the recursive r, a, then r again under a: no a -> r order.
 *   trylock     "first" a then b; "second" b, then a by trylock: a trylock cannot wait.
 * Prints "ready pid=PID a=ADDR b=ADDR c=ADDR gate=ADDR r=ADDR" first. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t c = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t r = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static void *a_then_b(void *arg) {
    (void)arg;
    pthread_mutex_lock(&a); /* A_FIRST */
    pthread_mutex_lock(&b); /* B_AFTER_A */
    pthread_mutex_unlock(&b);
    pthread_mutex_unlock(&a);
    return NULL;
}

static void *b_then_a(void *arg) {
    (void)arg;
    pthread_mutex_lock(&b); /* B_FIRST */
    pthread_mutex_lock(&a); /* A_AFTER_B */
    pthread_mutex_unlock(&a);
    pthread_mutex_unlock(&b);
    return NULL;
}

static void *b_then_c(void *arg) {
    (void)arg;
    pthread_mutex_lock(&b); /* B_BEFORE_C */
    pthread_mutex_lock(&c); /* C_AFTER_B */
    pthread_mutex_unlock(&c);
    pthread_mutex_unlock(&b);
    return NULL;
}

static void *c_then_a(void *arg) {
    (void)arg;
    pthread_mutex_lock(&c); /* C_BEFORE_A */
    pthread_mutex_lock(&a); /* A_AFTER_C */
    pthread_mutex_unlock(&a);
    pthread_mutex_unlock(&c);
    return NULL;
}

/* The gate around another scenario's thread function. */
static void *gated(void *arg) {
    void *(*inner)(void *) = (void *(*)(void *))arg;
    pthread_mutex_lock(&gate); /* GATE */
    inner(NULL);
    pthread_mutex_unlock(&gate);
    return NULL;
}

static void *relock_under_a(void *arg) {
    (void)arg;
    pthread_mutex_lock(&r);
    pthread_mutex_lock(&a);
    pthread_mutex_lock(&r); /* RELOCK */
    pthread_mutex_unlock(&r);
    pthread_mutex_unlock(&a);
    pthread_mutex_unlock(&r);
    return NULL;
}

static void *b_then_try_a(void *arg) {
    (void)arg;
    pthread_mutex_lock(&b);
    if (pthread_mutex_trylock(&a) == 0) pthread_mutex_unlock(&a); /* TRY */
    pthread_mutex_unlock(&b);
    return NULL;
}

struct job {
    const char *name;
    void *(*function)(void *);
    void *arg;
};

/* A job on its thread: named first, by prctl, so that its first traced call comes after
 * (pthread_self, which pthread_setname_np would take, is one: a tracer that read the name at
 * that call would read the process's); alive a while after, so that a tracer reads its name. */
static void *named(void *arg) {
    struct job *job = arg;
    prctl(PR_SET_NAME, job->name);
    job->function(job->arg);
    usleep(200 * 1000);
    return NULL;
}

/* Runs `function` on a thread named `name` and waits for it to end. */
static void run(const char *name, void *(*function)(void *), void *arg) {
    struct job job = {name, function, arg};
    pthread_t thread;
    if (pthread_create(&thread, NULL, named, &job) != 0) exit(1);
    pthread_join(thread, NULL);
}

int main(int argc, char **argv) {
    const char *scenario = argc > 1 ? argv[1] : "abba";
    printf("ready pid=%d a=%p b=%p c=%p gate=%p r=%p\n", getpid(), (void *)&a, (void *)&b,
           (void *)&c, (void *)&gate, (void *)&r);
    fflush(stdout);
    if (strcmp(scenario, "abba") == 0) {
        run("first", a_then_b, NULL);
        run("second", b_then_a, NULL);
    } else if (strcmp(scenario, "ring") == 0) {
        run("first", a_then_b, NULL);
        run("second", b_then_c, NULL);
        run("third", c_then_a, NULL);
    } else if (strcmp(scenario, "consistent") == 0) {
        run("first", a_then_b, NULL);
        run("second", a_then_b, NULL);
        run("third", b_then_c, NULL);
    } else if (strcmp(scenario, "gate") == 0) {
        run("first", gated, (void *)a_then_b);
        run("second", gated, (void *)b_then_a);
    } else if (strcmp(scenario, "recursive") == 0) {
        run("first", relock_under_a, NULL);
    } else if (strcmp(scenario, "trylock") == 0) {
        run("first", a_then_b, NULL);
        run("second", b_then_try_a, NULL);
    } else {
        fprintf(stderr, "lock_order: unknown scenario %s\n", scenario);
        return 2;
    }
    return 0;
}
