//! What the agent side and the client side of the typed layer share: decoding incoming params
//! by method name and outgoing results by type (both with the failing field's path), what a
//! handler context knows about its message, and the conversions between the generated
//! [`acp_types::Error`] and the runtime's [`ErrorObject`] / [`Error`].

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::core::error::Error;
use crate::core::jsonrpc::{self, ErrorObject};
use crate::core::peer::{Encoded, decode_after};

/// The params of an incoming message as text: absent (or `null`) params decode as `{}`, which
/// every ACP params type with only optional fields accepts.
pub(crate) fn params_text(params: Option<&RawValue>) -> &str {
    params.map_or("{}", RawValue::get)
}

/// Decodes incoming params with `decode` (a generated `decode(method, deserializer)`): a
/// failure is -32602 with the failing field's path in `data.path`.
pub(crate) fn decode_incoming<'a, T>(
    text: &'a str,
    decode: impl FnOnce(&mut serde_json::Deserializer<serde_json::de::StrRead<'a>>) -> Result<T, serde_json::Error>,
) -> Result<T, ErrorObject> {
    jsonrpc::decode_with_path_by(text, decode).map_err(|(path, message)| match path {
        Some(path) => ErrorObject::invalid_params_at(path, message),
        None => ErrorObject::invalid_params(message),
    })
}

/// Decodes the result of one of our calls. A `null` result reads as `{}` (peers write `null`
/// for results with nothing to say), as the generated response enums do.
pub(crate) fn decode_result<R: DeserializeOwned>(raw: &RawValue) -> Result<R, Error> {
    jsonrpc::decode_with_path_by(raw.get(), |de| acp_types::serde_support::null_as_empty(de))
        .map_err(|(path, message)| Error::Decode { path: path.unwrap_or_default(), message })
}

/// Decodes an extension method's result as it is (`null` stays `null`).
pub(crate) fn decode_value(raw: &RawValue) -> Result<Value, Error> {
    jsonrpc::decode_with_path(raw.get())
        .map_err(|(path, message)| Error::Decode { path: path.unwrap_or_default(), message })
}

/// Makes an outgoing call for a typed handle, tied to the handle's token if it has one. When the
/// connection ends, the handle's token (a child of the connection's) fires at the same moment
/// the call fails; either way the caller sees [`Error::ConnectionClosed`], never a cancellation.
pub(crate) async fn call<P: serde::Serialize + ?Sized>(
    peer: &crate::Peer,
    method: &str,
    params: Option<&P>,
    cancel: Option<&tokio_util::sync::CancellationToken>,
) -> Result<Box<RawValue>, Error> {
    call_encoded(peer, peer.encode_request(method, params), cancel).await
}

/// [`call`] of an encoded request.
pub(crate) async fn call_encoded(
    peer: &crate::Peer,
    request: Result<Encoded, Error>,
    cancel: Option<&tokio_util::sync::CancellationToken>,
) -> Result<Box<RawValue>, Error> {
    match peer.call_encoded(request, cancel).await {
        Err(Error::Cancelled) if peer.is_closed() => Err(Error::ConnectionClosed),
        other => other,
    }
}

/// A typed handle's call, as [`call`], with the result decoded into `R`.
///
/// The params are encoded when this is called, and `R`'s decoder is passed on as a function
/// pointer, so both are compiled where this is instantiated (see `Peer`'s `encode_*`), not in
/// the future, which is the same for every call returning `R`.
pub(crate) fn typed_call<'a, P, R>(
    peer: &'a crate::Peer,
    method: &str,
    params: &P,
    cancel: Option<&'a tokio_util::sync::CancellationToken>,
) -> impl Future<Output = Result<R, Error>> + Send + use<'a, P, R>
where
    P: serde::Serialize + ?Sized,
    R: DeserializeOwned,
{
    let request = peer.encode_request(method, Some(params));
    decode_after(call_encoded(peer, request, cancel), decode_result::<R>)
}

