//! Target (e), `router_v2`: an endpoint serving v1 and v2 from one connection
//! (`version::ProtocolRouter`, the v1 [`FuzzAgent`](crate::FuzzAgent) beside [`FuzzAgentV2`]),
//! fed arbitrary bytes as the client's input. The first `initialize` picks the version; on v2
//! the connection reads batches, and prompts run the v2 lifecycle (acceptance, updates through
//! the turn, permission requests, cancellation, the idle update). See ../FUZZING.md.
//!
//! The first line is written alone, and handled, before the rest (a client waits for the
//! `initialize` answer before it goes on).
//!
//! Checks, besides those of the `router` target (no panic, no hang after the end of input,
//! only JSON-RPC 2.0 on the output): an answer to a batch is a non-empty array of answers, and
//! no session reports more idle updates than it reported turns running.

use std::collections::HashMap;
use std::time::Duration;

use acp_rpc::acp_types::v2::IdleStateUpdateStopReason as StopReason;
use acp_rpc::acp_types::v2::*;
use acp_rpc::v2::AgentContext;
use acp_rpc::version::ProtocolRouter;
use serde_json::{Value, json};

use crate::{FuzzAgent, check_message, drive, output_line};

/// A v2 agent that drives the turn the ways real ones do, picked by the prompt's first text:
/// `wait` waits for its cancellation (before accepting), `fail` fails (after accepting when
/// the prompt has more than one block), `quiet` returns at once; anything else streams a
/// message, runs a tool call with a permission request and a plan, then ends. It never
/// panics, so any panic is the runtime's.
pub struct FuzzAgentV2;

impl Agent<AgentContext> for FuzzAgentV2 {
    async fn initialize(&self, _: InitializeRequest, _: AgentContext) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("fuzz", "1.0")))
    }

    async fn session_new(&self, _: NewSessionRequest, _: AgentContext) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("sess_1"))
    }

    async fn session_list(&self, _: ListSessionsRequest, _: AgentContext) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(vec![]))
    }

    async fn session_resume(
        &self,
        params: ResumeSessionRequest,
        cx: AgentContext,
    ) -> Result<ResumeSessionResponse, Error> {
        // A replayed message, as a resumed session's history is.
        let replay = AgentMessage::new("msg_old").content(Some(vec![TextContent::new("before").into()]));
        let replay = SessionUpdate::AgentMessage(replay);
        cx.client().session_update(UpdateSessionNotification::new(params.session_id, replay)).await?;
        Ok(ResumeSessionResponse::new())
    }

    async fn session_close(&self, _: CloseSessionRequest, _: AgentContext) -> Result<CloseSessionResponse, Error> {
        Ok(CloseSessionResponse::new())
    }

    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let Some(turn) = cx.turn() else { return Err(Error::internal_error()) };
        let text = match params.prompt.first() {
            Some(ContentBlock::Text(text)) => text.text.clone(),
            _ => String::new(),
        };
        match text.as_str() {
            "wait" => {
                turn.cancelled().await;
                return Err(Error::internal_error().data(ErrorData::Other(json!("aborted"))));
            }
            "quiet" => return Ok(turn.response().await?),
            "fail" if params.prompt.len() == 1 => return Err(Error::invalid_params()),
            "fail" => {
                turn.accept().await?;
                return Err(Error::internal_error());
            }
            _ => {}
        }
        let message = turn.agent_message();
        message.text("hel").await?;
        message.text("lo").await?;
        let call = turn.start_tool_call("Read a", ToolKind::Read).await?;
        let options = vec![PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce)];
        let ask = RequestPermissionRequest::new(params.session_id.clone(), "Allow?", options);
        match tokio::time::timeout(Duration::from_secs(5), turn.request_permission(ask)).await {
            Ok(Ok(answer)) if matches!(answer.outcome, RequestPermissionOutcome::Selected(_)) => {
                call.in_progress().await?;
                call.append_text("a").await?;
                call.complete().await?;
            }
            Ok(Err(e)) => return Err(e.into()),
            _ => call.fail().await?,
        }
        turn.plan(vec![PlanEntry::new("step", PlanEntryPriority::High, PlanEntryStatus::Completed)]).await?;
        turn.set_stop_reason(StopReason::EndTurn);
        Ok(turn.response().await?)
    }

    async fn session_cancel(&self, _: CancelSessionNotification, _: AgentContext) -> Result<(), Error> {
        Ok(())
    }

    async fn ext_method(&self, method: &str, params: ExtRequest, _: AgentContext) -> Result<ExtResponse, Error> {
        match method {
            "_fuzz/echo" => Ok(ExtResponse(params.0)),
            _ => Err(Error::method_not_found()),
        }
    }
}

