//! A protocol v2 agent written with our runtime's v2 API (a hand-written
//! `acp_types::v2::Agent<acp_runtime::v2::AgentContext>` impl), for the v2 interop tests
//! (`tests/tests/interop_v2.rs`), where the official SDKs' v2 clients drive it.
//!
//! `v2_agent` serves v2 only; `v2_agent --dual` serves v1 and v2 on one endpoint
//! (`version::ProtocolRouter`: the client's first `initialize` picks), with a minimal v1 agent
//! beside the v2 one. ACP on stdin/stdout, logs on stderr.
//!
//! What the v2 agent does, as the v2 baseline asks of an agent advertising `session`:
//!
//! - `session/new`, `session/list` (by `cwd`), `session/resume` (with `replayFrom: start`, the
//!   conversation so far is replayed as whole-message updates before the answer),
//!   `session/close` (the runtime cancels the session's turn first);
//! - `session/prompt`: the runtime accepts the prompt (answer, `user_message`, `running`); the
//!   turn streams an agent message word by word, starts a `read` tool call for the file the
//!   prompt names (`notes.txt` when none), and asks permission through
//!   `Turn::request_permission` (`requires_action` meanwhile). Allowed: the tool reads the
//!   file's first lines from the session's `cwd`, appends them as content, completes, and a
//!   closing message quotes the first line. Rejected: the tool call fails. Cancelled: the tool
//!   call is marked `cancelled` and the turn returns, which the runtime ends with
//!   `idle`/`cancelled`. A `session/cancel` while the message streams ends the turn the same way.
//!
//! `ACP_DEMO_DELAY_MS` sets the pause between streamed words (default 20).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use acp_runtime::acp_types::v2::{
    Agent, AgentCapabilities, AgentMessage, CancelSessionNotification, CloseSessionRequest, CloseSessionResponse,
    ContentBlock, Error, Implementation, InitializeRequest, InitializeResponse, ListSessionsRequest,
    ListSessionsResponse, MessageId, NewSessionRequest, NewSessionResponse, PermissionOption, PermissionOptionKind,
    PromptRequest, PromptResponse, ProtocolVersion, ReplayFrom, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionSubject, ResumeSessionRequest, ResumeSessionResponse, SessionCapabilities, SessionId, SessionInfo,
    SessionUpdate, TextContent, ToolCallPermissionSubject, ToolCallStatus, ToolCallUpdate, ToolKind,
    UpdateSessionNotification, UserMessage,
};
use acp_runtime::v2::{AgentContext, Turn};

const NAME: &str = "acp-v2-example-agent";
const ALLOW: &str = "allow-once";
const REJECT: &str = "reject-once";
/// How much of the file the tool reads.
const MAX_LINES: usize = 8;

macro_rules! log {
    ($($arg:tt)*) => { eprintln!("[v2-agent] {}", format_args!($($arg)*)) };
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let dual = std::env::args().skip(1).any(|a| a == "--dual");
    log!("ready on stdio ({})", if dual { "v1 and v2" } else { "v2 only" });
    let result = if dual {
        let router =
            acp_runtime::version::ProtocolRouter::new().with_v1_agent(v1::Agent1).with_v2_agent(V2Agent::new());
        let (reader, writer) = acp_runtime::transport::stdio();
        let (_peer, serve) = acp_runtime::Connection::new().serve(reader, writer, router);
        serve.await
    } else {
        acp_runtime::v2::serve_stdio(V2Agent::new()).await
    };
    log!("connection ended: {result:?}");
    if result.is_ok() { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE }
}

struct V2Agent {
    sessions: Mutex<HashMap<String, Session>>,
    /// Makes session ids unique across runs, not only within this process.
    id_seed: u64,
    sessions_made: AtomicU64,
    /// The pause between streamed words.
    delay: Duration,
}

struct Session {
    cwd: String,
    /// The conversation, for `session/resume` with replay.
    history: Vec<Entry>,
}

/// One message of a session's conversation, by the id the client knows it under.
enum Entry {
    User(MessageId, Vec<ContentBlock>),
    Agent(MessageId, String),
}

