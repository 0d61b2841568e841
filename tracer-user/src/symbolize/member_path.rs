//! The path to the member of a global or static variable that holds an address, from the
//! DWARF that describes the variable's type: `stats.update_lock`, `pool.shards[3].mutex`. A
//! lock inside a global object is named so; its symbol and offset (`stats+0x18`) say less.
//! The DWARF is another program's: whatever does not parse, or loops, names nothing.

use std::{collections::HashMap, fmt::Write as _, io::Read as _};

use gimli::{
    AttributeValue, DebugInfoOffset, DebuggingInformationEntry, EndianSlice, LittleEndian,
    Reader as _, UnitOffset, constants,
};
use object::{CompressionFormat, Object, ObjectSection};

type Slice<'a> = EndianSlice<'a, LittleEndian>;
type Dwarf<'a> = gimli::Dwarf<Slice<'a>>;
type Unit<'a> = gimli::Unit<Slice<'a>>;
type Entry<'a> = DebuggingInformationEntry<Slice<'a>>;

/// How many types a path goes through at most: real programs nest far less deep, and a
/// hostile file's types may refer to each other in a circle.
const MAX_DEPTH: usize = 32;

/// Where a path stops, though its type has members: the objects that are locks themselves (a
/// `pthread_mutex_t` is a union of glibc's own).
const LOCK_TYPES: [&str; 8] = [
    "pthread_mutex_t",
    "pthread_rwlock_t",
    "pthread_spinlock_t",
    "pthread_cond_t",
    "pthread_barrier_t",
    "sem_t",
    "mtx_t",
    "cnd_t",
];

/// The most bytes of DWARF kept of one file, decompressed: a hostile file's headers may claim
/// any size.
const MAX_DWARF_BYTES: u64 = 1 << 30;

/// The DWARF sections a path is read from (a unit is not read without its line program); the
/// others (locations, frames, ranges, macros) are not kept.
const SECTIONS_READ: [gimli::SectionId; 8] = [
    gimli::SectionId::DebugAbbrev,
    gimli::SectionId::DebugInfo,
    gimli::SectionId::DebugLine,
    gimli::SectionId::DebugTypes,
    gimli::SectionId::DebugStr,
    gimli::SectionId::DebugStrOffsets,
    gimli::SectionId::DebugLineStr,
    gimli::SectionId::DebugAddr,
];

/// By a variable's ELF virtual address: its unit and the offset of its type there.
type Variables = HashMap<u64, (DebugInfoOffset<usize>, UnitOffset<usize>)>;

/// The variables an ELF file's DWARF describes, by their address, with their types: read
/// once, for as many names as are asked of it.
pub struct MemberPaths {
    /// The DWARF sections, decompressed once.
    sections: gimli::DwarfSections<Vec<u8>>,
    variables: Variables,
}

impl MemberPaths {
    /// The variables of the ELF file `elf_bytes`, which has DWARF (a module, or its separate
    /// debug file); none if it is no little-endian ELF file or has no DWARF.
    pub fn read(elf_bytes: &[u8]) -> MemberPaths {
        let sections = dwarf_sections(elf_bytes).unwrap_or_default();
        MemberPaths {
            variables: variables_of(&sections),
            sections,
        }
    }

    /// The path to the byte `offset` into variable `name`, which starts at `start` (its ELF
    /// virtual address): `name.member[index]...`, as far as the DWARF describes it; none where
    /// it does not describe the variable.
    pub fn path(&self, name: &str, start: u64, offset: u64) -> Option<String> {
        let &(unit_at, type_at) = self.variables.get(&start)?;
        let dwarf = self
            .sections
            .borrow(|data| EndianSlice::new(data, LittleEndian));
        let header = dwarf.debug_info.header_from_offset(unit_at).ok()?;
        let unit = dwarf.unit(header).ok()?;
        let mut path = name.to_owned();
        descend(&dwarf, &unit, type_at, offset, &mut path);
        Some(path)
    }
}

fn dwarf_sections(elf_bytes: &[u8]) -> Option<gimli::DwarfSections<Vec<u8>>> {
    let elf = object::File::parse(elf_bytes).ok()?;
    if !elf.is_little_endian() {
        return None;
    }
    let mut budget = MAX_DWARF_BYTES;
    let load = |id: gimli::SectionId| -> Result<Vec<u8>, ()> {
        Ok(elf
            .section_by_name(id.name())
            .filter(|_| SECTIONS_READ.contains(&id))
            .and_then(|section| section_bytes(&section, &mut budget))
            .unwrap_or_default())
    };
    gimli::DwarfSections::load(load).ok()
}

