//! The event table of `docs/events.md`, defined once. The BPF programs read a probe's
//! [`ProbeFlags`] from its attach cookie; userspace attaches by [`EventDef::symbol`], decodes with
//! [`EventDef::fields`], and names events and categories from here.

use crate::{futex, object_layout::is_recursive_mutex, record::Which};

/// The seed's event categories (`event1`), with their `THR_TRACE_EVENTS` names.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    /// Thread creation, exit, joins, keys, scheduling (`pthread_create`, ...).
    Thread = 1,
    /// Non-recursive mutexes (`pthread_mutex_*`).
    Mutex = 2,
    /// Condition variables (`pthread_cond_*`).
    Cond = 3,
    /// POSIX semaphores (`sem_*`).
    Sema = 4,
    /// Read-write locks (`pthread_rwlock_*`).
    Rwlock = 5,
    /// Recursive mutexes: the `pthread_mutex_*` calls on a `PTHREAD_MUTEX_RECURSIVE` mutex.
    Rmutex = 6,
    /// Barriers (`pthread_barrier_*`).
    Barrier = 7,
    /// UnixWare's spinning barriers: no Linux counterpart.
    BarrierSpin = 8,
    /// Spin locks (`pthread_spin_*`).
    Spin = 9,
    /// Futex waits made outside traced pthread calls (a program's own locks, glibc's internal
    /// ones), recorded from the kernel's futex entry points rather than by probes in the
    /// library (`docs/futex-design.md`).
    Futex = 10,
}

impl Category {
    /// Every category, in code order.
    pub const ALL: [Category; 10] = [
        Category::Thread,
        Category::Mutex,
        Category::Cond,
        Category::Sema,
        Category::Rwlock,
        Category::Rmutex,
        Category::Barrier,
        Category::BarrierSpin,
        Category::Spin,
        Category::Futex,
    ];

    /// The `--events` name (`mutex`, `barrier_spin`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Category::Thread => "thread",
            Category::Mutex => "mutex",
            Category::Cond => "cond",
            Category::Sema => "sema",
            Category::Rwlock => "rwlock",
            Category::Rmutex => "rmutex",
            Category::Barrier => "barrier",
            Category::BarrierSpin => "barrier_spin",
            Category::Spin => "spin",
            Category::Futex => "futex",
        }
    }

    /// The category named `name` (as [`Category::name`] spells it).
    pub fn from_name(name: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The tr line's `event1`.
    pub const fn code(self) -> u16 {
        self as u16
    }

    /// The events of this category that are traced on Linux.
    pub fn events(self) -> impl Iterator<Item = &'static EventDef> {
        EVENTS
            .iter()
            .filter(move |e| e.category as u16 == self as u16)
    }

    /// Whether this build traces any event of the category.
    pub fn is_traced(self) -> bool {
        self.events().next().is_some()
    }

    /// Whether its records come from probes in the pthread library: every category but
    /// `futex`, whose records come from the kernel.
    pub const fn is_probed_in_library(self) -> bool {
        !matches!(self, Category::Futex)
    }

    /// Whether a full trace records it when `--events` names no event: every category but
    /// `futex`, which records every futex call of a program outside its pthread calls.
    pub const fn is_in_full_trace_by_default(self) -> bool {
        self.is_probed_in_library()
    }

    /// The category whose probes record this one's calls: rmutex calls are pthread_mutex_*
    /// calls on a recursive mutex, told apart only at run time (see [`classify`]).
    pub const fn probed_through(self) -> Category {
        match self {
            Category::Rmutex => Category::Mutex,
            other => other,
        }
    }
}

/// What the BPF programs do for a probe. Carried in 16 bits of the attach cookie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeFlags(pub u16);

impl ProbeFlags {
    /// Also attach a uretprobe: the record needs the return value or state after the call.
    pub const RETURN: u16 = 1 << 0;
    /// Two records: which=1 at entry, which=2 at return. Without it, one which=0 record.
    pub const PAIRED: u16 = 1 << 1;
    /// Count voluntary context switches across the call (`block?`).
    pub const BLOCK: u16 = 1 << 2;
    /// Two bits: which argument (2, 3 or 4; 0 for none) points to a `struct timespec` to read.
    pub const TIMESPEC_ARG_SHIFT: u16 = 3;
    /// The bits of [`ProbeFlags::TIMESPEC_ARG_SHIFT`].
    pub const TIMESPEC_ARG_MASK: u16 = 0b11 << Self::TIMESPEC_ARG_SHIFT;
    /// Two bits: how much of the object the first argument points to is copied at entry
    /// ([`ObjectSize`]); userspace derives `waiters?`, `s_count` and the like from it.
    pub const OBJECT_SHIFT: u16 = 5;
    /// The bits of [`ProbeFlags::OBJECT_SHIFT`].
    pub const OBJECT_MASK: u16 = 0b11 << Self::OBJECT_SHIFT;
    /// Copy the object again at return (for fields that describe it after the call).
    pub const OBJECT_AT_RETURN: u16 = 1 << 7;
    /// When the call returns -1, read `errno` from the thread's TLS at return.
    pub const ERRNO: u16 = 1 << 8;
    /// A spin lock: `block?` says whether the lock was held when the call first tried it (it
    /// spun). The first hit reads the lock word (held when at most 0, glibc's x86-64 value)
    /// or, with [`ProbeFlags::LOCKED_AT_FIRST_TRY_IF_NZ`], the flags its decrement left; a
    /// hit while the call is pending is the same call trying again (glibc 2.36's spin loop
    /// jumps back to the entry) and sets it too.
    pub const SPINS: u16 = 1 << 9;
    /// At return, read the 8 bytes each of the first three arguments points to: what the call
    /// stored through them (`thr_create`'s new thread, `thr_join`'s exit value).
    pub const POINTEES: u16 = 1 << 10;
    /// The probe's link has no process filter (system-wide, `--follow`, or a `-p` target whose
    /// main thread has exited): it records only the processes in the shared-traced set, or
    /// every process when tracing system-wide.
    pub const SHARED: u16 = 1 << 11;
    /// With `OBJECT_AT_RETURN`: copy the object again only if the copy made at entry is a
    /// recursive mutex's ([`is_recursive_mutex`]), whose depth after the call is its return
    /// record's; another mutex's return record reads nothing from it (a copy costs the traced
    /// thread about 115 ns on the development VM).
    pub const ONLY_IF_RECURSIVE: u16 = 1 << 12;
    /// Set by the placement, not the event table: the probe is on the conditional jump right
    /// after the call's locked decrement of the lock word (`lock decl; jne spin`), whose zero
    /// flag says whether that first try took the lock.
    pub const LOCKED_AT_FIRST_TRY_IF_NZ: u16 = 1 << 13;
    /// Set by the plan, not the event table: another traced function of the library calls or
    /// jumps to this one. A hit whose caller is inside a traced function the thread has open,
    /// or that reuses an open call's return address (a tail call), is part of that call, not
    /// a call the program made: nothing is recorded (musl's lock calls its timedlock, which
    /// calls its trylock).
    pub const CALLED_INSIDE: u16 = 1 << 14;
    /// Set by the plan, not the event table: the probe of a function whose event is not
    /// selected but which calls selected ones ([`ProbeFlags::CALLED_INSIDE`]). It records
    /// nothing; it opens the call (with [`ProbeFlags::RETURN`]), so that those calls are
    /// known to be part of it.
    pub const ONLY_OPENS_CALL: u16 = 1 << 15;
    /// Flags whose capture reads memory at entry (the object, or what an argument points to).
    pub const READS_MEMORY: u16 = Self::TIMESPEC_ARG_MASK | Self::OBJECT_MASK;

    /// The flag bits for copying `size` of the object.
    pub const fn object(size: ObjectSize) -> u16 {
        (size as u16) << Self::OBJECT_SHIFT
    }

    /// How much of the object to copy.
    pub const fn object_size(self) -> ObjectSize {
        match self.object_size_code() {
            1 => ObjectSize::Word,
            2 => ObjectSize::Small,
            3 => ObjectSize::Large,
            _ => ObjectSize::None,
        }
    }

    /// [`ProbeFlags::object_size`] as its code, [`ObjectSize`]'s, for the BPF side to take
    /// from a table.
    pub const fn object_size_code(self) -> usize {
        ((self.0 & Self::OBJECT_MASK) >> Self::OBJECT_SHIFT) as usize
    }

    /// The flag bits for "argument `n` (2..=4) points to a timespec".
    pub const fn timespec_arg(n: u16) -> u16 {
        (n - 1) << Self::TIMESPEC_ARG_SHIFT
    }

    /// Which argument points to a timespec, if one does.
    pub const fn timespec_argument(self) -> Option<u16> {
        match (self.0 & Self::TIMESPEC_ARG_MASK) >> Self::TIMESPEC_ARG_SHIFT {
            0 => None,
            n => Some(n + 1),
        }
    }

    /// Whether `flag` (one of the constants) is set.
    pub const fn has(self, flag: u16) -> bool {
        self.0 & flag != 0
    }
}

/// How many bytes of a synchronization object the BPF side copies: the object's own size or
/// less, so that a small object at the end of a page is never read past.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectSize {
    /// Nothing is copied.
    None = 0,
    /// 4 bytes: `pthread_spinlock_t`.
    Word = 1,
    /// 32 bytes: `sem_t`, `pthread_barrier_t`, and the start of `pthread_mutex_t` (40) and
    /// `pthread_rwlock_t` (56).
    Small = 2,
    /// 40 bytes: up to `__wrefs` of `pthread_cond_t` (48), wherever glibc keeps it
    /// ([`GlibcLayout::cond_waiter_refs`](crate::object_layout::GlibcLayout::cond_waiter_refs)).
    Large = 3,
}

impl ObjectSize {
    /// The bytes copied.
    pub const fn bytes(self) -> usize {
        match self {
            ObjectSize::None => 0,
            ObjectSize::Word => 4,
            ObjectSize::Small => 32,
            ObjectSize::Large => 40,
        }
    }
}

/// 32-bit words of the copied object: the largest [`ObjectSize`].
pub const OBJECT_WORDS: usize = 10;

