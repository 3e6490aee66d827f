//! The conductor's MCP bridge end to end: an agent that does not speak MCP over ACP (no
//! `mcpCapabilities.acp`; an ordinary stdio MCP client, rmcp's child-process transport) calls
//! rmcp tools offered over ACP by the client and by a proxy of the chain, through the stdio
//! shim the conductor writes into `session/new` (this package's `acp-conductor mcp-bridge`);
//! an agent that does speak it gets the declarations untouched; a shim for a server nobody
//! offers is refused with the reason. The same with a proxy that speaks only the older proxy
//! wire, whose envelopes the bridge's messages and the proxy's own must then use. And a raw
//! MCP client on the bridge's socket that sends a batch or a bare value, calls a tool that asks
//! the MCP client something, gets a call's notification and cancels the call.

#[path = "../../runtime/tests/mcp_common/mod.rs"]
mod mcp_common;
#[path = "common/older_wire.rs"]
mod older_wire;

use std::sync::{Arc, Mutex};

use acp_rpc::acp_types::*;
use acp_rpc::mcp::bridge::McpBridge;
use acp_rpc::mcp::rmcp::{self, ServiceExt};
use acp_rpc::mcp::{McpClients, McpServers};
use acp_rpc::proxy::conductor::{ChainEnd, Component, Conductor};
use acp_rpc::proxy::proxy_connection;
use acp_rpc::transport::{DuplexEnd, duplex};
use acp_rpc::{AgentContext, AgentHandle, Connection, acp_agent, serve_agent, serve_client};
use mcp_common::*;
use serde_json::json;
use tokio::sync::mpsc;

const CONDUCTOR: &str = env!("CARGO_BIN_EXE_acp-conductor");
const BUF: usize = 1 << 20;

/// Advertises no `mcpCapabilities.acp`; in each turn, spawns every stdio server of the session
/// with rmcp's child-process transport (as any MCP client would) and reports what it got.
#[derive(Default)]
pub struct StdioMcpAgent {
    servers: Mutex<Vec<McpServerStdio>>,
    /// Every declaration it was given, as it was given.
    pub seen: Arc<Mutex<Vec<McpServer>>>,
}

#[acp_agent]
impl StdioMcpAgent {
    async fn initialize(&self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(params.protocol_version).agent_capabilities(AgentCapabilities::new()))
    }
    async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, params: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        self.seen.lock().unwrap().extend(params.mcp_servers.iter().cloned());
        let stdio = params.mcp_servers.iter().filter_map(|s| match s {
            McpServer::Stdio(s) => Some(s.clone()),
            _ => None,
        });
        *self.servers.lock().unwrap() = stdio.collect();
        Ok(NewSessionResponse::new("sess_stdio"))
    }
    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let servers = self.servers.lock().unwrap().clone();
        for server in servers {
            let mut command = tokio::process::Command::new(&server.command);
            command.args(&server.args).envs(server.env.iter().map(|v| (v.name.clone(), v.value.clone())));
            let transport = rmcp::transport::TokioChildProcess::new(command).map_err(failed)?;
            let (logs, mut log_rx) = mpsc::unbounded_channel();
            let mcp = Recorder { logs }.serve(transport).await.map_err(failed)?;
            let line = use_tools(&mcp, &mut log_rx).await?;
            let _ = mcp.cancel().await; // ends the server process
            cx.client().session_update(report(&params.session_id, format!("{}: {line}", server.name))).await?;
        }
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _: CancelNotification) {}
}

fn component(name: &str) -> (Component, DuplexEnd) {
    let (conductor_end, component_end) = duplex(BUF);
    (Component::new(name, conductor_end.0, conductor_end.1), component_end)
}

struct Chain {
    agent: AgentHandle,
    client_servers: McpServers,
    proxy_servers: McpServers,
    messages: mpsc::UnboundedReceiver<String>,
    chain: tokio::task::JoinHandle<std::io::Result<ChainEnd>>,
    /// Lines between the conductor and an older-wire proxy whose envelope is not that wire's
    /// for the message's kind.
    off_wire: Arc<Mutex<Vec<String>>>,
}

