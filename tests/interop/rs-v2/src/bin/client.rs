//! The official Rust SDK's v2 client as a peer of tests/tests/interop_v2.rs: ACP on its own
//! stdin/stdout (the test connects it to an agent and records the wire), one
//! `RESULT {"step": ..., "ok": ...}` line per step on stderr, then `END`.
//!
//!   client <session cwd>
//!   client --cancel-work <session cwd>
//!
//! The scenario and its step names are those of tests/interop/ts-v2/client.mjs, so that the
//! test checks both SDKs the same way: initialize (v2; an agent that selects a lower version is
//! reported as `LowerVersion` and ends the run), session-new, session-list, prompt-allow,
//! prompt-cancel (session/cancel from the permission handler, then the `cancelled` outcome once
//! the agent's `$/cancel_request` arrives), session-resume (replay from the start),
//! session-close, prompt-closed. With `--cancel-work`, then on a second session the
//! cancellable work of our demo agent, as client.mjs does it: tool-call-cancel (`/slow`; after
//! the call advertised `capabilities.cancel` and reported progress, `tool_call/cancel` for an
//! unknown call, then for that one) and terminal-cancel (`/ticker`, after the terminal's first
//! output, `terminal/cancel` likewise).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_interop_rs_v2::{error_fields, report};
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v2::{ConnectionTo, InitializeOutcome, Responder, schema};
use agent_client_protocol::{Agent, Client, Error, SelectedInitializeResponse, Stdio};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// How long any one wait may take; the test has its own, longer, deadline.
const WAIT: Duration = Duration::from_secs(20);
/// How long the permission handler waits for the agent's `$/cancel_request`.
const CANCEL_REQUEST_WAIT: Duration = Duration::from_secs(5);

/// What the permission handler does, and what it saw in the current turn.
#[derive(Default)]
struct Permissions {
    cancel: bool,
    seen: Vec<Value>,
}

type Shared = Arc<Mutex<Permissions>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Permissions> {
    shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A step failed and was reported: the scenario ends there.
struct Stopped;

/// Runs one step: its fields are reported with `ok: true`, its error with `ok: false`.
async fn step<T>(name: &str, run: impl Future<Output = Result<(T, Value), Value>>) -> Result<T, Stopped> {
    match tokio::time::timeout(WAIT, run).await {
        Ok(Ok((value, fields))) => {
            report(name, true, fields);
            Ok(value)
        }
        Ok(Err(fields)) => {
            report(name, false, fields);
            Err(Stopped)
        }
        Err(_) => {
            report(name, false, json!({ "error": { "message": format!("timed out after {WAIT:?}") } }));
            Err(Stopped)
        }
    }
}

fn failed(error: Error) -> Value {
    json!({ "error": error_fields(&error) })
}

/// Reads the session's updates until the idle update that ends the turn: an idle that follows
/// a non-idle state of this turn (an idle snapshot from before the prompt is not its end).
async fn read_turn(updates: &mut UnboundedReceiver<Value>, session: &str) -> Result<Value, Value> {
    let mut kinds = Vec::new();
    let mut tools: Vec<Value> = Vec::new();
    let mut text = String::new();
    let mut user_message = Value::Null;
    let mut active = false;
    loop {
        let notification =
            updates.recv().await.ok_or_else(|| json!({ "error": { "message": "the connection ended" } }))?;
        if notification["sessionId"] != session {
            continue;
        }
        let update = &notification["update"];
        let kind = update["sessionUpdate"].as_str().unwrap_or("?");
        let idle = kind == "state_update" && update["state"] == "idle";
        if idle && !active {
            continue;
        }
        kinds.push(match update["state"].as_str() {
            Some(state) => format!("{kind} {state}"),
            None => kind.to_owned(),
        });
        if idle {
            return Ok(json!({
                "kinds": kinds,
                "stopReason": update["stopReason"],
                "text": text,
                "userMessageId": user_message,
                "tools": tools,
            }));
        }
        match kind {
            "state_update" => active = true,
            "user_message" => user_message = update["messageId"].clone(),
            "agent_message_chunk" => text.push_str(update["content"]["text"].as_str().unwrap_or_default()),
            "tool_call_update" => {
                let id = &update["toolCallId"];
                let at = match tools.iter().position(|t| &t["toolCallId"] == id) {
                    Some(at) => at,
                    None => {
                        tools.push(json!({ "toolCallId": id, "statuses": [], "content": "" }));
                        tools.len() - 1
                    }
                };
                if let Some(status) = update["status"].as_str() {
                    tools[at]["statuses"].as_array_mut().unwrap().push(status.into());
                }
            }
            "tool_call_content_chunk" => {
                let added = update["content"]["content"]["text"].as_str().unwrap_or_default();
                if let Some(tool) = tools.iter_mut().find(|t| t["toolCallId"] == update["toolCallId"]) {
                    let content = format!("{}{added}", tool["content"].as_str().unwrap_or_default());
                    tool["content"] = content.into();
                }
            }
            _ => {}
        }
    }
}

/// What a turn of cancellable work cancels: a tool call or a terminal.
#[derive(Clone, Copy)]
enum Work {
    ToolCall,
    Terminal,
}

impl Work {
    /// The update that advertises the capability, the one that shows the work's progress, and
    /// the member naming the work.
    fn keys(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Work::ToolCall => ("tool_call_update", "tool_call_content_chunk", "toolCallId"),
            Work::Terminal => ("terminal_update", "terminal_output_chunk", "terminalId"),
        }
    }

    async fn cancel(self, cx: &ConnectionTo<Agent>, session: &str, id: &str) -> Result<Value, Error> {
        match self {
            Work::ToolCall => {
                let request = schema::CancelToolCallRequest::new(session.to_owned(), id.to_owned());
                let answer = cx.send_request(request).block_task().await?;
                serde_json::to_value(answer).map_err(Error::into_internal_error)
            }
            Work::Terminal => {
                let request = schema::CancelTerminalRequest::new(session.to_owned(), id.to_owned());
                let answer = cx.send_request(request).block_task().await?;
                serde_json::to_value(answer).map_err(Error::into_internal_error)
            }
        }
    }
}

