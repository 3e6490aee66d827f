//! The server side of the remote transport: [`HttpServer`] serves any [`Handler`] (an
//! `#[acp_agent]` impl through [`HttpServer::agent`], a `ProtocolRouter` serving v1 and v2,
//! a raw handler) to remote clients over Streamable HTTP and WebSocket on one endpoint,
//! HTTP/1.1 and h2c (HTTP/2 with prior knowledge) on the same port.
//!
//! Owns: the endpoint's routing table, one runtime [`Connection`] per ACP connection (over
//! in-memory pipes, so ordering, cancellation and backpressure are exactly stdio's), the
//! per-stream outboxes that carry the agent's output to SSE readers, and the limits.
//!
//! # Routing
//!
//! | request | answer |
//! |---|---|
//! | a `Host` the server does not answer for ([`ServerOptions::allowed_hosts`]; by default only loopback names on a loopback address) | 403 |
//! | any method, a path other than [`ServerOptions::path`] | 404 |
//! | `Origin` not in [`ServerOptions::allowed_origins`] | 403 (browsers only send `Origin`; none is allowed by default) |
//! | the [`HttpServer::authenticate`] (or [`HttpServer::identify`]) hook refuses | its status (401 / 403) |
//! | `POST`, `Content-Type` not `application/json` | 415 |
//! | `POST`, body over [`ServerOptions::max_body_bytes`] | 413 |
//! | `POST`, a body whose bytes do not fit in what is left of [`ServerOptions::max_body_bytes_in_flight`] | 503 with `Retry-After: 1` |
//! | `POST`, body not JSON | 400 with a JSON-RPC -32700 body |
//! | `POST`, a batch (JSON array) | 501 with a JSON-RPC -32600 body (the RFD's answer) |
//! | `POST`, JSON that is not a message object | 400 with a JSON-RPC -32600 body |
//! | `POST` `initialize` without `Acp-Connection-Id` | a new connection; 200 with the agent's answer and `Acp-Connection-Id` (429 beyond [`ServerOptions::max_connections`]; 502 when the agent ends first, 504 when it does not answer within [`ServerOptions::initialize_timeout`]) |
//! | `POST` `initialize` with `Acp-Connection-Id` | 400 |
//! | `POST`, anything else without `Acp-Connection-Id` | 400 |
//! | `POST`, unknown `Acp-Connection-Id`, or another principal's | 404 |
//! | `POST`, a session's request or notification without `Acp-Session-Id` | 400 |
//! | `POST`, `Acp-Session-Id` ≠ `params.sessionId` | 400 |
//! | `POST`, a request id already in flight on the connection | 409 |
//! | `POST` `session/new` beyond [`ServerOptions::max_sessions_per_connection`] | 429 |
//! | `POST`, otherwise | 202; the answer comes on a stream |
//! | `GET`, `Upgrade: websocket` | 101 and a new connection on the socket (`Acp-Connection-Id` in the 101); 400 without `Sec-WebSocket-Key`, 426 unless `Sec-WebSocket-Version: 13`, 429 beyond [`ServerOptions::max_connections`] |
//! | `GET`, `Accept` without `text/event-stream` | 406 |
//! | `GET`, no / unknown (or another principal's) `Acp-Connection-Id` | 400 / 404 |
//! | `GET`, a stream that already has a reader | 409 |
//! | `GET`, `Acp-Session-Id` not known yet | a provisional stream (the RFD's re-attach flow opens it before `session/load`), at most [`ServerOptions::max_provisional_sessions`] open at once, then 404; one closed before anything named its session is forgotten |
//! | `GET`, otherwise | 200, `text/event-stream` |
//! | `DELETE`, no / unknown (or another principal's) `Acp-Connection-Id` | 400 / 404 |
//! | `DELETE` | 202; the connection ends, its streams close |
//! | `OPTIONS` | a CORS preflight: 204 for an allowed origin, else 403 |
//! | other methods | 405 with `Allow` |
//! | an `Acp-Connection-Id` / `Acp-Session-Id` longer than [`ServerOptions::max_id_bytes`] | 400 |
//! | a first request (any protocol) or an HTTP/1.1 request head not complete within [`ServerOptions::header_read_timeout`] | the socket is closed |
//! | `POST`, a body not complete within [`ServerOptions::body_read_timeout`] | 408 |
//! | sockets beyond [`ServerOptions::max_sockets`] | the oldest socket that has had no request served yet (silent, slow, or only refused: 401, 404, ...) is closed to make room; with none, new ones wait in the system's listen queue until one closes |
//! | a socket from a peer that already holds [`ServerOptions::max_sockets_per_peer`] | closed as soon as it is accepted, unread |
//!
//! # Limits
//!
//! Every stage of a connection has a deadline and every resource a bound; each is a
//! [`ServerOptions`] field (tests shorten them):
//!
//! | limit | default | beyond it |
//! |---|---|---|
//! | [`header_read_timeout`](ServerOptions::header_read_timeout): the first request's head after connecting (the HTTP/2 preface included), each HTTP/1.1 head, the next one on a kept-alive socket | 30 s | the socket is closed |
//! | [`body_read_timeout`](ServerOptions::body_read_timeout): a POST's body | 30 s | 408 |
//! | [`max_body_bytes`](ServerOptions::max_body_bytes) | 16 MiB | 413 (at once when `Content-Length` says so) |
//! | [`max_body_bytes_in_flight`](ServerOptions::max_body_bytes_in_flight): bytes of bodies received and not yet handed to the agent, all connections (counted as they arrive, not as declared) | 64 MiB | 503 with `Retry-After: 1` for the body whose bytes do not fit |
//! | [`max_sockets`](ServerOptions::max_sockets): sockets served at once, a WebSocket's included | 4096 | the oldest socket with no request served is closed; with none, new ones wait |
//! | [`max_sockets_per_peer`](ServerOptions::max_sockets_per_peer): sockets of one IPv4 address or IPv6 /64 | 256; loopback not counted unless [`limit_loopback_peers`](ServerOptions::limit_loopback_peers) | the new socket is closed, unread |
//! | [`max_connections`](ServerOptions::max_connections): ACP connections (both profiles) | 1024 | the one unused the longest is closed (HTTP: nothing after its `initialize`; WebSocket: no message after its first, closed 1013); with none, 429 |
//! | [`initialize_timeout`](ServerOptions::initialize_timeout): the agent's `initialize` answer | 30 s | 504 |
//! | [`idle_timeout`](ServerOptions::idle_timeout): no stream attached and no POST | 5 min | the connection is closed |
//! | [`max_sessions_per_connection`](ServerOptions::max_sessions_per_connection) | 256 | 429 |
//! | [`max_provisional_sessions`](ServerOptions::max_provisional_sessions) | 16 | 404 |
//! | [`max_buffered_bytes`](ServerOptions::max_buffered_bytes) per stream, then [`output_stall`](ServerOptions::output_stall) | 16 MiB, 60 s | the agent's sends wait; then the connection is closed (a WebSocket's too, when its client reads nothing for `output_stall`) |
//! | [`max_id_bytes`](ServerOptions::max_id_bytes) | 256 B | 400 |
//! | [`max_ws_message_bytes`](ServerOptions::max_ws_message_bytes) (a WebSocket's write buffer holds one such message and 32 KiB, pongs included: beyond, the waiting pong is replaced by the next) | 16 MiB | close 1009 |
//! | [`keep_alive`](ServerOptions::keep_alive): SSE comments, WebSocket and HTTP/2 pings | 15 s | a WebSocket silent for 3 intervals is closed (1001) |
//! | [`allowed_origins`](ServerOptions::allowed_origins), [`allowed_hosts`](ServerOptions::allowed_hosts) | none; loopback names on a loopback address | 403 |
//!
//! # Streams
//!
//! The agent's output is routed by [`Envelope`](super::Envelope): the answer to a POSTed request goes to the
//! stream of that POST's session (`Acp-Session-Id`), except `session/new` and `session/load`,
//! whose answers go to the connection stream (the client may have no session stream yet);
//! the agent's own requests and notifications go to the stream of their `params.sessionId`,
//! or to the connection stream. A session becomes known when the agent answers with its id
//! (`result.sessionId`), when a POST names it, or when the agent sends something about it.
//!
//! What the agent sends to a stream with no reader waits in that stream's outbox and is
//! delivered when a reader attaches; an outbox keeps its messages when its reader goes. Past
//! [`ServerOptions::max_buffered_bytes`] in one outbox the connection is slowed down (the
//! agent's sends wait, as on a full pipe), and if nothing is read for
//! [`ServerOptions::output_stall`] the connection is closed. As the RFD says for v1, nothing
//! is replayed across connections: a connection that ends drops its outboxes, and a client
//! re-attaches to a session with `session/load` on a new connection, which the agent serves
//! (sessions outlive connections when the agent keeps them outside the per-connection value
//! the factory makes). A successful `session/close` or `session/delete` is answered on the
//! connection stream and ends the session's stream (after what it still holds); an answer to
//! one of the session's requests that comes after that goes to the connection stream.
//!
//! A connection ends on `DELETE`, when its agent ends, when it has had no stream attached and
//! no POST for [`ServerOptions::idle_timeout`], or when its WebSocket closes. Its runtime
//! connection then sees end of input, so every call the agent has pending on the client is
//! answered with an error: nothing waits forever.
//!
//! # Who is asking
//!
//! Each ACP connection has an [`Owner`], which its agent reads
//! (`cx.owner()`) to keep each owner's sessions apart
//! ([`SessionStore`](crate::sessions::SessionStore)): the principal the [`HttpServer::identify`]
//! hook names (every connection of one principal shares its sessions, so a client can re-attach
//! on a new connection), or, without such a hook, an anonymous owner of that connection alone.
//! A request on a connection is served only for the connection's principal: another
//! principal's request gets the 404 of an unknown connection.
//!
//! Places go first to those who got further: a socket keeps its place among
//! [`ServerOptions::max_sockets`] only once a request of its passed every check (the hook's
//! included) and was answered with success; until then it is the first closed when a new
//! socket needs room, so clients without credentials cannot keep out those with them. An ACP
//! connection unused since it opened is the first closed at
//! [`ServerOptions::max_connections`]. No peer holds more than
//! [`ServerOptions::max_sockets_per_peer`] sockets; loopback peers are not counted by
//! default, since behind a reverse proxy on the same host every client comes from loopback
//! (such a proxy must then limit its clients itself).
//!
//! Keep-alive: an idle SSE stream gets a `:` comment every [`ServerOptions::keep_alive`]; a
//! WebSocket gets a ping as often, and is closed when nothing (not even a pong) has come from
//! the client for three times that.

