//! The record as BPF captures it. Userspace turns it into the seed's a1..a5 fields through the
//! event table (see `events::EventDef::fields`), so that the BPF side only copies registers and
//! reads memory, and every decision about meaning stays in one table.

/// One event as captured in the kernel. Crosses the ring buffer as raw bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawRecord {
    /// CLOCK_MONOTONIC nanoseconds (`bpf_ktime_get_ns`); userspace converts to realtime.
    pub ktime_ns: u64,
    /// The caller's `pthread_self()`: on x86-64 glibc, the thread's FS base.
    pub pthread_self: u64,
    /// The address the call returns to: `[rsp]` at entry, or for a call written only at its
    /// return, the instruction pointer the kernel restores there (the same address, unread).
    pub caller: u64,
    /// Process id (TGID) and kernel thread id, as seen from the initial PID namespace.
    pub pid: u32,
    /// See `pid`.
    pub lwpid: u32,
    /// The event's category code (the tr line's `event1`).
    pub event1: u16,
    /// The event's code in its category (the tr line's `event2`).
    pub event2: u16,
    /// 0: single record; 1: entry half; 2: return half; [`WHICH_BOTH_HALVES`]: both halves
    /// of a call written at once where its fast path completed, which the reader of the ring
    /// makes into its two records ([`RawRecord::parts`]).
    pub which: u8,
    /// 1 if the record was taken on the call's slow path (`--contended`: the call was about to
    /// block, or woke a waiter), not at the function's entry and return: fields that the object
    /// no longer shows there are known from the path itself (`ProbeCookie::slow_path`).
    pub slow_path: u8,
    /// 1 if the thread slept voluntarily (a futex wait) between entry and return.
    pub block: u8,
    /// How the traced C library lays out the object copied into `object`
    /// ([`crate::object_layout`]: `LAYOUT_GLIBC`, `LAYOUT_COND_WITHOUT_G_REFS` or `LAYOUT_MUSL`).
    pub object_layout: u8,
    /// The first five integer arguments (rdi, rsi, rdx, rcx, r8), or a syscall's first five.
    pub args: [u64; 5],
    /// The return value (rax) for records written at return, else 0.
    pub rval: i64,
    /// A `struct timespec` read through a pointer argument (seconds, nanoseconds).
    pub timespec: [i64; 2],
    /// `errno` when the call returned -1, else 0.
    pub errno: i32,
    /// The first words of the object the first argument points to, at entry, or after the
    /// call for records written at return with `OBJECT_AT_RETURN` (as many as the event's
    /// `ObjectSize` says; the rest 0).
    pub object: [u32; crate::events::OBJECT_WORDS],
    /// How many records this CPU could not deliver just before this one (set in the ring, after
    /// the copy): a gap in the stream, placed exactly.
    pub lost_before: u32,
    /// What the first three arguments point to, read at return (`POINTEES`), else 0.
    pub pointees: [u64; 3],
    /// For a record written at the end of what it measures (a futex wait), when that began
    /// (CLOCK_MONOTONIC nanoseconds); else 0.
    pub started_ns: u64,
}

/// Which part of a call a record is: the seed's `which` field.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Which {
    /// The call's one record (0).
    Whole = 0,
    /// The entry half of a call written as two records (1).
    Entry = 1,
    /// Its return half (2).
    Return = 2,
}

impl Which {
    /// Its number in a tr line, a log and the ring.
    pub const fn code(self) -> u16 {
        self as u16
    }

    /// The part numbered `code`; none for a number that is not one.
    pub const fn from_code(code: u16) -> Option<Which> {
        match code {
            0 => Some(Which::Whole),
            1 => Some(Which::Entry),
            2 => Some(Which::Return),
            _ => None,
        }
    }
}

/// [`RawRecord::which`] of a call written whole where its fast path completed
/// ([`crate::Completion`]): its entry and return halves share the record, and its timestamp.
pub const WHICH_BOTH_HALVES: u8 = 3;

