//! The HTTP server (`acp_rpc::http::server`, feature `http-server`) as a remote client
//! sees it: the RFD's message flows over Streamable HTTP (HTTP/1.1 and h2c) and WebSocket,
//! and a table of bad requests, each with its status and the connection still serving.
//! Attacks on the server (malformed HTTP, smuggling, floods, slow and silent sockets,
//! WebSocket frame abuse, the limits) are in `hostile_http.rs`.
//! The client side here is written by hand on hyper, so that every header is the test's.
#![cfg(all(feature = "http-server", feature = "http-client"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use acp_rpc::http::server::{HttpServer, ServerOptions};
use acp_rpc::{ErrorObject, Handler, IncomingNotification, IncomingRequest, RawValue};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const WAIT: Duration = Duration::from_secs(10);

// ---- the agent ------------------------------------------------------------------------------

/// A raw agent: `session/new` numbers sessions (process-wide, so they outlive connections);
/// a prompt "hello" streams an update, asks permission and ends; "wait" waits for its
/// cancellation; "burst PAYLOAD" streams PAYLOAD back, then [`BURST`] small updates;
/// `session/load` replays one update.
/// The small updates that follow a "burst" prompt's payload.
const BURST: usize = 2_000;

#[derive(Default)]
struct TestAgent {
    sessions: Arc<AtomicU64>,
}

fn raw(value: Value) -> Box<RawValue> {
    RawValue::from_string(value.to_string()).expect("json")
}

