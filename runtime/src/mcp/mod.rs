//! MCP over ACP (the `mcp-over-acp` RFD, unstable): MCP servers that live in a client or a
//! proxy and are reached through the ACP connection itself, with [rmcp](https://docs.rs/rmcp)
//! on both ends, so tools are plain rmcp tools.
//!
//! | side | type | feature |
//! |---|---|---|
//! | a client or a proxy offers servers | [`McpServers`]: registers rmcp servers, declares them (`"type": "acp"`), answers `mcp/message` | `mcp-over-acp` |
//! | an agent uses them | [`McpClients`]: an rmcp client whose requests travel as `mcp/message` | `mcp-over-acp` |
//! | an agent that cannot | the conductor's bridge (`bridge`, `Conductor::mcp_bridge`): rewrites the declarations into a stdio server the agent spawns (unix) | `mcp-bridge` |
//!
//! # The wire (request-scoped, this crate's pinned schema)
//!
//! | message | direction | params | result |
//! |---|---|---|---|
//! | `session/new` (and `load`, `resume`, `fork`) | client → agent | `mcpServers: [{"type": "acp", "name": N, "serverId": S}]` | |
//! | `mcp/message` request | agent → client (toward whoever declared `S`) | `{"serverId": S, "requestId": R, "method": M, "params"?: P}`: one inner MCP request | the inner outcome: `{"result": X}` (`X` may be `null`) or `{"error": {"code", "message", "data"?}}` |
//! | `mcp/message` notification | client → agent | `{"serverId": S, "requestId": R, "method": M, "params"?: P}`: an MCP notification of the server while `R` is active (progress, logging) | |
//!
//! An agent advertises that it speaks this with `agentCapabilities.mcpCapabilities.acp: true`.
//! There are no connections: every request names its server, and an ACP error answers only
//! what cannot be served (an unknown `serverId`, bad params); the server's own errors travel in
//! the `{"error": ..}` carrier. The caller makes `requestId` (a string, unique among its active
//! requests on the connection; ours are a random tag per rmcp client and a counter) and it is
//! also the inner MCP id the server sees, so what the server says about a request names it.
//!
//! How rmcp maps onto it, as in the official Rust SDK 5.x:
//!
//! - Lifecycle: [`McpClients`] uses MCP's stateless revision (`server/discover`, then every
//!   request carrying its protocol version and capabilities in `_meta`). [`McpServers`] serves
//!   each request on an rmcp session of its own, without a handshake, over the server's one
//!   instance; a legacy `initialize` (the bridge's agents send one) is answered like any other
//!   request, and `notifications/initialized`, which the consumer has no way to send, is not
//!   needed.
//! - The consumer's notifications have no place on the wire: `notifications/cancelled` for a
//!   request in flight cancels its ACP request; the others stop at the consumer.
//! - The server's requests to the MCP client (sampling, elicitation, roots) are not carried:
//!   they fail at once, and so does the call that made them, unless the server handles that.
//! - Cancellation: `$/cancel_request` for an `mcp/message` reaches the server as MCP's
//!   `notifications/cancelled` for its request.
//!
//! # In a chain
//!
//! `mcp/message` requests from the agent travel toward the client like any agent → client
//! message; a proxy offering servers ([`McpServers`] is a [`Proxy`](crate::proxy::Proxy))
//! answers those for its own `serverId`s and forwards the rest, and its notifications go
//! toward the agent. `serverId`s are unique to the process that made them (a random tag), so
//! the servers of several components never collide.
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
/// The rmcp this module is built on (3.x), whose service traits its API takes: a major release
/// of rmcp is one of this module too (see `docs/architecture.md`, "Crates").
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
