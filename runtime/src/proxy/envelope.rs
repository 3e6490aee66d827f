//! The `proxy/successor` envelope: `{"method": M, "params"?: P, "_meta"?: {...}}`, where `M`
//! and `P` are the wrapped message's. Whether it wraps a request or a notification is told by
//! the outer message; the envelope's own `_meta` belongs to the hop and is not passed on.
//!
//! The schema's types for it are `acp_types::ProxySuccessorRequest` and
//! `ProxySuccessorNotification` (feature `unstable_proxy_chains`), for code that builds or reads
//! envelopes itself. The forwarding path here reads and writes the same JSON without them: the
//! wrapped params stay raw, copied byte for byte rather than decoded into a `Value` and encoded
//! again (a decode and an encode per hop, and numbers and key order at serde_json's mercy). The
//! tests below hold the two to the same wire.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::jsonrpc::ErrorObject;

/// The wrapped message of a `proxy/successor` envelope: its method and params, the params
/// byte for byte.
#[derive(Debug)]
pub(crate) struct Unwrapped<'a> {
    pub(crate) method: Cow<'a, str>,
    pub(crate) params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

/// Reads an envelope; -32602 when it is not one.
pub(crate) fn unwrap(params: Option<&RawValue>) -> Result<Unwrapped<'_>, ErrorObject> {
    let Some(params) = params.filter(|p| p.get().starts_with('{')) else {
        return Err(ErrorObject::invalid_params("`proxy/successor` params must be an object with a `method`"));
    };
    let envelope: Envelope<'_> = serde_json::from_str(params.get())
        .map_err(|e| ErrorObject::invalid_params(format_args!("invalid `proxy/successor` envelope: {e}")))?;
    let params = envelope.params.filter(|p| p.get() != "null");
    Ok(Unwrapped { method: envelope.method, params })
}

/// Wraps a message for the next hop: its params are copied byte for byte.
pub(crate) fn wrap(method: &str, params: Option<&RawValue>) -> Box<RawValue> {
    let params = params.map(RawValue::get);
    let mut text = String::with_capacity(32 + method.len() + params.map_or(0, str::len));
    text.push_str(r#"{"method":"#);
    // A method name is a JSON string once escaped; serializing a `str` cannot fail.
    text.push_str(&serde_json::to_string(method).unwrap_or_default());
    if let Some(params) = params {
        text.push_str(r#","params":"#);
        text.push_str(params);
    }
    text.push('}');
    RawValue::from_string(text).unwrap_or_else(|_| unreachable_envelope())
}

/// `wrap` builds valid JSON from a JSON string and a `RawValue`; this is never reached.
#[cold]
fn unreachable_envelope() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).expect("valid JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn wrapping_and_unwrapping_keep_params_byte_for_byte() {
        let params = raw(r#"{"b" : 1.50, "a":[ "x\n" ], "_meta":{"z":null}}"#);
        let wrapped = wrap("session/prompt", Some(&params));
        assert_eq!(
            wrapped.get(),
            r#"{"method":"session/prompt","params":{"b" : 1.50, "a":[ "x\n" ], "_meta":{"z":null}}}"#
        );
        let inner = unwrap(Some(&wrapped)).unwrap();
        assert_eq!(inner.method, "session/prompt");
        assert_eq!(inner.params.unwrap().get(), params.get());
        assert!(unwrap(Some(&wrap("_x/\"quoted\"", None))).unwrap().params.is_none());
    }

    #[test]
    fn the_envelopes_own_meta_is_not_the_messages() {
        let envelope = raw(r#"{"_meta":{"hop":1},"method":"m","params":{"_meta":{"msg":2}}}"#);
        let inner = unwrap(Some(&envelope)).unwrap();
        assert_eq!(inner.params.unwrap().get(), r#"{"_meta":{"msg":2}}"#);
        assert!(unwrap(Some(&raw(r#"{"method":"m","params":null}"#))).unwrap().params.is_none());
    }

    /// What `wrap` writes is the schema's envelope, and the schema's envelope is what
    /// `unwrap` reads.
    #[cfg(feature = "unstable_proxy_chains")]
    #[test]
    fn the_envelope_is_the_schemas_proxy_successor_message() {
        use acp_types::{ProxySuccessorNotification, ProxySuccessorRequest};
        let params = raw(r#"{"sessionId":"s1","prompt":[]}"#);
        let wrapped = wrap("session/prompt", Some(&params));
        let typed: ProxySuccessorRequest = serde_json::from_str(wrapped.get()).unwrap();
        assert_eq!(typed.method, "session/prompt");
        assert_eq!(typed.params, Some(serde_json::json!({"sessionId": "s1", "prompt": []})));
        let typed: ProxySuccessorNotification = serde_json::from_str(wrap("session/cancel", None).get()).unwrap();
        assert_eq!((typed.method.as_str(), typed.params), ("session/cancel", None));

        let built = ProxySuccessorRequest::new("session/new").params(serde_json::json!({"cwd": "/"}));
        let text = raw(&serde_json::to_string(&built).unwrap());
        let inner = unwrap(Some(&text)).unwrap();
        assert_eq!((&*inner.method, inner.params.map(RawValue::get)), ("session/new", Some(r#"{"cwd":"/"}"#)));
    }

    #[test]
    fn what_is_not_an_envelope_is_invalid_params() {
        for bad in [None, Some(raw("[]")), Some(raw(r#"{"params":{}}"#)), Some(raw(r#"{"method":7}"#))] {
            let e = unwrap(bad.as_deref()).unwrap_err();
            assert_eq!(e.code, crate::codes::INVALID_PARAMS, "{bad:?}");
        }
    }
}
