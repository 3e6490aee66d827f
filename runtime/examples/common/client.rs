//! The demo client: spawns an agent (or connects to a remote one by URL), runs one prompt turn
//! and prints it as a live transcript.
//!
//! Written with `#[acp_client]`. It advertises `fs.readTextFile` and `fs.writeTextFile` and
//! serves both inside one root directory (the session's cwd): a path that leaves the root,
//! through `..` or a symbolic link, is refused with an error naming the path and the root.
//! Permission requests are asked on the terminal (policy `ask`, the default, when stdin is a
//! terminal) or answered by policy (`allow`, also what `ask` falls back to without a
//! terminal, or `reject`). Ctrl-C during the turn sends `session/cancel`.
//!
//! `--protocol 2` (with the `unstable_protocol_v2` feature, see `client_v2.rs`) asks the agent
//! for protocol v2 and shows the v2 turn (its `state_update`s and upserts); an agent that
//! answers 1 gets the v1 turn on the same connection.
//!
//! `--url URL` (with the `http-client` feature) connects to a remote agent instead of spawning
//! one: `http://…` over Streamable HTTP, `ws://…` over WebSocket (`acp_rpc::http::client`),
//! in both protocol versions. The client's own files are served all the same: the agent's
//! `fs/*` requests come over the network.
//!
//! Shared by the `client` and `duet` examples (and built as a test binary by `acp-tests`).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use acp_rpc::acp_types::{
    CancelNotification, CompactionCapabilities, ContentBlock, Error, Implementation, InitializeRequest,
    InitializeResponse, NewSessionRequest, NoticeCapabilities, Nullable, PlanEntryStatus, PromptRequest,
    ProtocolVersion, ReadTextFileRequest, ReadTextFileResponse, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionNotification, SessionUpdate, TextContent,
    ToolCallContent, ToolCallStatus, WriteTextFileRequest, WriteTextFileResponse,
};
use acp_rpc::transport::{SpawnOptions, StderrMode};
use acp_rpc::{AgentHandle, ClientContext, Connection, acp_client};

#[cfg(feature = "unstable_protocol_v2")]
#[path = "client_v2.rs"]
mod v2;
use tokio::sync::mpsc;

/// What to do with `session/request_permission`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Allow,
    Reject,
    /// Ask on the terminal; `allow` when stdin is not a terminal.
    Ask,
}

/// The protocol version the client asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    V1,
    /// v2, going on with v1 when the agent answers 1.
    #[cfg(feature = "unstable_protocol_v2")]
    V2,
}

/// The command line shared by `client` and `duet`.
#[derive(Debug)]
pub struct Options {
    pub root: PathBuf,
    pub policy: Policy,
    pub prompt: String,
    pub protocol: Protocol,
    /// Show the agent's stderr (hidden by default: it would interleave with the transcript).
    pub verbose: bool,
    /// The agent command, after `--`.
    pub agent: Vec<String>,
    /// `--url`: a remote agent's endpoint, instead of a command.
    pub url: Option<String>,
}

/// The agent to run the turn against.
pub enum Agent {
    /// A command to spawn, speaking ACP on its stdio.
    Command(Command),
    /// A remote agent's endpoint (`http://…` or `ws://…`).
    #[cfg_attr(not(feature = "http-client"), allow(dead_code))]
    Url(String),
}

impl Agent {
    /// The agent of `options`: its `--url`, else `command` (built only when needed).
    pub fn of(options: &Options, command: impl FnOnce() -> Command) -> Agent {
        match &options.url {
            Some(url) => Agent::Url(url.clone()),
            None => Agent::Command(command()),
        }
    }
}

pub enum Parsed {
    Run(Options),
    Help,
}

pub const DEFAULT_PROMPT: &str = "Please read README.md and tell me how it starts.";

