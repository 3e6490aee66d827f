//! MCP over ACP end to end, in process: an agent calls rmcp tools that its client offers
//! through the ACP connection (directly, and through a chain run by the conductor in which a
//! proxy offers a server of its own and forwards the `mcp/message`s for the client's), the
//! server's notifications included, its requests to the MCP client refused, cancellation
//! crossing; and the request-scoped wire itself, from both sides: the exact `mcp/message`
//! shapes, the inner outcome carriers, the answers to bad messages.

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
    // The agent dropped its rmcp client; nothing is left running on either side.
    eventually("both sides are done", || client.mcp.active_requests() == 0 && clients.connection_count() == 0).await;
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
    eventually("every side is done", || {
        client.mcp.active_requests() == 0 && proxy_servers.active_requests() == 0 && clients.connection_count() == 0
    })
    .await;

    client.agent.close();
    let end = tokio::time::timeout(LIMIT, chain).await.expect("the chain ends").unwrap().unwrap();
    assert_eq!(end, acp_rpc::proxy::conductor::ChainEnd::ClientClosed);
}

/// The providing client on the wire, driven by a raw agent side: the carriers of inner
/// outcomes, outer errors only for what cannot be served, and `$/cancel_request` reaching the
/// tool as MCP's cancellation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_on_the_wire_carriers_outer_errors_and_cancellation() {
    let (agent_end, client_end) = duplex(BUF);
    let mcp = McpServers::new();
    let McpServer::Acp(declaration) = offer(&mcp, "calc", "wire") else { unreachable!() };
    let server = declaration.server_id.0.clone();
    let _client = client(mcp.clone(), client_end);
    let (peer, serve) = Connection::new().serve(agent_end.0, agent_end.1, ());
    tokio::spawn(serve);
    let call = async |params: Value| -> Result<Value, acp_rpc::ErrorObject> {
        let raw = serde_json::value::to_raw_value(&params).unwrap();
        match peer.request_raw("mcp/message", Some(&raw)).await {
            Ok(result) => Ok(serde_json::from_str(RawValue::get(&result)).unwrap()),
            Err(acp_rpc::Error::Rpc(e)) => Err(e),
            Err(e) => panic!("mcp/message: {e}"),
        }
    };

    // Binding failures are ACP errors: a server that is not offered here, a missing requestId.
    let unknown = call(json!({"serverId": "nobody", "requestId": "r0", "method": "tools/list"})).await.unwrap_err();
    assert_eq!(unknown.code, -32602, "{unknown:?}");
    let missing = call(json!({"serverId": server, "method": "tools/list"})).await.unwrap_err();
    assert_eq!(missing.code, -32602, "{missing:?}");

    // A legacy `initialize` is answered like any request, with no handshake to complete.
    let init = json!({
        "serverId": server, "requestId": "r1", "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    });
    let init = call(init).await.unwrap();
    assert!(init["result"]["capabilities"]["tools"].is_object(), "{init}");
    // The outcome is exactly one carrier: `{"result": ..}`.
    let add = json!({
        "serverId": server, "requestId": "r2", "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 40, "b": 2}},
    });
    let added = call(add).await.unwrap();
    let keys: Vec<&String> = added.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["result"], "{added}");
    assert_eq!(added["result"]["content"], json!([{"type": "text", "text": "wire:42"}]), "{added}");
    // An inner MCP error is a successful ACP answer carrying `{"error": ..}`.
    let bad = call(json!({"serverId": server, "requestId": "r3", "method": "no/such/method"})).await.unwrap();
    let keys: Vec<&String> = bad.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["error"], "{bad}");
    assert_eq!(bad["error"]["code"], -32601, "{bad}");
    let roots =
        call(json!({"serverId": server, "requestId": "r4", "method": "tools/call", "params": {"name": "count_roots"}}));
    let roots = roots.await.unwrap();
    assert!(roots["error"]["message"].as_str().unwrap_or_default().contains("not carried"), "{roots}");

    // `$/cancel_request` for the outer request reaches the tool as MCP's cancellation.
    let wait = json!({"serverId": server, "requestId": "r5", "method": "tools/call", "params": {"name": "wait"}});
    let waiting = serde_json::value::to_raw_value(&wait).unwrap();
    let pending = peer.send_request_raw("mcp/message", Some(&waiting)).await.unwrap();
    eventually("the wait call runs", || mcp.active_requests() == 1).await;
    drop(pending);
    let count =
        json!({"serverId": server, "requestId": "r6", "method": "tools/call", "params": {"name": "cancellations"}});
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let counted = call(count.clone()).await.unwrap();
        if counted["result"]["content"][0]["text"] == "1" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the wait call was not cancelled: {counted}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    eventually("nothing runs any more", || mcp.active_requests() == 0).await;
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

/// MCP lets a client cancel a request whose answer has already arrived. Such a cancellation
/// must stop at the agent's end: it must not cancel another request (here the `wait` call
/// still in flight).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_mcp_cancellation_cancels_nothing_on_the_other_side() {
    use acp_rpc::mcp::rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
    use acp_rpc::mcp::rmcp::service::PeerRequestOptions;

    let (conn, mut log_rx, _client) = connected(client).await;
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

