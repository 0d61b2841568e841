//! Call stacks: each contended wait and each release that ended one carries its thread's whole
//! user stack, unwound from the binaries' CFI. The stack_chains workload's two waiters block on
//! the global `big_lock` through chains of five functions each (alpha_1 .. alpha_5, beta_1 ..
//! beta_5) while a third chain (holder_1 .. holder_5) holds it; built without frame pointers
//! (and once with them), the report must name every function of each chain, in order, for the
//! waits and for the releases that ended them, and the lock by its symbol. The same stacks
//! reach the Perfetto export and a C analyzer through the POSIX trace API. Stripped, the
//! chains' frames are placed by module, offset and build-id; with the debug file beside, they
//! are named again. Under load (a waiter and a waker at full speed, ten threads on one mutex)
//! every record carries its whole stack, and a wait 100 frames deep, 50 KiB of stack, is named
//! frame by frame down to its thread's start.

use std::{
    collections::HashMap,
    io::{Read, Write as _},
    process::Command,
};

use serde_json::Value;
use thrtrace_tests::{
    Gated, Run, TempDir, bpf_available, build_analyzer, build_id_of, ctl_ok, debug_file_path,
    every_libc, field, folded_waits_of, is_musl, report_json, report_lock_named, run_tracer,
    signal, skips, stack_functions, start_told, start_tracer, succeeded, summary_count,
    trace_contended_mutexes, trace_launched, unique_name, workload, workload_arg,
};
use tracer_common::{Category, Which};
use tracer_model::{
    TraceRecord,
    event::{Event, SystemEvent, SystemKind},
    log::LogReader,
    stack::StackShare,
};

/// The chain `prefix`_5 .. `prefix`_1 then `run`, as a stack that waited or released through it
/// holds it.
fn chain(prefix: &str) -> Vec<String> {
    (1..=5)
        .rev()
        .map(|n| format!("{prefix}_{n}"))
        .chain(["run".to_owned()])
        .collect()
}

/// Whether `functions` hold `chain` as consecutive frames.
fn holds_chain(functions: &[String], chain: &[String]) -> bool {
    functions.windows(chain.len()).any(|window| window == chain)
}

