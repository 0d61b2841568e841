/*
 * trace.h: the POSIX trace analyzer API (IEEE Std 1003.1, Trace and Trace Log options) over
 * thrtrace-bpf's trace logs. Link with -lposixtrace (pkg-config --cflags --libs posixtrace).
 *
 * An analyzer opens a log written by `thrtrace-bpf --log FILE` (posix_trace_open), reads its
 * attributes and status, lists its event types, and reads its events in time order
 * (posix_trace_getnext_event). Only the analyzer's functions are here: thrtrace-bpf itself is
 * the controller, and the traced processes are never modified.
 *
 * Every function returns 0 or an error number (it does not set errno):
 *   EINVAL  a trace id that is not open, a null pointer, an event type the log does not list,
 *           or (posix_trace_open) a file that is not a trace log or is damaged;
 *   EBADF   (posix_trace_open) a file descriptor that is not open for reading;
 *   EIO     (posix_trace_getnext_event) a packet of the log is damaged: the events before it
 *           were returned, none of it is, and the next call says there are no more;
 *   ENOMEM  no memory.
 * A damaged file is an error, never a crash: every byte of a log is checked before it is used.
 *
 * These functions may be called from several threads; each call on a trace id is atomic.
 */
#ifndef THRTRACE_TRACE_H
#define THRTRACE_TRACE_H

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An open log. */
typedef int trace_id_t;
/* An event type of one log: ids are the log's own (listed by
 * posix_trace_eventtypelist_getnext_id); compare names, not numbers, across logs. */
typedef unsigned int trace_event_id_t;

#define TRACE_NAME_MAX 256
#define TRACE_EVENT_NAME_MAX 64

/* Trace attributes: read them with the posix_trace_attr_get* functions. */
typedef struct {
    int __initialized;
    char __generation_version[TRACE_NAME_MAX];
    char __trace_name[TRACE_NAME_MAX];
    struct timespec __creation_time;
    struct timespec __clock_resolution;
    size_t __stream_min_size;
    int __stream_full_policy;
    size_t __max_data_size;
    size_t __max_system_event_size;
    int __inheritance;
    size_t __log_max_size;
    int __log_full_policy;
} trace_attr_t;

/* posix_trace_attr_getstreamfullpolicy and posix_trace_attr_getlogfullpolicy */
#define POSIX_TRACE_LOOP 0
#define POSIX_TRACE_UNTIL_FULL 1
#define POSIX_TRACE_FLUSH 2
#define POSIX_TRACE_APPEND 3

/* posix_trace_attr_getinherited */
#define POSIX_TRACE_CLOSE_FOR_CHILD 0
#define POSIX_TRACE_INHERITED 1

/* struct posix_trace_status_info */
#define POSIX_TRACE_RUNNING 0
#define POSIX_TRACE_SUSPENDED 1
#define POSIX_TRACE_NOT_FULL 0
#define POSIX_TRACE_FULL 1
#define POSIX_TRACE_NO_OVERRUN 0
#define POSIX_TRACE_OVERRUN 1
#define POSIX_TRACE_NOT_FLUSHING 0
#define POSIX_TRACE_FLUSHING 1

/* posix_truncation_status */
#define POSIX_TRACE_NOT_TRUNCATED 0
#define POSIX_TRACE_TRUNCATED_RECORD 1
#define POSIX_TRACE_TRUNCATED_READ 2

