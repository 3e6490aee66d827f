//! Target (d), `http_server`: the HTTP server's request handling (`acp_rpc::http::server`),
//! fed a sequence of arbitrary HTTP requests over in-memory pipes (HTTP/1.1 or h2c), each sent
//! by hyper's client through the server's `serve_io` seam, a WebSocket upgrade and its frames
//! included. See ../FUZZING.md.
//!
//! Input: byte 0 is a knob (bit 0: h2c instead of HTTP/1.1; bit 1: a bearer token is
//! required; bit 2: the origin `https://app.example` is allowed; bit 3: tight limits). The rest
//! is up to 16 requests separated by `\n###\n`, each written like HTTP/1.1 on the wire:
//!
//! ```text
//! POST /acp
//! content-type: application/json
//! acp-connection-id: {conn}
//!
//! {"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}
//! ```
//!
//! `{conn}` stands for the last `Acp-Connection-Id` the server handed out. A head that the
//! client cannot send (an invalid method, header name or value) is skipped, and so is each
//! header line the client would set itself or refuse (`content-length`, `transfer-encoding`,
//! `host`; over h2c the connection-specific ones). After a `101`, the requests that follow are
//! sent on the WebSocket as frames: a text frame with the body, or binary / ping / close for
//! the methods `BINARY`, `PING`, `CLOSE`.
//!
//! Checks: no panic anywhere (the server's tasks included); every request gets an answer (on
//! the paused clock, none that waits for nothing); every status is one the `server` module
//! documents; the first routing rules (origin, path, preflight, authentication, method, media
//! type) give exactly their status; each answer has the shape its status promises (a JSON-RPC
//! error body for 400/501 with JSON, the connection id on a successful `initialize`, an event
//! stream for a GET's 200, `Allow` on 405, `WWW-Authenticate` on 401, nothing on 202); and
//! every SSE event and WebSocket text frame the agent sends is one JSON-RPC 2.0 object.

use std::time::Duration;

use acp_rpc::http::server::{HttpServer, ServerOptions};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::FuzzAgent;

/// Every status the `server` module documents (its routing table, and `initialize`'s 502 /
/// 504 and the upgrade's 426).
pub const DOCUMENTED_STATUSES: &[u16] =
    &[101, 200, 202, 204, 400, 401, 403, 404, 405, 406, 409, 413, 415, 426, 429, 501, 502, 504];

const TOKEN: &str = "t0ken";
const ALLOWED_ORIGIN: &str = "https://app.example";
const SEPARATOR: &[u8] = b"\n###\n";
const MAX_REQUESTS: usize = 16;
const MAX_HEADERS: usize = 32;
const MAX_BODY: usize = 16 * 1024;
/// How long anything may take; costs nothing on the paused clock unless something hangs.
const HANG: Duration = Duration::from_secs(600);
/// How long a held SSE stream is read at the end (paused clock: until everything waits).
const DRAIN: Duration = Duration::from_secs(30);

/// What the knob byte says.
#[derive(Clone, Copy, Debug)]
struct Setup {
    h2c: bool,
    bearer: bool,
    origin_allowed: bool,
    tight: bool,
}

impl Setup {
    fn from_knob(knob: u8) -> Setup {
        Setup { h2c: knob & 1 != 0, bearer: knob & 2 != 0, origin_allowed: knob & 4 != 0, tight: knob & 8 != 0 }
    }

    fn options(&self) -> ServerOptions {
        let mut options = ServerOptions::default();
        if self.origin_allowed {
            options.allowed_origins = vec![ALLOWED_ORIGIN.to_owned()];
        }
        if self.tight {
            options.max_body_bytes = 512;
            options.max_buffered_bytes = 1024;
            options.max_connections = 2;
            options.max_sessions_per_connection = 2;
            options.max_provisional_sessions = 1;
            options.max_id_bytes = 40;
            options.max_ws_message_bytes = 512;
        }
        options
    }

    fn server(&self) -> HttpServer {
        let server = HttpServer::agent(|| FuzzAgent).options(self.options());
        if self.bearer { server.bearer_token(TOKEN) } else { server }
    }
}

/// One request as the client sends it.
#[derive(Debug)]
pub struct FuzzRequest {
    pub method: Method,
    pub uri: Uri,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Vec<u8>,
}

