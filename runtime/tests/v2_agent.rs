//! Protocol v2 agents, driven over the wire by a raw client: the prompt lifecycle in the order
//! `v2/prompt-lifecycle.mdx` gives (answer `{}`, `user_message`, `running`, progress, idle with
//! the stop reason), refusal before acceptance, cancellation after acceptance, and one
//! endpoint serving v1 and v2 clients (`version::ProtocolRouter`).

mod common;

use acp_runtime::acp_types::v2::{
    Agent, CancelSessionNotification, CloseSessionRequest, CloseSessionResponse, Error, Implementation,
    InitializeRequest, InitializeResponse, ListSessionsRequest, ListSessionsResponse, NewSessionRequest,
    NewSessionResponse, PlanEntry, PlanEntryPriority, PlanEntryStatus, PromptRequest, PromptResponse, ProtocolVersion,
    ResumeSessionRequest, ResumeSessionResponse, StopReason, ToolKind,
};
use acp_runtime::v2::AgentContext;
use acp_runtime::version::ProtocolRouter;
use acp_runtime::{Connection, codes};
use common::*;
use serde_json::{Value, json};

struct Scripted;

impl Agent<AgentContext> for Scripted {
    async fn session_list(&self, _: ListSessionsRequest, _cx: AgentContext) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(vec![]))
    }

    async fn session_resume(&self, _: ResumeSessionRequest, _cx: AgentContext) -> Result<ResumeSessionResponse, Error> {
        Ok(ResumeSessionResponse::new())
    }

    async fn session_close(&self, _: CloseSessionRequest, _cx: AgentContext) -> Result<CloseSessionResponse, Error> {
        Ok(CloseSessionResponse::new())
    }

    async fn initialize(&self, _: InitializeRequest, _cx: AgentContext) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("scripted", "1.0")))
    }

    async fn session_new(&self, _: NewSessionRequest, _cx: AgentContext) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("s1"))
    }

    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        if params.session_id.0 != "s1" {
            return Err(Error::resource_not_found());
        }
        let turn = cx.turn().expect("a prompt handler has a turn");
        let text = serde_json::to_value(&params.prompt[0]).unwrap()["text"].as_str().unwrap_or_default().to_owned();
        match text.as_str() {
            "hello" => {
                let message = turn.agent_message();
                message.text("Hi").await?;
                message.text(" there").await?;
                turn.plan(vec![PlanEntry::new("greet", PlanEntryPriority::High, PlanEntryStatus::Completed)]).await?;
                let call = turn.start_tool_call("Look around", ToolKind::Read).await?;
                call.in_progress().await?;
                call.append_text("found nothing").await?;
                call.complete().await?;
                Ok(PromptResponse::new())
            }
            "wait" => {
                turn.accept().await?;
                turn.cancelled().await;
                Ok(PromptResponse::new())
            }
            "fail" => {
                turn.say("about to fail").await?;
                Err(Error::internal_error())
            }
            "limit" => {
                turn.set_stop_reason(StopReason::MaxTokens);
                Ok(PromptResponse::new())
            }
            _ => Ok(PromptResponse::new()),
        }
    }

    async fn session_cancel(&self, _: CancelSessionNotification, _cx: AgentContext) -> Result<(), Error> {
        Ok(())
    }
}

fn v2_agent() -> (RawPeer, acp_runtime::Peer, ServeTask) {
    start(Connection::new().v2_rules(), acp_runtime::v2::AgentHandler::new(Scripted))
}

fn prompt(id: i64, session: &str, text: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"session/prompt","params":{"sessionId":session,"prompt":[{"type":"text","text":text}]}})
}

/// Reads until the idle `state_update`; returns every message, in order.
async fn until_idle(peer: &mut RawPeer) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let msg = peer.recv().await;
        let idle =
            msg["params"]["update"]["sessionUpdate"] == "state_update" && msg["params"]["update"]["state"] == "idle";
        seen.push(msg);
        if idle {
            return seen;
        }
    }
}

