//! `#[acp_agent]` / `#[acp_client]` handlers of unstable methods, with their features on (see
//! `acp_types::feature_gates`; without the feature, such a handler is one compile error naming
//! it: `tests/ui/fail/unstable_without_feature.rs`). Run with
//! `cargo test -p acp-rpc --features unstable --test unstable_handlers`.
#![cfg(all(
    feature = "unstable_session_fork",
    feature = "unstable_llm_providers",
    feature = "unstable_session_archive",
    feature = "unstable_mcp_over_acp"
))]

use acp_rpc::acp_types::*;
use acp_rpc::macro_support::Advertise;
use acp_rpc::transport::duplex;
use acp_rpc::{AgentContext, ClientContext, Connection, RawValue, acp_agent, acp_client};
use serde_json::{Value, json};

struct Forker;

#[acp_agent]
impl Forker {
    async fn initialize(&self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(params.protocol_version))
    }
    async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("sess_1"))
    }
    async fn session_prompt(&self, _: PromptRequest) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _: CancelNotification) {}
    async fn session_fork(&self, params: ForkSessionRequest) -> Result<ForkSessionResponse, Error> {
        Ok(ForkSessionResponse::new(format!("{}_fork", params.session_id.0)))
    }
    async fn providers_list(&self, _: ListProvidersRequest, _cx: AgentContext) -> Result<ListProvidersResponse, Error> {
        Ok(ListProvidersResponse::new(vec![]))
    }
    async fn session_archive(&self, _: ArchiveSessionRequest) -> Result<ArchiveSessionResponse, Error> {
        Ok(ArchiveSessionResponse::new())
    }
    async fn mcp_message(&self, _: MessageMcpNotification) {}
    // Configured out: not handled, and no gate error either.
    #[cfg(any())]
    async fn session_status(&self, _: SessionStatusRequest) -> Result<SessionStatusResponse, Error> {
        unreachable!()
    }
}

struct McpClient;

#[acp_client]
impl McpClient {
    async fn session_request_permission(
        &self,
        _: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
    }
    async fn session_update(&self, _: SessionNotification) {}
    // The request-scoped MCP binding: the client answers the inner request's outcome.
    async fn mcp_message(&self, params: MessageMcpRequest, _cx: ClientContext) -> Result<MessageMcpResponse, Error> {
        let error = McpError::new(-32601, format!("{} has no {}", params.server_id, params.method));
        Ok(MessageMcpResponse::Error(MessageMcpError::new(error)))
    }
}

#[tokio::test]
async fn unstable_handlers_are_handled_and_advertised_with_their_features_on() {
    fn is_client<C: Client<ClientContext>>(_: &C) {}
    is_client(&McpClient);

    let (agent_end, client_end) = duplex(64 * 1024);
    let (_client, agent_serve) = acp_rpc::serve_agent(Forker, agent_end.0, agent_end.1);
    let (peer, raw_serve) = Connection::new().serve(client_end.0, client_end.1, ());
    tokio::spawn(agent_serve);
    tokio::spawn(raw_serve);
    let call = async |method: &str, params: Value| -> Result<Value, acp_rpc::Error> {
        let raw = serde_json::value::to_raw_value(&params).unwrap();
        let result: Box<RawValue> = peer.request_raw(method, Some(&raw)).await?;
        Ok(serde_json::from_str(result.get()).unwrap())
    };

    let init = call("initialize", json!({"protocolVersion": 1})).await.unwrap();
    assert_eq!(init["agentCapabilities"]["sessionCapabilities"]["fork"], json!({}), "{init}");
    assert!(Forker::CAPABILITIES.iter().any(|(path, _)| path.last() == Some(&"fork")));

    let forked = call("session/fork", json!({"sessionId": "s", "cwd": "/", "mcpServers": []})).await.unwrap();
    assert_eq!(forked["sessionId"], "s_fork");
    assert_eq!(call("providers/list", json!({})).await.unwrap()["providers"], json!([]));
    assert_eq!(call("session/archive", json!({"sessionId": "s"})).await.unwrap(), json!({}));
    match call("session/status", json!({"sessionId": "s"})).await {
        Err(acp_rpc::Error::Rpc(e)) => assert_eq!(e.code, acp_rpc::codes::METHOD_NOT_FOUND),
        other => panic!("session/status is configured out: {other:?}"),
    }
}

#[tokio::test]
async fn a_clients_mcp_message_handler_answers_the_inner_outcome_carrier() {
    let (agent_end, client_end) = duplex(64 * 1024);
    let (_agent, client_serve) = acp_rpc::serve_client(McpClient, client_end.0, client_end.1);
    let (peer, raw_serve) = Connection::new().serve(agent_end.0, agent_end.1, ());
    tokio::spawn(client_serve);
    tokio::spawn(raw_serve);
    let params = json!({"serverId": "s1", "requestId": "r1", "method": "tools/list"});
    let raw = serde_json::value::to_raw_value(&params).unwrap();
    let result: Box<RawValue> = peer.request_raw("mcp/message", Some(&raw)).await.unwrap();
    let result: Value = serde_json::from_str(result.get()).unwrap();
    assert_eq!(result, json!({"error": {"code": -32601, "message": "s1 has no tools/list"}}));
}
