//! The client side of the remote transport (feature `http-client`): connecting to an agent by
//! URL, over Streamable HTTP (`http://`, `https://`) or WebSocket (`ws://`, `wss://`; TLS with
//! the feature `http-tls`), with the same typed [`AgentHandle`] a spawned agent gives.
//!
//! ```no_run
//! # async fn run<C: acp_rpc::acp_types::Client<acp_rpc::ClientContext> + 'static>(client: C)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use acp_rpc::acp_types::{InitializeRequest, ProtocolVersion};
//! use acp_rpc::http::client::Remote;
//!
//! let (agent, remote) = Remote::new("http://127.0.0.1:8080/acp").bearer_token("secret").connect(client).await?;
//! let init = agent.initialize(InitializeRequest::new(ProtocolVersion(1))).await?;
//! // ... sessions and prompts, exactly as over stdio ...
//! remote.close().await?; // DELETE (HTTP) or a Close frame (WebSocket)
//! # Ok(()) }
//! ```
//!
//! This module owns the client's half of the wire: [`Remote`] (the options and the ways to
//! start: a typed client, or any raw [`Handler`] such as a
//! [`ProtocolRouter`](crate::version::ProtocolRouter) for v1/v2 negotiation), [`RemoteAgent`]
//! (the live transport: its connection id, cookies, why it ended, closing it), the
//! [`CookieJar`], the reconnect helper ([`Remote::reconnect`]), and, privately, an SSE parser
//! and the TLS connector.
//!
//! The [`Connection`] runs over in-memory pipes, unchanged: a driver task sends each message
//! the connection writes, and writes each message received into the connection's input, one
//! line each. So the runtime's rules (ordering, cancellation, backpressure) are the stdio ones.
//!
//! # Streamable HTTP, as this client does it
//!
//! - **One POST at a time**, in the order the connection wrote the messages: a notification
//!   sent before a request reaches the server first, and `session/cancel` reaches it before
//!   the `cancelled` answers to the session's permission requests.
//! - **Headers.** Every POST has `Content-Type: application/json`, and `Acp-Connection-Id`
//!   once `initialize` returned it. `Acp-Session-Id` goes on requests and notifications whose
//!   `params.sessionId` is a string, and on our *responses* to agent requests that arrived on
//!   a session stream or carried a `sessionId` (the RFD's permission flow; the official Rust
//!   client omits it there and the TypeScript server refuses the answer with 400).
//! - **Streams.** After `initialize` (answered `200` with the header), the connection-scoped
//!   GET is opened and its response headers awaited before anything else is posted. A
//!   session-scoped GET is opened before the first message carrying a new `params.sessionId`
//!   (awaited too), and when any response carries `result.sessionId` (`session/new`, `fork`,
//!   `load`). Responses are matched by id whatever stream brings them: the official servers
//!   disagree on where `session/load`'s answer goes.
//! - **Errors never hang a call.** A POST answered with a non-2xx status fails the request
//!   it carried with -32603 and `data: {status, body}` (the body cut to 4 KiB); `401`,
//!   `403`, `404` and `410` also end the connection, except a `404` to a POST that carried
//!   `Acp-Session-Id`: that session alone ends (its pending requests fail, its stream is
//!   dropped, its next message opens it again), as the server may no longer know it while
//!   the connection lives (the RFD's `404` for an unknown session). A refused POST that
//!   carried no request (a line that is not a message) whose body is a JSON-RPC error with
//!   a null id (as this crate's server answers invalid JSON: 400 with -32700) hands that
//!   error over as an incoming message. A POST that cannot be sent (connection refused or
//!   reset) fails its request and ends the connection; one that times out
//!   ([`Remote::request_timeout`]) fails its request only. A request whose session stream
//!   cannot be opened fails without being posted. The connection stream ending ends the
//!   connection (every pending call fails). A session stream ending is reopened: at once
//!   the first time, then, while its streams keep ending within 5 s of their opening, after
//!   a pause that doubles from 250 ms up to 5 s, so a server that ends it after every event
//!   is not asked again at once (a stream that lived longer resets the pause). Reopening
//!   goes on while the streams bring messages; when a reopened stream ends without bringing
//!   any, or cannot be opened, the session's pending requests fail. A session stream
//!   refused with `404` (the server no longer knows the session) ends that session alone.
//!   Once our `session/close` or `session/delete` succeeded, the session's stream is still
//!   read (the turn's last updates may follow the answer) until the server ends it, for at
//!   most 5 s, and never reopened, unless a message of ours names the session again
//!   meanwhile (`session/load`): then it is its stream again. A session stream that ends
//!   while our close of it is in flight is not reopened either (the close ended it), unless
//!   the close is still unanswered 5 s later. [`RemoteAgent::end_reason`] says why a
//!   connection ended. TCP keep-alive is on for every connection (probes after 30 s of
//!   silence, 3 of them 10 s apart), so a server whose host or network vanished without a
//!   reset ends the connection within about a minute.
//! - **`initialize` first.** Over HTTP it creates the connection, so anything sent before it
//!   fails (a request with -32600). An `initialize` answered with a JSON-RPC error and no
//!   `Acp-Connection-Id` leaves the client unconnected: it may try again.
//! - **Closing.** When the connection ends (or the [`RemoteAgent`] is dropped or closed), a
//!   `DELETE` is sent, bounded by [`Remote::close_timeout`], and the streams are dropped.
//! - **HTTP/1.1** on `http://` by default (no official peer speaks h2c; each open stream then
//!   holds a TCP connection of its own, POSTs reuse pooled ones). [`Remote::http2_prior_knowledge`]
//!   switches to h2c: the streams multiplexed on one TCP connection, the POSTs on another, so
//!   that open streams never take the slots the POSTs need (a server allows so many streams at
//!   once per connection).
//!
//! # WebSocket
//!
//! One socket per connection; one text frame per message, both ways. Binary frames are
//! ignored, no subprotocol is offered, and no pings are sent (pings are answered). The
//! handshake carries the configured headers and the cookies, and its `Set-Cookie` are kept.
//! A Close frame or the end of the socket ends the connection.
//!
//! # Both profiles
//!
//! - **Cookies** from every response (POST, GET, DELETE, the WebSocket handshake) go into the
//!   [`CookieJar`] and are sent back on every request. Pass one jar to several connections
//!   ([`Remote::cookie_jar`]) to keep load-balancer affinity across reconnects.
//! - **Limits.** A received message larger than [`Remote::max_message_bytes`] (64 MiB by
//!   default) ends the stream it came on (see above); a WebSocket frame or message beyond it
//!   ends the connection.
//! - **Bad input.** A received message that is not a JSON object (the RFD has no batches) is
//!   skipped with a warning rather than handed to the connection, which would answer the
//!   server with an error it never asked for.
//!
//! # TLS (`https://`, `wss://`)
//!
//! With the feature `http-tls` (rustls, `ring` provider), beside `http-client`; without it
//! these URLs give [`ConnectError::TlsNotBuiltIn`] (a TLS-terminating proxy or a tunnel is
//! then the way).
//!
//! - **Versions.** Over `https://`, ALPN offers `h2` and `http/1.1` and the server picks: with
//!   HTTP/2 (this crate's server) the streams share one TCP connection and the POSTs another,
//!   as over h2c; with HTTP/1.1 (the official servers) each open stream holds a TCP
//!   connection, as on `http://`. [`Remote::http2_prior_knowledge`] plays no part. `wss://`
//!   offers `http/1.1` alone: the upgrade is an HTTP/1.1 exchange.
//! - **Whom it trusts.** By default the operating system's: rustls-platform-verifier, which
//!   asks the platform's verifier on macOS, Windows and Android, and on Linux checks with
//!   webpki against the system's roots (the usual files, or `SSL_CERT_FILE` /
//!   `SSL_CERT_DIR`). Chosen over webpki-roots (Mozilla's list compiled in: it works where the
//!   system has no trust store, but ignores the private CAs organisations install on their
//!   machines, which agents hosted inside a company commonly use, and ages with the binary)
//!   and over rustls-native-certs (the system's roots read as a list: on macOS and Windows
//!   that bypasses the system's own policy, e.g. revocation and distrust); it is also what
//!   rustls recommends and what reqwest, under the official Rust client, uses. On Linux it
//!   adds three small crates. [`Remote::tls_config`] replaces it with any
//!   [`rustls::ClientConfig`]: a private CA as the only root, webpki-roots' list, client
//!   certificates.
//! - **Failures are errors, never hangs.** The handshake is bounded by
//!   [`Remote::connect_timeout`]. A certificate that is not trusted, or not valid for the
//!   URL's host, fails the handshake: over WebSocket `connect` returns [`ConnectError::Tls`]
//!   (e.g. `invalid peer certificate: UnknownIssuer`); over Streamable HTTP, where nothing
//!   is sent before `initialize`, `initialize` fails with -32603 saying the same. A system
//!   without a trust store (and no [`Remote::tls_config`]) gives [`ConnectError::Tls`] too.
//!
//! # Reconnecting
//!
//! The RFD (v1) replays nothing: what the agent sent while the client was away is lost, and a
//! session survives on the server only. [`Remote::reconnect`] re-attaches one: a new
//! connection (give it the old [`RemoteAgent::cookies`] for affinity), `initialize`, then
//! `session/load` when the agent advertises `loadSession` (it replays the history as
//! `session/update`s), else `session/resume` when it advertises
//! `sessionCapabilities.resume`. The session stream is opened before the request, as the RFD's
//! flow has it. Over WebSocket the replay is all handled by the time the call returns, as on
//! stdio. Over Streamable HTTP it may not be: the RFD sends `session/load`'s answer on the
//! connection stream and the replay on the session's, two streams that nothing orders, so the
//! last replayed updates can be handled just after the answer. For protocol v2 (feature
//! `unstable_protocol_v2`), [`Remote::reconnect_v2`] does the same with v2's `session/resume`,
//! which replaces `session/load` (`replayFrom: {"type": "start"}` asks for the history); its
//! answer comes on the session's stream, after the replay, on both transports.

mod cookies;
mod sse;
#[cfg(feature = "http-tls")]
mod tls;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use acp_types::{
    Client, InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse, ResumeSessionRequest,
    ResumeSessionResponse,
};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, CONTENT_TYPE, COOKIE, HeaderMap, HeaderName, HeaderValue, SET_COOKIE};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_util::sync::CancellationToken;