/// Parses `[--root DIR] [--policy allow|reject|ask] [--prompt TEXT] [--protocol 1|2] [--url URL] [-v] [-- AGENT...]`.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut options = Options {
        root: PathBuf::from("."),
        policy: Policy::Ask,
        prompt: DEFAULT_PROMPT.to_owned(),
        protocol: Protocol::V1,
        verbose: false,
        agent: Vec::new(),
        url: None,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        let mut value =
            |name: &str| inline.clone().or_else(|| args.next()).ok_or_else(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--" => {
                options.agent = args.by_ref().collect();
                break;
            }
            "--root" => options.root = PathBuf::from(value("--root")?),
            "--prompt" => options.prompt = value("--prompt")?,
            "--policy" => {
                options.policy = match value("--policy")?.as_str() {
                    "allow" => Policy::Allow,
                    "reject" => Policy::Reject,
                    "ask" => Policy::Ask,
                    other => return Err(format!("--policy is allow, reject or ask, not {other:?}")),
                }
            }
            "--protocol" => {
                options.protocol = match value("--protocol")?.as_str() {
                    "1" => Protocol::V1,
                    #[cfg(feature = "unstable_protocol_v2")]
                    "2" => Protocol::V2,
                    #[cfg(not(feature = "unstable_protocol_v2"))]
                    "2" => return Err("--protocol 2 needs the `unstable_protocol_v2` feature".to_owned()),
                    other => return Err(format!("--protocol is 1 or 2, not {other:?}")),
                }
            }
            "--url" => {
                let url = value("--url")?;
                #[cfg(not(feature = "http-client"))]
                return Err(format!("--url {url} needs the `http-client` feature"));
                #[cfg(feature = "http-client")]
                {
                    options.url = Some(url);
                }
            }
            "-v" | "--verbose" => options.verbose = true,
            "-h" | "--help" => return Ok(Parsed::Help),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if options.url.is_some() && !options.agent.is_empty() {
        return Err("give either --url or an agent command, not both".to_owned());
    }
    Ok(Parsed::Run(options))
}

/// Runs one prompt turn against `agent`; the process exit code.
pub async fn run(options: Options, agent: Agent) -> i32 {
    match drive(options, agent).await {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("error: {message}");
            1
        }
    }
}

async fn drive(options: Options, agent: Agent) -> Result<(), String> {
    let root = options.root.canonicalize().map_err(|e| format!("--root {}: {e}", options.root.display()))?;
    if !root.is_dir() {
        return Err(format!("--root {} is not a directory", root.display()));
    }
    let transcript = Arc::new(Transcript::default());
    let interactive = options.policy == Policy::Ask && std::io::stdin().is_terminal();
    let policy = match options.policy {
        Policy::Ask if !interactive => {
            transcript.line("(stdin is not a terminal: permission requests are allowed)");
            Policy::Allow
        }
        other => other,
    };
    match &agent {
        Agent::Command(command) => transcript.line(&format!("$ {}", describe(command))),
        Agent::Url(url) => transcript.line(&format!("→ {url}")),
    }
    let asker = Arc::new(Asker {
        policy,
        answers: interactive.then(stdin_lines).map(tokio::sync::Mutex::new),
        transcript: transcript.clone(),
    });
    let client = DemoClient { root: root.clone(), asker: asker.clone(), transcript: transcript.clone() };
    let spawn = SpawnOptions {
        stderr: if options.verbose { StderrMode::Inherit } else { StderrMode::Null },
        ..SpawnOptions::default()
    };
    let turn = Turn { root, prompt: options.prompt, transcript };
    match (options.protocol, agent) {
        (Protocol::V1, Agent::Command(command)) => {
            // ANCHOR: spawn
            let (agent, process) = Connection::new()
                .spawn_agent(client, command, spawn)
                .map_err(|e| format!("cannot start the agent: {e}"))?;
            let init = agent.initialize(v1_initialize()).await.map_err(|e| format!("initialize: {e}"))?;
            turn.run_v1(&agent, &init).await?;
            // Our agent is done; a well-behaved one exits on SIGTERM (or on end of input).
            let _ = process.terminate().await;
            Ok(())
            // ANCHOR_END: spawn
        }
        #[cfg(feature = "http-client")]
        (Protocol::V1, Agent::Url(url)) => {
            let (agent, remote) = acp_rpc::http::client::Remote::new(url.as_str())
                .connect(client)
                .await
                .map_err(|e| format!("cannot connect to {url}: {e}"))?;
            let result = match agent.initialize(v1_initialize()).await {
                Ok(init) => turn.run_v1(&agent, &init).await,
                Err(e) => Err(format!("initialize: {e}")),
            };
            // Tells the server we are done (DELETE, or the WebSocket's Close).
            let _ = remote.close().await;
            result
        }
        #[cfg(not(feature = "http-client"))]
        (_, Agent::Url(url)) => Err(format!("--url {url} needs the `http-client` feature")),
        #[cfg(feature = "unstable_protocol_v2")]
        (Protocol::V2, agent) => v2::drive(client, asker, agent, spawn, turn).await,
    }
}

