/* A POSIX trace analyzer: lists a log's event types as "# ID NAME" lines, then prints each
 * thread event as its tr line (sec:nsec:lwpid:pid:tid:event1:event2:which:a1:...:a5).
 * Usage: print_tr LOG. Exit 0, or 1 with the failing call and its error on stderr. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <trace.h>
#include <unistd.h>

#include "check.h"

static int is_system(const char *name) {
    return strncmp(name, "posix_trace_", 12) == 0 || strncmp(name, "thrtrace_", 9) == 0;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) return 2;
    trace_id_t trid;
    CHECK(posix_trace_open(fd, &trid));
    close(fd); /* the library keeps its own descriptor */

    trace_event_id_t id;
    int unavailable;
    char name[TRACE_EVENT_NAME_MAX];
    for (;;) {
        CHECK(posix_trace_eventtypelist_getnext_id(trid, &id, &unavailable));
        if (unavailable) break;
        CHECK(posix_trace_eventid_get_name(trid, id, name));
        printf("# %u %s\n", id, name);
    }

    struct posix_trace_event_info info;
    struct thrtrace_record record;
    size_t len;
    for (;;) {
        CHECK(posix_trace_getnext_event(trid, &info, &record, sizeof record, &len,
                                        &unavailable));
        if (unavailable) break;
        CHECK(posix_trace_eventid_get_name(trid, info.posix_event_id, name));
        if (is_system(name)) continue;
        if (len != sizeof record || info.posix_truncation_status != POSIX_TRACE_NOT_TRUNCATED) {
            fprintf(stderr, "%s: %zu bytes, truncation %d\n", name, len,
                    info.posix_truncation_status);
            return 1;
        }
        printf("%ld:%ld:%d:%d:%lu:%d:%d:%d:%ld:%ld:%ld:%ld:%ld\n",
               (long)info.posix_timestamp.tv_sec, info.posix_timestamp.tv_nsec, record.lwpid,
               (int)info.posix_pid, (unsigned long)info.posix_thread_id, record.event1,
               record.event2, record.which, record.a[0], record.a[1], record.a[2], record.a[3],
               record.a[4]);
    }
    CHECK(posix_trace_close(trid));
    return 0;
}
