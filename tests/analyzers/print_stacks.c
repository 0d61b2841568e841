/* A POSIX trace analyzer of call stacks (thrtrace-bpf's extension): prints each THRTRACE_STACK
 * event as "stack ID PID FRAME... [| END]" (frames in hex, innermost first), and each thread
 * event that names a stack as "record LWPID EVENT1 EVENT2 WHICH STACK".
 * Usage: print_stacks LOG. Exit 0, or 1 with the failing call and its error on stderr. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <trace.h>
#include <unistd.h>

#include "check.h"

/* A little-endian u32 at `p`. */
static uint32_t u32_at(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The stack event's payload: u32 id, bytes frames (u32 length, 8-byte addresses), str end. */
static int print_stack(const struct posix_trace_event_info *info, const unsigned char *data,
                       size_t len) {
    if (len < 8) return 1;
    uint32_t id = u32_at(data);
    uint32_t frames_len = u32_at(data + 4);
    if (8 + (size_t)frames_len + 4 > len || frames_len % 8 != 0) return 1;
    printf("stack %u %d", id, (int)info->posix_pid);
    for (uint32_t at = 0; at < frames_len; at += 8) {
        uint64_t frame = 0;
        for (int byte = 7; byte >= 0; byte--) frame = frame << 8 | data[8 + at + byte];
        printf(" %llx", (unsigned long long)frame);
    }
    const unsigned char *end = data + 8 + frames_len;
    uint32_t end_len = u32_at(end);
    if (8 + (size_t)frames_len + 4 + end_len > len) return 1;
    if (end_len > 0) printf(" | %.*s", (int)end_len, (const char *)end + 4);
    printf("\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) return 2;
    trace_id_t trid;
    CHECK(posix_trace_open(fd, &trid));
    close(fd);

    struct posix_trace_event_info info;
    unsigned char data[4096];
    size_t len;
    int unavailable;
    char name[TRACE_EVENT_NAME_MAX];
    for (;;) {
        CHECK(posix_trace_getnext_event(trid, &info, data, sizeof data, &len, &unavailable));
        if (unavailable) break;
        if (info.posix_event_id == THRTRACE_STACK) {
            if (print_stack(&info, data, len) != 0) {
                fprintf(stderr, "a stack event of %zu bytes does not hold its fields\n", len);
                return 1;
            }
            continue;
        }
        CHECK(posix_trace_eventid_get_name(trid, info.posix_event_id, name));
        if (strncmp(name, "posix_trace_", 12) == 0 || strncmp(name, "thrtrace_", 9) == 0)
            continue;
        struct thrtrace_record record;
        memcpy(&record, data, sizeof record);
        if (record.stack != 0)
            printf("record %d %d %d %d %u\n", record.lwpid, record.event1, record.event2,
                   record.which, record.stack);
    }
    CHECK(posix_trace_close(trid));
    return 0;
}
