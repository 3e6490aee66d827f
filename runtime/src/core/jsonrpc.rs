//! The JSON-RPC 2.0 envelope: request ids, error objects, decoding one incoming line into a
//! [`Message`], and encoding outgoing messages.
//!
//! Params and results stay raw JSON ([`RawValue`]): this layer never rewrites them, so `_meta`
//! and unknown fields reach the typed layer byte for byte. Decoding borrows from the line; the
//! only allocations on the happy path are the ones the caller makes when it keeps the params.
//! The one exception is on the way out: a line break in an outgoing raw value (whitespace, in
//! valid JSON) is written as a space, so that every message stays on one line.

use std::borrow::Cow;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// The error codes ACP uses (JSON-RPC 2.0's plus ACP's own in the reserved range), and the
/// runtime's own [`OVERLOADED`](codes::OVERLOADED).
pub mod codes {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i32 = -32700;
    /// The JSON sent is not a valid request object.
    pub const INVALID_REQUEST: i32 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// Invalid method parameter(s).
    pub const INVALID_PARAMS: i32 = -32602;
    /// Internal error (a handler that panicked answers this too).
    pub const INTERNAL_ERROR: i32 = -32603;
    /// The request was cancelled (`$/cancel_request`, session cancellation or shutdown).
    pub const REQUEST_CANCELLED: i32 = -32800;
    /// Authentication is required before this operation can be performed.
    pub const AUTH_REQUIRED: i32 = -32000;
    /// A resource, such as a file, was not found.
    pub const RESOURCE_NOT_FOUND: i32 = -32002;
    /// The peer has too much work from us in flight and refused this request without running
    /// it; retrying later is safe. Not an ACP code: this runtime's own, in the range JSON-RPC
    /// leaves to implementations (-32000 to -32099), chosen clear of the codes ACP defines there
    /// (-32000, -32002) and of the low end it allocates from; 29 recalls HTTP's 429 ("Too Many
    /// Requests"). `data` carries `retryAfterMs`; see [`ErrorObject::overloaded`](super::ErrorObject::overloaded) and the
    /// overload section of the [`connection`](crate::connection) docs.
    pub const OVERLOADED: i32 = -32029;
}

/// A JSON-RPC request id: `null`, a number or a string.
///
/// Booleans, arrays and objects are not ids: a request carrying one is answered -32600 with a
/// `null` id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    /// `null` (discouraged by JSON-RPC, but legal in a request).
    Null,
    /// An integer in `i64`'s range; our own outgoing ids are always of this kind.
    Number(i64),
    /// Any other number (a fraction, an exponent, an integer beyond `i64`), as it was written:
    /// JSON-RPC discourages fractional ids but allows them, and an answer carries its request's
    /// id back as sent.
    OtherNumber(Box<str>),
    /// A string.
    String(String),
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Null => f.write_str("null"),
            Id::Number(n) => write!(f, "{n}"),
            Id::OtherNumber(text) => f.write_str(text),
            Id::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl From<i64> for Id {
    fn from(n: i64) -> Self {
        Id::Number(n)
    }
}

impl From<String> for Id {
    fn from(s: String) -> Self {
        Id::String(s)
    }
}