/// The attach cookie: which event a probe reports, what its BPF program must capture, how the
/// library lays out its objects, where the caller's return address is when the probe is placed
/// past the entry, and where the traced function's code is, for telling calls from inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeCookie {
    /// The event's category code (the tr line's `event1`): 6 bits.
    pub event1: u16,
    /// The event's code in its category (the tr line's `event2`): 6 bits.
    pub event2: u16,
    /// The C library's object layout ([`crate::object_layout::LAYOUT_MUSL`] and the like): 2 bits.
    pub object_layout: u8,
    /// Bytes the instructions before the probe pushed: the return address is at `[rsp + this]`.
    /// 8 bits.
    pub stack_offset: u16,
    /// What the programs capture for the event.
    pub flags: ProbeFlags,
    /// The traced function's code, kept with an open call when the function calls other
    /// traced functions ([`ProbeFlags::CALLED_INSIDE`]).
    pub function: FunctionSpan,
    /// The probe is on the call's slow path (`--contended`), where the call blocks or wakes a
    /// waiter, not at the function's entry: its records are marked
    /// ([`RawRecord::slow_path`](crate::RawRecord::slow_path)). 1 bit.
    pub slow_path: bool,
    /// On a slow path, the waiting function's return is the call's own (sem_wait jumps to its
    /// slow path): its value is the call's result. Otherwise a slow path's return is that of a
    /// wait, after which the call succeeds: its result is 0. 1 bit.
    pub returns_result: bool,
    /// On a slow path or where a fast path completes, the register holding the call's object
    /// (the futex waited on may be a word inside it). Carried there only, in the bits that say
    /// elsewhere where the function starts ([`FunctionSpan::before_probe`]): such a probe keeps
    /// no span.
    pub object_register: ObjectRegister,
    /// The probe is where the call's fast path completes it ([`Completion`]), in a full trace:
    /// carried in the bits of the span, which such a probe does not keep.
    pub completion: Option<Completion>,
    /// On a slow path where the return address is no longer where the entry had it (arm64's
    /// `x30`, overwritten by a call since): how many 8-byte slots below the call's entry stack
    /// pointer the prologue saved it, at most [`ProbeCookie::MAX_RETURN_ADDRESS_SLOTS`]; 0
    /// where it is as at the entry. Carried in the 4 bits that say a completion's condition,
    /// which a slow path does not have.
    pub return_address_saved: u8,
    /// On a slow path, how many bytes past the call's object [`ProbeCookie::object_register`]
    /// points (a futex word inside it, where the code keeps the object's address in no
    /// register): a multiple of 4, at most [`ProbeCookie::MAX_OBJECT_OFFSET`]. Carried in words
    /// in the top 4 bits of the span's size, which a slow path keeps below
    /// [`ProbeCookie::MAX_SLOW_PATH_SPAN`].
    pub object_offset: u8,
}

/// A probe inside a lock function where the call's outcome is known (after the atomic
/// instruction that took or released the lock, on the branch that tests it, or where the way
/// that branch completes begins): the call is written whole there when the condition holds,
/// with no probe at its entry nor at its return. The planner (`attach::fast_path`) proves that
/// every way through the function meets exactly one such completion, or opens the call first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Which flags of `eflags` say the call completed here.
    pub condition: Condition,
    /// The condition's value that says so.
    pub when_set: bool,
    /// What the completed call returns.
    pub outcome: PackedOutcome,
    /// The thread may have the call open here (it went by a slow path): the open call is
    /// completed rather than written whole.
    pub may_be_open: bool,
    /// When the condition does not hold, the call goes on to wait or to code that is not
    /// proved: it is opened here (its entry half), for a later completion or its return.
    pub opens_otherwise: bool,
    /// What the atomic instruction found in the object's first bytes, which the entry
    /// reports (a semaphore's count before its decrement, an unlock's waiters), is in `rax`.
    pub found_in_rax: FoundInRax,
    /// The code after the completion stores to the object before it returns: a recursive
    /// mutex's count, which its return half reports, is one more than the copy made here
    /// shows ([`count_one_more`](crate::object_layout::count_one_more)).
    pub stores_after: bool,
    /// A call completed here needs no copy of its object: what its record reads of it is the
    /// lock word the atomic instruction found, in `rax` ([`FoundInRax::Word`]), and what the
    /// code proved on every way here: that the mutex is not recursive (its type tested
    /// before), as the copy's zeroed type says, or else which register holds its type
    /// (`type_register`); and, of a lock, that it found the mutex free, with no owner. The
    /// copy is one of a run's two reads of the program's memory.
    pub object_from_rax: bool,
    /// With `object_from_rax`, where the code did not prove the mutex's type: the register
    /// that holds the bits of its type word the code loaded, type bits included
    /// ([`MUTEX_TYPE_MASK`](crate::object_layout::MUTEX_TYPE_MASK)), which the record takes
    /// as its type word. One of [`Completion::TYPE_REGISTERS`].
    pub type_register: TypeRegister,
}

/// A [`Completion::type_register`] as the cookie carries it: 0 for none, else one more than
/// its index in [`Completion::TYPE_REGISTERS`]. Unpacked only where it is used, as
/// [`PackedOutcome`] is.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct TypeRegister(u8);

impl TypeRegister {
    /// None: the code proved the type, or the record copies the mutex.
    pub const NONE: TypeRegister = TypeRegister(0);

    /// `register`, which is one of [`Completion::TYPE_REGISTERS`] (else none).
    pub const fn of(register: ObjectRegister) -> Self {
        let mut index = 0;
        while index < Completion::TYPE_REGISTERS.len() {
            if Completion::TYPE_REGISTERS[index] as u8 == register as u8 {
                return TypeRegister(index as u8 + 1);
            }
            index += 1;
        }
        TypeRegister::NONE
    }

    /// The register, if any. A match, not an index into [`Completion::TYPE_REGISTERS`], for
    /// the BPF side (see [`ObjectRegister::from_code`]).
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "the BPF side unpacks it in its fast-path program: inlined, as its verifier likes"
    )]
    pub const fn unpack(self) -> Option<ObjectRegister> {
        match self.0 {
            1 => Some(ObjectRegister::Rdx),
            2 => Some(ObjectRegister::Rcx),
            3 => Some(ObjectRegister::Rsi),
            4 => Some(ObjectRegister::R8),
            5 => Some(ObjectRegister::R9),
            6 => Some(ObjectRegister::R10),
            7 => Some(ObjectRegister::R11),
            _ => None,
        }
    }
}

impl core::fmt::Debug for TypeRegister {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.unpack().fmt(f)
    }
}

/// The flag a completion tests ([`Completion::condition`]).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Every hit completes the call (a jump into the code that returns).
    Always = 0,
    /// The zero flag (`je`, `jne`).
    Zero = 1,
    /// The sign flag (`js`, `jns`).
    Sign = 2,
    /// No hit completes it: the probe only opens the call (code that is not proved begins).
    Never = 3,
    /// A signed compare's "less or equal": the zero flag, or the sign flag unlike the
    /// overflow flag (`jle`, `jg`).
    LessOrEqual = 4,
    /// An unsigned compare's "below or equal": the carry flag or the zero flag (`jbe`, `ja`).
    BelowOrEqual = 5,
}

/// What a completed call returns: 8 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// This value (0 to [`Outcome::MAX_RETURNED`]: success, or an error number).
    Returns(u8),
    /// -1, with `errno` set to this (0 to [`Outcome::MAX_ERRNO`]).
    Fails(u8),
    /// What this register holds at the probe (the code after it moves it to `eax`; `rax`
    /// itself on a `ret`): a general-purpose register by its [`ObjectRegister`] code.
    ReturnsRegister(ObjectRegister),
}

impl Outcome {
    /// The largest errno [`Outcome::Fails`] carries: every errno a pthread or semaphore call
    /// sets is below.
    pub const MAX_ERRNO: u8 = 0x6f;
    /// The largest value [`Outcome::Returns`] carries.
    pub const MAX_RETURNED: u8 = 0x7f;

    /// The outcome in the cookie's 8 bits.
    pub const fn pack(self) -> PackedOutcome {
        PackedOutcome(match self {
            Outcome::Returns(value) => value & Self::MAX_RETURNED,
            Outcome::Fails(errno) => 0x80 | (errno & Self::MAX_ERRNO),
            Outcome::ReturnsRegister(register) => 0xf0 | register as u8,
        })
    }
}

/// An [`Outcome`] as the cookie carries it, unpacked only where it is used: decoding it in
/// every program that decodes a cookie cost the entry program stack.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PackedOutcome(u8);

impl PackedOutcome {
    /// Whether the value is a register's at the probe ([`Outcome::ReturnsRegister`]): there,
    /// at a `ret`, the code has set errno if it fails; a known outcome says its errno.
    pub const fn is_register(self) -> bool {
        self.0 & 0xf0 == 0xf0
    }

    /// The outcome [`Outcome::pack`] packed.
    pub const fn unpack(self) -> Outcome {
        match self.0 {
            bits if bits & 0xf0 == 0xf0 => {
                Outcome::ReturnsRegister(ObjectRegister::from_code(bits & 0x0f))
            }
            bits if bits & 0x80 != 0 => Outcome::Fails(bits & Outcome::MAX_ERRNO),
            bits => Outcome::Returns(bits),
        }
    }
}

impl core::fmt::Debug for PackedOutcome {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.unpack().fmt(f)
    }
}

/// How many of the object's first bytes `rax` holds as the locked instruction found them
/// ([`Completion::found_in_rax`]).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoundInRax {
    /// None: the copy made at the completion stands.
    Nothing = 0,
    /// The first 4 bytes (`eax`).
    Word = 1,
    /// The first 8 bytes.
    DoubleWord = 2,
}

impl Completion {
    /// Every hit completes the call, which returns `outcome`: nothing opened, nothing found
    /// in `rax`, the object copied.
    pub const fn always(outcome: Outcome) -> Self {
        Completion {
            condition: Condition::Always,
            when_set: false,
            outcome: outcome.pack(),
            may_be_open: false,
            opens_otherwise: false,
            found_in_rax: FoundInRax::Nothing,
            stores_after: false,
            object_from_rax: false,
            type_register: TypeRegister::NONE,
        }
    }

    /// The registers a completion can take a mutex's type from ([`Completion::type_register`]),
    /// by their code in the cookie's 3 bits less one: the caller-saved ones other than `rax`
    /// and `rdi`, which hold the lock word and the mutex.
    pub const TYPE_REGISTERS: [ObjectRegister; 7] = [
        ObjectRegister::Rdx,
        ObjectRegister::Rcx,
        ObjectRegister::Rsi,
        ObjectRegister::R8,
        ObjectRegister::R9,
        ObjectRegister::R10,
        ObjectRegister::R11,
    ];

    /// [`Completion::found_in_rax_code`]'s code for the word, the record taking the object
    /// from it; the others are [`FoundInRax`]'s.
    pub const FOUND_WORD_AND_OBJECT: u64 = 3;

    /// x86's carry, zero, sign and overflow flags, in `eflags`, by bit.
    const CARRY_FLAG: u64 = 0;
    const ZERO_FLAG: u64 = 6;
    const SIGN_FLAG: u64 = 7;
    const OVERFLOW_FLAG: u64 = 11;

