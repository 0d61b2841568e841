//! How a record crosses to userspace. Loads the BPF object, gives each CPU its own BPF ring
//! buffer (an `ARRAY_OF_MAPS` slot per CPU, so producers on different CPUs never share a lock),
//! drains them, and reads the per-CPU count of records the kernel could not deliver.

use std::{
    collections::BTreeMap,
    io,
    os::fd::{AsFd, OwnedFd},
};

use aya::maps::{Array, ArrayOfMaps, HashMap, MapData, MapError, PerCpuArray};
use aya_obj::generated::{
    bpf_map_type::BPF_MAP_TYPE_RINGBUF, bpf_prog_type::BPF_PROG_TYPE_RAW_TRACEPOINT,
};
use tracer_common::{
    LOST_TOTAL, MAX_CGROUPS, MAX_CPUS, OWN_TARGET_SLOTS, OWN_TARGETS_SPILLED, OwnTargets,
    ProcessLibrary, ProgramConfig, RawRecord, RecordingMasks, SelectedCgroup, TracedThrough,
    call_site_key, names,
    record::{RecordPart, StackInEntry, UserStack},
};

use super::{
    CaptureError,
    futex_hook::{self, FutexHook, FutexHookError, Hooked},
    kernel::{KernelBtf, code_address_mask},
    loader::{self, Loaded},
    lossless::{Stopped, StoppedView},
    programs::{ProgramNames, Programs, UprobeMechanism, joined},
    ring::Ring,
    stack_tops::StackTops,
};
use crate::sys;

/// Most `-p` targets and launched commands (without `--follow`, which follows many more).
const PROCESS_TARGETS: u32 = 1024;

/// Default size of each CPU's ring buffer.
pub const DEFAULT_RING_BYTES: u32 = 4 << 20;

pub(crate) static BPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-ebpf"));

/// What one drain pass read.
#[derive(Clone, Copy, Debug, Default)]
pub struct Drained {
    /// Records whose bytes could not be read as a record (counted as lost).
    pub malformed: u64,
    /// Set when a ring was left with records in it: the earliest timestamp after which such a
    /// ring may still hold records stamped earlier than ones already read from other rings.
    pub behind_after: Option<u64>,
    /// Set when a ring's reader stopped at a record still being written: the earliest
    /// timestamp after which such a ring may hold records, behind it, older than ones read
    /// (`Ring::held_up_since`).
    pub held_up_since: Option<u64>,
    /// A ring was left more than half full (with records behind one still being written, or
    /// written since it was read): what `--lossless` stopped must stay stopped.
    pub past_half: bool,
}

impl Drained {
    /// What two passes over different rings, made at the same time, read together.
    pub fn merge(self, other: Drained) -> Drained {
        Drained {
            malformed: self.malformed + other.malformed,
            behind_after: earliest(self.behind_after, other.behind_after),
            held_up_since: earliest(self.held_up_since, other.held_up_since),
            past_half: self.past_half || other.past_half,
        }
    }

    /// The earliest timestamp after which a ring may hold records older than ones read: the
    /// reorder stage releases nothing stamped after it.
    pub fn incomplete_after(&self) -> Option<u64> {
        earliest(self.behind_after, self.held_up_since)
    }
}

/// The earlier of two timestamps, either of which may be missing.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Some CPUs' rings, drained together: all of them, or the share of one thread that drains
/// (`--consumer-threads`). Each ring has one reader.
pub struct Rings {
    /// Each with the CPU that writes to it.
    rings: Vec<(u32, Ring)>,
    /// How many records fill a ring: the most one drain pass reads from it.
    records_per_ring: usize,
}

