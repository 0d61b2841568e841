//! CFI that framehop can read, from AArch64 code that signs its return addresses
//! (`-mbranch-protection`, as Debian 13's C library is built). Such code marks where its return
//! address is signed with `DW_CFA_AARCH64_negate_ra_state`, a vendor operation with the number
//! of SPARC's `DW_CFA_GNU_window_save`. framehop 0.16 has gimli read CFI without naming the
//! vendor, so gimli refuses the operation and framehop unwinds each address of such a function
//! by frame pointers instead: from inside one, the return of its own last call (`x30`) came
//! as its caller, then a frame outside every file. The unwinder needs no signing state, since
//! it strips the signature from every return address it reads (the mask of
//! `native::registers`), so each such operation becomes a `DW_CFA_nop`. They are found by
//! reading every entry's instructions, as an operand byte can have the same value.

use std::collections::HashMap;

use gimli::{
    EndianSlice, Format, LittleEndian, Reader,
    constants::{self, DwCfa, DwEhPe},
};

type Bytes<'a> = EndianSlice<'a, LittleEndian>;

/// Which section the CFI is: they differ in how an entry names its CIE and how an FDE's
/// addresses are encoded.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Section {
    EhFrame,
    DebugFrame,
}

/// `data`, a `section`, with each `DW_CFA_AARCH64_negate_ra_state` a `DW_CFA_nop`. An entry that
/// cannot be read is left as it was, for framehop to read as it would have.
pub fn without_return_signing(data: &[u8], section: Section) -> Vec<u8> {
    let mut out = data.to_vec();
    let whole = Bytes::new(data, LittleEndian);
    let mut rest = whole;
    let mut cies = HashMap::new();
    while !rest.is_empty() {
        let start = rest.offset_from(whole);
        let Ok((length, format)) = rest.read_initial_length() else {
            break;
        };
        let Ok(entry) = rest.split(length) else {
            break;
        };
        // An entry not read is framehop's to refuse; its section's terminator (length 0) too.
        let _ = Entry {
            whole,
            start,
            format,
            section,
        }
        .nop_signing(entry, &mut cies, &mut out);
    }
    out
}

/// What an FDE's reading needs from its CIE.
#[derive(Clone, Copy)]
struct Cie {
    /// How the FDE's addresses (and `DW_CFA_set_loc`'s) are encoded (`.eh_frame`'s `R`).
    encoding: DwEhPe,
    address_size: u8,
    /// Whether the FDE has augmentation data (`z`).
    augmented: bool,
}

struct Entry<'a> {
    whole: Bytes<'a>,
    /// Where the entry's length is in the section: what its FDEs name a CIE by.
    start: usize,
    format: Format,
    section: Section,
}

impl Entry<'_> {
    fn nop_signing(
        &self,
        mut entry: Bytes,
        cies: &mut HashMap<usize, Cie>,
        out: &mut [u8],
    ) -> gimli::Result<()> {
        let id_at = entry.offset_from(self.whole);
        let id = entry.read_offset(self.format)?;
        let cie_id = match (self.section, self.format) {
            (Section::EhFrame, _) => 0,
            (Section::DebugFrame, Format::Dwarf32) => 0xffff_ffff,
            (Section::DebugFrame, Format::Dwarf64) => usize::MAX,
        };
        let cie = if id == cie_id {
            let cie = read_cie(&mut entry)?;
            cies.insert(self.start, cie);
            cie
        } else {
            // `.eh_frame` names the CIE by its distance back from this field.
            let at = match self.section {
                Section::EhFrame => id_at.wrapping_sub(id),
                Section::DebugFrame => id,
            };
            let cie = *cies
                .get(&at)
                .ok_or(gimli::Error::NoEntryAtGivenOffset(at as u64))?;
            // The first address and the length.
            skip_pointer(&mut entry, cie.encoding, cie.address_size)?;
            skip_pointer(&mut entry, cie.encoding, cie.address_size)?;
            if cie.augmented {
                let length = entry.read_uleb128()?;
                entry.skip(to_usize(length)?)?;
            }
            cie
        };
        while !entry.is_empty() {
            let at = entry.offset_from(self.whole);
            let operation = DwCfa(entry.read_u8()?);
            skip_operands(&mut entry, operation, cie)?;
            if operation == constants::DW_CFA_AARCH64_negate_ra_state {
                out[at] = constants::DW_CFA_nop.0;
            }
        }
        Ok(())
    }
}