    /// Whether the call completed, by the flags `eflags` at the probe, at the completion
    /// `cookie` carries. Read from the cookie's bits with no branch: each condition's value is
    /// a bit of a word, picked by the condition's code.
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "the BPF side tests it in its fast-path program: inlined, as its verifier likes"
    )]
    pub const fn holds_in(cookie: u64, eflags: u64) -> bool {
        let zero = (eflags >> Self::ZERO_FLAG) & 1;
        let sign = (eflags >> Self::SIGN_FLAG) & 1;
        let below = (eflags >> Self::CARRY_FLAG) & 1;
        let less = sign ^ (eflags >> Self::OVERFLOW_FLAG) & 1;
        // By `Condition` code: Always 1, Zero, Sign, Never 0, LessOrEqual, BelowOrEqual; 6
        // and 7 are Never's too.
        let values = 1
            | zero << Condition::Zero as u64
            | sign << Condition::Sign as u64
            | (zero | less) << Condition::LessOrEqual as u64
            | (zero | below) << Condition::BelowOrEqual as u64;
        // The conditions that `when_set` says the sense of: all but Always and Never.
        let tested = 1 << Condition::Zero as u64
            | 1 << Condition::Sign as u64
            | 1 << Condition::LessOrEqual as u64
            | 1 << Condition::BelowOrEqual as u64;
        let condition = (cookie >> 20) & 7;
        let when_clear = !cookie & 1;
        ((values >> condition) & 1) ^ ((tested >> condition) & when_clear) != 0
    }

    /// What `rax` holds at the completion `cookie` carries, by its code: 0 nothing (and at
    /// every probe that is no completion), 1 the word, 2 the double word,
    /// [`Completion::FOUND_WORD_AND_OBJECT`] the word, and the record takes the object from it
    /// ([`Completion::object_from_rax`]).
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "the BPF side reads it in every program: inlined, as its verifier likes"
    )]
    pub const fn found_in_rax_code(cookie: u64) -> u64 {
        ((cookie >> 3) & 3) * ProbeCookie::marks_completion(cookie) as u64
    }

    /// The [`TypeRegister`] of the completion `cookie` carries, as its code: 0 for none.
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "the BPF side decodes a cookie in every program: inlined, as its verifier likes"
    )]
    const fn type_register_code(cookie: u64) -> u64 {
        ((cookie >> 6) & 3) | ((cookie >> 23) & 1) << 2
    }

    /// The completion in the cookie's 16 low bits, and its condition in 4 more: what `rax`
    /// holds in 2 bits (3: the lock word, with no copy of the object), the type register's
    /// code in bits 6 and 7 and the condition's fourth.
    const fn encode(self) -> (u16, u8) {
        let found_in_rax = match (self.found_in_rax, self.object_from_rax) {
            (FoundInRax::Word, true) => Self::FOUND_WORD_AND_OBJECT as u16,
            (found, _) => found as u16,
        };
        let type_register = self.type_register.0;
        let low = (self.when_set as u16)
            | ((self.may_be_open as u16) << 1)
            | ((self.opens_otherwise as u16) << 2)
            | (found_in_rax << 3)
            | ((self.stores_after as u16) << 5)
            | (((type_register & 3) as u16) << 6)
            | ((self.outcome.0 as u16) << 8);
        (low, self.condition as u8 | (type_register >> 2) << 3)
    }

    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "the BPF side decodes a cookie in every program: inlined, as its verifier likes"
    )]
    const fn decode(cookie: u64) -> Self {
        let found_in_rax = Self::found_in_rax_code(cookie);
        Completion {
            condition: match (cookie >> 20) & 7 {
                0 => Condition::Always,
                1 => Condition::Zero,
                2 => Condition::Sign,
                4 => Condition::LessOrEqual,
                5 => Condition::BelowOrEqual,
                _ => Condition::Never,
            },
            when_set: cookie & 1 != 0,
            may_be_open: cookie & (1 << 1) != 0,
            opens_otherwise: cookie & (1 << 2) != 0,
            found_in_rax: match found_in_rax {
                1 | Self::FOUND_WORD_AND_OBJECT => FoundInRax::Word,
                2 => FoundInRax::DoubleWord,
                _ => FoundInRax::Nothing,
            },
            stores_after: cookie & (1 << 5) != 0,
            object_from_rax: found_in_rax == Self::FOUND_WORD_AND_OBJECT,
            type_register: TypeRegister(Self::type_register_code(cookie) as u8),
            outcome: PackedOutcome((cookie >> 8) as u8),
        }
    }
}

/// Where a slow-path probe finds the call's object: the first argument's register, or another
/// the function copied it to (one a call leaves as it was, where it calls functions). Every
/// general-purpose register but the stack pointer, by its code.
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ObjectRegister {
    /// The first argument's.
    #[default]
    Rdi = 0,
    /// `rbx`, kept across calls.
    Rbx = 1,
    /// `rbp`, kept across calls.
    Rbp = 2,
    /// `r12`, kept across calls.
    R12 = 3,
    /// `r13`, kept across calls.
    R13 = 4,
    /// `r14`, kept across calls.
    R14 = 5,
    /// `r15`, kept across calls.
    R15 = 6,
    /// `r8`.
    R8 = 7,
    /// `r9`.
    R9 = 8,
    /// `r10`.
    R10 = 9,
    /// `r11`.
    R11 = 10,
    /// `rax`.
    Rax = 11,
    /// `rcx`.
    Rcx = 12,
    /// `rdx`.
    Rdx = 13,
    /// `rsi`.
    Rsi = 14,
}

impl ObjectRegister {
    /// Every one, in the order of their codes: the first argument's first, then those a call
    /// keeps.
    pub const ALL: [ObjectRegister; 15] = [
        ObjectRegister::Rdi,
        ObjectRegister::Rbx,
        ObjectRegister::Rbp,
        ObjectRegister::R12,
        ObjectRegister::R13,
        ObjectRegister::R14,
        ObjectRegister::R15,
        ObjectRegister::R8,
        ObjectRegister::R9,
        ObjectRegister::R10,
        ObjectRegister::R11,
        ObjectRegister::Rax,
        ObjectRegister::Rcx,
        ObjectRegister::Rdx,
        ObjectRegister::Rsi,
    ];

    /// The register of code `code` (`rdi` for a code no register has). A match, not an index
    /// into [`ObjectRegister::ALL`], which a BPF program would build on its small stack.
    pub const fn from_code(code: u8) -> Self {
        match code {
            1 => ObjectRegister::Rbx,
            2 => ObjectRegister::Rbp,
            3 => ObjectRegister::R12,
            4 => ObjectRegister::R13,
            5 => ObjectRegister::R14,
            6 => ObjectRegister::R15,
            7 => ObjectRegister::R8,
            8 => ObjectRegister::R9,
            9 => ObjectRegister::R10,
            10 => ObjectRegister::R11,
            11 => ObjectRegister::Rax,
            12 => ObjectRegister::Rcx,
            13 => ObjectRegister::Rdx,
            14 => ObjectRegister::Rsi,
            _ => ObjectRegister::Rdi,
        }
    }
}

/// Where a traced function's code lies, relative to its probe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FunctionSpan {
    /// Bytes from the function's start to the probe.
    pub before_probe: u8,
    /// The function's size; 0 when not kept.
    pub bytes: u16,
}

impl ProbeCookie {
    /// The most 8-byte slots below the entry's stack pointer that a slow path's cookie can say
    /// the return address was saved at ([`ProbeCookie::return_address_saved`]).
    pub const MAX_RETURN_ADDRESS_SLOTS: u16 = 15;
    /// The most bytes past the object a slow path's register can point
    /// ([`ProbeCookie::object_offset`]).
    pub const MAX_OBJECT_OFFSET: u8 = 60;
    /// The largest function span a slow path's cookie keeps: the top 4 bits of its size carry
    /// [`ProbeCookie::object_offset`].
    pub const MAX_SLOW_PATH_SPAN: u16 = 0xfff;

    /// The 64 bits of the cookie, high to low: event1 (6), event2 (6), object layout (2), slow
    /// path (1), returns result (1), stack offset (8), flags (16), the function span's bytes
    /// before the probe (8; on a slow path or a completion the object's register in the low 4, and
    /// on a completion its condition and a bit of its type register in the high 4, on a slow
    /// path where its return address was saved) and size (16; on a completion the rest of the
    /// [`Completion`], on a slow path the object's offset in words in the top 4). A completion is marked by the two
    /// bits slow path and returns result as 0 and 1, which no other probe has (a result is
    /// returned on slow paths only).
    pub const fn encode(self) -> u64 {
        let (returns_result, low, condition) = match self.completion {
            Some(completion) => {
                let (low, condition) = completion.encode();
                (true, low, condition)
            }
            None if self.slow_path => (
                self.returns_result,
                (self.function.bytes & Self::MAX_SLOW_PATH_SPAN)
                    | ((self.object_offset as u16 / 4) << 12),
                self.return_address_saved & 0xf,
            ),
            None => (self.returns_result, self.function.bytes, 0),
        };
        ((self.event1 as u64 & 0x3f) << 58)
            | ((self.event2 as u64 & 0x3f) << 52)
            | ((self.object_layout as u64 & 0x3) << 50)
            | ((self.slow_path as u64) << 49)
            | ((returns_result as u64) << 48)
            | ((self.stack_offset as u64 & 0xff) << 40)
            | ((self.flags.0 as u64) << 24)
            | ((self.span_or_register() as u64) << 16)
            | ((condition as u64) << 20)
            | low as u64
    }

    /// The byte at bits 16..24: the object's register on a slow path or a completion, else
    /// where the function starts.
    const fn span_or_register(self) -> u8 {
        match self.slow_path || self.completion.is_some() {
            true => self.object_register as u8,
            false => self.function.before_probe,
        }
    }

    /// The cookie [`ProbeCookie::encode`] made.
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "the BPF side decodes a cookie in every program: inlined, as its verifier likes"
    )]
    pub const fn decode(cookie: u64) -> Self {
        let slow_path = (cookie >> 49) & 1 != 0;
        let marked_completion = Self::marks_completion(cookie);
        // A slow path or a completion: the byte at bits 16..24 is a register.
        let keeps_register = (cookie >> 48) & 3 != 0;
        ProbeCookie {
            event1: ((cookie >> 58) & 0x3f) as u16,
            event2: ((cookie >> 52) & 0x3f) as u16,
            object_layout: ((cookie >> 50) & 0x3) as u8,
            slow_path,
            returns_result: (cookie >> 48) & 3 == 3,
            stack_offset: ((cookie >> 40) & 0xff) as u16,
            flags: ProbeFlags((cookie >> 24) as u16),
            function: FunctionSpan {
                before_probe: match keeps_register {
                    true => 0,
                    false => (cookie >> 16) as u8,
                },
                bytes: match (marked_completion, slow_path) {
                    (true, _) => 0,
                    (false, true) => cookie as u16 & Self::MAX_SLOW_PATH_SPAN,
                    (false, false) => cookie as u16,
                },
            },
            object_register: ObjectRegister::from_code(Self::object_register_code(cookie) as u8),
            completion: match marked_completion {
                true => Some(Completion::decode(cookie)),
                false => None,
            },
            return_address_saved: match slow_path {
                true => ((cookie >> 20) & 0xf) as u8,
                false => 0,
            },
            object_offset: Self::object_offset_in(cookie) as u8,
        }
    }

    // Read straight from a cookie's bits, for the BPF side, where a value matched into an
    // enum is a ladder of branches, each setting a constant that later code tests: the
    // verifier then walks the rest of the program once per arm.

    /// Whether `cookie` is a completion's ([`ProbeCookie::completion`]).
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "the BPF side reads it in every program: inlined, as its verifier likes"
    )]
    pub const fn marks_completion(cookie: u64) -> bool {
        (cookie >> 48) & 3 == 1
    }

    /// [`ProbeCookie::object_register`]'s code ([`ObjectRegister::from_code`]): 0, `rdi`,
    /// where the probe keeps no register.
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "the BPF side reads it in every program: inlined, as its verifier likes"
    )]
    pub const fn object_register_code(cookie: u64) -> u64 {
        let keeps_register = ((cookie >> 48) & 3 != 0) as u64;
        ((cookie >> 16) & 0xf) * keeps_register
    }

    /// [`ProbeCookie::object_offset`]: 0 where the probe is not on a slow path.
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "the BPF side reads it in every program: inlined, as its verifier likes"
    )]
    pub const fn object_offset_in(cookie: u64) -> u64 {
        ((cookie >> 12) & 0xf) * 4 * ((cookie >> 49) & 1)
    }
}

