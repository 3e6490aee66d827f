//! Protocol v2 at its edges: a cancel that arrives before the turn has started, a prompt inside
//! a batch, the states a turn reports around permission requests, how many turns run at once,
//! idle updates a client must read leniently, and an agent that exits right after its last
//! update. Each drives the real connection, over an in-memory duplex.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_rpc::Connection;
use acp_rpc::acp_types::v2::{
    Agent, CancelSessionNotification, Client, CloseSessionRequest, CloseSessionResponse, Error, ExtNotification,
    ExtRequest, ExtResponse, IdleStateUpdateStopReason as StopReason, Implementation, InitializeRequest,
    InitializeResponse, ListSessionsRequest, ListSessionsResponse, NewSessionRequest, NewSessionResponse,
    PermissionOption, PermissionOptionKind, PromptRequest, PromptResponse, ProtocolVersion, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, ResumeSessionRequest, ResumeSessionResponse, TextContent,
    UpdateSessionNotification,
};
use acp_rpc::transport::duplex;
use acp_rpc::v2::{AgentContext, AgentHandle, AgentHandler, ClientContext};
use common::*;
use serde_json::{Value, json};

/// `work` accepts, then works 400 ms unless cancelled; `abort` waits for its cancellation
/// before accepting and then fails, as an aborted model request does; anything else is answered
/// with one message. Its notification and extension handlers are slow, so that a prompt can be kept
/// waiting behind them.
/// The turns of `hold` prompts running now, and the most at any time.
static LIVE_TURNS: AtomicUsize = AtomicUsize::new(0);
static MOST_LIVE_TURNS: AtomicUsize = AtomicUsize::new(0);

struct Worker;

impl Agent<AgentContext> for Worker {
    async fn initialize(&self, _: InitializeRequest, _: AgentContext) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("worker", "1.0")))
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
        let turn = cx.turn().expect("a prompt handler has a turn");
        let text = serde_json::to_value(&params.prompt[0]).unwrap()["text"].clone();
        if text == "abort" {
            turn.cancelled().await;
            return Err(Error::internal_error()
                .data(acp_rpc::acp_types::v2::ErrorData::Other(json!("the model request was aborted"))));
        }
        match text.as_str().unwrap_or_default() {
            "work" => {
                turn.accept().await?;
                tokio::select! {
                    () = turn.cancelled() => {}
                    () = tokio::time::sleep(Duration::from_millis(400)) => {}
                }
            }
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
            "endperm" => {
                // Ends the turn early, then asks one last question (e.g. to keep a change).
                turn.end(StopReason::EndTurn).await?;
                let options = vec![PermissionOption::new("yes", "Allow", PermissionOptionKind::AllowOnce)];
                turn.request_permission(RequestPermissionRequest::new("s1", "Keep it?".to_owned(), options)).await?;
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
            _ => {
                turn.say("ok").await?;
            }
        }
        Ok(turn.response().await?)
    }
    async fn session_cancel(&self, _: CancelSessionNotification, _: AgentContext) -> Result<(), Error> {
        Ok(())
    }
    async fn ext_method(&self, _: &str, params: ExtRequest, _: AgentContext) -> Result<ExtResponse, Error> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(ExtResponse(params.0))
    }
    async fn ext_notification(&self, _: &str, _: ExtNotification, _: AgentContext) -> Result<(), Error> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(())
    }
}

fn serve_worker() -> (RawPeer, acp_rpc::Peer, tokio::task::JoinHandle<Result<(), acp_rpc::Error>>) {
    start(Connection::new().v2_rules(), AgentHandler::new(Worker))
}

fn prompt_line(id: i64, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
           "params": {"sessionId": "s1", "prompt": [{"type": "text", "text": text}]}})
}

const CANCEL: &str = r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}"#;

fn is_idle(msg: &Value) -> bool {
    msg["params"]["update"]["sessionUpdate"] == "state_update" && msg["params"]["update"]["state"] == "idle"
}

/// Everything the agent writes up to and including the first idle update.
async fn until_idle(peer: &mut RawPeer) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let msg = peer.recv().await;
        let idle = is_idle(&msg);
        seen.push(msg);
        if idle {
            return seen;
        }
    }
}

// ---- agent side -------------------------------------------------------------------------------

#[tokio::test]
async fn a_cancel_written_with_the_prompt_cancels_its_turn() {
    let (mut peer, _p, _serve) = serve_worker();
    // One write: the user cancelled at once. The cancel is read before the turn has started.
    peer.send_bytes(format!("{}\n{CANCEL}\n", prompt_line(1, "work")).as_bytes()).await;
    let seen = until_idle(&mut peer).await;
    assert_eq!(seen.last().unwrap()["params"]["update"]["stopReason"], "cancelled", "{seen:#?}");
    assert!(seen.iter().any(|m| m["id"] == 1 && m["result"].is_object()), "the prompt is answered: {seen:#?}");
}

