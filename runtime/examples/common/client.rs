//! The demo client: spawns an agent, runs one prompt turn and prints it as a live transcript.
//!
//! Written with `#[acp_client]`. It advertises `fs.readTextFile` and `fs.writeTextFile` and
//! serves both inside one root directory (the session's cwd): a path that leaves the root,
//! through `..` or a symbolic link, is refused with an error naming the path and the root.
//! Permission requests are asked on the terminal (policy `ask`, the default, when stdin is a
//! terminal) or answered by policy (`allow`, also what `ask` falls back to without a
//! terminal, or `reject`). Ctrl-C during the turn sends `session/cancel`.
//!
//! Shared by the `client` and `duet` examples (and built as a test binary by `acp-tests`).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use acp_runtime::acp_types::{
    CancelNotification, ContentBlock, Error, Implementation, InitializeRequest, NewSessionRequest, PermissionOption,
    PermissionOptionKind, PlanEntryStatus, PromptRequest, ProtocolVersion, ReadTextFileRequest, ReadTextFileResponse,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionNotification, SessionUpdate, TextContent, ToolCallContent, ToolCallStatus, WriteTextFileRequest,
    WriteTextFileResponse,
};
use acp_runtime::transport::{SpawnOptions, StderrMode};
use acp_runtime::{ClientContext, Connection, acp_client};
use tokio::sync::mpsc;

/// What to do with `session/request_permission`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Allow,
    Reject,
    /// Ask on the terminal; `allow` when stdin is not a terminal.
    Ask,
}

/// The command line shared by `client` and `duet`.
#[derive(Debug)]
pub struct Options {
    pub root: PathBuf,
    pub policy: Policy,
    pub prompt: String,
    /// Show the agent's stderr (hidden by default: it would interleave with the transcript).
    pub verbose: bool,
    /// The agent command, after `--`.
    pub agent: Vec<String>,
}

pub enum Parsed {
    Run(Options),
    Help,
}

pub const DEFAULT_PROMPT: &str = "Please read README.md and tell me how it starts.";

/// Parses `[--root DIR] [--policy allow|reject|ask] [--prompt TEXT] [-v] [-- AGENT...]`.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut options = Options {
        root: PathBuf::from("."),
        policy: Policy::Ask,
        prompt: DEFAULT_PROMPT.to_owned(),
        verbose: false,
        agent: Vec::new(),
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
            "-v" | "--verbose" => options.verbose = true,
            "-h" | "--help" => return Ok(Parsed::Help),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Parsed::Run(options))
}

/// Runs one prompt turn against `agent` (an ACP agent command); the process exit code.
pub async fn run(options: Options, agent: Command) -> i32 {
    match drive(options, agent).await {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("error: {message}");
            1
        }
    }
}

async fn drive(options: Options, command: Command) -> Result<(), String> {
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
    transcript.line(&format!("$ {}", describe(&command)));
    let client = DemoClient {
        root: root.clone(),
        policy,
        answers: interactive.then(stdin_lines).map(tokio::sync::Mutex::new),
        transcript: transcript.clone(),
    };
    let spawn = SpawnOptions {
        stderr: if options.verbose { StderrMode::Inherit } else { StderrMode::Null },
        ..SpawnOptions::default()
    };
    let (agent, process) =
        Connection::new().spawn_agent(client, command, spawn).map_err(|e| format!("cannot start the agent: {e}"))?;

    // The capabilities the handlers below earn (fs read and write), filled in from the
    // `#[acp_client]` table.
    let init = acp_runtime::client::with_capabilities::<DemoClient>(
        InitializeRequest::new(ProtocolVersion(1))
            .client_info(Implementation::new("acp-demo-client", env!("CARGO_PKG_VERSION"))),
    );
    let init = agent.initialize(init).await.map_err(|e| format!("initialize: {e}"))?;
    let name = match init.agent_info.flatten() {
        Some(info) => format!("{} {}", info.name, info.version),
        None => "an agent".to_owned(),
    };
    transcript.line(&format!("connected to {name} (protocol v{})", init.protocol_version.0));

    let session = agent
        .new_session(NewSessionRequest::new(root.to_string_lossy(), Vec::new()))
        .await
        .map_err(|e| format!("session/new: {e}"))?
        .session_id;
    transcript.line(&format!("session {} in {}", session.0, root.display()));
    transcript.line(&format!("› {}", options.prompt));

    let prompt = PromptRequest::new(session.clone(), vec![ContentBlock::Text(TextContent::new(options.prompt))]);
    let turn = agent.prompt(prompt);
    tokio::pin!(turn);
    let response = tokio::select! {
        response = &mut turn => response,
        _ = tokio::signal::ctrl_c() => {
            transcript.line("^C: cancelling the turn (session/cancel); ^C again to quit");
            agent.cancel(CancelNotification::new(session)).await.map_err(|e| format!("session/cancel: {e}"))?;
            tokio::select! {
                response = &mut turn => response,
                _ = tokio::signal::ctrl_c() => return Err("interrupted".to_owned()),
            }
        }
    };
    let response = response.map_err(|e| format!("session/prompt: {e}"))?;
    transcript.line(&format!("■ stop reason: {}", response.stop_reason.as_str()));
    // Our agent is done; a well-behaved one exits on SIGTERM (or on end of input).
    let _ = process.terminate().await;
    Ok(())
}