/// The chains (by prefix) the stacks of `stacks` go through, each with its wait count.
fn chains_of(stacks: &Value, build: &str) -> Vec<(&'static str, u64)> {
    let mut found: Vec<(&'static str, u64)> = stacks
        .as_array()
        .unwrap()
        .iter()
        .map(|stack| {
            let functions = stack_functions(stack);
            let prefix = ["alpha", "beta", "holder"]
                .into_iter()
                .find(|prefix| holds_chain(&functions, &chain(prefix)))
                .unwrap_or_else(|| panic!("{build}: no whole chain in {stack:#}"));
            // Unwound to the thread's start: nothing said about where it stopped. musl's C
            // library has CFI for a few functions only, its thread start not among them: on
            // x86-64, where it keeps no frame pointers, the stack ends there, saying so. (On
            // arm64 it keeps them, and the walk from its thread start reads past the copy:
            // the stack says the copy ended.)
            let end = &stack["end"];
            let plain = "no unwind information (CFI) for this code, and its frame pointer did \
                         not lead to its caller";
            let said_plainly = end.as_str().is_some_and(|end| end.starts_with(plain));
            match is_musl(build) {
                true if cfg!(target_arch = "x86_64") => {
                    assert!(end.is_null() || said_plainly, "{build}: {stack:#}");
                }
                true => {}
                false => assert_eq!(*end, Value::Null, "{build}: {stack:#}"),
            }
            // Each chain is one thread's, named after it (the holder may be gone, with its
            // name, by the time its one record is drawn).
            let threads = stack["threads"].as_array().unwrap();
            assert_eq!(threads.len(), 1, "{build}: {stack:#}");
            if prefix != "holder" {
                assert_eq!(threads[0]["name"], prefix, "{build}: {stack:#}");
            }
            assert_eq!(threads[0]["count"], 1, "{build}: {stack:#}");
            (prefix, stack["count"].as_u64().unwrap())
        })
        .collect();
    found.sort_unstable();
    found
}

/// The stacks of a text report: runs of frame lines (`        function+0x1c (file.c:9)`), each
/// as its functions.
fn text_stacks(report: &str) -> Vec<Vec<String>> {
    let mut stacks: Vec<Vec<String>> = Vec::new();
    let mut in_stack = false;
    for line in report.lines() {
        match line.strip_prefix("        ") {
            Some(frame) if !frame.starts_with('(') => {
                if !in_stack {
                    stacks.push(Vec::new());
                }
                let name = frame.split(['+', ' ']).next().unwrap_or_default();
                stacks.last_mut().unwrap().push(name.to_owned());
                in_stack = true;
            }
            _ => in_stack = false,
        }
    }
    stacks
}

#[test]
fn waits_and_the_releases_that_ended_them_name_every_function_of_their_chains() {
    if !bpf_available("stacks") {
        return;
    }
    let mut builds = every_libc("stacks", "stack_chains");
    builds.push("stack_chains_fp".to_owned());
    for build in builds {
        let dir = TempDir::new("stacks");
        // musl's slow paths are not probed: its waits are traced whole, with stacks asked for.
        let mode: &[&str] = match is_musl(&build) {
            true => &["--stacks", "on"],
            false => &["--contended"],
        };
        let mut args: Vec<String> = mode.iter().map(|a| (*a).to_owned()).collect();
        args.extend(
            [
                "--events",
                "mutex",
                "--log",
                "app.ptl",
                "--",
                &workload_arg(&build),
            ]
            .map(str::to_owned),
        );
        let run = run_tracer(dir.path(), &args);
        assert!(run.status.success(), "{build}: {run:?}");
        let report = report_json(&dir, &["app.ptl"]);
        let lock = report_lock_named(&report, "big_lock");
        assert_eq!(lock["contended"], 2, "{build}: {lock:#}");
        assert_eq!(
            chains_of(&lock["waiting_stacks"], &build),
            [("alpha", 1), ("beta", 1)],
            "{build}: {lock:#}"
        );
        // The holder's unlock ended the first wait; the first waiter's, the second.
        let released = chains_of(&lock["releasing_stacks"], &build);
        assert_eq!(released.len(), 2, "{build}: {lock:#}");
        assert!(released.contains(&("holder", 1)), "{build}: {lock:#}");
        assert!(
            released.contains(&("alpha", 1)) || released.contains(&("beta", 1)),
            "{build}: {lock:#}"
        );
        // The text names the lock and shows each chain in order, as a stack's frames.
        let text = run_tracer(dir.path(), &["report", "app.ptl"]);
        assert!(text.status.success(), "{build}: {text:?}");
        assert!(
            text.stdout.contains("\nbig_lock "),
            "{build}: {}",
            text.stdout
        );
        let stacks = text_stacks(&text.stdout);
        for prefix in ["alpha", "beta", "holder"] {
            assert!(
                stacks
                    .iter()
                    .any(|stack| holds_chain(stack, &chain(prefix))),
                "{build}: no {prefix} chain in {}",
                text.stdout
            );
        }
        perfetto_waits_carry_their_chains(&dir, &build);
    }
}

/// A C analyzer (built here: the kernel guests have no compiler) reads the same stacks.
#[test]
fn a_c_analyzer_reads_the_stacks_the_log_holds() {
    if !bpf_available("stacks_c_analyzer") {
        return;
    }
    let dir = TempDir::new("stacks-c");
    let program = workload_arg("stack_chains");
    trace_contended_mutexes(&dir, &program);
    a_c_analyzer_reads_the_logs_stacks(&dir, "stack_chains");
}

/// The Perfetto export of the trace in `dir`: each blocked wait's slice carries its stack, whose
/// frames hold its waiter's chain.
fn perfetto_waits_carry_their_chains(dir: &TempDir, build: &str) {
    let run = run_tracer(
        dir.path(),
        &["convert", "app.ptl", "--to", "perfetto", "timeline.json"],
    );
    assert!(run.status.success(), "{build}: {run:?}");
    let timeline: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("timeline.json")).unwrap())
            .unwrap();
    let waits: Vec<Vec<String>> = timeline["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "lock wait")
        .map(|e| {
            e["args"]["stack"]
                .as_array()
                .unwrap_or_else(|| panic!("{build}: a wait without its stack: {e}"))
                .iter()
                .map(|f| {
                    f.as_str()
                        .unwrap()
                        .split(['+', ' '])
                        .next()
                        .unwrap()
                        .to_owned()
                })
                .collect()
        })
        .collect();
    assert_eq!(waits.len(), 2, "{build}: {waits:?}");
    for prefix in ["alpha", "beta"] {
        assert!(
            waits.iter().any(|w| holds_chain(w, &chain(prefix))),
            "{build}: {waits:?}"
        );
    }
}

