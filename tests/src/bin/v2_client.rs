//! Our protocol v2 client, written with the runtime's v2 client API (a hand-written
//! `acp_types::v2::Client<acp_rpc::v2::ClientContext>` impl, `AgentHandle::prompt_turn`,
//! `version::ProtocolRouter::negotiate`), for the v2 interop tests (`tests/tests/interop_v2.rs`),
//! where it drives the official SDKs' agents.
//!
//! It speaks ACP on its own stdin/stdout (the test connects it to an agent and records the
//! wire) and reports like the official clients the test also runs: one
//! `RESULT {"step": ..., "ok": ...}` line per step on stderr, then `END`.
//!
//!   v2_client <session cwd>                negotiates v2, or v1 with a v1-only agent
//!   v2_client --v2-only <session cwd>      speaks v2 only: a v1 answer ends the run
//!   v2_client --cancel-work <session cwd>  the v2 scenario, then `tool-call-cancel` and
//!                                          `terminal-cancel` (below)
//!
//! With v2 it runs the scenario of `tests/interop/ts-v2/client.mjs` (initialize, session-new,
//! session-list, prompt-allow, prompt-cancel, session-resume, session-close, prompt-closed).
//! In prompt-cancel the permission handler sends `session/cancel` and answers `cancelled` at
//! once, without waiting for the agent's `$/cancel_request` (the spec allows either; the
//! runtime answers a permission request of a session we cancelled by itself). With v1 it opens
//! a session through the v1 handle and stops.
//!
//! `tool-call-cancel` (`--cancel-work`), on a second session: the prompt `/slow`; once a tool
//! call advertised `capabilities.cancel` and its first progress arrived,
//! `AgentHandle::cancel_tool_call` for an unknown id (reported as the error it got), then for
//! that call; the turn is read to its idle update. Whether the call is still cancellable at the
//! end is the capability as the patches left it (omitted: unchanged, `null`: withdrawn).
//!
//! `terminal-cancel` (`--cancel-work`), on the same session: the prompt `/ticker`; likewise with
//! the first terminal that advertised `capabilities.cancel` and then sent output, through
//! `AgentHandle::cancel_terminal`. The terminal's output and capability are reported as the
//! runtime's `SessionState` keeps them (its output decoded from base64, its patches merged).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use acp_rpc::acp_types::v2::{
    CancelSessionNotification, CancelTerminalRequest, CancelToolCallRequest, CancelledPermissionOutcome, Client,
    ClientCapabilities, CloseSessionRequest, Error, ErrorData, Implementation, InitializeRequest, ListSessionsRequest,
    NewSessionRequest, Nullable, PermissionOptionKind, PromptRequest, ProtocolVersion, ReplayFrom, ReplayFromStart,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, RequestPermissionSubject,
    ResumeSessionRequest, SelectedPermissionOutcome, SessionId, TerminalId, TextContent, UpdateSessionNotification,
};
use acp_rpc::v2::{ClientContext, SessionState};
use acp_rpc::version::{Negotiated, ProtocolRouter};
use serde_json::{Value, json};

/// How long any one call may take; the test has its own, longer, deadline.
const WAIT: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Seen {
    /// Cancel the session at the next permission request (instead of allowing it).
    cancel: bool,
    permissions: Vec<Value>,
    /// Every session update of the current turn, as received.
    updates: Vec<Value>,
    /// The same updates applied with the spec's merge rules.
    state: SessionState,
}

/// The v2 client: permission answers by policy, and a record of what arrived.
#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Seen>>,
    /// Woken at each session update (a stored permit: no wake-up is lost).
    arrived: Arc<tokio::sync::Notify>,
}

impl Recorder {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for `work` of `session` that advertised `capabilities.cancel` and then showed
    /// progress: its id.
    async fn running_cancellable(&self, session: &str, work: Work) -> String {
        loop {
            if let Some(id) = running_cancellable(&self.seen().updates, session, work) {
                return id;
            }
            self.arrived.notified().await;
        }
    }
}

