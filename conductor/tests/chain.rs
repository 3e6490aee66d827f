//! `acp-conductor` as an editor runs it: chains of proxies in front of an agent, over the
//! processes' stdio. A turn through three proxies (the two example proxies and a
//! pass-through), the prompt arriving byte for byte except for what a proxy changed, and the
//! faults: a proxy that crashes mid-turn, one that never answers, one that writes garbage.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const CONDUCTOR: &str = env!("CARGO_BIN_EXE_acp-conductor");
const COMPONENTS: &str = env!("CARGO_BIN_EXE_acp-conductor-test-components");
const CONTEXT: &str = env!("CARGO_BIN_EXE_acp-conductor-proxy-context");
const FILTER: &str = env!("CARGO_BIN_EXE_acp-conductor-proxy-filter");
const AGENT: &str = env!("CARGO_BIN_EXE_acp-conductor-example-agent");
const WAIT: Duration = Duration::from_secs(20);

struct Editor {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: tokio::task::JoinHandle<String>,
}

impl Editor {
    fn conductor(args: &[&str]) -> Editor {
        let mut child = Command::new(CONDUCTOR)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the conductor starts");
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

    async fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.send_line(&line).await;
    }

    async fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// The next line, as text; `None` at the end of the conductor's output.
    async fn recv_line(&mut self) -> Option<String> {
        tokio::time::timeout(WAIT, self.lines.next_line()).await.expect("the conductor answers in time").unwrap()
    }

    async fn recv(&mut self) -> Value {
        let line = self.recv_line().await.expect("a message, not the end of output");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Reads until the answer to `id`; what came before it.
    async fn until_answer(&mut self, id: i64) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let message = self.recv().await;
            if message.get("method").is_none() && message["id"] == json!(id) {
                return (message, before);
            }
            before.push(message);
        }
    }

    async fn initialize(&mut self) -> Value {
        let params =
            json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": false}}});
        self.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})).await;
        self.until_answer(0).await.0
    }

    /// Closes stdin and waits for the conductor to exit; its exit code and stderr.
    async fn finish(mut self) -> (Option<i32>, String) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(WAIT, self.child.wait()).await.expect("the conductor exits").unwrap();
        (status.code(), self.stderr.await.unwrap())
    }
}

fn pid_of_echo_agent(stderr: &str) -> u32 {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("[acp-conductor-test-components] pid "))
        .expect("the agent's pid, labelled");
    line.trim().parse().unwrap()
}