/// A section's bytes, decompressed where the file compresses them with zlib, as Debian's debug
/// packages do (`objcopy --compress-debug-sections`), taken from `budget`; none where they
/// cannot be read, or would outgrow it.
fn section_bytes(section: &object::Section<'_, '_>, budget: &mut u64) -> Option<Vec<u8>> {
    let compressed = section.compressed_data().ok()?;
    let bytes = match compressed.format {
        CompressionFormat::None => compressed.data.to_vec(),
        CompressionFormat::Zlib => {
            let mut bytes = Vec::new();
            flate2::read::ZlibDecoder::new(compressed.data)
                .take(compressed.uncompressed_size.min(*budget))
                .read_to_end(&mut bytes)
                .ok()?;
            bytes
        }
        _ => return None,
    };
    *budget = budget.checked_sub(bytes.len() as u64)?;
    Some(bytes)
}

/// Every variable with a fixed address (`DW_OP_addr`) and a type, in every unit.
fn variables_of(sections: &gimli::DwarfSections<Vec<u8>>) -> Variables {
    let dwarf = sections.borrow(|data| EndianSlice::new(data, LittleEndian));
    let mut variables = HashMap::new();
    let mut headers = dwarf.units();
    while let Ok(Some(header)) = headers.next() {
        let Some(unit_at) = header.offset().to_debug_info_offset(&header) else {
            continue;
        };
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let mut entries = unit.entries();
        while let Ok(Some(entry)) = entries.next_dfs() {
            if entry.tag() != constants::DW_TAG_variable {
                continue;
            }
            let Some(address) = fixed_address(entry, unit.encoding().address_size) else {
                continue;
            };
            if let Some(type_at) = variable_type(&unit, entry) {
                variables.insert(address, (unit_at, type_at));
            }
        }
    }
    variables
}

/// The address a `DW_AT_location` of one `DW_OP_addr` gives.
fn fixed_address(entry: &Entry<'_>, address_size: u8) -> Option<u64> {
    let AttributeValue::Exprloc(expression) = entry.attr_value(constants::DW_AT_location)? else {
        return None;
    };
    let mut bytes = expression.0;
    (bytes.read_u8().ok()? == constants::DW_OP_addr.0).then_some(())?;
    bytes.read_address(address_size).ok()
}

/// A variable's type: its own, or that of the declaration it defines (a C++ static member).
fn variable_type(unit: &Unit<'_>, entry: &Entry<'_>) -> Option<UnitOffset<usize>> {
    type_of(entry).or_else(|| {
        let AttributeValue::UnitRef(declaration) =
            entry.attr_value(constants::DW_AT_specification)?
        else {
            return None;
        };
        type_of(&unit.entry(declaration).ok()?)
    })
}

fn type_of(entry: &Entry<'_>) -> Option<UnitOffset<usize>> {
    match entry.attr_value(constants::DW_AT_type)? {
        AttributeValue::UnitRef(offset) => Some(offset),
        _ => None,
    }
}

fn name_of(dwarf: &Dwarf<'_>, unit: &Unit<'_>, entry: &Entry<'_>) -> Option<String> {
    let name = entry.attr_value(constants::DW_AT_name)?;
    let name = dwarf.attr_string(unit, name).ok()?;
    Some(name.to_string_lossy().into_owned())
}

/// Adds to `path` the members and elements of type `type_at` that hold the byte `offset`
/// into it, down to a lock's own type or a scalar; a byte in none (padding) adds its offset.
fn descend(
    dwarf: &Dwarf<'_>,
    unit: &Unit<'_>,
    type_at: UnitOffset<usize>,
    offset: u64,
    path: &mut String,
) {
    let (mut type_at, mut offset) = (type_at, offset);
    for _ in 0..MAX_DEPTH {
        let Ok(entry) = unit.entry(type_at) else {
            break;
        };
        let tag = entry.tag();
        let named = matches!(
            tag,
            constants::DW_TAG_typedef
                | constants::DW_TAG_structure_type
                | constants::DW_TAG_class_type
                | constants::DW_TAG_union_type
        );
        let a_lock = named
            && name_of(dwarf, unit, &entry).is_some_and(|name| LOCK_TYPES.contains(&name.as_str()));
        let next = match tag {
            _ if a_lock => None,
            constants::DW_TAG_typedef
            | constants::DW_TAG_const_type
            | constants::DW_TAG_volatile_type
            | constants::DW_TAG_atomic_type
            | constants::DW_TAG_restrict_type => type_of(&entry).map(|inner| (inner, offset)),
            constants::DW_TAG_structure_type
            | constants::DW_TAG_class_type
            | constants::DW_TAG_union_type => member_at(dwarf, unit, type_at, offset, path),
            constants::DW_TAG_array_type => element_at(unit, &entry, type_at, offset, path),
            _ => None,
        };
        match next {
            Some((inner, inner_offset)) => (type_at, offset) = (inner, inner_offset),
            None => break,
        }
    }
    if offset != 0 {
        let _ = write!(path, "+{offset:#x}");
    }
}

