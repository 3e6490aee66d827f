//! What every v2 pairing must show, on the wire and in the client's own report.
//!
//! The clients (the official SDKs' and ours) run the same scenario and report each step on
//! stderr as `RESULT {"step": ..., "ok": ...}`, then `END` (see `tests/interop/ts-v2/client.mjs`
//! for the steps). The agents (ours, and the official SDKs' in `tests/interop/`) do the same
//! turns, so one expectation holds for every pairing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::relay::{Dir, Outcome};
use super::wire::{self, Msg, Turn};

/// What the agent reports in the turn whose permission the client allows.
pub const ALLOWED: &[&str] = &[
    "answer",
    "user_message",
    "state running",
    "agent_message_chunk*",
    "tool_call_update pending",
    "state requires_action",
    "request session/request_permission",
    "state running",
    "tool_call_update in_progress",
    "tool_call_content_chunk",
    "tool_call_update completed",
    "agent_message_chunk*",
    "idle end_turn",
];

/// ... and in the turn the client cancels while the permission request is pending: the agent
/// withdraws the request (`$/cancel_request`), settles the tool call, and confirms the cancel.
/// The withdrawal is left out only where the client answered the request (`cancelled`, right
/// after its `session/cancel`, as the spec allows and our client does) before the agent went
/// on: then nothing was pending any more (see [`check_cancel`]).
pub const CANCELLED: &[&str] = &[
    "answer",
    "user_message",
    "state running",
    "agent_message_chunk*",
    "tool_call_update pending",
    "state requires_action",
    "request session/request_permission",
    "$/cancel_request",
    "tool_call_update cancelled",
    "idle cancelled",
];

/// A session root holding `notes.txt`, whose first line is unique to the run (the agent's
/// tool reads it, so it can only reach the client through the turn). Removed on drop.
pub struct Root {
    pub path: PathBuf,
    pub first_line: String,
    pub notes: String,
}

impl Root {
    pub fn new(tag: &str) -> Root {
        let unique = format!("{}-{}", std::process::id(), tag);
        let dir = std::env::temp_dir().join(format!("acp-interop-v2-{unique}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let first_line = format!("Notes of run {unique}-{nanos:x}");
        let notes = format!("{first_line}\nsecond line\n");
        std::fs::write(dir.join("notes.txt"), &notes).unwrap();
        Root { path: dir.canonicalize().unwrap(), first_line, notes }
    }

    pub fn as_str(&self) -> &str {
        self.path.to_str().unwrap()
    }

    /// The notes' lines as the tool reports them (joined, without the last newline).
    pub fn head(&self) -> String {
        self.notes.lines().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

impl AsRef<Path> for Root {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// The client's report: each step's `RESULT`, by step; panics unless it got to `END`.
pub fn report(outcome: &Outcome) -> HashMap<String, Value> {
    let stderr = &outcome.client_stderr;
    assert!(stderr.lines().any(|l| l == "END"), "the client did not finish its scenario\n{}", outcome.dump());
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("bad RESULT line {l}: {e}")))
        .map(|v| (v["step"].as_str().unwrap_or_default().to_owned(), v))
        .collect()
}

/// Runs `check`, failing the test with the whole exchange when it returns an error.
pub fn verify(outcome: &Outcome, check: impl FnOnce(&[Msg], &HashMap<String, Value>) -> Result<(), String>) {
    let msgs = wire::messages(&outcome.wire).unwrap_or_else(|e| panic!("{e}\n{}", outcome.dump()));
    let report = report(outcome);
    if let Err(e) = check(&msgs, &report) {
        panic!("{e}\n{}", outcome.dump());
    }
}

macro_rules! ensure {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(format!($($why)+));
        }
    };
}
pub(crate) use ensure;

/// A step of the client's report that succeeded.
pub fn step<'a>(report: &'a HashMap<String, Value>, name: &str) -> Result<&'a Value, String> {
    let step = report.get(name).ok_or_else(|| format!("the client did not report step {name}"))?;
    ensure!(step["ok"] == true, "step {name} failed: {step}");
    Ok(step)
}

