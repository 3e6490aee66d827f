//! Shared by the MCP-over-ACP tests of this crate and of the conductor: an rmcp tool server,
//! a client that offers it over ACP, an agent that uses `"type": "acp"` servers natively, and
//! an agent that only knows stdio MCP servers (for the conductor's bridge).
#![allow(dead_code)]
// Roots and logging are deprecated in MCP's newest revision; they are still the plainest
// server → client request and notification of rmcp's servers.
#![allow(deprecated)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_rpc::acp_types::*;
use acp_rpc::mcp::rmcp::handler::server::wrapper::Parameters;
use acp_rpc::mcp::rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ClientRequest,
    Implementation, ListRootsResult, LoggingLevel, LoggingMessageNotificationParam, Root,
};
use acp_rpc::mcp::rmcp::service::{
    NotificationContext, PeerRequestOptions, RequestContext, RoleClient, RoleServer, RunningService,
};
use acp_rpc::mcp::rmcp::{self, ClientHandler, ErrorData, tool, tool_router};
use acp_rpc::mcp::{McpClients, McpServers, acp_servers};
use acp_rpc::{AgentContext, ClientContext, acp_agent, acp_client};
use serde_json::json;
use tokio::sync::mpsc;

/// Upper bound for anything that should happen "soon"; never used as synchronisation.
pub const LIMIT: Duration = Duration::from_secs(20);

pub async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(LIMIT, rx.recv()).await.expect("timed out waiting for an event").expect("channel closed")
}

/// Waits until `done` holds (polled; the tests' upper bound applies).
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---- the tools ------------------------------------------------------------------------------

#[derive(rmcp::serde::Deserialize, rmcp::schemars::JsonSchema)]
#[serde(crate = "rmcp::serde")]
#[schemars(crate = "rmcp::schemars")]
pub struct AddParams {
    /// The first addend.
    a: i64,
    /// The second addend.
    b: i64,
}

/// The MCP server a client (or a proxy) offers: plain rmcp tools. `cancelled` counts the
/// `wait` calls its MCP client cancelled.
#[derive(Clone)]
pub struct Calculator {
    pub label: &'static str,
    pub cancelled: Arc<AtomicUsize>,
}

#[tool_router(server_handler)]
impl Calculator {
    #[tool(description = "Adds two integers")]
    fn add(&self, Parameters(AddParams { a, b }): Parameters<AddParams>) -> String {
        format!("{}:{}", self.label, a + b)
    }

    /// Asks the MCP client something: a request from server to client, which the
    /// request-scoped wire does not carry.
    #[tool(description = "Counts the MCP client's roots")]
    async fn count_roots(&self, cx: RequestContext<RoleServer>) -> Result<String, ErrorData> {
        let roots = cx.peer.list_roots().await.map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(roots.roots.len().to_string())
    }

    /// Sends a notification to the MCP client before it answers.
    #[tool(description = "Logs a line to the MCP client")]
    async fn announce(&self, cx: RequestContext<RoleServer>) -> String {
        let log = LoggingMessageNotificationParam::new(LoggingLevel::Info, json!("hello from the tool"));
        let sent = cx.peer.notify_logging_message(log).await;
        format!("announced: {}", sent.is_ok())
    }

    /// Never answers on its own: says it is waiting (a log line), then waits until its caller
    /// cancels it.
    #[tool(description = "Waits until cancelled")]
    async fn wait(&self, cx: RequestContext<RoleServer>) -> String {
        let log = LoggingMessageNotificationParam::new(LoggingLevel::Info, json!("waiting"));
        let _ = cx.peer.notify_logging_message(log).await;
        cx.ct.cancelled().await;
        self.cancelled.fetch_add(1, Ordering::SeqCst);
        "cancelled".to_owned()
    }

    #[tool(description = "How many `wait` calls were cancelled")]
    fn cancellations(&self) -> String {
        self.cancelled.load(Ordering::SeqCst).to_string()
    }
}

// ---- the agent's MCP client -----------------------------------------------------------------

/// The agent's rmcp client handler: two roots, and the server's log lines to `logs`.
#[derive(Clone)]
pub struct Recorder {
    pub logs: mpsc::UnboundedSender<String>,
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        let capabilities = ClientCapabilities::builder().enable_roots().build();
        ClientConfig::new(capabilities, Implementation::new("mcp-test-agent", "1.0"))
    }

    async fn list_roots(&self, _: RequestContext<RoleClient>) -> Result<ListRootsResult, ErrorData> {
        Ok(ListRootsResult::new(vec![Root::new("file:///work/a"), Root::new("file:///work/b")]))
    }

    async fn on_logging_message(&self, params: LoggingMessageNotificationParam, _: NotificationContext<RoleClient>) {
        let _ = self.logs.send(params.data.to_string());
    }
}

pub fn first_text(result: &CallToolResult) -> String {
    result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default()
}

pub fn failed(e: impl std::fmt::Display) -> Error {
    Error::internal_error().data(serde_json::Value::from(e.to_string()))
}

