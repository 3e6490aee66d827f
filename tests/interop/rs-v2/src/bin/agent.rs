//! The official Rust SDK's agents as peers of tests/tests/interop_v2.rs, where our v2 client
//! drives them. ACP on stdin/stdout, logs on stderr.
//!
//!   agent              v1 and v2 behind the SDK's `Agent.protocol_router()`
//!   agent --v1-only    the SDK's v1 agent alone
//!
//! The v2 agent does the turns our own v2 agent does (runtime/examples/common/agent_v2.rs), so that one
//! expectation holds for both: answer `{messageId}`, `user_message`, `running`, a streamed
//! message, a `read` tool call (`pending`), `requires_action` and `session/request_permission`.
//! Allowed: `running`, `in_progress`, the file's first lines as a content chunk, `completed`, a
//! closing message quoting the first line, idle `end_turn`. On `session/cancel` the pending
//! permission request is withdrawn (the SDK sends `$/cancel_request`), the tool call is marked
//! `cancelled`, then idle `cancelled`. It also serves session/list, session/resume (replaying
//! the conversation when asked) and session/close. The v1 agent only initializes and opens
//! sessions: enough for a client to see which version it got.
//!
//! The prompt `/slow` starts cancellable work, as our demo agent's does: a tool call that
//! advertises `capabilities: {cancel: {}}` and reports progress until the client sends
//! `tool_call/cancel` for it (a typed `CancelToolCallRequest` handler; an unknown or settled id
//! gets -32602). The agent answers `{}`, marks the call `cancelled` withdrawing the capability
//! (`capabilities: null`), and the turn goes on to a closing message and `end_turn`.
//! `session/cancel` or `session/close` stops it too, and ends the turn `cancelled`.
//!
//! The prompt `/ticker` does the same with a terminal, as our demo agent's does: a tool call
//! (`execute`) shows a terminal (`terminal_update` with its command and cwd) that advertises
//! `capabilities: {cancel: {}}` and prints `tick N\r\n` (`terminal_output_chunk`, base64)
//! until the client sends `terminal/cancel` for it (a typed `CancelTerminalRequest` handler;
//! -32602 for an id it does not know). The agent answers `{}`, reports the exit
//! (`exitStatus: {signal: "SIGTERM"}`, `capabilities: null`), completes the tool call, and the
//! turn goes on to a closing message and `end_turn`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use agent_client_protocol::schema::{MaybeUndefined, ProtocolVersion};
use agent_client_protocol::v1::schema as v1s;
use agent_client_protocol::v2::{ConnectionTo, Responder, schema};
use agent_client_protocol::{Agent, Client, ConnectTo, Error, ErrorCode, RequestCancellationHandle, Result, Stdio};

const NAME: &str = "rs-sdk-v2-interop-agent";
const ALLOW: &str = "allow-once";
/// How much of the file the tool reads.
const MAX_LINES: usize = 8;
/// How often the slow task reports progress.
const TICK: std::time::Duration = std::time::Duration::from_millis(100);

macro_rules! log {
    ($($arg:tt)*) => { eprintln!("[rs-agent] {}", format_args!($($arg)*)) };
}

/// One message of a session's conversation, by the id the client knows it under.
enum Entry {
    User(schema::MessageId, Vec<schema::ContentBlock>),
    Agent(schema::MessageId, String),
}

struct Session {
    cwd: schema::AbsolutePath,
    history: Vec<Entry>,
    /// `session/cancel` arrived during the current turn.
    cancelled: bool,
    /// The turn's pending permission request, to withdraw on `session/cancel`.
    pending: Option<RequestCancellationHandle>,
    /// The running slow task's tool call, and what stops it (`tool_call/cancel`,
    /// `session/cancel`; dropped with the session on `session/close`).
    slow: Option<(schema::ToolCallId, oneshot::Sender<()>)>,
    /// The running ticker's terminal, and what stops it (`terminal/cancel`, `session/cancel`).
    ticker: Option<(schema::TerminalId, oneshot::Sender<()>)>,
}

/// The agent's sessions, shared by the handlers and the turns they spawn.
#[derive(Clone, Default)]
struct Sessions {
    inner: Arc<Mutex<(u64, HashMap<schema::SessionId, Session>)>>,
}

