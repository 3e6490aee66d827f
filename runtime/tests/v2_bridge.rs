//! The v2 bridge (`acp_rpc::v2_bridge`): a v1 agent behind `ProtocolRouter::with_v2_bridge`,
//! driven by a v2 client written as raw JSON lines, so each test sees exactly what goes over
//! the wire: the translation both ways, the prompt lifecycle (acceptance, `user_message`,
//! states, the idle end), cancellation, refusals, and what the bridge does where a v1 agent
//! lacks what v2 requires.

mod bridge_common;
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_rpc::{ErrorObject, Handler, IncomingNotification, IncomingRequest, RawValue};
use bridge_common::*;
use common::*;
use serde_json::{Value, json};

const SESSION: &str = "sess-1";

/// A v1 agent written on the raw handler, so it can send what typed code would not (members
/// set to `null`, chunks with and without ids). It records what it was sent.
#[derive(Clone, Default)]
struct V1Agent {
    seen: Arc<Mutex<Vec<Value>>>,
    /// Advertise `loadSession`, and replay a short history on `session/load`.
    loads: bool,
}

impl V1Agent {
    fn saw(&self, method: &str, params: Option<&RawValue>) {
        let params = params.map_or(Value::Null, |p| serde_json::from_str(p.get()).unwrap());
        self.seen.lock().unwrap().push(json!({"method": method, "params": params}));
    }

    fn seen(&self, method: &str) -> Vec<Value> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|m| m["method"] == method).map(|m| m["params"].clone()).collect()
    }
}

async fn update(req: &IncomingRequest, update: Value) {
    req.peer.notify("session/update", &json!({"sessionId": SESSION, "update": update})).await.unwrap();
}

impl Handler for V1Agent {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        self.saw(&req.method, req.params.as_deref());
        match &*req.method {
            "initialize" => answer(json!({
                "protocolVersion": 1,
                "agentInfo": {"name": "v1-agent", "version": "1.0"},
                "agentCapabilities": {
                    "loadSession": self.loads,
                    "promptCapabilities": {"image": true, "audio": false},
                    "mcpCapabilities": {"http": true},
                },
                "authMethods": [{"id": "login", "name": "Log in"}],
            })),
            "authenticate" => answer(json!({})),
            "session/new" => answer(json!({
                "sessionId": SESSION,
                "modes": {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}]},
            })),
            "session/load" => {
                update(&req, json!({"sessionUpdate": "user_message_chunk", "content": text("earlier")})).await;
                update(&req, json!({"sessionUpdate": "agent_message_chunk", "content": text("answer")})).await;
                answer(json!({"modes": null}))
            }
            "session/prompt" => self.prompt(req).await,
            _ => Err(ErrorObject::method_not_found(&req.method)),
        }
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        self.saw(&notification.method, notification.params.as_deref());
    }
}