mod connection;
mod requests;
mod sockets;
mod websocket;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hyper::StatusCode;
use hyper::header;
use hyper::http::request::Parts;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio_util::sync::CancellationToken;

use super::DEFAULT_PATH;
use crate::agent::{AgentContext, AgentHandler};
use crate::core::connection::{Connection, Serve};
use crate::core::handler::Handler;
use crate::core::owner::Owner;
use crate::core::transport::DuplexEnd;

use connection::{AcpConnection, WsSlot, sweep_idle};
use requests::{BodyBudget, bearer_credentials, constant_time_eq};
use sockets::{PeerPlace, Peers, Place, Unproven, serve_http_connection};

/// Limits and defaults of an [`HttpServer`]. Every limit answers with a clear HTTP status
/// (see the [module docs](self)). Change what you need and take the rest from `default()`:
/// `ServerOptions { max_connections: 64, ..ServerOptions::default() }`.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The endpoint's path (`/acp`).
    pub path: String,
    /// Largest POST body (16 MiB): 413 beyond.
    pub max_body_bytes: usize,
    /// Bytes of POST bodies the server holds at once, all connections together (64 MiB, and
    /// never less than `max_body_bytes`). Bytes are counted as they arrive, not as declared,
    /// and given back once the message is handed to the agent or the request fails: a client
    /// that declares a large `Content-Length` and sends little holds only what it sent. A
    /// body whose next bytes do not fit is refused with 503 (`Retry-After: 1`) and its bytes
    /// given back at once, so bodies never wait for each other. Many large bodies at once
    /// cost this much memory, not `max_body_bytes` each.
    pub max_body_bytes_in_flight: usize,
    /// Bytes one stream's outbox holds before the agent's sends wait (16 MiB).
    pub max_buffered_bytes: usize,
    /// How long an outbox (or a WebSocket's write buffer) may stay full with nothing read
    /// before the connection is closed (60 s).
    pub output_stall: Duration,
    /// Open connections, both profiles (1024). Beyond, the one unused the longest since it
    /// opened is closed to make room (see the [module docs](self)); with none, 429.
    pub max_connections: usize,
    /// Sessions (streams) per connection (256): `session/new` is answered 429 beyond. An
    /// HTTP/2 connection may carry this many streams at once, plus the provisional ones and 64
    /// more (for the connection's own stream and the POSTs beside them).
    pub max_sessions_per_connection: usize,
    /// Session streams open before their session is known (16): 404 beyond.
    pub max_provisional_sessions: usize,
    /// Longest `Acp-Connection-Id` / `Acp-Session-Id` header accepted (256 bytes): 400 beyond.
    pub max_id_bytes: usize,
    /// A connection with no stream attached and no POST for this long is closed (5 min).
    pub idle_timeout: Duration,
    /// How long to wait for the agent's answer to `initialize` (30 s): 504 beyond.
    pub initialize_timeout: Duration,
    /// The SSE keep-alive comment and WebSocket ping interval (15 s).
    pub keep_alive: Duration,
    /// Origins (`https://app.example`) allowed to call from a browser; `*` allows any. Empty
    /// by default: a request carrying `Origin` is refused with 403.
    pub allowed_origins: Vec<String>,
    /// Host names (`agent.example`, matched without the port, in any case) the server answers
    /// for; `*` allows any. Empty by default, which means: a server bound to a loopback address
    /// answers only for loopback names (`localhost`, `127.0.0.1`, `[::1]`), so a web page whose
    /// DNS name was rebound to 127.0.0.1 is refused (403) even without an `Origin`; a server on
    /// another address answers for any name.
    pub allowed_hosts: Vec<String>,
    /// Largest WebSocket message (16 MiB).
    pub max_ws_message_bytes: usize,
    /// TCP (or TLS) connections served at once, whatever they carry, a WebSocket's for as long
    /// as it is open (4096). Beyond, the oldest socket that has had no request served (see the
    /// [module docs](self)) is closed to make room; with none, new ones wait in the system's
    /// listen queue until one closes. (`max_connections` counts ACP connections, which a
    /// socket that never finishes a request does not make.)
    pub max_sockets: usize,
    /// How long a client may take to send its first request's head after connecting (the
    /// HTTP/2 preface included: a socket that sends nothing, or part of a preface, is closed
    /// too), to send an HTTP/1.1 request's head, and to start the next one on a kept-alive
    /// connection (30 s; zero for no limit): the connection is closed beyond. An HTTP/2
    /// connection is pinged every `keep_alive` and closed when a ping goes unanswered.
    pub header_read_timeout: Duration,
    /// How long a POST's body may take to arrive once its head has (30 s; zero for no limit):
    /// 408 beyond.
    pub body_read_timeout: Duration,
    /// Sockets one peer holds at once (256), a WebSocket's included for as long as it is open.
    /// A peer is an IPv4 address, or an IPv6 address's /64 prefix (what one host is usually
    /// given). A socket beyond is closed as soon as it is accepted, before anything is read:
    /// it takes no place of `max_sockets` and makes no other socket close. Loopback peers are
    /// not counted unless `limit_loopback_peers` is set.
    pub max_sockets_per_peer: usize,
    /// Counts loopback peers (`127.0.0.0/8`, `::1`) against `max_sockets_per_peer` too (off:
    /// local clients, and a reverse proxy on the same host, which connects from loopback for
    /// every client, are not limited).
    pub limit_loopback_peers: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            path: DEFAULT_PATH.to_owned(),
            max_body_bytes: 16 << 20,
            max_body_bytes_in_flight: 64 << 20,
            max_buffered_bytes: 16 << 20,
            output_stall: Duration::from_secs(60),
            max_connections: 1024,
            max_sessions_per_connection: 256,
            max_provisional_sessions: 16,
            max_id_bytes: 256,
            idle_timeout: Duration::from_secs(300),
            initialize_timeout: Duration::from_secs(30),
            keep_alive: Duration::from_secs(15),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_ws_message_bytes: 16 << 20,
            max_sockets: 4096,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(30),
            max_sockets_per_peer: 256,
            limit_loopback_peers: false,
        }
    }
}

