/* A program with no pthread functions, and no C library at all (built -nostdlib -static):
 * prints "ready", reads stdin until end of file, then exits with status 7. */
static long syscall3(long number, long a, long b, long c) {
    long result;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return result;
}

void _start(void) {
    char buffer[64];
    syscall3(1, 1, (long)"ready\n", 6);                          /* write */
    while (syscall3(0, 0, (long)buffer, sizeof buffer) > 0) {   /* read */
    }
    syscall3(60, 7, 0, 0);                                      /* exit */
    for (;;) {
    }
}
