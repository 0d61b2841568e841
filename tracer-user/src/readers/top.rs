//! `thrtrace-bpf top`: the report, live. A sink the trace is given besides its own (it writes
//! no file): it feeds the records into the report's analysis and redraws the report's lock
//! tables every interval, as `perf top` does, on the terminal's alternate screen, cut to the
//! window (its size read again every [`STEP`], so that a resized window is redrawn at once).
//! Keys: `w`, `c`, `a` sort the locks (`<` and `>` step through the sorts, as in `htop`), `q`
//! quits (it stops the trace as Ctrl-C does).

use std::{
    fmt::Write as _,
    io::{self, IsTerminal},
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
    sinks::{Sink, Summary, TraceEnd, Written},
    symbolize::{Mapping, Symbols},
};

/// How many locks the view lists where the window's size is not known, and at the end.
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

/// The sort keys, as `perf top` and `htop` users expect them: a letter per column, and `<` and
/// `>` to step through them (htop's), shown in the view's help line.
const SORT_KEYS: [(u8, ReportSort, &str); 3] = [
    (b'w', ReportSort::Wait, "time waited"),
    (b'c', ReportSort::Contended, "contended"),
    (b'a', ReportSort::Acquisitions, "acquired"),
];

/// How often a wait for the next frame looks at the keys, the window's size and the trace's end.
const STEP: Duration = Duration::from_millis(100);

/// The window's size, in rows and columns; `None` if standard output is no terminal.
fn window_size() -> Option<(usize, usize)> {
    let size = rustix::termios::tcgetwinsize(io::stdout()).ok()?;
    Some((usize::from(size.ws_row), usize::from(size.ws_col)))
        .filter(|&(rows, columns)| rows > 0 && columns > 0)
}

/// What ended a wait for the next frame.
#[derive(Debug, PartialEq, Eq)]
enum Wake {
    /// The interval is over.
    Due,
    /// The window's size changed.
    Resized,
    /// A sort key was pressed.
    Sort(ReportSort),
    /// `q` was pressed.
    Quit,
    /// The trace is ending.
    Stopping,
}

/// What a key pressed does, the view being sorted by `sort`.
fn key_pressed(key: u8, sort: ReportSort) -> Option<Wake> {
    let at = SORT_KEYS
        .iter()
        .position(|&(_, s, _)| s == sort)
        .unwrap_or(0);
    let step = |by: usize| SORT_KEYS[(at + by) % SORT_KEYS.len()].1;
    match key {
        b'q' | b'Q' => Some(Wake::Quit),
        b'>' => Some(Wake::Sort(step(1))),
        b'<' => Some(Wake::Sort(step(SORT_KEYS.len() - 1))),
        key => SORT_KEYS
            .iter()
            .find(|&&(letter, _, _)| letter == key.to_ascii_lowercase())
            .map(|&(_, sort, _)| Wake::Sort(sort)),
    }
}

/// Waits until `due`, a key (read if `keys`: standard input is a terminal), a change of the
/// window's size from `drawn`, or the trace's end.
fn wait_for_next_frame(
    keys: bool,
    due: Instant,
    drawn: Option<(usize, usize)>,
    sort: ReportSort,
    stop: &AtomicBool,
) -> Wake {
    let stdin = io::stdin();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Wake::Stopping;
        }
        let now = Instant::now();
        if now >= due {
            return Wake::Due;
        }
        if window_size() != drawn {
            return Wake::Resized;
        }
        let step = (due - now).min(STEP);
        if !keys {
            std::thread::sleep(step);
            continue;
        }
        let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
        let timeout = Timespec::try_from(step).ok();
        if !matches!(poll(&mut fds, timeout.as_ref()), Ok(n) if n > 0) {
            continue;
        }
        let mut pressed = [0u8; 16];
        let read = rustix::io::read(&stdin, &mut pressed).unwrap_or(0);
        if let Some(wake) = pressed[..read]
            .iter()
            .rev()
            .find_map(|&key| key_pressed(key, sort))
        {
            return wake;
        }
    }
}

/// The help line: the sort keys, the one in use in brackets, and how to quit.
fn help_line(sort: ReportSort) -> String {
    let keys: Vec<String> = SORT_KEYS
        .iter()
        .map(|&(letter, s, what)| match s == sort {
            true => format!("[{}] {what}", char::from(letter)),
            false => format!("{} {what}", char::from(letter)),
        })
        .collect();
    format!("sort: {}, < > step through them; q quits", keys.join(", "))
}

/// A frame for a window of `rows` by `columns`: each line at its own row, cut to the width, as
/// many as fit, so that nothing scrolls and the first lines (the title, the help, the table's
/// header) stay.
fn frame<'a>(lines: impl IntoIterator<Item = &'a str>, (rows, columns): (usize, usize)) -> String {
    let mut out = String::from(CLEAR);
    for (row, line) in lines.into_iter().take(rows).enumerate() {
        let cut: String = line.chars().take(columns).collect();
        let _ = write!(out, "\x1b[{};1H{cut}", row + 1);
    }
    out
}