/// The whole v2 scenario against `agent_name` (see the module docs): initialize, session/new
/// and list, a turn whose permission is allowed, a turn cancelled during its permission
/// request, a resume that replays both, close, and a prompt to the closed session refused.
pub fn full(outcome: &Outcome, root: &Root, agent_name: &str) {
    verify(outcome, |msgs, report| {
        // ---- initialize: v2 both ways -----------------------------------------------------
        let init = wire::request(msgs, Dir::ToAgent, "initialize", 0)?;
        ensure!(init == 0, "initialize is not the first message");
        ensure!(msgs[init].json["params"]["protocolVersion"] == 2, "the client did not ask for v2");
        let answer = &msgs[wire::answer(msgs, init)?].json["result"];
        ensure!(answer["protocolVersion"] == 2, "the agent did not answer v2: {answer}");
        ensure!(answer["info"]["name"] == agent_name, "unexpected agent: {answer}");
        ensure!(answer["capabilities"]["session"].is_object(), "no session capability: {answer}");
        let reported = step(report, "initialize")?;
        ensure!(reported["protocolVersion"] == 2 && reported["agentName"] == agent_name, "client saw {reported}");

        // ---- session/new and session/list ----------------------------------------------------
        let new = wire::request(msgs, Dir::ToAgent, "session/new", 0)?;
        ensure!(msgs[new].json["params"]["cwd"] == root.as_str(), "session/new in {}", msgs[new].json);
        let session = msgs[wire::answer(msgs, new)?].json["result"]["sessionId"].clone();
        ensure!(session.is_string(), "no session id");
        ensure!(step(report, "session-new")?["sessionId"] == session, "the client saw another session");
        let listed = &msgs[wire::answer(msgs, wire::request(msgs, Dir::ToAgent, "session/list", 0)?)?].json;
        let entry = json!({"sessionId": session, "cwd": root.as_str()});
        let has_entry = |sessions: &Value| {
            sessions
                .as_array()
                .is_some_and(|all| all.iter().any(|s| s["sessionId"] == session && s["cwd"] == root.as_str()))
        };
        ensure!(has_entry(&listed["result"]["sessions"]), "session/list lacks {entry}: {listed}");
        ensure!(has_entry(&step(report, "session-list")?["sessions"]), "the client's list lacks {entry}");

        // ---- the allowed turn -------------------------------------------------------------------
        let allowed = wire::turn(msgs, wire::request(msgs, Dir::ToAgent, "session/prompt", 0)?)?;
        ensure!(allowed.events == ALLOWED, "allowed turn: {:#?}", allowed.events);
        let permission = allowed.indices[6];
        let tool_call = &msgs[allowed.indices[4]].json["params"]["update"];
        let asked = &msgs[permission].json["params"];
        ensure!(
            asked["subject"]["toolCall"]["toolCallId"] == tool_call["toolCallId"],
            "the permission request is not about the turn's tool call: {asked}"
        );
        let chosen = &msgs[wire::answer(msgs, permission)?].json["result"]["outcome"];
        let allow_once = asked["options"].as_array().and_then(|o| o.iter().find(|o| o["kind"] == "allow_once"));
        ensure!(
            chosen["outcome"] == "selected" && Some(&chosen["optionId"]) == allow_once.map(|o| &o["optionId"]),
            "the client did not allow: {chosen}"
        );
        let content = &msgs[allowed.indices[9]].json["params"]["update"]["content"];
        ensure!(content["content"]["text"] == root.head(), "the tool's content is not the notes: {content}");
        ensure!(
            allowed.agent_messages.last().is_some_and(|(_, text)| text.contains(&root.first_line)),
            "the closing message does not quote the notes: {:?}",
            allowed.agent_messages
        );
        let seen = step(report, "prompt-allow")?;
        ensure!(seen["stopReason"] == "end_turn", "the client saw {seen}");
        ensure!(seen["messageId"] == allowed.user_message.as_str(), "the client saw another user message: {seen}");
        ensure!(seen["tools"][0]["statuses"] == json!(["pending", "in_progress", "completed"]), "client tools: {seen}");
        ensure!(seen["tools"][0]["content"] == root.head(), "the client's tool content: {seen}");
        ensure!(seen["text"].as_str().is_some_and(|t| t.contains(&root.first_line)), "the client's text: {seen}");

        // ---- the cancelled turn -----------------------------------------------------------------
        let cancelled = wire::turn(msgs, wire::request(msgs, Dir::ToAgent, "session/prompt", 1)?)?;
        check_cancel(msgs, &cancelled, &session)?;
        let seen = step(report, "prompt-cancel")?;
        ensure!(seen["stopReason"] == "cancelled", "the client saw {seen}");
        ensure!(seen["tools"][0]["statuses"] == json!(["pending", "cancelled"]), "client tools: {seen}");
        // `null`: our client answers at its own cancel and does not wait for the agent's.
        ensure!(seen["permissions"][0]["cancelRequestSeen"] != false, "the client never saw $/cancel_request: {seen}");

        // ---- resume with replay, close, refusal -------------------------------------------------
        check_replay(msgs, &session, &[&allowed, &cancelled])?;
        step(report, "session-resume")?;
        check_closed(msgs, report)
    });
}

