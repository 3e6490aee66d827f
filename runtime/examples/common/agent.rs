//! The demo agent: a scripted stand-in for an LLM-backed agent, written with `#[acp_agent]`.
//!
//! A prompt turn follows the spec's prompt-turn guide step by step: a `plan`, a few streamed
//! `agent_message_chunk`s, a `tool_call` (kind `read`, `pending`) for the file named in the
//! prompt (`README.md` when none is), `session/request_permission` (allow once / reject),
//! then on allow `tool_call_update` `in_progress`, `fs/read_text_file` through the client (only
//! if it advertised `fs.readTextFile`), `tool_call_update` `completed` with the start of the
//! file, a closing message and `end_turn`. A rejection fails the tool call and ends the turn.
//! `session/cancel` stops the turn at once: it returns `cancelled` (which the runtime also
//! enforces), and a pending permission request resolves `cancelled`.
//!
//! With the `unstable_protocol_v2` feature the same endpoint serves protocol v2 too
//! (`agent_v2.rs`): the client's first `initialize` picks the version ([`Versions`]). With
//! `unstable_v2_bridge` it can serve v2 clients with this v1 agent instead, through
//! `acp_rpc::v2_bridge` (`--bridged`; the default when the native v2 side is not built).
//!
//! With `--listen ADDR` (feature `http-server`) the agent serves remote clients over HTTP and
//! WebSocket instead of stdio ([`listen`]): one agent value per connection, sessions kept
//! across connections, so a client that reconnects can go on with its session (in v2 through
//! `session/resume`).
//!
//! Shared by the `agent` and `duet` examples (and built as a test binary by `acp-tests`).
//! Logs go to stderr; stdout is the protocol. `ACP_DEMO_DELAY_MS` sets the pause between
//! streamed words (default 40).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use acp_rpc::acp_types::{
    AgentCapabilities, AuthenticateRequest, AuthenticateResponse, CancelNotification, ClientCapabilities, Content,
    ContentBlock, ContentChunk, Error, Implementation, InitializeRequest, InitializeResponse, NewSessionRequest,
    NewSessionResponse, Notice, NoticeSeverity, Nullable, PermissionOption, PermissionOptionKind, Plan, PlanEntry,
    PlanEntryPriority, PlanEntryStatus, PromptCapabilities, PromptRequest, PromptResponse, ProtocolVersion,
    ReadTextFileRequest, RequestPermissionOutcome, RequestPermissionRequest, SessionId, SessionNotification,
    SessionUpdate, StopReason, TextContent, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus,
    ToolCallUpdate, ToolKind,
};
use acp_rpc::sessions::SessionStore;
use acp_rpc::{AgentContext, acp_agent};

/// The file read when the prompt names none.
const DEFAULT_FILE: &str = "README.md";
/// How much of the file goes into the tool call's content.
const MAX_LINES: u32 = 8;
const MAX_CHARS: usize = 800;
const ALLOW: &str = "allow-once";
const REJECT: &str = "reject-once";

/// The name in `agentInfo` (v1) and `info` (v2).
const NAME: &str = "acp-demo-agent";

macro_rules! log {
    ($($arg:tt)*) => { eprintln!("[demo-agent] {}", format_args!($($arg)*)) };
}

#[cfg(feature = "unstable_protocol_v2")]
#[path = "agent_v2.rs"]
mod v2;

/// The protocol versions the endpoint serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Versions {
    V1,
    #[cfg(feature = "unstable_protocol_v2")]
    V2,
    /// v1 and v2: the client's first `initialize` picks (`acp_rpc::version::ProtocolRouter`).
    #[cfg(feature = "unstable_protocol_v2")]
    Both,
    /// v1, and v2 through the bridge to the same v1 agent (`ProtocolRouter::with_v2_bridge`).
    #[cfg(feature = "unstable_v2_bridge")]
    Bridged,
}

impl Versions {
    /// Every version this build serves.
    #[cfg(feature = "unstable_protocol_v2")]
    pub const ALL: Versions = Versions::Both;
    /// Every version this build serves.
    #[cfg(all(not(feature = "unstable_protocol_v2"), feature = "unstable_v2_bridge"))]
    pub const ALL: Versions = Versions::Bridged;
    /// Every version this build serves.
    #[cfg(not(any(feature = "unstable_protocol_v2", feature = "unstable_v2_bridge")))]
    pub const ALL: Versions = Versions::V1;

