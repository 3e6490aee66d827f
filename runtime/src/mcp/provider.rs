//! The providing side: [`McpServers`], rmcp servers offered through the ACP connection by a
//! client or a proxy, each `mcp/message` request served by an rmcp session of its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use acp_types::{
    McpError, McpServer, McpServerAcp, McpServerAcpId, MessageMcpError, MessageMcpNotification, MessageMcpRequest,
    MessageMcpResponse, MessageMcpResult, agent_method, client_method,
};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, Service, ServiceRole};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::transport::OperationTransport;
use super::tunnel::Route;
use super::{MCP_SERVER_CARRIERS, random_tag};
use crate::client::ClientContext;
use crate::core::handler::{IncomingNotification, IncomingRequest};
use crate::core::jsonrpc::ErrorObject;
use crate::proxy::{Proxy, ProxyContext, Side};

/// How long a cancelled request's rmcp session is given to see MCP's `notifications/cancelled`
/// and stop its handler before the session is ended anyway.
const CANCEL_GRACE: Duration = Duration::from_secs(5);

type Outcome = Result<MessageMcpResponse, ErrorObject>;
type Execute = Arc<
    dyn Fn(MessageMcpRequest, Route, CancellationToken) -> Pin<Box<dyn Future<Output = Outcome> + Send>> + Send + Sync,
>;

/// rmcp servers offered over ACP (`"type": "acp"` MCP servers): a client or a proxy registers
/// them ([`McpServers::add`]), declares them in `session/new` ([`McpServers::declarations`]),
/// and answers the agent's `mcp/message` requests with them. Cheap to clone; clones share the
/// servers.
///
/// Each `mcp/message` is served on its own: the request reaches a fresh rmcp session (without
/// a handshake) of the server's one instance, the inner outcome goes back as `{"result": ..}`
/// or `{"error": ..}`, and what the server sends while it runs (progress, logging) goes to the
/// agent as `mcp/message` notifications for that `requestId`. An `initialize` is answered like
/// any request (the server's info and capabilities); nothing keeps state between requests but
/// the server instance itself. Requests of the server to the MCP client (sampling,
/// elicitation, roots) have no place on this wire and fail at once (-32601). Cancelling the ACP
/// request (`$/cancel_request`) reaches the server as MCP's `notifications/cancelled`.
///
/// In an `#[acp_client]`, the MCP handler delegates to it:
///
/// ```ignore
/// async fn mcp_message(&self, params: MessageMcpRequest, cx: ClientContext) -> Result<MessageMcpResponse, Error> {
///     self.mcp.message(params, &cx).await
/// }
/// ```
///
/// As a [`Proxy`], it adds its servers to every `session/new`, `session/load`,
/// `session/resume` and `session/fork` going to the agent, answers the agent's `mcp/message`
/// for its own servers, and forwards those for anyone else's (another proxy's, the client's).
/// A proxy of your own delegates to it for these methods (see the [module docs](super)).
#[derive(Clone)]
pub struct McpServers {
    inner: Arc<Inner>,
}

struct Inner {
    tag: String,
    next: AtomicU64,
    servers: Mutex<Vec<Registered>>,
    /// `mcp/message` requests being served.
    active: AtomicU64,
}

