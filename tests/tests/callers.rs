//! Callers and locks named where they are, never by a bare randomized address: a workload
//! built as releases are (-O2 -fomit-frame-pointer, static functions, tests/workloads/
//! static_callers.c) is reported as built (function+offset, file:line, inlined functions, the
//! global lock by its symbol), stripped (module+offset and build-id, the offsets those of its
//! symbols), and stripped with its debug file under a debug directory (file:line again). A
//! caller inside libc is placed by Debian's libc6-dbg.

use std::{fs, path::Path, process::Command};

use object::{Object, ObjectSegment, ObjectSymbol};
use serde_json::{Value, json};
use thrtrace_tests::{
    LIBC, TempDir, bpf_available, build_id_of, debug_file_path, field, line_of, prerequisite,
    report_json, report_lock, run_tracer, succeeded, workload,
};

const ROUNDS: u64 = 3;
const SOURCE: &str = "static_callers.c";

/// What a workload is, read from its ELF file.
struct Binary {
    bytes: Vec<u8>,
}

impl Binary {
    fn read(path: &Path) -> Binary {
        Binary {
            bytes: fs::read(path).unwrap(),
        }
    }

    fn elf(&self) -> object::File<'_> {
        object::File::parse(&*self.bytes).unwrap()
    }

    fn build_id(&self) -> String {
        build_id_of(&self.elf())
    }

    /// The file offset of a virtual address in a loaded segment.
    fn file_offset(&self, address: u64) -> u64 {
        let elf = self.elf();
        let segment = elf
            .segments()
            .find(|s| (s.address()..s.address() + s.file_range().1).contains(&address))
            .expect("a loaded segment");
        address - segment.address() + segment.file_range().0
    }

    /// The virtual address of a file offset in a loaded segment.
    fn virtual_address(&self, offset: u64) -> u64 {
        let elf = self.elf();
        let segment = elf
            .segments()
            .find(|s| {
                let (start, size) = s.file_range();
                (start..start + size).contains(&offset)
            })
            .expect("a loaded segment");
        offset - segment.file_range().0 + segment.address()
    }

    /// The file offsets a function's code spans.
    fn function(&self, name: &str) -> std::ops::Range<u64> {
        let elf = self.elf();
        let symbol = elf
            .symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("no {name}"));
        let start = self.file_offset(symbol.address());
        start..start + symbol.size()
    }
}

/// The workload, at `program`, traced into `dir/LOG`; the addresses it printed.
fn trace(dir: &TempDir, program: &Path, log: &str) -> (String, String) {
    let run = run_tracer(
        dir.path(),
        &[
            "--events",
            "mutex:rmutex",
            "--log",
            log,
            "--",
            program.to_str().unwrap(),
            &ROUNDS.to_string(),
        ],
    );
    assert!(run.status.success(), "{run:?}");
    let address = |key: &str| format!("{:#x}", field::<u64>(&run.stdout, key));
    (address("global"), address("heap"))
}

/// The one caller of the lock at `address`.
fn caller<'a>(report: &'a Value, address: &str) -> &'a Value {
    let lock = report_lock(report, &address.into());
    let callers = lock["callers"].as_array().unwrap();
    assert_eq!(callers.len(), 1, "{lock:#}");
    assert_eq!(callers[0]["count"], ROUNDS, "{lock:#}");
    &callers[0]
}

fn hex(value: &Value) -> u64 {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("{value} is no hex string"));
    u64::from_str_radix(text.strip_prefix("0x").unwrap(), 16).unwrap()
}

/// The text report of `args`, run in `dir`.
fn report_text(dir: &TempDir, args: &[&str]) -> String {
    let mut all = vec!["report", "--top", "100"];
    all.extend_from_slice(args);
    let run = run_tracer(dir.path(), &all);
    assert!(run.status.success(), "{run:?}");
    run.stdout
}

