//! Proxy chains across implementations, against the `sacp` 11 crates (Symposium's ACP SDK,
//! whose proxy wire is `_proxy/initialize` and `_proxy/successor`: `tests/interop/rs-sacp`,
//! built by this test with `cargo build --locked` into `target/tmp/interop-rs-sacp`):
//!
//! - our proxies (`proxy_context`, a pass-through) under `sacp-conductor`: the prompt reaches
//!   the agent with the context in front and nothing else changed, also through our conductor
//!   running as one of its proxies (`acp-conductor proxy ...`), and a full turn of the demo
//!   agent goes through;
//! - a `sacp` proxy (`arrow`) under our conductor, which finds out that it speaks `sacp`'s
//!   wire: a full turn goes through, the agent's text marked by the arrow proxy;
//! - cancellation through a chain that mixes both kinds of proxy, under either conductor.
//!
//! `sacp-conductor` 11 does not exit when its input ends (it is killed once a test is done),
//! and passes a `$/cancel_request` on with the id it came with (see `CancelIds`).
//!
//! Without the peers (a failed build), the tests print why and pass without running, unless
//! `ACP_INTEROP_REQUIRED=1` (as in CI), which makes that a failure.
#![cfg(unix)]

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;

mod common;
use common::{
    CancelIds, Editor, TempDir, agent_chunks, cancel_while_asking, cancel_while_asking_with,
    context_reaches_the_echo_agent_losslessly, full_turn_reads_the_file_the_context_names,
};

const OUR_CONDUCTOR: &str = env!("CARGO_BIN_EXE_acp-conductor");
const COMPONENTS: &str = env!("CARGO_BIN_EXE_acp-conductor-test-components");
const CONTEXT: &str = env!("CARGO_BIN_EXE_acp-conductor-proxy-context");
const AGENT: &str = env!("CARGO_BIN_EXE_acp-conductor-example-agent");
/// The peers' build, cold: a few minutes on two busy cores.
const BUILD_LIMIT: Duration = Duration::from_secs(20 * 60);

/// The `sacp` peers' executables.
struct Sacp {
    conductor: String,
    arrow: String,
}

/// The peers, built once per test process; `None` (or a panic when required) when the build
/// fails.
fn sacp() -> Option<Sacp> {
    static BUILD: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);
    let dir = common::peers::once("sacp", &BUILD, build_sacp)?;
    let bin = |name: &str| dir.join(name).to_string_lossy().into_owned();
    Some(Sacp { conductor: bin("conductor"), arrow: bin("arrow") })
}

fn build_sacp() -> Result<PathBuf, String> {
    common::peers::cargo_build("rs-sacp", BUILD_LIMIT)
}

#[tokio::test]
async fn our_proxies_under_the_sacp_conductor_add_the_context_and_change_nothing_else() {
    let Some(sacp) = sacp() else { return };
    let context = format!("{CONTEXT} --context injected");
    let pass = format!("{COMPONENTS} pass");
    let echo = format!("{COMPONENTS} echo-agent");
    let mut editor = Editor::spawn(&sacp.conductor, &["agent", &context, &pass, &echo]);
    context_reaches_the_echo_agent_losslessly(&mut editor).await;
    editor.kill().await;

    // Our conductor as one proxy of theirs: initialized with `_proxy/initialize`, it speaks
    // `_proxy/successor` to its own conductor, and the current wire to its proxies.
    let nested = format!("{OUR_CONDUCTOR} proxy '{context}' '{pass}'");
    let mut editor = Editor::spawn(&sacp.conductor, &["agent", &nested, &echo]);
    context_reaches_the_echo_agent_losslessly(&mut editor).await;
    editor.kill().await;
}

#[tokio::test]
async fn our_proxies_under_the_sacp_conductor_carry_a_full_turn_of_the_demo_agent() {
    let Some(sacp) = sacp() else { return };
    let mut editor = Editor::spawn(
        &sacp.conductor,
        &["agent", &format!("{CONTEXT} --context 'Please read CONTEXT.md'"), &format!("{COMPONENTS} pass"), AGENT],
    );
    full_turn_reads_the_file_the_context_names(&mut editor, "sacp-turn").await;
    editor.kill().await;
}

#[tokio::test]
async fn a_sacp_proxy_under_our_conductor_carries_a_full_turn_and_marks_the_agents_text() {
    let Some(sacp) = sacp() else { return };
    let trace = TempDir::new("sacp-trace");
    let trace_file = trace.0.join("trace.jsonl");
    let mut editor = Editor::spawn(
        OUR_CONDUCTOR,
        &["--trace", trace_file.to_str().unwrap(), "agent", &sacp.arrow, &format!("{COMPONENTS} pass"), AGENT],
    );
    let init = editor.initialize().await;
    assert_eq!(init["result"]["agentInfo"]["name"], "acp-demo-agent", "{init}");
    let dir = TempDir::new("sacp-ours-turn");
    std::fs::write(dir.0.join("README.md"), "# Hello through the sacp proxy\n").unwrap();
    let session = editor.new_session(1, &dir.0).await;

    let (answer, updates) =
        editor.turn(2, json!({"sessionId": session, "prompt": [{"type":"text","text":"Please read README.md"}]})).await;
    assert_eq!(answer, json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}));
    let chunks = agent_chunks(&updates);
    assert!(chunks.len() > 1, "the demo agent streams its answer: {chunks:?}");
    assert!(chunks.iter().all(|c| c.starts_with('>')), "each chunk marked by the arrow proxy: {chunks:?}");
    let text: String = chunks.iter().map(|c| &c[1..]).collect();
    assert!(text.contains("Hello through the sacp proxy"), "the file's first line: {text:?}");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");

    // The trace shows the chain as on the current wire: the proxy initialized with
    // `proxy/initialize`, its `_proxy/successor` envelopes unwrapped.
    let events = common::trace_lines(&trace_file);
    assert_eq!(events[0], "request Client -> Proxy(0) proxy/initialize", "{events:#?}");
    assert!(events.contains(&"request Proxy(0) -> Proxy(1) proxy/initialize".to_owned()), "{events:#?}");
    assert!(events.contains(&"request Proxy(1) -> Agent initialize".to_owned()), "{events:#?}");
    assert!(events.iter().all(|e| !e.contains("_proxy")), "{events:#?}");
}

#[tokio::test]
async fn cancellation_goes_through_a_chain_with_a_sacp_proxy_under_either_conductor() {
    let Some(sacp) = sacp() else { return };
    let chain = [
        "agent".to_owned(),
        format!("{COMPONENTS} pass"),
        sacp.arrow.clone(),
        format!("{CONTEXT} --context 'Be brief'"),
        AGENT.to_owned(),
    ];
    let chain: Vec<&str> = chain.iter().map(String::as_str).collect();
    let label = "sacp conductor";
    cancel_while_asking_with(Editor::spawn(&sacp.conductor, &chain), label, CancelIds::PassedAsTheyCame)
        .await
        .kill()
        .await;
    // A grace period longer than the test waits: the answer must come from the agent.
    let ours = [&["--cancel-grace-ms", "60000"][..], &chain].concat();
    cancel_while_asking(Editor::spawn(OUR_CONDUCTOR, &ours), "our conductor").await;
}