impl V1Agent {
    /// The turn the prompt's first word asks for.
    async fn prompt(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let params: Value = serde_json::from_str(req.params.as_deref().unwrap().get()).unwrap();
        if params["sessionId"] != SESSION {
            return Err(ErrorObject::new(-32002, "session not found"));
        }
        match params["prompt"][0]["text"].as_str().unwrap_or_default() {
            "hello" => {
                update(
                    &req,
                    json!({"sessionUpdate": "plan", "entries": [
                    {"content": "greet", "priority": "high", "status": "pending"}]}),
                )
                .await;
                update(&req, json!({"sessionUpdate": "agent_message_chunk", "content": text("Hel")})).await;
                update(&req, json!({"sessionUpdate": "agent_message_chunk", "content": text("lo")})).await;
                update(&req, json!({"sessionUpdate": "current_mode_update", "currentModeId": "ask"})).await;
                update(
                    &req,
                    json!({"sessionUpdate": "available_commands_update", "availableCommands": [
                    {"name": "web", "description": "Search", "input": {"hint": "query"}}]}),
                )
                .await;
                update(
                    &req,
                    json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read", "kind": "read"}),
                )
                .await;
                let asked = req
                    .peer
                    .request_raw(
                        "session/request_permission",
                        Some(&raw(&json!({"sessionId": SESSION, "toolCall": {"toolCallId": "t1", "title": "Read a.txt", "kind": null},
                            "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}]})
                        .to_string())),
                    )
                    .await
                    .unwrap();
                let outcome: Value = serde_json::from_str(asked.get()).unwrap();
                assert_eq!(outcome["outcome"]["optionId"], "yes", "{outcome}");
                update(&req, json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed", "title": null}))
                    .await;
                update(&req, json!({"sessionUpdate": "agent_thought_chunk", "content": text("hmm")})).await;
                update(
                    &req,
                    json!({"sessionUpdate": "agent_message_chunk", "messageId": "own", "content": text("Bye")}),
                )
                .await;
                answer(json!({"stopReason": "end_turn"}))
            }
            "ask" => {
                update(&req, json!({"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "Edit"})).await;
                let ask = json!({"sessionId": SESSION, "toolCall": {"toolCallId": "t2"},
                    "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}]});
                let _ = req.peer.request_raw("session/request_permission", Some(&raw(&ask.to_string()))).await;
                answer(json!({"stopReason": "cancelled"}))
            }
            "refuse" => Err(ErrorObject::invalid_params("no thanks")),
            "fail-late" => {
                update(&req, json!({"sessionUpdate": "agent_message_chunk", "content": text("working")})).await;
                Err(ErrorObject::internal_error("the model went away"))
            }
            "fs" => {
                let read = req
                    .peer
                    .request_raw("fs/read_text_file", Some(&raw(r#"{"sessionId":"sess-1","path":"/a"}"#)))
                    .await;
                let code = match read {
                    Err(acp_rpc::Error::Rpc(e)) => e.code.to_string(),
                    other => format!("{other:?}"),
                };
                update(&req, json!({"sessionUpdate": "agent_message_chunk", "content": text(&code)})).await;
                answer(json!({"stopReason": "end_turn"}))
            }
            _ => {
                // Works until cancelled.
                req.cancel.cancelled().await;
                self.saw("(prompt cancelled)", None);
                answer(json!({"stopReason": "cancelled"}))
            }
        }
    }
}

async fn open_session(client: &mut RawPeer) {
    initialize_v2(client).await;
    let (answer, _) = request(client, 1, "session/new", json!({"cwd": "/work"})).await;
    assert_eq!(answer["result"]["sessionId"], SESSION, "{answer}");
}

fn prompt(id: u64, text_: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
        "params": {"sessionId": SESSION, "prompt": [text(text_)]}})
}

/// The session's updates (and anything else) up to and including the idle state update.
async fn until_idle(client: &mut RawPeer) -> Vec<Value> {
    recv_until(client, |msg| msg["params"]["update"]["state"] == "idle").await
}

/// A short name for each message: an answer's id, a request's method, an update's kind.
fn shape(msg: &Value) -> String {
    let update = &msg["params"]["update"];
    match (msg.get("method").and_then(Value::as_str), update["sessionUpdate"].as_str()) {
        (Some("session/update"), Some("state_update")) => format!("state {}", update["state"].as_str().unwrap()),
        (Some("session/update"), Some(kind)) => kind.to_owned(),
        (Some(method), _) => method.to_owned(),
        (None, _) => format!("answer {}", msg["id"]),
    }
}

#[tokio::test]
async fn initialize_is_translated_both_ways() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    let answer = initialize_v2(&mut client).await;
    assert_eq!(
        answer["result"],
        json!({
            "protocolVersion": 2,
            "info": {"name": "v1-agent", "version": "1.0"},
            "capabilities": {"session": {"prompt": {"image": {}}, "mcp": {"stdio": {}, "http": {}}}},
            "authMethods": [{"methodId": "login", "name": "Log in", "type": "agent"}],
        }),
        "{answer}"
    );
    let sent = &agent.seen("initialize")[0];
    assert_eq!(
        *sent,
        json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "v2-client", "version": "2.0"}})
    );
    let (login, _) = request(&mut client, 1, "auth/login", json!({"methodId": "login"})).await;
    assert_eq!(login["result"], json!({}), "{login}");
    assert_eq!(agent.seen("authenticate"), vec![json!({"methodId": "login"})]);
}

#[tokio::test]
async fn cancelling_one_tool_call_or_terminal_is_refused_without_reaching_the_v1_agent() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    initialize_v2(&mut client).await;
    for (id, method, params) in [
        (1, "tool_call/cancel", json!({"sessionId": "s1", "toolCallId": "call_1"})),
        (2, "terminal/cancel", json!({"sessionId": "s1", "terminalId": "term_1"})),
    ] {
        let (answer, _) = request(&mut client, id, method, params).await;
        assert_eq!(answer["error"]["code"], acp_rpc::codes::INVALID_PARAMS, "{answer}");
        assert!(agent.seen(method).is_empty(), "{method} reached the v1 agent");
    }
}

#[tokio::test]
async fn a_v1_client_still_gets_the_v1_agent_itself() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    let params = json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": true}}});
    let (answer, _) = request(&mut client, 0, "initialize", params.clone()).await;
    assert_eq!(answer["result"]["protocolVersion"], 1, "{answer}");
    assert_eq!(answer["result"]["agentCapabilities"]["promptCapabilities"]["image"], true, "{answer}");
    assert_eq!(agent.seen("initialize"), vec![params]);
}

#[tokio::test]
async fn session_new_gets_its_mcp_servers_and_loses_its_modes() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    initialize_v2(&mut client).await;
    let (answer, _) = request(&mut client, 1, "session/new", json!({"cwd": "/work"})).await;
    assert_eq!(answer["result"], json!({"sessionId": SESSION}), "{answer}");
    assert_eq!(agent.seen("session/new"), vec![json!({"cwd": "/work", "mcpServers": []})]);
    // v2's server configs in v1's shapes: a stdio server untagged, with `args` and `env`; an
    // HTTP one with `headers` (v1 requires them, v2 does not).
    let servers = json!([
        {"type": "stdio", "name": "fs", "command": "/bin/mcp-fs"},
        {"type": "http", "name": "web", "url": "https://mcp.example/"},
    ]);
    request(&mut client, 2, "session/new", json!({"cwd": "/work", "mcpServers": servers})).await;
    assert_eq!(
        agent.seen("session/new")[1]["mcpServers"],
        json!([
            {"name": "fs", "command": "/bin/mcp-fs", "args": [], "env": []},
            {"type": "http", "name": "web", "url": "https://mcp.example/", "headers": []},
        ])
    );
}

#[tokio::test]
async fn a_v1_turn_reaches_the_v2_client_as_a_v2_turn() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    open_session(&mut client).await;
    client.send_json(prompt(2, "hello")).await;

    let mut seen = until_permission(&mut client).await;
    let permission = seen.last().unwrap().clone();
    assert_eq!(
        permission["params"],
        json!({"sessionId": SESSION, "title": "Read a.txt",
            "subject": {"type": "tool_call", "toolCall": {"toolCallId": "t1", "title": "Read a.txt"}},
            "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}]})
    );
    answer_permission(&mut client, &permission, json!({"outcome": "selected", "optionId": "yes"})).await;
    seen.extend(until_idle(&mut client).await);

    let shapes: Vec<String> = seen.iter().map(shape).collect();
    assert_eq!(
        shapes,
        [
            "answer 2",
            "user_message",
            "state running",
            "plan_update",
            "agent_message_chunk",
            "agent_message_chunk",
            "available_commands_update",
            "tool_call_update",
            "state requires_action",
            "session/request_permission",
            "state running",
            "tool_call_update",
            "agent_thought_chunk",
            "agent_message_chunk",
            "state idle",
        ],
        "{seen:#?}"
    );
    let update = |i: usize| &seen[i]["params"]["update"];
    assert!(seen[0]["result"]["messageId"].is_string(), "{}", seen[0]);
    assert_eq!(update(1)["content"], json!([text("hello")]));
    assert_eq!(update(1)["messageId"], seen[0]["result"]["messageId"]);
    assert_eq!(
        update(3)["plan"],
        json!({"type": "items", "planId": "plan-1", "entries": [{"content": "greet", "priority": "high", "status": "pending"}]})
    );
    // One message for the two chunks; the thought and the closing message have their own.
    let ids: Vec<&Value> = [4, 5, 12, 13].iter().map(|&i| &update(i)["messageId"]).collect();
    assert!(ids[0].is_string() && ids[0] == ids[1], "{ids:?}");
    assert!(ids[2].is_string() && ids[2] != ids[0], "{ids:?}");
    assert_eq!(ids[3], "own", "the agent's own id is kept");
    assert_eq!(update(6)["availableCommands"][0]["input"], json!({"type": "text", "hint": "query"}));
    assert_eq!(
        *update(7),
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "title": "Read", "kind": "read", "status": "pending"})
    );
    // `null` in v1 is "not given": in v2 it would clear the title.
    assert_eq!(*update(11), json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}));
    assert_eq!(update(14)["stopReason"], "end_turn");
}