impl Rings {
    /// Hands the records now in the rings to `sink`, at most one ring's worth from each ring,
    /// so that a producer faster than this consumer cannot keep one pass going forever.
    /// `sink` gets each record with the CPU whose ring it came from, once for each of its
    /// parts ([`RawRecord::parts`]), the stack with the first.
    pub fn drain(
        &mut self,
        mut sink: impl FnMut(u32, &RawRecord, RecordPart, Option<StackInEntry>),
    ) -> Drained {
        let mut drained = Drained::default();
        let started = super::kernel::monotonic_ns();
        for (cpu, ring) in &mut self.rings {
            let mut last = None;
            let read = ring.drain(
                self.records_per_ring,
                started,
                |bytes| match RawRecord::view(bytes) {
                    Some(record) => {
                        last = Some(record.ktime_ns);
                        let mut stack = UserStack::after_record(bytes);
                        for part in record.parts() {
                            sink(*cpu, record, part, stack.take());
                        }
                    }
                    None => drained.malformed += 1,
                },
            );
            // The cap was reached: this ring may be behind.
            if read == self.records_per_ring
                && let Some(ktime) = last
            {
                drained.behind_after =
                    Some(drained.behind_after.map_or(ktime, |b: u64| b.min(ktime)));
            }
            drained.held_up_since = earliest(drained.held_up_since, ring.held_up_since());
            drained.past_half |= ring.past_half();
        }
        drained
    }
}

pub struct DataPath {
    /// Owns the maps only the programs use; dropped last.
    _loaded: Loaded,
    programs: Programs,
    rings: Rings,
    lost: PerCpuArray<MapData, u64>,
    /// Taken by the session that unwinds the stacks.
    stack_tops: Option<StackTops>,
    /// Which probes record (all clear until `set_recording`).
    recording: Array<MapData, RecordingMasks>,
    libraries: HashMap<MapData, u32, ProcessLibrary>,
    call_sites: HashMap<MapData, u64, u8>,
    /// The targets that exec'd (`names::EXECS`).
    execs: HashMap<MapData, u32, u64>,
    traced: HashMap<MapData, u32, u8>,
    /// What the BPF side's `OWN_TARGETS` holds, and the map it is written through.
    own_targets: OwnTargets,
    own_targets_map: Array<MapData, OwnTargets>,
    /// `--lossless`: the threads the BPF side has stopped for writing to a ring past half.
    stopped: Stopped,
    /// A second handle on `stopped`, for the exec-following thread (`--follow --lossless`).
    stopped_view: Option<StoppedView>,
    /// Raw tracepoint links, and the futex programs' links, each a descriptor.
    tracepoint_links: Vec<OwnedFd>,
    /// How the futex programs were hooked, when they were to be.
    futex_hooking: Option<FutexHooking>,
    /// The futex programs attached, whose skipped runs are futex calls lost.
    futex_programs: Vec<OwnedFd>,
}

/// Which processes a run traces, as far as the BPF side is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `-p` targets and a launched command, each through links of its own (or shared ones once
    /// its main thread has exited).
    Processes,
    /// `--follow`: the targets and their children, through shared links; the fork tracepoint
    /// adds each child to the shared-traced set.
    Follow,
    /// Every process, through shared links.
    SystemWide,
}

/// Which futex calls the futex programs record (`docs/futex-design.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FutexCalls {
    /// None: the futex category is not selected; its programs are not attached.
    None,
    /// The waits that blocked and the wakes that woke (`--contended`).
    Contended,
    /// Every one (a full trace that names the category).
    Every,
}

/// What the programs do.
#[derive(Clone, Debug)]
pub struct ProgramOptions {
    /// Attach a program that records nothing, to measure the probes' cost.
    pub empty: bool,
    /// Stop a thread that writes to a ring more than half full until it is drained.
    pub lossless: bool,
    /// Which records carry their thread's stack (`tracer_common::STACKS_*`).
    pub stacks: u32,
    /// Whether fast-path probes may be planned: if not, their program is not loaded (the
    /// kernel verifies it for as long as the entry program).
    pub fast_paths: bool,
    /// Which futex calls are recorded.
    pub futex: FutexCalls,
    /// The one way to hook them that may be used (`--futex-hook`), or the first of
    /// [`FutexHook::ALL`] that attaches.
    pub futex_hook: Option<FutexHook>,
    /// Only threads under these cgroups are recorded (none: every thread), at most
    /// [`MAX_CGROUPS`].
    pub cgroups: Vec<SelectedCgroup>,
}

