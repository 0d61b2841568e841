/* Opens each file given and reads it to the end through the POSIX trace analyzer API, printing
 * one line per file: "FILE open=ERRNO" for a file refused, or "FILE events=N end=ERRNO" where
 * end is 0 when every event was read and the error otherwise. Then checks the errors for
 * descriptors that cannot be a log. Usage: open_errors FILE... */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <trace.h>
#include <unistd.h>

static int expect(const char *what, int got, int wanted) {
    if (got == wanted) return 0;
    fprintf(stderr, "%s: %d, not %d\n", what, got, wanted);
    return 1;
}

int main(int argc, char **argv) {
    trace_id_t trid;
    for (int i = 1; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY);
        if (fd < 0) return 2;
        int error = posix_trace_open(fd, &trid);
        close(fd);
        if (error != 0) {
            printf("%s open=%d\n", argv[i], error);
            continue;
        }
        struct posix_trace_event_info info;
        char data[4096];
        size_t len;
        int unavailable = 0;
        unsigned long events = 0;
        for (;;) {
            error = posix_trace_getnext_event(trid, &info, data, sizeof data, &len, &unavailable);
            if (error != 0 || unavailable) break;
            events++;
        }
        printf("%s events=%lu end=%d\n", argv[i], events, error);
        posix_trace_close(trid);
    }
    int failed = 0;
    failed |= expect("a closed descriptor", posix_trace_open(1000, &trid), EBADF);
    int write_only = open("/dev/null", O_WRONLY);
    failed |= expect("a write-only descriptor", posix_trace_open(write_only, &trid), EBADF);
    close(write_only);
    int directory = open("/", O_RDONLY | O_DIRECTORY);
    failed |= expect("a directory", posix_trace_open(directory, &trid), EINVAL);
    close(directory);
    failed |= expect("a null trace id", posix_trace_open(0, NULL), EINVAL);
    failed |= expect("a trace never opened", posix_trace_rewind(12345), EINVAL);
    return failed;
}
