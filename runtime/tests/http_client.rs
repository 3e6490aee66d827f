//! The remote client (`acp_rpc::http::client`) against a scripted server, for what the
//! official peers cannot be made to do on demand: refused POSTs (a 404 about a session among
//! them), streams that end (after every event too), oversized or malformed events, idle
//! streams, h2c and HTTP/2 over TLS with few streams allowed, a refused or closed WebSocket,
//! and bad URLs. (The happy
//! paths against the official TypeScript server are in `tests/tests/interop_http.rs`.)
#![cfg(all(feature = "http-client", feature = "http-server"))]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use acp_rpc::http::client::{ConnectError, Profile, Remote, RemoteAgent};
use acp_rpc::{Error, ErrorObject, Handler, IncomingNotification, IncomingRequest, Peer, RawValue, codes};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message;

/// Upper bound for anything that should happen soon; never used as synchronisation.
const LIMIT: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut).await.unwrap_or_else(|_| panic!("{what} timed out"))
}

fn raw(v: Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(&v).unwrap()
}

// ---- the scripted server --------------------------------------------------------------------

/// One request the server saw.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    session: Option<String>,
    /// The JSON-RPC message of a POST.
    message: Value,
}

impl Seen {
    /// `POST _x` / `GET s1` / `DELETE` (sessions in brackets for POSTs).
    fn line(&self) -> String {
        let session = self.session.as_deref().map(|s| format!(" [{s}]")).unwrap_or_default();
        match self.method.as_str() {
            "POST" => {
                let what = self.message["method"]
                    .as_str()
                    .map_or_else(|| format!("answer {}", self.message["id"]), str::to_owned);
                format!("POST {what}{session}")
            }
            other => format!("{other}{session}"),
        }
    }
}

enum Event {
    Data(String),
    Raw(Vec<u8>),
    Close,
}

#[derive(Default)]
struct State {
    seen: Mutex<Vec<Seen>>,
    changed: Notify,
    /// The open streams, by session (`None`: the connection's).
    streams: Mutex<HashMap<Option<String>, mpsc::UnboundedSender<Event>>>,
    /// A status (and body) to answer POSTs of a JSON-RPC method with.
    refuse: Mutex<HashMap<String, (u16, String)>>,
    /// A status to answer GETs for a session with.
    refuse_get: Mutex<HashMap<String, u16>>,
    /// How long to wait before answering POSTs of a JSON-RPC method, in milliseconds.
    slow: Mutex<HashMap<String, u64>>,
    /// Sessions whose every GET is answered with this one event, then ended.
    one_event_gets: Mutex<HashMap<String, Value>>,
}

/// A Streamable HTTP server following the RFD, with knobs: `initialize` answered 200 with
/// `Acp-Connection-Id: c1`; `_echo` requests answered on the stream of their session (header),
/// else the connection's; everything else 202 and recorded.
struct Mock {
    addr: SocketAddr,
    state: Arc<State>,
}

impl Mock {
    async fn start() -> Mock {
        Mock::start_with(None).await
    }

    /// With at most `max_streams` streams at once on an HTTP/2 connection (hyper's default,
    /// 200, when `None`).
    async fn start_with(max_streams: Option<u32>) -> Mock {
        Mock::listen(move |state, tcp| serve_connection(state, TokioIo::new(tcp), max_streams)).await
    }

    /// Listens on a free local port and serves each accepted connection on a task of its own
    /// with `serve`, all sharing one [`State`].
    async fn listen<F, Fut>(serve: F) -> Mock
    where
        F: Fn(Arc<State>, tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let shared = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                tokio::spawn(serve(shared.clone(), tcp));
            }
        });
        Mock { addr, state }
    }

    /// Over TLS (the fixture certificate for 127.0.0.1), whose ALPN offers `h2` alone, with at
    /// most `max_streams` streams at once: `https://127.0.0.1:port/acp`.
    #[cfg(feature = "http-tls")]
    async fn start_tls(max_streams: u32) -> Mock {
        use acp_rpc::http::client::rustls;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let cert = CertificateDer::from_pem_slice(include_bytes!("fixtures/tls-localhost.crt")).unwrap();
        let key = PrivateKeyDer::from_pem_slice(include_bytes!("fixtures/tls-localhost.key")).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        Mock::listen(move |state, tcp| {
            let acceptor = acceptor.clone();
            async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    serve_connection(state, TokioIo::new(tls), Some(max_streams)).await;
                }
            }
        })
        .await
    }

    fn url(&self) -> String {
        format!("http://{}/acp", self.addr)
    }

    fn lines(&self) -> Vec<String> {
        self.state.seen.lock().unwrap().iter().map(Seen::line).collect()
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// Waits until `count` requests satisfy `matches`.
    async fn wait_for(&self, what: &str, count: usize, matches: impl Fn(&str) -> bool) {
        within(what, async {
            loop {
                let changed = self.state.changed.notified();
                if self.lines().iter().filter(|l| matches(l)).count() >= count {
                    return;
                }
                changed.await;
            }
        })
        .await;
    }

    fn send(&self, session: Option<&str>, event: Event) {
        let streams = self.state.streams.lock().unwrap();
        let stream = streams.get(&session.map(str::to_owned)).expect("no such stream open");
        let _ = stream.send(event);
    }

    fn push(&self, session: Option<&str>, message: Value) {
        self.send(session, Event::Data(message.to_string()));
    }

    fn close(&self, session: Option<&str>) {
        self.send(session, Event::Close);
    }

    fn refuse(&self, method: &str, status: u16, body: &str) {
        self.state.refuse.lock().unwrap().insert(method.to_owned(), (status, body.to_owned()));
    }
}

