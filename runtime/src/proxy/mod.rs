//! Proxies: components that sit between a client and an agent (the proxy chains RFD), and the
//! [`conductor`] that runs a chain of them.
//!
//! A proxy speaks to one peer, its conductor, and plays both ends through it: toward the
//! client it is an agent, toward the agent a client. It handles the messages it cares about
//! ([`Proxy::intercepts`]) and everything else passes through it untouched, in the order it
//! came, with cancellation passed on hop by hop (see [`Connection::forwarding`]).
//!
//! # The wire, as the official conductor speaks it
//!
//! | message | on the wire between conductor and proxy |
//! |---|---|
//! | the client's `initialize` | `proxy/initialize` to the proxy, same params and result |
//! | client side → proxy | the plain message (`session/prompt`, `session/cancel`, ...) |
//! | proxy → its successor | `proxy/successor {"method": M, "params": P}` (request or notification, as the wrapped message) |
//! | successor → proxy | `proxy/successor {"method": M, "params": P}` from the conductor |
//! | proxy → client side | the plain message |
//! | answers | plain answers to the outer ids; a wrapped request's result or error is the wrapped one's, unwrapped |
//! | cancellation | `$/cancel_request` for the id of each hop; `session/cancel` travels like any notification |
//!
//! The envelope's own `_meta` belongs to the hop and is not passed on; the wrapped message's
//! `_meta` is inside its params and is. A plain `initialize` sent to a proxy (other than the
//! older wire's, below), and envelopes nested in envelopes, are answered -32600.
//!
//! # Earlier wires
//!
//! Conductors built on the `sacp` crates speak earlier forms of the RFD, and a proxy speaks
//! the one it is initialized with ([`Wire`], [`ProxyContext::wire`]); its code does not change:
//!
//! | message | `sacp` 11 (`sacp-conductor` 11) | older (`@thinkwell/conductor` 0.5, earlier `sacp`) |
//! |---|---|---|
//! | the client's `initialize` | `_proxy/initialize` | `initialize` with `"_meta": {"proxy": true}`; the answer must carry the same marker |
//! | to or from the successor | `_proxy/successor` | `_proxy/successor/request` or `_proxy/successor/notification` |
//!
//! Envelopes hold `{"method": M, "params": P}` on every wire, and everything else is as above.
//! On the older wire, the proxy passes `initialize` on with its marker (a proxy behind it
//! learns the same way that it is one; an agent ignores a `_meta` key it does not know), and
//! adds the marker to the answer it gets back, changing nothing else in it.
//!
//! # Lossless
//!
//! A forwarded message keeps its params byte for byte (line breaks between tokens aside, see
//! the [crate docs](crate)); a forwarded request's answer comes back verbatim. A proxy that
//! changes a message decodes it into the generated types and encodes it again; to keep the
//! members those types do not know (and `_meta`), edit it through `acp_types::lossless`.
//!
//! # MCP servers of a proxy
//!
//! A proxy that offers tools to the agent through the connection (MCP over ACP) uses
//! `acp_rpc::mcp::McpServers` (feature `mcp-over-acp`), which is a [`Proxy`] of its own:
//! it adds its servers to `session/new` and answers the agent's `mcp/*` for them.
//!
//! # Example: a proxy that adds context to every prompt
//!
//! ```no_run
//! use acp_rpc::proxy::{Proxy, ProxyContext, Side, serve_proxy};
//! use acp_rpc::{ErrorObject, IncomingRequest, RawValue};
//! use serde_json::Value;
//!
//! struct AddContext;
//!
//! impl Proxy for AddContext {
//!     fn intercepts(&self, from: Side, method: &str) -> bool {
//!         from == Side::Client && method == "session/prompt"
//!     }
//!
//!     async fn handle_request(
//!         &self,
//!         cx: ProxyContext,
//!         _from: Side,
//!         mut req: IncomingRequest,
//!     ) -> Result<Box<RawValue>, ErrorObject> {
//!         let mut params: Value = req.parse_params()?;
//!         if let Some(prompt) = params["prompt"].as_array_mut() {
//!             prompt.insert(0, serde_json::json!({"type": "text", "text": "Answer in French."}));
//!         }
//!         req.params = Some(serde_json::value::to_raw_value(&params).map_err(ErrorObject::internal_error)?);
//!         cx.forward_request(Side::Client, req).await
//!     }
//! }
//!
//! # async fn run() -> Result<(), acp_rpc::Error> {
//! let (reader, writer) = acp_rpc::transport::stdio();
//! serve_proxy(AddContext, reader, writer).await
//! # }
//! ```

