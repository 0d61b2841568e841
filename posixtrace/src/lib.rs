//! libposixtrace: the analyzer functions of POSIX's `<trace.h>` (`include/trace.h`) over
//! thrtrace-bpf's trace logs, a thin layer over `tracer_model::log::LogReader`.
//!
//! An open log is a [`LogReader`] and a [`Cursor`] in a table under one lock, named by the
//! `trace_id_t` handed out. Nothing a file holds can crash a caller: the reader checks every
//! byte, and a panic (which would be a bug) is caught at the boundary and returned as `EIO`.

#![allow(non_camel_case_types)]

use std::{
    collections::BTreeMap,
    ffi::{c_char, c_int, c_void},
    fs::File,
    os::fd::{FromRawFd, RawFd},
    panic::{self, AssertUnwindSafe},
    ptr,
    sync::{Mutex, MutexGuard},
};

use libc::{EBADF, EINVAL, EIO, pid_t, pthread_t, size_t, timespec};
use tracer_model::{
    event::{Event, EventType},
    log::{
        Cursor, Filter, LogError, LogFullPolicy, LogReader, StreamFullPolicy,
        entry::{self, ENTRY_HEADER_LEN},
    },
};

/// `trace_id_t`: a trace log opened by `posix_trace_open`.
pub type trace_id_t = c_int;
/// `trace_event_id_t`: an event type's id in the log's own list.
pub type trace_event_id_t = u32;

/// Bytes of a trace name, its NUL included (`<trace.h>`).
pub const TRACE_NAME_MAX: usize = 256;
/// Bytes of an event type's name, its NUL included (`<trace.h>`).
pub const TRACE_EVENT_NAME_MAX: usize = 64;

const POSIX_TRACE_LOOP: c_int = 0;
const POSIX_TRACE_UNTIL_FULL: c_int = 1;
const POSIX_TRACE_FLUSH: c_int = 2;
const POSIX_TRACE_APPEND: c_int = 3;
const POSIX_TRACE_CLOSE_FOR_CHILD: c_int = 0;
const POSIX_TRACE_INHERITED: c_int = 1;
const POSIX_TRACE_NOT_TRUNCATED: c_int = 0;
const POSIX_TRACE_TRUNCATED_RECORD: c_int = 1;
const POSIX_TRACE_TRUNCATED_READ: c_int = 2;

/// `trace_attr_t`, as `trace.h` declares it.
#[repr(C)]
pub struct trace_attr_t {
    initialized: c_int,
    generation_version: [c_char; TRACE_NAME_MAX],
    trace_name: [c_char; TRACE_NAME_MAX],
    creation_time: timespec,
    clock_resolution: timespec,
    stream_min_size: size_t,
    stream_full_policy: c_int,
    max_data_size: size_t,
    max_system_event_size: size_t,
    inheritance: c_int,
    log_max_size: size_t,
    log_full_policy: c_int,
}

/// What `initialized` holds once `posix_trace_attr_init` has run.
const ATTR_INITIALIZED: c_int = 0x5054_4154;

/// `struct posix_trace_event_info` (`<trace.h>`).
#[repr(C)]
#[allow(clippy::struct_field_names, reason = "POSIX names the fields")]
pub struct posix_trace_event_info {
    posix_event_id: trace_event_id_t,
    posix_pid: pid_t,
    posix_prog_address: *mut c_void,
    posix_truncation_status: c_int,
    posix_timestamp: timespec,
    posix_thread_id: pthread_t,
}

/// `struct posix_trace_status_info` (`<trace.h>`).
#[repr(C)]
#[allow(clippy::struct_field_names, reason = "POSIX names the fields")]
pub struct posix_trace_status_info {
    posix_stream_status: c_int,
    posix_stream_full_status: c_int,
    posix_stream_overrun_status: c_int,
    posix_stream_flush_status: c_int,
    posix_stream_flush_error: c_int,
    posix_log_overrun_status: c_int,
    posix_log_full_status: c_int,
}