/// Prompts `text`; once an update advertises `capabilities.cancel` for `work` and its first
/// progress arrived (so that the cancel stops running work), cancels an unknown one (the SDK
/// sends what it is given) and then that one; reads to the idle update.
async fn cancel_turn(
    cx: &ConnectionTo<Agent>,
    session: &str,
    updates: &mut UnboundedReceiver<Value>,
    text: &str,
    work: Work,
) -> Result<Value, Value> {
    let prompt = schema::PromptRequest::new(session.to_owned(), vec![text.to_string().into()]);
    let accepted = cx.send_request(prompt).block_task().await.map_err(failed)?;
    let (advertises, progress, key) = work.keys();
    let (mut kinds, mut statuses, mut terminals) = (Vec::new(), Vec::new(), Vec::new());
    let (mut output, mut said) = (Vec::new(), String::new());
    // The work that advertised the capability, and the same once it is cancelled.
    let (mut target, mut id): (Option<String>, Option<String>) = (None, None);
    let mut cancelled = json!({});
    let mut cancellable = false;
    let mut active = false;
    loop {
        let notification =
            updates.recv().await.ok_or_else(|| json!({ "error": { "message": "the connection ended" } }))?;
        if notification["sessionId"] != session {
            continue;
        }
        let update = &notification["update"];
        let kind = update["sessionUpdate"].as_str().unwrap_or("?");
        let idle = kind == "state_update" && update["state"] == "idle";
        if idle && !active {
            continue;
        }
        kinds.push(match update["state"].as_str() {
            Some(state) => format!("{kind} {state}"),
            None => kind.to_owned(),
        });
        if idle {
            let mut fields = json!({
                "messageId": accepted.message_id, "id": id, "kinds": kinds, "statuses": statuses,
                "terminals": terminals, "output": String::from_utf8_lossy(&output), "said": said,
                "stopReason": update["stopReason"], "cancellableAfter": cancellable,
            });
            fields.as_object_mut().unwrap().extend(cancelled.as_object().cloned().unwrap_or_default());
            return Ok(fields);
        }
        match kind {
            "state_update" => active = true,
            "tool_call_update" if update["status"].is_string() => statuses.push(update["status"].clone()),
            "terminal_output_chunk" => output.extend(decode_base64(update["data"].as_str().unwrap_or_default())),
            "agent_message_chunk" if id.is_some() => said.push_str(update["content"]["text"].as_str().unwrap_or("")),
            _ => {}
        }
        if kind == "terminal_update" {
            terminals.push(update.clone());
        }
        // The capability as the patches leave it: an object sets it, `null` clears it.
        if kind == advertises
            && target.as_deref().is_none_or(|known| update[key] == known)
            && let Some(capabilities) = update.get("capabilities")
        {
            cancellable = capabilities["cancel"].is_object();
            if cancellable && target.is_none() {
                target = update[key].as_str().map(str::to_owned);
            }
        }
        let under_way = kind == progress && target.as_deref().is_some_and(|known| update[key] == known);
        if id.is_none() && cancellable && under_way {
            let target = target.clone().unwrap_or_default();
            let unknown = match work.cancel(cx, session, &format!("{}_nobody_made", &key[..key.len() - 2])).await {
                Ok(answer) => json!({ "answer": answer }),
                Err(error) => error_fields(&error),
            };
            let answer = work.cancel(cx, session, &target).await.map_err(failed)?;
            cancelled = json!({ "unknown": unknown, "answer": answer });
            id = Some(target);
        }
    }
}