/// A refusal from the [`HttpServer::authenticate`] hook: the HTTP status and a short text.
#[derive(Clone, Debug)]
pub struct Rejection {
    status: StatusCode,
    message: String,
}

impl Rejection {
    /// 401: no or unusable credentials (sent with `WWW-Authenticate: Bearer`).
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Rejection { status: StatusCode::UNAUTHORIZED, message: message.into() }
    }

    /// 403: credentials understood and refused.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Rejection { status: StatusCode::FORBIDDEN, message: message.into() }
    }
}

/// Checks a request; `Some` names its principal (see [`HttpServer::identify`]).
type AuthHook = dyn Fn(&Parts) -> Result<Option<Owner>, Rejection> + Send + Sync;
type StartConnection = dyn Fn(DuplexEnd, Owner) -> Serve + Send + Sync;

/// Serves ACP agents over HTTP and WebSocket; see the [module docs](self).
///
/// ```no_run
/// use acp_rpc::AgentContext;
/// use acp_rpc::acp_types::Agent;
/// use acp_rpc::http::server::HttpServer;
///
/// // One agent value per ACP connection; listens on 127.0.0.1 only.
/// async fn run<A: Agent<AgentContext> + 'static>(
///     make_agent: impl Fn() -> A + Send + Sync + 'static,
/// ) -> std::io::Result<()> {
///     let server = HttpServer::agent(make_agent).bind("127.0.0.1:8080").await?;
///     println!("listening on {}", server.url());
///     server.run().await
/// }
/// ```
pub struct HttpServer {
    shared: Arc<ServerShared>,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer").field("options", &self.shared.options).finish_non_exhaustive()
    }
}

