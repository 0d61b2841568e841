//! One CPU's BPF ring buffer, read in place through its two mappings (the kernel's layout,
//! `kernel/bpf/ringbuf.c`): the consumer page, which the reader writes, and the producer page
//! followed by the data pages, mapped twice in a row so that a record never wraps.
//!
//! Not aya's `RingBuf`: it publishes the consumer position after every record, and the BPF
//! side reads that position at every reservation, so while a pass drains a ring its producer
//! and its reader passed that cache line back and forth once a record. Here a pass publishes
//! it once, after the records it read have been handed on.

use std::{
    collections::VecDeque,
    os::fd::{AsFd, BorrowedFd, OwnedFd},
    ptr::NonNull,
    sync::atomic::{AtomicU32, AtomicUsize, Ordering},
};

use rustix::mm::{MapFlags, ProtFlags, mmap, munmap};

use super::CaptureError;

/// The kernel's record header: a length word (with these flags) and a page offset word.
const HEADER_BYTES: usize = 8;
const BUSY: u32 = 1 << 31;
const DISCARDED: u32 = 1 << 30;

/// A mapping, unmapped when dropped.
struct Mapping {
    start: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        writable: bool,
    ) -> Result<Self, CaptureError> {
        let protection = if writable {
            ProtFlags::READ | ProtFlags::WRITE
        } else {
            ProtFlags::READ
        };
        // SAFETY: a new shared mapping of the ring's descriptor, at no fixed address; nothing
        // else in this process maps over it, and it is only touched through this value.
        let start = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                protection,
                MapFlags::SHARED,
                fd,
                offset,
            )
        }
        .map_err(CaptureError::MapRing)?;
        Ok(Mapping {
            start: NonNull::new(start.cast()).ok_or(CaptureError::RingAtZero)?,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping this value made, no longer referenced (borrows of it end with
        // the value).
        let _ = unsafe { munmap(self.start.as_ptr().cast(), self.len) };
    }
}

/// One ring buffer, read by one thread.
pub struct Ring {
    fd: OwnedFd,
    /// The consumer page: the consumer position, which only this reader writes.
    consumer: Mapping,
    /// The producer page, then the data pages twice.
    producer: Mapping,
    page: usize,
    /// Data bytes - 1 (a power of two).
    mask: usize,
    /// The last drains' producer positions, each with when its drain began (newest last): a
    /// record at or past such a position was reserved after that drain began, and so stamped
    /// after it.
    seen: VecDeque<(usize, u64)>,
    /// Where the last drain stopped at a record still being written, if it did.
    held_up_at: Option<usize>,
}

/// When the record at `position` was reserved after, at the latest, by the drains `seen` (the
/// last one the drain that found it): the start of the newest earlier drain whose producer
/// position had not passed it; 0 if none is kept.
fn reserved_after(seen: &VecDeque<(usize, u64)>, position: usize) -> u64 {
    seen.iter()
        .rev()
        .skip(1)
        .find(|&&(producer, _)| producer <= position)
        .map_or(0, |&(_, started)| started)
}

/// How many drains' producer positions a ring keeps: a record still being written after that
/// many passes is older than all of them.
const POSITIONS_KEPT: usize = 16;

// SAFETY: the mappings are owned by the value and read or written only through `&mut self`.
unsafe impl Send for Ring {}

impl Ring {
    /// Maps the ring buffer behind `fd`, of `data_bytes` (a power of two of pages).
    pub fn new(fd: OwnedFd, data_bytes: usize) -> Result<Self, CaptureError> {
        let page = rustix::param::page_size();
        if !data_bytes.is_power_of_two() || data_bytes < page {
            return Err(CaptureError::RingSize(data_bytes));
        }
        let consumer = Mapping::new(fd.as_fd(), 0, page, true)?;
        let producer = Mapping::new(fd.as_fd(), page as u64, page + 2 * data_bytes, false)?;
        Ok(Ring {
            fd,
            consumer,
            producer,
            page,
            mask: data_bytes - 1,
            seen: VecDeque::with_capacity(POSITIONS_KEPT),
            held_up_at: None,
        })
    }

    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn consumer_pos(&self) -> &AtomicUsize {
        // SAFETY: the consumer page starts with the kernel's `unsigned long consumer_pos`,
        // page-aligned, and lives as long as `self`.
        unsafe { self.consumer.start.cast::<AtomicUsize>().as_ref() }
    }

    fn producer_pos(&self) -> &AtomicUsize {
        // SAFETY: as above, for the producer page's `producer_pos`.
        unsafe { self.producer.start.cast::<AtomicUsize>().as_ref() }
    }

    /// The size of the data area, a power of two.
    fn data_bytes(&self) -> usize {
        self.mask + 1
    }

    /// Whether more than half the ring holds records this reader has not given back: read
    /// or not, committed or still being written (a record still being written stops the
    /// reader, however much is committed behind it). The BPF side measures a ring the same
    /// way when it decides to stop a writer under `--lossless`.
    pub fn past_half(&self) -> bool {
        // Acquire, as in `drain`; the consumer position is only written by this reader.
        let producer = self.producer_pos().load(Ordering::Acquire);
        let unread = producer.wrapping_sub(self.consumer_pos().load(Ordering::Relaxed));
        unread > self.data_bytes() / 2
    }

    /// Since when (CLOCK_MONOTONIC) a record still being written has stopped this ring's
    /// reader, if the last drain stopped at one: records stamped after that may still come
    /// from this ring, behind it, older than records read from other rings. (A target
    /// preempted inside a probe's program holds its ring up so, for as long as it is off the
    /// CPU: seen for over 50 ms under emulation, with preempt=full.)
    pub fn held_up_since(&self) -> Option<u64> {
        Some(reserved_after(&self.seen, self.held_up_at?))
    }

    /// Hands `read` the bytes of each record committed in the ring, oldest first, at most
    /// `max_records` of them, then gives their space back to the producers at once. Returns
    /// how many were read. `started` is when the pass that drains it began.
    pub fn drain(
        &mut self,
        max_records: usize,
        started: u64,
        mut read: impl FnMut(&[u8]),
    ) -> usize {
        // Only this reader writes it.
        let start = self.consumer_pos().load(Ordering::Relaxed);
        // Acquire: the records before the producer position are written as far as it shows.
        let end = self.producer_pos().load(Ordering::Acquire);
        let data = self.page;
        let mut position = start;
        let mut records = 0;
        self.held_up_at = None;
        if self.seen.len() == POSITIONS_KEPT {
            self.seen.pop_front();
        }
        self.seen.push_back((end, started));
        while position != end && records < max_records {
            let offset = data + (position & self.mask);
            // SAFETY: the header is within the first data mapping (offsets are 8-aligned and
            // below the data size), 4-aligned, and the kernel writes its length word
            // atomically.
            let header = unsafe {
                self.producer
                    .start
                    .add(offset)
                    .cast::<AtomicU32>()
                    .as_ref()
                    .load(Ordering::Acquire)
            };
            if header & BUSY != 0 {
                self.held_up_at = Some(position);
                break;
            }
            let len = (header & !(BUSY | DISCARDED)) as usize;
            if len > self.data_bytes() - HEADER_BYTES {
                // Not a length a producer could reserve: the ring cannot be read further.
                break;
            }
            if header & DISCARDED == 0 {
                // SAFETY: the record lies within the doubled data mapping (offset below the
                // data size, length below it too), committed and not reused until the
                // consumer position passes it.
                let bytes = unsafe {
                    std::slice::from_raw_parts(
                        self.producer.start.add(offset + HEADER_BYTES).as_ptr(),
                        len,
                    )
                };
                read(bytes);
                records += 1;
            }
            position = position.wrapping_add((HEADER_BYTES + len).next_multiple_of(8));
        }
        if position != start {
            // Release: the records are read before producers may reuse their space.
            self.consumer_pos().store(position, Ordering::Release);
        }
        records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_being_written_is_dated_by_the_drains_that_saw_it_or_not() {
        // Drains began at 100, 200 and 300 (this one), seeing the producer at 64, 128, 256.
        let seen = VecDeque::from([(64, 100), (128, 200), (256, 300)]);
        // Reserved after the drain at 200 read the producer at 128.
        assert_eq!(reserved_after(&seen, 128), 200);
        assert_eq!(reserved_after(&seen, 192), 200);
        // Already there when the drain at 200 looked: reserved after the one at 100.
        assert_eq!(reserved_after(&seen, 96), 100);
        // Older than every drain kept.
        assert_eq!(reserved_after(&seen, 32), 0);
    }
}