/// Reads a CIE from its version on, leaving `entry` at its initial instructions.
fn read_cie(entry: &mut Bytes) -> gimli::Result<Cie> {
    let version = entry.read_u8()?;
    let augmentation = entry.read_null_terminated_slice()?;
    let mut cie = Cie {
        encoding: constants::DW_EH_PE_absptr,
        address_size: 8,
        augmented: false,
    };
    if version >= 4 {
        cie.address_size = entry.read_u8()?;
        // The segment selector's size.
        entry.read_u8()?;
    }
    // The code and data alignments, then the return address's register.
    entry.skip_leb128()?;
    entry.skip_leb128()?;
    match version {
        1 => entry.skip(1)?,
        _ => entry.skip_leb128()?,
    }
    if let Some((b'z', letters)) = augmentation.slice().split_first() {
        cie.augmented = true;
        let length = entry.read_uleb128()?;
        let mut data = entry.split(to_usize(length)?)?;
        for letter in letters {
            match letter {
                b'L' => data.skip(1)?,
                b'P' => {
                    let encoding = DwEhPe(data.read_u8()?);
                    skip_pointer(&mut data, encoding, cie.address_size)?;
                }
                b'R' => cie.encoding = DwEhPe(data.read_u8()?),
                // `S` and `B` have no data; what follows an unknown letter is not needed.
                _ => break,
            }
        }
    }
    Ok(cie)
}

/// Skips a pointer encoded as `encoding` says.
fn skip_pointer(bytes: &mut Bytes, encoding: DwEhPe, address_size: u8) -> gimli::Result<()> {
    match encoding.format() {
        constants::DW_EH_PE_absptr => bytes.skip(usize::from(address_size)),
        constants::DW_EH_PE_uleb128 | constants::DW_EH_PE_sleb128 => bytes.skip_leb128(),
        constants::DW_EH_PE_udata2 | constants::DW_EH_PE_sdata2 => bytes.skip(2),
        constants::DW_EH_PE_udata4 | constants::DW_EH_PE_sdata4 => bytes.skip(4),
        constants::DW_EH_PE_udata8 | constants::DW_EH_PE_sdata8 => bytes.skip(8),
        _ => Err(gimli::Error::UnknownPointerEncoding(encoding)),
    }
}

/// Skips the operands of a call frame instruction whose first byte was `operation`.
fn skip_operands(entry: &mut Bytes, operation: DwCfa, cie: Cie) -> gimli::Result<()> {
    // The operations with a register or a delta in their low six bits.
    match operation.0 & 0xc0 {
        0x40 | 0xc0 => return Ok(()),
        0x80 => return entry.skip_leb128(),
        _ => {}
    }
    let block = |entry: &mut Bytes| {
        let length = entry.read_uleb128()?;
        entry.skip(to_usize(length)?)
    };
    match operation {
        constants::DW_CFA_nop
        | constants::DW_CFA_remember_state
        | constants::DW_CFA_restore_state
        | constants::DW_CFA_AARCH64_negate_ra_state => Ok(()),
        constants::DW_CFA_set_loc => skip_pointer(entry, cie.encoding, cie.address_size),
        constants::DW_CFA_advance_loc1 => entry.skip(1),
        constants::DW_CFA_advance_loc2 => entry.skip(2),
        constants::DW_CFA_advance_loc4 => entry.skip(4),
        constants::DW_CFA_restore_extended
        | constants::DW_CFA_undefined
        | constants::DW_CFA_same_value
        | constants::DW_CFA_def_cfa_register
        | constants::DW_CFA_def_cfa_offset
        | constants::DW_CFA_def_cfa_offset_sf
        | constants::DW_CFA_GNU_args_size => entry.skip_leb128(),
        constants::DW_CFA_offset_extended
        | constants::DW_CFA_offset_extended_sf
        | constants::DW_CFA_register
        | constants::DW_CFA_def_cfa
        | constants::DW_CFA_def_cfa_sf
        | constants::DW_CFA_val_offset
        | constants::DW_CFA_val_offset_sf
        | constants::DW_CFA_GNU_negative_offset_extended => {
            entry.skip_leb128()?;
            entry.skip_leb128()
        }
        constants::DW_CFA_def_cfa_expression => block(entry),
        constants::DW_CFA_expression | constants::DW_CFA_val_expression => {
            entry.skip_leb128()?;
            block(entry)
        }
        _ => Err(gimli::Error::UnknownCallFrameInstruction(operation)),
    }
}