/// A C analyzer's view of the log in `dir` (tests/analyzers/print_stacks.c): the same stacks,
/// frame for frame, and the same records naming them, as the product's own reader.
fn a_c_analyzer_reads_the_logs_stacks(dir: &TempDir, build: &str) {
    let program = build_analyzer("print_stacks", dir.path());
    let log = dir.path().join("app.ptl");
    let output = std::process::Command::new(&program)
        .arg(&log)
        .output()
        .unwrap();
    assert!(output.status.success(), "{build}: {output:?}");
    let printed = String::from_utf8(output.stdout).unwrap();
    let mut expected = String::new();
    for event in LogReader::open(&log).unwrap().events() {
        match event.unwrap() {
            Event::System(SystemEvent {
                pid,
                kind: SystemKind::Stack { id, frames, end },
                ..
            }) => {
                let mut words = vec!["stack".to_owned(), id.to_string(), pid.to_string()];
                words.extend(frames.iter().map(|f| format!("{f:x}")));
                let end = match end.is_empty() {
                    true => String::new(),
                    false => format!(" | {end}"),
                };
                expected += &format!("{}{end}\n", words.join(" "));
            }
            Event::Thread(r) if r.stack != 0 => {
                expected += &format!(
                    "record {} {} {} {} {}\n",
                    r.lwpid,
                    r.event1,
                    r.event2,
                    r.which.code(),
                    r.stack
                );
            }
            _ => {}
        }
    }
    assert!(
        expected.contains("stack ") && expected.contains("record "),
        "{build}"
    );
    assert_eq!(printed, expected, "{build}");
}

#[test]
fn a_stripped_programs_frames_are_placed_by_module_offset_and_build_id_and_named_from_its_debug_file()
 {
    if !bpf_available("stacks_stripped") {
        return;
    }
    let dir = TempDir::new("stacks-stripped");
    let built = workload("stack_chains");
    let stripped = dir.path().join("stack_chains");
    succeeded(
        std::process::Command::new("strip")
            .args(["--strip-all", "-o"])
            .arg(&stripped)
            .arg(&built),
    );
    let bytes = std::fs::read(&built).unwrap();
    let build_id = build_id_of(&object::File::parse(&*bytes).unwrap());
    let program = stripped.to_str().unwrap();
    trace_contended_mutexes(&dir, program);
    // No symbol names the lock now: the one that was waited on twice.
    let contended = |report: &Value| -> Value {
        report["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["contended"] == 2)
            .unwrap_or_else(|| panic!("no lock waited on twice in {report:#}"))
            .clone()
    };
    let lock = contended(&report_json(&dir, &["app.ptl"]));
    let waits = lock["waiting_stacks"].as_array().unwrap();
    assert_eq!(waits.len(), 2, "{lock:#}");
    for stack in waits {
        // The waiter's five links and `run`, after the lock function: placed in the program.
        let frames = &stack["frames"].as_array().unwrap()[1..7];
        for frame in frames {
            assert_eq!(frame["module"], program, "{stack:#}");
            assert_eq!(frame["build_id"], build_id.as_str(), "{stack:#}");
            assert!(
                frame["offset"].as_str().unwrap().starts_with("0x"),
                "{stack:#}"
            );
            assert_eq!(frame["function"], Value::Null, "{stack:#}");
        }
    }
    // Its debug file where debug packages put theirs, under a directory of the test's own.
    let file = debug_file_path(&dir.path().join("debug"), &build_id);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    succeeded(
        std::process::Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&built)
            .arg(&file),
    );
    let report = report_json(&dir, &["--debug-dir", "debug", "app.ptl"]);
    let lock = contended(&report);
    assert_eq!(lock["symbol"], "big_lock", "{lock:#}");
    assert_eq!(
        chains_of(&lock["waiting_stacks"], "stack_chains"),
        [("alpha", 1), ("beta", 1)]
    );
}

