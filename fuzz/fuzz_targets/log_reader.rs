//! Reads any bytes as a trace log through the Rust reader and the C analyzer API: neither may
//! panic, hang, or allocate more than libFuzzer's -malloc_limit_mb (what a header declares is
//! never allocated before it is checked).
//!
//! Every packet carries a CRC, which random mutations nearly always break: then only the first
//! checks run. So when the input's first byte is odd, the rest has its packets' checksums made
//! right before it is read, and the mutations reach the checks behind them.
#![no_main]

use std::{
    ffi::{c_int, c_void},
    fs::File,
    io::Write,
    os::fd::{AsRawFd, FromRawFd},
};

use libfuzzer_sys::fuzz_target;
use posixtrace::{
    posix_trace_close, posix_trace_event_info, posix_trace_getnext_event, posix_trace_open,
    trace_id_t,
};
use tracer_model::log::{
    LogReader,
    packet::{HEADER_LEN, checksum},
};

fuzz_target!(|input: &[u8]| {
    let Some((&mode, bytes)) = input.split_first() else {
        return;
    };
    let mut bytes = bytes.to_vec();
    if mode & 1 == 1 {
        reseal_packets(&mut bytes);
    }
    let file = memory_file(&bytes);
    read_with_rust(&file);
    read_with_c(&file);
});

/// Gives each packet found walking from the start the checksum of what it holds.
fn reseal_packets(bytes: &mut [u8]) {
    let mut at = 0;
    while at + HEADER_LEN <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 16..at + 20].try_into().unwrap()) as usize;
        let Some(end) = (at + HEADER_LEN)
            .checked_add(len)
            .filter(|&e| e <= bytes.len())
        else {
            return;
        };
        let crc = checksum(&bytes[at..at + 20], &bytes[at + HEADER_LEN..end]);
        bytes[at + 20..at + 24].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
}

fn memory_file(bytes: &[u8]) -> File {
    // SAFETY: the name is a NUL-terminated string; the flags are valid.
    let fd = unsafe { libc::memfd_create(c"log".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: a descriptor just made, owned by nothing else.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(bytes).unwrap();
    file
}

fn read_with_rust(file: &File) {
    let Ok(reader) = LogReader::from_file(file.try_clone().unwrap()) else {
        return;
    };
    let _ = (reader.status(), reader.final_status(), reader.overwritten());
    for event in reader.events() {
        match event {
            Ok(event) => {
                let _ = reader.type_of(&event);
            }
            Err(_) => break,
        }
    }
}

fn read_with_c(file: &File) {
    let mut trid: trace_id_t = 0;
    // SAFETY: a valid descriptor and a pointer to a local.
    if unsafe { posix_trace_open(file.as_raw_fd(), &mut trid) } != 0 {
        return;
    }
    let mut data = [0u8; 256];
    loop {
        // SAFETY: an all-zero event info is valid (integers, a null pointer, a timespec).
        let mut info: posix_trace_event_info = unsafe { std::mem::zeroed() };
        let (mut len, mut unavailable): (usize, c_int) = (0, 0);
        // SAFETY: pointers to locals; `data` holds the size given.
        let error = unsafe {
            posix_trace_getnext_event(
                trid,
                &mut info,
                data.as_mut_ptr().cast::<c_void>(),
                data.len(),
                &mut len,
                &mut unavailable,
            )
        };
        assert!(len <= data.len());
        if error != 0 || unavailable != 0 {
            break;
        }
    }
    assert_eq!(posix_trace_close(trid), 0);
}