impl From<&str> for Id {
    fn from(s: &str) -> Self {
        Id::String(s.to_owned())
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Id::Null => s.serialize_unit(),
            Id::Number(n) => s.serialize_i64(*n),
            // Written as it came (serde_json writes a `RawValue` verbatim).
            Id::OtherNumber(text) => match RawValue::from_string(text.to_string()) {
                Ok(raw) => raw.serialize(s),
                Err(e) => Err(serde::ser::Error::custom(e)),
            },
            Id::String(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct IdVisitor;
        impl<'de> Visitor<'de> for IdVisitor {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC id (null, a number or a string)")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Id, E> {
                Ok(Id::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Id, E> {
                Ok(Id::Null)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
                Ok(Id::Number(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
                Ok(i64::try_from(v).map_or_else(|_| Id::OtherNumber(v.to_string().into()), Id::Number))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Id, E> {
                Ok(Id::OtherNumber(v.to_string().into()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
                Ok(Id::String(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Id, E> {
                Ok(Id::String(v))
            }
        }
        d.deserialize_any(IdVisitor)
    }
}

/// The retry delay assumed for an overload refusal without a usable `retryAfterMs`.
const DEFAULT_RETRY_AFTER_MS: u64 = 100;

/// A JSON-RPC error object, as sent in an error response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// One of [`codes`] or an implementation-defined code.
    pub code: i32,
    /// A short, single-sentence description.
    pub message: String,
    /// Optional details; for -32602 the runtime puts `{"path": ...}` here when it knows the
    /// failing field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with any code.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        ErrorObject { code, message: message.into(), data: None }
    }

    /// Attaches `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// -32700: the line was not valid JSON (or not UTF-8). The input is never echoed back.
    pub fn parse_error() -> Self {
        Self::new(codes::PARSE_ERROR, "Parse error")
    }

    /// -32600: valid JSON, but not a valid JSON-RPC message.
    pub fn invalid_request(reason: impl fmt::Display) -> Self {
        Self::new(codes::INVALID_REQUEST, format!("Invalid request: {reason}"))
    }

    /// -32601: nobody handles `method`.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(codes::METHOD_NOT_FOUND, "Method not found").with_data(Value::String(method.to_owned()))
    }

    /// -32602: the params do not fit the method.
    pub fn invalid_params(reason: impl fmt::Display) -> Self {
        Self::new(codes::INVALID_PARAMS, format!("Invalid params: {reason}"))
    }

    /// -32602 with the path of the failing field (e.g. `prompt[0].type`) in `data.path`.
    pub fn invalid_params_at(path: impl Into<String>, reason: impl fmt::Display) -> Self {
        Self::invalid_params(reason).with_data(serde_json::json!({ "path": path.into() }))
    }

    /// -32603: something went wrong on our side.
    pub fn internal_error(reason: impl fmt::Display) -> Self {
        Self::new(codes::INTERNAL_ERROR, format!("Internal error: {reason}"))
    }

    /// -32800: the request was cancelled.
    pub fn request_cancelled() -> Self {
        Self::new(codes::REQUEST_CANCELLED, "Request cancelled")
    }

    /// -32000: authentication is required first.
    pub fn auth_required() -> Self {
        Self::new(codes::AUTH_REQUIRED, "Authentication required")
    }

    /// -32029 ([`codes::OVERLOADED`]): the request was refused, unrun, because too much is in
    /// flight; the caller may send it again after `retry_after` (in `data.retryAfterMs`,
    /// whole milliseconds, at least 1). The runtime answers this itself when its request
    /// bounds are full (adding `inFlight`, `backlogBytes` and `maxBacklogBytes` to `data`); a
    /// handler may answer it too, for its own limits.
    pub fn overloaded(retry_after: std::time::Duration) -> Self {
        let ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX).max(1);
        Self::new(codes::OVERLOADED, "Overloaded, retry later").with_data(serde_json::json!({ "retryAfterMs": ms }))
    }

    /// Whether this is the overload refusal ([`codes::OVERLOADED`]): the request did not run,
    /// and sending it again later is safe.
    pub fn is_overloaded(&self) -> bool {
        self.code == codes::OVERLOADED
    }

    /// For an overload refusal, how long to wait before retrying (`data.retryAfterMs`, or
    /// 100 ms when the peer gave no valid hint); `None` for any other error.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        if !self.is_overloaded() {
            return None;
        }
        let hint = self.data.as_ref().and_then(|d| d.get("retryAfterMs")).and_then(Value::as_u64);
        Some(std::time::Duration::from_millis(hint.unwrap_or(DEFAULT_RETRY_AFTER_MS)))
    }

    /// -32002: a resource was not found; `uri` goes to `data.uri` when given.
    pub fn resource_not_found(uri: Option<&str>) -> Self {
        let e = Self::new(codes::RESOURCE_NOT_FOUND, "Resource not found");
        match uri {
            Some(uri) => e.with_data(serde_json::json!({ "uri": uri })),
            None => e,
        }
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for ErrorObject {}

/// One decoded incoming message, borrowing from the line it came from.
#[derive(Debug)]
pub enum Message<'a> {
    /// A call that expects exactly one response.
    Request {
        /// The caller's id, echoed in the response.
        id: Id,
        /// The method name.
        method: Cow<'a, str>,
        /// The params (an object or an array), untouched; `None` when absent or `null`.
        params: Option<&'a RawValue>,
    },
    /// A one-way message, never answered.
    Notification {
        /// The method name.
        method: Cow<'a, str>,
        /// The params (an object or an array), untouched; `None` when absent or `null`.
        params: Option<&'a RawValue>,
    },
    /// The answer to one of our calls.
    Response {
        /// The id of our call (or `null` when the peer could not read one of our messages).
        id: Id,
        /// The result, or the error the peer answered.
        result: Result<&'a RawValue, ErrorObject>,
    },
}

/// What kind of bad input a [`DecodeError`] is; it decides how the input is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// Not UTF-8 or not JSON: answered -32700 with a `null` id.
    Parse,
    /// JSON, but not a valid message: answered -32600 with the recovered id (or `null`).
    InvalidRequest,
    /// A request whose params are neither an object nor an array: answered -32602 with its id.
    InvalidParams,
    /// A well-formed notification whose params are neither an object nor an array: never
    /// answered (notifications never are), only logged.
    InvalidNotification,
    /// A malformed response (it has `result` or `error` but breaks another rule): never
    /// answered, because an error response would carry an id of *our* id space back to the
    /// peer, which would take it for the answer to one of its own calls. If the id names one of
    /// our pending calls, that call fails with [`crate::Error::Protocol`].
    InvalidResponse,
}

/// Why a line is not a valid message, and how it is answered ([`DecodeError::answer`]).
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeError {
    /// The kind of problem.
    pub kind: DecodeErrorKind,
    /// The id recovered from the input, `Id::Null` when there is none or it is invalid.
    pub id: Id,
    /// A short, fixed explanation (never contains peer input).
    pub reason: &'static str,
}

impl DecodeError {
    fn new(kind: DecodeErrorKind, id: Id, reason: &'static str) -> Self {
        DecodeError { kind, id, reason }
    }

    /// The error response to send back, if any: `(id, error)`.
    pub fn answer(&self) -> Option<(Id, ErrorObject)> {
        match self.kind {
            DecodeErrorKind::Parse => Some((Id::Null, ErrorObject::parse_error())),
            DecodeErrorKind::InvalidRequest => Some((self.id.clone(), ErrorObject::invalid_request(self.reason))),
            DecodeErrorKind::InvalidParams => Some((self.id.clone(), ErrorObject::invalid_params(self.reason))),
            DecodeErrorKind::InvalidNotification | DecodeErrorKind::InvalidResponse => None,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {} (id {})", self.kind, self.reason, self.id)
    }
}

impl std::error::Error for DecodeError {}

/// The members of a message object, each kept raw. A member present with value `null` is
/// `Some("null")`, so absent and `null` stay distinct (an `"id": null` request is a request).
#[derive(Default)]
struct Envelope<'a> {
    jsonrpc: Option<&'a RawValue>,
    id: Option<&'a RawValue>,
    method: Option<&'a RawValue>,
    params: Option<&'a RawValue>,
    result: Option<&'a RawValue>,
    error: Option<&'a RawValue>,
    /// A member that appeared twice; duplicates make a message ambiguous, so it is invalid.
    duplicate: bool,
    /// `id` itself appeared twice: then no id can be trusted for the answer.
    duplicate_id: bool,
}

#[derive(Clone, Copy)]
enum Key {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "jsonrpc" => Key::Jsonrpc,
                    "id" => Key::Id,
                    "method" => Key::Method,
                    "params" => Key::Params,
                    "result" => Key::Result,
                    "error" => Key::Error,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Envelope<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EnvelopeVisitor;
        impl<'de> Visitor<'de> for EnvelopeVisitor {
            type Value = Envelope<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC message object")
            }
            // Only `visit_map`: a derived struct visitor would also accept a positional array,
            // which would turn a batch into a bogus request.
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope<'de>, A::Error> {
                let mut env = Envelope::default();
                while let Some(key) = map.next_key::<Key>()? {
                    let slot = match key {
                        Key::Jsonrpc => &mut env.jsonrpc,
                        Key::Id => &mut env.id,
                        Key::Method => &mut env.method,
                        Key::Params => &mut env.params,
                        Key::Result => &mut env.result,
                        Key::Error => &mut env.error,
                        Key::Other => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    // Every value is captured raw (even a duplicate) so the whole line is
                    // still checked for syntax: bad JSON must be -32700, not -32600.
                    let value = map.next_value::<&'de RawValue>()?;
                    if slot.is_some() {
                        env.duplicate = true;
                        env.duplicate_id |= matches!(key, Key::Id);
                    } else {
                        *slot = Some(value);
                    }
                }
                Ok(env)
            }
        }
        d.deserialize_map(EnvelopeVisitor)
    }
}

/// A JSON string's contents, borrowed when it has no escapes.
fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

/// An id from its raw JSON, `None` when the JSON is not a valid id.
pub(crate) fn parse_id(raw: &RawValue) -> Option<Id> {
    let text = raw.get();
    match text.as_bytes().first()? {
        b'n' => Some(Id::Null),
        b'"' => raw_str(raw).map(|s| Id::String(s.into_owned())),
        // JSON syntax is already checked: what `i64` does not take (fractions, exponents,
        // overflow) is kept as written.
        b'-' | b'0'..=b'9' => Some(text.parse::<i64>().map_or_else(|_| Id::OtherNumber(text.into()), Id::Number)),
        _ => None,
    }
}

fn is_structured(raw: &RawValue) -> bool {
    matches!(raw.get().as_bytes().first(), Some(b'{' | b'['))
}

fn params_of(raw: Option<&RawValue>) -> Result<Option<&RawValue>, ()> {
    match raw {
        None => Ok(None),
        // `"params": null` is treated as absent: several implementations send it.
        Some(p) if p.get() == "null" => Ok(None),
        Some(p) if is_structured(p) => Ok(Some(p)),
        Some(_) => Err(()),
    }
}

/// Decodes one line (without its newline) into a [`Message`].
///
/// Never panics and never recurses per nesting level (serde_json skips nested values
/// iteratively), so hostile input such as 100,000 `[` is a plain -32700.
pub fn decode(line: &[u8]) -> Result<Message<'_>, DecodeError> {
    use DecodeErrorKind as K;
    let parse = |reason| DecodeError::new(K::Parse, Id::Null, reason);

    let text = std::str::from_utf8(line).map_err(|_| parse("invalid UTF-8"))?;
    let env: Envelope<'_> = match serde_json::from_str(text) {
        Ok(env) => env,
        Err(e) if e.is_data() => {
            // The top level is not an object. That is -32600 only if the whole line is JSON.
            if serde_json::from_str::<IgnoredAny>(text).is_err() {
                return Err(parse("invalid JSON"));
            }
            let reason = if text.trim_start().starts_with('[') {
                "batch requests are not supported"
            } else {
                "a message must be a JSON object"
            };
            return Err(DecodeError::new(K::InvalidRequest, Id::Null, reason));
        }
        Err(_) => return Err(parse("invalid JSON")),
    };