    /// `--v1-only` / `--v2-only` (the latter needs the `unstable_protocol_v2` feature) /
    /// `--bridged` (needs `unstable_v2_bridge`), or all.
    pub fn from_flag(flag: Option<&str>) -> Result<Self, String> {
        match flag {
            None => Ok(Versions::ALL),
            Some("--v1-only") => Ok(Versions::V1),
            #[cfg(feature = "unstable_v2_bridge")]
            Some("--bridged") => Ok(Versions::Bridged),
            #[cfg(not(feature = "unstable_v2_bridge"))]
            Some("--bridged") => Err("--bridged: built without the `unstable_v2_bridge` feature".to_owned()),
            #[cfg(feature = "unstable_protocol_v2")]
            Some("--v2-only") => Ok(Versions::V2),
            #[cfg(not(feature = "unstable_protocol_v2"))]
            Some("--v2-only") => Err("--v2-only: built without the `unstable_protocol_v2` feature".to_owned()),
            Some(other) => Err(format!("unknown argument {other:?} (expected --v1-only or --v2-only)")),
        }
    }
}

/// Serves the demo agent on stdin/stdout until the client closes stdin.
pub async fn serve(versions: Versions) -> Result<(), acp_rpc::Error> {
    log!("ready on stdio ({versions:?})");
    let result = match versions {
        Versions::V1 => acp_rpc::agent::serve_stdio(DemoAgent::new()).await,
        #[cfg(feature = "unstable_protocol_v2")]
        Versions::V2 => acp_rpc::v2::serve_stdio(v2::DemoAgentV2::new(delay())).await,
        #[cfg(feature = "unstable_protocol_v2")]
        Versions::Both => {
            // ANCHOR: router
            let router = acp_rpc::version::ProtocolRouter::new()
                .with_v1_agent(DemoAgent::new())
                .with_v2_agent(v2::DemoAgentV2::new(delay()));
            let (reader, writer) = acp_rpc::transport::stdio();
            let (_client, serve) = acp_rpc::Connection::new().serve(reader, writer, router);
            serve.await
            // ANCHOR_END: router
        }
        #[cfg(feature = "unstable_v2_bridge")]
        Versions::Bridged => {
            // ANCHOR: bridge
            let router = acp_rpc::version::ProtocolRouter::new().with_v1_agent(DemoAgent::new()).with_v2_bridge();
            // ANCHOR_END: bridge
            let (reader, writer) = acp_rpc::transport::stdio();
            let (_client, serve) = acp_rpc::Connection::new().serve(reader, writer, router);
            serve.await
        }
    };
    log!("connection ended: {result:?}");
    result
}

/// How `listen` serves: who may connect, and from which browser origins.
#[derive(Debug, Default)]
#[allow(dead_code)] // the `duet` example shares this file and does not listen
pub struct ListenOptions {
    /// `(token, principal)`: with any, every request needs `Authorization: Bearer <token>`,
    /// and the token's principal owns the sessions its connections create (and can re-attach to
    /// them on a new connection). Without, every connection is an anonymous owner of its own.
    pub tokens: Vec<(String, String)>,
    /// Origins a browser may call from (`*` for any); none by default.
    pub allowed_origins: Vec<String>,
    /// Open ACP connections at most (the server's default when `None`).
    pub max_connections: Option<usize>,
}

/// Serves the demo agent to remote clients on `addr` (Streamable HTTP and WebSocket on
/// `http://ADDR/acp`) until the process is stopped. Prints `LISTENING <url>` on stdout (unused
/// by the protocol in this mode) once bound. Each client sees only the sessions of its owner
/// (see `ListenOptions::tokens`).
#[cfg(feature = "http-server")]
#[allow(dead_code)] // the `duet` example shares this file and does not listen
pub async fn listen(versions: Versions, addr: &str, options: ListenOptions) -> std::io::Result<()> {
    use acp_rpc::http::server::{HttpServer, ServerOptions};
    use acp_rpc::version::ProtocolRouter;

    let v1 = DemoAgent::new();
    #[cfg(feature = "unstable_protocol_v2")]
    let v2 = v2::DemoAgentV2::new(delay());
    let mut server = HttpServer::new(move || {
        let router = ProtocolRouter::new();
        match versions {
            Versions::V1 => router.with_v1_agent(v1.sibling()),
            #[cfg(feature = "unstable_protocol_v2")]
            Versions::V2 => router.with_v2_agent(v2.sibling()),
            #[cfg(feature = "unstable_protocol_v2")]
            Versions::Both => router.with_v1_agent(v1.sibling()).with_v2_agent(v2.sibling()),
            #[cfg(feature = "unstable_v2_bridge")]
            Versions::Bridged => router.with_v1_agent(v1.sibling()).with_v2_bridge(),
        }
    });
    let mut server_options = ServerOptions { allowed_origins: options.allowed_origins, ..ServerOptions::default() };
    if let Some(max) = options.max_connections {
        server_options.max_connections = max;
    }
    server = server.options(server_options);
    if !options.tokens.is_empty() {
        server = server.bearer_tokens(options.tokens);
    }
    let bound = server.bind(addr).await?;
    log!("listening on {} ({versions:?})", bound.url());
    println!("LISTENING {}", bound.url());
    bound.run().await
}

