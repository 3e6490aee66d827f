//! The ACP method names and fixed results the runtime itself acts on.
//!
//! The names come from the generated method constants (`acp-types`), which own the full
//! method table; the runtime only names the ones its cancellation rules depend on.

use std::borrow::Cow;
use std::sync::Arc;

use acp_types::{agent_method, client_method, protocol_method};
use serde::Deserialize;
use serde_json::value::RawValue;

/// Cancels one request by id (protocol level, both directions). Params: `{"requestId": ID}`.
pub const CANCEL_REQUEST: &str = protocol_method::CANCEL_REQUEST;
/// Client → agent notification: cancel the session's ongoing prompt turn. Params:
/// `{"sessionId": ...}`.
pub const SESSION_CANCEL: &str = agent_method::SESSION_CANCEL;
/// Client → agent request: one prompt turn.
pub const SESSION_PROMPT: &str = agent_method::SESSION_PROMPT;
/// Agent → client request: ask the user for permission.
pub const SESSION_REQUEST_PERMISSION: &str = client_method::SESSION_REQUEST_PERMISSION;
/// Agent → client notification: streaming progress of a session.
pub const SESSION_UPDATE: &str = client_method::SESSION_UPDATE;

/// Conductor → proxy request: initialize, and operate as a proxy (a component with a
/// successor). Params and result are those of `initialize` (proxy chains RFD).
pub const PROXY_INITIALIZE: &str = "proxy/initialize";
/// Between a conductor and a proxy, both ways: a message wrapped for the proxy's successor
/// (proxy → conductor) or from it (conductor → proxy). See [`crate::proxy`].
pub const PROXY_SUCCESSOR: &str = "proxy/successor";
/// The `sacp` 11 proxy wire (`sacp-conductor` 11): [`PROXY_INITIALIZE`] under an extension
/// name. See [`crate::proxy`].
pub const SACP_PROXY_INITIALIZE: &str = "_proxy/initialize";
/// The `sacp` 11 proxy wire: [`PROXY_SUCCESSOR`] under an extension name.
pub const SACP_PROXY_SUCCESSOR: &str = "_proxy/successor";
/// The older proxy wire (earlier `sacp` crates, `@thinkwell/conductor` 0.5): a request for a
/// proxy's successor or from it, wrapped as [`PROXY_SUCCESSOR`] wraps one. See
/// [`crate::proxy`].
pub const SACP_SUCCESSOR_REQUEST: &str = "_proxy/successor/request";
/// The older proxy wire: a notification for a proxy's successor or from it.
pub const SACP_SUCCESSOR_NOTIFICATION: &str = "_proxy/successor/notification";

/// The answer to a cancelled `session/prompt`.
pub const CANCELLED_PROMPT_RESULT: &str = r#"{"stopReason":"cancelled"}"#;
/// The answer to a cancelled `session/request_permission`.
pub const CANCELLED_PERMISSION_RESULT: &str = r#"{"outcome":{"outcome":"cancelled"}}"#;

/// Method names that arrive often enough to be worth not allocating: an incoming method equal
/// to one of these is kept as a `&'static str`.
pub(crate) const COMMON: &[&str] = &[
    SESSION_UPDATE,
    PROXY_SUCCESSOR,
    SESSION_PROMPT,
    SESSION_CANCEL,
    SESSION_REQUEST_PERMISSION,
    CANCEL_REQUEST,
    agent_method::INITIALIZE,
    agent_method::AUTHENTICATE,
    agent_method::SESSION_NEW,
    agent_method::SESSION_LOAD,
    agent_method::SESSION_SET_MODE,
    agent_method::SESSION_SET_CONFIG_OPTION,
    client_method::FS_READ_TEXT_FILE,
    client_method::FS_WRITE_TEXT_FILE,
    client_method::TERMINAL_CREATE,
    client_method::TERMINAL_OUTPUT,
    client_method::TERMINAL_RELEASE,
    client_method::TERMINAL_WAIT_FOR_EXIT,
    client_method::TERMINAL_KILL,
];

/// Returns the method as a `Cow`, borrowed from [`COMMON`] when it is a known name.
pub(crate) fn intern(method: &str) -> std::borrow::Cow<'static, str> {
    match COMMON.iter().find(|m| **m == method) {
        Some(m) => std::borrow::Cow::Borrowed(m),
        None => std::borrow::Cow::Owned(method.to_owned()),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestKind {
    Prompt,
    Permission,
    /// A protocol v2 `session/prompt`: `session/cancel` does not cancel the request (it only
    /// acknowledges the prompt) but the turn it starts, through the session's scopes; it marks
    /// the request ([`Shared::mark_turns_cancelled`]) so that a turn whose handler has not
    /// started yet, and has no scope yet, starts cancelled.
    Turn,
    Other,
}

impl RequestKind {
    /// The kind of an incoming request. On a protocol v2 connection `session/prompt` only
    /// acknowledges the prompt, and the turn it starts is cancelled through
    /// [`Shared::session_work`] instead (see [`RequestKind::Turn`]).
    pub(crate) fn of(method: &str, v2: bool) -> Self {
        match method {
            SESSION_PROMPT if v2 => RequestKind::Turn,
            SESSION_PROMPT => RequestKind::Prompt,
            SESSION_REQUEST_PERMISSION => RequestKind::Permission,
            _ => RequestKind::Other,
        }
    }
}

/// The top-level `"sessionId"` string of an object's raw params.
pub(crate) fn session_id_of(params: Option<&RawValue>) -> Option<Arc<str>> {
    #[derive(Deserialize)]
    struct SessionOnly<'a> {
        #[serde(rename = "sessionId", borrow, default)]
        session_id: Option<Cow<'a, str>>,
    }
    let params = params?;
    // Objects only: a derived struct would also read an array positionally.
    if !params.get().starts_with('{') {
        return None;
    }
    serde_json::from_str::<SessionOnly<'_>>(params.get()).ok()?.session_id.map(|s| Arc::from(&*s))
}
