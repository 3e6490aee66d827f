//! MCP over ACP end to end, in process: an agent calls rmcp tools that its client offers
//! through the ACP connection (directly, and through a chain run by the conductor in which a
//! proxy offers a server of its own), server → client requests and notifications included,
//! cancellation crossing both ways, connections closed afterwards; and what the providing side
//! answers to bad MCP-over-ACP messages, on the wire.

mod mcp_common;

use acp_rpc::acp_types::*;
use acp_rpc::mcp::{McpClients, McpServers};
use acp_rpc::proxy::conductor::{Component, Conductor};
use acp_rpc::proxy::proxy_connection;
use acp_rpc::transport::duplex;
use acp_rpc::{AgentHandle, Connection, RawValue, serve_agent, serve_client};
use mcp_common::*;
use serde_json::{Value, json};
use tokio::sync::mpsc;

const BUF: usize = 1 << 20;

struct Client {
    agent: AgentHandle,
    mcp: McpServers,
    messages: mpsc::UnboundedReceiver<String>,
}

/// A `ToolClient` offering `mcp` over `end`.
fn client(mcp: McpServers, end: acp_rpc::transport::DuplexEnd) -> Client {
    let (messages_tx, messages) = mpsc::unbounded_channel();
    let tool_client = ToolClient { mcp: mcp.clone(), messages: messages_tx };
    let (agent, serve) = serve_client(tool_client, end.0, end.1);
    tokio::spawn(serve);
    Client { agent, mcp, messages }
}

async fn start_session(agent: &AgentHandle, servers: Vec<McpServer>) -> (InitializeResponse, SessionId) {
    let init = agent.initialize(InitializeRequest::new(ProtocolVersion::V1)).await.expect("initialize");
    let session = agent.new_session(NewSessionRequest::new("/work", servers)).await.expect("session/new");
    (init, session.session_id)
}

