//! Where a call was made from, as reports and messages say it: a record's return address,
//! located by [`symbolize`](crate::symbolize), or why it is no place in the program.
//!
//! A return address can be the kernel's uretprobe trampoline. A uretprobe (another tool's, or
//! another trace's, on the same function) replaces the return address on the stack with it when
//! the function is entered, so a probe that reads that slot later (`--contended`'s slow-path
//! probes, or an entry probe that runs after the other tool's) reads the trampoline, not the
//! caller. The kernel puts the trampoline at the start of the process's XOL area, the one-page
//! `[uprobes]` mapping it makes at the first uprobe hit (`xol_add_vma`, whose address
//! `uprobe_get_trampoline_vaddr` returns): at `get_unmapped_area(TASK_SIZE - PAGE_SIZE)`, the
//! top page of the process's address space, unless something is mapped there already (the
//! stack, with address-space randomization off), when it goes wherever a new mapping would.
//! So a caller is the trampoline when it is that top page's start, for each width of a user
//! address space the architecture has; while tracing, the live process's `[uprobes]` mapping
//! also says where it went.

use serde::Serialize;
use tracer_common::arch;

use crate::symbolize::{Location, Symbols};

/// Why a caller is no place: another tool's uretprobe trampoline stood in the return address's
/// slot.
pub const RETURN_PROBE: &str = "another tool's return probe";
/// Why a caller is no place: none was recorded (tr files, a lock taken before the trace).
pub const NOT_RECORDED: &str = "not recorded";

/// The page size of x86-64, and of the arm64 kernels distributions build (a kernel of larger
/// pages is known by its `[uprobes]` mapping only).
const PAGE_SIZE: u64 = 4096;

/// Whether `address` is where the kernel puts a process's uretprobe trampoline when the top of
/// its address space is free: the start of the page below `TASK_SIZE` (on x86-64, itself a
/// page below the end of the user address space).
pub fn is_uretprobe_trampoline(address: u64) -> bool {
    arch::HOST.user_address_bits.iter().any(|&bits| {
        let task_size = (1u64 << bits) - arch::HOST.task_size_gap;
        address == task_size - PAGE_SIZE
    })
}

/// The start of the `[uprobes]` mapping in `maps` (the text of /proc/PID/maps), if there is one.
fn uprobes_area(maps: &str) -> Option<u64> {
    maps.lines()
        .find(|line| line.split_whitespace().nth(5) == Some("[uprobes]"))
        .and_then(|line| line.split('-').next())
        .and_then(|start| u64::from_str_radix(start, 16).ok())
}

/// Where a call was made from: a place in the program ([`Location`], never a bare address
/// inside a recorded mapping), or why there is none. In JSON, a location's fields (every
/// address a hex string), or a null address with the reason.
#[derive(Clone, Debug)]
pub struct Place {
    /// Where it is; `None` when `unknown` says why there is no place.
    pub location: Option<Location>,
    /// Why the address is not known (`None` when it is).
    pub unknown: Option<&'static str>,
}

impl Place {
    /// Caller `address` of process `pid` (0: not recorded), from the log's mappings.
    pub fn locate(symbols: &mut Symbols, pid: u32, address: u64) -> Place {
        match address {
            0 => Place::unknown(NOT_RECORDED),
            address if is_uretprobe_trampoline(address) => Place::unknown(RETURN_PROBE),
            address => Place::from(symbols.locate(pid, address)),
        }
    }

    /// The same while tracing: also through the live process, its `[uprobes]` mapping and, if
    /// the log recorded no mappings of it, its own maps.
    pub fn locate_traced(symbols: &mut Symbols, pid: u32, address: u64) -> Place {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        match address {
            0 => Place::unknown(NOT_RECORDED),
            address if is_uretprobe_trampoline(address) => Place::unknown(RETURN_PROBE),
            address if uprobes_area(&maps) == Some(address) => Place::unknown(RETURN_PROBE),
            address => Place::from(symbols.locate_traced(pid, address)),
        }
    }

    fn unknown(why: &'static str) -> Place {
        Place {
            location: None,
            unknown: Some(why),
        }
    }