/// A `--events mutex --stacks on` trace, with `options`, into the log `app.ptl` of a gated
/// target whose `pairs` lock/unlock pairs (in each of `threads` new threads; 0: in the main
/// thread) run while the tracer is stopped, the target exiting before it runs again: the
/// trace's directory, and what the tracer said after it started.
fn stacks_while_stopped(
    label: &str,
    pairs: u32,
    threads: u32,
    options: &[&str],
) -> (TempDir, String) {
    let dir = TempDir::new(label);
    let mut gate = Gated::start_with_threads(0, pairs, threads);
    let log = dir.path().join("app.ptl");
    let name = unique_name(label);
    let options = [
        &[
            "--events",
            "mutex",
            "--stacks",
            "on",
            "--log",
            log.to_str().unwrap(),
            "--name",
            &name,
        ],
        options,
    ]
    .concat();
    let (mut tracer, mut stderr) = start_tracer(dir.path(), &[gate.pid], &options);
    // Answered once the session runs: its start, which reads the target's files, is over.
    ctl_ok(&[&name, "status"]);
    signal(tracer.id(), "-STOP");
    gate.run_phase_two();
    gate.finish();
    signal(tracer.id(), "-CONT");
    assert!(tracer.wait().unwrap().success());
    let mut said = String::new();
    stderr.read_to_string(&mut said).unwrap();
    (dir, said)
}

/// A target that has exited before the tracer drains its first record (the tracer stopped
/// meanwhile) still has its stacks unwound to its start: its files are read when it is attached,
/// not at its first record.
#[test]
fn the_stacks_of_a_target_gone_before_its_records_are_drained_are_unwound() {
    if !bpf_available("stacks_after_exit") {
        return;
    }
    let (dir, _) = stacks_while_stopped("stacks-after-exit", 100, 0, &[]);
    let mut stacks = 0;
    for event in LogReader::open(&dir.path().join("app.ptl"))
        .unwrap()
        .events()
    {
        if let Event::System(SystemEvent {
            kind: SystemKind::Stack { frames, end, .. },
            ..
        }) = event.unwrap()
            // The records made once the stopped tracer's ring has no room left for a copy come
            // without it, counted.
            && !frames.is_empty()
        {
            assert!(end.is_empty() && frames.len() > 2, "{frames:x?}: {end}");
            stacks += 1;
        }
    }
    assert!(stacks > 0, "no stack in the log");
}

/// New threads whose stacks the tracer has not unwound yet (it is stopped) copy their live
/// stacks alone, found below their thread pointers, not the most a copy may take: the stacks
/// of eight threads' 320 lock and unlock calls fit in the ring a stopped tracer leaves them,
/// each unwound to its thread's start.
#[test]
fn the_first_stacks_of_new_threads_are_copied_at_their_live_size() {
    if !bpf_available("stacks_of_new_threads") {
        return;
    }
    let (dir, said) = stacks_while_stopped("stacks-of-new-threads", 20, 8, &[]);
    assert!(!said.contains("carry no call stack"), "{said}");
    let (records, stacks) = records_and_stacks(&dir);
    assert_eq!(records.len(), 8 * 20 * 3, "{said}");
    for record in records.iter().filter(|r| r.which != Which::Return) {
        let (frames, end) = &stacks[&record.stack];
        assert!(
            *frames > 0 && end.is_empty(),
            "{record:?}: {frames} frames, {end}"
        );
    }
}

/// Each stack of a log by its id: how many frames, and why it ends where it does ("" at the
/// thread's start).
type StacksById = HashMap<u32, (usize, String)>;

/// A `--contended` trace of `stack_load ARGS` into a log, which must lose nothing but the futex
/// calls the kernel did not show the tracer (noted for `skips::accounted`) and leave no stack
/// out: the tracer's run, the records of locks and futex calls (the thread category's have no
/// stack), and the stacks. The summary's share of whole stacks is the log's.
fn contended_stack_load(args: &[&str]) -> (TempDir, Run, Vec<TraceRecord>, StacksById) {
    let (dir, run) = trace_launched(&["--contended", "--log", "app.ptl"], "stack_load", args);
    let unseen = skips::note_unseen(&dir.path().join("app.ptl"), &run.stderr);
    assert_eq!(
        summary_count(&run.stderr, "lost"),
        unseen,
        "{args:?}: {}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("carry no call stack"),
        "{args:?}: {}",
        run.stderr
    );
    let (records, stacks) = records_and_stacks(&dir);
    assert_eq!(
        said_share(&run.stderr),
        share_of(&records, &stacks),
        "{args:?}"
    );
    (dir, run, records, stacks)
}

