/* What made `--follow` change stress-ng's mutex stressor: a thread created while another thread
 * of the process runs at a real-time priority. A forked child pins its main thread to CPU
 * MAIN_CPU and, each round, starts a SCHED_FIFO thread that spins SPIN_MS on CPU RT_CPU; once it
 * spins, the main thread creates a thread that returns at once, and looks whether the spinner
 * still spins when pthread_create returns (untraced it always does: the create takes
 * microseconds). A tracer whose ptrace thread runs on RT_CPU below the spinner's priority holds
 * the creating thread in its clone stop until the spin ends.
 * Usage: rt_create ROUNDS SPIN_MS RT_CPU MAIN_CPU   (root: SCHED_FIFO)
 * The child prints "overlapped=N rounds=ROUNDS slowest_us=US": in N rounds the create returned
 * while the spinner spun; US the slowest create. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long spin_ms;
static atomic_int spinning;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void *spin(void *arg) {
    (void)arg;
    double until = now_us() + spin_ms * 1000.0;
    atomic_store(&spinning, 1);
    while (now_us() < until) {
    }
    atomic_store(&spinning, 0);
    return NULL;
}

static void *nothing(void *arg) { return arg; }

static void pin(pthread_attr_t *attr, int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_attr_setaffinity_np(attr, sizeof set, &set);
}

int main(int argc, char **argv) {
    if (argc < 5) return 2;
    int rounds = atoi(argv[1]);
    spin_ms = atol(argv[2]);
    int rt_cpu = atoi(argv[3]), main_cpu = atoi(argv[4]);
    pid_t child = fork();
    if (child == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(main_cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(3);
        int overlapped = 0;
        double slowest = 0;
        for (int round = 0; round < rounds; round++) {
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
            pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
            struct sched_param param = {.sched_priority = 10};
            pthread_attr_setschedparam(&attr, &param);
            pin(&attr, rt_cpu);
            pthread_t spinner, quick;
            if (pthread_create(&spinner, &attr, spin, NULL) != 0) _exit(4);
            while (!atomic_load(&spinning)) {
            }
            double start = now_us();
            if (pthread_create(&quick, NULL, nothing, NULL) != 0) _exit(5);
            double took = now_us() - start;
            overlapped += atomic_load(&spinning);
            if (took > slowest) slowest = took;
            pthread_join(quick, NULL);
            pthread_join(spinner, NULL);
            pthread_attr_destroy(&attr);
        }
        printf("overlapped=%d rounds=%d slowest_us=%.0f\n", overlapped, rounds, slowest);
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
