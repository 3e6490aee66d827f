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
//! The agent's output is routed by [`Envelope`]: the answer to a POSTed request goes to the
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

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{FutureExt, SinkExt, StreamExt};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::{Notify, mpsc, oneshot};
// tokio's clock, not std's: under a paused test clock, deadlines made from std's would be
// behind tokio's, so keep-alive timers fired again at once, without end.
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_util::sync::CancellationToken;

use super::{
    CONNECTION_ID_HEADER, DEFAULT_PATH, EVENT_STREAM, Envelope, SESSION_ID_HEADER, new_id, one_line, push_sse_event,
};
use crate::agent::{AgentContext, AgentHandler};
use crate::core::connection::{Connection, Serve};
use crate::core::framing::{Frame as LineFrame, LineReader};
use crate::core::handler::Handler;
use crate::core::owner::Owner;
use crate::core::transport::{DuplexEnd, PipeReader, PipeWriter, duplex};

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

/// A socket's place: its permit among [`ServerOptions::max_sockets`] and its peer's count,
/// given back when the last holder drops it (the HTTP connection, or the WebSocket it was
/// upgraded to, which outlives it).
struct Place {
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    _peer: PeerPlace,
}

/// The sockets each peer holds (see [`ServerOptions::max_sockets_per_peer`]).
struct Peers {
    limit: usize,
    /// Loopback peers are counted too.
    loopback: bool,
    held: Mutex<HashMap<std::net::IpAddr, usize>>,
}

impl Peers {
    /// A place for one more socket of `ip`, or `None` when it holds its limit.
    fn take(self: &Arc<Self>, ip: std::net::IpAddr) -> Option<PeerPlace> {
        let ip = peer_key(ip);
        if ip.is_loopback() && !self.loopback {
            return Some(PeerPlace(None));
        }
        let mut held = self.held.lock().expect("lock");
        let count = held.entry(ip).or_default();
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(PeerPlace(Some((self.clone(), ip))))
    }
}

/// What one peer is counted as: an IPv4 address (an IPv4-mapped IPv6 one too), or an IPv6
/// address's /64 prefix, since one host is commonly handed a whole /64.
fn peer_key(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip.to_canonical() {
        std::net::IpAddr::V6(v6) if !v6.is_loopback() => {
            std::net::IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !(u64::MAX as u128)))
        }
        other => other,
    }
}

/// One socket counted for its peer (`None`: not counted), given back when dropped.
struct PeerPlace(Option<(Arc<Peers>, std::net::IpAddr)>);

impl Drop for PeerPlace {
    fn drop(&mut self) {
        let Some((peers, ip)) = self.0.take() else { return };
        let mut held = peers.held.lock().expect("lock");
        if let Some(count) = held.get_mut(&ip) {
            *count -= 1;
            if *count == 0 {
                held.remove(&ip);
            }
        }
    }
}

/// The sockets that have had no request answered with success yet (silent ones, slow ones,
/// refused ones), oldest first: the ones to close when a new socket needs a place.
#[derive(Default)]
struct Unproven {
    sockets: Mutex<VecDeque<(u64, CancellationToken)>>,
    next: std::sync::atomic::AtomicU64,
}

impl Unproven {
    fn register(self: &Arc<Self>) -> Socket {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let evict = CancellationToken::new();
        self.sockets.lock().expect("lock").push_back((id, evict.clone()));
        Socket { registry: Arc::downgrade(self), id, evict }
    }

    /// Closes the oldest socket that has not proven itself, if any.
    fn evict_oldest(&self) {
        if let Some((_, evict)) = self.sockets.lock().expect("lock").pop_front() {
            tracing::debug!("all socket places taken: closing the oldest socket without a served request");
            evict.cancel();
        }
    }

    fn forget(&self, id: u64) {
        let mut sockets = self.sockets.lock().expect("lock");
        if let Some(at) = sockets.iter().position(|(other, _)| *other == id) {
            sockets.remove(at);
        }
    }
}

/// A socket's place among the [`Unproven`] ones, until a request of its is answered with
/// success (or its end).
struct Socket {
    registry: std::sync::Weak<Unproven>,
    id: u64,
    evict: CancellationToken,
}

impl Socket {
    /// Completes when the socket is to be closed to make room.
    fn evicted(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.evict.cancelled()
    }

    /// A request of the socket's was served: it is no longer one to close first.
    fn proven(&self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.forget(self.id);
        }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.proven();
    }
}

/// Serves one TCP (or TLS) connection's HTTP requests, HTTP/1.1 or HTTP/2 as the client speaks.
/// Until its first request's head has arrived, the socket is closed when
/// [`ServerOptions::header_read_timeout`] passes; until one of its requests is answered with
/// success, when a new socket needs its place.
async fn serve_http_connection<I>(shared: Arc<ServerShared>, io: I, peer: SocketAddr, socket: Socket, place: Arc<Place>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (header_read_timeout, keep_alive) = (shared.options.header_read_timeout, shared.options.keep_alive);
    // Every stream a connection may hold open at once (its sessions', the provisional ones and
    // its own), with room for the POSTs beside them: a client that carries all of them on one
    // HTTP/2 connection is never short of a stream for a POST.
    let options = &shared.options;
    let streams = options.max_sessions_per_connection + options.max_provisional_sessions + 64;
    let max_streams = u32::try_from(streams).unwrap_or(u32::MAX);
    let first_request = CancellationToken::new();
    let first_seen = first_request.clone();
    // A request that passed every check (auth included) and was answered with success: only
    // then does the socket keep its place. Refused requests (401, 404, ...) earn nothing, so
    // clients without credentials cannot hold places that clients with them need.
    let succeeded = CancellationToken::new();
    let success_seen = succeeded.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        first_seen.cancel();
        // A WebSocket takes the socket's place with it (see `upgrade`).
        req.extensions_mut().insert(place.clone());
        let shared = shared.clone();
        let success_seen = success_seen.clone();
        async move {
            let response = shared.handle(req).await;
            let status = response.status();
            if status.is_success() || status == StatusCode::SWITCHING_PROTOCOLS {
                success_seen.cancel();
            }
            Ok::<_, Infallible>(response)
        }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // hyper's timeouts need a timer: without one, a client that never finishes a request's
    // head holds its socket for ever.
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout((!header_read_timeout.is_zero()).then_some(header_read_timeout));
    builder
        .http2()
        .max_concurrent_streams(max_streams)
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval((!keep_alive.is_zero()).then_some(keep_alive));
    let serving = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(serving);
    // Dropping `serving` closes the socket.
    let first_deadline = async {
        if header_read_timeout.is_zero() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(header_read_timeout).await;
    };
    let ended = tokio::select! {
        ended = &mut serving => Some(ended),
        () = first_request.cancelled() => None,
        () = first_deadline => {
            tracing::debug!(%peer, "no request within the header read timeout: closing the socket");
            return;
        }
        () = socket.evicted() => return,
    };
    let ended = match ended {
        Some(ended) => ended,
        None => tokio::select! {
            ended = &mut serving => ended,
            () = succeeded.cancelled() => {
                socket.proven();
                serving.await
            }
            () = socket.evicted() => return,
        },
    };
    if let Err(error) = ended {
        tracing::debug!(%peer, %error, "http connection ended with an error");
    }
}

