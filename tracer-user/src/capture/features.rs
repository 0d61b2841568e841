//! What the BPF side needs from the kernel, asked of the running kernel at start-up, before
//! anything is loaded or attached: never inferred from its version, which distributions
//! backport around. Each need is asked as libbpf asks it, by loading a program or creating a
//! map that uses it. The kernels that lack one get one line that names what is missing and
//! the Linux version that brought it.
//!
//! Two needs have fallbacks and are asked where they are used: kernel BTF that cannot be
//! mapped is read into memory (`kernel`), and where uprobe_multi links are missing or do not
//! filter by process, each probe is a perf-event uprobe (`attach::uprobe_links`).

use std::{fs, os::fd::AsFd};

use aya_obj::generated::{
    BPF_ATOMIC, BPF_DW, BPF_FETCH, BPF_STX, BPF_XCHG,
    bpf_func_id::{
        self, BPF_FUNC_dynptr_data, BPF_FUNC_get_attach_cookie,
        BPF_FUNC_get_current_ancestor_cgroup_id, BPF_FUNC_get_current_pid_tgid,
        BPF_FUNC_get_current_task_btf, BPF_FUNC_get_smp_processor_id, BPF_FUNC_ktime_get_ns,
        BPF_FUNC_map_delete_elem, BPF_FUNC_map_lookup_elem, BPF_FUNC_map_update_elem,
        BPF_FUNC_probe_read_kernel, BPF_FUNC_probe_read_user, BPF_FUNC_ringbuf_discard,
        BPF_FUNC_ringbuf_discard_dynptr, BPF_FUNC_ringbuf_query, BPF_FUNC_ringbuf_reserve,
        BPF_FUNC_ringbuf_reserve_dynptr, BPF_FUNC_ringbuf_submit, BPF_FUNC_ringbuf_submit_dynptr,
        BPF_FUNC_send_signal_thread, BPF_FUNC_task_pt_regs, BPF_FUNC_task_storage_get,
    },
    bpf_insn,
    bpf_map_type::{BPF_MAP_TYPE_ARRAY_OF_MAPS, BPF_MAP_TYPE_RINGBUF},
    bpf_prog_type::{self, BPF_PROG_TYPE_KPROBE, BPF_PROG_TYPE_RAW_TRACEPOINT},
};

use super::loader::{self, Attach, CALL, exit, instruction, mov_imm};
use crate::sys::bpf::{self, MapShape};

/// A kernel that lacks what the BPF side needs: exit status 2, as for other input the user
/// can change (here, the kernel the tracer runs on).
#[derive(Debug, thiserror::Error)]
#[error(
    "this kernel ({release}) lacks {missing}; thrtrace-bpf needs Linux {floor} or later \
     (with kernel BTF, as distributions build it)"
)]
pub struct KernelTooOld {
    release: String,
    missing: String,
    floor: &'static str,
}

impl KernelTooOld {
    /// This kernel lacks `missing`, which no version number stands for (kernel BTF).
    pub fn lacking(missing: String) -> Self {
        KernelTooOld {
            release: release(),
            missing,
            floor: floor(),
        }
    }
}

fn release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "unknown".to_owned(), |r| r.trim().to_owned())
}

/// One thing the programs need: what it gives them, and the Linux version that brought it.
struct Need {
    what: &'static str,
    since: &'static str,
    ask: Ask,
}

enum Ask {
    /// A helper, called from a program of this type.
    Helper(bpf_func_id, bpf_prog_type),
    /// Atomic exchange and fetch-and-add on memory (`BPF_ATOMIC` with `BPF_FETCH`).
    AtomicFetch,
    /// A ring buffer inside an array of maps (one ring per CPU).
    RingInMapOfMaps,
    /// A raw tracepoint program (attached by name, with no tracefs).
    RawTracepoint,
}