/// A kind of cancellable work, by the updates that carry it.
#[derive(Clone, Copy)]
struct Work {
    /// The update that advertises `capabilities.cancel`.
    patch: &'static str,
    /// The update that shows it under way.
    progress: &'static str,
    /// The field that names it.
    key: &'static str,
}

const TOOL_CALL: Work = Work { patch: "tool_call_update", progress: "tool_call_content_chunk", key: "toolCallId" };
const TERMINAL: Work = Work { patch: "terminal_update", progress: "terminal_output_chunk", key: "terminalId" };

fn running_cancellable(updates: &[Value], session: &str, work: Work) -> Option<String> {
    let updates: Vec<&Value> = updates.iter().filter(|n| n["sessionId"] == session).map(|n| &n["update"]).collect();
    let advertised =
        updates.iter().position(|u| u["sessionUpdate"] == work.patch && u["capabilities"]["cancel"].is_object())?;
    let id = &updates[advertised][work.key];
    updates[advertised..]
        .iter()
        .any(|u| u["sessionUpdate"] == work.progress && u[work.key] == *id)
        .then(|| id.as_str().unwrap_or_default().to_owned())
}

impl Client<ClientContext> for Recorder {
    async fn session_request_permission(
        &self,
        params: RequestPermissionRequest,
        cx: ClientContext,
    ) -> Result<RequestPermissionResponse, Error> {
        let tool_call = match params.subject.value() {
            Some(RequestPermissionSubject::ToolCall(subject)) => Some(subject.tool_call.tool_call_id.0.clone()),
            _ => None,
        };
        let cancel = self.seen().cancel;
        // `null`: whether the agent's `$/cancel_request` came is not ours to see (below).
        self.seen().permissions.push(json!({ "toolCallId": tool_call, "cancelRequestSeen": null }));
        if !cancel {
            let allow = params.options.iter().find(|o| o.kind == PermissionOptionKind::AllowOnce);
            let option = allow.unwrap_or(&params.options[0]).option_id.clone();
            return Ok(RequestPermissionResponse::new(SelectedPermissionOutcome::new(option)));
        }
        // The user pressed stop while the agent waited for this answer. Our own `session/cancel`
        // cancels this request at once (the runtime answers it `cancelled`).
        cx.agent().cancel(CancelSessionNotification::new(params.session_id)).await?;
        let _ = tokio::time::timeout(WAIT, cx.cancelled()).await;
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled(CancelledPermissionOutcome::new())))
    }

    async fn session_update(&self, params: UpdateSessionNotification, _cx: ClientContext) -> Result<(), Error> {
        let value = serde_json::to_value(&params)
            .map_err(|e| Error::internal_error().data(ErrorData::Other(e.to_string().into())))?;
        let mut seen = self.seen();
        seen.state.apply_notification(&params);
        seen.updates.push(value);
        drop(seen);
        self.arrived.notify_one();
        Ok(())
    }
}

/// The v1 side of the negotiation: a v1 agent gets a client that declines every permission.
struct V1Client;

impl acp_rpc::acp_types::Client<acp_rpc::ClientContext> for V1Client {
    async fn session_request_permission(
        &self,
        _: acp_rpc::acp_types::RequestPermissionRequest,
        _cx: acp_rpc::ClientContext,
    ) -> Result<acp_rpc::acp_types::RequestPermissionResponse, acp_rpc::acp_types::Error> {
        Ok(acp_rpc::acp_types::RequestPermissionResponse::new(acp_rpc::acp_types::RequestPermissionOutcome::Cancelled))
    }

    async fn session_update(
        &self,
        _: acp_rpc::acp_types::SessionNotification,
        _cx: acp_rpc::ClientContext,
    ) -> Result<(), acp_rpc::acp_types::Error> {
        Ok(())
    }
}

fn report(step: &str, ok: bool, fields: Value) {
    let mut line = json!({ "step": step, "ok": ok });
    if let (Value::Object(line), Value::Object(fields)) = (&mut line, fields) {
        line.extend(fields);
    }
    eprintln!("RESULT {line}");
}

fn error_fields(error: &acp_rpc::Error) -> Value {
    match error {
        acp_rpc::Error::Rpc(e) => json!({ "code": e.code, "message": e.message, "data": e.data }),
        other => json!({ "code": null, "message": other.to_string() }),
    }
}