/// The pause between streamed words: `ACP_DEMO_DELAY_MS`, 40 ms by default.
fn delay() -> Duration {
    Duration::from_millis(std::env::var("ACP_DEMO_DELAY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(40))
}

struct DemoAgent {
    /// Session id -> working directory, shared by the agents of all connections (`sibling`),
    /// each session kept under the owner that created it: a client reaches only its own.
    sessions: Arc<SessionStore<PathBuf>>,
    tool_calls_made: AtomicU64,
    messages_made: AtomicU64,
    /// The pause between streamed words.
    delay: Duration,
}

impl DemoAgent {
    fn new() -> Self {
        DemoAgent {
            sessions: Arc::default(),
            tool_calls_made: AtomicU64::new(0),
            messages_made: AtomicU64::new(0),
            delay: delay(),
        }
    }

    /// An agent for another connection that shares this one's sessions.
    #[allow(dead_code)] // for `listen`, which the `duet` example (sharing this file) does not use
    fn sibling(&self) -> Self {
        DemoAgent {
            sessions: self.sessions.clone(),
            tool_calls_made: AtomicU64::new(0),
            messages_made: AtomicU64::new(0),
            delay: self.delay,
        }
    }

    /// The next number from `counter`, from 1.
    fn next(counter: &AtomicU64) -> u64 {
        counter.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Whether `fs/read_text_file` may be called on the client.
fn client_reads_files(capabilities: &ClientCapabilities) -> bool {
    capabilities.fs.as_ref().and_then(|fs| fs.read_text_file).unwrap_or(false)
}

#[acp_agent]
impl DemoAgent {
    async fn initialize(&self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        let reads = client_reads_files(&params.client_capabilities.clone().unwrap_or_default());
        let client = params.client_info.into_value().map(|i| i.name).unwrap_or_else(|| "an unnamed client".into());
        log!("initialize from {client} (protocol {}, fs.readTextFile: {reads})", params.protocol_version.0);
        // This side speaks protocol version 1; a client asking for another one decides whether
        // to go on (with v2 built in, a client asking for 2 is routed to `agent_v2.rs` instead).
        Ok(InitializeResponse::new(ProtocolVersion::V1)
            .agent_capabilities(AgentCapabilities::new().prompt_capabilities(PromptCapabilities::new()))
            .auth_methods(Vec::new())
            .agent_info(Implementation::new(NAME, env!("CARGO_PKG_VERSION"))))
    }

    async fn authenticate(&self, _params: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new()) // no authentication methods, so nothing to do
    }

    async fn session_new(&self, params: NewSessionRequest, cx: AgentContext) -> Result<NewSessionResponse, Error> {
        let cwd = PathBuf::from(&params.cwd);
        if !cwd.is_absolute() {
            return Err(
                Error::invalid_params().data(format!("cwd must be an absolute path, got {:?}", params.cwd).into())
            );
        }
        log!("session/new in {}", cwd.display());
        let id = self.sessions.create(cx.owner(), cwd);
        Ok(NewSessionResponse::new(id))
    }

    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let session = params.session_id.clone();
        // Another owner's session is as unknown as one nobody created.
        let Some(cwd) = self.sessions.get(cx.owner(), &session.0) else {
            return Err(Error::invalid_params().data(format!("unknown session {}", session.0).into()));
        };
        log!("session/prompt {}", session.0);
        let turn =
            Turn { cx: &cx, session, message: format!("msg_{}", Self::next(&self.messages_made)), delay: self.delay };
        let stop = self.turn(&turn, &params.prompt, &cwd).await?;
        // Whatever happened in between, a cancelled turn answers `cancelled`.
        let stop = if cx.is_cancelled() { StopReason::Cancelled } else { stop };
        log!("turn ends: {}", stop.as_str());
        Ok(PromptResponse::new(stop))
    }

    async fn session_cancel(&self, params: CancelNotification) -> Result<(), Error> {
        // The runtime has already fired the turn's cancellation token; the turn notices it.
        log!("session/cancel {}", params.session_id.0);
        Ok(())
    }
}

/// The turn's way to talk to the client.
struct Turn<'a> {
    cx: &'a AgentContext,
    session: SessionId,
    message: String,
    delay: Duration,
}

impl Turn<'_> {
    async fn send(&self, update: SessionUpdate) -> Result<(), Error> {
        self.cx.client().session_update(SessionNotification::new(self.session.clone(), update)).await?;
        Ok(())
    }

    /// Streams `text` word by word; `false` when the turn was cancelled meanwhile.
    async fn say(&self, text: &str) -> Result<bool, Error> {
        let words: Vec<&str> = text.split_inclusive(' ').collect();
        for word in words {
            tokio::select! {
                biased;
                _ = self.cx.cancelled() => return Ok(false),
                _ = tokio::time::sleep(self.delay) => {}
            }
            let chunk = ContentChunk::new(ContentBlock::Text(TextContent::new(word)))
                .message_id(Some(self.message.as_str().into()));
            self.send(SessionUpdate::AgentMessageChunk(chunk)).await?;
        }
        Ok(true)
    }

    async fn update_tool(&self, update: ToolCallUpdate) -> Result<(), Error> {
        self.send(SessionUpdate::ToolCallUpdate(update)).await
    }
}

