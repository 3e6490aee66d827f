//! Notices and context compaction from an agent (`ClientHandle::notice`,
//! `ClientHandle::start_compaction`): sent only to a client that advertised them, in the order
//! the schema gives, and each decodable as the client's `session/update`.

use std::time::Duration;

use acp_rpc::acp_types::*;
use acp_rpc::transport::duplex;
use acp_rpc::{
    AgentContext, Connection, ErrorObject, Handler, IncomingNotification, IncomingRequest, RawValue, acp_agent,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(10);

/// Announces a compaction with a notice, then reports it; says in its answer's `_meta` what
/// the client handle let it send.
struct Compacting;

#[acp_agent]
impl Compacting {
    async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V1))
    }
    async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("s1"))
    }
    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let client = cx.client();
        let notice = Notice::new(NoticeSeverity::Warning, "Compacting").description("to save tokens".to_owned());
        let noticed = client.notice(params.session_id.clone(), notice).await?;
        let compaction = client.start_compaction(params.session_id.clone()).await?;
        let compacted = compaction.is_some();
        if let Some(compaction) = compaction {
            compaction.summary_chunk(ContentBlock::Text(TextContent::new("so far: "))).await?;
            compaction.summary_chunk(ContentBlock::Text(TextContent::new("nothing"))).await?;
            compaction.complete(None).await?;
        }
        let meta = json!({"noticed": noticed, "compacted": compacted});
        Ok(PromptResponse::new(StopReason::EndTurn).meta(meta.as_object().unwrap().clone()))
    }
    async fn session_cancel(&self, _: CancelNotification) {}
}

/// A raw client: every `session/update` it gets goes to the test.
struct Updates(mpsc::UnboundedSender<Value>);

impl Handler for Updates {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        Err(ErrorObject::method_not_found(&req.method))
    }
    async fn handle_notification(&self, n: IncomingNotification) {
        if n.method == "session/update" {
            let params = n.params.map_or(Value::Null, |p| serde_json::from_str(p.get()).unwrap());
            let _ = self.0.send(params);
        }
    }
}

/// One prompt to the agent from a client that advertised `session` as given; what came back.
async fn prompt_with(session: Value) -> (Value, Vec<Value>) {
    let (agent_end, client_end) = duplex(64 * 1024);
    let (_, agent_serve) = acp_rpc::serve_agent(Compacting, agent_end.0, agent_end.1);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (peer, client_serve) = Connection::new().serve(client_end.0, client_end.1, Updates(tx));
    tokio::spawn(agent_serve);
    tokio::spawn(client_serve);
    let call = |method: &'static str, params: Value| {
        let peer = peer.clone();
        async move {
            let params = RawValue::from_string(params.to_string()).unwrap();
            let answer = tokio::time::timeout(LIMIT, peer.request_raw(method, Some(&params))).await.unwrap().unwrap();
            serde_json::from_str::<Value>(answer.get()).unwrap()
        }
    };
    call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {"session": session}})).await;
    call("session/new", json!({"cwd": "/", "mcpServers": []})).await;
    let answer = call("session/prompt", json!({"sessionId": "s1", "prompt": []})).await;
    // Updates are sent before the answer, and notifications are delivered in order.
    let mut updates = Vec::new();
    while let Ok(update) = rx.try_recv() {
        updates.push(update);
    }
    (answer, updates)
}

#[tokio::test]
async fn a_client_that_advertised_them_gets_the_notice_and_the_compaction_in_order() {
    let (answer, updates) = prompt_with(json!({"notices": {}, "compaction": {}})).await;
    assert_eq!(answer["_meta"], json!({"noticed": true, "compacted": true}));
    let kinds: Vec<&str> = updates.iter().map(|u| u["update"]["sessionUpdate"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["notice", "compaction_update", "compaction_summary_chunk", "compaction_summary_chunk", "compaction_update"]
    );
    assert_eq!(
        updates[0]["update"],
        json!({"sessionUpdate": "notice", "severity": "warning", "title": "Compacting", "description": "to save tokens"})
    );
    let id = &updates[1]["update"]["compactionId"];
    assert!(id.as_str().is_some_and(|id| id.len() > 20), "a fresh, unguessable id: {id}");
    assert_eq!(updates[1]["update"]["status"], "in_progress");
    assert!(updates[1..].iter().all(|u| &u["update"]["compactionId"] == id), "one compaction: {updates:?}");
    assert_eq!(updates[4]["update"]["status"], "completed");
    // Each is a `session/update` the client's own types decode.
    for update in &updates {
        let decoded: SessionNotification = serde_json::from_value(update.clone()).unwrap();
        assert!(!matches!(decoded.update, SessionUpdate::Other(_)), "{update}");
    }
}

#[tokio::test]
async fn a_client_that_did_not_gets_neither() {
    for session in [json!({}), json!({"notices": null, "compaction": null})] {
        let (answer, updates) = prompt_with(session).await;
        assert_eq!(answer["_meta"], json!({"noticed": false, "compacted": false}));
        assert!(updates.is_empty(), "{updates:?}");
    }
    // One without the other.
    let (answer, updates) = prompt_with(json!({"notices": {}})).await;
    assert_eq!(answer["_meta"], json!({"noticed": true, "compacted": false}));
    assert_eq!(updates.len(), 1);
}