pub mod conductor;
pub(crate) mod envelope;
mod typed;

pub use typed::{FromParams, IntoAnswer, IntoParams, ProxiedNotification, ProxiedRequest, Undecodable, answer};

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use crate::core::connection::Connection;
use crate::core::error::Error;
use crate::core::handler::{Forward, Handler, IncomingNotification, IncomingRequest};
use crate::core::jsonrpc::{ErrorObject, Id};
use crate::core::methods::{
    self, PROXY_INITIALIZE, PROXY_SUCCESSOR, SACP_PROXY_INITIALIZE, SACP_PROXY_SUCCESSOR, SACP_SUCCESSOR_NOTIFICATION,
    SACP_SUCCESSOR_REQUEST,
};
use crate::core::peer::Peer;

/// Where a message comes from, as seen by a proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// From the client's side of the chain (the proxy's predecessor).
    Client,
    /// From the agent's side of the chain (the proxy's successor).
    Agent,
}

impl Side {
    /// The other side: where a message from this side goes on to.
    pub fn other(self) -> Side {
        match self {
            Side::Client => Side::Agent,
            Side::Agent => Side::Client,
        }
    }
}

/// A proxy's handlers. Only the messages [`Proxy::intercepts`] claims reach them; the rest is
/// forwarded by the runtime without being decoded. The defaults forward what reaches them, so
/// a proxy implements only what it changes.
///
/// `initialize` is seen under that name (the conductor sends it as `proxy/initialize`).
pub trait Proxy: Send + Sync + 'static {
    /// Whether this proxy handles `method` arriving from `from` itself. Asked once per
    /// message, in arrival order, on the connection's notification task: keep it a lookup.
    fn intercepts(&self, from: Side, method: &str) -> bool {
        let _ = (from, method);
        false
    }

    /// Answers an intercepted request. `req.method` and `req.params` are the message's own
    /// (unwrapped when it came from the agent's side); `req.cancel` fires when the sender
    /// cancels it. The default passes it on ([`ProxyContext::forward_request`]).
    fn handle_request(
        &self,
        cx: ProxyContext,
        from: Side,
        req: IncomingRequest,
    ) -> impl Future<Output = Result<Box<RawValue>, ErrorObject>> + Send {
        async move { cx.forward_request(from, req).await }
    }

    /// Handles an intercepted notification, in arrival order with every other notification.
    /// The default passes it on ([`ProxyContext::forward_notification`]).
    fn handle_notification(
        &self,
        cx: ProxyContext,
        from: Side,
        notification: IncomingNotification,
    ) -> impl Future<Output = ()> + Send {
        async move { cx.forward_notification(from, notification).await }
    }
}

impl<P: Proxy> Proxy for Arc<P> {
    fn intercepts(&self, from: Side, method: &str) -> bool {
        (**self).intercepts(from, method)
    }

    fn handle_request(
        &self,
        cx: ProxyContext,
        from: Side,
        req: IncomingRequest,
    ) -> impl Future<Output = Result<Box<RawValue>, ErrorObject>> + Send {
        (**self).handle_request(cx, from, req)
    }

    fn handle_notification(
        &self,
        cx: ProxyContext,
        from: Side,
        notification: IncomingNotification,
    ) -> impl Future<Output = ()> + Send {
        (**self).handle_notification(cx, from, notification)
    }
}