/// `struct thrtrace_record`: a thread event's payload.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct thrtrace_record {
    lwpid: c_int,
    event1: i16,
    event2: i16,
    which: i16,
    stack: u32,
    a: [libc::c_long; 5],
}

/// An open log and where its reader is.
struct OpenTrace {
    reader: LogReader,
    events: Cursor,
    next_type: usize,
}

struct Traces {
    open: BTreeMap<trace_id_t, OpenTrace>,
    last_id: trace_id_t,
}

static TRACES: Mutex<Traces> = Mutex::new(Traces {
    open: BTreeMap::new(),
    last_id: 0,
});

fn traces() -> MutexGuard<'static, Traces> {
    // A panic under the lock leaves the table as it was: keep using it.
    TRACES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `body` with the log `trid` names; EINVAL if none.
fn with_trace(trid: trace_id_t, body: impl FnOnce(&mut OpenTrace) -> c_int) -> c_int {
    guarded(|| match traces().open.get_mut(&trid) {
        Some(trace) => body(trace),
        None => EINVAL,
    })
}

/// Runs `body`, turning a panic into EIO: unwinding into C is undefined behaviour.
fn guarded(body: impl FnOnce() -> c_int) -> c_int {
    panic::catch_unwind(AssertUnwindSafe(body)).unwrap_or(EIO)
}

/// Copies `text` into a C buffer of `size` bytes, cut if need be, NUL-terminated.
///
/// # Safety
/// `out` points to `size` writable bytes.
unsafe fn copy_string(text: &str, out: *mut c_char, size: usize) {
    let bytes = &text.as_bytes()[..text.len().min(size - 1)];
    // SAFETY: the caller's buffer holds `size` bytes; at most `size - 1` and a NUL are written.
    unsafe {
        ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), out, bytes.len());
        *out.add(bytes.len()) = 0;
    }
}

fn timespec_of(ns: i64) -> timespec {
    timespec {
        tv_sec: ns.div_euclid(1_000_000_000),
        tv_nsec: ns.rem_euclid(1_000_000_000),
    }
}

/// Opens the log that `file_desc` reads; the caller keeps its descriptor.
///
/// # Safety
/// `trid` is null or points to a writable `trace_id_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_trace_open(file_desc: c_int, trid: *mut trace_id_t) -> c_int {
    if trid.is_null() {
        return EINVAL;
    }
    guarded(|| {
        // SAFETY: F_GETFL and F_DUPFD_CLOEXEC take no pointer; any number is safe to pass.
        let flags = unsafe { libc::fcntl(file_desc, libc::F_GETFL) };
        if flags < 0 || flags & libc::O_ACCMODE == libc::O_WRONLY {
            return EBADF;
        }
        // SAFETY: as above.
        let own: RawFd = unsafe { libc::fcntl(file_desc, libc::F_DUPFD_CLOEXEC, 0) };
        if own < 0 {
            return EBADF;
        }
        // SAFETY: `own` is a descriptor just made, owned by nothing else.
        let file = unsafe { File::from_raw_fd(own) };
        let reader = match LogReader::from_file(file) {
            Ok(reader) => reader,
            Err(LogError::Io(error)) if error.raw_os_error() == Some(EBADF) => return EBADF,
            Err(_) => return EINVAL,
        };
        let mut traces = traces();
        let mut id = traces.last_id;
        loop {
            id = id.checked_add(1).unwrap_or(1);
            if !traces.open.contains_key(&id) {
                break;
            }
        }
        traces.last_id = id;
        traces.open.insert(
            id,
            OpenTrace {
                reader,
                events: Cursor::new(Filter::default()),
                next_type: 0,
            },
        );
        // SAFETY: checked not null; the caller's.
        unsafe { trid.write(id) };
        0
    })
}

/// `posix_trace_rewind`: the next `posix_trace_getnext_event` returns the log's first event.
#[unsafe(no_mangle)]
pub extern "C" fn posix_trace_rewind(trid: trace_id_t) -> c_int {
    with_trace(trid, |trace| {
        trace.events.rewind();
        0
    })
}

