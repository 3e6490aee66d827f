//! TLS (feature `http-tls`). The server: HTTPS with HTTP/2 negotiated by ALPN, and WSS over
//! HTTP/1.1, seen by a hand-written client. Our client (`Remote`) against it: a whole turn
//! over `https://` (HTTP/2, or HTTP/1.1 when that is all the server offers) and `wss://`
//! trusting the fixture certificate as its root, and refusals that come quickly with a clear
//! reason: an untrusted certificate, one for another name, the default roots, a handshake that
//! never ends. Certificates in `tests/fixtures` (self-signed, valid until 2126):
//! `tls-localhost` for `localhost` / 127.0.0.1, `tls-other-name` for `other.invalid` only.
#![cfg(all(feature = "http-tls", feature = "http-server", feature = "http-client"))]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acp_rpc::client::ClientContext;
use acp_rpc::http::client::{ConnectError, Profile, Remote};
use acp_rpc::http::server::rustls::{self, pki_types::pem::PemObject};
use acp_rpc::http::server::{BoundServer, HttpServer};
use acp_rpc::{Error, ErrorObject, Handler, IncomingRequest, RawValue};
use acp_types::{
    Client, ContentBlock, InitializeRequest, NewSessionRequest, PromptRequest, ProtocolVersion,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionNotification, StopReason, TextContent,
};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const CERT: &[u8] = include_bytes!("fixtures/tls-localhost.crt");
const KEY: &[u8] = include_bytes!("fixtures/tls-localhost.key");
const OTHER_CERT: &[u8] = include_bytes!("fixtures/tls-other-name.crt");
const OTHER_KEY: &[u8] = include_bytes!("fixtures/tls-other-name.key");

/// Upper bound for anything that should happen soon; never used as synchronisation.
const LIMIT: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut).await.unwrap_or_else(|_| panic!("{what} timed out"))
}

fn raw(value: Value) -> Box<RawValue> {
    RawValue::from_string(value.to_string()).expect("json")
}

/// `initialize`; `session/new` gives `s1`; a prompt streams the update "hi", asks for
/// permission, and ends the turn when allowed.
struct Agent;

impl Handler for Agent {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let failed = |e: Error| ErrorObject::internal_error(e.to_string());
        match &*req.method {
            "initialize" => Ok(raw(json!({"protocolVersion": 1, "agentCapabilities": {}}))),
            "session/new" => Ok(raw(json!({"sessionId": "s1"}))),
            "session/prompt" => {
                let params: Value = req.parse_params()?;
                let session = params["sessionId"].clone();
                let update = json!({"sessionId": session, "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}});
                req.peer.notify("session/update", &update).await.map_err(failed)?;
                let ask = json!({"sessionId": session, "toolCall": {"toolCallId": "t1"}, "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]});
                let answer: Value = req.peer.request("session/request_permission", &ask).await.map_err(failed)?;
                let stop = if answer["outcome"]["optionId"] == "allow" { "end_turn" } else { "refusal" };
                Ok(raw(json!({"stopReason": stop})))
            }
            other => Err(ErrorObject::method_not_found(other)),
        }
    }
}

/// Records the updates and permission requests; allows every permission request.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl Client<ClientContext> for Recorder {
    async fn session_request_permission(
        &self,
        params: RequestPermissionRequest,
        _: ClientContext,
    ) -> Result<RequestPermissionResponse, acp_types::Error> {
        self.0.lock().unwrap().push(format!("permission {}", params.session_id.0));
        let allow = params.options[0].option_id.clone();
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(allow))))
    }

    async fn session_update(&self, params: SessionNotification, _: ClientContext) -> Result<(), acp_types::Error> {
        let update = serde_json::to_value(&params.update).expect("update");
        self.0.lock().unwrap().push(format!("update {}", update["content"]["text"].as_str().unwrap_or("?")));
        Ok(())
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server presenting `cert`, whose ALPN offers `alpn` (empty: the server's default, `h2`
/// and `http/1.1`).
async fn server_with(cert: &[u8], key: &[u8], alpn: &[&[u8]]) -> BoundServer {
    let certs = vec![CertificateDer::from_pem_slice(cert).expect("certificate")];
    let key = PrivateKeyDer::from_pem_slice(key).expect("key");
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    HttpServer::new(|| Agent).bind("127.0.0.1:0").await.expect("bind").tls(config)
}

async fn tls_server() -> BoundServer {
    server_with(CERT, KEY, &[]).await
}

/// A client configuration whose only root is `cert`.
fn trusting(cert: &[u8]) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(cert).expect("certificate")).expect("root");
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// Starts `server`; returns its port.
fn run(server: BoundServer) -> u16 {
    let port = server.local_addr().port();
    tokio::spawn(server.run());
    port
}

/// A TLS connection to `addr` trusting the fixture's certificate, offering `alpn`.
async fn connect(
    addr: std::net::SocketAddr,
    alpn: &[u8],
) -> (tokio_rustls::client::TlsStream<TcpStream>, Option<Vec<u8>>) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(CERT).expect("certificate")).expect("root");
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let stream = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("TLS handshake");
    let negotiated = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    (stream, negotiated)
}

