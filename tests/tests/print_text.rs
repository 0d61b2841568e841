//! `--print text` prints each call as strace prints one, and `dump` prints a log alike: the
//! lines of lock_story's known calls checked field by field.

use thrtrace_tests::{TempDir, bpf_available, line_of, run_tracer, workload};

const HOLD_MS: u64 = 50;

/// A line's parts: the time, the process and thread, and what follows them.
struct Line<'a> {
    time: &'a str,
    pid: u32,
    lwpid: u32,
    call: &'a str,
}

/// `18:02:01.123456 [4242/4243] rest` split, or none for a line of another form (the
/// workload's own output).
fn parse(line: &str) -> Option<Line<'_>> {
    let (time, rest) = line.split_once(" [")?;
    let (thread, call) = rest.split_once("] ")?;
    let (pid, lwpid) = thread.split_once('/')?;
    Some(Line {
        time,
        pid: pid.parse().ok()?,
        lwpid: lwpid.parse().ok()?,
        call,
    })
}

/// Whether `time` is a time of day with microseconds, as strace -tt prints it.
fn is_time_of_day(time: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let Some((clock, micros)) = time.split_once('.') else {
        return false;
    };
    let parts: Vec<&str> = clock.split(':').collect();
    parts.len() == 3
        && parts.iter().all(|p| p.len() == 2 && digits(p))
        && micros.len() == 6
        && digits(micros)
}

/// The seconds in a line's ` <0.050123>` ending.
fn took(call: &str) -> f64 {
    let (_, last) = call.rsplit_once(" <").unwrap();
    last.trim_end_matches('>').parse().unwrap()
}

#[test]
fn print_text_shows_each_call_as_strace_does_and_dump_alike() {
    if !bpf_available("print_text") {
        return;
    }
    let dir = TempDir::new("print-text");
    let program = workload("lock_story");
    let hold = HOLD_MS.to_string();
    let run = run_tracer(
        dir.path(),
        &[
            "--print",
            "text",
            "-e",
            "mutex,rmutex,thr_join",
            "--log",
            "app.ptl",
            "--",
            program.to_str().unwrap(),
            "1",
            &hold,
            "2",
        ],
    );
    assert!(run.status.success(), "{run:?}");
    let addresses: Vec<u64> = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("contended="))
        .unwrap()
        .split(' ')
        .map(|field| field.rsplit('=').next().unwrap().parse().unwrap())
        .collect();
    let (contended, recursive) = (
        format!("{:#x} <contended>", addresses[0]),
        format!("{:#x} <recursive>", addresses[1]),
    );
    let lines: Vec<Line> = run.stdout.lines().filter_map(parse).collect();
    assert!(
        lines.iter().all(|l| is_time_of_day(l.time)),
        "{}",
        run.stdout
    );
    let pid = lines
        .iter()
        .find(|l| l.call.starts_with("--- thrtrace_process_attach"))
        .unwrap()
        .pid;
    let calls: Vec<&Line> = lines
        .iter()
        .filter(|l| l.pid == pid && !l.call.starts_with("---"))
        .collect();
    let of = |prefix: &str| -> Vec<&Line> {
        calls
            .iter()
            .copied()
            .filter(|l| l.call.starts_with(prefix))
            .collect()
    };
    let (hold_line, wait_line, rlock_line) = (
        line_of("lock_story", "/* HOLD */"),
        line_of("lock_story", "/* WAIT */"),
        line_of("lock_story", "/* RLOCK */"),
    );

    // The main thread takes the mutex uncontended: one line, whole, from its line.
    let lock = format!("pthread_mutex_lock({contended})");
    let taken = of(&lock);
    let holder: Vec<&&Line> = taken.iter().filter(|l| l.lwpid == pid).collect();
    assert_eq!(holder.len(), 1, "{}", run.stdout);
    let rest = holder[0].call.strip_prefix(&lock).unwrap();
    let (fields, caller) = rest.split_once(" from main+0x").unwrap();
    assert_eq!(fields, " = 0 {owner=0, block?=0}");
    assert!(
        caller.ends_with(&format!(" (lock_story.c:{hold_line})")),
        "{caller}"
    );

    // Each waiter's call is left unfinished as it blocks, held by the main thread, and
    // resumed on the same thread with the time it waited.
    let waiting: Vec<&&Line> = taken.iter().filter(|l| l.lwpid != pid).collect();
    assert_eq!(waiting.len(), 2, "{}", run.stdout);
    for wait in waiting {
        let rest = wait.call.strip_prefix(&lock).unwrap();
        let (fields, caller) = rest.split_once(" from waiter+0x").unwrap();
        assert_eq!(fields, format!(" {{owner={pid}}} <unfinished ...>"));
        assert!(
            caller.ends_with(&format!(" (lock_story.c:{wait_line})")),
            "{caller}"
        );
        let resumed: Vec<&&Line> = calls
            .iter()
            .filter(|l| {
                l.lwpid == wait.lwpid && l.call.starts_with("<... pthread_mutex_lock resumed>")
            })
            .collect();
        assert_eq!(resumed.len(), 1, "{}", run.stdout);
        let call = resumed[0].call;
        assert!(
            call.starts_with("<... pthread_mutex_lock resumed>) = 0 {block?=1} <"),
            "{call}"
        );
        let waited = took(call);
        assert!((HOLD_MS as f64 * 0.8e-3..5.0).contains(&waited), "{call}");
    }

    // Three nested locks of the recursive mutex, each with its depth, and its unlocks.
    let depths: Vec<&str> = of(&format!("pthread_mutex_lock({recursive})"))
        .iter()
        .map(|l| l.call.split(" from ").next().unwrap())
        .collect();
    assert_eq!(
        depths,
        [1, 2, 3].map(|depth| {
            let owner = if depth == 1 { 0 } else { pid };
            format!(
                "pthread_mutex_lock({recursive}) = 0 {{owner={owner}, block?=0, rm_depth={depth}}}"
            )
        })
    );
    assert!(
        of(&format!("pthread_mutex_lock({recursive})"))
            .iter()
            .all(|l| l.call.ends_with(&format!("(lock_story.c:{rlock_line})"))),
        "{}",
        run.stdout
    );
    assert_eq!(
        of(&format!(
            "pthread_mutex_unlock({recursive}) = 0 {{waiters?=0}} from main+0x"
        ))
        .len(),
        3
    );

    // Every pthread_join (two waiters, two readers) returns 0 with their exit value.
    let resumed = of("<... pthread_join resumed>) = 0 {*arg2=0} <");
    let began: Vec<&Line> = of("pthread_join(0x")
        .into_iter()
        .filter(|l| l.call.contains(") <unfinished ...> from main+0x"))
        .collect();
    assert_eq!(resumed.len(), 4, "{}", run.stdout);
    assert_eq!(began.len(), 4, "{}", run.stdout);

    // `dump` prints the log's events as they were printed live.
    let dumped = run_tracer(dir.path(), &["dump", "app.ptl"]);
    assert!(dumped.status.success(), "{dumped:?}");
    let from_log: Vec<&str> = dumped
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| !l.contains("--- posix_trace_"))
        .collect();
    let printed: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| parse(l).is_some() && !l.contains("--- posix_trace_"))
        .collect();
    assert_eq!(from_log, printed);

    // A filtered dump still names what the mappings it leaves out place.
    let filtered = run_tracer(dir.path(), &["dump", "-e", "mutex_lock", "app.ptl"]);
    let holder_line = from_log
        .iter()
        .find(|l| l.contains(&format!("{lock} = 0 {{owner=0, block?=0}} from main+0x")))
        .unwrap();
    assert!(
        filtered.stdout.lines().any(|l| l == *holder_line),
        "{}",
        filtered.stdout
    );

    // strace's other clocks: seconds since the epoch, and since the line before.
    let epoch = run_tracer(dir.path(), &["dump", "-ttt", "app.ptl"]);
    let first = epoch.stdout.lines().find_map(parse).unwrap();
    let (seconds, micros) = first.time.split_once('.').unwrap();
    assert!(seconds.parse::<u64>().unwrap() > 1_700_000_000 && micros.len() == 6);
    let relative = run_tracer(dir.path(), &["dump", "-r", "app.ptl"]);
    let times: Vec<&str> = relative
        .stdout
        .lines()
        .filter_map(parse)
        .map(|l| l.time.trim_start())
        .collect();
    assert_eq!(times[0], "0.000000");
    assert!(
        times.iter().all(|t| t.parse::<f64>().unwrap() >= 0.0),
        "{}",
        relative.stdout
    );
}