async fn turn(agent: &AgentHandle, session: SessionId) {
    let prompt = PromptRequest::new(session, vec![ContentBlock::Text(TextContent::new("use the tools"))]);
    let answer = tokio::time::timeout(LIMIT, agent.prompt(prompt)).await.expect("the turn ends in time");
    assert_eq!(answer.expect("session/prompt").stop_reason, StopReason::EndTurn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_calls_the_clients_rmcp_tools_over_the_acp_connection() {
    let (agent_end, client_end) = duplex(BUF);
    let mcp = McpServers::new();
    let declaration = offer(&mcp, "calc", "client");
    let McpServer::Acp(acp) = &declaration else { panic!("not an acp declaration: {declaration:?}") };
    assert!(mcp.offers(&acp.server_id.0));
    assert_eq!(serde_json::to_value(&declaration).unwrap()["type"], "acp");

    let clients = McpClients::new();
    let agent = AcpMcpAgent::new(clients.clone());
    let (_client_handle, agent_serve) = serve_agent(agent, agent_end.0, agent_end.1);
    tokio::spawn(agent_serve);
    let mut client = client(mcp, client_end);

    let (init, session) = start_session(&client.agent, vec![declaration]).await;
    let mcp_capabilities = init.agent_capabilities.and_then(|c| c.mcp_capabilities).unwrap_or_default();
    assert_eq!(mcp_capabilities.acp, Some(true));
    turn(&client.agent, session).await;

    assert_eq!(next(&mut client.messages).await, format!("calc: {}", expected_report("client")));
    // The agent dropped its rmcp client: mcp/disconnect ended the connection on both sides.
    eventually("both sides closed the connection", || {
        client.mcp.connection_count() == 0 && clients.connection_count() == 0
    })
    .await;
}

/// In-process components of a chain: the conductor's ends, each served by a task.
fn component(name: &str) -> (Component, acp_rpc::transport::DuplexEnd) {
    let (conductor_end, component_end) = duplex(BUF);
    (Component::new(name, conductor_end.0, conductor_end.1), component_end)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_chain_the_agent_reaches_the_clients_server_and_a_proxys_own() {
    // The proxy offers a server of its own and injects it into session/new.
    let proxy_servers = McpServers::new();
    offer(&proxy_servers, "proxy-calc", "proxy");
    let (proxy, proxy_end) = component("mcp-proxy");
    let (_conductor, proxy_serve) =
        proxy_connection(Connection::new(), proxy_servers.clone(), proxy_end.0, proxy_end.1);
    tokio::spawn(proxy_serve);
    let clients = McpClients::new();
    let (agent, agent_end) = component("agent");
    let (_client_handle, agent_serve) = serve_agent(AcpMcpAgent::new(clients.clone()), agent_end.0, agent_end.1);
    tokio::spawn(agent_serve);

    let (editor_end, conductor_end) = duplex(BUF);
    let chain = tokio::spawn(Conductor::new().run(conductor_end.0, conductor_end.1, vec![proxy, agent]));

    let client_servers = McpServers::new();
    let declaration = offer(&client_servers, "client-calc", "client");
    let mut client = client(client_servers, editor_end);
    let (_, session) = start_session(&client.agent, vec![declaration]).await;
    turn(&client.agent, session).await;

    // The client's server first (declared first), then the one the proxy added.
    assert_eq!(next(&mut client.messages).await, format!("client-calc: {}", expected_report("client")));
    assert_eq!(next(&mut client.messages).await, format!("proxy-calc: {}", expected_report("proxy")));
    eventually("every connection closed", || {
        client.mcp.connection_count() == 0 && proxy_servers.connection_count() == 0 && clients.connection_count() == 0
    })
    .await;

    client.agent.close();
    let end = tokio::time::timeout(LIMIT, chain).await.expect("the chain ends").unwrap().unwrap();
    assert_eq!(end, acp_rpc::proxy::conductor::ChainEnd::ClientClosed);
}

/// The providing client on the wire, driven by a raw agent side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wire_shapes_and_the_answers_to_bad_messages() {
    let (agent_end, client_end) = duplex(BUF);
    let mcp = McpServers::new();
    let McpServer::Acp(declaration) = offer(&mcp, "calc", "wire") else { unreachable!() };
    let _client = client(mcp.clone(), client_end);
    let (peer, serve) = Connection::new().serve(agent_end.0, agent_end.1, ());
    tokio::spawn(serve);
    let call = async |method: &str, params: Value| -> Result<Value, acp_rpc::ErrorObject> {
        let raw = serde_json::value::to_raw_value(&params).unwrap();
        match peer.request_raw(method, Some(&raw)).await {
            Ok(result) => Ok(serde_json::from_str(RawValue::get(&result)).unwrap()),
            Err(acp_rpc::Error::Rpc(e)) => Err(e),
            Err(e) => panic!("{method}: {e}"),
        }
    };

    let unknown = call("mcp/connect", json!({"serverId": "nobody"})).await.unwrap_err();
    assert_eq!(unknown.code, -32602, "{unknown:?}");
    let unknown = call("mcp/message", json!({"connectionId": "none", "method": "tools/list"})).await.unwrap_err();
    assert_eq!(unknown.code, -32602, "{unknown:?}");
    let missing = call("mcp/message", json!({"method": "tools/list"})).await.unwrap_err();
    assert_eq!(missing.code, -32602, "{missing:?}");

    let connected = call("mcp/connect", json!({"serverId": declaration.server_id})).await.unwrap();
    let connection = connected["connectionId"].as_str().expect("a connectionId").to_owned();
    assert_eq!(mcp.connection_count(), 1);
    let init = json!({
        "connectionId": connection, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    });
    // The result is the MCP result itself.
    let init = call("mcp/message", init).await.unwrap();
    assert!(init["capabilities"]["tools"].is_object(), "{init}");
    let initialized = json!({"connectionId": connection, "method": "notifications/initialized"});
    peer.notify_raw("mcp/message", Some(&serde_json::value::to_raw_value(&initialized).unwrap())).await.unwrap();
    let add = json!({"connectionId": connection, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 40, "b": 2}}});
    let added = call("mcp/message", add).await.unwrap();
    assert_eq!(added["content"][0]["text"], "wire:42", "{added}");
    // An MCP error is the ACP error.
    let bad = json!({"connectionId": connection, "method": "no/such/method"});
    let bad = call("mcp/message", bad).await.unwrap_err();
    assert_eq!(bad.code, -32601, "{bad:?}");

    let bye = call("mcp/disconnect", json!({"connectionId": connection})).await.unwrap();
    assert_eq!(bye, json!({}));
    assert_eq!(mcp.connection_count(), 0);
    let gone = call("mcp/message", json!({"connectionId": connection, "method": "tools/list"})).await.unwrap_err();
    assert_eq!(gone.code, -32602, "{gone:?}");
    let again = call("mcp/disconnect", json!({"connectionId": connection})).await.unwrap_err();
    assert_eq!(again.code, -32602, "{again:?}");
}

