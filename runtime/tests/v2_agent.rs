//! Protocol v2 agents, driven over the wire by a raw client: the prompt lifecycle in the order
//! `v2/prompt-lifecycle.mdx` gives (answer `{}`, `user_message`, `running`, progress, idle with
//! the stop reason), refusal before acceptance, cancellation after acceptance, and one
//! endpoint serving v1 and v2 clients (`version::ProtocolRouter`).

mod common;

use acp_rpc::acp_types::v2::{
    Agent, CancelSessionNotification, CloseSessionRequest, CloseSessionResponse, Error,
    IdleStateUpdateStopReason as StopReason, Implementation, InitializeRequest, InitializeResponse,
    ListSessionsRequest, ListSessionsResponse, NewSessionRequest, NewSessionResponse, PlanEntry, PlanEntryPriority,
    PlanEntryStatus, PromptRequest, PromptResponse, ProtocolVersion, ResumeSessionRequest, ResumeSessionResponse,
    TerminalExitStatus, ToolKind,
};
use acp_rpc::v2::AgentContext;
use acp_rpc::version::ProtocolRouter;
use acp_rpc::{Connection, codes};
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

    async fn initialize(&self, params: InitializeRequest, _cx: AgentContext) -> Result<InitializeResponse, Error> {
        // A client named `panic` meets an `initialize` handler that fails hard.
        assert_ne!(params.info.name, "panic", "initialize fails hard");
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
                Ok(turn.response().await?)
            }
            "wait" => {
                turn.accept().await?;
                turn.cancelled().await;
                Ok(turn.response().await?)
            }
            "fail" => {
                turn.say("about to fail").await?;
                Err(Error::internal_error())
            }
            "limit" => {
                turn.set_stop_reason(StopReason::MaxTokens);
                Ok(turn.response().await?)
            }
            // A long tool call the client may cancel; the turn goes on after it.
            "long" => {
                let call = turn.start_tool_call("Wait for the build", ToolKind::Execute).await?;
                let cancel = call.cancellable().await?;
                call.in_progress().await?;
                cancel.cancelled().await;
                call.cancelled().await?;
                turn.say("the build was stopped").await?;
                Ok(turn.response().await?)
            }
            // A command in an agent-owned terminal the client may cancel; the turn goes on.
            "serve" => {
                let terminal = turn.start_terminal("npm run serve", None).await?;
                let cancel = terminal.cancellable().await?;
                terminal.output(b"listening on :8080\n").await?;
                cancel.cancelled().await;
                terminal.exited(TerminalExitStatus::new().signal("SIGTERM".to_owned())).await?;
                turn.say("the server was stopped").await?;
                Ok(turn.response().await?)
            }
            _ => Ok(turn.response().await?),
        }
    }

    async fn session_cancel(&self, _: CancelSessionNotification, _cx: AgentContext) -> Result<(), Error> {
        Ok(())
    }
}

fn v2_agent() -> (RawPeer, acp_rpc::Peer, ServeTask) {
    start(Connection::new().v2_rules(), acp_rpc::v2::AgentHandler::new(Scripted))
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
async fn session_close_cancels_the_turn_and_answers_after_its_idle_update() {
    let (mut peer, _p, _serve) = v2_agent();
    peer.send_json(prompt(1, "s1", "wait")).await;
    assert_eq!(
        kinds(&[peer.recv().await, peer.recv().await, peer.recv().await]),
        ["accepted", "user_message", "state running"]
    );
    peer.send_json(json!({"jsonrpc":"2.0","id":2,"method":"session/close","params":{"sessionId":"s1"}})).await;
    let idle = peer.recv().await;
    assert_eq!(
        idle["params"]["update"],
        json!({"sessionUpdate":"state_update","state":"idle","stopReason":"cancelled"})
    );
    assert_eq!(peer.recv().await, json!({"jsonrpc":"2.0","id":2,"result":{}}));
}

#[tokio::test]
async fn session_close_waits_no_longer_than_the_cancel_grace_for_a_turn_that_ignores_it() {
    struct Stubborn;
    impl Agent<AgentContext> for Stubborn {
        async fn session_list(&self, _: ListSessionsRequest, _cx: AgentContext) -> Result<ListSessionsResponse, Error> {
            Ok(ListSessionsResponse::new(vec![]))
        }
        async fn session_resume(
            &self,
            _: ResumeSessionRequest,
            _cx: AgentContext,
        ) -> Result<ResumeSessionResponse, Error> {
            Ok(ResumeSessionResponse::new())
        }
        async fn session_close(
            &self,
            _: CloseSessionRequest,
            _cx: AgentContext,
        ) -> Result<CloseSessionResponse, Error> {
            Ok(CloseSessionResponse::new())
        }
        async fn initialize(&self, _: InitializeRequest, _cx: AgentContext) -> Result<InitializeResponse, Error> {
            Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("stubborn", "1.0")))
        }
        async fn session_new(&self, _: NewSessionRequest, _cx: AgentContext) -> Result<NewSessionResponse, Error> {
            Ok(NewSessionResponse::new("s1"))
        }
        async fn session_prompt(&self, _: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
            cx.turn().expect("a turn").accept().await?;
            std::future::pending::<()>().await; // never looks at its cancellation
            Ok(PromptResponse::new("m1"))
        }
        async fn session_cancel(&self, _: CancelSessionNotification, _cx: AgentContext) -> Result<(), Error> {
            Ok(())
        }
    }
    let grace = std::time::Duration::from_millis(50);
    let (mut peer, _p, _serve) =
        start(Connection::new().v2_rules().cancel_grace(grace), acp_rpc::v2::AgentHandler::new(Stubborn));
    peer.send_json(prompt(1, "s1", "anything")).await;
    assert_eq!(
        kinds(&[peer.recv().await, peer.recv().await, peer.recv().await]),
        ["accepted", "user_message", "state running"]
    );
    let t0 = std::time::Instant::now();
    peer.send_json(json!({"jsonrpc":"2.0","id":2,"method":"session/close","params":{"sessionId":"s1"}})).await;
    assert_eq!(peer.recv().await, json!({"jsonrpc":"2.0","id":2,"result":{}}));
    assert!(t0.elapsed() >= grace, "answered before the grace period was over");
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

