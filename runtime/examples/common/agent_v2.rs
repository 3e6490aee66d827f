//! The demo agent's protocol v2 side, written with `#[acp_agent(v2)]` (needs the
//! `unstable_protocol_v2` feature). It does the v1 demo's turn the v2 way:
//!
//! - the v2 baseline an agent advertising `session` owes: `session/new`, `session/list` (by
//!   `cwd`), `session/resume` (with `replayFrom: start`, the conversation so far is replayed as
//!   whole-message updates before the answer), `session/close` (the runtime cancels the
//!   session's turn first), `session/prompt` and `session/cancel`;
//! - a prompt is accepted by the runtime (answer with the user message's id, `user_message`,
//!   `state_update: running`); the turn streams an agent message word by word, starts a `read`
//!   tool call for the file the prompt names (`README.md` when none), and asks permission
//!   through `Turn::request_permission` (`requires_action` meanwhile). Allowed: v2 has no
//!   `fs/*` on the client, so the agent reads the file itself, inside the session's `cwd`,
//!   appends its first lines to the tool call and completes it, and a closing message quotes
//!   the first line. Rejected: the tool call fails. Cancelled (at the permission request or
//!   while a message streams): the tool call is marked `cancelled` and the turn returns, which
//!   the runtime ends with `idle` / `cancelled`.
//!
//! Two commands start work the client can cancel on its own, while the turn goes on:
//!
//! - `/slow`: a tool call that advertises `capabilities.cancel` and reports progress until the
//!   client sends `tool_call/cancel` for it; it then ends `cancelled`, and the turn goes on to a
//!   closing message and `end_turn`.
//! - `/ticker`: a tool call showing an agent-owned terminal that runs the demo's built-in ticker
//!   (a line of output per tick; no process is spawned), the terminal advertising
//!   `capabilities.cancel`. After `terminal/cancel` the terminal reports its exit (`SIGTERM`),
//!   the tool call completes, and the turn ends `end_turn`.
//!
//! Both also stop when the turn is cancelled (`session/cancel`, `session/close`), which ends it
//! `cancelled`.
//!
//! `ACP_DEMO_DELAY_MS` sets the pause between streamed words (default 40); a tick of the
//! cancellable work is ten of them, at least 100 ms.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use acp_rpc::Owner;
use acp_rpc::acp_agent;
use acp_rpc::acp_types::v2::{
    AgentMessage, CancelSessionNotification, CloseSessionRequest, CloseSessionResponse, ContentBlock, Error, ErrorData,
    Implementation, InitializeRequest, InitializeResponse, ListSessionsRequest, ListSessionsResponse, MessageId,
    NewSessionRequest, NewSessionResponse, Nullable, PermissionOption, PermissionOptionKind, PromptRequest,
    PromptResponse, ProtocolVersion, ReplayFrom, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionSubject, ResumeSessionRequest, ResumeSessionResponse, SessionId, SessionInfo,
    SessionNotFoundErrorData, SessionUpdate, Terminal, TerminalExitStatus, TextContent, ToolCallContent,
    ToolCallPermissionSubject, ToolCallStatus, ToolCallUpdate, ToolKind, UpdateSessionNotification, UserMessage,
};
use acp_rpc::sessions::SessionStore;
use acp_rpc::v2::{AgentContext, Turn};

use super::{DEFAULT_FILE, MAX_LINES, NAME, file_named_in_text, file_of_uri};

const ALLOW: &str = "allow-once";
const REJECT: &str = "reject-once";

pub struct DemoAgentV2 {
    /// Shared by the agents of all connections (`sibling`), each session kept under the owner
    /// that created it: a client sees, resumes and closes only its own.
    sessions: Arc<SessionStore<Session>>,
    /// The pause between streamed words.
    delay: Duration,
}

struct Session {
    cwd: PathBuf,
    /// The conversation, for `session/resume` with replay.
    history: Vec<Entry>,
}

/// One message of a session's conversation, under the id the client knows it by.
enum Entry {
    User(MessageId, Vec<ContentBlock>),
    Agent(MessageId, String),
}

impl DemoAgentV2 {
    pub fn new(delay: Duration) -> Self {
        DemoAgentV2 { sessions: Arc::default(), delay }
    }

    /// An agent for another connection that shares this one's sessions.
    #[allow(dead_code)] // for `listen`, which the `duet` example (sharing this file) does not use
    pub fn sibling(&self) -> Self {
        DemoAgentV2 { sessions: self.sessions.clone(), delay: self.delay }
    }