impl Sessions {
    fn fresh_id(&self, prefix: &str) -> String {
        let mut inner = self.inner.lock().unwrap();
        inner.0 += 1;
        format!("{prefix}-{}", inner.0)
    }

    /// Runs `f` on the session, if it exists.
    fn with<T>(&self, id: &schema::SessionId, f: impl FnOnce(&mut Session) -> T) -> Option<T> {
        self.inner.lock().unwrap().1.get_mut(id).map(f)
    }
}

/// What stops the running work in `slot`, taken out, if that work is `id`'s.
fn take_stop<Id: PartialEq>(slot: &mut Option<(Id, oneshot::Sender<()>)>, id: &Id) -> Option<oneshot::Sender<()>> {
    match slot.take() {
        Some((running, stop)) if running == *id => Some(stop),
        other => {
            *slot = other;
            None
        }
    }
}

fn not_found(id: &schema::SessionId) -> Error {
    schema::Error::session_not_found(id.clone()).into()
}

/// One turn's way to report: updates of its session, each also kept for replay when it is a
/// message.
struct Reporter {
    cx: ConnectionTo<Client>,
    sessions: Sessions,
    session: schema::SessionId,
}

impl Reporter {
    fn send(&self, update: schema::SessionUpdate) -> Result<()> {
        self.cx.send_notification(schema::UpdateSessionNotification::new(self.session.clone(), update))
    }

    fn state(&self, state: schema::StateUpdate) -> Result<()> {
        self.send(schema::SessionUpdate::StateUpdate(state))
    }

    fn tool(&self, update: schema::ToolCallUpdate) -> Result<()> {
        self.send(schema::SessionUpdate::ToolCallUpdate(update))
    }

    /// Streams `text` as one agent message, word by word.
    fn say(&self, text: &str) -> Result<()> {
        let id = schema::MessageId::new(self.sessions.fresh_id("agent-msg"));
        for word in text.split_inclusive(' ') {
            self.send(schema::SessionUpdate::AgentMessageChunk(schema::ContentChunk::new(
                word.to_string().into(),
                id.clone(),
            )))?;
        }
        self.sessions.with(&self.session, |s| s.history.push(Entry::Agent(id, text.to_owned())));
        Ok(())
    }

    fn idle(&self, reason: schema::StopReason) -> Result<()> {
        self.state(schema::StateUpdate::Idle(schema::IdleStateUpdate::new().stop_reason(reason)))
    }
}

