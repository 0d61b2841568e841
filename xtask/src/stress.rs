//! `cargo xtask stress`: signals at any moment leave complete files and nothing attached.
//!
//! Each trial starts a busy multi-threaded workload (tests/workloads/stress_work.c, whose output
//! depends on its arguments alone), traces it with `-p` (plain, `--unbuffered` or `--follow`, in
//! turn), and sends the tracer SIGINT, SIGTERM or SIGKILL at a random moment in its first two
//! seconds. Then it checks that
//! - every `tr.*` line has its 13 decimal fields: after SIGINT or SIGTERM every file ends with a
//!   whole line; after SIGKILL only the last line of a file may be cut short;
//! - no BPF program of the tracer's is left in the kernel;
//! - a new trace starts at once and records exactly what it should;
//! - the workload printed and returned what it does untraced.
//!
//! Then the exact-count trials: a workload whose threads try a shared mutex and lock it when
//! the try fails (tests/workloads/try_and_lock.c), on 2 and 4 threads, traced with `-p` with a
//! counting interposer preloaded (tests/workloads/interpose.c): the tracer's records of its
//! calls on that mutex, the workload's own count and the interposer's must be equal, trial
//! after trial, whichever way each call went through the C library (fast path, slow path, a
//! failed try). A call recorded twice or not at all fails the run.

use std::{
    collections::HashSet,
    fs,
    io::{BufRead, BufReader, Read, Write},
    path::Path,
    process::{Child, ExitStatus, Stdio},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context, Result, bail, ensure};
use tracer_common::Which;

use crate::shell::{
    build_tracer, command, compile_preload, compile_workload, output, require_root,
};

const THREADS: &str = "4";
/// Untraced, about 2.5 s on this VM: the signal window falls inside the run.
const ROUNDS: &str = "4000000";
/// Signals land within this long after the tracer starts.
const SIGNAL_WINDOW: Duration = Duration::from_secs(2);
/// How long the tracer may take to exit after its signal.
const TRACER_EXIT_LIMIT: Duration = Duration::from_secs(10);
/// How long a workload may take to finish once its tracer is gone.
const WORKLOAD_LIMIT: Duration = Duration::from_mins(1);
/// How long the kernel may take to free the programs of a tracer that has exited.
const RELEASE_LIMIT: Duration = Duration::from_secs(5);
/// The names the tracer's BPF programs have in the kernel.
const PROGRAM_PREFIX: &str = "thr_";

/// The signals sent, by name and number.
const SIGNALS: [(&str, i32); 3] = [("SIGINT", 2), ("SIGTERM", 15), ("SIGKILL", SIGKILL)];
const SIGKILL: i32 = 9;
const OPTIONS: [&[&str]; 3] = [&[], &["--unbuffered"], &["--follow"]];

/// Runs `trials` trials; `seed` makes the choice of signals and moments repeatable.
pub fn run(trials: usize, seed: Option<u64>) -> Result<()> {
    require_root("stress")?;
    restore_default_stop_signals();
    let tracer = build_tracer()?;
    let workload = compile_workload("stress_work")?;
    let contend = compile_workload("mutex_contend")?;
    let expected = output(command(&workload).args([THREADS, ROUNDS]))?.stdout;
    let seed = seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    println!("stress: {trials} trials, seed {seed}");
    let mut random = XorShift(seed | 1);
    let dir = crate::shell::workspace_root().join("target/stress");
    let mut counts = [0usize; 3];
    for trial in 1..=trials {
        let (name, signal) = SIGNALS[random.below(3) as usize];
        let options = OPTIONS[trial % OPTIONS.len()];
        let delay = Duration::from_micros(random.below(SIGNAL_WINDOW.as_micros() as u64));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let trial_result = run_trial(&tracer, &workload, &expected, options, signal, delay, &dir)
            .and_then(|ended| {
                check_no_programs_left()?;
                check_new_trace(&tracer, &contend, &dir)?;
                Ok(ended)
            });
        let ended = trial_result.with_context(|| {
            format!(
                "trial {trial}: {name} after {} ms, options {options:?} (seed {seed})",
                delay.as_millis()
            )
        })?;
        counts[ended as usize] += 1;
        println!(
            "stress: trial {trial}: {name} after {:>4} ms {:<16} ok ({})",
            delay.as_millis(),
            options.join(" "),
            ended.describe()
        );
    }
    println!(
        "stress: {trials} passed, 0 failed ({} ended tracing cleanly, {} died before tracing \
         began, {} killed)",
        counts[Ended::Clean as usize],
        counts[Ended::BeforeTracing as usize],
        counts[Ended::Killed as usize]
    );
    exact_counts(&tracer, &dir)?;
    let _ = fs::remove_dir_all(&dir);
    Ok(())
}