#[tokio::test]
async fn a_prompt_the_v1_agent_refuses_is_refused_without_updates() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    open_session(&mut client).await;
    client.send_json(prompt(2, "refuse")).await;
    let (answer, before) = client.recv_until_id(json!(2)).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(answer["error"]["message"], "Invalid params: no thanks", "{answer}");
    assert!(before.is_empty(), "{before:?}");
    // Nothing follows: the next answer is the next request's.
    let (listed, between) = request(&mut client, 3, "session/list", json!({})).await;
    assert!(between.is_empty(), "{between:?}");
    assert_eq!(listed["result"], json!({"sessions": []}), "no `list` capability: no sessions");
}

#[tokio::test]
async fn an_error_after_acceptance_ends_the_turn_with_stop_reason_error() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    open_session(&mut client).await;
    client.send_json(prompt(2, "fail-late")).await;
    let seen = until_idle(&mut client).await;
    let shapes: Vec<String> = seen.iter().map(shape).collect();
    assert_eq!(shapes, ["answer 2", "user_message", "state running", "agent_message_chunk", "state idle"]);
    let idle = &seen[4]["params"]["update"];
    assert_eq!(idle["stopReason"], "error", "{idle}");
    assert_eq!(idle["error"]["code"], -32603, "{idle}");
}