    let id = env.id.map(parse_id);
    let valid_id = match &id {
        Some(Some(id)) if !env.duplicate_id => id.clone(),
        _ => Id::Null,
    };
    let version_ok = env.jsonrpc.and_then(raw_str).is_some_and(|v| v == "2.0");

    if let Some(method) = env.method {
        let invalid = |reason| DecodeError::new(K::InvalidRequest, valid_id.clone(), reason);
        if env.duplicate {
            return Err(invalid("duplicate member"));
        }
        if let Some(None) = id {
            return Err(DecodeError::new(K::InvalidRequest, Id::Null, "id must be a string, a number or null"));
        }
        if !version_ok {
            return Err(invalid("\"jsonrpc\" must be \"2.0\""));
        }
        let method = raw_str(method).ok_or_else(|| invalid("method must be a string"))?;
        return match id {
            Some(_) => {
                let params = params_of(env.params).map_err(|()| {
                    DecodeError::new(K::InvalidParams, valid_id.clone(), "params must be an object or an array")
                })?;
                Ok(Message::Request { id: valid_id, method, params })
            }
            None => {
                let params = params_of(env.params).map_err(|()| {
                    DecodeError::new(K::InvalidNotification, Id::Null, "params must be an object or an array")
                })?;
                Ok(Message::Notification { method, params })
            }
        };
    }