/// Target (e); see the module docs. Byte 0 picks the write size and the connection's options,
/// as for `router`.
pub fn router_v2(data: &[u8]) {
    let Some((&knob, input)) = data.split_first() else { return };
    // The first line alone, and time for it to be handled: a client sends the rest once
    // `initialize` is answered, so the rest is read under the version it chose.
    let split = input.iter().position(|b| *b == b'\n').map_or(input.len(), |i| i + 1);
    let (first, rest) = input.split_at(split);
    let out = drive(knob, &[first, rest], |connection, reader, writer| {
        let router = ProtocolRouter::new().with_v1_agent(FuzzAgent).with_v2_agent(FuzzAgentV2);
        let (peer, serve) = connection.serve(reader, writer, router);
        drop(peer);
        serve
    });
    check_output(&out);
}

/// The output's invariants (see the module docs).
fn check_output(out: &[u8]) {
    // Per session: turns reported running, and idle updates.
    let mut states: HashMap<String, (usize, usize)> = HashMap::new();
    for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Some(message) = output_line(line) else { continue };
        match &message {
            Value::Array(answers) => {
                assert!(!answers.is_empty(), "an empty array was written");
                for answer in answers {
                    assert!(answer.get("method").is_none(), "a batch answer holds a call: {answer}");
                    check_message(answer);
                }
            }
            _ => check_message(&message),
        }
        let update = &message["params"]["update"];
        if message["method"] == "session/update" && update["sessionUpdate"] == "state_update" {
            let session = message["params"]["sessionId"].as_str().unwrap_or_default().to_owned();
            let counts = states.entry(session.clone()).or_default();
            match update["state"].as_str() {
                Some("running") => counts.0 += 1,
                Some("idle") => {
                    counts.1 += 1;
                    assert!(counts.1 <= counts.0, "session {session}: an idle update with no turn running");
                }
                _ => {}
            }
        }
    }
}

/// Seeds: the v2 spec pages' messages (each alone and each page as one stream, after a v2
/// `initialize`), and a hand-written v2 conversation that reaches every path of
/// [`FuzzAgentV2`], batches and both kinds of cancellation included.
pub fn seeds(pages: &[(String, Vec<Value>)]) -> Vec<(&'static str, String, Vec<u8>)> {
    let init = r#"{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":2,"info":{"name":"fuzz","version":"1"},"capabilities":{}}}"#;
    let mut out = Vec::new();
    for (page, messages) in pages {
        let mut all = format!("{init}\n").into_bytes();
        for (i, m) in messages.iter().enumerate() {
            let line = serde_json::to_vec(m).expect("encodes");
            out.push((
                "router_v2",
                format!("v2-{page}-{i}"),
                [&[0u8][..], init.as_bytes(), b"\n", &line, b"\n"].concat(),
            ));
            all.extend_from_slice(&line);
            all.push(b'\n');
        }
        if !messages.is_empty() {
            out.push(("router_v2", format!("v2-{page}-all"), [&[0u8][..], &all].concat()));
        }
    }
    let prompt = |id: u32, texts: &[&str]| {
        let blocks: Vec<Value> = texts.iter().map(|t| json!({"type": "text", "text": t})).collect();
        json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt", "params": {"sessionId": "sess_1", "prompt": blocks}})
            .to_string()
    };
    let conversation = [
        init.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/w"}}"#.to_owned(),
        prompt(2, &["go"]),
        // The runtime's calls count from 0: the permission request.
        r#"{"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}"#.to_owned(),
        prompt(3, &["wait"]),
        r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"sess_1"}}"#.to_owned(),
        prompt(4, &["wait"]),
        r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":4}}"#.to_owned(),
        prompt(5, &["fail"]),
        prompt(6, &["fail", "late"]),
        prompt(7, &["quiet"]),
        format!(
            r#"[{},{{"jsonrpc":"2.0","id":8,"method":"session/list","params":{{}}}},{{"jsonrpc":"2.0","method":"session/cancel","params":{{"sessionId":"sess_1"}}}}]"#,
            prompt(9, &["go"])
        ),
        r#"[]"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":10,"method":"session/resume","params":{"sessionId":"sess_1","cwd":"/w"}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":11,"method":"_fuzz/echo","params":{"x":[1,2]}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":12,"method":"session/close","params":{"sessionId":"sess_1"}}"#.to_owned(),
    ]
    .join("\n")
        + "\n";
    for knob in [0u8, 0x41, 0x82, 0xc3] {
        out.push(("router_v2", format!("conversation-{knob:02x}"), [&[knob][..], conversation.as_bytes()].concat()));
    }
    out
}