/// What one of a1..a5 holds, in the seed's notation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// The table leaves it empty: 0.
    Zero,
    /// `argN`, N counted from 1.
    Arg(u8),
    /// `rval`: the return value, as a 32-bit int.
    Rval,
    /// The whole 64-bit return value, for calls that return a pointer (`pthread_getspecific`).
    Rval64,
    /// `*argN` as stored by a successful call (rval 0), as a 64-bit value; 0 if it failed
    /// ([`ProbeFlags::POINTEES`]): `thr_create`'s new thread, `thr_join`'s exit value.
    Stored64(u8),
    /// The same as a 32-bit int: `thr_getscheduler`'s policy and priority.
    Stored32(u8),
    /// `*argN` read at return whatever the result, as a 32-bit int: an input the call was
    /// given by pointer (`thr_setscheduler`'s `param->sched_priority`).
    Pointee32(u8),
    /// `block?`: 1 if the thread slept in the kernel during the call.
    Block,
    /// `waiters?` of a glibc mutex: its `__lock` word (offset 0) is 2 when locked with waiters.
    MutexWaiters,
    /// The thread id holding a mutex when the call found it (`__owner`, a Linux extension): 0
    /// if it was free, or the library does not say (musl's normal mutex).
    MutexOwner,
    /// `waiters?` of a glibc condition variable: `__wrefs` >> 3 counts waiters
    /// ([`GlibcLayout::cond_waiter_refs`](crate::object_layout::GlibcLayout::cond_waiter_refs)).
    CondWaiters,
    /// `s_count`: the semaphore's value, the low 32 bits of glibc's `sem_t`.
    SemCount,
    /// `b_count`: threads already waiting at a glibc barrier at entry, `in - current_round`.
    BarrierWaiting,
    /// `rm_depth`: a recursive mutex's recursion count, glibc's `__count` (offset 4).
    RecursionDepth,
    /// `rw_readers`: readers holding a glibc rwlock, `__readers` >> 3.
    RwReaders,
    /// `waiters?` of a glibc rwlock: readers waiting (`__readers` bit 2), writers registered
    /// (`__writers`), or a futex marked as slept on (bit 31 of `__wrphase_futex` or
    /// `__writers_futex`).
    RwWaiters,
    /// `argN.sec` / `argN.nsec` of the timespec an argument points to
    /// ([`ProbeFlags::timespec_arg`]).
    TimespecSec,
    /// See [`Field::TimespecSec`].
    TimespecNsec,
    /// `errno` after a call that returned -1, else 0: a Linux extension in the field after
    /// `rval`, so that a failure's cause is not lost.
    Errno,
    /// The nanoseconds from the start of what the record measures to its end (a futex wait's
    /// time blocked): its time less [`RawRecord::started_ns`](crate::RawRecord::started_ns).
    ElapsedNs,
    /// The timeout that argument 4 points to, in nanoseconds as given (relative or absolute
    /// as the call says), or -1 when the pointer is null: no timeout.
    TimeoutNs,
}

/// A field's name as [`EventDef::field_name`] gives it, to be displayed.
#[derive(Clone, Copy, Debug)]
pub struct FieldName {
    field: Field,
    /// The argument that points to the event's timespec, if it has one.
    timespec: u16,
}

impl core::fmt::Display for FieldName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let timespec = self.timespec;
        match self.field {
            Field::Zero => f.write_str("0"),
            Field::Arg(n) => write!(f, "arg{n}"),
            Field::Rval | Field::Rval64 => f.write_str("rval"),
            Field::Stored64(n) | Field::Stored32(n) => write!(f, "*arg{n}"),
            Field::Pointee32(n) => write!(f, "arg{n}->sched_priority"),
            Field::Block => f.write_str("block?"),
            Field::MutexWaiters | Field::CondWaiters | Field::RwWaiters => f.write_str("waiters?"),
            Field::SemCount => f.write_str("s_count"),
            Field::RwReaders => f.write_str("rw_readers"),
            Field::RecursionDepth => f.write_str("rm_depth"),
            Field::BarrierWaiting => f.write_str("b_count"),
            Field::TimespecSec => write!(f, "arg{timespec}.sec"),
            Field::TimespecNsec => write!(f, "arg{timespec}.nsec"),
            Field::Errno => f.write_str("errno"),
            Field::MutexOwner => f.write_str("owner"),
            Field::ElapsedNs => f.write_str("elapsed_ns"),
            Field::TimeoutNs => f.write_str("timeout_ns"),
        }
    }
}

use Field::{
    Arg, BarrierWaiting, Block, CondWaiters, ElapsedNs, Errno, MutexOwner, MutexWaiters, Pointee32,
    RecursionDepth, Rval, Rval64, RwReaders, RwWaiters, SemCount, Stored32, Stored64, TimeoutNs,
    TimespecNsec, TimespecSec, Zero,
};

/// One row of the event map.
#[derive(Debug)]
pub struct EventDef {
    /// Its category (the tr line's `event1`).
    pub category: Category,
    /// Its code in the category (the tr line's `event2`).
    pub event2: u16,
    /// The seed's name, e.g. `mutex_lock`.
    pub name: &'static str,
    /// The glibc entry point.
    pub symbol: &'static str,
    /// What the call does to its object.
    pub role: CallRole,
    /// What the programs capture.
    pub flags: ProbeFlags,
    /// a1..a5 of the which=0 record, or of the which=1 record of a paired event.
    pub first: [Field; 5],
    /// a1..a5 of the which=2 record of a paired event.
    pub second: [Field; 5],
}

/// What a call does to the object it is given: what reports, lock-order checks and the probe
/// planner read instead of its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallRole {
    /// Takes a lock (a mutex, read-write lock or spin lock).
    Acquire(Access, Blocking),
    /// Gives a lock back.
    Release,
    /// Waits for what other threads give: a semaphore's unit, a condition's signal, a
    /// barrier's last thread, a thread's end, a futex wake.
    Wait(Blocking),
    /// Gives it: a semaphore post, a condition's signal or broadcast, a futex wake.
    Signal,
    /// Starts a thread.
    Spawn,
    /// Ends the calling thread.
    Exit,
    /// None of these: creating, destroying or asking about an object, and the like.
    Other,
}

/// How a lock is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// By one thread alone (a mutex, a write lock).
    Exclusive,
    /// Beside other readers (a read lock).
    Shared,
}

/// Whether, and for how long, a call can block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocking {
    /// Until it gets what it waits for, without end: a wait that can close a cycle of waits.
    Unbounded,
    /// Until a deadline, at most (`timedlock`, `clockwait`, ...).
    Timed,
    /// Never: it tries once (`trylock`, `trywait`, `tryjoin`).
    Never,
}

impl Blocking {
    /// Whether the call can block at all.
    pub const fn can_block(self) -> bool {
        !matches!(self, Blocking::Never)
    }
}

/// Which events record, as the BPF side reads it: slot `event1` (a category code) of the
/// `RECORDING` array has bit `event2` set for each event that records. A probe whose event's
/// bit is clear (stopped, or filtered out) returns before its record takes ring space; a mutex
/// probe, which records rmutex calls too, runs if either event's bit is set, and a record of
/// the one whose bit is clear (told by `classify`) is discarded as it is written.
pub type RecordingMasks = [u64; RECORDING_SLOTS as usize];

/// Slots of the `RECORDING` array: one per category code.
pub const RECORDING_SLOTS: u32 = 16;

/// Event codes are below these: a category code names a `RECORDING` slot, an event2 a bit of it.
const EVENT1_CODES: usize = RECORDING_SLOTS as usize;
const EVENT2_CODES: usize = 64;

/// The row of `EVENTS` for each (event1, event2); `u16::MAX` where there is none.
static INDEX: [[u16; EVENT2_CODES]; EVENT1_CODES] = {
    let mut index = [[u16::MAX; EVENT2_CODES]; EVENT1_CODES];
    let mut row = 0;
    while row < TABLE.len() {
        let event = &TABLE[row];
        index[event.category as usize][event.event2 as usize] = row as u16;
        row += 1;
    }
    index
};

/// The masks that let `events` record.
pub fn recording_masks(events: impl IntoIterator<Item = &'static EventDef>) -> RecordingMasks {
    let mut masks = [0; RECORDING_SLOTS as usize];
    for event in events {
        masks[usize::from(event.category.code())] |= 1 << event.event2;
    }
    masks
}

