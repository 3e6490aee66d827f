//! v2 turns on the agent side: the states a turn reports around permission requests
//! (`requires_action` while any of the turn's requests waits for the client, `running` once the
//! last is answered, nothing once the turn has ended), and how many turns run at once. Each
//! drives the real connection, over an in-memory duplex.
#![cfg(feature = "unstable_protocol_v2")]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use acp_rpc::Connection;
use acp_rpc::acp_types::v2::{
    Agent, CancelSessionNotification, CloseSessionRequest, CloseSessionResponse, Error, ExtNotification, ExtRequest,
    ExtResponse, Implementation, InitializeRequest, InitializeResponse, ListSessionsRequest, ListSessionsResponse,
    NewSessionRequest, NewSessionResponse, PermissionOption, PermissionOptionKind, PromptRequest, PromptResponse,
    ProtocolVersion, RequestPermissionRequest, ResumeSessionRequest, ResumeSessionResponse,
};
use acp_rpc::v2::{AgentContext, AgentHandler};
use common::*;
use serde_json::{Value, json};

/// The turns of `hold` prompts running now, and the most at any time.
static LIVE_TURNS: AtomicUsize = AtomicUsize::new(0);
static MOST_LIVE_TURNS: AtomicUsize = AtomicUsize::new(0);

/// Asks for permission the way its prompt's text says.
struct Asker;

impl Agent<AgentContext> for Asker {
    async fn initialize(&self, _: InitializeRequest, _: AgentContext) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("asker", "1.0")))
    }
    async fn session_new(&self, _: NewSessionRequest, _: AgentContext) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("s1"))
    }
    async fn session_list(&self, _: ListSessionsRequest, _: AgentContext) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(vec![]))
    }
    async fn session_resume(&self, _: ResumeSessionRequest, _: AgentContext) -> Result<ResumeSessionResponse, Error> {
        Ok(ResumeSessionResponse::new())
    }
    async fn session_close(&self, _: CloseSessionRequest, _: AgentContext) -> Result<CloseSessionResponse, Error> {
        Ok(CloseSessionResponse::new())
    }
    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let turn = cx.turn().expect("a turn");
        let text = serde_json::to_value(&params.prompt[0]).unwrap()["text"].as_str().unwrap_or_default().to_owned();
        match &*text {
            "perm2" => {
                // Two tool calls of the turn ask for permission in parallel.
                turn.accept().await?;
                let ask = |title: &str| {
                    let options = vec![PermissionOption::new("yes", "Allow", PermissionOptionKind::AllowOnce)];
                    turn.request_permission(RequestPermissionRequest::new("s1", title.to_owned(), options))
                };
                let (a, b) = tokio::join!(ask("first"), ask("second"));
                a?;
                b?;
            }
            "hold" => {
                turn.accept().await?;
                let live = LIVE_TURNS.fetch_add(1, Ordering::SeqCst) + 1;
                MOST_LIVE_TURNS.fetch_max(live, Ordering::SeqCst);
                tokio::select! {
                    () = turn.cancelled() => {}
                    () = tokio::time::sleep(Duration::from_secs(30)) => {}
                }
                LIVE_TURNS.fetch_sub(1, Ordering::SeqCst);
            }
            "endperm" => {
                // Ends the turn early, then asks one last question (e.g. to keep a change).
                turn.end(acp_rpc::acp_types::v2::StopReason::EndTurn).await?;
                let options = vec![PermissionOption::new("yes", "Allow", PermissionOptionKind::AllowOnce)];
                turn.request_permission(RequestPermissionRequest::new("s1", "Keep it?".to_owned(), options)).await?;
            }
            _ => {
                turn.say("ok").await?;
            }
        }
        Ok(PromptResponse::new())
    }
    async fn session_cancel(&self, _: CancelSessionNotification, _: AgentContext) -> Result<(), Error> {
        Ok(())
    }
    async fn ext_method(&self, _: &str, params: ExtRequest, _: AgentContext) -> Result<ExtResponse, Error> {
        Ok(ExtResponse(params.0))
    }
    async fn ext_notification(&self, _: &str, _: ExtNotification, _: AgentContext) -> Result<(), Error> {
        Ok(())
    }
}

fn prompt_line(id: i64, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
           "params": {"sessionId": "s1", "prompt": [{"type": "text", "text": text}]}})
}

fn state_of(msg: &Value) -> Option<String> {
    let update = &msg["params"]["update"];
    (update["sessionUpdate"] == "state_update").then(|| update["state"].as_str().unwrap_or("?").to_owned())
}

/// The states `peer` reports until it has been quiet for 300 ms.
async fn states_until_quiet(peer: &mut RawPeer) -> Vec<String> {
    let mut states = Vec::new();
    while let Some(line) = peer.try_recv_line(Duration::from_millis(300)).await {
        let msg: Value = serde_json::from_str(&line).unwrap();
        states.extend(state_of(&msg));
    }
    states
}

