//! Proxy chains across implementations, against the official Rust conductor and SDK
//! (crates.io `agent-client-protocol-conductor` and `agent-client-protocol` 5.0:
//! `tests/interop/rs-conductor`, built by this test with `cargo build --locked` into
//! `target/tmp/interop-rs-conductor`):
//!
//! - our proxies (`proxy_context`, a pass-through) under the official conductor: the prompt
//!   reaches the agent with the context in front and nothing else changed, and a full turn
//!   of the demo agent (permission request, file read) goes through;
//! - the SDK's proxies (`arrow`, `passthrough`) under our conductor: a full turn goes through,
//!   the agent's text marked by the arrow proxy;
//! - cancellation through chains that mix both kinds of proxy, under either conductor;
//! - `--trace`: ours reads with the official conductor's own event type (its trace viewer's
//!   input) and holds every event the official trace holds for the same chain.
//!
//! Without the peers (a failed build), the tests print why and pass without running, unless
//! `ACP_INTEROP_REQUIRED=1` (as in CI), which makes that a failure.
#![cfg(unix)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;

mod common;
use common::{
    Editor, TempDir, agent_chunks, cancel_while_asking, context_reaches_the_echo_agent_losslessly,
    full_turn_reads_the_file_the_context_names,
};

const OUR_CONDUCTOR: &str = env!("CARGO_BIN_EXE_acp-conductor");
const COMPONENTS: &str = env!("CARGO_BIN_EXE_acp-conductor-test-components");
const CONTEXT: &str = env!("CARGO_BIN_EXE_acp-conductor-proxy-context");
const AGENT: &str = env!("CARGO_BIN_EXE_acp-conductor-example-agent");
/// The peers' build, cold: about four minutes on two busy cores.
const BUILD_LIMIT: Duration = Duration::from_secs(20 * 60);

/// The official peers' executables.
struct Official {
    conductor: String,
    passthrough: String,
    arrow: String,
    /// Reads a trace file with the official conductor's event type.
    trace_read: String,
}

/// The official peers, built once per test process; `None` (or a panic when required) when
/// the build fails.
fn official() -> Option<Official> {
    static BUILD: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);
    let dir = common::peers::once("official conductor", &BUILD, build_official)?;
    let bin = |name: &str| dir.join(name).to_string_lossy().into_owned();
    Some(Official {
        conductor: bin("conductor"),
        passthrough: bin("passthrough"),
        arrow: bin("arrow"),
        trace_read: bin("trace-read"),
    })
}

fn build_official() -> Result<PathBuf, String> {
    common::peers::cargo_build("rs-conductor", BUILD_LIMIT)
}

#[tokio::test]
async fn our_proxies_under_the_official_conductor_add_the_context_and_change_nothing_else() {
    let Some(official) = official() else { return };
    let mut editor = Editor::spawn(
        &official.conductor,
        &[
            "agent",
            &format!("{CONTEXT} --context injected"),
            &format!("{COMPONENTS} pass"),
            &format!("{COMPONENTS} echo-agent"),
        ],
    );
    context_reaches_the_echo_agent_losslessly(&mut editor).await;
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test]
async fn our_proxies_under_the_official_conductor_carry_a_full_turn_of_the_demo_agent() {
    let Some(official) = official() else { return };
    let mut editor = Editor::spawn(
        &official.conductor,
        &["agent", &format!("{CONTEXT} --context 'Please read CONTEXT.md'"), &format!("{COMPONENTS} pass"), AGENT],
    );
    full_turn_reads_the_file_the_context_names(&mut editor, "official-turn").await;
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test]
async fn official_proxies_under_our_conductor_carry_a_full_turn_and_mark_the_agents_text() {
    let Some(official) = official() else { return };
    let mut editor = Editor::spawn(OUR_CONDUCTOR, &["agent", &official.arrow, &official.passthrough, AGENT]);
    let init = editor.initialize().await;
    assert_eq!(init["result"]["agentInfo"]["name"], "acp-demo-agent", "{init}");
    let dir = TempDir::new("ours-turn");
    std::fs::write(dir.0.join("README.md"), "# Hello through the SDK proxies\n").unwrap();
    let session = editor.new_session(1, &dir.0).await;

    let (answer, updates) =
        editor.turn(2, json!({"sessionId": session, "prompt": [{"type":"text","text":"Please read README.md"}]})).await;
    assert_eq!(answer, json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}));
    let chunks = agent_chunks(&updates);
    assert!(chunks.len() > 1, "the demo agent streams its answer: {chunks:?}");
    assert!(chunks.iter().all(|c| c.starts_with('>')), "each chunk marked by the arrow proxy: {chunks:?}");
    let text: String = chunks.iter().map(|c| &c[1..]).collect();
    assert!(text.contains("Hello through the SDK proxies"), "the file's first line: {text:?}");
    // The other updates pass the SDK's proxies unmarked.
    let kinds: Vec<&str> = updates.iter().filter_map(|u| u["params"]["update"]["sessionUpdate"].as_str()).collect();
    assert!(kinds.contains(&"plan") && kinds.contains(&"tool_call_update"), "{kinds:?}");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test]
