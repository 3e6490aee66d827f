//! Answering HTTP requests, in the order of the routing table in the module docs: the checks of
//! hosts, origins, the hook and headers, POST bodies within the server-wide budget, SSE streams,
//! and the WebSocket upgrade.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::{Notify, oneshot};
// tokio's clock, not std's: under a paused test clock, deadlines made from std's would be
// behind tokio's, so keep-alive timers fired again at once, without end.
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_util::sync::CancellationToken;

use crate::core::owner::Owner;
use crate::http::{CONNECTION_ID_HEADER, EVENT_STREAM, Envelope, SESSION_ID_HEADER, new_id, one_line};

use super::ServerShared;
use super::connection::{AcpConnection, Outbox, Route, Streams, WsSlot, route_output};
use super::sockets::Place;
use super::websocket::serve_websocket;

/// The body of every response: a whole text, or an SSE stream.
pub(super) enum ResponseBody {
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
pub(super) struct EventStream {
    pub(super) connection: Arc<AcpConnection>,
    pub(super) session: Option<String>,
    /// Its session was closed (and its outbox removed).
    pub(super) ended: bool,
    pub(super) keep_alive: Pin<Box<tokio::time::Sleep>>,
    pub(super) every: Duration,
    /// When the last events went out, if after the keep-alive timer was armed.
    pub(super) last_sent: Option<Instant>,
}

impl EventStream {
    pub(super) fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
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
                    return Poll::Ready(Some(Bytes::from_static(crate::http::SSE_KEEP_ALIVE)));
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
pub(super) struct BodyBudget {
    pub(super) free: std::sync::atomic::AtomicUsize,
}

/// The bytes one body has taken from the [`BodyBudget`]; given back when dropped.
pub(super) struct BodyShare {
    pub(super) budget: Arc<BodyBudget>,
    pub(super) held: usize,
}

impl BodyShare {
    /// Takes `n` more bytes if the budget has them.
    pub(super) fn take(&mut self, n: usize) -> bool {
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

pub(super) type HttpResponse = Response<ResponseBody>;

pub(super) fn text(status: StatusCode, message: &str) -> HttpResponse {
    let mut response = Response::new(ResponseBody::Full(Some(Bytes::from(format!("{message}\n")))));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

pub(super) fn json(status: StatusCode, body: Vec<u8>) -> HttpResponse {
    let mut response = Response::new(ResponseBody::Full(Some(Bytes::from(body))));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A JSON-RPC error with `id: null`, for HTTP answers to input that never reached the agent.
pub(super) fn rpc_error(status: StatusCode, code: i64, message: &str) -> HttpResponse {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    json(status, body.to_string().into_bytes())
}

pub(super) fn empty(status: StatusCode) -> HttpResponse {
    let mut response = Response::new(ResponseBody::Full(None));
    *response.status_mut() = status;
    response
}

/// A header's value as text; a 400 answer when it is not text or too long.
pub(super) fn id_header(headers: &HeaderMap, name: &str, max: usize) -> Result<Option<String>, BadHeader> {
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
pub(super) struct BadHeader(String);

impl From<BadHeader> for HttpResponse {
    fn from(BadHeader(message): BadHeader) -> Self {
        text(StatusCode::BAD_REQUEST, &message)
    }
}

/// The credentials of an `Authorization: Bearer <credentials>` value, the scheme matched in any
/// case (RFC 7235) and the spaces after it skipped; `None` for another scheme.
pub(super) fn bearer_credentials(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let credentials = rest.trim_ascii();
    (!credentials.is_empty()).then_some(credentials)
}

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(super) fn media_type_is(value: Option<&HeaderValue>, wanted: &str) -> bool {
    value
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(wanted))
}

pub(super) fn accepts_events(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).any(|v| {
        v.split(',').any(|item| item.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case(EVENT_STREAM)))
    })
}

pub(super) fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

impl ServerShared {
    pub(super) async fn handle(self: Arc<Self>, req: Request<Incoming>) -> HttpResponse {
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
    pub(super) async fn read_body(&self, mut body: Incoming, limit: usize) -> Result<(Bytes, BodyShare), HttpResponse> {
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
    pub(super) fn host_allowed(&self, req: &Request<Incoming>) -> bool {
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

    pub(super) async fn route(self: Arc<Self>, req: Request<Incoming>) -> HttpResponse {
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

    pub(super) async fn post(self: Arc<Self>, parts: Parts, body: Incoming, principal: Option<Owner>) -> HttpResponse {
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

    pub(super) async fn initialize(
        self: Arc<Self>,
        id: String,
        line: Vec<u8>,
        principal: Option<Owner>,
    ) -> HttpResponse {
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

    pub(super) fn get(&self, parts: &Parts, principal: Option<&Owner>) -> HttpResponse {
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

    pub(super) fn delete(&self, parts: &Parts, principal: Option<&Owner>) -> HttpResponse {
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

    pub(super) fn upgrade(self: Arc<Self>, mut req: Request<Incoming>, principal: Option<Owner>) -> HttpResponse {
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

pub(super) fn preflight() -> HttpResponse {
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
