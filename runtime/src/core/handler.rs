//! The raw handler interface: what the connection calls for each incoming request and
//! notification. The typed layer implements [`Handler`] once, decoding params by method.
//!
//! The connection itself only sees `DynHandler`, the object-safe form of [`Handler`]: the
//! reader, the request tasks and the notification task are then compiled once, in this crate,
//! instead of again in every crate that serves a handler.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::core::jsonrpc::{ErrorObject, Id};
use crate::core::methods::session_id_of;
use crate::core::peer::Peer;
use crate::core::watch::Watch;

/// Handles what the peer sends. Requests run concurrently, each in its own task; notifications
/// run one at a time, in arrival order (see [`crate::connection`] for the full contract).
pub trait Handler: Send + Sync + 'static {
    /// Answers one request. The default answers -32601 (method not found).
    ///
    /// Watch `req.cancel`: once it fires the handler has the connection's grace period to
    /// return, after which its future is dropped. The answer of a cancelled request is fixed by
    /// the runtime (see [`crate::connection`]).
    fn handle_request(&self, req: IncomingRequest) -> impl Future<Output = Result<Box<RawValue>, ErrorObject>> + Send {
        async move { Err(ErrorObject::method_not_found(&req.method)) }
    }

    /// Handles one notification; nothing is ever answered. The default ignores it (which is
    /// also what ACP asks for unknown `_` notifications).
    ///
    /// Notifications are handled one at a time, so keep this quick. Sending (`notify`,
    /// starting a call) is fine; to *await the response* of a call, spawn a task: while this
    /// handler waits, later notifications queue up, and once the queue is full the reader stops
    /// and cannot read that response. (Short of that, the runtime does deliver the response: it
    /// recognises calls made from inside a notification handler and exempts them from the
    /// responses-after-notifications ordering, which would otherwise wait for this very
    /// handler; see [`crate::connection`].)
    fn handle_notification(&self, notification: IncomingNotification) -> impl Future<Output = ()> + Send {
        let _ = notification;
        async {}
    }

    /// On a [forwarding](crate::Connection::forwarding) connection: whether to pass this
    /// message on, untouched, instead of handling it. Called once per incoming request and
    /// notification, in arrival order, from the task that handles notifications; keep it quick
    /// (a lookup by method; `params` are there to unwrap or wrap an envelope).
    ///
    /// A forwarded notification is sent with [`Forward::method`] and [`Forward::params`]; a
    /// forwarded request too, and the answer it gets there, result or error, is its answer
    /// here, verbatim. Each goes out before the next incoming message is looked at, so
    /// forwarded messages keep their order. The default forwards nothing.
    fn forward<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>> {
        let _ = (method, params);
        None
    }

    /// [`Handler::forward`] for an incoming notification, for a handler that passes requests
    /// and notifications on differently (a wire that wraps each kind in its own envelope).
    /// The default asks [`Handler::forward`].
    fn forward_notification<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>> {
        self.forward(method, params)
    }

    /// On a [forwarding](crate::Connection::forwarding) connection: whether a request this
    /// handler handles itself (one [`Handler::forward`] did not pass on) is to be answered
    /// before anything read after it is forwarded or handled, as the requests that set a chain
    /// up (`initialize` and its proxy forms) are, which nothing may overtake. Its calls to the
    /// peer are answered meanwhile, as those of a notification handler are. The default: none.
    fn handles_in_order(&self, method: &str, params: Option<&RawValue>) -> bool {
        let _ = (method, params);
        false
    }
}

/// Where [`Handler::forward`] passes a message on to, and as what. The method and params may
/// borrow from the incoming message (a plain forward copies nothing; an envelope's inner
/// params are a slice of the outer ones).
#[derive(Debug)]
pub struct Forward<'a> {
    /// The connection to send it on (the same one or another).
    pub to: Peer,
    /// The method to send.
    pub method: Cow<'a, str>,
    /// The params to send, byte for byte.
    pub params: Option<Cow<'a, RawValue>>,
}

impl<H: Handler> Handler for Arc<H> {
    fn handle_request(&self, req: IncomingRequest) -> impl Future<Output = Result<Box<RawValue>, ErrorObject>> + Send {
        (**self).handle_request(req)
    }

    fn handle_notification(&self, notification: IncomingNotification) -> impl Future<Output = ()> + Send {
        (**self).handle_notification(notification)
    }

    fn forward<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>> {
        (**self).forward(method, params)
    }