/// Attaches the futex programs with `forced`, or else with the first of [`FutexHook::ALL`]
/// that attaches; `functions` are kernel functions' BTF ids by name.
fn hook_futex(
    loaded: &Loaded,
    forced: Option<FutexHook>,
    functions: &BTreeMap<&str, u32>,
) -> (Hooked, FutexHooking) {
    let mut hooking = FutexHooking::default();
    let tried = match forced {
        Some(hook) => vec![hook],
        None => FutexHook::ALL.to_vec(),
    };
    for hook in tried {
        match futex_hook::attach(loaded, hook, functions) {
            Ok(hooked) => {
                hooking.used = Some(hook);
                return (hooked, hooking);
            }
            Err(error) => hooking.passed_over.push((hook, error)),
        }
    }
    (Hooked::default(), hooking)
}

/// How the futex programs were hooked into the kernel: with which hook, if any, and why the
/// ones tried before it were not used.
#[derive(Debug, Default)]
pub struct FutexHooking {
    pub used: Option<FutexHook>,
    pub passed_over: Vec<(FutexHook, FutexHookError)>,
}

impl DataPath {
    /// Loads and verifies the programs and creates `ring_bytes` of ring buffer per CPU.
    /// `mechanism`: how the uprobe programs will be attached.
    pub fn load(
        kernel: &KernelBtf,
        ring_bytes: u32,
        options: ProgramOptions,
        scope: Scope,
        mechanism: UprobeMechanism,
    ) -> Result<Self, CaptureError> {
        let ProgramOptions {
            empty: empty_programs,
            lossless,
            stacks,
            fast_paths,
            futex,
            futex_hook,
            cgroups: selected_cgroups,
        } = options;
        let mut cgroups = [SelectedCgroup::default(); MAX_CGROUPS];
        cgroups[..selected_cgroups.len()].copy_from_slice(&selected_cgroups);
        let offsets = kernel.offsets;
        let config = ProgramConfig {
            thread_pointer_offset: offsets.thread_pointer,
            code_address_mask: code_address_mask(),
            nvcsw_offset: offsets.nvcsw,
            pid_offset: offsets.pid,
            tgid_offset: offsets.tgid,
            ring_bytes: u64::from(ring_bytes),
            tracer_tgid: std::process::id(),
            system_wide: u32::from(scope == Scope::SystemWide),
            stacks,
            lossless: u32::from(lossless),
            futex_contended_only: u32::from(futex == FutexCalls::Contended),
            cgroup_count: selected_cgroups.len() as u32,
            cgroups,
        };
        // Without --follow, only -p targets and a launched command go in TRACED, whose
        // entries (an LRU map's) are all allocated when it is created.
        let sizes: &[(&str, u32)] = match scope {
            Scope::Follow => &[],
            Scope::Processes | Scope::SystemWide => &[(names::TRACED, PROCESS_TARGETS)],
        };
        let mut loaded = Loaded::new(BPF_OBJECT, &config, sizes, &kernel.functions)
            .map_err(CaptureError::LoadObject)?;
        let program_names = match empty_programs {
            false => ProgramNames {
                entry: names::ENTRY_PROGRAM,
                exit: names::RETURN_PROGRAM,
                fast: fast_paths.then_some(names::FAST_PROGRAM),
            },
            true => ProgramNames {
                entry: names::EMPTY_PROGRAM,
                exit: names::EMPTY_PROGRAM,
                fast: fast_paths.then_some(names::EMPTY_PROGRAM),
            },
        };
        // The futex programs are loaded beside the uprobe programs, before the rings' map is
        // let go (the programs hold the maps they use). Attached now, but nothing is traced
        // yet. A kernel where no hook attaches traces the rest (the session says so).
        let (programs, futex_hooked, rings) = std::thread::scope(|scope| {
            let futex_hooked = scope.spawn(|| {
                (futex != FutexCalls::None)
                    .then(|| hook_futex(&loaded, futex_hook, &kernel.functions))
            });
            let programs = scope.spawn(|| Programs::load(&loaded, program_names, mechanism));
            let rings = create_rings(ring_bytes);
            (joined(programs), joined(futex_hooked), rings)
        });
        let programs = programs?;
        let rings = slot_rings(&mut loaded, rings?)?;
        let (futex_hooked, futex_hooking) = match futex_hooked {
            Some((hooked, hooking)) => (hooked, Some(hooking)),
            None => (Hooked::default(), None),
        };
        let lost = PerCpuArray::try_from(loaded.take_map(names::LOST)?)?;
        let stack_tops = StackTops::new(HashMap::try_from(loaded.take_map(names::STACK_TOPS)?)?);
        let recording = Array::try_from(loaded.take_map(names::RECORDING)?)?;
        let libraries = HashMap::try_from(loaded.take_map(names::LIBRARIES)?)?;
        let call_sites = HashMap::try_from(loaded.take_map(names::CALL_SITES)?)?;
        let execs = HashMap::try_from(loaded.take_map(names::EXECS)?)?;
        let traced = HashMap::try_from(loaded.take_map(names::TRACED)?)?;
        let mut own_targets_map = Array::try_from(loaded.take_map(names::OWN_TARGETS)?)?;
        // With --follow, children are traced that only `TRACED` holds (the fork program adds
        // them): a process not among the targets' slots must be looked up there.
        let mut own_targets = OwnTargets::default();
        if scope == Scope::Follow {
            own_targets[OWN_TARGETS_SPILLED] = 1;
            own_targets_map
                .set(0, own_targets, 0)
                .map_err(CaptureError::SetUpTraced)?;
        }
        let stopped_map = loaded.take_map(names::STOPPED)?;
        let stopped_view = (lossless && scope == Scope::Follow)
            .then(|| StoppedView::of(&stopped_map))
            .transpose()?;
        let stopped = Stopped::new(stopped_map, lossless, scope == Scope::Follow)?;
        // An exec'ing process's errno slot is forgotten; with --follow, children are followed.
        // Raw tracepoints are attached by name, with no tracefs mounted.
        let mut tracepoints = vec![(names::EXEC_PROGRAM, "sched_process_exec")];
        if scope == Scope::Follow {
            tracepoints.push((names::FORK_PROGRAM, "sched_process_fork"));
        }
        let mut tracepoint_links = futex_hooked.links;
        for (name, event) in tracepoints {
            let program = loaded.load_program(name, BPF_PROG_TYPE_RAW_TRACEPOINT, None)?;
            tracepoint_links.push(loader::attach_raw_tracepoint(&program, event)?);
        }
        Ok(DataPath {
            _loaded: loaded,
            programs,
            rings: Rings {
                rings: (0..).zip(rings).collect(),
                records_per_ring: ring_bytes as usize / tracer_common::record::RING_ENTRY_SIZE,
            },
            lost,
            stack_tops: Some(stack_tops),
            recording,
            libraries,
            call_sites,
            execs,
            traced,
            own_targets,
            own_targets_map,
            stopped,
            stopped_view,
            tracepoint_links,
            futex_hooking,
            futex_programs: futex_hooked.programs,
        })
    }