    if env.result.is_some() || env.error.is_some() {
        let invalid = |reason| DecodeError::new(K::InvalidResponse, valid_id.clone(), reason);
        if env.duplicate {
            return Err(invalid("duplicate member"));
        }
        match id {
            None => return Err(invalid("response without id")),
            Some(None) => return Err(invalid("id must be a string, a number or null")),
            Some(Some(_)) => {}
        }
        if !version_ok {
            return Err(invalid("\"jsonrpc\" must be \"2.0\""));
        }
        let result = match (env.result, env.error) {
            (Some(result), None) => Ok(result),
            (None, Some(error)) => {
                Err(serde_json::from_str::<ErrorObject>(error.get()).map_err(|_| invalid("malformed error object"))?)
            }
            _ => return Err(invalid("response has both result and error")),
        };
        return Ok(Message::Response { id: valid_id, result });
    }

    if let Some(None) = id {
        return Err(DecodeError::new(K::InvalidRequest, Id::Null, "id must be a string, an integer or null"));
    }
    Err(DecodeError::new(K::InvalidRequest, valid_id, "missing method"))
}

// ---- decoding params and results into types, with the failing field's path ----------------

/// Decodes raw params (absent params decode as `null`) into `T`; a failure is -32602 with the
/// path of the offending field in `data.path` (e.g. `prompt[0].type`) when it can be located.
pub fn decode_params<T: DeserializeOwned>(params: Option<&RawValue>) -> Result<T, ErrorObject> {
    decode_with_path(params.map_or("null", RawValue::get)).map_err(|(path, message)| match path {
        Some(path) => ErrorObject::invalid_params_at(path, message),
        None => ErrorObject::invalid_params(message),
    })
}