/// RFC 4648 base64, as terminal output is sent (what is not base64 is skipped).
fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::new();
    let (mut bits, mut n) = (0u32, 0);
    for c in text.bytes().filter_map(value) {
        bits = bits << 6 | u32::from(c);
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    out
}

async fn cancel_work(
    cx: ConnectionTo<Agent>,
    cwd: String,
    updates: &mut UnboundedReceiver<Value>,
) -> Result<(), Stopped> {
    let session = step("session-new-2", async {
        let setup = cx.build_session(&cwd).start_session().block_task().await.map_err(failed)?;
        let fields = json!({ "sessionId": setup.session.session_id() });
        Ok((setup.session, fields))
    })
    .await?;
    let id = session.session_id().to_string();
    for (name, text, work) in
        [("tool-call-cancel", "/slow", Work::ToolCall), ("terminal-cancel", "/ticker", Work::Terminal)]
    {
        step(name, async { Ok(((), cancel_turn(&cx, &id, updates, text, work).await?)) }).await?;
    }
    Ok(())
}

async fn scenario(
    cx: ConnectionTo<Agent>,
    cwd: String,
    updates: &mut UnboundedReceiver<Value>,
    permissions: Shared,
) -> Result<(), Stopped> {
    step("initialize", async {
        let request = schema::InitializeRequest::new(
            ProtocolVersion::V2,
            schema::Implementation::new("rs-sdk-v2-interop", env!("CARGO_PKG_VERSION")),
        );
        match cx.send_initialize(request).block_task().await.map_err(failed)? {
            InitializeOutcome::Initialized(init) => {
                let fields = json!({
                    "protocolVersion": init.protocol_version,
                    "agentName": init.info.name,
                    "capabilities": init.capabilities,
                });
                Ok(((), fields))
            }
            // The agent selected an older version: the SDK leaves the connection uninitialized.
            InitializeOutcome::LowerVersion(mismatch) => {
                let agent = match &mismatch.response {
                    SelectedInitializeResponse::V1(v1) => v1.agent_info.as_ref().map(|i| i.name.clone()),
                    _ => None,
                };
                Err(json!({ "outcome": "lower_version", "selected": mismatch.selected(), "agentName": agent }))
            }
            _ => Err(json!({ "outcome": "unknown" })),
        }
    })
    .await?;

    let session = step("session-new", async {
        let setup = cx.build_session(&cwd).start_session().block_task().await.map_err(failed)?;
        let fields = json!({ "sessionId": setup.session.session_id() });
        Ok((setup.session, fields))
    })
    .await?;
    let id = session.session_id().to_string();

    step("session-list", async {
        let listed = cx.send_request(schema::ListSessionsRequest::new()).block_task().await.map_err(failed)?;
        let sessions: Vec<Value> =
            listed.sessions.iter().map(|s| json!({ "sessionId": s.session_id, "cwd": s.cwd })).collect();
        Ok(((), json!({ "sessions": sessions })))
    })
    .await?;

    for (name, cancel, text) in
        [("prompt-allow", false, "Please read notes.txt"), ("prompt-cancel", true, "Please read notes.txt again")]
    {
        *lock(&permissions) = Permissions { cancel, seen: Vec::new() };
        step(name, async {
            let accepted = session.send_prompt(text).block_task().await.map_err(failed)?;
            let mut turn = read_turn(updates, &id).await?;
            turn["messageId"] = json!(accepted.message_id);
            turn["permissions"] = Value::Array(lock(&permissions).seen.clone());
            Ok(((), turn))
        })
        .await?;
    }

    step("session-resume", async {
        let request = schema::ResumeSessionRequest::new(id.clone(), cwd.as_str())
            .replay_from(schema::ReplayFrom::Start(schema::ReplayFromStart::new()));
        cx.send_request(request).block_task().await.map_err(failed)?;
        Ok(((), json!({})))
    })
    .await?;

    step("session-close", async {
        // The SDK's own close: it would also take a -32002 answer for success.
        session.close().block_task().await.map_err(failed)?;
        Ok(((), json!({})))
    })
    .await?;

    step("prompt-closed", async {
        let prompt = schema::PromptRequest::new(id.clone(), vec!["still there?".to_string().into()]);
        let fields = match cx.send_request(prompt).block_task().await {
            Ok(answer) => json!({ "refused": false, "answer": answer }),
            Err(error) => json!({ "refused": true, "error": error_fields(&error) }),
        };
        Ok(((), fields))
    })
    .await
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let work = args.first().is_some_and(|a| a == "--cancel-work");
    if work {
        args.remove(0);
    }
    let Some(cwd) = args.into_iter().next() else {
        eprintln!("usage: client [--cancel-work] <session cwd>");
        std::process::exit(2);
    };
    let (tx, mut updates) = unbounded_channel();
    let permissions = Shared::default();
    let handler_permissions = permissions.clone();

    let outcome = Client
        .v2()
        .name("rs-sdk-v2-interop")
        // The v2 session handle only sends: updates come in through this handler.
        .on_receive_notification(
            async move |notification: schema::UpdateSessionNotification, _cx: ConnectionTo<Agent>| {
                let value = serde_json::to_value(&notification).map_err(Error::into_internal_error)?;
                tx.send(value).map_err(Error::into_internal_error)
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: schema::RequestPermissionRequest,
                        responder: Responder<schema::RequestPermissionResponse>,
                        cx: ConnectionTo<Agent>| {
                let tool_call = request.subject.as_ref().and_then(|s| match s {
                    schema::RequestPermissionSubject::ToolCall(t) => Some(t.tool_call.tool_call_id.to_string()),
                    _ => None,
                });
                let cancel = lock(&handler_permissions).cancel;
                if !cancel {
                    lock(&handler_permissions)
                        .seen
                        .push(json!({ "toolCallId": tool_call, "cancelRequestSeen": false }));
                    let allow = request.options.iter().find(|o| o.kind == schema::PermissionOptionKind::AllowOnce);
                    let option = allow.unwrap_or(&request.options[0]).option_id.clone();
                    return responder.respond(schema::RequestPermissionResponse::new(
                        schema::RequestPermissionOutcome::Selected(schema::SelectedPermissionOutcome::new(option)),
                    ));
                }
                // The user pressed stop while the agent waited for this answer.
                cx.send_notification(schema::CancelSessionNotification::new(request.session_id.clone()))?;
                // Wait for the agent's `$/cancel_request` off the dispatch loop (it must keep
                // reading), then answer `cancelled` either way.
                let cancellation = responder.cancellation();
                let permissions = handler_permissions.clone();
                cx.spawn(async move {
                    let seen = tokio::time::timeout(CANCEL_REQUEST_WAIT, cancellation.cancelled()).await.is_ok();
                    lock(&permissions).seen.push(json!({ "toolCallId": tool_call, "cancelRequestSeen": seen }));
                    responder.respond(schema::RequestPermissionResponse::new(
                        schema::CancelledPermissionOutcome::new().into(),
                    ))
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(Stdio::new(), async move |cx: ConnectionTo<Agent>| {
            if scenario(cx.clone(), cwd.clone(), &mut updates, permissions).await.is_ok() && work {
                let _ = cancel_work(cx, cwd, &mut updates).await;
            }
            Ok(())
        })
        .await;
    if let Err(error) = outcome {
        report("connection", false, json!({ "error": error_fields(&error) }));
    }
    eprintln!("END");
    // stdin stays open (the test owns the other end): leave without waiting for it.
    std::process::exit(0);
}
