//! The HTTP server (`acp_rpc::http::server`) against hostile clients: one test per class of
//! attack (malformed HTTP, smuggling, oversized heads and bodies, JSON bombs, h2c floods,
//! slow and silent sockets, the places of sockets and connections, a limit per peer, Origin
//! and Host, WebSocket frame abuse and ping floods), each asserting the exact status or close
//! code and that a legitimate client is still served. Timeouts are shortened through
//! `ServerOptions`, so the suite runs in seconds. Requests are written by hand on raw sockets:
//! every byte is the test's.
#![cfg(all(feature = "http-server", feature = "http-client"))]

use std::net::SocketAddr;
use std::time::Duration;

use acp_rpc::http::server::{HttpServer, ServerOptions};
use acp_rpc::{ErrorObject, Handler, IncomingNotification, IncomingRequest, RawValue};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

const WAIT: Duration = Duration::from_secs(10);

// ---- the agent and the server ---------------------------------------------------------------

/// Answers `initialize` and `session/new`; everything else is unknown.
struct Agent;

impl Handler for Agent {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let answer = match &*req.method {
            "initialize" => json!({"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}),
            "session/new" => json!({"sessionId": "s1"}),
            other => return Err(ErrorObject::method_not_found(other)),
        };
        Ok(RawValue::from_string(answer.to_string()).expect("json"))
    }