fn describe(command: &Command) -> String {
    let mut words = vec![command.get_program().to_string_lossy().into_owned()];
    words.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.join(" ")
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
    /// `Allow` or `Reject`, or `Ask` when `answers` is set.
    policy: Policy,
    answers: Option<tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>>,
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
        let title =
            self.transcript.title_of(&params.tool_call.tool_call_id.0, params.tool_call.title.clone().flatten());
        let chosen = match (&self.answers, self.policy) {
            (Some(answers), _) => {
                tokio::select! {
                    chosen = self.ask(&title, &params.options, answers) => chosen,
                    _ = cx.cancelled() => {
                        self.transcript.line("  (the turn was cancelled: permission request answered `cancelled`)");
                        None
                    }
                }
            }
            (None, policy) => {
                let chosen = pick(&params.options, policy);
                let said = chosen.as_ref().map_or("no matching option, cancelled", |o| o.name.as_str());
                let policy = if policy == Policy::Reject { "reject" } else { "allow" };
                self.transcript.line(&format!("? permission for “{title}”: {said} (policy {policy})"));
                chosen
            }
        };
        let outcome = match chosen {
            Some(option) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(option.option_id)),
            None => RequestPermissionOutcome::Cancelled,
        };
        Ok(RequestPermissionResponse::new(outcome))
    }

    async fn fs_read_text_file(&self, params: ReadTextFileRequest) -> Result<ReadTextFileResponse, Error> {
        let path = self.confine("fs/read_text_file", &params.path)?;
        let text = tokio::fs::read_to_string(&path).await.map_err(|e| self.io_error("fs/read_text_file", &path, e))?;
        let start = params.line.flatten().unwrap_or(1).max(1) as usize - 1;
        let limit = params.limit.flatten().map_or(usize::MAX, |l| l as usize);
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

/// The option `policy` (allow or reject) chooses: a `*_once` one, else an `*_always` one.
fn pick(options: &[PermissionOption], policy: Policy) -> Option<PermissionOption> {
    let wanted: &[PermissionOptionKind] = match policy {
        Policy::Reject => &[PermissionOptionKind::RejectOnce, PermissionOptionKind::RejectAlways],
        _ => &[PermissionOptionKind::AllowOnce, PermissionOptionKind::AllowAlways],
    };
    wanted.iter().find_map(|kind| options.iter().find(|o| o.kind == *kind)).cloned()
}

impl DemoClient {
    /// Asks on the terminal (rejects when stdin ends); `None` for no option.
    async fn ask(
        &self,
        title: &str,
        options: &[PermissionOption],
        answers: &tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>,
    ) -> Option<PermissionOption> {
        let mut answers = answers.lock().await;
        while answers.try_recv().is_ok() {} // typed ahead of the question: not an answer to it
        let mut question = format!("? permission for “{title}”:");
        for (n, option) in options.iter().enumerate() {
            question.push_str(&format!("\n    {}) {}", n + 1, option.name));
        }
        self.transcript.line(&question);
        loop {
            self.transcript.inline(&format!("  choose 1-{}: ", options.len()));
            let Some(answer) = answers.recv().await else {
                let chosen = pick(options, Policy::Reject);
                let said = chosen.as_ref().map_or("no option to reject with, cancelled", |o| o.name.as_str());
                self.transcript.line(&format!("  (stdin ended) {said}"));
                return chosen;
            };
            self.transcript.typed();
            match answer.trim().parse::<usize>() {
                Ok(n) if (1..=options.len()).contains(&n) => return Some(options[n - 1].clone()),
                _ => self.transcript.line(&format!("  {:?} is not one of the choices", answer.trim())),
            }
        }
    }

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
                if let Some(Some(title)) = &update.title {
                    state.titles.insert(id.clone(), title.clone());
                }
                let title = state.titles.get(id).cloned().unwrap_or_else(|| id.clone());
                let status = match &update.status {
                    Some(Some(status)) => status.as_str(),
                    _ => "updated",
                };
                let mut text = format!("  ↳ {title}: {status}");
                if let Some(Some(content)) = &update.content {
                    push_content(&mut text, content);
                }
                self.write(state, &text, true);
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