impl Handler for TestAgent {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let params: Value = req.parse_params()?;
        match &*req.method {
            "initialize" => {
                Ok(raw(json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true}, "authMethods": []})))
            }
            "session/new" => {
                let n = self.sessions.fetch_add(1, Ordering::Relaxed);
                Ok(raw(json!({"sessionId": format!("s{n}")})))
            }
            "session/load" => {
                let session = params["sessionId"].clone();
                let update = json!({"sessionId": session, "update": {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "replayed"}}});
                req.peer
                    .notify("session/update", &update)
                    .await
                    .map_err(|e| ErrorObject::internal_error(e.to_string()))?;
                Ok(raw(json!({})))
            }
            "session/prompt" => {
                let session = params["sessionId"].clone();
                let text = params["prompt"][0]["text"].as_str().unwrap_or_default().to_owned();
                if text == "wait" {
                    req.cancel.cancelled().await;
                    return Ok(raw(json!({"stopReason": "cancelled"})));
                }
                if text == "slow" {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    return Ok(raw(json!({"stopReason": "end_turn"})));
                }
                if let Some(payload) = text.strip_prefix("burst ") {
                    // The payload back in one update, then many small updates at once.
                    let mut texts = vec![payload.to_owned()];
                    texts.extend((0..BURST).map(|i| i.to_string()));
                    for text in texts {
                        let update = json!({"sessionId": session, "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}});
                        req.peer
                            .notify("session/update", &update)
                            .await
                            .map_err(|e| ErrorObject::internal_error(e.to_string()))?;
                    }
                    return Ok(raw(json!({"stopReason": "end_turn"})));
                }
                let update = json!({"sessionId": session, "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}});
                req.peer
                    .notify("session/update", &update)
                    .await
                    .map_err(|e| ErrorObject::internal_error(e.to_string()))?;
                let ask = json!({"sessionId": session, "toolCall": {"toolCallId": "t1"}, "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]});
                let answer: Value = req
                    .peer
                    .request("session/request_permission", &ask)
                    .await
                    .map_err(|e| ErrorObject::internal_error(e.to_string()))?;
                let stop = if answer["outcome"]["optionId"] == "allow" { "end_turn" } else { "refusal" };
                Ok(raw(json!({"stopReason": stop})))
            }
            "session/close" => Ok(raw(json!({}))),
            other => Err(ErrorObject::method_not_found(other)),
        }
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        // Holds up the agent's notifications, so that its input backs up.
        if notification.method == "_block" {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

async fn start(options: ServerOptions) -> String {
    start_server(HttpServer::new(TestAgent::default).options(options)).await
}

async fn start_server(server: HttpServer) -> String {
    let bound = server.bind("127.0.0.1:0").await.expect("bind");
    let url = bound.url();
    tokio::spawn(bound.run());
    url
}

// ---- a hand-written client ------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Version {
    Http1,
    H2c,
}

struct Http {
    url: hyper::Uri,
    version: Version,
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

impl Http {
    fn new(url: &str, version: Version) -> Self {
        Http { url: url.parse().expect("url"), version }
    }

    async fn send_raw(&self, req: Request<Full<Bytes>>) -> hyper::Response<Incoming> {
        let authority = self.url.authority().expect("authority").as_str().to_owned();
        let tcp = TcpStream::connect(authority).await.expect("connect");
        let io = TokioIo::new(tcp);
        match self.version {
            Version::Http1 => {
                let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.expect("handshake");
                tokio::spawn(connection);
                sender.send_request(req).await.expect("send")
            }
            Version::H2c => {
                let (mut sender, connection) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.expect("handshake");
                tokio::spawn(connection);
                sender.send_request(req).await.expect("send")
            }
        }
    }

    fn request(&self, method: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Request<Full<Bytes>> {
        let mut builder = Request::builder().method(method).uri(self.url.clone());
        if self.version == Version::Http1 {
            builder = builder.header("host", self.url.authority().expect("authority").as_str());
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Full::new(body.into())).expect("request")
    }

    async fn send(&self, method: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Answer {
        let response = tokio::time::timeout(WAIT, self.send_raw(self.request(method, headers, body)))
            .await
            .expect("an answer in time");
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.expect("body").to_bytes();
        Answer { status, headers, body }
    }

    async fn post(&self, headers: &[(&str, &str)], message: Value) -> Answer {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        self.send("POST", &all, message.to_string()).await
    }

    async fn stream(&self, headers: &[(&str, &str)]) -> (StatusCode, Events) {
        let mut all = vec![("accept", "text/event-stream")];
        all.extend_from_slice(headers);
        let response = tokio::time::timeout(WAIT, self.send_raw(self.request("GET", &all, Bytes::new())))
            .await
            .expect("stream headers in time");
        (response.status(), Events { body: response.into_body(), buf: Vec::new(), comments: 0 })
    }
}

/// An SSE stream's `data:` events, parsed as JSON.
struct Events {
    body: Incoming,
    buf: Vec<u8>,
    /// Keep-alive comments skipped so far.
    comments: usize,
}

impl Events {
    /// The next event; `None` when the stream ended. Keep-alive comments are skipped.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buf.drain(..end + 2).collect();
                let text = String::from_utf8(event).expect("utf-8");
                let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
                if data.is_empty() {
                    self.comments += 1;
                    continue;
                }
                return Some(serde_json::from_str(&data.join("\n")).expect("json event"));
            }
            let frame = tokio::time::timeout(WAIT, self.body.frame()).await.expect("an event in time")?;
            if let Ok(data) = frame.expect("frame").into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }
}

fn rpc(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn initialize(id: u64) -> Value {
    rpc(id, "initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}))
}

fn prompt(id: u64, session: &str, text: &str) -> Value {
    rpc(id, "session/prompt", json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}))
}

/// Initializes a connection; returns its id.
async fn connect(http: &Http) -> String {
    let answer = http.post(&[], initialize(1)).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert_eq!(answer.json()["result"]["protocolVersion"], 1);
    answer.headers["acp-connection-id"].to_str().expect("id").to_owned()
}

// ---- the RFD's flows ------------------------------------------------------------------------

async fn streamable_flow(version: Version) {
    let url = start(ServerOptions::default()).await;
    let http = Http::new(&url, version);
    let conn = connect(&http).await;
    let c = [("acp-connection-id", conn.as_str())];

    let (status, mut conn_events) = http.stream(&c).await;
    assert_eq!(status, StatusCode::OK);

    // Session creation: 202, the answer on the connection stream.
    let answer = http.post(&c, rpc(2, "session/new", json!({"cwd": "/", "mcpServers": []}))).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED);
    assert!(answer.body.is_empty());
    let created = conn_events.next().await.expect("session/new answer");
    assert_eq!(created["id"], 2);
    let session = created["result"]["sessionId"].as_str().expect("session id").to_owned();
    let cs = [("acp-connection-id", conn.as_str()), ("acp-session-id", session.as_str())];

    // Prompt with an update and a permission request, all on the session stream.
    let (status, mut session_events) = http.stream(&cs).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(http.post(&cs, prompt(3, &session, "hello")).await.status, StatusCode::ACCEPTED);
    let update = session_events.next().await.expect("update");
    assert_eq!(update["method"], "session/update");
    let ask = session_events.next().await.expect("permission request");
    assert_eq!(ask["method"], "session/request_permission");
    let reply =
        json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}});
    assert_eq!(http.post(&cs, reply).await.status, StatusCode::ACCEPTED);
    let done = session_events.next().await.expect("prompt answer");
    assert_eq!((done["id"].clone(), done["result"]["stopReason"].clone()), (json!(3), json!("end_turn")));

    // Cancel: the notification is accepted, the prompt's answer is `cancelled`.
    assert_eq!(http.post(&cs, prompt(4, &session, "wait")).await.status, StatusCode::ACCEPTED);
    let cancel = json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}});
    assert_eq!(http.post(&cs, cancel).await.status, StatusCode::ACCEPTED);
    let cancelled = session_events.next().await.expect("cancelled answer");
    assert_eq!((cancelled["id"].clone(), cancelled["result"]["stopReason"].clone()), (json!(4), json!("cancelled")));

    // Resume on a new connection: the session stream opens before `session/load`; the replay
    // arrives there and the load's answer on the new connection stream.
    let conn2 = connect(&http).await;
    assert_ne!(conn2, conn);
    let c2 = [("acp-connection-id", conn2.as_str())];
    let c2s = [("acp-connection-id", conn2.as_str()), ("acp-session-id", session.as_str())];
    let (_, mut conn2_events) = http.stream(&c2).await;
    let (status, mut resumed_events) = http.stream(&c2s).await;
    assert_eq!(status, StatusCode::OK);
    let load = rpc(2, "session/load", json!({"sessionId": session, "cwd": "/", "mcpServers": []}));
    assert_eq!(http.post(&c2s, load).await.status, StatusCode::ACCEPTED);
    let replay = resumed_events.next().await.expect("replay");
    assert_eq!(replay["params"]["update"]["content"]["text"], "replayed");
    let loaded = conn2_events.next().await.expect("load answer");
    assert_eq!(loaded["id"], 2);

    // DELETE ends the first connection: its streams end and its id is gone.
    assert_eq!(http.send("DELETE", &c, "").await.status, StatusCode::ACCEPTED);
    assert!(conn_events.next().await.is_none(), "the connection stream ends");
    assert!(session_events.next().await.is_none(), "the session stream ends");
    assert_eq!(
        http.post(&c, rpc(9, "session/new", json!({"cwd": "/", "mcpServers": []}))).await.status,
        StatusCode::NOT_FOUND
    );
    // The other connection is unaffected.
    assert_eq!(http.post(&c2s, prompt(3, &session, "hello")).await.status, StatusCode::ACCEPTED);
    assert_eq!(resumed_events.next().await.expect("update")["method"], "session/update");
}

#[tokio::test]
async fn streamable_http_flows_over_http1() {
    streamable_flow(Version::Http1).await;
}

#[tokio::test]
async fn streamable_http_flows_over_h2c() {
    streamable_flow(Version::H2c).await;
}