#[tokio::test]
async fn a_cancel_read_while_the_prompt_waits_behind_a_notification_cancels_its_turn() {
    let (mut peer, _p, _serve) = serve_worker();
    // The prompt waits for this notification's handler (300 ms) before its own starts.
    peer.send_json(json!({"jsonrpc": "2.0", "method": "_editor/changed", "params": {}})).await;
    peer.send_json(prompt_line(1, "work")).await;
    peer.send(CANCEL).await;
    let seen = until_idle(&mut peer).await;
    assert_eq!(seen.last().unwrap()["params"]["update"]["stopReason"], "cancelled", "{seen:#?}");
}

#[tokio::test]
async fn a_cancel_for_another_session_leaves_a_waiting_turn_alone() {
    let (mut peer, _p, _serve) = serve_worker();
    peer.send_json(json!({"jsonrpc": "2.0", "method": "_editor/changed", "params": {}})).await;
    peer.send_json(prompt_line(1, "work")).await;
    peer.send(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"other"}}"#).await;
    let seen = until_idle(&mut peer).await;
    assert_eq!(seen.last().unwrap()["params"]["update"]["stopReason"], "end_turn", "{seen:#?}");
}

#[tokio::test]
async fn a_handler_failing_after_a_cancel_before_acceptance_reports_cancelled_not_an_error() {
    let (mut peer, _p, _serve) = serve_worker();
    peer.send_json(prompt_line(1, "abort")).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    peer.send(CANCEL).await;
    let seen = until_idle(&mut peer).await;
    assert_eq!(seen.last().unwrap()["params"]["update"]["stopReason"], "cancelled", "{seen:#?}");
    let answer = seen.iter().find(|m| m["id"] == 1).expect("the prompt is answered before its idle update");
    assert!(answer["result"]["messageId"].is_string(), "accepted, not refused: {answer}");
}

#[tokio::test]
async fn a_handler_failing_after_its_prompt_was_cancelled_by_request_is_answered_32800() {
    let (mut peer, _p, _serve) = serve_worker();
    peer.send_json(prompt_line(1, "abort")).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    peer.send_json(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}})).await;
    let answer = peer.recv().await;
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["error"]["code"], -32800, "{answer}");
    // Never accepted: no update follows (the next line is the answer to this ping).
    peer.send_json(json!({"jsonrpc": "2.0", "id": 2, "method": "session/list", "params": {}})).await;
    let next = peer.recv().await;
    assert_eq!(next["id"], 2, "{next}");
}

#[tokio::test]
async fn a_batched_prompt_is_answered_before_its_turn_reports() {
    let (mut peer, _p, _serve) = serve_worker();
    // The batch's answer waits for the slow extension request; the turn's updates wait for it.
    let slow = json!({"jsonrpc": "2.0", "id": 2, "method": "_slow", "params": {}});
    peer.send(&format!("[{},{slow}]", prompt_line(1, "hi"))).await;
    let mut order = Vec::new();
    loop {
        let msg = peer.recv().await;
        if msg.is_array() {
            order.push("batch answer".to_owned());
        } else {
            let update = &msg["params"]["update"];
            order.push(format!("{} {}", update["sessionUpdate"], update["state"]));
        }
        if is_idle(&msg) {
            break;
        }
    }
    assert_eq!(order[0], "batch answer", "the turn reported before the prompt was answered: {order:?}");
    assert_eq!(order.len(), 5, "answer, user message, running, agent message, idle: {order:?}");
}

#[tokio::test]
async fn a_session_running_two_turns_reports_idle_once_when_the_last_ends() {
    let (mut peer, _p, _serve) = serve_worker();
    let started = std::time::Instant::now();
    // A second prompt while the first runs (400 ms); the second ends at once.
    peer.send_json(prompt_line(1, "work")).await;
    peer.send_json(prompt_line(2, "hi")).await;
    let seen = until_idle(&mut peer).await;
    assert!(started.elapsed() >= Duration::from_millis(300), "idle while the first turn ran: {seen:#?}");
    for id in [1, 2] {
        assert!(seen.iter().any(|m| m["id"] == id && m["result"].is_object()), "prompt {id} answered: {seen:#?}");
    }
    assert_eq!(seen.iter().filter(|m| m["params"]["update"]["state"] == "running").count(), 2, "{seen:#?}");
    assert_eq!(seen.last().unwrap()["params"]["update"]["stopReason"], "end_turn");
    let after = peer.try_recv_line(Duration::from_millis(300)).await;
    assert!(after.is_none(), "a second idle: {after:?}");
}