struct Registered {
    declaration: McpServerAcp,
    execute: Execute,
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

fn unknown_server(id: &McpServerAcpId) -> ErrorObject {
    ErrorObject::invalid_params(format_args!("no MCP server `{id}` is offered here"))
}

/// Counts a request as active while it lives.
struct Active(Arc<Inner>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

impl McpServers {
    /// No servers yet.
    pub fn new() -> Self {
        McpServers {
            inner: Arc::new(Inner {
                tag: random_tag(),
                next: AtomicU64::new(1),
                servers: Mutex::new(Vec::new()),
                active: AtomicU64::new(0),
            }),
        }
    }

    /// Offers an rmcp server under `name`: `make` builds its one instance, at the first
    /// request (a [`ServerHandler`](rmcp::ServerHandler), e.g. a `#[tool_router(server_handler)]`
    /// type), which then serves every request. Returns its declaration for `session/new`'s
    /// `mcpServers`, with a fresh `serverId` unique to this process.
    pub fn add<S, F>(&self, name: impl Into<String>, make: F) -> McpServer
    where
        S: Service<RoleServer>,
        F: Fn() -> S + Send + Sync + 'static,
    {
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let declaration = McpServerAcp::new(name, format!("mcp-server-{}-{n}", self.inner.tag));
        let instance: Arc<OnceLock<Arc<S>>> = Arc::new(OnceLock::new());
        let execute: Execute = Arc::new(move |params, route, cancel| {
            let app = instance.get_or_init(|| Arc::new(make())).clone();
            Box::pin(execute(app, params, route, cancel))
        });
        lock(&self.inner.servers).push(Registered { declaration: declaration.clone(), execute });
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

    /// How many `mcp/message` requests are being served.
    pub fn active_requests(&self) -> usize {
        usize::try_from(self.inner.active.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    async fn serve(&self, params: MessageMcpRequest, route: Route, cancel: CancellationToken) -> Outcome {
        let execute = lock(&self.inner.servers)
            .iter()
            .find(|s| s.declaration.server_id == params.server_id)
            .map(|s| s.execute.clone())
            .ok_or_else(|| unknown_server(&params.server_id))?;
        self.inner.active.fetch_add(1, Ordering::Relaxed);
        let _active = Active(self.inner.clone());
        execute(params, route, cancel).await
    }

    /// `mcp/message` from the agent, in a client: the inner outcome of the request to the
    /// server, `{"result": ..}` or `{"error": ..}`; an ACP error only when it cannot be served
    /// (-32602 for a server that is not ours). Cancelling the ACP request cancels the MCP one.
    pub async fn message(
        &self,
        params: MessageMcpRequest,
        cx: &ClientContext,
    ) -> Result<MessageMcpResponse, acp_types::Error> {
        let route = Route::plain(cx.peer().clone());
        Ok(self.serve(params, route, cx.cancellation_token().clone()).await?)
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
}

/// One of the server's requests to the MCP client: not carried, answered here.
fn refuse_reverse_request(id: Value) -> Option<ClientJsonRpcMessage> {
    let error = json!({
        "code": -32601,
        "message": "requests to the MCP client are not carried by the request-scoped MCP over ACP binding",
    });
    serde_json::from_value(json!({"jsonrpc": "2.0", "id": id, "error": error})).ok()
}

fn backend_failure(reason: impl std::fmt::Display) -> ErrorObject {
    ErrorObject::internal_error(format_args!("the MCP server failed: {reason}"))
}

fn error_carrier(error: McpError) -> MessageMcpResponse {
    MessageMcpResponse::Error(MessageMcpError::new(error))
}

fn params_of(params: Option<Value>) -> Option<Map<String, Value>> {
    match params {
        Some(Value::Object(params)) => Some(params),
        _ => None,
    }
}

/// Serves one `mcp/message` with a session of its own on `app`; see [`McpServers`].
async fn execute<S: Service<RoleServer>>(
    app: Arc<S>,
    params: MessageMcpRequest,
    route: Route,
    cancel: CancellationToken,
) -> Outcome {
    let MessageMcpRequest { server_id, request_id, method, params, .. } = params;
    // The inner id is the caller's `requestId`: what the server reports (progress, ...) for
    // the request names the request the caller knows.
    let id = Value::String(request_id.0.clone());
    let mut request = json!({"jsonrpc": "2.0", "id": id, "method": method});
    if let Some(params) = params {
        request["params"] = Value::Object(params);
    }
    let inbound: ClientJsonRpcMessage = match serde_json::from_value(request) {
        Ok(inbound) => inbound,
        Err(e) => {
            return Ok(error_carrier(McpError::new(-32602, "Invalid MCP request").data(Value::String(e.to_string()))));
        }
    };
    let (to_server, inbox) = mpsc::unbounded_channel();
    let (outbox, mut from_server) = mpsc::unbounded_channel::<ServerJsonRpcMessage>();
    // The receiver is in the transport until the session ends: this send cannot fail.
    let _ = to_server.send(inbound);
    let stop = CancellationToken::new();
    let transport = OperationTransport::<RoleServer> { inbox, outbox };
    let running = rmcp::service::serve_directly_with_ct(Shared(app), transport, None, stop.clone());
    loop {
        let message = tokio::select! {
            biased;
            () = cancel.cancelled() => {
                let notification = json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": id, "reason": "the ACP request was cancelled"},
                });
                if let Ok(notification) = serde_json::from_value(notification) {
                    let _ = to_server.send(notification);
                }
                // The handler is given time to see the cancellation before the session ends;
                // the ACP request is answered now.
                tokio::spawn(async move {
                    let drained = async { while from_server.recv().await.is_some() {} };
                    let _ = tokio::time::timeout(CANCEL_GRACE, drained).await;
                    stop.cancel();
                    drop((running, to_server));
                });
                return Err(ErrorObject::request_cancelled());
            }
            message = from_server.recv() => message,
        };
        let Some(message) = message else {
            stop.cancel();
            return Err(backend_failure("the session ended without an answer"));
        };
        let Ok(Value::Object(mut message)) = serde_json::to_value(&message) else {
            stop.cancel();
            return Err(backend_failure("an MCP message that is no object"));
        };
        match (message.remove("id"), message.remove("method")) {
            (Some(reverse), Some(_)) => {
                if let Some(refused) = refuse_reverse_request(reverse) {
                    let _ = to_server.send(refused);
                }
            }
            (None, Some(Value::String(method))) => {
                let mut notification = MessageMcpNotification::new(server_id.clone(), request_id.clone(), method);
                notification.params = params_of(message.remove("params"));
                if let Err(e) = route.notify(agent_method::MCP_MESSAGE, &notification).await {
                    tracing::debug!(server = %server_id, error = %e, "mcp over acp: notification not sent");
                }
            }
            (Some(answered), None) if answered == id => {
                stop.cancel();
                drop(running);
                if let Some(result) = message.remove("result") {
                    return Ok(MessageMcpResponse::Result(MessageMcpResult::new(result)));
                }
                let error = message.remove("error").and_then(|e| serde_json::from_value::<McpError>(e).ok());
                return match error {
                    Some(error) => Ok(error_carrier(error)),
                    None => Err(backend_failure("an answer with neither `result` nor `error`")),
                };
            }
            _ => tracing::debug!(server = %server_id, "mcp over acp: an MCP message for no request dropped"),
        }
    }
}

/// The server's one instance, shared by the sessions of its requests.
struct Shared<S>(Arc<S>);

impl<S: Service<RoleServer>> Service<RoleServer> for Shared<S> {
    fn handle_request(
        &self,
        request: <RoleServer as ServiceRole>::PeerReq,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<<RoleServer as ServiceRole>::Resp, rmcp::ErrorData>> + Send + '_ {
        self.0.handle_request(request, context)
    }

    fn handle_notification(
        &self,
        notification: <RoleServer as ServiceRole>::PeerNot,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = Result<(), rmcp::ErrorData>> + Send + '_ {
        self.0.handle_notification(notification, context)
    }

    fn get_info(&self) -> <RoleServer as ServiceRole>::Info {
        self.0.get_info()
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        self.0.supported_protocol_versions()
    }
}

impl Proxy for McpServers {
    fn intercepts(&self, from: Side, method: &str) -> bool {
        match from {
            Side::Client => MCP_SERVER_CARRIERS.contains(&method),
            Side::Agent => method == client_method::MCP_MESSAGE,
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
            Side::Agent if req.method == client_method::MCP_MESSAGE => {
                if let Ok(params) = req.parse_params::<MessageMcpRequest>()
                    && self.offers(&params.server_id.0)
                {
                    let route = Route::wrapped(cx.peer().clone(), cx.wire_cell());
                    let answer = self.serve(params, route, req.cancel.clone()).await?;
                    return crate::typed::encode_result(&answer);
                }
            }
            Side::Agent | Side::Client => {}
        }
        cx.forward_request(from, req).await
    }

    async fn handle_notification(&self, cx: ProxyContext, from: Side, notification: IncomingNotification) {
        // `mcp/message` notifications go from the provider toward the consumer: none is ours.
        cx.forward_notification(from, notification).await;
    }
}
