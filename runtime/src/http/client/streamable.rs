//! The Streamable HTTP profile: POSTs for what the client sends, SSE streams (the connection's
//! and one per session) for what the agent sends, reopened when they drop, and `DELETE` at
//! the end.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, CONTENT_TYPE, COOKIE, HeaderMap, HeaderValue, SET_COOKIE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::core::tasks::AbortOnDrop;
use crate::http::{CONNECTION_ID_HEADER, EVENT_STREAM, Envelope, SESSION_ID_HEADER, one_line};

use super::delivery::{Delivery, Inbound, failure, is_error_response, read_received, request_id};
use super::live::{Endpoint, Limits, lock};
#[cfg(feature = "http-tls")]
use super::tls;
use super::{CookieJar, ERROR_BODY_LIMIT, sse};

#[cfg(not(feature = "http-tls"))]
pub(super) type HttpClient =
    hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;
#[cfg(feature = "http-tls")]
pub(super) type HttpClient = hyper_util::client::legacy::Client<tls::HttpsConnector, Full<Bytes>>;

/// What the driver and the stream readers share.
pub(super) struct Link {
    pub(super) endpoint: Endpoint,
    /// For POSTs and the DELETE.
    pub(super) http: HttpClient,
    /// For the streams: wherever HTTP/2 may be spoken (h2c, and TLS, where ALPN may pick it), a
    /// pool of its own, so that the open streams never take the stream slots the POSTs need on
    /// the one TCP connection an HTTP/2 pool holds (a server allows a fixed number of streams
    /// at once per connection; 100 is common). Over plain HTTP/1.1, the same pool.
    pub(super) streams_http: HttpClient,
    /// The configured extra headers.
    pub(super) headers: HeaderMap,
    pub(super) jar: CookieJar,
    pub(super) limits: Limits,
    pub(super) delivery: Delivery,
    /// To the driver (it alone opens streams).
    pub(super) commands: mpsc::UnboundedSender<Command>,
    pub(super) routes: Mutex<Routes>,
}

/// Which session the messages in flight belong to.
#[derive(Default)]
pub(super) struct Routes {
    /// The agent's requests that came for a session (by id): our answers carry its header.
    pub(super) agent_requests: HashMap<String, String>,
    /// Our requests awaiting an answer (by id), with their session, to fail them when the
    /// session's stream is lost. Only answers to these open or end session streams.
    pub(super) ours: HashMap<String, OurRequest>,
    /// Sessions whose close (or delete) succeeded, from the moment its answer is read until
    /// the driver has taken note ([`Command::SessionEnded`]): a stream end the driver sees in
    /// between comes from the close, like one seen while the close is in flight.
    pub(super) just_closed: std::collections::HashSet<String>,
}

pub(super) struct OurRequest {
    pub(super) session: Option<String>,
    /// `session/close` or `session/delete`: once it succeeds, the server forgets the session
    /// and ends its stream, which is then not reopened.
    pub(super) ends_session: bool,
}

/// TCP keep-alive on every connection to the server: probes start after this long without
/// traffic, every [`KEEPALIVE_INTERVAL`], and [`KEEPALIVE_RETRIES`] unanswered ones end the
/// connection. So a server whose host or network is gone (no FIN, no reset) fails the calls
/// waiting on it within about a minute, while a live server that is quiet for hours (a model
/// thinking, no keep-alive event on a WebSocket) is not disturbed: its kernel answers.
pub(super) const KEEPALIVE_TIME: std::time::Duration = std::time::Duration::from_secs(30);
pub(super) const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
pub(super) const KEEPALIVE_RETRIES: u32 = 3;

/// Turns on [`KEEPALIVE_TIME`]'s keep-alive on a WebSocket connection's socket (the HTTP
/// connector does the same for its own). A platform without the option keeps the socket as
/// it is.
pub(super) fn keep_alive(tcp: &tokio::net::TcpStream) {
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
pub(super) const CLOSED_STREAM_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// A session stream that ends sooner than this after it was opened ended early: the next
/// reopening waits [`reopen_pause`]. One that lived longer was a normal stream, and resets it.
pub(super) const STEADY_STREAM: std::time::Duration = std::time::Duration::from_secs(5);
/// The pause before the second reopening in a row of an early-ending stream (the first is at
/// once); it doubles with each further one, up to [`MAX_REOPEN_PAUSE`].
pub(super) const FIRST_REOPEN_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);
pub(super) const MAX_REOPEN_PAUSE: std::time::Duration = std::time::Duration::from_secs(5);

/// The pause before opening a session's stream again, after `early` streams of it in a row
/// ended early (this one included): none after the first, so a lone hiccup costs nothing; then
/// growing, so a server that ends the stream after every event is not asked again at once.
pub(super) fn reopen_pause(early: u32) -> std::time::Duration {
    match early {
        0 | 1 => std::time::Duration::ZERO,
        n => FIRST_REOPEN_PAUSE.saturating_mul(1 << (n - 2).min(16)).min(MAX_REOPEN_PAUSE),
    }
}

pub(super) enum Command {
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
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Vec<u8>,
    pub(super) complete: bool,
}

impl Answer {
    pub(super) fn error_data(&self) -> Value {
        let end = self.body.len().min(ERROR_BODY_LIMIT);
        json!({ "status": self.status.as_u16(), "body": String::from_utf8_lossy(&self.body[..end]) })
    }
}