type Connected = acp_rpc::mcp::McpConnection<Recorder>;

/// An agent's rmcp connection to the calculator its client offers; `serve` starts the client
/// (a typed client over its end, offering `mcp`). Returns the connection, its log messages
/// and what `serve` returned (kept for as long as the test needs it).
async fn connected<F, T>(serve: F) -> (Connected, mpsc::UnboundedReceiver<String>, T)
where
    F: FnOnce(McpServers, acp_rpc::transport::DuplexEnd) -> T,
{
    let (agent_end, client_end) = duplex(BUF);
    let mcp = McpServers::new();
    let McpServer::Acp(declaration) = offer(&mcp, "calc", "x") else { unreachable!() };
    let clients = McpClients::new();
    let (client_handle, agent_serve) = serve_agent(AcpMcpAgent::new(clients.clone()), agent_end.0, agent_end.1);
    tokio::spawn(agent_serve);
    let served = serve(mcp, client_end);
    let (logs, log_rx) = mpsc::unbounded_channel();
    let connecting = clients.connect(&client_handle, declaration.server_id.clone(), Recorder { logs });
    (tokio::time::timeout(LIMIT, connecting).await.expect("connected in time").expect("connect"), log_rx, served)
}

/// MCP lets a client cancel a request whose answer has already arrived. The tunnel's ids do
/// not cross to the other side, so such a cancellation must stop at the tunnel: handed on, it
/// named another request there (here the `wait` call still in flight) and cancelled it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_mcp_cancellation_cancels_nothing_on_the_other_side() {
    use acp_rpc::mcp::rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
    use acp_rpc::mcp::rmcp::service::PeerRequestOptions;

    let (conn, mut log_rx, _client) = connected(client).await;
    // The agent's ids: initialize 0, wait 1, add 2; the client's tunnel's: 1, 2, 3.
    let wait = ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("wait")));
    let _wait = conn.send_cancellable_request(wait, PeerRequestOptions::no_options()).await.unwrap();
    assert_eq!(next(&mut log_rx).await, "\"waiting\"");
    let mut add = CallToolRequestParams::new("add");
    add.arguments = json!({"a": 1, "b": 1}).as_object().cloned();
    let add = ClientRequest::CallToolRequest(CallToolRequest::new(add));
    let mut add = conn.send_cancellable_request(add, PeerRequestOptions::no_options()).await.unwrap();
    let answered = tokio::time::timeout(LIMIT, &mut add.rx).await.expect("add answered").unwrap();
    assert!(answered.is_ok(), "add succeeded: {answered:?}");
    add.cancel(Some("too late".into())).await.unwrap();
    // A round trip after the cancellation: had it crossed, it would have arrived by then.
    let tools = conn.call_tool(CallToolRequestParams::new("cancellations")).await.unwrap();
    assert_eq!(first_text(&tools), "0", "the `wait` call still running was cancelled");
}

/// A [`ToolClient`] that never answers `mcp/disconnect`.
struct MuteOnDisconnect(ToolClient);

#[acp_rpc::acp_client]
impl MuteOnDisconnect {
    async fn session_request_permission(
        &self,
        _: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
    }
    async fn session_update(&self, _: SessionNotification) {}
    async fn mcp_connect(
        &self,
        params: ConnectMcpRequest,
        cx: acp_rpc::ClientContext,
    ) -> Result<ConnectMcpResponse, Error> {
        self.0.mcp.connect(params, &cx)
    }
    async fn mcp_message(
        &self,
        params: MessageMcpRequest,
        cx: acp_rpc::ClientContext,
    ) -> Result<MessageMcpResponse, Error> {
        self.0.mcp.message(params, &cx).await
    }
    async fn mcp_message_notification(&self, params: MessageMcpNotification) -> Result<(), Error> {
        self.0.mcp.message_notification(params).await
    }
    async fn mcp_disconnect(&self, _: DisconnectMcpRequest) -> Result<DisconnectMcpResponse, Error> {
        std::future::pending().await
    }
}