struct ServerShared {
    options: ServerOptions,
    start: Box<StartConnection>,
    auth: Option<Box<AuthHook>>,
    connections: Mutex<HashMap<String, Arc<AcpConnection>>>,
    /// The bytes of POST bodies held at once (see [`ServerOptions::max_body_bytes_in_flight`]),
    /// made by the first body read.
    body_budget: OnceLock<Arc<BodyBudget>>,
    /// Bound to a loopback address: with no [`ServerOptions::allowed_hosts`], only loopback
    /// host names are served.
    loopback: bool,
    /// Connections of both profiles (WebSocket ones are not in `connections`).
    open: std::sync::atomic::AtomicUsize,
    /// The open WebSocket connections, by a number of their own: the unused ones make room
    /// at `max_connections` as unused HTTP ones do.
    websockets: Mutex<HashMap<u64, Arc<WsSlot>>>,
    next_websocket: std::sync::atomic::AtomicU64,
    shutdown: CancellationToken,
}

impl HttpServer {
    /// A server whose every ACP connection is served by a fresh handler from `make_handler`
    /// (with [`Connection`]'s default options; see [`HttpServer::with_connection`]).
    pub fn new<H, F>(make_handler: F) -> Self
    where
        H: Handler,
        F: Fn() -> H + Send + Sync + 'static,
    {
        Self::with_connection(Connection::new, make_handler)
    }