impl V2Agent {
    fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let delay_ms = std::env::var("ACP_DEMO_DELAY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
        V2Agent {
            sessions: Mutex::new(HashMap::new()),
            id_seed: (u64::from(std::process::id()) << 32) ^ u64::from(nanos),
            sessions_made: AtomicU64::new(0),
            delay: Duration::from_millis(delay_ms),
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn cwd_of(&self, session: &SessionId) -> Result<String, Error> {
        self.sessions().get(&session.0).map(|s| s.cwd.clone()).ok_or_else(|| session_not_found(session))
    }

    fn remember(&self, session: &SessionId, entry: Entry) {
        if let Some(s) = self.sessions().get_mut(&session.0) {
            s.history.push(entry);
        }
    }
}

/// -32002 with the session, the shape the official SDKs' draft gives it (`data.sessionId`).
fn session_not_found(session: &SessionId) -> Error {
    Error::resource_not_found().data(serde_json::json!({ "sessionId": session.0 }))
}

fn absolute(cwd: &str) -> Result<(), Error> {
    if std::path::Path::new(cwd).is_absolute() {
        Ok(())
    } else {
        Err(Error::invalid_params().data(format!("cwd must be an absolute path, got {cwd:?}").into()))
    }
}

impl Agent<AgentContext> for V2Agent {
    async fn initialize(&self, params: InitializeRequest, _cx: AgentContext) -> Result<InitializeResponse, Error> {
        log!("initialize from {} (protocol {})", params.info.name, params.protocol_version.0);
        // `session: {}` commits us to the v2 baseline: new, list, resume, close, prompt, cancel.
        Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new(NAME, env!("CARGO_PKG_VERSION")))
            .capabilities(AgentCapabilities::new().session(SessionCapabilities::new())))
    }

    async fn session_new(&self, params: NewSessionRequest, _cx: AgentContext) -> Result<NewSessionResponse, Error> {
        absolute(&params.cwd.0)?;
        if params.mcp_servers.as_ref().is_some_and(|servers| !servers.is_empty()) {
            // We advertise no MCP transport.
            return Err(Error::invalid_params().data("this agent connects to no MCP servers".into()));
        }
        let n = self.sessions_made.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("sess_{:x}_{n}", self.id_seed);
        log!("session/new {id} in {}", params.cwd.0);
        self.sessions().insert(id.clone(), Session { cwd: params.cwd.0, history: Vec::new() });
        Ok(NewSessionResponse::new(id))
    }

    async fn session_list(
        &self,
        params: ListSessionsRequest,
        _cx: AgentContext,
    ) -> Result<ListSessionsResponse, Error> {
        let only = params.cwd.flatten();
        let mut sessions: Vec<SessionInfo> = self
            .sessions()
            .iter()
            .filter(|(_, s)| only.as_ref().is_none_or(|cwd| cwd.0 == s.cwd))
            .map(|(id, s)| SessionInfo::new(id.as_str(), s.cwd.as_str()))
            .collect();
        sessions.sort_by(|a, b| a.session_id.0.cmp(&b.session_id.0));
        Ok(ListSessionsResponse::new(sessions))
    }

    async fn session_resume(
        &self,
        params: ResumeSessionRequest,
        cx: AgentContext,
    ) -> Result<ResumeSessionResponse, Error> {
        absolute(&params.cwd.0)?;
        let replay = match params.replay_from.flatten() {
            None => false,
            Some(ReplayFrom::Start(_)) => true,
            Some(other) => {
                return Err(Error::invalid_params().data(format!("unknown replay cursor {other:?}").into()));
            }
        };
        // The updates to replay, taken under the lock and sent after it.
        let updates: Vec<SessionUpdate> = {
            let sessions = self.sessions();
            let session = sessions.get(&params.session_id.0).ok_or_else(|| session_not_found(&params.session_id))?;
            if !replay {
                Vec::new()
            } else {
                session
                    .history
                    .iter()
                    .map(|entry| match entry {
                        Entry::User(id, content) => UserMessage::new(id.clone()).content(content.clone()).into(),
                        Entry::Agent(id, text) => {
                            AgentMessage::new(id.clone()).content(vec![TextContent::new(text.as_str()).into()]).into()
                        }
                    })
                    .collect()
            }
        };
        log!("session/resume {} (replaying {} messages)", params.session_id.0, updates.len());
        // The spec: every replayed update goes out before the answer.
        for update in updates {
            cx.client().session_update(UpdateSessionNotification::new(params.session_id.clone(), update)).await?;
        }
        Ok(ResumeSessionResponse::new())
    }

