//! The remote transport: ACP over Streamable HTTP and WebSocket on one endpoint (the
//! remote-transport RFD, `rfds/streamable-http-websocket-transport.mdx`), server
//! (`server`, feature `http-server`) and client (`client`, feature `http-client`), each over
//! TLS too with the feature `http-tls`, which adds TLS to whichever side is on and turns
//! neither on (rustls: `BoundServer::tls` on the server, `https://` and `wss://` URLs on the
//! client).
//!
//! Both sides run an ordinary [`Connection`](crate::Connection) over in-memory pipes
//! ([`crate::transport::duplex`]) and move whole JSON-RPC messages between those pipes and
//! HTTP: the connection's ordering, cancellation and backpressure rules are the stdio ones,
//! and nothing here reaches into the router. What this module shares between the two sides:
//! the header names, how a message is classified for routing ([`Envelope`]), and the SSE
//! event format.
//!
//! # The wire, as both sides implement it
//!
//! - `POST` carries one client→agent message (`Content-Type: application/json`). `initialize`
//!   (without `Acp-Connection-Id`) creates a connection and is answered `200` with the JSON-RPC
//!   response and the `Acp-Connection-Id` header; every other message is answered `202` and its
//!   response, if any, arrives on a stream.
//! - `GET` with `Accept: text/event-stream` opens a stream: with `Acp-Connection-Id` alone the
//!   connection-scoped one (responses to `session/new` and `session/load`, messages tied to no
//!   session), with `Acp-Session-Id` too the session-scoped one (that session's updates, the
//!   agent's requests about it, responses to the session's requests). Each event is one
//!   `data: <json>` line and a blank line; an idle stream gets a `:` comment every 15 s.
//! - `GET` with `Upgrade: websocket` is the other profile: one connection per socket, one
//!   JSON-RPC message per text frame, both directions.
//! - `DELETE` with `Acp-Connection-Id` ends the connection.
//!
//! Where the RFD and the official SDKs differ, or the RFD is silent, the choices are listed
//! in the `server` module's documentation (server side) and the `client` module's (client side).

#[cfg(feature = "http-client")]
pub mod client;
#[cfg(feature = "http-server")]
pub mod server;

use serde::Deserialize;
use serde_json::value::RawValue;

/// The header carrying the transport connection's id (`initialize`'s answer sets it; every
/// later request carries it).
pub const CONNECTION_ID_HEADER: &str = "acp-connection-id";
/// The header carrying the session a request or stream belongs to.
pub const SESSION_ID_HEADER: &str = "acp-session-id";
/// The SSE media type.
pub const EVENT_STREAM: &str = "text/event-stream";
/// The endpoint path both sides default to.
pub const DEFAULT_PATH: &str = "/acp";

/// Methods that concern one session, whose POST must carry `Acp-Session-Id` (beyond these,
/// any message whose `params.sessionId` is a string). The RFD names only some; this is the
/// list both official SDKs use.
pub const SESSION_SCOPED_METHODS: &[&str] = &[
    "session/cancel",
    "session/close",
    "session/delete",
    "session/fork",
    "session/load",
    "session/prompt",
    "session/resume",
    "session/set_config_option",
    "session/set_mode",
    "session/set_model",
];

/// What the routing of a message needs to know, read without decoding the rest of it.
#[derive(Debug, Default)]
pub struct Envelope {
    /// The request or response id, as JSON text in the form the runtime writes it (`1`,
    /// `"a"`; `"\u0061"` reads as `"a"`), if it is a string or a number.
    pub id: Option<String>,
    /// The method of a request or notification.
    pub method: Option<String>,
    /// `params.sessionId`, when it is a string.
    pub params_session: Option<String>,
    /// `result.sessionId`, when it is a string (the answer to `session/new` and the like).
    pub result_session: Option<String>,
    /// Whether the message is a response (it has `result` or `error`).
    pub is_response: bool,
    /// Whether the message is an error response.
    pub is_error: bool,
}