/// Why a request could not be made.
pub(super) enum SendError {
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
pub(super) enum OpenError {
    Send(SendError),
    Status { status: StatusCode, body: String },
    NotAnEventStream(String),
}

impl OpenError {
    pub(super) fn data(&self) -> Value {
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
    pub(super) fn request(
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
    pub(super) async fn send(&self, request: Request<Full<Bytes>>) -> Result<Response<Incoming>, SendError> {
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
    pub(super) async fn post(
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
    pub(super) async fn open_stream(&self, connection: &str, session: Option<&str>) -> Result<Incoming, OpenError> {
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
    pub(super) async fn receive(&self, data: Vec<u8>, session: Option<&str>) -> bool {
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
    pub(super) async fn read_stream(self: Arc<Self>, mut body: Incoming, session: Option<String>, generation: u64) {
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
pub(super) async fn read_body(mut body: Incoming, limit: usize) -> Result<(Vec<u8>, bool), hyper::Error> {
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
pub(super) fn describe_error(error: &dyn std::error::Error) -> String {
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
pub(super) struct StreamSlot {
    pub(super) generation: u64,
    /// This stream replaces one that ended without bringing anything since its own start.
    pub(super) reopened: bool,
    /// Our `session/close` or `session/delete` of its session succeeded: not reopened.
    pub(super) closed: bool,
    /// When it was opened, and how many streams of its session in a row before it ended early
    /// ([`STEADY_STREAM`]): what the pause before reopening it grows with.
    pub(super) opened: std::time::Instant,
    pub(super) early: u32,
    pub(super) _reader: AbortOnDrop<()>,
}

/// Sends what the connection writes, one POST at a time, and manages the streams.
pub(super) struct HttpDriver {
    pub(super) link: Arc<Link>,
    /// What the driver itself hands to the connection (answers in POST bodies, failures, the
    /// end) while the input queue is full, in order. The driver never waits for room there:
    /// it is also what drains the connection's output, and a connection whose input is full
    /// may be waiting for its output to drain (to write its answers), so both would stop.
    pub(super) held: VecDeque<Inbound>,
    /// By session; `None` is the connection stream.
    pub(super) streams: HashMap<Option<String>, StreamSlot>,
    /// Sessions whose stream ended early and is to be opened again, with how many of its
    /// streams in a row ended early: waiting for [`Command::Reopen`] when there is a pause.
    /// Opening the stream for any reason takes the count over.
    pub(super) reopening: HashMap<String, u32>,
    pub(super) next_generation: u64,
    /// The connection's input has been ended.
    pub(super) ended: bool,
    /// The server no longer knows the connection (404/410): no DELETE.
    pub(super) gone: bool,
}

impl HttpDriver {
    pub(super) async fn run(
        mut self,
        mut lines: mpsc::Receiver<Vec<u8>>,
        mut commands: mpsc::UnboundedReceiver<Command>,
    ) {
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
    pub(super) fn hand_over(&mut self, item: Inbound) {
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
    pub(super) fn fail(&mut self, id: &str, message: &str, data: Value) {
        self.hand_over(failure(id, message, data));
    }

    pub(super) fn connection_id(&self) -> Option<String> {
        lock(&self.link.delivery.status.connection_id).clone()
    }

    /// Sends one message the connection wrote.
    pub(super) async fn send(&mut self, message: Vec<u8>) {
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
    pub(super) async fn initialize(&mut self, message: Vec<u8>, envelope: &Envelope) {
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
    pub(super) async fn open(
        &mut self,
        connection: &str,
        session: Option<String>,
        reopened: bool,
    ) -> Result<(), OpenError> {
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

    pub(super) async fn command(&mut self, command: Command) {
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
    pub(super) fn reopen_if_still_closing_later(&self, session: String) {
        let commands = self.link.commands.clone();
        tokio::spawn(async move {
            tokio::time::sleep(CLOSED_STREAM_GRACE).await;
            let _ = commands.send(Command::ReopenIfStillClosing(session));
        });
    }

    /// Whether our `session/close` or `session/delete` of `session` is in flight (or its success
    /// not yet taken note of).
    pub(super) fn closing(&self, session: &str) -> bool {
        let routes = lock(&self.link.routes);
        routes.just_closed.contains(session)
            || routes.ours.values().any(|r| r.ends_session && r.session.as_deref() == Some(session))
    }

    /// A message of ours names `session` again (e.g. `session/load` right after its close): a
    /// stream still read after the close is the session's stream again, not dropped.
    pub(super) fn in_use_again(&mut self, session: &str) {
        if let Some(slot) = self.streams.get_mut(&Some(session.to_owned())) {
            slot.closed = false;
        }
    }

    /// The server no longer knows `session` (it answered a POST about it 404): its stream is
    /// dropped and its pending requests fail; the connection and its other sessions go on. A
    /// later message naming the session opens its stream again.
    pub(super) fn end_session(&mut self, session: &str, reason: &str) {
        self.streams.remove(&Some(session.to_owned()));
        self.fail_session(session, reason);
    }

    /// Fails our pending requests of `session` (and forgets a reopening of its stream waiting
    /// for its pause).
    pub(super) fn fail_session(&mut self, session: &str, reason: &str) {
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
    pub(super) fn end(&mut self, reason: String) {
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
    pub(super) async fn finish(mut self) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_before_reopening_a_stream_grows_to_its_bound() {
        let pauses: Vec<u64> = (0..9).map(|early| reopen_pause(early).as_millis() as u64).collect();
        assert_eq!(pauses, [0, 0, 250, 500, 1000, 2000, 4000, 5000, 5000]);
        assert_eq!(reopen_pause(u32::MAX), MAX_REOPEN_PAUSE);
    }
}
