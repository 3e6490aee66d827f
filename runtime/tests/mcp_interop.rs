//! MCP over ACP against the official Rust SDK (`agent-client-protocol` 5.2 with
//! `agent-client-protocol-rmcp` 5.0, `tests/interop/rs-mcp`): in a chain run by our conductor,
//! the official proxy offers an rmcp server (`McpServer::from_rmcp`) and our agent calls it
//! with [`McpClients`], on the request-scoped wire (its `server/discover` and per-request
//! `_meta`, which the official provider requires, and its `{result}` carriers). The peer is
//! built with `cargo build --locked` into target/tmp/interop-rs-mcp; a failed build
//! fails the test.

mod mcp_common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use acp_rpc::acp_types::*;
use acp_rpc::mcp::rmcp::model::CallToolRequestParams;
use acp_rpc::mcp::{McpClients, acp_servers};
use acp_rpc::proxy::conductor::{Component, Conductor};
use acp_rpc::transport::duplex;
use acp_rpc::{AgentContext, acp_agent, serve_agent, serve_client};
use mcp_common::*;
use serde_json::json;
use tokio::sync::mpsc;

fn official_proxy() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = root.join("tests/interop/rs-mcp/Cargo.toml");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop-rs-mcp");
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "--locked", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the official peer failed: {status}");
    target.join("debug/proxy")
}

/// Uses every `"type": "acp"` server of its session: `add` through an rmcp client.
#[derive(Default)]
struct Adder {
    mcp: McpClients,
    servers: std::sync::Mutex<Vec<McpServerAcp>>,
}

#[acp_agent]
impl Adder {
    async fn initialize(&self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        let capabilities = AgentCapabilities::new().mcp_capabilities(McpCapabilities::new().acp(true));
        Ok(InitializeResponse::new(params.protocol_version).agent_capabilities(capabilities))
    }
    async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, params: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        *self.servers.lock().unwrap() = acp_servers(&params.mcp_servers).cloned().collect();
        Ok(NewSessionResponse::new("sess_interop"))
    }
    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let servers = self.servers.lock().unwrap().clone();
        for server in servers {
            let mcp = self.mcp.connect(cx.client(), server.server_id.clone(), ()).await.map_err(failed)?;
            let tools = mcp.list_tools(None).await.map_err(failed)?;
            let names: Vec<String> = tools.tools.iter().map(|t| t.name.to_string()).collect();
            let mut add = CallToolRequestParams::new("add");
            add.arguments = json!({"a": 40, "b": 2}).as_object().cloned();
            let sum = first_text(&mcp.call_tool(add).await.map_err(failed)?);
            mcp.close().await;
            let line = format!("{}: tools={names:?} add={sum}", server.name);
            cx.client().session_update(report(&params.session_id, line)).await?;
        }
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _: CancelNotification) {}
    async fn mcp_message(&self, params: MessageMcpNotification) -> Result<(), Error> {
        self.mcp.message_notification(params).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_agent_calls_an_official_proxys_rmcp_server_through_our_conductor() {
    let proxy = official_proxy();
    let mut child = tokio::process::Command::new(&proxy)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", proxy.display()));
    let official = Component::new("official-mcp-proxy", child.stdout.take().unwrap(), child.stdin.take().unwrap());

    let (conductor_end, agent_end) = duplex(1 << 20);
    let agent = Component::new("agent", conductor_end.0, conductor_end.1);
    let (_client, agent_serve) = serve_agent(Adder::default(), agent_end.0, agent_end.1);
    tokio::spawn(agent_serve);
    let (editor_end, chain_end) = duplex(1 << 20);
    let chain = tokio::spawn(Conductor::new().run(chain_end.0, chain_end.1, vec![official, agent]));

    let (messages_tx, mut messages) = mpsc::unbounded_channel();
    let tool_client = ToolClient { mcp: acp_rpc::mcp::McpServers::new(), messages: messages_tx };
    let (agent, serve) = serve_client(tool_client, editor_end.0, editor_end.1);
    tokio::spawn(serve);
    agent.initialize(InitializeRequest::new(ProtocolVersion::V1)).await.expect("initialize");
    let session = agent.new_session(NewSessionRequest::new("/work", vec![])).await.expect("session/new");
    let prompt = PromptRequest::new(session.session_id, vec![ContentBlock::Text(TextContent::new("add"))]);
    let answer = tokio::time::timeout(LIMIT, agent.prompt(prompt)).await.expect("the turn ends in time");
    assert_eq!(answer.expect("session/prompt").stop_reason, StopReason::EndTurn);
    assert_eq!(next(&mut messages).await, r#"official-calc: tools=["add"] add=official:42"#);

    agent.close();
    let _ = tokio::time::timeout(LIMIT, chain).await;
}
