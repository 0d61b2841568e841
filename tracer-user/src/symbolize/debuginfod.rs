//! Debug files fetched by build-id from debuginfod servers, as elfutils' client fetches them,
//! for modules that have neither their symbols nor their lines here (a stripped production
//! binary, a library without its -dbgsym package).
//!
//! Set as for gdb, perf and systemtap: `DEBUGINFOD_URLS` (servers, separated by spaces),
//! `DEBUGINFOD_CACHE_PATH` (default `$XDG_CACHE_HOME/debuginfod_client`, else
//! `~/.cache/debuginfod_client`, the invoking user's under sudo), `DEBUGINFOD_TIMEOUT` (seconds
//! to connect, to get an answer and between two reads of one: 5 by default, not elfutils' 90,
//! since a report waits on it), `DEBUGINFOD_MAXTIME` and `DEBUGINFOD_MAXSIZE` (a download's
//! longest time and largest size, none by default). Files are cached as elfutils caches them
//! (`CACHE/BUILDID/debuginfo`), so that each tool finds what another fetched; they are made
//! as every file of ours is (exclusively, relative to a directory opened once, never through a
//! link, mode 0600, the invoking user's under sudo), and one is used only if its build-id is
//! the one asked for. Only build-ids leave the machine.
//!
//! Several modules are fetched side by side. A server that fails (cannot be reached, times
//! out, answers with an error other than 404) is not asked again by this process, and what
//! happened is said once: an unreachable server costs a report one timeout, not one per
//! module.