pub use cookies::CookieJar;
/// rustls, for building the [`Remote::tls_config`] configuration (feature `http-tls`).
#[cfg(feature = "http-tls")]
pub use tokio_rustls::rustls;

use super::{CONNECTION_ID_HEADER, EVENT_STREAM, Envelope, SESSION_ID_HEADER, one_line};
use crate::client::{AgentHandle, ClientContext};
use crate::core::connection::{Connection, Serve};
use crate::core::error::Error;
use crate::core::framing::DEFAULT_MAX_LINE_BYTES;
use crate::core::handler::Handler;
use crate::core::jsonrpc::codes;
use crate::core::peer::Peer;
use crate::core::tasks::AbortOnDrop;
use crate::core::transport::{PipeReader, PipeWriter, duplex};

/// How much of an error answer's body goes into the JSON-RPC error's `data`.
const ERROR_BODY_LIMIT: usize = 4096;
/// The in-memory pipes between the connection and the driver, per direction.
const PIPE_BYTES: usize = 64 * 1024;

// ---- options ----------------------------------------------------------------------------

/// Which of the RFD's two profiles a connection uses; the URL's scheme picks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Profile {
    /// `http://` or `https://`: POST for our messages, SSE GET streams for the agent's, DELETE
    /// to end.
    StreamableHttp,
    /// `ws://` or `wss://`: one WebSocket, one text frame per message.
    WebSocket,
}