/// The work of one accepted prompt (see the module docs).
async fn run_turn(
    reporter: Reporter,
    prompt: Vec<schema::ContentBlock>,
    user_message: schema::MessageId,
) -> Result<()> {
    let sessions = reporter.sessions.clone();
    let session = reporter.session.clone();
    let cwd = sessions.with(&session, |s| s.cwd.clone()).ok_or_else(|| not_found(&session))?;
    reporter.send(schema::SessionUpdate::UserMessage(
        schema::UserMessage::new(user_message.clone()).content(prompt.clone()),
    ))?;
    sessions.with(&session, |s| s.history.push(Entry::User(user_message, prompt.clone())));
    reporter.state(schema::StateUpdate::Running(schema::RunningStateUpdate::new()))?;
    match prompt.first() {
        Some(schema::ContentBlock::Text(t)) if t.text.trim() == "/slow" => return slow_task(reporter).await,
        Some(schema::ContentBlock::Text(t)) if t.text.trim() == "/ticker" => return ticker(reporter, cwd).await,
        _ => {}
    }

    let file = file_named_in(&prompt).unwrap_or_else(|| "notes.txt".to_owned());
    reporter.say(&format!("Let me read {file} for you."))?;
    let call = schema::ToolCallId::new(sessions.fresh_id("call"));
    let title = format!("Read {file}");
    let pending = schema::ToolCallUpdate::new(call.clone())
        .title(title.clone())
        .kind(schema::ToolKind::Read)
        .status(schema::ToolCallStatus::Pending);
    reporter.tool(pending.clone())?;

    reporter.state(schema::StateUpdate::RequiresAction(schema::RequiresActionStateUpdate::new()))?;
    let options = vec![
        schema::PermissionOption::new(ALLOW, "Allow once", schema::PermissionOptionKind::AllowOnce),
        schema::PermissionOption::new("reject-once", "Reject", schema::PermissionOptionKind::RejectOnce),
    ];
    let ask = schema::RequestPermissionRequest::new(session.clone(), format!("Allow reading {file}?"), options)
        .subject(schema::RequestPermissionSubject::from(schema::ToolCallPermissionSubject::new(pending)));
    let sent = reporter.cx.send_request(ask);
    sessions.with(&session, |s| s.pending = Some(sent.cancellation_handle()));
    let answer = sent.block_task().await;
    let cancelled = sessions.with(&session, |s| {
        s.pending = None;
        s.cancelled
    });
    log!("permission for {call}: {answer:?} (cancelled: {cancelled:?})");
    // A session gone meanwhile (closed) counts as cancelled, and so does the `cancelled`
    // outcome: a client may answer so right after its session/cancel, before we handled it.
    let outcome = answer.map(|r| r.outcome);
    if cancelled.unwrap_or(true) || matches!(outcome, Ok(schema::RequestPermissionOutcome::Cancelled(_))) {
        reporter.tool(schema::ToolCallUpdate::new(call).status(schema::ToolCallStatus::Cancelled))?;
        return reporter.idle(schema::StopReason::Cancelled);
    }
    if !matches!(&outcome, Ok(schema::RequestPermissionOutcome::Selected(o)) if o.option_id.to_string() == ALLOW) {
        reporter.tool(schema::ToolCallUpdate::new(call).status(schema::ToolCallStatus::Failed))?;
        reporter.say(&format!("Understood, I left {file} alone."))?;
        return reporter.idle(schema::StopReason::EndTurn);
    }

    reporter.state(schema::StateUpdate::Running(schema::RunningStateUpdate::new()))?;
    reporter.tool(schema::ToolCallUpdate::new(call.clone()).status(schema::ToolCallStatus::InProgress))?;
    let path = cwd.0.join(&file);
    let head = match std::fs::read_to_string(&path) {
        Ok(text) => text.lines().take(MAX_LINES).collect::<Vec<_>>().join("\n"),
        Err(e) => format!("cannot read {}: {e}", path.display()),
    };
    reporter.send(schema::SessionUpdate::ToolCallContentChunk(schema::ToolCallContentChunk::new(
        call.clone(),
        schema::ToolCallContent::from(head.clone()),
    )))?;
    reporter.tool(schema::ToolCallUpdate::new(call).status(schema::ToolCallStatus::Completed))?;
    let first = head.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    reporter.say(&format!("{file} starts with “{first}”."))?;
    reporter.idle(schema::StopReason::EndTurn)
}

/// `/slow` (see the module docs): runs until `tool_call/cancel` or the turn's cancel stops it.
async fn slow_task(reporter: Reporter) -> Result<()> {
    let (sessions, session) = (reporter.sessions.clone(), reporter.session.clone());
    reporter.say("Starting a slow task; cancel it whenever you like.")?;
    let call = schema::ToolCallId::new(sessions.fresh_id("call"));
    let (stop, mut stopped) = oneshot::channel();
    sessions.with(&session, |s| s.slow = Some((call.clone(), stop))).ok_or_else(|| not_found(&session))?;
    reporter.tool(
        schema::ToolCallUpdate::new(call.clone())
            .title("Slow task (runs until cancelled)")
            .kind(schema::ToolKind::Other)
            .status(schema::ToolCallStatus::Pending)
            .capabilities(schema::ToolCallCapabilities::new().cancel(schema::ToolCallCancelCapabilities::new())),
    )?;
    reporter.tool(schema::ToolCallUpdate::new(call.clone()).status(schema::ToolCallStatus::InProgress))?;
    let mut ticks = 0u32;
    loop {
        tokio::select! {
            biased;
            _ = &mut stopped => break,
            () = tokio::time::sleep(TICK) => {}
        }
        ticks += 1;
        reporter.send(schema::SessionUpdate::ToolCallContentChunk(schema::ToolCallContentChunk::new(
            call.clone(),
            schema::ToolCallContent::from(format!("still working ({ticks})")),
        )))?;
    }
    let cancelled = sessions.with(&session, |s| {
        s.slow = None;
        s.cancelled
    });
    log!("slow task {call} stopped after {ticks} ticks");
    // `Null`, not left out: an omitted field leaves the client's stored capability as it was.
    reporter.tool(
        schema::ToolCallUpdate::new(call).status(schema::ToolCallStatus::Cancelled).capabilities(MaybeUndefined::Null),
    )?;
    // A session gone meanwhile (closed) counts as the turn cancelled.
    if cancelled.unwrap_or(true) {
        return reporter.idle(schema::StopReason::Cancelled);
    }
    // Only the call was cancelled: the turn goes on.
    reporter.say(&format!("Stopped the slow task after {ticks} updates."))?;
    reporter.idle(schema::StopReason::EndTurn)
}