use std::{
    io,
    path::{Path, PathBuf},
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use super::hex_digits;
use crate::{sinks::output_dir::OutputDir, sudo};

/// How long a server has to connect, to answer, and between two reads of its answer, unless
/// `DEBUGINFOD_TIMEOUT` says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How many downloads run side by side.
const PARALLEL: usize = 8;

/// How long fetching runs before a line says that it does.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// The name elfutils gives a module's debug file in its build-id's directory of the cache.
const DEBUG_FILE: &str = "debuginfo";

/// A client of the debuginfod servers `DEBUGINFOD_URLS` names.
pub struct Debuginfod {
    servers: Vec<Server>,
    cache: PathBuf,
    agent: ureq::Agent,
    max_size: Option<u64>,
}

struct Server {
    url: String,
    /// Why it failed, once it has: it is not asked again.
    failure: Mutex<Option<FetchError>>,
}

/// Why a debug file was not fetched.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("{0}")]
    Request(#[from] ureq::Error),
    #[error("answered HTTP {0}")]
    Status(u16),
    #[error("sent a file that is not the debug file of build-id {0}")]
    NotTheFile(String),
    #[error("cannot write to the cache {}: {error}", path.display())]
    Cache { path: PathBuf, error: io::Error },
}

impl FetchError {
    /// Whether the server is to blame, and is not to be asked again (a file larger than
    /// `DEBUGINFOD_MAXSIZE` is not).
    fn is_the_servers(&self) -> bool {
        !matches!(
            self,
            FetchError::Cache { .. } | FetchError::Request(ureq::Error::BodyExceedsLimit(_))
        )
    }
}

impl Debuginfod {
    /// The client the environment sets up, if `DEBUGINFOD_URLS` names a server and a cache
    /// directory can be placed.
    pub fn from_env() -> Option<Debuginfod> {
        let servers: Vec<Server> = std::env::var("DEBUGINFOD_URLS")
            .ok()?
            .split_whitespace()
            .map(|url| Server {
                url: url.trim_end_matches('/').to_owned(),
                failure: Mutex::new(None),
            })
            .collect();
        if servers.is_empty() {
            return None;
        }
        let seconds = |variable| {
            let seconds: u64 = std::env::var(variable).ok()?.trim().parse().ok()?;
            Some(Duration::from_secs(seconds))
        };
        let timeout = seconds("DEBUGINFOD_TIMEOUT").unwrap_or(DEFAULT_TIMEOUT);
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_resolve(Some(timeout))
            .timeout_connect(Some(timeout))
            .timeout_recv_response(Some(timeout))
            .timeout_per_read(Some(timeout))
            .timeout_global(seconds("DEBUGINFOD_MAXTIME").filter(|max| !max.is_zero()))
            .tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::PlatformVerifier)
                    .build(),
            )
            .build()
            .new_agent();
        let max_size = std::env::var("DEBUGINFOD_MAXSIZE")
            .ok()
            .and_then(|size| size.trim().parse().ok())
            .filter(|size| *size > 0);
        Some(Debuginfod {
            servers,
            cache: cache_path()?,
            agent,
            max_size,
        })
    }

    /// The debug file of `build_id` that an earlier fetch left in the cache.
    pub fn cached(&self, build_id: &[u8]) -> Option<PathBuf> {
        let path = self.cache.join(hex_digits(build_id)).join(DEBUG_FILE);
        std::fs::symlink_metadata(&path)
            .is_ok_and(|metadata| metadata.is_file())
            .then_some(path)
            .filter(|path| is_debug_file_of(path, build_id))
    }

    /// The debug files of `build_ids`, in their order, fetched side by side into the cache
    /// (`None` for one that no server has). A line says so when this takes more than a
    /// second; another, once, what a server that failed did.
    pub fn fetch(&self, build_ids: &[Vec<u8>]) -> Vec<Option<PathBuf>> {
        let next = AtomicUsize::new(0);
        let fetched = Mutex::new(vec![None; build_ids.len()]);
        let (done, all_done) = mpsc::channel::<()>();
        std::thread::scope(|scope| {
            for _ in 0..PARALLEL.min(build_ids.len()) {
                let done = done.clone();
                scope.spawn(|| {
                    let _done = done;
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(build_id) = build_ids.get(index) else {
                            break;
                        };
                        let file = self.fetch_one(build_id);
                        fetched.lock().unwrap_or_else(PoisonError::into_inner)[index] = file;
                    }
                });
            }
            drop(done);
            // Every thread's sender dropped: all fetched.
            if all_done.recv_timeout(QUIET_FOR) == Err(mpsc::RecvTimeoutError::Timeout) {
                say!(
                    "thrtrace-bpf: fetching the debug information of {} from the debuginfod \
                     servers of DEBUGINFOD_URLS...",
                    crate::say::counted(build_ids.len() as u64, "module"),
                );
            }
        });
        fetched.into_inner().unwrap_or_else(PoisonError::into_inner)
    }

    /// The debug file of `build_id` from the first server that has it, skipping those that
    /// failed.
    fn fetch_one(&self, build_id: &[u8]) -> Option<PathBuf> {
        for server in &self.servers {
            if server.failed() {
                continue;
            }
            let started = Instant::now();
            match self.download(server, build_id) {
                Ok(Some(file)) => return Some(file),
                Ok(None) => {}
                Err(error) if error.is_the_servers() => server.fail(error, started.elapsed()),
                Err(error) => {
                    say!("thrtrace-bpf: debuginfod: {error}; frames keep their module+offset");
                    return None;
                }
            }
        }
        None
    }

    /// The debug file of `build_id` from `server`, into the cache; `None` if it has none.
    fn download(&self, server: &Server, build_id: &[u8]) -> Result<Option<PathBuf>, FetchError> {
        let hex = hex_digits(build_id);
        let url = format!("{}/buildid/{hex}/debuginfo", server.url);
        let response = self.agent.get(&url).call()?;
        match response.status().as_u16() {
            200 => {}
            404 => return Ok(None),
            status => return Err(FetchError::Status(status)),
        }
        let cache_error = |path: &Path| {
            let path = path.to_owned();
            move |error: io::Error| FetchError::Cache { path, error }
        };
        let dir = open_cache_dir(&self.cache.join(&hex)).map_err(cache_error(&self.cache))?;
        let temporary = format!(".{DEBUG_FILE}.{}.tmp", std::process::id());
        let written = (|| {
            let (mut file, _) = dir.create(&temporary).map_err(cache_error(dir.path()))?;
            let mut body = response.into_body().into_with_config();
            if let Some(max) = self.max_size {
                body = body.limit(max);
            }
            io::copy(&mut body.reader(), &mut file).map_err(|error| {
                match error.downcast::<ureq::Error>() {
                    Ok(error) => FetchError::Request(error),
                    Err(error) => FetchError::Cache {
                        path: dir.shown(&temporary),
                        error,
                    },
                }
            })?;
            if !is_debug_file_of(&dir.shown(&temporary), build_id) {
                return Err(FetchError::NotTheFile(hex.clone()));
            }
            dir.rename(&temporary, DEBUG_FILE)
                .map_err(cache_error(dir.path()))
        })();
        if let Err(error) = written {
            let _ = dir.remove(&temporary);
            return Err(error);
        }
        Ok(Some(dir.shown(DEBUG_FILE)))
    }
}

impl Server {
    fn failed(&self) -> bool {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Keeps it from being asked again, and says why, the first time.
    fn fail(&self, error: FetchError, after: Duration) {
        let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        if failure.is_none() {
            say!(
                "thrtrace-bpf: debuginfod server {}: {error} (after {}); not asked again: \
                 the frames it would name keep their module+offset+build-id",
                self.url,
                crate::say::duration(after.as_nanos() as u64)
            );
            *failure = Some(error);
        }
    }
}

/// Whether `path` is an ELF file whose build-id is `build_id`: a file read back from the cache
/// or a server is trusted no further.
fn is_debug_file_of(path: &Path, build_id: &[u8]) -> bool {
    blazesym::helper::read_elf_build_id(path)
        .ok()
        .flatten()
        .is_some_and(|id| *id == *build_id)
}

/// Where the cache is: `DEBUGINFOD_CACHE_PATH`, else elfutils' default in the user's cache
/// directory (the invoking user's under sudo, whose environment sudo has reset).
fn cache_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("DEBUGINFOD_CACHE_PATH").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let cache_home = match sudo::invoking_user() {
        Some(user) => sudo::home_of(user.uid)?.join(".cache"),
        None => std::env::var_os("XDG_CACHE_HOME")
            .filter(|path| !path.is_empty())
            .map(PathBuf::from)
            .or_else(|| Some(PathBuf::from(std::env::var_os("HOME")?).join(".cache")))?,
    };
    Some(cache_home.join("debuginfod_client"))
}