#[tokio::test]
async fn a_cancelled_prompt_is_accepted_and_ends_idle_cancelled() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    open_session(&mut client).await;
    client.send_json(prompt(2, "work")).await;
    // Nothing yet: the agent has shown no sign of taking the prompt.
    assert_eq!(client.try_recv_line(Duration::from_millis(100)).await, None);
    client.send_json(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": SESSION}})).await;
    let seen = until_idle(&mut client).await;
    let shapes: Vec<String> = seen.iter().map(shape).collect();
    assert_eq!(shapes, ["answer 2", "user_message", "state running", "state idle"]);
    assert_eq!(seen[3]["params"]["update"]["stopReason"], "cancelled");
    assert_eq!(agent.seen("session/cancel"), vec![json!({"sessionId": SESSION})]);
}

#[tokio::test]
async fn a_withdrawn_prompt_is_answered_cancelled_and_withdrawn_from_the_agent() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    open_session(&mut client).await;
    client.send_json(prompt(2, "work")).await;
    while agent.seen("session/prompt").is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    client.send_json(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 2}})).await;
    let (answer, before) = client.recv_until_id(json!(2)).await;
    assert_eq!(answer["error"]["code"], -32800, "{answer}");
    assert!(before.is_empty(), "{before:?}");
    let (_, after) = request(&mut client, 3, "session/list", json!({})).await;
    assert!(after.is_empty(), "no turn was reported: {after:?}");
    // The v1 agent's prompt is withdrawn too: its handler sees the cancellation.
    tokio::time::timeout(LIMIT, async {
        while agent.seen("(prompt cancelled)").is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the v1 prompt was not cancelled");
    assert!(agent.seen("session/cancel").is_empty(), "withdrawn, not cancelled as a session");
}

#[tokio::test]
async fn a_turn_cancelled_during_a_permission_request_does_not_run_again() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    open_session(&mut client).await;
    client.send_json(prompt(2, "ask")).await;
    let mut seen = until_permission(&mut client).await;
    let permission = seen.last().unwrap().clone();
    assert_eq!(permission["params"]["title"], "Permission requested", "the tool call has no title: {permission}");
    client.send_json(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": SESSION}})).await;
    answer_permission(&mut client, &permission, json!({"outcome": "cancelled"})).await;
    seen.extend(until_idle(&mut client).await);
    let shapes: Vec<String> = seen.iter().map(shape).filter(|s| s != "$/cancel_request").collect();
    assert_eq!(
        shapes,
        [
            "answer 2",
            "user_message",
            "state running",
            "tool_call_update",
            "state requires_action",
            "session/request_permission",
            "state idle"
        ],
        "{seen:#?}"
    );
    assert_eq!(seen.last().unwrap()["params"]["update"]["stopReason"], "cancelled");
}

#[tokio::test]
async fn the_v1_agent_gets_no_client_file_system() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    open_session(&mut client).await;
    client.send_json(prompt(2, "fs")).await;
    let seen = until_idle(&mut client).await;
    let said: Vec<&Value> =
        seen.iter().filter(|m| shape(m) == "agent_message_chunk").map(|m| &m["params"]["update"]["content"]).collect();
    assert_eq!(said, [&text("-32601")], "{seen:#?}");
    assert!(!seen.iter().any(|m| m["method"] == "fs/read_text_file"), "{seen:#?}");
}