/// `posix_trace_close`: closes a log `posix_trace_open` opened.
#[unsafe(no_mangle)]
pub extern "C" fn posix_trace_close(trid: trace_id_t) -> c_int {
    guarded(|| match traces().open.remove(&trid) {
        Some(_) => 0,
        None => EINVAL,
    })
}

/// # Safety
/// `event`, `data_len` and `unavailable` are null or writable; `data` is null or has room for
/// `num_bytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_trace_getnext_event(
    trid: trace_id_t,
    event: *mut posix_trace_event_info,
    data: *mut c_void,
    num_bytes: size_t,
    data_len: *mut size_t,
    unavailable: *mut c_int,
) -> c_int {
    if event.is_null() || data_len.is_null() || unavailable.is_null() {
        return EINVAL;
    }
    if data.is_null() && num_bytes > 0 {
        return EINVAL;
    }
    with_trace(trid, |trace| {
        let next = match trace.events.next(&trace.reader) {
            None => {
                // SAFETY: checked not null above; the caller's.
                unsafe { unavailable.write(1) };
                return 0;
            }
            Some(Err(_)) => return EIO,
            Some(Ok(next)) => next,
        };
        let event_type = trace.reader.type_of(&next).map_or(0, |t| t.id);
        let payload = payload_of(&next);
        let copied = payload.len().min(num_bytes);
        let (pid, thread_id, prog_address, recorded_truncated) = match &next {
            Event::Thread(r) => (r.pid, r.tid, r.caller, false),
            Event::System(e) => (e.pid, 0, 0, e.truncated),
        };
        let truncation = if copied < payload.len() {
            POSIX_TRACE_TRUNCATED_READ
        } else if recorded_truncated {
            POSIX_TRACE_TRUNCATED_RECORD
        } else {
            POSIX_TRACE_NOT_TRUNCATED
        };
        let info = posix_trace_event_info {
            posix_event_id: trace_event_id_t::from(event_type),
            posix_pid: pid as pid_t,
            posix_prog_address: prog_address as usize as *mut c_void,
            posix_truncation_status: truncation,
            posix_timestamp: timespec_of(next.time_ns()),
            posix_thread_id: thread_id as pthread_t,
        };
        // SAFETY: pointers checked above; `data` has room for `num_bytes` >= `copied` bytes.
        unsafe {
            event.write(info);
            if copied > 0 {
                ptr::copy_nonoverlapping(payload.as_ptr(), data.cast::<u8>(), copied);
            }
            data_len.write(copied);
            unavailable.write(0);
        }
        0
    })
}

/// The bytes `posix_trace_getnext_event` copies: a `thrtrace_record` for a thread event, the
/// log's own payload layout for a system event (as `trace.h` documents it).
fn payload_of(event: &Event) -> Vec<u8> {
    match event {
        Event::Thread(r) => {
            let record = thrtrace_record {
                lwpid: r.lwpid as c_int,
                event1: r.event1 as i16,
                event2: r.event2 as i16,
                which: r.which.code() as i16,
                stack: r.stack,
                a: r.a,
            };
            let size = size_of::<thrtrace_record>();
            let mut bytes = vec![0u8; size];
            // SAFETY: `bytes` holds exactly one record's size; written unaligned.
            unsafe { ptr::write_unaligned(bytes.as_mut_ptr().cast::<thrtrace_record>(), record) };
            bytes
        }
        Event::System(_) => {
            let mut encoded = Vec::new();
            entry::encode(event, &mut encoded);
            encoded.split_off(ENTRY_HEADER_LEN)
        }
    }
}