/// How long a cancelled request waits for its answer from further down the chain on
/// [`serve_proxy`]'s connection: the conductor's default for its hops.
pub const PROXY_CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// A proxy that forwards everything: a chain with it behaves as one without it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Passthrough;

impl Proxy for Passthrough {}

/// Serves `proxy` to its conductor over `reader` / `writer` (stdio for a proxy process) until
/// the conductor closes the connection. A cancelled request waits up to [`PROXY_CANCEL_GRACE`]
/// for its answer from further down the chain (as the conductor's hops do), so an agent's last
/// updates of a cancelled turn still come before the turn's answer; [`proxy_connection`] takes
/// a connection of your own settings.
pub async fn serve_proxy<P, R, W>(proxy: P, reader: R, writer: W) -> Result<(), Error>
where
    P: Proxy,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let connection = Connection::new().cancel_grace(PROXY_CANCEL_GRACE);
    let (_peer, serve) = proxy_connection(connection, proxy, reader, writer);
    serve.await
}

/// Starts `proxy` on a connection built from `connection` (turned into a
/// [forwarding](Connection::forwarding) one): its [`Peer`] (the conductor) and the
/// [`Serve`](crate::Serve) future.
pub fn proxy_connection<P, R, W>(connection: Connection, proxy: P, reader: R, writer: W) -> (Peer, crate::Serve)
where
    P: Proxy,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let proxy = Arc::new(proxy);
    connection.forwarding().wrapped_cancels(wrapped_cancel_request).serve_with(reader, writer, move |peer| {
        ProxyRouter { proxy, cx: ProxyContext { peer: peer.clone(), wire: Arc::default() } }
    })
}

/// What a proxy's handlers talk through: the chain on both sides of the proxy.
#[derive(Clone, Debug)]
pub struct ProxyContext {
    peer: Peer,
    /// The wire the conductor speaks (a [`Wire`] as a number; see the module docs): set by
    /// the conductor's `initialize`, before anything after it is forwarded.
    wire: Arc<AtomicU8>,
}

/// The proxy wire a conductor speaks (see the [module docs](self)): the proxy chains RFD as the
/// official conductor speaks it, or an earlier form of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Wire {
    /// `proxy/initialize` and `proxy/successor` (the official conductor 5.0, ours).
    #[default]
    Current,
    /// `_proxy/initialize` and `_proxy/successor` (`sacp-conductor` 11).
    Sacp,
    /// `initialize` marked `"_meta": {"proxy": true}`, and `_proxy/successor/request` /
    /// `_proxy/successor/notification` (`@thinkwell/conductor` 0.5).
    Older,
}

impl Wire {
    pub(crate) fn from_u8(n: u8) -> Wire {
        match n {
            1 => Wire::Sacp,
            2 => Wire::Older,
            _ => Wire::Current,
        }
    }

    pub(crate) fn as_u8(self) -> u8 {
        match self {
            Wire::Current => 0,
            Wire::Sacp => 1,
            Wire::Older => 2,
        }
    }

    /// The method that initializes a proxy on this wire (on the older one, `initialize`
    /// marked in its `_meta`).
    pub fn initialize_method(self) -> &'static str {
        match self {
            Wire::Current => PROXY_INITIALIZE,
            Wire::Sacp => SACP_PROXY_INITIALIZE,
            Wire::Older => INITIALIZE,
        }
    }

    /// The envelope of a request (`notification: false`) or a notification for a proxy's
    /// successor or from it.
    pub fn successor_envelope(self, notification: bool) -> &'static str {
        match (self, notification) {
            (Wire::Current, _) => PROXY_SUCCESSOR,
            (Wire::Sacp, _) => SACP_PROXY_SUCCESSOR,
            (Wire::Older, false) => SACP_SUCCESSOR_REQUEST,
            (Wire::Older, true) => SACP_SUCCESSOR_NOTIFICATION,
        }
    }

    /// Whether `method` is an envelope of this wire.
    pub fn is_successor_envelope(self, method: &str) -> bool {
        match self {
            Wire::Current => method == PROXY_SUCCESSOR,
            Wire::Sacp => method == SACP_PROXY_SUCCESSOR,
            Wire::Older => method == SACP_SUCCESSOR_REQUEST || method == SACP_SUCCESSOR_NOTIFICATION,
        }
    }
}