/// client (offering `client-calc`) → bridging conductor → proxy (offering `proxy-calc`) → `agent`.
fn chain(agent: impl acp_rpc::acp_types::Agent<AgentContext> + 'static) -> Chain {
    chain_with(agent, false)
}

/// [`chain`], with a proxy that speaks the older wire only when `older`.
fn chain_with(agent: impl acp_rpc::acp_types::Agent<AgentContext> + 'static, older: bool) -> Chain {
    let proxy_servers = McpServers::new();
    offer(&proxy_servers, "proxy-calc", "proxy");
    let off_wire = Arc::new(Mutex::new(Vec::new()));
    let (proxy, proxy_end) = if older {
        // Both directions checked: the conductor's wrapping, and the proxy's own tunnels.
        let (conductor_end, component_end) = duplex(BUF);
        let note = |off_wire: &Arc<Mutex<Vec<String>>>| {
            let off_wire = off_wire.clone();
            move |line: &str| off_wire.lock().unwrap().push(line.to_owned())
        };
        let from_proxy = older_wire::older_wire_only(conductor_end.0, note(&off_wire));
        let to_proxy = older_wire::older_wire_only(component_end.0, note(&off_wire));
        (Component::new("mcp-proxy", from_proxy, conductor_end.1), (to_proxy, component_end.1))
    } else {
        component("mcp-proxy")
    };
    let proxy_serve = if older {
        proxy_connection(
            Connection::new(),
            older_wire::OlderOnly { inner: proxy_servers.clone(), forwarding: false },
            proxy_end.0,
            proxy_end.1,
        )
        .1
    } else {
        proxy_connection(Connection::new(), proxy_servers.clone(), proxy_end.0, proxy_end.1).1
    };
    tokio::spawn(proxy_serve);
    let (agent_component, agent_end) = component("agent");
    let (_client_handle, agent_serve) = serve_agent(agent, agent_end.0, agent_end.1);
    tokio::spawn(agent_serve);

    let (editor_end, conductor_end) = duplex(BUF);
    let conductor = Conductor::new().mcp_bridge(McpBridge::new(CONDUCTOR, ["mcp-bridge"]));
    let chain = tokio::spawn(conductor.run(conductor_end.0, conductor_end.1, vec![proxy, agent_component]));

    let client_servers = McpServers::new();
    let (messages_tx, messages) = mpsc::unbounded_channel();
    let client = ToolClient { mcp: client_servers.clone(), messages: messages_tx };
    let (agent, serve) = serve_client(client, editor_end.0, editor_end.1);
    tokio::spawn(serve);
    Chain { agent, client_servers, proxy_servers, messages, chain, off_wire }
}

async fn initialize_and_open(chain: &Chain) -> (InitializeResponse, SessionId) {
    let init = chain.agent.initialize(InitializeRequest::new(ProtocolVersion::V1)).await.expect("initialize");
    let declaration = offer(&chain.client_servers, "client-calc", "client");
    let session =
        chain.agent.new_session(NewSessionRequest::new("/work", vec![declaration])).await.expect("session/new");
    (init, session.session_id)
}

async fn turn_uses_both_servers(chain: &mut Chain, session: SessionId) {
    let prompt = PromptRequest::new(session, vec![ContentBlock::Text(TextContent::new("use the tools"))]);
    let answer = tokio::time::timeout(LIMIT, chain.agent.prompt(prompt)).await.expect("the turn ends in time");
    assert_eq!(answer.expect("session/prompt").stop_reason, StopReason::EndTurn);
    let messages = [next(&mut chain.messages).await, next(&mut chain.messages).await];
    assert_eq!(
        messages,
        [format!("client-calc: {}", expected_report("client")), format!("proxy-calc: {}", expected_report("proxy"))]
    );
}