    /// Runs of the futex programs the kernel skipped so far, each a futex call lost: it skips
    /// a program on a CPU where a run of it is preempted (see `kfuncs::PREEMPT_DISABLE`).
    pub fn futex_skips(&self) -> u64 {
        self.futex_programs
            .iter()
            .filter_map(|program| sys::bpf::prog_info(program.as_fd()).ok())
            .map(|info| info.recursion_misses)
            .sum()
    }

    /// How the futex programs were hooked, if they were to be (taken: said once).
    pub fn take_futex_hooking(&mut self) -> Option<FutexHooking> {
        self.futex_hooking.take()
    }

    /// The tracepoint links, to detach together with the probes (each waits for a grace period).
    pub fn take_tracepoint_links(&mut self) -> Vec<OwnedFd> {
        std::mem::take(&mut self.tracepoint_links)
    }

    /// Records process `pid` through `links` from now on: through its own, set before they are
    /// attached; through shared ones, and no longer its own (with `--follow`, the children it
    /// forks from now on too).
    pub fn trace_through(&mut self, pid: u32, links: TracedThrough) -> Result<(), CaptureError> {
        let failed = |source| CaptureError::TraceProcess { pid, source };
        // `TRACED` first: a process moving to shared links is recorded through them before
        // its own stop (a call at that instant may be recorded twice, never not at all).
        self.traced.insert(pid, links as u8, 0).map_err(failed)?;
        let slots = &mut self.own_targets[..OWN_TARGET_SLOTS];
        let listed = slots.iter().position(|&slot| slot == pid);
        match (links, listed) {
            (TracedThrough::OwnLinks, None) => match slots.iter().position(|&slot| slot == 0) {
                Some(free) => slots[free] = pid,
                None => self.own_targets[OWN_TARGETS_SPILLED] = 1,
            },
            // A process not in the slots is traced: the futex programs, which have no links to
            // say so, must look it up in `TRACED`.
            (TracedThrough::SharedLinks, _) => {
                if let Some(at) = listed {
                    slots[at] = 0;
                } else if self.own_targets[OWN_TARGETS_SPILLED] != 0 {
                    return Ok(());
                }
                self.own_targets[OWN_TARGETS_SPILLED] = 1;
            }
            _ => return Ok(()),
        }
        self.own_targets_map
            .set(0, self.own_targets, 0)
            .map_err(failed)
    }