fn process_is_gone(pid: u32) -> bool {
    // Reaped processes have no /proc entry; a zombie would still have one.
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn a_turn_through_three_proxies_reaches_the_demo_agent_and_back() {
    let mut editor = Editor::conductor(&[
        "agent",
        &format!("{CONTEXT} --context 'Be brief.'"),
        &format!("{FILTER} --deny execute"),
        &format!("{COMPONENTS} pass"),
        AGENT,
    ]);
    let init = editor.initialize().await;
    assert_eq!(init["result"]["protocolVersion"], json!(1), "{init}");
    assert!(init["result"]["agentInfo"].is_object(), "the agent's own answer comes back: {init}");

    let dir = std::env::temp_dir().join(format!("acp-conductor-turn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("README.md"), "# Hello from the chain\nsecond line\n").unwrap();
    editor.send(&json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd": dir, "mcpServers": []}})).await;
    let (session, _) = editor.until_answer(1).await;
    let session_id = session["result"]["sessionId"].clone();
    assert!(session_id.is_string(), "{session}");

    let prompt = json!({"sessionId": session_id, "prompt": [{"type":"text","text":"Please read README.md"}]});
    editor.send(&json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params": prompt})).await;
    // The demo agent asks before it reads (a `read` tool call: not denied, so it reaches us).
    let mut updates = Vec::new();
    let answer = loop {
        let message = editor.recv().await;
        match message["method"].as_str() {
            Some("session/update") => updates.push(message),
            Some("session/request_permission") => {
                let allow = message["params"]["options"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|o| o["kind"] == "allow_once")
                    .expect("an allow option")["optionId"]
                    .clone();
                let result = json!({"outcome": {"outcome": "selected", "optionId": allow}});
                editor.send(&json!({"jsonrpc":"2.0","id":message["id"],"result":result})).await;
            }
            Some("fs/read_text_file") => {
                let path = message["params"]["path"].as_str().unwrap();
                let content = std::fs::read_to_string(path).unwrap();
                editor.send(&json!({"jsonrpc":"2.0","id":message["id"],"result":{"content":content}})).await;
            }
            Some(other) => panic!("unexpected {other}: {message}"),
            None => break message,
        }
    };
    assert_eq!(answer, json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}));
    let text: String = updates
        .iter()
        .filter(|u| u["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(text.contains("Hello from the chain"), "the file's first line, through three proxies: {text:?}");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_prompt_arrives_byte_for_byte_but_for_what_a_proxy_changed() {
    let mut editor = Editor::conductor(&[
        "agent",
        &format!("{COMPONENTS} pass"),
        &format!("{CONTEXT} --context injected"),
        &format!("{COMPONENTS} pass"),
        &format!("{COMPONENTS} echo-agent"),
    ]);
    let init = editor.initialize().await;
    assert_eq!(init["result"]["agentCapabilities"]["_meta"], json!({"echo": true}), "{init}");
    editor.send(&json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}})).await;
    editor.until_answer(1).await;

    // Unknown members at several depths, `_meta`, odd spacing and number forms: what passes
    // through untouched keeps its bytes.
    let untouched =
        r#"{"jsonrpc":"2.0","method":"_x/note","params":{"z" : 1.50e0,"a":[ {"_meta":{"traceparent":"00-1"}} ]}}"#;
    editor.send_line(&format!("{untouched}\n")).await;
    let prompt = r#"{"sessionId":"echo-1","prompt":[{"type":"text","text":"hi","x-extra":{"deep":[1,2.0]}}],"x-top":true,"_meta":{"traceparent":"00-abc"}}"#;
    editor.send_line(&format!(r#"{{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{prompt}}}"#)).await;
    editor.send_line("\n").await;
    let (answer, before) = editor.until_answer(2).await;
    assert_eq!(answer["result"], json!({"stopReason":"end_turn"}));
    let update = before.iter().find(|m| m["method"] == "session/update").expect("the echo");
    let received = update["params"]["update"]["_meta"]["receivedParams"].as_str().unwrap();
    let received: Value = serde_json::from_str(received).unwrap();
    let mut expected: Value = serde_json::from_str(prompt).unwrap();
    expected["prompt"].as_array_mut().unwrap().insert(0, json!({"type":"text","text":"injected"}));
    assert_eq!(received, expected, "every member kept, one block added");
    editor.finish().await;
}

#[tokio::test]
async fn a_proxy_crashing_mid_turn_ends_the_chain_with_an_error_answer_and_no_process_left() {
    let mut editor = Editor::conductor(&["agent", &format!("{COMPONENTS} crash"), &format!("{COMPONENTS} echo-agent")]);
    editor.initialize().await;
    editor.send(&json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}})).await;
    editor.until_answer(1).await;
    editor
        .send(&json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"echo-1","prompt":[]}}))
        .await;
    let (answer, _) = editor.until_answer(2).await;
    assert_eq!(answer["error"]["code"], json!(-32603), "{answer}");
    assert_eq!(editor.recv_line().await, None, "the conductor's output ends with the chain");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("[acp-conductor-test-components] crashing on purpose"), "stderr labelled: {stderr}");
    assert!(stderr.contains("component 0"), "{stderr}");
    let agent = pid_of_echo_agent(&stderr);
    assert!(process_is_gone(agent), "the agent {agent} was left behind");
}