// ---- agent side: turn states and bounds --------------------------------------------------

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
    let (mut peer, _p, _serve) = start(Connection::new().v2_rules(), AgentHandler::new(Worker));
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
    let (mut peer, _p, _serve) = start(Connection::new().v2_rules(), AgentHandler::new(Worker));
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
    let (mut peer, _p, _serve) = start(connection, AgentHandler::new(Worker));
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

// ---- client side: `prompt_turn` against an agent scripted by hand ------------------------------

/// Records the updates its handler saw; `slow` takes 50 ms over each; `panics_on_idle`
/// panics on an idle update (a handler bug the agent's data triggers); `follow_up` sends a
/// prompt with `prompt_turn` from the handler when it sees an idle update, and keeps what that
/// call returned.
#[derive(Clone, Default)]
struct Recorder {
    updates: Arc<Mutex<Vec<Value>>>,
    slow: bool,
    panics_on_idle: bool,
    follow_up: Option<Arc<Mutex<Vec<String>>>>,
}

impl Client<ClientContext> for Recorder {
    async fn session_request_permission(
        &self,
        _: RequestPermissionRequest,
        _: ClientContext,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled(
            acp_rpc::acp_types::v2::CancelledPermissionOutcome::new(),
        )))
    }
    async fn session_update(&self, params: UpdateSessionNotification, cx: ClientContext) -> Result<(), Error> {
        if self.slow {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let update = serde_json::to_value(&params.update).unwrap();
        let idle = update["state"] == "idle";
        self.updates.lock().unwrap().push(update);
        if idle && self.panics_on_idle {
            panic!("on purpose: a handler bug");
        }
        if let (true, Some(results)) = (idle, &self.follow_up) {
            let prompt = PromptRequest::new("s1", vec![TextContent::new("again").into()]);
            let end = tokio::time::timeout(Duration::from_secs(3), cx.agent().prompt_turn(prompt)).await;
            results.lock().unwrap().push(match end {
                Ok(end) => format!("{end:?}"),
                Err(_) => "timed out".to_owned(),
            });
        }
        Ok(())
    }
}

/// Starts `prompt_turn` against a raw agent, answers the prompt and sends `updates`.
async fn turn_with_updates(client: Recorder, updates: &[Value]) -> (TurnTask, RawPeer, ServeTask) {
    let ((agent_reader, agent_writer), (client_reader, client_writer)) = duplex(1 << 16);
    let (handle, serve): (AgentHandle, _) = acp_rpc::v2::serve_client(client, client_reader, client_writer);
    let serve = tokio::spawn(serve);
    let mut agent = RawPeer::new(agent_reader, agent_writer);
    let turn =
        tokio::spawn(
            async move { handle.prompt_turn(PromptRequest::new("s1", vec![TextContent::new("x").into()])).await },
        );
    let prompt = agent.recv().await;
    agent.send_json(json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {}})).await;
    for update in updates {
        agent
            .send_json(json!({"jsonrpc": "2.0", "method": "session/update",
                               "params": {"sessionId": "s1", "update": update}}))
            .await;
    }
    (turn, agent, serve)
}

type TurnTask = tokio::task::JoinHandle<Result<acp_rpc::v2::TurnEnd, acp_rpc::Error>>;

#[tokio::test]
async fn prompt_turn_ends_at_an_idle_whose_extra_error_member_is_not_an_error_object() {
    let updates = [
        json!({"sessionUpdate": "state_update", "state": "running"}),
        json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn", "error": "rate limited"}),
    ];
    let (turn, _agent, _serve) = turn_with_updates(Recorder::default(), &updates).await;
    let end = tokio::time::timeout(LIMIT, turn).await.expect("prompt_turn ends").unwrap().unwrap();
    assert_eq!(end.stop_reason, Some(StopReason::EndTurn));
    assert!(end.error.is_none());
}

#[tokio::test]
async fn prompt_turn_ends_at_an_idle_whose_stop_reason_does_not_decode() {
    let updates = [
        json!({"sessionUpdate": "state_update", "state": "running"}),
        json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": 5}),
    ];
    let (turn, _agent, _serve) = turn_with_updates(Recorder::default(), &updates).await;
    let end = tokio::time::timeout(LIMIT, turn).await.expect("prompt_turn ends").unwrap().unwrap();
    assert_eq!(end.stop_reason, None, "an undecodable stop reason reads as none");
}