// ---- one ACP connection (Streamable HTTP profile) -------------------------------------------

/// Where the answer to a POSTed request goes.
#[derive(Clone, Debug)]
enum Route {
    Connection,
    Session(String),
    /// `session/close` or `session/delete` of this session: a successful answer goes to the
    /// connection stream and the session's stream is forgotten (it ends once read empty).
    Ends(String),
}

/// The messages waiting for one stream's reader (each a single-line JSON text; the reader
/// frames them as SSE events).
#[derive(Default)]
struct Outbox {
    queue: VecDeque<Vec<u8>>,
    /// What the queue holds, counted as SSE events (`data: `, the message, a blank line).
    bytes: usize,
    reader: bool,
    waker: Option<Waker>,
    /// Opened by a GET before anything named the session.
    provisional: bool,
    /// The session was closed or deleted: the stream ends once empty, and the outbox goes.
    ended: bool,
}

impl Outbox {
    fn push(&mut self, message: Vec<u8>) {
        self.bytes += message.len() + SSE_FRAMING;
        self.queue.push_back(message);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Takes the waiting messages as SSE events in one buffer, up to about
    /// [`SSE_BATCH_BYTES`] (at least one message): a busy stream is written in large chunks
    /// instead of one per message.
    fn take_events(&mut self) -> Option<Bytes> {
        let first = self.queue.front()?.len() + SSE_FRAMING;
        let mut batch = Vec::with_capacity(first.max(self.bytes.min(SSE_BATCH_BYTES)));
        while let Some(message) = self.queue.front() {
            let size = message.len() + SSE_FRAMING;
            if !batch.is_empty() && batch.len() + size > SSE_BATCH_BYTES {
                break;
            }
            push_sse_event(&mut batch, message);
            self.bytes -= size;
            self.queue.pop_front();
        }
        Some(Bytes::from(batch))
    }
}

/// The bytes an SSE event adds to its message (`data: ` and the blank line).
const SSE_FRAMING: usize = 8;

/// How much of an outbox one body chunk carries at most (a larger single message goes alone).
const SSE_BATCH_BYTES: usize = 64 * 1024;

#[derive(Default)]
struct Streams {
    connection: Outbox,
    sessions: HashMap<String, Outbox>,
    /// Request id (JSON text) → the stream of its answer.
    routes: HashMap<String, Route>,
    /// The pending `initialize`: its id and where its answer goes.
    initialize: Option<(String, oneshot::Sender<Vec<u8>>)>,
}

impl Streams {
    fn outbox(&mut self, session: Option<&str>) -> Option<&mut Outbox> {
        match session {
            None => Some(&mut self.connection),
            Some(id) => self.sessions.get_mut(id),
        }
    }

    fn provisional_count(&self) -> usize {
        self.sessions.values().filter(|o| o.provisional).count()
    }
}

struct AcpConnection {
    id: String,
    /// The client has done something with the connection since `initialize`: attached a
    /// stream or posted. Until then, a connection is the first to go when the server is full.
    used: std::sync::atomic::AtomicBool,
    /// Who opened it ([`HttpServer::identify`]); `None` without such a hook.
    principal: Option<Owner>,
    to_agent: tokio::sync::Mutex<Option<PipeWriter>>,
    streams: Mutex<Streams>,
    /// Woken whenever a reader takes something from an outbox.
    drained: Notify,
    closed: CancellationToken,
    last_active: Mutex<Instant>,
}

impl AcpConnection {
    fn touch(&self) {
        *self.last_active.lock().expect("lock") = Instant::now();
    }

    /// The client used the connection (a stream attached, a POST after `initialize`).
    fn used(&self) {
        self.used.store(true, std::sync::atomic::Ordering::Relaxed);
        self.touch();
    }

    /// Ends the connection: the agent sees end of input, every stream ends once drained.
    fn close(&self) {
        self.closed.cancel();
        let mut streams = self.streams.lock().expect("lock");
        streams.initialize = None;
        let wake = |o: &mut Outbox| {
            if let Some(w) = o.waker.take() {
                w.wake();
            }
        };
        wake(&mut streams.connection);
        streams.sessions.values_mut().for_each(wake);
    }

    /// Writes one client message (a single line) to the agent. In a task of its own: a POST
    /// whose client goes away drops its handler, and a write cut off there would leave half a
    /// line in the agent's input, to which the next message would be glued.
    async fn send_to_agent(self: &Arc<Self>, line: Vec<u8>) -> Result<(), ()> {
        let connection = self.clone();
        let write = tokio::spawn(async move {
            let mut guard = connection.to_agent.lock().await;
            let Some(writer) = guard.as_mut() else { return Err(()) };
            let write = async {
                writer.write_all(&line).await?;
                writer.write_all(b"\n").await
            };
            tokio::select! {
                result = write => result.map_err(|_| ()),
                () = connection.closed.cancelled() => Err(()),
            }
        });
        write.await.unwrap_or(Err(()))
    }
}

impl ServerShared {
    fn connection(&self, id: &str) -> Option<Arc<AcpConnection>> {
        self.connections.lock().expect("lock").get(id).cloned()
    }

    /// The connection `id`, if `principal` is its principal: another principal's connection is
    /// as unknown as one that does not exist.
    fn connection_of(&self, id: &str, principal: Option<&Owner>) -> Option<Arc<AcpConnection>> {
        self.connection(id).filter(|connection| connection.principal.as_ref() == principal)
    }