/// Decodes `text` into `T`; on failure returns the path of the failing field (if it can be
/// located) and serde's message without its position suffix.
pub(crate) fn decode_with_path<T: DeserializeOwned>(text: &str) -> Result<T, (Option<String>, String)> {
    acp_types::decode::from_str(text).map_err(path_and_message)
}

/// Runs `decode` on a deserializer over `text`; on failure returns the failing field's path
/// and serde's message, as [`decode_with_path`] does. For decoders that are not a
/// `Deserialize` impl (decoding by method name, lenient results). Trailing input is not
/// checked (a decoder may leave the value unread, e.g. for an unknown method): `text` must be
/// one JSON value, as a [`RawValue`] is.
pub(crate) fn decode_with_path_by<'a, T>(
    text: &'a str,
    decode: impl FnOnce(&mut serde_json::Deserializer<serde_json::de::StrRead<'a>>) -> Result<T, serde_json::Error>,
) -> Result<T, (Option<String>, String)> {
    acp_types::decode::from_str_with(text, decode).map_err(path_and_message)
}

/// The path (`None` without a position) and the message of a decoding failure: `data.path`
/// and the message of a -32602 answer. The locating itself is acp-types', which types-only
/// users have too.
fn path_and_message(e: acp_types::DecodeError) -> (Option<String>, String) {
    (e.path().map(str::to_owned), e.message().to_owned())
}

/// The JSON path (`a.b[2]["odd key"]`) of the value being read at byte `offset` of `text`
/// (where serde_json reports a decoding error); see [`acp_types::decode`].
pub use acp_types::decode::path_at;

// ---- encoding -------------------------------------------------------------------------------
//
// Outgoing messages are written straight into one `Vec<u8>` per message (the line the writer
// task copies into its buffer), with the trailing newline: no intermediate `Value`.

const PREFIX: &[u8] = br#"{"jsonrpc":"2.0""#;

fn write_json<T: Serialize + ?Sized>(buf: &mut Vec<u8>, v: &T) -> serde_json::Result<()> {
    serde_json::to_writer(&mut *buf, v)
}

