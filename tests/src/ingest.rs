//! A stand-in for Pyroscope's ingest API on the loopback address, for the push tests: it keeps
//! every request (method, path, query, headers, body) and answers with the status it is told
//! (200 by default); taken down, its listener is closed (connections are refused) until it is
//! brought back on the same port.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{Arc, Mutex, PoisonError},
    thread::{JoinHandle, sleep},
    time::{Duration, Instant},
};

/// One request as it came.
#[derive(Debug, Clone)]
pub struct Request {
    /// `POST`, ...
    pub method: String,
    /// The target's path, without its query.
    pub path: String,
    /// Decoded, in order.
    pub query: Vec<(String, String)>,
    /// Names lowercased.
    pub headers: Vec<(String, String)>,
    /// As sent (its length the `Content-Length`).
    pub body: Vec<u8>,
}

/// A part of a `multipart/form-data` body: its name, file name and content type, and content.
#[derive(Debug)]
pub struct Part {
    /// Its `name`.
    pub name: String,
    /// Its `filename`, if any.
    pub file_name: Option<String>,
    /// Its `Content-Type`, if any.
    pub content_type: Option<String>,
    /// What it holds.
    pub content: Vec<u8>,
}

impl Request {
    /// The value of query parameter `key`, if given.
    pub fn query(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of header `name` (any case), if given.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The parts of its multipart body; panics if it has none, or is not one.
    pub fn parts(&self) -> Vec<Part> {
        let content_type = self.header("content-type").expect("a content type");
        let boundary = content_type
            .strip_prefix("multipart/form-data; boundary=")
            .unwrap_or_else(|| panic!("not a form: {content_type}"));
        let delimiter = format!("--{boundary}");
        let body = &self.body[..];
        let starts: Vec<usize> = (0..body.len())
            .filter(|&at| body[at..].starts_with(delimiter.as_bytes()))
            .collect();
        assert!(
            body[*starts.last().expect("a delimiter")..]
                .starts_with(format!("{delimiter}--\r\n").as_bytes()),
            "the body does not close its form"
        );
        starts
            .windows(2)
            .map(|pair| {
                let part = &body[pair[0] + delimiter.len() + 2..pair[1] - 2];
                let head_end = part
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .expect("a part's headers");
                let head = String::from_utf8_lossy(&part[..head_end]).into_owned();
                let field = |key: &str| {
                    head.split(['\r', '\n', ';'])
                        .map(str::trim)
                        .find_map(|f| f.strip_prefix(key))
                        .map(|v| v.trim_matches('"').to_owned())
                };
                Part {
                    name: field("name=").expect("a part's name"),
                    file_name: field("filename="),
                    content_type: field("Content-Type: "),
                    content: part[head_end + 4..].to_vec(),
                }
            })
            .collect()
    }
}

struct State {
    requests: Vec<Request>,
    status: u16,
    up: bool,
    stop: bool,
}

/// The server, on a thread of its own; stopped when dropped.
pub struct IngestServer {
    port: u16,
    state: Arc<Mutex<State>>,
    thread: Option<JoinHandle<()>>,
}

impl IngestServer {
    /// Listens on a free loopback port.
    pub fn start() -> IngestServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            requests: Vec::new(),
            status: 200,
            up: true,
            stop: false,
        }));
        let thread = {
            let state = Arc::clone(&state);
            std::thread::spawn(move || serve(listener, port, &state))
        };
        IngestServer {
            port,
            state,
            thread: Some(thread),
        }
    }

    /// Its address, for `--pyroscope`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the listener (`false`) or opens it again (`true`).
    pub fn set_up(&self, up: bool) {
        self.state().up = up;
    }

    /// Answers every request from now on with `status`.
    pub fn answer(&self, status: u16) {
        self.state().status = status;
    }

    /// Every request so far, in the order they came.
    pub fn requests(&self) -> Vec<Request> {
        self.state().requests.clone()
    }
}

impl Drop for IngestServer {
    fn drop(&mut self) {
        self.state().stop = true;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts and answers until stopped, closing and reopening its listener as told.
fn serve(listener: TcpListener, port: u16, state: &Mutex<State>) {
    let mut listener = Some(listener);
    loop {
        let (stop, up, status) = {
            let state = state.lock().unwrap_or_else(PoisonError::into_inner);
            (state.stop, state.up, state.status)
        };
        if stop {
            return;
        }
        match (up, &listener) {
            (false, Some(_)) => listener = None,
            (true, None) => {
                listener = TcpListener::bind(("127.0.0.1", port)).ok();
            }
            _ => {}
        }
        let Some(open) = &listener else {
            sleep(Duration::from_millis(20));
            continue;
        };
        open.set_nonblocking(true).unwrap();
        match open.accept() {
            Ok((stream, _)) => {
                if let Some(request) = answer(stream, status) {
                    state
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .requests
                        .push(request);
                }
            }
            Err(_) => sleep(Duration::from_millis(20)),
        }
    }
}

/// Reads one request from `stream` and answers it with `status`.
fn answer(stream: TcpStream, status: u16) -> Option<Request> {
    stream.set_nonblocking(false).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut reader = BufReader::new(stream);
    let mut head = Vec::new();
    let started = Instant::now();
    while !head.ends_with(b"\r\n\r\n") && started.elapsed() < Duration::from_secs(10) {
        if reader.read_until(b'\n', &mut head).ok()? == 0 {
            return None;
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut parsed = httparse::Request::new(&mut headers);
    parsed.parse(&head).ok()?;
    let target = parsed.path?.to_owned();
    let headers: Vec<(String, String)> = parsed
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(&text.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    let query = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), decode(value))
        })
        .collect();
    let reason = if status == 200 { "OK" } else { "Refused" };
    let said = if status == 200 {
        ""
    } else {
        "invalid credentials"
    };
    let _ = write!(
        reader.get_mut(),
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{said}",
        said.len()
    );
    Some(Request {
        method: parsed.method?.to_owned(),
        path: path.to_owned(),
        query,
        headers,
        body,
    })
}