/// The member of the structure or union at `type_at` that holds byte `offset`, added to
/// `path` (an anonymous one adds nothing): its type and the offset into it.
fn member_at(
    dwarf: &Dwarf<'_>,
    unit: &Unit<'_>,
    type_at: UnitOffset<usize>,
    offset: u64,
    path: &mut String,
) -> Option<(UnitOffset<usize>, u64)> {
    let (member, inner, start) = children(unit, type_at, constants::DW_TAG_member)?
        .into_iter()
        .find_map(|member| {
            let start = member
                .attr_value(constants::DW_AT_data_member_location)
                .and_then(|at| at.udata_value())
                .unwrap_or(0);
            let inner = type_of(&member)?;
            let size = size_of(unit, inner, 0).unwrap_or(0).max(1);
            (start..start.saturating_add(size))
                .contains(&offset)
                .then_some((member, inner, start))
        })?;
    if let Some(name) = name_of(dwarf, unit, &member) {
        path.push('.');
        path.push_str(&name);
    }
    Some((inner, offset - start))
}

/// The children of the entry at `at` that have tag `tag`.
fn children<'a>(
    unit: &Unit<'a>,
    at: UnitOffset<usize>,
    tag: constants::DwTag,
) -> Option<Vec<Entry<'a>>> {
    let mut tree = unit.entries_tree(Some(at)).ok()?;
    let mut nodes = tree.root().ok()?.children();
    let mut found = Vec::new();
    while let Ok(Some(node)) = nodes.next() {
        if node.entry().tag() == tag {
            found.push(node.entry().clone());
        }
    }
    Some(found)
}

/// The element of the array at `type_at` (`array`) that holds byte `offset`, its index
/// (`[i]`, `[i][j]`) added to `path`: its type and the offset into it.
fn element_at(
    unit: &Unit<'_>,
    array: &Entry<'_>,
    type_at: UnitOffset<usize>,
    offset: u64,
    path: &mut String,
) -> Option<(UnitOffset<usize>, u64)> {
    let element = type_of(array)?;
    let element_size = size_of(unit, element, 0)?;
    let lengths = dimensions(unit, type_at)?;
    let mut offset = offset;
    for (i, _) in lengths.iter().enumerate() {
        let stride = lengths[i + 1..]
            .iter()
            .try_fold(element_size, |size, length| size.checked_mul(*length))?;
        if stride == 0 {
            return None;
        }
        let _ = write!(path, "[{}]", offset / stride);
        offset %= stride;
    }
    Some((element, offset))
}

/// The lengths of each dimension of the array at `type_at`.
fn dimensions(unit: &Unit<'_>, type_at: UnitOffset<usize>) -> Option<Vec<u64>> {
    let lengths = children(unit, type_at, constants::DW_TAG_subrange_type)?
        .iter()
        .map(|range| {
            let count = range
                .attr_value(constants::DW_AT_count)
                .and_then(|count| count.udata_value());
            let upper = range
                .attr_value(constants::DW_AT_upper_bound)
                .and_then(|upper| upper.udata_value())
                .map(|upper| upper.saturating_add(1));
            count.or(upper)
        })
        .collect::<Option<Vec<u64>>>()?;
    (!lengths.is_empty()).then_some(lengths)
}

/// The size in bytes of the type at `type_at`.
fn size_of(unit: &Unit<'_>, type_at: UnitOffset<usize>, depth: usize) -> Option<u64> {
    if depth > MAX_DEPTH {
        return None;
    }
    let entry = unit.entry(type_at).ok()?;
    if let Some(size) = entry
        .attr_value(constants::DW_AT_byte_size)
        .and_then(|size| size.udata_value())
    {
        return Some(size);
    }
    let inner = size_of(unit, type_of(&entry)?, depth + 1)?;
    match entry.tag() {
        constants::DW_TAG_array_type => dimensions(unit, type_at)?
            .iter()
            .try_fold(inner, |size, length| size.checked_mul(*length)),
        _ => Some(inner),
    }
}
