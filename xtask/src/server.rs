//! A real multi-threaded server from Debian's packages under load, for the bench: a private
//! MariaDB (`mariadb-server`) on a scratch data directory, reached only through a socket in it
//! (no network), loaded by `sysbench oltp_read_write`. Stopped when dropped.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::shell::{command, output, run, succeeds};

/// sysbench's client threads, tables and rows per table.
const CLIENTS: u32 = 8;
const TABLES: u32 = 4;
const ROWS: u32 = 10_000;

/// How long the server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_mins(1);

pub struct Server {
    process: Child,
    dir: PathBuf,
}

impl Server {
    /// A new server with its data in `dir` (emptied first) and sysbench's tables made.
    pub fn start(dir: &Path) -> Result<Self> {
        let _ = fs::remove_dir_all(dir);
        fs::create_dir_all(dir)?;
        let data = dir.join("data");
        run(command("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--user=root", "--skip-test-db"])
            .stdout(Stdio::null()))
        .context("cannot make MariaDB's data directory")?;
        let process = command("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.join("socket").display()))
            .arg(format!("--log-error={}", dir.join("error.log").display()))
            .args([
                "--skip-networking",
                "--skip-grant-tables",
                "--user=root",
                "--innodb-buffer-pool-size=256M",
            ])
            .spawn()
            .context("cannot start mariadbd")?;
        let server = Server {
            process,
            dir: dir.to_owned(),
        };
        let started = Instant::now();
        while !succeeds(
            server
                .client()
                .args(["-e", "select 1"])
                .stderr(Stdio::null()),
        ) {
            if started.elapsed() > START_TIMEOUT {
                bail!(
                    "mariadbd did not accept connections within {START_TIMEOUT:?}; see {}",
                    dir.join("error.log").display()
                );
            }
            sleep(Duration::from_millis(200));
        }
        run(server.client().args(["-e", "create database sbtest"]))?;
        run(server.sysbench("prepare").stdout(Stdio::null()))?;
        Ok(server)
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// What the load is, for the bench's table.
    pub fn load() -> String {
        format!("sysbench oltp_read_write, {CLIENTS} clients, {TABLES} tables of {ROWS} rows")
    }

    /// Transactions per second of a `seconds`-long round of the load.
    pub fn transactions_per_second(&self, seconds: u32) -> Result<f64> {
        let out = output(self.sysbench("run").arg(format!("--time={seconds}")))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        // "    transactions:                        8154   (407.08 per sec.)"
        stdout
            .lines()
            .find_map(|line| line.trim().strip_prefix("transactions:"))
            .and_then(|rest| {
                rest.split('(')
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .with_context(|| format!("sysbench printed no transaction rate: {stdout}"))
    }

    fn client(&self) -> std::process::Command {
        let mut client = command("mariadb");
        client
            .arg(format!("--socket={}", self.dir.join("socket").display()))
            .arg("-uroot");
        client
    }

    fn sysbench(&self, what: &str) -> std::process::Command {
        let mut sysbench = command("sysbench");
        sysbench
            .args(["oltp_read_write", "--db-driver=mysql", "--mysql-user=root"])
            .arg(format!(
                "--mysql-socket={}",
                self.dir.join("socket").display()
            ))
            .args([
                "--mysql-db=sbtest".to_owned(),
                format!("--tables={TABLES}"),
                format!("--table-size={ROWS}"),
                format!("--threads={CLIENTS}"),
            ])
            .arg(what);
        sysbench
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child, which has not been reaped (it is below).
        unsafe { libc::kill(self.process.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.process.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}