/// `session/close` answered, then the client's prompt to the closed session refused -32002 with
/// nothing about the session after it.
fn check_closed(msgs: &[Msg], report: &HashMap<String, Value>) -> Result<(), String> {
    let close = wire::request(msgs, Dir::ToAgent, "session/close", 0)?;
    let closed = &msgs[wire::answer(msgs, close)?].json;
    ensure!(closed["result"].is_object(), "session/close: {closed}");
    step(report, "session-close")?;
    let after = wire::request(msgs, Dir::ToAgent, "session/prompt", 2)?;
    let refused = &msgs[wire::answer(msgs, after)?].json;
    ensure!(refused["error"]["code"] == -32002, "a prompt to a closed session: {refused}");
    // Only the closed session's: a client may go on with another one (`--cancel-work`).
    let session = &msgs[after].json["params"]["sessionId"];
    ensure!(
        !msgs[after..].iter().any(|m| m.dir == Dir::ToClient
            && m.method() == Some("session/update")
            && m.json["params"]["sessionId"] == *session),
        "updates after the refused prompt"
    );
    let seen = step(report, "prompt-closed")?;
    ensure!(seen["refused"] == true && seen["error"]["code"] == -32002, "the client saw {seen}");
    Ok(())
}

/// The cancelled turn (see [`CANCELLED`]) with the cancel's causes and effects across both
/// directions: the client's `session/cancel` after the permission request; the agent's
/// `$/cancel_request` for that request after it, unless the client had answered the request
/// before the agent went on; and the client's answer: the `cancelled` outcome.
fn check_cancel(msgs: &[Msg], turn: &Turn, session: &Value) -> Result<(), String> {
    let permission = turn.indices[6];
    let answered = wire::answer(msgs, permission)?;
    ensure!(
        msgs[answered].json["result"]["outcome"] == json!({"outcome": "cancelled"}),
        "permission answered {}",
        msgs[answered].json
    );
    let cancel = (permission..msgs.len())
        .find(|&i| msgs[i].dir == Dir::ToAgent && msgs[i].method() == Some("session/cancel"))
        .ok_or("no session/cancel after the permission request")?;
    ensure!(msgs[cancel].json["params"]["sessionId"] == *session, "session/cancel of another session");
    ensure!(cancel < answered, "the permission request was answered before the client's session/cancel");
    let withdrawn = turn.events.iter().position(|e| e == "$/cancel_request").map(|at| turn.indices[at]);
    match withdrawn {
        Some(withdrawn) => {
            ensure!(turn.events == CANCELLED, "cancelled turn: {:#?}", turn.events);
            ensure!(cancel < withdrawn, "$/cancel_request came before the client's session/cancel");
            ensure!(
                msgs[withdrawn].json["params"]["requestId"] == msgs[permission].json["id"],
                "$/cancel_request names another request: {}",
                msgs[withdrawn].json
            );
        }
        None => {
            let expected: Vec<&str> = CANCELLED.iter().copied().filter(|e| *e != "$/cancel_request").collect();
            ensure!(turn.events == expected, "cancelled turn: {:#?}", turn.events);
            ensure!(
                answered < turn.indices[7],
                "the agent went on without withdrawing the pending permission request: {:#?}",
                turn.events
            );
        }
    }
    Ok(())
}