/// Serves one TCP (or TLS) connection: HTTP/1.1 or HTTP/2, at most `max_streams` streams at
/// once over HTTP/2 (hyper's default, 200, when `None`).
async fn serve_connection<I>(state: Arc<State>, io: TokioIo<I>, max_streams: Option<u32>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| serve(state.clone(), req));
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(max_streams);
    let _ = builder.serve_connection(io, service).await;
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn answer(status: u16, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed());
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    response
}

/// An SSE body fed by a channel.
struct SseBody(mpsc::UnboundedReceiver<Event>);

impl hyper::body::Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.0.poll_recv(cx) {
            Poll::Ready(Some(Event::Data(json))) => {
                Poll::Ready(Some(Ok(Frame::data(format!("data: {json}\n\n").into()))))
            }
            Poll::Ready(Some(Event::Raw(bytes))) => Poll::Ready(Some(Ok(Frame::data(bytes.into())))),
            Poll::Ready(Some(Event::Close) | None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

async fn serve(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let session = header("acp-session-id");
    let method = req.method().as_str().to_owned();
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    state.seen.lock().unwrap().push(Seen {
        method: method.clone(),
        session: session.clone(),
        message: message.clone(),
    });
    state.changed.notify_waiters();
    let response = match method.as_str() {
        "POST" if message["method"] == "initialize" => {
            let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": {"protocolVersion": 1}});
            let mut response = answer(200, reply.to_string());
            response.headers_mut().insert("acp-connection-id", "c1".parse().unwrap());
            response.headers_mut().insert("content-type", "application/json".parse().unwrap());
            response
        }
        "POST" => {
            let delay = message["method"].as_str().and_then(|m| state.slow.lock().unwrap().get(m).copied());
            if let Some(ms) = delay {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let refused = message["method"].as_str().and_then(|m| state.refuse.lock().unwrap().get(m).cloned());
            if let Some((status, body)) = refused {
                return Ok(answer(status, body));
            }
            if message["method"] == "_echo" {
                let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": message["params"]});
                if let Some(stream) = state.streams.lock().unwrap().get(&session) {
                    let _ = stream.send(Event::Data(reply.to_string()));
                }
            }
            answer(202, "")
        }
        "GET" => {
            if let Some(status) = session.as_ref().and_then(|s| state.refuse_get.lock().unwrap().get(s).copied()) {
                return Ok(answer(status, "no such session"));
            }
            let (tx, rx) = mpsc::unbounded_channel();
            if let Some(event) = session.as_ref().and_then(|s| state.one_event_gets.lock().unwrap().get(s).cloned()) {
                let _ = tx.send(Event::Data(event.to_string()));
                let _ = tx.send(Event::Close);
            }
            state.streams.lock().unwrap().insert(session, tx);
            let mut response = Response::new(SseBody(rx).boxed());
            response.headers_mut().insert("content-type", "text/event-stream".parse().unwrap());
            response
        }
        "DELETE" => answer(202, ""),
        _ => answer(405, ""),
    };
    Ok(response)
}

/// A raw handler that answers the agent's `_ask` with `{"asked": true}`.
struct Answers;

impl Handler for Answers {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        match &*req.method {
            "_ask" => Ok(raw(json!({"asked": true}))),
            other => Err(ErrorObject::method_not_found(other)),
        }
    }
}

/// Closes `remote` and checks that the last request the server saw was the connection's
/// DELETE.
async fn closed_with_delete(remote: RemoteAgent, mock: &Mock) {
    within("close", remote.close()).await.unwrap();
    assert_eq!(mock.lines().last().unwrap(), "DELETE");
}

/// Connects with the raw handler and initializes.
async fn connected(remote: Remote) -> (Peer, RemoteAgent) {
    let (peer, remote) = remote.serve(Answers).await.unwrap();
    let init = within("initialize", peer.request_raw("initialize", Some(&raw(json!({"protocolVersion": 1}))))).await;
    assert_eq!(init.unwrap().get(), r#"{"protocolVersion":1}"#);
    (peer, remote)
}

fn rpc_error(result: Result<Box<RawValue>, Error>) -> ErrorObject {
    match result {
        Err(Error::Rpc(e)) => e,
        other => panic!("expected an error answer, got {other:?}"),
    }
}

// ---- Streamable HTTP ------------------------------------------------------------------------

#[tokio::test]
async fn posts_go_one_at_a_time_in_order_with_the_session_streams_opened_first() {
    let mock = Mock::start().await;
    let (peer, remote) = connected(Remote::new(mock.url())).await;
    assert_eq!(remote.connection_id().as_deref(), Some("c1"));
    // A notification before a request reaches the server first; the session stream is opened
    // before the first message of the session.
    peer.notify_raw("_note", Some(&raw(json!({"sessionId": "s1"})))).await.unwrap();
    let echoed = within("_echo", peer.request_raw("_echo", Some(&raw(json!({"sessionId": "s1", "n": 1}))))).await;
    assert_eq!(echoed.unwrap().get(), r#"{"sessionId":"s1","n":1}"#);
    // Not in a session: answered on the connection stream.
    let echoed = within("_echo", peer.request_raw("_echo", Some(&raw(json!({"n": 2}))))).await;
    assert_eq!(echoed.unwrap().get(), r#"{"n":2}"#);
    assert_eq!(
        mock.lines(),
        ["POST initialize", "GET", "GET [s1]", "POST _note [s1]", "POST _echo [s1]", "POST _echo"]
    );
    closed_with_delete(remote, &mock).await;
}

#[tokio::test]
async fn answers_to_the_agents_session_requests_carry_the_session_header() {
    let mock = Mock::start().await;
    let (peer, _remote) = connected(Remote::new(mock.url())).await;
    // The answer to a request of ours naming a session opens its stream (as `session/new`'s).
    mock.push(None, json!({"jsonrpc": "2.0", "method": "_hello"}));
    let pending = tokio::spawn({
        let peer = peer.clone();
        async move { peer.request_raw("_new", None).await }
    });
    mock.wait_for("the POST", 1, |l| l == "POST _new").await;
    let id = mock.seen().into_iter().find(|s| s.message["method"] == "_new").unwrap().message["id"].clone();
    mock.push(None, json!({"jsonrpc": "2.0", "id": id, "result": {"sessionId": "s2"}}));
    assert!(within("_new", pending).await.unwrap().is_ok());
    mock.wait_for("the session GET", 1, |l| l == "GET [s2]").await;
    // A request on the session stream without a `sessionId`, one on the connection stream
    // with one, one on the connection stream without: the first two are the session's.
    mock.push(Some("s2"), json!({"jsonrpc": "2.0", "id": "a", "method": "_ask", "params": {}}));
    mock.push(None, json!({"jsonrpc": "2.0", "id": "b", "method": "_ask", "params": {"sessionId": "s2"}}));
    mock.push(None, json!({"jsonrpc": "2.0", "id": "c", "method": "_ask", "params": {}}));
    mock.wait_for("the answers", 3, |l| l.starts_with("POST answer")).await;
    let answers: Vec<String> = mock.lines().into_iter().filter(|l| l.starts_with("POST answer")).collect();
    assert_eq!(answers, [r#"POST answer "a" [s2]"#, r#"POST answer "b" [s2]"#, r#"POST answer "c""#]);
    let answer = mock.seen().into_iter().find(|s| s.message["id"] == "a").unwrap();
    assert_eq!(answer.message["result"], json!({"asked": true}));
}

#[tokio::test]
async fn a_refused_post_fails_its_request_with_the_status_and_body() {
    let mock = Mock::start().await;
    mock.refuse("_bad", 500, "boom");
    mock.refuse("_quiet", 400, "no");
    let (peer, remote) = connected(Remote::new(mock.url())).await;
    let error = rpc_error(within("_bad", peer.request_raw("_bad", None)).await);
    assert_eq!(error.code, codes::INTERNAL_ERROR);
    assert!(error.message.contains("500"), "{error:?}");
    assert_eq!(error.data, Some(json!({"status": 500, "body": "boom"})));
    // A refused notification is only logged; the connection goes on.
    peer.notify_raw("_quiet", None).await.unwrap();
    assert!(within("_echo", peer.request_raw("_echo", Some(&raw(json!([]))))).await.is_ok());
    assert!(!peer.is_closed() && remote.end_reason().is_none());
}

#[tokio::test]
async fn a_post_answered_404_ends_the_connection_without_a_delete() {
    let mock = Mock::start().await;
    mock.refuse("_gone", 404, "unknown connection");
    let (peer, remote) = connected(Remote::new(mock.url())).await;
    let error = rpc_error(within("_gone", peer.request_raw("_gone", None)).await);
    assert_eq!(error.data.unwrap()["status"], 404);
    within("the end", peer.closed()).await;
    assert!(remote.end_reason().unwrap().contains("404"), "{:?}", remote.end_reason());
    assert!(matches!(peer.request_raw("_echo", None).await, Err(Error::ConnectionClosed)));
    within("close", remote.close()).await.unwrap();
    assert!(!mock.lines().contains(&"DELETE".to_owned()), "{:?}", mock.lines());
}

#[tokio::test]
async fn the_connection_stream_ending_ends_the_connection_and_fails_pending_calls() {
    let mock = Mock::start().await;
    let (peer, remote) = connected(Remote::new(mock.url())).await;
    let pending = tokio::spawn({
        let peer = peer.clone();
        async move { peer.request_raw("_never", None).await }
    });
    mock.wait_for("the POST", 1, |l| l == "POST _never").await;
    mock.close(None);
    assert!(matches!(within("the pending call", pending).await.unwrap(), Err(Error::ConnectionClosed)));
    assert!(remote.end_reason().unwrap().contains("connection stream ended"), "{:?}", remote.end_reason());
    // The server is still told.
    within("close", remote.close()).await.unwrap();
    mock.wait_for("the DELETE", 1, |l| l == "DELETE").await;
}

#[tokio::test]
async fn a_session_stream_is_reopened_once_then_its_pending_requests_fail() {
    let mock = Mock::start().await;
    let (peer, _remote) = connected(Remote::new(mock.url())).await;
    let pending = tokio::spawn({
        let peer = peer.clone();
        async move { peer.request_raw("_never", Some(&raw(json!({"sessionId": "s1"})))).await }
    });
    mock.wait_for("the POST", 1, |l| l == "POST _never [s1]").await;
    mock.close(Some("s1"));
    mock.wait_for("the reopened stream", 2, |l| l == "GET [s1]").await;
    // Still pending: the answer may come on the new stream.
    assert!(!pending.is_finished());
    mock.close(Some("s1"));
    let error = rpc_error(within("the pending call", pending).await.unwrap());
    assert!(error.message.contains("session s1 is unreachable"), "{error:?}");
    assert_eq!(error.data.unwrap()["sessionId"], "s1");
    // The connection goes on, and the session's next message opens its stream again.
    let echoed = within("_echo", peer.request_raw("_echo", Some(&raw(json!({"sessionId": "s1"}))))).await;
    assert!(echoed.is_ok());
    assert_eq!(mock.lines().iter().filter(|l| *l == "GET [s1]").count(), 3);
}

/// What a session's stream carries after our `session/close` succeeded (the turn's last updates,
/// such as v2's idle `state_update`) still reaches the handler: the stream is read until the
/// server ends it, and is not opened again. The client used to drop the stream with the answer.
#[tokio::test]
async fn a_closed_sessions_stream_is_read_to_its_end_and_not_reopened() {
    struct Notes(mpsc::UnboundedSender<String>);
    impl Handler for Notes {
        async fn handle_notification(&self, n: IncomingNotification) {
            let _ = self.0.send(n.method.to_string());
        }
    }
    let mock = Mock::start().await;
    let (notes_tx, mut notes) = mpsc::unbounded_channel();
    let (peer, _remote) = Remote::new(mock.url()).serve(Notes(notes_tx)).await.unwrap();
    within("initialize", peer.request_raw("initialize", Some(&raw(json!({"protocolVersion": 1}))))).await.unwrap();
    let close = tokio::spawn({
        let peer = peer.clone();
        async move { peer.request_raw("session/close", Some(&raw(json!({"sessionId": "s1"})))).await }
    });
    mock.wait_for("the close", 1, |l| l == "POST session/close [s1]").await;
    let id = mock.seen().iter().find(|s| s.message["method"] == "session/close").unwrap().message["id"].clone();
    mock.push(Some("s1"), json!({"jsonrpc": "2.0", "id": id, "result": {}}));
    within("the close's answer", close).await.unwrap().unwrap();
    // Written after the answer was read, as an agent's last update of the session may be.
    mock.push(Some("s1"), json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1"}}));
    assert_eq!(within("the update after the close", notes.recv()).await.as_deref(), Some("session/update"));
    mock.close(Some("s1"));
    // The connection goes on (a round trip on its own stream), and s1's stream stays closed.
    within("_echo", peer.request_raw("_echo", None)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(mock.lines().iter().filter(|l| *l == "GET [s1]").count(), 1, "{:?}", mock.lines());
}

/// The server floods the connection with bad messages while one of our POSTs is slow, then refuses
/// it. The client reports the refusal (an error answer of its own) without waiting for room in
/// the connection's input: it used to wait there, while the connection waited for the client
/// to post its answers, and neither moved again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_refused_while_the_server_floods_the_connection_fails_its_call_and_the_rest_goes_on() {
    let mock = Mock::start().await;
    let (peer, _remote) = connected(Remote::new(mock.url())).await;
    mock.state.slow.lock().unwrap().insert("_x".to_owned(), 1000);
    mock.refuse("_x", 500, "busy");
    let call = tokio::spawn({
        let peer = peer.clone();
        async move { peer.request_raw("_x", Some(&raw(json!({})))).await }
    });
    mock.wait_for("the slow POST", 1, |l| l == "POST _x").await;
    const FLOOD: usize = 3000;
    let pad = "x".repeat(1000);
    // Lines that are no JSON-RPC messages: the connection's reader answers each itself, so
    // it stops reading once its output is full.
    for _ in 0..FLOOD {
        mock.push(None, json!({ "pad": pad }));
    }
    let error = rpc_error(within("the refused call", call).await.unwrap());
    assert!(error.message.contains("HTTP 500"), "{error:?}");
    mock.wait_for("every answer posted", FLOOD, |l| l.starts_with("POST answer")).await;
    assert!(!peer.is_closed());
}

/// Over HTTP/2 a server allows so many streams at once per TCP connection. The open session
/// streams used to take them all, and every later POST waited for a slot that never freed:
/// the streams have a connection of their own now.
#[tokio::test]
async fn over_http2_open_streams_leave_the_posts_room() {
    let mock = Mock::start_with(Some(3)).await;
    let (peer, _remote) = connected(Remote::new(mock.url()).http2_prior_knowledge(true)).await;
    // The connection's stream and two sessions' take all three.
    for session in ["s1", "s2"] {
        let params = raw(json!({"sessionId": session}));
        within("an echo on a session's stream", peer.request_raw("_echo", Some(&params))).await.unwrap();
    }
    assert_eq!(mock.lines().iter().filter(|l| l.starts_with("GET")).count(), 3, "{:?}", mock.lines());
    within("a POST beside three streams", peer.request_raw("_echo", None)).await.unwrap();
}

/// This crate's server allows as many streams on one HTTP/2 connection as the sessions it
/// allows a connection (and more), so a client that opens them all on one keeps going.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_our_server_serves_a_connection_with_hundreds_of_sessions() {
    #[derive(Default)]
    struct Sessions(std::sync::atomic::AtomicU64);
    impl Handler for Sessions {
        async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
            match &*req.method {
                "initialize" => Ok(raw(json!({"protocolVersion": 1}))),
                "session/new" => {
                    let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Ok(raw(json!({"sessionId": format!("s{n}")})))
                }
                other => Err(ErrorObject::method_not_found(other)),
            }
        }
    }
    let bound = acp_rpc::http::server::HttpServer::new(Sessions::default).bind("127.0.0.1:0").await.unwrap();
    let url = bound.url();
    tokio::spawn(bound.run());
    let (peer, _remote) = Remote::new(url).http2_prior_knowledge(true).serve(()).await.unwrap();
    within("initialize", peer.request_raw("initialize", Some(&raw(json!({"protocolVersion": 1}))))).await.unwrap();
    for n in 1..=250 {
        let params = raw(json!({"cwd": "/", "mcpServers": []}));
        let answer = tokio::time::timeout(LIMIT, peer.request_raw("session/new", Some(&params))).await;
        assert!(matches!(answer, Ok(Ok(_))), "session/new number {n}: {answer:?}");
    }
}

// ---- what a 404 ends, streams that keep ending, HTTP/2 over TLS -----------------------------

/// Calls `method` with `params` on a task of its own, and waits until the server has its POST.
async fn pending_call(
    mock: &Mock,
    peer: &Peer,
    method: &str,
    params: Value,
) -> tokio::task::JoinHandle<Result<Box<RawValue>, Error>> {
    let session = params["sessionId"].as_str().map(|s| format!(" [{s}]")).unwrap_or_default();
    let posted = format!("POST {method}{session}");
    let before = mock.lines().iter().filter(|l| **l == posted).count();
    let call = tokio::spawn({
        let (peer, method, params) = (peer.clone(), method.to_owned(), raw(params));
        async move { peer.request_raw(&method, Some(&params)).await }
    });
    mock.wait_for(&posted, before + 1, |l| l == posted).await;
    call
}

/// A POST about a session (it carries `Acp-Session-Id`) answered 404: a server that no longer
/// knows the session, as the RFD's 404 for an unknown `Acp-Session-Id` has it. It ends that
/// session (its pending requests fail, its stream is dropped), not the connection and its other
/// sessions; the session's next message opens its stream again. It used to end the connection.
#[tokio::test]
async fn a_sessions_post_answered_404_ends_that_session_only() {
    let mock = Mock::start().await;
    mock.refuse("_gone", 404, "unknown Acp-Session-Id");
    let (peer, remote) = connected(Remote::new(mock.url())).await;
    let s1_pending = pending_call(&mock, &peer, "_never", json!({"sessionId": "s1"})).await;
    let s2_pending = pending_call(&mock, &peer, "_never", json!({"sessionId": "s2"})).await;
    let error = rpc_error(within("_gone", peer.request_raw("_gone", Some(&raw(json!({"sessionId": "s1"}))))).await);
    assert_eq!(error.data.unwrap()["status"], 404);
    let error = rpc_error(within("s1's pending call", s1_pending).await.unwrap());
    assert!(error.message.contains("session s1"), "{error:?}");
    assert!(!peer.is_closed(), "the connection ended: {:?}", remote.end_reason());
    assert!(!s2_pending.is_finished());
    // The connection and s2 go on; s1's next message opens its stream again.
    for session in [None, Some("s2"), Some("s1")] {
        let params = raw(session.map_or_else(|| json!({}), |s| json!({"sessionId": s})));
        within("an echo", peer.request_raw("_echo", Some(&params))).await.unwrap();
    }
    assert_eq!(mock.lines().iter().filter(|l| *l == "GET [s1]").count(), 2, "{:?}", mock.lines());
    assert!(remote.end_reason().is_none());
    closed_with_delete(remote, &mock).await;
}

/// A session's stream reopened after it ended, answered 404 (the server forgot the session):
/// the session's pending requests fail, and the connection goes on. Passes before and after
/// the reopening learned to back off; it guards that a session's 404 stays the session's.
#[tokio::test]
async fn a_session_streams_reopening_answered_404_fails_that_session_only() {
    let mock = Mock::start().await;
    let (peer, remote) = connected(Remote::new(mock.url())).await;
    let pending = pending_call(&mock, &peer, "_never", json!({"sessionId": "s1"})).await;
    mock.state.refuse_get.lock().unwrap().insert("s1".to_owned(), 404);
    mock.close(Some("s1"));
    let error = rpc_error(within("the pending call", pending).await.unwrap());
    assert!(error.message.contains("session s1 is unreachable"), "{error:?}");
    assert_eq!(error.data.unwrap()["reason"].as_str().map(|r| r.contains("404")), Some(true));
    within("an echo", peer.request_raw("_echo", None)).await.unwrap();
    assert!(!peer.is_closed() && remote.end_reason().is_none(), "{:?}", remote.end_reason());
}

/// A server that ends a session's stream right after each event. Each stream brings something,
/// so the client keeps reopening it, but with a growing pause: it used to reopen at once, and
/// made hundreds of GETs a second. (Counts, not times: a slow machine makes fewer GETs.)
#[tokio::test]
async fn a_session_stream_that_ends_after_every_event_is_reopened_with_backoff() {
    let mock = Mock::start().await;
    mock.state.one_event_gets.lock().unwrap().insert("s1".to_owned(), update("s1", "tick"));
    let texts = Texts::default();
    let (peer, remote) = Remote::new(mock.url()).serve(texts.clone()).await.unwrap();
    within("initialize", peer.request_raw("initialize", Some(&raw(json!({"protocolVersion": 1}))))).await.unwrap();
    peer.notify_raw("_note", Some(&raw(json!({"sessionId": "s1"})))).await.unwrap();
    mock.wait_for("the reopened streams", 3, |l| l == "GET [s1]").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let gets = mock.lines().iter().filter(|l| *l == "GET [s1]").count();
    // Without a pause, thousands; with it, a handful (0, 0.25, 0.5, 1, 2 s apart...).
    assert!(gets <= 10, "{gets} GETs of s1's stream in about 2 s");
    // Nothing is lost meanwhile, and the connection goes on.
    assert!(texts.all().iter().filter(|(_, text)| text == "tick").count() >= 3);
    within("an echo", peer.request_raw("_echo", None)).await.unwrap();
    assert!(!peer.is_closed() && remote.end_reason().is_none(), "{:?}", remote.end_reason());
}

/// Over `https://` with HTTP/2 (ALPN), a server allows so many streams at once per TCP
/// connection, as over h2c. The open streams used to share the POSTs' connection there and take
/// every slot: the POST after them waited for ever.
#[cfg(feature = "http-tls")]
#[tokio::test]
async fn over_https_with_http2_open_streams_leave_the_posts_room() {
    use acp_rpc::http::client::rustls;
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mock = Mock::start_tls(3).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(include_bytes!("fixtures/tls-localhost.crt")).unwrap()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let url = format!("https://127.0.0.1:{}/acp", mock.addr.port());
    let (peer, _remote) = connected(Remote::new(url).tls_config(config)).await;
    // The connection's stream and two sessions' take all three.
    for session in ["s1", "s2"] {
        let params = raw(json!({"sessionId": session}));
        within("an echo on a session's stream", peer.request_raw("_echo", Some(&params))).await.unwrap();
    }
    assert_eq!(mock.lines().iter().filter(|l| l.starts_with("GET")).count(), 3, "{:?}", mock.lines());
    within("a POST beside three streams", peer.request_raw("_echo", None)).await.unwrap();
}

// ---- session streams around a close ---------------------------------------------------------

/// A handler that keeps the `text` of each notification's params, with its session.
#[derive(Clone, Default)]
struct Texts(Arc<Mutex<Vec<(String, String)>>>);

impl Handler for Texts {
    async fn handle_notification(&self, n: IncomingNotification) {
        let params: Value = n.params.map(|p| serde_json::from_str(p.get()).unwrap()).unwrap_or_default();
        let field = |name: &str| params[name].as_str().unwrap_or_default().to_owned();
        self.0.lock().unwrap().push((field("sessionId"), field("text")));
    }
}

impl Texts {
    fn all(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap().clone()
    }
}

impl Mock {
    /// The id of the last POSTed request of `method`.
    fn id_of(&self, method: &str) -> Value {
        let seen = self.seen();
        let post = seen.iter().rev().find(|s| s.method == "POST" && s.message["method"] == method);
        post.unwrap_or_else(|| panic!("no {method} was posted")).message["id"].clone()
    }
}

/// Calls `method` on `session` and answers it with `result` on the connection's stream, as this
/// crate's server answers a close.
async fn answered_on_the_connection_stream(mock: &Mock, peer: &Peer, method: &str, session: &str, result: Value) {
    let call = tokio::spawn({
        let (peer, method, params) = (peer.clone(), method.to_owned(), raw(json!({"sessionId": session})));
        async move { peer.request_raw(&method, Some(&params)).await }
    });
    let posted = format!("POST {method} [{session}]");
    let before = mock.lines().iter().filter(|l| **l == posted).count();
    mock.wait_for(&posted, before + 1, |l| l == posted).await;
    mock.push(None, json!({"jsonrpc": "2.0", "id": mock.id_of(method), "result": result}));
    within(method, call).await.unwrap().unwrap();
}

fn update(session: &str, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "text": text}})
}

/// A session loaded again right after its close: the stream still read after the close is its
/// stream again. It used to be dropped 5 s after the close all the same, and the session's
/// answers were lost.
#[tokio::test]
async fn a_session_loaded_again_right_after_its_close_keeps_its_stream() {
    let mock = Mock::start().await;
    let (peer, _remote) = connected(Remote::new(mock.url())).await;
    within("an echo", peer.request_raw("_echo", Some(&raw(json!({"sessionId": "s1"}))))).await.unwrap();
    answered_on_the_connection_stream(&mock, &peer, "session/close", "s1", json!({})).await;
    answered_on_the_connection_stream(&mock, &peer, "session/load", "s1", json!({})).await;
    tokio::time::sleep(Duration::from_millis(5500)).await;
    let params = raw(json!({"sessionId": "s1"}));
    within("an echo after the grace", peer.request_raw("_echo", Some(&params))).await.unwrap();
    assert_eq!(mock.lines().iter().filter(|l| *l == "GET [s1]").count(), 1, "{:?}", mock.lines());
}

/// A session stream reopened once (a hiccup, long before) is read after the session's close
/// like any other: the updates that follow the close's answer arrive. It used to be dropped
/// with the answer.
#[tokio::test]
async fn a_once_reopened_session_stream_still_brings_the_updates_after_its_close() {
    let mock = Mock::start().await;
    let texts = Texts::default();
    let (peer, _remote) = Remote::new(mock.url()).serve(texts.clone()).await.unwrap();
    within("initialize", peer.request_raw("initialize", Some(&raw(json!({"protocolVersion": 1}))))).await.unwrap();
    within("an echo", peer.request_raw("_echo", Some(&raw(json!({"sessionId": "s1"}))))).await.unwrap();
    mock.push(Some("s1"), update("s1", "before the hiccup"));
    mock.close(Some("s1"));
    mock.wait_for("the reopened stream", 2, |l| l == "GET [s1]").await;
    mock.push(Some("s1"), update("s1", "after the hiccup"));
    answered_on_the_connection_stream(&mock, &peer, "session/close", "s1", json!({})).await;
    mock.push(Some("s1"), update("s1", "last"));
    mock.close(Some("s1"));
    within("the last update", async {
        while !texts.all().iter().any(|(_, text)| text == "last") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The server ends a session's stream as it closes the session, and the end can arrive before
/// the close's answer (they travel on two streams). The stream is not reopened for the close,
/// whose success arrives as it was sent. The client used to reopen it, and a server that
/// answered that with 404 (it no longer knows the session) made the close fail.
#[tokio::test]
async fn a_close_whose_stream_ends_before_its_answer_succeeds() {
    let mock = Mock::start().await;
    let (peer, _remote) = connected(Remote::new(mock.url())).await;
    within("an echo", peer.request_raw("_echo", Some(&raw(json!({"sessionId": "s1"}))))).await.unwrap();
    let close = tokio::spawn({
        let peer = peer.clone();
        async move { peer.request_raw("session/close", Some(&raw(json!({"sessionId": "s1"})))).await }
    });
    mock.wait_for("the close", 1, |l| l == "POST session/close [s1]").await;
    mock.state.refuse_get.lock().unwrap().insert("s1".to_owned(), 404);
    mock.close(Some("s1"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    mock.push(None, json!({"jsonrpc": "2.0", "id": mock.id_of("session/close"), "result": {}}));
    let closed = within("the close", close).await.unwrap();
    assert!(closed.is_ok(), "{closed:?}");
    assert_eq!(mock.lines().iter().filter(|l| *l == "GET [s1]").count(), 1, "{:?}", mock.lines());
}

#[tokio::test]
async fn a_request_whose_session_stream_is_refused_fails_unsent() {
    let mock = Mock::start().await;
    mock.state.refuse_get.lock().unwrap().insert("s9".to_owned(), 404);
    let (peer, _remote) = connected(Remote::new(mock.url())).await;
    let error = rpc_error(within("_echo", peer.request_raw("_echo", Some(&raw(json!({"sessionId": "s9"}))))).await);
    assert_eq!(error.data, Some(json!({"status": 404, "body": "no such session"})));
    assert!(!mock.lines().iter().any(|l| l.starts_with("POST _echo")), "{:?}", mock.lines());
    assert!(!peer.is_closed());
}

#[tokio::test]
async fn messages_before_initialize_fail_and_initialize_may_follow() {
    let mock = Mock::start().await;
    let (peer, _remote) = Remote::new(mock.url()).serve(Answers).await.unwrap();
    let error = rpc_error(within("_echo", peer.request_raw("_echo", None)).await);
    assert!(error.message.contains("`initialize` must come first"), "{error:?}");
    peer.notify_raw("_note", None).await.unwrap();
    let init = within("initialize", peer.request_raw("initialize", Some(&raw(json!({"protocolVersion": 1}))))).await;
    assert!(init.is_ok());
    assert_eq!(mock.lines(), ["POST initialize", "GET"]);
}

#[tokio::test]
async fn bad_events_are_skipped_and_an_oversized_one_ends_its_stream() {
    let mock = Mock::start().await;
    let (peer, remote) = connected(Remote::new(mock.url()).max_message_bytes(2048)).await;
    // Not JSON objects: skipped (nothing is posted back about them); a multi-line event and
    // CRLF line ends are fine.
    mock.send(None, Event::Raw(b"data: not json\n\ndata: [1,2]\n\n: keep-alive\n\n".to_vec()));
    let pending = tokio::spawn({
        let peer = peer.clone();
        async move { peer.request_raw("_never", None).await }
    });
    mock.wait_for("the POST", 1, |l| l == "POST _never").await;
    let id = mock.seen().last().unwrap().message["id"].clone();
    mock.send(
        None,
        Event::Raw(format!("data: {{\"jsonrpc\":\"2.0\",\r\ndata: \"id\":{id},\"result\":7}}\r\n\r\n").into_bytes()),
    );
    assert_eq!(within("the answer", pending).await.unwrap().unwrap().get(), "7");
    assert_eq!(mock.lines().iter().filter(|l| l.starts_with("POST")).count(), 2, "{:?}", mock.lines());
    // Too large: the connection stream, and with it the connection, ends.
    mock.push(None, json!({"jsonrpc": "2.0", "method": "_big", "params": {"pad": "x".repeat(4096)}}));
    within("the end", peer.closed()).await;
    assert!(remote.end_reason().unwrap().contains("2048-byte limit"), "{:?}", remote.end_reason());
}

#[tokio::test]
async fn an_idle_stream_ends_the_connection_when_asked_to() {
    let mock = Mock::start().await;
    let (peer, remote) = connected(Remote::new(mock.url()).idle_timeout(Some(Duration::from_millis(300)))).await;
    // Keep-alives keep it open.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        mock.send(None, Event::Raw(b":\n\n".to_vec()));
    }
    assert!(!peer.is_closed());
    within("the end", peer.closed()).await;
    assert!(remote.end_reason().unwrap().contains("nothing received"), "{:?}", remote.end_reason());
}

#[tokio::test]
async fn headers_and_cookies_go_on_every_request() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let log = log.clone();
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let log = log.clone();
                async move {
                    let get = |n: &str| req.headers().get(n).and_then(|v| v.to_str().ok()).unwrap_or("-").to_owned();
                    log.lock().unwrap().push(format!(
                        "{} auth={} key={} cookie={} type={} accept={}",
                        req.method(),
                        get("authorization"),
                        get("x-api-key"),
                        get("cookie"),
                        get("content-type"),
                        get("accept")
                    ));
                    let is_get = req.method() == hyper::Method::GET;
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let mut response = if is_get {
                        let (_tx, rx) = mpsc::unbounded_channel();
                        std::mem::forget(_tx); // the stream stays open
                        let mut r = Response::new(SseBody(rx).boxed());
                        r.headers_mut().insert("content-type", "text/event-stream".parse().unwrap());
                        r
                    } else if message["method"] == "initialize" {
                        let mut r = answer(200, json!({"jsonrpc":"2.0","id":message["id"],"result":{}}).to_string());
                        r.headers_mut().insert("acp-connection-id", "c1".parse().unwrap());
                        r.headers_mut().append("set-cookie", "a=1; Path=/".parse().unwrap());
                        r.headers_mut().append("set-cookie", "b=2; HttpOnly".parse().unwrap());
                        r
                    } else {
                        let mut r = answer(202, "");
                        r.headers_mut().append("set-cookie", "b=; Max-Age=0".parse().unwrap());
                        r
                    };
                    response.headers_mut().append("x-ignored", "1".parse().unwrap());
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), service).await;
            });
        }
    });
    let remote = Remote::new(format!("http://{addr}/acp")).bearer_token("t0ken").header("x-api-key", "k");
    let (peer, remote) = remote.serve(Answers).await.unwrap();
    peer.request_raw("initialize", Some(&raw(json!({})))).await.unwrap();
    peer.notify_raw("_note", None).await.unwrap();
    peer.notify_raw("_note", None).await.unwrap();
    within("close", remote.close()).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            "POST auth=Bearer t0ken key=k cookie=- type=application/json accept=-",
            "GET auth=Bearer t0ken key=k cookie=a=1; b=2 type=- accept=text/event-stream",
            "POST auth=Bearer t0ken key=k cookie=a=1; b=2 type=application/json accept=-",
            "POST auth=Bearer t0ken key=k cookie=a=1 type=application/json accept=-",
            "DELETE auth=Bearer t0ken key=k cookie=a=1 type=- accept=-",
        ]
    );
}

