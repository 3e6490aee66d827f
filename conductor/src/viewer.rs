//! `--serve`: the chain's trace as a sequence diagram in the browser, updated while the chain
//! runs. A small HTTP/1.1 server on a loopback address answers two requests:
//!
//! | request | answer |
//! |---|---|
//! | `GET /` | the viewer page (`viewer.html`: one file, no outside resources) |
//! | `GET /events` | the trace so far, as a JSON array of the trace's events |
//!
//! The events come from the `--trace` file, read again on each request, or without `--trace`
//! from memory. Each answer closes its connection. A request whose `Host` is not the loopback
//! address it was sent to is refused (403), so a web page that rebinds its own name to this
//! port cannot read the trace.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The viewer page.
const PAGE: &str = include_str!("viewer.html");

/// The longest request head read; the viewer's requests are far shorter.
const MAX_HEAD: usize = 16 * 1024;

/// How long a connection may take to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Where `/events` reads the trace.
#[derive(Clone)]
pub enum Source {
    /// The `--trace` file, read again for each request.
    File(PathBuf),
    /// The trace kept in memory (what the conductor's `trace` writer wrote).
    Memory(MemoryTrace),
}

/// A trace written to memory for the viewer: the conductor's trace writer on one side,
/// `/events` on the other.
#[derive(Clone, Default)]
pub struct MemoryTrace(Arc<Mutex<Vec<u8>>>);