/// `session/resume` with `replayFrom: start` replays the conversation before its answer: each
/// turn's user message (the id and the prompt) and agent messages (the id and the text the
/// chunks added up to), in order.
fn check_replay(msgs: &[Msg], session: &Value, turns: &[&Turn]) -> Result<(), String> {
    let resume = wire::request(msgs, Dir::ToAgent, "session/resume", 0)?;
    ensure!(msgs[resume].json["params"]["replayFrom"] == json!({"type": "start"}), "resume without replay");
    let answered = wire::answer(msgs, resume)?;
    ensure!(msgs[answered].json["result"].is_object(), "session/resume: {}", msgs[answered].json);
    let replayed: Vec<(String, String, Value)> = msgs[resume..answered]
        .iter()
        .filter(|m| {
            m.dir == Dir::ToClient && m.method() == Some("session/update") && m.json["params"]["sessionId"] == *session
        })
        .map(|m| {
            let u = &m.json["params"]["update"];
            (
                u["sessionUpdate"].as_str().unwrap_or("?").to_owned(),
                u["messageId"].as_str().unwrap_or("?").to_owned(),
                u["content"].clone(),
            )
        })
        .collect();
    let mut expected = Vec::new();
    for turn in turns {
        let prompt = msgs[turn.prompt].json["params"]["prompt"].clone();
        expected.push(("user_message".to_owned(), turn.user_message.clone(), prompt));
        for (id, text) in &turn.agent_messages {
            expected.push(("agent_message".to_owned(), id.clone(), json!([{"type": "text", "text": text}])));
        }
    }
    ensure!(replayed == expected, "replayed:\n{replayed:#?}\nexpected:\n{expected:#?}");
    Ok(())
}

/// The allowed turn of our demo's v1 agent served through the v2 bridge: its v1 updates
/// translated (a `plan` is a `plan_update`, a `tool_call` the first `tool_call_update`), and
/// the read fails, as a v2 client has no file system for a v1 agent to use.
pub const BRIDGED_ALLOWED: &[&str] = &[
    "answer",
    "user_message",
    "state running",
    "plan_update",
    "agent_message_chunk*",
    "tool_call_update pending",
    "state requires_action",
    "request session/request_permission",
    "state running",
    "tool_call_update in_progress",
    "tool_call_update failed",
    "agent_message_chunk*",
    "idle end_turn",
];

/// ... and the turn the client cancels during the permission request.
pub const BRIDGED_CANCELLED: &[&str] = &[
    "answer",
    "user_message",
    "state running",
    "plan_update",
    "agent_message_chunk*",
    "tool_call_update pending",
    "state requires_action",
    "request session/request_permission",
    "$/cancel_request",
    "idle cancelled",
];