/// Why [`Remote`] could not connect. Over HTTP nothing is sent before `initialize`, so only
/// the URL and the options can fail here; what the server answers shows on the calls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL does not parse, or lacks a scheme or a host.
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `https://` or `wss://` in a build without the `http-tls` feature.
    #[error(
        "`{scheme}://` needs TLS, which this build of acp-rpc lacks: turn on its `http-tls` feature, \
         or connect with `http://` or `ws://` (e.g. through a TLS-terminating proxy)"
    )]
    TlsNotBuiltIn {
        /// The scheme given.
        scheme: String,
    },
    /// A scheme that is none of `http`, `ws`, `https`, `wss`.
    #[error(
        "unsupported URL scheme `{scheme}`: the remote transport takes `http://` or `https://` (Streamable HTTP), \
         `ws://` or `wss://` (WebSocket)"
    )]
    UnsupportedScheme {
        /// The scheme given.
        scheme: String,
    },
    /// A header given with [`Remote::header`] (or a bearer token) is not a valid HTTP header.
    #[error("invalid header {name:?}: {reason}")]
    InvalidHeader {
        /// The header's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// TLS could not be set up (`https://`, `wss://`; feature `http-tls`): no trust store to
    /// verify the server with, or (over WebSocket, which connects at once) a failed or
    /// timed-out handshake, e.g. a certificate that is not trusted or not valid for the host.
    /// Over Streamable HTTP a failed handshake fails `initialize` instead, as nothing is
    /// sent before it.
    #[error("TLS with {server} failed: {reason}")]
    Tls {
        /// `host:port`.
        server: String,
        /// What failed.
        reason: String,
    },
    /// The TCP connection for the WebSocket could not be made.
    #[error("cannot connect to {server}: {source}")]
    Io {
        /// `host:port`.
        server: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The TCP connection or the WebSocket handshake took longer than allowed.
    #[error("connecting to {server} timed out after {after:?}")]
    Timeout {
        /// `host:port`.
        server: String,
        /// The limit.
        after: Duration,
    },
    /// The server answered the WebSocket handshake with an HTTP status instead of 101.
    #[error("the server refused the WebSocket upgrade with HTTP {status}: {body}")]
    Refused {
        /// The status.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
    /// The WebSocket handshake failed otherwise.
    #[error("the WebSocket handshake failed: {0}")]
    Handshake(String),
}

/// Connects to a remote agent at `url` (`http://…`, `ws://…`, `https://…`, `wss://…`: the whole endpoint, e.g.
/// `http://127.0.0.1:8080/acp`) and serves `client` on it, with the default options. See
/// [`Remote`] for options, and the [module docs](self) for what happens on the wire.
pub async fn connect<C>(url: &str, client: C) -> Result<(AgentHandle, RemoteAgent), ConnectError>
where
    C: Client<ClientContext> + 'static,
{
    Remote::new(url).connect(client).await
}

/// A remote agent to connect to, with options; [`Remote::connect`] (or `connect_with`,
/// `serve`, `serve_with`, `reconnect`) connects.
#[derive(Debug)]
pub struct Remote {
    url: String,
    headers: Vec<(String, String)>,
    jar: CookieJar,
    connect_timeout: Duration,
    request_timeout: Duration,
    close_timeout: Duration,
    idle_timeout: Option<Duration>,
    max_message_bytes: usize,
    h2c: bool,
    #[cfg(feature = "http-tls")]
    tls_config: Option<Arc<rustls::ClientConfig>>,
    connection: Connection,
}

impl Remote {
    /// The agent at `url` (`http://`, `ws://`, or with the feature `http-tls` `https://`,
    /// `wss://`: the whole endpoint). The defaults: no extra
    /// headers, a fresh cookie jar, 10 s to connect, 60 s per request (a POST's answer, a
    /// stream's response headers; `initialize`'s answer waits for the agent), 2 s for the
    /// closing DELETE, no idle limit on streams, 64 MiB messages, HTTP/1.1 (over TLS, what
    /// ALPN agrees on), the platform's certificate verification, and the default
    /// [`Connection`] options.
    pub fn new(url: impl Into<String>) -> Self {
        Remote {
            url: url.into(),
            headers: Vec::new(),
            jar: CookieJar::new(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            close_timeout: Duration::from_secs(2),
            idle_timeout: None,
            max_message_bytes: DEFAULT_MAX_LINE_BYTES,
            h2c: false,
            #[cfg(feature = "http-tls")]
            tls_config: None,
            connection: Connection::new(),
        }
    }

    /// Adds a header to every request (POSTs, GETs, the DELETE, the WebSocket handshake), e.g.
    /// an API key. Checked when connecting ([`ConnectError::InvalidHeader`]). The transport's
    /// own headers win over these: `Content-Type` on POSTs, `Accept` on streams, `Acp-*`, and
    /// `Cookie` once the jar has cookies for the server.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds `Authorization: Bearer <token>` to every request.
    pub fn bearer_token(self, token: impl AsRef<str>) -> Self {
        let value = format!("Bearer {}", token.as_ref());
        self.header("authorization", value)
    }

    /// Keeps cookies in `jar` (shared with its clones) instead of a fresh one: pass the jar of
    /// an earlier connection to the same server to keep its affinity cookies.
    pub fn cookie_jar(mut self, jar: CookieJar) -> Self {
        self.jar = jar;
        self
    }

    /// How long making a connection may take: the TCP connection, and for `https://` and
    /// `wss://` the TLS handshake too (each bounded by this).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one request may take: a POST until its answer is read, a GET until the
    /// stream's response headers, the WebSocket handshake. A POST over the limit fails the
    /// request it carried.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long the closing `DELETE` (or WebSocket close) may take.
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.close_timeout = timeout;
        self
    }

    /// Treats a stream (or the WebSocket) that brings nothing for this long, not even a
    /// keep-alive, as ended. The official servers send an SSE keep-alive after 15 s idle;
    /// neither side pings on WebSocket. Off by default: a quiet live server is normal, and a
    /// server whose host or network is gone is noticed anyway by TCP keep-alive, which is
    /// always on (probes after 30 s without traffic, the connection ends after 3 unanswered
    /// ones 10 s apart).
    pub fn idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// The largest message accepted from the server, in bytes (at least 1 KiB).
    pub fn max_message_bytes(mut self, n: usize) -> Self {
        self.max_message_bytes = n.max(1024);
        self
    }

    /// Speaks HTTP/2 without TLS ("prior knowledge" h2c) on `http://` instead of HTTP/1.1.
    /// Only for servers known to accept it (the official ones do not). No effect on
    /// `https://`, where ALPN picks the version.
    pub fn http2_prior_knowledge(mut self, enabled: bool) -> Self {
        self.h2c = enabled;
        self
    }

    /// The TLS configuration for `https://` and `wss://` (feature `http-tls`) instead of the
    /// default one (rustls with `ring` and the platform's certificate verifier): e.g. a
    /// private CA as the only root, or client certificates. Its ALPN protocols are used as
    /// given over Streamable HTTP (empty: `h2` and `http/1.1` are offered); over WebSocket
    /// only `http/1.1` is offered, whatever it lists.
    ///
    /// ```no_run
    /// use acp_rpc::http::client::{Remote, rustls};
    /// use rustls::pki_types::{CertificateDer, pem::PemObject};
    ///
    /// fn remote(ca_pem: &[u8]) -> Result<Remote, Box<dyn std::error::Error>> {
    ///     let mut roots = rustls::RootCertStore::empty();
    ///     roots.add(CertificateDer::from_pem_slice(ca_pem)?)?;
    ///     let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    ///     let config = rustls::ClientConfig::builder_with_provider(provider)
    ///         .with_safe_default_protocol_versions()?
    ///         .with_root_certificates(roots)
    ///         .with_no_client_auth();
    ///     Ok(Remote::new("https://agents.internal:8443/acp").tls_config(config))
    /// }
    /// ```
    #[cfg(feature = "http-tls")]
    pub fn tls_config(mut self, config: rustls::ClientConfig) -> Self {
        self.tls_config = Some(Arc::new(config));
        self
    }

    /// The options of the runtime connection (limits, cancellation grace, a wire tap, ...).
    pub fn connection(mut self, connection: Connection) -> Self {
        self.connection = connection;
        self
    }

    /// Connects and serves `client` (the client side of ACP) on the connection.
    pub async fn connect<C>(self, client: C) -> Result<(AgentHandle, RemoteAgent), ConnectError>
    where
        C: Client<ClientContext> + 'static,
    {
        self.connect_with(|_| client).await
    }

    /// Like [`Remote::connect`], but builds the client from the [`AgentHandle`].
    pub async fn connect_with<C, F>(self, make_client: F) -> Result<(AgentHandle, RemoteAgent), ConnectError>
    where
        C: Client<ClientContext> + 'static,
        F: FnOnce(AgentHandle) -> C,
    {
        let (opened, connection, (reader, writer)) = self.open().await?;
        let (agent, serve) = connection.serve_client_with(reader, writer, make_client);
        let remote = opened.start(agent.peer().clone(), serve);
        Ok((agent, remote))
    }

    /// Connects and serves a raw [`Handler`] on the connection, as [`Connection::serve`]
    /// does: e.g. a [`ProtocolRouter`](crate::version::ProtocolRouter) with a v1 and a v2
    /// client, then `ProtocolRouter::negotiate` on the returned [`Peer`].
    pub async fn serve<H: Handler>(self, handler: H) -> Result<(Peer, RemoteAgent), ConnectError> {
        self.serve_with(|_| handler).await
    }

    /// Like [`Remote::serve`], but builds the handler from the connection's [`Peer`].
    pub async fn serve_with<H, F>(self, make_handler: F) -> Result<(Peer, RemoteAgent), ConnectError>
    where
        H: Handler,
        F: FnOnce(&Peer) -> H,
    {
        let (opened, connection, (reader, writer)) = self.open().await?;
        let (peer, serve) = connection.serve_with(reader, writer, make_handler);
        let remote = opened.start(peer.clone(), serve);
        Ok((peer, remote))
    }

    /// The transport alone, for a tool that runs its own connection or watches the wire (as
    /// `acp-check --url` does): `reader` gives each message the agent sends as one line, and
    /// each line written to `writer` is sent to the agent: what a spawned agent's stdout and
    /// stdin are. Closing or dropping `writer` ends the connection (`DELETE`, or the
    /// WebSocket's Close); [`TransportWatch::finished`] (from [`RemoteTransport::watch`]) resolves
    /// when the transport is done.
    pub async fn transport(self) -> Result<RemoteTransport, ConnectError> {
        let (opened, _, (reader, writer)) = self.open().await?;
        Ok(RemoteTransport { reader, writer, status: opened.status, profile: opened.profile })
    }

    /// Re-attaches to a session after a lost connection (see the [module docs](self)): connects
    /// and serves `client`, sends `initialize` (`init`), then `session/load` (`load`) when the
    /// agent advertises `loadSession`, else `session/resume` with the same session, cwd,
    /// additional directories and MCP servers when it advertises `sessionCapabilities.resume`.
    ///
    /// Give this `Remote` the old connection's jar ([`Remote::cookie_jar`] with
    /// [`RemoteAgent::cookies`]) so that a sticky load balancer routes it to the same backend.
    /// For a protocol v2 client, use `Remote::reconnect_v2` (feature `unstable_protocol_v2`).
    pub async fn reconnect<C>(
        self,
        client: C,
        init: InitializeRequest,
        load: LoadSessionRequest,
    ) -> Result<Reconnected, ReconnectError>
    where
        C: Client<ClientContext> + 'static,
    {
        let (agent, remote) = self.connect(client).await?;
        let call = |step: &'static str| move |source: Error| ReconnectError::Call { step, source };
        let init = agent.initialize(init).await.map_err(call("initialize"))?;
        let capabilities = init.agent_capabilities.as_ref();
        let can_load = capabilities.and_then(|c| c.load_session).unwrap_or(false);
        let can_resume = capabilities
            .and_then(|c| c.session_capabilities.as_ref())
            .is_some_and(|s| matches!(s.resume, Some(Some(_))));
        let session = if can_load {
            Reattached::Loaded(Box::new(agent.load_session(load).await.map_err(call("session/load"))?))
        } else if can_resume {
            let mut resume = ResumeSessionRequest::new(load.session_id, load.cwd).mcp_servers(load.mcp_servers);
            if let Some(directories) = load.additional_directories {
                resume = resume.additional_directories(directories);
            }
            Reattached::Resumed(Box::new(agent.resume_session(resume).await.map_err(call("session/resume"))?))
        } else {
            return Err(ReconnectError::Unsupported);
        };
        Ok(Reconnected { agent, remote, init: Box::new(init), session })
    }

    /// Connects and serves `client`, the client side of protocol v2 (feature
    /// `unstable_protocol_v2`): the connection follows v2's rules from the start, as
    /// [`crate::v2::serve_client`]'s does, and the handle has v2's calls
    /// ([`AgentHandle::prompt_turn`](crate::v2::AgentHandle::prompt_turn) included). Send
    /// `initialize` with protocol version 2 first; to fall back to v1 against a v1 agent,
    /// serve a [`ProtocolRouter`](crate::version::ProtocolRouter) with [`Remote::serve`]
    /// instead.
    #[cfg(feature = "unstable_protocol_v2")]
    pub async fn connect_v2<C>(self, client: C) -> Result<(crate::v2::AgentHandle, RemoteAgent), ConnectError>
    where
        C: acp_types::v2::Client<crate::v2::ClientContext> + 'static,
    {
        let (opened, connection, (reader, writer)) = self.open().await?;
        let (peer, serve) = connection.v2_rules().serve(reader, writer, crate::v2::ClientHandler::new(client));
        let remote = opened.start(peer.clone(), serve);
        Ok((crate::v2::AgentHandle::new(peer), remote))
    }

    /// [`Remote::reconnect`] for protocol v2 (feature `unstable_protocol_v2`): connects and
    /// serves the v2 `client` ([`Remote::connect_v2`]), sends `initialize` (`init`, which
    /// should ask for version 2), then `session/resume` (`resume`). v2 has no `session/load`:
    /// `resume` with `replayFrom: {"type": "start"}` replays the history as `session/update`s,
    /// all handled by the time this returns; without `replayFrom` the session is re-attached
    /// without replay. An agent that advertises `capabilities.session` must support
    /// `session/resume` (v2 has no marker of its own for it).
    ///
    /// Fails with [`ReconnectError::Version`] when the agent answers another protocol
    /// version, and [`ReconnectError::Unsupported`] when it advertises no `capabilities.session`;
    /// the new connection is closed then. As with v1, give this `Remote` the old connection's
    /// cookie jar so that a sticky load balancer routes it to the process holding the session.
    #[cfg(feature = "unstable_protocol_v2")]
    pub async fn reconnect_v2<C>(
        self,
        client: C,
        init: acp_types::v2::InitializeRequest,
        resume: acp_types::v2::ResumeSessionRequest,
    ) -> Result<ReconnectedV2, ReconnectError>
    where
        C: acp_types::v2::Client<crate::v2::ClientContext> + 'static,
    {
        let (agent, remote) = self.connect_v2(client).await?;
        let call = |step: &'static str| move |source: Error| ReconnectError::Call { step, source };
        let init = agent.initialize(init).await.map_err(call("initialize"))?;
        if init.protocol_version != acp_types::v2::ProtocolVersion::V2 {
            return Err(ReconnectError::Version { answered: init.protocol_version.0 });
        }
        let has_sessions = init.capabilities.as_ref().is_some_and(|c| matches!(c.session, Some(Some(_))));
        if !has_sessions {
            return Err(ReconnectError::Unsupported);
        }
        let session = agent.resume_session(resume).await.map_err(call("session/resume"))?;
        Ok(ReconnectedV2 { agent, remote, init: Box::new(init), session: Box::new(session) })
    }

    /// Everything but the runtime connection: the URL checked, the WebSocket handshake done,
    /// the driver running.
    async fn open(self) -> Result<(Opened, Connection, (PipeReader, PipeWriter)), ConnectError> {
        let endpoint = Endpoint::parse(&self.url)?;
        let profile = endpoint.profile;
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let invalid = |reason: String| ConnectError::InvalidHeader { name: name.clone(), reason };
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|e| invalid(e.to_string()))?;
            let value = HeaderValue::from_str(value).map_err(|e| invalid(e.to_string()))?;
            headers.append(header, value);
        }
        let limits = Limits {
            request_timeout: self.request_timeout,
            close_timeout: self.close_timeout,
            idle_timeout: self.idle_timeout,
            max_message_bytes: self.max_message_bytes,
        };
        let status = Arc::new(Status::default());
        let (connection_end, driver_end) = duplex(PIPE_BYTES);
        let (driver_reads, driver_writes) = driver_end;
        let lines = read_lines(driver_reads);
        let (inbound, inbound_rx) = mpsc::channel(64);
        tokio::spawn(deliver(inbound_rx, driver_writes));
        let delivery = Delivery { inbound, status: status.clone() };
        match endpoint.profile {
            Profile::StreamableHttp => {
                let mut connector = HttpConnector::new();
                connector.set_connect_timeout(Some(self.connect_timeout));
                connector.set_nodelay(true);
                connector.set_keepalive(Some(KEEPALIVE_TIME));
                connector.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
                connector.set_keepalive_retries(Some(KEEPALIVE_RETRIES));
                #[cfg(feature = "http-tls")]
                let connector = {
                    let tls = if endpoint.tls {
                        let tls = tls::Tls::for_http(self.tls_config.as_deref(), self.connect_timeout);
                        Some(tls.map_err(|reason| ConnectError::Tls { server: endpoint.server.clone(), reason })?)
                    } else {
                        None
                    };
                    tls::HttpsConnector::new(connector, tls)
                };
                // Over TLS, ALPN decides.
                let h2c = self.h2c && !endpoint.tls;
                let client = || {
                    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                        .http2_only(h2c)
                        .build(connector.clone())
                };
                // Wherever HTTP/2 may be spoken (h2c, or TLS, where ALPN may pick it) the
                // streams get a pool of their own (see `Link::streams_http`). Over plain
                // HTTP/1.1 every request in flight has a TCP connection anyway, and one pool
                // keeps the keep-alive connections the POSTs warmed up for the streams.
                let http = client();
                let streams_http = if h2c || endpoint.tls { client() } else { http.clone() };
                let (commands, commands_rx) = mpsc::unbounded_channel();
                let link = Arc::new(Link {
                    endpoint,
                    http,
                    streams_http,
                    headers,
                    jar: self.jar.clone(),
                    limits,
                    delivery,
                    commands,
                    routes: Mutex::default(),
                });
                let driver = HttpDriver {
                    link,
                    held: VecDeque::new(),
                    streams: HashMap::new(),
                    reopening: HashMap::new(),
                    next_generation: 0,
                    ended: false,
                    gone: false,
                };
                tokio::spawn(driver.run(lines, commands_rx));
            }
            Profile::WebSocket => {
                #[cfg(feature = "http-tls")]
                let tls = if endpoint.tls {
                    let tls = tls::Tls::for_websocket(self.tls_config.as_deref(), self.connect_timeout);
                    Some(tls.map_err(|reason| ConnectError::Tls { server: endpoint.server.clone(), reason })?)
                } else {
                    None
                };
                let connect = Connect {
                    timeout: self.connect_timeout,
                    #[cfg(feature = "http-tls")]
                    tls,
                };
                let (socket, connection_id) = ws_handshake(&endpoint, &headers, &self.jar, connect, &limits).await?;
                if let Some(id) = connection_id {
                    status.set_connection_id(id);
                }
                tokio::spawn(run_websocket(socket, lines, delivery, limits));
            }
        }
        let opened = Opened { status, profile, jar: self.jar, close_timeout: self.close_timeout };
        Ok((opened, self.connection, connection_end))
    }
}

