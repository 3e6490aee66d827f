//! The two processes of `cargo xtask soak` (xtask/src/soak.rs): one binary, two roles.
//!
//! - `soak_peer agent` serves the soak agent on stdio.
//! - `soak_peer client SECONDS [SESSIONS]` spawns `soak_peer agent` (this same executable) and
//!   drives it for SECONDS with SESSIONS concurrent sessions (default 4). It prints
//!   `agent-pid <pid>` first, and at the end one JSON line with the counts.
//!
//! Each session repeats four kinds of prompt turn:
//!
//! 1. `plain`: the agent streams updates (message chunks, a tool call and its updates), asks
//!    for permission, the client allows, the turn ends with `end_turn`.
//! 2. `plain` again.
//! 3. `wait`: the agent asks for permission and the client never answers; instead it sends
//!    `session/cancel`, which resolves the permission request as cancelled on both sides, and
//!    the turn ends with `cancelled`.
//! 4. `stream`: the agent streams updates until cancelled; the client drops the prompt call
//!    after a few updates, which sends `$/cancel_request`.
//!
//! The client counts every message in and out through the connection's wire tap.
//!
//! This is a binary of the test crate rather than a runtime example so that the soak depends
//! only on code it owns: the demo examples may change behaviour at will.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use acp_rpc::agent::AgentContext;
use acp_rpc::client::ClientContext;
use acp_rpc::transport::SpawnOptions;
use acp_rpc::{AgentHandle, Connection};
use acp_types::*;
use tokio::io::AsyncWrite;
use tokio::sync::Notify;

const CHUNK: &str = "The quick brown fox jumps over the lazy dog; a soak test streams this sentence again and again. ";

fn text(s: &str) -> ContentBlock {
    ContentBlock::Text(TextContent::new(s))
}

fn first_text(p: &PromptRequest) -> &str {
    match p.prompt.first() {
        Some(ContentBlock::Text(t)) => &t.text,
        _ => "",
    }
}

// ---- the agent ------------------------------------------------------------------------------

struct SoakAgent {
    sessions: AtomicU64,
}

impl SoakAgent {
    async fn plain(&self, s: SessionId, cx: &AgentContext) -> Result<PromptResponse, Error> {
        let client = cx.client();
        let update = |u: SessionUpdate| client.session_update(SessionNotification::new(s.clone(), u));
        for i in 0..8 {
            update(SessionUpdate::AgentMessageChunk(ContentChunk::new(text(&CHUNK[..20 + i * 9])))).await?;
        }
        update(SessionUpdate::ToolCall(
            ToolCall::new("call_1", "Edit a.txt").kind(ToolKind::Edit).status(ToolCallStatus::Pending),
        ))
        .await?;
        let options = vec![
            PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
            PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
        ];
        let permission = client
            .request_permission(RequestPermissionRequest::new(s.clone(), ToolCallUpdate::new("call_1"), options))
            .await?;
        if matches!(permission.outcome, RequestPermissionOutcome::Cancelled) {
            return Ok(PromptResponse::new(StopReason::Cancelled));
        }
        update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new("call_1").status(Some(ToolCallStatus::InProgress))))
            .await?;
        let content = vec![ToolCallContent::Content(Content::new(text(CHUNK)))];
        update(SessionUpdate::ToolCallUpdate(
            ToolCallUpdate::new("call_1").status(Some(ToolCallStatus::Completed)).content(Some(content)),
        ))
        .await?;
        update(SessionUpdate::AgentMessageChunk(ContentChunk::new(text("Done.")))).await?;
        Ok(PromptResponse::new(StopReason::EndTurn))
    }

    async fn wait(&self, s: SessionId, cx: &AgentContext) -> Result<PromptResponse, Error> {
        let options = vec![PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce)];
        let request = RequestPermissionRequest::new(s, ToolCallUpdate::new("call_wait"), options);
        let permission = cx.client().request_permission(request).await?;
        let reason = match permission.outcome {
            RequestPermissionOutcome::Cancelled => StopReason::Cancelled,
            _ => StopReason::EndTurn,
        };
        Ok(PromptResponse::new(reason))
    }

    async fn stream(&self, s: SessionId, cx: &AgentContext) -> Result<PromptResponse, Error> {
        let mut i = 0usize;
        while !cx.is_cancelled() {
            let chunk = SessionUpdate::AgentThoughtChunk(ContentChunk::new(text(&CHUNK[..1 + i % CHUNK.len()])));
            if cx.client().session_update(SessionNotification::new(s.clone(), chunk)).await.is_err() {
                break;
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(PromptResponse::new(StopReason::Cancelled))
    }
}

impl Agent<AgentContext> for SoakAgent {
    async fn initialize(&self, params: InitializeRequest, _: AgentContext) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(params.protocol_version))
    }

    async fn authenticate(&self, _: AuthenticateRequest, _: AgentContext) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }

    async fn session_new(&self, _: NewSessionRequest, _: AgentContext) -> Result<NewSessionResponse, Error> {
        let n = self.sessions.fetch_add(1, Relaxed);
        Ok(NewSessionResponse::new(format!("soak_{n}")))
    }

    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let s = params.session_id.clone();
        match first_text(&params) {
            "wait" => self.wait(s, &cx).await,
            "stream" => self.stream(s, &cx).await,
            _ => self.plain(s, &cx).await,
        }
    }

    async fn session_cancel(&self, _: CancelNotification, _: AgentContext) -> Result<(), Error> {
        Ok(()) // the runtime cancels the turn's token
    }
}

