//! Hostile updates reaching a v2 client, sent by a raw agent: a `state_update` for a session
//! the client never opened, upserts for ids never created, malformed and unknown updates. Each
//! gets its documented treatment (delivered, or created by `SessionState`, or dropped and
//! logged: a notification is never answered), and the connection goes on serving: the turn in
//! progress still ends with its own idle update. (Hostile batches: `batches.rs`.)

mod common;

use std::sync::{Arc, Mutex, PoisonError};

use acp_rpc::Connection;
use acp_rpc::acp_types::v2::{
    Client, Error, IdleStateUpdateStopReason as StopReason, MessageId, PromptRequest, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, TextContent, ToolCallId, ToolCallStatus,
    UpdateSessionNotification,
};
use acp_rpc::v2::session::RunState;
use acp_rpc::v2::{AgentHandle, ClientContext, ClientHandler, SessionState};
use common::*;
use serde_json::{Value, json};

/// Keeps one `SessionState` per session id, as a client would.
#[derive(Clone, Default)]
struct Tracker {
    sessions: Arc<Mutex<Vec<(String, SessionState)>>>,
}

impl Tracker {
    fn state(&self, session: &str) -> Option<SessionState> {
        let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.iter().find(|(id, _)| id == session).map(|(_, state)| state.clone())
    }
}

impl Client<ClientContext> for Tracker {
    async fn session_request_permission(
        &self,
        _: RequestPermissionRequest,
        _cx: ClientContext,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled(
            acp_rpc::acp_types::v2::CancelledPermissionOutcome::new(),
        )))
    }

    async fn session_update(&self, params: UpdateSessionNotification, _cx: ClientContext) -> Result<(), Error> {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        let at = match sessions.iter().position(|(id, _)| *id == params.session_id.0) {
            Some(at) => at,
            None => {
                sessions.push((params.session_id.0.clone(), SessionState::new()));
                sessions.len() - 1
            }
        };
        sessions[at].1.apply_notification(&params);
        Ok(())
    }
}

fn update(session: &str, update: Value) -> Value {
    json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":session,"update":update}})
}

/// Our v2 client with a raw agent on the other end, and a turn of `s1` in progress: the
/// prompt is read, accepted and `running`.
async fn turn_in_progress(
    tracker: &Tracker,
) -> (RawPeer, AgentHandle, tokio::task::JoinHandle<Result<acp_rpc::v2::TurnEnd, acp_rpc::Error>>) {
    let (mut agent, peer, _serve) = start(Connection::new().v2_rules(), ClientHandler::new(tracker.clone()));
    let handle = AgentHandle::new(peer);
    let turn = tokio::spawn({
        let handle = handle.clone();
        async move { handle.prompt_turn(PromptRequest::new("s1", vec![TextContent::new("go").into()])).await }
    });
    let prompt = agent.recv().await;
    assert_eq!(prompt["method"], "session/prompt");
    agent.send_json(json!({"jsonrpc":"2.0","id":prompt["id"],"result":{"messageId":"u1"}})).await;
    agent.send_json(update("s1", json!({"sessionUpdate":"state_update","state":"running"}))).await;
    (agent, handle, turn)
}

/// Every message the client sent within a short while (it must answer no notification).
async fn silence(agent: &mut RawPeer) -> Vec<String> {
    let mut said = Vec::new();
    while let Some(line) = agent.try_recv_line(std::time::Duration::from_millis(100)).await {
        said.push(line);
    }
    said
}

#[tokio::test]
async fn an_idle_update_of_an_unknown_session_does_not_end_another_sessions_turn() {
    let tracker = Tracker::default();
    let (mut agent, _handle, turn) = turn_in_progress(&tracker).await;
    agent
        .send_json(update("ghost", json!({"sessionUpdate":"state_update","state":"idle","stopReason":"end_turn"})))
        .await;
    // Delivered like any session's update (the client decides what an unknown session means)…
    agent.send_json(update("s1", json!({"sessionUpdate":"agent_message_chunk","messageId":"m1","content":{"type":"text","text":"still here"}}))).await;
    assert_eq!(silence(&mut agent).await, Vec::<String>::new(), "a notification was answered");
    assert_eq!(tracker.state("ghost").map(|s| s.stop_reason), Some(Some(StopReason::EndTurn)));
    // …but `s1`'s turn runs on until its own idle update.
    assert!(!turn.is_finished(), "the ghost's idle ended s1's turn");
    agent
        .send_json(update("s1", json!({"sessionUpdate":"state_update","state":"idle","stopReason":"max_tokens"})))
        .await;
    let end = tokio::time::timeout(LIMIT, turn).await.unwrap().unwrap().unwrap();
    assert_eq!(end.stop_reason, Some(StopReason::MaxTokens));
    assert_eq!(end.message_id, Some(MessageId::from("u1")));
    let s1 = tracker.state("s1").unwrap();
    assert_eq!(s1.state, RunState::Idle);
    assert_eq!(s1.messages.len(), 1);
}