#[tokio::test]
async fn a_cancellable_tool_call_is_cancelled_by_tool_call_cancel_and_the_turn_goes_on() {
    let (mut peer, _p, _serve) = v2_agent();
    peer.send_json(prompt(1, "s1", "long")).await;
    // Up to the call's `in_progress`: it advertised `capabilities.cancel` first.
    let mut seen = Vec::new();
    let call = loop {
        let msg = peer.recv().await;
        let u = &msg["params"]["update"];
        if u["sessionUpdate"] == "tool_call_update" && u["status"] == "in_progress" {
            break u["toolCallId"].as_str().unwrap().to_owned();
        }
        seen.push(msg);
    };
    let advertised = seen.iter().any(|m| m["params"]["update"]["capabilities"] == json!({"cancel": {}}));
    assert!(advertised, "{seen:#?}");
    let cancel = |id: i64, session: &str, call: &str| json!({"jsonrpc":"2.0","id":id,"method":"tool_call/cancel","params":{"sessionId":session,"toolCallId":call}});
    // Another session's id for the call, and an unknown call: -32602, nothing stops.
    peer.send_json(cancel(2, "s2", &call)).await;
    assert_eq!(peer.recv().await["error"]["code"], codes::INVALID_PARAMS);
    peer.send_json(cancel(3, "s1", "call_nobody_made")).await;
    assert_eq!(peer.recv().await["error"]["code"], codes::INVALID_PARAMS);
    // The call's own: accepted, then its final status, and the turn goes on to `end_turn`.
    peer.send_json(cancel(4, "s1", &call)).await;
    let (answer, _) = peer.recv_until_id(json!(4)).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    let rest = until_idle(&mut peer).await;
    let statuses: Vec<&Value> = rest
        .iter()
        .filter(|m| m["params"]["update"]["toolCallId"] == call.as_str())
        .map(|m| &m["params"]["update"]["status"])
        .collect();
    assert_eq!(statuses, [&json!("cancelled")], "{rest:#?}");
    // The final status withdraws the capability in the same patch.
    let last = rest.iter().find(|m| m["params"]["update"]["status"] == "cancelled").unwrap();
    assert_eq!(last["params"]["update"]["capabilities"], Value::Null, "{last}");
    assert!(last["params"]["update"].as_object().unwrap().contains_key("capabilities"), "{last}");
    assert_eq!(rest.last().unwrap()["params"]["update"]["stopReason"], "end_turn", "the turn was not cancelled");
    // Final: not cancellable any more.
    peer.send_json(cancel(5, "s1", &call)).await;
    assert_eq!(peer.recv().await["error"]["code"], codes::INVALID_PARAMS);
}