#[tokio::test]
async fn h2c_is_spoken_when_asked_for() {
    let mock = Mock::start().await;
    let (peer, remote) = connected(Remote::new(mock.url()).http2_prior_knowledge(true)).await;
    let echoed = within("_echo", peer.request_raw("_echo", Some(&raw(json!({"sessionId": "s1"}))))).await;
    assert!(echoed.is_ok());
    within("close", remote.close()).await.unwrap();
    assert_eq!(mock.lines(), ["POST initialize", "GET", "GET [s1]", "POST _echo [s1]", "DELETE"]);
}

// ---- WebSocket ------------------------------------------------------------------------------

/// A WebSocket server for one connection: the test gets the socket.
async fn ws_server() -> (SocketAddr, mpsc::Receiver<tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        #[allow(clippy::result_large_err)] // the shape of tungstenite's callback
        let callback = |_: &hyper::Request<()>, mut response: hyper::Response<()>| {
            response.headers_mut().insert("acp-connection-id", "w1".parse().unwrap());
            response.headers_mut().insert("set-cookie", "lb=x".parse().unwrap());
            Ok(response)
        };
        let socket = tokio_tungstenite::accept_hdr_async(tcp, callback).await.unwrap();
        let _ = tx.send(socket).await;
    });
    (addr, rx)
}