#[test]
fn callers_are_placed_by_module_offset_and_build_id_and_named_from_debug_information() {
    if !bpf_available("callers_placed") {
        return;
    }
    let dir = TempDir::new("callers");
    let built = workload("static_callers");
    let binary = Binary::read(&built);
    let build_id = binary.build_id();
    let (inlined_line, take_line, heap_line) = (
        line_of("static_callers", "INLINED"),
        line_of("static_callers", "TAKE"),
        line_of("static_callers", "HEAP"),
    );

    // As built: functions with their offsets, lines, the function inlined, the global's name.
    let (global, heap) = trace(&dir, &built, "built.ptl");
    let report = report_json(&dir, &["built.ptl"]);
    assert_eq!(
        report_lock(&report, &global.clone().into())["symbol"],
        "global_lock"
    );
    assert_eq!(
        report_lock(&report, &heap.clone().into())["symbol"],
        Value::Null
    );
    let mut offsets = Vec::new();
    for (lock, function, line, inlined) in [
        (
            &global,
            "bump_global",
            inlined_line,
            json!([{"function": "take", "file": SOURCE, "line": take_line}]),
        ),
        (&heap, "bump_heap", heap_line, json!([])),
    ] {
        let at = caller(&report, lock);
        assert_eq!(at["module"], built.to_str().unwrap(), "{at:#}");
        assert_eq!(at["build_id"], build_id.as_str(), "{at:#}");
        assert_eq!(
            (&at["function"], &at["file"], &at["line"]),
            (&json!(function), &json!(SOURCE), &json!(line)),
            "{at:#}"
        );
        assert_eq!(at["inlined"], inlined, "{at:#}");
        // The return address of a call in the function, as its symbol places it.
        let offset = hex(&at["offset"]);
        let code = binary.function(function);
        assert_eq!(offset, code.start + hex(&at["function_offset"]), "{at:#}");
        assert!(code.contains(&offset), "{at:#}");
        assert_eq!(
            binary.bytes[offset as usize - 5],
            0xe8,
            "not after a call: {at:#}"
        );
        assert_eq!(hex(&at["address"]) & 0xfff, offset & 0xfff, "{at:#}");
        offsets.push(offset);
    }
    let text = report_text(&dir, &["built.ptl"]);
    for wanted in [
        format!(
            "    {SOURCE}:{inlined_line} (bump_global), inlined take ({SOURCE}:{take_line}): \
             {ROUNDS} calls"
        ),
        format!("    {SOURCE}:{heap_line} (bump_heap): {ROUNDS} calls"),
        "\nglobal_lock ".to_owned(),
        format!("\n{heap} "),
    ] {
        assert!(text.contains(&wanted), "{wanted:?} not in\n{text}");
    }

    // Stripped: no symbols, no lines, but the same module offsets and build-id.
    let stripped = dir.path().join("static_callers");
    succeeded(
        Command::new("strip")
            .args(["--strip-all", "-o"])
            .arg(&stripped)
            .arg(&built),
    );
    assert_eq!(Binary::read(&stripped).build_id(), build_id);
    let (global, heap) = trace(&dir, &stripped, "stripped.ptl");
    let report = report_json(&dir, &["stripped.ptl"]);
    assert_eq!(
        report_lock(&report, &global.clone().into())["symbol"],
        Value::Null
    );
    let text = report_text(&dir, &["stripped.ptl"]);
    for (lock, offset) in [(&global, offsets[0]), (&heap, offsets[1])] {
        let at = caller(&report, lock);
        assert_eq!(at["module"], stripped.to_str().unwrap(), "{at:#}");
        assert_eq!(at["build_id"], build_id.as_str(), "{at:#}");
        assert_eq!(hex(&at["offset"]), offset, "{at:#}");
        for unknown in ["function", "function_offset", "file", "line"] {
            assert_eq!(at[unknown], Value::Null, "{at:#}");
        }
        let wanted = format!(
            "    {}+{offset:#x} (build-id {build_id}): {ROUNDS} calls",
            stripped.display()
        );
        assert!(text.contains(&wanted), "{wanted:?} not in\n{text}");
    }

    // Its debug file where Debian's packages put theirs, under a directory of the test's own:
    // named by line again.
    let debug = dir.path().join("debug");
    let file = debug_file_path(&debug, &build_id);
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    succeeded(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&built)
            .arg(&file),
    );
    let report = report_json(&dir, &["--debug-dir", "debug", "stripped.ptl"]);
    assert_eq!(
        report_lock(&report, &global.clone().into())["symbol"],
        "global_lock"
    );
    for (lock, function, line, offset) in [
        (&global, "bump_global", inlined_line, offsets[0]),
        (&heap, "bump_heap", heap_line, offsets[1]),
    ] {
        let at = caller(&report, lock);
        assert_eq!(
            (&at["function"], &at["file"], &at["line"]),
            (&json!(function), &json!(SOURCE), &json!(line)),
            "{at:#}"
        );
        assert_eq!(hex(&at["offset"]), offset, "{at:#}");
    }
    assert_eq!(
        caller(&report, &global)["inlined"],
        json!([{"function": "take", "file": SOURCE, "line": take_line}])
    );
}

/// libc's own lock, taken inside libc (dl_iterate_phdr), is placed by its line from the debug
/// file Debian's libc6-dbg installs (`cargo xtask setup` installs it): the line addr2line
/// finds there.
#[test]
fn a_caller_inside_libc_is_placed_by_line_from_its_debug_package() {
    if !bpf_available("libc_caller") {
        return;
    }
    let libc = Binary::read(Path::new(LIBC));
    let debug_file = debug_file_path(Path::new("/usr/lib/debug"), &libc.build_id());
    if !prerequisite(
        "libc_caller",
        (!debug_file.exists())
            .then_some("libc6-dbg is not installed (cargo xtask setup installs it)"),
    ) {
        return;
    }
    let dir = TempDir::new("libc_caller");
    trace(&dir, &workload("static_callers"), "app.ptl");
    let report = report_json(&dir, &["app.ptl"]);
    let lock = report["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|lock| lock["callers"][0]["function"] == "dl_iterate_phdr")
        .unwrap_or_else(|| panic!("no lock taken in dl_iterate_phdr: {report:#}"));
    assert_eq!(lock["acquisitions"], ROUNDS, "{lock:#}");
    assert!(
        lock["symbol"]
            .as_str()
            .is_some_and(|s| s.starts_with("_rtld_global+")),
        "the dynamic loader's lock, in its data: {lock:#}"
    );
    let at = caller(&report, lock["address"].as_str().unwrap());
    assert_eq!(at["module"], LIBC, "{at:#}");
    assert_eq!(at["build_id"], libc.build_id().as_str(), "{at:#}");
    assert_eq!(at["file"], "dl-iteratephdr.c", "{at:#}");
    // addr2line -i: the innermost place first, the function's own line last.
    let call = libc.virtual_address(hex(&at["offset"])) - 1;
    let lines = succeeded(
        Command::new("addr2line")
            .arg("-i")
            .arg("-e")
            .arg(&debug_file)
            .arg(format!("{call:#x}")),
    );
    let lines = String::from_utf8(lines.stdout).unwrap();
    let outermost = lines.lines().last().unwrap();
    assert!(
        outermost.ends_with(&format!("dl-iteratephdr.c:{}", at["line"])),
        "{outermost} for {at:#}"
    );
}
