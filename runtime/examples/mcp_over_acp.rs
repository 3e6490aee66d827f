//! A client offering an MCP tool to its agent over the ACP connection itself (MCP over ACP,
//! feature `mcp-over-acp`): the tool is a plain rmcp tool living in the client's process; the
//! agent reaches it with rmcp's client API, each of its requests travelling as one
//! `mcp/message` request (the wire is request-scoped: no connection to open or close). Both
//! ends run in this process over an in-memory connection, so the whole exchange is visible in
//! one place:
//!
//! `cargo run -p acp-rpc --features mcp-over-acp --example mcp_over_acp`

use acp_rpc::acp_types::*;
use acp_rpc::mcp::rmcp::handler::server::wrapper::Parameters;
use acp_rpc::mcp::rmcp::model::CallToolRequestParams;
use acp_rpc::mcp::rmcp::{self, tool, tool_router};
use acp_rpc::mcp::{McpClients, McpServers, acp_servers};
use acp_rpc::{AgentContext, ClientContext, acp_agent, acp_client};
use serde_json::json;

// ---- the client's MCP server: a plain rmcp tool ----------------------------------------------

#[derive(rmcp::serde::Deserialize, rmcp::schemars::JsonSchema)]
#[serde(crate = "rmcp::serde")]
#[schemars(crate = "rmcp::schemars")]
struct CountWords {
    /// The text whose words are counted.
    text: String,
}

/// What the editor knows and the agent does not: here, just a word counter.
struct EditorTools;

#[tool_router(server_handler)]
impl EditorTools {
    #[tool(description = "Counts the words of a text")]
    fn count_words(&self, Parameters(CountWords { text }): Parameters<CountWords>) -> String {
        text.split_whitespace().count().to_string()
    }
}

// ---- the client: offers the server and answers the agent's MCP messages with it --------------

struct Editor {
    mcp: McpServers,
}

#[acp_client]
impl Editor {
    async fn session_request_permission(
        &self,
        _: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
    }
    async fn session_update(&self, params: SessionNotification) {
        if let SessionUpdate::AgentMessageChunk(ContentChunk { content: ContentBlock::Text(text), .. }) = params.update
        {
            println!("agent: {}", text.text);
        }
    }
    async fn mcp_message(&self, params: MessageMcpRequest, cx: ClientContext) -> Result<MessageMcpResponse, Error> {
        println!("client: MCP {} for {} ({})", params.method, params.server_id, params.request_id);
        self.mcp.message(params, &cx).await
    }
}

// ---- the agent: uses the `acp` MCP servers of its session -------------------------------------

#[derive(Default)]
struct Agent {
    mcp: McpClients,
    servers: std::sync::Mutex<Vec<McpServerAcp>>,
}

fn failed(e: impl std::fmt::Display) -> Error {
    Error::internal_error().data(e.to_string().into())
}

#[acp_agent]
impl Agent {
    async fn initialize(&self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        // Tell the client that `"type": "acp"` MCP servers are welcome.
        let capabilities = AgentCapabilities::new().mcp_capabilities(McpCapabilities::new().acp(true));
        Ok(InitializeResponse::new(params.protocol_version).agent_capabilities(capabilities))
    }
    async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, params: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        *self.servers.lock().unwrap() = acp_servers(&params.mcp_servers).cloned().collect();
        Ok(NewSessionResponse::new("session-1"))
    }
    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let text: String = params
            .prompt
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect();
        let servers = self.servers.lock().unwrap().clone();
        for server in servers {
            let mcp = self.mcp.connect(cx.client(), server.server_id, ()).await.map_err(failed)?;
            let tools = mcp.list_tools(None).await.map_err(failed)?;
            let names: Vec<_> = tools.tools.iter().map(|t| t.name.to_string()).collect();
            let mut call = CallToolRequestParams::new("count_words");
            call.arguments = json!({ "text": text }).as_object().cloned();
            let result = mcp.call_tool(call).await.map_err(failed)?;
            let count = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default();
            mcp.close().await;
            let reply = format!("{} offers {names:?}; your prompt has {count} words", server.name);
            let chunk = ContentChunk::new(ContentBlock::Text(TextContent::new(reply)));
            cx.client()
                .session_update(SessionNotification::new(
                    params.session_id.clone(),
                    SessionUpdate::AgentMessageChunk(chunk),
                ))
                .await?;
        }
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _: CancelNotification) {}
    // The server's notifications during a request (progress, logging) reach the rmcp client.
    async fn mcp_message(&self, params: MessageMcpNotification) -> Result<(), Error> {
        self.mcp.message_notification(params).await
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (agent_end, client_end) = acp_rpc::transport::duplex(1 << 20);
    let (_client, agent_serve) = acp_rpc::serve_agent(Agent::default(), agent_end.0, agent_end.1);
    tokio::spawn(agent_serve);

    // The client registers its server and declares it in `session/new`.
    let mcp = McpServers::new();
    let declaration = mcp.add("editor-tools", || EditorTools);
    let (agent, client_serve) = acp_rpc::serve_client(Editor { mcp }, client_end.0, client_end.1);
    tokio::spawn(client_serve);

    agent.initialize(InitializeRequest::new(ProtocolVersion::V1)).await?;
    let session = agent.new_session(NewSessionRequest::new("/work", vec![declaration])).await?;
    let prompt = ContentBlock::Text(TextContent::new("how many words are in this prompt"));
    let answer = agent.prompt(PromptRequest::new(session.session_id, vec![prompt])).await?;
    println!("turn ended: {:?}", answer.stop_reason);
    Ok(())
}