/// The transport, started, waiting for its connection.
struct Opened {
    status: Arc<Status>,
    profile: Profile,
    jar: CookieJar,
    close_timeout: Duration,
}

impl Opened {
    fn start(self, peer: Peer, serve: Serve) -> RemoteAgent {
        RemoteAgent {
            peer,
            serve: Some(tokio::spawn(serve)),
            status: self.status,
            profile: self.profile,
            jar: self.jar,
            close_timeout: self.close_timeout,
        }
    }
}

// ---- the live transport -----------------------------------------------------------------

/// A connection to a remote agent (from [`Remote`]): keep it as long as the agent is needed.
///
/// Dropping it ends the connection (pending calls fail with [`Error::ConnectionClosed`]); the
/// `DELETE` (or the WebSocket close) then goes out from a background task, bounded by
/// [`Remote::close_timeout`]. [`RemoteAgent::close`] does the same and waits for it. When the
/// server ends the connection, calls fail the same way and [`RemoteAgent::end_reason`] says
/// why.
#[derive(Debug)]
pub struct RemoteAgent {
    peer: Peer,
    serve: Option<tokio::task::JoinHandle<Result<(), Error>>>,
    status: Arc<Status>,
    profile: Profile,
    jar: CookieJar,
    close_timeout: Duration,
}

impl RemoteAgent {
    /// The profile in use (from the URL's scheme).
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The server's `Acp-Connection-Id`: over HTTP once `initialize` has been answered, over
    /// WebSocket from the handshake (if the server sent one).
    pub fn connection_id(&self) -> Option<String> {
        lock(&self.status.connection_id).clone()
    }

    /// The cookie jar of this connection (shared with the [`Remote::cookie_jar`] given).
    pub fn cookies(&self) -> &CookieJar {
        &self.jar
    }

    /// Why the transport ended the connection (e.g. `the connection stream ended`, `POST
    /// answered 404`), once it has; `None` while it runs, and when it was closed from our side.
    pub fn end_reason(&self) -> Option<String> {
        lock(&self.status.end_reason).clone()
    }

    /// Ends the connection and waits until it is done and the server has been told (`DELETE`
    /// or a WebSocket Close, within [`Remote::close_timeout`]). Returns what the connection
    /// returned (`Err` for a transport error).
    pub async fn close(mut self) -> Result<(), Error> {
        self.peer.close();
        let result = match self.serve.take() {
            Some(task) => task.await.unwrap_or(Ok(())),
            None => Ok(()),
        };
        let wait = self.close_timeout.saturating_add(Duration::from_secs(1));
        let _ = tokio::time::timeout(wait, self.status.finished.cancelled()).await;
        result
    }
}

impl Drop for RemoteAgent {
    fn drop(&mut self) {
        // The connection winds down within its grace period; the driver then sees the end of
        // its output and says goodbye to the server.
        self.peer.close();
    }
}

/// The raw transport to a remote agent, from [`Remote::transport`].
#[derive(Debug)]
pub struct RemoteTransport {
    /// The agent's messages, one per line.
    pub reader: PipeReader,
    /// Lines written here go to the agent; closing it ends the connection.
    pub writer: PipeWriter,
    status: Arc<Status>,
    profile: Profile,
}

impl RemoteTransport {
    /// The profile in use (from the URL's scheme).
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// A handle that outlives `reader` and `writer` (when they are moved out), to see how the
    /// transport ends.
    pub fn watch(&self) -> TransportWatch {
        TransportWatch { status: self.status.clone() }
    }
}

/// Watches a [`RemoteTransport`] whose ends went elsewhere.
#[derive(Clone, Debug)]
pub struct TransportWatch {
    status: Arc<Status>,
}

impl TransportWatch {
    /// Why the transport ended the connection, once it has (`None` while it runs, and when it
    /// was closed from our side).
    pub fn end_reason(&self) -> Option<String> {
        lock(&self.status.end_reason).clone()
    }

    /// Resolves when the transport is done (the server told, its streams dropped).
    pub async fn finished(&self) {
        self.status.finished.cancelled().await;
    }
}

/// What [`Remote::reconnect`] gives: the new connection, the agent's `initialize` answer, and
/// how the session came back.
#[derive(Debug)]
#[non_exhaustive]
pub struct Reconnected {
    /// The agent, on the new connection.
    pub agent: AgentHandle,
    /// The new connection.
    pub remote: RemoteAgent,
    /// The agent's answer to `initialize`.
    pub init: Box<InitializeResponse>,
    /// How the session was re-attached.
    pub session: Reattached,
}

/// How [`Remote::reconnect`] re-attached the session.
#[derive(Debug)]
#[non_exhaustive]
pub enum Reattached {
    /// With `session/load`: the history was replayed as `session/update`s.
    Loaded(Box<LoadSessionResponse>),
    /// With `session/resume`: no replay.
    Resumed(Box<ResumeSessionResponse>),
}

/// Why [`Remote::reconnect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReconnectError {
    /// No connection.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A call failed.
    #[error("{step}: {source}")]
    Call {
        /// `initialize`, `session/load` or `session/resume`.
        step: &'static str,
        /// The error.
        #[source]
        source: Error,
    },
    /// The agent cannot re-attach sessions: in v1 it advertises neither `loadSession` nor
    /// `sessionCapabilities.resume`; in v2 ([`Remote::reconnect_v2`]) it advertises no
    /// `capabilities.session`.
    #[error(
        "the agent can neither load nor resume sessions (it advertises neither `loadSession` nor \
         `sessionCapabilities.resume` in v1, no `capabilities.session` in v2)"
    )]
    Unsupported,
    /// [`Remote::reconnect_v2`]: the agent answered `initialize` with another protocol
    /// version than 2.
    #[error("the agent answered `initialize` with protocol version {answered}, not 2")]
    Version {
        /// The version it answered.
        answered: u16,
    },
}

/// What [`Remote::reconnect_v2`] gives (feature `unstable_protocol_v2`): the new connection,
/// the agent's `initialize` answer, and its `session/resume` answer.
#[cfg(feature = "unstable_protocol_v2")]
#[derive(Debug)]
#[non_exhaustive]
pub struct ReconnectedV2 {
    /// The agent, on the new connection.
    pub agent: crate::v2::AgentHandle,
    /// The new connection.
    pub remote: RemoteAgent,
    /// The agent's answer to `initialize`.
    pub init: Box<acp_types::v2::InitializeResponse>,
    /// The agent's answer to `session/resume`.
    pub session: Box<acp_types::v2::ResumeSessionResponse>,
}

/// What the driver tells the [`RemoteAgent`].
#[derive(Debug, Default)]
struct Status {
    connection_id: Mutex<Option<String>>,
    end_reason: Mutex<Option<String>>,
    /// Fires when the driver is done (the server told, streams dropped).
    finished: CancellationToken,
}

impl Status {
    fn set_connection_id(&self, id: String) {
        *lock(&self.connection_id) = Some(id);
    }

    fn set_end_reason(&self, reason: String) {
        lock(&self.end_reason).get_or_insert(reason);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The endpoint: the URL, checked.
#[derive(Debug)]
struct Endpoint {
    uri: Uri,
    profile: Profile,
    /// `host:port`, the cookie jar's key.
    server: String,
    /// The host to connect to (an IPv6 address without its brackets).
    host: String,
    port: u16,
    /// `https://` or `wss://`.
    tls: bool,
}

impl Endpoint {
    fn parse(url: &str) -> Result<Endpoint, ConnectError> {
        let invalid = |reason: &str| ConnectError::InvalidUrl { url: url.to_owned(), reason: reason.to_owned() };
        let uri: Uri = url.trim().parse().map_err(|e: hyper::http::uri::InvalidUri| invalid(&e.to_string()))?;
        let scheme = uri
            .scheme_str()
            .ok_or_else(|| invalid("no scheme: give the whole endpoint, e.g. http://127.0.0.1:8080/acp"))?
            .to_ascii_lowercase();
        let (profile, tls) = match scheme.as_str() {
            "http" => (Profile::StreamableHttp, false),
            "ws" => (Profile::WebSocket, false),
            #[cfg(feature = "http-tls")]
            "https" => (Profile::StreamableHttp, true),
            #[cfg(feature = "http-tls")]
            "wss" => (Profile::WebSocket, true),
            #[cfg(not(feature = "http-tls"))]
            "https" | "wss" => return Err(ConnectError::TlsNotBuiltIn { scheme }),
            _ => return Err(ConnectError::UnsupportedScheme { scheme }),
        };
        let host = uri.host().filter(|h| !h.is_empty()).ok_or_else(|| invalid("no host"))?.to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let server = format!("{host}:{port}");
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        Ok(Endpoint { uri, profile, server, host, port, tls })
    }
}

#[derive(Clone, Copy, Debug)]
struct Limits {
    request_timeout: Duration,
    close_timeout: Duration,
    idle_timeout: Option<Duration>,
    max_message_bytes: usize,
}

// ---- between the pipes and the driver ---------------------------------------------------

/// One message for the connection's input, or its end.
enum Inbound {
    Line(Vec<u8>),
    End,
}

/// Writes what the driver received into the connection's input, one line per message; ends
/// the input on [`Inbound::End`] (or once every sender is gone).
async fn deliver(mut inbound: mpsc::Receiver<Inbound>, mut input: PipeWriter) {
    while let Some(Inbound::Line(mut line)) = inbound.recv().await {
        line.push(b'\n');
        if input.write_all(&line).await.is_err() {
            break;
        }
    }
}

/// Reads the lines the connection writes (one message each).
fn read_lines(output: PipeReader) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut output = BufReader::new(output);
        loop {
            let mut line = Vec::new();
            match output.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                line.pop();
            }
            if !line.is_empty() && tx.send(line).await.is_err() {
                break;
            }
        }
    });
    rx
}

