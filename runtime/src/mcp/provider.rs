//! The providing side: [`McpServers`], rmcp servers offered through the ACP connection by a
//! client or a proxy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use acp_types::{
    ConnectMcpRequest, ConnectMcpResponse, DisconnectMcpRequest, DisconnectMcpResponse, McpConnectionId, McpServer,
    McpServerAcp, McpServerAcpId, MessageMcpNotification, MessageMcpRequest, MessageMcpResponse, client_method,
};
use rmcp::service::{RoleServer, Service};
use serde_json::Value;
use serde_json::value::RawValue;

use super::transport::TunnelTransport;
use super::tunnel::{OnEnd, Route, Tunnel};
use super::{MCP_SERVER_CARRIERS, random_tag};
use crate::client::ClientContext;
use crate::handler::{IncomingNotification, IncomingRequest};
use crate::jsonrpc::ErrorObject;
use crate::proxy::{Proxy, ProxyContext, Side};

type Starter = Arc<dyn Fn(TunnelTransport<RoleServer>) + Send + Sync>;

/// rmcp servers offered over ACP (`"type": "acp"` MCP servers): a client or a proxy registers
/// them ([`McpServers::add`]), declares them in `session/new` ([`McpServers::declarations`]),
/// and answers the agent's `mcp/connect`, `mcp/message` and `mcp/disconnect` with them. Each
/// `mcp/connect` starts a fresh instance of the server on a connection of its own. Cheap to
/// clone; clones share the servers and their connections.
///
/// In an `#[acp_client]`, the MCP handlers delegate to it:
///
/// ```ignore
/// async fn mcp_connect(&self, params: ConnectMcpRequest, cx: ClientContext) -> Result<ConnectMcpResponse, Error> {
///     self.mcp.connect(params, &cx)
/// }
/// async fn mcp_message(&self, params: MessageMcpRequest, cx: ClientContext) -> Result<MessageMcpResponse, Error> {
///     self.mcp.message(params, &cx).await
/// }
/// async fn mcp_message_notification(&self, params: MessageMcpNotification) -> Result<(), Error> {
///     self.mcp.message_notification(params).await
/// }
/// async fn mcp_disconnect(&self, params: DisconnectMcpRequest) -> Result<DisconnectMcpResponse, Error> {
///     self.mcp.disconnect(params)
/// }
/// ```
///
/// As a [`Proxy`], it adds its servers to every `session/new`, `session/load`,
/// `session/resume` and `session/fork` going to the agent, answers the agent's MCP messages
/// for its own servers and connections, and forwards those of anyone else (another proxy's,
/// the client's). A proxy of your own delegates to it for these methods (see the
/// [module docs](super)).
#[derive(Clone)]
pub struct McpServers {
    inner: Arc<Inner>,
}

struct Inner {
    tag: String,
    next: AtomicU64,
    servers: Mutex<Vec<Registered>>,
    connections: Mutex<HashMap<McpConnectionId, Arc<Tunnel>>>,
}

struct Registered {
    declaration: McpServerAcp,
    start: Starter,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let servers: Vec<_> = lock(&self.inner.servers).iter().map(|s| s.declaration.server_id.0.clone()).collect();
        f.debug_struct("McpServers").field("servers", &servers).finish_non_exhaustive()
    }
}

