//! The typed layer `#[acp_proxy]` expands to: params decoded into the handler's types and
//! answers encoded back, with the raw text (`Box<RawValue>`) and `Lossless<T>` forms that keep
//! every byte the proxy does not change.

use std::borrow::Cow;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::core::jsonrpc::{ErrorObject, Id};

/// Params a proxy handler can take: decoded from the message's raw params. Implemented for
/// the raw text itself (`Box<RawValue>`, `Option<Box<RawValue>>`: nothing decoded, nothing
/// lost) and `serde_json::Value` (every member kept; see its order note at
/// [`IntoParams`]).
pub trait FromParams: Sized {
    /// Decodes `params` (`None` when absent or `null`); an error is the answer to the request.
    fn from_params(params: Option<Box<RawValue>>) -> Result<Self, ErrorObject>;

    /// [`from_params`](Self::from_params), handing the params back when they do not decode:
    /// a notification a proxy cannot read is passed on as it came. The default keeps a copy
    /// for that; the implementations here decode without one.
    #[doc(hidden)]
    fn from_params_or_back(params: Option<Box<RawValue>>) -> Result<Self, (ErrorObject, Option<Box<RawValue>>)> {
        let copy = params.clone();
        Self::from_params(params).map_err(|e| (e, copy))
    }
}

/// What a proxy handler passes on: encoded back into raw params.
///
/// A `serde_json::Value` comes out with its members in the order it keeps them (sorted,
/// unless serde_json's `preserve_order` is on): the same members and values, maybe not the
/// same bytes. Raw params are passed on byte for byte.
pub trait IntoParams {
    /// Encodes the params; `None` for none.
    fn into_params(self) -> Result<Option<Box<RawValue>>, ErrorObject>;
}

/// What a proxy's request handler answers with: the raw answer (e.g. what
/// [`ProxiedRequest::forward`] got back, verbatim) or a value to encode.
pub trait IntoAnswer {
    /// Encodes the answer.
    fn into_answer(self) -> Result<Box<RawValue>, ErrorObject>;
}

impl FromParams for Option<Box<RawValue>> {
    fn from_params(params: Option<Box<RawValue>>) -> Result<Self, ErrorObject> {
        Ok(params)
    }

    fn from_params_or_back(params: Option<Box<RawValue>>) -> Result<Self, (ErrorObject, Option<Box<RawValue>>)> {
        Ok(params)
    }
}

impl FromParams for Box<RawValue> {
    fn from_params(params: Option<Box<RawValue>>) -> Result<Self, ErrorObject> {
        params.ok_or_else(|| ErrorObject::invalid_params("params are required"))
    }

    fn from_params_or_back(params: Option<Box<RawValue>>) -> Result<Self, (ErrorObject, Option<Box<RawValue>>)> {
        params.ok_or_else(|| (ErrorObject::invalid_params("params are required"), None))
    }
}

impl FromParams for serde_json::Value {
    fn from_params(params: Option<Box<RawValue>>) -> Result<Self, ErrorObject> {
        crate::core::handler::parse_params(params.as_deref())
    }

    fn from_params_or_back(params: Option<Box<RawValue>>) -> Result<Self, (ErrorObject, Option<Box<RawValue>>)> {
        crate::core::handler::parse_params(params.as_deref()).map_err(|e| (e, params))
    }
}

impl IntoParams for Option<Box<RawValue>> {
    fn into_params(self) -> Result<Option<Box<RawValue>>, ErrorObject> {
        Ok(self)
    }
}

impl IntoParams for Box<RawValue> {
    fn into_params(self) -> Result<Option<Box<RawValue>>, ErrorObject> {
        Ok(Some(self))
    }
}

impl IntoParams for serde_json::Value {
    fn into_params(self) -> Result<Option<Box<RawValue>>, ErrorObject> {
        if self.is_null() {
            return Ok(None);
        }
        serde_json::value::to_raw_value(&self).map(Some).map_err(ErrorObject::internal_error)
    }
}

impl IntoAnswer for Box<RawValue> {
    fn into_answer(self) -> Result<Box<RawValue>, ErrorObject> {
        Ok(self)
    }
}

impl IntoAnswer for serde_json::Value {
    fn into_answer(self) -> Result<Box<RawValue>, ErrorObject> {
        serde_json::value::to_raw_value(&self).map_err(ErrorObject::internal_error)
    }
}

/// The generated types, losslessly: decoded for reading and changing, and written back with
/// every member they do not know (see [`acp_types::lossless`]). What a typed proxy takes.
impl<T: DeserializeOwned> FromParams for acp_types::lossless::Lossless<T> {
    fn from_params(params: Option<Box<RawValue>>) -> Result<Self, ErrorObject> {
        Self::from_params_or_back(params).map_err(|(e, _)| e)
    }

    fn from_params_or_back(params: Option<Box<RawValue>>) -> Result<Self, (ErrorObject, Option<Box<RawValue>>)> {
        let absent = params.is_none();
        let params = params.unwrap_or_else(|| RawValue::from_string("null".to_owned()).expect("valid JSON"));
        acp_types::lossless::Lossless::from_box(params).map_err(|(e, params)| {
            let error = match e.path() {
                Some(path) => ErrorObject::invalid_params_at(path, e.message()),
                None => ErrorObject::invalid_params(e.message()),
            };
            (error, (!absent).then_some(params))
        })
    }
}