/// `close` waits for the answer to `mcp/disconnect`, but not for ever.
#[tokio::test(start_paused = true)]
async fn closing_a_connection_whose_client_never_answers_the_disconnect_ends_in_time() {
    let (conn, _logs, _client) = connected(|mcp, end| {
        let (messages, messages_rx) = mpsc::unbounded_channel();
        let (agent, serve) = serve_client(MuteOnDisconnect(ToolClient { mcp, messages }), end.0, end.1);
        tokio::spawn(serve);
        (agent, messages_rx)
    })
    .await;
    let started = tokio::time::Instant::now();
    tokio::time::timeout(LIMIT, conn.close()).await.expect("close gives up on the answer");
    assert!(started.elapsed() >= std::time::Duration::from_secs(5), "it did wait for the answer a while");
}

/// An `mcp/connect` the agent gave up on (its future dropped, or its token cancelled) whose
/// answer opens a connection anyway: the agent closes that connection with `mcp/disconnect`,
/// rather than leave it (and its server instance) open on the client until the ACP connection
/// ends. The client side here is raw lines, so the answer comes exactly when the test says.
#[tokio::test]
async fn a_connect_given_up_before_its_answer_closes_what_the_answer_opened() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let (agent_end, (client_read, mut client_write)) = duplex(BUF);
    let (client_handle, serve) = serve_agent(AcpMcpAgent::new(McpClients::new()), agent_end.0, agent_end.1);
    tokio::spawn(serve);
    let mut lines = BufReader::new(client_read).lines();
    // What the agent writes, `$/cancel_request`s aside (whether it sends them is not the point).
    let mut read = async || -> Value {
        loop {
            let line = tokio::time::timeout(LIMIT, lines.next_line()).await.expect("a message in time").unwrap();
            let message: Value = serde_json::from_str(&line.expect("the agent's output is open")).unwrap();
            if message["method"] != "$/cancel_request" {
                return message;
            }
        }
    };
    let clients = McpClients::new();

    // Dropped: the caller stops waiting before the answer.
    let mut connect = Box::pin(clients.connect(&client_handle, "calc", ()));
    assert!(tokio::time::timeout(std::time::Duration::from_millis(50), &mut connect).await.is_err());
    let asked = read().await;
    assert_eq!(asked["method"], "mcp/connect", "{asked}");
    drop(connect);
    // Cancelled: the handle's token fires before the answer.
    let token = tokio_util::sync::CancellationToken::new();
    let bound = client_handle.bound_to(token.clone());
    let cancelled = tokio::spawn({
        let clients = clients.clone();
        async move { clients.connect(&bound, "calc", ()).await.map(|_| ()) }
    });
    let asked_again = read().await;
    assert_eq!(asked_again["method"], "mcp/connect", "{asked_again}");
    token.cancel();
    let failed = tokio::time::timeout(LIMIT, cancelled).await.expect("the cancelled connect returns").unwrap();
    assert!(matches!(failed, Err(acp_rpc::mcp::McpConnectError::Connect(acp_rpc::Error::Cancelled))), "{failed:?}");

    // The client answers both anyway, each with a connection of its own.
    for (request, connection) in [(&asked, "late-1"), (&asked_again, "late-2")] {
        let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"connectionId": connection}});
        client_write.write_all(format!("{answer}\n").as_bytes()).await.unwrap();
    }
    let mut closed = Vec::new();
    while closed.len() < 2 {
        let message = read().await;
        if message["method"] == "mcp/disconnect" {
            closed.push(message["params"]["connectionId"].as_str().unwrap().to_owned());
        }
    }
    closed.sort();
    assert_eq!(closed, ["late-1", "late-2"]);
    assert_eq!(clients.connection_count(), 0);
}