/*
 * System event types, as this version of thrtrace-bpf numbers them in the logs it writes.
 * The payload that posix_trace_getnext_event copies for a system event is its fields one after
 * the other, little-endian, with no padding: u16, u32, u64 and i64 in their sizes; a string
 * or byte string as a u32 length and that many bytes (no NUL). Fields by event:
 *
 *   posix_trace_start        str filter: the event types filtered out, NUL-separated names;
 *                            u32 contended: 1 when only contended calls are recorded
 *                            (--contended: an absent lock or unlock did not wait or wake)
 *   posix_trace_stop         u32 auto: 0 when stopped by the controller or at the end,
 *                            non-zero when the stream's until-full policy stopped it
 *   posix_trace_filter       str old, str new: the filters before and after, as in start
 *   posix_trace_overflow     u64 lost: events lost; u32 cpu: on which CPU (0xffffffff: none
 *                            in particular); u32 source: 0 a CPU's ring buffer, 1 the
 *                            stream, 2 the log (overwritten by its loop policy), 3 records
 *                            that could not be decoded; i64 first_lost_ns: when the first was
 *                            lost, CLOCK_REALTIME nanoseconds, 0 where unknown
 *   posix_trace_resume       (none): recording is reliable again
 *   posix_trace_flush_start, posix_trace_flush_stop   (none)
 *   posix_trace_error        i64 code: an errno value or 0; str message
 *   thrtrace_process_attach  str exe; str cmdline: its arguments, NUL-separated
 *   thrtrace_process_detach  (none): the process exited or is no longer traced
 *   thrtrace_thread_name     str name: the thread's comm (posix_pid and the info's lwpid)
 *   thrtrace_fork            u32 parent: the pid that forked posix_pid
 *   thrtrace_exec            str exe: what posix_pid now runs
 *   thrtrace_mapping         u64 start, u64 end: an executable mapping of posix_pid;
 *                            u64 file_offset; bytes build_id (GNU build-id, may be empty);
 *                            str path
 *   thrtrace_blocked         str call: a traced call (an event name) of the info's lwpid that
 *                            blocked past --flush-on-block; u64 object: its first argument;
 *                            u64 blocked_ns: how long; u32 returned: 1 if it had returned,
 *                            0 if still blocked. The flight recorder was flushed for it.
 *   thrtrace_deadlock        u32 certain: 1 for a cycle of locks and joins, 0 possible (a
 *                            condvar or semaphore in it); str threads: the cycle as a JSON
 *                            array of {pid, lwpid, call, waits_for, wait_caller,
 *                            waiting_since_ns, holds, locked_at, holding_since_ns};
 *                            str message: as the tracer printed it
 *   thrtrace_lock_order      str orders: a lock-order inversion (a deadlock that has not
 *                            happened) as a JSON array of {pid, lwpid, held, acquired,
 *                            time_ns}, held and acquired each {lock, kind, exclusive,
 *                            caller}: each thread held one lock while acquiring the next;
 *                            str message: as the tracer printed it
 *   thrtrace_stack           u32 id: a call stack of posix_pid, which thread events name by
 *                            this id (thrtrace_record's stack; never 0) after this event;
 *                            bytes frames: 8-byte little-endian addresses, innermost first:
 *                            the probed instruction, then each caller's return address;
 *                            str end: empty when the stack reaches its thread's start,
 *                            otherwise why it stops at its last frame; a stack with no
 *                            frame is that of records whose copy was left out (the
 *                            tracer's ring too full), end saying so
 *   thrtrace_thread_ns_id    u32 ns_lwpid: the info's lwpid (the host's id) is ns_lwpid in
 *                            the PID namespace of posix_pid, one of its own (a container's):
 *                            a thread id the process stores (a mutex owner, a2 of a
 *                            pthread_mutex_lock entry) is that one; told once per thread
 *   thrtrace_process_cgroup  str path: posix_pid's cgroup (v2; "/" the root); str systemd:
 *                            its cgroup in the v1 name=systemd hierarchy of a hybrid host
 *                            (empty: none); str container: the id (12 hex digits) of the
 *                            container a runtime made the cgroup for (empty: none); told
 *                            once, as the process is attached or first seen
 *   thrtrace_short_waits     str call: an event name; u64 object: the word or lock waited
 *                            on; u64 caller; u64 waits, u64 wait_total_ns: the info's
 *                            lwpid's waits in call on object from caller shorter than
 *                            u64 min_wait_ns (--min-wait), counted and not written, since
 *                            the last such event of the same thread, call, object and caller
 */
#define POSIX_TRACE_START ((trace_event_id_t)0x8000)
#define POSIX_TRACE_STOP ((trace_event_id_t)0x8001)
#define POSIX_TRACE_FILTER ((trace_event_id_t)0x8002)
#define POSIX_TRACE_OVERFLOW ((trace_event_id_t)0x8003)
#define POSIX_TRACE_RESUME ((trace_event_id_t)0x8004)
#define POSIX_TRACE_FLUSH_START ((trace_event_id_t)0x8005)
#define POSIX_TRACE_FLUSH_STOP ((trace_event_id_t)0x8006)
#define POSIX_TRACE_ERROR ((trace_event_id_t)0x8007)
#define THRTRACE_PROCESS_ATTACH ((trace_event_id_t)0x8008)
#define THRTRACE_PROCESS_DETACH ((trace_event_id_t)0x8009)
#define THRTRACE_THREAD_NAME ((trace_event_id_t)0x800a)
#define THRTRACE_FORK ((trace_event_id_t)0x800b)
#define THRTRACE_EXEC ((trace_event_id_t)0x800c)
#define THRTRACE_MAPPING ((trace_event_id_t)0x800d)
#define THRTRACE_BLOCKED ((trace_event_id_t)0x800e)
#define THRTRACE_DEADLOCK ((trace_event_id_t)0x800f)
#define THRTRACE_LOCK_ORDER ((trace_event_id_t)0x8010)
#define THRTRACE_STACK ((trace_event_id_t)0x8011)
#define THRTRACE_THREAD_NS_ID ((trace_event_id_t)0x8012)
#define THRTRACE_PROCESS_CGROUP ((trace_event_id_t)0x8013)
#define THRTRACE_SHORT_WAITS ((trace_event_id_t)0x8014)

