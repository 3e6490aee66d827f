//! An editor for the conductor tests: runs a conductor (ours or the official one) as a child
//! process and speaks JSON-RPC to it over its stdio, line by line.

#![allow(dead_code)] // each test file uses its own part of it

pub mod peers;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

pub const WAIT: Duration = Duration::from_secs(20);

pub struct Editor {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: tokio::task::JoinHandle<String>,
}

impl Editor {
    /// Starts `program args...`, its stderr collected for [`Editor::finish`].
    pub fn spawn(program: &str, args: &[&str]) -> Editor {
        let mut child = Command::new(program)
            .args(args)
            // The demo agent's pause between streamed words: short, nothing depends on it.
            .env("ACP_DEMO_DELAY_MS", "2")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{program} starts: {e}"));
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut stderr = child.stderr.take().unwrap();
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text).await;
            text
        });
        Editor { child, stdin, lines, stderr }
    }

    pub async fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.send_line(&line).await;
    }

    pub async fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// The next line, as text; `None` at the end of the conductor's output.
    pub async fn recv_line(&mut self) -> Option<String> {
        tokio::time::timeout(WAIT, self.lines.next_line()).await.expect("the conductor answers in time").unwrap()
    }

    pub async fn recv(&mut self) -> Value {
        let line = self.recv_line().await.expect("a message, not the end of output");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Reads until the answer to `id`; what came before it.
    pub async fn until_answer(&mut self, id: i64) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let message = self.recv().await;
            if message.get("method").is_none() && message["id"] == json!(id) {
                return (message, before);
            }
            before.push(message);
        }
    }

    /// `initialize` as id 0, offering reads of text files; the answer.
    pub async fn initialize(&mut self) -> Value {
        let params =
            json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": false}}});
        self.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})).await;
        self.until_answer(0).await.0
    }

    /// `session/new` as `id` in `cwd`; the session id.
    pub async fn new_session(&mut self, id: i64, cwd: &Path) -> Value {
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":"session/new","params":{"cwd": cwd, "mcpServers": []}}))
            .await;
        let (answer, _) = self.until_answer(id).await;
        let session = answer["result"]["sessionId"].clone();
        assert!(session.is_string(), "{answer}");
        session
    }

    /// Sends `session/prompt` as `id` and plays the user until its answer: permission requests
    /// are allowed once, file reads are served from disk. The answer and the updates.
    pub async fn turn(&mut self, id: i64, params: Value) -> (Value, Vec<Value>) {
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":"session/prompt","params": params})).await;
        let mut updates = Vec::new();
        loop {
            let message = self.recv().await;
            match message["method"].as_str() {
                Some("session/update") => updates.push(message),
                Some("session/request_permission") => {
                    let result = json!({"outcome": {"outcome": "selected", "optionId": allow_once(&message)}});
                    self.send(&json!({"jsonrpc":"2.0","id":message["id"],"result":result})).await;
                }
                Some("fs/read_text_file") => {
                    let path = message["params"]["path"].as_str().unwrap();
                    let content = std::fs::read_to_string(path).unwrap();
                    self.send(&json!({"jsonrpc":"2.0","id":message["id"],"result":{"content":content}})).await;
                }
                Some(other) => panic!("unexpected {other}: {message}"),
                None if message["id"] == json!(id) => return (message, updates),
                None => panic!("an answer to a request never sent: {message}"),
            }
        }
    }

    /// Sends `signal` (`TERM`, `INT`, ...) to the conductor.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("the conductor runs").to_string();
        let sent = std::process::Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap();
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// Waits for the conductor to exit, its stdin still open; its exit code and stderr.
    pub async fn exit(mut self) -> (Option<i32>, String) {
        let status = tokio::time::timeout(WAIT, self.child.wait()).await.expect("the conductor exits").unwrap();
        drop(self.stdin.take());
        (status.code(), self.stderr.await.unwrap())
    }

    /// Closes stdin and kills the conductor, for one that does not exit at the end of its
    /// input (`sacp-conductor` 11); its stderr.
    pub async fn kill(mut self) -> String {
        drop(self.stdin.take());
        let _ = self.child.kill().await;
        self.stderr.await.unwrap()
    }

    /// Closes stdin and waits for the conductor to exit; its exit code and stderr.
    pub async fn finish(mut self) -> (Option<i32>, String) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(WAIT, self.child.wait()).await.expect("the conductor exits").unwrap();
        (status.code(), self.stderr.await.unwrap())
    }
}

