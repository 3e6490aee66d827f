//! The remote-transport client against servers that push it: a WebSocket flooded while its
//! connection must answer, a client that notifies back for each notification, large messages
//! both ways at once, sessions closed one after another, and answers to ids the client never
//! sent. Each was a hang or a leak before the client read and wrote the WebSocket side by side
//! and let only answers to its own requests open or end session streams.
#![cfg(all(feature = "http-client", feature = "http-server"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use acp_rpc::http::client::{Remote, RemoteAgent};
use acp_rpc::http::server::HttpServer;
use acp_rpc::{ErrorObject, Handler, IncomingNotification, IncomingRequest, RawValue};
use futures_util::SinkExt;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

const LIMIT: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut).await.unwrap_or_else(|_| panic!("{what} timed out"))
}

fn raw(v: Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(&v).unwrap()
}

#[derive(Default)]
struct Agent {
    sessions: Arc<AtomicU64>,
}

impl Handler for Agent {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        match &*req.method {
            "initialize" => Ok(raw(json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true}}))),
            "session/new" => {
                let n = self.sessions.fetch_add(1, Ordering::Relaxed);
                Ok(raw(json!({"sessionId": format!("s{n}")})))
            }
            "session/close" | "session/load" => Ok(raw(json!({}))),
            other => Err(ErrorObject::method_not_found(other)),
        }
    }
}

/// The server ends a session's stream once `session/close` succeeds. The client used to reopen
/// it, as a stream lost, and the server kept each such stream as a provisional one (a session
/// it did not know); after 16 of them (`max_provisional_sessions`) every `session/load` on the
/// connection failed before it was posted.
#[tokio::test]
async fn closed_sessions_leave_no_streams_behind_and_a_later_session_load_works() {
    let server = HttpServer::new(Agent::default);
    let bound = server.bind("127.0.0.1:0").await.unwrap();
    let url = bound.url();
    tokio::spawn(bound.run());
    let (peer, _remote) = Remote::new(url).serve(()).await.unwrap();
    within("init", peer.request_raw("initialize", Some(&raw(json!({"protocolVersion": 1}))))).await.unwrap();
    for _ in 0..16 {
        let new =
            within("new", peer.request_raw("session/new", Some(&raw(json!({"cwd": "/", "mcpServers": []}))))).await;
        let session: Value = serde_json::from_str(new.unwrap().get()).unwrap();
        let session = session["sessionId"].as_str().unwrap().to_owned();
        within("close", peer.request_raw("session/close", Some(&raw(json!({"sessionId": session}))))).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let load = within(
        "load",
        peer.request_raw("session/load", Some(&raw(json!({"sessionId": "old", "cwd": "/", "mcpServers": []})))),
    )
    .await;
    assert!(load.is_ok(), "session/load failed: {load:?}");
}

/// A WebSocket server that sends `frame` `count` times (without waiting for anything) and
/// counts the text frames it receives, on a task of its own: its address and the count.
async fn flooding_server(frame: String, count: usize) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let socket = tokio_tungstenite::accept_async(tcp).await.unwrap();
        let (mut sink, mut stream) = socket.split();
        tokio::spawn(async move {
            while let Some(Ok(message)) = stream.next().await {
                if let Message::Text(_) = message {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        for _ in 0..count {
            if sink.feed(Message::text(frame.clone())).await.is_err() {
                return;
            }
        }
        let _ = sink.flush().await;
        std::future::pending::<()>().await;
    });
    (addr, received)
}

/// Waits until `received` reaches `count`; fails once it has not moved for 5 s (a client that
/// stopped for good).
async fn until_all_received(received: &AtomicUsize, count: usize, peer: &acp_rpc::Peer, remote: &RemoteAgent) {
    let (mut last, mut stalled) = (0, 0);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = received.load(Ordering::Relaxed);
        if now >= count {
            return;
        }
        stalled = if now == last { stalled + 1 } else { 0 };
        assert!(
            stalled < 5,
            "the client stopped: {now} of {count} (closed: {}, end: {:?})",
            peer.is_closed(),
            remote.end_reason()
        );
        last = now;
    }
}

/// A WebSocket server floods the client with messages its connection answers itself (each
/// `{}` gets -32600), and reads everything on a task of its own. The client's socket loop used
/// to wait to hand a frame over while it took none of the connection's output, and the
/// connection's reader waited for room to write its answer: the client stopped for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_flood_of_invalid_messages_is_answered_to_the_last() {
    const N: usize = 50_000;
    let (addr, answers) = flooding_server("{}".to_owned(), N).await;
    let (peer, remote) = Remote::new(format!("ws://{addr}/acp")).serve(()).await.unwrap();
    until_all_received(&answers, N, &peer, &remote).await;
}