/// `/ticker` (see the module docs): a terminal printing a line per tick until `terminal/cancel`
/// or the turn's cancel stops it.
async fn ticker(reporter: Reporter, cwd: schema::AbsolutePath) -> Result<()> {
    let (sessions, session) = (reporter.sessions.clone(), reporter.session.clone());
    let call = schema::ToolCallId::new(sessions.fresh_id("call"));
    reporter.tool(
        schema::ToolCallUpdate::new(call.clone())
            .title("Run the demo ticker")
            .kind(schema::ToolKind::Execute)
            .status(schema::ToolCallStatus::Pending),
    )?;
    let terminal = schema::TerminalId::new(sessions.fresh_id("term"));
    let terminal_update = || schema::TerminalUpdate::new(terminal.clone());
    let send_terminal = |update| reporter.send(schema::SessionUpdate::TerminalUpdate(update));
    send_terminal(terminal_update().command("demo-ticker (a line per tick)".to_owned()).cwd(cwd))?;
    reporter.send(schema::SessionUpdate::ToolCallContentChunk(schema::ToolCallContentChunk::new(
        call.clone(),
        schema::ToolCallContent::from(schema::Terminal::new(terminal.clone())),
    )))?;
    let (stop, mut stopped) = oneshot::channel();
    sessions.with(&session, |s| s.ticker = Some((terminal.clone(), stop))).ok_or_else(|| not_found(&session))?;
    let cancel = schema::TerminalCapabilities::new().cancel(schema::TerminalCancelCapabilities::new());
    send_terminal(terminal_update().capabilities(cancel))?;
    reporter.tool(schema::ToolCallUpdate::new(call.clone()).status(schema::ToolCallStatus::InProgress))?;
    let mut ticks = 0u32;
    loop {
        tokio::select! {
            biased;
            _ = &mut stopped => break,
            () = tokio::time::sleep(TICK) => {}
        }
        ticks += 1;
        let line = format!("tick {ticks}\r\n");
        reporter.send(schema::SessionUpdate::TerminalOutputChunk(schema::TerminalOutputChunk::new(
            terminal.clone(),
            base64(line.as_bytes()),
        )))?;
    }
    let cancelled = sessions.with(&session, |s| {
        s.ticker = None;
        s.cancelled
    });
    log!("ticker {terminal} stopped after {ticks} ticks");
    // `Null`, not left out: an omitted field leaves the client's stored capability as it was.
    let exit = schema::TerminalExitStatus::new().signal("SIGTERM".to_owned());
    send_terminal(terminal_update().exit_status(exit).capabilities(MaybeUndefined::Null))?;
    if cancelled.unwrap_or(true) {
        reporter.tool(schema::ToolCallUpdate::new(call).status(schema::ToolCallStatus::Cancelled))?;
        return reporter.idle(schema::StopReason::Cancelled);
    }
    // The ticker ran until it was stopped, which is what it was asked to do.
    reporter.tool(schema::ToolCallUpdate::new(call).status(schema::ToolCallStatus::Completed))?;
    reporter.say(&format!("The ticker stopped after {ticks} ticks."))?;
    reporter.idle(schema::StopReason::EndTurn)
}

/// Standard base64 with padding (RFC 4648), as `terminal_output_chunk` carries its bytes.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            let sextet = (n >> (18 - 6 * i)) & 0x3f;
            out.push(if i <= chunk.len() { char::from(ALPHABET[sextet as usize]) } else { '=' });
        }
    }
    out
}

