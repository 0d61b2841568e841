/* Thread and process creation, timed inside the process: what --follow costs a target.
 * Usage: bench_spawn threads N   N pthread_create + pthread_join of a thread that returns;
 *        bench_spawn execs N     N fork + exec of this program ("bench_spawn exit") + wait;
 *        bench_spawn exit        exits at once.
 * Prints "ns_per_op=X ops=N". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *nothing(void *arg) { return arg; }

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "exit") == 0) return 0;
    long n = argc > 2 ? atol(argv[2]) : 1000;
    int threads = strcmp(argv[1], "threads") == 0;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < n; i++) {
        if (threads) {
            pthread_t id;
            if (pthread_create(&id, NULL, nothing, NULL) != 0 || pthread_join(id, NULL) != 0)
                return 1;
            continue;
        }
        pid_t child = fork();
        if (child == 0) {
            execl("/proc/self/exe", argv[0], "exit", (char *)NULL);
            _exit(127);
        }
        int status;
        if (waitpid(child, &status, 0) != child || status != 0) return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("ns_per_op=%.1f ops=%ld\n", ns / n, n);
    return 0;
}