    fn forward_notification<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>> {
        (**self).forward_notification(method, params)
    }

    fn handles_in_order(&self, method: &str, params: Option<&RawValue>) -> bool {
        (**self).handles_in_order(method, params)
    }
}

/// A boxed handler future, as the connection polls it.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`Handler`] with boxed futures, so the connection can hold any handler as
/// `Arc<dyn DynHandler>`. Implemented for every [`Handler`].
pub(crate) trait DynHandler: Send + Sync + 'static {
    fn handle_request_boxed(&self, req: IncomingRequest) -> BoxFuture<'_, Result<Box<RawValue>, ErrorObject>>;
    fn handle_notification_boxed(&self, notification: IncomingNotification) -> BoxFuture<'_, ()>;
    fn forward_dyn<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>>;
    fn forward_notification_dyn<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>>;
    fn handles_in_order_dyn(&self, method: &str, params: Option<&RawValue>) -> bool;
}

impl<H: Handler> DynHandler for H {
    fn handle_request_boxed(&self, req: IncomingRequest) -> BoxFuture<'_, Result<Box<RawValue>, ErrorObject>> {
        Box::pin(self.handle_request(req))
    }

    fn handle_notification_boxed(&self, notification: IncomingNotification) -> BoxFuture<'_, ()> {
        Box::pin(self.handle_notification(notification))
    }
    fn forward_dyn<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>> {
        self.forward(method, params)
    }

    fn forward_notification_dyn<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>> {
        self.forward_notification(method, params)
    }

    fn handles_in_order_dyn(&self, method: &str, params: Option<&RawValue>) -> bool {
        self.handles_in_order(method, params)
    }
}

/// A handler that answers every request -32601 and ignores every notification (for a side
/// that only makes calls).
impl Handler for () {}

/// One incoming request, as handed to [`Handler::handle_request`].
#[derive(Debug)]
#[non_exhaustive]
pub struct IncomingRequest {
    /// The peer's id for this request (the runtime answers with it).
    pub id: Id,
    /// The method name.
    pub method: Cow<'static, str>,
    /// The params exactly as received (`None` when absent or `null`).
    pub params: Option<Box<RawValue>>,
    /// The params' top-level `"sessionId"`, when it is a string.
    pub session_id: Option<Arc<str>>,
    /// Fires on `$/cancel_request` for this id, on `session/cancel` for this session (for
    /// `session/prompt` on the agent side, `session/request_permission` on the client side),
    /// and when the connection ends.
    pub cancel: CancellationToken,
    /// The connection, to call the peer back.
    pub peer: Peer,
    /// Whether the typed layer saw the handler look at its token (see [`Watch`]).
    pub(crate) watch: Watch,
}

impl IncomingRequest {
    /// Decodes the params (absent params decode as `null`); failure is -32602 with the failing
    /// field's path in `data.path` (see [`crate::jsonrpc::decode_params`]).
    pub fn parse_params<T: DeserializeOwned>(&self) -> Result<T, ErrorObject> {
        parse_params(self.params.as_deref())
    }
}

/// One incoming notification, as handed to [`Handler::handle_notification`].
#[derive(Debug)]
#[non_exhaustive]
pub struct IncomingNotification {
    /// The method name.
    pub method: Cow<'static, str>,
    /// The params exactly as received (`None` when absent or `null`).
    pub params: Option<Box<RawValue>>,
    /// The connection, to call the peer back (send only; do not await responses here).
    pub peer: Peer,
    /// Its place among the connection's incoming notifications, from 1: a response tagged
    /// with barrier `b` arrived after notifications `1..=b` (see [`crate::connection`]).
    #[cfg_attr(not(feature = "unstable_protocol_v2"), allow(dead_code))]
    pub(crate) seq: u64,
}

impl IncomingNotification {
    /// Decodes the params (absent params decode as `null`); failure is -32602.
    pub fn parse_params<T: DeserializeOwned>(&self) -> Result<T, ErrorObject> {
        parse_params(self.params.as_deref())
    }

    /// The params' top-level `"sessionId"`, when it is a string (parsed on demand, because
    /// most notifications never need it).
    pub fn session_id(&self) -> Option<Arc<str>> {
        session_id_of(self.params.as_deref())
    }
}

pub(crate) fn parse_params<T: DeserializeOwned>(params: Option<&RawValue>) -> Result<T, ErrorObject> {
    crate::core::jsonrpc::decode_params(params)
}