/// The `allow_once` option of a permission request.
pub fn allow_once(request: &Value) -> Value {
    request["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "allow_once")
        .expect("an allow option")["optionId"]
        .clone()
}

/// The text of the agent message chunks among `updates`, chunk by chunk.
pub fn agent_chunks(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .filter(|u| u["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["params"]["update"]["content"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// A folder of its own for one test, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("acp-conductor-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a test folder");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A chain of the context proxy (`--context injected`) and a pass-through in front of the echo
/// agent, driven through initialize, `session/new` and one prompt: the prompt reaches the agent
/// with the context in front and every other member kept, unknown ones and `_meta` included.
/// Returns the `initialize` answer, for what a conductor adds to it.
pub async fn context_reaches_the_echo_agent_losslessly(editor: &mut Editor) -> Value {
    context_reaches_the_echo_agent_losslessly_with(editor, json!([])).await
}

/// [`context_reaches_the_echo_agent_losslessly`] with these MCP servers in `session/new`.
pub async fn context_reaches_the_echo_agent_losslessly_with(editor: &mut Editor, mcp_servers: Value) -> Value {
    let init = editor.initialize().await;
    assert_eq!(init["result"]["agentCapabilities"]["_meta"], json!({"echo": true}), "the agent's answer: {init}");
    let new = json!({"cwd": "/", "mcpServers": mcp_servers});
    editor.send(&json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":new})).await;
    let (answer, _) = editor.until_answer(1).await;
    assert_eq!(answer["result"]["sessionId"], "echo-1", "{answer}");

    // Members no schema knows, at several depths, and `_meta`: all of them arrive.
    let prompt = json!({
        "sessionId": "echo-1",
        "prompt": [{"type": "text", "text": "hi", "x-extra": {"deep": [1, 2.5]}}],
        "x-top": true,
        "_meta": {"traceparent": "00-abc"},
    });
    let (answer, before) = editor.turn(2, prompt.clone()).await;
    assert_eq!(answer["result"], json!({"stopReason":"end_turn"}), "{answer}");
    let echo = before.iter().find(|m| m["method"] == "session/update").expect("the echo");
    let received: Value = serde_json::from_str(echo["params"]["update"]["_meta"]["receivedParams"].as_str().unwrap())
        .expect("the params the agent got, as JSON");
    let mut expected = prompt;
    expected["prompt"].as_array_mut().unwrap().insert(0, json!({"type":"text","text":"injected"}));
    assert_eq!(received, expected, "every member kept, one block added");
    init
}

/// A full turn of the demo agent behind the context proxy (`--context 'Please read
/// CONTEXT.md'`) and a pass-through: the context names the file to read and the prompt names
/// none, so the file read (a permission request and `fs/read_text_file`, both travelling back
/// through the chain) is the one the context asked for.
pub async fn full_turn_reads_the_file_the_context_names(editor: &mut Editor, label: &str) {
    let init = editor.initialize().await;
    assert_eq!(init["result"]["agentInfo"]["name"], "acp-demo-agent", "{init}");
    let dir = TempDir::new(label);
    std::fs::write(dir.0.join("CONTEXT.md"), "# Read because of the context\n").unwrap();
    std::fs::write(dir.0.join("README.md"), "# The default file\n").unwrap();
    let session = editor.new_session(1, &dir.0).await;

    let (answer, updates) =
        editor.turn(2, json!({"sessionId": session, "prompt": [{"type":"text","text":"What does it say?"}]})).await;
    assert_eq!(answer, json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}));
    let text = agent_chunks(&updates).concat();
    assert!(text.contains("Read because of the context"), "the file the context names: {text:?}");
    let kinds: Vec<&str> = updates.iter().filter_map(|u| u["params"]["update"]["sessionUpdate"].as_str()).collect();
    assert!(kinds.contains(&"tool_call") && kinds.contains(&"tool_call_update"), "{kinds:?}");
}

/// The traced scenario: `initialize`, `session/new` with an MCP server whose environment holds
/// a secret, and one prompt, through the conductor `editor` runs in front of the context proxy
/// (`--context injected`), a pass-through and the echo agent; then the end of input.
pub async fn traced_turn(mut editor: Editor) -> String {
    context_reaches_the_echo_agent_losslessly_with(&mut editor, json!([SECRET_SERVER.clone()])).await;
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
    stderr
}

/// An MCP server definition with a secret in its environment (`"s3cret"`).
pub static SECRET_SERVER: std::sync::LazyLock<Value> = std::sync::LazyLock::new(
    || json!({"name": "tools", "command": "/bin/tools", "args": [], "env": [{"name": "API_KEY", "value": "s3cret"}]}),
);

/// The events of a trace file, each as `type from -> to method`.
pub fn trace_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("the trace {}: {e}", path.display()));
    text.lines()
        .map(|line| {
            let e: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            let method = e["method"].as_str().unwrap_or("");
            format!(
                "{} {} -> {} {method}",
                e["type"].as_str().unwrap(),
                e["from"].as_str().unwrap(),
                e["to"].as_str().unwrap()
            )
            .trim_end()
            .to_owned()
        })
        .collect()
}

/// A turn that waits on the user's permission, cancelled with `session/cancel`: the prompt is
/// answered `cancelled`, and the agent, which gives up its permission request, says so with a
/// `$/cancel_request` that reaches the editor under the id it knows the request by. The chain
/// then carries the next turn.
pub async fn cancel_while_asking(editor: Editor, label: &str) {
    let (code, stderr) = cancel_while_asking_with(editor, label, CancelIds::Translated).await.finish().await;
    assert_eq!(code, Some(0), "{label}: {stderr}");
}

/// What a conductor does to the id in a `$/cancel_request` it passes on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CancelIds {
    /// The id of the hop it goes on to, as it must be.
    Translated,
    /// The id it came with (`sacp-conductor` 11): the editor cannot tell which request it
    /// withdraws, and it is only checked to arrive.
    PassedAsTheyCame,
}