impl Write for MemoryTrace {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The viewer's server, bound and not yet serving.
pub struct Viewer {
    listener: TcpListener,
    addr: SocketAddr,
    source: Source,
}

impl Viewer {
    /// Binds `addr`, which must be a loopback address: the trace holds the chain's messages.
    pub async fn bind(addr: SocketAddr, source: Source) -> io::Result<Viewer> {
        if !addr.ip().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{addr} is not a loopback address; the viewer serves this machine only"),
            ));
        }
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        Ok(Viewer { listener, addr, source })
    }

    /// The page's address.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Serves until the process ends; each connection on a task of its own.
    pub async fn serve(self) {
        let shared = Arc::new((self.addr, self.source));
        loop {
            match self.listener.accept().await {
                Ok((stream, _)) => {
                    let shared = Arc::clone(&shared);
                    tokio::spawn(async move {
                        let (addr, source) = &*shared;
                        if let Err(e) = answer(stream, *addr, source).await {
                            tracing::debug!(error = %e, "trace viewer: a connection failed");
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors, say: wait instead of spinning.
                    tracing::warn!(error = %e, "trace viewer: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Reads one request head and writes its answer.
async fn answer(mut stream: TcpStream, addr: SocketAddr, source: &Source) -> io::Result<()> {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(head) => head?,
        Err(_) => return Ok(()),
    };
    let (status, content_type, body) = match route(head.as_deref(), addr) {
        Route::Page => ("200 OK", "text/html; charset=utf-8", PAGE.as_bytes().to_vec()),
        Route::Events => match events(source).await {
            Ok(json) => ("200 OK", "application/json", json.into_bytes()),
            Err(e) => (
                "500 Internal Server Error",
                "text/plain; charset=utf-8",
                format!("cannot read the trace: {e}\n").into_bytes(),
            ),
        },
        Route::Refused(status, why) => (status, "text/plain; charset=utf-8", format!("{why}\n").into_bytes()),
    };
    let header = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(header.as_bytes()).await?;
    stream.write_all(&body).await?;
    stream.shutdown().await
}

/// The request head up to its blank line; `None` when it is too long or the connection ends
/// first.
async fn read_head(stream: &mut TcpStream) -> io::Result<Option<String>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Ok(Some(String::from_utf8_lossy(&head).into_owned()));
        }
        if head.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

#[derive(Debug, PartialEq)]
enum Route {
    Page,
    Events,
    Refused(&'static str, &'static str),
}

/// What a request head asks for.
fn route(head: Option<&str>, addr: SocketAddr) -> Route {
    let Some(head) = head else { return Route::Refused("400 Bad Request", "the request head is missing or too long") };
    let mut lines = head.split("\r\n");
    let mut request = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (request.next(), request.next(), request.next(), request.next())
    else {
        return Route::Refused("400 Bad Request", "not an HTTP request line");
    };
    if !version.starts_with("HTTP/1.") {
        return Route::Refused("400 Bad Request", "not HTTP/1.x");
    }
    let host = lines.filter_map(|l| l.split_once(':')).find(|(name, _)| name.trim().eq_ignore_ascii_case("host"));
    let port = addr.port();
    let allowed = match host.map(|(_, value)| value.trim()) {
        Some(host) => host == addr.to_string() || host == format!("localhost:{port}"),
        None => false,
    };
    if !allowed {
        return Route::Refused("403 Forbidden", "the Host header must name the viewer's loopback address");
    }
    if method != "GET" {
        return Route::Refused("405 Method Not Allowed", "only GET");
    }
    match target.split('?').next().unwrap_or_default() {
        "/" | "/index.html" => Route::Page,
        "/events" => Route::Events,
        _ => Route::Refused("404 Not Found", "the viewer has / and /events"),
    }
}

/// The trace so far as one JSON array of its complete, valid lines (a line being written
/// while it is read is left for the next request).
async fn events(source: &Source) -> io::Result<String> {
    let bytes = match source {
        Source::Memory(trace) => trace.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone(),
        Source::File(path) => {
            let path = path.clone();
            tokio::task::spawn_blocking(move || std::fs::read(path)).await.map_err(io::Error::other)??
        }
    };
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(&[][..], |end| &bytes[..end]);
    let mut json = String::with_capacity(complete.len() + 2);
    json.push('[');
    for line in complete.split(|&b| b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else { continue };
        if serde_json::from_str::<&RawValue>(line).is_ok() {
            if json.len() > 1 {
                json.push(',');
            }
            json.push_str(line.trim());
        }
    }
    json.push(']');
    Ok(json)
}

/// Asks the desktop to open `url` in a browser; says so on stderr when it cannot.
pub fn open_browser(url: &str) {
    let (program, args): (&str, &[&str]) = if cfg!(target_os = "macos") {
        ("open", &[])
    } else if cfg!(windows) {
        ("cmd", &["/C", "start", ""])
    } else {
        ("xdg-open", &[])
    };
    let opened = std::process::Command::new(program)
        .args(args)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match opened {
        // Reaped on a thread of its own: the opener may outlive the chain, or not.
        Ok(mut child) => drop(std::thread::spawn(move || child.wait())),
        Err(e) => eprintln!("acp-conductor: cannot open a browser ({program}: {e}); open {url}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "127.0.0.1:4000".parse().unwrap()
    }

    #[test]
    fn requests_are_routed_by_method_target_and_host() {
        let head = |text: &str| route(Some(text), addr());
        assert_eq!(head("GET / HTTP/1.1\r\nHost: 127.0.0.1:4000"), Route::Page);
        assert_eq!(head("GET /events?t=1 HTTP/1.1\r\nhost: localhost:4000\r\nAccept: */*"), Route::Events);
        assert!(matches!(head("GET /events HTTP/1.1\r\nHost: evil.example:4000"), Route::Refused("403 Forbidden", _)));
        assert!(matches!(head("GET /events HTTP/1.1"), Route::Refused("403 Forbidden", _)));
        assert!(matches!(
            head("POST /events HTTP/1.1\r\nHost: 127.0.0.1:4000"),
            Route::Refused("405 Method Not Allowed", _)
        ));
        assert!(matches!(head("GET /etc/passwd HTTP/1.1\r\nHost: 127.0.0.1:4000"), Route::Refused("404 Not Found", _)));
        assert!(matches!(head("GET / SPDY/3\r\nHost: 127.0.0.1:4000"), Route::Refused("400 Bad Request", _)));
        assert!(matches!(head("hello"), Route::Refused("400 Bad Request", _)));
        assert!(matches!(route(None, addr()), Route::Refused("400 Bad Request", _)));
    }

    #[tokio::test]
    async fn events_are_the_complete_valid_lines_as_one_array() {
        let mut trace = MemoryTrace::default();
        let source = Source::Memory(trace.clone());
        assert_eq!(events(&source).await.unwrap(), "[]");
        trace
            .write_all(b"{\"type\":\"request\",\"id\":1}\nnot json\n\n{\"type\":\"response\",\"id\":1}\n{\"type\":")
            .unwrap();
        assert_eq!(events(&source).await.unwrap(), r#"[{"type":"request","id":1},{"type":"response","id":1}]"#);
    }

    #[tokio::test]
    async fn only_loopback_addresses_are_served() {
        let error =
            Viewer::bind("0.0.0.0:0".parse().unwrap(), Source::Memory(MemoryTrace::default())).await.err().unwrap();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }
}