/// The way into the connection's input, and the status to report to.
struct Delivery {
    inbound: mpsc::Sender<Inbound>,
    status: Arc<Status>,
}

impl Delivery {
    /// Hands one message to the connection; `false` once it is gone.
    async fn line(&self, line: Vec<u8>) -> bool {
        self.inbound.send(Inbound::Line(line)).await.is_ok()
    }

    /// Ends the connection's input (pending calls fail), after what was handed over so far.
    async fn end(&self, reason: String) {
        let _ = self.inbound.send(self.ending(reason)).await;
    }

    /// The end of the input, its reason recorded.
    fn ending(&self, reason: String) -> Inbound {
        tracing::warn!(%reason, "acp http client: the connection ends");
        self.status.set_end_reason(reason);
        Inbound::End
    }
}

/// A -32603 answer to our request `id`, as if the server had sent it.
fn failure(id: &str, message: &str, data: Value) -> Inbound {
    let id: Value = serde_json::from_str(id).unwrap_or(Value::Null);
    let answer = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": codes::INTERNAL_ERROR, "message": message, "data": data },
    });
    Inbound::Line(serde_json::to_vec(&answer).unwrap_or_default())
}

/// Whether `message` is a JSON-RPC error response.
fn is_error_response(message: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Outcome<'a> {
        #[serde(borrow, default)]
        error: Option<&'a serde_json::value::RawValue>,
    }
    serde_json::from_slice::<Outcome<'_>>(message).is_ok_and(|o| o.error.is_some())
}

/// Whether a message is a request (it has a method and an id) and its id.
fn request_id(envelope: &Envelope) -> Option<&str> {
    envelope.method.as_ref().and(envelope.id.as_deref())
}

/// Reads a message received from the server; `None` (logged) when it is not a JSON object.
fn read_received(data: &[u8], source: &str) -> Option<Envelope> {
    let envelope = std::str::from_utf8(data).ok().and_then(Envelope::read);
    if envelope.is_none() {
        let start = String::from_utf8_lossy(&data[..data.len().min(120)]).into_owned();
        tracing::warn!(source, start, "acp http client: skipped a message that is not a JSON-RPC object");
    }
    envelope
}

// ---- Streamable HTTP --------------------------------------------------------------------

#[cfg(not(feature = "http-tls"))]
type HttpClient = hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>;
#[cfg(feature = "http-tls")]
type HttpClient = hyper_util::client::legacy::Client<tls::HttpsConnector, Full<Bytes>>;

/// What the driver and the stream readers share.
struct Link {
    endpoint: Endpoint,
    /// For POSTs and the DELETE.
    http: HttpClient,
    /// For the streams: wherever HTTP/2 may be spoken (h2c, and TLS, where ALPN may pick it), a
    /// pool of its own, so that the open streams never take the stream slots the POSTs need on
    /// the one TCP connection an HTTP/2 pool holds (a server allows a fixed number of streams
    /// at once per connection; 100 is common). Over plain HTTP/1.1, the same pool.
    streams_http: HttpClient,
    /// The configured extra headers.
    headers: HeaderMap,
    jar: CookieJar,
    limits: Limits,
    delivery: Delivery,
    /// To the driver (it alone opens streams).
    commands: mpsc::UnboundedSender<Command>,
    routes: Mutex<Routes>,
}

/// Which session the messages in flight belong to.
#[derive(Default)]
struct Routes {
    /// The agent's requests that came for a session (by id): our answers carry its header.
    agent_requests: HashMap<String, String>,
    /// Our requests awaiting an answer (by id), with their session, to fail them when the
    /// session's stream is lost. Only answers to these open or end session streams.
    ours: HashMap<String, OurRequest>,
    /// Sessions whose close (or delete) succeeded, from the moment its answer is read until
    /// the driver has taken note ([`Command::SessionEnded`]): a stream end the driver sees in
    /// between comes from the close, like one seen while the close is in flight.
    just_closed: std::collections::HashSet<String>,
}

struct OurRequest {
    session: Option<String>,
    /// `session/close` or `session/delete`: once it succeeds, the server forgets the session
    /// and ends its stream, which is then not reopened.
    ends_session: bool,
}

/// TCP keep-alive on every connection to the server: probes start after this long without
/// traffic, every [`KEEPALIVE_INTERVAL`], and [`KEEPALIVE_RETRIES`] unanswered ones end the
/// connection. So a server whose host or network is gone (no FIN, no reset) fails the calls
/// waiting on it within about a minute, while a live server that is quiet for hours (a model
/// thinking, no keep-alive event on a WebSocket) is not disturbed: its kernel answers.
const KEEPALIVE_TIME: std::time::Duration = std::time::Duration::from_secs(30);
const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
const KEEPALIVE_RETRIES: u32 = 3;

/// Turns on [`KEEPALIVE_TIME`]'s keep-alive on a WebSocket connection's socket (the HTTP
/// connector does the same for its own). A platform without the option keeps the socket as
/// it is.
fn keep_alive(tcp: &tokio::net::TcpStream) {
    let keepalive = socket2::TcpKeepalive::new().with_time(KEEPALIVE_TIME);
    // Where socket2 can set the probes' interval and count (elsewhere the system's apply).
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "windows"
    ))]
    let keepalive = keepalive.with_interval(KEEPALIVE_INTERVAL).with_retries(KEEPALIVE_RETRIES);
    if let Err(e) = socket2::SockRef::from(tcp).set_tcp_keepalive(&keepalive) {
        tracing::debug!(error = %e, "acp http client: no TCP keep-alive on the WebSocket");
    }
}

/// How long a closed session's stream is still read when the server does not end it.
const CLOSED_STREAM_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// A session stream that ends sooner than this after it was opened ended early: the next
/// reopening waits [`reopen_pause`]. One that lived longer was a normal stream, and resets it.
const STEADY_STREAM: std::time::Duration = std::time::Duration::from_secs(5);
/// The pause before the second reopening in a row of an early-ending stream (the first is at
/// once); it doubles with each further one, up to [`MAX_REOPEN_PAUSE`].
const FIRST_REOPEN_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);
const MAX_REOPEN_PAUSE: std::time::Duration = std::time::Duration::from_secs(5);

/// The pause before opening a session's stream again, after `early` streams of it in a row
/// ended early (this one included): none after the first, so a lone hiccup costs nothing; then
/// growing, so a server that ends the stream after every event is not asked again at once.
fn reopen_pause(early: u32) -> std::time::Duration {
    match early {
        0 | 1 => std::time::Duration::ZERO,
        n => FIRST_REOPEN_PAUSE.saturating_mul(1 << (n - 2).min(16)).min(MAX_REOPEN_PAUSE),
    }
}

enum Command {
    /// The answer to one of our requests named a session (`result.sessionId`): open its stream.
    OpenSession(String),
    /// Our `session/close` or `session/delete` of this session succeeded: its stream is read
    /// until the server ends it (the turn's last updates may follow the answer), and never
    /// reopened.
    SessionEnded(String),
    /// A closed session's stream that the server has not ended after [`CLOSED_STREAM_GRACE`]:
    /// dropped.
    DropClosed { session: String, generation: u64 },
    /// A stream ended.
    StreamEnded { session: Option<String>, generation: u64, delivered: bool, reason: String },
    /// The pause before reopening a session's stream (see [`reopen_pause`]) is over.
    Reopen(String),
    /// A session's stream ended while our `session/close` or `session/delete` of it was in
    /// flight, [`CLOSED_STREAM_GRACE`] ago: reopened if that request is still unanswered.
    ReopenIfStillClosing(String),
}

/// A POST's answer (the body possibly cut).
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
    complete: bool,
}

impl Answer {
    fn error_data(&self) -> Value {
        let end = self.body.len().min(ERROR_BODY_LIMIT);
        json!({ "status": self.status.as_u16(), "body": String::from_utf8_lossy(&self.body[..end]) })
    }
}

/// Why a request could not be made.
enum SendError {
    /// A header value we would send is not valid (e.g. a session id with a line break).
    Header(String),
    TimedOut(Duration),
    /// Connecting, sending or reading failed.
    Transport(String),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Header(why) => write!(f, "invalid header value: {why}"),
            SendError::TimedOut(after) => write!(f, "no answer within {after:?}"),
            SendError::Transport(why) => f.write_str(why),
        }
    }
}

/// Why a stream could not be opened.
enum OpenError {
    Send(SendError),
    Status { status: StatusCode, body: String },
    NotAnEventStream(String),
}

impl OpenError {
    fn data(&self) -> Value {
        match self {
            OpenError::Status { status, body } => json!({ "status": status.as_u16(), "body": body }),
            other => json!({ "error": other.to_string() }),
        }
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Send(e) => e.fmt(f),
            OpenError::Status { status, body } => write!(f, "answered {status}: {body}"),
            OpenError::NotAnEventStream(kind) => write!(f, "answered with `{kind}`, not an event stream"),
        }
    }
}