/// [`cancel_while_asking`], leaving the conductor running: for one that does not exit at the
/// end of its input.
pub async fn cancel_while_asking_with(mut editor: Editor, label: &str, ids: CancelIds) -> Editor {
    editor.initialize().await;
    let dir = TempDir::new(&format!("cancel-{label}"));
    std::fs::write(dir.0.join("README.md"), "# Not read: the turn is cancelled\n").unwrap();
    let session = editor.new_session(1, &dir.0).await;
    let prompt = json!({"sessionId": session, "prompt": [{"type":"text","text":"Please read README.md"}]});
    editor.send(&json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params": prompt})).await;
    let asking = loop {
        let message = editor.recv().await;
        match message["method"].as_str() {
            Some("session/update") => continue,
            Some("session/request_permission") => break message,
            _ => panic!("{label}: unexpected before the permission request: {message}"),
        }
    };
    editor.send(&json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId": session}})).await;
    let (mut answer, mut withdrawn) = (None, false);
    while answer.is_none() || !withdrawn {
        let message = editor.recv().await;
        match message["method"].as_str() {
            Some("$/cancel_request") => {
                if ids == CancelIds::Translated {
                    assert_eq!(message["params"]["requestId"], asking["id"], "{label}: {message}");
                }
                withdrawn = true;
            }
            Some("session/update") => {}
            None if message["id"] == json!(2) => answer = Some(message),
            _ => panic!("{label}: unexpected after the cancel: {message}"),
        }
    }
    assert_eq!(answer.unwrap()["result"], json!({"stopReason":"cancelled"}), "{label}");
    // Late, as a client may answer: the chain drops it.
    let cancelled = json!({"outcome": {"outcome": "cancelled"}});
    editor.send(&json!({"jsonrpc":"2.0","id":asking["id"],"result":cancelled})).await;

    let (answer, updates) = editor.turn(3, prompt).await;
    assert_eq!(answer["result"], json!({"stopReason":"end_turn"}), "{label}: {answer}");
    // An arrow proxy, where there is one, marks each chunk.
    let text: String = agent_chunks(&updates).iter().map(|c| c.trim_start_matches('>')).collect();
    assert!(text.contains("Not read"), "{label}: {text:?}");
    editor
}