fn kinds(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m.get("result") {
            Some(result) if result.get("messageId").is_some() => "accepted".to_owned(),
            Some(result) => format!("answer {result}"),
            None => {
                let u = &m["params"]["update"];
                match u["sessionUpdate"].as_str().unwrap() {
                    "state_update" => format!("state {}", u["state"].as_str().unwrap()),
                    other => other.to_owned(),
                }
            }
        })
        .collect()
}

#[tokio::test]
async fn a_turn_is_accepted_reported_and_ended_in_the_spec_order() {
    let (mut peer, _p, _serve) = v2_agent();
    peer.send_json(prompt(1, "s1", "hello")).await;
    let seen = until_idle(&mut peer).await;
    assert_eq!(
        kinds(&seen),
        [
            "accepted",
            "user_message",
            "state running",
            "agent_message_chunk",
            "agent_message_chunk",
            "plan_update",
            "tool_call_update",
            "tool_call_update",
            "tool_call_content_chunk",
            "tool_call_update",
            "state idle",
        ]
    );
    assert_eq!(seen[0]["id"], 1);
    let ack = &seen[1]["params"]["update"];
    assert_eq!(ack["content"], json!([{"type":"text","text":"hello"}]), "the prompt, acknowledged");
    assert!(ack["messageId"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(seen[0]["result"]["messageId"], ack["messageId"], "the answer names the user message");
    let (a, b) = (&seen[3]["params"]["update"], &seen[4]["params"]["update"]);
    assert_eq!(a["messageId"], b["messageId"], "chunks of one message share its id");
    assert_ne!(a["messageId"], ack["messageId"]);
    let created = &seen[6]["params"]["update"];
    assert_eq!(
        (created["title"].as_str(), created["kind"].as_str(), created["status"].as_str()),
        (Some("Look around"), Some("read"), Some("pending"))
    );
    let done = &seen[9]["params"]["update"];
    assert_eq!(done["toolCallId"], created["toolCallId"]);
    assert_eq!(done["status"], "completed");
    assert!(done.get("title").is_none(), "a patch leaves the other fields out: {done}");
    assert_eq!(seen[10]["params"]["update"]["stopReason"], "end_turn");
    for update in &seen[1..] {
        assert_eq!(update["params"]["sessionId"], "s1");
    }
}

#[tokio::test]
async fn a_refused_prompt_is_an_error_answer_with_no_update() {
    let (mut peer, _p, _serve) = v2_agent();
    peer.send_json(prompt(1, "nope", "hello")).await;
    let answer = peer.recv().await;
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["error"]["code"], codes::RESOURCE_NOT_FOUND);
    // Nothing of a turn follows: the next message is the answer to the next request.
    peer.send_json(json!({"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/"}})).await;
    assert_eq!(peer.recv().await["id"], 2);
}

#[tokio::test]
async fn a_quiet_handler_is_accepted_when_it_returns() {
    let (mut peer, _p, _serve) = v2_agent();
    peer.send_json(prompt(1, "s1", "quiet")).await;
    let seen = until_idle(&mut peer).await;
    assert_eq!(kinds(&seen), ["accepted", "user_message", "state running", "state idle"]);
    peer.send_json(prompt(2, "s1", "limit")).await;
    let seen = until_idle(&mut peer).await;
    assert_eq!(seen.last().unwrap()["params"]["update"]["stopReason"], "max_tokens");
}

#[tokio::test]
async fn session_cancel_ends_an_accepted_turn_with_cancelled() {
    let (mut peer, _p, _serve) = v2_agent();
    peer.send_json(prompt(1, "s1", "wait")).await;
    let answer = peer.recv().await;
    assert!(answer["result"]["messageId"].is_string(), "{answer}");
    peer.send_json(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}})).await;
    let seen = until_idle(&mut peer).await;
    assert_eq!(seen.last().unwrap()["params"]["update"]["stopReason"], "cancelled");
}