    /// A server for an `#[acp_agent]` (v1) impl: one agent value per ACP connection.
    pub fn agent<A, F>(make_agent: F) -> Self
    where
        A: acp_types::Agent<AgentContext> + 'static,
        F: Fn() -> A + Send + Sync + 'static,
    {
        Self::new(move || AgentHandler::new(make_agent()))
    }

    /// Like [`HttpServer::new`], with each runtime connection built by `connection` (its
    /// limits, cancellation grace, wire tap).
    pub fn with_connection<H, F, C>(connection: C, make_handler: F) -> Self
    where
        H: Handler,
        F: Fn() -> H + Send + Sync + 'static,
        C: Fn() -> Connection + Send + Sync + 'static,
    {
        let start =
            move |(reader, writer): DuplexEnd, owner| connection().owner(owner).serve(reader, writer, make_handler()).1;
        HttpServer {
            shared: Arc::new(ServerShared {
                options: ServerOptions::default(),
                start: Box::new(start),
                auth: None,
                connections: Mutex::new(HashMap::new()),
                body_budget: OnceLock::new(),
                loopback: false,
                open: Default::default(),
                websockets: Mutex::new(HashMap::new()),
                next_websocket: Default::default(),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    fn shared_mut(&mut self) -> &mut ServerShared {
        Arc::get_mut(&mut self.shared).expect("an HttpServer is configured before it is bound")
    }

    /// Replaces the limits and defaults.
    #[must_use]
    pub fn options(mut self, options: ServerOptions) -> Self {
        self.shared_mut().options = options;
        self
    }

    /// Checks every HTTP request (all methods, the WebSocket upgrade included) before anything
    /// else; a [`Rejection`] is answered with its status. It names no principal: each ACP
    /// connection is then an anonymous owner of its own (see [`HttpServer::identify`]).
    #[must_use]
    pub fn authenticate(mut self, hook: impl Fn(&Parts) -> Result<(), Rejection> + Send + Sync + 'static) -> Self {
        self.shared_mut().auth = Some(Box::new(move |parts| hook(parts).map(|()| None)));
        self
    }

    /// Checks every HTTP request, as [`HttpServer::authenticate`] does, and names who sends it:
    /// the [`Owner`] of the ACP connection its `initialize` (or WebSocket upgrade) opens, which
    /// the agent reads to keep each principal's sessions apart. Every later request on that
    /// connection must name the same principal, or it gets the 404 of an unknown connection.
    #[must_use]
    pub fn identify(mut self, hook: impl Fn(&Parts) -> Result<Owner, Rejection> + Send + Sync + 'static) -> Self {
        self.shared_mut().auth = Some(Box::new(move |parts| hook(parts).map(Some)));
        self
    }

    /// Requires `Authorization: Bearer <token>` on every request: 401 without it, 403 with
    /// another token. Whoever holds the token is one principal (`Owner::principal("bearer")`),
    /// who can re-attach to its sessions on a new connection; give each client a token of its
    /// own with [`HttpServer::bearer_tokens`].
    #[must_use]
    pub fn bearer_token(self, token: impl Into<String>) -> Self {
        self.bearer_tokens([(token.into(), "bearer".to_owned())])
    }

    /// Requires `Authorization: Bearer <token>` with one of `tokens` (token, principal name)
    /// on every request, and names that token's principal as the request's
    /// ([`HttpServer::identify`]): 401 without a token, 403 with another. The scheme is
    /// matched in any case (`bearer`, RFC 7235); the tokens are compared in constant time.
    #[must_use]
    pub fn bearer_tokens<T, P>(self, tokens: impl IntoIterator<Item = (T, P)>) -> Self
    where
        T: Into<String>,
        P: AsRef<str>,
    {
        let tokens: Vec<(Vec<u8>, Owner)> =
            tokens.into_iter().map(|(token, name)| (token.into().into_bytes(), Owner::principal(name))).collect();
        self.identify(move |parts| {
            let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
                return Err(Rejection::unauthorized("a bearer token is required"));
            };
            let Some(given) = bearer_credentials(value.as_bytes()) else {
                return Err(Rejection::unauthorized("the Authorization header is not a bearer token"));
            };
            // Every token is compared, so the time taken does not say which one came close.
            let mut found = None;
            for (token, owner) in &tokens {
                if constant_time_eq(given, token) && found.is_none() {
                    found = Some(owner.clone());
                }
            }
            found.ok_or_else(|| Rejection::forbidden("the bearer token is not accepted"))
        })
    }

    /// Binds `addr` (use `127.0.0.1:PORT` to stay local, `0.0.0.0:PORT` to listen on every
    /// interface; port 0 picks a free one).
    pub async fn bind(self, addr: impl ToSocketAddrs) -> std::io::Result<BoundServer> {
        let listener = TcpListener::bind(addr).await?;
        self.listen(listener)
    }

    /// Serves one client connection that is already open, over any byte stream, as
    /// [`BoundServer::run`] serves each accepted one (HTTP/1.1 or h2c, WebSocket upgrades).
    /// Without a listener: no idle sweeping and no shutdown handle. The fuzz target of the
    /// request path (`fuzz/`) drives the server through it over in-memory pipes; it is not
    /// a stable API.
    #[doc(hidden)]
    pub fn serve_io<I>(&self, io: I) -> impl Future<Output = ()> + Send + 'static
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let socket = Arc::new(Unproven::default()).register();
        let place = Arc::new(Place { _permit: None, _peer: PeerPlace(None) });
        serve_http_connection(self.shared.clone(), io, SocketAddr::from(([0, 0, 0, 0], 0)), socket, place)
    }

    /// Serves on an already bound listener.
    pub fn listen(mut self, listener: TcpListener) -> std::io::Result<BoundServer> {
        let local_addr = listener.local_addr()?;
        let shared = self.shared_mut();
        shared.loopback = local_addr.ip().is_loopback();
        Ok(BoundServer {
            shared: self.shared,
            listener,
            local_addr,
            #[cfg(feature = "http-tls")]
            tls: None,
        })
    }
}

/// rustls, for building the [`BoundServer::tls`] configuration (feature `http-tls`).
/// Its version (0.23) is part of this API: a major release of rustls is one of this module.
#[cfg(feature = "http-tls")]
pub use tokio_rustls::rustls;

/// A bound [`HttpServer`]: its address is known, [`BoundServer::run`] serves.
pub struct BoundServer {
    shared: Arc<ServerShared>,
    listener: TcpListener,
    local_addr: SocketAddr,
    #[cfg(feature = "http-tls")]
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl std::fmt::Debug for BoundServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundServer").field("local_addr", &self.local_addr).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ServerShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerShared").field("options", &self.options).finish_non_exhaustive()
    }
}