/// The v1 `initialize` request, with the capabilities the handlers below earn (fs read and
/// write), filled in from the `#[acp_client]` table.
fn v1_initialize() -> InitializeRequest {
    let init = acp_rpc::client::with_capabilities::<DemoClient>(
        InitializeRequest::new(ProtocolVersion(1))
            .client_info(Implementation::new("acp-demo-client", env!("CARGO_PKG_VERSION"))),
    );
    // The transcript shows notices and compactions, so the client says it does.
    let capabilities = init.client_capabilities.clone().unwrap_or_default();
    let session = capabilities.session.clone().flatten().unwrap_or_default();
    let session = session.notices(NoticeCapabilities::new()).compaction(CompactionCapabilities::new());
    init.client_capabilities(capabilities.session(session))
}

/// The one turn to run, whatever the protocol.
struct Turn {
    /// The session's cwd (canonical).
    root: PathBuf,
    prompt: String,
    transcript: Arc<Transcript>,
}

impl Turn {
    /// The v1 turn, once `initialize` is answered: a session, the prompt, its stop reason.
    async fn run_v1(&self, agent: &AgentHandle, init: &InitializeResponse) -> Result<(), String> {
        let name = match init.agent_info.value() {
            Some(info) => format!("{} {}", info.name, info.version),
            None => "an agent".to_owned(),
        };
        self.transcript.line(&format!("connected to {name} (protocol v{})", init.protocol_version.0));

        let session = agent
            .new_session(NewSessionRequest::new(self.root.to_string_lossy(), Vec::new()))
            .await
            .map_err(|e| format!("session/new: {e}"))?
            .session_id;
        self.transcript.line(&format!("session {} in {}", session.0, self.root.display()));
        self.transcript.line(&format!("› {}", self.prompt));

        let prompt =
            PromptRequest::new(session.clone(), vec![ContentBlock::Text(TextContent::new(self.prompt.as_str()))]);
        let cancel = agent.cancel(CancelNotification::new(session));
        let response = self.until_done(agent.prompt(prompt), cancel).await?;
        let response = response.map_err(|e| format!("session/prompt: {e}"))?;
        self.transcript.line(&format!("■ stop reason: {}", response.stop_reason.as_str()));
        Ok(())
    }

    /// Awaits `turn`; a first Ctrl-C sends `cancel` (`session/cancel`) and waits on, a second
    /// one gives up.
    async fn until_done<T>(
        &self,
        turn: impl std::future::Future<Output = T>,
        cancel: impl std::future::Future<Output = Result<(), acp_rpc::Error>>,
    ) -> Result<T, String> {
        tokio::pin!(turn);
        tokio::select! {
            done = &mut turn => Ok(done),
            _ = tokio::signal::ctrl_c() => {
                self.transcript.line("^C: cancelling the turn (session/cancel); ^C again to quit");
                cancel.await.map_err(|e| format!("session/cancel: {e}"))?;
                tokio::select! {
                    done = &mut turn => Ok(done),
                    _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
                }
            }
        }
    }
}

/// The command as one would type it in a shell: a word with spaces or quotes is quoted.
fn describe(command: &Command) -> String {
    let quote = |word: std::borrow::Cow<'_, str>| {
        let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c));
        if plain { word.into_owned() } else { format!("'{}'", word.replace('\'', r"'\''")) }
    };
    let program = quote(command.get_program().to_string_lossy());
    std::iter::once(program).chain(command.get_args().map(|a| quote(a.to_string_lossy()))).collect::<Vec<_>>().join(" ")
}

/// The lines typed on stdin, read by a thread of their own (a read cannot be abandoned).
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

struct DemoClient {
    /// Canonical; every file access stays inside it.
    root: PathBuf,
    asker: Arc<Asker>,
    transcript: Arc<Transcript>,
}