    /// Lets the probes that `masks` name record from now on, and no others: a probe hit after
    /// this returns sees them.
    pub fn set_recording(&mut self, masks: &RecordingMasks) -> Result<(), CaptureError> {
        self.recording
            .set(0, masks, 0)
            .map_err(CaptureError::SetRecording)
    }

    /// Tells the BPF side the return addresses of library `id`'s own calls of traced functions
    /// (file offsets).
    pub fn add_call_sites(&mut self, id: u64, sites: &[u64]) -> Result<(), MapError> {
        for &site in sites {
            self.call_sites.insert(call_site_key(id, site), 1, 0)?;
        }
        Ok(())
    }

    /// Tells the BPF side what it needs of process `pid`'s C library.
    pub fn set_library(&mut self, pid: u32, library: ProcessLibrary) -> Result<(), MapError> {
        self.libraries.insert(pid, library, 0)
    }

    /// The targets that exec'd since the last call, each with its exec's monotonic time, in
    /// the order they did.
    pub fn take_execs(&mut self) -> Vec<(u32, u64)> {
        let mut execs: Vec<(u32, u64)> = self.execs.iter().filter_map(Result::ok).collect();
        for (pid, _) in &execs {
            // Gone already if it exited since: nothing else removes it.
            let _ = self.execs.remove(pid);
        }
        execs.sort_by_key(|&(_, ktime)| ktime);
        execs
    }

    /// The map that tells the BPF side where threads' stacks begin, for whoever unwinds them;
    /// `None` once taken.
    pub fn take_stack_tops(&mut self) -> Option<StackTops> {
        self.stack_tops.take()
    }

    pub fn programs(&self) -> &Programs {
        &self.programs
    }

