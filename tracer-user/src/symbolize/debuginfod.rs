//! Debug files fetched by build-id from debuginfod servers, as elfutils' client fetches them,
//! for modules that have neither their symbols nor their lines here (a stripped production
//! binary, a library without its -dbgsym package).
//!
//! Set as for gdb, perf and systemtap: `DEBUGINFOD_URLS` (servers, separated by spaces),
//! `DEBUGINFOD_CACHE_PATH` (default `$XDG_CACHE_HOME/debuginfod_client`, else
//! `~/.cache/debuginfod_client`; under sudo, whose environment is the invoking user's only in
//! part, always the invoking user's `~/.cache/debuginfod_client`), `DEBUGINFOD_TIMEOUT` (seconds
//! to connect, to get an answer and between two reads of one: 5 by default, not elfutils' 90,
//! since a report waits on it; 0 for none), `DEBUGINFOD_MAXTIME` and `DEBUGINFOD_MAXSIZE` (a
//! download's longest time and largest size, none by default). Files are cached as elfutils
//! caches them (`CACHE/BUILDID/debuginfo`), so that each tool finds what another fetched. The
//! cache is opened once; everything in it is made relative to it, never through a link, as
//! every file of ours is (exclusively, mode 0600, the invoking user's under sudo). A file read
//! back is opened the same way and used through its descriptor, only if its build-id is the one
//! asked for. Only build-ids leave the machine.
//!
//! Several modules are fetched side by side, each build-id once a process. A server that fails
//! (cannot be reached, times out, breaks off, answers with an error other than 404, sends
//! another file) is said once and not asked again: an unreachable server costs a report one
//! timeout, not one per module.