/// Threads of the exact-count trials, and trials of each.
const COUNTED_THREADS: [&str; 2] = ["2", "4"];
const COUNTED_TRIALS: usize = 8;
/// Rounds of each thread: a try, a lock when it fails, an unlock.
const COUNTED_ROUNDS: &str = "5000";

/// The exact-count trials (see the module's comment).
fn exact_counts(tracer: &Path, dir: &Path) -> Result<()> {
    let workload = compile_workload("try_and_lock")?;
    let interposer = compile_preload("interpose")?;
    for threads in COUNTED_THREADS {
        for trial in 1..=COUNTED_TRIALS {
            let _ = fs::remove_dir_all(dir);
            fs::create_dir_all(dir)?;
            let counts = counted_trial(tracer, &workload, &interposer, threads, dir)
                .with_context(|| format!("exact counts, {threads} threads, trial {trial}"))?;
            println!("stress: exact counts, {threads} threads, trial {trial}: {counts}, equal");
        }
    }
    Ok(())
}

/// One exact-count trial: its counts, as the three agree on them.
fn counted_trial(
    tracer: &Path,
    workload: &Path,
    interposer: &Path,
    threads: &str,
    dir: &Path,
) -> Result<String> {
    let mut target = command(workload)
        .args([threads, COUNTED_ROUNDS])
        .env("LD_PRELOAD", interposer)
        .env("INTERPOSE_COUNTS", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut target_out = BufReader::new(target.stdout.take().context("stdout")?);
    let mut line = String::new();
    target_out.read_line(&mut line)?;
    ensure!(line == "ready\n", "the workload said {line:?}");
    let mut traced = command(tracer)
        .args(["--events", "mutex", "--dir"])
        .arg(dir)
        .args(["-p", &target.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()?;
    let mut said = BufReader::new(traced.stderr.take().context("stderr")?);
    while !line.contains("; Ctrl-C stops it") {
        line.clear();
        ensure!(
            said.read_line(&mut line)? > 0,
            "the tracer ended before tracing"
        );
    }
    writeln!(target.stdin.take().context("stdin")?, "go")?;
    let mut own = String::new();
    target_out.read_to_string(&mut own)?;
    let finished = target.wait_with_output()?;
    ensure!(
        finished.status.success(),
        "the workload exited with {}",
        finished.status
    );
    let interposed = String::from_utf8_lossy(&finished.stderr).into_owned();
    send(traced.id(), 2)?;
    let mut summary = String::new();
    said.read_to_string(&mut summary)?;
    ensure!(traced.wait()?.success(), "the tracer failed: {summary}");
    ensure!(summary.contains(" 0 lost"), "records were lost: {summary}");

    let value = |text: &str, key: &str| -> Result<i64> {
        let field = text
            .split_whitespace()
            .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
            .with_context(|| format!("no {key}= in {text:?}"))?;
        Ok(field.parse()?)
    };
    let mutex = value(&own, "mutex")?;
    let names = [
        ("locks", "mutex_lock"),
        ("trylocks", "mutex_trylock"),
        ("unlocks", "mutex_unlock"),
    ];
    let recorded = recorded_calls(dir, mutex, names.map(|(_, event)| event))?;
    let mut counts = Vec::new();
    for ((key, event), recorded) in names.iter().zip(recorded) {
        let (own, interposed) = (value(&own, key)?, value(&interposed, key)?);
        ensure!(
            own == interposed && interposed == recorded,
            "{event}: the workload made {own} calls, the interposer counted {interposed}, \
             the tracer recorded {recorded}"
        );
        counts.push(format!("{own} {key}"));
    }
    Ok(counts.join(", "))
}

/// How many calls of each of `events` on `mutex` the `tr.*` files in `dir` record: a call is a
/// whole record, or an entry half (which names the mutex) followed in its thread's file by the
/// return half; a half without its other is an error.
fn recorded_calls(dir: &Path, mutex: i64, events: [&str; 3]) -> Result<[i64; 3]> {
    let mut counts = [0; 3];
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !tracer_model::tr::is_file_name(&name) {
            continue;
        }
        // The entry halves on the mutex that wait for their return halves: by thread and
        // event (threads whose ids end alike share a file).
        let mut open: HashSet<(u32, usize)> = HashSet::new();
        for line in fs::read_to_string(entry.path())?.lines() {
            let record = tracer_model::tr::parse_line(line)?;
            let Some(e) = events
                .iter()
                .position(|event| record.is(event, record.which))
            else {
                continue;
            };
            let call = (record.lwpid, e);
            match record.which {
                Which::Whole if record.a[0] == mutex => counts[e] += 1,
                Which::Entry if record.a[0] == mutex => {
                    ensure!(
                        open.insert(call),
                        "{name}: two entries of {} in a row",
                        events[e]
                    );
                }
                Which::Return if open.remove(&call) => counts[e] += 1,
                _ => {}
            }
        }
        if let Some((lwpid, e)) = open.into_iter().next() {
            bail!(
                "{name}: an entry of {} by {lwpid} without its return",
                events[e]
            );
        }
    }
    Ok(counts)
}

/// How the tracer ended in a trial.
#[derive(Clone, Copy)]
enum Ended {
    /// Exit status 0 with its summary: the signal came while tracing.
    Clean,
    /// Killed by SIGINT or SIGTERM before its handlers were in place, while loading.
    BeforeTracing,
    /// Killed by SIGKILL.
    Killed,
}

impl Ended {
    fn describe(self) -> &'static str {
        match self {
            Ended::Clean => "exited cleanly",
            Ended::BeforeTracing => "died while starting",
            Ended::Killed => "killed",
        }
    }
}

fn run_trial(
    tracer: &Path,
    workload: &Path,
    expected: &[u8],
    options: &[&str],
    signal: i32,
    delay: Duration,
    dir: &Path,
) -> Result<Ended> {
    let mut target = command(workload)
        .args([THREADS, ROUNDS])
        .stdout(Stdio::piped())
        .spawn()?;
    wait_until_running(target.id(), workload)?;
    let mut traced = command(tracer)
        .args(options)
        .arg("--dir")
        .arg(dir)
        .args(["-p", &target.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()?;
    std::thread::sleep(delay);
    send(traced.id(), signal)?;
    let status = wait_within(&mut traced, TRACER_EXIT_LIMIT, "the signalled tracer")?;
    let stderr = read_all(&mut traced)?;
    let ended = how_it_ended(status, signal, &stderr)?;
    check_files(dir, matches!(ended, Ended::Killed))?;
    wait_within(
        &mut target,
        WORKLOAD_LIMIT,
        "the workload, once its tracer was gone,",
    )?;
    let finished = target.wait_with_output()?;
    ensure!(
        finished.status.success(),
        "the workload exited with {}",
        finished.status
    );
    ensure!(
        finished.stdout == expected,
        "the workload printed {:?}, untraced {:?}",
        String::from_utf8_lossy(&finished.stdout),
        String::from_utf8_lossy(expected)
    );
    Ok(ended)
}

/// Waits until process `pid` runs `workload`'s threads, so with its C library loaded: a
/// tracer started before that could find no pthread functions to trace.
fn wait_until_running(pid: u32, workload: &Path) -> Result<()> {
    let give_up = Instant::now() + Duration::from_secs(5);
    loop {
        let exe = fs::read_link(format!("/proc/{pid}/exe")).ok();
        let threads =
            fs::read_dir(format!("/proc/{pid}/task")).map_or(0, std::iter::Iterator::count);
        if exe.as_deref() == Some(workload) && threads > 1 {
            return Ok(());
        }
        ensure!(Instant::now() < give_up, "the workload never started");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn how_it_ended(status: ExitStatus, signal: i32, stderr: &str) -> Result<Ended> {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) if signal != SIGKILL => {
            ensure!(
                stderr.contains(" records written, "),
                "no summary line: {stderr}"
            );
            Ok(Ended::Clean)
        }
        (None, Some(SIGKILL)) if signal == SIGKILL => Ok(Ended::Killed),
        (None, Some(number)) if number == signal => Ok(Ended::BeforeTracing),
        _ => bail!("the tracer ended with {status}: {stderr}"),
    }
}

/// Every line of every `tr.*` file is a whole record; after SIGKILL, the last line of a file
/// may be cut short.
fn check_files(dir: &Path, killed: bool) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !tracer_model::tr::is_file_name(&name) {
            continue;
        }
        let text = fs::read(entry.path())?;
        let text = String::from_utf8(text).with_context(|| format!("{name} is not text"))?;
        let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
        if killed && lines.last().is_some_and(|l| !l.ends_with('\n')) {
            lines.pop();
        }
        for (number, line) in lines.iter().enumerate() {
            let record = line
                .strip_suffix('\n')
                .with_context(|| format!("{name} ends in a partial line: {line:?}"))?;
            tracer_model::tr::parse_line(record)
                .with_context(|| format!("{name} line {}: {record:?}", number + 1))?;
        }
    }
    Ok(())
}

/// No program of the tracer's is still loaded (the kernel frees them shortly after the last
/// descriptor closes).
fn check_no_programs_left() -> Result<()> {
    let give_up = Instant::now() + RELEASE_LIMIT;
    loop {
        let left: Vec<String> = aya::programs::loaded_programs()
            .filter_map(|p| Some(p.ok()?.name_as_str()?.to_owned()))
            .filter(|name| name.starts_with(PROGRAM_PREFIX))
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() > give_up {
            bail!("BPF programs {left:?} outlived the tracer");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A new trace starts at once and records exactly the calls it is given.
fn check_new_trace(tracer: &Path, contend: &Path, dir: &Path) -> Result<()> {
    const PAIRS: usize = 100;
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir)?;
    output(
        command(tracer)
            .args(["--events", "mutex", "--dir"])
            .arg(dir)
            .arg("--")
            .arg(contend)
            .args(["1", &PAIRS.to_string()]),
    )
    .context("a new trace after the trial")?;
    let mut lines = 0;
    for entry in fs::read_dir(dir)? {
        lines += fs::read_to_string(entry?.path())?.lines().count();
    }
    ensure!(
        lines == PAIRS * 3,
        "the new trace holds {lines} records, not {}",
        PAIRS * 3
    );
    Ok(())
}

fn send(pid: u32, signal: i32) -> Result<()> {
    crate::shell::run(
        command("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string()),
    )
}

fn read_all(child: &mut Child) -> Result<String> {
    let mut text = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        std::io::Read::read_to_string(&mut stderr, &mut text)?;
    }
    Ok(text)
}

/// A shell runs background jobs with SIGINT ignored, and the tracers started here would inherit
/// that: one signalled in the first moment of its life, before it catches the signal itself,
/// would then trace on. Children get the default dispositions, as from a terminal.
fn restore_default_stop_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: setting a disposition to the default has no handler to be unsafe in.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
}

/// Waits for `child` to exit; kills it past `limit` (a tracer that missed its signal, a
/// workload left stopped) rather than hang the run. `what` names it in the error.
fn wait_within(child: &mut Child, limit: Duration, what: &str) -> Result<ExitStatus> {
    let give_up = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() > give_up {
            child.kill()?;
            child.wait()?;
            bail!("{what} did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A small fast generator: repeatable from its seed, and needs no crate.
struct XorShift(u64);

impl XorShift {
    /// A number in 0..bound.
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}