#[tokio::test]
async fn a_handler_failing_after_acceptance_ends_the_turn_with_error() {
    let (mut peer, _p, _serve) = v2_agent();
    peer.send_json(prompt(1, "s1", "fail")).await;
    let seen = until_idle(&mut peer).await;
    assert_eq!(kinds(&seen), ["accepted", "user_message", "state running", "agent_message", "state idle"]);
    let idle = &seen.last().unwrap()["params"]["update"];
    assert_eq!(idle["stopReason"], "error");
    assert_eq!(idle["error"]["code"], codes::INTERNAL_ERROR, "{idle}");
}

// ---- one endpoint, both versions ------------------------------------------------------------

mod v1 {
    use acp_runtime::AgentContext;
    use acp_runtime::acp_types::*;

    pub struct Agent1;

    impl Agent<AgentContext> for Agent1 {
        async fn initialize(&self, _: InitializeRequest, _cx: AgentContext) -> Result<InitializeResponse, Error> {
            Ok(InitializeResponse::new(ProtocolVersion::V1))
        }
        async fn authenticate(&self, _: AuthenticateRequest, _cx: AgentContext) -> Result<AuthenticateResponse, Error> {
            Ok(AuthenticateResponse::new())
        }
        async fn session_new(&self, _: NewSessionRequest, _cx: AgentContext) -> Result<NewSessionResponse, Error> {
            Ok(NewSessionResponse::new("v1-session"))
        }
        async fn session_prompt(&self, _: PromptRequest, _cx: AgentContext) -> Result<PromptResponse, Error> {
            Ok(PromptResponse::new(StopReason::EndTurn))
        }
        async fn session_cancel(&self, _: CancelNotification, _cx: AgentContext) -> Result<(), Error> {
            Ok(())
        }
    }
}

fn dual() -> (RawPeer, acp_runtime::Peer, ServeTask) {
    start(Connection::new(), ProtocolRouter::new().with_v1_agent(v1::Agent1).with_v2_agent(Scripted))
}

fn initialize(version: Value) -> Value {
    json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":version,"info":{"name":"t","version":"1"},"capabilities":{}}})
}

#[tokio::test]
async fn the_first_initialize_picks_the_version_and_it_stays() {
    for (asked, answered, new_session) in
        [(json!(2), 2, "s1"), (json!(7), 2, "s1"), (json!(1), 1, "v1-session"), (json!(0), 1, "v1-session")]
    {
        let (mut peer, _p, _serve) = dual();
        peer.send_json(initialize(asked.clone())).await;
        let init = peer.recv().await;
        assert_eq!(init["result"]["protocolVersion"], answered, "asked {asked}: {init}");
        // A second initialize is not re-routed.
        peer.send_json(initialize(json!(if answered == 2 { 1 } else { 2 }))).await;
        assert_eq!(peer.recv().await["result"]["protocolVersion"], answered);
        peer.send_json(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}))
            .await;
        assert_eq!(peer.recv().await["result"]["sessionId"], new_session);
        // Batches only where v2 was chosen.
        peer.send(r#"[{"jsonrpc":"2.0","id":"b","method":"session/new","params":{"cwd":"/","mcpServers":[]}}]"#).await;
        let batch = peer.recv().await;
        if answered == 2 {
            assert_eq!(batch[0]["result"]["sessionId"], "s1", "{batch}");
        } else {
            assert_eq!(batch["error"]["code"], codes::INVALID_REQUEST, "{batch}");
        }
    }
}

#[tokio::test]
async fn before_initialize_requests_are_refused_and_bad_initializes_answered_without_closing() {
    let (mut peer, _p, _serve) = dual();
    peer.send_json(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/"}})).await;
    let refused = peer.recv().await;
    assert_eq!(refused["error"]["code"], codes::INVALID_REQUEST);
    for bad in [json!("2"), json!(-1), json!(null), json!(1.5)] {
        peer.send_json(initialize(bad.clone())).await;
        let answer = peer.recv().await;
        assert_eq!(answer["error"]["code"], codes::INVALID_PARAMS, "{bad}: {answer}");
        assert_eq!(answer["error"]["data"]["path"], "protocolVersion");
    }
    peer.send_json(initialize(json!(2))).await;
    assert_eq!(peer.recv().await["result"]["protocolVersion"], 2, "still serving, and still undecided");
}