/// Every helper the programs call, each with what it gives them and the version that first
/// offered it to kprobe (uprobe) programs; a test checks the object calls no other. Raw
/// tracepoint programs call a few of them too, offered to both at the same time.
const HELPERS: [(bpf_func_id, &str, &str); 22] = [
    (BPF_FUNC_map_lookup_elem, "map lookups", "4.1"),
    (BPF_FUNC_map_update_elem, "map updates", "4.1"),
    (BPF_FUNC_map_delete_elem, "map deletes", "4.1"),
    (BPF_FUNC_ktime_get_ns, "timestamps", "4.1"),
    (BPF_FUNC_get_smp_processor_id, "the CPU's ring", "4.1"),
    (BPF_FUNC_get_current_pid_tgid, "the thread's ids", "4.2"),
    (
        BPF_FUNC_probe_read_user,
        "reads of the target's memory",
        "5.5",
    ),
    (BPF_FUNC_probe_read_kernel, "reads of a forked task", "5.5"),
    (BPF_FUNC_send_signal_thread, "--lossless's stop", "5.5"),
    (
        BPF_FUNC_get_current_ancestor_cgroup_id,
        "--cgroup's filter",
        "5.7",
    ),
    (BPF_FUNC_ringbuf_reserve, "BPF ring buffers", "5.8"),
    (BPF_FUNC_ringbuf_submit, "BPF ring buffers", "5.8"),
    (BPF_FUNC_ringbuf_discard, "BPF ring buffers", "5.8"),
    (BPF_FUNC_ringbuf_query, "BPF ring buffers", "5.8"),
    (BPF_FUNC_task_storage_get, "task-local storage", "5.11"),
    (
        BPF_FUNC_get_current_task_btf,
        "the current task by BTF",
        "5.11",
    ),
    (BPF_FUNC_get_attach_cookie, "BPF cookies on uprobes", "5.15"),
    (
        BPF_FUNC_task_pt_regs,
        "a thread's registers in a syscall (futex stacks)",
        "5.15",
    ),
    (
        BPF_FUNC_ringbuf_reserve_dynptr,
        "ring buffer entries sized as written (call stacks)",
        "5.19",
    ),
    (
        BPF_FUNC_ringbuf_submit_dynptr,
        "ring buffer entries sized as written (call stacks)",
        "5.19",
    ),
    (
        BPF_FUNC_ringbuf_discard_dynptr,
        "ring buffer entries sized as written (call stacks)",
        "5.19",
    ),
    (
        BPF_FUNC_dynptr_data,
        "ring buffer entries sized as written (call stacks)",
        "5.19",
    ),
];

fn needs() -> Vec<Need> {
    let mut needs: Vec<Need> = HELPERS
        .iter()
        .map(|&(helper, what, since)| Need {
            what,
            since,
            ask: Ask::Helper(helper, BPF_PROG_TYPE_KPROBE),
        })
        .collect();
    // One probe per need is enough: helpers of the same need came together.
    needs.dedup_by_key(|need| need.what);
    needs.extend([
        Need {
            what: "atomic fetch-and-add and exchange",
            since: "5.12",
            ask: Ask::AtomicFetch,
        },
        Need {
            what: "ring buffers in an array of maps",
            since: "5.8",
            ask: Ask::RingInMapOfMaps,
        },
        Need {
            what: "raw tracepoints by name",
            since: "4.17",
            ask: Ask::RawTracepoint,
        },
    ]);
    needs
}

/// The oldest Linux that has every need: the floor, derived from the table.
fn floor() -> &'static str {
    needs()
        .iter()
        .map(|need| need.since)
        .max_by_key(|since| version_key(since))
        .unwrap_or_default()
}

fn version_key(version: &str) -> Vec<u32> {
    version.split('.').filter_map(|n| n.parse().ok()).collect()
}

/// Asks the kernel for every need; `Ok` with what `-v` says of them, or the missing ones.
/// Where no program loads at all (no privilege), nothing is asked: loading the object then
/// says why.
pub fn check() -> Result<String, KernelTooOld> {
    if loader::trivial_program(BPF_PROG_TYPE_KPROBE, None).is_none() {
        return Ok("kernel features: not asked (no BPF program loads)".to_owned());
    }
    let needs = needs();
    let missing: Vec<String> = needs
        .iter()
        .filter(|need| !has(&need.ask))
        .map(|need| format!("{} (Linux {})", need.what, need.since))
        .collect();
    if missing.is_empty() {
        let names: Vec<&str> = needs.iter().map(|need| need.what).collect();
        return Ok(format!(
            "kernel features: all {} present (floor Linux {}): {}",
            names.len(),
            floor(),
            names.join(", ")
        ));
    }
    Err(KernelTooOld::lacking(missing.join(", ")))
}