/// `{"jsonrpc":"2.0","id":ID,"method":M[,"params":P]}\n`
pub(crate) fn encode_request<P: Serialize + ?Sized>(
    buf: &mut Vec<u8>,
    id: i64,
    method: &str,
    params: Option<&P>,
) -> serde_json::Result<()> {
    let start = buf.len();
    buf.extend_from_slice(PREFIX);
    buf.extend_from_slice(br#","id":"#);
    write_json(buf, &id)?;
    encode_call_tail(buf, start, method, params)
}

/// `{"jsonrpc":"2.0","method":M[,"params":P]}\n`
pub(crate) fn encode_notification<P: Serialize + ?Sized>(
    buf: &mut Vec<u8>,
    method: &str,
    params: Option<&P>,
) -> serde_json::Result<()> {
    let start = buf.len();
    buf.extend_from_slice(PREFIX);
    encode_call_tail(buf, start, method, params)
}

fn encode_call_tail<P: Serialize + ?Sized>(
    buf: &mut Vec<u8>,
    start: usize,
    method: &str,
    params: Option<&P>,
) -> serde_json::Result<()> {
    buf.extend_from_slice(br#","method":"#);
    write_json(buf, method)?;
    if let Some(params) = params {
        buf.extend_from_slice(br#","params":"#);
        write_json(buf, params)?;
        one_line(&mut buf[start..]);
    }
    buf.extend_from_slice(b"}\n");
    Ok(())
}

/// `{"jsonrpc":"2.0","id":ID,"result":R}\n` or `...,"error":E}\n`
pub(crate) fn encode_response(buf: &mut Vec<u8>, id: &Id, result: Result<&RawValue, &ErrorObject>) {
    let start = buf.len();
    buf.extend_from_slice(PREFIX);
    buf.extend_from_slice(br#","id":"#);
    // Ids, raw values and error objects always serialize (string keys, finite numbers only).
    let written = write_json(buf, id).and_then(|()| match result {
        Ok(result) => {
            buf.extend_from_slice(br#","result":"#);
            write_json(buf, result)
        }
        Err(error) => {
            buf.extend_from_slice(br#","error":"#);
            write_json(buf, error)
        }
    });
    debug_assert!(written.is_ok());
    one_line(&mut buf[start..]);
    buf.extend_from_slice(b"}\n");
}

/// Keeps an encoded message on one line. A [`RawValue`] keeps the whitespace it was made with
/// (a pretty-printed result, say), and a `\n` in it would end the line early: the peer would
/// read fragments and never the message. In valid JSON a raw `\n` or `\r` can only be
/// whitespace between tokens (inside strings they are escaped), so a space does the same.
pub(crate) fn one_line(encoded: &mut [u8]) {
    let mut from = 0;
    while let Some(pos) = memchr::memchr2(b'\n', b'\r', &encoded[from..]) {
        encoded[from + pos] = b' ';
        from += pos + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(line: &str) -> DecodeErrorKind {
        decode(line.as_bytes()).unwrap_err().kind
    }

    #[test]
    fn decodes_the_three_shapes() {
        match decode(br#"{"jsonrpc":"2.0","id":1,"method":"a","params":{"x":1}}"#).unwrap() {
            Message::Request { id, method, params } => {
                assert_eq!(id, Id::Number(1));
                assert_eq!(method, "a");
                assert_eq!(params.unwrap().get(), r#"{"x":1}"#);
            }
            m => panic!("{m:?}"),
        }
        assert!(matches!(
            decode(br#"{"method":"n","jsonrpc":"2.0"}"#).unwrap(),
            Message::Notification { params: None, .. }
        ));
        assert!(matches!(
            decode(br#"{"jsonrpc":"2.0","id":"x","error":{"code":-1,"message":"m"}}"#).unwrap(),
            Message::Response { id: Id::String(_), result: Err(_) }
        ));
    }

    #[test]
    fn classifies_bad_input() {
        assert_eq!(kind("{"), DecodeErrorKind::Parse);
        assert_eq!(kind("[1,2"), DecodeErrorKind::Parse);
        assert_eq!(kind("[1,2]"), DecodeErrorKind::InvalidRequest);
        assert_eq!(kind("42"), DecodeErrorKind::InvalidRequest);
        assert_eq!(kind(r#"{"jsonrpc":"2.0","id":true,"method":"a"}"#), DecodeErrorKind::InvalidRequest);
        // A number that is not an i64 is an id all the same, kept as written.
        match decode(br#"{"jsonrpc":"2.0","id":1.50,"method":"a"}"#).unwrap() {
            Message::Request { id, .. } => assert_eq!(id, Id::OtherNumber("1.50".into())),
            m => panic!("{m:?}"),
        }
        assert_eq!(kind(r#"{"jsonrpc":"2.0","id":1,"method":"a","params":"s"}"#), DecodeErrorKind::InvalidParams);
        assert_eq!(kind(r#"{"jsonrpc":"2.0","method":"a","params":1}"#), DecodeErrorKind::InvalidNotification);
        assert_eq!(kind(r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#), DecodeErrorKind::InvalidResponse);
        let deep = "[".repeat(200_000);
        assert_eq!(kind(&deep), DecodeErrorKind::Parse);
        let deep_obj = format!(r#"{{"jsonrpc":"2.0","method":"a","params":{}"#, "[".repeat(200_000));
        assert_eq!(kind(&deep_obj), DecodeErrorKind::Parse);
    }

    #[test]
    fn decode_errors_name_the_failing_field() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Block {
            r#type: String,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        #[serde(rename_all = "camelCase")]
        struct Prompt {
            session_id: String,
            prompt: Vec<Block>,
        }
        let at = |json: &str| {
            let raw = RawValue::from_string(json.to_owned()).unwrap();
            let e = decode_params::<Prompt>(Some(&raw)).unwrap_err();
            assert_eq!(e.code, codes::INVALID_PARAMS);
            (e.data.map(|d| d["path"].as_str().unwrap().to_owned()), e.message)
        };
        assert_eq!(at(r#"{"sessionId": 5, "prompt": []}"#).0.as_deref(), Some("sessionId"));
        assert_eq!(at(r#"{"sessionId":"s","prompt":[{"type":"a"},{"type":1}]}"#).0.as_deref(), Some("prompt[1].type"));
        let (path, message) = at(r#"{"sessionId":"s","prompt":[{"type":"a"},{"text":"x"}]}"#);
        assert_eq!(path.as_deref(), Some("prompt[1]"));
        assert!(message.contains("missing field `type`"), "{message}");
        assert!(!message.contains("column"), "{message}");
        assert_eq!(path_at(r#"{"a b":{"c":[0,{"d":"#, 19), r#"["a b"].c[1].d"#);
        assert_eq!(path_at("", 10), "");
    }

    /// Seeded mutations of valid messages: decoding never panics, and an answer is always a
    /// short fixed text (never the input).
    #[test]
    fn mutated_input_never_panics() {
        let seeds: [&[u8]; 4] = [
            br#"{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"hi"}]}}"#,
            br#"{"jsonrpc":"2.0","id":"x","result":{"stopReason":"end_turn","_meta":{"a":[1,2,{"b":null}]}}}"#,
            br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"m","data":{"path":"a"}}}"#,
            br#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":7}}"#,
        ];
        let alphabet = b"{}[]\",:\\0123456789-.eEtrufalsn \x00\xff\xc3u";
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut rand = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        for i in 0..20_000 {
            let mut line = seeds[i % seeds.len()].to_vec();
            for _ in 0..1 + rand(4) {
                let at = rand(line.len());
                match rand(3) {
                    0 => line[at] = alphabet[rand(alphabet.len())],
                    1 => line.insert(at, alphabet[rand(alphabet.len())]),
                    _ => {
                        line.remove(at);
                    }
                }
                if line.is_empty() {
                    line.push(b'{');
                }
            }
            if let Err(e) = decode(&line) {
                if let Some((_, error)) = e.answer() {
                    assert!(error.message.len() < 100, "{error:?}");
                }
            }
        }
    }

    #[test]
    fn encodes_compactly() {
        let mut buf = Vec::new();
        let params = RawValue::from_string(r#"{"a": 1}"#.into()).unwrap();
        encode_request(&mut buf, 7, "x/y", Some(&*params)).unwrap();
        assert_eq!(buf, b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"x/y\",\"params\":{\"a\": 1}}\n");
        buf.clear();
        encode_response(&mut buf, &Id::Null, Err(&ErrorObject::parse_error()));
        assert_eq!(buf, b"{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error\"}}\n");
    }
}