/// The using agent on the wire, toward a raw client: its rmcp client's requests are
/// `mcp/message` requests of exactly the schema's shape, with fresh `requestId`s; MCP's
/// stateless lifecycle (`server/discover`, no `notifications/initialized`); an inner error
/// carrier becomes the MCP error as sent; a provider notification for a request in flight
/// reaches the rmcp client, one for no request of ours does not.
#[tokio::test]
async fn the_consumer_on_the_wire_request_shapes_and_error_carriers() {
    use acp_rpc::mcp::rmcp::model::{
        CallToolRequestParams, DiscoverResult, ProtocolVersion, ServerCapabilities, ServerConfig,
    };
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let (agent_end, (client_read, mut client_write)) = duplex(BUF);
    let clients = McpClients::new();
    let (client_handle, serve) = serve_agent(AcpMcpAgent::new(clients.clone()), agent_end.0, agent_end.1);
    tokio::spawn(serve);
    let mut lines = BufReader::new(client_read).lines();
    let mut read = async || -> Value {
        let line = tokio::time::timeout(LIMIT, lines.next_line()).await.expect("a message in time").unwrap();
        serde_json::from_str(&line.expect("the agent's output is open")).unwrap()
    };
    let (logs, mut log_rx) = mpsc::unbounded_channel();
    let connecting = tokio::spawn({
        let clients = clients.clone();
        async move { clients.connect(&client_handle, "calc", Recorder { logs }).await }
    });

    let discover = read().await;
    assert_eq!(discover["jsonrpc"], "2.0");
    assert_eq!(discover["method"], "mcp/message", "{discover}");
    let mut keys: Vec<&String> = discover["params"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["method", "params", "requestId", "serverId"], "{discover}");
    assert_eq!(discover["params"]["serverId"], "calc");
    assert_eq!(discover["params"]["method"], "server/discover");
    let first_id = discover["params"]["requestId"].as_str().expect("a string requestId").to_owned();
    let info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
    let result =
        serde_json::to_value(DiscoverResult::from_server_info(vec![ProtocolVersion::V_2026_07_28], info)).unwrap();
    let answer = json!({"jsonrpc": "2.0", "id": discover["id"], "result": {"result": result}});
    client_write.write_all(format!("{answer}\n").as_bytes()).await.unwrap();
    let conn = tokio::time::timeout(LIMIT, connecting).await.expect("connected in time").unwrap().expect("connect");
    assert_eq!(conn.server_id().0, "calc");

    let mut add = CallToolRequestParams::new("add");
    add.arguments = json!({"a": 1, "b": 2}).as_object().cloned();
    let calling = tokio::spawn(async move {
        let called = conn.call_tool(add).await;
        (conn, called)
    });
    // Next on the wire is the call: no `notifications/initialized` (or any notification).
    let call = read().await;
    assert_eq!(call["method"], "mcp/message", "{call}");
    assert!(call.get("id").is_some(), "{call}");
    assert_eq!(call["params"]["method"], "tools/call", "{call}");
    let request_id = call["params"]["requestId"].as_str().unwrap().to_owned();
    assert_ne!(request_id, first_id, "each inner request has a requestId of its own");
    assert_eq!(call["params"]["params"]["arguments"], json!({"a": 1, "b": 2}));
    assert!(call["params"]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].is_string(), "{call}");

    // A notification for another requestId is not ours; one for the call reaches the client.
    for id in ["someone-else/1", request_id.as_str()] {
        let log = json!({
            "jsonrpc": "2.0", "method": "mcp/message",
            "params": {"serverId": "calc", "requestId": id, "method": "notifications/message",
                       "params": {"level": "info", "data": id}},
        });
        client_write.write_all(format!("{log}\n").as_bytes()).await.unwrap();
    }
    assert_eq!(next(&mut log_rx).await, format!("\"{request_id}\""));

    let error = json!({"code": -32602, "message": "no such tool here", "data": {"tool": "add"}});
    let answer = json!({"jsonrpc": "2.0", "id": call["id"], "result": {"error": error}});
    client_write.write_all(format!("{answer}\n").as_bytes()).await.unwrap();
    let (conn, called) = tokio::time::timeout(LIMIT, calling).await.expect("answered in time").unwrap();
    match called {
        Err(acp_rpc::mcp::rmcp::ServiceError::McpError(e)) => {
            assert_eq!(e.code.0, -32602);
            assert_eq!(e.message, "no such tool here");
            assert_eq!(e.data, Some(json!({"tool": "add"})));
        }
        other => panic!("expected the inner MCP error: {other:?}"),
    }
    assert!(log_rx.try_recv().is_err(), "the foreign notification reached the client");
    assert_eq!(clients.connection_count(), 1);
    drop(conn);
    eventually("the connection is gone", || clients.connection_count() == 0).await;
}