// ---- the client -----------------------------------------------------------------------------

#[derive(Default)]
struct Counts {
    updates: AtomicU64,
    permissions: AtomicU64,
    turns_end_turn: AtomicU64,
    turns_cancelled_by_session_cancel: AtomicU64,
    turns_cancelled_by_drop: AtomicU64,
    messages_in: AtomicU64,
    messages_out: AtomicU64,
}

/// What one session's loop waits for.
#[derive(Default)]
struct Signals {
    /// A `call_wait` permission request arrived (the `wait` turn).
    waiting: Notify,
    /// An update arrived (the `stream` turn counts them).
    updated: Notify,
}

type SignalMap = Arc<Mutex<HashMap<String, Arc<Signals>>>>;

struct SoakClient {
    counts: Arc<Counts>,
    signals: SignalMap,
}

impl SoakClient {
    fn signals(&self, session: &SessionId) -> Option<Arc<Signals>> {
        self.signals.lock().unwrap().get(&session.0).cloned()
    }
}

impl Client<ClientContext> for SoakClient {
    async fn session_request_permission(
        &self,
        params: RequestPermissionRequest,
        cx: ClientContext,
    ) -> Result<RequestPermissionResponse, Error> {
        self.counts.permissions.fetch_add(1, Relaxed);
        if params.tool_call.tool_call_id.0 == "call_wait" {
            // A dialog the user never answers: `session/cancel` closes it.
            if let Some(signals) = self.signals(&params.session_id) {
                signals.waiting.notify_one();
            }
            cx.cancelled().await;
            return Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled));
        }
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new("allow"))))
    }

    async fn session_update(&self, params: SessionNotification, _: ClientContext) -> Result<(), Error> {
        self.counts.updates.fetch_add(1, Relaxed);
        if let Some(signals) = self.signals(&params.session_id) {
            signals.updated.notify_waiters();
        }
        Ok(())
    }
}

/// Counts the wire tap's lines by direction (`{"dir":"in"` / `{"dir":"out"`).
struct TapCounter {
    counts: Arc<Counts>,
    head: Vec<u8>,
}

