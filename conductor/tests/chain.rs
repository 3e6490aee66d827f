//! `acp-conductor` as an editor runs it: chains of proxies in front of an agent, over the
//! processes' stdio. A turn through three proxies (the two example proxies and a
//! pass-through), the prompt arriving byte for byte except for what a proxy changed, and the
//! faults: a proxy that crashes mid-turn, one that never answers, one that writes garbage.

use std::time::Duration;

use serde_json::{Value, json};

mod common;
use common::{Editor, TempDir, agent_chunks};

const CONDUCTOR: &str = env!("CARGO_BIN_EXE_acp-conductor");
const COMPONENTS: &str = env!("CARGO_BIN_EXE_acp-conductor-test-components");
const CONTEXT: &str = env!("CARGO_BIN_EXE_acp-conductor-proxy-context");
const FILTER: &str = env!("CARGO_BIN_EXE_acp-conductor-proxy-filter");
const AGENT: &str = env!("CARGO_BIN_EXE_acp-conductor-example-agent");

/// Our conductor, run as an editor runs it.
fn conductor(args: &[&str]) -> Editor {
    Editor::spawn(CONDUCTOR, args)
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
    let mut editor = conductor(&[
        "agent",
        &format!("{CONTEXT} --context 'Be brief.'"),
        &format!("{FILTER} --deny execute"),
        &format!("{COMPONENTS} pass"),
        AGENT,
    ]);
    let init = editor.initialize().await;
    assert_eq!(init["result"]["protocolVersion"], json!(1), "{init}");
    assert!(init["result"]["agentInfo"].is_object(), "the agent's own answer comes back: {init}");

    let dir = TempDir::new("turn");
    std::fs::write(dir.0.join("README.md"), "# Hello from the chain\nsecond line\n").unwrap();
    let session_id = editor.new_session(1, &dir.0).await;

    // The demo agent asks before it reads (a `read` tool call: not denied, so it reaches us).
    let prompt = json!({"sessionId": session_id, "prompt": [{"type":"text","text":"Please read README.md"}]});
    let (answer, updates) = editor.turn(2, prompt).await;
    assert_eq!(answer, json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}));
    let text = agent_chunks(&updates).concat();
    assert!(text.contains("Hello from the chain"), "the file's first line, through three proxies: {text:?}");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test]
async fn the_filter_proxy_rejects_a_denied_tool_call_without_asking_the_editor() {
    // The demo agent's permission request names only the tool call's id: the filter knows its
    // kind from the `tool_call` update that announced it.
    let mut editor = conductor(&["agent", &format!("{FILTER} --deny read,execute"), AGENT]);
    editor.initialize().await;
    let dir = TempDir::new("filter");
    std::fs::write(dir.0.join("README.md"), "# Never read\n").unwrap();
    let session_id = editor.new_session(1, &dir.0).await;
    let prompt = json!({"sessionId": session_id, "prompt": [{"type":"text","text":"Please read README.md"}]});
    // `turn` would allow a permission request and serve a read: neither may reach us.
    editor.send(&json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params": prompt})).await;
    let (answer, before) = editor.until_answer(2).await;
    assert_eq!(answer["result"], json!({"stopReason":"end_turn"}), "{answer}");
    assert!(before.iter().all(|m| m["method"] == "session/update"), "only updates reach the editor: {before:?}");
    let failed = before.iter().any(|u| {
        u["params"]["update"]["sessionUpdate"] == "tool_call_update" && u["params"]["update"]["status"] == "failed"
    });
    assert!(failed, "the agent was told no: {before:?}");
    let text = agent_chunks(&before).concat();
    assert!(text.contains("I left README.md alone"), "{text:?}");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("proxy_filter: rejected \"call_1\" (read is denied)"), "{stderr}");
}

#[tokio::test]
async fn a_prompt_arrives_byte_for_byte_but_for_what_a_proxy_changed() {
    let mut editor = conductor(&[
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

/// Initializes the chain, opens the echo agent's session and sends a prompt (id 2) into it.
async fn start_a_turn(editor: &mut Editor) {
    editor.initialize().await;
    editor.send(&json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}})).await;
    editor.until_answer(1).await;
    editor
        .send(&json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"echo-1","prompt":[]}}))
        .await;
}