impl EventDef {
    /// The event whose probe records this one's calls: itself, or for an rmutex event the
    /// mutex event of the same function (see [`Category::probed_through`]).
    pub fn probed_as(&'static self) -> &'static EventDef {
        match self.category.probed_through() {
            category if category == self.category => self,
            category => EventDef::find(category.code(), self.event2).unwrap_or(self),
        }
    }

    /// The cookie of a probe for this event placed after `stack_offset` bytes were pushed (at
    /// most 255), in a library whose objects are laid out as `object_layout` says.
    pub const fn cookie(&self, object_layout: u8, stack_offset: u16) -> ProbeCookie {
        ProbeCookie {
            event1: self.category as u16,
            event2: self.event2,
            object_layout,
            stack_offset,
            flags: self.flags,
            function: FunctionSpan {
                before_probe: 0,
                bytes: 0,
            },
            slow_path: false,
            returns_result: false,
            object_register: ObjectRegister::Rdi,
            completion: None,
            return_address_saved: 0,
            object_offset: 0,
        }
    }

    /// The argument registers the programs read for this event, bit N-1 for argument N
    /// (rdi, rsi, rdx, rcx, r8): those of its fields and those its captures dereference.
    pub fn argument_registers(&self) -> u8 {
        let mut mask = 0u8;
        for field in self.first.iter().chain(&self.second) {
            if let Field::Arg(n) = field {
                mask |= 1 << (n - 1);
            }
        }
        let flags = self.flags;
        if flags.object_size() != ObjectSize::None {
            mask |= 1 << 0;
        }
        for field in self.first.iter().chain(&self.second) {
            if let Field::Stored64(n) | Field::Stored32(n) | Field::Pointee32(n) = field {
                mask |= 1 << (n - 1);
            }
        }
        if let Some(n) = flags.timespec_argument() {
            mask |= 1 << (n - 1);
        }
        mask
    }

    /// Whether, and for how long, the call can block: an acquisition's or a wait's; other
    /// calls do not wait for another thread.
    pub const fn blocking(&self) -> Blocking {
        match self.role {
            CallRole::Acquire(_, blocking) | CallRole::Wait(blocking) => blocking,
            _ => Blocking::Never,
        }
    }

    /// How the docs, `dump` and `--print` name `field` of this event's records: `arg1`,
    /// `rval`, `block?`, `owner`, `arg2.sec`, ...; `0` for an empty one.
    pub const fn field_name(&self, field: Field) -> FieldName {
        FieldName {
            field,
            timespec: match self.flags.timespec_argument() {
                Some(n) => n,
                None => 0,
            },
        }
    }

    /// The fields a1..a5 of the record that is this part of a call.
    pub const fn fields(&self, which: Which) -> &[Field; 5] {
        match which {
            Which::Return => &self.second,
            Which::Whole | Which::Entry => &self.first,
        }
    }

    /// The table row for a record's codes: an index, not a search, as it is looked up for
    /// every record.
    pub fn find(event1: u16, event2: u16) -> Option<&'static EventDef> {
        EVENTS.get(Self::row(event1, event2)?)
    }

    /// The index in `EVENTS` of the row for a record's codes.
    pub fn row(event1: u16, event2: u16) -> Option<usize> {
        let row = *INDEX.get(usize::from(event1))?.get(usize::from(event2))?;
        (usize::from(row) < EVENTS.len()).then_some(usize::from(row))
    }

    /// The event named `name` (`mutex_lock`, as [`EventDef::name`] spells it), as
    /// [`Category::from_name`] finds a category.
    pub fn by_name(name: &str) -> Option<&'static EventDef> {
        EVENTS.iter().find(|e| e.name == name)
    }
}

/// How `--contended` traces an event's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContendedProbe {
    /// Probes on the slow path where the call waits for the object (a lock that finds it
    /// held): the entry half there, the return half when the waiting function returns.
    Waits,
    /// A probe on the slow path where the call wakes a waiter (an unlock that finds waiters):
    /// its one record there.
    Wakes,
    /// Probes at entry and return, as in a full trace: the call blocks by its nature (a
    /// condition wait, a join, a barrier), or happens once per thread (create, exit).
    Whole,
    /// Not traced: the call neither blocks nor wakes, or its slow path is not probed yet
    /// (spin locks, timed locks).
    Untraced,
    /// Recorded from the kernel, not by probes: only the waits that blocked (futex waits).
    BlockedInKernel,
}

impl EventDef {
    /// Whether a full trace may write this event's uncontended calls where their fast path
    /// completes ([`Completion`]): the lock, try-lock, mutex unlock and semaphore wait and
    /// post calls, whose fast path is one atomic instruction and a branch. Not a rwlock's
    /// unlock, whose `waiters?` is read from words its atomic instruction changes
    /// ([`EventDef::completes_at_entry`]).
    pub fn completes_on_fast_path(&self) -> bool {
        match (self.category, self.role) {
            (Category::Mutex | Category::Rmutex, CallRole::Release)
            | (Category::Sema, CallRole::Signal) => true,
            (
                Category::Mutex | Category::Rmutex | Category::Rwlock,
                CallRole::Acquire(_, blocking),
            )
            | (Category::Sema, CallRole::Wait(blocking)) => blocking != Blocking::Timed,
            _ => false,
        }
    }

    /// Whether a full trace writes this call's one record whole at its entry where the
    /// library's code proves what it returns ([`Completion`] at the entry): a rwlock's unlock,
    /// whose record reads nothing at the return but the value returned, which glibc's is 0
    /// whatever the call does.
    pub fn completes_at_entry(&self) -> bool {
        self.category == Category::Rwlock && self.role == CallRole::Release
    }

    /// How `--contended` traces this event: the untimed lock and semaphore waits on their slow
    /// paths, their releases where they wake a waiter; whole, the calls that block by their
    /// nature and those made once per thread. Not spin locks, trylocks or timed calls.
    pub fn contended(&self) -> ContendedProbe {
        if !self.category.is_probed_in_library() {
            return ContendedProbe::BlockedInKernel;
        }
        let lock_or_semaphore = matches!(
            self.category,
            Category::Mutex | Category::Rmutex | Category::Rwlock | Category::Sema
        );
        match self.role {
            CallRole::Acquire(_, Blocking::Unbounded) | CallRole::Wait(Blocking::Unbounded)
                if lock_or_semaphore =>
            {
                ContendedProbe::Waits
            }
            CallRole::Release | CallRole::Signal if lock_or_semaphore => ContendedProbe::Wakes,
            CallRole::Wait(Blocking::Unbounded | Blocking::Timed)
                if matches!(self.category, Category::Thread | Category::Cond) =>
            {
                ContendedProbe::Whole
            }
            CallRole::Wait(_) if self.category == Category::Barrier => ContendedProbe::Whole,
            CallRole::Spawn | CallRole::Exit => ContendedProbe::Whole,
            _ => ContendedProbe::Untraced,
        }
    }
}

/// The event a record really is: a mutex call on a recursive mutex is an rmutex call, told by
/// the kind in the mutex words the record carries. Other records keep their codes.
pub fn classify(raw: &crate::RawRecord) -> (u16, u16) {
    if raw.event1 == Category::Mutex as u16 && is_recursive_mutex(&raw.object, raw.object_layout) {
        (Category::Rmutex as u16, raw.event2)
    } else {
        (raw.event1, raw.event2)
    }
}

const NONE: [Field; 5] = [Zero; 5];
const R: u16 = ProbeFlags::RETURN;
const PAIRED: u16 = ProbeFlags::RETURN | ProbeFlags::PAIRED;
const MUTEX: u16 = ProbeFlags::object(ObjectSize::Small);
const COND: u16 = ProbeFlags::object(ObjectSize::Large);
const SEM: u16 = ProbeFlags::object(ObjectSize::Small);
const RWLOCK: u16 = ProbeFlags::object(ObjectSize::Small);
const BARRIER: u16 = ProbeFlags::object(ObjectSize::Small);
const TIMESPEC2: u16 = ProbeFlags::timespec_arg(2);
const TIMESPEC3: u16 = ProbeFlags::timespec_arg(3);
const TIMESPEC4: u16 = ProbeFlags::timespec_arg(4);
const LOCKED: u16 = PAIRED | ProbeFlags::BLOCK;
/// Mutex locks copy the mutex at entry and after the call: its kind tells rmutex from mutex,
/// its `__count` after the call is `rm_depth`.
const MUTEX_LOCKED: u16 =
    LOCKED | MUTEX | ProbeFlags::OBJECT_AT_RETURN | ProbeFlags::ONLY_IF_RECURSIVE;
const READ_LOCKED: u16 = LOCKED | RWLOCK | ProbeFlags::OBJECT_AT_RETURN;

/// Every traced event. Linux calls with fewer arguments than UnixWare's keep `rval` in the
/// seed's field and leave the missing argument fields 0 (`docs/events.md`, "Fields a1..a5").
pub static EVENTS: &[EventDef] = TABLE;