#[tokio::test]
async fn prompt_turn_ends_at_an_idle_read_just_before_the_agent_exits() {
    let client = Recorder { slow: true, ..Recorder::default() };
    let updates = [
        json!({"sessionUpdate": "user_message", "messageId": "u1", "content": []}),
        json!({"sessionUpdate": "state_update", "state": "running"}),
        json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}),
    ];
    let (turn, mut agent, _serve) = turn_with_updates(client.clone(), &updates).await;
    // The agent exits after its last update; the client's handler is still working through them.
    agent.close_input();
    drop(agent);
    let end = tokio::time::timeout(LIMIT, turn).await.expect("prompt_turn ends").unwrap();
    assert_eq!(end.expect("the idle arrived before the end").stop_reason, Some(StopReason::EndTurn));
    assert_eq!(client.updates.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn prompt_turn_fails_when_the_agent_exits_without_ending_the_turn() {
    let updates = [json!({"sessionUpdate": "state_update", "state": "running"})];
    let (turn, mut agent, _serve) = turn_with_updates(Recorder::default(), &updates).await;
    agent.close_input();
    drop(agent);
    let end = tokio::time::timeout(LIMIT, turn).await.expect("prompt_turn ends").unwrap();
    assert!(matches!(end, Err(acp_rpc::Error::ConnectionClosed)), "{end:?}");
}

#[tokio::test]
async fn prompt_turn_fails_when_the_serve_future_is_dropped() {
    let updates = [json!({"sessionUpdate": "state_update", "state": "running"})];
    let (turn, _agent, serve) = turn_with_updates(Recorder::default(), &updates).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    serve.abort();
    let end = tokio::time::timeout(LIMIT, turn).await.expect("prompt_turn ends").unwrap();
    assert!(matches!(end, Err(acp_rpc::Error::ConnectionClosed)), "{end:?}");
}

/// A turn reported `running`, then idle with `end_turn`: `prompt_turn` must end with it.
async fn assert_a_plain_turn_ends(client: Recorder) {
    let updates = [
        json!({"sessionUpdate": "state_update", "state": "running"}),
        json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}),
    ];
    let (turn, _agent, _serve) = turn_with_updates(client, &updates).await;
    let end = tokio::time::timeout(LIMIT, turn).await.expect("prompt_turn ends").unwrap().unwrap();
    assert_eq!(end.stop_reason, Some(StopReason::EndTurn));
}

#[tokio::test]
async fn prompt_turn_ends_when_the_handler_panics_on_the_idle_update() {
    assert_a_plain_turn_ends(Recorder { panics_on_idle: true, ..Recorder::default() }).await;
}

#[tokio::test]
async fn prompt_turn_from_a_notification_handler_fails_at_once_and_the_first_turn_ends() {
    let results = Arc::new(Mutex::new(Vec::new()));
    assert_a_plain_turn_ends(Recorder { follow_up: Some(results.clone()), ..Recorder::default() }).await;
    let results = results.lock().unwrap().clone();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("notification handler") && results[0].contains("spawn"), "{results:?}");
}