impl ProxyContext {
    /// Calls and notifications toward the client (the proxy's predecessor).
    pub fn client(&self) -> Hop<'_> {
        self.toward(Side::Client)
    }

    /// Calls and notifications toward the agent (the proxy's successor).
    pub fn agent(&self) -> Hop<'_> {
        self.toward(Side::Agent)
    }

    /// The hop toward `side`.
    pub fn toward(&self, side: Side) -> Hop<'_> {
        Hop { peer: &self.peer, side, wire: self.wire() }
    }

    /// The wire this proxy's conductor speaks (see the [module docs](self)), as its
    /// `initialize` said; [`Wire::Current`] until then.
    pub fn wire(&self) -> Wire {
        Wire::from_u8(self.wire.load(Ordering::Acquire))
    }

    /// The cell holding [`ProxyContext::wire`], for what sends toward the successor later.
    #[cfg(feature = "mcp-over-acp")]
    pub(crate) fn wire_cell(&self) -> Arc<AtomicU8> {
        self.wire.clone()
    }

    fn set_wire(&self, wire: Wire) {
        self.wire.store(wire.as_u8(), Ordering::Release);
    }

    /// Passes an intercepted request on, in the direction it was going (a request from the
    /// client goes to the agent), and returns the answer it gets there. Cancelling `req` (its
    /// sender's `$/cancel_request`) cancels the forwarded call. A `session/prompt` cancelled by
    /// a `session/cancel` is left to that notification, which is forwarded by itself.
    pub async fn forward_request(&self, from: Side, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let hop = self.toward(from.other());
        let answer = if req.method == methods::SESSION_PROMPT {
            forward_prompt(hop, &req.method, req.params.as_deref(), &req.cancel, &req.peer, &req.id).await
        } else {
            hop.request_raw_until(&req.method, req.params.as_deref(), &req.cancel).await
        };
        answer.map_err(answer_error)
    }

    /// Passes an intercepted notification on, in the direction it was going.
    pub async fn forward_notification(&self, from: Side, notification: IncomingNotification) {
        let hop = self.toward(from.other());
        if let Err(e) = hop.notify_raw(&notification.method, notification.params.as_deref()).await {
            tracing::debug!(error = %e, method = %notification.method, "acp proxy: notification not forwarded");
        }
    }

    /// The connection to the conductor.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }
}

/// One direction of a proxy's chain: messages sent here go toward the client or the agent,
/// wrapped for the conductor as the wire needs.
#[derive(Clone, Copy, Debug)]
pub struct Hop<'a> {
    peer: &'a Peer,
    side: Side,
    wire: Wire,
}