    fn remove(&self, id: &str) {
        if self.connections.lock().expect("lock").remove(id).is_some() {
            self.open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Closes the connection, of either profile, that has been unused since it opened for the
    /// longest (see [`AcpConnection::used`], [`WsSlot::used`]); whether there was one.
    fn evict_unused(&self) -> bool {
        let http = {
            let connections = self.connections.lock().expect("lock");
            connections
                .values()
                .filter(|c| {
                    !c.used.load(std::sync::atomic::Ordering::Relaxed)
                        && c.streams.lock().expect("lock").initialize.is_none()
                })
                .map(|c| (*c.last_active.lock().expect("lock"), c.clone()))
                .min_by_key(|(since, _)| *since)
        };
        let websocket = {
            let websockets = self.websockets.lock().expect("lock");
            websockets
                .values()
                .filter(|w| !w.used.load(std::sync::atomic::Ordering::Relaxed))
                .min_by_key(|w| w.opened)
                .cloned()
        };
        match (http, websocket) {
            (Some((since, _)), Some(websocket)) if websocket.opened < since => self.evict_websocket(&websocket),
            (None, Some(websocket)) => self.evict_websocket(&websocket),
            (Some((_, connection)), _) => {
                tracing::debug!(connection = %connection.id, "connection limit reached: closing a connection unused since its initialize");
                self.remove(&connection.id);
                connection.close();
            }
            (None, None) => return false,
        }
        true
    }

    fn evict_websocket(&self, websocket: &WsSlot) {
        tracing::debug!("connection limit reached: closing a WebSocket unused since it opened");
        self.websockets.lock().expect("lock").remove(&websocket.id);
        websocket.release(self);
        websocket.evict.cancel();
    }

    /// Reserves a connection slot, or `None` at the limit.
    fn reserve_slot(&self) -> Option<SlotGuard<'_>> {
        let open = self.open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let guard = SlotGuard { shared: self, keep: false };
        (open < self.options.max_connections).then_some(guard)
    }

    /// Starts the agent side of a new connection: its runtime connection over in-memory
    /// pipes, served on a task. Returns our ends of the pipes.
    fn start_agent(&self, owner: Owner) -> (PipeReader, PipeWriter) {
        let (agent_end, (from_agent, to_agent)) = duplex(64 * 1024);
        let serve = (self.start)(agent_end, owner);
        tokio::spawn(async move {
            if let Err(error) = serve.await {
                tracing::debug!(%error, "an http-served connection ended with an error");
            }
        });
        (from_agent, to_agent)
    }
}

/// A connection slot counted in `open`, given back unless kept.
struct SlotGuard<'a> {
    shared: &'a ServerShared,
    keep: bool,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if !self.keep {
            self.shared.open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// An open WebSocket connection's slot among [`ServerOptions::max_connections`].
struct WsSlot {
    id: u64,
    opened: Instant,
    /// The client has sent a message after its first (its `initialize`), as an HTTP
    /// connection is used once it posts after its `initialize`.
    used: std::sync::atomic::AtomicBool,
    /// Its count in `open` was given back (once: by the eviction or by the socket's end).
    released: std::sync::atomic::AtomicBool,
    /// Closes the WebSocket to make room.
    evict: CancellationToken,
}

impl WsSlot {
    fn release(&self, shared: &ServerShared) {
        if !self.released.swap(true, std::sync::atomic::Ordering::Relaxed) {
            shared.open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Closes connections idle for longer than the limit.
async fn sweep_idle(shared: Arc<ServerShared>) {
    let limit = shared.options.idle_timeout;
    let mut tick = tokio::time::interval((limit / 4).max(Duration::from_millis(50)));
    loop {
        tick.tick().await;
        let idle: Vec<_> = {
            let connections = shared.connections.lock().expect("lock");
            connections
                .values()
                .filter(|c| {
                    let streams = c.streams.lock().expect("lock");
                    let reading = streams.connection.reader || streams.sessions.values().any(|o| o.reader);
                    !reading && c.last_active.lock().expect("lock").elapsed() >= limit
                })
                .cloned()
                .collect()
        };
        for connection in idle {
            tracing::debug!(connection = %connection.id, "closing an idle connection");
            shared.remove(&connection.id);
            connection.close();
        }
    }
}

/// Carries the agent's output to the outboxes until the agent ends, then closes the
/// connection.
async fn route_output(shared: Arc<ServerShared>, connection: Arc<AcpConnection>, from_agent: PipeReader) {
    let mut lines = LineReader::new(from_agent, usize::MAX >> 1);
    loop {
        let line = tokio::select! {
            frame = lines.next_frame() => match frame {
                Ok(Some(LineFrame::Line(line))) => line.to_vec(),
                Ok(Some(LineFrame::Oversized { .. })) => continue,
                Ok(None) | Err(_) => break,
            },
            () = connection.closed.cancelled() => break,
        };
        if !deliver(&shared.options, &connection, line).await {
            break;
        }
    }
    shared.remove(&connection.id);
    connection.close();
}

/// Puts one agent message in its outbox, waiting while that outbox is over its limit.
/// Returns false when the connection must end (closed, or stalled).
async fn deliver(options: &ServerOptions, connection: &AcpConnection, line: Vec<u8>) -> bool {
    let mut envelope = std::str::from_utf8(&line).ok().and_then(Envelope::read).unwrap_or_default();
    let target = {
        let mut streams = connection.streams.lock().expect("lock");
        if envelope.is_response {
            if let (Some(id), Some((init_id, _))) = (&envelope.id, &streams.initialize) {
                if id == init_id {
                    let (_, answer) = streams.initialize.take().expect("checked");
                    let _ = answer.send(line);
                    return true;
                }
            }
            let route = envelope.id.as_ref().and_then(|id| streams.routes.remove(id));
            if let Some(session) = envelope.result_session.take() {
                // Known before its id reaches the client, so that an immediate GET finds it.
                streams.sessions.entry(session).or_default().provisional = false;
            }
            match route {
                // A session that is gone (closed while this request ran) has no stream any more:
                // the answer goes to the connection's, where the client reads it by its id.
                Some(Route::Session(session) | Route::Ends(session)) if !streams.sessions.contains_key(&session) => {
                    None
                }
                Some(Route::Session(session)) => Some(session),
                Some(Route::Ends(session)) if envelope.is_error => Some(session),
                Some(Route::Ends(session)) => {
                    match streams.sessions.get_mut(&session) {
                        // Whatever it still holds is read first; then its reader sees the end.
                        Some(outbox) if outbox.reader => {
                            outbox.ended = true;
                            if let Some(waker) = outbox.waker.take() {
                                waker.wake();
                            }
                        }
                        _ => {
                            streams.sessions.remove(&session);
                        }
                    }
                    None
                }
                Some(Route::Connection) | None => None,
            }
        } else {
            let to_session =
                envelope.params_session.take().filter(|_| envelope.method.as_deref() != Some("$/cancel_request"));
            if let Some(session) = &to_session {
                // (Most messages are for a known session: no key is copied for them.)
                match streams.sessions.get_mut(session) {
                    Some(outbox) => outbox.provisional = false,
                    None => {
                        streams.sessions.insert(session.clone(), Outbox::default());
                    }
                }
            }
            to_session
        }
    };
    let mut line = Some(line);
    // Taken the first time the outbox is found full: most messages never need it.
    let mut deadline = None;
    loop {
        let drained = connection.drained.notified();
        {
            let mut streams = connection.streams.lock().expect("lock");
            let Some(outbox) = streams.outbox(target.as_deref()) else { return true };
            if outbox.bytes < options.max_buffered_bytes {
                outbox.push(line.take().expect("pushed once"));
                return true;
            }
        }
        let deadline = *deadline.get_or_insert_with(|| Instant::now() + options.output_stall);
        tokio::select! {
            () = drained => {}
            () = connection.closed.cancelled() => return false,
            () = tokio::time::sleep_until(deadline) => {
                tracing::warn!(connection = %connection.id, "closing a connection whose client stopped reading");
                return false;
            }
        }
    }
}

// ---- request handling -----------------------------------------------------------------------

/// The body of every response: a whole text, or an SSE stream.
enum ResponseBody {
    Full(Option<Bytes>),
    Events(EventStream),
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ResponseBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            ResponseBody::Events(events) => events.poll_event(cx).map(|e| e.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ResponseBody::Full(None))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            ResponseBody::Full(bytes) => {
                hyper::body::SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            ResponseBody::Events(_) => hyper::body::SizeHint::default(),
        }
    }
}

/// An SSE reader attached to one outbox; detaches when dropped (the client went away).
struct EventStream {
    connection: Arc<AcpConnection>,
    session: Option<String>,
    /// Its session was closed (and its outbox removed).
    ended: bool,
    keep_alive: Pin<Box<tokio::time::Sleep>>,
    every: Duration,
    /// When the last events went out, if after the keep-alive timer was armed.
    last_sent: Option<Instant>,
}

impl EventStream {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.ended {
            return Poll::Ready(None);
        }
        {
            let mut streams = self.connection.streams.lock().expect("lock");
            let Some(outbox) = streams.outbox(self.session.as_deref()) else { return Poll::Ready(None) };
            if let Some(events) = outbox.take_events() {
                drop(streams);
                self.connection.drained.notify_waiters();
                self.last_sent = Some(Instant::now());
                return Poll::Ready(Some(events));
            }
            if outbox.ended {
                if let Some(session) = &self.session {
                    streams.sessions.remove(session);
                }
                self.ended = true;
                return Poll::Ready(None);
            }
            if self.connection.closed.is_cancelled() {
                return Poll::Ready(None);
            }
            outbox.waker = Some(cx.waker().clone());
        }
        // The timer is not reset for every batch of events (a timer-wheel update each time): when
        // it fires on a stream that sent something meanwhile, it is re-armed from that moment, so
        // a comment still comes only after `every` without events.
        while self.keep_alive.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            match self.last_sent.take() {
                Some(sent) if sent + self.every > now => self.keep_alive.as_mut().reset(sent + self.every),
                _ => {
                    self.keep_alive.as_mut().reset(now + self.every);
                    return Poll::Ready(Some(Bytes::from_static(super::SSE_KEEP_ALIVE)));
                }
            }
        }
        Poll::Pending
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let mut streams = self.connection.streams.lock().expect("lock");
        if let Some(outbox) = streams.outbox(self.session.as_deref()) {
            outbox.reader = false;
            outbox.waker = None;
        }
        // A re-attach stream that nothing named while it was open: its place among the
        // `max_provisional_sessions` is given back.
        if let Some(session) = &self.session {
            if streams.sessions.get(session).is_some_and(|outbox| outbox.provisional) {
                streams.sessions.remove(session);
            }
        }
        drop(streams);
        self.connection.touch();
    }
}

/// The bytes of POST bodies the server may still take (see
/// [`ServerOptions::max_body_bytes_in_flight`]).
struct BodyBudget {
    free: std::sync::atomic::AtomicUsize,
}

/// The bytes one body has taken from the [`BodyBudget`]; given back when dropped.
struct BodyShare {
    budget: Arc<BodyBudget>,
    held: usize,
}

impl BodyShare {
    /// Takes `n` more bytes if the budget has them.
    fn take(&mut self, n: usize) -> bool {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        let taken = self.budget.free.fetch_update(AcqRel, Acquire, |free| free.checked_sub(n)).is_ok();
        if taken {
            self.held += n;
        }
        taken
    }
}

impl Drop for BodyShare {
    fn drop(&mut self) {
        self.budget.free.fetch_add(self.held, std::sync::atomic::Ordering::AcqRel);
    }
}

type HttpResponse = Response<ResponseBody>;

fn text(status: StatusCode, message: &str) -> HttpResponse {
    let mut response = Response::new(ResponseBody::Full(Some(Bytes::from(format!("{message}\n")))));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

fn json(status: StatusCode, body: Vec<u8>) -> HttpResponse {
    let mut response = Response::new(ResponseBody::Full(Some(Bytes::from(body))));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A JSON-RPC error with `id: null`, for HTTP answers to input that never reached the agent.
fn rpc_error(status: StatusCode, code: i64, message: &str) -> HttpResponse {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    json(status, body.to_string().into_bytes())
}

fn empty(status: StatusCode) -> HttpResponse {
    let mut response = Response::new(ResponseBody::Full(None));
    *response.status_mut() = status;
    response
}

/// A header's value as text; a 400 answer when it is not text or too long.
fn id_header(headers: &HeaderMap, name: &str, max: usize) -> Result<Option<String>, BadHeader> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) if value.len() > max => Err(BadHeader(format!("{name} is too long"))),
        Some(value) => match value.to_str() {
            Ok(text) if !text.is_empty() => Ok(Some(text.to_owned())),
            _ => Err(BadHeader(format!("{name} is not a valid id"))),
        },
    }
}

/// Why an id header was refused (answered 400).
struct BadHeader(String);

impl From<BadHeader> for HttpResponse {
    fn from(BadHeader(message): BadHeader) -> Self {
        text(StatusCode::BAD_REQUEST, &message)
    }
}

/// The credentials of an `Authorization: Bearer <credentials>` value, the scheme matched in any
/// case (RFC 7235) and the spaces after it skipped; `None` for another scheme.
fn bearer_credentials(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let credentials = rest.trim_ascii();
    (!credentials.is_empty()).then_some(credentials)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn media_type_is(value: Option<&HeaderValue>, wanted: &str) -> bool {
    value
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(wanted))
}

fn accepts_events(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).any(|v| {
        v.split(',').any(|item| item.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case(EVENT_STREAM)))
    })
}

fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

impl ServerShared {
    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> HttpResponse {
        if !self.host_allowed(&req) {
            return text(StatusCode::FORBIDDEN, "this host name is not served here");
        }
        let origin = req.headers().get(header::ORIGIN).cloned();
        let allowed_origin = match &origin {
            None => None,
            Some(origin) => {
                let allowed =
                    origin.to_str().is_ok_and(|o| self.options.allowed_origins.iter().any(|a| a == "*" || a == o));
                if !allowed {
                    return text(StatusCode::FORBIDDEN, "this origin is not allowed");
                }
                Some(origin.clone())
            }
        };
        let mut response = self.route(req).await;
        if let Some(origin) = allowed_origin {
            let headers = response.headers_mut();
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            headers.insert(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, HeaderValue::from_static("true"));
            headers.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static("acp-connection-id, acp-session-id"),
            );
            headers.append(header::VARY, HeaderValue::from_static("origin"));
        }
        response
    }

    /// Reads a POST body of at most `limit` bytes, counting each chunk against the server-wide
    /// budget as it arrives (see [`ServerOptions::max_body_bytes_in_flight`]). Nothing is taken
    /// ahead of the bytes, so a `Content-Length` that is never sent costs nothing, and nothing
    /// waits for room: a body that held part of the budget while it waited for more could wait
    /// for bodies waiting for it. The body, and its share of the budget.
    async fn read_body(&self, mut body: Incoming, limit: usize) -> Result<(Bytes, BodyShare), HttpResponse> {
        // Made on first use, once the options are final: a server on `serve_io` has one too.
        let budget = self.body_budget.get_or_init(|| {
            let total = self.options.max_body_bytes_in_flight.max(self.options.max_body_bytes);
            Arc::new(BodyBudget { free: std::sync::atomic::AtomicUsize::new(total) })
        });
        let mut share = BodyShare { budget: budget.clone(), held: 0 };
        let too_large = || text(StatusCode::PAYLOAD_TOO_LARGE, &format!("the body is over {limit} bytes"));
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut len = 0usize;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return Err(text(StatusCode::BAD_REQUEST, "the body could not be read"));
            };
            let Ok(chunk) = frame.into_data() else { continue }; // trailers
            len += chunk.len();
            if len > limit {
                return Err(too_large());
            }
            if !share.take(chunk.len()) {
                let mut busy = text(StatusCode::SERVICE_UNAVAILABLE, "the server holds too many request bodies; retry");
                busy.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return Err(busy);
            }
            if !chunk.is_empty() {
                chunks.push(chunk);
            }
        }
        let body = match chunks.len() {
            0 => Bytes::new(),
            1 => chunks.pop().expect("one"),
            _ => {
                let mut whole = bytes::BytesMut::with_capacity(len);
                for chunk in chunks {
                    whole.extend_from_slice(&chunk);
                }
                whole.freeze()
            }
        };
        Ok((body, share))
    }

    /// Whether the request names a host this server answers for (see
    /// [`ServerOptions::allowed_hosts`]). A request without one (HTTP/1.0) cannot come from a
    /// rebound browser page, which always names it.
    fn host_allowed(&self, req: &Request<Incoming>) -> bool {
        let named = req.uri().authority().map(|a| a.host().to_owned()).or_else(|| {
            let host = req.headers().get(header::HOST)?.to_str().ok()?;
            Some(host.parse::<hyper::http::uri::Authority>().map_or_else(|_| host.to_owned(), |a| a.host().to_owned()))
        });
        let Some(host) = named else { return true };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let allowed = &self.options.allowed_hosts;
        if !allowed.is_empty() {
            return allowed
                .iter()
                .any(|a| a == "*" || a.trim_start_matches('[').trim_end_matches(']').eq_ignore_ascii_case(host));
        }
        if !self.loopback {
            return true;
        }
        host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    async fn route(self: Arc<Self>, req: Request<Incoming>) -> HttpResponse {
        if req.uri().path() != self.options.path {
            return text(StatusCode::NOT_FOUND, "no ACP endpoint here");
        }
        if req.method() == Method::OPTIONS {
            return preflight();
        }
        let (parts, body) = req.into_parts();
        let principal = match self.auth.as_ref().map(|auth| auth(&parts)) {
            None => None,
            Some(Ok(principal)) => principal,
            Some(Err(rejection)) => {
                let mut response = text(rejection.status, &rejection.message);
                if rejection.status == StatusCode::UNAUTHORIZED {
                    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                }
                return response;
            }
        };
        match parts.method {
            Method::POST => self.post(parts, body, principal).await,
            Method::GET if is_websocket_upgrade(&parts.headers) => {
                self.upgrade(Request::from_parts(parts, body), principal)
            }
            Method::GET => self.get(&parts, principal.as_ref()),
            Method::DELETE => self.delete(&parts, principal.as_ref()),
            _ => {
                let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "use POST, GET or DELETE");
                response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE, OPTIONS"));
                response
            }
        }
    }

    async fn post(self: Arc<Self>, parts: Parts, body: Incoming, principal: Option<Owner>) -> HttpResponse {
        if !media_type_is(parts.headers.get(header::CONTENT_TYPE), "application/json") {
            return text(StatusCode::UNSUPPORTED_MEDIA_TYPE, "the body must be application/json");
        }
        let limit = self.options.max_body_bytes;
        let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|len| len > limit as u64) {
            return text(StatusCode::PAYLOAD_TOO_LARGE, &format!("the body is over {limit} bytes"));
        }
        let timeout = self.options.body_read_timeout;
        let read = self.read_body(body, limit);
        let read = if timeout.is_zero() {
            read.await
        } else {
            match tokio::time::timeout(timeout, read).await {
                Ok(read) => read,
                Err(_) => return text(StatusCode::REQUEST_TIMEOUT, "the body did not arrive in time"),
            }
        };
        // Held until the message is handed to the agent (the end of this function); a read
        // that fails or times out gives its bytes back as it is dropped.
        let (body, _budget) = match read {
            Ok(read) => read,
            Err(refused) => return refused,
        };
        let Ok(value) = serde_json::from_slice::<&serde_json::value::RawValue>(&body) else {
            return rpc_error(StatusCode::BAD_REQUEST, -32700, "Parse error: the body is not one JSON value");
        };
        let first = value.get().as_bytes().first().copied();
        if first == Some(b'[') {
            return rpc_error(
                StatusCode::NOT_IMPLEMENTED,
                -32600,
                "Invalid Request: batches are not supported over HTTP",
            );
        }
        let envelope = match std::str::from_utf8(&body).ok().and_then(Envelope::read) {
            Some(envelope) if first == Some(b'{') && (envelope.method.is_some() || envelope.is_response) => envelope,
            _ => return rpc_error(StatusCode::BAD_REQUEST, -32600, "Invalid Request: not a JSON-RPC message"),
        };
        let max_id = self.options.max_id_bytes;
        let connection_id = match id_header(&parts.headers, CONNECTION_ID_HEADER, max_id) {
            Ok(id) => id,
            Err(bad) => return bad.into(),
        };
        let session_id = match id_header(&parts.headers, SESSION_ID_HEADER, max_id) {
            Ok(id) => id,
            Err(bad) => return bad.into(),
        };
        let line = one_line(body.to_vec());
        let is_initialize = envelope.method.as_deref() == Some("initialize");
        let Some(connection_id) = connection_id else {
            return match (is_initialize, &envelope.id) {
                (true, Some(id)) if !envelope.is_response => self.initialize(id.clone(), line, principal).await,
                _ => text(StatusCode::BAD_REQUEST, "Acp-Connection-Id is required (send initialize first)"),
            };
        };
        if is_initialize {
            return text(StatusCode::BAD_REQUEST, "initialize is not allowed on an existing connection");
        }
        let Some(connection) = self.connection_of(&connection_id, principal.as_ref()) else {
            return text(StatusCode::NOT_FOUND, "unknown Acp-Connection-Id");
        };
        connection.used();
        if let (Some(header), Some(param)) = (&session_id, &envelope.params_session) {
            if header != param {
                return text(StatusCode::BAD_REQUEST, "Acp-Session-Id does not match params.sessionId");
            }
        }
        if !envelope.is_response && envelope.is_session_scoped() && session_id.is_none() {
            return text(StatusCode::BAD_REQUEST, "Acp-Session-Id is required for a session's messages");
        }
        {
            let mut streams = connection.streams.lock().expect("lock");
            let method = envelope.method.as_deref();
            if method == Some("session/new") && streams.sessions.len() >= self.options.max_sessions_per_connection {
                return text(StatusCode::TOO_MANY_REQUESTS, "too many sessions on this connection");
            }
            if let Some(session) = &session_id {
                if !streams.sessions.contains_key(session) {
                    if streams.sessions.len() >= self.options.max_sessions_per_connection {
                        return text(StatusCode::TOO_MANY_REQUESTS, "too many sessions on this connection");
                    }
                    streams.sessions.insert(session.clone(), Outbox::default());
                }
            }
            if let (Some(id), false) = (&envelope.id, envelope.is_response) {
                if streams.routes.contains_key(id) {
                    return text(StatusCode::CONFLICT, "a request with this id is already in flight");
                }
                let route = match (method, &session_id) {
                    (Some("session/new" | "session/load"), _) | (_, None) => Route::Connection,
                    (Some("session/close" | "session/delete"), Some(session)) => Route::Ends(session.clone()),
                    (_, Some(session)) => Route::Session(session.clone()),
                };
                streams.routes.insert(id.clone(), route);
            }
        }
        match connection.send_to_agent(line).await {
            Ok(()) => empty(StatusCode::ACCEPTED),
            Err(()) => text(StatusCode::NOT_FOUND, "the connection has ended"),
        }
    }

    async fn initialize(self: Arc<Self>, id: String, line: Vec<u8>, principal: Option<Owner>) -> HttpResponse {
        // At the limit, a connection nobody used since its `initialize` makes room: a flood of
        // `initialize` calls cannot lock out clients that go on to use their connections.
        let slot = self.reserve_slot().or_else(|| self.evict_unused().then(|| self.reserve_slot()).flatten());
        let Some(mut slot) = slot else {
            return text(StatusCode::TOO_MANY_REQUESTS, "too many connections");
        };
        let (from_agent, to_agent) = self.start_agent(principal.clone().unwrap_or_else(Owner::anonymous));
        let (answer_tx, answer_rx) = oneshot::channel();
        let connection = Arc::new(AcpConnection {
            id: new_id(),
            used: Default::default(),
            principal,
            to_agent: tokio::sync::Mutex::new(Some(to_agent)),
            streams: Mutex::new(Streams { initialize: Some((id, answer_tx)), ..Streams::default() }),
            drained: Notify::new(),
            closed: CancellationToken::new(),
            last_active: Mutex::new(Instant::now()),
        });
        slot.keep = true;
        drop(slot);
        self.connections.lock().expect("lock").insert(connection.id.clone(), connection.clone());
        tokio::spawn(route_output(self.clone(), connection.clone(), from_agent));
        let fail = |status, message| {
            self.remove(&connection.id);
            connection.close();
            text(status, message)
        };
        if connection.send_to_agent(line).await.is_err() {
            return fail(StatusCode::BAD_GATEWAY, "the agent ended before initialize");
        }
        let answer = match tokio::time::timeout(self.options.initialize_timeout, answer_rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => return fail(StatusCode::BAD_GATEWAY, "the agent ended without answering initialize"),
            Err(_) => return fail(StatusCode::GATEWAY_TIMEOUT, "the agent did not answer initialize in time"),
        };
        // Read without building numbers: an id the agent echoes as it came (`1e400`, beyond
        // `f64`) must not make a successful answer look refused.
        #[derive(serde::Deserialize)]
        struct Answer<'a> {
            #[serde(borrow)]
            result: Option<&'a serde_json::value::RawValue>,
        }
        let succeeded = serde_json::from_slice::<Answer>(&answer).is_ok_and(|a| a.result.is_some());
        if !succeeded {
            // A refused initialize creates no connection: the client may try again.
            self.remove(&connection.id);
            connection.close();
            return json(StatusCode::OK, answer);
        }
        let mut response = json(StatusCode::OK, answer);
        response
            .headers_mut()
            .insert(CONNECTION_ID_HEADER, HeaderValue::from_str(&connection.id).expect("hex id is a header value"));
        response
    }

    fn get(&self, parts: &Parts, principal: Option<&Owner>) -> HttpResponse {
        if !accepts_events(&parts.headers) {
            return text(StatusCode::NOT_ACCEPTABLE, "Accept must include text/event-stream");
        }
        let max_id = self.options.max_id_bytes;
        let (connection_id, session_id) = match (
            id_header(&parts.headers, CONNECTION_ID_HEADER, max_id),
            id_header(&parts.headers, SESSION_ID_HEADER, max_id),
        ) {
            (Ok(c), Ok(s)) => (c, s),
            (Err(bad), _) | (_, Err(bad)) => return bad.into(),
        };
        let Some(connection_id) = connection_id else {
            return text(StatusCode::BAD_REQUEST, "Acp-Connection-Id is required");
        };
        let Some(connection) = self.connection_of(&connection_id, principal) else {
            return text(StatusCode::NOT_FOUND, "unknown Acp-Connection-Id");
        };
        {
            let mut streams = connection.streams.lock().expect("lock");
            if let Some(session) = &session_id {
                if !streams.sessions.contains_key(session) {
                    let full = streams.provisional_count() >= self.options.max_provisional_sessions
                        || streams.sessions.len() >= self.options.max_sessions_per_connection;
                    if full {
                        return text(StatusCode::NOT_FOUND, "unknown Acp-Session-Id");
                    }
                    streams.sessions.insert(session.clone(), Outbox { provisional: true, ..Outbox::default() });
                }
            }
            let outbox = streams.outbox(session_id.as_deref()).expect("inserted above");
            if outbox.reader {
                return text(StatusCode::CONFLICT, "this stream already has a reader");
            }
            outbox.reader = true;
        }
        connection.used();
        let every = self.options.keep_alive;
        let events = EventStream {
            connection: connection.clone(),
            session: session_id.clone(),
            ended: false,
            keep_alive: Box::pin(tokio::time::sleep(every)),
            every,
            last_sent: None,
        };
        let mut response = Response::new(ResponseBody::Events(events));
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert(CONNECTION_ID_HEADER, HeaderValue::from_str(&connection.id).expect("hex id"));
        if let Some(session) = session_id.and_then(|s| HeaderValue::from_str(&s).ok()) {
            headers.insert(SESSION_ID_HEADER, session);
        }
        response
    }

    fn delete(&self, parts: &Parts, principal: Option<&Owner>) -> HttpResponse {
        let connection_id = match id_header(&parts.headers, CONNECTION_ID_HEADER, self.options.max_id_bytes) {
            Ok(Some(id)) => id,
            Ok(None) => return text(StatusCode::BAD_REQUEST, "Acp-Connection-Id is required"),
            Err(bad) => return bad.into(),
        };
        let Some(connection) = self.connection_of(&connection_id, principal) else {
            return text(StatusCode::NOT_FOUND, "unknown Acp-Connection-Id");
        };
        self.remove(&connection.id);
        connection.close();
        empty(StatusCode::ACCEPTED)
    }

    // ---- WebSocket profile ------------------------------------------------------------------

    fn upgrade(self: Arc<Self>, mut req: Request<Incoming>, principal: Option<Owner>) -> HttpResponse {
        let headers = req.headers();
        let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY).map(|k| derive_accept_key(k.as_bytes())) else {
            return text(StatusCode::BAD_REQUEST, "Sec-WebSocket-Key is missing");
        };
        if headers.get(header::SEC_WEBSOCKET_VERSION).map(HeaderValue::as_bytes) != Some(b"13") {
            let mut response = text(StatusCode::UPGRADE_REQUIRED, "WebSocket version 13 is required");
            response.headers_mut().insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
            return response;
        }
        // As for `initialize`: at the limit, a connection unused since it opened makes room.
        let slot = self.reserve_slot().or_else(|| self.evict_unused().then(|| self.reserve_slot()).flatten());
        let Some(mut slot) = slot else {
            return text(StatusCode::TOO_MANY_REQUESTS, "too many connections");
        };
        slot.keep = true;
        drop(slot);
        let ws = Arc::new(WsSlot {
            id: self.next_websocket.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            opened: Instant::now(),
            used: Default::default(),
            released: Default::default(),
            evict: CancellationToken::new(),
        });
        self.websockets.lock().expect("lock").insert(ws.id, ws.clone());
        // The socket's place (`max_sockets`, its peer's count) stays taken while the WebSocket
        // is open, though the HTTP connection that carried the upgrade ends.
        let place = req.extensions_mut().remove::<Arc<Place>>();
        let id = new_id();
        let on_upgrade = hyper::upgrade::on(&mut req);
        let shared = self.clone();
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(upgraded) => {
                    let owner = principal.unwrap_or_else(Owner::anonymous);
                    serve_websocket(&shared, TokioIo::new(upgraded), owner, &ws).await;
                }
                Err(error) => tracing::debug!(%error, "the WebSocket upgrade failed"),
            }
            shared.websockets.lock().expect("lock").remove(&ws.id);
            ws.release(&shared);
            drop(place);
        });
        let mut response = empty(StatusCode::SWITCHING_PROTOCOLS);
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, HeaderValue::from_str(&key).expect("base64 is a header value"));
        headers.insert(CONNECTION_ID_HEADER, HeaderValue::from_str(&id).expect("hex id"));
        response
    }
}