/// # Safety
/// `event` and `unavailable` are null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_trace_eventtypelist_getnext_id(
    trid: trace_id_t,
    event: *mut trace_event_id_t,
    unavailable: *mut c_int,
) -> c_int {
    if event.is_null() || unavailable.is_null() {
        return EINVAL;
    }
    with_trace(trid, |trace| {
        let types = &trace.reader.metadata().event_types;
        let next = types.get(trace.next_type);
        // SAFETY: checked not null above; the caller's.
        unsafe {
            match next {
                Some(event_type) => {
                    event.write(trace_event_id_t::from(event_type.id));
                    unavailable.write(0);
                }
                None => unavailable.write(1),
            }
        }
        trace.next_type += usize::from(next.is_some());
        0
    })
}

/// `posix_trace_eventtypelist_rewind`: the type list starts over.
#[unsafe(no_mangle)]
pub extern "C" fn posix_trace_eventtypelist_rewind(trid: trace_id_t) -> c_int {
    with_trace(trid, |trace| {
        trace.next_type = 0;
        0
    })
}

fn type_with_id(trace: &OpenTrace, id: trace_event_id_t) -> Option<&EventType> {
    trace.reader.event_type(u16::try_from(id).ok()?)
}

/// # Safety
/// `event_name` is null or has room for `TRACE_EVENT_NAME_MAX` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_trace_eventid_get_name(
    trid: trace_id_t,
    event: trace_event_id_t,
    event_name: *mut c_char,
) -> c_int {
    if event_name.is_null() {
        return EINVAL;
    }
    with_trace(trid, |trace| match type_with_id(trace, event) {
        Some(event_type) => {
            // SAFETY: the caller's buffer of TRACE_EVENT_NAME_MAX bytes.
            unsafe { copy_string(&event_type.name, event_name, TRACE_EVENT_NAME_MAX) };
            0
        }
        None => EINVAL,
    })
}

/// `posix_trace_eventid_equal`: whether two ids are the same event type.
#[unsafe(no_mangle)]
pub extern "C" fn posix_trace_eventid_equal(
    trid: trace_id_t,
    event1: trace_event_id_t,
    event2: trace_event_id_t,
) -> c_int {
    let mut equal = 0;
    with_trace(trid, |trace| {
        equal = c_int::from(event1 == event2 && type_with_id(trace, event1).is_some());
        0
    });
    equal
}

/// # Safety
/// `attr` is null or points to a writable `trace_attr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_trace_get_attr(trid: trace_id_t, attr: *mut trace_attr_t) -> c_int {
    if attr.is_null() {
        return EINVAL;
    }
    with_trace(trid, |trace| {
        let metadata = trace.reader.metadata();
        let attributes = &metadata.attributes;
        let max_system_event_size = metadata
            .event_types
            .iter()
            .filter(|t| t.is_system())
            .map(|t| ENTRY_HEADER_LEN as u64 + entry::max_payload(&t.payload))
            .max()
            .unwrap_or(0);
        let mut filled = trace_attr_t {
            initialized: ATTR_INITIALIZED,
            generation_version: [0; TRACE_NAME_MAX],
            trace_name: [0; TRACE_NAME_MAX],
            creation_time: timespec_of(attributes.creation_time_ns),
            clock_resolution: timespec_of(attributes.clock_resolution_ns as i64),
            stream_min_size: attributes.stream_min_size as size_t,
            stream_full_policy: match attributes.stream_full_policy {
                StreamFullPolicy::Flush => POSIX_TRACE_FLUSH,
                StreamFullPolicy::Loop => POSIX_TRACE_LOOP,
                StreamFullPolicy::UntilFull => POSIX_TRACE_UNTIL_FULL,
            },
            max_data_size: attributes.max_data_size as size_t,
            max_system_event_size: max_system_event_size as size_t,
            inheritance: match attributes.inheritance {
                tracer_model::log::Inheritance::CloseForChild => POSIX_TRACE_CLOSE_FOR_CHILD,
                tracer_model::log::Inheritance::Inherited => POSIX_TRACE_INHERITED,
            },
            log_max_size: attributes.log_max_size.unwrap_or(0) as size_t,
            log_full_policy: match attributes.log_full_policy {
                LogFullPolicy::Append => POSIX_TRACE_APPEND,
                LogFullPolicy::Loop => POSIX_TRACE_LOOP,
                LogFullPolicy::UntilFull => POSIX_TRACE_UNTIL_FULL,
            },
        };
        // SAFETY: the arrays hold TRACE_NAME_MAX bytes each.
        unsafe {
            copy_string(
                &attributes.generation_version,
                filled.generation_version.as_mut_ptr(),
                TRACE_NAME_MAX,
            );
            copy_string(
                &attributes.trace_name,
                filled.trace_name.as_mut_ptr(),
                TRACE_NAME_MAX,
            );
            attr.write(filled);
        }
        0
    })
}