/// The records of locks and futex calls in the log `app.ptl` of `dir`, and its stacks. Each
/// stack comes before the first record naming it, as a reader reading in order needs.
fn records_and_stacks(dir: &TempDir) -> (Vec<TraceRecord>, StacksById) {
    let mut records = Vec::new();
    let mut stacks = HashMap::new();
    for event in LogReader::open(&dir.path().join("app.ptl"))
        .unwrap()
        .events()
    {
        match event.unwrap() {
            Event::Thread(record) if record.event1 != Category::Thread as u16 => {
                assert!(
                    record.stack == 0 || stacks.contains_key(&record.stack),
                    "a record before the stack it names: {record:?}"
                );
                records.push(record);
            }
            Event::System(SystemEvent {
                kind: SystemKind::Stack { id, frames, end },
                ..
            }) => {
                stacks.insert(id, (frames.len(), end));
            }
            Event::Thread(_) | Event::System(_) => {}
        }
    }
    (records, stacks)
}

/// What the summary line among what the tracer `said` says of the stacks ("call stacks: W of
/// N whole, ...").
fn said_share(said: &str) -> String {
    let (_, share) = said
        .lines()
        .find_map(|line| line.split_once("; call stacks: "))
        .unwrap_or_else(|| panic!("no share of stacks in the summary: {said}"));
    format!("call stacks: {share}")
}

/// The most records (of every kind) that one second of the clock's holds, of the seconds that
/// hold a record whose stack was left out: the rate the tracer fell behind at.
fn busiest_second_left_out(dir: &TempDir, stacks: &StacksById) -> u64 {
    let mut seconds: HashMap<i64, (u64, bool)> = HashMap::new();
    for event in LogReader::open(&dir.path().join("app.ptl"))
        .unwrap()
        .events()
    {
        if let Event::Thread(record) = event.unwrap() {
            let left_out = stacks
                .get(&record.stack)
                .is_some_and(|(frames, _)| *frames == 0);
            let second = seconds
                .entry((record.time_ns() as i64).div_euclid(1_000_000_000))
                .or_default();
            *second = (second.0 + 1, second.1 || left_out);
        }
    }
    let busiest = seconds.values().filter(|(_, left_out)| *left_out);
    busiest.map(|&(records, _)| records).max().unwrap_or(0)
}

/// The share of whole stacks among `records` that name one, as the tracer says it.
fn share_of(records: &[TraceRecord], stacks: &StacksById) -> String {
    let mut share = StackShare::default();
    for record in records.iter().filter(|r| r.stack != 0) {
        share.count(stacks[&record.stack].1.is_empty());
    }
    share.to_string()
}

/// Every record has a stack, unwound to its thread's start; a return half has its entry
/// half's.
fn assert_whole_stacks(records: &[TraceRecord], stacks: &StacksById) {
    for record in records.iter().filter(|r| r.which != Which::Return) {
        let (frames, end) = stacks
            .get(&record.stack)
            .unwrap_or_else(|| panic!("no stack for {record:?}"));
        assert!(
            end.is_empty() && *frames >= 3,
            "{record:?}: {frames} frames, {end}"
        );
    }
}

/// The futex pair's pace, in rounds a second: full speed (`None`) on a real machine. An
/// emulated guest (`cargo xtask kernels`, which sets `THRTRACE_TEST_BUFFER_KIB`) runs its
/// tracer's unwinding tens of times slower than the pair's rounds, and checks the kernel's
/// side of the copies at a pace its tracer keeps up with.
fn guest_pace() -> Option<&'static str> {
    std::env::var_os("THRTRACE_TEST_BUFFER_KIB").map(|_| "1000")
}