fn preflight() -> HttpResponse {
    // `handle` refused a disallowed origin already and adds the allow headers to this answer.
    let mut response = empty(StatusCode::NO_CONTENT);
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, DELETE"));
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(
            "content-type, authorization, acp-connection-id, acp-session-id, acp-protocol-version",
        ),
    );
    response
}

/// tungstenite zero-fills its read buffer up to this size before every read, so the whole
/// buffer is resident for every open socket (its default, 128 KiB, was most of an idle
/// connection's memory). A message larger than this still gets room for all of it.
const WS_READ_BUFFER: usize = 4 * 1024;
/// Messages read from a WebSocket and not yet written to the agent.
const WS_INPUT_QUEUE: usize = 16;

/// Frames fed past this many bytes are written out without waiting for a flush.
const WS_WRITE_BUFFER: usize = 16 * 1024;

/// Most messages sent in one burst (one flush) by [`send_burst`].
const WS_BURST: usize = 64;

/// Sends `first` and the agent's further messages that are already waiting (up to
/// [`WS_BURST`] in all), then flushes once: a busy stream costs one socket write per burst
/// instead of one per message, and nothing waits for a flush. `Ok(false)` when the agent's
/// output ended meanwhile; `Err` when the socket failed, or stayed full for `stall`.
async fn send_burst<S, R>(
    socket: &mut S,
    lines: &mut LineReader<R>,
    first: Message,
    stall: Duration,
) -> Result<bool, ()>
where
    S: futures_util::Sink<Message, Error = WsError> + Unpin,
    R: tokio::io::AsyncRead + Unpin,
{
    feed(socket, first, stall).await?;
    let mut open = true;
    for _ in 1..WS_BURST {
        // `next_frame` is cancel safe: a line read only in part stays in the reader.
        match lines.next_frame().now_or_never() {
            Some(Ok(Some(LineFrame::Line(line)))) => {
                let text = String::from_utf8_lossy(line).into_owned();
                feed(socket, Message::text(text), stall).await?;
            }
            Some(Ok(Some(LineFrame::Oversized { .. }))) => {}
            Some(Ok(None) | Err(_)) => {
                open = false;
                break;
            }
            None => break,
        }
    }
    flush(socket, stall).await?;
    Ok(open)
}