#[tokio::test]
async fn messages_before_a_stream_opens_wait_for_it() {
    let url = start(ServerOptions::default()).await;
    let http = Http::new(&url, Version::Http1);
    let conn = connect(&http).await;
    let c = [("acp-connection-id", conn.as_str())];
    // session/new before any GET: the answer waits in the connection stream's outbox.
    assert_eq!(
        http.post(&c, rpc(2, "session/new", json!({"cwd": "/", "mcpServers": []}))).await.status,
        StatusCode::ACCEPTED
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (_, mut events) = http.stream(&c).await;
    assert_eq!(events.next().await.expect("held answer")["id"], 2);
    // A reader that goes away leaves the outbox in place for the next one.
    drop(events);
    assert_eq!(
        http.post(&c, rpc(3, "session/new", json!({"cwd": "/", "mcpServers": []}))).await.status,
        StatusCode::ACCEPTED
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, mut events) = http.stream(&c).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(events.next().await.expect("held answer")["id"], 3);
}

/// A new connection with its stream open and a new session: the connection's id, its stream,
/// and the session's id.
async fn connection_with_session(http: &Http) -> (String, Events, String) {
    let conn = connect(http).await;
    let c = [("acp-connection-id", conn.as_str())];
    let (_, mut conn_events) = http.stream(&c).await;
    let new_session = rpc(2, "session/new", json!({"cwd": "/", "mcpServers": []}));
    assert_eq!(http.post(&c, new_session).await.status, StatusCode::ACCEPTED);
    let session = conn_events.next().await.expect("answer")["result"]["sessionId"].as_str().unwrap().to_owned();
    (conn, conn_events, session)
}

/// Opens a WebSocket to the server at `url` (its `http://` URL); the socket and the 101.
async fn ws_connect(
    url: &str,
) -> (tokio_tungstenite::WebSocketStream<TcpStream>, tokio_tungstenite::tungstenite::handshake::client::Response) {
    let ws_url = url.replacen("http://", "ws://", 1);
    let authority = ws_url.trim_start_matches("ws://").split('/').next().expect("authority").to_owned();
    let tcp = TcpStream::connect(authority).await.expect("connect");
    tokio_tungstenite::client_async(ws_url.into_client_request().expect("request"), tcp).await.expect("upgrade")
}

/// A client that writes everything before it reads anything, while the agent writes as much
/// back: the server reads and writes the socket side by side, so the client's writes finish
/// (the agent reads its input while its output waits) and then everything arrives. A server
/// that awaited its sends while it read nothing stopped for good once both directions'
/// buffers were full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_client_that_writes_everything_before_reading_gets_every_answer() {
    const PROMPTS: u64 = 8;
    let url = start(ServerOptions::default()).await;
    let (socket, _) = ws_connect(&url).await;
    let (mut sink, mut stream) = socket.split();
    let send = |v: Value| Message::text(v.to_string());
    sink.send(send(initialize(1))).await.expect("send");
    sink.send(send(rpc(2, "session/new", json!({"cwd": "/", "mcpServers": []})))).await.expect("send");
    let mut session = None;
    while session.is_none() {
        let Some(Ok(Message::Text(text))) = stream.next().await else { continue };
        let message: Value = serde_json::from_str(&text).expect("json");
        session = message["result"]["sessionId"].as_str().map(str::to_owned);
    }
    let session = session.expect("a session");
    // 2 MB each way per prompt: the prompt, and its payload streamed back.
    let payload = "p".repeat(2 << 20);
    let writes = async {
        for id in 0..PROMPTS {
            sink.send(send(prompt(10 + id, &session, &format!("burst {payload}")))).await.expect("send");
        }
    };
    tokio::time::timeout(Duration::from_secs(30), writes).await.expect("the server keeps reading while it writes");
    let mut answered = 0;
    let reads = async {
        while answered < PROMPTS {
            let Some(Ok(Message::Text(text))) = stream.next().await else { continue };
            let message: Value = serde_json::from_str(&text).expect("json");
            if message["result"]["stopReason"] == "end_turn" {
                answered += 1;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), reads).await.expect("every prompt is answered");
}

#[tokio::test]
async fn websocket_flow() {
    let url = start(ServerOptions::default()).await;
    let (mut socket, response) = ws_connect(&url).await;
    assert!(response.headers().contains_key("acp-connection-id"));

    async fn next(
        socket: &mut (impl StreamExt<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin),
    ) -> Value {
        loop {
            let message = tokio::time::timeout(WAIT, socket.next())
                .await
                .expect("a frame in time")
                .expect("open")
                .expect("frame");
            if let Message::Text(text) = message {
                return serde_json::from_str(&text).expect("json");
            }
        }
    }
    let send = |v: Value| Message::text(v.to_string());

    socket.send(send(initialize(1))).await.expect("send");
    assert_eq!(next(&mut socket).await["result"]["protocolVersion"], 1);
    // Binary frames are ignored.
    socket.send(Message::Binary(Bytes::from_static(b"\x00\x01"))).await.expect("send");
    socket.send(send(rpc(2, "session/new", json!({"cwd": "/", "mcpServers": []})))).await.expect("send");
    let session = next(&mut socket).await["result"]["sessionId"].as_str().expect("id").to_owned();

    socket.send(send(prompt(3, &session, "hello"))).await.expect("send");
    assert_eq!(next(&mut socket).await["method"], "session/update");
    let ask = next(&mut socket).await;
    assert_eq!(ask["method"], "session/request_permission");
    let reply =
        json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}});
    socket.send(send(reply)).await.expect("send");
    assert_eq!(next(&mut socket).await["result"]["stopReason"], "end_turn");

    socket.send(send(prompt(4, &session, "wait"))).await.expect("send");
    socket
        .send(send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})))
        .await
        .expect("send");
    assert_eq!(next(&mut socket).await["result"]["stopReason"], "cancelled");

    // A malformed frame is answered by the runtime, and the socket keeps serving.
    socket.send(Message::text("{nope")).await.expect("send");
    assert_eq!(next(&mut socket).await["error"]["code"], -32700);
    socket.send(send(rpc(5, "session/new", json!({"cwd": "/", "mcpServers": []})))).await.expect("send");
    assert_eq!(next(&mut socket).await["id"], 5);
    socket.close(None).await.expect("close");
}