/// The scenario against our demo's v1 agent behind the v2 bridge (`--bridged`), a v1 agent
/// without `session/list`, `loadSession` or `session/close`: v2 initialize, a session, an empty
/// list, the allowed turn and the cancelled one, `session/resume` with replay answered with an
/// empty replay (the agent cannot load; the schema allows it), then close and the prompt to
/// the closed session refused, as from a native v2 agent.
pub fn bridged(outcome: &Outcome, agent_name: &str) {
    verify(outcome, |msgs, report| {
        let init = wire::request(msgs, Dir::ToAgent, "initialize", 0)?;
        let answer = &msgs[wire::answer(msgs, init)?].json["result"];
        ensure!(answer["protocolVersion"] == 2 && answer["info"]["name"] == agent_name, "{answer}");
        ensure!(answer["capabilities"]["session"]["mcp"]["stdio"] == json!({}), "{answer}");
        ensure!(step(report, "initialize")?["protocolVersion"] == 2, "the client saw another version");
        let session = step(report, "session-new")?["sessionId"].clone();
        ensure!(step(report, "session-list")?["sessions"] == json!([]), "a v1 agent without a list lists nothing");

        let allowed = wire::turn(msgs, wire::request(msgs, Dir::ToAgent, "session/prompt", 0)?)?;
        ensure!(allowed.events == BRIDGED_ALLOWED, "allowed turn: {:#?}", allowed.events);
        let asked = &msgs[allowed.indices[7]].json["params"];
        let tool_call = &msgs[allowed.indices[5]].json["params"]["update"];
        ensure!(asked["subject"]["toolCall"]["toolCallId"] == tool_call["toolCallId"], "{asked}");
        ensure!(asked["title"].is_string(), "{asked}");
        let seen = step(report, "prompt-allow")?;
        ensure!(seen["stopReason"] == "end_turn", "the client saw {seen}");
        ensure!(seen["messageId"] == allowed.user_message.as_str(), "the client saw another user message: {seen}");
        ensure!(seen["tools"][0]["statuses"] == json!(["pending", "in_progress", "failed"]), "client tools: {seen}");

        // The agent withdraws its permission request (`$/cancel_request`) unless the client
        // answered it first (see `check_cancel`).
        let cancelled = wire::turn(msgs, wire::request(msgs, Dir::ToAgent, "session/prompt", 1)?)?;
        let events: Vec<&str> =
            cancelled.events.iter().map(String::as_str).filter(|e| *e != "$/cancel_request").collect();
        let expected: Vec<&str> = BRIDGED_CANCELLED.iter().copied().filter(|e| *e != "$/cancel_request").collect();
        ensure!(events == expected, "cancelled turn: {:#?}", cancelled.events);
        let cancel = wire::request(msgs, Dir::ToAgent, "session/cancel", 0);
        ensure!(cancel.is_err() || msgs[cancel?].json["params"]["sessionId"] == session, "session/cancel");
        ensure!(step(report, "prompt-cancel")?["stopReason"] == "cancelled", "the client did not see the cancel");

        let resume = wire::request(msgs, Dir::ToAgent, "session/resume", 0)?;
        let answered = wire::answer(msgs, resume)?;
        ensure!(msgs[answered].json["result"].is_object(), "session/resume with replay: {}", msgs[answered].json);
        let replayed = msgs[resume..answered]
            .iter()
            .filter(|m| m.dir == Dir::ToClient && m.method() == Some("session/update"))
            .filter(|m| m.json["params"]["update"]["sessionUpdate"] != "state_update")
            .count();
        ensure!(replayed == 0, "a v1 agent without loadSession replays nothing, yet {replayed} updates came");
        step(report, "session-resume")?;
        check_closed(msgs, report)
    });
}

/// A v2 client against a v1-only agent: it asked for 2, the agent answered 1, and the client
/// went no further (no other request, no notification).
pub fn refused_v1(msgs: &[Msg]) -> Result<Value, String> {
    let init = wire::request(msgs, Dir::ToAgent, "initialize", 0)?;
    ensure!(msgs[init].json["params"]["protocolVersion"] == 2, "the client did not ask for v2");
    let answer = msgs[wire::answer(msgs, init)?].json["result"].clone();
    ensure!(answer["protocolVersion"] == 1, "the agent did not answer v1: {answer}");
    let more: Vec<&Value> =
        msgs.iter().filter(|m| m.dir == Dir::ToAgent && m.method() != Some("initialize")).map(|m| &m.json).collect();
    ensure!(more.is_empty(), "the client went on after a v1 answer: {more:?}");
    Ok(answer)
}

/// The cancellable work of our demo agent (`--cancel-work` of both SDKs' clients), after the
/// scenario, on a second session: `/slow` and `/ticker`, each cancelled by the client once the
/// agent advertised `capabilities.cancel`, first with an unknown id (-32602), then with the
/// real one (`{}`); the agent confirms with the final status or the exit, withdraws the
/// capability in the same patch, and the turn goes on to `end_turn`.
pub fn cancel_work(outcome: &Outcome) {
    verify(outcome, |msgs, report| {
        slow_cancelled(msgs, report)?;
        ticker_cancelled(msgs, report)
    });
}

