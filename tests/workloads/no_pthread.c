/* A program with no pthread functions, and no C library at all (built -nostdlib -static):
 * prints "ready", reads stdin until end of file, then exits with status 7. */
#if defined(__x86_64__)
enum { SYS_READ = 0, SYS_WRITE = 1, SYS_EXIT = 60 };

static long syscall3(long number, long a, long b, long c) {
    long result;
    __asm__ volatile("syscall"
                     : "=a"(result)
                     : "a"(number), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return result;
}
#elif defined(__aarch64__)
enum { SYS_READ = 63, SYS_WRITE = 64, SYS_EXIT = 93 };

static long syscall3(long number, long a, long b, long c) {
    register long x8 __asm__("x8") = number;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    __asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
    return x0;
}
#else
#error "no system call sequence for this architecture"
#endif

void _start(void) {
    char buffer[64];
    syscall3(SYS_WRITE, 1, (long)"ready\n", 6);
    while (syscall3(SYS_READ, 0, (long)buffer, sizeof buffer) > 0) {
    }
    syscall3(SYS_EXIT, 7, 0, 0);
    for (;;) {
    }
}