/// # Safety
/// `statusinfo` is null or points to a writable `struct posix_trace_status_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_trace_get_status(
    trid: trace_id_t,
    statusinfo: *mut posix_trace_status_info,
) -> c_int {
    if statusinfo.is_null() {
        return EINVAL;
    }
    with_trace(trid, |trace| {
        let status = trace.reader.status();
        let info = posix_trace_status_info {
            // POSIX_TRACE_RUNNING is 0, SUSPENDED 1; the others are 1 when set.
            posix_stream_status: c_int::from(!status.running),
            posix_stream_full_status: c_int::from(status.full),
            posix_stream_overrun_status: c_int::from(status.overrun),
            posix_stream_flush_status: c_int::from(status.flushing),
            posix_stream_flush_error: c_int::from(status.flush_error),
            posix_log_overrun_status: c_int::from(status.log_overrun),
            posix_log_full_status: c_int::from(status.log_full),
        };
        // SAFETY: checked not null above; the caller's.
        unsafe { statusinfo.write(info) };
        0
    })
}

/// # Safety
/// `attr` is null or points to a writable `trace_attr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_trace_attr_init(attr: *mut trace_attr_t) -> c_int {
    if attr.is_null() {
        return EINVAL;
    }
    // SAFETY: a `trace_attr_t` of zeros is valid (integers, arrays and timespecs); then marked.
    unsafe {
        attr.write_bytes(0, 1);
        (*attr).initialized = ATTR_INITIALIZED;
    }
    0
}

/// # Safety
/// `attr` is null or points to a `trace_attr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_trace_attr_destroy(attr: *mut trace_attr_t) -> c_int {
    // SAFETY: the caller's pointer, checked not null.
    match unsafe { attr.as_mut() } {
        Some(attr) if attr.initialized == ATTR_INITIALIZED => {
            attr.initialized = 0;
            0
        }
        _ => EINVAL,
    }
}

/// Reads one attribute into `out`, for the getters: EINVAL for a null pointer or an attribute
/// object that was not initialized.
///
/// # Safety
/// `attr` is null or points to a `trace_attr_t`; `out` is null or writable.
unsafe fn get<T>(
    attr: *const trace_attr_t,
    out: *mut T,
    value: impl FnOnce(&trace_attr_t) -> T,
) -> c_int {
    // SAFETY: the caller's pointer, checked not null.
    match (unsafe { attr.as_ref() }, out.is_null()) {
        (Some(attr), false) if attr.initialized == ATTR_INITIALIZED => {
            // SAFETY: checked not null; the caller's.
            unsafe { out.write(value(attr)) };
            0
        }
        _ => EINVAL,
    }
}

/// Copies a name attribute into a caller's buffer of TRACE_NAME_MAX bytes.
///
/// # Safety
/// As [`get`]; `out` has room for TRACE_NAME_MAX bytes.
unsafe fn get_name(
    attr: *const trace_attr_t,
    out: *mut c_char,
    name: impl FnOnce(&trace_attr_t) -> &[c_char; TRACE_NAME_MAX],
) -> c_int {
    // SAFETY: the caller's pointer, checked not null.
    match (unsafe { attr.as_ref() }, out.is_null()) {
        (Some(attr), false) if attr.initialized == ATTR_INITIALIZED => {
            // SAFETY: both buffers hold TRACE_NAME_MAX bytes, the source NUL-terminated.
            unsafe { ptr::copy_nonoverlapping(name(attr).as_ptr(), out, TRACE_NAME_MAX) };
            0
        }
        _ => EINVAL,
    }
}

