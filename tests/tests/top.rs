//! `thrtrace-bpf top` used as a person uses it: in a terminal (tmux), on a running
//! process whose contention is certain (tests/workloads/contention.c), watched until its locks
//! show, then `q`; in a window too small for its table, resized, and sorted by a key.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use thrtrace_tests::{TempDir, bpf_available, field, prerequisite, tracer, workload};

/// A tmux server of the test's own, so that nobody else's sessions are touched.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The visible screen of the session.
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }

    /// Waits (a bound for a hang, not a timing) until the screen shows what `shows` wants.
    fn wait_for(&self, what: &str, shows: impl Fn(&str) -> bool) -> String {
        let give_up = Instant::now() + Duration::from_mins(1);
        loop {
            let screen = self.screen();
            if shows(&screen) {
                return screen;
            }
            assert!(Instant::now() < give_up, "{what} never showed:\n{screen}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}

/// `top -p PID` in a tmux window of `columns` by `rows`, on the contention workload, rounds
/// until killed (20 ms holds); what a test needs of it.
struct Watched {
    tmux: Tmux,
    target: Child,
    /// The target's pid, and the address of its mutex `first`.
    pid: u32,
    first: u64,
    /// Where `top`'s exit status is written once it exits.
    exit_file: PathBuf,
    _dir: TempDir,
}

/// `None` (the test skipped) without BPF or tmux.
fn watch(test: &str, columns: u16, rows: u16) -> Option<Watched> {
    let tmux_runs = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !bpf_available(test)
        || !prerequisite(
            test,
            (!tmux_runs).then_some("tmux is not installed (cargo xtask setup installs it)"),
        )
    {
        return None;
    }
    let dir = TempDir::new(test);
    let mut target = Command::new(workload("contention"))
        .args(["100000", "20", "3", "10"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first_line = String::new();
    BufReader::new(target.stdout.as_mut().unwrap())
        .read_line(&mut first_line)
        .unwrap();
    let pid = target.id();
    let tmux = Tmux {
        socket: format!("thrtrace-{test}-{}", std::process::id()),
    };
    let exit_file = dir.path().join("exit");
    let command = format!(
        "{} top -p {pid} --interval 300ms; echo $? > {}; sleep 600",
        tracer().display(),
        exit_file.display()
    );
    let (columns, rows) = (columns.to_string(), rows.to_string());
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        &columns,
        "-y",
        &rows,
        &command,
    ]);
    Some(Watched {
        tmux,
        target,
        pid,
        first: field(&first_line, "first"),
        exit_file,
        _dir: dir,
    })
}

impl Watched {
    /// Presses `q`; returns the screen once `top` has exited 0.
    fn quit(&self) -> String {
        self.tmux.run(&["send-keys", "-t", "top", "q"]);
        let give_up = Instant::now() + Duration::from_mins(1);
        while !self.exit_file.exists() {
            assert!(
                Instant::now() < give_up,
                "q did not quit:\n{}",
                self.tmux.screen()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            std::fs::read_to_string(&self.exit_file).unwrap().trim(),
            "0"
        );
        self.tmux.screen()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.target.kill();
        let _ = self.target.wait();
    }
}

#[test]
fn top_shows_the_contended_locks_of_a_running_process_and_q_quits() {
    let Some(mut watched) = watch("top", 200, 50) else {
        return;
    };
    let (tmux, pid) = (&watched.tmux, watched.pid);

    // The view: its title, and the two mutexes with the waiters' line and the holder.
    let screen = tmux.wait_for("the contended mutexes", |screen| {
        screen.contains(&format!(
            "thrtrace-bpf top: pid {pid}, contended calls only"
        )) && screen
            .lines()
            .any(|l| l.starts_with("first ") && l.contains("mutex"))
            && screen
                .lines()
                .any(|l| l.starts_with("second ") && l.contains("mutex"))
            && screen
                .lines()
                .any(|l| l.starts_with("sem ") && l.contains("sema"))
    });
    assert!(
        screen.contains(&format!("held by thread {pid} (contention)")),
        "{screen}"
    );
    assert!(
        screen.contains("contention.c:"),
        "callers by line: {screen}"
    );
    // It refreshes: the records counted grow.
    // The title says "..., N records; ...".
    let records = |screen: &str| -> u64 {
        screen
            .lines()
            .next()
            .and_then(|title| title.split(';').find(|part| part.ends_with(" records")))
            .and_then(|part| part.split_whitespace().rev().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let before = records(&screen);
    tmux.wait_for("a refresh with more records", |screen| {
        screen.starts_with("thrtrace-bpf top:") && records(screen) > before
    });

    let screen = watched.quit();
    // Back on the normal screen: the last table, and the summary.
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("first ") && l.contains("mutex")),
        "{screen}"
    );
    assert!(screen.contains("records written, 0 lost"), "{screen}");
    assert!(
        !screen.contains("thrtrace-bpf top:"),
        "left the alternate screen: {screen}"
    );

    // The target was not harmed: it runs on; the address it printed is the one shown.
    assert!(
        watched.target.try_wait().unwrap().is_none(),
        "the target ended"
    );
    assert_ne!(watched.first, 0);
}

/// Whether `screen` is `top`'s view, whole, of `rows` lines: the title on the first line and
/// the help on the second (nothing scrolled off), the lock table's header, and right under it
/// the lock `first_row` starts with.
fn fits(screen: &str, rows: usize, first_row: &str) -> bool {
    let lines: Vec<&str> = screen.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("lock ") && l.contains(" kind    acquired contended"));
    lines.len() <= rows
        && lines
            .first()
            .is_some_and(|l| l.starts_with("thrtrace-bpf top: pid "))
        && lines.get(1).is_some_and(|l| l.starts_with("sort: "))
        && header.is_some_and(|at| lines.get(at + 1).is_some_and(|l| l.starts_with(first_row)))
}

#[test]
fn top_fits_a_small_window_as_it_is_resized_and_sorts_by_the_keys_it_shows() {
    let Some(watched) = watch("top_small_window", 160, 20) else {
        return;
    };
    let tmux = &watched.tmux;
    // Each round, the read-write lock is waited for twice (a read and a write lock by each
    // waiter), the semaphore and one of the two mutexes once: `rw` is the most waited for, by
    // time as by count. Its table is longer than the window: the header and `rw` stay.
    let screen = tmux.wait_for(
        "the title, the help, the header and rw in 20 lines",
        |screen| fits(screen, 20, "rw "),
    );
    assert!(
        screen.lines().nth(1).unwrap().starts_with(
            "sort: [w] time waited, c contended, a acquired, < > step through them; q quits"
        ),
        "{screen}"
    );
    assert!(
        screen.lines().any(|l| l.starts_with("lock contention (")),
        "{screen}"
    );
    assert!(screen.lines().all(|l| l.chars().count() <= 160), "{screen}");
    // Resized to 12 lines: redrawn to fit, the header and rw still there.
    tmux.run(&["resize-window", "-t", "top", "-y", "12"]);
    tmux.wait_for("the view redrawn in 12 lines", |screen| {
        screen.lines().count() == 12 && fits(screen, 12, "rw ")
    });
    // `c` sorts by contended acquisitions: the help line marks it, the heading says it.
    tmux.run(&["send-keys", "-t", "top", "c"]);
    let screen = tmux.wait_for("the view sorted by contended", |screen| {
        screen
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("sort: w time waited, [c] contended,"))
            && fits(screen, 12, "rw ")
    });
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("lock contention (")
                && l.ends_with("by acquisitions that waited:")),
        "{screen}"
    );
    watched.quit();
}