    /// Duplicates of the ring buffers' descriptors, readable when the BPF side forces a wakeup
    /// (of the rings here: taken before any are shared out).
    pub fn ring_fds(&self) -> io::Result<Vec<OwnedFd>> {
        // Before `share_rings`: afterwards this holds only its own share.
        let dup = |(_, ring): &(u32, Ring)| ring.as_fd().try_clone_to_owned();
        self.rings.rings.iter().map(dup).collect()
    }

    /// Hands the records now in the rings not shared out (`share_rings`) to `sink` (see
    /// `Rings::drain`).
    pub fn drain(
        &mut self,
        sink: impl FnMut(u32, &RawRecord, RecordPart, Option<StackInEntry>),
    ) -> Drained {
        self.rings.drain(sink)
    }

    /// Deals the rings into `shares` shares (as many as there are rings at most), a CPU's ring
    /// to share `cpu % shares`: the first stays here, the others are returned, for threads of
    /// their own to drain.
    pub fn share_rings(&mut self, shares: usize) -> Vec<Rings> {
        let shares = shares.clamp(1, self.rings.rings.len().max(1));
        let mut dealt: Vec<Rings> = (0..shares)
            .map(|_| Rings {
                rings: Vec::new(),
                records_per_ring: self.rings.records_per_ring,
            })
            .collect();
        for (n, ring) in self.rings.rings.drain(..).enumerate() {
            dealt[n % shares].rings.push(ring);
        }
        self.rings = dealt.remove(0);
        dealt
    }

    /// `--lossless`: the threads the BPF side has stopped, to resume once the rings are
    /// drained.
    pub fn stopped(&mut self) -> &mut Stopped {
        &mut self.stopped
    }

    /// Under `--follow` with `--lossless`: what the exec-following thread reads to tell when
    /// to let a thread it holds go.
    pub fn take_stopped_view(&mut self) -> Option<StoppedView> {
        self.stopped_view.take()
    }

    /// Records the BPF programs could not reserve room for so far, per CPU.
    pub fn lost_per_cpu(&self) -> Result<Vec<u64>, CaptureError> {
        let per_cpu = self
            .lost
            .get(&LOST_TOTAL, 0)
            .map_err(CaptureError::ReadLost)?;
        Ok(per_cpu.iter().copied().collect())
    }
}

/// A ring of `ring_bytes` for each CPU, each with its map, not yet in the programs' array of
/// rings (see [`slot_rings`]). The kernel zeroes their memory, some milliseconds a CPU: they
/// are made while the programs are verified.
fn create_rings(ring_bytes: u32) -> Result<Vec<(MapData, Ring)>, CaptureError> {
    let cpus =
        aya::util::nr_cpus().map_err(|(path, source)| CaptureError::Cpus { path, source })?;
    if cpus > MAX_CPUS as usize {
        return Err(CaptureError::TooManyCpus { cpus });
    }
    (0..cpus as u32)
        .map(|cpu| {
            let definition =
                aya_obj::Map::new_from_params(BPF_MAP_TYPE_RINGBUF as u32, 0, 0, ring_bytes, 0);
            let ring =
                MapData::create(definition, &format!("thr_ring{cpu}"), None).map_err(|source| {
                    CaptureError::CreateRing {
                        bytes: ring_bytes,
                        source,
                    }
                })?;
            let reader = Ring::new(ring.fd().as_fd().try_clone_to_owned()?, ring_bytes as usize)?;
            Ok((ring, reader))
        })
        .collect()
}

/// Puts each CPU's ring in the programs' array of rings, at the CPU's index, once the
/// programs hold that array (taking it from `loaded` lets it go).
fn slot_rings(loaded: &mut Loaded, rings: Vec<(MapData, Ring)>) -> Result<Vec<Ring>, CaptureError> {
    let mut slots: ArrayOfMaps<MapData, MapData> =
        ArrayOfMaps::try_from(loaded.take_map(names::RING_BUFFERS)?)?;
    (0..)
        .zip(rings)
        .map(|(cpu, (ring, reader))| {
            slots.set(cpu, &ring, 0)?;
            Ok(reader)
        })
        .collect()
}