#[tokio::test]
async fn a_proxy_crashing_mid_turn_ends_the_chain_with_an_error_answer_and_no_process_left() {
    let mut editor = conductor(&["agent", &format!("{COMPONENTS} crash"), &format!("{COMPONENTS} echo-agent")]);
    start_a_turn(&mut editor).await;
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
async fn a_component_that_dies_while_its_child_holds_its_output_ends_the_chain_at_once() {
    // The proxy exits mid-turn, but a `sleep` it started still holds its stdout: the pipe stays
    // open, and only watching the process tells that it is gone.
    let proxy = format!("sh -c 'sleep 300 & echo sleeper $! >&2; exec {COMPONENTS} crash'");
    let mut editor = conductor(&["agent", &proxy, &format!("{COMPONENTS} echo-agent")]);
    start_a_turn(&mut editor).await;
    let (answer, _) = tokio::time::timeout(Duration::from_secs(10), editor.until_answer(2))
        .await
        .expect("the editor is answered while the proxy's child still holds its output");
    assert_eq!(answer["error"]["code"], json!(-32603), "{answer}");
    assert_eq!(editor.recv_line().await, None, "the conductor's output ends with the chain");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("component 0"), "{stderr}");
    let sleeper: u32 = stderr
        .lines()
        .find_map(|l| l.split_once("] sleeper ").map(|(_, pid)| pid.trim().parse().unwrap()))
        .expect("the sleeper's pid, labelled");
    // Killed with the proxy's process group; reaped by init, which may take a moment.
    let gone = async {
        while !process_is_gone(sleeper) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(5), gone).await.is_ok(),
        "the proxy's child {sleeper} was left behind"
    );
    assert!(process_is_gone(pid_of_echo_agent(&stderr)), "the agent was left behind");
}

#[tokio::test]
async fn a_proxy_that_never_answers_gets_the_prompt_cancelled_on_session_cancel() {
    let mut editor = conductor(&[
        "--cancel-grace-ms",
        "200",
        "agent",
        &format!("{COMPONENTS} silent"),
        &format!("{COMPONENTS} echo-agent"),
    ]);
    start_a_turn(&mut editor).await;
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
    let mut editor = conductor(&["agent", &format!("{COMPONENTS} garbage"), &format!("{COMPONENTS} echo-agent")]);
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
    let mut editor = conductor(&["agent", &format!("{COMPONENTS} pass"), &format!("{COMPONENTS} echo-agent")]);
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
    let editor = conductor(&["agent", "/nonexistent/agent-binary"]);
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot start component `agent-binary`"), "{stderr}");
}

#[tokio::test]
async fn proxies_written_for_the_older_wire_take_their_place_in_the_chain() {
    // Each wire in one chain: two proxies that know only the older wire (one answers the newer
    // initialize methods -32601, one passes them on to its successor), around one of ours.
    let chain = |agent: &str, context: &str| {
        conductor(&[
            "agent",
            &format!("{COMPONENTS} older-pass"),
            &format!("{CONTEXT} --context {context}"),
            &format!("{COMPONENTS} older-pass-forwarding"),
            agent,
        ])
    };
    let mut editor = chain(&format!("{COMPONENTS} echo-agent"), "injected");
    let init = common::context_reaches_the_echo_agent_losslessly(&mut editor).await;
    // The first proxy's answer, with the older wire's marker as it gave it.
    assert_eq!(init["result"]["_meta"]["proxy"], json!(true), "{init}");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("off the older wire"), "{stderr}");

    // The agent's requests and updates travel back through them, in the older wire's request
    // and notification envelopes (the components report any other).
    let mut editor = chain(AGENT, "'Please read CONTEXT.md'");
    common::full_turn_reads_the_file_the_context_names(&mut editor, "older-wire-turn").await;
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("off the older wire"), "{stderr}");
}

#[tokio::test]
async fn a_component_that_takes_no_proxy_role_on_any_wire_is_refused() {
    // An agent where a proxy belongs: it knows neither initialize method of a proxy, and its
    // answer to the older wire's `initialize` lacks the marker.
    let mut editor = conductor(&["agent", &format!("{COMPONENTS} echo-agent"), &format!("{COMPONENTS} echo-agent")]);
    let init = editor.initialize().await;
    assert_eq!(init["error"]["code"], json!(-32600), "{init}");
    let message = init["error"]["message"].as_str().unwrap();
    assert!(message.contains("did not take the proxy role"), "{message}");
    editor.finish().await;
}