fn to_usize(length: u64) -> gimli::Result<usize> {
    usize::try_from(length).map_err(|_| gimli::Error::UnsupportedOffset)
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use framehop::{
        ExplicitModuleSectionInfo, Module, Unwinder as _,
        aarch64::{CacheAarch64, PtrAuthMask, UnwindRegsAarch64, UnwinderAarch64},
    };

    use super::*;

    /// Debian 13's arm64 glibc 2.41 (`libc.so.6`, build-id dfbd3ffa…): its `.eh_frame`'s CIE and
    /// `pthread_mutex_lock`'s FDE, whose code signs the return address (`paciasp`) at +0 and
    /// saves it at +4. The FDE was 0xcbc0 into the section; here it follows the CIE, so its CIE
    /// pointer (0xcbc4 there) is 0x18.
    const CIE_AND_FDE: [u8; 0x64] = [
        0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x7a, 0x52, 0x00, 0x04, 0x78, 0x1e,
        0x01, 0x1b, 0x0c, 0x1f, 0x00, 0x4c, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00, 0x98, 0xc8,
        0xf0, 0xff, 0x00, 0x03, 0x00, 0x00, 0x00, 0x41, 0x2d, 0x41, 0x0e, 0x30, 0x9d, 0x06, 0x9e,
        0x05, 0x42, 0x95, 0x02, 0x96, 0x01, 0x47, 0x94, 0x03, 0x93, 0x04, 0x54, 0x0a, 0xd4, 0xd3,
        0x42, 0xde, 0xdd, 0xd5, 0xd6, 0x0e, 0x00, 0x41, 0x2d, 0x41, 0x0b, 0x48, 0xd3, 0xd4, 0x42,
        0xde, 0xdd, 0xd5, 0xd6, 0x0e, 0x00, 0x41, 0x2d, 0x41, 0x0e, 0x30, 0x93, 0x04, 0x94, 0x03,
        0x95, 0x02, 0x96, 0x01, 0x9d, 0x06, 0x9e, 0x05, 0x2d, 0x00,
    ];
    /// Where the bytes are in the file's addresses: the FDE where it was (0x1701c8 + 0xcbc0),
    /// which its pc-relative first address needs.
    const CFI_ADDRESS: u64 = 0x0017_01c8 + 0xcbc0 - 0x14;
    const TEXT: Range<u64> = 0x0002_19c0..0x0014_76d4;
    /// Where a guest's traced program had the library.
    const BASE: u64 = 0xffff_adde_0000;
    /// `pthread_mutex_lock`'s `bl __lll_lock_wait`, where --contended probes its wait: the
    /// prologue has run, and `x30` still holds the return of the `bl` at +0x4c.
    const WAIT_CALL: u64 = BASE + 0x8972c;
    const STALE_LR: u64 = BASE + 0x89678;
    /// The caller's return address (the workload's `alpha_5`, in the guest), as the prologue
    /// saved it: signed, in the bits above the 48-bit address.
    const RETURN_ADDRESS: u64 = 0xaaaa_b7fa_0f44;
    const SIGNED_RETURN_ADDRESS: u64 = 0x0035_0000_0000_0000 | RETURN_ADDRESS;

    /// The first two frames framehop unwinds from the wait's call, through `eh_frame`.
    fn first_two_frames(eh_frame: Vec<u8>) -> Vec<u64> {
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: Some(TEXT),
            eh_frame_svma: Some(CFI_ADDRESS..CFI_ADDRESS + CIE_AND_FDE.len() as u64),
            eh_frame: Some(eh_frame),
            ..ExplicitModuleSectionInfo::default()
        };
        let mut unwinder = UnwinderAarch64::new();
        unwinder.add_module(Module::new(
            "libc.so.6".to_owned(),
            BASE + TEXT.start..BASE + TEXT.end,
            BASE,
            info,
        ));
        // The frame `stp x29, x30, [sp, #-0x30]!; mov x29, sp` made: sp and fp at its start.
        let sp = 0xffff_f000_0000;
        let mut stack = [0u64; 6];
        stack[0] = sp + 0x100;
        stack[1] = SIGNED_RETURN_ADDRESS;
        let regs = UnwindRegsAarch64::new_with_ptr_auth_mask(
            PtrAuthMask(u64::MAX >> 16),
            STALE_LR,
            sp,
            sp,
        );
        let mut read_stack = |address: u64| {
            let slot = usize::try_from(address.checked_sub(sp).ok_or(())? / 8).map_err(|_| ())?;
            stack.get(slot).copied().ok_or(())
        };
        let mut cache = CacheAarch64::new();
        let mut frames = unwinder.iter_frames(WAIT_CALL, regs, &mut cache, &mut read_stack);
        (0..2)
            .map(|_| frames.next().unwrap().unwrap().address())
            .collect()
    }

    /// A function that signs its return address is unwound by its CFI once the signing
    /// operations are no-ops: its caller is the return address its prologue saved, unsigned.
    /// As the library has them, framehop reads no CFI there and takes the link register the
    /// function's own last call left.
    #[test]
    fn a_signing_functions_caller_is_the_return_address_its_cfi_says_it_saved() {
        let readable = without_return_signing(&CIE_AND_FDE, Section::EhFrame);
        // Its four signing operations, and nothing else.
        let changed: Vec<usize> = (0..CIE_AND_FDE.len())
            .filter(|&at| readable[at] != CIE_AND_FDE[at])
            .collect();
        assert_eq!(changed, [0x26, 0x44, 0x52, 0x62]);
        assert_eq!(first_two_frames(readable), [WAIT_CALL, RETURN_ADDRESS]);
        assert_eq!(
            first_two_frames(CIE_AND_FDE.to_vec()),
            [WAIT_CALL, STALE_LR]
        );
    }
}