/// What the agent does with an MCP server in a turn: lists the tools, calls `add`,
/// `count_roots` (the server asks the agent), `announce` (the server notifies the agent) and
/// `wait` (cancelled by the agent after a moment), and reports it all in one line.
pub async fn use_tools<S>(
    mcp: &RunningService<RoleClient, S>,
    logs: &mut mpsc::UnboundedReceiver<String>,
) -> Result<String, Error>
where
    S: rmcp::Service<RoleClient>,
{
    let tools = mcp.list_tools(None).await.map_err(failed)?;
    let mut names: Vec<String> = tools.tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    let arguments = json!({"a": 2, "b": 3}).as_object().cloned();
    let mut add = CallToolRequestParams::new("add");
    add.arguments = arguments;
    let sum = first_text(&mcp.call_tool(add).await.map_err(failed)?);
    // The wire has no server → client requests: they fail at once, refused by rmcp itself on
    // MCP's stateless revision (`McpClients`), by the provider on older ones (the bridge).
    let roots = match mcp.call_tool(CallToolRequestParams::new("count_roots")).await {
        Ok(result) => first_text(&result),
        Err(e)
            if ["not carried", "server-to-client requests are not allowed"]
                .iter()
                .any(|m| e.to_string().contains(m)) =>
        {
            "refused".to_owned()
        }
        Err(e) => return Err(failed(e)),
    };
    let announced = first_text(&mcp.call_tool(CallToolRequestParams::new("announce")).await.map_err(failed)?);
    let log = tokio::time::timeout(LIMIT, logs.recv()).await.map_err(failed)?.unwrap_or_default();
    // MCP's `notifications/cancelled` for a call in flight reaches the server's handler (as
    // ACP's `$/cancel_request` on the way), while the client goes on.
    let wait = ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("wait")));
    let handle = mcp.send_cancellable_request(wait, PeerRequestOptions::no_options()).await.map_err(failed)?;
    let waiting = tokio::time::timeout(LIMIT, logs.recv()).await.map_err(failed)?.unwrap_or_default();
    if waiting != "\"waiting\"" {
        return Err(failed(format!("unexpected log line {waiting}")));
    }
    handle.cancel(Some("no longer needed".into())).await.map_err(failed)?;
    let deadline = tokio::time::Instant::now() + LIMIT;
    let cancellations = loop {
        let count = first_text(&mcp.call_tool(CallToolRequestParams::new("cancellations")).await.map_err(failed)?);
        if count != "0" || tokio::time::Instant::now() > deadline {
            break count;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    Ok(format!("tools=[{}] add={sum} roots={roots} {announced} log={log} cancelled={cancellations}", names.join(",")))
}

/// What `use_tools` reports for a server labelled `label`.
pub fn expected_report(label: &str) -> String {
    format!(
        "tools=[add,announce,cancellations,count_roots,wait] add={label}:5 roots=refused announced: true log=\"hello from the tool\" cancelled=1"
    )
}

pub fn report(session_id: &SessionId, text: String) -> SessionNotification {
    let chunk = ContentChunk::new(ContentBlock::Text(TextContent::new(text)));
    SessionNotification::new(session_id.clone(), SessionUpdate::AgentMessageChunk(chunk))
}

// ---- an agent that speaks MCP over ACP --------------------------------------------------------

/// Advertises `mcpCapabilities.acp`; in each turn, uses every `"type": "acp"` server of the
/// session through [`McpClients`] and reports what it got, one message per server.
#[derive(Default)]
pub struct AcpMcpAgent {
    pub mcp: McpClients,
    servers: Mutex<Vec<McpServerAcp>>,
}

impl AcpMcpAgent {
    pub fn new(mcp: McpClients) -> Self {
        AcpMcpAgent { mcp, servers: Mutex::default() }
    }
}

#[acp_agent]
impl AcpMcpAgent {
    async fn initialize(&self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        let capabilities = AgentCapabilities::new().mcp_capabilities(McpCapabilities::new().acp(true));
        Ok(InitializeResponse::new(params.protocol_version).agent_capabilities(capabilities))
    }
    async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, params: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        *self.servers.lock().unwrap() = acp_servers(&params.mcp_servers).cloned().collect();
        Ok(NewSessionResponse::new("sess_mcp"))
    }
    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let servers = self.servers.lock().unwrap().clone();
        for server in servers {
            let (logs, mut log_rx) = mpsc::unbounded_channel();
            let mcp =
                self.mcp.connect(cx.client(), server.server_id.clone(), Recorder { logs }).await.map_err(failed)?;
            let line = use_tools(&mcp, &mut log_rx).await?;
            drop(mcp);
            cx.client().session_update(report(&params.session_id, format!("{}: {line}", server.name))).await?;
        }
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _: CancelNotification) {}
    async fn mcp_message(&self, params: MessageMcpNotification) -> Result<(), Error> {
        self.mcp.message_notification(params).await
    }
}

// ---- the client that offers the tools -----------------------------------------------------------

/// Offers its [`McpServers`] to the agent; records the agent's messages.
pub struct ToolClient {
    pub mcp: McpServers,
    pub messages: mpsc::UnboundedSender<String>,
}

#[acp_client]
impl ToolClient {
    async fn session_request_permission(
        &self,
        _: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
    }
    async fn session_update(&self, params: SessionNotification) {
        if let SessionUpdate::AgentMessageChunk(chunk) = params.update {
            if let ContentBlock::Text(text) = chunk.content {
                let _ = self.messages.send(text.text);
            }
        }
    }
    async fn mcp_message(&self, params: MessageMcpRequest, cx: ClientContext) -> Result<MessageMcpResponse, Error> {
        self.mcp.message(params, &cx).await
    }
}

/// A calculator server labelled `label`, registered in `servers` under `name`.
pub fn offer(servers: &McpServers, name: &str, label: &'static str) -> McpServer {
    let cancelled = Arc::new(AtomicUsize::new(0));
    servers.add(name, move || Calculator { label, cancelled: cancelled.clone() })
}