impl Hop<'_> {
    /// The method of the envelope a message for the successor travels in.
    fn envelope(&self, kind: Kind) -> &'static str {
        successor_envelope(self.wire, kind)
    }

    /// Calls `method` on this side with raw params; the raw answer.
    pub async fn request_raw(&self, method: &str, params: Option<&RawValue>) -> Result<Box<RawValue>, Error> {
        match self.side {
            Side::Client => self.peer.request_raw(method, params).await,
            Side::Agent => {
                let wrapped = envelope::wrap(method, params);
                self.peer.request_raw(self.envelope(Kind::Request), Some(&wrapped)).await
            }
        }
    }

    /// [`Hop::request_raw`] tied to `cancel` (see [`Peer::request_raw_until`]).
    pub async fn request_raw_until(
        &self,
        method: &str,
        params: Option<&RawValue>,
        cancel: &CancellationToken,
    ) -> Result<Box<RawValue>, Error> {
        match self.side {
            Side::Client => self.peer.request_raw_until(method, params, cancel).await,
            Side::Agent => {
                let wrapped = envelope::wrap(method, params);
                self.peer.request_raw_until(self.envelope(Kind::Request), Some(&wrapped), cancel).await
            }
        }
    }

    /// Calls `method` on this side, encoding `params` and decoding the answer.
    pub async fn request<P, R>(&self, method: &str, params: &P) -> Result<R, Error>
    where
        P: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let params = serde_json::value::to_raw_value(params).map_err(Error::Encode)?;
        let answer = self.request_raw(method, Some(&params)).await?;
        crate::core::jsonrpc::decode_with_path(answer.get())
            .map_err(|(path, message)| Error::Decode { path: path.unwrap_or_default(), message })
    }

    /// Sends a notification with raw params to this side.
    pub async fn notify_raw(&self, method: &str, params: Option<&RawValue>) -> Result<(), Error> {
        match self.side {
            Side::Client => self.peer.notify_raw(method, params).await,
            Side::Agent => {
                let wrapped = envelope::wrap(method, params);
                self.peer.notify_raw(self.envelope(Kind::Notification), Some(&wrapped)).await
            }
        }
    }

    /// Sends a notification to this side, encoding `params`.
    pub async fn notify<P: Serialize + ?Sized>(&self, method: &str, params: &P) -> Result<(), Error> {
        let params = serde_json::value::to_raw_value(params).map_err(Error::Encode)?;
        self.notify_raw(method, Some(&params)).await
    }
}

/// Forwards a `session/prompt` and waits for its answer. When it is cancelled, the next hop
/// gets a `$/cancel_request` only if that is what cancelled it here: a `session/cancel` is
/// forwarded as it is, and the next hop cancels its own prompt on it.
async fn forward_prompt(
    hop: Hop<'_>,
    method: &str,
    params: Option<&RawValue>,
    cancel: &CancellationToken,
    from: &Peer,
    id: &Id,
) -> Result<Box<RawValue>, Error> {
    let mut pending = match hop.side {
        Side::Client => hop.peer.send_request_raw(method, params).await?,
        Side::Agent => {
            let wrapped = envelope::wrap(method, params);
            hop.peer.send_request_raw(hop.envelope(Kind::Request), Some(&wrapped)).await?
        }
    };
    tokio::select! {
        biased;
        answer = &mut pending => answer,
        () = cancel.cancelled() => {
            if from.cancelled_by_cancel_request(id) {
                pending.cancel();
            }
            pending.await
        }
    }
}

/// The answer to pass back for a call that failed on the next hop.
pub(crate) fn answer_error(e: Error) -> ErrorObject {
    match e {
        Error::Rpc(error) => error,
        Error::Cancelled => ErrorObject::request_cancelled(),
        other => ErrorObject::internal_error(format_args!("forwarding failed: {other}")),
    }
}

/// Whether a message is a request or a notification: the older wire wraps each in its own
/// envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Request,
    Notification,
}

/// The envelope method for a message to or from the successor, on `wire`.
fn successor_envelope(wire: Wire, kind: Kind) -> &'static str {
    wire.successor_envelope(kind == Kind::Notification)
}

/// The proxy's side of the wire: unwraps and wraps envelopes, forwards what the proxy does not
/// intercept, and hands it the rest.
struct ProxyRouter<P> {
    proxy: Arc<P>,
    cx: ProxyContext,
}

impl<P> ProxyRouter<P> {
    fn forward_to<'a>(&self, method: Cow<'a, str>, params: Option<Cow<'a, RawValue>>) -> Option<Forward<'a>> {
        Some(Forward { to: self.cx.peer.clone(), method, params })
    }

    /// Whether `method` is an envelope from the successor on the wire this proxy speaks
    /// (`proxy/successor` on any).
    fn is_from_successor(&self, method: &str) -> bool {
        method == PROXY_SUCCESSOR || self.cx.wire().is_successor_envelope(method)
    }
}

