//! The v2 bridge (`acp_rpc::v2_bridge`) at its edges, as `v2_bridge.rs` drives it (a raw JSON
//! v2 client, a raw v1 handler): prompts inside batches, a second prompt of a busy session,
//! permission requests that fail, are withdrawn or given up, a withdrawn resume, and the
//! translations of config options, resumed sessions and logout.

mod bridge_common;
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_rpc::{Connection, ErrorObject, Handler, IncomingNotification, IncomingRequest, RawValue};
use bridge_common::*;
use common::*;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// How long a test waits for something that should come at once before calling it a hang.
const HANG: Duration = Duration::from_secs(3);

/// A scriptable raw v1 agent: sessions `sess-1`, `sess-2`, ... and a prompt whose first word
/// picks the turn. It records what it was sent.
#[derive(Clone, Default)]
struct V1Agent {
    seen: Arc<Mutex<Vec<Value>>>,
    sessions: Arc<AtomicU64>,
    /// Released by the test: lets a `wait` turn go on.
    release: Arc<Notify>,
    /// Prompts run one at a time (a v1 agent that queues a second prompt of a session).
    serial: Arc<tokio::sync::Mutex<()>>,
    /// Advertise only `loadSession`, no `sessionCapabilities.resume`.
    load_only: bool,
}

impl V1Agent {
    fn saw(&self, method: &str, params: Option<&RawValue>) {
        let params = params.map_or(Value::Null, |p| serde_json::from_str(p.get()).unwrap_or(Value::Null));
        self.seen.lock().unwrap().push(json!({"method": method, "params": params}));
    }

    fn seen(&self, method: &str) -> Vec<Value> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|m| m["method"] == method).map(|m| m["params"].clone()).collect()
    }
}

async fn update(req: &IncomingRequest, session: &str, update: Value) {
    req.peer.notify("session/update", &json!({"sessionId": session, "update": update})).await.unwrap();
}

/// A v1 config option (`id`; v2 renamed it `configId`).
fn mode_option(current: &str) -> Value {
    json!({"id": "mode", "name": "Mode", "category": "mode", "type": "select", "currentValue": current,
        "options": [{"value": "ask", "name": "Ask"}, {"value": "code", "name": "Code"}]})
}

fn chunk(text_: &str) -> Value {
    json!({"sessionUpdate": "agent_message_chunk", "content": text(text_)})
}

impl Handler for V1Agent {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        self.saw(&req.method, req.params.as_deref());
        match &*req.method {
            "initialize" if self.load_only => answer(json!({
                "protocolVersion": 1,
                "agentInfo": {"name": "v1-agent", "version": "1.0"},
                "agentCapabilities": {"loadSession": true},
            })),
            "initialize" => answer(json!({
                "protocolVersion": 1,
                "agentInfo": {"name": "v1-agent", "version": "1.0"},
                // No `auth.logout`: this v1 agent does not log out.
                "agentCapabilities": {"loadSession": true, "mcpCapabilities": {"http": true},
                    "sessionCapabilities": {"resume": {}}},
                "authMethods": [{"id": "login", "name": "Log in"}],
            })),
            "authenticate" => answer(json!({})),
            "session/new" => {
                let n = self.sessions.fetch_add(1, Ordering::Relaxed) + 1;
                answer(json!({"sessionId": format!("sess-{n}"), "configOptions": [mode_option("ask")]}))
            }
            "session/resume" => answer(json!({
                "modes": {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}]},
                "configOptions": [mode_option("ask")],
            })),
            "session/set_config_option" => answer(json!({"configOptions": [mode_option("code")]})),
            "session/load" => {
                // A slow load that does not watch its cancellation.
                tokio::time::sleep(Duration::from_millis(400)).await;
                answer(json!({}))
            }
            "session/prompt" => self.prompt(req).await,
            "_slow" => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                answer(json!({"slow": true}))
            }
            _ => Err(ErrorObject::method_not_found(&req.method)),
        }
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        self.saw(&notification.method, notification.params.as_deref());
    }
}