/// Whether the kernel has it.
fn has(ask: &Ask) -> bool {
    match *ask {
        Ask::Helper(helper, prog_type) => {
            // The call alone: the verifier looks the helper up before it checks arguments, so
            // only a missing helper gets these words (libbpf asks the same way).
            let program = [call(helper as i32), exit()];
            match loader::load_to_ask(prog_type, Attach::default(), &program) {
                Ok(_) => true,
                Err(log) => !["invalid func ", "unknown func ", "cannot use helper"]
                    .iter()
                    .any(|words| log.contains(words)),
            }
        }
        Ask::AtomicFetch => {
            let program = [
                mov_imm(1, 0),
                // *(u64 *)(r10 - 8) = r1
                instruction(0x7b, 10, 1, -8, 0),
                mov_imm(1, 1),
                atomic(BPF_ADD_FETCH),
                atomic(BPF_XCHG as i32),
                mov_imm(0, 0),
                exit(),
            ];
            loader::load_to_ask(BPF_PROG_TYPE_KPROBE, Attach::default(), &program).is_ok()
        }
        Ask::RingInMapOfMaps => {
            let ring = MapShape {
                map_type: BPF_MAP_TYPE_RINGBUF as u32,
                key_size: 0,
                value_size: 0,
                max_entries: 4096,
                map_flags: 0,
            };
            let Ok(ring) = bpf::map_create("thr_feature", ring, None) else {
                return false;
            };
            let rings = MapShape {
                map_type: BPF_MAP_TYPE_ARRAY_OF_MAPS as u32,
                key_size: 4,
                value_size: 4,
                max_entries: 1,
                map_flags: 0,
            };
            bpf::map_create("thr_feature", rings, Some(ring.as_fd())).is_ok()
        }
        Ask::RawTracepoint => loader::trivial_program(BPF_PROG_TYPE_RAW_TRACEPOINT, None).is_some(),
    }
}

/// `BPF_ADD | BPF_FETCH` (`BPF_ADD` is 0).
const BPF_ADD_FETCH: i32 = BPF_FETCH as i32;

/// `r1 = atomic_op((u64 *)(r10 - 8), r1)`.
fn atomic(op: i32) -> bpf_insn {
    instruction(BPF_STX | BPF_DW | BPF_ATOMIC, 10, 1, -8, op)
}

fn call(helper: i32) -> bpf_insn {
    instruction(u32::from(CALL), 0, 0, 0, helper)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use aya_obj::Object;

    use super::*;

    /// The helpers the object calls are exactly those the table asks the kernel for: a helper
    /// added to the programs is asked for too, and none is asked for that is not called. A
    /// kfunc's placeholder is no helper: the loader replaces it.
    #[test]
    fn every_helper_the_programs_call_is_asked_for() {
        let object = Object::parse(crate::capture::datapath::BPF_OBJECT).unwrap();
        let called: BTreeSet<i32> = object
            .functions
            .values()
            .flat_map(|function| &function.instructions)
            // A helper call: BPF_JMP | BPF_CALL with source 0 (1 is a BPF-to-BPF call).
            .filter(|insn| insn.code == CALL && insn.src_reg() == 0)
            .map(|insn| insn.imm)
            .filter(|imm| {
                !tracer_common::kfuncs::ALL
                    .iter()
                    .any(|kfunc| kfunc.placeholder == *imm)
            })
            .collect();
        let asked: BTreeSet<i32> = HELPERS.iter().map(|&(id, _, _)| id as i32).collect();
        assert_eq!(called, asked, "the helpers called, against those asked for");
    }

    #[test]
    fn the_floor_is_the_newest_need() {
        assert_eq!(floor(), "5.19");
        assert!(version_key("5.19") > version_key("5.8"));
    }
}
