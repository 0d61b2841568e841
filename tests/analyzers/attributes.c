/* A POSIX trace analyzer that walks a log's attributes and status, printed as key=value lines,
 * and checks the attribute functions' errors. Usage: attributes LOG. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <trace.h>
#include <unistd.h>

#include "check.h"

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) return 2;
    trace_id_t trid;
    CHECK(posix_trace_open(fd, &trid));

    trace_attr_t attr;
    char text[TRACE_NAME_MAX];
    struct timespec time;
    int policy;
    size_t size;
    /* A getter on an attribute object never initialized, or destroyed, is refused. */
    memset(&attr, 0, sizeof attr);
    EXPECT(posix_trace_attr_getname(&attr, text), EINVAL);
    CHECK(posix_trace_attr_init(&attr));
    CHECK(posix_trace_get_attr(trid, &attr));

    CHECK(posix_trace_attr_getgenversion(&attr, text));
    printf("genversion=%s\n", text);
    CHECK(posix_trace_attr_getname(&attr, text));
    printf("name=%s\n", text);
    CHECK(posix_trace_attr_getcreatetime(&attr, &time));
    printf("createtime=%ld.%09ld\n", (long)time.tv_sec, time.tv_nsec);
    CHECK(posix_trace_attr_getclockres(&attr, &time));
    printf("clockres=%ld.%09ld\n", (long)time.tv_sec, time.tv_nsec);
    CHECK(posix_trace_attr_getinherited(&attr, &policy));
    printf("inherited=%s\n", policy == POSIX_TRACE_INHERITED      ? "inherited"
                             : policy == POSIX_TRACE_CLOSE_FOR_CHILD ? "close-for-child"
                                                                     : "?");
    CHECK(posix_trace_attr_getstreamfullpolicy(&attr, &policy));
    printf("streamfullpolicy=%s\n", policy == POSIX_TRACE_FLUSH        ? "flush"
                                    : policy == POSIX_TRACE_LOOP       ? "loop"
                                    : policy == POSIX_TRACE_UNTIL_FULL ? "until-full"
                                                                       : "?");
    CHECK(posix_trace_attr_getlogfullpolicy(&attr, &policy));
    printf("logfullpolicy=%s\n", policy == POSIX_TRACE_APPEND       ? "append"
                                 : policy == POSIX_TRACE_LOOP       ? "loop"
                                 : policy == POSIX_TRACE_UNTIL_FULL ? "until-full"
                                                                    : "?");
    CHECK(posix_trace_attr_getstreamsize(&attr, &size));
    printf("streamsize=%zu\n", size);
    CHECK(posix_trace_attr_getlogsize(&attr, &size));
    printf("logsize=%zu\n", size);
    CHECK(posix_trace_attr_getmaxdatasize(&attr, &size));
    printf("maxdatasize=%zu\n", size);
    CHECK(posix_trace_attr_getmaxsystemeventsize(&attr, &size));
    printf("maxsystemeventsize=%zu\n", size);
    CHECK(posix_trace_attr_getmaxusereventsize(&attr, 100, &size));
    printf("maxusereventsize(100)=%zu\n", size);
    CHECK(posix_trace_attr_destroy(&attr));
    EXPECT(posix_trace_attr_getstreamsize(&attr, &size), EINVAL);

    struct posix_trace_status_info status;
    CHECK(posix_trace_get_status(trid, &status));
    printf("stream_status=%s\n", status.posix_stream_status == POSIX_TRACE_RUNNING ? "running"
                                                                                    : "suspended");
    printf("stream_full=%d\n", status.posix_stream_full_status == POSIX_TRACE_FULL);
    printf("stream_overrun=%d\n", status.posix_stream_overrun_status == POSIX_TRACE_OVERRUN);
    printf("flushing=%d\n", status.posix_stream_flush_status == POSIX_TRACE_FLUSHING);
    printf("flush_error=%d\n", status.posix_stream_flush_error);
    printf("log_overrun=%d\n", status.posix_log_overrun_status == POSIX_TRACE_OVERRUN);
    printf("log_full=%d\n", status.posix_log_full_status == POSIX_TRACE_FULL);

    /* Event ids: equal to themselves, and named as the spec says. */
    char name[TRACE_EVENT_NAME_MAX];
    CHECK(posix_trace_eventid_get_name(trid, POSIX_TRACE_OVERFLOW, name));
    printf("overflow=%s\n", name);
    printf("equal=%d unequal=%d\n", posix_trace_eventid_equal(trid, POSIX_TRACE_START, POSIX_TRACE_START),
           posix_trace_eventid_equal(trid, POSIX_TRACE_START, POSIX_TRACE_STOP));
    EXPECT(posix_trace_eventid_get_name(trid, 0x7fff, name), EINVAL);

    /* The event-type list, twice: rewound, it gives the same ids again. */
    trace_event_id_t id, first_id = 0;
    int unavailable;
    unsigned types = 0, again = 0;
    for (;;) {
        CHECK(posix_trace_eventtypelist_getnext_id(trid, &id, &unavailable));
        if (unavailable) break;
        if (types++ == 0) first_id = id;
    }
    CHECK(posix_trace_eventtypelist_rewind(trid));
    CHECK(posix_trace_eventtypelist_getnext_id(trid, &id, &unavailable));
    int same_first = !unavailable && id == first_id;
    while (!unavailable) {
        again++;
        CHECK(posix_trace_eventtypelist_getnext_id(trid, &id, &unavailable));
    }
    printf("types=%u\nagain=%u\nsame_first=%d\n", types, again, same_first);

    /* A payload buffer too small: the event is read truncated, and says so. */
    struct posix_trace_event_info info;
    char small[2];
    size_t len;
    CHECK(posix_trace_getnext_event(trid, &info, small, sizeof small, &len, &unavailable));
    printf("first=%u len=%zu truncation=%s\n", info.posix_event_id, len,
           info.posix_truncation_status == POSIX_TRACE_TRUNCATED_READ ? "read" : "none");
    CHECK(posix_trace_rewind(trid));
    unsigned long events = 0;
    for (;;) {
        CHECK(posix_trace_getnext_event(trid, &info, NULL, 0, &len, &unavailable));
        if (unavailable) break;
        events++;
    }
    printf("events=%lu\n", events);

    CHECK(posix_trace_close(trid));
    EXPECT(posix_trace_close(trid), EINVAL);
    EXPECT(posix_trace_get_status(trid, &status), EINVAL);
    EXPECT(posix_trace_rewind(-1), EINVAL);
    close(fd);
    return 0;
}