/// Stops a running server: no new TCP connections, every ACP connection closed.
#[derive(Clone, Debug)]
pub struct ShutdownHandle(CancellationToken);

impl ShutdownHandle {
    /// Stops the server; [`BoundServer::run`] returns.
    pub fn shutdown(&self) {
        self.0.cancel();
    }
}

impl BoundServer {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The endpoint's URL (`http://ADDR/acp`, or `https://` with `BoundServer::tls`, feature `http-tls`).
    pub fn url(&self) -> String {
        #[cfg(feature = "http-tls")]
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        #[cfg(not(feature = "http-tls"))]
        let scheme = "http";
        format!("{scheme}://{}{}", self.local_addr, self.shared.options.path)
    }

    /// Serves HTTPS and WSS instead of plain HTTP (feature `http-tls`): every accepted
    /// connection goes through a TLS handshake with `config` first (10 s at most). When the
    /// configuration lists no ALPN protocols, `h2` and `http/1.1` are offered, so HTTP/2 is
    /// negotiated where the client supports it and WebSocket clients get HTTP/1.1.
    #[cfg(feature = "http-tls")]
    #[must_use]
    pub fn tls(mut self, mut config: rustls::ServerConfig) -> Self {
        if config.alpn_protocols.is_empty() {
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        }
        self.tls = Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)));
        self
    }

    /// A handle that stops [`BoundServer::run`].
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shared.shutdown.clone())
    }

    /// Accepts and serves connections until [`ShutdownHandle::shutdown`]. Errors accepting
    /// one TCP connection are logged and do not stop the server.
    pub async fn run(self) -> std::io::Result<()> {
        #[cfg(feature = "http-tls")]
        let tls = self.tls.clone();
        let BoundServer { shared, listener, .. } = self;
        let sweeper = crate::core::tasks::AbortOnDrop::spawn(sweep_idle(shared.clone()));
        let sockets = Arc::new(tokio::sync::Semaphore::new(shared.options.max_sockets.max(1)));
        let unproven = Arc::new(Unproven::default());
        let peers = Arc::new(Peers {
            limit: shared.options.max_sockets_per_peer.max(1),
            loopback: shared.options.limit_loopback_peers,
            held: Mutex::new(HashMap::new()),
        });
        loop {
            let accepted = tokio::select! {
                () = shared.shutdown.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((tcp, peer)) => {
                    // Checked first: a socket over its peer's limit must neither take a place
                    // nor make another peer's socket close to free one.
                    let Some(peer_place) = peers.take(peer.ip()) else {
                        tracing::debug!(%peer, "too many sockets from this peer: closing the new one");
                        drop(tcp);
                        continue;
                    };
                    // A socket is served only with a permit, held until it closes. With none
                    // left, the oldest socket that has had no request served yet makes room:
                    // sockets that send nothing, a byte at a time, or only refused requests
                    // cannot keep out clients that are served. With none of those either, it waits for a place.
                    let permit = match sockets.clone().try_acquire_owned() {
                        Ok(permit) => permit,
                        Err(_) => {
                            unproven.evict_oldest();
                            tokio::select! {
                                () = shared.shutdown.cancelled() => break,
                                permit = sockets.clone().acquire_owned() => permit.expect("never closed"),
                            }
                        }
                    };
                    let _ = tcp.set_nodelay(true);
                    let shared = shared.clone();
                    let socket = unproven.register();
                    let place = Arc::new(Place { _permit: Some(permit), _peer: peer_place });
                    #[cfg(feature = "http-tls")]
                    if let Some(tls) = tls.clone() {
                        tokio::spawn(async move {
                            let handshake = tokio::time::timeout(Duration::from_secs(10), tls.accept(tcp));
                            let handshake = tokio::select! {
                                handshake = handshake => handshake,
                                () = socket.evicted() => return,
                            };
                            match handshake {
                                Ok(Ok(stream)) => serve_http_connection(shared, stream, peer, socket, place).await,
                                Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                            }
                        });
                        continue;
                    }
                    tokio::spawn(serve_http_connection(shared, tcp, peer, socket, place));
                }
                Err(error) => {
                    tracing::warn!(%error, "accepting a TCP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        drop(sweeper);
        let all: Vec<_> = shared.connections.lock().expect("lock").drain().map(|(_, c)| c).collect();
        for connection in all {
            connection.close();
        }
        Ok(())
    }
}