impl V1Agent {
    async fn prompt(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let params: Value = serde_json::from_str(req.params.as_deref().unwrap().get()).unwrap();
        let session = params["sessionId"].as_str().unwrap_or_default().to_owned();
        let word = params["prompt"][0]["text"].as_str().unwrap_or_default().to_owned();
        // `wait` and `second` share the agent's one prompt slot.
        let _serial = if word == "wait" || word == "second" { Some(self.serial.lock().await) } else { None };
        match &*word {
            "chat" => {
                update(&req, &session, chunk("hi")).await;
                answer(json!({"stopReason": "end_turn"}))
            }
            "switch" => {
                update(
                    &req,
                    &session,
                    json!({"sessionUpdate": "config_option_update", "configOptions": [mode_option("code")]}),
                )
                .await;
                answer(json!({"stopReason": "end_turn"}))
            }
            "wait" => {
                update(&req, &session, chunk("a1")).await;
                self.release.notified().await;
                update(&req, &session, chunk("a2")).await;
                answer(json!({"stopReason": "end_turn"}))
            }
            "second" => {
                // Takes a moment before its first word.
                tokio::time::sleep(Duration::from_millis(300)).await;
                update(&req, &session, chunk("b1")).await;
                answer(json!({"stopReason": "end_turn"}))
            }
            "ask" => {
                update(&req, &session, json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit"}))
                    .await;
                let ask = json!({"sessionId": session, "toolCall": {"toolCallId": "t1"},
                    "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}]});
                // Whatever the client says (or fails to say), the agent goes on without the tool.
                let _ = req.peer.request_raw("session/request_permission", Some(&raw(&ask.to_string()))).await;
                update(&req, &session, chunk("went on without the tool")).await;
                answer(json!({"stopReason": "end_turn"}))
            }
            "wait-ask" => {
                update(&req, &session, chunk("a1")).await;
                self.release.notified().await;
                let ask = json!({"sessionId": session, "toolCall": {"toolCallId": "t9", "title": "Edit"},
                    "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}]});
                let _ = req.peer.request_raw("session/request_permission", Some(&raw(&ask.to_string()))).await;
                answer(json!({"stopReason": "end_turn"}))
            }
            "refuse" => Err(ErrorObject::new(-32000, "busy: one prompt at a time")),
            "ask-timeout" => {
                update(&req, &session, json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit"}))
                    .await;
                let ask = json!({"sessionId": session, "toolCall": {"toolCallId": "t1"},
                    "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}]});
                // The agent's own timeout: it withdraws the request and goes on without the tool.
                let params = raw(&ask.to_string());
                let call = req.peer.request_raw("session/request_permission", Some(&params));
                let _ = tokio::time::timeout(Duration::from_millis(50), call).await;
                // Then works a while without it.
                tokio::time::sleep(Duration::from_millis(300)).await;
                update(&req, &session, chunk("went on without the tool")).await;
                answer(json!({"stopReason": "end_turn"}))
            }
            _ => {
                req.cancel.cancelled().await;
                answer(json!({"stopReason": "cancelled"}))
            }
        }
    }
}

/// A v2 client of `agent`, initialized, with a session open (request id 1); the session's id.
async fn with_session(agent: &V1Agent) -> (RawPeer, String) {
    let mut client = bridged(agent);
    initialize_v2(&mut client).await;
    let session = new_session(&mut client, 1).await;
    (client, session)
}

/// Opens a session; returns its id.
async fn new_session(client: &mut RawPeer, id: u64) -> String {
    let (answer, _) = request(client, id, "session/new", json!({"cwd": "/work"})).await;
    answer["result"]["sessionId"].as_str().expect("a session id").to_owned()
}

fn prompt(id: u64, session: &str, text_: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [text(text_)]}})
}

/// A short name for each message: an answer's id, a request's method, an update's kind (with
/// a chunk's text).
fn shape(msg: &Value) -> String {
    if msg.is_array() {
        return format!("batch answer {}", msg.as_array().unwrap().len());
    }
    let update = &msg["params"]["update"];
    match (msg.get("method").and_then(Value::as_str), update["sessionUpdate"].as_str()) {
        (Some("session/update"), Some("state_update")) => format!("state {}", update["state"].as_str().unwrap()),
        (Some("session/update"), Some("agent_message_chunk")) => {
            format!("chunk {}", update["content"]["text"].as_str().unwrap_or_default())
        }
        (Some("session/update"), Some(kind)) => kind.to_owned(),
        (Some(method), _) => method.to_owned(),
        (None, _) => format!("answer {}", msg["id"]),
    }
}

/// Answers -32800 to the request that `withdrawal` (a `$/cancel_request`) withdraws.
async fn answer_withdrawn(client: &mut RawPeer, withdrawal: &Value) {
    let id = &withdrawal["params"]["requestId"];
    client
        .send_json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32800, "message": "Request cancelled"}}))
        .await;
}

/// Everything the client gets until `idles` idle updates came, or nothing came for `HANG`.
async fn collect(client: &mut RawPeer, idles: usize) -> Vec<Value> {
    let mut seen = Vec::new();
    let mut count = 0;
    while count < idles {
        let Some(line) = client.try_recv_line(HANG).await else { break };
        let msg: Value = serde_json::from_str(&line).unwrap();
        if msg["params"]["update"]["state"] == "idle" {
            count += 1;
        }
        seen.push(msg);
    }
    seen
}

/// A batch is answered as one line once all its requests are, so a prompt's answer inside one
/// is written late: the turn's updates are held until then, and nothing the bridge reads from
/// the agent (the batch's other answer among it) waits for it.
#[tokio::test]
async fn a_prompt_batched_with_another_request_is_not_deadlocked() {
    let agent = V1Agent::default();
    let (mut client, session) = with_session(&agent).await;
    let batch = json!([
        prompt(2, &session, "chat"),
        {"jsonrpc": "2.0", "id": 3, "method": "_slow", "params": {}},
    ]);
    client.send_json(batch).await;
    let seen = collect(&mut client, 1).await;
    let shapes: Vec<String> = seen.iter().map(shape).collect();
    assert_eq!(shapes, ["batch answer 2", "user_message", "state running", "chunk hi", "state idle"], "{seen:#?}");
}

/// Two prompts of two sessions in one batch: each is accepted by its own first update, and
/// both turns run to their idle.
#[tokio::test]
async fn two_prompts_of_two_sessions_in_one_batch_both_run() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    initialize_v2(&mut client).await;
    let one = new_session(&mut client, 1).await;
    let two = new_session(&mut client, 2).await;
    client.send_json(json!([prompt(3, &one, "chat"), prompt(4, &two, "chat")])).await;
    let seen = collect(&mut client, 2).await;
    let idles = seen.iter().filter(|m| m["params"]["update"]["state"] == "idle").count();
    assert_eq!(idles, 2, "both turns end: {seen:#?}");
}

