//! End to end: the runtime's demo examples as real processes over stdio.
//!
//! `acp-example-agent` and `acp-example-client` are `runtime/examples/agent.rs` and
//! `client.rs`, built as binaries of this package (see `tests/Cargo.toml`). The first tests
//! drive the agent with a recording client written here; the last ones run the client example
//! against the agent example and read its transcript, with protocol v1 and v2.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use acp_rpc::acp_types::{
    CancelNotification, ClientCapabilities, ContentBlock, Error, FileSystemCapabilities, InitializeRequest,
    NewSessionRequest, PromptRequest, ProtocolVersion, ReadTextFileRequest, ReadTextFileResponse,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionId, SessionNotification, SessionUpdate, StopReason, TextContent, ToolCallContent,
};
use acp_rpc::transport::{SpawnOptions, StderrMode};
use acp_rpc::{AgentHandle, AgentProcess, ClientContext, Connection, acp_client};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

const AGENT: &str = env!("CARGO_BIN_EXE_acp-example-agent");
const CLIENT: &str = env!("CARGO_BIN_EXE_acp-example-client");
/// Upper bound for anything that should happen soon; never used as synchronisation.
const LIMIT: Duration = Duration::from_secs(20);
/// The agent's pause before each streamed word: short, the tests do not depend on it.
const DELAY_MS: &str = "2";
/// A pause the turn never gets through (for cancelling it mid-stream).
const FOREVER_MS: &str = "600000";

const NOTES: &str = "hello from the e2e root\nsecond line\n";
const SECRET: &str = "the secret outside the root";

// ---- a scratch directory --------------------------------------------------------------------

/// `<tmp>/root/notes.txt` (the session's root) and `<tmp>/secret.txt` (outside it); removed on drop.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "acp-e2e-demo-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root")).unwrap();
        std::fs::write(dir.join("root/notes.txt"), NOTES).unwrap();
        std::fs::write(dir.join("secret.txt"), SECRET).unwrap();
        std::os::unix::fs::symlink("../secret.txt", dir.join("root/link.txt")).unwrap();
        Scratch { dir: dir.canonicalize().unwrap() }
    }

    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---- a recording client ---------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Permission {
    /// Select `allow-once`.
    Allow,
    /// Leave the request pending (the user has not decided) until the turn is cancelled.
    Hold,
}

/// Records, in order, every session update and every request the agent makes.
struct Recorder {
    log: Arc<Mutex<Vec<String>>>,
    /// The text of all message chunks.
    said: Arc<Mutex<String>>,
    permission: Arc<Mutex<Permission>>,
    /// A permission request is pending (Hold), then: its handler saw the turn cancelled.
    events: mpsc::UnboundedSender<String>,
    root: PathBuf,
}

impl Recorder {
    fn push(&self, entry: String) {
        self.log.lock().unwrap().push(entry);
    }
}

#[acp_client]
impl Recorder {
    async fn session_update(&self, params: SessionNotification) -> Result<(), Error> {
        let entry = match &params.update {
            SessionUpdate::Plan(plan) => {
                let entries: Vec<String> =
                    plan.entries.iter().map(|e| format!("{} ({})", e.content, e.status.as_str())).collect();
                format!("plan: {}", entries.join(", "))
            }
            SessionUpdate::AgentMessageChunk(chunk) => {
                let ContentBlock::Text(text) = &chunk.content else { panic!("non-text chunk {chunk:?}") };
                self.said.lock().unwrap().push_str(&text.text);
                "agent_message_chunk".to_owned()
            }
            SessionUpdate::ToolCall(call) => format!(
                "tool_call {} [{}] {}: {}",
                call.tool_call_id.0,
                call.kind.as_ref().map_or("-", |k| k.as_str()),
                call.status.as_ref().map_or("-", |s| s.as_str()),
                call.title
            ),
            SessionUpdate::ToolCallUpdate(update) => {
                let status = update.status.clone().flatten().map_or("-".to_owned(), |s| s.as_str().to_owned());
                let mut entry = format!("tool_call_update {} {status}", update.tool_call_id.0);
                if let Some(Some(content)) = &update.content {
                    for item in content {
                        let ToolCallContent::Content(c) = item else { panic!("unexpected content {item:?}") };
                        let ContentBlock::Text(t) = &c.content else { panic!("unexpected content {item:?}") };
                        entry.push_str(&format!(" | {}", t.text));
                    }
                }
                entry
            }
            other => format!("{other:?}"),
        };
        self.push(entry);
        Ok(())
    }