/// The first word of the prompt that looks like a file name.
fn file_named_in(prompt: &[schema::ContentBlock]) -> Option<String> {
    prompt.iter().find_map(|block| match block {
        schema::ContentBlock::Text(text) => text
            .text
            .split_whitespace()
            .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
            .find(|w| w.contains('.'))
            .map(str::to_owned),
        _ => None,
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let v1_agent = Agent
        .v1()
        .name(NAME)
        .on_receive_request(
            async |request: v1s::InitializeRequest,
                   responder: agent_client_protocol::v1::Responder<v1s::InitializeResponse>,
                   _cx: agent_client_protocol::v1::ConnectionTo<Client>| {
                log!("initialize (v1) at protocol {:?}", request.protocol_version);
                responder.respond(
                    v1s::InitializeResponse::new(ProtocolVersion::V1)
                        .agent_info(v1s::Implementation::new(NAME, env!("CARGO_PKG_VERSION"))),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async |_request: v1s::NewSessionRequest,
                   responder: agent_client_protocol::v1::Responder<v1s::NewSessionResponse>,
                   _cx: agent_client_protocol::v1::ConnectionTo<Client>| {
                responder.respond(v1s::NewSessionResponse::new(format!("v1-sess-{}", std::process::id())))
            },
            agent_client_protocol::on_receive_request!(),
        );
    if std::env::args().skip(1).any(|a| a == "--v1-only") {
        log!("serving v1 only");
        return v1_agent.connect_to(Stdio::new()).await;
    }

    let sessions = Sessions::default();
    let v2_agent = Agent
        .v2()
        .name(NAME)
        .on_receive_request(
            async |request: schema::InitializeRequest,
                   responder: Responder<schema::InitializeResponse>,
                   _cx: ConnectionTo<Client>| {
                log!("initialize (v2) from {}", request.info.name);
                responder.respond(
                    schema::InitializeResponse::new(
                        ProtocolVersion::V2,
                        schema::Implementation::new(NAME, env!("CARGO_PKG_VERSION")),
                    )
                    .capabilities(schema::AgentCapabilities::new().session(schema::SessionCapabilities::new())),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let sessions = sessions.clone();
                async move |request: schema::NewSessionRequest,
                            responder: Responder<schema::NewSessionResponse>,
                            _cx: ConnectionTo<Client>| {
                    let id = schema::SessionId::new(sessions.fresh_id("rs-sess"));
                    let session = Session {
                        cwd: request.cwd,
                        history: Vec::new(),
                        cancelled: false,
                        pending: None,
                        slow: None,
                        ticker: None,
                    };
                    sessions.inner.lock().unwrap().1.insert(id.clone(), session);
                    responder.respond(schema::NewSessionResponse::new(id))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let sessions = sessions.clone();
                async move |_request: schema::ListSessionsRequest,
                            responder: Responder<schema::ListSessionsResponse>,
                            _cx: ConnectionTo<Client>| {
                    let listed = sessions
                        .inner
                        .lock()
                        .unwrap()
                        .1
                        .iter()
                        .map(|(id, s)| schema::SessionInfo::new(id.clone(), s.cwd.clone()))
                        .collect();
                    responder.respond(schema::ListSessionsResponse::new(listed))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let sessions = sessions.clone();
                async move |request: schema::ResumeSessionRequest,
                            responder: Responder<schema::ResumeSessionResponse>,
                            cx: ConnectionTo<Client>| {
                    let replay = match &request.replay_from {
                        None => false,
                        Some(schema::ReplayFrom::Start(_)) => true,
                        Some(_) => {
                            return responder.respond_with_error(Error::invalid_params().data("unknown replay cursor"));
                        }
                    };
                    let updates: Option<Vec<schema::SessionUpdate>> = sessions.with(&request.session_id, |s| {
                        s.history
                            .iter()
                            .filter(|_| replay)
                            .map(|entry| match entry {
                                Entry::User(id, content) => schema::SessionUpdate::UserMessage(
                                    schema::UserMessage::new(id.clone()).content(content.clone()),
                                ),
                                Entry::Agent(id, text) => schema::SessionUpdate::AgentMessage(
                                    schema::AgentMessage::new(id.clone()).content(vec![text.clone().into()]),
                                ),
                            })
                            .collect()
                    });
                    let Some(updates) = updates else {
                        return responder.respond_with_error(not_found(&request.session_id));
                    };
                    // The replay goes out before the answer.
                    for update in updates {
                        cx.send_notification(schema::UpdateSessionNotification::new(
                            request.session_id.clone(),
                            update,
                        ))?;
                    }
                    responder.respond(schema::ResumeSessionResponse::new())
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let sessions = sessions.clone();
                async move |request: schema::CloseSessionRequest,
                            responder: Responder<schema::CloseSessionResponse>,
                            _cx: ConnectionTo<Client>| {
                    let Some(closed) = sessions.inner.lock().unwrap().1.remove(&request.session_id) else {
                        return responder.respond_with_error(not_found(&request.session_id));
                    };
                    if let Some(pending) = closed.pending {
                        let _ = pending.cancel();
                    }
                    responder.respond(schema::CloseSessionResponse::new())
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let sessions = sessions.clone();
                async move |request: schema::PromptRequest,
                            responder: Responder<schema::PromptResponse>,
                            cx: ConnectionTo<Client>| {
                    if sessions.with(&request.session_id, |s| s.cancelled = false).is_none() {
                        return responder.respond_with_error(not_found(&request.session_id));
                    }
                    // Acceptance first (the SDK's schema requires the user message's id), then
                    // the turn, off the dispatch loop so that cancels and answers keep coming in.
                    let user_message = schema::MessageId::new(sessions.fresh_id("user-msg"));
                    responder.respond(schema::PromptResponse::new(user_message.clone()))?;
                    let reporter = Reporter { cx: cx.clone(), sessions: sessions.clone(), session: request.session_id };
                    cx.spawn(run_turn(reporter, request.prompt, user_message))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let sessions = sessions.clone();
                async move |request: schema::CancelToolCallRequest,
                            responder: Responder<schema::CancelToolCallResponse>,
                            _cx: ConnectionTo<Client>| {
                    let stop = sessions.with(&request.session_id, |s| take_stop(&mut s.slow, &request.tool_call_id));
                    let Some(stop) = stop.flatten() else {
                        let error =
                            Error::new(ErrorCode::INVALID_PARAMS, "the tool call is unknown or not cancellable")
                                .data(serde_json::json!({ "toolCallId": request.tool_call_id }));
                        return responder.respond_with_error(error);
                    };
                    log!("tool_call/cancel {}", request.tool_call_id);
                    // The answer goes out first: the final `cancelled` patch confirms an
                    // accepted cancel.
                    responder.respond(schema::CancelToolCallResponse::new())?;
                    let _ = stop.send(());
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            {
                let sessions = sessions.clone();
                async move |request: schema::CancelTerminalRequest,
                            responder: Responder<schema::CancelTerminalResponse>,
                            _cx: ConnectionTo<Client>| {
                    let stop = sessions.with(&request.session_id, |s| take_stop(&mut s.ticker, &request.terminal_id));
                    let Some(stop) = stop.flatten() else {
                        let error = Error::new(ErrorCode::INVALID_PARAMS, "the terminal is unknown or not cancellable")
                            .data(serde_json::json!({ "terminalId": request.terminal_id }));
                        return responder.respond_with_error(error);
                    };
                    log!("terminal/cancel {}", request.terminal_id);
                    // The answer goes out first: the exit confirms an accepted cancel.
                    responder.respond(schema::CancelTerminalResponse::new())?;
                    let _ = stop.send(());
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            {
                let sessions = sessions.clone();
                async move |notification: schema::CancelSessionNotification, _cx: ConnectionTo<Client>| {
                    log!("session/cancel {}", notification.session_id);
                    sessions.with(&notification.session_id, |s| {
                        s.cancelled = true;
                        // The SDK sends `$/cancel_request` for it.
                        if let Some(pending) = s.pending.take() {
                            let _ = pending.cancel();
                        }
                        for stop in [s.slow.take().map(|(_, stop)| stop), s.ticker.take().map(|(_, stop)| stop)] {
                            if let Some(stop) = stop {
                                let _ = stop.send(());
                            }
                        }
                    });
                    Ok(())
                }
            },
            agent_client_protocol::on_receive_notification!(),
        );

    Agent.protocol_router().with_v1(v1_agent).with_v2(v2_agent).connect_to(Stdio::new()).await
}