/// `/ticker` after `/slow` (the fifth prompt), its terminal cancelled by the client (see
/// [`cancel_work`]), as the agent (ours, or a peer script on an SDK's agent API) sent it and as
/// the client reported it (`terminal-cancel`).
fn ticker_cancelled(msgs: &[Msg], report: &HashMap<String, Value>) -> Result<(), String> {
    let ticker = wire::request(msgs, Dir::ToAgent, "session/prompt", 4)?;
    ensure!(msgs[ticker].json["params"]["prompt"][0]["text"] == "/ticker", "{}", msgs[ticker].json);
    let (terminal, rest) =
        cancelled(msgs, ticker, "terminal/cancel", ("terminal_update", "terminal_output_chunk"), "terminalId")?;
    let updates: Vec<&Value> = rest.iter().map(|&i| &msgs[i].json["params"]["update"]).collect();
    let exit = updates
        .iter()
        .position(|u| u["sessionUpdate"] == "terminal_update" && u["terminalId"] == terminal.as_str())
        .ok_or("no terminal_update after the cancel")?;
    let expected = json!({"sessionUpdate": "terminal_update", "terminalId": terminal,
                          "exitStatus": {"signal": "SIGTERM"}, "capabilities": null});
    ensure!(*updates[exit] == expected, "the terminal's exit: {}", updates[exit]);
    // The terminal's exit leaves the tool call to the agent, which completes it.
    let completed = updates.iter().position(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed");
    ensure!(completed.is_some_and(|c| c > exit), "the tool call is not completed after the exit: {updates:?}");
    let shown = msgs.iter().skip(ticker).any(|m| {
        m.json["params"]["update"]["sessionUpdate"] == "tool_call_content_chunk"
            && m.json["params"]["update"]["content"] == json!({"type": "terminal", "terminalId": terminal})
    });
    ensure!(shown, "no tool call shows the terminal");
    let seen = step(report, "terminal-cancel")?;
    ensure!(seen["unknown"]["code"] == -32602, "the unknown terminal: {seen}");
    ensure!(seen["answer"] == json!({}) && seen["id"] == terminal.as_str(), "{seen}");
    ensure!(seen["statuses"] == json!(["pending", "in_progress", "completed"]), "client statuses: {seen}");
    ensure!(seen["stopReason"] == "end_turn" && seen["cancellableAfter"] == false, "{seen}");
    ensure!(seen["output"].as_str().is_some_and(|o| o.starts_with("tick 1\r\n")), "the output as decoded: {seen}");
    let exited = seen["terminals"].as_array().and_then(|t| t.last()).map(|t| &t["exitStatus"]);
    ensure!(exited == Some(&json!({"signal": "SIGTERM"})), "the client's last terminal update: {seen}");
    Ok(())
}

/// `/slow` after the scenario, on a second session (the fourth prompt), its tool call cancelled
/// by the client (see [`cancel_work`]), as the agent (ours, or a peer script on an SDK's agent
/// API) sent it and as the client reported it (`tool-call-cancel`).
pub fn slow_cancelled(msgs: &[Msg], report: &HashMap<String, Value>) -> Result<(), String> {
    let first = &msgs[wire::request(msgs, Dir::ToAgent, "session/prompt", 0)?].json["params"]["sessionId"];
    let slow = wire::request(msgs, Dir::ToAgent, "session/prompt", 3)?;
    ensure!(msgs[slow].json["params"]["prompt"][0]["text"] == "/slow", "{}", msgs[slow].json);
    ensure!(msgs[slow].json["params"]["sessionId"] != *first, "the work runs on a session of its own");
    let (call, rest) =
        cancelled(msgs, slow, "tool_call/cancel", ("tool_call_update", "tool_call_content_chunk"), "toolCallId")?;
    let final_status = rest
        .iter()
        .map(|&i| &msgs[i].json["params"]["update"])
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["toolCallId"] == call.as_str())
        .ok_or("no tool_call_update after the cancel")?;
    // `null`, not omitted: an omitted field would leave the capability advertised.
    ensure!(
        final_status["status"] == "cancelled" && final_status.get("capabilities") == Some(&Value::Null),
        "the call's final patch: {final_status}"
    );
    let seen = step(report, "tool-call-cancel")?;
    ensure!(seen["unknown"]["code"] == -32602, "the unknown call: {seen}");
    ensure!(seen["answer"] == json!({}) && seen["id"] == call.as_str(), "{seen}");
    ensure!(seen["statuses"] == json!(["pending", "in_progress", "cancelled"]), "client statuses: {seen}");
    ensure!(seen["stopReason"] == "end_turn" && seen["cancellableAfter"] == false, "{seen}");
    ensure!(seen["said"].as_str().is_some_and(|t| t.contains("Stopped the slow task")), "{seen}");
    Ok(())
}