#[tokio::test]
async fn prompt_turns_of_two_turns_in_one_session_end_when_the_session_is_idle() {
    let ((agent_reader, agent_writer), (client_reader, client_writer)) = duplex(1 << 16);
    let (_agent, serve) = Connection::new().v2_rules().serve(agent_reader, agent_writer, AgentHandler::new(Worker));
    tokio::spawn(serve);
    let (handle, serve) = acp_rpc::v2::serve_client(Recorder::default(), client_reader, client_writer);
    tokio::spawn(serve);
    let prompt = |text: &str| PromptRequest::new("s1", vec![TextContent::new(text).into()]);
    let started = std::time::Instant::now();
    let work = tokio::spawn({
        let handle = handle.clone();
        let prompt = prompt("work");
        async move { handle.prompt_turn(prompt).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let quick = tokio::time::timeout(LIMIT, handle.prompt_turn(prompt("hi"))).await.unwrap().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300), "returned while the other turn ran");
    assert_eq!(quick.stop_reason, Some(StopReason::EndTurn));
    let work = tokio::time::timeout(LIMIT, work).await.unwrap().unwrap().unwrap();
    assert_eq!(work.stop_reason, Some(StopReason::EndTurn));
}

// ---- client side: negotiation against an agent scripted by hand -------------------------------

/// A client serving both versions (v1 by a bare handler), negotiating with a raw agent; returns
/// the negotiation's task, the raw agent with the `initialize` request read, and the request.
async fn negotiating(client: Recorder) -> (NegotiationTask, RawPeer, Value) {
    use acp_rpc::version::ProtocolRouter;
    let router = Arc::new(ProtocolRouter::new().with_v1(()).with_v2_client(client));
    let ((agent_reader, agent_writer), (client_reader, client_writer)) = duplex(1 << 16);
    let (peer, serve) = Connection::new().serve(client_reader, client_writer, router.clone());
    tokio::spawn(serve);
    let negotiation = tokio::spawn(async move {
        let v2 = InitializeRequest::new(ProtocolVersion::V2, Implementation::new("both", "1.0"));
        let v1 = acp_rpc::acp_types::InitializeRequest::new(acp_rpc::acp_types::ProtocolVersion::V1);
        router.negotiate(&peer, v2, v1).await.map(|negotiated| negotiated.version())
    });
    let mut agent = RawPeer::new(agent_reader, agent_writer);
    let init = agent.recv().await;
    assert_eq!(init["method"], "initialize");
    (negotiation, agent, init)
}

type NegotiationTask = tokio::task::JoinHandle<Result<acp_rpc::version::Version, acp_rpc::Error>>;

#[tokio::test(flavor = "current_thread")]
async fn what_an_agent_writes_right_behind_its_initialize_answer_reaches_the_v2_client() {
    let client = Recorder::default();
    let (negotiation, mut agent, init) = negotiating(client.clone()).await;
    let result = serde_json::to_value(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("raw", "1.0")));
    let answer = json!({"jsonrpc": "2.0", "id": init["id"], "result": result.unwrap()});
    let update = json!({"jsonrpc": "2.0", "method": "session/update",
                        "params": {"sessionId": "s1", "update": {"sessionUpdate": "state_update", "state": "idle"}}});
    let ask = RequestPermissionRequest::new("s1", "Allow?", vec![]);
    let ask = json!({"jsonrpc": "2.0", "id": "p1", "method": "session/request_permission", "params": ask});
    // In one write: an update before the answer (the version is not known yet when it is
    // read), the answer, then an update and a request of the version the answer names.
    agent.send_bytes(format!("{update}\n{answer}\n{update}\n{ask}\n").as_bytes()).await;
    let version = tokio::time::timeout(LIMIT, negotiation).await.expect("negotiated").unwrap().unwrap();
    assert_eq!(version, acp_rpc::version::Version::V2);
    let (asked, _) = agent.recv_until_id(json!("p1")).await;
    assert_eq!(asked["result"]["outcome"]["outcome"], "cancelled", "served by the v2 client: {asked}");
    // The request's handler ran after every notification read before it had been handled.
    let seen = client.updates.lock().unwrap().len();
    assert!((1..=2).contains(&seen), "the update behind the answer was handled: {seen}");
}

#[tokio::test]
async fn an_initialize_answer_that_does_not_decode_fails_negotiation_and_closes_the_connection() {
    let (negotiation, mut agent, init) = negotiating(Recorder::default()).await;
    agent.send_json(json!({"jsonrpc": "2.0", "id": init["id"], "result": {"protocolVersion": 2}})).await;
    let failed = tokio::time::timeout(LIMIT, negotiation).await.expect("negotiation ends").unwrap();
    assert!(matches!(failed, Err(acp_rpc::Error::Decode { .. })), "{failed:?}");
    let waiting = std::time::Instant::now();
    assert_eq!(agent.try_recv_line(LIMIT).await, None);
    assert!(waiting.elapsed() < LIMIT / 2, "the client closed the connection rather than waiting for more");
}

/// A negotiation given up before the agent answers (its future dropped, as a timeout around it
/// does) leaves the connection under v1's rules, as it was before it asked for v2: nothing was
/// chosen, and the client may go on with v1 or ask again.
#[tokio::test]
async fn a_negotiation_given_up_before_the_answer_leaves_the_connection_under_v1_rules() {
    let (negotiation, mut agent, init) = negotiating(Recorder::default()).await;
    negotiation.abort();
    assert!(negotiation.await.unwrap_err().is_cancelled());
    let withdrawn = agent.recv().await;
    assert_eq!((&withdrawn["method"], &withdrawn["params"]["requestId"]), (&json!("$/cancel_request"), &init["id"]));
    // Under v1's rules a batch is one -32600; under v2's each entry is answered, in an array.
    agent.send(r#"[{"jsonrpc":"2.0","id":"b","method":"session/request_permission","params":{}}]"#).await;
    let answer = agent.recv().await;
    assert!(answer.is_object(), "read under v2's rules: {answer}");
    assert_eq!(answer["error"]["code"], acp_rpc::codes::INVALID_REQUEST, "{answer}");
}