#[tokio::test]
async fn https_negotiates_http2_and_serves_initialize() {
    let server = tls_server().await;
    let (addr, url) = (server.local_addr(), server.url());
    assert!(url.starts_with("https://"), "{url}");
    tokio::spawn(server.run());

    let (stream, alpn) = connect(addr, b"h2").await;
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.expect("h2");
    tokio::spawn(connection);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}).to_string();
    let request = Request::post(url.as_str())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let response = sender.send_request(request).await.expect("answer");
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("acp-connection-id"));
    let answer: Value =
        serde_json::from_slice(&response.into_body().collect().await.expect("body").to_bytes()).expect("json");
    assert_eq!(answer["result"]["protocolVersion"], 1);
}

#[tokio::test]
async fn wss_over_http1() {
    let server = tls_server().await;
    let addr = server.local_addr();
    let url = server.url().replacen("https://", "wss://", 1);
    tokio::spawn(server.run());

    let (stream, alpn) = connect(addr, b"http/1.1").await;
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
    let (mut socket, response) =
        tokio_tungstenite::client_async(url.into_client_request().expect("request"), stream).await.expect("upgrade");
    assert!(response.headers().contains_key("acp-connection-id"));
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}});
    socket.send(Message::text(init.to_string())).await.expect("send");
    let answer = loop {
        match socket.next().await.expect("open").expect("frame") {
            Message::Text(text) => break serde_json::from_str::<Value>(&text).expect("json"),
            _ => continue,
        }
    };
    assert_eq!(answer["result"]["protocolVersion"], 1);
}

#[tokio::test]
async fn a_plain_http_client_gets_no_answer_from_a_tls_port() {
    let server = tls_server().await;
    let addr = server.local_addr();
    tokio::spawn(server.run());
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.expect("handshake");
    tokio::spawn(connection);
    let request = Request::get(format!("http://{addr}/acp"))
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .expect("request");
    assert!(sender.send_request(request).await.is_err(), "plain HTTP must fail on the TLS port");
}

// ---- our client over TLS --------------------------------------------------------------------

/// Connects with `remote` and runs a whole turn: initialize, session/new, a prompt whose update
/// and permission request come back over the streams (the answer posted with the session).
async fn full_turn(remote: Remote, profile: Profile) {
    let recorder = Recorder::default();
    let (agent, remote) = within("connect", remote.connect(recorder.clone())).await.expect("connect");
    assert_eq!(remote.profile(), profile);
    let init = within("initialize", agent.initialize(InitializeRequest::new(ProtocolVersion(1)))).await;
    assert_eq!(init.expect("initialize").protocol_version, ProtocolVersion(1));
    assert!(remote.connection_id().is_some());
    let cwd = std::env::temp_dir().display().to_string();
    let session = within("session/new", agent.new_session(NewSessionRequest::new(cwd, Vec::new())))
        .await
        .expect("session/new")
        .session_id;
    let prompt = PromptRequest::new(session.clone(), vec![ContentBlock::Text(TextContent::new("hello"))]);
    let done = within("the prompt", agent.prompt(prompt)).await.expect("prompt");
    assert_eq!(done.stop_reason, StopReason::EndTurn);
    assert_eq!(*recorder.0.lock().unwrap(), ["update hi", "permission s1"]);
    within("close", remote.close()).await.expect("close");
}

#[tokio::test]
async fn our_client_runs_a_turn_over_https_with_http2() {
    // The server offers only h2: the turn works only if the client offers it and speaks it.
    let port = run(server_with(CERT, KEY, &[b"h2"]).await);
    let remote = Remote::new(format!("https://localhost:{port}/acp")).tls_config(trusting(CERT));
    full_turn(remote, Profile::StreamableHttp).await;
}

#[tokio::test]
async fn our_client_runs_a_turn_over_https_with_http1_when_the_server_offers_only_that() {
    let port = run(server_with(CERT, KEY, &[b"http/1.1"]).await);
    let remote = Remote::new(format!("https://127.0.0.1:{port}/acp")).tls_config(trusting(CERT));
    full_turn(remote, Profile::StreamableHttp).await;
}

#[tokio::test]
async fn our_client_runs_a_turn_over_wss() {
    // The server's ALPN lists h2 first; the client offers http/1.1 alone for the upgrade.
    let port = run(tls_server().await);
    let remote = Remote::new(format!("wss://localhost:{port}/acp")).tls_config(trusting(CERT));
    full_turn(remote, Profile::WebSocket).await;
}