#[tokio::test]
async fn close_without_the_capability_cancels_the_turn_and_reports_its_end_first() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    open_session(&mut client).await;
    client.send_json(prompt(2, "work")).await;
    let (closed, before) = request(&mut client, 3, "session/close", json!({"sessionId": SESSION})).await;
    assert_eq!(closed["result"], json!({}), "{closed}");
    // The cancelled turn's idle goes before the close answer (the schema asks for it there).
    let idle = before.iter().find(|m| m["params"]["update"]["state"] == "idle").expect("the turn's idle");
    assert_eq!(idle["params"]["update"]["stopReason"], "cancelled", "{before:#?}");
    assert_eq!(agent.seen("session/cancel"), vec![json!({"sessionId": SESSION})]);
}

#[tokio::test]
async fn a_closed_session_is_gone_from_the_connection_as_from_a_native_v2_agent() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    open_session(&mut client).await;
    let (closed, _) = request(&mut client, 2, "session/close", json!({"sessionId": SESSION})).await;
    assert_eq!(closed["result"], json!({}), "{closed}");
    // A prompt for it is not found, and the agent never sees it: no update follows.
    let (refused, _) = request(&mut client, 3, "session/prompt", prompt(3, "hello")["params"].clone()).await;
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
    assert_eq!(refused["error"]["data"]["sessionId"], SESSION, "{refused}");
    assert_eq!(agent.seen("session/prompt").len(), 0, "the v1 agent is not asked");
    let params = json!({"sessionId": SESSION, "configId": "mode", "value": "ask"});
    let (config, _) = request(&mut client, 4, "session/set_config_option", params).await;
    assert_eq!(config["error"]["code"], -32002, "{config}");
    // Closing it again succeeds, as the schema asks.
    let (again, _) = request(&mut client, 5, "session/close", json!({"sessionId": SESSION})).await;
    assert_eq!(again["result"], json!({}), "{again}");
    // Nothing about it arrives afterwards; the next message is the answer to an unrelated call.
    let (listed, between) = request(&mut client, 6, "session/list", json!({})).await;
    assert!(listed.get("result").is_some() && between.is_empty(), "{listed} {between:?}");
}