/// A client's error answer to a permission request is not the turn's cancellation: the agent
/// goes on, and the turn reports `running` again.
#[tokio::test]
async fn a_turn_that_goes_on_after_a_failed_permission_request_runs_again() {
    let agent = V1Agent::default();
    let (mut client, session) = with_session(&agent).await;
    client.send_json(prompt(2, &session, "ask")).await;
    let mut seen = until_permission(&mut client).await;
    let permission = seen.last().unwrap().clone();
    // The client fails to show the dialog: an error, no `session/cancel`.
    client
        .send_json(json!({"jsonrpc": "2.0", "id": permission["id"],
            "error": {"code": -32603, "message": "Internal error: the dialog could not be shown"}}))
        .await;
    seen.extend(collect(&mut client, 1).await);
    let shapes: Vec<String> = seen.iter().map(shape).collect();
    assert_eq!(
        shapes,
        [
            "answer 2",
            "user_message",
            "state running",
            "tool_call_update",
            "state requires_action",
            "session/request_permission",
            "state running",
            "chunk went on without the tool",
            "state idle",
        ],
        "{seen:#?}"
    );
}

/// A second prompt while a turn of the session runs, which the v1 agent queues: the first
/// turn's updates do not accept it (they would be filed under it); it is accepted when the
/// agent takes it up, so each turn reports its own lifecycle, and no idle comes while a turn is
/// accepted and not ended.
#[tokio::test]
async fn a_second_prompt_of_a_running_session_is_not_followed_by_an_early_idle() {
    let agent = V1Agent::default();
    let (mut client, session) = with_session(&agent).await;
    client.send_json(prompt(2, &session, "wait")).await;
    let mut seen = recv_until(&mut client, |msg| shape(msg) == "chunk a1").await;
    // A second prompt while the first runs: the v1 agent queues it behind the first.
    client.send_json(prompt(3, &session, "second")).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    agent.release.notify_one();
    seen.extend(collect(&mut client, 2).await);
    let shapes: Vec<String> = seen.iter().map(shape).collect();
    // The v1 agent queued the second prompt: it is accepted when the agent takes it up, after
    // the first turn's idle, and no idle comes while a turn is accepted and not ended.
    assert_eq!(
        shapes,
        [
            "answer 2",
            "user_message",
            "state running",
            "chunk a1",
            "chunk a2",
            "state idle",
            "answer 3",
            "user_message",
            "state running",
            "chunk b1",
            "state idle"
        ],
        "{shapes:#?}"
    );
}