#[test]
fn at_full_speed_every_futex_wait_and_wake_carries_its_whole_stack() {
    if !bpf_available("stacks_at_full_speed") {
        return;
    }
    skips::accounted("stacks_at_full_speed", || {
        let (_dir, run, records, stacks) = match guest_pace() {
            None => contended_stack_load(&["futex", "5000"]),
            Some(pace) => contended_stack_load(&["futex", "5000", pace]),
        };
        let futex = |event2| {
            records
                .iter()
                .filter(|r| r.event1 == Category::Futex as u16 && r.event2 == event2)
                .count() as u64
        };
        // Every wake that woke the waiter is recorded; a wait that returned 0 may have been
        // woken before it slept, which `--contended` does not record.
        let (waits, wakes) = (futex(1), futex(2));
        assert_eq!(
            wakes,
            field::<u64>(&run.stdout, "wakes_that_woke"),
            "{}",
            run.stdout
        );
        assert!(
            waits > 0 && waits <= field(&run.stdout, "woken_waits"),
            "{waits}: {}",
            run.stdout
        );
        assert_eq!(records.len() as u64, waits + wakes);
        assert_whole_stacks(&records, &stacks);
    });
}

#[test]
fn ten_threads_contending_a_mutex_each_record_with_its_whole_stack() {
    if !bpf_available("stacks_of_ten_threads") {
        return;
    }
    let (_dir, _run, records, stacks) = contended_stack_load(&["mutex", "10", "20000"]);
    assert!(
        records.iter().any(|r| r.event1 == Category::Mutex as u16),
        "no contended mutex call"
    );
    assert_whole_stacks(&records, &stacks);
}

/// A tracer stopped while its target runs, its rings small: the stacks left out as a ring
/// passes half full (named so in the log) are counted, and the summary's share of whole stacks
/// is the log's, which `report` prints under its header and `info` beside the records left
/// without theirs.
#[test]
fn a_share_short_of_whole_stacks_is_said_alike_by_the_summary_and_the_report() {
    if !bpf_available("stacks_short_of_whole") {
        return;
    }
    let (dir, said) =
        stacks_while_stopped("stacks-short-of-whole", 300, 0, &["--buffer-kib", "16"]);
    let (records, stacks) = records_and_stacks(&dir);
    let share = said_share(&said);
    assert_eq!(share, share_of(&records, &stacks));
    let left_out = records
        .iter()
        .filter(|r| stacks.get(&r.stack).is_some_and(|(frames, _)| *frames == 0))
        .count();
    assert!(left_out > 0, "{share}: none left out");
    let to_carry = records.iter().filter(|r| r.stack != 0).count();
    let share_left_out = left_out as f64 * 100.0 / to_carry as f64;
    // Said to two decimals, as here, from 0.01% up.
    assert!(share_left_out >= 0.01, "{left_out} of {to_carry}");
    let figures = format!(
        "{share_left_out:.2}% of {to_carry}, in seconds of up to {} records",
        busiest_second_left_out(&dir, &stacks)
    );
    assert!(
        said.contains(&format!(
            "{left_out} records carry no call stack ({figures})"
        )),
        "{left_out}, {figures}: {said}"
    );
    let report = run_tracer(dir.path(), &["report", "app.ptl"]);
    assert!(report.status.success(), "{report:?}");
    // The stacks neither whole nor left out (cut short by the small rings) are said apart.
    let cut_short = records
        .iter()
        .filter(|r| {
            stacks
                .get(&r.stack)
                .is_some_and(|(frames, end)| *frames > 0 && !end.is_empty())
        })
        .count();
    let others = match cut_short {
        0 => "",
        _ => ", the others end early, each saying why",
    };
    let under_header =
        format!("{share}; {left_out} left out ({figures}; the tracer was behind){others}");
    assert!(
        report.stdout.lines().any(|line| line == under_header),
        "{share}: {}",
        report.stdout
    );
    let info = run_tracer(dir.path(), &["info", "app.ptl"]);
    let line = format!(
        "call stacks:     {}; {left_out} records without theirs ({figures}; the tracer was \
         behind)",
        share.strip_prefix("call stacks: ").unwrap()
    );
    assert!(
        info.stdout.lines().any(|l| l == line),
        "{line}: {}",
        info.stdout
    );
}