async fn cancellation_goes_through_chains_of_both_kinds_of_proxy_under_either_conductor() {
    let Some(official) = official() else { return };
    let chain = [
        "agent".to_owned(),
        format!("{COMPONENTS} pass"),
        official.arrow.clone(),
        format!("{CONTEXT} --context 'Be brief'"),
        official.passthrough.clone(),
        AGENT.to_owned(),
    ];
    let chain: Vec<&str> = chain.iter().map(String::as_str).collect();
    cancel_while_asking(Editor::spawn(&official.conductor, &chain), "official conductor").await;
    // A grace period longer than the test waits: the answer must come from the agent.
    let ours = [&["--cancel-grace-ms", "60000"][..], &chain].concat();
    cancel_while_asking(Editor::spawn(OUR_CONDUCTOR, &ours), "our conductor").await;
}

/// `$/cancel_request` for the prompt itself (the protocol's request cancellation), through the
/// same mixed chain: every hop passes it on, so the agent's turn ends (its permission request
/// withdrawn, as above) and the editor's prompt is answered.
async fn cancel_the_prompt_request(mut editor: Editor, label: &str) {
    editor.initialize().await;
    let dir = TempDir::new(&format!("cancel-request-{label}"));
    let session = editor.new_session(1, &dir.0).await;
    let prompt = json!({"sessionId": session, "prompt": [{"type":"text","text":"Please read README.md"}]});
    editor.send(&json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params": prompt})).await;
    let asking = loop {
        let message = editor.recv().await;
        if message["method"] == "session/request_permission" {
            break message;
        }
        assert_eq!(message["method"], "session/update", "{label}: {message}");
    };
    editor.send(&json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId": 2}})).await;
    let (mut answer, mut withdrawn) = (None, false);
    while answer.is_none() || !withdrawn {
        let message = editor.recv().await;
        match message["method"].as_str() {
            Some("$/cancel_request") => {
                assert_eq!(message["params"]["requestId"], asking["id"], "{label}: {message}");
                withdrawn = true;
            }
            Some("session/update") => {}
            None if message["id"] == json!(2) => answer = Some(message),
            _ => panic!("{label}: unexpected after the cancel: {message}"),
        }
    }
    assert_eq!(answer.unwrap()["result"], json!({"stopReason":"cancelled"}), "{label}");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{label}: {stderr}");
}

#[tokio::test]
async fn a_cancelled_prompt_request_reaches_the_agent_through_either_conductor() {
    let Some(official) = official() else { return };
    let chain = [
        "agent".to_owned(),
        official.arrow.clone(),
        format!("{COMPONENTS} pass"),
        official.passthrough.clone(),
        format!("{CONTEXT} --context 'Be brief'"),
        AGENT.to_owned(),
    ];
    let chain: Vec<&str> = chain.iter().map(String::as_str).collect();
    cancel_the_prompt_request(Editor::spawn(&official.conductor, &chain), "official conductor").await;
    // A grace period longer than the test waits: the answer must come from the agent, so the
    // `$/cancel_request` must have reached it.
    let ours = [&["--cancel-grace-ms", "60000"][..], &chain].concat();
    cancel_the_prompt_request(Editor::spawn(OUR_CONDUCTOR, &ours), "our conductor").await;
}

#[tokio::test]
async fn our_trace_is_in_the_official_format_and_holds_what_the_official_trace_holds() {
    let Some(official) = official() else { return };
    let dir = TempDir::new("trace-both");
    let chain =
        [format!("{CONTEXT} --context injected"), format!("{COMPONENTS} pass"), format!("{COMPONENTS} echo-agent")];
    let mut traces = Vec::new();
    for (program, name) in [(official.conductor.as_str(), "official.jsonl"), (OUR_CONDUCTOR, "ours.jsonl")] {
        let path = dir.0.join(name);
        let args: Vec<&str> =
            ["--trace", path.to_str().unwrap(), "agent"].into_iter().chain(chain.iter().map(String::as_str)).collect();
        common::traced_turn(Editor::spawn(program, &args)).await;
        traces.push(path);
    }
    let (theirs, ours) = (common::trace_lines(&traces[0]), common::trace_lines(&traces[1]));

    let read = Command::new(&official.trace_read).arg(&traces[1]).output().unwrap();
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    assert_eq!(String::from_utf8_lossy(&read.stdout).trim(), ours.len().to_string(), "every line an official event");

    // Ours also records what the official one leaves out (the first proxy's messages to the
    // client when there are proxies); everything it records, ours records. (The order can
    // differ: ours keeps each sender's order, where the official trace may put a proxy's
    // answer before the update it sent first.)
    let mut rest = ours.clone();
    for event in &theirs {
        let at = rest.iter().position(|e| e == event);
        assert!(at.is_some(), "{event} missing in ours: {ours:#?}\nofficial: {theirs:#?}");
        rest.remove(at.unwrap());
    }
    assert!(theirs.len() > 10, "{theirs:#?}");
}