/// A step failed and was reported: the scenario ends there.
struct Stopped;

/// Runs one step's call: its fields are reported with `ok: true`, its error with `ok: false`.
async fn step<T>(
    name: &str,
    call: impl Future<Output = Result<T, acp_rpc::Error>>,
    fields: impl FnOnce(&T) -> Value,
) -> Result<T, Stopped> {
    match tokio::time::timeout(WAIT, call).await {
        Ok(Ok(value)) => {
            report(name, true, fields(&value));
            Ok(value)
        }
        Ok(Err(error)) => {
            report(name, false, json!({ "error": error_fields(&error) }));
            Err(Stopped)
        }
        Err(_) => {
            report(name, false, json!({ "error": { "message": format!("timed out after {WAIT:?}") } }));
            Err(Stopped)
        }
    }
}

/// The report of one turn, from the updates the client saw (as the official clients report it).
fn turn_fields(updates: &[Value], session: &str) -> Value {
    let mut kinds = Vec::new();
    let mut tools: Vec<Value> = Vec::new();
    let mut text = String::new();
    let mut user_message = Value::Null;
    let mut stop_reason = Value::Null;
    let mut active = false;
    for notification in updates.iter().filter(|n| n["sessionId"] == session) {
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
        match kind {
            _ if idle => {
                stop_reason = update["stopReason"].clone();
                break;
            }
            "state_update" => active = true,
            "user_message" => user_message = update["messageId"].clone(),
            "agent_message_chunk" => text.push_str(update["content"]["text"].as_str().unwrap_or_default()),
            "tool_call_update" => {
                let id = &update["toolCallId"];
                if !tools.iter().any(|t| &t["toolCallId"] == id) {
                    tools.push(json!({ "toolCallId": id, "statuses": [], "content": "" }));
                }
                let tool = tools.iter_mut().find(|t| &t["toolCallId"] == id).unwrap();
                if let Some(status) = update["status"].as_str() {
                    tool["statuses"].as_array_mut().unwrap().push(status.into());
                }
            }
            "tool_call_content_chunk" => {
                let added = update["content"]["content"]["text"].as_str().unwrap_or_default();
                if let Some(tool) = tools.iter_mut().find(|t| t["toolCallId"] == update["toolCallId"]) {
                    tool["content"] = format!("{}{added}", tool["content"].as_str().unwrap_or_default()).into();
                }
            }
            _ => {}
        }
    }
    json!({ "kinds": kinds, "stopReason": stop_reason, "text": text, "userMessageId": user_message, "tools": tools })
}

/// `tool-call-cancel` (see the module docs), on a new session: that session, and what the turn
/// showed, for the report.
async fn cancel_slow(
    agent: &acp_rpc::v2::AgentHandle,
    recorder: &Recorder,
    cwd: &str,
) -> Result<(SessionId, Value), acp_rpc::Error> {
    let session = agent.new_session(NewSessionRequest::new(cwd)).await?.session_id;
    *recorder.seen() = Seen::default();
    let prompt = PromptRequest::new(session.clone(), vec![TextContent::new("/slow").into()]);
    let cancels = async {
        let id = recorder.running_cancellable(&session.0, TOOL_CALL).await;
        let unknown = agent.cancel_tool_call(CancelToolCallRequest::new(session.clone(), "call_nobody_made")).await;
        let answer = agent.cancel_tool_call(CancelToolCallRequest::new(session.clone(), id.clone())).await;
        (id, unknown, answer)
    };
    // Both at once: the turn ends only after the cancel, which waits for the turn's updates.
    let (end, (id, unknown, answer)) = tokio::join!(agent.prompt_turn(prompt), cancels);
    let end = end?;
    let answer = answer?;
    let seen = recorder.seen();
    let mut statuses = Vec::new();
    let mut cancellable = false;
    // What the agent said after the call's last patch (its confirmation of the cancel).
    let mut said = String::new();
    for notification in seen.updates.iter().filter(|n| n["sessionId"] == session.0.as_str()) {
        let update = &notification["update"];
        if update["sessionUpdate"] == "tool_call_update" && update["toolCallId"] == id.as_str() {
            said.clear();
            statuses.extend(update["status"].as_str().map(str::to_owned));
            // Patch semantics: an omitted field leaves the capability as it was.
            if let Some(capabilities) = update.get("capabilities") {
                cancellable = capabilities["cancel"].is_object();
            }
        }
        if update["sessionUpdate"] == "agent_message_chunk" {
            said.push_str(update["content"]["text"].as_str().unwrap_or_default());
        }
    }
    let fields = json!({
        "id": id,
        "unknown": unknown_fields(&unknown),
        "answer": answer,
        "statuses": statuses,
        "cancellableAfter": cancellable,
        "said": said,
        // As the runtime saw the turn end (its encoding is the idle update's: `{"stopReason": ...}`).
        "stopReason": json!(end.stop_reason)["stopReason"],
    });
    Ok((session, fields))
}