/// # Safety
/// See [`get_name`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_trace_attr_getgenversion(
    attr: *const trace_attr_t,
    genversion: *mut c_char,
) -> c_int {
    // SAFETY: as this function's contract.
    unsafe { get_name(attr, genversion, |a| &a.generation_version) }
}

/// # Safety
/// See [`get_name`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_trace_attr_getname(
    attr: *const trace_attr_t,
    tracename: *mut c_char,
) -> c_int {
    // SAFETY: as this function's contract.
    unsafe { get_name(attr, tracename, |a| &a.trace_name) }
}

/// Defines a getter that copies one field of `trace_attr_t` out.
macro_rules! getter {
    ($name:ident, $out:ident: $ty:ty, $value:expr) => {
        /// # Safety
        /// `attr` is null or points to a `trace_attr_t`; the output is null or writable.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(attr: *const trace_attr_t, $out: *mut $ty) -> c_int {
            // SAFETY: as this function's contract.
            unsafe { get(attr, $out, $value) }
        }
    };
}

getter!(posix_trace_attr_getcreatetime, createtime: timespec, |a| a.creation_time);
getter!(posix_trace_attr_getclockres, resolution: timespec, |a| a.clock_resolution);
getter!(posix_trace_attr_getinherited, inheritancepolicy: c_int, |a| a.inheritance);
getter!(posix_trace_attr_getstreamfullpolicy, streampolicy: c_int, |a| a.stream_full_policy);
getter!(posix_trace_attr_getlogfullpolicy, logpolicy: c_int, |a| a.log_full_policy);
getter!(posix_trace_attr_getstreamsize, streamsize: size_t, |a| a.stream_min_size);
getter!(posix_trace_attr_getlogsize, logsize: size_t, |a| a.log_max_size);
getter!(posix_trace_attr_getmaxdatasize, maxdatasize: size_t, |a| a.max_data_size);
getter!(posix_trace_attr_getmaxsystemeventsize, eventsize: size_t, |a| a.max_system_event_size);

/// The size of an event whose payload is `data_len` bytes.
///
/// # Safety
/// `attr` is null or points to a `trace_attr_t`; `eventsize` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_trace_attr_getmaxusereventsize(
    attr: *const trace_attr_t,
    data_len: size_t,
    eventsize: *mut size_t,
) -> c_int {
    // SAFETY: as this function's contract.
    unsafe { get(attr, eventsize, |_| ENTRY_HEADER_LEN + data_len) }
}

#[cfg(test)]
mod tests {
    use tracer_model::event::event_types;

    use super::*;

    /// trace.h's system event ids are those this build writes, named after them.
    #[test]
    fn the_header_names_each_system_event_with_its_id() {
        let header = include_str!("../include/trace.h");
        let defined: Vec<(String, u16)> = header
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("#define ")?;
                let (name, value) = rest.split_once(" ((trace_event_id_t)0x")?;
                let id = u16::from_str_radix(value.trim_end_matches(')'), 16).ok()?;
                Some((name.to_lowercase(), id))
            })
            .collect();
        let system: Vec<(String, u16)> = event_types()
            .into_iter()
            .filter(EventType::is_system)
            .map(|t| (t.name, t.id))
            .collect();
        assert_eq!(defined, system);
        for (name, _) in &system {
            let documented = |after: &str| header.contains(&format!(" {name}{after}"));
            assert!(
                documented(" ") || documented(","),
                "{name} has no payload documented"
            );
        }
    }

    #[test]
    fn the_record_has_the_layout_the_header_gives() {
        assert_eq!(size_of::<thrtrace_record>(), 56);
        assert_eq!(std::mem::offset_of!(thrtrace_record, stack), 12);
        assert_eq!(std::mem::offset_of!(thrtrace_record, a), 16);
    }
}