// ---- large and many messages ----------------------------------------------------------------

/// The next text frame of a WebSocket, as JSON.
async fn read(socket: &mut tokio_tungstenite::WebSocketStream<TcpStream>) -> Value {
    loop {
        let frame = tokio::time::timeout(WAIT, socket.next()).await.expect("a frame in time");
        if let Message::Text(text) = frame.expect("open").expect("frame") {
            return serde_json::from_str(&text).expect("json");
        }
    }
}

/// A prompt's text of about 1 MiB: far larger than the buffers a connection starts with (the
/// line reader's, the WebSocket's read buffer, one SSE chunk), with multi-byte UTF-8
/// throughout, so a line split or joined in the wrong place would not go unseen.
fn large_payload() -> String {
    (0..300_000usize).map(|i| ['a', 'é', '✓', '𝄞', ' ', 'Z', '"', '\\'][(i * 7 + i / 1021) % 8]).collect()
}

/// Checks a "burst" turn's updates: the payload byte for byte, then 0..BURST in order.
fn check_burst(texts: &[String], payload: &str) {
    assert_eq!(texts.len(), BURST + 1, "every update arrives");
    assert!(texts[0] == payload, "the large update differs ({} bytes, expected {})", texts[0].len(), payload.len());
    for (i, text) in texts[1..].iter().enumerate() {
        assert_eq!(text, &i.to_string(), "the small updates in order");
    }
}

async fn large_and_many_messages_over_sse(version: Version) {
    let url = start(ServerOptions::default()).await;
    let http = Http::new(&url, version);
    let (conn, _conn_events, session) = connection_with_session(&http).await;
    let cs = [("acp-connection-id", conn.as_str()), ("acp-session-id", session.as_str())];
    let (_, mut events) = http.stream(&cs).await;
    let payload = large_payload();
    for turn in 0..2 {
        let id = 3 + turn;
        let text = format!("burst {payload}");
        assert_eq!(http.post(&cs, prompt(id, &session, &text)).await.status, StatusCode::ACCEPTED);
        let mut texts = Vec::new();
        loop {
            let event = events.next().await.expect("an event");
            if event["id"] == id {
                assert_eq!(event["result"]["stopReason"], "end_turn");
                break;
            }
            texts.push(event["params"]["update"]["content"]["text"].as_str().expect("text").to_owned());
        }
        check_burst(&texts, &payload);
    }
}

#[tokio::test]
async fn large_and_many_messages_arrive_whole_and_in_order_over_sse_http1() {
    large_and_many_messages_over_sse(Version::Http1).await;
}

#[tokio::test]
async fn large_and_many_messages_arrive_whole_and_in_order_over_sse_h2c() {
    large_and_many_messages_over_sse(Version::H2c).await;
}

#[tokio::test]
async fn large_and_many_messages_arrive_whole_and_in_order_over_websocket() {
    let url = start(ServerOptions::default()).await;
    let (mut socket, _) = ws_connect(&url).await;
    let send = |v: Value| Message::text(v.to_string());
    socket.send(send(initialize(1))).await.expect("send");
    assert_eq!(read(&mut socket).await["result"]["protocolVersion"], 1);
    socket.send(send(rpc(2, "session/new", json!({"cwd": "/", "mcpServers": []})))).await.expect("send");
    let session = read(&mut socket).await["result"]["sessionId"].as_str().expect("id").to_owned();
    let payload = large_payload();
    for turn in 0..2 {
        let id = 3 + turn;
        socket.send(send(prompt(id, &session, &format!("burst {payload}")))).await.expect("send");
        let mut texts = Vec::new();
        loop {
            let message = read(&mut socket).await;
            if message["id"] == id {
                assert_eq!(message["result"]["stopReason"], "end_turn");
                break;
            }
            texts.push(message["params"]["update"]["content"]["text"].as_str().expect("text").to_owned());
        }
        check_burst(&texts, &payload);
    }
    socket.close(None).await.expect("close");
}

// ---- hostile input --------------------------------------------------------------------------