async fn end(chain: Chain) {
    chain.agent.close();
    let end = tokio::time::timeout(LIMIT, chain.chain).await.expect("the chain ends").unwrap().unwrap();
    assert_eq!(end, ChainEnd::ClientClosed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_mcp_over_acp_reaches_the_chains_tools_through_the_bridge() {
    let agent = StdioMcpAgent::default();
    let seen = agent.seen.clone();
    let mut chain = chain(agent);
    let (init, session) = initialize_and_open(&chain).await;
    // The agent advertised nothing; the conductor advertises the bridge.
    let mcp = init.agent_capabilities.and_then(|c| c.mcp_capabilities).unwrap_or_default();
    assert_eq!(mcp.acp, Some(true));

    // The agent got stdio servers running the shim, for the client's and the proxy's server.
    let declared: Vec<McpServerStdio> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| match s {
            McpServer::Stdio(s) => s.clone(),
            other => panic!("the agent was given a server it cannot start: {other:?}"),
        })
        .collect();
    let names: Vec<&str> = declared.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["client-calc", "proxy-calc"]);
    let socket = {
        let shim = &declared[0];
        assert_eq!(shim.command, CONDUCTOR);
        assert_eq!(shim.args[..2], ["mcp-bridge", "--socket"]);
        assert_eq!(shim.args[3], "--server-id");
        std::path::PathBuf::from(&shim.args[2])
    };
    assert!(socket.exists(), "the bridge listens at {socket:?}");

    turn_uses_both_servers(&mut chain, session).await;
    eventually("nothing runs any more", || {
        chain.client_servers.active_requests() == 0 && chain.proxy_servers.active_requests() == 0
    })
    .await;

    // A shim for a server nobody offers is refused, with the reason.
    let refused = tokio::process::Command::new(CONDUCTOR)
        .args(["mcp-bridge", "--socket", &socket.to_string_lossy(), "--server-id", "nobody"])
        .stdin(std::process::Stdio::null())
        .output();
    let refused = tokio::time::timeout(LIMIT, refused).await.expect("the shim exits").unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("no MCP server `nobody` was bridged"), "{stderr}");

    end(chain).await;
    assert!(!socket.exists(), "the socket is removed with the chain");
    assert!(!socket.parent().unwrap().exists(), "and its directory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_speaks_mcp_over_acp_is_not_bridged() {
    let clients = McpClients::new();
    let mut chain = chain(AcpMcpAgent::new(clients.clone()));
    let (init, session) = initialize_and_open(&chain).await;
    let mcp = init.agent_capabilities.and_then(|c| c.mcp_capabilities).unwrap_or_default();
    assert_eq!(mcp.acp, Some(true));
    turn_uses_both_servers(&mut chain, session).await;
    eventually("nothing runs any more", || {
        chain.client_servers.active_requests() == 0
            && chain.proxy_servers.active_requests() == 0
            && clients.connection_count() == 0
    })
    .await;
    end(chain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_and_a_proxys_servers_work_through_a_proxy_of_the_older_wire() {
    let agent = StdioMcpAgent::default();
    let mut chain = chain_with(agent, true);
    let (init, session) = initialize_and_open(&chain).await;
    let mcp = init.agent_capabilities.as_ref().and_then(|c| c.mcp_capabilities.clone()).unwrap_or_default();
    assert_eq!(mcp.acp, Some(true));
    // The tools of the client reach the agent through the bridge, wrapped for the older proxy;
    // the proxy's own, through its tunnel toward the agent, in its wire's envelopes.
    turn_uses_both_servers(&mut chain, session).await;
    eventually("nothing runs any more", || {
        chain.client_servers.active_requests() == 0 && chain.proxy_servers.active_requests() == 0
    })
    .await;
    let off_wire = chain.off_wire.lock().unwrap().clone();
    assert!(off_wire.is_empty(), "envelopes of another wire, or of the other kind: {off_wire:#?}");
    end(chain).await;
}

// ---- a raw MCP client on the bridge's socket ----------------------------------------------------

type ShimLines = tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>>;

/// A chain whose agent was given the bridge's shim for the client's server; returns the chain
/// and the shim's socket, connected past the bridge's handshake, to speak MCP on line by line
/// as the shim would.
async fn raw_shim() -> (Chain, ShimLines, tokio::net::unix::OwnedWriteHalf) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let agent = StdioMcpAgent::default();
    let seen = agent.seen.clone();
    let chain = chain(agent);
    initialize_and_open(&chain).await;
    let shim = seen.lock().unwrap().iter().find_map(|s| match s {
        McpServer::Stdio(s) if s.name == "client-calc" => Some(s.clone()),
        _ => None,
    });
    let args = shim.expect("the client's server bridged").args;
    let after = |flag: &str| args.iter().skip_while(|a| *a != flag).nth(1).cloned().expect(flag);
    let stream = tokio::net::UnixStream::connect(after("--socket")).await.unwrap();
    let (read, mut write) = stream.into_split();
    let mut lines = tokio::io::BufReader::new(read).lines();
    write.write_all(format!("{}\n", serde_json::json!({"serverId": after("--server-id")})).as_bytes()).await.unwrap();
    assert_eq!(lines.next_line().await.unwrap().unwrap(), r#"{"connected":true}"#);
    (chain, lines, write)
}

async fn send_line(write: &mut tokio::net::unix::OwnedWriteHalf, line: &str) {
    use tokio::io::AsyncWriteExt;
    write.write_all(format!("{line}\n").as_bytes()).await.unwrap();
}

/// The next message on the shim's socket, within the time limit.
async fn next_message(lines: &mut ShimLines) -> serde_json::Value {
    let line = tokio::time::timeout(LIMIT, lines.next_line()).await.expect("a message in time");
    serde_json::from_str(&line.unwrap().expect("the socket still open")).unwrap()
}

async fn mcp_initialize(lines: &mut ShimLines, write: &mut tokio::net::unix::OwnedWriteHalf) {
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {"roots": {}}, "clientInfo": {"name": "raw", "version": "1"}}});
    send_line(write, &init.to_string()).await;
    assert_eq!(next_message(lines).await["id"], 0);
    send_line(write, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
}