    /// The working directory of `owner`'s session; another owner's session is not found.
    // v2's error holds typed data: over clippy's 128 bytes when serde_json's `preserve_order`
    // makes every `Map` an `IndexMap` (as in this workspace's tests), under it otherwise.
    #[allow(clippy::result_large_err)]
    fn cwd_of(&self, owner: &Owner, session: &SessionId) -> Result<PathBuf, Error> {
        self.sessions.with(owner, &session.0, |s| s.cwd.clone()).ok_or_else(|| session_not_found(session))
    }

    fn remember(&self, owner: &Owner, session: &SessionId, entry: Entry) {
        self.sessions.with(owner, &session.0, |s| s.history.push(entry));
    }
}

/// -32002 naming the session (`data.sessionId`, the schema's `SessionNotFoundErrorData`).
fn session_not_found(session: &SessionId) -> Error {
    Error::resource_not_found().data(ErrorData::from(SessionNotFoundErrorData::new(session.clone())))
}

#[allow(clippy::result_large_err)] // see `cwd_of`
fn absolute(cwd: &str) -> Result<PathBuf, Error> {
    let path = PathBuf::from(cwd);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(Error::invalid_params().data(ErrorData::Other(format!("cwd must be an absolute path, got {cwd:?}").into())))
    }
}

#[acp_agent(v2)]
impl DemoAgentV2 {
    async fn initialize(&self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        log!("initialize from {} (protocol {}, answered with v2)", params.info.name, params.protocol_version.0);
        // The capabilities (`session: {}`, the baseline's marker) are added by `#[acp_agent(v2)]`.
        Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new(NAME, env!("CARGO_PKG_VERSION"))))
    }

    async fn session_new(&self, params: NewSessionRequest, cx: AgentContext) -> Result<NewSessionResponse, Error> {
        let cwd = absolute(&params.cwd.0)?;
        if params.mcp_servers.as_ref().is_some_and(|servers| !servers.is_empty()) {
            return Err(Error::invalid_params().data(ErrorData::Other("this agent connects to no MCP servers".into())));
        }
        log!("session/new in {}", cwd.display());
        let id = self.sessions.create(cx.owner(), Session { cwd, history: Vec::new() });
        Ok(NewSessionResponse::new(id))
    }

    async fn session_list(&self, params: ListSessionsRequest, cx: AgentContext) -> Result<ListSessionsResponse, Error> {
        let only = params.cwd.into_value().map(|cwd| PathBuf::from(cwd.0));
        let sessions: Vec<SessionInfo> = self
            .sessions
            .list_with(cx.owner(), |id, s| {
                only.as_ref()
                    .is_none_or(|cwd| *cwd == s.cwd)
                    .then(|| SessionInfo::new(id, s.cwd.to_string_lossy().into_owned()))
            })
            .into_iter()
            .flatten()
            .collect();
        Ok(ListSessionsResponse::new(sessions))
    }

    async fn session_resume(
        &self,
        params: ResumeSessionRequest,
        cx: AgentContext,
    ) -> Result<ResumeSessionResponse, Error> {
        absolute(&params.cwd.0)?;
        let replay = match params.replay_from.into_value() {
            None => false,
            Some(ReplayFrom::Start(_)) => true,
            Some(other) => {
                return Err(
                    Error::invalid_params().data(ErrorData::Other(format!("unknown replay cursor {other:?}").into()))
                );
            }
        };
        // Taken under the store's lock, sent after it; another owner's session is not found.
        let updates: Vec<SessionUpdate> = self
            .sessions
            .with(cx.owner(), &params.session_id.0, |session| {
                let history = if replay { session.history.as_slice() } else { &[] };
                history
                    .iter()
                    .map(|entry| match entry {
                        Entry::User(id, content) => UserMessage::new(id.clone()).content(content.clone()).into(),
                        Entry::Agent(id, text) => {
                            AgentMessage::new(id.clone()).content(vec![TextContent::new(text.as_str()).into()]).into()
                        }
                    })
                    .collect()
            })
            .ok_or_else(|| session_not_found(&params.session_id))?;
        log!("session/resume {} (replaying {} messages)", params.session_id.0, updates.len());
        // Every replayed update goes out before the answer.
        for update in updates {
            cx.client().session_update(UpdateSessionNotification::new(params.session_id.clone(), update)).await?;
        }
        Ok(ResumeSessionResponse::new())
    }

    async fn session_close(
        &self,
        params: CloseSessionRequest,
        cx: AgentContext,
    ) -> Result<CloseSessionResponse, Error> {
        // The runtime has already cancelled the session's turn on this connection, as
        // `session/cancel` would; another owner's session is not found (and not removed).
        match self.sessions.remove(cx.owner(), &params.session_id.0) {
            Some(_) => {
                log!("session/close {}", params.session_id.0);
                Ok(CloseSessionResponse::new())
            }
            None => Err(session_not_found(&params.session_id)),
        }
    }

    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        // An unknown session is refused before acceptance: an error answer, and no update.
        let owner = cx.owner().clone();
        let cwd = self.cwd_of(&owner, &params.session_id)?;
        let turn = cx.turn().expect("a prompt handler has a turn");
        let user_message = turn.accept().await?;
        self.remember(&owner, &params.session_id, Entry::User(user_message, params.prompt.clone()));
        log!("session/prompt {}", params.session_id.0);
        match command_of(&params.prompt) {
            Some("/slow") => self.slow(turn, &owner).await?,
            Some("/ticker") => self.ticker(turn, &owner, &cwd).await?,
            _ => {
                let file = file_named_in(&params.prompt).unwrap_or_else(|| DEFAULT_FILE.to_owned());
                self.run(turn, &owner, &cwd, &file).await?;
            }
        }
        log!("turn of {} done (cancelled: {})", params.session_id.0, turn.is_cancelled());
        // Returning ends the turn: the runtime sends `idle` with `end_turn`, or `cancelled`.
        Ok(turn.response().await?)
    }

    async fn session_cancel(&self, params: CancelSessionNotification) {
        // The runtime has already fired the turn's token; the turn notices it.
        log!("session/cancel {}", params.session_id.0);
    }
}