/// One of the records a ring entry stands for (see [`RawRecord::parts`]): the entry's own
/// fields but these two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordPart {
    /// Its [`RawRecord::which`].
    pub which: u8,
    /// Its [`RawRecord::lost_before`].
    pub lost_before: u32,
}

impl RawRecord {
    /// The records this one stands for: itself, or for [`WHICH_BOTH_HALVES`] its entry half
    /// (the first, as the call's entry came first) and its return half. Parts, not copies:
    /// a record is read where it lies in the ring.
    pub fn parts(&self) -> impl Iterator<Item = RecordPart> {
        let (first, second) = match self.which {
            WHICH_BOTH_HALVES => (
                Which::Entry as u8,
                // The gap before the call is reported once, before its first half.
                Some(RecordPart {
                    which: Which::Return as u8,
                    lost_before: 0,
                }),
            ),
            which => (which, None),
        };
        let first = RecordPart {
            which: first,
            lost_before: self.lost_before,
        };
        core::iter::once(first).chain(second)
    }
}

/// The size of [`RawRecord`], which both sides check.
pub const RAW_RECORD_SIZE: usize = 184;
/// Bytes a record takes in a ring buffer: the record and the kernel's 8-byte header.
pub const RING_ENTRY_SIZE: usize = RAW_RECORD_SIZE + 8;
const _: () = assert!(core::mem::size_of::<RawRecord>() == RAW_RECORD_SIZE);
const _: () = assert!(core::mem::align_of::<RawRecord>() == 8);

/// The most bytes of the user stack a record carries: from the stack pointer up. The BPF side
/// copies only the thread's live stack once userspace has learnt where it begins
/// (`STACK_TOPS`), so most copies are far smaller; a thread's first copy, or one whose stack
/// was never unwound whole, takes this much (as perf's `--call-graph dwarf` at its largest).
pub const MAX_STACK_BYTES: usize = 65536;

/// A stack copy's size is a multiple of this: the smallest read the copy makes.
pub const STACK_COPY_UNIT: usize = 64;

/// What follows a record taken with its stack ([`crate::ProgramConfig::stacks`]), in the same
/// ring entry: the registers an unwinder starts from, at the probed instruction, then
/// `reserved` bytes for the top of the stack, of which the first `copied` were copied. The
/// user's own frames are unwound from it in userspace, from the binaries' CFI, so that code
/// built without frame pointers is unwound right.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UserStack {
    /// The instruction pointer at the probe.
    pub ip: u64,
    /// The stack pointer at the probe: the first byte copied is the byte at this address.
    pub sp: u64,
    /// The frame pointer register (`rbp`, arm64's `x29`), which CFI may name as the frame's
    /// base.
    pub bp: u64,
    /// The link register (arm64's `x30`), where a leaf frame's return address may still be; 0
    /// on x86-64, which has none.
    pub lr: u64,
    /// How many bytes were copied: the stack above `sp` is unmapped past them, or the copy
    /// reached `reserved`.
    pub copied: u32,
    /// The bytes the entry has room for after this header; 0 when the stack was left out (the
    /// ring too full for it).
    pub reserved: u32,
    /// Where userspace said the thread's stack begins (`STACK_TOPS`), which set `reserved`;
    /// 0 when it had not said, and `reserved` was the most a copy takes.
    pub top_hint: u64,
}

/// The size of [`UserStack`].
pub const USER_STACK_SIZE: usize = 48;
const _: () = assert!(core::mem::size_of::<UserStack>() == USER_STACK_SIZE);

/// The head of a ring entry of a record with its stack; the stack's bytes follow.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StackedRecord {
    /// The record, as in an entry of its own.
    pub record: RawRecord,
    /// Its thread's stack at the probe.
    pub stack: UserStack,
}

/// The size of [`StackedRecord`]: where the stack's bytes begin in its entry.
pub const STACKED_RECORD_SIZE: usize = RAW_RECORD_SIZE + USER_STACK_SIZE;
const _: () = assert!(core::mem::size_of::<StackedRecord>() == STACKED_RECORD_SIZE);

