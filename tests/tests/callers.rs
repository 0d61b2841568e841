//! Callers and locks named where they are, never by a bare randomized address: a workload
//! built as releases are (-O2 -fomit-frame-pointer, static functions, tests/workloads/
//! static_callers.c) is reported as built (function+offset, file:line, inlined functions, the
//! global lock by its symbol), stripped (module+offset and build-id, the offsets those of its
//! symbols), and stripped with its debug file under a debug directory (file:line again). A
//! caller inside libc is placed by Debian's libc6-dbg.

use std::{
    fs,
    io::{Read, Write as _},
    net::{TcpListener, TcpStream},
    os::unix::fs::PermissionsExt as _,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use object::{Object, ObjectSegment, ObjectSymbol};
use serde_json::{Value, json};
use thrtrace_tests::{
    LIBC, TempDir, bpf_available, build_id_of, debug_file_path, field, line_of, prerequisite,
    report_futex_row, report_json, report_lock, run_tracer, succeeded, traced_run, tracer,
    workload,
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
    // The dynamic loader's lock, in its data, named by its member path from the debug file's
    // DWARF, whose sections Debian compresses.
    assert_eq!(
        lock["symbol"], "_rtld_global._dl_load_write_lock.mutex",
        "{lock:#}"
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

/// elfutils' debuginfod server, serving the debug files in a directory on a loopback port.
struct DebuginfodServer {
    process: Child,
    url: String,
}

impl DebuginfodServer {
    /// Serves `served`, its index in `dir`; returns once it serves the debug file of
    /// `build_id`.
    fn start(served: &Path, dir: &Path, build_id: &str) -> DebuginfodServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let process = Command::new("debuginfod")
            .arg("-F")
            .arg(served)
            .arg("-d")
            .arg(dir.join("debuginfod.sqlite"))
            .args(["-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("debuginfod (cargo xtask setup installs it)");
        let server = DebuginfodServer {
            process,
            url: format!("http://127.0.0.1:{port}"),
        };
        // It indexes the directory once started: a request before is answered 404.
        let request = format!("GET /buildid/{build_id}/debuginfo HTTP/1.0\r\n\r\n");
        let serves = || {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
            stream.write_all(request.as_bytes()).ok()?;
            let mut answer = String::new();
            let _ = stream.take(64).read_to_string(&mut answer);
            Some(answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"))
        };
        for _ in 0..300 {
            if serves() == Some(true) {
                return server;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "debuginfod did not serve {build_id} from {}",
            served.display()
        );
    }
}

impl Drop for DebuginfodServer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// `report --format json` of the log `app.ptl` in `dir` with `DEBUGINFOD_URLS` set to `urls`
/// and the cache in `cache`; its report and what it said. Fails after 20 s: a server that
/// does not answer costs a report a few seconds at most.
fn report_through_debuginfod(dir: &Path, urls: &str, cache: &Path) -> (Value, String) {
    let mut report = Command::new(tracer())
        .args(["report", "--format", "json", "--top", "100", "app.ptl"])
        .current_dir(dir)
        .env("DEBUGINFOD_URLS", urls)
        .env("DEBUGINFOD_CACHE_PATH", cache)
        .env_remove("DEBUGINFOD_TIMEOUT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read as it is written, so that a report longer than a pipe holds does not wait on it.
    let read_all = |mut from: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            from.read_to_string(&mut text).unwrap();
            text
        })
    };
    let stdout = read_all(Box::new(report.stdout.take().unwrap()));
    let stderr = read_all(Box::new(report.stderr.take().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = report.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = report.kill();
            panic!("the report through {urls} took more than 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let said = stderr.join().unwrap();
    assert!(status.success(), "{said}");
    (serde_json::from_str(&stdout.join().unwrap()).unwrap(), said)
}

/// The frames of a row's waiting and releasing stacks in `module`.
fn frames_in<'a>(row: &'a Value, module: &str) -> Vec<&'a Value> {
    ["waiting_stacks", "releasing_stacks"]
        .iter()
        .flat_map(|stacks| row[stacks].as_array().unwrap())
        .flat_map(|stack| stack["frames"].as_array().unwrap())
        .filter(|frame| frame["module"] == module)
        .collect()
}

/// A stripped workload's frames and locks are named from its debug file, which a debuginfod
/// server (elfutils' own, on a loopback port) serves by build-id: futex_uses.c, built -O2 -g
/// -fomit-frame-pointer, stripped, its debug file split off with its sections compressed (as
/// Debian's debug packages have theirs) and served. Every frame of the workload in the stacks
/// that waited on and released its futex lock has its function, file and line, and the locks
/// their member paths; the debug file is cached (mode 0600) and used the second time, when no
/// request reaches a server. A server that takes the request and never answers costs the
/// report one timeout, said in one line, and the frames keep their module, offset and
/// build-id.
#[test]
fn a_stripped_programs_frames_are_named_from_a_debuginfod_server() {
    if !bpf_available("debuginfod")
        || !prerequisite(
            "debuginfod",
            (!Command::new("debuginfod")
                .arg("--version")
                .output()
                .is_ok_and(|run| run.status.success()))
            .then_some("debuginfod is not installed (cargo xtask setup installs it)"),
        )
    {
        return;
    }
    let dir = TempDir::new("debuginfod");
    let built = workload("futex_uses");
    let build_id = Binary::read(&built).build_id();
    let stripped = dir.path().join("futex_uses");
    succeeded(
        Command::new("strip")
            .args(["--strip-all", "-o"])
            .arg(&stripped)
            .arg(&built),
    );
    let served = dir.path().join("served");
    fs::create_dir(&served).unwrap();
    succeeded(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg("--compress-debug-sections=zlib")
            .arg(&built)
            .arg(served.join("futex_uses.debug")),
    );
    let run = traced_run(
        &stripped,
        &[3, 20, 4, 60].map(|n: u64| n.to_string()),
        &["--contended"],
    );
    let address = |key| Value::from(format!("{:#x}", field::<u64>(&run.first_line, key)));
    let module = stripped.to_str().unwrap();
    let cache = dir.path().join("cache");

    let server = DebuginfodServer::start(&served, dir.path(), &build_id);
    let (fetched, said) = report_through_debuginfod(run.dir.path(), &server.url, &cache);
    assert!(!said.contains("debuginfod server"), "{said}");
    let lock = report_futex_row(&fetched, &address("lock"));
    for (row, symbol) in [
        (lock, "shared[1].lock"),
        (
            report_futex_row(&fetched, &address("tick")),
            "shared[1].tick",
        ),
        (report_lock(&fetched, &address("mutex")), "shared[1].mutex"),
    ] {
        assert_eq!(row["symbol"], symbol, "{row:#}");
    }
    let named = frames_in(lock, module);
    // The lock's waits, from `lock` and `locker`; its wakes, from `locker`.
    assert!(named.len() >= 4, "{lock:#}");
    for frame in &named {
        assert!(frame["function"].is_string(), "{frame:#}");
        assert_eq!(frame["file"], "futex_uses.c", "{frame:#}");
        assert!(
            frame["line"].as_u64().is_some_and(|line| line > 0),
            "{frame:#}"
        );
    }
    let cached = cache.join(&build_id).join("debuginfo");
    let metadata = fs::symlink_metadata(&cached).unwrap();
    assert!(metadata.is_file(), "{}", cached.display());
    assert_eq!(metadata.permissions().mode() & 0o777, 0o600);

    // The server gone, the cache names them the same, and no request reaches the server
    // named instead: a connection would wait in its queue.
    drop(server);
    let listening = TcpListener::bind("127.0.0.1:0").unwrap();
    listening.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listening.local_addr().unwrap());
    let (from_cache, said) = report_through_debuginfod(run.dir.path(), &url, &cache);
    assert!(!said.contains("debuginfod server"), "{said}");
    assert_eq!(
        frames_in(report_futex_row(&from_cache, &address("lock")), module),
        named
    );
    assert_eq!(
        listening.accept().map_err(|error| error.kind()).err(),
        Some(std::io::ErrorKind::WouldBlock),
        "a request reached the server"
    );

    // A server that takes the request and never answers.
    let (unnamed, said) =
        report_through_debuginfod(run.dir.path(), &url, &dir.path().join("empty"));
    let failures: Vec<&str> = said.lines().filter(|line| line.contains(&url)).collect();
    assert_eq!(failures.len(), 1, "{said}");
    assert!(failures[0].contains("module+offset+build-id"), "{said}");
    let row = report_futex_row(&unnamed, &address("lock"));
    assert_eq!(row["symbol"], Value::Null, "{row:#}");
    let frames = frames_in(row, module);
    assert_eq!(frames.len(), named.len(), "{row:#}");
    for frame in frames {
        assert_eq!(frame["build_id"], build_id.as_str(), "{frame:#}");
        assert!(frame["offset"].is_string(), "{frame:#}");
        assert_eq!(frame["function"], Value::Null, "{frame:#}");
    }
}
