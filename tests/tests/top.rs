//! `thrtrace-bpf top` (issue 28) used as a person uses it: in a terminal (tmux), on a running
//! process whose contention is certain (tests/workloads/contention.c), watched until its locks
//! show, then `q`.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
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

#[test]
fn top_shows_the_contended_locks_of_a_running_process_and_q_quits() {
    let tmux_runs = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !bpf_available("top")
        || !prerequisite(
            "top",
            (!tmux_runs).then_some("tmux is not installed (cargo xtask setup installs it)"),
        )
    {
        return;
    }
    let dir = TempDir::new("top");
    // Long enough to outlast the test: 20 ms holds, rounds until killed.
    let mut target = Command::new(workload("contention"))
        .args(["100000", "20", "3", "10"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first_line = String::new();
    BufReader::new(target.stdout.as_mut().unwrap())
        .read_line(&mut first_line)
        .unwrap();
    let first: u64 = field(&first_line, "first");
    let pid = target.id();
    let tmux = Tmux {
        socket: format!("thrtrace-top-{}", std::process::id()),
    };
    let exit_file = dir.path().join("exit");
    let command = format!(
        "{} top -p {pid} --interval 300ms; echo $? > {}; sleep 600",
        tracer().display(),
        exit_file.display()
    );
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "200",
        "-y",
        "50",
        &command,
    ]);

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

    tmux.run(&["send-keys", "-t", "top", "q"]);
    let give_up = Instant::now() + Duration::from_mins(1);
    while !exit_file.exists() {
        assert!(
            Instant::now() < give_up,
            "q did not quit:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(std::fs::read_to_string(&exit_file).unwrap().trim(), "0");
    // Back on the normal screen: the last table, and the summary.
    let screen = tmux.screen();
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
    assert!(target.try_wait().unwrap().is_none(), "the target ended");
    assert_ne!(first, 0);
    target.kill().unwrap();
    target.wait().unwrap();
}