    async fn session_close(
        &self,
        params: CloseSessionRequest,
        _cx: AgentContext,
    ) -> Result<CloseSessionResponse, Error> {
        // The runtime has already cancelled the session's turn, as `session/cancel` would.
        match self.sessions().remove(&params.session_id.0) {
            Some(_) => {
                log!("session/close {}", params.session_id.0);
                Ok(CloseSessionResponse::new())
            }
            None => Err(session_not_found(&params.session_id)),
        }
    }

    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        // Refused before acceptance: the request's error answer, and no update at all.
        let cwd = self.cwd_of(&params.session_id)?;
        let turn = cx.turn().expect("a prompt handler has a turn");
        let user_message = turn.accept().await?;
        self.remember(&params.session_id, Entry::User(user_message, params.prompt.clone()));
        log!("session/prompt {}", params.session_id.0);
        let file = file_named_in(&params.prompt).unwrap_or_else(|| "notes.txt".to_owned());
        let outcome = self.run(turn, &cwd, &file).await;
        log!("turn of {} done (cancelled: {})", params.session_id.0, turn.is_cancelled());
        outcome.map(|()| PromptResponse::new())
    }

    async fn session_cancel(&self, params: CancelSessionNotification, _cx: AgentContext) -> Result<(), Error> {
        // The runtime has already fired the turn's token; the turn notices it.
        log!("session/cancel {}", params.session_id.0);
        Ok(())
    }
}

impl V2Agent {
    /// The turn after acceptance (see the module docs). Returning ends it; the runtime sends
    /// the idle update with the stop reason (`cancelled` when the session was cancelled).
    async fn run(&self, turn: &Turn, cwd: &str, file: &str) -> Result<(), Error> {
        let session = turn.session_id().clone();
        if !self.stream(turn, &session, &format!("Let me read {file} for you.")).await? {
            return Ok(());
        }

        let title = format!("Read {file}");
        let call = turn.start_tool_call(title.as_str(), ToolKind::Read).await?;
        let subject = ToolCallUpdate::new(call.id().clone())
            .title(title.clone())
            .kind(ToolKind::Read)
            .status(ToolCallStatus::Pending);
        let options = vec![
            PermissionOption::new(ALLOW, "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new(REJECT, "Reject", PermissionOptionKind::RejectOnce),
        ];
        let ask = RequestPermissionRequest::new(session.clone(), format!("Allow reading {file}?"), options)
            .subject(RequestPermissionSubject::from(ToolCallPermissionSubject::new(subject)));
        // Bound to the turn: on `session/cancel` it resolves `cancelled` at once, and the
        // runtime tells the client with `$/cancel_request`.
        let answer = turn.request_permission(ask).await?;
        let allowed = match &answer.outcome {
            RequestPermissionOutcome::Selected(selected) => selected.option_id.0 == ALLOW,
            RequestPermissionOutcome::Cancelled => {
                log!("permission for {}: cancelled", call.id().0);
                // Reported before the idle update, as the spec asks of updates after a cancel.
                call.update(ToolCallUpdate::new(call.id().clone()).status(ToolCallStatus::Cancelled)).await?;
                return Ok(());
            }
            _ => false,
        };
        log!("permission for {}: {}", call.id().0, if allowed { "allowed" } else { "rejected" });
        if !allowed {
            call.fail().await?;
            self.stream(turn, &session, &format!("Understood, I left {file} alone.")).await?;
            return Ok(());
        }

        call.in_progress().await?;
        let path = std::path::Path::new(cwd).join(file);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let head: Vec<&str> = text.lines().take(MAX_LINES).collect();
                call.append_text(head.join("\n")).await?;
                call.complete().await?;
                let first = head.iter().find(|l| !l.trim().is_empty()).map_or("", |l| l.trim());
                self.stream(turn, &session, &format!("{file} starts with “{first}”.")).await?;
            }
            Err(e) => {
                log!("reading {} failed: {e}", path.display());
                call.append_text(format!("cannot read {file}: {e}")).await?;
                call.fail().await?;
                self.stream(turn, &session, &format!("I could not read {file}.")).await?;
            }
        }
        Ok(())
    }

    /// Streams `text` as one agent message, word by word; `false` when the turn was cancelled
    /// meanwhile (what was sent so far stays in the history).
    async fn stream(&self, turn: &Turn, session: &SessionId, text: &str) -> Result<bool, Error> {
        let message = turn.agent_message();
        let mut sent = String::new();
        let mut finished = true;
        for word in text.split_inclusive(' ') {
            tokio::select! {
                biased;
                () = turn.cancelled() => {
                    finished = false;
                    break;
                }
                () = tokio::time::sleep(self.delay) => {}
            }
            message.text(word).await?;
            sent.push_str(word);
        }
        if !sent.is_empty() {
            self.remember(session, Entry::Agent(message.id().clone(), sent));
        }
        Ok(finished)
    }
}