impl Link {
    /// A request to the endpoint with the transport's headers.
    fn request(
        &self,
        method: Method,
        connection: Option<&str>,
        session: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Result<Request<Full<Bytes>>, SendError> {
        let mut request = Request::new(body.map(|b| Full::new(Bytes::from(b))).unwrap_or_default());
        *request.method_mut() = method.clone();
        *request.uri_mut() = self.endpoint.uri.clone();
        let headers = request.headers_mut();
        headers.extend(self.headers.clone());
        let value = |v: &str| HeaderValue::from_str(v).map_err(|_| SendError::Header(format!("{v:?}")));
        if method == Method::POST {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        if method == Method::GET {
            headers.insert(ACCEPT, HeaderValue::from_static(EVENT_STREAM));
        }
        if let Some(connection) = connection {
            headers.insert(CONNECTION_ID_HEADER, value(connection)?);
        }
        if let Some(session) = session {
            headers.insert(SESSION_ID_HEADER, value(session)?);
        }
        if let Some(cookies) = self.jar.header_for(&self.endpoint.server) {
            headers.insert(COOKIE, value(&cookies)?);
        }
        Ok(request)
    }

    /// Sends `request`; keeps the cookies of the answer.
    async fn send(&self, request: Request<Full<Bytes>>) -> Result<Response<Incoming>, SendError> {
        let http = if request.method() == Method::GET { &self.streams_http } else { &self.http };
        let response = http.request(request).await.map_err(|e| SendError::Transport(describe_error(&e)))?;
        for value in response.headers().get_all(SET_COOKIE) {
            if let Ok(value) = value.to_str() {
                self.jar.store(&self.endpoint.server, value);
            }
        }
        Ok(response)
    }

    /// POSTs one message and reads the answer, its body up to `body_limit` bytes.
    async fn post(
        &self,
        message: Vec<u8>,
        connection: Option<&str>,
        session: Option<&str>,
        body_limit: usize,
    ) -> Result<Answer, SendError> {
        let request = self.request(Method::POST, connection, session, Some(message))?;
        let after = self.limits.request_timeout;
        let exchange = async {
            let (parts, body) = self.send(request).await?.into_parts();
            let (body, complete) =
                read_body(body, body_limit).await.map_err(|e| SendError::Transport(describe_error(&e)))?;
            Ok(Answer { status: parts.status, headers: parts.headers, body, complete })
        };
        tokio::time::timeout(after, exchange).await.unwrap_or(Err(SendError::TimedOut(after)))
    }

    /// Opens a stream (the connection's, or `session`'s) and returns its body once the
    /// response headers say it is one.
    async fn open_stream(&self, connection: &str, session: Option<&str>) -> Result<Incoming, OpenError> {
        let request = self.request(Method::GET, Some(connection), session, None).map_err(OpenError::Send)?;
        let after = self.limits.request_timeout;
        let response = tokio::time::timeout(after, self.send(request))
            .await
            .unwrap_or(Err(SendError::TimedOut(after)))
            .map_err(OpenError::Send)?;
        let (parts, body) = response.into_parts();
        if !parts.status.is_success() {
            let read = tokio::time::timeout(after, read_body(body, ERROR_BODY_LIMIT)).await;
            let body = match read {
                Ok(Ok((body, _))) => String::from_utf8_lossy(&body).into_owned(),
                _ => String::new(),
            };
            return Err(OpenError::Status { status: parts.status, body });
        }
        let kind = parts.headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !kind.to_ascii_lowercase().starts_with(EVENT_STREAM) {
            return Err(OpenError::NotAnEventStream(kind.to_owned()));
        }
        Ok(body)
    }

    /// Handles one message from a stream (`session`'s, or the connection's); `false` once the
    /// connection is gone.
    async fn receive(&self, data: Vec<u8>, session: Option<&str>) -> bool {
        let Some(envelope) = read_received(&data, "an SSE stream") else { return true };
        if envelope.method.is_none() {
            // Only an answer to a request of ours acts on streams: a server cannot make the
            // client open streams by naming sessions in answers to ids it never sent.
            let ours = envelope.id.as_ref().and_then(|id| {
                let mut routes = lock(&self.routes);
                let ours = routes.ours.remove(id)?;
                if let (true, false, Some(session)) = (ours.ends_session, envelope.is_error, &ours.session) {
                    routes.just_closed.insert(session.clone());
                }
                Some(ours)
            });
            if let Some(ours) = ours {
                if let Some(session) = envelope.result_session {
                    // Queued before the answer is handed over, so the stream is opened before
                    // anything the caller sends in reply is posted.
                    let _ = self.commands.send(Command::OpenSession(session));
                }
                match (ours.ends_session, envelope.is_error, ours.session) {
                    (true, false, Some(session)) => {
                        let _ = self.commands.send(Command::SessionEnded(session));
                    }
                    // The close failed: the session goes on, and needs its stream (which may
                    // have ended meanwhile, and was then not reopened).
                    (true, true, Some(session)) => {
                        let _ = self.commands.send(Command::OpenSession(session));
                    }
                    _ => {}
                }
            }
        } else if let Some(id) = request_id(&envelope) {
            if let Some(session) = envelope.params_session.as_deref().or(session) {
                lock(&self.routes).agent_requests.insert(id.to_owned(), session.to_owned());
            }
        }
        self.delivery.line(one_line(data)).await
    }

    /// Reads one stream until it ends, then tells the driver.
    async fn read_stream(self: Arc<Self>, mut body: Incoming, session: Option<String>, generation: u64) {
        let mut parser = sse::SseParser::new(self.limits.max_message_bytes);
        let mut events = Vec::new();
        let mut delivered = false;
        let reason = loop {
            let frame = match self.limits.idle_timeout {
                Some(limit) => match tokio::time::timeout(limit, body.frame()).await {
                    Ok(frame) => frame,
                    Err(_) => break format!("nothing received for {limit:?}"),
                },
                None => body.frame().await,
            };
            let data = match frame {
                None => break "the server ended it".to_owned(),
                Some(Err(e)) => break describe_error(&e),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
            };
            if let Err(e) = parser.feed(&data, &mut events) {
                break e.to_string();
            }
            for event in events.drain(..) {
                delivered = true;
                if !self.receive(event, session.as_deref()).await {
                    return;
                }
            }
        };
        let _ = self.commands.send(Command::StreamEnded { session, generation, delivered, reason });
    }
}

/// Reads `body` up to `limit` bytes; `false` when it was longer (the rest is left unread).
async fn read_body(mut body: Incoming, limit: usize) -> Result<(Vec<u8>, bool), hyper::Error> {
    let mut read = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if read.len() + data.len() > limit {
                read.extend_from_slice(&data[..limit - read.len()]);
                return Ok((read, false));
            }
            read.extend_from_slice(&data);
        }
    }
    Ok((read, true))
}