/// The reason `initialize` fails with over `https://` (the handshake happens with the first
/// POST), and how long it took.
async fn https_initialize_error(remote: Remote) -> (String, Duration) {
    let started = Instant::now();
    let (agent, _remote) = remote.connect(Recorder::default()).await.expect("nothing is sent before initialize");
    match within("initialize", agent.initialize(InitializeRequest::new(ProtocolVersion(1)))).await {
        Err(Error::Rpc(error)) => (error.message, started.elapsed()),
        other => panic!("expected an error answer, got {other:?}"),
    }
}

/// The error `connect` gives over `wss://`.
async fn wss_connect_error(remote: Remote) -> (ConnectError, Duration) {
    let started = Instant::now();
    let error = within("connect", remote.connect(Recorder::default())).await.expect_err("refused");
    (error, started.elapsed())
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused_with_the_reason() {
    // The server presents the localhost certificate; the client trusts only the other one.
    let port = run(tls_server().await);
    let https = Remote::new(format!("https://localhost:{port}/acp")).tls_config(trusting(OTHER_CERT));
    let (message, _) = https_initialize_error(https).await;
    assert!(message.contains("invalid peer certificate: UnknownIssuer"), "{message}");
    assert!(message.contains("TLS handshake with localhost failed"), "{message}");

    let wss = Remote::new(format!("wss://localhost:{port}/acp")).tls_config(trusting(OTHER_CERT));
    let (error, _) = wss_connect_error(wss).await;
    assert!(matches!(&error, ConnectError::Tls { server, .. } if *server == format!("localhost:{port}")), "{error:?}");
    assert!(error.to_string().contains("invalid peer certificate: UnknownIssuer"), "{error}");
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused_with_the_reason() {
    // Trusted, but issued for `other.invalid` only: neither 127.0.0.1 nor localhost matches.
    let port = run(server_with(OTHER_CERT, OTHER_KEY, &[]).await);
    let https = Remote::new(format!("https://127.0.0.1:{port}/acp")).tls_config(trusting(OTHER_CERT));
    let (message, _) = https_initialize_error(https).await;
    assert!(message.contains("certificate not valid for name"), "{message}");

    let wss = Remote::new(format!("wss://localhost:{port}/acp")).tls_config(trusting(OTHER_CERT));
    let (error, _) = wss_connect_error(wss).await;
    assert!(matches!(error, ConnectError::Tls { .. }), "{error:?}");
    assert!(error.to_string().contains("certificate not valid for name"), "{error}");
}

#[tokio::test]
async fn the_default_roots_do_not_trust_a_self_signed_certificate() {
    // No `tls_config`: the platform's verifier (the system's roots) is used, and refuses the
    // fixture. (Where the system has no trust store at all, setting the verifier up fails,
    // with its own reason: either way a TLS error naming certificates.)
    let port = run(tls_server().await);
    let (error, _) = wss_connect_error(Remote::new(format!("wss://localhost:{port}/acp"))).await;
    assert!(matches!(error, ConnectError::Tls { .. }), "{error:?}");
    assert!(error.to_string().to_lowercase().contains("certificate"), "{error}");

    // Over https:// the verifier is set up by `connect` (which fails where there is no trust
    // store), the handshake made by `initialize`.
    let https = Remote::new(format!("https://localhost:{port}/acp"));
    let message = match within("connect", https.connect(Recorder::default())).await {
        Err(error @ ConnectError::Tls { .. }) => error.to_string(),
        Err(other) => panic!("{other:?}"),
        Ok((agent, _remote)) => {
            match within("initialize", agent.initialize(InitializeRequest::new(ProtocolVersion(1)))).await {
                Err(Error::Rpc(error)) => error.message,
                other => panic!("expected an error answer, got {other:?}"),
            }
        }
    };
    assert!(message.to_lowercase().contains("certificate"), "{message}");
}

#[tokio::test]
async fn a_handshake_that_never_ends_is_bounded_by_the_connect_timeout() {
    // A server that accepts the TCP connection and never answers the ClientHello.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    let limit = Duration::from_millis(300);
    let wss = Remote::new(format!("wss://localhost:{port}/acp")).tls_config(trusting(CERT)).connect_timeout(limit);
    let (error, took) = wss_connect_error(wss).await;
    assert!(error.to_string().contains("took longer than 300ms"), "{error}");
    assert!(took < LIMIT / 2, "{took:?}");

    let https = Remote::new(format!("https://localhost:{port}/acp")).tls_config(trusting(CERT)).connect_timeout(limit);
    let (message, took) = https_initialize_error(https).await;
    assert!(message.contains("took longer than 300ms"), "{message}");
    assert!(took < LIMIT / 2, "{took:?}");
}

#[tokio::test]
async fn a_tls_url_without_a_port_means_443() {
    // Nothing listens on 443 here (or something does, and it is no ACP server we trust): the
    // error names the port either way.
    let wss = Remote::new("wss://127.0.0.1/acp").tls_config(trusting(CERT)).connect_timeout(Duration::from_secs(2));
    let (error, _) = wss_connect_error(wss).await;
    assert!(error.to_string().contains("127.0.0.1:443"), "{error}");
}