#[tokio::test]
async fn a_cancellable_terminal_is_cancelled_by_terminal_cancel_and_the_turn_goes_on() {
    let (mut peer, _p, _serve) = v2_agent();
    peer.send_json(prompt(1, "s1", "serve")).await;
    // Up to the first output: the terminal was created with its command, then made cancellable.
    let mut seen = Vec::new();
    let (terminal, data) = loop {
        let msg = peer.recv().await;
        let u = &msg["params"]["update"];
        if u["sessionUpdate"] == "terminal_output_chunk" {
            break (u["terminalId"].as_str().unwrap().to_owned(), u["data"].clone());
        }
        seen.push(msg);
    };
    assert_eq!(data, "bGlzdGVuaW5nIG9uIDo4MDgwCg==", "base64 of the output");
    let updates: Vec<&Value> =
        seen.iter().map(|m| &m["params"]["update"]).filter(|u| u["sessionUpdate"] == "terminal_update").collect();
    assert_eq!(
        updates,
        [
            &json!({"sessionUpdate": "terminal_update", "terminalId": terminal, "command": "npm run serve"}),
            &json!({"sessionUpdate": "terminal_update", "terminalId": terminal, "capabilities": {"cancel": {}}}),
        ],
        "{seen:#?}"
    );
    let cancel = |id: i64, session: &str, t: &str| json!({"jsonrpc":"2.0","id":id,"method":"terminal/cancel","params":{"sessionId":session,"terminalId":t}});
    // Another session's, and an unknown terminal: -32602.
    peer.send_json(cancel(2, "s2", &terminal)).await;
    assert_eq!(peer.recv().await["error"]["code"], codes::INVALID_PARAMS);
    peer.send_json(cancel(3, "s1", "term_nobody_made")).await;
    let refused = peer.recv().await;
    assert_eq!(refused["error"]["code"], codes::INVALID_PARAMS, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("term_nobody_made"), "{refused}");
    // Its own: accepted, then the exit (capabilities withdrawn), and the turn ends `end_turn`.
    peer.send_json(cancel(4, "s1", &terminal)).await;
    let (answer, _) = peer.recv_until_id(json!(4)).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    let rest = until_idle(&mut peer).await;
    let exit = rest
        .iter()
        .map(|m| &m["params"]["update"])
        .find(|u| u["sessionUpdate"] == "terminal_update")
        .expect("the exit");
    assert_eq!(
        *exit,
        json!({"sessionUpdate": "terminal_update", "terminalId": terminal, "exitStatus": {"signal": "SIGTERM"}, "capabilities": null})
    );
    assert_eq!(rest.last().unwrap()["params"]["update"]["stopReason"], "end_turn", "the turn was not cancelled");
    // Exited: not cancellable any more.
    peer.send_json(cancel(5, "s1", &terminal)).await;
    assert_eq!(peer.recv().await["error"]["code"], codes::INVALID_PARAMS);
}

// ---- one endpoint, both versions ------------------------------------------------------------

mod v1 {
    use acp_rpc::AgentContext;
    use acp_rpc::acp_types::*;

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

fn dual() -> (RawPeer, acp_rpc::Peer, ServeTask) {
    start(Connection::new(), ProtocolRouter::new().with_v1_agent(v1::Agent1).with_v2_agent(Scripted))
}

fn initialize(version: Value) -> Value {
    json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":version,"info":{"name":"t","version":"1"},"capabilities":{}}})
}

#[tokio::test]
async fn the_first_initialize_picks_the_version_and_it_stays() {
    for (asked, answered, new_session) in
        [(json!(2), 2, "s1"), (json!(7), 2, "s1"), (json!(1), 1, "v1-session"), (json!(0), 2, "s1")]
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

#[tokio::test]
async fn a_v1_client_asking_for_a_higher_version_is_answered_by_the_v1_side() {
    let (mut peer, _p, _serve) = dual();
    // v1's fields only (no `info`): not a v2 `initialize`, whatever version it asks for.
    peer.send_json(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":65535,"clientCapabilities":{}}}))
        .await;
    let init = peer.recv().await;
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    peer.send_json(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}})).await;
    assert_eq!(peer.recv().await["result"]["sessionId"], "v1-session");
    // The same request to a v2-only endpoint: refused, as v2 requires `info`.
    let (mut peer, _p, _serve) = start(Connection::new(), ProtocolRouter::new().with_v2_agent(Scripted));
    peer.send_json(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":65535,"clientCapabilities":{}}}))
        .await;
    assert_eq!(peer.recv().await["error"]["code"], codes::INVALID_PARAMS);
}

/// A raw handler whose first `initialize` fails and whose later ones succeed, answering
/// `protocolVersion: number`.
struct RefusesFirst {
    number: u16,
    refused: std::sync::atomic::AtomicBool,
}

impl acp_rpc::Handler for RefusesFirst {
    async fn handle_request(
        &self,
        req: acp_rpc::IncomingRequest,
    ) -> Result<Box<serde_json::value::RawValue>, acp_rpc::ErrorObject> {
        if !self.refused.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(acp_rpc::ErrorObject::internal_error("not ready yet"));
        }
        let answer = json!({"protocolVersion": self.number, "method": &*req.method});
        Ok(serde_json::value::to_raw_value(&answer).unwrap())
    }
    async fn handle_notification(&self, _: acp_rpc::IncomingNotification) {}
}