// The replies to pings go into the socket's write buffer as they are read, without waiting
// for room: a client that pings faster than it reads fills the buffer (to its bound, then the
// waiting pong is replaced by the next), and a message of ours then finds no room
// (`WriteBufferFull`, with the message handed back). `feed` and `flush` then wait for the
// buffer to drain and send that message again: the agent's output is late, never lost. A
// client that reads nothing for `stall` has its connection closed, as an SSE reader's is.

/// Feeds `message` to the socket (see above).
async fn feed<S>(socket: &mut S, message: Message, stall: Duration) -> Result<(), ()>
where
    S: futures_util::Sink<Message, Error = WsError> + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| socket.poll_ready_unpin(cx)).await {
            Ok(()) => return socket.start_send_unpin(message).map_err(drop),
            // The sink sends the message fed before when asked for room: that one was refused.
            Err(WsError::WriteBufferFull(earlier)) => refeed(socket, *earlier, stall).await?,
            Err(_) => return Err(()),
        }
    }
}

/// Flushes the socket (see above).
async fn flush<S>(socket: &mut S, stall: Duration) -> Result<(), ()>
where
    S: futures_util::Sink<Message, Error = WsError> + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| socket.poll_flush_unpin(cx)).await {
            Ok(()) => return Ok(()),
            Err(WsError::WriteBufferFull(earlier)) => refeed(socket, *earlier, stall).await?,
            Err(_) => return Err(()),
        }
    }
}