/// A client whose notification handler sends a notification back for each notification of a
/// chatty agent, against a server that reads everything: it flows, as it does on stdio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_client_that_notifies_back_for_each_notification_keeps_up() {
    struct Acks;
    impl Handler for Acks {
        async fn handle_notification(&self, n: IncomingNotification) {
            let _ = n.peer.notify_raw("_ack", None).await;
        }
    }
    const N: usize = 20_000;
    let update = json!({"jsonrpc": "2.0", "method": "_update", "params": {"sessionId": "s1", "n": 1}}).to_string();
    let (addr, acks) = flooding_server(update, N).await;
    let (peer, remote) = Remote::new(format!("ws://{addr}/acp")).serve(Acks).await.unwrap();
    until_all_received(&acks, N, &peer, &remote).await;
}

/// This crate's client and server over WebSocket, large messages both ways at once: a socket
/// loop that awaits its send while it reads nothing stops once both directions' buffers are
/// full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_messages_both_ways_at_once_over_websocket_all_arrive() {
    const COUNT: usize = 12;
    const SIZE: usize = 2 << 20;

    struct Chatty;
    impl Handler for Chatty {
        async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
            match &*req.method {
                "initialize" => Ok(raw(json!({"protocolVersion": 1}))),
                "_flood" => {
                    let peer = req.peer.clone();
                    tokio::spawn(async move {
                        let pad = "a".repeat(SIZE);
                        for n in 0..COUNT {
                            let _ = peer.notify("_big", &json!({"n": n, "pad": pad})).await;
                        }
                    });
                    Ok(raw(json!({})))
                }
                other => Err(ErrorObject::method_not_found(other)),
            }
        }
        async fn handle_notification(&self, _: IncomingNotification) {}
    }
    struct Count(Arc<AtomicUsize>);
    impl Handler for Count {
        async fn handle_notification(&self, _: IncomingNotification) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    let server = HttpServer::new(|| Chatty);
    let bound = server.bind("127.0.0.1:0").await.unwrap();
    let url = bound.url().replacen("http://", "ws://", 1);
    tokio::spawn(bound.run());
    let received = Arc::new(AtomicUsize::new(0));
    let (peer, remote) = Remote::new(url).serve(Count(received.clone())).await.unwrap();
    within("init", peer.request_raw("initialize", Some(&raw(json!({"protocolVersion": 1}))))).await.unwrap();
    within("flood", peer.request_raw("_flood", None)).await.unwrap();
    let sender = tokio::spawn({
        let peer = peer.clone();
        async move {
            let pad = "b".repeat(SIZE);
            for n in 0..COUNT {
                let _ = peer.notify("_mine", &json!({"n": n, "pad": pad})).await;
            }
            // A request after them: answered once everything before it went through.
            peer.request_raw("_flood", None).await
        }
    });
    let done = tokio::time::timeout(Duration::from_secs(20), sender).await;
    assert!(
        done.is_ok(),
        "stuck: the client received {} of {COUNT} notifications (closed: {}, end: {:?})",
        received.load(Ordering::Relaxed),
        peer.is_closed(),
        remote.end_reason()
    );
}

/// Answers naming a session (`result.sessionId`) to ids the client never sent open no session
/// streams: a buggy or hostile server cannot make it open as many GETs (each its own TCP
/// connection over HTTP/1.1) as it likes.
#[tokio::test]
async fn answers_to_ids_the_client_never_sent_open_no_session_streams() {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full, StreamBody};
    use hyper::body::{Frame, Incoming};
    use hyper::{Request, Response};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use std::convert::Infallible;
    const FAKE: usize = 300;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let session_gets = Arc::new(AtomicUsize::new(0));
    let gets = session_gets.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let gets = gets.clone();
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let gets = gets.clone();
                async move {
                    type B = http_body_util::combinators::BoxBody<Bytes, Infallible>;
                    let is_get = req.method() == hyper::Method::GET;
                    let session = req.headers().contains_key("acp-session-id");
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let response: Response<B> = if is_get {
                        let events: Vec<Result<Frame<Bytes>, Infallible>> = if session {
                            gets.fetch_add(1, Ordering::Relaxed);
                            Vec::new()
                        } else {
                            (0..FAKE)
                                .map(|n| {
                                    let m = json!({"jsonrpc": "2.0", "id": format!("never-{n}"), "result": {"sessionId": format!("z{n}")}});
                                    Ok(Frame::data(Bytes::from(format!("data: {m}\n\n"))))
                                })
                                .collect()
                        };
                        let stream = futures_util::StreamExt::chain(
                            futures_util::stream::iter(events),
                            futures_util::stream::pending(),
                        );
                        let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
                        r.headers_mut().insert("content-type", "text/event-stream".parse().unwrap());
                        r
                    } else if message["method"] == "initialize" {
                        let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": {"protocolVersion": 1}});
                        let mut r = Response::new(Full::new(Bytes::from(reply.to_string())).boxed());
                        r.headers_mut().insert("acp-connection-id", "c1".parse().unwrap());
                        r
                    } else {
                        let mut r = Response::new(Full::new(Bytes::new()).boxed());
                        *r.status_mut() = hyper::StatusCode::ACCEPTED;
                        r
                    };
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(async move {
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });

    let (peer, _remote) = Remote::new(format!("http://{addr}/acp")).serve(()).await.unwrap();
    within("init", peer.request_raw("initialize", Some(&raw(json!({"protocolVersion": 1}))))).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let opened = session_gets.load(Ordering::Relaxed);
    assert!(opened == 0, "the client opened {opened} session streams for sessions it never asked about");
}