#[acp_client]
impl DemoClient {
    async fn session_update(&self, params: SessionNotification) -> Result<(), Error> {
        self.transcript.update(&params.update);
        Ok(())
    }

    async fn session_request_permission(
        &self,
        params: RequestPermissionRequest,
        cx: ClientContext,
    ) -> Result<RequestPermissionResponse, Error> {
        let title = self.transcript.title_of(&params.tool_call.tool_call_id.0, params.tool_call.title.value().cloned());
        let options: Vec<(&str, &str)> = params.options.iter().map(|o| (o.name.as_str(), o.kind.as_str())).collect();
        let outcome = match self.asker.choose(&title, &options, cx.cancelled()).await {
            Some(n) => {
                RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(params.options[n].option_id.clone()))
            }
            None => RequestPermissionOutcome::Cancelled,
        };
        Ok(RequestPermissionResponse::new(outcome))
    }

    async fn fs_read_text_file(&self, params: ReadTextFileRequest) -> Result<ReadTextFileResponse, Error> {
        let path = self.confine("fs/read_text_file", &params.path)?;
        let text = tokio::fs::read_to_string(&path).await.map_err(|e| self.io_error("fs/read_text_file", &path, e))?;
        let start = params.line.into_value().unwrap_or(1).max(1) as usize - 1;
        let limit = params.limit.into_value().map_or(usize::MAX, |l| l as usize);
        let content: String = text.split_inclusive('\n').skip(start).take(limit).collect();
        let lines = content.lines().count();
        self.transcript.line(&format!("  ⇢ fs/read_text_file {} ({lines} lines)", path.display()));
        Ok(ReadTextFileResponse::new(content))
    }

    async fn fs_write_text_file(&self, params: WriteTextFileRequest) -> Result<WriteTextFileResponse, Error> {
        let path = self.confine("fs/write_text_file", &params.path)?;
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| self.io_error("fs/write_text_file", parent, e))?;
        }
        tokio::fs::write(&path, &params.content).await.map_err(|e| self.io_error("fs/write_text_file", &path, e))?;
        self.transcript.line(&format!("  ⇠ fs/write_text_file {} ({} bytes)", path.display(), params.content.len()));
        Ok(WriteTextFileResponse::new())
    }
}

/// How permission requests are answered, whatever the protocol: by policy, or on the terminal.
struct Asker {
    /// `Allow` or `Reject`, or `Ask` when `answers` is set.
    policy: Policy,
    answers: Option<tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>>,
    transcript: Arc<Transcript>,
}

/// The option `policy` (allow or reject) chooses, by the options' kinds: a `*_once` one, else
/// an `*_always` one.
fn pick(kinds: &[&str], policy: Policy) -> Option<usize> {
    let wanted: &[&str] = match policy {
        Policy::Reject => &["reject_once", "reject_always"],
        _ => &["allow_once", "allow_always"],
    };
    wanted.iter().find_map(|kind| kinds.iter().position(|k| k == kind))
}

impl Asker {
    /// The index of the option chosen among `options` (name, kind) for the tool call `title`;
    /// `None` (the outcome `cancelled`) for no option, or when `cancelled` fires first.
    async fn choose(
        &self,
        title: &str,
        options: &[(&str, &str)],
        cancelled: impl std::future::Future<Output = ()>,
    ) -> Option<usize> {
        let kinds: Vec<&str> = options.iter().map(|(_, kind)| *kind).collect();
        let Some(answers) = &self.answers else {
            let chosen = pick(&kinds, self.policy);
            let said = chosen.map_or("no matching option, cancelled", |n| options[n].0);
            let policy = if self.policy == Policy::Reject { "reject" } else { "allow" };
            self.transcript.line(&format!("? permission for “{title}”: {said} (policy {policy})"));
            return chosen;
        };
        tokio::select! {
            chosen = self.ask(title, options, &kinds, answers) => chosen,
            _ = cancelled => {
                self.transcript.line("  (the turn was cancelled: permission request answered `cancelled`)");
                None
            }
        }
    }