/// `path`, made (mode 0700, the invoking user's) with the directories above it that are
/// missing.
fn open_cache_dir(path: &Path) -> io::Result<OutputDir> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
        && std::fs::symlink_metadata(parent).is_err()
    {
        open_cache_dir(parent)?;
    }
    OutputDir::open_or_make(path).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use std::{
        io::{BufRead as _, BufReader, Write as _},
        net::TcpListener,
        os::unix::fs::PermissionsExt as _,
    };

    use super::*;

    /// A small ELF file with a build-id, as every Debian system has it.
    const ELF: &str = "/bin/true";

    fn scratch(label: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!(
            "thrtrace-debuginfod-{label}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        path
    }

    fn client(urls: &[String], cache: &Path) -> Debuginfod {
        Debuginfod {
            servers: urls
                .iter()
                .map(|url| Server {
                    url: url.clone(),
                    failure: Mutex::new(None),
                })
                .collect(),
            cache: cache.to_owned(),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(5)))
                .build()
                .new_agent(),
            max_size: None,
        }
    }

    /// A server on a loopback port that answers each request it takes with the next of
    /// `answers` (status, body), then closes; returns its URL and the paths it was asked for.
    fn server(answers: Vec<(u16, Vec<u8>)>) -> (String, std::thread::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let asked = std::thread::spawn(move || {
            let mut asked = Vec::new();
            for (status, body) in answers {
                let (mut stream, _) = listener.accept().unwrap();
                let mut lines = BufReader::new(stream.try_clone().unwrap()).lines();
                let request = lines.next().unwrap().unwrap();
                asked.push(request.split(' ').nth(1).unwrap().to_owned());
                while lines.next().unwrap().is_ok_and(|line| !line.is_empty()) {}
                write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .unwrap();
                stream.write_all(&body).unwrap();
            }
            asked
        });
        (url, asked)
    }

    #[test]
    fn a_debug_file_is_fetched_into_the_cache_from_the_first_server_that_has_it() {
        let elf = std::fs::read(ELF).unwrap();
        let build_id = blazesym::helper::read_elf_build_id(Path::new(ELF))
            .unwrap()
            .expect("a build-id")
            .to_vec();
        let hex = hex_digits(&build_id);
        let (first, first_asked) = server(vec![(404, Vec::new())]);
        let (second, second_asked) = server(vec![(200, elf.clone())]);
        let cache = scratch("fetched").join("made").join("cache");
        let debuginfod = client(&[first, second], &cache);
        assert_eq!(debuginfod.cached(&build_id), None);

        let fetched = debuginfod.fetch(std::slice::from_ref(&build_id));
        let file = cache.join(&hex).join(DEBUG_FILE);
        assert_eq!(fetched, [Some(file.clone())]);
        let wanted = format!("/buildid/{hex}/debuginfo");
        assert_eq!(first_asked.join().unwrap(), std::slice::from_ref(&wanted));
        assert_eq!(second_asked.join().unwrap(), [wanted]);
        assert_eq!(std::fs::read(&file).unwrap(), elf);
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&cache), 0o700);
        // A 404 is no failure.
        assert!(debuginfod.servers.iter().all(|server| !server.failed()));
        assert_eq!(debuginfod.cached(&build_id), Some(file.clone()));

        // A link in its place, or a file of another build, is not the debug file.
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(ELF, &file).unwrap();
        assert_eq!(debuginfod.cached(&build_id), None);
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, b"\x7fELF not one").unwrap();
        assert_eq!(debuginfod.cached(&build_id), None);
        let _ = std::fs::remove_dir_all(scratch("fetched"));
    }

    #[test]
    fn a_server_that_sends_another_file_or_cannot_be_reached_is_not_asked_again() {
        let build_id = vec![0xab; 20];
        let (wrong, asked) = server(vec![(200, b"not an ELF file".to_vec())]);
        // A port nothing listens on: the listener is gone.
        let closed = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", listener.local_addr().unwrap())
        };
        let cache = scratch("failing");
        let debuginfod = client(&[wrong, closed], &cache);
        let other = vec![0xcd; 20];
        assert_eq!(
            debuginfod.fetch(std::slice::from_ref(&build_id)),
            [None],
            "nothing cached from a server whose file is not the one asked for"
        );
        assert_eq!(asked.join().unwrap().len(), 1);
        assert!(debuginfod.servers.iter().all(Server::failed));
        // Neither is asked for the next.
        assert_eq!(debuginfod.fetch(&[other]), [None]);
        let dir = cache.join(hex_digits(&build_id));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "left behind");
        let _ = std::fs::remove_dir_all(&cache);
    }
}