impl Default for McpServers {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn unknown_server(id: &McpServerAcpId) -> acp_types::Error {
    acp_types::Error::invalid_params().data(Value::from(format!("no MCP server `{id}` is offered here")))
}

fn unknown_connection(id: &McpConnectionId) -> acp_types::Error {
    acp_types::Error::invalid_params().data(Value::from(format!("no MCP connection `{id}` here")))
}

impl McpServers {
    /// No servers yet.
    pub fn new() -> Self {
        McpServers {
            inner: Arc::new(Inner {
                tag: random_tag(),
                next: AtomicU64::new(1),
                servers: Mutex::new(Vec::new()),
                connections: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Offers an rmcp server under `name`: `make` builds one instance per `mcp/connect` (a
    /// [`ServerHandler`](rmcp::ServerHandler), e.g. a `#[tool_router(server_handler)]` type).
    /// Returns its declaration for `session/new`'s `mcpServers`, with a fresh `serverId`
    /// unique to this process.
    pub fn add<S, F>(&self, name: impl Into<String>, make: F) -> McpServer
    where
        S: Service<RoleServer>,
        F: Fn() -> S + Send + Sync + 'static,
    {
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let declaration = McpServerAcp::new(name, format!("mcp-server-{}-{n}", self.inner.tag));
        let start: Starter = Arc::new(move |transport| {
            let service = make();
            tokio::spawn(async move {
                match rmcp::serve_server(service, transport).await {
                    Ok(running) => {
                        let _ = running.waiting().await;
                    }
                    Err(e) => tracing::debug!(error = %e, "mcp over acp: the MCP session did not start"),
                }
            });
        });
        lock(&self.inner.servers).push(Registered { declaration: declaration.clone(), start });
        McpServer::Acp(declaration)
    }

    /// The declarations of every server offered, for `session/new`'s `mcpServers`.
    pub fn declarations(&self) -> Vec<McpServer> {
        lock(&self.inner.servers).iter().map(|s| McpServer::Acp(s.declaration.clone())).collect()
    }

    /// Whether `server_id` is one of ours.
    pub fn offers(&self, server_id: &str) -> bool {
        lock(&self.inner.servers).iter().any(|s| s.declaration.server_id.0 == server_id)
    }

    /// How many MCP connections are open.
    pub fn connection_count(&self) -> usize {
        lock(&self.inner.connections).len()
    }

    fn tunnel(&self, id: &McpConnectionId) -> Option<Arc<Tunnel>> {
        lock(&self.inner.connections).get(id).cloned()
    }

    /// Opens a connection to one of our servers, its messages to the agent going by `route`.
    fn open(&self, params: &ConnectMcpRequest, route: Route) -> Result<ConnectMcpResponse, acp_types::Error> {
        let start = lock(&self.inner.servers)
            .iter()
            .find(|s| s.declaration.server_id == params.server_id)
            .map(|s| s.start.clone())
            .ok_or_else(|| unknown_server(&params.server_id))?;
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let connection_id = McpConnectionId(format!("mcp-connection-{}-{n}", self.inner.tag));
        let registry: Weak<Inner> = Arc::downgrade(&self.inner);
        let key = connection_id.clone();
        let then = Box::new(move || {
            if let Some(inner) = registry.upgrade() {
                lock(&inner.connections).remove(&key);
            }
        });
        // Registered before the answer goes out: the agent's first `mcp/message` follows it.
        let on_end = OnEnd { disconnect: false, then };
        let (tunnel, local) = Tunnel::start(connection_id.clone(), route, on_end, |tunnel| {
            lock(&self.inner.connections).insert(connection_id.clone(), tunnel);
        });
        start(TunnelTransport::new(local, tunnel));
        Ok(ConnectMcpResponse::new(connection_id))
    }

    /// `mcp/connect` from the agent, in a client: starts an instance of the server and
    /// returns its fresh `connectionId`. -32602 for a server that is not ours.
    pub fn connect(
        &self,
        params: ConnectMcpRequest,
        cx: &ClientContext,
    ) -> Result<ConnectMcpResponse, acp_types::Error> {
        self.open(&params, Route::plain(cx.peer().clone()))
    }

    /// `mcp/message` request from the agent: the server's answer (its result, or its error as
    /// the ACP error). Cancelling the ACP request cancels the MCP one.
    pub async fn message(
        &self,
        params: MessageMcpRequest,
        cx: &ClientContext,
    ) -> Result<MessageMcpResponse, acp_types::Error> {
        let tunnel = self.tunnel(&params.connection_id).ok_or_else(|| unknown_connection(&params.connection_id))?;
        let answer = tunnel.acp_request(params.method, params.params, cx.cancellation_token()).await?;
        Ok(MessageMcpResponse(answer))
    }

    /// `mcp/message` notification from the agent: passed to the server, waiting while the
    /// server has a full queue of messages it has not read yet (64), so an agent cannot queue
    /// them faster than the server reads.
    pub async fn message_notification(&self, params: MessageMcpNotification) -> Result<(), acp_types::Error> {
        let tunnel = self.tunnel(&params.connection_id).ok_or_else(|| unknown_connection(&params.connection_id))?;
        tunnel.acp_notification(params.method, params.params).await;
        Ok(())
    }

    /// `mcp/disconnect` from the agent: ends the connection and its server instance.
    pub fn disconnect(&self, params: DisconnectMcpRequest) -> Result<DisconnectMcpResponse, acp_types::Error> {
        let tunnel = lock(&self.inner.connections)
            .remove(&params.connection_id)
            .ok_or_else(|| unknown_connection(&params.connection_id))?;
        tunnel.close();
        Ok(DisconnectMcpResponse::new())
    }

    /// A request carrying `mcpServers`, on its way to the agent, with ours added.
    fn with_declarations(&self, params: Option<&RawValue>) -> Result<Box<RawValue>, ErrorObject> {
        let mut params: serde_json::Map<String, Value> = match params {
            Some(raw) => serde_json::from_str(raw.get())
                .map_err(|e| ErrorObject::invalid_params(format_args!("params must be an object: {e}")))?,
            None => serde_json::Map::new(),
        };
        let servers = params.entry("mcpServers").or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(servers) = servers else {
            return Err(ErrorObject::invalid_params("`mcpServers` must be an array"));
        };
        for declaration in self.declarations() {
            servers.push(serde_json::to_value(declaration).map_err(ErrorObject::internal_error)?);
        }
        serde_json::value::to_raw_value(&params).map_err(ErrorObject::internal_error)
    }

    async fn proxy_request(
        &self,
        cx: &ProxyContext,
        req: &IncomingRequest,
    ) -> Option<Result<Box<RawValue>, ErrorObject>> {
        match &*req.method {
            client_method::MCP_CONNECT => {
                let params: ConnectMcpRequest = req.parse_params().ok()?;
                self.offers(&params.server_id.0)
                    .then(|| encode(self.open(&params, Route::wrapped(cx.peer().clone(), cx.wire_cell()))))
            }
            client_method::MCP_MESSAGE => {
                let params: MessageMcpRequest = req.parse_params().ok()?;
                let tunnel = self.tunnel(&params.connection_id)?;
                let answer = tunnel.acp_request(params.method, params.params, &req.cancel).await;
                Some(
                    answer
                        .and_then(|value| serde_json::value::to_raw_value(&value).map_err(ErrorObject::internal_error)),
                )
            }
            client_method::MCP_DISCONNECT => {
                let params: DisconnectMcpRequest = req.parse_params().ok()?;
                self.tunnel(&params.connection_id)?;
                Some(encode(self.disconnect(params)))
            }
            _ => None,
        }
    }
}

fn encode<T: serde::Serialize>(result: Result<T, acp_types::Error>) -> Result<Box<RawValue>, ErrorObject> {
    result.map_err(ErrorObject::from).and_then(|r| crate::typed::encode_result(&r))
}

impl Proxy for McpServers {
    fn intercepts(&self, from: Side, method: &str) -> bool {
        match from {
            Side::Client => MCP_SERVER_CARRIERS.contains(&method),
            Side::Agent => {
                matches!(
                    method,
                    client_method::MCP_CONNECT | client_method::MCP_MESSAGE | client_method::MCP_DISCONNECT
                )
            }
        }
    }

    async fn handle_request(
        &self,
        cx: ProxyContext,
        from: Side,
        mut req: IncomingRequest,
    ) -> Result<Box<RawValue>, ErrorObject> {
        match from {
            Side::Client if MCP_SERVER_CARRIERS.contains(&&*req.method) => {
                req.params = Some(self.with_declarations(req.params.as_deref())?);
            }
            Side::Agent => {
                if let Some(answer) = self.proxy_request(&cx, &req).await {
                    return answer;
                }
            }
            Side::Client => {}
        }
        cx.forward_request(from, req).await
    }

    async fn handle_notification(&self, cx: ProxyContext, from: Side, notification: IncomingNotification) {
        if from == Side::Agent && notification.method == client_method::MCP_MESSAGE {
            if let Ok(params) = notification.parse_params::<MessageMcpNotification>() {
                if let Some(tunnel) = self.tunnel(&params.connection_id) {
                    tunnel.acp_notification(params.method, params.params).await;
                    return;
                }
            }
        }
        cx.forward_notification(from, notification).await;
    }
}