/// An error with its causes (hyper's own message is often just "client error (Connect)").
fn describe_error(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// An open stream, owned by the driver.
struct StreamSlot {
    generation: u64,
    /// This stream replaces one that ended without bringing anything since its own start.
    reopened: bool,
    /// Our `session/close` or `session/delete` of its session succeeded: not reopened.
    closed: bool,
    /// When it was opened, and how many streams of its session in a row before it ended early
    /// ([`STEADY_STREAM`]): what the pause before reopening it grows with.
    opened: std::time::Instant,
    early: u32,
    _reader: AbortOnDrop<()>,
}

/// Sends what the connection writes, one POST at a time, and manages the streams.
struct HttpDriver {
    link: Arc<Link>,
    /// What the driver itself hands to the connection (answers in POST bodies, failures, the
    /// end) while the input queue is full, in order. The driver never waits for room there:
    /// it is also what drains the connection's output, and a connection whose input is full
    /// may be waiting for its output to drain (to write its answers), so both would stop.
    held: VecDeque<Inbound>,
    /// By session; `None` is the connection stream.
    streams: HashMap<Option<String>, StreamSlot>,
    /// Sessions whose stream ended early and is to be opened again, with how many of its
    /// streams in a row ended early: waiting for [`Command::Reopen`] when there is a pause.
    /// Opening the stream for any reason takes the count over.
    reopening: HashMap<String, u32>,
    next_generation: u64,
    /// The connection's input has been ended.
    ended: bool,
    /// The server no longer knows the connection (404/410): no DELETE.
    gone: bool,
}

impl HttpDriver {
    async fn run(mut self, mut lines: mpsc::Receiver<Vec<u8>>, mut commands: mpsc::UnboundedReceiver<Command>) {
        loop {
            let inbound = self.link.delivery.inbound.clone();
            tokio::select! {
                biased;
                Ok(room) = inbound.reserve(), if !self.held.is_empty() => {
                    if let Some(item) = self.held.pop_front() {
                        room.send(item);
                    }
                }
                Some(command) = commands.recv() => self.command(command).await,
                line = lines.recv() => match line {
                    Some(line) => self.send(line).await,
                    None => break,
                },
            }
        }
        self.finish().await;
    }

    /// Hands `item` to the connection after what the driver handed over before, without
    /// waiting (see [`HttpDriver::held`]).
    fn hand_over(&mut self, item: Inbound) {
        let item = if self.held.is_empty() {
            match self.link.delivery.inbound.try_send(item) {
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => return,
                Err(mpsc::error::TrySendError::Full(item)) => item,
            }
        } else {
            item
        };
        self.held.push_back(item);
    }

    /// Answers our request `id` with a -32603 error, as if the server had.
    fn fail(&mut self, id: &str, message: &str, data: Value) {
        self.hand_over(failure(id, message, data));
    }

    fn connection_id(&self) -> Option<String> {
        lock(&self.link.delivery.status.connection_id).clone()
    }

    /// Sends one message the connection wrote.
    async fn send(&mut self, message: Vec<u8>) {
        let envelope = std::str::from_utf8(&message).ok().and_then(Envelope::read).unwrap_or_default();
        let request = request_id(&envelope).map(str::to_owned);
        if self.ended {
            return; // the connection is ending and fails its calls itself
        }
        let Some(connection) = self.connection_id() else {
            if envelope.method.as_deref() == Some(acp_types::agent_method::INITIALIZE) && request.is_some() {
                self.initialize(message, &envelope).await;
            } else if let Some(id) = request {
                let text = "over HTTP, `initialize` must come first: it creates the connection";
                self.fail(&id, text, json!({ "method": envelope.method }));
            } else {
                tracing::warn!(method = ?envelope.method, "acp http client: message before `initialize` dropped");
            }
            return;
        };
        let session = if envelope.method.is_none() {
            // Our answer to an agent request: the session it came for.
            envelope.id.as_ref().and_then(|id| lock(&self.link.routes).agent_requests.remove(id))
        } else {
            envelope.params_session.clone()
        };
        if envelope.method.is_some() {
            if let Some(session) = &session {
                self.in_use_again(session);
                if !self.streams.contains_key(&Some(session.clone())) {
                    if let Err(e) = self.open(&connection, Some(session.clone()), false).await {
                        if let Some(id) = &request {
                            let text = format!("cannot open the stream of session {session}: {e}");
                            self.fail(id, &text, e.data());
                            return;
                        }
                        tracing::warn!(%session, error = %e, "acp http client: cannot open a session stream");
                    }
                }
            }
        }
        if let Some(id) = &request {
            let ends_session = matches!(envelope.method.as_deref(), Some("session/close" | "session/delete"));
            lock(&self.link.routes).ours.insert(id.clone(), OurRequest { session: session.clone(), ends_session });
        }
        let answer = self.link.post(message, Some(&connection), session.as_deref(), ERROR_BODY_LIMIT).await;
        match answer {
            Ok(answer) if answer.status.is_success() => {}
            Ok(answer) => {
                let status = answer.status;
                let text = format!("the server answered the POST with HTTP {status}");
                let body = answer.body.trim_ascii();
                let null_id_error = Envelope::read(std::str::from_utf8(body).unwrap_or_default())
                    .is_some_and(|e| e.is_error && e.id.is_none() && e.method.is_none());
                if null_id_error && request.is_none() {
                    // The server's JSON-RPC answer to input that never reached the agent (a
                    // line that is not a message): handed over as the agent's answer would be.
                    self.hand_over(Inbound::Line(one_line(body.to_vec())));
                } else if let Some(id) = &request {
                    lock(&self.link.routes).ours.remove(id);
                    self.fail(id, &text, answer.error_data());
                } else {
                    tracing::warn!(method = ?envelope.method, %status, "acp http client: message refused");
                }
                match (status.as_u16(), &session) {
                    // It carried `Acp-Session-Id`. The RFD's routing answers a POST 404 for an
                    // unknown connection, but a GET 404 for an unknown session too, and servers
                    // built on MCP's transport answer POSTs so: ending the connection would end
                    // every other session for one the server forgot. A connection the server
                    // forgot ends its streams as well, which ends ours all the same.
                    (404, Some(session)) => {
                        let session = session.clone();
                        self.end_session(&session, &format!("the server answered a POST about it with {status}"));
                    }
                    (401 | 403 | 404 | 410, _) => {
                        self.gone = matches!(status.as_u16(), 404 | 410);
                        self.end(format!("a POST was answered {status}"));
                    }
                    _ => {}
                }
            }
            Err(e) => {
                if let Some(id) = &request {
                    lock(&self.link.routes).ours.remove(id);
                    let text = format!("the POST failed: {e}");
                    self.fail(id, &text, json!({ "error": e.to_string() }));
                }
                match e {
                    SendError::TimedOut(_) | SendError::Header(_) => {
                        tracing::warn!(method = ?envelope.method, error = %e, "acp http client: POST failed");
                    }
                    SendError::Transport(_) => self.end(format!("a POST failed: {e}")),
                }
            }
        }
    }

    /// POSTs `initialize`: its answer comes in the POST's own body, with the connection id.
    async fn initialize(&mut self, message: Vec<u8>, envelope: &Envelope) {
        let id = envelope.id.clone().unwrap_or_default();
        let answer = match self.link.post(message, None, None, self.link.limits.max_message_bytes).await {
            Ok(answer) => answer,
            Err(e) => {
                let text = format!("cannot reach the server: {e}");
                return self.fail(&id, &text, json!({ "error": e.to_string() }));
            }
        };
        if !answer.status.is_success() {
            let status = answer.status;
            let text = format!("the server answered `initialize` with HTTP {status}");
            self.fail(&id, &text, answer.error_data());
            if matches!(status.as_u16(), 401 | 403 | 404 | 410) {
                self.end(format!("`initialize` was answered {status}"));
            }
            return;
        }
        if !answer.complete {
            let limit = self.link.limits.max_message_bytes;
            let text = format!("the answer to `initialize` is larger than {limit} bytes");
            return self.fail(&id, &text, json!({ "status": answer.status.as_u16() }));
        }
        let body = answer.body.trim_ascii().to_vec();
        let response = std::str::from_utf8(&body).ok().and_then(Envelope::read);
        let is_ours = response.as_ref().is_some_and(|r| r.method.is_none() && r.id.as_deref() == Some(&id));
        if !is_ours {
            let text = "the server's answer to `initialize` is not its JSON-RPC response";
            return self.fail(&id, text, answer.error_data());
        }
        let connection = answer.headers.get(CONNECTION_ID_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let Some(connection) = connection else {
            if !is_error_response(&body) {
                let text = "the server answered `initialize` without an `Acp-Connection-Id` header";
                return self.fail(&id, text, answer.error_data());
            }
            // A JSON-RPC error: no connection; `initialize` may be tried again.
            return self.hand_over(Inbound::Line(one_line(body)));
        };
        lock(&self.link.delivery.status.connection_id).replace(connection.clone());
        // The connection stream before the answer: whatever the caller sends next goes out
        // with the stream in place, and a server that refuses it fails `initialize` itself.
        if let Err(e) = self.open(&connection, None, false).await {
            let text = format!("cannot open the connection stream: {e}");
            self.fail(&id, &text, e.data());
            self.end(format!("the connection stream could not be opened: {e}"));
            return;
        }
        self.hand_over(Inbound::Line(one_line(body)));
    }

    /// Opens a stream and starts reading it.
    async fn open(&mut self, connection: &str, session: Option<String>, reopened: bool) -> Result<(), OpenError> {
        let early = session.as_ref().and_then(|s| self.reopening.remove(s)).unwrap_or(0);
        let body = self.link.open_stream(connection, session.as_deref()).await?;
        self.next_generation += 1;
        let generation = self.next_generation;
        let reader = AbortOnDrop::spawn(self.link.clone().read_stream(body, session.clone(), generation));
        let opened = std::time::Instant::now();
        let slot = StreamSlot { generation, reopened, closed: false, opened, early, _reader: reader };
        self.streams.insert(session, slot);
        Ok(())
    }

    async fn command(&mut self, command: Command) {
        if self.ended {
            return;
        }
        let Some(connection) = self.connection_id() else { return };
        match command {
            Command::OpenSession(session) => {
                self.in_use_again(&session);
                if !self.streams.contains_key(&Some(session.clone())) {
                    if let Err(e) = self.open(&connection, Some(session.clone()), false).await {
                        tracing::warn!(%session, error = %e, "acp http client: cannot open a session stream");
                    }
                }
            }
            Command::SessionEnded(session) => {
                lock(&self.link.routes).just_closed.remove(&session);
                self.reopening.remove(&session);
                if let Some(slot) = self.streams.get_mut(&Some(session.clone())) {
                    slot.closed = true;
                    let (commands, generation) = (self.link.commands.clone(), slot.generation);
                    tokio::spawn(async move {
                        tokio::time::sleep(CLOSED_STREAM_GRACE).await;
                        let _ = commands.send(Command::DropClosed { session, generation });
                    });
                }
            }
            Command::DropClosed { session, generation } => {
                let session = Some(session);
                if self.streams.get(&session).is_some_and(|slot| slot.closed && slot.generation == generation) {
                    // Dropping the slot stops its reader.
                    self.streams.remove(&session);
                }
            }
            Command::StreamEnded { session, generation, delivered, reason } => {
                let current = self.streams.get(&session).is_some_and(|slot| slot.generation == generation);
                if !current {
                    return;
                }
                let slot = self.streams.remove(&session);
                if slot.as_ref().is_some_and(|slot| slot.closed) {
                    return;
                }
                let Some(session) = session else {
                    return self.end(format!("the connection stream ended: {reason}"));
                };
                if self.closing(&session) {
                    return self.reopen_if_still_closing_later(session);
                }
                let Some(slot) = slot else { return };
                if slot.reopened && !delivered {
                    return self.fail_session(&session, &format!("its stream ended twice: {reason}"));
                }
                let early = if slot.opened.elapsed() < STEADY_STREAM { slot.early.saturating_add(1) } else { 1 };
                self.reopening.insert(session.clone(), early);
                let pause = reopen_pause(early);
                tracing::debug!(%session, %reason, ?pause, "acp http client: session stream ended; reopening it");
                if !pause.is_zero() {
                    let commands = self.link.commands.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(pause).await;
                        let _ = commands.send(Command::Reopen(session));
                    });
                    return;
                }
                if let Err(e) = self.open(&connection, Some(session.clone()), true).await {
                    self.fail_session(&session, &format!("its stream ended ({reason}) and cannot be reopened: {e}"));
                }
            }
            Command::Reopen(session) => {
                // Not when something opened the stream meanwhile (a message of ours naming the
                // session), or the session ended (its close succeeded, a 404, a failure).
                if !self.reopening.contains_key(&session) || self.streams.contains_key(&Some(session.clone())) {
                    return;
                }
                if self.closing(&session) {
                    self.reopening.remove(&session);
                    return self.reopen_if_still_closing_later(session);
                }
                if let Err(e) = self.open(&connection, Some(session.clone()), true).await {
                    self.fail_session(&session, &format!("its stream ended and cannot be reopened: {e}"));
                }
            }
            Command::ReopenIfStillClosing(session) => {
                if !self.closing(&session) || self.streams.contains_key(&Some(session.clone())) {
                    return;
                }
                tracing::debug!(%session, "acp http client: no answer to the close of a session whose stream ended; reopening it");
                if let Err(e) = self.open(&connection, Some(session.clone()), true).await {
                    self.fail_session(&session, &format!("its stream ended and cannot be reopened: {e}"));
                }
            }
        }
    }

    /// `session`'s stream ended while our close of it is in flight: the close ended it, and its
    /// answer may come on the connection's stream after this. Not reopened (the server no longer
    /// has the session), unless the answer does not come within [`CLOSED_STREAM_GRACE`].
    fn reopen_if_still_closing_later(&self, session: String) {
        let commands = self.link.commands.clone();
        tokio::spawn(async move {
            tokio::time::sleep(CLOSED_STREAM_GRACE).await;
            let _ = commands.send(Command::ReopenIfStillClosing(session));
        });
    }

    /// Whether our `session/close` or `session/delete` of `session` is in flight (or its success
    /// not yet taken note of).
    fn closing(&self, session: &str) -> bool {
        let routes = lock(&self.link.routes);
        routes.just_closed.contains(session)
            || routes.ours.values().any(|r| r.ends_session && r.session.as_deref() == Some(session))
    }

    /// A message of ours names `session` again (e.g. `session/load` right after its close): a
    /// stream still read after the close is the session's stream again, not dropped.
    fn in_use_again(&mut self, session: &str) {
        if let Some(slot) = self.streams.get_mut(&Some(session.to_owned())) {
            slot.closed = false;
        }
    }

    /// The server no longer knows `session` (it answered a POST about it 404): its stream is
    /// dropped and its pending requests fail; the connection and its other sessions go on. A
    /// later message naming the session opens its stream again.
    fn end_session(&mut self, session: &str, reason: &str) {
        self.streams.remove(&Some(session.to_owned()));
        self.fail_session(session, reason);
    }

    /// Fails our pending requests of `session` (and forgets a reopening of its stream waiting
    /// for its pause).
    fn fail_session(&mut self, session: &str, reason: &str) {
        self.reopening.remove(session);
        let failed: Vec<String> = {
            let mut routes = lock(&self.link.routes);
            let ids: Vec<String> = routes
                .ours
                .iter()
                .filter(|(_, r)| r.session.as_deref() == Some(session))
                .map(|(id, _)| id.clone())
                .collect();
            for id in &ids {
                routes.ours.remove(id);
            }
            ids
        };
        tracing::warn!(%session, %reason, failed = failed.len(), "acp http client: session stream lost");
        let text = format!("session {session} is unreachable: {reason}");
        for id in failed {
            self.fail(&id, &text, json!({ "sessionId": session, "reason": reason }));
        }
    }

    /// Ends the connection's input (pending calls fail); nothing is sent any more.
    fn end(&mut self, reason: String) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.streams.clear();
        self.reopening.clear();
        let end = self.link.delivery.ending(reason);
        self.hand_over(end);
    }

    /// The connection is done: tell the server, drop the streams.
    async fn finish(mut self) {
        let connection = self.connection_id();
        if let (Some(connection), false) = (connection, self.gone) {
            let link = &self.link;
            let delete = async {
                let request = link.request(Method::DELETE, Some(&connection), None, None)?;
                let response = link.send(request).await?;
                Ok::<_, SendError>(response.status())
            };
            match tokio::time::timeout(link.limits.close_timeout, delete).await {
                Ok(Ok(status)) => tracing::debug!(%status, "acp http client: DELETE answered"),
                Ok(Err(e)) => tracing::debug!(error = %e, "acp http client: DELETE failed"),
                Err(_) => tracing::debug!("acp http client: DELETE timed out"),
            }
        }
        self.streams.clear();
        self.link.delivery.status.finished.cancel();
    }
}