/// A stack as it lies in a ring entry, after its record: its head and the bytes copied.
#[derive(Clone, Copy, Debug)]
pub struct StackInEntry<'a> {
    /// The registers at the probe and the sizes of the copy.
    pub head: &'a UserStack,
    /// At most what the entry holds, whatever `head.copied` says.
    pub bytes: &'a [u8],
}

impl UserStack {
    /// The stack that follows the record at the start of ring-entry bytes, if the entry is a
    /// [`StackedRecord`] with room for one; `None` for an entry of a record alone, one whose
    /// stack was left out, or one too short to hold the head, or misaligned.
    pub fn after_record(bytes: &[u8]) -> Option<StackInEntry<'_>> {
        let head = bytes.get(RAW_RECORD_SIZE..STACKED_RECORD_SIZE)?;
        #[allow(clippy::cast_ptr_alignment, reason = "the alignment is checked next")]
        let start = head.as_ptr().cast::<Self>();
        if !start.is_aligned() {
            return None;
        }
        // SAFETY: UserStack is plain old data (integers only, every bit pattern valid); the
        // slice holds a whole one at an aligned address, borrowed for the result's lifetime.
        let head = unsafe { &*start };
        if head.reserved == 0 {
            return None;
        }
        let copied = &bytes[STACKED_RECORD_SIZE..];
        Some(StackInEntry {
            head,
            bytes: &copied[..copied.len().min(head.copied as usize)],
        })
    }
}

impl RawRecord {
    /// The record at the start of ring-buffer bytes, where it lies (the drain decodes it from
    /// there, with no copy); `None` if the slice is too short, or not aligned as a record (the
    /// kernel aligns ring entries to 8 bytes).
    pub fn view(bytes: &[u8]) -> Option<&Self> {
        #[allow(clippy::cast_ptr_alignment, reason = "the alignment is checked next")]
        let start = bytes.as_ptr().cast::<Self>();
        if bytes.len() < RAW_RECORD_SIZE || !start.is_aligned() {
            return None;
        }
        // SAFETY: RawRecord is plain old data (integers only, every bit pattern valid); the
        // slice holds a whole record at an aligned address, borrowed for the result's lifetime.
        Some(unsafe { &*start })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_written_whole_is_its_two_halves_and_the_gap_before_it_once() {
        let whole = RawRecord {
            which: WHICH_BOTH_HALVES,
            lost_before: 3,
            ..RawRecord::default()
        };
        let part = |which, lost_before| RecordPart { which, lost_before };
        let mut parts = whole.parts();
        assert_eq!(parts.next(), Some(part(1, 3)));
        assert_eq!(parts.next(), Some(part(2, 0)));
        assert_eq!(parts.next(), None);
        let single = RawRecord { which: 2, ..whole };
        let mut parts = single.parts();
        assert_eq!(parts.next(), Some(part(2, 3)));
        assert_eq!(parts.next(), None);
    }

    #[test]
    fn short_slices_are_rejected() {
        let words = [0u64; RAW_RECORD_SIZE / 8];
        assert_eq!(
            RawRecord::view(&as_bytes(&words)[..RAW_RECORD_SIZE - 1]),
            None
        );
    }

    #[test]
    fn misaligned_bytes_are_rejected() {
        let words = [0u64; RAW_RECORD_SIZE / 8 + 1];
        assert_eq!(RawRecord::view(&as_bytes(&words)[4..]), None);
    }

    fn as_bytes<T>(value: &T) -> &[u8] {
        // SAFETY: viewing plain integers as their bytes, for the value's lifetime.
        unsafe {
            core::slice::from_raw_parts(
                core::ptr::from_ref::<T>(value).cast::<u8>(),
                size_of::<T>(),
            )
        }
    }

    #[test]
    fn round_trips_through_bytes() {
        let record = RawRecord {
            pid: 7,
            lwpid: 9,
            event1: 2,
            event2: 4,
            rval: -1,
            ..Default::default()
        };
        assert_eq!(RawRecord::view(as_bytes(&record)), Some(&record));
    }
}