    async fn handle_notification(&self, _: IncomingNotification) {}
}

/// A running server's address (`127.0.0.1:PORT`).
async fn start(options: ServerOptions) -> SocketAddr {
    start_server(HttpServer::new(|| Agent).options(options)).await
}

async fn start_server(server: HttpServer) -> SocketAddr {
    let bound = server.bind("127.0.0.1:0").await.expect("bind");
    let addr = bound.local_addr();
    tokio::spawn(bound.run());
    addr
}

// ---- a hand-written HTTP/1.1 client ---------------------------------------------------------

struct Response {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// Reads one response (head and `Content-Length` body); `None` when the socket closes first.
async fn read_response(tcp: &mut TcpStream) -> Option<Response> {
    let read = async {
        let mut buf = Vec::new();
        let end = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            let mut chunk = [0u8; 4096];
            let n = tcp.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let status = head.get(9..12)?.parse().ok()?;
        let mut response = Response { status, head, body: buf[end + 4..].to_vec() };
        let len: usize = response.header("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
        while response.body.len() < len {
            let mut chunk = [0u8; 4096];
            let n = tcp.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            response.body.extend_from_slice(&chunk[..n]);
        }
        Some(response)
    };
    tokio::time::timeout(WAIT, read).await.expect("an answer or the socket's end in time")
}

/// `bytes` on a new socket; its answer.
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> Option<Response> {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    // A server that refuses part way may close before taking all of it.
    let _ = tcp.write_all(bytes).await;
    read_response(&mut tcp).await
}

/// A POST of `body` to `/acp` with `headers` (each `name: value`).
fn post(headers: &[&str], body: &str) -> Vec<u8> {
    let mut request = format!(
        "POST /acp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request.push_str(body);
    request.into_bytes()
}

fn initialize(id: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}})
        .to_string()
}

fn note() -> String {
    json!({"jsonrpc": "2.0", "method": "_x/note", "params": {}}).to_string()
}

/// A legitimate client opens a connection (`headers` added to its `initialize`); its id.
async fn serves(addr: SocketAddr, headers: &[&str]) -> String {
    let answer = exchange(addr, &post(headers, &initialize(1))).await.expect("an answer");
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
    assert_eq!(answer.json()["result"]["protocolVersion"], 1);
    answer.header("acp-connection-id").expect("a connection id").to_owned()
}

/// Whether the server closes the socket (end of stream, or a reset) within `within`,
/// whatever it sends first.
async fn closes_within(tcp: &mut TcpStream, within: Duration) -> bool {
    let drain = async {
        let mut buf = [0u8; 4096];
        while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
    };
    tokio::time::timeout(within, drain).await.is_ok()
}

// ---- malformed HTTP -------------------------------------------------------------------------

/// Requests hyper cannot parse get 400 (431 for a head too large) and their socket is closed;
/// nothing reaches the agent and the server goes on serving.
#[tokio::test]
async fn malformed_requests_get_400_and_their_socket_is_closed() {
    let addr = start(ServerOptions::default()).await;
    let cases: [(&str, &[u8]); 6] = [
        ("a garbage request line", b"\x16\x03\x01 hello there\r\n\r\n"),
        ("no HTTP version", b"GET /acp\r\nhost: localhost\r\n\r\n"),
        ("a header without a colon", b"GET /acp HTTP/1.1\r\nhost: localhost\r\nno colon here\r\n\r\n"),
        ("a space before the colon", b"GET /acp HTTP/1.1\r\nhost : localhost\r\n\r\n"),
        ("a control byte in a header value", b"GET /acp HTTP/1.1\r\nhost: local\x01host\r\n\r\n"),
        ("an obsolete folded header", b"GET /acp HTTP/1.1\r\nhost: localhost\r\nx-a: b\r\n  folded\r\n\r\n"),
    ];
    for (what, bytes) in cases {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(bytes).await.unwrap();
        let answer = read_response(&mut tcp).await.unwrap_or_else(|| panic!("{what}: no answer"));
        assert_eq!(answer.status, 400, "{what}: {}", answer.head);
        assert!(closes_within(&mut tcp, WAIT).await, "{what}: the socket stayed open");
    }
    serves(addr, &[]).await;
}

// ---- request smuggling ----------------------------------------------------------------------

/// A body whose length two headers disagree on cannot carry a second request past the server.
/// `Content-Length` with `Transfer-Encoding: chunked`: the chunked framing wins (RFC 9112,
/// 6.3; the `initialize` it carries is answered 200) and the socket is closed after the
/// answer. Two different `Content-Length`s, a list of them, and a `Transfer-Encoding` that
/// does not end in `chunked` are refused 400. Either way the bytes behind the body (a GET)
/// are never answered as a request of their own.
#[tokio::test]
async fn smuggled_requests_are_refused_and_never_answered() {
    let addr = start(ServerOptions::default()).await;
    let smuggled = "GET /smuggled HTTP/1.1\r\nhost: localhost\r\n\r\n";
    let message = initialize(1);
    let chunked = format!("{:x}\r\n{message}\r\n0\r\n\r\n{smuggled}", message.len());
    let head = "POST /acp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n";
    let cases = [
        (
            "Content-Length and Transfer-Encoding",
            200,
            format!("{head}content-length: 4\r\ntransfer-encoding: chunked\r\n\r\n{chunked}"),
        ),
        (
            "Transfer-Encoding and Content-Length",
            200,
            format!("{head}transfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n{chunked}"),
        ),
        (
            "two Content-Lengths",
            400,
            format!("{head}content-length: 4\r\ncontent-length: {}\r\n\r\n{message}{smuggled}", message.len()),
        ),
        (
            "a list of Content-Lengths",
            400,
            format!("{head}content-length: 4, {}\r\n\r\n{message}{smuggled}", message.len()),
        ),
        (
            "Transfer-Encoding not ending in chunked",
            400,
            format!("{head}transfer-encoding: chunked, identity\r\n\r\n{chunked}"),
        ),
        (
            "Transfer-Encoding in HTTP/1.0",
            400,
            format!("{}transfer-encoding: chunked\r\n\r\n{chunked}", head.replace("HTTP/1.1", "HTTP/1.0")),
        ),
    ];
    for (what, status, request) in cases {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(request.as_bytes()).await.unwrap();
        let answer = read_response(&mut tcp).await.unwrap_or_else(|| panic!("{what}: no answer"));
        assert_eq!(answer.status, status, "{what}: {}", answer.head);
        // No second answer (the smuggled GET's 404): the socket just closes.
        let mut rest = Vec::new();
        tokio::time::timeout(WAIT, tcp.read_to_end(&mut rest)).await.expect("closed").ok();
        assert!(!String::from_utf8_lossy(&rest).contains("HTTP/1."), "{what}: a second answer: {rest:?}");
    }
    serves(addr, &[]).await;
}

// ---- oversized heads and bodies -------------------------------------------------------------

/// A head too large, in one header or in many, is refused 431 before it is all read; a body
/// over `max_body_bytes` is refused 413 whether its length is declared or it comes chunked.
#[tokio::test]
async fn oversized_heads_get_431_and_oversized_bodies_413() {
    let addr = start(ServerOptions { max_body_bytes: 4096, ..ServerOptions::default() }).await;
    let long = format!("GET /acp HTTP/1.1\r\nhost: localhost\r\nx-big: {}\r\n\r\n", "a".repeat(1 << 20));
    let many: String = (0..200).map(|n| format!("x-{n}: v\r\n")).collect();
    let many = format!("GET /acp HTTP/1.1\r\nhost: localhost\r\n{many}\r\n");
    for (what, request) in [("a 1 MiB header", long), ("200 headers", many)] {
        let answer = exchange(addr, request.as_bytes()).await.unwrap_or_else(|| panic!("{what}: no answer"));
        assert_eq!(answer.status, 431, "{what}: {}", answer.head);
    }

    let big = format!(r#"{{"jsonrpc":"2.0","method":"_x","params":{{"pad":"{}"}}}}"#, "a".repeat(5000));
    assert_eq!(exchange(addr, &post(&[], &big)).await.expect("an answer").status, 413, "declared length");
    let declared_only = "POST /acp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 99999999999\r\n\r\n";
    assert_eq!(exchange(addr, declared_only.as_bytes()).await.expect("an answer").status, 413, "declared, never sent");
    let mut chunked = String::from(
        "POST /acp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
    );
    for _ in 0..8 {
        chunked.push_str(&format!("400\r\n{}\r\n", "a".repeat(1024)));
    }
    chunked.push_str("0\r\n\r\n");
    assert_eq!(exchange(addr, chunked.as_bytes()).await.expect("an answer").status, 413, "chunked");
    serves(addr, &[]).await;
}

/// POST bodies share one server-wide budget, counted in the bytes that arrived: while one
/// large body holds most of it, another that does not fit beside it is refused 503 at once
/// (no body waits for another), and the bytes come back when the first is handed to the agent,
/// or when a body that stopped coming is answered 408.
#[tokio::test]
async fn bodies_share_a_server_wide_budget() {
    let options = ServerOptions {
        max_body_bytes: 1 << 20,
        max_body_bytes_in_flight: 1 << 20,
        body_read_timeout: Duration::from_secs(2),
        ..ServerOptions::default()
    };
    let addr = start(options).await;
    let conn = serves(addr, &[]).await;
    let post_head = |len: usize| {
        format!(
            "POST /acp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
             acp-connection-id: {conn}\r\ncontent-length: {len}\r\n\r\n"
        )
    };
    let note =
        |pad: usize| format!(r#"{{"jsonrpc":"2.0","method":"_x/note","params":{{"pad":"{}"}}}}"#, "x".repeat(pad));
    let whole = |body: &str| [post_head(body.len()).as_bytes(), body.as_bytes()].concat();
    // The first body: 900 KiB of its ~1 MiB sent, then it pauses.
    let big = note(1_000_000);
    let mut first = TcpStream::connect(addr).await.unwrap();
    first.write_all(post_head(big.len()).as_bytes()).await.unwrap();
    first.write_all(&big.as_bytes()[..900 * 1024]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The second, 200 KiB, does not fit beside those 900 KiB: refused, to be sent again.
    let small = note(200 * 1024);
    let busy = exchange(addr, &whole(&small)).await.expect("an answer");
    assert_eq!(busy.status, 503, "{}", busy.head);
    assert_eq!(busy.header("retry-after"), Some("1"));
    // The first finishes; its bytes come back once it is with the agent, and the second fits.
    first.write_all(&big.as_bytes()[900 * 1024..]).await.unwrap();
    assert_eq!(read_response(&mut first).await.expect("an answer").status, 202);
    assert_eq!(exchange(addr, &whole(&small)).await.expect("an answer").status, 202, "sent again");
    // A body that stops after 900 KiB holds them until it is answered 408, then gives them back.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled.write_all(post_head(big.len()).as_bytes()).await.unwrap();
    stalled.write_all(&big.as_bytes()[..900 * 1024]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(exchange(addr, &whole(&small)).await.expect("an answer").status, 503, "beside the stalled body");
    assert_eq!(read_response(&mut stalled).await.expect("an answer").status, 408);
    assert_eq!(exchange(addr, &whole(&small)).await.expect("an answer").status, 202, "after the 408");
}

/// Sockets that declare the largest body allowed and send a byte at a time hold only the bytes
/// they sent, not their `Content-Length`: eight of them (twice the budget, declared) do not keep
/// an honest client's `initialize` and a 1 MiB POST waiting. Before, each took its declared
/// length from the budget before reading, so four such sockets held all 64 MiB until the body
/// timeout and every other POST waited.
#[tokio::test]
async fn declared_lengths_that_never_arrive_hold_nothing_of_the_budget() {
    let options = ServerOptions::default();
    let declared = options.max_body_bytes;
    assert!(8 * declared >= 2 * options.max_body_bytes_in_flight);
    let addr = start(options).await;
    let head = format!(
        "POST /acp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\n\r\n{{"
    );
    let mut liars = Vec::new();
    for _ in 0..8 {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(head.as_bytes()).await.unwrap();
        liars.push(tcp);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let quick = Duration::from_secs(2);
    let conn = tokio::time::timeout(quick, serves(addr, &[])).await.expect("initialize served at once");
    for liar in &mut liars {
        liar.write_all(b" ").await.unwrap();
    }
    let pad = format!(r#"{{"jsonrpc":"2.0","method":"_x/note","params":{{"pad":"{}"}}}}"#, "x".repeat(1 << 20));
    let header = format!("acp-connection-id: {conn}");
    let answer = tokio::time::timeout(quick, exchange(addr, &post(&[&header], &pad))).await.expect("in time");
    assert_eq!(answer.expect("an answer").status, 202);
    // The liars are still within their body timeout: not answered, not closed.
    for liar in &mut liars {
        let mut byte = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(20), liar.read(&mut byte)).await;
        assert!(early.is_err(), "a slow body was answered before its timeout");
    }
}

// ---- JSON bombs -----------------------------------------------------------------------------

/// JSON nested 100,000 deep is skipped over without recursing (no stack overflow, at the
/// server or at the agent's runtime): at the top level it is answered as what it is (an array:
/// a batch, 501; an object that is no message: 400 -32600; unclosed: 400 -32700); inside a
/// request's params it reaches the agent, which answers it; and everything keeps serving.
#[tokio::test]
async fn deeply_nested_json_is_answered_without_recursing() {
    let addr = start(ServerOptions::default()).await;
    let conn = serves(addr, &[]).await;
    let c = format!("acp-connection-id: {conn}");
    let depth = 100_000;
    let arrays = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let objects = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
    let unclosed = "[".repeat(depth);
    for (what, body, status, code) in
        [("arrays", &arrays, 501, -32600), ("objects", &objects, 400, -32600), ("unclosed", &unclosed, 400, -32700)]
    {
        let answer = exchange(addr, &post(&[&c], body)).await.unwrap_or_else(|| panic!("{what}: no answer"));
        assert_eq!(answer.status, status, "{what}: {}", answer.head);
        assert_eq!(answer.json()["error"]["code"], code, "{what}");
    }
    // In a request's params: the agent gets it, and answers (on the connection's stream).
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let get = format!("GET /acp HTTP/1.1\r\nhost: localhost\r\naccept: text/event-stream\r\n{c}\r\n\r\n");
    stream.write_all(get.as_bytes()).await.unwrap();
    let in_params = format!(r#"{{"jsonrpc":"2.0","id":7,"method":"_x","params":{{"p":{arrays}}}}}"#);
    assert_eq!(exchange(addr, &post(&[&c], &in_params)).await.expect("an answer").status, 202);
    let mut seen = Vec::new();
    let answered = async {
        while !String::from_utf8_lossy(&seen).contains(r#""id":7"#) {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the stream ended: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(WAIT, answered).await.expect("the agent answers the deeply nested request");
    assert!(String::from_utf8_lossy(&seen).contains("-32601"), "{}", String::from_utf8_lossy(&seen));
    serves(addr, &[]).await;
}

/// Numbers no float holds: an `initialize` whose id is `1e400` is answered as any other,
/// with the connection's id, and the connection works; a 10,000-digit number in params is
/// carried without being built.
#[tokio::test]
async fn numbers_beyond_f64_are_carried_as_written() {
    let addr = start(ServerOptions::default()).await;
    let body =
        r#"{"jsonrpc":"2.0","id":1e400,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}"#;
    let answer = exchange(addr, &post(&[], body)).await.expect("an answer");
    assert_eq!(answer.status, 200);
    let text = String::from_utf8_lossy(&answer.body).into_owned();
    assert!(text.contains(r#""id":1e400"#) && text.contains(r#""result""#), "{text}");
    let conn = answer.header("acp-connection-id").expect("the connection's id").to_owned();
    let c = format!("acp-connection-id: {conn}");
    assert_eq!(exchange(addr, &post(&[&c], &note())).await.expect("an answer").status, 202);
    let huge = format!(r#"{{"jsonrpc":"2.0","method":"_x/note","params":{{"n":{}}}}}"#, "9".repeat(10_000));
    assert_eq!(exchange(addr, &post(&[&c], &huge)).await.expect("an answer").status, 202);
    assert_eq!(exchange(addr, &post(&[&c], &note())).await.expect("an answer").status, 202);
}

// ---- h2c floods -----------------------------------------------------------------------------

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An HTTP/2 frame: length, type, flags, stream id, payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = vec![len[1], len[2], len[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// A HEADERS frame opening a JSON POST to `/acp` whose body never comes (END_HEADERS, no
/// END_STREAM): the stream stays open, waiting for it. HPACK literals without indexing.
fn h2_open_post(stream: u32) -> Vec<u8> {
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    block.extend_from_slice(b"\x04\x04/acp"); // :path
    block.extend_from_slice(b"\x01\x09localhost"); // :authority
    block.extend_from_slice(b"\x0f\x10\x10application/json"); // content-type
    // A small declared length: these streams hold next to nothing of the body budget.
    block.extend_from_slice(b"\x0f\x0d\x03100"); // content-length
    h2_frame(0x1, 0x4, stream, &block)
}

/// A client that opens far more HTTP/2 streams than the server allows at once (ignoring its
/// SETTINGS) has the excess refused (RST_STREAM, REFUSED_STREAM) rather than served: its
/// streams are bounded. Meanwhile other clients are served.
#[tokio::test]
async fn an_h2c_stream_flood_is_refused_beyond_the_stream_limit() {
    // At most 4 + 2 + 64 streams at once on one connection (see `max_sessions_per_connection`).
    let options =
        ServerOptions { max_sessions_per_connection: 4, max_provisional_sessions: 2, ..ServerOptions::default() };
    let limit = 70;
    let addr = start(options).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let opened = 300u32;
    let mut flood = PREFACE.to_vec();
    flood.extend(h2_frame(0x4, 0, 0, &[])); // SETTINGS
    for n in 0..opened {
        flood.extend(h2_open_post(2 * n + 1));
    }
    tcp.write_all(&flood).await.unwrap();
    // Count the refusals among the server's frames.
    let mut refused = 0u32;
    let mut buf = Vec::new();
    let count = async {
        while refused < opened - limit {
            let mut chunk = [0u8; 16 * 1024];
            let n = tcp.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            while buf.len() >= 9 {
                let len = usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
                if buf.len() < 9 + len {
                    break;
                }
                let frame: Vec<u8> = buf.drain(..9 + len).collect();
                // RST_STREAM with REFUSED_STREAM (7).
                if frame[3] == 0x3 && frame[9..13] == [0, 0, 0, 7] {
                    refused += 1;
                }
            }
        }
    };
    let _ = tokio::time::timeout(WAIT, count).await;
    assert_eq!(refused, opened - limit, "streams beyond the limit of {limit} refused");
    serves(addr, &[]).await;
}

/// Every stage before a request has a deadline: a socket that sends nothing, one byte, part
/// of the HTTP/2 preface, the whole preface with no SETTINGS, or a preface and SETTINGS and
/// no request is closed at the header read timeout, as a partial HTTP/1.1 head is.
#[tokio::test]
async fn a_socket_that_never_completes_a_first_request_is_closed_whatever_it_sent() {
    let options = ServerOptions { header_read_timeout: Duration::from_millis(300), ..ServerOptions::default() };
    let addr = start(options).await;
    let settings = [PREFACE, &h2_frame(0x4, 0, 0, &[])].concat();
    for sent in [&b""[..], b"P", b"PRI * HTTP/2.0\r\n", PREFACE, &settings, b"G", b"POST /acp HTTP/1.1\r\nhost: x\r\n"]
    {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(sent).await.unwrap();
        let started = tokio::time::Instant::now();
        assert!(closes_within(&mut tcp, WAIT).await, "a socket that sent {sent:?} is still open after {WAIT:?}");
        assert!(started.elapsed() < Duration::from_secs(3), "{sent:?}: closed only after {:?}", started.elapsed());
    }
    serves(addr, &[]).await;
}

// ---- slowloris and silent sockets -----------------------------------------------------------

/// A client that sends its head a byte at a time, never finishing it, is closed at the
/// header read timeout: trickling does not extend it.
#[tokio::test]
async fn a_head_trickled_a_byte_at_a_time_is_closed_at_the_header_timeout() {
    let options = ServerOptions { header_read_timeout: Duration::from_millis(500), ..ServerOptions::default() };
    let addr = start(options).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let started = tokio::time::Instant::now();
    let head = b"POST /acp HTTP/1.1\r\nhost: localhost\r\nx-slow: ".iter().chain(std::iter::repeat(&b'a'));
    for byte in head {
        if tcp.write_all(&[*byte]).await.is_err() {
            break;
        }
        let mut probe = [0u8; 1];
        // Each pause doubles as the probe for the close.
        match tokio::time::timeout(Duration::from_millis(50), tcp.read(&mut probe)).await {
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(_)) => {
                assert!(closes_within(&mut tcp, WAIT).await);
                break;
            }
            Err(_) => assert!(started.elapsed() < WAIT, "still open after {WAIT:?} of trickling"),
        }
    }
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(3), "closed only after {elapsed:?}");
    serves(addr, &[]).await;
}

/// A POST whose body stops coming is answered 408 at the body read timeout.
#[tokio::test]
async fn a_body_that_stops_coming_is_answered_408() {
    let options = ServerOptions { body_read_timeout: Duration::from_millis(300), ..ServerOptions::default() };
    let addr = start(options).await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let head = "POST /acp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
    tcp.write_all(format!("{head}{{\"jsonrpc\"").as_bytes()).await.unwrap();
    let answer = read_response(&mut tcp).await.expect("an answer");
    assert_eq!(answer.status, 408, "{}", answer.head);
    serves(addr, &[]).await;
}

/// When every socket place is taken, the oldest socket that has not been served makes room:
/// silent sockets cannot keep a client out, even before any timeout.
#[tokio::test]
async fn silent_sockets_make_room_for_a_client_that_sends_a_request() {
    let addr = start(ServerOptions { max_sockets: 2, ..ServerOptions::default() }).await;
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    tokio::time::timeout(Duration::from_secs(5), serves(addr, &[]))
        .await
        .expect("served while silent sockets hold every place");
}

/// Sockets that only sent requests the server refused (here 401: no token) earn no place:
/// they make room for a client that is served, as silent ones do. Before, a socket kept its
/// place for good once it had sent any whole request, so clients without credentials,
/// re-sending a request within each header timeout, kept out the ones with them.
#[tokio::test]
async fn sockets_with_only_refused_requests_make_room_for_authenticated_clients() {
    let addr = start_server(
        HttpServer::new(|| Agent)
            .options(ServerOptions { max_sockets: 3, ..ServerOptions::default() })
            .bearer_token("s3cret"),
    )
    .await;
    let mut refused = Vec::new();
    for _ in 0..3 {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(&post(&[], &initialize(1))).await.unwrap();
        assert_eq!(read_response(&mut tcp).await.expect("an answer").status, 401);
        refused.push(tcp);
    }
    let served = tokio::time::timeout(Duration::from_secs(5), serves(addr, &["authorization: Bearer s3cret"])).await;
    served.expect("an authenticated client served while unauthenticated sockets held every place");
    // The oldest refused socket made room.
    assert!(closes_within(&mut refused[0], WAIT).await, "the oldest refused socket is still open");
}

/// Sockets beyond `max_sockets` wait until one closes, when every place holds a socket that
/// has been served (one that has not is closed to make room, see above).
#[tokio::test]
async fn sockets_beyond_the_limit_wait_until_one_closes() {
    let addr = start(ServerOptions { max_sockets: 1, ..ServerOptions::default() }).await;
    let mut held = TcpStream::connect(addr).await.unwrap();
    // A request served; the socket stays open for the next (keep-alive).
    held.write_all(&post(&[], &initialize(1))).await.unwrap();
    assert_eq!(read_response(&mut held).await.expect("an answer").status, 200);
    let waiting = tokio::spawn(exchange(addr, b"GET /elsewhere HTTP/1.1\r\nhost: localhost\r\n\r\n"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a second socket was served while the first held the only place");
    drop(held);
    let answer = tokio::time::timeout(WAIT, waiting).await.expect("served once the first closed").unwrap();
    assert_eq!(answer.expect("an answer").status, 404);
}

// ---- a limit per peer -----------------------------------------------------------------------

/// A socket bound to `ip` first: with 127.0.0.2 (Linux routes all of 127/8 to loopback), a
/// second peer on one machine.
async fn connect_from(ip: [u8; 4], addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((ip, 0))).expect("bind a second loopback address");
    socket.connect(addr).await.expect("connect")
}

/// One peer holds at most `max_sockets_per_peer` sockets (a WebSocket's included): more are
/// closed before anything is read, take no place of `max_sockets` and make no other socket
/// close, while another peer and the peer's open sockets are served. Loopback peers are
/// counted here only because `limit_loopback_peers` says so.
#[tokio::test]
async fn a_peer_over_its_socket_limit_is_refused_and_others_are_served() {
    let options = ServerOptions {
        max_sockets_per_peer: 2,
        limit_loopback_peers: true,
        max_sockets: 4,
        ..ServerOptions::default()
    };
    let addr = start(options).await;
    let local = [127, 0, 0, 1];
    let (mut a, mut b) = (connect_from(local, addr).await, connect_from(local, addr).await);
    // Many more from the same peer: each closed at once, unread, evicting nobody (a and b have
    // sent nothing: they would be the first to go).
    for n in 0..10 {
        let mut over = connect_from(local, addr).await;
        let _ = over.write_all(&post(&[], &initialize(1))).await;
        assert!(closes_within(&mut over, Duration::from_secs(2)).await, "socket {n} over the peer's limit was served");
    }
    // Another peer is served; so are the first peer's two sockets.
    let other = [127, 0, 0, 2];
    let mut c = connect_from(other, addr).await;
    c.write_all(&post(&[], &initialize(1))).await.unwrap();
    assert_eq!(read_response(&mut c).await.expect("the other peer is served").status, 200);
    for tcp in [&mut a, &mut b] {
        tcp.write_all(&post(&[], &initialize(1))).await.unwrap();
        assert_eq!(read_response(tcp).await.expect("the peer's own sockets are served").status, 200);
    }
    // A closed socket gives its place back; a WebSocket keeps its place while open.
    drop(a);
    let ws = tokio::time::timeout(WAIT, async {
        loop {
            let tcp = connect_from(local, addr).await;
            let url = format!("ws://{addr}/acp").into_client_request().unwrap();
            if let Ok((ws, _)) = tokio_tungstenite::client_async(url, tcp).await {
                return ws;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a place freed by a closed socket");
    let mut over = connect_from(local, addr).await;
    assert!(closes_within(&mut over, Duration::from_secs(2)).await, "the open WebSocket stopped counting");
    drop(ws);
}

/// Loopback peers are not limited by default (local clients, a reverse proxy on the host).
#[tokio::test]
async fn loopback_peers_are_not_limited_by_default() {
    let addr = start(ServerOptions { max_sockets_per_peer: 1, ..ServerOptions::default() }).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(&post(&[], &initialize(1))).await.unwrap();
        assert_eq!(read_response(&mut tcp).await.expect("served").status, 200);
        held.push(tcp);
    }
}

// ---- connections that were never used -------------------------------------------------------

/// A flood of `initialize` calls whose connections are never used cannot lock clients out: at
/// the limit, the connection unused the longest makes room (used ones never do).
#[tokio::test]
async fn connections_unused_since_their_initialize_make_room_at_the_limit() {
    let addr = start(ServerOptions { max_connections: 4, ..ServerOptions::default() }).await;
    let used = serves(addr, &[]).await;
    let c = |id: &str| format!("acp-connection-id: {id}");
    // Used: its stream attached (and kept open).
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let get = format!("GET /acp HTTP/1.1\r\nhost: localhost\r\naccept: text/event-stream\r\n{}\r\n\r\n", c(&used));
    stream.write_all(get.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    // Many more initialize calls than places, none used: each is served.
    let mut flood = Vec::new();
    for _ in 0..16 {
        flood.push(serves(addr, &[]).await);
    }
    // The used connection kept its place; the oldest unused ones were closed.
    assert_eq!(exchange(addr, &post(&[&c(&used)], &note())).await.unwrap().status, 202);
    assert_eq!(exchange(addr, &post(&[&c(&flood[0])], &note())).await.unwrap().status, 404);
    assert_eq!(exchange(addr, &post(&[&c(&flood[15])], &note())).await.unwrap().status, 202);
    // With every place used, a new one is refused.
    for _ in 0..2 {
        let id = serves(addr, &[]).await;
        assert_eq!(exchange(addr, &post(&[&c(&id)], &note())).await.unwrap().status, 202);
    }
    assert_eq!(exchange(addr, &post(&[], &initialize(1))).await.unwrap().status, 429);
}

/// WebSockets that never send a message after their first hold no place for good either: at
/// `max_connections` the one unused the longest is closed (1013, try again later) for a new
/// connection of either profile, while a WebSocket in use keeps its place. Before, unused
/// WebSockets were never closed, and a few of them locked everyone out with 429.
#[tokio::test]
async fn unused_websockets_make_room_at_the_connection_limit() {
    let addr = start(ServerOptions { max_connections: 2, ..ServerOptions::default() }).await;
    let mut used = ws_connect(addr).await;
    used.send(Message::text(initialize(1))).await.unwrap();
    assert_eq!(ws_read(&mut used).await["id"], 1);
    used.send(Message::text(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}})
            .to_string(),
    ))
    .await
    .unwrap();
    assert_eq!(ws_read(&mut used).await["id"], 2);
    let mut idle = ws_connect(addr).await;
    // A third connection, over HTTP: the unused WebSocket makes room.
    serves(addr, &[]).await;
    assert_eq!(ws_close_code(&mut idle).await, Some(CloseCode::Again));
    // And a WebSocket: the unused HTTP connection makes room.
    let mut newer = ws_connect(addr).await;
    newer.send(Message::text(initialize(3))).await.unwrap();
    assert_eq!(ws_read(&mut newer).await["id"], 3);
    // The one in use was never touched.
    used.send(Message::text(json!({"jsonrpc": "2.0", "id": 4, "method": "_nope", "params": {}}).to_string()))
        .await
        .unwrap();
    assert_eq!(ws_read(&mut used).await["id"], 4);
}

// ---- Origin and Host ------------------------------------------------------------------------

/// DNS rebinding: a page whose name now resolves to 127.0.0.1 sends its own name as `Host`.
/// A loopback server answers only for loopback names unless told others.
#[tokio::test]
async fn a_loopback_server_answers_only_for_loopback_host_names() {
    async fn status(addr: SocketAddr, host: &str) -> u16 {
        let request = format!("GET /acp HTTP/1.1\r\nhost: {host}\r\naccept: text/event-stream\r\n\r\n");
        exchange(addr, request.as_bytes()).await.expect("an answer").status
    }
    let addr = start(ServerOptions::default()).await;
    let port = addr.port();
    assert_eq!(status(addr, &format!("evil.example:{port}")).await, 403);
    assert_eq!(status(addr, "evil.example").await, 403);
    // Loopback names pass the check (and the GET then wants a connection id: 400).
    for host in
        [format!("localhost:{port}"), format!("127.0.0.1:{port}"), "LOCALHOST".to_owned(), format!("[::1]:{port}")]
    {
        assert_eq!(status(addr, &host).await, 400, "{host}");
    }
    let options = ServerOptions { allowed_hosts: vec!["agent.example".into()], ..ServerOptions::default() };
    let addr = start(options).await;
    assert_eq!(status(addr, "Agent.Example:443").await, 400);
    assert_eq!(status(addr, "localhost").await, 403, "the list replaces the loopback default");
}

/// A page on another site cannot open a WebSocket (cross-site WebSocket hijacking: browsers
/// do not preflight upgrades) nor POST: an `Origin` not allowed is refused 403, an allowed one
/// is served with its CORS headers.
#[tokio::test]
async fn origins_not_allowed_are_refused_on_every_method() {
    let options = ServerOptions { allowed_origins: vec!["https://app.example".into()], ..ServerOptions::default() };
    let addr = start(options).await;
    let upgrade = |origin: &str| {
        format!(
            "GET /acp HTTP/1.1\r\nhost: localhost\r\nupgrade: websocket\r\nconnection: upgrade\r\n\
             sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\norigin: {origin}\r\n\r\n"
        )
    };
    for origin in ["https://evil.example", "null", "https://app.example.evil.example", "http://app.example"] {
        assert_eq!(exchange(addr, upgrade(origin).as_bytes()).await.unwrap().status, 403, "upgrade from {origin}");
        let posted = exchange(addr, &post(&[&format!("origin: {origin}")], &initialize(1))).await.unwrap();
        assert_eq!(posted.status, 403, "POST from {origin}");
    }
    assert_eq!(exchange(addr, upgrade("https://app.example").as_bytes()).await.unwrap().status, 101);
    let allowed = exchange(addr, &post(&["origin: https://app.example"], &initialize(1))).await.unwrap();
    assert_eq!(allowed.status, 200);
    assert_eq!(allowed.header("access-control-allow-origin"), Some("https://app.example"));
}

// ---- WebSocket frame abuse ------------------------------------------------------------------

async fn ws_connect(addr: SocketAddr) -> WebSocketStream<TcpStream> {
    let request = format!("ws://{addr}/acp").into_client_request().unwrap();
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tokio_tungstenite::client_async(request, tcp).await.expect("upgrade").0
}

/// The next text message, as JSON.
async fn ws_read(socket: &mut WebSocketStream<TcpStream>) -> Value {
    loop {
        match tokio::time::timeout(WAIT, socket.next()).await.expect("a message in time") {
            Some(Ok(Message::Text(text))) => return serde_json::from_str(&text).expect("json"),
            Some(Ok(_)) => continue,
            other => panic!("the socket ended: {other:?}"),
        }
    }
}

/// The close frame's code the server ends with; `None` when it closes without one.
async fn ws_close_code(socket: &mut WebSocketStream<TcpStream>) -> Option<CloseCode> {
    loop {
        match tokio::time::timeout(WAIT, socket.next()).await.expect("the socket closes in time") {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| f.code),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}

/// A client frame, masked (with the key 1 2 3 4) unless `masked` is false.
fn ws_frame(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut frame = vec![first];
    let mask = if masked { 0x80 } else { 0 };
    match payload.len() {
        n @ 0..=125 => frame.push(mask | n as u8),
        n @ 126..=65535 => {
            frame.push(mask | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(mask | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        let key = [1u8, 2, 3, 4];
        frame.extend_from_slice(&key);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    } else {
        frame.extend_from_slice(payload);
    }
    frame
}

/// RFC 6455: every protocol violation ends the WebSocket with a close frame and its code
/// (1002 protocol error, 1007 not UTF-8, 1009 too large), not with the TCP connection alone;
/// and the server goes on serving other WebSockets.
#[tokio::test]
async fn websocket_frame_abuse_closes_with_the_rfc_6455_code() {
    let addr = start(ServerOptions { max_ws_message_bytes: 1024, ..ServerOptions::default() }).await;
    // A frame header declaring 2^62 bytes: refused on its header, nothing allocated.
    let mut huge = vec![0x81, 0x80 | 127];
    huge.extend_from_slice(&(1u64 << 62).to_be_bytes());
    huge.extend_from_slice(&[1, 2, 3, 4]);
    let fragments = [ws_frame(0x01, &[b'x'; 700], true), ws_frame(0x80, &[b'x'; 700], true)].concat();
    let cases: Vec<(&str, Vec<u8>, CloseCode)> = vec![
        ("a reserved opcode", ws_frame(0x83, b"", true), CloseCode::Protocol),
        ("an unmasked client frame", ws_frame(0x81, b"{}", false), CloseCode::Protocol),
        ("a reserved bit set", ws_frame(0xC1, b"{}", true), CloseCode::Protocol),
        ("a ping over 125 bytes", ws_frame(0x89, &[0; 126], true), CloseCode::Protocol),
        ("a fragmented ping", ws_frame(0x09, b"x", true), CloseCode::Protocol),
        ("a continuation with nothing to continue", ws_frame(0x80, b"x", true), CloseCode::Protocol),
        ("text that is not UTF-8", ws_frame(0x81, &[0xff, 0xfe], true), CloseCode::Invalid),
        ("a frame over the limit", ws_frame(0x81, &[b'x'; 2048], true), CloseCode::Size),
        ("a frame declaring 2^62 bytes", huge, CloseCode::Size),
        ("fragments over the limit together", fragments, CloseCode::Size),
    ];
    for (what, bytes, code) in cases {
        let mut socket = ws_connect(addr).await;
        socket.get_mut().write_all(&bytes).await.unwrap();
        assert_eq!(ws_close_code(&mut socket).await, Some(code), "{what}");
    }
    let mut socket = ws_connect(addr).await;
    socket.send(Message::text(initialize(1))).await.unwrap();
    assert_eq!(ws_read(&mut socket).await["id"], 1);
}

/// A client that pings and never reads: the server answers each ping with a pong, which it
/// cannot send while the client reads nothing. A server that queued every pong grew without
/// bound (3M pings: 62 → 430 MB); this one keeps at most its write buffer's worth
/// (`max_ws_message_bytes` and 32 KiB) and replaces the waiting pong by the next beyond it.
/// Measured by what arrives once the client reads: all the pongs fit in that buffer and the
/// kernel's (a few MiB here, the client's receive buffer kept small), so most of 200,000
/// pings (26 MB of pongs) go unanswered, and the connection still serves.
#[tokio::test]
async fn pings_never_read_do_not_queue_their_pongs_without_bound() {
    let addr = start(ServerOptions { max_ws_message_bytes: 1024, ..ServerOptions::default() }).await;
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(addr).await.unwrap();
    let url = format!("ws://{addr}/acp").into_client_request().unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(url, tcp).await.expect("upgrade");
    const PINGS: usize = 200_000;
    let ping = ws_frame(0x89, &[b'p'; 125], true);
    let batch: Vec<u8> = ping.iter().copied().cycle().take(ping.len() * 1000).collect();
    let raw = ws.get_mut();
    for _ in 0..PINGS / 1000 {
        tokio::time::timeout(WAIT, raw.write_all(&batch)).await.expect("the server keeps reading").unwrap();
    }
    // Then an `initialize`, whose answer comes after every pong the server kept.
    raw.write_all(&ws_frame(0x81, initialize(1).as_bytes(), true)).await.unwrap();
    let mut pongs = 0;
    let answer = loop {
        match tokio::time::timeout(WAIT, ws.next()).await.expect("the answer in time") {
            Some(Ok(Message::Pong(_))) => pongs += 1,
            Some(Ok(Message::Text(text))) => break serde_json::from_str::<Value>(&text).unwrap(),
            Some(Ok(_)) => {}
            other => panic!("the socket ended: {other:?}"),
        }
    };
    assert_eq!(answer["id"], 1);
    assert!(pongs > 0, "no pong at all");
    assert!(pongs < PINGS / 2, "{pongs} of {PINGS} pings answered: the server queued every pong");
}

/// The agent's output waits for the room the pongs took, but not for ever: a client that
/// reads nothing for `output_stall` has its WebSocket closed (the agent's sends do not wait on
/// it any longer), as an SSE reader's connection is.
#[tokio::test]
async fn a_websocket_whose_client_never_reads_is_closed_after_the_output_stall() {
    let options = ServerOptions {
        max_ws_message_bytes: 1024,
        output_stall: Duration::from_millis(300),
        ..ServerOptions::default()
    };
    let addr = start(options).await;
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(addr).await.unwrap();
    let url = format!("ws://{addr}/acp").into_client_request().unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(url, tcp).await.expect("upgrade");
    let ping = ws_frame(0x89, &[b'p'; 125], true);
    let batch: Vec<u8> = ping.iter().copied().cycle().take(ping.len() * 1000).collect();
    for _ in 0..100 {
        ws.get_mut().write_all(&batch).await.unwrap();
    }
    ws.get_mut().write_all(&ws_frame(0x81, initialize(1).as_bytes(), true)).await.unwrap();
    // Nothing read for well over the stall; then the socket has ended, unanswered.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ended = async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(text))) => panic!("answered after the stall: {text}"),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            }
        }
    };
    tokio::time::timeout(WAIT, ended).await.expect("the WebSocket was closed");
    serves(addr, &[]).await;
}