/// The agent withdraws its own permission request (a timeout: `$/cancel_request` is passed on,
/// the client answers -32800): it waits no longer, so the turn runs again, before what the
/// agent sends next.
#[tokio::test]
async fn a_turn_that_goes_on_after_the_agent_withdrew_its_permission_request_runs_again() {
    let agent = V1Agent::default();
    let (mut client, session) = with_session(&agent).await;
    client.send_json(prompt(2, &session, "ask-timeout")).await;
    let mut seen = recv_until(&mut client, |msg| msg["method"] == "$/cancel_request").await;
    // As the spec requires: the withdrawn request is answered -32800.
    answer_withdrawn(&mut client, seen.last().unwrap()).await;
    seen.extend(collect(&mut client, 1).await);
    let shapes: Vec<String> = seen.iter().map(shape).collect();
    let asked = shapes.iter().position(|s| s == "session/request_permission").expect("asked");
    assert_eq!(
        shapes[asked + 1..].iter().filter(|s| *s != "$/cancel_request").collect::<Vec<_>>(),
        ["state running", "chunk went on without the tool", "state idle"],
        "{shapes:#?}"
    );
}

/// A second prompt the v1 agent refuses (busy) leaves the running turn tracked: its permission
/// requests still report `requires_action` and `running`.
#[tokio::test]
async fn a_refused_second_prompt_does_not_untrack_the_running_turn() {
    let agent = V1Agent::default();
    let (mut client, session) = with_session(&agent).await;
    client.send_json(prompt(2, &session, "wait-ask")).await;
    let mut seen = recv_until(&mut client, |msg| shape(msg) == "chunk a1").await;
    let (refused, _) = request(&mut client, 3, "session/prompt", prompt(3, &session, "refuse")["params"].clone()).await;
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    agent.release.notify_one();
    seen.extend(until_permission(&mut client).await);
    let permission = seen.last().unwrap().clone();
    answer_permission(&mut client, &permission, json!({"outcome": "selected", "optionId": "yes"})).await;
    seen.extend(collect(&mut client, 1).await);
    let shapes: Vec<String> = seen.iter().map(shape).collect();
    assert_eq!(
        shapes,
        [
            "answer 2",
            "user_message",
            "state running",
            "chunk a1",
            "state requires_action",
            "session/request_permission",
            "state running",
            "state idle"
        ],
        "{seen:#?}"
    );
}

/// A permission request whose handler is given up (the agent withdrew it; the client answers
/// after the bridge's grace period) still ends its count: the session's later requests report
/// their states.
#[tokio::test]
async fn a_dropped_permission_request_does_not_silence_the_sessions_later_ones() {
    let agent = V1Agent::default();
    let (mut client, session) = with_session(&agent).await;
    client.send_json(prompt(2, &session, "ask-timeout")).await;
    let seen = recv_until(&mut client, |msg| msg["method"] == "$/cancel_request").await;
    // A client (or its user interface) that takes a moment to answer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    answer_withdrawn(&mut client, seen.last().unwrap()).await;
    collect(&mut client, 1).await;
    // The next turn asks again, normally.
    client.send_json(prompt(3, &session, "ask")).await;
    let mut seen = until_permission(&mut client).await;
    let permission = seen.last().unwrap().clone();
    answer_permission(&mut client, &permission, json!({"outcome": "selected", "optionId": "yes"})).await;
    seen.extend(collect(&mut client, 1).await);
    let shapes: Vec<String> = seen.iter().map(shape).collect();
    assert_eq!(
        shapes,
        [
            "answer 3",
            "user_message",
            "state running",
            "tool_call_update",
            "state requires_action",
            "session/request_permission",
            "state running",
            "chunk went on without the tool",
            "state idle"
        ],
        "{seen:#?}"
    );
}

