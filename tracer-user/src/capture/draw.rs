//! Where records leave the rings. Each is decoded as it is drawn, while its bytes are in cache:
//! by the session's thread for its share of the rings and, with `--consumer-threads N`, by N-1
//! drawing threads for the others, all in the same pass. The session then puts every record
//! drawn in the reorder stage ([`super::reorder`]), which orders them whoever drew them.

use std::{sync::mpsc, thread::JoinHandle};

use tracer_common::{
    RawRecord,
    record::{RecordPart, StackInEntry},
};
use tracer_model::TraceRecord;

use super::{
    CaptureError,
    datapath::{Drained, Rings},
    decode::Decoder,
};
use crate::priority::Rank;

/// A record as it waits in the reorder stage, decoded as it was drawn from the ring of `cpu`:
/// decoding depends on nothing the stage puts in order, and the decoded record is two thirds of
/// a raw record's size, as many thousands wait there (perf: the misses of reading raw records
/// back were the largest cost of writing them).
#[derive(Clone, Copy)]
pub struct Drawn {
    /// `None`: codes the event table does not know.
    pub record: Option<TraceRecord>,
    /// When it was stamped (realtime): where a gap before it, or its loss, is placed.
    pub time_ns: i64,
    pub cpu: u32,
    /// Records the ring could not take just before it.
    pub lost_before: u32,
    /// It came without the stack it was to carry (its CPU's ring too full for the copy).
    pub stack_left_out: bool,
}

/// A record just drawn, with what the session needs of it before it waits: when it was stamped
/// (CLOCK_MONOTONIC, the stage's order) and whose it is, known even when it does not decode.
pub struct Pulled {
    pub ktime_ns: u64,
    pub pid: u32,
    pub lwpid: u32,
    pub drawn: Drawn,
    /// The stack it was taken with, to unwind (`--stacks`).
    pub stack: Option<Box<CopiedStack>>,
    /// It was taken on a call's slow path (`RawRecord::slow_path`).
    pub slow_path: bool,
}

impl Pulled {
    /// `part` of `raw`, drawn from the ring of `cpu` with `stack`.
    pub fn new(
        decoder: &Decoder,
        cpu: u32,
        (raw, part): (&RawRecord, RecordPart),
        stack: Option<StackInEntry>,
    ) -> Self {
        let record = decoder.decode(raw, part.which);
        Pulled {
            ktime_ns: raw.ktime_ns,
            pid: raw.pid,
            lwpid: raw.lwpid,
            drawn: Drawn {
                record,
                time_ns: decoder.realtime_ns(raw.ktime_ns),
                cpu,
                lost_before: part.lost_before,
                stack_left_out: false,
            },
            // Boxed: most records have none, and a pass moves thousands of them.
            stack: stack.map(|stack| Box::new(CopiedStack::of(stack))),
            slow_path: raw.slow_path != 0,
        }
    }
}

/// The stack a record was taken with, copied out of the ring: the registers at the probe and
/// the bytes from the stack pointer up.
pub struct CopiedStack {
    /// The instruction pointer, stack pointer and frame pointer at the probe.
    pub ip: u64,
    /// See `ip`; `bytes[0]` is the byte at this address.
    pub sp: u64,
    /// See `ip`.
    pub bp: u64,
    /// See `ip`: arm64's link register (0 on x86-64).
    #[cfg_attr(
        target_arch = "x86_64",
        expect(dead_code, reason = "x86-64 has no link register to unwind from")
    )]
    pub lr: u64,
    /// The stack from `sp` up, as far as it was copied.
    pub bytes: Vec<u8>,
    /// Where the BPF side was told the thread's stack begins, which sized the copy; 0 if it
    /// was not told.
    pub top_hint: u64,
}

impl CopiedStack {
    pub fn of(stack: StackInEntry) -> Self {
        let StackInEntry { head, bytes } = stack;
        CopiedStack {
            ip: head.ip,
            sp: head.sp,
            bp: head.bp,
            lr: head.lr,
            bytes: bytes.to_vec(),
            top_hint: head.top_hint,
        }
    }

    /// The word at `address`, if the copy holds it.
    pub fn word(&self, address: u64) -> Option<u64> {
        let start = usize::try_from(address.checked_sub(self.sp)?).ok()?;
        let word = self.bytes.get(start..start.checked_add(8)?)?;
        Some(u64::from_le_bytes(word.try_into().ok()?))
    }
}

/// The threads that drain the rings shared out (`DataPath::share_rings`), each its own share,
/// one pass when the session begins one. None with one consumer thread.
pub struct DrawThreads {
    threads: Vec<DrawThread>,
}

struct DrawThread {
    /// Each buffer sent is one pass: the thread drains its share once, into it.
    passes: mpsc::Sender<Vec<Pulled>>,
    /// What each pass drew, and what it read.
    drawn: mpsc::Receiver<(Vec<Pulled>, Drained)>,
    /// The buffer of the last pass, emptied: the next pass's, so that passes do not allocate.
    spare: Vec<Pulled>,
    handle: JoinHandle<()>,
}

impl DrawThreads {
    pub fn start(shares: Vec<Rings>, decoder: &Decoder) -> Result<Self, CaptureError> {
        let threads = (1..)
            .zip(shares)
            .map(|(n, mut rings)| {
                let (passes, pass_requests) = mpsc::channel::<Vec<Pulled>>();
                let (drawn_out, drawn) = mpsc::channel();
                let decoder = decoder.clone();
                let name = format!("ring-drawer-{n}");
                let handle = crate::priority::spawn(&name, Rank::First, move || {
                    for mut batch in pass_requests {
                        let read = rings.drain(|cpu, raw, part, stack| {
                            batch.push(Pulled::new(&decoder, cpu, (raw, part), stack));
                        });
                        if drawn_out.send((batch, read)).is_err() {
                            break;
                        }
                    }
                })
                .map_err(CaptureError::StartDrawer)?;
                Ok(DrawThread {
                    passes,
                    drawn,
                    spare: Vec::new(),
                    handle,
                })
            })
            .collect::<Result<_, CaptureError>>()?;
        Ok(DrawThreads { threads })
    }

    /// Has each thread begin a pass over its share of the rings.
    pub fn begin_pass(&mut self) -> Result<(), CaptureError> {
        for thread in &mut self.threads {
            thread
                .passes
                .send(std::mem::take(&mut thread.spare))
                .map_err(|_| CaptureError::DrawerStopped)?;
        }
        Ok(())
    }

    /// Waits for the pass each thread began, hands what it drew to `take`, and returns what
    /// they read together.
    pub fn end_pass(&mut self, mut take: impl FnMut(Pulled)) -> Result<Drained, CaptureError> {
        let mut read = Drained::default();
        for thread in &mut self.threads {
            let (mut batch, drained) = thread
                .drawn
                .recv()
                .map_err(|_| CaptureError::DrawerStopped)?;
            batch.drain(..).for_each(&mut take);
            thread.spare = batch;
            read = read.merge(drained);
        }
        Ok(read)
    }
}

impl Drop for DrawThreads {
    fn drop(&mut self) {
        for DrawThread { passes, handle, .. } in self.threads.drain(..) {
            // No more passes: the thread ends once the one it may be making is done.
            drop(passes);
            let _ = handle.join();
        }
    }
}