fn not_for_a_proxy(method: &str) -> ErrorObject {
    if is_chain_method(method) {
        return ErrorObject::invalid_request(format_args!("`{method}` cannot be wrapped in an envelope"));
    }
    ErrorObject::invalid_request(
        "this component is a proxy: it is initialized by a conductor, with `proxy/initialize` (or \
         `_proxy/initialize`, or an `initialize` whose `_meta.proxy` is true), not with a plain `initialize`",
    )
}

pub(crate) fn is_chain_method(method: &str) -> bool {
    matches!(
        method,
        PROXY_INITIALIZE
            | PROXY_SUCCESSOR
            | SACP_PROXY_INITIALIZE
            | SACP_PROXY_SUCCESSOR
            | SACP_SUCCESSOR_REQUEST
            | SACP_SUCCESSOR_NOTIFICATION
    )
}

/// Whether `method` is a successor envelope of any wire: what a proxy sends before its wire
/// is known (one that passes on the `proxy/initialize` it does not know) is one too.
pub(crate) fn is_any_successor_envelope(method: &str) -> bool {
    matches!(method, PROXY_SUCCESSOR | SACP_PROXY_SUCCESSOR | SACP_SUCCESSOR_REQUEST | SACP_SUCCESSOR_NOTIFICATION)
}

/// The params of the `$/cancel_request` a notification carries in a successor envelope, if it
/// is one (see [`crate::connection::WrappedCancel`]).
pub(crate) fn wrapped_cancel_request<'a>(method: &str, params: Option<&'a RawValue>) -> Option<Option<&'a RawValue>> {
    if !is_any_successor_envelope(method) {
        return None;
    }
    let inner = envelope::unwrap(params).ok()?;
    (inner.method == crate::core::methods::CANCEL_REQUEST).then_some(inner.params)
}

/// Whether a request initializes a hop of a chain: `initialize` and the proxy forms, also
/// inside a successor envelope. Nothing read after one may overtake it
/// ([`Handler::handles_in_order`]).
pub(crate) fn initializes(method: &str, params: Option<&RawValue>) -> bool {
    match method {
        INITIALIZE | PROXY_INITIALIZE | SACP_PROXY_INITIALIZE => true,
        m if is_any_successor_envelope(m) => envelope::unwrap(params).is_ok_and(|inner| inner.method == INITIALIZE),
        _ => false,
    }
}

/// Whether an `initialize` (or its answer) carries the older wire's marker: `_meta.proxy` is
/// `true`.
pub(crate) fn marks_a_proxy(params: Option<&RawValue>) -> bool {
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(rename = "_meta")]
        meta: Option<Meta>,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        proxy: Option<serde_json::Value>,
    }
    params
        .and_then(|p| serde_json::from_str::<Params>(p.get()).ok())
        .and_then(|p| p.meta?.proxy)
        .is_some_and(|proxy| proxy == serde_json::Value::Bool(true))
}

/// The answer to the older wire's `initialize`: the successor's, with `_meta.proxy: true`
/// added and every other member as it was written.
pub(crate) fn with_proxy_marker(answer: Box<RawValue>) -> Result<Box<RawValue>, ErrorObject> {
    match mark_as_proxy(Some(&answer)) {
        Ok(marked) => Ok(marked),
        Err(e) => Err(ErrorObject::internal_error(format_args!("the successor's `initialize` answer: {e}"))),
    }
}