#[tokio::test]
async fn resume_without_resume_or_load_resumes_only_the_open_sessions() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    open_session(&mut client).await;
    let params = json!({"sessionId": SESSION, "cwd": "/work"});
    let (open, _) = request(&mut client, 2, "session/resume", params).await;
    assert_eq!(open["result"], json!({}), "{open}");
    let params = json!({"sessionId": "sess-other", "cwd": "/work"});
    let (unknown, _) = request(&mut client, 3, "session/resume", params).await;
    assert_eq!(unknown["error"]["code"], -32002, "{unknown}");
    assert_eq!(unknown["error"]["data"]["sessionId"], "sess-other", "{unknown}");
    // A replay the agent cannot perform (it cannot load) is a success with an empty replay, as
    // the schema allows.
    let params = json!({"sessionId": SESSION, "cwd": "/work", "replayFrom": {"type": "start"}});
    let (replay, replayed) = request(&mut client, 4, "session/resume", params).await;
    assert_eq!(replay["result"], json!({}), "{replay}");
    assert!(replayed.is_empty(), "{replayed:?}");
    let params = json!({"sessionId": "sess-other", "cwd": "/work", "replayFrom": {"type": "start"}});
    let (unknown, _) = request(&mut client, 40, "session/resume", params).await;
    assert_eq!(unknown["error"]["code"], -32002, "{unknown}");
    let params = json!({"sessionId": SESSION, "cwd": "/work", "replayFrom": {"type": "later"}});
    let (cursor, _) = request(&mut client, 41, "session/resume", params).await;
    assert_eq!(cursor["error"]["code"], -32602, "an unknown cursor: {cursor}");
    // Closed, it is no longer open.
    request(&mut client, 5, "session/close", json!({"sessionId": SESSION})).await;
    let (closed, _) = request(&mut client, 6, "session/resume", json!({"sessionId": SESSION, "cwd": "/work"})).await;
    assert_eq!(closed["error"]["code"], -32002, "{closed}");
    assert!(agent.seen("session/load").is_empty() && agent.seen("session/resume").is_empty());
}

#[tokio::test]
async fn resume_with_replay_loads_the_session_and_replays_it_as_v2() {
    let agent = V1Agent { loads: true, ..V1Agent::default() };
    let mut client = bridged(&agent);
    initialize_v2(&mut client).await;
    let params = json!({"sessionId": SESSION, "cwd": "/work", "replayFrom": {"type": "start"}});
    let (answer, replay) = request(&mut client, 1, "session/resume", params).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    assert_eq!(agent.seen("session/load"), vec![json!({"sessionId": SESSION, "cwd": "/work", "mcpServers": []})]);
    let kinds: Vec<String> = replay.iter().map(shape).collect();
    assert_eq!(kinds, ["user_message_chunk", "agent_message_chunk"]);
    let ids: Vec<&Value> = replay.iter().map(|m| &m["params"]["update"]["messageId"]).collect();
    assert!(ids.iter().all(|id| id.is_string()) && ids[0] != ids[1], "{ids:?}");
}

#[tokio::test]
async fn resume_without_a_cursor_loads_quietly_when_the_agent_only_loads() {
    let agent = V1Agent { loads: true, ..V1Agent::default() };
    let mut client = bridged(&agent);
    initialize_v2(&mut client).await;
    let (answer, replay) =
        request(&mut client, 1, "session/resume", json!({"sessionId": SESSION, "cwd": "/work"})).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    assert!(replay.is_empty(), "a resume without a cursor replays nothing: {replay:?}");
    assert_eq!(agent.seen("session/load").len(), 1);
}

#[tokio::test]
async fn a_client_that_closes_its_side_after_its_requests_still_gets_the_answers() {
    // As `printf '...' | agent` does: every request is in before the end of input.
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    initialize_v2(&mut client).await;
    client.send_json(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w"}})).await;
    client.send_json(prompt(2, "fail-late")).await;
    client.close_input();
    let mut seen = Vec::new();
    while let Some(line) = client.try_recv_line(LIMIT).await {
        seen.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    // The answers; notifications after the end of input are not written (the runtime's
    // contract, as for a v1 implementation served directly).
    let answers: Vec<&Value> = seen.iter().filter(|m| m.get("method").is_none()).collect();
    assert_eq!(answers.len(), 2, "{seen:#?}");
    assert_eq!(answers[0]["result"]["sessionId"], SESSION, "{seen:#?}");
    assert!(answers[1]["result"]["messageId"].is_string(), "{seen:#?}");
}

#[tokio::test]
async fn the_v1_agent_is_cancelled_when_the_v2_client_goes_away() {
    let agent = V1Agent::default();
    let mut client = bridged(&agent);
    open_session(&mut client).await;
    client.send_json(prompt(2, "work")).await;
    while agent.seen("session/prompt").is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    client.close_input();
    // The v1 connection ends too: the agent's prompt handler is cancelled and dropped, and
    // the handler (with the agent) released.
    tokio::time::timeout(LIMIT, async {
        while Arc::strong_count(&agent.seen) > 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the v1 agent was not released");
}