#[tokio::test]
async fn conductors_nest_a_conductor_in_proxy_mode_is_one_link() {
    let inner = format!("{CONDUCTOR} proxy '{CONTEXT} --context A' '{COMPONENTS} pass'");
    let mut editor =
        conductor(&["agent", &inner, &format!("{CONTEXT} --context B"), &format!("{COMPONENTS} echo-agent")]);
    let init = editor.initialize().await;
    assert_eq!(init["result"]["agentInfo"]["name"], "echo", "{init}");
    editor.send(&json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}})).await;
    editor.until_answer(1).await;
    let prompt = json!({"sessionId":"echo-1","prompt":[{"type":"text","text":"hi"}]});
    editor.send(&json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params":prompt})).await;
    let (answer, before) = editor.until_answer(2).await;
    assert_eq!(answer["result"], json!({"stopReason":"end_turn"}));
    let update = before.iter().find(|m| m["method"] == "session/update").expect("the echo");
    let received: Value =
        serde_json::from_str(update["params"]["update"]["_meta"]["receivedParams"].as_str().unwrap()).unwrap();
    let texts: Vec<&str> = received["prompt"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect();
    assert_eq!(texts, ["B", "A", "hi"], "the nested chain's proxy first, then the outer chain's");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");

    // A conductor in proxy mode is not an agent.
    let mut editor = conductor(&["proxy", &format!("{COMPONENTS} pass")]);
    assert_eq!(editor.initialize().await["error"]["code"], json!(-32600));
    editor.finish().await;
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
    let mut editor = conductor(&["agent", &format!("{COMPONENTS} pass"), &format!("{COMPONENTS} echo-agent")]);
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

    let mut editor = conductor(&["--no-mcp-bridge", "agent", &format!("{COMPONENTS} echo-agent")]);
    let init = editor.initialize().await;
    assert!(init["result"]["agentCapabilities"].get("mcpCapabilities").is_none(), "{init}");
    let received = session_new_as_received(&mut editor, 1, &servers).await;
    assert_eq!(received["mcpServers"], servers);
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
}

/// `--trace`: every message between two places once, in the order each sender sent them, in
/// the official format's members; answers paired with their requests by id; the secret in the
/// MCP server's environment never written.
#[tokio::test]
async fn the_trace_records_each_message_once_between_the_places_it_travels_between() {
    let dir = TempDir::new("trace");
    let path = dir.0.join("trace.jsonl");
    let trace = path.to_str().unwrap();
    let chain =
        [&format!("{CONTEXT} --context injected"), &format!("{COMPONENTS} pass"), &format!("{COMPONENTS} echo-agent")];
    let args: Vec<&str> = ["--trace", trace, "agent"].into_iter().chain(chain.iter().map(|c| c.as_str())).collect();
    common::traced_turn(Editor::spawn(CONDUCTOR, &args)).await;

    let hops = |kind: &str, method: &str, path: &[&str]| -> Vec<String> {
        path.windows(2).map(|w| format!("{kind} {} -> {} {method}", w[0], w[1]).trim_end().to_owned()).collect()
    };
    let down = ["Client", "Proxy(0)", "Proxy(1)", "Agent"];
    let up = ["Agent", "Proxy(1)", "Proxy(0)", "Client"];
    let mut expected = Vec::new();
    for method in ["initialize", "session/new"] {
        expected.extend(hops("request", method, &down));
        expected.extend(hops("response", "", &up));
    }
    expected.extend(hops("request", "session/prompt", &down));
    // Each component sends its update before its answer, and the trace keeps that order.
    for pair in up.windows(2) {
        expected.extend(hops("notification", "session/update", pair));
        expected.extend(hops("response", "", pair));
    }
    // Proxies are initialized with `proxy/initialize`, as they receive it.
    expected[0] = "request Client -> Proxy(0) proxy/initialize".into();
    expected[1] = "request Proxy(0) -> Proxy(1) proxy/initialize".into();
    // The same events, each sender's in the order it sent them, and a message's next hop after
    // the one before. (Between senders the order is free: a proxy's update to the client and
    // the answer the proxy after it sends it travel on different hops.)
    let traced = common::trace_lines(&path);
    let mut sorted = (traced.clone(), expected.clone());
    sorted.0.sort();
    sorted.1.sort();
    assert_eq!(sorted.0, sorted.1, "{traced:#?}");
    let sender = |event: &String| event.split(' ').nth(1).unwrap().to_owned();
    for place in down {
        let of = |events: &[String]| events.iter().filter(|e| sender(e) == place).cloned().collect::<Vec<_>>();
        assert_eq!(of(&traced), of(&expected), "{place}'s events, in order: {traced:#?}");
    }
    let at = |event: &str| traced.iter().position(|e| e == event).unwrap();
    for hop in ["notification Proxy(1) -> Proxy(0) session/update", "notification Proxy(0) -> Client session/update"] {
        let before = expected[expected.iter().position(|e| e == hop).unwrap() - 2].clone();
        assert!(at(&before) < at(hop), "{before} before {hop}: {traced:#?}");
    }

    let text = std::fs::read_to_string(&path).unwrap();
    let events: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // (The echo agent repeats what it got, secret included, as a string of its own answer.)
    for new in events.iter().filter(|e| e["method"] == "session/new") {
        assert_eq!(new["params"]["mcpServers"][0]["env"], json!([{"name": "API_KEY", "value": "[REDACTED]"}]), "{new}");
    }
    for (event, line) in events.iter().zip(text.lines()) {
        let keys = top_level_keys(line);
        let expected: &[&str] = match event["type"].as_str().unwrap() {
            "request" => &["type", "ts", "protocol", "from", "to", "id", "method", "session", "params"],
            "response" => &["type", "ts", "from", "to", "id", "is_error", "payload"],
            _ => &["type", "ts", "protocol", "from", "to", "method", "session", "params"],
        };
        let expected: Vec<&str> =
            expected.iter().copied().filter(|k| *k != "session" || event.get("session").is_some()).collect();
        assert_eq!(keys, expected, "members in the official order: {event}");
    }
    // Every answer names the id of the request it answers, between the same two places.
    for (at, answer) in events.iter().enumerate().filter(|(_, e)| e["type"] == "response") {
        let asked = events[..at]
            .iter()
            .rev()
            .find(|e| e["type"] == "request" && e["from"] == answer["to"] && e["to"] == answer["from"])
            .expect("a request before its answer");
        assert_eq!(asked["id"], answer["id"], "{answer}");
    }
    let prompt = events.iter().find(|e| e["method"] == "session/prompt" && e["to"] == "Agent").unwrap();
    assert_eq!(prompt["session"], "echo-1");
    assert_eq!(prompt["params"]["prompt"][0], json!({"type": "text", "text": "injected"}), "as the agent got it");
}

/// The members of a JSON object, in the order they are written (a scan of the text: strings
/// at depth one followed by a colon).
fn top_level_keys(object: &str) -> Vec<String> {
    let (mut keys, mut depth, mut chars) = (Vec::new(), 0, object.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            '"' => {
                let mut text = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => text.extend(chars.next()),
                        '"' => break,
                        c => text.push(c),
                    }
                }
                if depth == 1 && chars.peek() == Some(&':') {
                    keys.push(text);
                }
            }
            _ => {}
        }
    }
    keys
}

