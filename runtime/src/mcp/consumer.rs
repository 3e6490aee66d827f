//! The using side: [`McpClients`], an agent's rmcp clients of the `"type": "acp"` MCP servers
//! its client declared.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use acp_types::{
    ConnectMcpRequest, ConnectMcpResponse, DisconnectMcpRequest, DisconnectMcpResponse, McpConnectionId, McpServer,
    McpServerAcp, McpServerAcpId, MessageMcpNotification, MessageMcpRequest, MessageMcpResponse, client_method,
};
use rmcp::service::{ClientInitializeError, RoleClient, RunningService, Service};
use serde_json::Value;
use tokio::sync::oneshot;

use super::transport::TunnelTransport;
use super::tunnel::{OnEnd, Route, Tunnel};
use crate::Peer;
use crate::agent::{AgentContext, ClientHandle};
use crate::error::Error;
use crate::typed;

/// Why [`McpClients::connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpConnectError {
    /// `mcp/connect` failed (e.g. -32602 from a client that offers no such server).
    #[error("mcp/connect failed: {0}")]
    Connect(#[from] Error),
    /// The MCP connection opened, but the MCP session did not start (`initialize`).
    #[error("the MCP session did not start: {0}")]
    Initialize(Box<ClientInitializeError>),
}

/// An agent's connections to MCP servers offered over ACP. [`McpClients::connect`] opens one
/// and runs an rmcp client on it, so the agent calls `list_tools`, `call_tool`, ... with rmcp's
/// client API; dropping the [`McpConnection`] sends `mcp/disconnect`.
///
/// What the server sends on its own (notifications, requests to the client side of MCP such
/// as sampling) arrives as `mcp/message` from the ACP client; an `#[acp_agent]` passes it on:
///
/// ```ignore
/// async fn mcp_message(&self, params: MessageMcpRequest, cx: AgentContext) -> Result<MessageMcpResponse, Error> {
///     self.mcp.message(params, &cx).await
/// }
/// async fn mcp_message_notification(&self, params: MessageMcpNotification) -> Result<(), Error> {
///     self.mcp.message_notification(params).await
/// }
/// ```
///
/// Cheap to clone; clones share the connections.
#[derive(Clone, Debug, Default)]
pub struct McpClients {
    connections: Arc<Mutex<HashMap<McpConnectionId, Arc<Tunnel>>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn unknown_connection(id: &McpConnectionId) -> acp_types::Error {
    acp_types::Error::invalid_params().data(Value::from(format!("no MCP connection `{id}` here")))
}

type Opened = Result<ConnectMcpResponse, Error>;

/// `mcp/connect`, made by a task of its own so that its answer is read even when the caller
/// gives up first (see [`McpClients::connect`]); [`Waiting`] closes what such an answer opened.
async fn open(client: &ClientHandle, params: ConnectMcpRequest) -> Opened {
    let peer = client.peer().clone();
    let call = typed::typed_call_owned::<_, ConnectMcpResponse>(peer.clone(), client_method::MCP_CONNECT, &params);
    let (tx, rx) = oneshot::channel::<Opened>();
    tokio::spawn({
        let peer = peer.clone();
        async move {
            if let Err(Ok(opened)) = tx.send(call.await) {
                disconnect(peer, opened.connection_id).await;
            }
        }
    });
    let mut waiting = Waiting { rx, peer };
    match client.cancellation_token() {
        Some(token) => tokio::select! {
            answer = &mut waiting.rx => answer.unwrap_or(Err(Error::ConnectionClosed)),
            () = token.cancelled() => Err(if client.peer().is_closed() { Error::ConnectionClosed } else { Error::Cancelled }),
        },
        None => (&mut waiting.rx).await.unwrap_or(Err(Error::ConnectionClosed)),
    }
}

/// The caller's end of an `mcp/connect` in flight. Dropped before the answer was taken, it
/// closes the channel, so the task disconnects what the answer opens; an answer already in the
/// channel is disconnected here.
struct Waiting {
    rx: oneshot::Receiver<Opened>,
    peer: Peer,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.rx.close();
        if let Ok(Ok(opened)) = self.rx.try_recv()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(disconnect(self.peer.clone(), opened.connection_id));
        }
    }
}