/// A resume without a replay cursor, on an agent that only loads, drops the load's replay
/// until the load ends, however it ends: withdrawn, and given up after the grace period, it
/// leaves the session's later updates alone.
#[tokio::test]
async fn a_withdrawn_resume_does_not_silence_the_session() {
    let agent = V1Agent { load_only: true, ..V1Agent::default() };
    // A short grace on the client's connection (the v1 side keeps the default, 100 ms): the
    // withdrawn resume's handler is dropped before the v1 side answers it.
    let mut client = bridged_on(Connection::new().cancel_grace(Duration::from_millis(10)), &agent);
    initialize_v2(&mut client).await;
    let session = new_session(&mut client, 1).await;
    client
        .send_json(json!({"jsonrpc": "2.0", "id": 2, "method": "session/resume",
            "params": {"sessionId": session, "cwd": "/work"}}))
        .await;
    while agent.seen("session/load").is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    client.send_json(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 2}})).await;
    let (withdrawn, _) = client.recv_until_id(json!(2)).await;
    assert_eq!(withdrawn["error"]["code"], -32800, "{withdrawn}");
    // The load is over on the agent's side by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    client.send_json(prompt(3, &session, "chat")).await;
    let seen = collect(&mut client, 1).await;
    let shapes: Vec<String> = seen.iter().map(shape).collect();
    assert_eq!(shapes, ["answer 3", "user_message", "state running", "chunk hi", "state idle"], "{seen:#?}");
}

/// v2 renamed a config option's `id` to `configId`: in session answers, in
/// `session/set_config_option` (whose select value v2 tags `type: id`), and in
/// `config_option_update`.
#[tokio::test]
async fn config_options_reach_the_v2_client_with_their_config_id() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    initialize_v2(&mut client).await;
    let (answer, _) = request(&mut client, 1, "session/new", json!({"cwd": "/work"})).await;
    let option = &answer["result"]["configOptions"][0];
    assert_eq!(option["configId"], "mode", "session/new: {answer}");
    let session = answer["result"]["sessionId"].as_str().unwrap().to_owned();
    let (set, _) = request(
        &mut client,
        2,
        "session/set_config_option",
        json!({"sessionId": session, "configId": "mode", "value": "code"}),
    )
    .await;
    assert_eq!(set["result"]["configOptions"][0]["configId"], "mode", "set_config_option: {set}");
    client.send_json(prompt(3, &session, "switch")).await;
    let seen = collect(&mut client, 1).await;
    let update = seen.iter().find(|m| shape(m) == "config_option_update").expect("the update");
    assert_eq!(update["params"]["update"]["configOptions"][0]["configId"], "mode", "{update}");
}

/// A v1 `session/resume` answer reaches the v2 client without `modes` (gone in v2) and with
/// `configId`s.
#[tokio::test]
async fn a_resumed_session_loses_its_modes() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    initialize_v2(&mut client).await;
    let (answer, _) = request(&mut client, 1, "session/resume", json!({"sessionId": "sess-9", "cwd": "/work"})).await;
    assert!(answer["result"].is_object(), "{answer}");
    assert!(answer["result"].get("modes").is_none(), "v2 has no modes: {answer}");
}

/// v2 requires `auth/logout` of an agent that advertises `authMethods`; a v1 agent without
/// `auth.logout` cannot log out, and the bridge says so instead of passing the call on.
#[tokio::test]
async fn auth_logout_is_answered_when_auth_methods_are_advertised() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    let init = initialize_v2(&mut client).await;
    assert_eq!(init["result"]["authMethods"][0]["methodId"], "login", "{init}");
    let (logout, _) = request(&mut client, 1, "auth/logout", json!({})).await;
    // Answered (v2 requires the method), not passed to a v1 agent that has no `logout`: an
    // error that says why, since the agent cannot log out.
    assert_eq!(logout["error"]["code"], -32600, "{logout}");
    assert!(logout["error"]["message"].as_str().unwrap().contains("auth.logout"), "{logout}");
    assert!(agent.seen("logout").is_empty());
}