    async fn session_request_permission(
        &self,
        params: RequestPermissionRequest,
        cx: ClientContext,
    ) -> Result<RequestPermissionResponse, Error> {
        let options: Vec<&str> = params.options.iter().map(|o| o.option_id.0.as_str()).collect();
        self.push(format!("session/request_permission {} [{}]", params.tool_call.tool_call_id.0, options.join(", ")));
        let mode = *self.permission.lock().unwrap();
        match mode {
            Permission::Allow => Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Selected(
                SelectedPermissionOutcome::new("allow-once"),
            ))),
            Permission::Hold => {
                let _ = self.events.send(format!("pending {}", params.tool_call.tool_call_id.0));
                cx.cancelled().await;
                let _ = self.events.send("permission handler cancelled".to_owned());
                Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
            }
        }
    }

    async fn fs_read_text_file(&self, params: ReadTextFileRequest) -> Result<ReadTextFileResponse, Error> {
        let path = Path::new(&params.path);
        let shown = path.strip_prefix(&self.root).map(|p| p.display().to_string()).unwrap_or(params.path.clone());
        self.push(format!("fs/read_text_file {shown}"));
        let text = std::fs::read_to_string(path).map_err(|_| Error::resource_not_found())?;
        Ok(ReadTextFileResponse::new(text))
    }
}

struct Session {
    agent: AgentHandle,
    process: AgentProcess,
    id: SessionId,
    log: Arc<Mutex<Vec<String>>>,
    said: Arc<Mutex<String>>,
    permission: Arc<Mutex<Permission>>,
    events: mpsc::UnboundedReceiver<String>,
    /// The agent's stderr, line by line.
    stderr: Arc<Mutex<Vec<String>>>,
}

/// Starts the example agent, initializes (advertising `fs.readTextFile`) and opens a session
/// in `root`. `delay_ms` is the agent's pause before each streamed word.
async fn start(root: &Path, delay_ms: &str) -> Session {
    let log = Arc::new(Mutex::new(Vec::new()));
    let said = Arc::new(Mutex::new(String::new()));
    let permission = Arc::new(Mutex::new(Permission::Allow));
    let (tx, events) = mpsc::unbounded_channel();
    let recorder = Recorder {
        log: log.clone(),
        said: said.clone(),
        permission: permission.clone(),
        events: tx,
        root: root.to_owned(),
    };
    let mut command = std::process::Command::new(AGENT);
    command.env("ACP_DEMO_DELAY_MS", delay_ms);
    let options = SpawnOptions { stderr: StderrMode::Piped, ..SpawnOptions::default() };
    let (agent, mut process) = Connection::new().spawn_agent(recorder, command, options).unwrap();

    let stderr = Arc::new(Mutex::new(Vec::new()));
    let mut lines = tokio::io::BufReader::new(process.child_mut().take_stderr().unwrap()).lines();
    let sink = stderr.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            sink.lock().unwrap().push(line);
        }
    });

    let fs = FileSystemCapabilities::new().read_text_file(true);
    let init = InitializeRequest::new(ProtocolVersion(1)).client_capabilities(ClientCapabilities::new().fs(fs));
    let init = tokio::time::timeout(LIMIT, agent.initialize(init)).await.unwrap().unwrap();
    assert_eq!(init.protocol_version, ProtocolVersion(1));
    let id = agent.new_session(NewSessionRequest::new(root.to_string_lossy(), vec![])).await.unwrap().session_id;
    assert!(id.0.starts_with("sess_"), "{id:?}");
    Session { agent, process, id, log, said, permission, events, stderr }
}

