//! MCP over ACP (the `mcp-over-acp` RFD, unstable): MCP servers that live in a client or a
//! proxy and are reached through the ACP connection itself, with [rmcp](https://docs.rs/rmcp)
//! on both ends, so tools are plain rmcp tools.
//!
//! | side | type | feature |
//! |---|---|---|
//! | a client or a proxy offers servers | [`McpServers`]: registers rmcp servers, declares them (`"type": "acp"`), answers `mcp/connect`, `mcp/message`, `mcp/disconnect` | `mcp-over-acp` |
//! | an agent uses them | [`McpClients`]: `mcp/connect`, then an rmcp client whose messages travel as `mcp/message` | `mcp-over-acp` |
//! | an agent that cannot | the conductor's bridge (`bridge`, `Conductor::mcp_bridge`): rewrites the declarations into a stdio server the agent spawns (unix) | `mcp-bridge` |
//!
//! # The wire (this crate's pinned schema)
//!
//! | message | direction | params | result |
//! |---|---|---|---|
//! | `session/new` (and `load`, `resume`, `fork`) | client → agent | `mcpServers: [{"type": "acp", "name": N, "serverId": S}]` | |
//! | `mcp/connect` | agent → client (toward whoever declared `S`) | `{"serverId": S}` | `{"connectionId": C}`, fresh for every connect |
//! | `mcp/message` request | both ways | `{"connectionId": C, "method": M, "params"?: P}`: an MCP request | the MCP result itself; an MCP error is the ACP error |
//! | `mcp/message` notification | both ways | the same: an MCP notification | |
//! | `mcp/disconnect` | agent → client | `{"connectionId": C}` | `{}` |
//!
//! An agent advertises that it speaks this with `agentCapabilities.mcpCapabilities.acp: true`.
//! Inner MCP request ids do not travel: each ACP hop has its own ids, and each end of a
//! connection numbers the MCP requests it hands to its rmcp peer itself. Cancelling an
//! `mcp/message` request (`$/cancel_request`) reaches the other end's rmcp as MCP's
//! `notifications/cancelled`, and the other way round.
//!
//! The official Rust SDK 5.0 follows a later revision of the schema, in which MCP over ACP is
//! request-scoped: no `mcp/connect` or `mcp/disconnect`, every `mcp/message` names its
//! `serverId` and an inner `requestId`, its result is a carrier `{"result": ..}` or
//! `{"error": ..}`, and the inner protocol is MCP's stateless revision. This crate follows the
//! schema it is generated from (connections, as above); the two do not interoperate on these
//! methods.
//!
//! # In a chain
//!
//! `mcp/connect`, `mcp/message` and `mcp/disconnect` from the agent travel toward the client
//! like any agent → client message; a proxy offering servers ([`McpServers`] is a
//! [`Proxy`](crate::proxy::Proxy)) answers those for its own `serverId`s and connections and
//! forwards the rest. Ids are unique to the process that made them (a random tag), so the
//! servers of several components never collide.
//!
//! A proxy of your own that also offers MCP servers delegates these methods to its
//! [`McpServers`]:
//!
//! ```ignore
//! impl Proxy for MyProxy {
//!     fn intercepts(&self, from: Side, method: &str) -> bool {
//!         self.mcp.intercepts(from, method) || my_own_interest(from, method)
//!     }
//!     async fn handle_request(&self, cx: ProxyContext, from: Side, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
//!         if self.mcp.intercepts(from, &req.method) {
//!             return self.mcp.handle_request(cx, from, req).await;
//!         }
//!         // ...
//!     }
//! }
//! ```

#[cfg(all(feature = "mcp-bridge", unix))]
pub mod bridge;
#[cfg(feature = "mcp-over-acp")]
mod consumer;
#[cfg(feature = "mcp-over-acp")]
mod provider;
#[cfg(feature = "mcp-over-acp")]
mod transport;
#[cfg(any(feature = "mcp-over-acp", all(feature = "mcp-bridge", unix)))]
pub(crate) mod tunnel;

#[cfg(feature = "mcp-over-acp")]
pub use consumer::{McpClients, McpConnectError, McpConnection, acp_servers};
#[cfg(feature = "mcp-over-acp")]
pub use provider::McpServers;
#[cfg(feature = "mcp-over-acp")]
pub use rmcp;

/// The requests whose params carry `mcpServers`.
pub(crate) const MCP_SERVER_CARRIERS: &[&str] = &["session/new", "session/load", "session/resume", "session/fork"];

/// A tag unlikely to be made twice, by this process or another: ids made with it do not
/// collide with those of other components in a chain.
pub(crate) fn random_tag() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static MADE: AtomicU64 = AtomicU64::new(0);
    // `RandomState` is seeded from the OS's randomness once per process.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(MADE.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    if let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(now.as_nanos());
    }
    format!("{:016x}", hasher.finish())
}