/// What JSON-RPC answers -32600 with a null id (a batch, which the tunnel does not carry, or a
/// value that is no message) is answered so; it was dropped without a word, and a client that
/// sent a batch waited for ever. A line that is not JSON is answered -32700 as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_or_a_value_that_is_no_message_from_the_bridged_client_is_answered_invalid_request() {
    let (chain, mut lines, mut write) = raw_shim().await;
    mcp_initialize(&mut lines, &mut write).await;
    for (line, code) in
        [(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, -32600), ("42", -32600), ("not json", -32700)]
    {
        send_line(&mut write, line).await;
        let answer = next_message(&mut lines).await;
        assert_eq!(
            (answer["error"]["code"].as_i64(), &answer["id"]),
            (Some(code), &serde_json::Value::Null),
            "{line}: {answer}"
        );
    }
    send_line(&mut write, r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(next_message(&mut lines).await["id"], 2, "the connection goes on");
    end(chain).await;
}

/// Through the bridge, on the request-scoped wire: the server's request to the MCP client
/// fails the call that made it at once (the wire has no place for it; nothing reaches the
/// shim), the server's notification during a call reaches the shim, and the shim's
/// `notifications/cancelled` for a call in flight reaches the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_bridge_calls_notify_the_shim_and_their_cancellation_reaches_the_tool() {
    let (chain, mut lines, mut write) = raw_shim().await;
    mcp_initialize(&mut lines, &mut write).await;
    send_line(&mut write, r#"{"jsonrpc":"2.0","id":100,"method":"tools/call","params":{"name":"count_roots"}}"#).await;
    let answer = next_message(&mut lines).await;
    assert_eq!(answer["id"], 100, "the tool call is answered, nothing else: {answer}");
    let text = answer.to_string();
    assert!(["not carried", "not allowed"].iter().any(|m| text.contains(m)), "{answer}");

    send_line(&mut write, r#"{"jsonrpc":"2.0","id":101,"method":"tools/call","params":{"name":"wait"}}"#).await;
    let log = next_message(&mut lines).await;
    assert_eq!((&log["method"], &log["params"]["data"]), (&json!("notifications/message"), &json!("waiting")), "{log}");
    send_line(&mut write, r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":101}}"#).await;
    let deadline = tokio::time::Instant::now() + LIMIT;
    for id in 102.. {
        let count = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "cancellations"}});
        send_line(&mut write, &count.to_string()).await;
        let answer = next_message(&mut lines).await;
        assert_eq!(answer["id"], id, "the cancelled call is not answered: {answer}");
        if answer["result"]["content"][0]["text"] == "1" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the wait call was not cancelled: {answer}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    end(chain).await;
}