/// `object` with `_meta.proxy: true` added (the older wire's `initialize` and its answer) and
/// every other member as it was written; an error when it is not a JSON object. Absent params
/// become an object holding the marker alone.
pub(crate) fn mark_as_proxy(object: Option<&RawValue>) -> Result<Box<RawValue>, String> {
    use acp_types::lossless::Lossless;
    let Some(object) = object else {
        return RawValue::from_string(r#"{"_meta":{"proxy":true}}"#.to_owned()).map_err(|e| e.to_string());
    };
    let marked = Lossless::<serde_json::Value>::map(object, |result| {
        if let Some(result) = result.as_object_mut() {
            let meta = result.entry("_meta").or_insert_with(|| serde_json::json!({}));
            if !meta.is_object() {
                *meta = serde_json::json!({});
            }
            meta["proxy"] = serde_json::Value::Bool(true);
        }
    });
    match marked {
        Ok(marked) if marked.get().starts_with('{') => Ok(marked),
        Ok(_) => Err("not a JSON object".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

impl<P: Proxy> ProxyRouter<P> {
    /// Where an incoming message goes when the proxy does not intercept it; `None` when it is
    /// the proxy's to handle.
    fn route<'a>(&self, method: &'a str, params: Option<&'a RawValue>, kind: Kind) -> Option<Forward<'a>> {
        if self.is_from_successor(method) {
            let inner = envelope::unwrap(params).ok()?;
            if is_chain_method(&inner.method) || self.proxy.intercepts(Side::Agent, &inner.method) {
                return None;
            }
            return self.forward_to(inner.method, inner.params.map(Cow::Borrowed));
        }
        // The wire is told here, in arrival order, so that everything after the conductor's
        // `initialize` is wrapped for it.
        let wire = match method {
            PROXY_INITIALIZE | SACP_PROXY_INITIALIZE => {
                let wire = if method == PROXY_INITIALIZE { Wire::Current } else { Wire::Sacp };
                if kind == Kind::Request {
                    self.cx.set_wire(wire);
                }
                if self.proxy.intercepts(Side::Client, INITIALIZE) {
                    return None;
                }
                let wrapped = Cow::Owned(envelope::wrap(INITIALIZE, params));
                return self.forward_to(Cow::Borrowed(successor_envelope(wire, kind)), Some(wrapped));
            }
            INITIALIZE => {
                // The older wire's answer needs the marker, so the handler sends it on.
                if kind == Kind::Request && marks_a_proxy(params) {
                    self.cx.set_wire(Wire::Older);
                }
                return None;
            }
            _ => self.cx.wire(),
        };
        if self.proxy.intercepts(Side::Client, method) {
            return None;
        }
        let wrapped = Cow::Owned(envelope::wrap(method, params));
        self.forward_to(Cow::Borrowed(successor_envelope(wire, kind)), Some(wrapped))
    }
}

impl<P: Proxy> Handler for ProxyRouter<P> {
    fn forward<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>> {
        self.route(method, params, Kind::Request)
    }

    fn forward_notification<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>> {
        self.route(method, params, Kind::Notification)
    }

    fn handles_in_order(&self, method: &str, params: Option<&RawValue>) -> bool {
        initializes(method, params)
    }

    async fn handle_request(&self, mut req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let from = match &*req.method {
            m if self.is_from_successor(m) => {
                let (method, params) = {
                    let inner = envelope::unwrap(req.params.as_deref())?;
                    if is_chain_method(&inner.method) {
                        return Err(not_for_a_proxy(&inner.method));
                    }
                    (methods::intern(&inner.method), inner.params.map(ToOwned::to_owned))
                };
                req.session_id = crate::core::methods::session_id_of(params.as_deref());
                req.method = method;
                req.params = params;
                Side::Agent
            }
            PROXY_INITIALIZE | SACP_PROXY_INITIALIZE => {
                req.method = Cow::Borrowed(INITIALIZE);
                Side::Client
            }
            INITIALIZE if self.cx.wire() == Wire::Older => {
                let answer = self.proxy.handle_request(self.cx.clone(), Side::Client, req).await?;
                return with_proxy_marker(answer);
            }
            INITIALIZE => return Err(not_for_a_proxy(INITIALIZE)),
            _ => Side::Client,
        };
        self.proxy.handle_request(self.cx.clone(), from, req).await
    }

    async fn handle_notification(&self, mut notification: IncomingNotification) {
        let from = if self.is_from_successor(&notification.method) {
            let Ok(inner) = envelope::unwrap(notification.params.as_deref()) else {
                tracing::warn!(method = %notification.method, "acp proxy: invalid envelope notification ignored");
                return;
            };
            if is_chain_method(&inner.method) {
                tracing::warn!(method = %inner.method, "acp proxy: nested chain notification ignored");
                return;
            }
            let (method, params) = (methods::intern(&inner.method), inner.params.map(ToOwned::to_owned));
            notification.method = method;
            notification.params = params;
            Side::Agent
        } else {
            Side::Client
        };
        self.proxy.handle_notification(self.cx.clone(), from, notification).await;
    }
}

const INITIALIZE: &str = acp_types::agent_method::INITIALIZE;

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn the_older_wires_initialize_is_told_by_its_proxy_marker() {
        assert!(marks_a_proxy(Some(&raw(r#"{"protocolVersion":1,"_meta":{"x":1,"proxy":true}}"#))));
        for not_marked in [
            r#"{"protocolVersion":1}"#,
            r#"{"protocolVersion":1,"_meta":{"proxy":false}}"#,
            r#"{"protocolVersion":1,"_meta":{"proxy":"true"}}"#,
            r#"{"protocolVersion":1,"_meta":null}"#,
            r#"[1]"#,
        ] {
            assert!(!marks_a_proxy(Some(&raw(not_marked))), "{not_marked}");
        }
        assert!(!marks_a_proxy(None));
    }

    #[test]
    fn the_marker_is_added_to_the_answer_and_nothing_else_changes() {
        let answer = raw(r#"{"protocolVersion":1,"x-new":{"b":2,"a":1.50},"agentCapabilities":{}}"#);
        assert_eq!(
            with_proxy_marker(answer).unwrap().get(),
            r#"{"protocolVersion":1,"x-new":{"b":2,"a":1.50},"agentCapabilities":{},"_meta":{"proxy":true}}"#
        );
        let answer = raw(r#"{"_meta":{"z":[1.0],"a":true},"protocolVersion":1}"#);
        assert_eq!(
            with_proxy_marker(answer).unwrap().get(),
            r#"{"_meta":{"z":[1.0],"a":true,"proxy":true},"protocolVersion":1}"#
        );
        let answer = raw(r#"{"_meta":{"proxy":true},"protocolVersion":1}"#);
        assert_eq!(with_proxy_marker(answer).unwrap().get(), r#"{"_meta":{"proxy":true},"protocolVersion":1}"#);
        assert_eq!(with_proxy_marker(raw(r#"{"_meta":null}"#)).unwrap().get(), r#"{"_meta":{"proxy":true}}"#);
        assert!(with_proxy_marker(raw("[]")).is_err());
    }

    #[test]
    fn each_wire_has_its_envelopes() {
        assert_eq!(successor_envelope(Wire::Current, Kind::Request), "proxy/successor");
        assert_eq!(successor_envelope(Wire::Current, Kind::Notification), "proxy/successor");
        assert_eq!(successor_envelope(Wire::Sacp, Kind::Request), "_proxy/successor");
        assert_eq!(successor_envelope(Wire::Sacp, Kind::Notification), "_proxy/successor");
        assert_eq!(successor_envelope(Wire::Older, Kind::Request), "_proxy/successor/request");
        assert_eq!(successor_envelope(Wire::Older, Kind::Notification), "_proxy/successor/notification");
        for wire in [Wire::Current, Wire::Sacp, Wire::Older] {
            assert_eq!(Wire::from_u8(wire.as_u8()), wire);
            for notification in [false, true] {
                assert!(wire.is_successor_envelope(wire.successor_envelope(notification)));
            }
        }
        assert!(!Wire::Current.is_successor_envelope("_proxy/successor"));
        assert!(!Wire::Sacp.is_successor_envelope("_proxy/successor/request"));
    }
}
