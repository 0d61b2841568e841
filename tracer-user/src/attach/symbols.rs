//! ELF symbol resolution: where each traced function starts, as a file offset for uprobes.
//!
//! Every definition of a name counts, whatever its version: `pthread_cond_wait@GLIBC_2.2.5` and
//! `pthread_cond_wait@@GLIBC_2.3.2` are different code and both are traced, each address once.

use std::collections::{BTreeMap, BTreeSet};

use object::{Object, ObjectSegment, ObjectSymbol};

/// A function's code in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Function {
    /// File offset of its first instruction.
    pub offset: u64,
    /// Its virtual address in the ELF file (before the load bias).
    pub address: u64,
    /// Its size in bytes, from the symbol table (0 if the symbol does not say).
    pub size: u64,
}

/// The functions an ELF file defines, by name.
#[derive(Debug, Default)]
pub struct FunctionOffsets {
    by_name: BTreeMap<String, BTreeSet<Function>>,
    /// The virtual address of the segment that starts the file: the load bias is where that
    /// segment is mapped minus this.
    pub first_segment_address: u64,
}

impl FunctionOffsets {
    /// Reads `.dynsym` and `.symtab` for the given names; fails if `elf` is not an ELF file.
    pub fn parse(elf: &[u8], names: &[&str]) -> object::Result<Self> {
        let file = object::File::parse(elf)?;
        let segments: Vec<(u64, u64, u64)> = file
            .segments()
            .map(|s| (s.address(), s.size(), s.file_range().0))
            .collect();
        let first_segment_address = segments
            .iter()
            .find(|(_, _, file_start)| *file_start == 0)
            .map_or(0, |s| s.0);
        let mut by_name: BTreeMap<String, BTreeSet<Function>> = BTreeMap::new();
        for symbol in file.dynamic_symbols().chain(file.symbols()) {
            if !symbol.is_definition() {
                continue;
            }
            let Ok(name) = symbol.name() else { continue };
            if !names.contains(&name) {
                continue;
            }
            let address = symbol.address();
            let offset = segments
                .iter()
                .find(|(start, size, _)| (*start..start + size).contains(&address))
                .map(|(start, _, file_start)| address - start + file_start);
            if let Some(offset) = offset {
                let function = Function {
                    offset,
                    address,
                    size: symbol.size(),
                };
                let versions = by_name.entry(name.to_owned()).or_default();
                // .dynsym and .symtab both list most functions: one entry per address.
                if !versions.iter().any(|f| f.offset == offset) {
                    versions.insert(function);
                }
            }
        }
        Ok(FunctionOffsets {
            by_name,
            first_segment_address,
        })
    }

    /// Every distinct definition of `name`, one per address (empty if it is not defined).
    pub fn functions(&self, name: &str) -> impl Iterator<Item = Function> + '_ {
        self.by_name.get(name).into_iter().flatten().copied()
    }

    /// Where every function read starts (file offsets).
    pub fn starts(&self) -> std::collections::HashSet<u64> {
        self.by_name.values().flatten().map(|f| f.offset).collect()
    }

    /// The function read that starts at file offset `offset`, if any.
    pub fn at_offset(&self, offset: u64) -> Option<Function> {
        self.by_name
            .values()
            .flatten()
            .find(|function| function.offset == offset)
            .copied()
    }

    pub fn defines(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Keeps only the functions whose names `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.by_name.retain(|name, _| keep(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C library this test runs against: both versions of pthread_cond_wait are found.
    #[test]
    fn finds_every_version_of_pthread_cond_wait_in_the_system_libc() {
        let path = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("a glibc libc.so.6");
        let data = std::fs::read(path).unwrap();
        let found =
            FunctionOffsets::parse(&data, &["pthread_cond_wait", "pthread_mutex_lock"]).unwrap();
        assert_eq!(
            found.functions("pthread_cond_wait").count(),
            2,
            "old and new versions"
        );
        let lock: Vec<Function> = found.functions("pthread_mutex_lock").collect();
        assert_eq!(lock.len(), 1);
        assert!(lock[0].size > 0);
        assert!(!found.defines("no_such_function"));
    }
}