/// The rows of `EVENTS`, as a constant so that `INDEX` can be built from them at compile time.
const TABLE: &[EventDef] = &[
    // thread (event1 = 1)
    EventDef {
        category: Category::Thread,
        event2: 1,
        name: "thr_create",
        symbol: "pthread_create",
        role: CallRole::Spawn,
        flags: ProbeFlags(PAIRED | ProbeFlags::POINTEES),
        first: [Arg(1), Arg(2), Arg(3), Arg(4), Zero],
        second: [Rval, Stored64(1), Zero, Zero, Zero],
    },
    // pthread_exit never returns: its entry is its record.
    EventDef {
        category: Category::Thread,
        event2: 2,
        name: "thr_exit",
        symbol: "pthread_exit",
        role: CallRole::Exit,
        flags: ProbeFlags(0),
        first: [Arg(1), Zero, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 3,
        name: "thr_join",
        symbol: "pthread_join",
        role: CallRole::Wait(Blocking::Unbounded),
        flags: ProbeFlags(PAIRED | ProbeFlags::POINTEES),
        first: [Arg(1), Zero, Zero, Zero, Zero],
        second: [Arg(1), Stored64(2), Rval, Zero, Zero],
    },
    EventDef {
        category: Category::Thread,
        event2: 4,
        name: "thr_self",
        symbol: "pthread_self",
        role: CallRole::Other,
        flags: ProbeFlags(0),
        first: [Zero, Zero, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 8,
        name: "thr_setconcurrency",
        symbol: "pthread_setconcurrency",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 9,
        name: "thr_getconcurrency",
        symbol: "pthread_getconcurrency",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Rval, Zero, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 10,
        name: "thr_kill",
        symbol: "pthread_kill",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Arg(2), Rval, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 11,
        name: "thr_sigsetmask",
        symbol: "pthread_sigmask",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Arg(2), Arg(3), Rval, Zero],
        second: NONE,
    },
    // a2 = policy, a3 = sched_priority (the first int of struct sched_param).
    EventDef {
        category: Category::Thread,
        event2: 12,
        name: "thr_setscheduler",
        symbol: "pthread_setschedparam",
        role: CallRole::Other,
        flags: ProbeFlags(R | ProbeFlags::POINTEES),
        first: [Arg(1), Arg(2), Pointee32(3), Rval, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 13,
        name: "thr_getscheduler",
        symbol: "pthread_getschedparam",
        role: CallRole::Other,
        flags: ProbeFlags(R | ProbeFlags::POINTEES),
        first: [Arg(1), Stored32(2), Stored32(3), Rval, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 14,
        name: "thr_setprio",
        symbol: "pthread_setschedprio",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Arg(2), Rval, Zero, Zero],
        second: NONE,
    },
    // pthread_yield calls sched_yield: one probe records both.
    EventDef {
        category: Category::Thread,
        event2: 16,
        name: "thr_yield",
        symbol: "sched_yield",
        role: CallRole::Other,
        flags: ProbeFlags(0),
        first: [Zero, Zero, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 17,
        name: "thr_get_rr_interval",
        symbol: "sched_rr_get_interval",
        role: CallRole::Other,
        flags: ProbeFlags(0),
        first: [Zero, Zero, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 18,
        name: "thr_keycreate",
        symbol: "pthread_key_create",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Arg(2), Rval, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 19,
        name: "thr_keydelete",
        symbol: "pthread_key_delete",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 20,
        name: "thr_setspecific",
        symbol: "pthread_setspecific",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Arg(2), Rval, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 21,
        name: "thr_getspecific",
        symbol: "pthread_getspecific",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Rval64, Zero, Zero, Zero],
        second: NONE,
    },
    // Linux-only joins, laid out like thr_join (plus the deadline and clock), detach, cancel.
    EventDef {
        category: Category::Thread,
        event2: 32,
        name: "pthread_tryjoin_np",
        symbol: "pthread_tryjoin_np",
        role: CallRole::Wait(Blocking::Never),
        flags: ProbeFlags(PAIRED | ProbeFlags::POINTEES),
        first: [Arg(1), Zero, Zero, Zero, Zero],
        second: [Arg(1), Stored64(2), Rval, Zero, Zero],
    },
    EventDef {
        category: Category::Thread,
        event2: 33,
        name: "pthread_timedjoin_np",
        symbol: "pthread_timedjoin_np",
        role: CallRole::Wait(Blocking::Timed),
        flags: ProbeFlags(PAIRED | ProbeFlags::POINTEES | TIMESPEC3),
        first: [Arg(1), TimespecSec, TimespecNsec, Zero, Zero],
        second: [Arg(1), Stored64(2), Rval, Zero, Zero],
    },
    EventDef {
        category: Category::Thread,
        event2: 34,
        name: "pthread_clockjoin_np",
        symbol: "pthread_clockjoin_np",
        role: CallRole::Wait(Blocking::Timed),
        flags: ProbeFlags(PAIRED | ProbeFlags::POINTEES | TIMESPEC4),
        first: [Arg(1), TimespecSec, TimespecNsec, Arg(3), Zero],
        second: [Arg(1), Stored64(2), Rval, Zero, Zero],
    },
    EventDef {
        category: Category::Thread,
        event2: 35,
        name: "pthread_detach",
        symbol: "pthread_detach",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Thread,
        event2: 36,
        name: "pthread_cancel",
        symbol: "pthread_cancel",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    // mutex (event1 = 2)
    EventDef {
        category: Category::Mutex,
        event2: 1,
        name: "mutex_init",
        symbol: "pthread_mutex_init",
        role: CallRole::Other,
        flags: ProbeFlags(R | MUTEX | ProbeFlags::OBJECT_AT_RETURN),
        first: [Arg(1), Arg(2), Zero, Rval, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Mutex,
        event2: 2,
        name: "mutex_lock",
        symbol: "pthread_mutex_lock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Unbounded),
        flags: ProbeFlags(MUTEX_LOCKED),
        first: [Arg(1), MutexOwner, Zero, Zero, Zero],
        second: [Rval, Block, Zero, Zero, Zero],
    },
    EventDef {
        category: Category::Mutex,
        event2: 3,
        name: "mutex_trylock",
        symbol: "pthread_mutex_trylock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Never),
        flags: ProbeFlags(R | MUTEX),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Mutex,
        event2: 4,
        name: "mutex_unlock",
        symbol: "pthread_mutex_unlock",
        role: CallRole::Release,
        flags: ProbeFlags(R | MUTEX),
        first: [Arg(1), Rval, MutexWaiters, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Mutex,
        event2: 5,
        name: "mutex_destroy",
        symbol: "pthread_mutex_destroy",
        role: CallRole::Other,
        flags: ProbeFlags(R | MUTEX),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    // Linux-only mutex locks with a deadline: laid out like mutex_lock plus the deadline.
    EventDef {
        category: Category::Mutex,
        event2: 32,
        name: "pthread_mutex_timedlock",
        symbol: "pthread_mutex_timedlock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Timed),
        flags: ProbeFlags(MUTEX_LOCKED | TIMESPEC2),
        first: [Arg(1), TimespecSec, TimespecNsec, Zero, Zero],
        second: [Rval, Block, Zero, Zero, Zero],
    },
    EventDef {
        category: Category::Mutex,
        event2: 33,
        name: "pthread_mutex_clocklock",
        symbol: "pthread_mutex_clocklock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Timed),
        flags: ProbeFlags(MUTEX_LOCKED | TIMESPEC3),
        first: [Arg(1), TimespecSec, TimespecNsec, Arg(2), Zero],
        second: [Rval, Block, Zero, Zero, Zero],
    },
    // cond (event1 = 3)
    EventDef {
        category: Category::Cond,
        event2: 1,
        name: "cond_init",
        symbol: "pthread_cond_init",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Arg(2), Zero, Rval, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Cond,
        event2: 2,
        name: "cond_signal",
        symbol: "pthread_cond_signal",
        role: CallRole::Signal,
        flags: ProbeFlags(R | COND),
        first: [Arg(1), Rval, CondWaiters, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Cond,
        event2: 3,
        name: "cond_broadcast",
        symbol: "pthread_cond_broadcast",
        role: CallRole::Signal,
        flags: ProbeFlags(R | COND),
        first: [Arg(1), Rval, CondWaiters, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Cond,
        event2: 4,
        name: "cond_wait",
        symbol: "pthread_cond_wait",
        role: CallRole::Wait(Blocking::Unbounded),
        flags: ProbeFlags(PAIRED),
        first: [Arg(1), Arg(2), Zero, Zero, Zero],
        second: [Rval, Zero, Zero, Zero, Zero],
    },
    EventDef {
        category: Category::Cond,
        event2: 5,
        name: "cond_timedwait",
        symbol: "pthread_cond_timedwait",
        role: CallRole::Wait(Blocking::Timed),
        flags: ProbeFlags(PAIRED | ProbeFlags::timespec_arg(3)),
        first: [Arg(1), Arg(2), TimespecSec, TimespecNsec, Zero],
        second: [Rval, Zero, Zero, Zero, Zero],
    },
    EventDef {
        category: Category::Cond,
        event2: 6,
        name: "cond_destroy",
        symbol: "pthread_cond_destroy",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    // Linux-only: cond_timedwait with a choice of clock (a5).
    EventDef {
        category: Category::Cond,
        event2: 32,
        name: "pthread_cond_clockwait",
        symbol: "pthread_cond_clockwait",
        role: CallRole::Wait(Blocking::Timed),
        flags: ProbeFlags(PAIRED | TIMESPEC4),
        first: [Arg(1), Arg(2), TimespecSec, TimespecNsec, Arg(3)],
        second: [Rval, Zero, Zero, Zero, Zero],
    },
    // sema (event1 = 4): glibc's sem_t; sem_init(sem, pshared, value) puts value in a2.
    EventDef {
        category: Category::Sema,
        event2: 1,
        name: "sema_init",
        symbol: "sem_init",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Arg(3), Arg(2), Zero, Rval],
        second: NONE,
    },
    EventDef {
        category: Category::Sema,
        event2: 2,
        name: "sema_wait",
        symbol: "sem_wait",
        role: CallRole::Wait(Blocking::Unbounded),
        flags: ProbeFlags(PAIRED | SEM | ProbeFlags::ERRNO),
        first: [Arg(1), SemCount, Zero, Zero, Zero],
        second: [Rval, Errno, Zero, Zero, Zero],
    },
    EventDef {
        category: Category::Sema,
        event2: 3,
        name: "sema_trywait",
        symbol: "sem_trywait",
        role: CallRole::Wait(Blocking::Never),
        flags: ProbeFlags(R | ProbeFlags::ERRNO),
        first: [Arg(1), Rval, Errno, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Sema,
        event2: 4,
        name: "sema_post",
        symbol: "sem_post",
        role: CallRole::Signal,
        flags: ProbeFlags(R | SEM | ProbeFlags::OBJECT_AT_RETURN | ProbeFlags::ERRNO),
        first: [Arg(1), Rval, SemCount, Errno, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Sema,
        event2: 5,
        name: "sema_destroy",
        symbol: "sem_destroy",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    // Linux-only timed waits: laid out like sema_wait, plus the deadline (and the clock).
    EventDef {
        category: Category::Sema,
        event2: 32,
        name: "sem_timedwait",
        symbol: "sem_timedwait",
        role: CallRole::Wait(Blocking::Timed),
        flags: ProbeFlags(PAIRED | SEM | ProbeFlags::ERRNO | ProbeFlags::timespec_arg(2)),
        first: [Arg(1), SemCount, TimespecSec, TimespecNsec, Zero],
        second: [Rval, Errno, Zero, Zero, Zero],
    },
    EventDef {
        category: Category::Sema,
        event2: 33,
        name: "sem_clockwait",
        symbol: "sem_clockwait",
        role: CallRole::Wait(Blocking::Timed),
        flags: ProbeFlags(PAIRED | SEM | ProbeFlags::ERRNO | ProbeFlags::timespec_arg(3)),
        first: [Arg(1), SemCount, TimespecSec, TimespecNsec, Arg(2)],
        second: [Rval, Errno, Zero, Zero, Zero],
    },
    // rwlock (event1 = 5)
    EventDef {
        category: Category::Rwlock,
        event2: 1,
        name: "rwlock_init",
        symbol: "pthread_rwlock_init",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Arg(2), Zero, Rval, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Rwlock,
        event2: 2,
        name: "rw_rdlock",
        symbol: "pthread_rwlock_rdlock",
        role: CallRole::Acquire(Access::Shared, Blocking::Unbounded),
        flags: ProbeFlags(READ_LOCKED),
        first: [Arg(1), Zero, Zero, Zero, Zero],
        second: [Rval, Block, RwReaders, Zero, Zero],
    },
    EventDef {
        category: Category::Rwlock,
        event2: 3,
        name: "rw_wrlock",
        symbol: "pthread_rwlock_wrlock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Unbounded),
        flags: ProbeFlags(LOCKED),
        first: [Arg(1), Zero, Zero, Zero, Zero],
        second: [Rval, Block, Zero, Zero, Zero],
    },
    EventDef {
        category: Category::Rwlock,
        event2: 4,
        name: "rw_unlock",
        symbol: "pthread_rwlock_unlock",
        role: CallRole::Release,
        flags: ProbeFlags(R | RWLOCK),
        first: [Arg(1), Rval, RwWaiters, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Rwlock,
        event2: 5,
        name: "rw_tryrdlock",
        symbol: "pthread_rwlock_tryrdlock",
        role: CallRole::Acquire(Access::Shared, Blocking::Never),
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Rwlock,
        event2: 6,
        name: "rw_trywrlock",
        symbol: "pthread_rwlock_trywrlock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Never),
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Rwlock,
        event2: 7,
        name: "rwlock_destroy",
        symbol: "pthread_rwlock_destroy",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    // Linux-only: the locks with a deadline (and a clock, in a4), laid out like the lock.
    EventDef {
        category: Category::Rwlock,
        event2: 32,
        name: "pthread_rwlock_timedrdlock",
        symbol: "pthread_rwlock_timedrdlock",
        role: CallRole::Acquire(Access::Shared, Blocking::Timed),
        flags: ProbeFlags(READ_LOCKED | TIMESPEC2),
        first: [Arg(1), TimespecSec, TimespecNsec, Zero, Zero],
        second: [Rval, Block, RwReaders, Zero, Zero],
    },
    EventDef {
        category: Category::Rwlock,
        event2: 33,
        name: "pthread_rwlock_timedwrlock",
        symbol: "pthread_rwlock_timedwrlock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Timed),
        flags: ProbeFlags(LOCKED | TIMESPEC2),
        first: [Arg(1), TimespecSec, TimespecNsec, Zero, Zero],
        second: [Rval, Block, Zero, Zero, Zero],
    },
    EventDef {
        category: Category::Rwlock,
        event2: 34,
        name: "pthread_rwlock_clockrdlock",
        symbol: "pthread_rwlock_clockrdlock",
        role: CallRole::Acquire(Access::Shared, Blocking::Timed),
        flags: ProbeFlags(READ_LOCKED | TIMESPEC3),
        first: [Arg(1), TimespecSec, TimespecNsec, Arg(2), Zero],
        second: [Rval, Block, RwReaders, Zero, Zero],
    },
    EventDef {
        category: Category::Rwlock,
        event2: 35,
        name: "pthread_rwlock_clockwrlock",
        symbol: "pthread_rwlock_clockwrlock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Timed),
        flags: ProbeFlags(LOCKED | TIMESPEC3),
        first: [Arg(1), TimespecSec, TimespecNsec, Arg(2), Zero],
        second: [Rval, Block, Zero, Zero, Zero],
    },
    // rmutex (event1 = 6): the pthread_mutex_* calls above on a PTHREAD_MUTEX_RECURSIVE mutex,
    // recorded by the mutex probes and classified as each record is written ([`classify`]).
    EventDef {
        category: Category::Rmutex,
        event2: 1,
        name: "rmutex_init",
        symbol: "pthread_mutex_init",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Arg(2), Zero, Rval, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Rmutex,
        event2: 2,
        name: "rmutex_lock",
        symbol: "pthread_mutex_lock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Unbounded),
        flags: ProbeFlags(PAIRED),
        first: [Arg(1), MutexOwner, Zero, Zero, Zero],
        second: [Rval, Block, RecursionDepth, Zero, Zero],
    },
    EventDef {
        category: Category::Rmutex,
        event2: 3,
        name: "rmutex_trylock",
        symbol: "pthread_mutex_trylock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Never),
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Rmutex,
        event2: 4,
        name: "rmutex_unlock",
        symbol: "pthread_mutex_unlock",
        role: CallRole::Release,
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, MutexWaiters, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Rmutex,
        event2: 5,
        name: "rmutex_destroy",
        symbol: "pthread_mutex_destroy",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Rmutex,
        event2: 32,
        name: "rmutex_timedlock",
        symbol: "pthread_mutex_timedlock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Timed),
        flags: ProbeFlags(PAIRED),
        first: [Arg(1), TimespecSec, TimespecNsec, Zero, Zero],
        second: [Rval, Block, RecursionDepth, Zero, Zero],
    },
    EventDef {
        category: Category::Rmutex,
        event2: 33,
        name: "rmutex_clocklock",
        symbol: "pthread_mutex_clocklock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Timed),
        flags: ProbeFlags(PAIRED),
        first: [Arg(1), TimespecSec, TimespecNsec, Arg(2), Zero],
        second: [Rval, Block, RecursionDepth, Zero, Zero],
    },
    // barrier (event1 = 7): pthread_barrier_init(barrier, attr, count) puts count in a2.
    EventDef {
        category: Category::Barrier,
        event2: 1,
        name: "barrier_init",
        symbol: "pthread_barrier_init",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Arg(3), Arg(2), Zero, Rval],
        second: NONE,
    },
    EventDef {
        category: Category::Barrier,
        event2: 2,
        name: "barrier_wait",
        symbol: "pthread_barrier_wait",
        role: CallRole::Wait(Blocking::Unbounded),
        flags: ProbeFlags(PAIRED | BARRIER),
        first: [Arg(1), BarrierWaiting, Zero, Zero, Zero],
        second: [Rval, Zero, Zero, Zero, Zero],
    },
    EventDef {
        category: Category::Barrier,
        event2: 3,
        name: "barrier_destroy",
        symbol: "pthread_barrier_destroy",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    // spin (event1 = 9): the seed's _spin_lock return half has block? in a1 and no rval;
    // _spin_unlock has only its argument.
    // glibc makes pthread_spin_init an alias of pthread_spin_unlock: one code, one probe, and
    // the first event listed wins. _spin_unlock comes first, so the lock's story stays whole.
    EventDef {
        category: Category::Spin,
        event2: 4,
        name: "_spin_unlock",
        symbol: "pthread_spin_unlock",
        role: CallRole::Release,
        flags: ProbeFlags(0),
        first: [Arg(1), Zero, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Spin,
        event2: 1,
        name: "_spin_init",
        symbol: "pthread_spin_init",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Arg(2), Rval, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Spin,
        event2: 2,
        name: "_spin_lock",
        symbol: "pthread_spin_lock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Unbounded),
        flags: ProbeFlags(PAIRED | ProbeFlags::SPINS),
        first: [Arg(1), Zero, Zero, Zero, Zero],
        second: [Block, Zero, Zero, Zero, Zero],
    },
    EventDef {
        category: Category::Spin,
        event2: 3,
        name: "_spin_trylock",
        symbol: "pthread_spin_trylock",
        role: CallRole::Acquire(Access::Exclusive, Blocking::Never),
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    EventDef {
        category: Category::Spin,
        event2: 5,
        name: "_spin_destroy",
        symbol: "pthread_spin_destroy",
        role: CallRole::Other,
        flags: ProbeFlags(R),
        first: [Arg(1), Rval, Zero, Zero, Zero],
        second: NONE,
    },
    // futex (event1 = 10): one record at the end of each call, stamped there, so that it is
    // in time order with the records written meanwhile; it says how long the call took, so
    // that when it began is known (a wake is paired with the waits it ended by that).
    EventDef {
        category: Category::Futex,
        event2: futex::WAIT_EVENT2,
        name: "futex_wait",
        symbol: "futex",
        role: CallRole::Wait(Blocking::Unbounded),
        flags: ProbeFlags(0),
        first: [Arg(1), Arg(2), ElapsedNs, Rval, TimeoutNs],
        second: NONE,
    },
    EventDef {
        category: Category::Futex,
        event2: futex::WAKE_EVENT2,
        name: "futex_wake",
        symbol: "futex",
        role: CallRole::Signal,
        flags: ProbeFlags(0),
        first: [Arg(1), Arg(2), Rval, Arg(3), ElapsedNs],
        second: NONE,
    },
    // The word of a futex_waitv(2) call is its first; a2 is how many words it waited on.
    EventDef {
        category: Category::Futex,
        event2: futex::WAITV_EVENT2,
        name: "futex_waitv",
        symbol: "futex_waitv",
        role: CallRole::Wait(Blocking::Unbounded),
        flags: ProbeFlags(0),
        first: [Arg(1), Arg(2), ElapsedNs, Rval, TimeoutNs],
        second: NONE,
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object_layout::{GLIBC, LAYOUT_MUSL};

    fn named(name: &str) -> &'static EventDef {
        EventDef::by_name(name).unwrap()
    }

    #[test]
    fn a_call_is_timed_exactly_where_its_record_carries_a_deadline() {
        for event in EVENTS {
            let deadline = event.flags.timespec_argument().is_some()
                || event.first.contains(&Field::TimespecSec);
            assert_eq!(
                event.blocking() == Blocking::Timed,
                deadline,
                "{}",
                event.name
            );
        }
    }

    #[test]
    fn only_locks_are_acquired_and_released_and_only_threads_spawned() {
        for event in EVENTS {
            let lock = matches!(
                event.category,
                Category::Mutex | Category::Rmutex | Category::Rwlock | Category::Spin
            );
            match event.role {
                CallRole::Acquire(..) | CallRole::Release => assert!(lock, "{}", event.name),
                CallRole::Spawn | CallRole::Exit => {
                    assert_eq!(event.category, Category::Thread, "{}", event.name);
                }
                CallRole::Wait(_) | CallRole::Signal => assert!(!lock, "{}", event.name),
                CallRole::Other => {}
            }
        }
        // A rwlock's creation is not an acquisition, for all its name holds "lock".
        assert_eq!(named("rwlock_init").role, CallRole::Other);
        assert_eq!(
            named("rw_tryrdlock").role,
            CallRole::Acquire(Access::Shared, Blocking::Never)
        );
        assert_eq!(
            named("rmutex_clocklock").role,
            CallRole::Acquire(Access::Exclusive, Blocking::Timed)
        );
    }

    #[test]
    fn contended_traces_untimed_lock_waits_their_wakes_and_blocking_calls_whole() {
        let probe = |name: &str| named(name).contended();
        for name in [
            "mutex_lock",
            "rmutex_lock",
            "rw_rdlock",
            "rw_wrlock",
            "sema_wait",
        ] {
            assert_eq!(probe(name), ContendedProbe::Waits, "{name}");
        }
        for name in ["mutex_unlock", "rmutex_unlock", "rw_unlock", "sema_post"] {
            assert_eq!(probe(name), ContendedProbe::Wakes, "{name}");
        }
        for name in [
            "thr_create",
            "thr_exit",
            "thr_join",
            "pthread_timedjoin_np",
            "pthread_clockjoin_np",
            "cond_wait",
            "cond_timedwait",
            "pthread_cond_clockwait",
            "barrier_wait",
        ] {
            assert_eq!(probe(name), ContendedProbe::Whole, "{name}");
        }
        for name in ["futex_wait", "futex_wake", "futex_waitv"] {
            assert_eq!(probe(name), ContendedProbe::BlockedInKernel, "{name}");
        }
        let traced = [
            ContendedProbe::Waits,
            ContendedProbe::Wakes,
            ContendedProbe::Whole,
            ContendedProbe::BlockedInKernel,
        ];
        let others = EVENTS.iter().filter(|e| traced.contains(&e.contended()));
        assert_eq!(
            others.count(),
            21,
            "no other event is traced under --contended"
        );
    }

    #[test]
    fn find_gives_each_row_by_its_codes_and_nothing_for_unknown_codes() {
        for event in EVENTS {
            let found = EventDef::find(event.category.code(), event.event2);
            assert!(
                found.is_some_and(|f| core::ptr::eq(f, event)),
                "{}",
                event.name
            );
        }
        assert!(EventDef::find(0, 0).is_none());
        assert!(EventDef::find(u16::MAX, 1).is_none());
        assert!(EventDef::find(1, u16::MAX).is_none());
    }

    #[test]
    fn only_a_recursive_mutex_is_copied_again_after_a_lock() {
        let flags = |name: &str| named(name).flags;
        for lock in ["mutex_lock", "pthread_mutex_timedlock"] {
            assert!(flags(lock).has(ProbeFlags::OBJECT_AT_RETURN), "{lock}");
            assert!(flags(lock).has(ProbeFlags::ONLY_IF_RECURSIVE), "{lock}");
        }
        // An init sets the kind: always read again.
        assert!(flags("mutex_init").has(ProbeFlags::OBJECT_AT_RETURN));
        assert!(!flags("mutex_init").has(ProbeFlags::ONLY_IF_RECURSIVE));
    }

    #[test]
    fn every_probe_has_a_recording_bit() {
        for event in EVENTS {
            assert!(
                u32::from(event.category.code()) < RECORDING_SLOTS,
                "{}",
                event.name
            );
            assert!(event.event2 < 64, "{}", event.name);
        }
        // The mutex probes record rmutex calls; the masks tell the two apart.
        let masks = recording_masks(Category::Rmutex.events());
        let rmutex = usize::from(Category::Rmutex.code());
        assert_ne!(masks[rmutex], 0);
        assert_eq!(masks.iter().filter(|&&m| m != 0).count(), 1);
        for event in Category::Rmutex.events() {
            assert_eq!(event.probed_as().event2, event.event2, "{}", event.name);
        }
    }

    /// A completion of each kind, with each outcome: 6 conditions, 7 outcomes, 3 of what rax
    /// holds, and the lock word in rax with no copy, with each type register and none.
    fn completions() -> [Completion; 462] {
        let mut all = [None; 462];
        let mut made = 0;
        for condition in [
            Condition::Always,
            Condition::Zero,
            Condition::Sign,
            Condition::Never,
            Condition::LessOrEqual,
            Condition::BelowOrEqual,
        ] {
            for outcome in [
                Outcome::Returns(0),
                Outcome::Returns(127),
                Outcome::Fails(11),
                Outcome::Fails(Outcome::MAX_ERRNO),
                Outcome::ReturnsRegister(ObjectRegister::Rax),
                Outcome::ReturnsRegister(ObjectRegister::Rsi),
                Outcome::ReturnsRegister(ObjectRegister::Rdi),
            ] {
                let type_registers = Completion::TYPE_REGISTERS.map(TypeRegister::of);
                let from_rax = [TypeRegister::NONE]
                    .iter()
                    .chain(&type_registers)
                    .map(|&r| (true, r));
                for (found_in_rax, (object_from_rax, type_register)) in [
                    FoundInRax::Nothing,
                    FoundInRax::Word,
                    FoundInRax::DoubleWord,
                ]
                .map(|found| (found, (false, TypeRegister::NONE)))
                .into_iter()
                .chain(from_rax.map(|from_rax| (FoundInRax::Word, from_rax)))
                {
                    let bits = made;
                    all[made] = Some(Completion {
                        condition,
                        when_set: bits & 1 != 0,
                        outcome: outcome.pack(),
                        may_be_open: bits & 2 != 0,
                        opens_otherwise: bits & 4 != 0,
                        found_in_rax,
                        stores_after: bits & 8 != 0,
                        object_from_rax,
                        type_register,
                    });
                    made += 1;
                }
            }
        }
        all.map(Option::unwrap)
    }

    #[test]
    fn a_type_register_unpacks_to_the_register_it_was_made_of() {
        for register in Completion::TYPE_REGISTERS {
            assert_eq!(TypeRegister::of(register).unpack(), Some(register));
        }
        assert_eq!(TypeRegister::of(ObjectRegister::Rax).unpack(), None);
        assert_eq!(TypeRegister::NONE.unpack(), None);
    }

    /// Whether `completion` holds with `eflags`, as the fast-path program asks it.
    fn holds(completion: Completion, eflags: u64) -> bool {
        let mut cookie = named("mutex_lock").cookie(0, 0);
        cookie.completion = Some(completion);
        Completion::holds_in(cookie.encode(), eflags)
    }

    #[test]
    fn a_completion_holds_by_its_flag() {
        let zero_flag = 1 << 6;
        let mut completion = completions()[0];
        completion.condition = Condition::Zero;
        completion.when_set = true;
        assert!(holds(completion, zero_flag | 0x202));
        assert!(!holds(completion, 0x202));
        completion.condition = Condition::Sign;
        completion.when_set = false;
        assert!(holds(completion, zero_flag));
        assert!(!holds(completion, 1 << 7));
        completion.condition = Condition::Never;
        assert!(!holds(completion, 0));
        // `jle` after `cmp $1, %eax`: taken for 0 and 1 (zero set, or sign unlike overflow
        // after 0 - 1), not for 2.
        let (carry_flag, sign_flag, overflow_flag) = (1, 1 << 7, 1 << 11);
        completion.condition = Condition::LessOrEqual;
        completion.when_set = true;
        assert!(holds(completion, zero_flag));
        assert!(holds(completion, sign_flag | carry_flag));
        assert!(!holds(completion, sign_flag | overflow_flag));
        assert!(!holds(completion, 0));
        completion.condition = Condition::BelowOrEqual;
        completion.when_set = false;
        assert!(holds(completion, sign_flag | overflow_flag));
        assert!(!holds(completion, carry_flag));
        assert!(!holds(completion, zero_flag));
    }

    /// Read from its bits with no branch, every completion holds as its condition reads, with
    /// every value of the four flags the conditions test.
    #[test]
    fn a_completion_holds_as_its_condition_reads() {
        for completion in completions() {
            for flags in 0..16u64 {
                let (carry, zero, sign, overflow) = (
                    flags & 1 != 0,
                    flags & 2 != 0,
                    flags & 4 != 0,
                    flags & 8 != 0,
                );
                let eflags = u64::from(carry)
                    | u64::from(zero) << 6
                    | u64::from(sign) << 7
                    | u64::from(overflow) << 11
                    | 0x202;
                let expected = match completion.condition {
                    Condition::Always => true,
                    Condition::Never => false,
                    Condition::Zero => zero == completion.when_set,
                    Condition::Sign => sign == completion.when_set,
                    Condition::LessOrEqual => (zero || sign != overflow) == completion.when_set,
                    Condition::BelowOrEqual => (zero || carry) == completion.when_set,
                };
                assert_eq!(
                    holds(completion, eflags),
                    expected,
                    "{completion:?} {flags:#x}"
                );
            }
        }
    }

    #[test]
    fn cookie_round_trips() {
        for event in EVENTS {
            for (object_layout, stack_offset) in [(0, 0), (1, 8), (LAYOUT_MUSL, 0xff)] {
                let mut cookie = event.cookie(object_layout, stack_offset);
                assert_eq!(ProbeCookie::decode(cookie.encode()), cookie);
                cookie.flags.0 |= ProbeFlags::CALLED_INSIDE | ProbeFlags::SHARED;
                cookie.function = FunctionSpan {
                    before_probe: 0xff,
                    bytes: 0xffff,
                };
                assert_eq!(ProbeCookie::decode(cookie.encode()), cookie);
                cookie.slow_path = true;
                cookie.function = FunctionSpan {
                    before_probe: 0,
                    bytes: ProbeCookie::MAX_SLOW_PATH_SPAN,
                };
                assert_eq!(ProbeCookie::decode(cookie.encode()), cookie);
                for offset in (0..=ProbeCookie::MAX_OBJECT_OFFSET).step_by(4) {
                    cookie.object_offset = offset;
                    assert_eq!(ProbeCookie::decode(cookie.encode()), cookie);
                }
                cookie.object_offset = 0;
                for register in ObjectRegister::ALL {
                    cookie.object_register = register;
                    assert_eq!(ProbeCookie::decode(cookie.encode()), cookie);
                }
                for slots in 0..=ProbeCookie::MAX_RETURN_ADDRESS_SLOTS as u8 {
                    cookie.return_address_saved = slots;
                    assert_eq!(ProbeCookie::decode(cookie.encode()), cookie);
                }
                cookie.return_address_saved = 0;
                cookie.returns_result = true;
                assert_eq!(ProbeCookie::decode(cookie.encode()), cookie);
                cookie.slow_path = false;
                cookie.returns_result = false;
                cookie.function = FunctionSpan::default();
                for completion in completions() {
                    cookie.completion = Some(completion);
                    assert_eq!(ProbeCookie::decode(cookie.encode()), cookie);
                }
            }
        }
    }

    #[test]
    fn argument_registers_come_from_fields_and_captures() {
        assert_eq!(named("mutex_lock").argument_registers(), 0b1);
        assert_eq!(named("mutex_init").argument_registers(), 0b11);
        assert_eq!(named("cond_timedwait").argument_registers(), 0b111);
        assert_eq!(named("sem_timedwait").argument_registers(), 0b11);
        assert_eq!(named("sem_clockwait").argument_registers(), 0b111);
        assert_eq!(named("sema_post").argument_registers(), 0b1);
    }

    #[test]
    fn codes_are_unique_and_categories_named() {
        for (i, a) in EVENTS.iter().enumerate() {
            for b in &EVENTS[i + 1..] {
                assert!(
                    (a.category, a.event2) != (b.category, b.event2),
                    "{} and {} share codes",
                    a.name,
                    b.name
                );
            }
            assert_eq!(Category::from_name(a.category.name()), Some(a.category));
            let named = EventDef::by_name(a.name);
            assert!(named.is_some_and(|e| core::ptr::eq(e, a)), "{}", a.name);
        }
    }

    #[test]
    fn every_mutex_event_has_an_rmutex_twin_for_the_same_function() {
        for mutex in Category::Mutex.events() {
            let twin = EventDef::find(Category::Rmutex as u16, mutex.event2).expect(mutex.name);
            assert_eq!(twin.symbol, mutex.symbol);
        }
        let mut raw = crate::RawRecord {
            event1: 2,
            event2: 2,
            ..Default::default()
        };
        assert_eq!(classify(&raw), (2, 2));
        raw.object[GLIBC.mutex_kind.word] = 1 | 16; // robust recursive
        assert_eq!(classify(&raw), (6, 2));
        raw.event1 = 3;
        raw.event2 = 4;
        assert_eq!(classify(&raw), (3, 4), "only mutex records are classified");
    }

    #[test]
    fn the_timespec_argument_round_trips_through_the_flags() {
        for n in 2..=4 {
            assert_eq!(
                ProbeFlags(ProbeFlags::timespec_arg(n)).timespec_argument(),
                Some(n)
            );
        }
        assert_eq!(ProbeFlags(ProbeFlags::RETURN).timespec_argument(), None);
    }

    #[test]
    fn only_paired_events_have_second_fields() {
        for event in EVENTS {
            let paired = event.flags.has(ProbeFlags::PAIRED);
            assert_eq!(paired, event.second != NONE, "{}", event.name);
        }
    }

    #[test]
    fn seed_fields() {
        let lock = EventDef::find(2, 2).unwrap();
        assert_eq!(lock.fields(Which::Entry)[0], Arg(1));
        assert_eq!(lock.fields(Which::Return)[..2], [Rval, Block]);
        let unlock = EventDef::find(2, 4).unwrap();
        assert_eq!(
            unlock.fields(Which::Whole)[..3],
            [Arg(1), Rval, MutexWaiters]
        );
        let timedwait = EventDef::find(3, 5).unwrap();
        assert_eq!(
            timedwait.fields(Which::Entry)[2..4],
            [TimespecSec, TimespecNsec]
        );
    }
}