/// [`typed_call`] on a connection of its own, unbound: for a future that outlives the handle
/// it came from.
pub(crate) fn typed_call_owned<P, R>(
    peer: crate::Peer,
    method: &str,
    params: &P,
) -> impl Future<Output = Result<R, Error>> + Send + 'static + use<P, R>
where
    P: serde::Serialize + ?Sized,
    R: DeserializeOwned + 'static,
{
    let request = peer.encode_request(method, Some(params));
    let decode: fn(&RawValue) -> Result<R, Error> = decode_result::<R>;
    async move { decode_after(call_encoded(&peer, request, None), decode).await }
}

/// The answer to one of our `session/request_permission` calls, bound to `cancel`: a call
/// given up because the turn was cancelled, or answered -32800 once it was, resolves with the
/// `cancelled` outcome (ACP's cancellation rules), which `cancelled` makes.
pub(crate) fn permission_answer<R>(
    answer: Result<R, Error>,
    cancel: Option<&tokio_util::sync::CancellationToken>,
    cancelled: fn() -> R,
) -> Result<R, Error> {
    match answer {
        Err(Error::Cancelled) => Ok(cancelled()),
        Err(Error::Rpc(e))
            if e.code == jsonrpc::codes::REQUEST_CANCELLED
                && cancel.is_some_and(tokio_util::sync::CancellationToken::is_cancelled) =>
        {
            Ok(cancelled())
        }
        other => other,
    }
}

/// Checks an outgoing extension message before anything is sent: the method must be an
/// extension name (`_` first) and the params structured. `null` params are left out, as
/// JSON-RPC has no `"params": null`.
pub(crate) fn ext_params<'a>(method: &str, params: &'a Value) -> Result<Option<&'a Value>, Error> {
    let invalid = |reason| Err(Error::InvalidExtension { method: method.to_owned(), reason });
    if !method.starts_with('_') {
        return invalid("extension methods start with `_`");
    }
    match params {
        Value::Null => Ok(None),
        Value::Object(_) | Value::Array(_) => Ok(Some(params)),
        _ => invalid("params must be an object, an array or null"),
    }
}

/// Calls an extension method (see [`ext_params`]) for a typed handle; the result as it is.
pub(crate) async fn call_ext(
    peer: &crate::Peer,
    method: &str,
    params: &Value,
    cancel: Option<&tokio_util::sync::CancellationToken>,
) -> Result<Value, Error> {
    let raw = call(peer, method, ext_params(method, params)?, cancel).await?;
    decode_value(&raw)
}

/// Sends an extension notification (see [`ext_params`]).
pub(crate) async fn notify_ext(peer: &crate::Peer, method: &str, params: &Value) -> Result<(), Error> {
    match ext_params(method, params)? {
        Some(params) => peer.notify(method, params).await,
        None => peer.notify_raw(method, None).await,
    }
}

/// Encodes a handler's result for the response.
pub(crate) fn encode_result<T: serde::Serialize>(result: &T) -> Result<Box<RawValue>, ErrorObject> {
    serde_json::value::to_raw_value(result)
        .map_err(|e| ErrorObject::internal_error(format_args!("cannot encode the result: {e}")))
}

/// What a handler context knows about the message beyond its typed params.
#[derive(Default)]
pub(crate) struct Envelope {
    pub(crate) session_id: Option<Arc<str>>,
    pub(crate) meta: Option<Arc<Map<String, Value>>>,
}

/// Reads the top-level `"sessionId"` (when `want_session`) and `"_meta"` of raw params, in one
/// pass and without decoding anything else. Values of the wrong type read as absent.
pub(crate) fn scan_envelope(params: Option<&RawValue>, want_session: bool) -> Envelope {
    #[derive(Deserialize)]
    struct Scan<'a> {
        #[serde(rename = "sessionId", borrow, default)]
        session_id: Option<&'a RawValue>,
        #[serde(rename = "_meta", borrow, default)]
        meta: Option<&'a RawValue>,
    }
    let Some(params) = params else { return Envelope::default() };
    let text = params.get();
    // Objects only (a derived struct would read an array positionally), and skip the pass
    // when it cannot find anything.
    if !text.starts_with('{') || (!want_session && memchr::memmem::find(text.as_bytes(), b"\"_meta\"").is_none()) {
        return Envelope::default();
    }
    let Ok(scan) = serde_json::from_str::<Scan<'_>>(text) else { return Envelope::default() };
    let session_id = if want_session {
        scan.session_id.and_then(|raw| serde_json::from_str::<Cow<'_, str>>(raw.get()).ok()).map(|s| Arc::from(&*s))
    } else {
        None
    };
    let meta = scan
        .meta
        .filter(|raw| raw.get().starts_with('{'))
        .and_then(|raw| serde_json::from_str::<Map<String, Value>>(raw.get()).ok())
        .map(Arc::new);
    Envelope { session_id, meta }
}