use std::{
    collections::HashSet,
    fs::File,
    io::{self, Write as _},
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
    sync::{
        Mutex, OnceLock, PoisonError,
        atomic::{AtomicBool, AtomicUsize, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use super::hex_digits;
use crate::{
    sinks::output_dir::{OutputDir, OutputDirError},
    sudo,
};

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
    /// Whether it asks the servers, or only looks in the cache (a live view, which must not
    /// wait on them).
    fetches: bool,
    cache_path: PathBuf,
    /// The cache, opened (made if need be) when first used; `None` if it could not be.
    cache: OnceLock<Option<OutputDir>>,
    /// The cache could not take a file: nothing more is fetched.
    cache_failed: AtomicBool,
    agent: ureq::Agent,
    max_size: Option<u64>,
    /// The build-ids fetched so far, found or not: each is asked for once.
    asked: Mutex<HashSet<Vec<u8>>>,
}

struct Server {
    url: String,
    /// It failed once: it is not asked again.
    failed: AtomicBool,
}

/// Why a debug file was not fetched.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("{0}")]
    Request(#[from] ureq::Error),
    #[error("answered HTTP {0}")]
    Status(u16),
    #[error("broke off the transfer: {0}")]
    Transfer(io::Error),
    #[error("sent a file that is not the debug file of build-id {0}")]
    NotTheFile(String),
    #[error("sent more than DEBUGINFOD_MAXSIZE, {0} bytes")]
    TooLarge(u64),
    #[error("cannot write to the cache {}: {error}", path.display())]
    Cache { path: PathBuf, error: io::Error },
}

impl FetchError {
    /// Whether the server is to blame, and is not to be asked again.
    fn is_the_servers(&self) -> bool {
        !matches!(self, FetchError::Cache { .. } | FetchError::TooLarge(_))
    }
}

/// What a frame keeps where no debug file names it, said with every failure.
const UNNAMED: &str = "the frames it would name keep their module+offset+build-id";

impl Debuginfod {
    /// The client the environment sets up, if `DEBUGINFOD_URLS` names a server and a cache
    /// directory can be placed; one that only looks in the cache unless it `fetches`.
    pub fn from_env(fetches: bool) -> Option<Debuginfod> {
        let urls = std::env::var("DEBUGINFOD_URLS").ok()?;
        let urls: Vec<&str> = urls.split_whitespace().collect();
        if urls.is_empty() {
            return None;
        }
        let seconds = |variable| limit(variable).map(Duration::from_secs);
        let timeout = match std::env::var_os("DEBUGINFOD_TIMEOUT") {
            Some(_) => seconds("DEBUGINFOD_TIMEOUT"),
            None => Some(DEFAULT_TIMEOUT),
        };
        let agent = crate::http::agent_config()
            .timeout_resolve(timeout)
            .timeout_connect(timeout)
            .timeout_recv_response(timeout)
            .timeout_per_read(timeout)
            .timeout_global(seconds("DEBUGINFOD_MAXTIME"))
            .build()
            .new_agent();
        let max_size = limit("DEBUGINFOD_MAXSIZE");
        Some(Debuginfod::new(
            &urls,
            fetches,
            cache_path()?,
            agent,
            max_size,
        ))
    }

    fn new(
        urls: &[&str],
        fetches: bool,
        cache_path: PathBuf,
        agent: ureq::Agent,
        max_size: Option<u64>,
    ) -> Self {
        Debuginfod {
            servers: urls
                .iter()
                .map(|url| Server {
                    url: url.trim_end_matches('/').to_owned(),
                    failed: AtomicBool::new(false),
                })
                .collect(),
            fetches,
            cache_path,
            cache: OnceLock::new(),
            cache_failed: AtomicBool::new(false),
            agent,
            max_size,
            asked: Mutex::new(HashSet::new()),
        }
    }

    /// The cache directory, opened the first time (and made, with the directories above it
    /// that are missing); said once if it cannot be.
    fn cache(&self) -> Option<&OutputDir> {
        self.cache
            .get_or_init(|| match open_cache(&self.cache_path) {
                Ok(cache) => Some(cache),
                Err(error) => {
                    say!(
                        "thrtrace-bpf: debuginfod: cannot use the cache {}: {error}; nothing is \
                         fetched, and {UNNAMED}",
                        self.cache_path.display()
                    );
                    None
                }
            })
            .as_ref()
    }

    /// The debug file of `build_id` that a fetch left in the cache, open (read it through
    /// [`fd_path`]), if it is one.
    pub fn cached(&self, build_id: &[u8]) -> Option<File> {
        let dir = self
            .cache()?
            .subdirectory(&hex_digits(build_id), false)
            .ok()?;
        let file = dir.open_to_read(DEBUG_FILE).ok()?;
        is_debug_file_of(&file, build_id).then_some(file)
    }

    /// Fetches the debug files of `build_ids` not asked for before into the cache, side by
    /// side; returns how many it got. A line says so when this takes more than a second;
    /// another, once, what a server that failed did.
    pub fn fetch(&self, build_ids: &[Vec<u8>]) -> usize {
        if !self.fetches {
            return 0;
        }
        let new: Vec<&Vec<u8>> = {
            let mut asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
            build_ids
                .iter()
                .filter(|build_id| asked.insert((*build_id).clone()))
                .collect()
        };
        if new.is_empty() {
            return 0;
        }
        let Some(cache) = self.cache() else {
            return 0;
        };
        let next = AtomicUsize::new(0);
        let got = AtomicUsize::new(0);
        let (done, all_done) = mpsc::channel::<()>();
        std::thread::scope(|scope| {
            for _ in 0..PARALLEL.min(new.len()) {
                let done = done.clone();
                scope.spawn(|| {
                    let _done = done;
                    while let Some(build_id) = new.get(next.fetch_add(1, Ordering::Relaxed)) {
                        if self.fetch_one(cache, build_id) {
                            got.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            drop(done);
            // Every thread's sender dropped: all fetched.
            if all_done.recv_timeout(QUIET_FOR) == Err(mpsc::RecvTimeoutError::Timeout) {
                say!(
                    "thrtrace-bpf: fetching the debug information of {} from the debuginfod \
                     servers of DEBUGINFOD_URLS...",
                    crate::say::counted(new.len() as u64, "module"),
                );
            }
        });
        got.into_inner()
    }

    /// Fetches the debug file of `build_id` into `cache` from the first server that has it,
    /// skipping those that failed; whether one had it.
    fn fetch_one(&self, cache: &OutputDir, build_id: &[u8]) -> bool {
        for server in &self.servers {
            if server.failed.load(Ordering::Relaxed) || self.cache_failed.load(Ordering::Relaxed) {
                continue;
            }
            let started = Instant::now();
            let downloaded = self.download(server, cache, build_id);
            if !matches!(downloaded, Ok(true)) {
                // Made for the file, which did not come: no empty directory is left behind.
                let _ = cache.remove_if_empty(&hex_digits(build_id));
            }
            match downloaded {
                Ok(true) => return true,
                Ok(false) => {}
                Err(error) if error.is_the_servers() => server.fail(&error, started.elapsed()),
                Err(error @ FetchError::TooLarge(_)) => {
                    say!("thrtrace-bpf: debuginfod server {}: {error}", server.url);
                    return false;
                }
                Err(error) => {
                    if !self.cache_failed.swap(true, Ordering::Relaxed) {
                        say!("thrtrace-bpf: debuginfod: {error}; nothing more is fetched");
                    }
                    return false;
                }
            }
        }
        false
    }

    /// Fetches the debug file of `build_id` from `server` into `cache`; whether it had one.
    fn download(
        &self,
        server: &Server,
        cache: &OutputDir,
        build_id: &[u8],
    ) -> Result<bool, FetchError> {
        let hex = hex_digits(build_id);
        let cache_error = |path: PathBuf| move |error| FetchError::Cache { path, error };
        // Made before the request: a cache that takes no file costs no download.
        let dir = cache
            .subdirectory(&hex, true)
            .map_err(cache_error(cache.shown(&hex)))?;
        let response = self
            .agent
            .get(format!("{}/buildid/{hex}/debuginfo", server.url))
            .call()?;
        match response.status().as_u16() {
            200 => {}
            404 => return Ok(false),
            status => return Err(FetchError::Status(status)),
        }
        let (file, temporary) = dir
            .create_temporary(DEBUG_FILE)
            .map_err(cache_error(dir.path().to_owned()))?;
        let kept = self
            .copy(response.into_body().into_reader(), File::from(file))
            .map_err(|error| error.at(&dir.shown(&temporary)))
            .and_then(|()| {
                let written = dir
                    .open_to_read(&temporary)
                    .map_err(cache_error(dir.shown(&temporary)))?;
                if !is_debug_file_of(&written, build_id) {
                    return Err(FetchError::NotTheFile(hex.clone()));
                }
                dir.rename(&temporary, DEBUG_FILE)
                    .map_err(cache_error(dir.shown(DEBUG_FILE)))
            });
        if kept.is_err() {
            let _ = dir.remove(&temporary);
        }
        kept.map(|()| true)
    }

    /// The answer's body into `file`, up to `DEBUGINFOD_MAXSIZE`.
    fn copy(&self, mut body: impl io::Read, mut file: File) -> Result<(), CopyError> {
        let mut buffer = vec![0; 64 * 1024];
        let mut copied = 0u64;
        loop {
            let read = body.read(&mut buffer).map_err(CopyError::Read)?;
            if read == 0 {
                return Ok(());
            }
            copied += read as u64;
            if let Some(max) = self.max_size.filter(|max| copied > *max) {
                return Err(CopyError::TooLarge(max));
            }
            file.write_all(&buffer[..read]).map_err(CopyError::Write)?;
        }
    }
}

/// Why an answer's body was not copied whole.
enum CopyError {
    Read(io::Error),
    Write(io::Error),
    TooLarge(u64),
}

impl CopyError {
    /// The error, for a copy into the file at `path`.
    fn at(self, path: &Path) -> FetchError {
        match self {
            CopyError::Read(error) => FetchError::Transfer(error),
            CopyError::Write(error) => FetchError::Cache {
                path: path.to_owned(),
                error,
            },
            CopyError::TooLarge(max) => FetchError::TooLarge(max),
        }
    }
}

impl Server {
    /// Keeps it from being asked again, and says why, the first time.
    fn fail(&self, error: &FetchError, after: Duration) {
        if !self.failed.swap(true, Ordering::Relaxed) {
            say!(
                "thrtrace-bpf: debuginfod server {}: {error} (after {}); not asked again: \
                 {UNNAMED}",
                self.url,
                crate::say::duration(after.as_nanos() as u64)
            );
        }
    }
}

/// The path an open file is read through, whatever is put at its name later.
pub fn fd_path(file: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Whether the open `file` is an ELF file whose build-id is `build_id`.
fn is_debug_file_of(file: &File, build_id: &[u8]) -> bool {
    super::has_build_id(&fd_path(file), build_id)
}

/// A limit the environment sets (`DEBUGINFOD_TIMEOUT`, `_MAXTIME`, `_MAXSIZE`); none where it
/// is unset, not a number, or 0, which in elfutils means no limit.
fn limit(variable: &str) -> Option<u64> {
    let value: u64 = std::env::var(variable).ok()?.trim().parse().ok()?;
    Some(value).filter(|value| *value > 0)
}

/// Where the cache is: `DEBUGINFOD_CACHE_PATH`, else elfutils' default in the user's cache
/// directory (the invoking user's under sudo).
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
/// missing; one another process has just made is opened.
fn open_cache(path: &Path) -> io::Result<OutputDir> {
    let io_error = |error| match error {
        OutputDirError::Open { io_error, .. } | OutputDirError::NotWritable { io_error, .. } => {
            io_error
        }
    };
    match OutputDir::open_or_make(path).map_err(io_error) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            let parent = path
                .parent()
                .filter(|parent| !parent.as_os_str().is_empty());
            open_cache(parent.ok_or(error)?)?;
            OutputDir::open_or_make(path).map_err(io_error)
        }
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            OutputDir::open(path).map_err(io_error)
        }
        opened => opened,
    }
}

#[cfg(test)]
mod tests {
    use std::{
        io::{BufRead as _, BufReader, Read as _},
        net::{TcpListener, TcpStream},
        os::unix::fs::PermissionsExt as _,
        thread::JoinHandle,
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

    fn client(urls: &[&str], cache: &Path) -> Debuginfod {
        let agent = crate::http::agent_config()
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .new_agent();
        Debuginfod::new(urls, true, cache.to_owned(), agent, None)
    }

    fn build_id_of_elf() -> Vec<u8> {
        blazesym::helper::read_elf_build_id(Path::new(ELF))
            .unwrap()
            .expect("a build-id")
            .to_vec()
    }

    /// A server on a loopback port that answers each request it takes with the next of
    /// `answers` (status, body); returns its URL and what it will have been asked, each path,
    /// once it has answered them all.
    fn server(answers: Vec<(u16, Vec<u8>)>) -> (String, JoinHandle<Vec<String>>) {
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

    /// Asks `url` for `/probe` itself, so that a server kept waiting for a request it was not
    /// sent ends: its last path is then `/probe`.
    fn probe(url: &str) {
        let mut stream = TcpStream::connect(url.trim_start_matches("http://")).unwrap();
        stream.write_all(b"GET /probe HTTP/1.0\r\n\r\n").unwrap();
        let _ = stream.read_to_end(&mut Vec::new());
    }

    #[test]
    fn a_debug_file_is_fetched_into_the_cache_from_the_first_server_that_has_it() {
        let elf = std::fs::read(ELF).unwrap();
        let build_id = build_id_of_elf();
        let hex = hex_digits(&build_id);
        let (first, first_asked) = server(vec![(404, Vec::new())]);
        let (second, second_asked) = server(vec![(200, elf.clone()), (404, Vec::new())]);
        let root = scratch("fetched");
        let cache = root.join("made").join("cache");
        let debuginfod = client(&[&first, &second], &cache);
        assert!(debuginfod.cached(&build_id).is_none());

        // Asked for twice at once, and again: fetched once.
        assert_eq!(debuginfod.fetch(&[build_id.clone(), build_id.clone()]), 1);
        assert_eq!(debuginfod.fetch(std::slice::from_ref(&build_id)), 0);
        probe(&second);
        let wanted = format!("/buildid/{hex}/debuginfo");
        assert_eq!(first_asked.join().unwrap(), std::slice::from_ref(&wanted));
        assert_eq!(second_asked.join().unwrap(), [wanted, "/probe".to_owned()]);
        let file = cache.join(&hex).join(DEBUG_FILE);
        assert_eq!(std::fs::read(&file).unwrap(), elf);
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            [&file, &cache.join(&hex), &cache].map(|path| mode(path)),
            [0o600, 0o700, 0o700]
        );
        // A 404 is no failure.
        assert!(
            debuginfod
                .servers
                .iter()
                .all(|s| !s.failed.load(Ordering::Relaxed))
        );
        let cached = debuginfod.cached(&build_id).expect("cached");
        assert_eq!(std::fs::read(fd_path(&cached)).unwrap(), elf);

        // A link in its place, or a file of another build, is not the debug file.
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(ELF, &file).unwrap();
        assert!(debuginfod.cached(&build_id).is_none());
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, b"\x7fELF not one").unwrap();
        assert!(debuginfod.cached(&build_id).is_none());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_server_that_sends_another_file_or_cannot_be_reached_is_not_asked_again() {
        let build_id = vec![0xab; 20];
        let (wrong, wrong_asked) = server(vec![(200, b"not an ELF file".to_vec()), (404, vec![])]);
        // A port nothing listens on: the listener is gone.
        let closed = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", listener.local_addr().unwrap())
        };
        let cache = scratch("failing");
        let debuginfod = client(&[&wrong, &closed], &cache);
        assert_eq!(debuginfod.fetch(std::slice::from_ref(&build_id)), 0);
        assert!(
            debuginfod
                .servers
                .iter()
                .all(|s| s.failed.load(Ordering::Relaxed))
        );
        // Neither is asked for the next.
        assert_eq!(debuginfod.fetch(&[vec![0xcd; 20]]), 0);
        probe(&wrong);
        assert_eq!(
            wrong_asked.join().unwrap(),
            [
                format!("/buildid/{}/debuginfo", hex_digits(&build_id)),
                "/probe".to_owned()
            ]
        );
        assert!(!cache.join(hex_digits(&build_id)).exists(), "left behind");
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn a_client_that_only_looks_in_the_cache_asks_no_server() {
        let (url, asked) = server(vec![(404, vec![])]);
        let cache = scratch("looking");
        let debuginfod = Debuginfod {
            fetches: false,
            ..client(&[&url], &cache)
        };
        assert_eq!(debuginfod.fetch(&[build_id_of_elf()]), 0);
        probe(&url);
        assert_eq!(asked.join().unwrap(), ["/probe"]);
        let _ = std::fs::remove_dir_all(&cache);
    }

    #[test]
    fn modules_fetched_side_by_side_make_the_cache_once() {
        let build_ids: Vec<Vec<u8>> = (1..=6).map(|n| vec![n; 20]).collect();
        let (url, asked) = server(vec![(404, vec![]); 6]);
        let root = scratch("side-by-side");
        let cache = root.join("new").join("cache");
        let debuginfod = client(&[&url], &cache);
        assert_eq!(debuginfod.fetch(&build_ids), 0);
        assert_eq!(asked.join().unwrap().len(), 6);
        assert!(!debuginfod.cache_failed.load(Ordering::Relaxed));
        // Each build-id's directory was made, and removed once empty.
        assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&root);
    }
}