#[tokio::test]
async fn a_refused_initialize_chooses_nothing_and_the_client_may_try_another_version() {
    let refuses = |number| RefusesFirst { number, refused: Default::default() };
    let router = ProtocolRouter::new().with_v1(refuses(1)).with_v2(refuses(2));
    let (mut peer, _p, _serve) = start(Connection::new(), router);
    peer.send_json(initialize(json!(2))).await;
    assert_eq!(peer.recv().await["error"]["message"], "Internal error: not ready yet");
    // Still undecided: asking for 1 now reaches v1 (which refuses its first too), then v1.
    peer.send_json(initialize(json!(1))).await;
    assert_eq!(peer.recv().await["error"]["message"], "Internal error: not ready yet");
    peer.send_json(initialize(json!(1))).await;
    assert_eq!(peer.recv().await["result"]["protocolVersion"], 1);
    // Chosen now: asking for 2 stays with v1, and batches are refused as on any v1 connection.
    peer.send_json(initialize(json!(2))).await;
    assert_eq!(peer.recv().await["result"]["protocolVersion"], 1);
    peer.send(r#"[{"jsonrpc":"2.0","id":"b","method":"x"}]"#).await;
    assert_eq!(peer.recv().await["error"]["code"], codes::INVALID_REQUEST);
}

/// A raw handler answering every request with `protocolVersion: number`, after `delay`.
struct AnswersAfter {
    number: u16,
    delay: std::time::Duration,
}

impl acp_rpc::Handler for AnswersAfter {
    async fn handle_request(
        &self,
        _: acp_rpc::IncomingRequest,
    ) -> Result<Box<serde_json::value::RawValue>, acp_rpc::ErrorObject> {
        tokio::time::sleep(self.delay).await;
        Ok(serde_json::value::to_raw_value(&json!({"protocolVersion": self.number})).unwrap())
    }
    async fn handle_notification(&self, _: acp_rpc::IncomingNotification) {}
}

#[tokio::test]
async fn an_initialize_pipelined_behind_the_first_goes_to_the_version_the_first_chose() {
    let router = ProtocolRouter::new()
        .with_v1(AnswersAfter { number: 1, delay: std::time::Duration::ZERO })
        .with_v2(AnswersAfter { number: 2, delay: std::time::Duration::from_millis(100) });
    let (mut peer, _p, _serve) = start(Connection::new(), router);
    let mut second = initialize(json!(1));
    second["id"] = json!(1);
    // One write: the second (for the quick v1 side) is read while the first is being handled.
    peer.send_bytes(format!("{}\n{second}\n", initialize(json!(2))).as_bytes()).await;
    let answers = [peer.recv().await, peer.recv().await];
    for answer in &answers {
        assert_eq!(answer["result"]["protocolVersion"], 2, "{answers:?}");
    }
    // And the connection is a v2 one: batches are served.
    peer.send(r#"[{"jsonrpc":"2.0","id":"b","method":"x"}]"#).await;
    assert_eq!(peer.recv().await[0]["result"]["protocolVersion"], 2);
}

#[tokio::test]
async fn a_v2_initialize_that_panics_leaves_the_connection_uninitialized_under_v1_rules() {
    let (mut peer, _p, _serve) = dual();
    let mut panicking = initialize(json!(2));
    panicking["params"]["info"]["name"] = json!("panic");
    peer.send_json(panicking).await;
    assert_eq!(peer.recv().await["error"]["code"], codes::INTERNAL_ERROR);
    // Nothing was chosen, and the connection reads under v1's rules again: a batch is one
    // -32600, not an array of per-entry answers.
    peer.send(r#"[{"jsonrpc":"2.0","id":"b","method":"session/new","params":{"cwd":"/","mcpServers":[]}}]"#).await;
    let batch = peer.recv().await;
    assert!(batch.is_object(), "{batch}");
    assert_eq!(batch["error"]["code"], codes::INVALID_REQUEST, "{batch}");
    // The client may try again, with v1.
    peer.send_json(initialize(json!(1))).await;
    assert_eq!(peer.recv().await["result"]["protocolVersion"], 1);
}