/// `terminal-cancel` (see the module docs), on the session of `tool-call-cancel`.
async fn cancel_ticker(
    agent: &acp_rpc::v2::AgentHandle,
    recorder: &Recorder,
    session: &SessionId,
) -> Result<Value, acp_rpc::Error> {
    *recorder.seen() = Seen::default();
    let prompt = PromptRequest::new(session.clone(), vec![TextContent::new("/ticker").into()]);
    let cancels = async {
        let id = recorder.running_cancellable(&session.0, TERMINAL).await;
        let unknown = agent.cancel_terminal(CancelTerminalRequest::new(session.clone(), "term_nobody_made")).await;
        let answer = agent.cancel_terminal(CancelTerminalRequest::new(session.clone(), id.clone())).await;
        (id, unknown, answer)
    };
    let (end, (id, unknown, answer)) = tokio::join!(agent.prompt_turn(prompt), cancels);
    let end = end?;
    let answer = answer?;
    let seen = recorder.seen();
    let updates: Vec<&Value> =
        seen.updates.iter().filter(|n| n["sessionId"] == session.0.as_str()).map(|n| &n["update"]).collect();
    let of_kind = |kind: &'static str| updates.iter().copied().filter(move |u| u["sessionUpdate"] == kind);
    let statuses: Vec<&str> = of_kind("tool_call_update").filter_map(|u| u["status"].as_str()).collect();
    let terminals: Vec<&Value> = of_kind("terminal_update").collect();
    let terminal = seen.state.terminal_by_id(&TerminalId::from(id.clone()));
    let cancellable = terminal.and_then(|t| t.capabilities.as_ref()).is_some_and(|c| c.cancel.value().is_some());
    Ok(json!({
        "id": id,
        "unknown": unknown_fields(&unknown),
        "answer": answer,
        "statuses": statuses,
        "terminals": terminals,
        "output": terminal.map(|t| String::from_utf8_lossy(&t.output).into_owned()),
        "cancellableAfter": cancellable,
        "stopReason": json!(end.stop_reason)["stopReason"],
    }))
}

/// A cancel of an id nobody made, as the report shows it: the error, or the answer it got.
fn unknown_fields<T: serde::Serialize>(unknown: &Result<T, acp_rpc::Error>) -> Value {
    match unknown {
        Ok(answer) => json!({ "answer": answer }),
        Err(error) => error_fields(error),
    }
}