impl Envelope {
    /// Reads the routing fields of one JSON-RPC message. `None` when `text` is not a JSON
    /// object.
    pub fn read(text: &str) -> Option<Envelope> {
        #[derive(Deserialize)]
        struct Raw<'a> {
            #[serde(borrow, default)]
            id: Option<&'a RawValue>,
            #[serde(default)]
            method: Option<String>,
            #[serde(default)]
            params: Option<WithSession>,
            // Present even when `null` (a valid result), unlike a plain `Option`.
            #[serde(default, deserialize_with = "present")]
            result: Option<WithSession>,
            #[serde(borrow, default)]
            error: Option<&'a RawValue>,
        }
        fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<WithSession>, D::Error> {
            WithSession::deserialize(d).map(Some)
        }
        // Any JSON value is accepted here; only an object's `sessionId` string is kept, and
        // everything else is skipped without being built (params can be large).
        #[derive(Default)]
        struct WithSession(Option<String>);
        impl<'de> Deserialize<'de> for WithSession {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(SessionVisitor)
            }
        }
        struct SessionVisitor;
        impl<'de> serde::de::Visitor<'de> for SessionVisitor {
            type Value = WithSession;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<WithSession, A::Error> {
                let mut session = None;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "sessionId" {
                        session = map.next_value::<serde_json::Value>()?.as_str().map(str::to_owned);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(WithSession(session))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<WithSession, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(WithSession(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<WithSession, E> {
                Ok(WithSession(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<WithSession, E> {
                Ok(WithSession(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<WithSession, E> {
                Ok(WithSession(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<WithSession, E> {
                Ok(WithSession(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<WithSession, E> {
                Ok(WithSession(None))
            }
            fn visit_unit<E>(self) -> Result<WithSession, E> {
                Ok(WithSession(None))
            }
        }
        // (A derived struct would also accept an array.)
        if !text.trim_start().starts_with('{') {
            return None;
        }
        let raw: Raw<'_> = serde_json::from_str(text).ok()?;
        let is_response = raw.result.is_some() || raw.error.is_some();
        Some(Envelope {
            is_error: raw.error.is_some(),
            // Canonical, as the runtime writes the id back in its answer (escapes resolved,
            // `-0` as `0`): a request and its answer must find the same key. An id that is not
            // a JSON-RPC id (an object, an array, a boolean) is none: the runtime answers it
            // with id `null`, on the connection's stream.
            id: raw
                .id
                .and_then(crate::core::jsonrpc::parse_id)
                .filter(|id| !matches!(id, crate::core::jsonrpc::Id::Null))
                .and_then(|id| serde_json::to_string(&id).ok()),
            method: raw.method,
            params_session: raw.params.and_then(|p| p.0),
            result_session: raw.result.and_then(|r| r.0),
            is_response,
        })
    }

    /// Whether the message concerns one session: a session method, or `params.sessionId`.
    pub fn is_session_scoped(&self) -> bool {
        self.params_session.is_some() || self.method.as_deref().is_some_and(|m| SESSION_SCOPED_METHODS.contains(&m))
    }
}

/// Appends one SSE event carrying `message` (a single-line JSON text) to `out`.
#[cfg(feature = "http-server")]
pub(crate) fn push_sse_event(out: &mut Vec<u8>, message: &[u8]) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(message);
    out.extend_from_slice(b"\n\n");
}

/// The SSE comment sent on an idle stream so that intermediaries keep it open.
#[cfg(feature = "http-server")]
pub(crate) const SSE_KEEP_ALIVE: &[u8] = b":\n\n";

/// Makes one JSON text a single line: raw CR and LF bytes can only be whitespace between
/// tokens in valid JSON (inside strings they must be escaped), so they become spaces.
pub(crate) fn one_line(mut json: Vec<u8>) -> Vec<u8> {
    for byte in &mut json {
        if *byte == b'\n' || *byte == b'\r' {
            *byte = b' ';
        }
    }
    json
}

/// A fresh, unguessable-enough identifier (128 bits from the standard library's randomly
/// seeded hasher, a counter and the clock): connection ids are not credentials (the RFD says
/// so), but they must not collide or be predictable from one another.
#[cfg(feature = "http-server")]
pub(crate) fn new_id() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let half = |salt: u64| {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(count);
        hasher.write_u128(nanos);
        hasher.write_u64(salt);
        hasher.finish()
    };
    format!("{:016x}{:016x}", half(1), half(2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_reads_routing_fields() {
        let e = Envelope::read(
            r#"{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"s1","prompt":[]}}"#,
        )
        .unwrap();
        assert_eq!(e.id.as_deref(), Some("3"));
        assert_eq!(e.method.as_deref(), Some("session/prompt"));
        assert_eq!(e.params_session.as_deref(), Some("s1"));
        assert!(!e.is_response && e.is_session_scoped());

        let e = Envelope::read(r#"{"jsonrpc":"2.0","id":"x","result":{"sessionId":"s2"}}"#).unwrap();
        assert_eq!((e.id.as_deref(), e.result_session.as_deref(), e.is_response), (Some(r#""x""#), Some("s2"), true));

        let e = Envelope::read(r#"{"jsonrpc":"2.0","id":4,"result":null}"#).unwrap();
        assert!(e.is_response && !e.is_error && e.result_session.is_none());

        let e = Envelope::read(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}"#).unwrap();
        assert!(e.id.is_none() && e.is_response);

        // Params that are not an object, or a sessionId that is not a string, route nowhere.
        let e = Envelope::read(r#"{"jsonrpc":"2.0","method":"x","params":[1]}"#).unwrap();
        assert!(e.params_session.is_none() && !e.is_session_scoped());
        let e = Envelope::read(r#"{"jsonrpc":"2.0","method":"x","params":{"sessionId":5}}"#).unwrap();
        assert!(e.params_session.is_none());

        assert!(Envelope::read("[1]").is_none());
        assert!(Envelope::read("nope").is_none());
    }

    #[test]
    fn one_line_keeps_strings() {
        let text = b"{\n  \"a\": \"x\\ny\"\r\n}".to_vec();
        let line = one_line(text);
        assert!(!line.contains(&b'\n'));
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["a"], "x\ny");
    }

    #[test]
    #[cfg(feature = "http-server")]
    fn ids_differ() {
        let a = new_id();
        let b = new_id();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