/// The lock tables so far, of at most `top` locks and idle waits, and the records they are made
/// of.
fn tables(
    seen: &Mutex<Seen>,
    symbols: &mut Symbols,
    top: usize,
    sort: ReportSort,
    kinds: &KindArg,
) -> (String, u64) {
    let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
    for (pid, mapping) in seen.mappings.drain(..) {
        symbols.add_mapping(pid, mapping);
    }
    let table = lock_table_so_far(&mut seen.analysis, symbols, top, sort, kinds.clone());
    (table, seen.records)
}

/// Draws the view every `interval`, and at once when the window is resized or a sort key
/// pressed, until `stop`; then the last tables on the normal screen. `q` (read if `keys`) stops
/// the trace as Ctrl-C does: every output completed, targets detached.
fn draw(
    seen: &Mutex<Seen>,
    stop: &AtomicBool,
    interval: Duration,
    what: &str,
    kinds: &KindArg,
    keys: bool,
) {
    let since = Instant::now();
    // A live view: never waiting on a server, nor writing over the screen.
    let mut symbols = Symbols::live();
    let mut sort = ReportSort::Wait;
    let mut due = Instant::now();
    let mut drawn = window_size();
    loop {
        match wait_for_next_frame(keys, due, drawn, sort, stop) {
            Wake::Stopping => break,
            Wake::Quit => {
                let _ = rustix::process::kill_process(
                    rustix::process::getpid(),
                    rustix::process::Signal::INT,
                );
            }
            Wake::Sort(by) => sort = by,
            Wake::Due | Wake::Resized => {}
        }
        drawn = window_size();
        // A lock or idle wait takes a line at least: no more than fit are looked up.
        let top = drawn.map_or(LOCKS_SHOWN, |(rows, _)| rows);
        let (table, records) = tables(seen, &mut symbols, top, sort, kinds);
        let title = format!(
            "thrtrace-bpf top: {what}, contended calls only; {} traced, {records} records; \
             refreshed every {}",
            duration(since.elapsed().as_nanos() as u64),
            humantime::format_duration(interval),
        );
        let help = help_line(sort);
        let lines = [title.as_str(), help.as_str()]
            .into_iter()
            .chain(table.lines());
        let text = match drawn {
            Some(size) => frame(lines, size),
            None => format!("\n{}\n", lines.collect::<Vec<&str>>().join("\n")),
        };
        // A frame nobody can read is dropped: the trace goes on.
        let _ = crate::say::print(text);
        due = Instant::now() + interval;
    }
    let (table, _) = tables(seen, &mut symbols, LOCKS_SHOWN, sort, kinds);
    let _ = crate::say::print(match io::stdout().is_terminal() {
        true => format!("{LEAVE_ALTERNATE_SCREEN}{table}"),
        false => format!("\n{table}"),
    });
}

impl Sink for LiveView {
    fn begin(&mut self) -> io::Result<()> {
        let tty = io::stdout().is_terminal();
        if tty {
            let _ = crate::say::print(ENTER_ALTERNATE_SCREEN);
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
    fn finish(&mut self, _end: &TraceEnd) -> io::Result<Summary> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(drawer) = self.drawer.take() {
            let _ = drawer.join();
        }
        self.restore();
        Ok(Written::LiveView.into())
    }
}

impl Drop for LiveView {
    fn drop(&mut self) {
        self.restore();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_puts_each_line_on_its_row_cut_to_the_window_and_no_more_lines() {
        let lines = [
            "title",
            "help",
            "0123456789",
            "the fourth line",
            "not shown",
        ];
        assert_eq!(
            frame(lines, (4, 8)),
            format!("{CLEAR}\x1b[1;1Htitle\x1b[2;1Hhelp\x1b[3;1H01234567\x1b[4;1Hthe four")
        );
        // Cut by characters, not bytes.
        assert_eq!(frame(["µs µs"], (1, 4)), format!("{CLEAR}\x1b[1;1Hµs µ"));
    }

    #[test]
    fn the_sort_keys_choose_or_step_through_the_sorts_the_help_line_shows() {
        assert_eq!(
            key_pressed(b'c', ReportSort::Wait),
            Some(Wake::Sort(ReportSort::Contended))
        );
        assert_eq!(
            key_pressed(b'A', ReportSort::Wait),
            Some(Wake::Sort(ReportSort::Acquisitions))
        );
        assert_eq!(
            key_pressed(b'>', ReportSort::Acquisitions),
            Some(Wake::Sort(ReportSort::Wait))
        );
        assert_eq!(
            key_pressed(b'<', ReportSort::Wait),
            Some(Wake::Sort(ReportSort::Acquisitions))
        );
        assert_eq!(key_pressed(b'q', ReportSort::Wait), Some(Wake::Quit));
        assert_eq!(key_pressed(b'x', ReportSort::Wait), None);
        assert_eq!(
            help_line(ReportSort::Contended),
            "sort: w time waited, [c] contended, a acquired, < > step through them; q quits"
        );
    }
}