/// `--debug`: one log file in the folder given, the official header (the components, a JSON
/// one with its environment redacted), then every line each side read and wrote, and the
/// components' stderr, each labelled with its side and direction.
#[tokio::test]
async fn the_debug_log_holds_every_line_of_every_component_labelled() {
    let dir = TempDir::new("debug-log");
    let logs = dir.0.join("logs");
    let agent = json!({"command": COMPONENTS, "args": ["echo-agent"], "env": {"TOKEN": "t0ken"}}).to_string();
    let chain = [format!("{CONTEXT} --context injected"), format!("{COMPONENTS} pass"), agent];
    let args: Vec<&str> = ["--debug", "--debug-dir", logs.to_str().unwrap(), "agent"]
        .into_iter()
        .chain(chain.iter().map(String::as_str))
        .collect();
    common::traced_turn(Editor::spawn(CONDUCTOR, &args)).await;

    let files: Vec<_> = std::fs::read_dir(&logs).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert!(name.len() == "20261127-231655.log".len() && name.ends_with(".log"), "{name}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let (header, body) = text.split_once("========================\n").expect("the header's end");
    let header: Vec<&str> = header.lines().collect();
    assert_eq!(header[0], "=== Conductor Debug Log ===");
    assert!(header[1].starts_with("Started: 20") && header[1].ends_with("+00:00"), "{}", header[1]);
    assert_eq!(header[2..4], ["Components:".to_owned(), format!("  0: {}", chain[0])]);
    assert!(header[5].contains(r#""env":{"TOKEN":"[REDACTED]"}"#) && !text.contains("t0ken"), "{}", header[5]);

    let lines: Vec<(&str, &str, &str)> = body
        .lines()
        .map(|line| {
            let mut parts = line.splitn(4, ' ');
            let (side, arrow, at, rest) = (parts.next(), parts.next(), parts.next(), parts.next());
            let at = at.unwrap_or_default();
            assert!(at.starts_with('+') && at.ends_with("ms"), "{line}");
            (side.unwrap(), arrow.unwrap(), rest.unwrap_or_default())
        })
        .collect();
    let first = |side: &str, arrow: &str, needle: &str| {
        lines.iter().position(|(s, a, rest)| *s == side && *a == arrow && rest.contains(needle))
    };
    // The initialize, down the chain and back.
    let steps = [
        ("C", "→", r#""method":"initialize""#),
        ("0", "→", r#""method":"proxy/initialize""#),
        ("0", "←", r#""method":"proxy/successor""#),
        ("1", "→", r#""method":"proxy/initialize""#),
        ("2", "→", r#""method":"initialize""#),
        ("2", "←", r#""result""#),
        ("C", "←", r#""result""#),
    ];
    let at: Vec<Option<usize>> = steps.iter().map(|(s, a, n)| first(s, a, n)).collect();
    assert!(at.iter().all(Option::is_some) && at.windows(2).all(|w| w[0] < w[1]), "{at:?} in:\n{body}");
    assert!(first("2", "!", "pid ").is_some(), "the agent's stderr: {body}");
    for (_, _, rest) in lines.iter().filter(|(_, _, rest)| rest.contains(r#""method":"session/new""#)) {
        assert!(rest.contains(r#""value":"[REDACTED]""#) && !rest.contains("s3cret"), "{rest}");
    }
    // The conductor's own log, at `info` when `--log` is not given: its start, first of all,
    // and its end, last of all; nothing at `debug`.
    let own: Vec<&str> = lines.iter().filter(|(s, a, _)| (*s, *a) == ("C", "!")).map(|(_, _, rest)| *rest).collect();
    assert!(own.first().is_some_and(|l| l.starts_with("INFO") && l.contains("starting")), "{own:?}");
    assert!(lines.iter().position(|(s, a, _)| (*s, *a) == ("C", "!")) == Some(0), "{body}");
    assert!(
        lines.last().is_some_and(|(s, a, rest)| (*s, *a) == ("C", "!") && rest.contains("client closed")),
        "{body}"
    );
    assert!(own.iter().all(|l| l.starts_with("INFO")), "{own:?}");
}

/// `--log FILTER`: the conductor's own log at that level, into the `--debug` log, or to stderr
/// without `--debug`; a filter that does not parse is refused before anything starts.
#[tokio::test]
async fn the_conductors_own_log_goes_where_log_and_debug_say() {
    let dir = TempDir::new("own-log");
    let chain = [format!("{CONTEXT} --context injected"), format!("{COMPONENTS} echo-agent")];
    let with = |extra: &[&str]| -> Vec<String> {
        extra.iter().map(|s| (*s).to_owned()).chain(["agent".to_owned()]).chain(chain.iter().cloned()).collect()
    };
    let spawn = |args: &[String]| Editor::spawn(CONDUCTOR, &args.iter().map(String::as_str).collect::<Vec<_>>());

    // Into the debug log, at `debug`: the runtime's debug events come too.
    let logs = dir.0.join("logs");
    common::traced_turn(spawn(&with(&["--debug", "--debug-dir", logs.to_str().unwrap(), "--log", "debug"]))).await;
    let file = std::fs::read_dir(&logs).unwrap().next().unwrap().unwrap().path();
    let text = std::fs::read_to_string(file).unwrap();
    let own: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("C ! +")).collect();
    assert!(own.iter().any(|l| l.contains("INFO") && l.contains("starting")), "{text}");
    assert!(own.iter().any(|l| l.contains("DEBUG")), "{text}");

    // To stderr without `--debug`, with the time and the target; per-module directives work.
    let stderr = common::traced_turn(spawn(&with(&["--log", "acp_conductor=info,acp_rpc=warn"]))).await;
    let own: Vec<&str> = stderr.lines().filter(|l| l.contains("acp_conductor:")).collect();
    assert!(own.iter().any(|l| l.contains("INFO") && l.contains("starting") && l.starts_with("20")), "{stderr}");
    assert!(!stderr.contains(" DEBUG "), "{stderr}");
    // And nothing without `--log`.
    let stderr = common::traced_turn(spawn(&with(&[]))).await;
    assert!(!stderr.contains("starting"), "{stderr}");

    // A filter that does not parse: exit 2, the reason on stderr, no component started.
    let out = std::process::Command::new(CONDUCTOR)
        .args(with(&["--log", "acp_rpc=loud"]))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("acp-conductor: --log \"acp_rpc=loud\": "), "{stderr}");
    assert!(!stderr.contains("acp-conductor-test-components"), "{stderr}");
}

/// `--serve`: while the chain runs, `/` is the viewer page and `/events` the trace so far, as
/// one JSON array: the `--trace` file's events when there is one, the same from memory
/// otherwise. Requests for another host, method or path are refused. The page's script, run
/// on those events, draws a lane per place and a row per message.
#[tokio::test]
async fn serve_shows_the_trace_while_the_chain_runs() {
    let dir = TempDir::new("serve");
    let trace = dir.0.join("trace.jsonl");
    let chain =
        [format!("{CONTEXT} --context injected"), format!("{COMPONENTS} pass"), format!("{COMPONENTS} echo-agent")];
    let serve = |extra: &[&str], addr: &str| {
        let mut args = vec!["--serve", "--no-browser", "--serve-addr", addr];
        args.extend_from_slice(extra);
        args.push("agent");
        args.extend(chain.iter().map(String::as_str));
        Editor::spawn(CONDUCTOR, &args)
    };

    // From the trace file.
    let addr = free_loopback_addr();
    let mut editor = serve(&["--trace", trace.to_str().unwrap()], &addr);
    editor.initialize().await;
    editor.new_session(1, &dir.0).await;
    let (status, body) = http(&addr, "GET /events HTTP/1.1", &addr).await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let served: Vec<Value> = serde_json::from_str(&body).unwrap();
    let written: Vec<Value> =
        std::fs::read_to_string(&trace).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(written.len() >= 8, "{written:?}");
    assert_eq!(served, written);

    let (status, page) =
        http(&addr, "GET / HTTP/1.1", &format!("localhost:{}", addr.rsplit(':').next().unwrap())).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(page, include_str!("../src/viewer.html"));
    assert_eq!(http(&addr, "GET /events HTTP/1.1", "evil.example").await.0, "HTTP/1.1 403 Forbidden");
    assert_eq!(http(&addr, "POST /events HTTP/1.1", &addr).await.0, "HTTP/1.1 405 Method Not Allowed");
    assert_eq!(http(&addr, "GET /trace.jsonl HTTP/1.1", &addr).await.0, "HTTP/1.1 404 Not Found");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains(&format!("Trace viewer at http://{addr}/")), "{stderr}");

    // From memory: the same events, the same way.
    let addr = free_loopback_addr();
    let mut editor = serve(&[], &addr);
    editor.initialize().await;
    editor.new_session(1, &dir.0).await;
    let from_memory: Vec<Value> = serde_json::from_str(&http(&addr, "GET /events HTTP/1.1", &addr).await.1).unwrap();
    let shape = |events: &[Value]| -> Vec<String> {
        events.iter().map(|e| format!("{} {} -> {} {}", e["type"], e["from"], e["to"], e["method"])).collect()
    };
    assert_eq!(shape(&from_memory), shape(&served));
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");

    // The page's script on those events (Node.js, as the interop tests use).
    let events = dir.0.join("events.json");
    std::fs::write(&events, serde_json::to_vec(&served).unwrap()).unwrap();
    let page = concat!(env!("CARGO_MANIFEST_DIR"), "/src/viewer.html");
    let runner = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/viewer/page.mjs");
    let output = match std::process::Command::new("node").args([runner, page, events.to_str().unwrap()]).output() {
        Ok(output) => output,
        Err(e) if !common::peers::required() => return eprintln!("SKIPPED: the viewer page's script: no node ({e})"),
        Err(e) => panic!("node: {e}"),
    };
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let drawn: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(drawn["lanes"], json!(["Client", "Proxy(0)", "Proxy(1)", "Agent"]), "{drawn}");
    assert_eq!(drawn["status"], json!(format!("{} messages, 4 places", served.len())));
    let rows = drawn["rows"].as_array().unwrap();
    assert_eq!(rows.len(), served.len());
    assert_eq!(rows[0]["class"], "row request");
    assert_eq!(rows[0]["texts"][1], "proxy/initialize #0");
    assert!(rows.iter().any(|r| r["texts"][1] == "result of proxy/initialize #0"), "{drawn}");
    assert_eq!(drawn["height"], json!(served.len() * 24));
    // The first response, selected: its label, then its payload in full.
    assert!(drawn["selected"].as_str().unwrap().ends_with("selected"), "{drawn}");
    assert!(drawn["detail"][0].as_str().unwrap().starts_with("result of"), "{drawn}");
    assert!(drawn["detail"][2].as_str().unwrap().contains("\"protocolVersion\": 1"), "{drawn}");
    // Filtered on `session/new`: its request and its answer at each of the three hops.
    let filtered = drawn["filtered"].as_array().unwrap();
    assert_eq!(filtered.len(), 6, "{drawn}");
    assert!(filtered.iter().all(|label| label.as_str().unwrap().contains("session/new #1")), "{drawn}");
}

/// A loopback address with a port that was free a moment ago.
fn free_loopback_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// One HTTP/1.1 request with no body to `addr`, naming `host`: the status line and the body.
async fn http(addr: &str, request_line: &str, host: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(format!("{request_line}\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer)).await.unwrap().unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|n| n.parse().ok())
        .expect("a content-length");
    assert_eq!(body.len(), length, "{head}");
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// A chain whose agent answers `initialize` with protocol v2 is read under v2's rules from the
/// client's next message on, as the agent alone would be: a batch is answered with a batch (one
/// answer per request, none for notifications, nothing for a batch of notifications), an empty
/// batch with one -32600. Under v1, a batch is refused (-32600) and the connection goes on.
#[tokio::test]
async fn a_v2_chain_takes_batches_and_a_v1_chain_refuses_them() {
    let chain = |version: u64| async move {
        let mut editor = conductor(&["agent", &format!("{COMPONENTS} pass"), &format!("{COMPONENTS} echo-agent")]);
        let params = json!({"protocolVersion": version, "clientCapabilities": {}});
        editor.send(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":params})).await;
        let (answer, _) = editor.until_answer(0).await;
        assert_eq!(answer["result"]["protocolVersion"], json!(version), "{answer}");
        editor
    };
    let new_session = json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}});
    let note = json!({"jsonrpc":"2.0","method":"_x/note","params":{}});

    let mut editor = chain(2).await;
    editor.send(&json!([new_session, note])).await;
    let answers = editor.recv().await;
    let answers = answers.as_array().unwrap_or_else(|| panic!("a batch answer: {answers}"));
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["id"], 1);
    assert_eq!(answers[0]["result"]["sessionId"], "echo-1", "{answers:?}");
    editor.send(&json!([note, note])).await;
    editor.send(&json!([])).await;
    let refused = editor.recv().await;
    assert_eq!((refused["id"].clone(), refused["error"]["code"].clone()), (json!(null), json!(-32600)), "{refused}");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");

    let mut editor = chain(1).await;
    editor.send(&json!([new_session])).await;
    let refused = editor.recv().await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    editor.send(&new_session).await;
    assert_eq!(editor.until_answer(1).await.0["result"]["sessionId"], "echo-1");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
}

/// SIGTERM, SIGINT or SIGHUP end the chain as the client closing its side does: the prompt in
/// flight is answered, every component and what it started (its process group) is gone, and
/// the conductor exits 128 + the signal's number.
#[tokio::test]
async fn a_signal_ends_the_chain_and_everything_it_started() {
    for (signal, code) in [("TERM", 143), ("INT", 130), ("HUP", 129)] {
        let dir = TempDir::new(&format!("signal-{signal}"));
        let pid_file = dir.0.join("sleeper.pid");
        // The agent leaves a process of its own behind in its group, as a tool it ran would.
        let agent = json!({"command": "sh", "args": ["-c", format!("sleep 120 & echo $! > {}; exec {COMPONENTS} silent", pid_file.display())]});
        let mut editor =
            conductor(&["--cancel-grace-ms", "100", "agent", &format!("{COMPONENTS} pass"), &agent.to_string()]);
        editor.initialize().await;
        let prompt = json!({"sessionId":"s","prompt":[]});
        editor.send(&json!({"jsonrpc":"2.0","id":1,"method":"session/prompt","params":prompt})).await;
        let sleeper: u32 = loop {
            match std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse().ok()) {
                Some(pid) => break pid,
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        editor.signal(signal);
        let answer = editor.recv().await;
        assert_eq!(answer["id"], 1, "{signal}: {answer}");
        let (exit, stderr) = editor.exit().await;
        assert_eq!(exit, Some(code), "{signal}: {stderr}");
        // Killed with its group; reaped by whoever inherits it, a moment later.
        let dead = |pid: u32| {
            process_is_gone(pid)
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
        };
        let mut waited = 0;
        while !dead(sleeper) && waited < 50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += 1;
        }
        assert!(dead(sleeper), "{signal}: what the agent started is gone");
    }
}

/// What a new user gets wrong first: the chain without `agent`, a program that is not there.
/// Each is refused with what to do or what was tried.
#[test]
fn slips_on_the_command_line_are_explained() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(CONDUCTOR).args(args).stdin(std::process::Stdio::null()).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, stderr) = run(&[AGENT]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("hint: the chain goes after `agent` (or `--`)"), "{stderr}");
    let (code, stderr) = run(&["agent", "/nowhere/my-agent --acp"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("cannot start component `my-agent` (`/nowhere/my-agent`)"), "{stderr}");
}

/// A conductor running `agent` alone, with a short kill grace, its output and stderr discarded.
fn quiet_conductor(agent: &str, stdin: std::process::Stdio) -> tokio::process::Child {
    tokio::process::Command::new(CONDUCTOR)
        .args(["--no-mcp-bridge", "--kill-grace-ms", "200", "agent", agent])
        .stdin(stdin)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// An agent that stops reading its input holds up, by backpressure, the reading of the editor's
/// input too: a signal still ends the chain (it used to be noticed only by that reading, so the
/// conductor ran on, and its agent with it).
#[tokio::test]
async fn a_signal_ends_a_chain_whose_agent_stopped_reading() {
    use tokio::io::AsyncWriteExt;
    let mut child = quiet_conductor("sleep 30", std::process::Stdio::piped());
    let pid = child.id().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Notifications until the conductor stops taking them.
    let line = format!("{}\n", json!({"jsonrpc": "2.0", "method": "_x/n", "params": {"pad": "x".repeat(200)}}));
    let mut sent = 0;
    while let Ok(written) = tokio::time::timeout(Duration::from_secs(1), stdin.write_all(line.as_bytes())).await {
        written.unwrap();
        sent += 1;
    }
    let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    let exited = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    let status = exited.unwrap_or_else(|_| panic!("still running 10 s after SIGTERM ({sent} notifications sent)"));
    assert_eq!(status.unwrap().code(), Some(143));
}

/// A process a component leaves behind in a session of its own (which the group kill does not
/// reach) with the component's stderr open does not keep the conductor running.
#[tokio::test]
async fn a_process_left_holding_a_components_stderr_does_not_keep_the_conductor_running() {
    let mut child = quiet_conductor("sh -c 'setsid sleep 15 & exec sleep 30'", std::process::Stdio::null());
    let started = std::time::Instant::now();
    let exited = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    assert!(exited.is_ok(), "the conductor still runs {:?} after its input ended", started.elapsed());
}