/// The file the prompt asks about: a resource link's path, or the first word that looks like
/// a file name (has a `.` between letters or digits, after trimming punctuation).
fn file_named_in(prompt: &[ContentBlock]) -> Option<String> {
    prompt.iter().find_map(|block| match block {
        ContentBlock::ResourceLink(link) => Some(link.uri.strip_prefix("file://").unwrap_or(&link.uri).to_owned()),
        ContentBlock::Text(text) => text
            .text
            .split_whitespace()
            .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
            .find(|w| w.contains('.'))
            .map(str::to_owned),
        _ => None,
    })
}

/// The v1 side of `--dual`: just enough of a v1 agent to show which implementation answered.
mod v1 {
    use acp_runtime::AgentContext;
    use acp_runtime::acp_types::{
        AgentCapabilities, AuthenticateRequest, AuthenticateResponse, CancelNotification, ContentBlock, ContentChunk,
        Error, Implementation, InitializeRequest, InitializeResponse, NewSessionRequest, NewSessionResponse,
        PromptRequest, PromptResponse, ProtocolVersion, SessionNotification, SessionUpdate, StopReason, TextContent,
    };

    pub struct Agent1;

    impl acp_runtime::acp_types::Agent<AgentContext> for Agent1 {
        async fn initialize(&self, params: InitializeRequest, _cx: AgentContext) -> Result<InitializeResponse, Error> {
            log!("initialize (v1 side) at protocol {}", params.protocol_version.0);
            Ok(InitializeResponse::new(ProtocolVersion::V1)
                .agent_capabilities(AgentCapabilities::new())
                .auth_methods(Vec::new())
                .agent_info(Implementation::new(super::NAME, env!("CARGO_PKG_VERSION"))))
        }

        async fn authenticate(&self, _: AuthenticateRequest, _cx: AgentContext) -> Result<AuthenticateResponse, Error> {
            Ok(AuthenticateResponse::new())
        }

        async fn session_new(&self, _: NewSessionRequest, _cx: AgentContext) -> Result<NewSessionResponse, Error> {
            Ok(NewSessionResponse::new(format!("v1_sess_{}", std::process::id())))
        }

        async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
            let text = ContentBlock::Text(TextContent::new("This is the v1 side of a dual-version agent."));
            let update = SessionUpdate::AgentMessageChunk(ContentChunk::new(text));
            cx.client().session_update(SessionNotification::new(params.session_id, update)).await?;
            Ok(PromptResponse::new(StopReason::EndTurn))
        }

        async fn session_cancel(&self, _: CancelNotification, _cx: AgentContext) -> Result<(), Error> {
            Ok(())
        }
    }
}