impl Session {
    fn prompt(&self, text: &str) -> PromptRequest {
        PromptRequest::new(self.id.clone(), vec![ContentBlock::Text(TextContent::new(text))])
    }

    /// The log so far with each run of message chunks as one entry (how many chunks a
    /// message is streamed in is up to the agent), and the number of chunks.
    fn take_log(&self) -> (Vec<String>, usize) {
        let log = std::mem::take(&mut *self.log.lock().unwrap());
        let chunks = log.iter().filter(|e| *e == "agent_message_chunk").count();
        let mut collapsed: Vec<String> = Vec::new();
        for entry in log {
            if entry == "agent_message_chunk" && collapsed.last().is_some_and(|l| *l == entry) {
                continue;
            }
            collapsed.push(entry);
        }
        (collapsed, chunks)
    }

    async fn next_event(&mut self) -> String {
        tokio::time::timeout(LIMIT, self.events.recv()).await.expect("timed out waiting for an event").unwrap()
    }

    /// Waits for the agent to log a line containing `needle` on stderr.
    async fn agent_logged(&self, needle: &str) {
        let t0 = Instant::now();
        while !self.stderr.lock().unwrap().iter().any(|l| l.contains(needle)) {
            assert!(t0.elapsed() < LIMIT, "the agent never logged {needle:?}: {:?}", self.stderr.lock().unwrap());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

// ---- the agent example, driven by the recording client --------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_full_prompt_turn_plan_chunks_tool_call_permission_read_and_end_turn() {
    let scratch = Scratch::new();
    let session = start(&scratch.root(), DELAY_MS).await;

    let response = tokio::time::timeout(LIMIT, session.agent.prompt(session.prompt("Please read notes.txt")))
        .await
        .unwrap()
        .unwrap();
    session.log.lock().unwrap().push(format!("stop_reason {}", response.stop_reason.as_str()));

    // The prompt-turn guide's sequence, in the order the client saw it.
    let (log, chunks) = session.take_log();
    assert_eq!(
        log,
        [
            "plan: Read notes.txt (pending), Tell how it starts (pending)",
            "agent_message_chunk",
            "tool_call call_1 [read] pending: Read notes.txt",
            "session/request_permission call_1 [allow-once, reject-once]",
            "tool_call_update call_1 in_progress",
            "fs/read_text_file notes.txt",
            &format!("tool_call_update call_1 completed | {NOTES}"),
            "agent_message_chunk",
            "stop_reason end_turn",
        ]
    );
    assert!(chunks > 4, "the messages are streamed word by word ({chunks} chunks)");
    assert_eq!(
        *session.said.lock().unwrap(),
        "Let me read notes.txt for you.notes.txt starts with “hello from the e2e root”."
    );
    assert_eq!(response.stop_reason, StopReason::EndTurn);

    // A second turn in the same session gets a new tool call.
    let response = session.agent.prompt(session.prompt("And notes.txt again?")).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert!(session.take_log().0.contains(&"tool_call call_2 [read] pending: Read notes.txt".to_owned()));

    // The agent exits when the guard drops (SIGTERM to its process group).
    drop(session.process);
    tokio::time::timeout(LIMIT, session.agent.closed()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_cancel_while_the_agent_awaits_permission_answers_cancelled_within_100ms() {
    let scratch = Scratch::new();
    let mut session = start(&scratch.root(), DELAY_MS).await;
    *session.permission.lock().unwrap() = Permission::Hold;

    let agent = session.agent.clone();
    let prompt = session.prompt("Please read notes.txt");
    let turn = tokio::spawn(async move { agent.prompt(prompt).await });
    assert_eq!(session.next_event().await, "pending call_1");

    let t0 = Instant::now();
    session.agent.cancel(CancelNotification::new(session.id.clone())).await.unwrap();
    let response = tokio::time::timeout(LIMIT, turn).await.unwrap().unwrap().unwrap();
    let elapsed = t0.elapsed();
    assert_eq!(response.stop_reason, StopReason::Cancelled);
    assert!(elapsed < Duration::from_millis(100), "session/prompt answered {elapsed:?} after session/cancel");
    session.log.lock().unwrap().push(format!("stop_reason {}", response.stop_reason.as_str()));

    // The client's pending permission request was answered `cancelled` (its handler's token
    // fired), the agent's request resolved `cancelled`, and the agent stopped the turn there.
    assert_eq!(session.next_event().await, "permission handler cancelled");
    session.agent_logged("permission for call_1: cancelled").await;
    session.agent_logged("turn ends: cancelled").await;
    let (log, _) = session.take_log();
    assert_eq!(
        log,
        [
            "plan: Read notes.txt (pending), Tell how it starts (pending)",
            "agent_message_chunk",
            "tool_call call_1 [read] pending: Read notes.txt",
            "session/request_permission call_1 [allow-once, reject-once]",
            "stop_reason cancelled",
        ]
    );

    // The session goes on: the next turn runs to the end.
    *session.permission.lock().unwrap() = Permission::Allow;
    let response = tokio::time::timeout(LIMIT, session.agent.prompt(session.prompt("Read notes.txt, please.")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    let (log, _) = session.take_log();
    assert!(log.contains(&format!("tool_call_update call_2 completed | {NOTES}")), "{log:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_cancel_while_the_agent_streams_stops_the_turn_at_once() {
    let scratch = Scratch::new();
    let session = start(&scratch.root(), FOREVER_MS).await;
    let agent = session.agent.clone();
    let prompt = session.prompt("Please read notes.txt");
    let turn = tokio::spawn(async move { agent.prompt(prompt).await });
    // The plan is out; the agent is pausing before its first word (for ten minutes).
    let t0 = Instant::now();
    while session.log.lock().unwrap().is_empty() {
        assert!(t0.elapsed() < LIMIT, "no plan");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let t0 = Instant::now();
    session.agent.cancel(CancelNotification::new(session.id.clone())).await.unwrap();
    let response = tokio::time::timeout(LIMIT, turn).await.unwrap().unwrap().unwrap();
    let elapsed = t0.elapsed();
    assert_eq!(response.stop_reason, StopReason::Cancelled);
    assert!(elapsed < Duration::from_millis(100), "session/prompt answered {elapsed:?} after session/cancel");
    // The agent's handler returned `cancelled` itself (the runtime would have dropped it at the
    // end of its grace period otherwise, without this log line).
    session.agent_logged("turn ends: cancelled").await;
    let (log, _) = session.take_log();
    assert_eq!(log, ["plan: Read notes.txt (pending), Tell how it starts (pending)"]);
}

// ---- the client example against the agent example -------------------------------------------

async fn run_client(root: &Path, args: &[&str]) -> (Output, String) {
    run_client_against(root, args, &[]).await
}

/// The client example with `args`, against the agent example with `agent_args`.
async fn run_client_against(root: &Path, args: &[&str], agent_args: &[&str]) -> (Output, String) {
    let mut command = tokio::process::Command::new(CLIENT);
    command
        .arg("--root")
        .arg(root)
        .args(args)
        .arg("--")
        .arg(AGENT)
        .args(agent_args)
        .env("ACP_DEMO_DELAY_MS", DELAY_MS)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(LIMIT, command.output()).await.expect("the client example hung").unwrap();
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    (output, stdout)
}

/// Asserts that `needles` appear in `haystack` in this order.
fn assert_in_order(haystack: &str, needles: &[&str]) {
    let mut from = 0;
    for needle in needles {
        match haystack[from..].find(needle) {
            Some(at) => from += at + needle.len(),
            None => panic!("{needle:?} missing (or out of order) in the transcript:\n{haystack}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_client_example_runs_a_turn_against_the_agent_example() {
    let scratch = Scratch::new();
    let (output, transcript) =
        run_client(&scratch.root(), &["--policy", "allow", "--prompt", "Please read notes.txt"]).await;
    assert!(output.status.success(), "{:?}\n{transcript}\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    let root = scratch.root();
    assert_in_order(
        &transcript,
        &[
            "connected to acp-demo-agent",
            "› Please read notes.txt",
            "Plan:\n  [ ] Read notes.txt (high)\n  [ ] Tell how it starts (medium)\n",
            "Let me read notes.txt for you.\n",
            "⚙ Read notes.txt [read] pending",
            "? permission for “Read notes.txt”: Allow once (policy allow)",
            "↳ Read notes.txt: in_progress",
            &format!("⇢ fs/read_text_file {}/notes.txt (2 lines)", root.display()),
            "↳ Read notes.txt: completed\n    │ hello from the e2e root\n    │ second line\n",
            "notes.txt starts with “hello from the e2e root”.\n",
            "■ stop reason: end_turn\n",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_client_example_refuses_file_access_outside_its_root() {
    let scratch = Scratch::new();
    // Through `..`, through a symbolic link, and by absolute path.
    let outside = scratch.dir.join("secret.txt");
    let absolute = outside.to_string_lossy().into_owned();
    for target in ["../secret.txt", "link.txt", absolute.as_str()] {
        let prompt = format!("Please read {target}");
        let (output, transcript) = run_client(&scratch.root(), &["--policy", "allow", "--prompt", &prompt]).await;
        assert!(output.status.success(), "{:?}\n{transcript}", output.status);
        let why = format!("{} is outside the root {}", outside.display(), scratch.root().display());
        assert_in_order(
            &transcript,
            &[
                &format!("? permission for “Read {target}”: Allow once (policy allow)"),
                "in_progress",
                &format!("✗ refused fs/read_text_file {}", scratch.root().join(target).display()),
                &why,
                &format!("↳ Read {target}: failed\n    │ access denied: {why}"),
                "■ stop reason: end_turn\n",
            ],
        );
        assert!(!transcript.contains(SECRET), "the secret leaked:\n{transcript}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_client_example_with_policy_reject_fails_the_tool_call() {
    let scratch = Scratch::new();
    let (output, transcript) =
        run_client(&scratch.root(), &["--policy", "reject", "--prompt", "Please read notes.txt"]).await;
    assert!(output.status.success(), "{:?}\n{transcript}", output.status);
    assert_in_order(
        &transcript,
        &[
            "? permission for “Read notes.txt”: Reject (policy reject)",
            "↳ Read notes.txt: failed\n    │ Permission denied by the user.",
            "Understood, I left notes.txt alone.\n",
            "■ stop reason: end_turn\n",
        ],
    );
    assert!(!transcript.contains("fs/read_text_file"), "{transcript}");
    assert!(!transcript.contains("hello from the e2e root"), "{transcript}");
}

// ---- protocol v2: the same executables, `--protocol 2` ----------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_client_example_runs_a_v2_turn_against_the_dual_agent_example() {
    let scratch = Scratch::new();
    let args = ["--protocol", "2", "--policy", "allow", "--prompt", "Please read notes.txt"];
    let (output, transcript) = run_client(&scratch.root(), &args).await;
    assert!(output.status.success(), "{:?}\n{transcript}\n{}", output.status, String::from_utf8_lossy(&output.stderr));
    // The v2 lifecycle: accepted, running, the tool call (an upsert the client's
    // `SessionState` follows), requires_action around the permission request, the agent's own
    // read (v2 has no fs on the client), idle with the stop reason.
    assert_in_order(
        &transcript,
        &[
            "connected to acp-demo-agent",
            "(protocol v2)",
            "› Please read notes.txt",
            "◦ running",
            "Let me read notes.txt for you.\n",
            "⚙ Read notes.txt [read] pending",
            "◦ requires action",
            "? permission for “Read notes.txt”: Allow once (policy allow)",
            "◦ running",
            "↳ Read notes.txt: in_progress",
            "    │ hello from the e2e root\n    │ second line\n",
            "↳ Read notes.txt: completed",
            "notes.txt starts with “hello from the e2e root”.\n",
            "■ stop reason: end_turn\n",
        ],
    );
    assert!(!transcript.contains("fs/read_text_file"), "{transcript}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_v2_agent_example_reads_nothing_outside_the_session_cwd() {
    let scratch = Scratch::new();
    let outside = scratch.dir.join("secret.txt");
    let absolute = outside.to_string_lossy().into_owned();
    for target in ["../secret.txt", "link.txt", absolute.as_str()] {
        let prompt = format!("Please read {target}");
        let args = ["--protocol", "2", "--policy", "allow", "--prompt", prompt.as_str()];
        let (output, transcript) = run_client(&scratch.root(), &args).await;
        assert!(output.status.success(), "{:?}\n{transcript}", output.status);
        assert_in_order(
            &transcript,
            &[
                &format!("↳ Read {target}: in_progress"),
                "is outside the session's cwd",
                &format!("↳ Read {target}: failed"),
                &format!("I could not read {target}."),
                "■ stop reason: end_turn\n",
            ],
        );
        assert!(!transcript.contains(SECRET), "the secret leaked:\n{transcript}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_client_example_asking_for_v2_goes_on_with_v1_against_a_v1_only_agent() {
    let scratch = Scratch::new();
    let args = ["--protocol", "2", "--policy", "allow", "--prompt", "Please read notes.txt"];
    let (output, transcript) = run_client_against(&scratch.root(), &args, &["--v1-only"]).await;
    assert!(output.status.success(), "{:?}\n{transcript}", output.status);
    assert_in_order(
        &transcript,
        &[
            "(the agent answered protocol 1: going on with v1)",
            "(protocol v1)",
            "Plan:",
            &format!("⇢ fs/read_text_file {}/notes.txt (2 lines)", scratch.root().display()),
            "■ stop reason: end_turn\n",
        ],
    );
    assert!(!transcript.contains("◦ running"), "{transcript}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_a_v1_client_gets_an_error_from_the_v2_only_agent_example() {
    let scratch = Scratch::new();
    let (output, transcript) = run_client_against(&scratch.root(), &["--policy", "allow"], &["--v2-only"]).await;
    assert_eq!(output.status.code(), Some(1), "{transcript}");
    // The v2 agent cannot decode a v1 `initialize` (no `info`): -32602, which the client reports.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("initialize") && stderr.contains("-32602"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_client_example_reports_usage_errors() {
    let output = tokio::process::Command::new(CLIENT).arg("--policy").arg("maybe").output().await.unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--policy is allow, reject or ask"));
    let output = tokio::process::Command::new(CLIENT).output().await.unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("missing the agent command"));
    let output = tokio::process::Command::new(CLIENT).args(["--protocol", "3"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--protocol is 1 or 2"));
    let output = tokio::process::Command::new(CLIENT)
        .args(["--url", "http://127.0.0.1:1/acp", "--", "x"])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("either --url or an agent command"));
    // Not a usage error, but said as clearly: nothing listens there (TLS is built in, `http-tls`;
    // over https:// the first POST, `initialize`, finds it out, over wss:// connecting does).
    let output =
        tokio::process::Command::new(CLIENT).args(["--url", "https://127.0.0.1:1/acp"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("initialize") && stderr.contains("cannot reach the server"), "{stderr}");
    let output = tokio::process::Command::new(CLIENT).args(["--url", "wss://127.0.0.1:1/acp"]).output().await.unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot connect to 127.0.0.1:1"), "{stderr}");
    let output = tokio::process::Command::new(AGENT).arg("--v3-only").output().await.unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--v1-only or --v2-only"));
}
