//! `cargo xtask layers`: the rooms of the tracer (`tracer-user/src`'s top-level modules), which
//! imports which, and a check that every import points down the layers that CONTRIBUTING.md's
//! "The code, by layer" draws. `cargo xtask test` runs the check, so that an arrow back up or a
//! circle fails the suite instead of creeping in.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, bail};
use syn::visit::{self, Visit};

use crate::shell::workspace_root;

/// The layers, from the edge down: a room imports only rooms of lower layers. A record is born
/// in BPF, crosses in `capture`, is written by `sinks`; `attach` puts the probes, `session`
/// runs a trace from a `Config`, `readers` read logs back beside it, and `cli` is the command
/// line. `symbolize` stands on `sinks`, whose safe file creation debuginfod's cache uses. The
/// ground floor holds small pieces that several rooms share; below it, `sys`, every
/// system call the tracer makes itself.
const LAYERS: &[(&str, &[&str])] = &[
    ("the command line", &["cli"]),
    ("commands", &["session", "readers", "manual", "event_list"]),
    ("the controller", &["control"]),
    ("where probes go", &["attach"]),
    ("how records cross", &["capture"]),
    ("where a call was made from", &["place"]),
    ("what an address is", &["symbolize"]),
    ("where events go", &["sinks"]),
    (
        "shared pieces",
        &["signals", "say", "error", "sudo", "priority", "http"],
    ),
    ("system calls", &["sys"]),
];

/// Prints which room imports which, by layer; fails if one imports a room not below it.
pub fn run() -> Result<()> {
    let imports = room_imports(&workspace_root().join("tracer-user/src"))?;
    for (name, rooms) in LAYERS {
        println!("{name}:");
        for room in *rooms {
            let used: Vec<&str> = imports
                .get(*room)
                .map(|set| set.iter().map(String::as_str).collect())
                .unwrap_or_default();
            println!("  {room} -> {}", used.join(", "));
        }
    }
    check(&imports)
}

/// Fails, naming each, on an import from a room to one not below it, or of a room no layer
/// names.
pub fn check(imports: &BTreeMap<String, BTreeSet<String>>) -> Result<()> {
    let layer_of = |room: &str| LAYERS.iter().position(|(_, rooms)| rooms.contains(&room));
    let mut wrong = Vec::new();
    for (room, used) in imports {
        let Some(from) = layer_of(room) else {
            wrong.push(format!("{room} is in no layer (xtask/src/layers.rs)"));
            continue;
        };
        for target in used {
            match layer_of(target) {
                Some(to) if to > from => {}
                Some(_) => wrong.push(format!("{room} imports {target}, which is not below it")),
                None => wrong.push(format!("{target} is in no layer (xtask/src/layers.rs)")),
            }
        }
    }
    if !wrong.is_empty() {
        bail!("the rooms' imports break the layers: {}", wrong.join("; "));
    }
    Ok(())
}

/// For each room (a top-level module of `src`, lib.rs and main.rs aside), the other rooms its
/// files name through `crate::`.
pub fn room_imports(src: &Path) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(src)? {
        let relative = file.strip_prefix(src)?;
        let first = relative
            .components()
            .next()
            .context("a file under src")?
            .as_os_str()
            .to_string_lossy();
        let room = first.trim_end_matches(".rs").to_owned();
        if room == "lib" || room == "main" {
            continue;
        }
        let text = fs::read_to_string(&file)?;
        let parsed =
            syn::parse_file(&text).with_context(|| format!("cannot parse {}", file.display()))?;
        let mut names = CrateNames::default();
        names.visit_file(&parsed);
        let used = imports.entry(room.clone()).or_default();
        used.extend(names.0.into_iter().filter(|name| *name != room));
    }
    Ok(imports)
}

fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            files.extend(rust_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(files)
}

/// The first name after `crate::` in every path and `use` of a file.
#[derive(Default)]
struct CrateNames(BTreeSet<String>);

impl<'a> Visit<'a> for CrateNames {
    fn visit_path(&mut self, path: &'a syn::Path) {
        let mut segments = path.segments.iter();
        if let (Some(first), Some(second)) = (segments.next(), segments.next())
            && first.ident == "crate"
        {
            self.0.insert(second.ident.to_string());
        }
        visit::visit_path(self, path);
    }

    fn visit_item_use(&mut self, item: &'a syn::ItemUse) {
        if let syn::UseTree::Path(path) = &item.tree
            && path.ident == "crate"
        {
            add_roots(&path.tree, &mut self.0);
        }
    }
}

/// The first names of a use tree below `crate::`.
fn add_roots(tree: &syn::UseTree, names: &mut BTreeSet<String>) {
    match tree {
        syn::UseTree::Path(path) => {
            names.insert(path.ident.to_string());
        }
        syn::UseTree::Name(name) => {
            names.insert(name.ident.to_string());
        }
        syn::UseTree::Rename(rename) => {
            names.insert(rename.ident.to_string());
        }
        syn::UseTree::Group(group) => group.items.iter().for_each(|t| add_roots(t, names)),
        syn::UseTree::Glob(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imports(pairs: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        pairs
            .iter()
            .map(|(room, used)| {
                let used = used.iter().map(|u| (*u).to_owned()).collect();
                ((*room).to_owned(), used)
            })
            .collect()
    }

    #[test]
    fn an_import_back_up_or_sideways_is_refused_and_named() {
        assert!(check(&imports(&[("session", &["capture", "sinks"])])).is_ok());
        let up = check(&imports(&[("capture", &["attach"])])).unwrap_err();
        assert!(up.to_string().contains("capture imports attach"), "{up}");
        let sideways = check(&imports(&[("session", &["readers"])])).unwrap_err();
        assert!(
            sideways.to_string().contains("session imports readers"),
            "{sideways}"
        );
        let unknown = check(&imports(&[("newroom", &[])])).unwrap_err();
        assert!(
            unknown.to_string().contains("newroom is in no layer"),
            "{unknown}"
        );
    }

    #[test]
    fn names_after_crate_are_found_in_uses_and_paths() {
        let file = syn::parse_file(
            "use crate::{a::b, c, d::{e, f}}; use crate::g as h; \
             fn x() { crate::k::now(); super::y(); }",
        )
        .unwrap();
        let mut names = CrateNames::default();
        names.visit_file(&file);
        let found: Vec<&str> = names.0.iter().map(String::as_str).collect();
        assert_eq!(found, ["a", "c", "d", "g", "k"]);
    }

    #[test]
    fn the_tracer_keeps_to_its_layers() {
        let imports = room_imports(&workspace_root().join("tracer-user/src")).unwrap();
        assert!(imports.contains_key("session") && imports.contains_key("capture"));
        check(&imports).unwrap();
    }
}