/// The turn of the prompt at `at`, in which the client cancels with `method` what a `kind`
/// update made cancellable, once a `progress` update showed it running: the id, and the
/// indices of the turn's messages after the answer to the real cancel (checked: the unknown id
/// refused -32602 first, the real one answered `{}` after the capability was advertised and
/// the progress shown, the turn ending `end_turn`).
fn cancelled(
    msgs: &[Msg],
    at: usize,
    method: &str,
    (kind, progress): (&str, &str),
    key: &str,
) -> Result<(String, Vec<usize>), String> {
    let turn = wire::turn(msgs, at)?;
    ensure!(turn.stop_reason == "end_turn", "cancelling one piece of work ended the turn: {:?}", turn.events);
    let advertised = turn
        .indices
        .iter()
        .copied()
        .find(|&i| {
            let u = &msgs[i].json["params"]["update"];
            u["sessionUpdate"] == kind && u["capabilities"] == json!({"cancel": {}})
        })
        .ok_or_else(|| format!("no {kind} advertised capabilities.cancel: {:?}", turn.events))?;
    let id = msgs[advertised].json["params"]["update"][key].as_str().unwrap_or_default().to_owned();
    let end = *turn.indices.last().unwrap();
    let unknown = wire::request(msgs, Dir::ToAgent, method, 0)?;
    let real = wire::request(msgs, Dir::ToAgent, method, 1)?;
    ensure!(advertised < unknown && real < end, "the cancels are not within the turn");
    let running = turn.indices.iter().copied().find(|&i| {
        let u = &msgs[i].json["params"]["update"];
        u["sessionUpdate"] == progress && u[key] == id.as_str()
    });
    ensure!(running.is_some_and(|p| advertised < p && p < unknown), "no {progress} before the client's {method}");
    ensure!(msgs[unknown].json["params"][key] != id.as_str(), "{}", msgs[unknown].json);
    let refused = &msgs[wire::answer(msgs, unknown)?].json;
    ensure!(refused["error"]["code"] == -32602, "{method} of an unknown id: {refused}");
    ensure!(msgs[real].json["params"][key] == id.as_str(), "{}", msgs[real].json);
    ensure!(msgs[real].json["params"]["sessionId"] == msgs[at].json["params"]["sessionId"], "another session");
    let answered = wire::answer(msgs, real)?;
    ensure!(msgs[answered].json["result"] == json!({}), "{method}: {}", msgs[answered].json);
    let rest: Vec<usize> = turn.indices.iter().copied().filter(|&i| i > answered).collect();
    // Before the cancel was answered, the work had not stopped on its own.
    let early = turn.indices.iter().copied().filter(|&i| i < answered).any(|i| {
        let u = &msgs[i].json["params"]["update"];
        u[key] == id.as_str()
            && (u["exitStatus"].is_object() || ["cancelled", "completed", "failed"].iter().any(|s| u["status"] == *s))
    });
    ensure!(!early, "the work ended before the client's {method} was answered");
    Ok((id, rest))
}
