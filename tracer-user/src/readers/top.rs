//! `thrtrace-bpf top`: the report, live. A sink the trace is given besides its own (it writes
//! no file): it feeds the records into the report's analysis and redraws the report's lock
//! table every interval, as `perf top` does, on the terminal's alternate screen; `q` quits (it
//! stops the trace as Ctrl-C does).

use std::{
    io::{self, IsTerminal, Write},
    os::fd::AsFd,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use rustix::{
    event::{PollFd, PollFlags, Timespec, poll},
    termios::{LocalModes, OptionalActions, Termios, tcgetattr, tcsetattr},
};
use tracer_model::{TraceRecord, analysis::Analysis, event::SystemEvent};

use super::report::{KindArg, ReportSort, lock_table_so_far, take_system_event};
use crate::{
    say::duration,
    sinks::{Sink, TraceEnd},
    symbolize::{Mapping, Symbols},
};

/// How many locks the view lists.
const LOCKS_SHOWN: usize = 15;
/// The alternate screen on and off, and a clear screen with the cursor at the top.
const ENTER_ALTERNATE_SCREEN: &str = "\x1b[?1049h";
const LEAVE_ALTERNATE_SCREEN: &str = "\x1b[?1049l";
const CLEAR: &str = "\x1b[H\x1b[2J";

/// What the view shows, fed by the session's thread and drawn by the view's (which keeps the
/// symbols, whose caches are its own).
struct Seen {
    analysis: Analysis,
    /// Mappings not yet given to the symbols.
    mappings: Vec<(u32, Mapping)>,
    records: u64,
}

pub struct LiveView {
    interval: Duration,
    /// The kinds of lock or wait shown (`--kind`).
    kinds: KindArg,
    /// What the trace is of, for the title ("pid 1234", "every process").
    what: String,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    drawer: Option<JoinHandle<()>>,
    /// The terminal's settings before keys were read one by one, to restore.
    terminal: Option<Termios>,
}

impl LiveView {
    pub fn new(interval: Duration, what: String, kinds: KindArg) -> Self {
        LiveView {
            interval,
            kinds,
            what,
            seen: Arc::new(Mutex::new(Seen {
                analysis: Analysis::new(true).without_lock_order(),
                mappings: Vec::new(),
                records: 0,
            })),
            stop: Arc::new(AtomicBool::new(false)),
            drawer: None,
            terminal: None,
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts the terminal back as it was.
    fn restore(&mut self) {
        if let Some(before) = self.terminal.take() {
            let _ = tcsetattr(io::stdin().as_fd(), OptionalActions::Now, &before);
        }
    }
}

/// Reads keys one by one, unechoed, from standard input if it is a terminal; the settings
/// before, to restore.
fn keys_one_by_one() -> Option<Termios> {
    let stdin = io::stdin();
    if !stdin.is_terminal() {
        return None;
    }
    let before = tcgetattr(stdin.as_fd()).ok()?;
    let mut raw = before.clone();
    raw.local_modes
        .remove(LocalModes::ICANON | LocalModes::ECHO);
    tcsetattr(stdin.as_fd(), OptionalActions::Now, &raw).ok()?;
    Some(before)
}

/// Whether `q` was pressed within `timeout` (false at once if standard input is no terminal:
/// the view then redraws at each interval until the trace ends).
fn quit_pressed(keys: bool, timeout: Duration) -> bool {
    if !keys {
        std::thread::sleep(timeout);
        return false;
    }
    let stdin = io::stdin();
    let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
    let timeout = Timespec::try_from(timeout).ok();
    if !matches!(poll(&mut fds, timeout.as_ref()), Ok(n) if n > 0) {
        return false;
    }
    let mut key = [0u8; 16];
    let read = rustix::io::read(&stdin, &mut key).unwrap_or(0);
    key[..read].iter().any(|&k| k == b'q' || k == b'Q')
}

/// The lock table so far, and the records it is made of.
fn table(seen: &Mutex<Seen>, symbols: &mut Symbols, kinds: &KindArg) -> (String, u64) {
    let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
    for (pid, mapping) in seen.mappings.drain(..) {
        symbols.add_mapping(pid, mapping);
    }
    let table = lock_table_so_far(
        &mut seen.analysis,
        symbols,
        LOCKS_SHOWN,
        ReportSort::Wait,
        kinds.clone(),
    );
    (table, seen.records)
}

/// Draws the view every `interval` until `stop`, then the last table on the normal screen.
/// `q` (read if `keys`) stops the trace as Ctrl-C does: every output completed, targets
/// detached.
fn draw(
    seen: &Mutex<Seen>,
    stop: &AtomicBool,
    interval: Duration,
    what: &str,
    kinds: &KindArg,
    keys: bool,
) {
    let tty = io::stdout().is_terminal();
    let since = Instant::now();
    let mut symbols = Symbols::new();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        if !stopping && quit_pressed(keys, interval) {
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::INT,
            );
        }
        let (table, records) = table(seen, &mut symbols, kinds);
        let mut out = io::stdout().lock();
        let _ = match (stopping, tty) {
            (true, true) => write!(out, "{LEAVE_ALTERNATE_SCREEN}{table}"),
            (true, false) => write!(out, "\n{table}"),
            (false, _) => write!(
                out,
                "{}thrtrace-bpf top: {what}, contended calls only; {} traced, {records} \
                 records; refreshed every {}; q quits\n\n{table}",
                if tty { CLEAR } else { "\n" },
                duration(since.elapsed().as_nanos() as u64),
                humantime::format_duration(interval),
            ),
        };
        let _ = out.flush();
        if stopping {
            return;
        }
    }
}

impl Sink for LiveView {
    fn begin(&mut self) -> io::Result<()> {
        let tty = io::stdout().is_terminal();
        if tty {
            print!("{ENTER_ALTERNATE_SCREEN}");
        }
        self.terminal = keys_one_by_one();
        let keys = self.terminal.is_some();
        let (seen, stop, interval, what, kinds) = (
            Arc::clone(&self.seen),
            Arc::clone(&self.stop),
            self.interval,
            self.what.clone(),
            self.kinds.clone(),
        );
        let drawer = std::thread::Builder::new()
            .name("live-view".into())
            .spawn(move || draw(&seen, &stop, interval, &what, &kinds, keys))?;
        self.drawer = Some(drawer);
        Ok(())
    }

    fn record(&mut self, record: &TraceRecord) -> io::Result<()> {
        let mut seen = self.seen();
        seen.records += 1;
        seen.analysis.record(record);
        Ok(())
    }

    fn system_event(&mut self, event: &SystemEvent) -> io::Result<()> {
        let seen = &mut *self.seen();
        take_system_event(event, &mut seen.analysis, |pid, mapping| {
            seen.mappings.push((pid, mapping));
        });
        Ok(())
    }

    fn wants_system_events(&self) -> bool {
        true
    }

    /// Leaves the screen as it was, with the last table printed on it.
    fn finish(&mut self, _end: &TraceEnd) -> io::Result<String> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(drawer) = self.drawer.take() {
            let _ = drawer.join();
        }
        self.restore();
        Ok("the live view".into())
    }
}

impl Drop for LiveView {
    fn drop(&mut self) {
        self.restore();
    }
}