#[tokio::test]
async fn hostile_http_inputs_get_their_status_and_the_connection_keeps_serving() {
    let options = ServerOptions {
        max_body_bytes: 4096,
        max_provisional_sessions: 2,
        max_sessions_per_connection: 4,
        keep_alive: Duration::from_millis(200),
        allowed_origins: vec!["https://allowed.example".to_owned()],
        ..ServerOptions::default()
    };
    let url = start(options).await;
    let http = Http::new(&url, Version::Http1);
    let conn = connect(&http).await;
    let c = ("acp-connection-id", conn.as_str());
    let json_ct = ("content-type", "application/json");
    let new_session = rpc(2, "session/new", json!({"cwd": "/", "mcpServers": []})).to_string();
    let (_, mut conn_events) = http.stream(&[c]).await;
    assert_eq!(http.post(&[c], serde_json::from_str(&new_session).unwrap()).await.status, StatusCode::ACCEPTED);
    let session = conn_events.next().await.expect("session")["result"]["sessionId"].as_str().unwrap().to_owned();
    let s = ("acp-session-id", session.as_str());
    // A prompt kept in flight, for the duplicate-id case.
    assert_eq!(http.post(&[c, s], prompt(50, &session, "wait")).await.status, StatusCode::ACCEPTED);
    let long_id = "x".repeat(300);
    let big = format!(r#"{{"jsonrpc":"2.0","method":"_x","params":{{"pad":"{}"}}}}"#, "a".repeat(5000));

    struct Case<'a> {
        what: &'a str,
        method: &'a str,
        headers: Vec<(&'a str, &'a str)>,
        body: String,
        status: StatusCode,
        rpc_code: Option<i64>,
    }
    fn case<'a>(
        what: &'a str,
        method: &'a str,
        headers: Vec<(&'a str, &'a str)>,
        body: &str,
        status: StatusCode,
        rpc_code: Option<i64>,
    ) -> Case<'a> {
        Case { what, method, headers, body: body.to_owned(), status, rpc_code }
    }
    let session_prompt = prompt(60, &session, "hello").to_string();
    let other_session_prompt = prompt(61, "other", "hello").to_string();
    let notification_init = json!({"jsonrpc": "2.0", "method": "initialize", "params": {}}).to_string();
    let cases = vec![
        case("POST without Content-Type", "POST", vec![c], &new_session, StatusCode::UNSUPPORTED_MEDIA_TYPE, None),
        case(
            "POST text/plain",
            "POST",
            vec![c, ("content-type", "text/plain")],
            &new_session,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
        ),
        case("POST malformed JSON", "POST", vec![c, json_ct], "{\"jsonrpc\":", StatusCode::BAD_REQUEST, Some(-32700)),
        case("POST empty body", "POST", vec![c, json_ct], "", StatusCode::BAD_REQUEST, Some(-32700)),
        case("POST empty batch", "POST", vec![c, json_ct], "[]", StatusCode::NOT_IMPLEMENTED, Some(-32600)),
        case(
            "POST batch of one",
            "POST",
            vec![c, json_ct],
            &format!("[{new_session}]"),
            StatusCode::NOT_IMPLEMENTED,
            Some(-32600),
        ),
        case("POST a JSON string", "POST", vec![c, json_ct], "\"hello\"", StatusCode::BAD_REQUEST, Some(-32600)),
        case(
            "POST an object that is no message",
            "POST",
            vec![c, json_ct],
            "{\"jsonrpc\":\"2.0\"}",
            StatusCode::BAD_REQUEST,
            Some(-32600),
        ),
        case("POST over the body limit", "POST", vec![c, json_ct], &big, StatusCode::PAYLOAD_TOO_LARGE, None),
        case("POST without Acp-Connection-Id", "POST", vec![json_ct], &new_session, StatusCode::BAD_REQUEST, None),
        case(
            "POST with an unknown Acp-Connection-Id",
            "POST",
            vec![json_ct, ("acp-connection-id", "nope")],
            &new_session,
            StatusCode::NOT_FOUND,
            None,
        ),
        case(
            "POST with an over-long Acp-Connection-Id",
            "POST",
            vec![json_ct, ("acp-connection-id", &long_id)],
            &new_session,
            StatusCode::BAD_REQUEST,
            None,
        ),
        case(
            "POST initialize on an existing connection",
            "POST",
            vec![c, json_ct],
            &initialize(7).to_string(),
            StatusCode::BAD_REQUEST,
            None,
        ),
        case(
            "POST initialize as a notification",
            "POST",
            vec![json_ct],
            &notification_init,
            StatusCode::BAD_REQUEST,
            None,
        ),
        case(
            "POST a session's prompt without Acp-Session-Id",
            "POST",
            vec![c, json_ct],
            &session_prompt,
            StatusCode::BAD_REQUEST,
            None,
        ),
        case(
            "POST with Acp-Session-Id that disagrees with params",
            "POST",
            vec![c, s, json_ct],
            &other_session_prompt,
            StatusCode::BAD_REQUEST,
            None,
        ),
        case(
            "POST a request id already in flight",
            "POST",
            vec![c, s, json_ct],
            &prompt(50, &session, "hello").to_string(),
            StatusCode::CONFLICT,
            None,
        ),
        case("GET without Accept", "GET", vec![c], "", StatusCode::NOT_ACCEPTABLE, None),
        case(
            "GET with Accept: application/json",
            "GET",
            vec![c, ("accept", "application/json")],
            "",
            StatusCode::NOT_ACCEPTABLE,
            None,
        ),
        case(
            "GET without Acp-Connection-Id",
            "GET",
            vec![("accept", "text/event-stream")],
            "",
            StatusCode::BAD_REQUEST,
            None,
        ),
        case(
            "GET with an unknown Acp-Connection-Id",
            "GET",
            vec![("accept", "text/event-stream"), ("acp-connection-id", "nope")],
            "",
            StatusCode::NOT_FOUND,
            None,
        ),
        case(
            "GET a second reader of the connection stream",
            "GET",
            vec![c, ("accept", "text/event-stream")],
            "",
            StatusCode::CONFLICT,
            None,
        ),
        case("DELETE without Acp-Connection-Id", "DELETE", vec![], "", StatusCode::BAD_REQUEST, None),
        case(
            "DELETE an unknown connection",
            "DELETE",
            vec![("acp-connection-id", "nope")],
            "",
            StatusCode::NOT_FOUND,
            None,
        ),
        case("PUT", "PUT", vec![c], "", StatusCode::METHOD_NOT_ALLOWED, None),
        case("PATCH", "PATCH", vec![c], "", StatusCode::METHOD_NOT_ALLOWED, None),
        case(
            "an Origin that is not allowed",
            "POST",
            vec![c, json_ct, ("origin", "https://evil.example")],
            &new_session,
            StatusCode::FORBIDDEN,
            None,
        ),
        case(
            "a WebSocket upgrade with the wrong version",
            "GET",
            vec![
                ("upgrade", "websocket"),
                ("connection", "upgrade"),
                ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("sec-websocket-version", "8"),
            ],
            "",
            StatusCode::UPGRADE_REQUIRED,
            None,
        ),
        case(
            "a WebSocket upgrade without a key",
            "GET",
            vec![("upgrade", "websocket"), ("connection", "upgrade"), ("sec-websocket-version", "13")],
            "",
            StatusCode::BAD_REQUEST,
            None,
        ),
    ];
    assert!(cases.len() >= 25);
    for case in &cases {
        let headers: Vec<(&str, &str)> = case.headers.clone();
        let answer = http.send(case.method, &headers, case.body.clone()).await;
        assert_eq!(answer.status, case.status, "{}: {:?}", case.what, answer.body);
        if let Some(code) = case.rpc_code {
            assert_eq!(answer.json()["error"]["code"], code, "{}", case.what);
            assert_eq!(answer.json()["id"], Value::Null, "{}", case.what);
        }
    }

    // Another path; an allowed Origin gets CORS headers; a preflight.
    let other = Http::new(&url.replace("/acp", "/other"), Version::Http1);
    assert_eq!(other.send("GET", &[], "").await.status, StatusCode::NOT_FOUND);
    let allowed = http.send("OPTIONS", &[("origin", "https://allowed.example")], "").await;
    assert_eq!(allowed.status, StatusCode::NO_CONTENT);
    assert_eq!(allowed.headers["access-control-allow-origin"], "https://allowed.example");

    // Provisional session streams are bounded, then 404.
    let mut held = Vec::new();
    for n in 0..2 {
        let name = format!("later-{n}");
        let (status, events) = http.stream(&[c, ("acp-session-id", &name)]).await;
        assert_eq!(status, StatusCode::OK, "provisional stream {n}");
        held.push(events);
    }
    assert_eq!(http.stream(&[c, ("acp-session-id", "later-2")]).await.0, StatusCode::NOT_FOUND);
    // One closed before anything named its session gives its place back (once the server
    // notices the close, at its next keep-alive write at the latest).
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (status, events) = http.stream(&[c, ("acp-session-id", "later-2")]).await;
        if status == StatusCode::OK {
            held.push(events);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the closed provisional stream was never forgotten");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The connection still serves: a new session (the fourth stream of four), then the limit.
    assert_eq!(
        http.post(&[c], rpc(70, "session/new", json!({"cwd": "/", "mcpServers": []}))).await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(conn_events.next().await.expect("answer")["id"], 70);
    assert_eq!(
        http.post(&[c], rpc(71, "session/new", json!({"cwd": "/", "mcpServers": []}))).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn bearer_tokens_and_connection_limits() {
    let url = start_server(
        HttpServer::new(TestAgent::default)
            .options(ServerOptions { max_connections: 1, ..ServerOptions::default() })
            .bearer_token("s3cret"),
    )
    .await;
    let http = Http::new(&url, Version::Http1);
    let json_ct = ("content-type", "application/json");
    let init = initialize(1).to_string();
    let missing = http.send("POST", &[json_ct], init.clone()).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    assert_eq!(missing.headers["www-authenticate"], "Bearer");
    assert_eq!(
        http.send("POST", &[json_ct, ("authorization", "Bearer wrong")], init.clone()).await.status,
        StatusCode::FORBIDDEN
    );
    let auth = ("authorization", "Bearer s3cret");
    let first = http.send("POST", &[json_ct, auth], init.clone()).await;
    assert_eq!(first.status, StatusCode::OK);
    let conn = first.headers["acp-connection-id"].to_str().unwrap().to_owned();
    // Used (a POST after initialize), it keeps its place.
    let note = json!({"jsonrpc": "2.0", "method": "_x/note", "params": {}}).to_string();
    let posted = http.send("POST", &[json_ct, auth, ("acp-connection-id", &conn)], note).await;
    assert_eq!(posted.status, StatusCode::ACCEPTED);
    // One connection at most: the second initialize is refused until the first is deleted.
    assert_eq!(http.send("POST", &[json_ct, auth], init.clone()).await.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(http.send("DELETE", &[auth, ("acp-connection-id", &conn)], "").await.status, StatusCode::ACCEPTED);
    assert_eq!(http.send("POST", &[json_ct, auth], init).await.status, StatusCode::OK);
}

#[tokio::test]
async fn each_principal_reaches_only_its_own_connections_and_the_scheme_is_read_in_any_case() {
    let url =
        start_server(HttpServer::new(TestAgent::default).bearer_tokens([("token-a", "alice"), ("token-b", "bob")]))
            .await;
    let http = Http::new(&url, Version::Http1);
    let json_ct = ("content-type", "application/json");
    // RFC 7235: the scheme is case-insensitive.
    let alice = ("authorization", "bearer token-a");
    let first = http.send("POST", &[json_ct, alice], initialize(1).to_string()).await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    let conn = first.headers["acp-connection-id"].to_str().unwrap().to_owned();
    for other in ["Basic dG9rZW4tYQ==", "Bearer", "Bearertoken-a"] {
        let refused = http.send("POST", &[json_ct, ("authorization", other)], initialize(1).to_string()).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{other}");
    }

    // Bob, with a token of his own, gets the answers of an unknown connection on Alice's.
    let bob = ("authorization", "BEARER token-b");
    let c = ("acp-connection-id", conn.as_str());
    let new_session = rpc(2, "session/new", json!({"cwd": "/", "mcpServers": []})).to_string();
    assert_eq!(http.send("POST", &[json_ct, bob, c], new_session.clone()).await.status, StatusCode::NOT_FOUND);
    let (status, _) = http.stream(&[bob, c]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(http.send("DELETE", &[bob, c], "").await.status, StatusCode::NOT_FOUND);
    // Alice's connection is untouched and serves her.
    assert_eq!(http.send("POST", &[json_ct, alice, c], new_session).await.status, StatusCode::ACCEPTED);
    assert_eq!(http.send("DELETE", &[alice, c], "").await.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn idle_connections_are_closed() {
    let url = start(ServerOptions { idle_timeout: Duration::from_millis(200), ..ServerOptions::default() }).await;
    let http = Http::new(&url, Version::Http1);
    let conn = connect(&http).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let answer =
        http.post(&[("acp-connection-id", &conn)], rpc(2, "session/new", json!({"cwd": "/", "mcpServers": []}))).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn idle_streams_get_keep_alive_comments() {
    let url = start(ServerOptions { keep_alive: Duration::from_millis(50), ..ServerOptions::default() }).await;
    let http = Http::new(&url, Version::Http1);
    let conn = connect(&http).await;
    let (status, mut events) = http.stream(&[("acp-connection-id", &conn)]).await;
    assert_eq!(status, StatusCode::OK);
    let mut seen = Vec::new();
    while !seen.windows(3).any(|w| w == b":\n\n") {
        let frame = tokio::time::timeout(WAIT, events.body.frame()).await.expect("a comment in time").expect("open");
        seen.extend_from_slice(&frame.expect("frame").into_data().expect("data"));
    }
    // The stream still carries messages after its comments.
    let c = [("acp-connection-id", conn.as_str())];
    assert_eq!(
        http.post(&c, rpc(2, "session/new", json!({"cwd": "/", "mcpServers": []}))).await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(events.next().await.expect("answer")["id"], 2);
}

#[tokio::test]
async fn a_busy_stream_gets_no_keep_alive_comments() {
    // Events every 200 ms on a stream whose keep-alive is 1.5 s: the timer, re-armed from the
    // last event, never fires in between.
    let url = start(ServerOptions { keep_alive: Duration::from_millis(1500), ..ServerOptions::default() }).await;
    let http = Http::new(&url, Version::Http1);
    let conn = connect(&http).await;
    let c = [("acp-connection-id", conn.as_str())];
    let (_, mut events) = http.stream(&c).await;
    for id in 2..22 {
        let new = rpc(id, "session/new", json!({"cwd": "/", "mcpServers": []}));
        assert_eq!(http.post(&c, new).await.status, StatusCode::ACCEPTED);
        assert_eq!(events.next().await.expect("answer")["id"], id);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(events.comments, 0, "keep-alive comments between busy events");
    // Then, idle: the comment comes.
    let mut seen = std::mem::take(&mut events.buf);
    while !seen.windows(3).any(|w| w == b":\n\n") {
        let frame = tokio::time::timeout(WAIT, events.body.frame()).await.expect("a comment in time").expect("open");
        seen.extend_from_slice(&frame.expect("frame").into_data().expect("data"));
    }
}

#[tokio::test]
async fn closing_a_session_ends_its_stream() {
    let url = start(ServerOptions::default()).await;
    let http = Http::new(&url, Version::Http1);
    let (conn, mut conn_events, session) = connection_with_session(&http).await;
    let c = [("acp-connection-id", conn.as_str())];
    let cs = [("acp-connection-id", conn.as_str()), ("acp-session-id", session.as_str())];
    let (_, mut session_events) = http.stream(&cs).await;
    assert_eq!(
        http.post(&cs, rpc(3, "session/close", json!({"sessionId": session}))).await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(conn_events.next().await.expect("close answer")["id"], 3);
    assert!(session_events.next().await.is_none(), "the closed session's stream ends");
    // The connection goes on.
    assert_eq!(
        http.post(&c, rpc(4, "session/new", json!({"cwd": "/", "mcpServers": []}))).await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(conn_events.next().await.expect("answer")["id"], 4);
}

/// Found by the `http_server` fuzz target (fuzz/regressions/http_server/keep-alive-fires-without-end,
/// FUZZING.md): on a paused tokio clock (`start_paused`, as tests and the fuzz targets use), an
/// SSE stream's keep-alive deadline was made from std's clock, which lags the paused one once
/// it has jumped ahead: the timer fired again at once, and an idle stream poured out comments,
/// spinning, until real time caught up. Every timer of the server now runs on tokio's clock.
/// Driven through the server's in-memory seam, so no socket races the jumping clock.
#[tokio::test(start_paused = true)]
async fn an_idle_stream_gets_one_keep_alive_per_interval_on_a_paused_clock() {
    let server = HttpServer::new(TestAgent::default);
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(server.serve_io(server_io));
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(client_io)).await.expect("handshake");
    tokio::spawn(connection);
    let init = Request::post("/acp")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(initialize(1).to_string())))
        .expect("request");
    let response = sender.send_request(init).await.expect("initialize answered");
    assert_eq!(response.status(), StatusCode::OK);
    let conn = response.headers()["acp-connection-id"].to_str().expect("id").to_owned();
    response.into_body().collect().await.expect("body");
    let get = Request::get("/acp")
        .header("accept", "text/event-stream")
        .header("acp-connection-id", &conn)
        .body(Full::new(Bytes::new()))
        .expect("request");
    let mut events = sender.send_request(get).await.expect("stream opened").into_body();

    // 50 s of the paused clock: comments at 15, 30 and 45 s (the default interval), no more.
    let started = std::time::Instant::now();
    let window = tokio::time::sleep(Duration::from_secs(50));
    tokio::pin!(window);
    let mut seen = Vec::new();
    loop {
        tokio::select! {
            frame = events.frame() => seen.extend_from_slice(&frame.expect("open").expect("frame").into_data().expect("data")),
            () = &mut window => break,
        }
        assert!(seen.len() < 1024, "an idle stream pours out {} bytes", seen.len());
    }
    assert_eq!(seen, b":\n\n:\n\n:\n\n");
    assert!(started.elapsed() < WAIT, "the paused clock was followed in real time");
}

/// The runtime writes an answer's id in its own form (`"\u0078"` as `"x"`, `-0` as `0`, an
/// id that is no JSON-RPC id as `null`). The server matched answers to requests by the id's
/// text as the client wrote it: `initialize` with such an id waited for its timeout (504), and
/// any other request's route was never cleared, so its id was refused 409 afterwards and the
/// table grew with every such request.
#[tokio::test]
async fn requests_whose_ids_the_runtime_respells_are_answered_and_forgotten() {
    let url = start(ServerOptions { initialize_timeout: Duration::from_secs(5), ..ServerOptions::default() }).await;
    let http = Http::new(&url, Version::Http1);
    let init = r#"{"jsonrpc":"2.0","id":"\u0061","method":"initialize","params":{"protocolVersion":1}}"#;
    let answer = http.send("POST", &[("content-type", "application/json")], init).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert_eq!(answer.json()["id"], "a");

    let conn = connect(&http).await;
    let c = [("acp-connection-id", conn.as_str()), ("content-type", "application/json")];
    let (_, mut events) = http.stream(&c[..1]).await;
    for id in [r#""\u0078""#, "-0", "true", "{}", "2.50", "100000000000000000000"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"_nope","params":{{}}}}"#);
        for attempt in ["first", "again after its answer"] {
            let posted = http.send("POST", &c, body.clone()).await;
            assert_eq!(posted.status, StatusCode::ACCEPTED, "id {id}, {attempt}: {:?}", posted.body);
            let answer = events.next().await.expect("an answer");
            assert!(answer["error"].is_object(), "id {id}: {answer}");
        }
    }
}

/// A session's request answered after the session was closed: its stream is gone, and the
/// answer was dropped, leaving the caller waiting for ever. It goes to the connection stream.
#[tokio::test]
async fn an_answer_that_comes_after_its_session_closed_goes_to_the_connection_stream() {
    let url = start(ServerOptions::default()).await;
    let http = Http::new(&url, Version::Http1);
    let (conn, mut conn_events, session) = connection_with_session(&http).await;
    let cs = [("acp-connection-id", conn.as_str()), ("acp-session-id", session.as_str())];
    let (_, mut session_events) = http.stream(&cs).await;
    assert_eq!(http.post(&cs, prompt(5, &session, "slow")).await.status, StatusCode::ACCEPTED);
    assert_eq!(
        http.post(&cs, rpc(6, "session/close", json!({"sessionId": session}))).await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(conn_events.next().await.expect("the close's answer")["id"], 6);
    assert!(session_events.next().await.is_none(), "the closed session's stream ends");
    let late = conn_events.next().await.expect("the prompt's answer");
    assert_eq!((late["id"].clone(), late["result"]["stopReason"].clone()), (json!(5), json!("end_turn")));
}

/// The WebSocket loop wrote the client's messages to the agent itself, and read none of the
/// agent's output while a write waited: an agent whose reader was waiting for room to answer
/// (here, malformed messages while prompts stream their updates) and a client reading
/// everything stopped each other for ever. The agent's input now has a writer of its own.
#[tokio::test]
async fn a_websocket_keeps_flowing_while_the_agent_is_slow_to_read() {
    let url = start(ServerOptions::default()).await;
    let (mut socket, _) = ws_connect(&url).await;
    socket.send(Message::text(initialize(1).to_string())).await.expect("send");
    read(&mut socket).await;
    socket.send(Message::text(rpc(2, "session/new", json!({"cwd": "/", "mcpServers": []})).to_string())).await.unwrap();
    let session = read(&mut socket).await["result"]["sessionId"].as_str().unwrap().to_owned();
    let (mut to_server, mut from_server) = socket.split();
    const PROMPTS: u64 = 10;
    const MALFORMED: u64 = 200;
    let reader = tokio::spawn(async move {
        let (mut parse_errors, mut turns) = (0, 0);
        while let Some(Ok(message)) = from_server.next().await {
            let Message::Text(text) = message else { continue };
            let message: Value = serde_json::from_str(&text).expect("json");
            parse_errors += u64::from(message["error"]["code"] == -32700);
            turns += u64::from(message["result"]["stopReason"] == "end_turn");
            if (parse_errors, turns) == (MALFORMED, PROMPTS) {
                break;
            }
        }
        (parse_errors, turns)
    });
    let _writer = tokio::spawn(async move {
        for n in 0..PROMPTS {
            to_server.send(Message::text(prompt(10 + n, &session, "burst x").to_string())).await.unwrap();
        }
        let malformed = "x".repeat(200 * 1024);
        for _ in 0..MALFORMED {
            to_server.send(Message::text(malformed.clone())).await.unwrap();
        }
        to_server
    });
    let counts = tokio::time::timeout(Duration::from_secs(60), reader).await.expect("the connection kept serving");
    assert_eq!(counts.unwrap(), (MALFORMED, PROMPTS));
}

/// A POST whose client went away while its message was being written to a busy agent left
/// half a line in the agent's input; the next message was glued to it and lost (answered
/// -32700 with id `null`). The write now completes on its own.
#[tokio::test]
async fn a_post_abandoned_mid_write_does_not_corrupt_the_next_message() {
    let url = start(ServerOptions::default()).await;
    let http = Http::new(&url, Version::Http1);
    let conn = connect(&http).await;
    let c = [("acp-connection-id", conn.as_str())];
    let (_, mut events) = http.stream(&c).await;
    // Back the agent's input up: a notification that holds it 2 s, then enough to fill its queue.
    let notification = |method: &str| json!({"jsonrpc": "2.0", "method": method, "params": {}});
    assert_eq!(http.post(&c, notification("_block")).await.status, StatusCode::ACCEPTED);
    for _ in 0..1100 {
        assert_eq!(http.post(&c, notification("_fill")).await.status, StatusCode::ACCEPTED);
    }
    // 1 MiB that cannot be written now; its client gives up (HTTP/2 resets the stream).
    let big = json!({"jsonrpc": "2.0", "method": "_big", "params": {"pad": "z".repeat(1 << 20)}}).to_string();
    let h2 = Http::new(&url, Version::H2c);
    let request = h2.request("POST", &[("content-type", "application/json"), c[0]], big);
    let abandoned = tokio::time::timeout(Duration::from_millis(500), h2.send_raw(request)).await;
    assert!(abandoned.is_err(), "the big POST was answered at once: the agent was not busy");
    assert_eq!(http.post(&c, rpc(77, "_nope", json!({}))).await.status, StatusCode::ACCEPTED);
    let answer = events.next().await.expect("an answer");
    assert_eq!(answer["id"], 77, "{answer}");
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
}