/* What posix_trace_getnext_event says of an event besides its payload. */
struct posix_trace_event_info {
    trace_event_id_t posix_event_id;
    pid_t posix_pid;                 /* the process; 0 for a system event of none */
    void *posix_prog_address;        /* where the traced call returns to; NULL if none */
    int posix_truncation_status;
    struct timespec posix_timestamp; /* CLOCK_REALTIME */
    pthread_t posix_thread_id;       /* the caller's pthread_self(); 0 if no thread */
};

/* The status of the stream when the log was closed (or last written, if it was not). */
struct posix_trace_status_info {
    int posix_stream_status;
    int posix_stream_full_status;
    int posix_stream_overrun_status;
    int posix_stream_flush_status;
    int posix_stream_flush_error;    /* 0, or non-zero if a flush to the log failed */
    int posix_log_overrun_status;
    int posix_log_full_status;
};

/*
 * The payload of a thread event (a traced pthread call): the values of its tr line,
 * `sec:nsec:lwpid:pid:tid:event1:event2:which:a1:a2:a3:a4:a5`, of which sec and nsec are
 * posix_timestamp, pid is posix_pid and tid is posix_thread_id. The event codes and a1..a5
 * are those of thread_trace(4) (thrtrace-bpf's event table); `stack` is thrtrace-bpf's own
 * (--stacks, on by default with --contended).
 */
struct thrtrace_record {
    int lwpid;    /* the kernel's thread id */
    short event1; /* the category: 1 thread, 2 mutex, 3 cond, ... */
    short event2; /* the call within the category */
    short which;  /* 0 a single record; 1 and 2 the entry and return of a call that can block */
    unsigned stack; /* thrtrace-bpf's extension: the id of the call stack the record was taken
                       with (its THRTRACE_STACK event came before it); 0 for none */
    long a[5];
};

int posix_trace_open(int file_desc, trace_id_t *trid);
int posix_trace_rewind(trace_id_t trid);
int posix_trace_close(trace_id_t trid);

/* Copies the next event's info, and up to num_bytes of its payload into data (the number
 * copied in *data_len). *unavailable is 0 with an event, non-zero when there are no more. */
int posix_trace_getnext_event(trace_id_t trid, struct posix_trace_event_info *event,
                              void *data, size_t num_bytes, size_t *data_len,
                              int *unavailable);

int posix_trace_eventtypelist_getnext_id(trace_id_t trid, trace_event_id_t *event,
                                         int *unavailable);
int posix_trace_eventtypelist_rewind(trace_id_t trid);
/* event_name has room for TRACE_EVENT_NAME_MAX bytes. */
int posix_trace_eventid_get_name(trace_id_t trid, trace_event_id_t event, char *event_name);
/* Non-zero if the two ids are the same event type of the log. */
int posix_trace_eventid_equal(trace_id_t trid, trace_event_id_t event1,
                              trace_event_id_t event2);

int posix_trace_get_attr(trace_id_t trid, trace_attr_t *attr);
int posix_trace_get_status(trace_id_t trid, struct posix_trace_status_info *statusinfo);

int posix_trace_attr_init(trace_attr_t *attr);
int posix_trace_attr_destroy(trace_attr_t *attr);
/* genversion and tracename have room for TRACE_NAME_MAX bytes. */
int posix_trace_attr_getgenversion(const trace_attr_t *attr, char *genversion);
int posix_trace_attr_getname(const trace_attr_t *attr, char *tracename);
int posix_trace_attr_getcreatetime(const trace_attr_t *attr, struct timespec *createtime);
int posix_trace_attr_getclockres(const trace_attr_t *attr, struct timespec *resolution);
int posix_trace_attr_getinherited(const trace_attr_t *attr, int *inheritancepolicy);
int posix_trace_attr_getstreamfullpolicy(const trace_attr_t *attr, int *streampolicy);
int posix_trace_attr_getlogfullpolicy(const trace_attr_t *attr, int *logpolicy);
int posix_trace_attr_getstreamsize(const trace_attr_t *attr, size_t *streamsize);
/* 0: the log had no size bound. */
int posix_trace_attr_getlogsize(const trace_attr_t *attr, size_t *logsize);
int posix_trace_attr_getmaxdatasize(const trace_attr_t *attr, size_t *maxdatasize);
int posix_trace_attr_getmaxsystemeventsize(const trace_attr_t *attr, size_t *eventsize);
int posix_trace_attr_getmaxusereventsize(const trace_attr_t *attr, size_t data_len,
                                         size_t *eventsize);

#ifdef __cplusplus
}
#endif

#endif /* THRTRACE_TRACE_H */