// ---- WebSocket --------------------------------------------------------------------------

#[cfg(not(feature = "http-tls"))]
type Socket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;
#[cfg(feature = "http-tls")]
type Socket = tokio_tungstenite::WebSocketStream<tls::MaybeTls>;

/// How the WebSocket's connection is made.
struct Connect {
    /// For the TCP connection (and the TLS handshake, each).
    timeout: Duration,
    /// `wss://`: the TLS settings.
    #[cfg(feature = "http-tls")]
    tls: Option<tls::Tls>,
}

/// Connects (TCP, then TLS for `wss://`) and upgrades; returns the socket and the server's
/// `Acp-Connection-Id`.
async fn ws_handshake(
    endpoint: &Endpoint,
    headers: &HeaderMap,
    jar: &CookieJar,
    connect: Connect,
    limits: &Limits,
) -> Result<(Socket, Option<String>), ConnectError> {
    let server = endpoint.server.clone();
    let connect_timeout = connect.timeout;
    let tcp =
        tokio::time::timeout(connect_timeout, tokio::net::TcpStream::connect((endpoint.host.as_str(), endpoint.port)))
            .await
            .map_err(|_| ConnectError::Timeout { server: server.clone(), after: connect_timeout })?
            .map_err(|source| ConnectError::Io { server: server.clone(), source })?;
    let _ = tcp.set_nodelay(true);
    keep_alive(&tcp);
    #[cfg(feature = "http-tls")]
    let tcp = match &connect.tls {
        None => tls::MaybeTls::Plain(tcp),
        Some(tls) => match tls.handshake(&endpoint.host, tcp).await {
            Ok(stream) => tls::MaybeTls::Tls(Box::new(stream)),
            Err(e) => return Err(ConnectError::Tls { server, reason: e.to_string() }),
        },
    };
    let mut request =
        endpoint.uri.clone().into_client_request().map_err(|e| ConnectError::Handshake(describe_error(&e)))?;
    request.headers_mut().extend(headers.clone());
    if let Some(cookies) = jar.header_for(&server) {
        let value = HeaderValue::from_str(&cookies).map_err(|e| ConnectError::Handshake(e.to_string()))?;
        request.headers_mut().insert(COOKIE, value);
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(limits.max_message_bytes))
        .max_frame_size(Some(limits.max_message_bytes));
    let handshake = tokio_tungstenite::client_async_with_config(request, tcp, Some(config));
    let (socket, response) = match tokio::time::timeout(limits.request_timeout, handshake).await {
        Err(_) => return Err(ConnectError::Timeout { server, after: limits.request_timeout }),
        Ok(Ok(done)) => done,
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
            for value in response.headers().get_all(SET_COOKIE) {
                if let Ok(value) = value.to_str() {
                    jar.store(&server, value);
                }
            }
            let body = response.body().as_deref().unwrap_or_default();
            let end = body.len().min(ERROR_BODY_LIMIT);
            let body = String::from_utf8_lossy(&body[..end]).into_owned();
            return Err(ConnectError::Refused { status: response.status().as_u16(), body });
        }
        Ok(Err(e)) => return Err(ConnectError::Handshake(describe_error(&e))),
    };
    for value in response.headers().get_all(SET_COOKIE) {
        if let Ok(value) = value.to_str() {
            jar.store(&server, value);
        }
    }
    let connection_id = response.headers().get(CONNECTION_ID_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    Ok((socket, connection_id))
}

/// Carries the WebSocket both ways: its frames to the connection, and the connection's output
/// as frames. The two directions run side by side and never wait on each other. A loop that
/// waited to send while it read nothing, or to hand a frame over while it took no output,
/// stopped for good once the server did the same, or once the connection had to answer what
/// it was handed (its answers drain only through here).
async fn run_websocket(socket: Socket, mut lines: mpsc::Receiver<Vec<u8>>, delivery: Delivery, limits: Limits) {
    let (mut sink, mut stream) = socket.split();
    let outgoing = async {
        while let Some(line) = lines.recv().await {
            // What is waiting goes out in one flush.
            let mut next = Some(line);
            while let Some(line) = next {
                let text = String::from_utf8_lossy(&line).into_owned();
                if let Err(e) = sink.feed(Message::text(text)).await {
                    return Some(format!("cannot send on the WebSocket: {}", describe_error(&e)));
                }
                next = lines.try_recv().ok();
            }
            if let Err(e) = sink.flush().await {
                return Some(format!("cannot send on the WebSocket: {}", describe_error(&e)));
            }
        }
        // The connection ended: no reason to report.
        None
    };
    let incoming = async {
        // Far enough to never fire when there is no idle limit.
        let idle_limit = limits.idle_timeout.unwrap_or(Duration::from_secs(86_400 * 365));
        loop {
            let frame = tokio::select! {
                frame = stream.next() => frame,
                () = tokio::time::sleep(idle_limit) => return Some(format!("nothing received for {idle_limit:?}")),
            };
            match frame {
                None => return Some("the server closed the socket".to_owned()),
                Some(Err(e)) => return Some(format!("WebSocket error: {}", describe_error(&e))),
                Some(Ok(Message::Text(text))) => {
                    let data = text.as_bytes();
                    // A WebSocket carries JSON-RPC as stdio does, batches included (a v2
                    // agent answers a batch with an array): the connection judges arrays.
                    let batch = data.trim_ascii_start().starts_with(b"[");
                    if (batch || read_received(data, "a WebSocket frame").is_some())
                        && !delivery.line(one_line(data.to_vec())).await
                    {
                        return None;
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    let why = frame.map_or_else(String::new, |f| format!(" ({} {})", u16::from(f.code), f.reason));
                    return Some(format!("the server closed the WebSocket{why}"));
                }
                // Binary frames are ignored (the RFD says so); tungstenite answers pings.
                Some(Ok(_)) => {}
            }
        }
    };
    let ended = tokio::select! {
        ended = outgoing => ended,
        ended = incoming => ended,
    };
    if let Some(reason) = ended {
        delivery.end(reason).await;
    }
    // Our Close, and the server's in return, within the close timeout.
    let goodbye = async {
        let _ = sink.close().await;
        while let Some(Ok(_)) = stream.next().await {}
    };
    let _ = tokio::time::timeout(limits.close_timeout, goodbye).await;
    delivery.status.finished.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_before_reopening_a_stream_grows_to_its_bound() {
        let pauses: Vec<u64> = (0..9).map(|early| reopen_pause(early).as_millis() as u64).collect();
        assert_eq!(pauses, [0, 0, 250, 500, 1000, 2000, 4000, 5000, 5000]);
        assert_eq!(reopen_pause(u32::MAX), MAX_REOPEN_PAUSE);
    }

    #[test]
    fn tls_schemes_need_the_tls_feature() {
        let http = Endpoint::parse("http://127.0.0.1:8080/acp").expect("http");
        assert_eq!(
            (http.profile, http.tls, http.port, http.server.as_str()),
            (Profile::StreamableHttp, false, 8080, "127.0.0.1:8080")
        );
        #[cfg(feature = "http-tls")]
        {
            let https = Endpoint::parse("https://Agents.Example/acp").expect("https");
            assert_eq!((https.profile, https.tls, https.port), (Profile::StreamableHttp, true, 443));
            assert_eq!((https.host.as_str(), https.server.as_str()), ("agents.example", "agents.example:443"));
            let wss = Endpoint::parse("wss://[::1]:9443/acp").expect("wss");
            assert_eq!((wss.profile, wss.tls, wss.port, wss.host.as_str()), (Profile::WebSocket, true, 9443, "::1"));
        }
        #[cfg(not(feature = "http-tls"))]
        for url in ["https://agents.example/acp", "wss://agents.example/acp"] {
            let error = Endpoint::parse(url).expect_err("no TLS in this build");
            assert!(matches!(error, ConnectError::TlsNotBuiltIn { .. }), "{error:?}");
            assert!(error.to_string().contains("turn on its `http-tls` feature"), "{error}");
        }
    }
}