impl DemoAgent {
    async fn turn(&self, turn: &Turn<'_>, prompt: &[ContentBlock], cwd: &Path) -> Result<StopReason, Error> {
        if asks_to_compact(prompt) {
            return self.compact(turn).await;
        }
        let target = file_named_in(prompt).unwrap_or_else(|| DEFAULT_FILE.to_owned());
        let path = cwd.join(&target); // absolute (cwd is); the client decides what it may serve
        let path_text = path.to_string_lossy().into_owned();

        turn.send(SessionUpdate::Plan(Plan::new(vec![
            PlanEntry::new(format!("Read {target}"), PlanEntryPriority::High, PlanEntryStatus::Pending),
            PlanEntry::new("Tell how it starts", PlanEntryPriority::Medium, PlanEntryStatus::Pending),
        ])))
        .await?;
        if !turn.say(&format!("Let me read {target} for you.")).await? {
            return Ok(StopReason::Cancelled);
        }

        let call = format!("call_{}", Self::next(&self.tool_calls_made));
        turn.send(SessionUpdate::ToolCall(
            ToolCall::new(call.as_str(), format!("Read {target}"))
                .kind(ToolKind::Read)
                .status(ToolCallStatus::Pending)
                .locations(vec![ToolCallLocation::new(path_text.as_str())])
                .raw_input(serde_json::json!({ "path": path_text })),
        ))
        .await?;

        let options = vec![
            PermissionOption::new(ALLOW, "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new(REJECT, "Reject", PermissionOptionKind::RejectOnce),
        ];
        let ask = RequestPermissionRequest::new(turn.session.clone(), ToolCallUpdate::new(call.as_str()), options);
        // Bound to the turn: a `session/cancel` resolves it with the `cancelled` outcome.
        let answer = turn.cx.client().request_permission(ask).await?;
        let allowed = match &answer.outcome {
            RequestPermissionOutcome::Cancelled => {
                log!("permission for {call}: cancelled");
                return Ok(StopReason::Cancelled);
            }
            RequestPermissionOutcome::Selected(selected) => selected.option_id.0 == ALLOW,
            _ => false,
        };
        log!("permission for {call}: {}", if allowed { "allowed" } else { "rejected" });
        if !allowed {
            turn.update_tool(
                ToolCallUpdate::new(call.as_str())
                    .status(ToolCallStatus::Failed)
                    .content(vec![text_content("Permission denied by the user.")]),
            )
            .await?;
            turn.say(&format!("Understood, I left {target} alone.")).await?;
            return Ok(StopReason::EndTurn);
        }
        if turn.cx.is_cancelled() {
            return Ok(StopReason::Cancelled);
        }

        turn.update_tool(ToolCallUpdate::new(call.as_str()).status(ToolCallStatus::InProgress)).await?;
        // What the client advertised in `initialize`, kept by the runtime.
        let read = if client_reads_files(&turn.cx.client_capabilities()) {
            let request = ReadTextFileRequest::new(turn.session.clone(), path_text.as_str()).limit(MAX_LINES);
            match turn.cx.client().read_text_file(request).await {
                Ok(response) => Ok(response.content),
                Err(acp_rpc::Error::Cancelled) => return Ok(StopReason::Cancelled),
                Err(acp_rpc::Error::Rpc(e)) => Err(e.message),
                Err(other) => Err(other.to_string()),
            }
        } else {
            Err("the client does not offer fs/read_text_file".to_owned())
        };
        match read {
            Ok(content) => {
                turn.update_tool(
                    ToolCallUpdate::new(call.as_str())
                        .status(ToolCallStatus::Completed)
                        .content(vec![text_content(&truncate(&content))]),
                )
                .await?;
                let first = content.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
                let summary = if first.is_empty() {
                    format!("{target} is empty.")
                } else {
                    format!("{target} starts with “{}”.", truncate_chars(first, 60))
                };
                turn.say(&summary).await?;
            }
            Err(message) => {
                log!("reading {path_text} failed: {message}");
                turn.update_tool(
                    ToolCallUpdate::new(call.as_str())
                        .status(ToolCallStatus::Failed)
                        .content(vec![text_content(&message)]),
                )
                .await?;
                turn.say(&format!("I could not read {target}: {message}")).await?;
            }
        }
        Ok(StopReason::EndTurn)
    }
}

impl DemoAgent {
    /// `/compact`: a context compaction reported as the schema wants it, announced with a
    /// notice, each only where the client advertised it (else an agent message says so).
    async fn compact(&self, turn: &Turn<'_>) -> Result<StopReason, Error> {
        let client = turn.cx.client();
        let notice = Notice::new(NoticeSeverity::Info, "Compacting the conversation")
            .description("Earlier turns are replaced by a summary.".to_owned());
        client.notice(turn.session.clone(), notice).await?;
        let Some(compaction) = client.start_compaction(turn.session.clone()).await? else {
            turn.say("This client does not show compactions; nothing was compacted.").await?;
            return Ok(StopReason::EndTurn);
        };
        log!("compaction {} started", compaction.id().0);
        compaction.summary_chunk(text_content_block("The user asked about their files; ")).await?;
        if turn.cx.is_cancelled() {
            compaction.cancel().await?;
            return Ok(StopReason::Cancelled);
        }
        compaction.summary_chunk(text_content_block("the agent read them with permission.")).await?;
        compaction.complete(None).await?;
        turn.say("The conversation is compacted.").await?;
        Ok(StopReason::EndTurn)
    }
}

/// Whether the prompt is the `/compact` command.
fn asks_to_compact(prompt: &[ContentBlock]) -> bool {
    matches!(prompt.first(), Some(ContentBlock::Text(text)) if text.text.trim() == "/compact")
}

fn text_content_block(text: &str) -> ContentBlock {
    ContentBlock::Text(acp_rpc::acp_types::TextContent::new(text))
}

/// The file the prompt asks about: a resource link's path, or the first word that looks like
/// a file name (has a `.` or a `/` after trimming punctuation).
fn file_named_in(prompt: &[ContentBlock]) -> Option<String> {
    prompt.iter().find_map(|block| match block {
        ContentBlock::ResourceLink(link) => Some(file_of_uri(&link.uri)),
        ContentBlock::Text(text) => file_named_in_text(&text.text),
        _ => None,
    })
}

fn file_of_uri(uri: &str) -> String {
    uri.strip_prefix("file://").unwrap_or(uri).to_owned()
}

/// The first word of `text` that looks like a file name.
fn file_named_in_text(text: &str) -> Option<String> {
    text.split_whitespace()
        .map(|w| {
            w.trim_start_matches(['"', '\'', '`', '(', '“'])
                .trim_end_matches(['"', '\'', '`', ')', ',', ';', ':', '!', '?', '.', '”'])
        })
        .find(|w| w.contains(['.', '/']) && w.chars().any(char::is_alphanumeric))
        .map(str::to_owned)
}

fn text_content(text: &str) -> ToolCallContent {
    ToolCallContent::Content(Content::new(ContentBlock::Text(TextContent::new(text))))
}

fn truncate(content: &str) -> String {
    let cut = truncate_chars(content, MAX_CHARS);
    if cut.len() < content.len() { format!("{}\n… (truncated)", cut.trim_end()) } else { cut.to_owned() }
}

fn truncate_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}
