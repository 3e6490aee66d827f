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
mod delivery;
mod live;
mod sse;
mod streamable;
#[cfg(feature = "http-tls")]
mod tls;
mod websocket;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_types::{Client, InitializeRequest, LoadSessionRequest, ResumeSessionRequest};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc;

pub use cookies::CookieJar;
/// rustls, for building the [`Remote::tls_config`] configuration (feature `http-tls`).
/// Its version (0.23) is part of this API: a major release of rustls is one of this module.
#[cfg(feature = "http-tls")]
pub use tokio_rustls::rustls;

use crate::client::{AgentHandle, ClientContext};
use crate::core::connection::{Connection, Serve};
use crate::core::error::Error;
use crate::core::framing::DEFAULT_MAX_LINE_BYTES;
use crate::core::handler::Handler;
use crate::core::peer::Peer;
use crate::core::transport::{PipeReader, PipeWriter, duplex};

/// How much of an error answer's body goes into the JSON-RPC error's `data`.
const ERROR_BODY_LIMIT: usize = 4096;
/// The in-memory pipes between the connection and the driver, per direction.
const PIPE_BYTES: usize = 64 * 1024;

#[cfg(feature = "unstable_protocol_v2")]
pub use live::ReconnectedV2;
pub use live::{Reattached, ReconnectError, Reconnected, RemoteAgent, RemoteTransport, TransportWatch};

use delivery::{Delivery, deliver, read_lines};
use live::{Endpoint, Limits, Status};
use streamable::{HttpDriver, KEEPALIVE_INTERVAL, KEEPALIVE_RETRIES, KEEPALIVE_TIME, Link};
use websocket::{Connect, run_websocket, ws_handshake};

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