    /// `file:line`, where the source line is known.
    pub fn source_line(&self) -> Option<String> {
        self.location.as_ref()?.source_line()
    }
}

impl From<Location> for Place {
    fn from(location: Location) -> Place {
        Place {
            location: Some(location),
            unknown: None,
        }
    }
}

impl Serialize for Place {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Known<'a> {
            #[serde(flatten)]
            location: &'a Location,
            unknown: Option<&'static str>,
        }
        #[derive(Serialize)]
        struct Unknown {
            address: Option<String>,
            unknown: Option<&'static str>,
        }
        match &self.location {
            Some(location) => Known {
                location,
                unknown: None,
            }
            .serialize(serializer),
            None => Unknown {
                address: None,
                unknown: self.unknown,
            }
            .serialize(serializer),
        }
    }
}

impl std::fmt::Display for Place {
    /// As its location reads (`worker+0x1c (queue.c:88)`, ...), or `unknown (why)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.location {
            Some(location) => write!(f, "{location}"),
            None => write!(f, "unknown ({})", self.unknown.unwrap_or(NOT_RECORDED)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_trampoline_is_the_top_page_of_either_user_address_space() {
        // As the kernel maps it with 4-level paging (seen in /proc/PID/maps as
        // "7fffffffe000-7ffffffff000 --xp ... [uprobes]") and with 5-level paging.
        assert!(is_uretprobe_trampoline(0x7fff_ffff_e000));
        assert!(is_uretprobe_trampoline(0x00ff_ffff_ffff_e000));
        // The page above it is TASK_SIZE's guard, the one below the stack's or a library's;
        // an address inside the trampoline's page is no return address the kernel writes.
        for other in [
            0x7fff_ffff_f000,
            0x7fff_ffff_d000,
            0x7fff_ffff_e001,
            0x7fff_f7fb_f000,
            0x5596_d0a5_4180,
            0,
        ] {
            assert!(!is_uretprobe_trampoline(other), "{other:#x}");
        }
    }

    #[test]
    #[cfg(target_arch = "aarch64")]
    fn the_trampoline_is_the_top_page_of_an_arm64_user_address_space() {
        // TASK_SIZE is the end of the user address space itself on arm64: no guard page.
        assert!(is_uretprobe_trampoline(0xffff_ffff_f000));
        assert!(is_uretprobe_trampoline(0x000f_ffff_ffff_f000));
        assert!(!is_uretprobe_trampoline(0xffff_ffff_e000));
        assert!(!is_uretprobe_trampoline(0x7fff_ffff_e000));
    }

    #[test]
    fn the_uprobes_mapping_is_found_where_the_kernel_put_it() {
        // Address-space randomization off: the stack has the top page, the area went below
        // the loader.
        let maps = "\
7ffff7fbf000-7ffff7fc0000 --xp 00000000 00:00 0                          [uprobes]
7ffff7fcb000-7ffff7ff1000 r-xp 00001000 fe:00 325843                     /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]
";
        assert_eq!(uprobes_area(maps), Some(0x7fff_f7fb_f000));
        assert_eq!(
            uprobes_area("7ffd83c26000-7ffd83c47000 rw-p 0 00:00 0 [stack]\n"),
            None
        );
        assert_eq!(uprobes_area(""), None);
    }

    #[test]
    fn a_caller_that_is_no_place_says_why_in_text_and_has_no_address_in_json() {
        let mut symbols = Symbols::new();
        let trampoline = Place::locate(&mut symbols, 1, 0x7fff_ffff_e000);
        assert_eq!(
            trampoline.to_string(),
            "unknown (another tool's return probe)"
        );
        assert_eq!(
            serde_json::to_value(&trampoline).unwrap(),
            serde_json::json!({"address": null, "unknown": "another tool's return probe"})
        );
        let none = Place::locate(&mut symbols, 1, 0);
        assert_eq!(none.to_string(), "unknown (not recorded)");
        // Where no mapping is known, the address itself, in hex.
        let raw = Place::locate(&mut symbols, 1, 0x5596_d0a5_4180);
        assert_eq!(raw.to_string(), "0x5596d0a54180");
        assert_eq!(
            serde_json::to_value(&raw).unwrap()["address"],
            "0x5596d0a54180"
        );
    }
}