/// Waits for the write buffer to drain (nothing else is queued: the refused message was the
/// only one), then queues `refused` again, to go before anything fed after it.
async fn refeed<S>(socket: &mut S, refused: Message, stall: Duration) -> Result<(), ()>
where
    S: futures_util::Sink<Message, Error = WsError> + Unpin,
{
    let drain = std::future::poll_fn(|cx| socket.poll_flush_unpin(cx));
    match tokio::time::timeout(stall, drain).await {
        Ok(Ok(())) => socket.start_send_unpin(refused).map_err(drop),
        Ok(Err(_)) => Err(()),
        Err(_) => {
            tracing::warn!("closing a WebSocket whose client stopped reading");
            Err(())
        }
    }
}

/// One ACP connection on a WebSocket: text frames in, text frames out, pings for liveness.
async fn serve_websocket<S>(shared: &ServerShared, io: S, owner: Owner, slot: &WsSlot)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let max = shared.options.max_ws_message_bytes;
    let config = WebSocketConfig::default()
        .max_message_size(Some(max))
        .max_frame_size(Some(max))
        .read_buffer_size(WS_READ_BUFFER)
        .write_buffer_size(WS_WRITE_BUFFER)
        // Our messages wait for room (see `feed`), but the replies to pings are buffered as
        // they are read: bounded, a client that pings and never reads cannot grow the buffer
        // past this (the pending pong is kept once, replaced by the next).
        .max_write_buffer_size(WS_WRITE_BUFFER + max + WS_WRITE_BUFFER);
    let socket = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
    // Read and written side by side: a loop that awaited its sends while it read nothing
    // stopped for good against a client doing the same, once both directions' buffers filled.
    let (mut sink, mut stream) = socket.split();
    let (from_agent, to_agent) = shared.start_agent(owner);
    let mut lines = LineReader::new(from_agent, usize::MAX >> 1);
    // The agent's input is written by a task of its own: the agent's output must keep flowing
    // while the agent is slow to read (it may itself be waiting for room to write). A frame
    // read waits for a place in the queue; while it waits, the socket is not read
    // (backpressure), and the agent's output still flows.
    let (to_writer, writer_queue) = mpsc::channel::<Vec<u8>>(WS_INPUT_QUEUE);
    let mut writer = crate::core::tasks::AbortOnDrop::spawn(write_to_agent(to_agent, writer_queue));
    let (every, stall) = (shared.options.keep_alive, shared.options.output_stall);
    let last_heard = Mutex::new(Instant::now());
    // The client's frames, to the agent's input; ends with the close frame to send, if any.
    let incoming = async {
        let mut messages = 0u32;
        loop {
            match stream.next().await {
                Some(Ok(Message::Text(text))) => {
                    *last_heard.lock().expect("lock") = Instant::now();
                    messages = messages.saturating_add(1);
                    if messages == 2 {
                        slot.used.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    if to_writer.send(one_line(text.as_bytes().to_vec())).await.is_err() {
                        // The agent's input is closed.
                        return None;
                    }
                }
                // Binary frames carry nothing in ACP (the RFD: ignored); pings are answered by
                // the socket itself.
                Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {
                    *last_heard.lock().expect("lock") = Instant::now();
                }
                Some(Ok(Message::Close(_))) | None => return None,
                Some(Err(error)) => {
                    tracing::debug!(%error, "WebSocket read failed");
                    return close_frame_for(&error);
                }
            }
        }
    };
    // The agent's output, and the pings, to the client; ends with the close frame to send.
    let outgoing = async {
        let mut ping = tokio::time::interval_at(Instant::now() + every, every);
        loop {
            tokio::select! {
                frame = lines.next_frame() => match frame {
                    Ok(Some(LineFrame::Line(line))) => {
                        let first = Message::text(String::from_utf8_lossy(line).into_owned());
                        match send_burst(&mut sink, &mut lines, first, stall).await {
                            Ok(true) => {}
                            Ok(false) => return Some(close(CloseCode::Normal, "the agent ended the connection")),
                            Err(()) => return None,
                        }
                    }
                    Ok(Some(LineFrame::Oversized { .. })) => {}
                    Ok(None) | Err(_) => return Some(close(CloseCode::Normal, "the agent ended the connection")),
                },
                _ = ping.tick() => {
                    if last_heard.lock().expect("lock").elapsed() > every * 3 {
                        tracing::debug!("closing a WebSocket that stopped answering");
                        return Some(close(CloseCode::Away, "nothing heard from the client"));
                    }
                    let ping = async {
                        feed(&mut sink, Message::Ping(Bytes::new()), stall).await?;
                        flush(&mut sink, stall).await
                    };
                    if ping.await.is_err() {
                        return None;
                    }
                }
            }
        }
    };
    let frame = tokio::select! {
        frame = incoming => frame,
        frame = outgoing => frame,
        () = shared.shutdown.cancelled() => Some(close(CloseCode::Away, "the server is shutting down")),
        () = slot.evict.cancelled() => Some(close(CloseCode::Again, "the server needed the place of an unused connection")),
    };
    // RFC 6455: a close frame with the reason's code, then the socket, without waiting long on
    // a client that does not read.
    if let Some(frame) = frame {
        let closing = async {
            let _ = sink.send(Message::Close(Some(frame))).await;
            let _ = sink.close().await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), closing).await;
    }
    // End of input for the agent once what was read is written: its pending calls fail, its
    // connection ends. An agent that no longer reads gets it when the writer is dropped.
    drop(to_writer);
    let _ = tokio::time::timeout(every.max(Duration::from_secs(1)), &mut writer).await;
}