async fn scenario(
    agent: acp_rpc::v2::AgentHandle,
    recorder: &Recorder,
    cwd: &str,
    cancel_work: bool,
) -> Result<(), Stopped> {
    let created =
        step("session-new", agent.new_session(NewSessionRequest::new(cwd)), |r| json!({ "sessionId": r.session_id }))
            .await?;
    let session = created.session_id;
    step("session-list", agent.list_sessions(ListSessionsRequest::new()), |r| {
        json!({ "sessions": r.sessions.iter().map(|s| json!({ "sessionId": s.session_id, "cwd": s.cwd })).collect::<Vec<_>>() })
    })
    .await?;
    for (name, cancel, text) in
        [("prompt-allow", false, "Please read notes.txt"), ("prompt-cancel", true, "Please read notes.txt again")]
    {
        *recorder.seen() = Seen { cancel, ..Seen::default() };
        let prompt = PromptRequest::new(session.clone(), vec![TextContent::new(text).into()]);
        // Returns once our `session_update` handler has seen the turn's idle update.
        step(name, agent.prompt_turn(prompt), |end| {
            let seen = recorder.seen();
            let mut fields = turn_fields(&seen.updates, &session.0);
            fields["messageId"] = json!(end.message_id);
            fields["permissions"] = Value::Array(seen.permissions.clone());
            fields
        })
        .await?;
    }
    let resume = ResumeSessionRequest::new(session.clone(), cwd).replay_from(ReplayFrom::Start(ReplayFromStart::new()));
    step("session-resume", agent.resume_session(resume), |_| json!({})).await?;
    step("session-close", agent.close_session(CloseSessionRequest::new(session.clone())), |_| json!({})).await?;
    let after = PromptRequest::new(session.clone(), vec![TextContent::new("still there?").into()]);
    let refused = match tokio::time::timeout(WAIT, agent.prompt(after)).await {
        Ok(Ok(accepted)) => json!({ "refused": false, "messageId": accepted.message_id }),
        Ok(Err(error)) => json!({ "refused": true, "error": error_fields(&error) }),
        Err(_) => json!({ "refused": false, "error": { "message": "timed out" } }),
    };
    report("prompt-closed", true, refused);
    if cancel_work {
        let (work, _) =
            step("tool-call-cancel", cancel_slow(&agent, recorder, cwd), |(_, fields)| fields.clone()).await?;
        step("terminal-cancel", cancel_ticker(&agent, recorder, &work), Value::clone).await?;
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let v2_only = args.iter().any(|a| a == "--v2-only");
    let cancel_work = args.iter().any(|a| a == "--cancel-work");
    let Some(cwd) = args.iter().find(|a| !a.starts_with("--")).cloned() else {
        eprintln!("usage: v2_client [--v2-only] [--cancel-work] <session cwd>");
        std::process::exit(2);
    };
    let recorder = Recorder::default();
    let mut router = ProtocolRouter::new().with_v2_client(recorder.clone());
    if !v2_only {
        router = router.with_v1_client(V1Client);
    }
    let router = Arc::new(router);
    let (reader, writer) = acp_rpc::transport::stdio();
    let (peer, serve) = acp_rpc::Connection::new().serve(reader, writer, router.clone());
    tokio::spawn(serve);

    // One `initialize` with both versions' fields; the agent's answer picks the version.
    let v2_init =
        InitializeRequest::new(ProtocolVersion::V2, Implementation::new("acp-v2-client", env!("CARGO_PKG_VERSION")))
            .capabilities(ClientCapabilities::new());
    let v1_init = {
        use acp_rpc::acp_types as v1;
        v1::InitializeRequest::new(v1::ProtocolVersion::V1)
            .client_capabilities(v1::ClientCapabilities::new())
            .client_info(v1::Implementation::new("acp-v2-client", env!("CARGO_PKG_VERSION")))
    };
    let negotiated = step("initialize", router.negotiate(&peer, v2_init, v1_init), |negotiated| match negotiated {
        Negotiated::V2 { init, .. } => {
            json!({ "protocolVersion": 2, "agentName": init.info.name, "capabilities": init.capabilities })
        }
        Negotiated::V1 { init, .. } => {
            json!({ "protocolVersion": 1, "agentName": init.agent_info.value().map(|i| &i.name) })
        }
        _ => json!({}),
    })
    .await;
    match negotiated {
        Ok(Negotiated::V2 { agent, .. }) => {
            let _ = scenario(agent, &recorder, &cwd, cancel_work).await;
        }
        Ok(Negotiated::V1 { agent, .. }) => {
            let request = acp_rpc::acp_types::NewSessionRequest::new(cwd.as_str(), vec![]);
            let _ = step("session-new", agent.new_session(request), |r| json!({ "sessionId": r.session_id })).await;
        }
        _ => {}
    }
    eprintln!("END");
    // stdin stays open (the test owns the other end): leave without waiting for it.
    std::process::exit(0);
}