fn allow(id: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {"outcome": {"outcome": "selected", "optionId": "yes"}}})
}

/// Two permission requests of one turn pending at once (two tool calls asking in parallel):
/// the turn requires action once, until the last is answered, and only then runs again (the
/// spec: `requires_action` while blocked on a permission response, `running` when work
/// resumes). Answering the first used to report `running` while the second still waited.
#[tokio::test]
async fn a_turn_requires_action_until_the_last_of_its_permission_requests_is_answered() {
    let (mut peer, _p, _serve) = start(Connection::new().v2_rules(), AgentHandler::new(Asker));
    peer.send_json(prompt_line(1, "perm2")).await;
    let (mut asks, mut states) = (Vec::new(), Vec::new());
    while asks.len() < 2 {
        let msg = peer.recv().await;
        states.extend(state_of(&msg));
        if msg["method"] == "session/request_permission" {
            asks.push(msg["id"].clone());
        }
    }
    states.extend(states_until_quiet(&mut peer).await);
    assert_eq!(states, ["running", "requires_action"]);
    peer.send_json(allow(&asks[0])).await;
    assert_eq!(states_until_quiet(&mut peer).await, Vec::<String>::new(), "one request still waits");
    peer.send_json(allow(&asks[1])).await;
    assert_eq!(states_until_quiet(&mut peer).await, ["running", "idle"]);
}

/// After `Turn::end` the session is idle; a permission request through the turn must not put
/// it back to `running` with no idle to follow.
#[tokio::test]
async fn a_permission_request_after_turn_end_leaves_the_session_idle() {
    let (mut peer, _p, _serve) = start(Connection::new().v2_rules(), AgentHandler::new(Asker));
    peer.send_json(prompt_line(1, "endperm")).await;
    let mut states = Vec::new();
    loop {
        let msg = peer.recv().await;
        if let Some(state) = state_of(&msg) {
            states.push(state);
        }
        if msg["method"] == "session/request_permission" {
            peer.send_json(json!({"jsonrpc": "2.0", "id": msg["id"],
                "result": {"outcome": {"outcome": "selected", "optionId": "yes"}}}))
                .await;
            break;
        }
    }
    while let Some(line) = peer.try_recv_line(Duration::from_millis(300)).await {
        let msg: Value = serde_json::from_str(&line).unwrap();
        if let Some(state) = state_of(&msg) {
            states.push(state);
        }
    }
    assert_eq!(states.last().map(String::as_str), Some("idle"), "the session's last reported state: {states:?}");
}

/// A turn goes on after its prompt is answered. Turns count against the connection's
/// `max_concurrent_requests` as requests do: a client that pipelines prompts gets as many
/// turns running at once, the next prompts wait unanswered, and beyond the bounds they are
/// refused as overload. The turns used to run without bound.
#[tokio::test]
async fn no_more_turns_run_at_once_than_requests_may() {
    let connection =
        Connection::new().v2_rules().max_concurrent_requests(4).max_queued_requests(4).max_backlog_bytes(4096);
    let (mut peer, _p, _serve) = start(connection, AgentHandler::new(Asker));
    let mut prompts = String::new();
    for id in 1..=200 {
        prompts.push_str(&prompt_line(id, "hold").to_string());
        prompts.push('\n');
    }
    peer.send_bytes(prompts.as_bytes()).await;
    let (mut accepted, mut refused) = (0, 0);
    while let Some(line) = peer.try_recv_line(Duration::from_millis(500)).await {
        let msg: Value = serde_json::from_str(&line).unwrap();
        if msg.get("id").is_some() && msg.get("method").is_none() {
            if msg.get("result").is_some() {
                accepted += 1;
            } else {
                assert_eq!(msg["error"]["code"], acp_rpc::codes::OVERLOADED, "{msg}");
                refused += 1;
            }
        }
    }
    assert_eq!(accepted, 4, "{refused} refused, most live {}", MOST_LIVE_TURNS.load(Ordering::SeqCst));
    assert!(refused > 150, "{refused} refused");
    assert_eq!(MOST_LIVE_TURNS.load(Ordering::SeqCst), 4);
    // One turn ends: the next waiting prompt is accepted.
    peer.send_json(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}})).await;
    let mut more = 0;
    while let Some(line) = peer.try_recv_line(Duration::from_millis(500)).await {
        let msg: Value = serde_json::from_str(&line).unwrap();
        if msg.get("result").is_some() && msg.get("method").is_none() {
            more += 1;
        }
    }
    assert!(more > 0, "no waiting prompt was accepted once the turns ended");
}