/// A tracer stopped while the contention workload blocks on each of its locks, its rings so
/// small that most records come without their stacks: the profile still holds every wait the
/// report counts, those whose stacks were left out weighed onto the recorded stacks through
/// their caller (or under a frame that says so), and the report says how many there were.
#[test]
fn waits_whose_stacks_were_left_out_weigh_on_the_profile_all_the_same() {
    if !bpf_available("stacks_left_out_weighed") {
        return;
    }
    let dir = TempDir::new("stacks-left-out");
    let mut contention = Command::new(workload("contention"));
    // Four rounds of two waiters, locks held 20 ms, no other calls, started by a line. Rings
    // of 16 KiB keep the first round's stacks, leave out most later ones, and lose few records.
    contention.args(["4", "20", "2", "0", "1"]);
    let (mut child, mut stdin, _stdout, _addresses) = start_told(&mut contention);
    let log = dir.path().join("app.ptl");
    let name = unique_name("stacks-left-out");
    let options = [
        "--contended",
        "--buffer-kib",
        "16",
        "--log",
        log.to_str().unwrap(),
        "--name",
        &name,
    ];
    let (mut tracer, _stderr) = start_tracer(dir.path(), &[child.id()], &options);
    ctl_ok(&[&name, "status"]);
    signal(tracer.id(), "-STOP");
    writeln!(stdin.take().unwrap(), "go").unwrap();
    assert!(child.wait().unwrap().success());
    signal(tracer.id(), "-CONT");
    assert!(tracer.wait().unwrap().success());
    let (records, stacks) = records_and_stacks(&dir);
    let waits = ["mutex_lock", "sema_wait", "rw_rdlock", "rw_wrlock"];
    let left_out = records
        .iter()
        .filter(|r| waits.iter().any(|name| r.is(name, Which::Entry)))
        .filter(|r| stacks.get(&r.stack).is_some_and(|(frames, _)| *frames == 0))
        .count();
    assert!(left_out > 0, "no wait's stack left out: {records:?}");
    let report = report_json(&dir, &["app.ptl"]);
    let folded = run_tracer(dir.path(), &["report", "--format", "folded", "app.ptl"]);
    assert!(folded.status.success(), "{folded:?}");
    // With the rate the tracer fell behind at, as the log's records show it.
    let behind = format!(
        "were left out (the tracer was behind, in seconds of up to {} records)",
        busiest_second_left_out(&dir, &stacks)
    );
    assert!(
        folded.stderr.contains(&behind),
        "{behind}: {}",
        folded.stderr
    );
    let locks: Vec<&Value> = report["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|lock| {
            ["first", "second", "sem", "rw"].contains(&lock["symbol"].as_str().unwrap_or(""))
        })
        .collect();
    let mut weighed = 0;
    for lock in locks {
        let profiled = folded_waits_of(&folded.stdout, lock);
        let total: u64 = profiled.iter().map(|(_, ns)| ns).sum();
        assert_eq!(total, lock["wait_total_ns"], "{lock:#}: {}", folded.stdout);
        // The mutexes and the semaphore are each waited on from one line: where a wait of
        // one kept its stack, every other is weighed onto it, none left under its caller.
        let rows = lock["waiting_stacks"].as_array().unwrap();
        let single_caller = lock["symbol"] != "rw";
        if single_caller && !rows.is_empty() && lock.get("stacks_left_out").is_some() {
            assert!(
                profiled
                    .iter()
                    .all(|(stack, _)| !stack.contains("[stack left out")),
                "{lock:#}: {}",
                folded.stdout
            );
            weighed += 1;
        }
    }
    assert!(
        weighed > 0,
        "no lock's left-out waits were weighed: {report:#}"
    );
}

#[test]
fn a_wait_a_hundred_frames_deep_is_named_frame_by_frame_to_its_threads_start() {
    if !bpf_available("stacks_a_hundred_deep") {
        return;
    }
    let (dir, _run, _records, _stacks) = contended_stack_load(&["deep", "100"]);
    let report = report_json(&dir, &["app.ptl"]);
    let lock = report_lock_named(&report, "deep_lock");
    let waits = lock["waiting_stacks"].as_array().unwrap();
    assert_eq!(waits.len(), 1, "{lock:#}");
    assert_eq!(waits[0]["end"], Value::Null, "{lock:#}");
    let functions = stack_functions(&waits[0]);
    let descents = functions.iter().filter(|f| *f == "descend").count();
    assert_eq!(descents, 100, "{functions:?}");
    // Below the descents, the thread's own function and the C library's start of a thread
    // (whole: `end` is null), which has a name where the C library's local symbols are known
    // (the host's debug files; a guest has none).
    let last_descent = functions.iter().rposition(|f| f == "descend").unwrap();
    assert_eq!(functions[last_descent + 1], "deep", "{functions:?}");
    assert!(functions.len() > last_descent + 2, "{functions:?}");
}