impl<T: Serialize> IntoParams for acp_types::lossless::Lossless<T> {
    fn into_params(self) -> Result<Option<Box<RawValue>>, ErrorObject> {
        self.into_raw().map(Some).map_err(ErrorObject::internal_error)
    }
}

impl<T: Serialize> IntoAnswer for acp_types::lossless::Lossless<T> {
    fn into_answer(self) -> Result<Box<RawValue>, ErrorObject> {
        self.into_raw().map_err(ErrorObject::internal_error)
    }
}

/// An intercepted request as a typed handler sees it: its params (`P`), where it came from,
/// and the way on.
#[derive(Debug)]
pub struct ProxiedRequest<P> {
    /// The params, decoded (change them, then [`forward`](ProxiedRequest::forward)).
    pub params: P,
    /// Where the request came from.
    pub from: Side,
    method: Cow<'static, str>,
    cancel: CancellationToken,
    /// The request's id and connection: whether it was cancelled by `$/cancel_request`.
    id: Id,
    peer: Peer,
    cx: ProxyContext,
}

impl<P> ProxiedRequest<P> {
    /// Decodes an intercepted request (used by `#[acp_proxy]`).
    #[doc(hidden)]
    pub fn new(cx: ProxyContext, from: Side, req: IncomingRequest) -> Result<Self, ErrorObject>
    where
        P: FromParams,
    {
        let params = P::from_params(req.params)?;
        Ok(ProxiedRequest { params, from, method: req.method, cancel: req.cancel, id: req.id, peer: req.peer, cx })
    }

    /// The method.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// Fires when the sender cancels the request (see [`IncomingRequest::cancel`]).
    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// The chain on both sides, for calls of the proxy's own.
    pub fn cx(&self) -> &ProxyContext {
        &self.cx
    }

    /// Passes the request on, with its (possibly changed) params, in the direction it was
    /// going; the answer it gets there, verbatim. Cancellation follows as with
    /// [`ProxyContext::forward_request`].
    pub async fn forward(self) -> Result<Box<RawValue>, ErrorObject>
    where
        P: IntoParams,
    {
        let params = self.params.into_params()?;
        let hop = self.cx.toward(self.from.other());
        let answer = if self.method == methods::SESSION_PROMPT {
            forward_prompt(hop, &self.method, params.as_deref(), &self.cancel, &self.peer, &self.id).await
        } else {
            hop.request_raw_until(&self.method, params.as_deref(), &self.cancel).await
        };
        answer.map_err(answer_error)
    }
}

/// An intercepted notification as a typed handler sees it.
#[derive(Debug)]
pub struct ProxiedNotification<P> {
    /// The params, decoded.
    pub params: P,
    /// Where the notification came from.
    pub from: Side,
    method: Cow<'static, str>,
    cx: ProxyContext,
}

impl<P> ProxiedNotification<P> {
    /// Decodes an intercepted notification (used by `#[acp_proxy]`); one that does not decode
    /// comes back whole, to be passed on.
    #[doc(hidden)]
    pub fn new(cx: ProxyContext, from: Side, mut notification: IncomingNotification) -> Result<Self, Box<Undecodable>>
    where
        P: FromParams,
    {
        match P::from_params_or_back(notification.params.take()) {
            Ok(params) => Ok(ProxiedNotification { params, from, method: notification.method, cx }),
            Err((error, params)) => {
                notification.params = params;
                Err(Box::new(Undecodable { cx, from, notification, error }))
            }
        }
    }

    /// The method.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The chain on both sides.
    pub fn cx(&self) -> &ProxyContext {
        &self.cx
    }

    /// Passes the notification on, with its (possibly changed) params, in the direction it was
    /// going. Not passing it on drops it.
    pub async fn forward(self) -> Result<(), Error>
    where
        P: IntoParams,
    {
        let params = self.params.into_params().map_err(Error::Rpc)?;
        self.cx.toward(self.from.other()).notify_raw(&self.method, params.as_deref()).await
    }
}

/// A request handler's result as the answer (used by `#[acp_proxy]`).
#[doc(hidden)]
pub fn answer<A: IntoAnswer, E: Into<ErrorObject>>(result: Result<A, E>) -> Result<Box<RawValue>, ErrorObject> {
    result.map_err(Into::into)?.into_answer()
}

/// An intercepted notification whose params do not decode into the handler's type (a version
/// of the protocol the handler's types do not describe, say): the handler cannot read it, and
/// it is passed on as it came, as if not intercepted (used by `#[acp_proxy]`).
#[doc(hidden)]
#[derive(Debug)]
pub struct Undecodable {
    cx: ProxyContext,
    from: Side,
    notification: IncomingNotification,
    error: ErrorObject,
}

impl Undecodable {
    /// Passes the notification on, untouched, and says why the handler did not see it.
    pub async fn pass_on(self) {
        let Undecodable { cx, from, notification, error } = self;
        tracing::debug!(method = %notification.method, error = %error.message, "acp proxy: notification params do not decode for the handler; passed on as they came");
        cx.forward_notification(from, notification).await;
    }
}