// ---- errors ---------------------------------------------------------------------------------

impl From<acp_types::Error> for ErrorObject {
    /// A typed handler's error, answered as is (code, message, data).
    fn from(e: acp_types::Error) -> Self {
        ErrorObject { code: e.code.0, message: e.message, data: e.data }
    }
}

impl From<ErrorObject> for acp_types::Error {
    /// An error object from the wire, as the generated error type (code, message, data).
    fn from(e: ErrorObject) -> Self {
        let error = acp_types::Error::new(e.code, e.message);
        match e.data {
            Some(data) => error.data(data),
            None => error,
        }
    }
}

impl From<Error> for acp_types::Error {
    /// Lets a typed handler use `?` on calls to the peer: the peer's own error passes through,
    /// a cancelled call is -32800, anything else -32603 (as [`Error::to_error_object`]).
    fn from(e: Error) -> Self {
        e.to_error_object().into()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn scans_session_and_meta_in_one_pass() {
        let p = raw(r#"{"update":{"_meta":{"inner":1}},"sessionId":"s1","_meta":{"trace":"t"}}"#);
        let env = scan_envelope(Some(&p), true);
        assert_eq!(env.session_id.as_deref(), Some("s1"));
        assert_eq!(env.meta.unwrap()["trace"], "t");
        let env = scan_envelope(Some(&raw(r#"{"sessionId":5,"_meta":[1]}"#)), true);
        assert!(env.session_id.is_none() && env.meta.is_none());
        let env = scan_envelope(Some(&raw(r#"{"sessionId":"s"}"#)), false);
        assert!(env.session_id.is_none() && env.meta.is_none());
        assert!(scan_envelope(Some(&raw(r#"["_meta"]"#)), true).meta.is_none());
        assert!(scan_envelope(None, true).session_id.is_none());
    }

    #[test]
    fn errors_convert_both_ways_unchanged() {
        let wire = ErrorObject::new(-32042, "custom").with_data(serde_json::json!({"a": [1]}));
        let typed: acp_types::Error = wire.clone().into();
        assert_eq!(typed.code, acp_types::ErrorCode(-32042));
        assert_eq!(ErrorObject::from(typed), wire);
        let cancelled: acp_types::Error = Error::Cancelled.into();
        assert_eq!(cancelled.code, acp_types::ErrorCode::REQUEST_CANCELLED);
        let closed: acp_types::Error = Error::ConnectionClosed.into();
        assert_eq!(closed.code, acp_types::ErrorCode::INTERNAL_ERROR);
    }

    #[test]
    fn outgoing_extension_messages_are_checked_and_null_params_left_out() {
        assert_eq!(ext_params("_x", &Value::Null).unwrap(), None);
        assert_eq!(ext_params("_x", &json!([1])).unwrap(), Some(&json!([1])));
        assert_eq!(ext_params("_x", &json!({})).unwrap(), Some(&json!({})));
        for (method, params) in [("_x", json!(1)), ("_x", json!(true)), ("x", json!({}))] {
            let e = ext_params(method, &params).unwrap_err();
            assert!(matches!(&e, Error::InvalidExtension { method: m, .. } if m == method), "{e:?}");
        }
    }

    #[test]
    fn results_read_null_as_empty_and_name_the_failing_field() {
        let r: acp_types::WriteTextFileResponse = decode_result(&raw("null")).unwrap();
        assert!(r.meta.is_none());
        let e = decode_result::<acp_types::CreateTerminalResponse>(&raw(r#"{"terminalId":7}"#)).unwrap_err();
        assert!(matches!(e, Error::Decode { ref path, .. } if path == "terminalId"), "{e:?}");
        assert_eq!(decode_value(&raw("null")).unwrap(), Value::Null);
    }
}