/// `mcp/disconnect` for a connection nobody uses; the answer does not matter.
async fn disconnect(peer: Peer, connection_id: McpConnectionId) {
    tracing::debug!(connection = %connection_id, "mcp over acp: closing a connection whose connect was given up");
    let params = DisconnectMcpRequest::new(connection_id);
    let _ = typed::typed_call_owned::<_, DisconnectMcpResponse>(peer, client_method::MCP_DISCONNECT, &params).await;
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

    /// How many MCP connections are open.
    pub fn connection_count(&self) -> usize {
        lock(&self.connections).len()
    }

    /// Connects to the server `server_id` through `client` (`mcp/connect`; bound to the
    /// handle's cancellation token, as every call of the handle) and starts the rmcp client
    /// `service` on the connection (`()` for a client without handlers of its own): the MCP
    /// `initialize` handshake has happened when this returns.
    ///
    /// The connection outlives the request it was opened in; it ends when the returned
    /// [`McpConnection`] is dropped or closed (`mcp/disconnect` is then sent), when the rmcp
    /// client stops, when the server side ends it, or with the ACP connection. A connect given
    /// up before its answer (this future dropped, or the handle's token cancelled: it then
    /// fails with [`Error::Cancelled`] at once) still has its answer awaited, and a connection
    /// that answer opened is closed with `mcp/disconnect`, so none is left open on the client.
    pub async fn connect<C>(
        &self,
        client: &ClientHandle,
        server_id: impl Into<McpServerAcpId>,
        service: C,
    ) -> Result<McpConnection<C>, McpConnectError>
    where
        C: Service<RoleClient>,
    {
        let connection_id = open(client, ConnectMcpRequest::new(server_id)).await?.connection_id;
        let registry: Weak<Mutex<HashMap<McpConnectionId, Arc<Tunnel>>>> = Arc::downgrade(&self.connections);
        let key = connection_id.clone();
        let then = Box::new(move || {
            if let Some(connections) = registry.upgrade() {
                lock(&connections).remove(&key);
            }
        });
        let route = Route::plain(client.peer().clone());
        let on_end = OnEnd { disconnect: true, then };
        let (tunnel, local) = Tunnel::start(connection_id.clone(), route, on_end, |tunnel| {
            lock(&self.connections).insert(connection_id.clone(), tunnel);
        });
        let transport = TunnelTransport::new(local, tunnel.clone());
        let guard = HangUp(tunnel);
        let service =
            rmcp::serve_client(service, transport).await.map_err(|e| McpConnectError::Initialize(Box::new(e)))?;
        Ok(McpConnection { service: Some(service), guard, connection_id })
    }

    /// `mcp/message` request from the client (the server asks something of the MCP client):
    /// the rmcp client's answer.
    pub async fn message(
        &self,
        params: MessageMcpRequest,
        cx: &AgentContext,
    ) -> Result<MessageMcpResponse, acp_types::Error> {
        let tunnel = lock(&self.connections).get(&params.connection_id).cloned();
        let tunnel = tunnel.ok_or_else(|| unknown_connection(&params.connection_id))?;
        let answer = tunnel.acp_request(params.method, params.params, cx.cancellation_token()).await?;
        Ok(MessageMcpResponse(answer))
    }

    /// `mcp/message` notification from the client (e.g. `notifications/tools/list_changed`):
    /// passed to the rmcp client, waiting while it has a full queue of messages it has not
    /// read yet (64), so a client cannot queue them faster than the rmcp client reads.
    pub async fn message_notification(&self, params: MessageMcpNotification) -> Result<(), acp_types::Error> {
        let tunnel = lock(&self.connections).get(&params.connection_id).cloned();
        let tunnel = tunnel.ok_or_else(|| unknown_connection(&params.connection_id))?;
        tunnel.acp_notification(params.method, params.params).await;
        Ok(())
    }
}

/// Hangs the tunnel up when dropped.
#[derive(Debug)]
struct HangUp(Arc<Tunnel>);

impl Drop for HangUp {
    fn drop(&mut self) {
        self.0.hang_up();
    }
}

/// An open MCP connection over ACP with the rmcp client running on it: it dereferences to
/// rmcp's [`RunningService`] (and on to its [`Peer`](rmcp::Peer)), so `list_tools`,
/// `call_tool`, ... are called on it directly. Dropping it sends `mcp/disconnect` (from a
/// task); [`McpConnection::close`] waits for the answer.
pub struct McpConnection<C: Service<RoleClient>> {
    service: Option<RunningService<RoleClient, C>>,
    guard: HangUp,
    connection_id: McpConnectionId,
}

impl<C: Service<RoleClient>> std::fmt::Debug for McpConnection<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConnection").field("connection_id", &self.connection_id).finish_non_exhaustive()
    }
}

impl<C: Service<RoleClient>> McpConnection<C> {
    /// The `connectionId` the server side gave it.
    pub fn connection_id(&self) -> &McpConnectionId {
        &self.connection_id
    }

    /// Ends the connection: `mcp/disconnect` is sent and answered when this returns (or given
    /// up after 5 s without an answer); the rmcp client is stopped.
    pub async fn close(mut self) {
        self.guard.0.hang_up();
        self.guard.0.ended().await;
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