/// The requests of an input (after the knob byte), as raw texts.
pub fn split_requests(input: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = input;
    while out.len() < MAX_REQUESTS {
        match find(rest, SEPARATOR) {
            Some(at) => {
                out.push(&rest[..at]);
                rest = &rest[at + SEPARATOR.len()..];
            }
            None => {
                out.push(rest);
                break;
            }
        }
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Replaces `{conn}` with `connection` (or nothing).
fn substitute(text: &[u8], connection: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = find(rest, b"{conn}") {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(connection.unwrap_or_default().as_bytes());
        rest = &rest[at + 6..];
    }
    out.extend_from_slice(rest);
    out
}

/// Reads one request's text; `None` when its head cannot be sent (see the module docs).
pub fn parse_request(text: &[u8], h2c: bool) -> Option<FuzzRequest> {
    let (head, body) = match find(text, b"\n\n") {
        Some(at) => (&text[..at], &text[at + 2..]),
        None => (text, &b""[..]),
    };
    let mut lines = head.split(|b| *b == b'\n');
    let first = lines.next().unwrap_or_default();
    let (method, path) = match first.iter().position(|b| *b == b' ') {
        Some(at) => (&first[..at], &first[at + 1..]),
        None => (first, &b"/acp"[..]),
    };
    let method = Method::from_bytes(method).ok()?;
    let path = std::str::from_utf8(path).ok()?;
    // h2 needs the scheme and authority; HTTP/1.1 sends the path alone.
    let uri: Uri = if h2c { format!("http://fuzz{path}").parse().ok()? } else { path.parse().ok()? };
    if uri.path_and_query().is_none() || !uri.path().starts_with('/') {
        return None;
    }
    let mut headers = Vec::new();
    for line in lines.take(MAX_HEADERS) {
        let Some(colon) = line.iter().position(|b| *b == b':') else { continue };
        let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(&line[..colon]), HeaderValue::from_bytes(line[colon + 1..].trim_ascii()))
        else {
            continue;
        };
        let set_by_client = [header::CONTENT_LENGTH, header::TRANSFER_ENCODING, header::HOST];
        let connection_specific =
            [header::CONNECTION, header::UPGRADE, header::TE, HeaderName::from_static("keep-alive")];
        if set_by_client.contains(&name) || (h2c && connection_specific.contains(&name)) {
            continue;
        }
        headers.push((name, value));
    }
    // Within the pipe's buffer, so that the client's write never waits for a server that
    // answered without reading (413).
    let body = body[..body.len().min(MAX_BODY)].to_vec();
    Some(FuzzRequest { method, uri, headers, body })
}

impl FuzzRequest {
    fn header(&self, name: &HeaderName) -> Option<&HeaderValue> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    fn to_hyper(&self) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(Bytes::from(self.body.clone())));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        for (name, value) in &self.headers {
            request.headers_mut().append(name.clone(), value.clone());
        }
        request
    }

    /// The status the first routing rules give, where they decide: a refused origin, another
    /// path, a preflight, the bearer token, a method the endpoint does not serve, a POST body
    /// that is not JSON.
    fn decided_status(&self, setup: Setup) -> Option<u16> {
        if let Some(origin) = self.header(&header::ORIGIN) {
            let allowed = setup.origin_allowed && origin.to_str().is_ok_and(|o| o == ALLOWED_ORIGIN);
            if !allowed {
                return Some(403);
            }
        }
        if self.uri.path() != "/acp" {
            return Some(404);
        }
        if self.method == Method::OPTIONS {
            return Some(204);
        }
        if setup.bearer {
            match self.header(&header::AUTHORIZATION) {
                None => return Some(401),
                Some(value) if value.as_bytes() != format!("Bearer {TOKEN}").as_bytes() => return Some(403),
                Some(_) => {}
            }
        }
        if ![Method::POST, Method::GET, Method::DELETE].contains(&self.method) {
            return Some(405);
        }
        if self.method == Method::POST {
            let json = self
                .header(&header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(';').next())
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
            if !json {
                return Some(415);
            }
        }
        None
    }
}