    /// Asks on the terminal (rejects when stdin ends).
    async fn ask(
        &self,
        title: &str,
        options: &[(&str, &str)],
        kinds: &[&str],
        answers: &tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>,
    ) -> Option<usize> {
        let mut answers = answers.lock().await;
        while answers.try_recv().is_ok() {} // typed ahead of the question: not an answer to it
        let mut question = format!("? permission for “{title}”:");
        for (n, (name, _)) in options.iter().enumerate() {
            question.push_str(&format!("\n    {}) {name}", n + 1));
        }
        self.transcript.line(&question);
        loop {
            self.transcript.inline(&format!("  choose 1-{}: ", options.len()));
            let Some(answer) = answers.recv().await else {
                let chosen = pick(kinds, Policy::Reject);
                let said = chosen.map_or("no option to reject with, cancelled", |n| options[n].0);
                self.transcript.line(&format!("  (stdin ended) {said}"));
                return chosen;
            };
            self.transcript.typed();
            match answer.trim().parse::<usize>() {
                Ok(n) if (1..=options.len()).contains(&n) => return Some(n - 1),
                _ => self.transcript.line(&format!("  {:?} is not one of the choices", answer.trim())),
            }
        }
    }
}

impl DemoClient {
    /// The absolute path `requested` resolves to, if it stays inside the root. `.` and `..` are
    /// resolved first, then the symbolic links of the longest existing prefix, so what is
    /// checked is what is opened.
    fn confine(&self, method: &str, requested: &str) -> Result<PathBuf, Error> {
        let refuse = |why: String| {
            self.transcript.line(&format!("  ✗ refused {method} {requested}: {why}"));
            Error::invalid_params()
                .data(serde_json::json!({ "path": requested, "root": self.root.to_string_lossy(), "reason": why }))
        };
        let path = Path::new(requested);
        if !path.is_absolute() {
            return Err(refuse("the path must be absolute".to_owned()));
        }
        let mut normal = PathBuf::new();
        for component in path.components() {
            match component {
                Component::ParentDir => {
                    normal.pop();
                }
                Component::CurDir => {}
                other => normal.push(other),
            }
        }
        let mut existing = normal.as_path();
        let mut rest = Vec::new();
        let mut resolved = loop {
            match existing.canonicalize() {
                Ok(resolved) => break resolved,
                Err(_) => match (existing.file_name(), existing.parent()) {
                    (Some(name), Some(parent)) => {
                        rest.push(name);
                        existing = parent;
                    }
                    _ => return Err(refuse("it cannot be resolved".to_owned())),
                },
            }
        };
        resolved.extend(rest.iter().rev());
        if !resolved.starts_with(&self.root) {
            let why = format!("{} is outside the root {}", resolved.display(), self.root.display());
            let mut error = refuse(why.clone());
            error.message = format!("access denied: {why}");
            return Err(error);
        }
        Ok(resolved)
    }

    fn io_error(&self, method: &str, path: &Path, e: std::io::Error) -> Error {
        self.transcript.line(&format!("  ✗ {method} {}: {e}", path.display()));
        let error = if e.kind() == std::io::ErrorKind::NotFound {
            Error::resource_not_found()
        } else {
            Error::internal_error()
        };
        error.data(serde_json::json!({ "path": path.to_string_lossy(), "reason": e.to_string() }))
    }
}

/// Prints the transcript to stdout: message chunks inline, everything else on lines of its own.
#[derive(Default)]
struct Transcript {
    state: Mutex<TranscriptState>,
}

#[derive(Default)]
struct TranscriptState {
    /// The cursor is after inline text (a line must start with a newline).
    mid_line: bool,
    /// Tool call id -> title, for updates that carry only the id.
    titles: HashMap<String, String>,
}

impl Transcript {
    fn write(&self, state: &mut TranscriptState, text: &str, newline: bool) {
        let mut out = std::io::stdout().lock();
        // Write errors (a closed pipe) are not the agent's problem: ignore them.
        if newline && state.mid_line {
            let _ = writeln!(out);
        }
        let _ = if newline { writeln!(out, "{text}") } else { write!(out, "{text}") };
        let _ = out.flush();
        state.mid_line = !newline && !text.ends_with('\n');
    }

    fn line(&self, text: &str) {
        let mut state = self.state.lock().expect("transcript");
        self.write(&mut state, text, true);
    }

    fn inline(&self, text: &str) {
        let mut state = self.state.lock().expect("transcript");
        self.write(&mut state, text, false);
    }