impl DemoAgentV2 {
    /// The turn after acceptance (see the module docs).
    async fn run(&self, turn: &Turn, owner: &Owner, cwd: &Path, file: &str) -> Result<(), Error> {
        let session = turn.session_id().clone();
        let stream = |text: String| {
            let session = session.clone();
            async move { self.stream(turn, owner, &session, &text).await }
        };
        if !stream(format!("Let me read {file} for you.")).await? {
            return Ok(());
        }

        let title = format!("Read {file}");
        let call = turn.start_tool_call(title.as_str(), ToolKind::Read).await?;
        let subject =
            ToolCallUpdate::new(call.id().clone()).title(title).kind(ToolKind::Read).status(ToolCallStatus::Pending);
        let options = vec![
            PermissionOption::new(ALLOW, "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new(REJECT, "Reject", PermissionOptionKind::RejectOnce),
        ];
        let ask = RequestPermissionRequest::new(session.clone(), format!("Allow reading {file}?"), options)
            .subject(RequestPermissionSubject::from(ToolCallPermissionSubject::new(subject)));
        // Bound to the turn: a `session/cancel` resolves it `cancelled` at once, and the
        // runtime withdraws the request from the client with `$/cancel_request`.
        let answer = turn.request_permission(ask).await?;
        let allowed = match &answer.outcome {
            RequestPermissionOutcome::Selected(selected) => selected.option_id.0 == ALLOW,
            RequestPermissionOutcome::Cancelled(_) => {
                log!("permission for {}: cancelled", call.id().0);
                // The spec lets the last updates of a cancelled turn precede its idle.
                call.update(ToolCallUpdate::new(call.id().clone()).status(ToolCallStatus::Cancelled)).await?;
                return Ok(());
            }
            _ => false,
        };
        log!("permission for {}: {}", call.id().0, if allowed { "allowed" } else { "rejected" });
        if !allowed {
            call.fail().await?;
            stream(format!("Understood, I left {file} alone.")).await?;
            return Ok(());
        }

        call.in_progress().await?;
        match read_head(cwd, file) {
            Ok(head) => {
                call.append_text(head.join("\n")).await?;
                call.complete().await?;
                let first = head.iter().find(|l| !l.trim().is_empty()).map_or("", |l| l.trim());
                stream(format!("{file} starts with “{first}”.")).await?;
            }
            Err(why) => {
                log!("reading {file} failed: {why}");
                call.append_text(format!("cannot read {file}: {why}")).await?;
                call.fail().await?;
                stream(format!("I could not read {file}.")).await?;
            }
        }
        Ok(())
    }

    /// How often cancellable work reports progress.
    fn tick(&self) -> Duration {
        (self.delay * 10).max(Duration::from_millis(100))
    }

    /// `/slow`: a cancellable tool call that works until the client cancels it (see the
    /// module docs).
    async fn slow(&self, turn: &Turn, owner: &Owner) -> Result<(), Error> {
        let session = turn.session_id().clone();
        self.stream(turn, owner, &session, "Starting a slow task; cancel it whenever you like.").await?;
        let call = turn.start_tool_call("Slow task (runs until cancelled)", ToolKind::Other).await?;
        // Fires on `tool_call/cancel` for this call, or when the turn is cancelled.
        let stop = call.cancellable().await?;
        call.in_progress().await?;
        let mut ticks = 0u32;
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = tokio::time::sleep(self.tick()) => {}
            }
            ticks += 1;
            call.append_text(format!("still working ({ticks})")).await?;
        }
        log!("slow task {} cancelled after {ticks} ticks", call.id().0);
        call.cancelled().await?;
        if !turn.is_cancelled() {
            // Only the call was cancelled: the turn goes on.
            self.stream(turn, owner, &session, &format!("Stopped the slow task after {ticks} updates.")).await?;
        }
        Ok(())
    }

    /// `/ticker`: a tool call showing a terminal the client can cancel (see the module docs).
    async fn ticker(&self, turn: &Turn, owner: &Owner, cwd: &Path) -> Result<(), Error> {
        let session = turn.session_id().clone();
        let call = turn.start_tool_call("Run the demo ticker", ToolKind::Execute).await?;
        let cwd = cwd.to_string_lossy().into_owned();
        let terminal = turn.start_terminal("demo-ticker (built in: a line per tick)", Some(cwd.into())).await?;
        call.append(ToolCallContent::Terminal(Terminal::new(terminal.id().clone()))).await?;
        // Fires on `terminal/cancel` for this terminal, or when the turn is cancelled.
        let stop = terminal.cancellable().await?;
        call.in_progress().await?;
        let mut ticks = 0u32;
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = tokio::time::sleep(self.tick()) => {}
            }
            ticks += 1;
            terminal.output(format!("tick {ticks}\r\n").as_bytes()).await?;
        }
        log!("ticker {} stopped after {ticks} ticks", terminal.id().0);
        terminal.exited(TerminalExitStatus::new().signal("SIGTERM".to_owned())).await?;
        if turn.is_cancelled() {
            call.cancelled().await?;
            return Ok(());
        }
        // The terminal's exit leaves the tool call's status to the agent: the ticker ran
        // until it was stopped, which is what it was asked to do.
        call.complete().await?;
        self.stream(turn, owner, &session, &format!("The ticker stopped after {ticks} ticks.")).await?;
        Ok(())
    }

    /// Streams `text` as one agent message, word by word; `false` when the turn was cancelled
    /// meanwhile (what was sent so far stays in the history).
    async fn stream(&self, turn: &Turn, owner: &Owner, session: &SessionId, text: &str) -> Result<bool, Error> {
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
            self.remember(owner, session, Entry::Agent(message.id().clone(), sent));
        }
        Ok(finished)
    }
}

/// The command a prompt starts with (`/slow`, `/ticker`), if it is one.
fn command_of(prompt: &[ContentBlock]) -> Option<&str> {
    match prompt.first() {
        Some(ContentBlock::Text(text)) => text.text.split_whitespace().next().filter(|w| w.starts_with('/')),
        _ => None,
    }
}

/// The file the prompt asks about, as the v1 side finds it.
fn file_named_in(prompt: &[ContentBlock]) -> Option<String> {
    prompt.iter().find_map(|block| match block {
        ContentBlock::ResourceLink(link) => Some(file_of_uri(&link.uri)),
        ContentBlock::Text(text) => file_named_in_text(&text.text),
        _ => None,
    })
}

/// The first lines of `file`, which must resolve (symbolic links included) inside `cwd`.
fn read_head(cwd: &Path, file: &str) -> Result<Vec<String>, String> {
    let root = cwd.canonicalize().map_err(|e| format!("the session's cwd {}: {e}", cwd.display()))?;
    let path = root.join(file).canonicalize().map_err(|e| e.to_string())?;
    if !path.starts_with(&root) {
        return Err(format!("{} is outside the session's cwd", path.display()));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    Ok(text.lines().take(MAX_LINES as usize).map(str::to_owned).collect())
}
