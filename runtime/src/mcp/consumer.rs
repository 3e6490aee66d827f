//! The using side: [`McpClients`], an agent's rmcp clients of the `"type": "acp"` MCP servers
//! its client (or a proxy) declared.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use acp_types::{McpServer, McpServerAcp, McpServerAcpId, MessageMcpNotification};
use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientInitializeError, ClientLifecycleMode, RoleClient, RunningService, Service};

use super::transport::TunnelTransport;
use super::tunnel::{Route, Tunnel, tag_of};
use crate::agent::ClientHandle;

/// Why [`McpClients::connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpConnectError {
    /// The MCP session did not start: `server/discover` failed (e.g. -32602 from a client
    /// that offers no such server, or a server that speaks no stateless MCP revision).
    #[error("the MCP session did not start: {0}")]
    Initialize(Box<ClientInitializeError>),
}

/// An agent's rmcp clients of MCP servers offered over ACP. [`McpClients::connect`] starts
/// one for a declared server, so the agent calls `list_tools`, `call_tool`, ... with rmcp's
/// client API; each request travels as an `mcp/message` request with a fresh `requestId`.
///
/// The wire is request-scoped, so the client uses MCP's stateless lifecycle
/// (`server/discover`, then every request carrying its protocol version and capabilities in
/// `_meta`), as the official SDK's providers expect. Of the client's notifications, only
/// `notifications/cancelled` for a request in flight has an effect (it cancels the ACP
/// request); the others have no receiver on this wire.
///
/// What the server sends while a request runs (progress, logging) arrives as `mcp/message`
/// notifications from the ACP client; an `#[acp_agent]` passes them on:
///
/// ```ignore
/// async fn mcp_message(&self, params: MessageMcpNotification) -> Result<(), Error> {
///     self.mcp.message_notification(params).await
/// }
/// ```
///
/// Cheap to clone; clones share the connections.
#[derive(Clone, Debug, Default)]
pub struct McpClients {
    /// By their tunnel's tag.
    connections: Arc<Mutex<HashMap<String, Arc<Tunnel>>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The `"type": "acp"` servers among `servers` (e.g. `session/new`'s `mcpServers`).
pub fn acp_servers(servers: &[McpServer]) -> impl Iterator<Item = &McpServerAcp> {
    servers.iter().filter_map(|server| match server {
        McpServer::Acp(server) => Some(server),
        _ => None,
    })
}

impl McpClients {
    /// No connections yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many rmcp clients are running.
    pub fn connection_count(&self) -> usize {
        lock(&self.connections).len()
    }

    /// Starts the rmcp client `service` (`()` for a client without handlers of its own) for
    /// the server `server_id`, its requests going through `client` as `mcp/message`: MCP's
    /// `server/discover` has been answered when this returns.
    ///
    /// It runs until the returned [`McpConnection`] is dropped or closed, until the rmcp
    /// client stops, or until the ACP connection ends; its requests still in flight are then
    /// cancelled (`$/cancel_request`).
    pub async fn connect<C>(
        &self,
        client: &ClientHandle,
        server_id: impl Into<McpServerAcpId>,
        service: C,
    ) -> Result<McpConnection<C>, McpConnectError>
    where
        C: Service<RoleClient>,
    {
        let registry: Weak<Mutex<HashMap<String, Arc<Tunnel>>>> = Arc::downgrade(&self.connections);
        let route = Route::plain(client.peer().clone());
        let on_end = Box::new({
            let registry = registry.clone();
            move |tag: &str| {
                if let Some(connections) = registry.upgrade() {
                    lock(&connections).remove(tag);
                }
            }
        });
        let (tunnel, local) = Tunnel::start(server_id.into(), route, on_end, |tunnel| {
            lock(&self.connections).insert(tunnel.tag().to_owned(), tunnel);
        });
        let guard = HangUp { tunnel: tunnel.clone(), registry };
        let transport = TunnelTransport::new(local, tunnel.clone());
        let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
        let service = rmcp::service::serve_client_with_lifecycle(service, transport, lifecycle)
            .await
            .map_err(|e| McpConnectError::Initialize(Box::new(e)))?;
        Ok(McpConnection { service: Some(service), guard })
    }

    /// `mcp/message` notification from the client (e.g. `notifications/progress`): passed to
    /// the rmcp client whose request it names while that request is in flight, waiting while
    /// it has a full queue of messages it has not read yet (64), so a client cannot queue them
    /// faster than the rmcp client reads. Dropped for a request that is not (or no longer)
    /// ours.
    pub async fn message_notification(&self, params: MessageMcpNotification) -> Result<(), acp_types::Error> {
        let tunnel = tag_of(&params.request_id).and_then(|tag| lock(&self.connections).get(tag).cloned());
        match tunnel {
            Some(tunnel) => tunnel.provider_notification(&params.request_id, params.method, params.params).await,
            None => {
                tracing::debug!(request = %params.request_id, "mcp over acp: notification for no request of ours dropped")
            }
        }
        Ok(())
    }
}

/// Ends the tunnel and takes it out of the registry when dropped.
#[derive(Debug)]
struct HangUp {
    tunnel: Arc<Tunnel>,
    registry: Weak<Mutex<HashMap<String, Arc<Tunnel>>>>,
}

impl Drop for HangUp {
    fn drop(&mut self) {
        self.tunnel.hang_up();
        if let Some(connections) = self.registry.upgrade() {
            lock(&connections).remove(self.tunnel.tag());
        }
    }
}

/// An rmcp client of a server offered over ACP: it dereferences to rmcp's [`RunningService`]
/// (and on to its [`Peer`](rmcp::Peer)), so `list_tools`, `call_tool`, ... are called on it
/// directly. Dropping it stops the client and cancels its requests in flight.
pub struct McpConnection<C: Service<RoleClient>> {
    service: Option<RunningService<RoleClient, C>>,
    guard: HangUp,
}

impl<C: Service<RoleClient>> std::fmt::Debug for McpConnection<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConnection").field("server_id", self.server_id()).finish_non_exhaustive()
    }
}

impl<C: Service<RoleClient>> McpConnection<C> {
    /// The server it calls.
    pub fn server_id(&self) -> &McpServerAcpId {
        self.guard.tunnel.server_id()
    }

    /// Stops the rmcp client; its requests in flight are cancelled (`$/cancel_request` sent)
    /// when this returns.
    pub async fn close(mut self) {
        self.guard.tunnel.hang_up();
        self.guard.tunnel.ended().await;
        if let Some(service) = self.service.take() {
            service.cancellation_token().cancel();
        }
    }
}

impl<C: Service<RoleClient>> Deref for McpConnection<C> {
    type Target = RunningService<RoleClient, C>;

    fn deref(&self) -> &Self::Target {
        self.service.as_ref().expect("the service is there until the connection is closed")
    }
}

impl<C: Service<RoleClient>> DerefMut for McpConnection<C> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.service.as_mut().expect("the service is there until the connection is closed")
    }
}