    /// The user answered an inline question (the terminal echoed the newline).
    fn typed(&self) {
        self.state.lock().expect("transcript").mid_line = false;
    }

    fn title_of(&self, id: &str, title: Option<String>) -> String {
        let state = self.state.lock().expect("transcript");
        title.or_else(|| state.titles.get(id).cloned()).unwrap_or_else(|| id.to_owned())
    }

    fn update(&self, update: &SessionUpdate) {
        let mut state = self.state.lock().expect("transcript");
        let state = &mut *state;
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => match &chunk.content {
                ContentBlock::Text(text) => self.write(state, &text.text, false),
                other => self.write(state, &format!("[{} content]", block_kind(other)), false),
            },
            SessionUpdate::AgentThoughtChunk(chunk) => {
                self.write(state, &format!("  (thinking) {}", block_text(&chunk.content)), true);
            }
            SessionUpdate::UserMessageChunk(chunk) => {
                self.write(state, &format!("› {}", block_text(&chunk.content)), true);
            }
            SessionUpdate::Plan(plan) => {
                let mut text = String::from("Plan:");
                for entry in &plan.entries {
                    let mark = match entry.status {
                        PlanEntryStatus::Completed => "[x]",
                        PlanEntryStatus::InProgress => "[~]",
                        _ => "[ ]",
                    };
                    text.push_str(&format!("\n  {mark} {} ({})", entry.content, entry.priority.as_str()));
                }
                self.write(state, &text, true);
            }
            SessionUpdate::ToolCall(call) => {
                state.titles.insert(call.tool_call_id.0.clone(), call.title.clone());
                let kind = call.kind.as_ref().map_or("other", |k| k.as_str());
                let status = call.status.as_ref().map_or("pending", ToolCallStatus::as_str);
                let mut text = format!("⚙ {} [{kind}] {status}  ({})", call.title, call.tool_call_id.0);
                push_content(&mut text, call.content.as_deref().unwrap_or_default());
                self.write(state, &text, true);
            }
            SessionUpdate::ToolCallUpdate(update) => {
                let id = &update.tool_call_id.0;
                if let Some(title) = update.title.value() {
                    state.titles.insert(id.clone(), title.clone());
                }
                let title = state.titles.get(id).cloned().unwrap_or_else(|| id.clone());
                let status = update.status.value().map_or("updated", ToolCallStatus::as_str);
                let mut text = format!("  ↳ {title}: {status}");
                if let Some(content) = update.content.value() {
                    push_content(&mut text, content);
                }
                self.write(state, &text, true);
            }
            SessionUpdate::Notice(notice) => {
                let mut text = format!("ℹ [{}] {}", notice.severity.as_str(), notice.title);
                if let Some(description) = notice.description.value() {
                    text.push_str(&format!(": {description}"));
                }
                self.write(state, &text, true);
            }
            SessionUpdate::CompactionUpdate(update) => {
                let mut text = format!("⟳ compaction {}: {}", update.compaction_id.0, update.status.as_str());
                if let Some(error) = update.error.value() {
                    text.push_str(&format!(" ({error})"));
                }
                self.write(state, &text, true);
            }
            SessionUpdate::CompactionSummaryChunk(chunk) => {
                self.write(state, &format!("  ⟳ summary: {}", block_text(&chunk.content)), true);
            }
            other => {
                let tag = other.tag().unwrap_or("unknown").to_owned();
                self.write(state, &format!("  ({tag} update)"), true);
            }
        }
    }
}

fn push_content(text: &mut String, content: &[ToolCallContent]) {
    for item in content {
        match item {
            ToolCallContent::Content(c) => {
                for line in block_text(&c.content).lines() {
                    text.push_str(format!("\n    │ {line}").trim_end());
                }
            }
            ToolCallContent::Diff(diff) => text.push_str(&format!("\n    diff of {}", diff.path)),
            ToolCallContent::Terminal(t) => text.push_str(&format!("\n    terminal {}", t.terminal_id.0)),
            _ => text.push_str("\n    (other content)"),
        }
    }
}

fn block_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::ResourceLink(link) => link.uri.clone(),
        other => format!("[{} content]", block_kind(other)),
    }
}

fn block_kind(block: &ContentBlock) -> &str {
    block.tag().unwrap_or("unknown")
}