impl AsyncWrite for TapCounter {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        for &b in buf {
            if b == b'\n' {
                let counter = if self.head.starts_with(b"{\"dir\":\"in\"") {
                    &self.counts.messages_in
                } else {
                    &self.counts.messages_out
                };
                counter.fetch_add(1, Relaxed);
                self.head.clear();
            } else if self.head.len() < 11 {
                self.head.push(b);
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

async fn session_loop(
    agent: AgentHandle,
    counts: Arc<Counts>,
    map: SignalMap,
    deadline: Instant,
) -> Result<(), String> {
    let session =
        agent.new_session(NewSessionRequest::new("/soak", vec![])).await.map_err(|e| format!("session/new: {e}"))?;
    let s = session.session_id;
    let signals = Arc::new(Signals::default());
    map.lock().unwrap().insert(s.0.clone(), signals.clone());
    let mut turn = 0u64;
    while Instant::now() < deadline {
        match turn % 4 {
            2 => {
                // Arm the wake-up before the prompt goes out.
                let waiting = signals.waiting.notified();
                let prompt = agent.prompt(PromptRequest::new(s.clone(), vec![text("wait")]));
                let cancel = async {
                    waiting.await;
                    agent.cancel(CancelNotification::new(s.clone())).await
                };
                let (answer, cancelled) = tokio::join!(prompt, cancel);
                cancelled.map_err(|e| format!("session/cancel: {e}"))?;
                let answer = answer.map_err(|e| format!("cancelled prompt: {e}"))?;
                if answer.stop_reason != StopReason::Cancelled {
                    return Err(format!("a cancelled turn ended with {:?}", answer.stop_reason));
                }
                counts.turns_cancelled_by_session_cancel.fetch_add(1, Relaxed);
            }
            3 => {
                let prompt = agent.prompt(PromptRequest::new(s.clone(), vec![text("stream")]));
                let some_updates = async {
                    for _ in 0..5 {
                        signals.updated.notified().await;
                    }
                };
                tokio::select! {
                    answer = prompt => return Err(format!("a streaming turn ended by itself: {answer:?}")),
                    _ = some_updates => {} // dropping the prompt call sends $/cancel_request
                }
                counts.turns_cancelled_by_drop.fetch_add(1, Relaxed);
            }
            _ => {
                let answer = agent
                    .prompt(PromptRequest::new(s.clone(), vec![text("plain")]))
                    .await
                    .map_err(|e| format!("prompt: {e}"))?;
                if answer.stop_reason != StopReason::EndTurn {
                    return Err(format!("a plain turn ended with {:?}", answer.stop_reason));
                }
                counts.turns_end_turn.fetch_add(1, Relaxed);
            }
        }
        turn += 1;
    }
    Ok(())
}

async fn run_client(seconds: u64, sessions: usize) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let counts = Arc::new(Counts::default());
    let signals = SignalMap::default();
    let client = SoakClient { counts: counts.clone(), signals: signals.clone() };
    let mut command = std::process::Command::new(exe);
    command.arg("agent");
    let tap = TapCounter { counts: counts.clone(), head: Vec::new() };
    let (agent, process) = Connection::new()
        .wire_tap(tap)
        .spawn_agent(client, command, SpawnOptions::default())
        .map_err(|e| format!("cannot spawn the agent: {e}"))?;
    println!("agent-pid {}", process.id());
    agent.initialize(InitializeRequest::new(ProtocolVersion(1))).await.map_err(|e| format!("initialize: {e}"))?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let loops: Vec<_> = (0..sessions)
        .map(|_| tokio::spawn(session_loop(agent.clone(), counts.clone(), signals.clone(), deadline)))
        .collect();
    for l in loops {
        l.await.map_err(|e| format!("a session loop panicked: {e}"))??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let c = |a: &AtomicU64| a.load(Relaxed);
    let summary = serde_json::json!({
        "seconds": elapsed,
        "sessions": sessions,
        "turns": c(&counts.turns_end_turn) + c(&counts.turns_cancelled_by_session_cancel) + c(&counts.turns_cancelled_by_drop),
        "turnsEndTurn": c(&counts.turns_end_turn),
        "turnsCancelledBySessionCancel": c(&counts.turns_cancelled_by_session_cancel),
        "turnsCancelledByDrop": c(&counts.turns_cancelled_by_drop),
        "updates": c(&counts.updates),
        "permissionRequests": c(&counts.permissions),
        "messagesIn": c(&counts.messages_in),
        "messagesOut": c(&counts.messages_out),
    });
    println!("{summary}");
    process.terminate().await.map_err(|e| format!("cannot stop the agent: {e}"))?;
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("agent") => {
            acp_rpc::agent::serve_stdio(SoakAgent { sessions: AtomicU64::new(0) }).await.map_err(|e| e.to_string())
        }
        Some("client") => {
            let seconds = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(60);
            let sessions = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
            run_client(seconds, sessions).await
        }
        _ => Err("usage: soak_peer agent | soak_peer client SECONDS [SESSIONS]".into()),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soak_peer: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