#[tokio::test]
async fn websocket_frames_carry_messages_and_a_close_ends_the_connection() {
    let (addr, mut sockets) = ws_server().await;
    let (peer, remote) = Remote::new(format!("ws://{addr}/acp")).serve(Answers).await.unwrap();
    assert_eq!(remote.profile(), Profile::WebSocket);
    assert_eq!(remote.connection_id().as_deref(), Some("w1"));
    assert_eq!(remote.cookies().get(&addr.to_string(), "lb").as_deref(), Some("x"));
    let mut socket = sockets.recv().await.unwrap();
    let call = tokio::spawn({
        let peer = peer.clone();
        async move { peer.request_raw("_echo", Some(&raw(json!({"n": 1})))).await }
    });
    let Some(Ok(Message::Text(sent))) = within("a frame", socket.next()).await else { panic!("no text frame") };
    let sent: Value = serde_json::from_str(sent.as_str()).unwrap();
    assert_eq!(sent["method"], "_echo");
    // Ignored: a binary frame, text that is no message. An array goes to the connection like a
    // line on stdio: a v1 connection answers a batch -32600.
    socket.send(Message::binary(b"{}".to_vec())).await.unwrap();
    socket.send(Message::text("\"text\"")).await.unwrap();
    socket.send(Message::text("[1]")).await.unwrap();
    let Some(Ok(Message::Text(refusal))) = within("the batch refusal", socket.next()).await else { panic!() };
    assert_eq!(serde_json::from_str::<Value>(refusal.as_str()).unwrap()["error"]["code"], -32600);
    socket.send(Message::text(json!({"jsonrpc":"2.0","id":sent["id"],"result":"ok"}).to_string())).await.unwrap();
    assert_eq!(within("the answer", call).await.unwrap().unwrap().get(), r#""ok""#);
    // The agent asks; we answer on the socket.
    socket.send(Message::text(json!({"jsonrpc":"2.0","id":5,"method":"_ask"}).to_string())).await.unwrap();
    let Some(Ok(Message::Text(answer))) = within("the answer frame", socket.next()).await else { panic!() };
    assert_eq!(serde_json::from_str::<Value>(answer.as_str()).unwrap()["result"], json!({"asked": true}));
    socket.close(None).await.unwrap();
    within("the end", peer.closed()).await;
    assert!(remote.end_reason().unwrap().contains("closed the WebSocket"), "{:?}", remote.end_reason());
}

#[tokio::test]
async fn a_refused_upgrade_is_a_connect_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = tokio::io::AsyncReadExt::read(&mut tcp, &mut buf).await;
        let refusal = "HTTP/1.1 401 Unauthorized\r\ncontent-length: 6\r\nconnection: close\r\n\r\nwho?\r\n";
        let _ = tokio::io::AsyncWriteExt::write_all(&mut tcp, refusal.as_bytes()).await;
    });
    let error = Remote::new(format!("ws://{addr}/acp")).serve(Answers).await.unwrap_err();
    assert!(matches!(&error, ConnectError::Refused { status: 401, body } if body.starts_with("who?")), "{error:?}");
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error_over_websocket_and_a_failed_initialize_over_http() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let error = Remote::new(format!("ws://{addr}/acp")).serve(Answers).await.unwrap_err();
    assert!(matches!(error, ConnectError::Io { .. }), "{error:?}");
    let (peer, _remote) = Remote::new(format!("http://{addr}/acp")).serve(Answers).await.unwrap();
    let error = rpc_error(within("initialize", peer.request_raw("initialize", Some(&raw(json!({}))))).await);
    assert!(error.message.contains("cannot reach the server"), "{error:?}");
}

// ---- URLs and options -----------------------------------------------------------------------

#[tokio::test]
async fn bad_urls_and_headers_are_refused_with_a_reason() {
    let refused = |url: &str| {
        let url = url.to_owned();
        async move { Remote::new(url).serve(()).await.unwrap_err() }
    };
    // (`https://` and `wss://`: the unit tests of `http::client` and tests/http_tls.rs.)
    let error = refused("ftp://example.com/acp").await;
    assert!(matches!(error, ConnectError::UnsupportedScheme { .. }), "{error:?}");
    assert!(error.to_string().contains("`wss://`"), "{error}");
    assert!(matches!(refused("127.0.0.1:8080/acp").await, ConnectError::InvalidUrl { .. }));
    assert!(matches!(refused("http:// bad").await, ConnectError::InvalidUrl { .. }));
    let error = Remote::new("http://127.0.0.1:1/acp").header("bad header", "x").serve(()).await.unwrap_err();
    assert!(matches!(error, ConnectError::InvalidHeader { .. }), "{error:?}");
    let error = Remote::new("http://127.0.0.1:1/acp").bearer_token("line\nbreak").serve(()).await.unwrap_err();
    assert!(matches!(error, ConnectError::InvalidHeader { .. }), "{error:?}");
}
