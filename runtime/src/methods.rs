//! The ACP method names and fixed results the runtime itself acts on.
//!
//! Kept small on purpose: the generated crate (`acp-types`) owns the full method table; the
//! runtime only needs the names its cancellation rules depend on.

/// Cancels one request by id (protocol level, both directions). Params: `{"requestId": ID}`.
pub const CANCEL_REQUEST: &str = "$/cancel_request";
/// Client → agent notification: cancel the session's ongoing prompt turn. Params:
/// `{"sessionId": ...}`.
pub const SESSION_CANCEL: &str = "session/cancel";
/// Client → agent request: one prompt turn.
pub const SESSION_PROMPT: &str = "session/prompt";
/// Agent → client request: ask the user for permission.
pub const SESSION_REQUEST_PERMISSION: &str = "session/request_permission";
/// Agent → client notification: streaming progress of a session.
pub const SESSION_UPDATE: &str = "session/update";

/// The answer to a cancelled `session/prompt`.
pub const CANCELLED_PROMPT_RESULT: &str = r#"{"stopReason":"cancelled"}"#;
/// The answer to a cancelled `session/request_permission`.
pub const CANCELLED_PERMISSION_RESULT: &str = r#"{"outcome":{"outcome":"cancelled"}}"#;

/// Method names that arrive often enough to be worth not allocating: an incoming method equal
/// to one of these is kept as a `&'static str`.
pub(crate) const COMMON: &[&str] = &[
    SESSION_UPDATE,
    SESSION_PROMPT,
    SESSION_CANCEL,
    SESSION_REQUEST_PERMISSION,
    CANCEL_REQUEST,
    "initialize",
    "authenticate",
    "session/new",
    "session/load",
    "session/set_mode",
    "session/set_config_option",
    "fs/read_text_file",
    "fs/write_text_file",
    "terminal/create",
    "terminal/output",
    "terminal/release",
    "terminal/wait_for_exit",
    "terminal/kill",
];

/// Returns the method as a `Cow`, borrowed from [`COMMON`] when it is a known name.
pub(crate) fn intern(method: &str) -> std::borrow::Cow<'static, str> {
    match COMMON.iter().find(|m| **m == method) {
        Some(m) => std::borrow::Cow::Borrowed(m),
        None => std::borrow::Cow::Owned(method.to_owned()),
    }
}
