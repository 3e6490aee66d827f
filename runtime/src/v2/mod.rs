//! Protocol v2 (feature `unstable_protocol_v2`): the typed layer for agents and clients that
//! speak ACP v2, beside the v1 layer in [`crate::agent`] / [`crate::client`].
//!
//! The raw core is shared: framing, JSON-RPC, ordering, backpressure and cancellation are the
//! same on both versions (see [`crate::connection`]). What v2 changes is above it:
//!
//! | module | owns |
//! |---|---|
//! | [`agent`] | serving an [`acp_types::v2::Agent`], [`AgentContext`], [`ClientHandle`] (no `fs/*` or `terminal/*`: v2 has none) |
//! | [`client`] | serving an [`acp_types::v2::Client`], [`ClientContext`], [`AgentHandle`]: prompts that return at acceptance or at the end of the turn |
//! | [`session`] | [`SessionState`]: a session's messages, tool calls, plans, terminals and state, kept by applying its updates with the spec's merge rules |
//! | [`turn`] | the prompt lifecycle: [`Turn`] accepts a prompt, reports it, and ends it with an idle `state_update`; typed helpers for messages, tool calls, plans and permissions |
//!
//! A connection speaks one version, picked by its first `initialize`: serve a v2 agent alone
//! with [`serve_agent`], or beside a v1 agent with [`crate::version::ProtocolRouter`]. On a v2
//! connection the runtime accepts JSON-RPC batches, and `session/cancel` also cancels turns
//! that outlived their `session/prompt` request.

pub mod agent;
pub mod client;
pub mod session;
pub use agent::turn;

pub use agent::{AgentContext, AgentHandler, ClientHandle, serve_agent, serve_stdio};
pub use client::{Accepted, AgentHandle, ClientContext, ClientHandler, TurnEnd, serve_client, with_capabilities};
pub use session::SessionState;
pub use turn::{MessageStream, TerminalHandle, ToolCall, Turn};

// ---- errors ---------------------------------------------------------------------------------

impl From<acp_types::v2::Error> for crate::ErrorObject {
    /// A v2 handler's error, answered as is (code, message, data).
    fn from(e: acp_types::v2::Error) -> Self {
        // An explicit `null` and an absent member both mean no data.
        let data = e.data.flatten().and_then(|data| serde_json::to_value(data).ok());
        crate::ErrorObject { code: e.code.0, message: e.message, data }
    }
}

impl From<crate::ErrorObject> for acp_types::v2::Error {
    /// An error object from the wire, as the generated v2 error type.
    fn from(e: crate::ErrorObject) -> Self {
        let error = acp_types::v2::Error::new(e.code, e.message);
        match e.data {
            Some(data) => {
                error.data(serde_json::from_value(data.clone()).unwrap_or(acp_types::v2::ErrorData::Other(data)))
            }
            None => error,
        }
    }
}

impl From<crate::Error> for acp_types::v2::Error {
    /// Lets a v2 handler use `?` on calls to the peer (as the v1 conversion does).
    fn from(e: crate::Error) -> Self {
        e.to_error_object().into()
    }
}