/// The client's TCP connections to `port` as the kernel lists them (`/proc/self/net/tcp` and
/// `tcp6`): for each established one, its timer kind (`tr`: 0 none, 1 retransmit, 2 the
/// socket timer, which on an established socket is keep-alive) and the jiffies left on it.
#[cfg(target_os = "linux")]
fn established_to(port: u16) -> Vec<(u8, u64)> {
    let mut found = Vec::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote_port = fields[2].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            let (timer, left) = fields[5].split_once(':').unwrap();
            if remote_port == Some(port) && fields[3] == "01" {
                found.push((timer.parse().unwrap(), u64::from_str_radix(left, 16).unwrap()));
            }
        }
    }
    found
}

/// A server that vanishes without a reset (its host down, a network gone) never ends an idle
/// stream by itself: TCP keep-alive is what notices. Every connection the client opens, over
/// HTTP (the POSTs' pool and the streams) and WebSocket, has it armed.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn every_connection_to_the_server_has_tcp_keep_alive() {
    let server = HttpServer::new(Agent::default);
    let bound = server.bind("127.0.0.1:0").await.unwrap();
    let url = bound.url();
    let port: u16 = url.rsplit(':').next().unwrap().split('/').next().unwrap().parse().unwrap();
    tokio::spawn(bound.run());
    let (http, _http_remote) = Remote::new(url.clone()).serve(()).await.unwrap();
    within("init", http.request_raw("initialize", Some(&raw(json!({"protocolVersion": 1}))))).await.unwrap();
    within("session", http.request_raw("session/new", Some(&raw(json!({"cwd": "/", "mcpServers": []})))))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let over_http = established_to(port).len();
    let ws_url = url.replacen("http://", "ws://", 1);
    let (ws, _ws_remote) = Remote::new(ws_url).serve(()).await.unwrap();
    within("ws init", ws.request_raw("initialize", Some(&raw(json!({"protocolVersion": 1}))))).await.unwrap();
    // Idle now: a socket without keep-alive would show no timer at all.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sockets = established_to(port);
    // The connection stream's and the session stream's (the POSTs may share theirs), then
    // the WebSocket's.
    assert!(over_http >= 2, "{sockets:?}");
    assert_eq!(sockets.len(), over_http + 1, "{sockets:?}");
    for (timer, _left) in &sockets {
        assert_eq!(*timer, 2, "an idle connection without its keep-alive timer: {sockets:?}");
    }
}

/// The same over `https://`: the TLS connector wraps the same TCP connector, so the POSTs' and
/// the streams' connections (two pools wherever ALPN may pick HTTP/2) have keep-alive too.
#[cfg(all(target_os = "linux", feature = "http-tls"))]
#[tokio::test]
async fn every_connection_to_the_server_has_tcp_keep_alive_over_https() {
    use acp_rpc::http::client::rustls;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let cert = CertificateDer::from_pem_slice(include_bytes!("fixtures/tls-localhost.crt")).unwrap();
    let key = PrivateKeyDer::from_pem_slice(include_bytes!("fixtures/tls-localhost.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server_config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client_config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let bound = HttpServer::new(Agent::default).bind("127.0.0.1:0").await.unwrap().tls(server_config);
    let port = bound.local_addr().port();
    tokio::spawn(bound.run());
    let url = format!("https://127.0.0.1:{port}/acp");
    let (peer, _remote) = Remote::new(url).tls_config(client_config).serve(()).await.unwrap();
    within("init", peer.request_raw("initialize", Some(&raw(json!({"protocolVersion": 1}))))).await.unwrap();
    within("session", peer.request_raw("session/new", Some(&raw(json!({"cwd": "/", "mcpServers": []})))))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sockets = established_to(port);
    // HTTP/2: the streams' connection and the POSTs'.
    assert!(sockets.len() >= 2, "{sockets:?}");
    for (timer, _left) in &sockets {
        assert_eq!(*timer, 2, "an idle connection without its keep-alive timer: {sockets:?}");
    }
}