/// Printed alone (no log), a short run's callers are named too: its executable and mappings
/// are read as it is attached, not at its first record, which is drained after it has exited.
#[test]
fn a_short_run_printed_alone_has_its_facts_before_its_calls() {
    if !bpf_available("print_text_alone") {
        return;
    }
    let dir = TempDir::new("print-text-alone");
    let program = workload("lock_story");
    for run in 0..3 {
        let printed = run_tracer(
            dir.path(),
            &[
                "--print",
                "text",
                "--",
                program.to_str().unwrap(),
                "1",
                "20",
                "2",
            ],
        );
        assert!(printed.status.success(), "{printed:?}");
        let lines: Vec<Line> = printed.stdout.lines().filter_map(parse).collect();
        let attach = lines
            .iter()
            .position(|l| l.call.starts_with("--- thrtrace_process_attach exe=\"/"))
            .unwrap_or_else(|| panic!("run {run}: {}", printed.stdout));
        let first_call = lines
            .iter()
            .position(|l| l.lwpid != 0 && !l.call.starts_with("---"))
            .unwrap();
        assert!(attach < first_call, "run {run}: {}", printed.stdout);
        // Its cgroup, then its mappings.
        assert!(
            lines[attach + 1]
                .call
                .starts_with("--- thrtrace_process_cgroup path=\"/")
                && lines[attach + 2].call.starts_with("--- thrtrace_mapping "),
            "run {run}: {}",
            printed.stdout
        );
        let hold_line = line_of("lock_story", "/* HOLD */");
        assert!(
            lines
                .iter()
                .any(|l| l.call.ends_with(&format!(" (lock_story.c:{hold_line})"))),
            "run {run}: {}",
            printed.stdout
        );
    }
}

#[test]
fn a_clock_without_print_text_is_refused() {
    let dir = TempDir::new("clock-alone");
    let run = run_tracer(dir.path(), &["-tt", "--", "/bin/true"]);
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert_eq!(
        run.stderr,
        "thrtrace-bpf: -t, -tt, -ttt and -r time the lines of --print text: give it too\n"
    );
}