#[tokio::test]
async fn a_proxy_that_never_answers_gets_the_prompt_cancelled_on_session_cancel() {
    let mut editor = Editor::conductor(&[
        "--cancel-grace-ms",
        "200",
        "agent",
        &format!("{COMPONENTS} silent"),
        &format!("{COMPONENTS} echo-agent"),
    ]);
    editor.initialize().await;
    editor.send(&json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}})).await;
    editor.until_answer(1).await;
    editor
        .send(&json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"echo-1","prompt":[]}}))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    editor.send(&json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"echo-1"}})).await;
    let (answer, _) = editor.until_answer(2).await;
    assert_eq!(answer["result"], json!({"stopReason":"cancelled"}));
    // Any other request still goes through.
    editor.send(&json!({"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"/","mcpServers":[]}})).await;
    assert_eq!(editor.until_answer(3).await.0["result"]["sessionId"], "echo-1");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(process_is_gone(pid_of_echo_agent(&stderr)));
}

#[tokio::test]
async fn a_proxy_writing_garbage_ends_the_chain_with_an_error_answer() {
    let mut editor =
        Editor::conductor(&["agent", &format!("{COMPONENTS} garbage"), &format!("{COMPONENTS} echo-agent")]);
    editor.initialize().await;
    editor
        .send(&json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"echo-1","prompt":[]}}))
        .await;
    let (answer, _) = editor.until_answer(2).await;
    assert_eq!(answer["error"]["code"], json!(-32603), "{answer}");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(process_is_gone(pid_of_echo_agent(&stderr)));
}

#[tokio::test]
async fn messages_out_of_place_are_refused() {
    let mut editor = Editor::conductor(&["agent", &format!("{COMPONENTS} pass"), &format!("{COMPONENTS} echo-agent")]);
    editor.initialize().await;
    editor
        .send(&json!({"jsonrpc":"2.0","id":5,"method":"proxy/successor","params":{"method":"session/new","params":{}}}))
        .await;
    assert_eq!(editor.until_answer(5).await.0["error"]["code"], json!(-32600));
    editor.send(&json!({"jsonrpc":"2.0","id":6,"method":"proxy/initialize","params":{"protocolVersion":1}})).await;
    assert_eq!(editor.until_answer(6).await.0["error"]["code"], json!(-32600));
    let (code, _) = editor.finish().await;
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn a_component_that_cannot_start_is_reported() {
    let editor = Editor::conductor(&["agent", "/nonexistent/agent-binary"]);
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot start component `agent-binary`"), "{stderr}");
}

/// The session/new params the echo agent received.
async fn session_new_as_received(editor: &mut Editor, id: i64, servers: &Value) -> Value {
    editor
        .send(&json!({"jsonrpc":"2.0","id":id,"method":"session/new","params":{"cwd":"/","mcpServers":servers}}))
        .await;
    let (answer, _) = editor.until_answer(id).await;
    let received = answer["result"]["_meta"]["receivedParams"].as_str().unwrap_or_else(|| panic!("{answer}"));
    serde_json::from_str(received).unwrap()
}

#[tokio::test]
async fn mcp_over_acp_is_bridged_for_an_agent_without_it_unless_turned_off() {
    let servers = json!([
        {"type": "acp", "name": "tools", "serverId": "srv-1", "_meta": {"k": 1}},
        {"name": "plain", "command": "x", "args": [], "env": []},
    ]);
    let mut editor = Editor::conductor(&["agent", &format!("{COMPONENTS} pass"), &format!("{COMPONENTS} echo-agent")]);
    let init = editor.initialize().await;
    assert_eq!(init["result"]["agentCapabilities"]["mcpCapabilities"]["acp"], json!(true), "{init}");
    assert_eq!(init["result"]["agentCapabilities"]["_meta"], json!({"echo": true}), "the rest is kept: {init}");
    let received = session_new_as_received(&mut editor, 1, &servers).await;
    let shim = &received["mcpServers"][0];
    assert_eq!(shim["name"], "tools", "{received}");
    assert_eq!(shim["command"], CONDUCTOR);
    assert!(shim.get("type").is_none(), "a stdio server: {shim}");
    let args: Vec<&str> = shim["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!((args.len(), args[0], args[1], args[3], args[4]), (5, "mcp-bridge", "--socket", "--server-id", "srv-1"));
    assert_eq!(shim["env"], json!([]));
    assert_eq!(shim["_meta"], json!({"k": 1}));
    assert_eq!(received["mcpServers"][1], servers[1], "other servers pass as they are");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!std::path::Path::new(args[2]).exists(), "the bridge's socket is removed at the end");

    let mut editor = Editor::conductor(&["--no-mcp-bridge", "agent", &format!("{COMPONENTS} echo-agent")]);
    let init = editor.initialize().await;
    assert!(init["result"]["agentCapabilities"].get("mcpCapabilities").is_none(), "{init}");
    let received = session_new_as_received(&mut editor, 1, &servers).await;
    assert_eq!(received["mcpServers"], servers);
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
}