/// A client connection to the server over an in-memory pipe.
enum Sender {
    Http1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    Http2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    async fn open(server: &HttpServer, h2c: bool) -> Sender {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        tokio::spawn(server.serve_io(server_io));
        let io = TokioIo::new(client_io);
        if h2c {
            let (sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.expect("an h2c handshake");
            tokio::spawn(connection);
            Sender::Http2(sender)
        } else {
            let (sender, connection) = hyper::client::conn::http1::handshake(io).await.expect("an HTTP/1.1 handshake");
            tokio::spawn(connection.with_upgrades());
            Sender::Http1(sender)
        }
    }

    /// Whether the connection can take another request.
    async fn ready(&mut self) -> bool {
        match self {
            Sender::Http1(s) => s.ready().await.is_ok(),
            Sender::Http2(s) => s.ready().await.is_ok(),
        }
    }

    async fn send(&mut self, request: Request<Full<Bytes>>) -> Result<Response<Incoming>, hyper::Error> {
        match self {
            Sender::Http1(s) => s.send_request(request).await,
            Sender::Http2(s) => s.send_request(request).await,
        }
    }
}

/// Checks one answer's status and headers.
fn check_answer(request: &FuzzRequest, setup: Setup, response: &Response<Incoming>) {
    let status = response.status().as_u16();
    assert!(DOCUMENTED_STATUSES.contains(&status), "undocumented status {status} for {request:?}");
    if let Some(decided) = request.decided_status(setup) {
        assert_eq!(status, decided, "the routing rules give {decided} for {request:?}");
    }
    let headers = response.headers();
    match status {
        101 => assert!(request.method == Method::GET, "101 for {request:?}"),
        401 => assert!(headers.contains_key(header::WWW_AUTHENTICATE), "401 without WWW-Authenticate"),
        405 => assert!(headers.contains_key(header::ALLOW), "405 without Allow"),
        200 if request.method == Method::GET => {
            let kind = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
            assert_eq!(kind, Some("text/event-stream"), "a GET's 200 is an event stream");
        }
        _ => {}
    }
}

/// Reads a whole (non-stream) answer body and checks it against the status.
async fn check_body(request: &FuzzRequest, status: u16, response: Response<Incoming>) {
    let has_connection = response.headers().contains_key("acp-connection-id");
    let body = tokio::time::timeout(HANG, response.into_body().collect())
        .await
        .expect("an answer's body never ends")
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    match status {
        202 | 204 => assert!(body.is_empty(), "{status} with a body for {request:?}"),
        200 => {
            // The answer to `initialize`: the agent's JSON-RPC response, with the connection id
            // when it succeeded.
            let answer: Value = serde_json::from_slice(&body).expect("a 200 to a POST is JSON");
            assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
            assert_eq!(has_connection, answer.get("result").is_some(), "connection id vs result: {answer}");
        }
        400 | 501 if body.first() == Some(&b'{') => {
            let answer: Value = serde_json::from_slice(&body).expect("a JSON error body");
            let code = answer["error"]["code"].as_i64();
            assert!(matches!(code, Some(-32700 | -32600)), "{status} with {answer}");
            assert!(answer["id"].is_null(), "{answer}");
        }
        501 => panic!("501 without a JSON-RPC body for {request:?}"),
        _ => {}
    }
}

/// Checks one message the agent sent (an SSE event's data or a WebSocket text frame).
fn check_message(data: &[u8]) {
    let message: Value = serde_json::from_slice(data).expect("the agent's messages are JSON");
    assert!(message.is_object(), "{message}");
    assert_eq!(message["jsonrpc"], "2.0", "{message}");
}

/// The server's keep-alive interval (its default).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Reads a held SSE stream (opened at `opened`) until it ends or nothing more comes, checking
/// every event, and that keep-alive comments came no more often than their interval.
async fn drain_events(mut body: Incoming, opened: tokio::time::Instant) {
    let mut pending = Vec::new();
    let mut keep_alives = 0u64;
    // Keep-alive comments come forever: the whole read is bounded (on the paused clock).
    let read = async {
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else { continue };
            pending.extend_from_slice(&data);
            while let Some(at) = find(&pending, b"\n\n") {
                let event: Vec<u8> = pending.drain(..at + 2).collect();
                for line in event.split(|b| *b == b'\n') {
                    if let Some(data) = line.strip_prefix(b"data: ") {
                        check_message(data);
                    } else if line.starts_with(b":") {
                        // At most one per interval of the (paused) clock since the stream opened.
                        keep_alives += 1;
                        let most = opened.elapsed().as_secs() / KEEP_ALIVE.as_secs() + 1;
                        assert!(keep_alives <= most, "{keep_alives} keep-alives in {:?}", opened.elapsed());
                    } else {
                        assert!(line.is_empty(), "not SSE: {:?}", String::from_utf8_lossy(line));
                    }
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN, read).await;
}

/// After a 101: the remaining requests go out as WebSocket frames; every text frame that
/// comes back must be a JSON-RPC object, and the socket must end once we close it.
async fn run_websocket(response: Response<Incoming>, rest: &[&[u8]], connection: Option<&str>) {
    let upgraded = tokio::time::timeout(HANG, hyper::upgrade::on(response)).await.expect("the upgrade hangs");
    let Ok(upgraded) = upgraded else { return };
    let socket = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await;
    let (mut sink, mut stream) = socket.split();
    let reader = tokio::spawn(async move {
        while let Ok(Some(frame)) = tokio::time::timeout(HANG, stream.next()).await {
            match frame {
                Ok(Message::Text(text)) => check_message(text.as_bytes()),
                Ok(Message::Close(_)) | Err(_) => return,
                Ok(_) => {}
            }
        }
        panic!("the WebSocket neither ends nor closes");
    });
    for text in rest {
        let text = substitute(text, connection);
        let body = find(&text, b"\n\n").map_or(&b""[..], |at| &text[at + 2..]);
        let method = text.split(|b| *b == b' ' || *b == b'\n').next().unwrap_or_default();
        let frame = match method {
            b"BINARY" => Message::binary(body.to_vec()),
            b"PING" => Message::Ping(Bytes::copy_from_slice(body)),
            b"CLOSE" => break,
            _ => Message::text(String::from_utf8_lossy(body).into_owned()),
        };
        if sink.send(frame).await.is_err() {
            break;
        }
    }
    let _ = sink.close().await;
    tokio::time::timeout(HANG, reader)
        .await
        .expect("the WebSocket reader hangs")
        .expect("the WebSocket reader panicked");
}

/// Target (d); see the module docs.
pub fn http_server(data: &[u8]) {
    let Some((&knob, input)) = data.split_first() else { return };
    let setup = Setup::from_knob(knob);
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("a runtime");
    rt.block_on(async {
        let server = setup.server();
        let requests = split_requests(input);
        let debug = std::env::var_os("ACP_FUZZ_DEBUG").is_some();
        let started = std::time::Instant::now();
        let mut sender: Option<Sender> = None;
        let mut connection: Option<String> = None;
        let mut streams = Vec::new();
        for (i, text) in requests.iter().enumerate() {
            let Some(request) = parse_request(&substitute(text, connection.as_deref()), setup.h2c) else { continue };
            // A connection the server closed (after an answer given without reading the whole
            // body, say) is replaced once; a request that fails on a fresh connection too got
            // no answer.
            let mut failure = None;
            let mut answer = None;
            for _attempt in 0..2 {
                let mut current = match sender.take() {
                    Some(mut s) => {
                        if s.ready().await {
                            s
                        } else {
                            Sender::open(&server, setup.h2c).await
                        }
                    }
                    None => Sender::open(&server, setup.h2c).await,
                };
                match tokio::time::timeout(HANG, current.send(request.to_hyper())).await {
                    Err(_) => panic!("no answer to {request:?}"),
                    Ok(Ok(response)) => {
                        answer = Some(response);
                        sender = Some(current);
                        break;
                    }
                    // The client refused to send it (e.g. a header h2 forbids): not the server's.
                    Ok(Err(e)) if e.is_user() => break,
                    Ok(Err(e)) => failure = Some(e),
                }
            }
            let Some(response) = answer else {
                if let Some(e) = failure {
                    panic!("no answer to {request:?}: {e}");
                }
                continue;
            };
            check_answer(&request, setup, &response);
            let status = response.status().as_u16();
            if debug {
                eprintln!("{} {} -> {status} ({:?} real)", request.method, request.uri, started.elapsed());
            }
            if let Some(id) = response.headers().get("acp-connection-id").and_then(|v| v.to_str().ok()) {
                connection = Some(id.to_owned());
            }
            match status {
                101 => {
                    drop(sender.take());
                    run_websocket(response, &requests[i + 1..], connection.as_deref()).await;
                    break;
                }
                200 if request.method == Method::GET => {
                    // Held open (the stream stays attached) and read at the end; over HTTP/1.1
                    // it keeps its connection busy, so the next request gets another.
                    streams.push((response.into_body(), tokio::time::Instant::now()));
                    if !setup.h2c {
                        sender = None;
                    }
                }
                _ => check_body(&request, status, response).await,
            }
        }
        for (stream, opened) in streams {
            drain_events(stream, opened).await;
        }
    });
}

// ---- seeds --------------------------------------------------------------------------------

fn post(connection: bool, session: Option<&str>, body: &str) -> String {
    let mut text = "POST /acp\ncontent-type: application/json\n".to_owned();
    if connection {
        text.push_str("acp-connection-id: {conn}\n");
    }
    if let Some(session) = session {
        text.push_str(&format!("acp-session-id: {session}\n"));
    }
    format!("{text}\n{body}")
}

fn get(session: Option<&str>) -> String {
    let mut text = "GET /acp\naccept: text/event-stream\nacp-connection-id: {conn}\n".to_owned();
    if let Some(session) = session {
        text.push_str(&format!("acp-session-id: {session}\n"));
    }
    text
}

fn join(requests: &[String]) -> Vec<u8> {
    requests.join("\n###\n").into_bytes()
}

/// Hand-written seeds: the RFD's flows (a whole turn with its permission answer, a cancel, a
/// resume, the end), the hostile inputs of the server's tests, and a WebSocket conversation;
/// each under a few knobs. `messages` are the spec's example messages, each POSTed on an
/// initialized connection.
pub fn seeds(messages: &[Value]) -> Vec<(&'static str, String, Vec<u8>)> {
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#;
    let new_session = r#"{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}"#;
    let prompt = r#"{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"sess_1","prompt":[{"type":"text","text":"go"}]}}"#;
    let waiting = r#"{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"sess_1","prompt":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}"#;
    let cancel = r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"sess_1"}}"#;
    let allow = r#"{"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}"#;
    let load = r#"{"jsonrpc":"2.0","id":5,"method":"session/load","params":{"sessionId":"sess_1","cwd":"/w","mcpServers":[]}}"#;
    let turn = vec![
        post(false, None, initialize),
        get(None),
        post(true, None, new_session),
        get(Some("sess_1")),
        post(true, Some("sess_1"), prompt),
        post(true, Some("sess_1"), allow),
        post(true, Some("sess_1"), waiting),
        post(true, Some("sess_1"), cancel),
        post(true, Some("sess_1"), load),
        "DELETE /acp\nacp-connection-id: {conn}\n".to_owned(),
        "DELETE /acp\nacp-connection-id: {conn}\n".to_owned(),
    ];
    let hostile = vec![
        post(false, None, initialize),
        "POST /acp\ncontent-type: text/plain\nacp-connection-id: {conn}\n\n{}".to_owned(),
        post(true, None, "[1,2]"),
        post(true, None, "{not json"),
        post(true, None, r#"{"jsonrpc":"2.0"}"#),
        post(false, None, new_session),
        "POST /acp\ncontent-type: application/json\nacp-connection-id: nope\n\n{}".to_owned(),
        post(true, None, prompt),
        post(true, Some("other"), prompt),
        post(true, None, initialize),
        "GET /acp\nacp-connection-id: {conn}\n".to_owned(),
        "GET /acp\naccept: text/event-stream\n".to_owned(),
        get(None),
        get(None),
        "PUT /acp\n".to_owned(),
        "OPTIONS /acp\norigin: https://app.example\n".to_owned(),
        "GET /elsewhere\n".to_owned(),
    ];
    let websocket = vec![
        "GET /acp\nupgrade: websocket\nconnection: upgrade\nsec-websocket-version: 13\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\n".to_owned(),
        format!("TEXT\n\n{initialize}"),
        format!("TEXT\n\n{new_session}"),
        format!("TEXT\n\n{prompt}"),
        format!("TEXT\n\n{allow}"),
        "BINARY\n\n{}".to_owned(),
        "PING\n\nhi".to_owned(),
        format!("TEXT\n\n{waiting}"),
        format!("TEXT\n\n{cancel}"),
    ];
    let mut out = Vec::new();
    for knob in [0u8, 1, 2, 4, 8, 9] {
        let mut flows = vec![("turn", turn.clone()), ("hostile", hostile.clone())];
        if knob & 1 == 0 {
            flows.push(("websocket", websocket.clone()));
        }
        for (name, requests) in flows {
            let mut requests = requests;
            if knob & 2 != 0 {
                // Every request authenticated, the first one twice refused.
                requests =
                    requests.into_iter().map(|r| r.replacen('\n', "\nauthorization: Bearer t0ken\n", 1)).collect();
                requests.insert(0, "GET /acp\nauthorization: Bearer wrong\n".to_owned());
                requests.insert(0, "GET /acp\n".to_owned());
            }
            if knob & 4 != 0 {
                requests =
                    requests.into_iter().map(|r| r.replacen('\n', "\norigin: https://app.example\n", 1)).collect();
                requests.push("GET /acp\norigin: https://evil.example\n".to_owned());
            }
            out.push(("http_server", format!("{name}-{knob:02x}"), [&[knob][..], &join(&requests)].concat()));
        }
    }
    // The spec's messages, each on a connection of its own after `initialize`.
    for (i, message) in messages.iter().enumerate() {
        let body = message.to_string();
        let session = message["params"]["sessionId"].as_str();
        let requests = [post(false, None, initialize), get(None), post(true, session, &body)];
        out.push(("http_server", format!("spec-{i}"), [&[0u8][..], &join(&requests)].concat()));
    }
    out
}