#[tokio::test]
async fn upserts_for_ids_never_created_create_them_with_only_what_they_say() {
    let tracker = Tracker::default();
    let (mut agent, _handle, turn) = turn_in_progress(&tracker).await;
    // A patch for a tool call no update created, a chunk for a message never started, a
    // tool-call content chunk for another unknown call, and a plan by a new id.
    agent
        .send_json(update("s1", json!({"sessionUpdate":"tool_call_update","toolCallId":"c9","status":"completed"})))
        .await;
    agent
        .send_json(update(
            "s1",
            json!({"sessionUpdate":"agent_message_chunk","messageId":"m9","content":{"type":"text","text":"mid-"}}),
        ))
        .await;
    agent.send_json(update("s1", json!({"sessionUpdate":"tool_call_content_chunk","toolCallId":"c8","content":{"type":"content","content":{"type":"text","text":"out"}}}))).await;
    agent.send_json(update("s1", json!({"sessionUpdate":"state_update","state":"idle","stopReason":"end_turn"}))).await;
    tokio::time::timeout(LIMIT, turn).await.unwrap().unwrap().unwrap();
    assert_eq!(silence(&mut agent).await, Vec::<String>::new());

    let s1 = tracker.state("s1").unwrap();
    let c9 = s1.tool_call_by_id(&ToolCallId::from("c9")).expect("c9 created by its first patch");
    assert_eq!((c9.title.as_deref(), c9.status.as_ref()), (None, Some(&ToolCallStatus::Completed)));
    let c8 = s1.tool_call_by_id(&ToolCallId::from("c8")).expect("c8 created by its content chunk");
    assert_eq!(c8.content.len(), 1);
    let m9 = s1.message_by_id(&MessageId::from("m9")).expect("m9 created by its chunk");
    assert_eq!(serde_json::to_value(&m9.content).unwrap(), json!([{"type":"text","text":"mid-"}]));
}

#[tokio::test]
async fn malformed_updates_are_dropped_and_unknown_kinds_kept_and_the_turn_goes_on() {
    let tracker = Tracker::default();
    let (mut agent, _handle, turn) = turn_in_progress(&tracker).await;
    // No `toolCallId` (required); a status of the wrong type (optional: the types read an
    // invalid optional value as absent, as the official SDKs do); no update at all; params
    // that are a string.
    agent.send_json(update("s1", json!({"sessionUpdate":"tool_call_update","status":"completed"}))).await;
    agent.send_json(update("s1", json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":7}))).await;
    agent.send_json(json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1"}})).await;
    agent.send_json(json!({"jsonrpc":"2.0","method":"session/update","params":"s1"})).await;
    // A kind from a newer schema: kept as it came.
    agent.send_json(update("s1", json!({"sessionUpdate":"hologram","frames":3}))).await;
    agent.send_json(update("s1", json!({"sessionUpdate":"state_update","state":"idle","stopReason":"end_turn"}))).await;
    let end = tokio::time::timeout(LIMIT, turn).await.unwrap().unwrap().unwrap();
    assert_eq!(end.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(silence(&mut agent).await, Vec::<String>::new(), "a notification was answered");

    let s1 = tracker.state("s1").unwrap();
    let ids: Vec<&str> = s1.tool_calls.iter().map(|c| c.id.0.as_str()).collect();
    assert_eq!(ids, ["c1"], "only the patch with a tool call id reaches the state");
    assert_eq!(s1.tool_calls[0].status, None, "an invalid status is read as absent");
    assert_eq!(s1.unknown.len(), 1);
    assert_eq!(serde_json::to_value(&s1.unknown[0]).unwrap()["frames"], 3);
}