fn close(code: CloseCode, reason: &'static str) -> CloseFrame {
    CloseFrame { code, reason: reason.into() }
}

/// The close frame for a read that failed (RFC 6455, 7.4.1), or `None` when the socket is
/// gone and nothing can be sent.
fn close_frame_for(error: &tokio_tungstenite::tungstenite::Error) -> Option<CloseFrame> {
    use tokio_tungstenite::tungstenite::Error;
    match error {
        Error::Capacity(_) => Some(close(CloseCode::Size, "the message is too large")),
        Error::Protocol(_) => Some(close(CloseCode::Protocol, "a WebSocket protocol error")),
        Error::Utf8(_) => Some(close(CloseCode::Invalid, "a text frame that is not UTF-8")),
        Error::WriteBufferFull(_) => Some(close(CloseCode::Policy, "the client does not read its replies")),
        _ => None,
    }
}

/// Writes the WebSocket's messages to the agent, one line each, then ends the agent's input.
async fn write_to_agent(mut to_agent: PipeWriter, mut queue: mpsc::Receiver<Vec<u8>>) {
    while let Some(line) = queue.recv().await {
        let write = async {
            to_agent.write_all(&line).await?;
            to_agent.write_all(b"\n").await
        };
        if write.await.is_err() {
            return;
        }
    }
    let _ = to_agent.shutdown().await;
}
