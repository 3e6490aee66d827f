//! A raw Streamable HTTP client (hyper HTTP/1.1 connections, SSE read by hand), the SSE
//! counterpart of the raw WebSocket client: `initialize` (POST, 200 with `Acp-Connection-Id`),
//! the connection stream (GET), `session/new` (POST, its answer on the connection stream), the
//! session stream (GET with `Acp-Session-Id`), then prompts (POST) whose updates and answer come
//! on the session stream; each update is counted by a substring, not decoded. Like the
//! official clients, every stream has a TCP connection of its own; POSTs share one.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

type Sender = SendRequest<Full<Bytes>>;

/// One open session over Streamable HTTP.
pub struct Session {
    posts: Sender,
    url: String,
    connection: String,
    session: String,
    stream: EventReader,
    /// Kept open: dropping it closes the connection stream.
    _connection_stream: EventReader,
}

async fn http1(addr: &str) -> Result<Sender, String> {
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let (sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    Ok(sender)
}

fn host_port(url: &str) -> Result<&str, String> {
    let rest = url.strip_prefix("http://").ok_or("the url must be http://HOST:PORT/PATH")?;
    Ok(rest.split('/').next().unwrap_or(""))
}

/// The request target (origin form, `/acp`): what clients send to a server they reach
/// directly (the absolute form is for proxies, and the node adapter does not expect it).
fn path(url: &str) -> Result<&str, String> {
    let host = host_port(url)?;
    Ok(&url["http://".len() + host.len()..])
}

async fn post(
    sender: &mut Sender,
    url: &str,
    connection: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> Result<Response<Incoming>, String> {
    sender.ready().await.map_err(|e| format!("POST: {e}"))?;
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(path(url)?)
        .header("host", host_port(url)?)
        .header("content-type", "application/json");
    if let Some(id) = connection {
        request = request.header("acp-connection-id", id);
    }
    if let Some(id) = session {
        request = request.header("acp-session-id", id);
    }
    let request = request.body(Full::new(Bytes::from(body.to_string()))).map_err(|e| e.to_string())?;
    sender.send_request(request).await.map_err(|e| format!("POST: {e}"))
}

async fn open_stream(url: &str, connection: &str, session: Option<&str>) -> Result<EventReader, String> {
    let mut sender = http1(host_port(url)?).await?;
    let mut request = Request::builder()
        .method(Method::GET)
        .uri(path(url)?)
        .header("host", host_port(url)?)
        .header("accept", "text/event-stream")
        .header("acp-connection-id", connection);
    if let Some(id) = session {
        request = request.header("acp-session-id", id);
    }
    let request = request.body(Full::new(Bytes::new())).map_err(|e| e.to_string())?;
    let response = sender.send_request(request).await.map_err(|e| format!("GET: {e}"))?;
    if response.status() != StatusCode::OK {
        return Err(format!("GET answered {}", response.status()));
    }
    Ok(EventReader { body: response.into_body(), buf: BytesMut::new(), _sender: sender })
}

/// The `data:` payloads of an SSE body, one event at a time.
struct EventReader {
    body: Incoming,
    buf: BytesMut,
    _sender: Sender,
}

impl EventReader {
    /// The next event's data (comments and keep-alives skipped); `None` at the end.
    async fn next(&mut self) -> Result<Option<Bytes>, String> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let event = self.buf.split_to(end + 2).freeze();
                let mut data = BytesMut::new();
                for line in event[..end].split(|&b| b == b'\n') {
                    if let Some(rest) = line.strip_prefix(b"data:") {
                        if !data.is_empty() {
                            data.extend_from_slice(b"\n");
                        }
                        data.extend_from_slice(rest.strip_prefix(b" ").unwrap_or(rest));
                    }
                }
                if data.is_empty() {
                    continue;
                }
                return Ok(Some(data.freeze()));
            }
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(format!("stream: {e}")),
                Some(Ok(frame)) => {
                    if let Ok(mut data) = frame.into_data() {
                        while data.has_remaining() {
                            let chunk = data.chunk();
                            // The TypeScript server ends lines with `\n`; a `\r` would only
                            // come from a server that this reader does not need to handle.
                            self.buf.extend_from_slice(chunk);
                            let n = chunk.len();
                            data.advance(n);
                        }
                    }
                }
            }
        }
    }

    /// Reads until the answer to request `id`, counting the `session/update`s before it.
    async fn answer(&mut self, id: u64, updates: Option<&AtomicU64>) -> Result<Value, String> {
        loop {
            let Some(data) = self.next().await? else { return Err("the stream ended".into()) };
            if memfind(&data, b"\"session/update\"") {
                if let Some(updates) = updates {
                    updates.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            let message: Value = serde_json::from_slice(&data).map_err(|e| format!("bad JSON: {e}"))?;
            if message.get("method").is_none() && message["id"] == id {
                if let Some(error) = message.get("error") {
                    return Err(format!("request {id} failed: {error}"));
                }
                return Ok(message);
            }
        }
    }
}

fn memfind(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

impl Session {
    /// Initializes a connection and opens a session with its streams.
    pub async fn open(url: &str) -> Result<Session, String> {
        let mut posts = http1(host_port(url)?).await?;
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}}});
        let response = post(&mut posts, url, None, None, &init).await?;
        let connection = response
            .headers()
            .get("acp-connection-id")
            .and_then(|v| v.to_str().ok())
            .ok_or("initialize was answered without Acp-Connection-Id")?
            .to_owned();
        let _ = response.into_body().collect().await;
        let mut connection_stream = open_stream(url, &connection, None).await?;
        let new = json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}});
        accepted(post(&mut posts, url, Some(&connection), None, &new).await?).await?;
        let answer = connection_stream.answer(1, None).await?;
        let session = answer["result"]["sessionId"].as_str().ok_or("session/new answered without a sessionId")?;
        let stream = open_stream(url, &connection, Some(session)).await?;
        Ok(Session {
            posts,
            url: url.to_owned(),
            session: session.to_owned(),
            connection,
            stream,
            _connection_stream: connection_stream,
        })
    }

    /// One prompt turn (`text` as the prompt), the updates counted in `updates`.
    pub async fn prompt(&mut self, id: u64, text: &str, updates: &AtomicU64) -> Result<(), String> {
        let prompt = json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": self.session, "prompt": [{"type": "text", "text": text}]}});
        let response = post(&mut self.posts, &self.url, Some(&self.connection), Some(&self.session), &prompt).await?;
        accepted(response).await?;
        self.stream.answer(id, Some(updates)).await.map(drop)
    }

    /// Ends the connection (DELETE).
    pub async fn close(mut self) {
        let request = Request::builder()
            .method(Method::DELETE)
            .uri(path(&self.url).unwrap_or("/"))
            .header("host", host_port(&self.url).unwrap_or(""))
            .header("acp-connection-id", &self.connection)
            .body(Full::new(Bytes::new()));
        if let (Ok(request), Ok(())) = (request, self.posts.ready().await.map_err(drop)) {
            let _ = self.posts.send_request(request).await;
        }
    }
}

/// Checks a POST's `202 Accepted` and reads its (empty) body.
async fn accepted(response: Response<Incoming>) -> Result<(), String> {
    let status = response.status();
    let body = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    if status != StatusCode::ACCEPTED {
        return Err(format!("POST answered {status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok(())
}
