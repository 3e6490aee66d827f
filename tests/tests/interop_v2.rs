//! Protocol v2 interop with the official SDKs as real peers over stdio, in both directions:
//!
//! - the TypeScript SDK's v2 client (npm `@agentclientprotocol/sdk` 2.4, its experimental v2
//!   API: `tests/interop/ts-v2/client.mjs`) and the Rust crate's v2 client
//!   (`agent-client-protocol` 5.2 with `unstable_protocol_v2`: `tests/interop/rs-v2`) drive our
//!   demo agent (`runtime/examples/agent.rs`, built here as `acp-example-agent`), v2 alone
//!   (`--v2-only`) and both versions behind our `ProtocolRouter` (its default), through the
//!   whole scenario of `interop_v2/scenario.rs`; the TypeScript SDK's v1 client gets the v1
//!   turn from the same executable; and both v2 clients drive the demo's v1 agent through the
//!   v2 bridge (`--bridged`, `acp_rpc::v2_bridge`) as far as a v1 agent goes;
//! - against the v2-only agent, both v2 clients then cancel its cancellable work on a second
//!   session (`--cancel-work`, `scenario::cancel_work`): the `/slow` tool call with
//!   `tool_call/cancel` and the `/ticker` terminal with `terminal/cancel`, each once it
//!   advertised `capabilities.cancel` and showed progress (the TypeScript client through its
//!   session's `canCancelToolCall` / `cancelToolCall` and the terminal's likewise, the Rust
//!   client with the crate's typed requests), an unknown id first (-32602); the agent's final
//!   patch withdraws the capability and the turn goes on to `end_turn`;
//! - both official v2 clients against the demo agent serving v1 only (`--v1-only`): it
//!   answers `protocolVersion: 1`; the TypeScript client rejects the answer, the Rust client
//!   reports `LowerVersion`, and neither goes on;
//! - our v2 client (`src/bin/v2_client.rs`) drives both SDKs' v2 agents (behind their own
//!   protocol routers) through the same scenario, goes on with v1 against their v1-only agents,
//!   and stops there when it speaks v2 only;
//! - our v2 client cancels those agents' work too (`--cancel-work`, the same
//!   `scenario::cancel_work`): `/slow`, a tool call advertising `capabilities.cancel` with
//!   progress, cancelled with `AgentHandle::cancel_tool_call`, and `/ticker`, a terminal
//!   advertising it with output, cancelled with `AgentHandle::cancel_terminal` (an unknown id
//!   first each time, -32602). Neither SDK ships a v2 agent that offers cancellable work (the
//!   npm package carries no examples; the crate's example and test agents never do), so this is
//!   the peer scripts' (`tests/interop/ts-v2/agent.mjs`, `tests/interop/rs-v2/src/bin/agent.rs`):
//!   written on each SDK's agent API, `tool_call/cancel` and `terminal/cancel` reaching them
//!   through its own dispatch (`onRequest` and typed request handlers).
//!
//! Each test connects a client and an agent through this process (`interop_v2/relay.rs`),
//! which records the wire; `interop_v2/wire.rs` checks each turn for the spec's order.
//!
//! The peers are installed by the project's own files: `npm ci` in `tests/interop/ts-v2` (a
//! package of its own: the v1 interop scripts in `tests/interop/ts` use the 1.x API, which 2.x
//! replaced), and `cargo build --locked` of `tests/interop/rs-v2` (a Cargo project of its own,
//! not a workspace member) into `target/tmp/interop-rs-v2`. Without node/npm, or when an install
//! or the build fails, the tests print why and pass without running, unless
//! `ACP_INTEROP_REQUIRED=1` (as in CI), which makes that a failure.
#![cfg(unix)]

#[path = "interop_v2/relay.rs"]
mod relay;
#[path = "interop_v2/scenario.rs"]
mod scenario;
#[path = "interop_v2/wire.rs"]
mod wire;

// The interop peers' set-up helpers, shared with the conductor's interop tests.
#[path = "../../conductor/tests/common/peers.rs"]
#[allow(dead_code)]
mod peers;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use relay::{Outcome, connect};
use scenario::{Root, ensure, step, verify};

/// The demo agent (`runtime/examples/agent.rs`): v1 and v2 by default, `--v1-only`, `--v2-only`.
const DEMO_AGENT: &str = env!("CARGO_BIN_EXE_acp-example-agent");

/// A whole exchange's deadline: a scenario takes a second or two; this is for a loaded machine.
const LIMIT: Duration = Duration::from_secs(90);
/// An install or a build: the Rust peers' build, cold, takes about a minute on two cores.
const INSTALL_LIMIT: Duration = Duration::from_secs(20 * 60);

// ---- the peers ---------------------------------------------------------------------------------

fn interop_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop").join(name)
}

/// `Some(value)`, or `None` after saying why the test cannot run (a panic instead when
/// `ACP_INTEROP_REQUIRED=1`).
fn available<T: Clone>(what: &str, outcome: &Result<T, String>) -> Option<T> {
    match outcome {
        Ok(value) => Some(value.clone()),
        Err(why) => {
            if std::env::var_os("ACP_INTEROP_REQUIRED").is_some_and(|v| v != "0") {
                panic!("{what} interop cannot run: {why}");
            }
            eprintln!("SKIPPED: {what} interop cannot run: {why} (set ACP_INTEROP_REQUIRED=1 to fail instead)");
            None
        }
    }
}

/// The TypeScript SDK's directory, installed (once per test process).
fn ts() -> Option<PathBuf> {
    static INSTALL: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);
    let mut state = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    available("TypeScript v2", state.get_or_insert_with(|| npm_ci(&interop_dir("ts-v2"))))
}

fn npm_ci(dir: &Path) -> Result<PathBuf, String> {
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => return Err("`node` is not available".into()),
    }
    // An install of another version (an older lock file) is replaced, not used.
    let pinned = std::fs::read_to_string(dir.join("package-lock.json")).map_err(|e| e.to_string())?;
    let installed = std::fs::read_to_string(dir.join("node_modules/.package-lock.json")).unwrap_or_default();
    let sdk = |lock: &str| -> Option<String> {
        let lock: serde_json::Value = serde_json::from_str(lock).ok()?;
        Some(lock["packages"]["node_modules/@agentclientprotocol/sdk"]["version"].as_str()?.to_owned())
    };
    if sdk(&installed).is_some() && sdk(&installed) == sdk(&pinned) {
        return Ok(dir.to_owned());
    }
    let mut npm = Command::new("npm");
    npm.args(["ci", "--no-audit", "--no-fund"]).current_dir(dir);
    peers::run_logged(npm, &Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop-ts-v2-npm.log"), INSTALL_LIMIT)
        .map_err(|e| format!("`npm ci` in {}: {e}", dir.display()))?;
    Ok(dir.to_owned())
}

/// The directory of the Rust peers' binaries, built (once per test process).
fn rs() -> Option<PathBuf> {
    static BUILD: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);
    let mut state = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    available("Rust v2", state.get_or_insert_with(build_rs_peers))
}

fn build_rs_peers() -> Result<PathBuf, String> {
    let started = Instant::now();
    let bins = peers::cargo_build("rs-v2", INSTALL_LIMIT)?;
    eprintln!("built the Rust v2 peers in {:.1?}", started.elapsed());
    Ok(bins)
}

fn node(dir: &Path, script: &str, args: &[&str]) -> Command {
    let mut command = Command::new("node");
    command.arg(dir.join(script)).args(args);
    command
}

fn bin(path: impl AsRef<Path>, args: &[&str]) -> Command {
    let mut command = Command::new(path.as_ref());
    command.args(args);
    command
}

fn our_agent(args: &[&str]) -> Command {
    let mut command = bin(DEMO_AGENT, args);
    command.env("ACP_DEMO_DELAY_MS", "1");
    command
}

fn our_v1_agent() -> Command {
    let mut command = bin(DEMO_AGENT, &["--v1-only"]);
    command.env("ACP_DEMO_DELAY_MS", "1");
    command
}

/// Our agents end cleanly once the client is gone (stdin closed).
fn ended_cleanly(outcome: &Outcome) {
    assert!(outcome.agent_exit.is_some_and(|s| s.success()), "our agent did not exit cleanly\n{}", outcome.dump());
}

// ---- the TypeScript SDK's clients drive our agents ------------------------------------------------

#[test]
fn the_ts_v2_client_drives_our_v2_agent() {
    let Some(ts) = ts() else { return };
    let root = Root::new("ts-client");
    let outcome = connect(node(&ts, "client.mjs", &["--cancel-work", root.as_str()]), our_agent(&["--v2-only"]), LIMIT);
    scenario::full(&outcome, &root, "acp-demo-agent");
    scenario::cancel_work(&outcome);
    ended_cleanly(&outcome);
}

#[test]
fn the_ts_v2_client_gets_v2_from_our_dual_agent() {
    let Some(ts) = ts() else { return };
    let root = Root::new("ts-client-dual");
    let outcome = connect(node(&ts, "client.mjs", &[root.as_str()]), our_agent(&[]), LIMIT);
    scenario::full(&outcome, &root, "acp-demo-agent");
    ended_cleanly(&outcome);
}

#[test]
fn the_ts_v1_client_gets_v1_from_our_dual_agent() {
    let Some(ts) = ts() else { return };
    let root = Root::new("ts-v1-client-dual");
    let outcome = connect(node(&ts, "client.mjs", &["--v1", root.as_str()]), our_agent(&[]), LIMIT);
    verify(&outcome, |msgs, report| {
        let init = wire::request(msgs, relay::Dir::ToAgent, "initialize", 0)?;
        let answer = &msgs[wire::answer(msgs, init)?].json["result"];
        ensure!(answer["protocolVersion"] == 1 && answer.get("info").is_none(), "not a v1 answer: {answer}");
        ensure!(step(report, "initialize")?["protocolVersion"] == 1, "the client saw another version");
        ensure!(answer["agentInfo"]["name"] == "acp-demo-agent", "{answer}");
        step(report, "session-new")?;
        // The v1 turn: a plan, streamed chunks, the tool call behind a permission request
        // (the client allows it; it offers no fs, so the read fails and the turn goes on).
        let prompt = step(report, "prompt")?;
        let updates: Vec<&str> =
            prompt["updates"].as_array().into_iter().flatten().filter_map(|u| u.as_str()).collect();
        ensure!(prompt["stopReason"] == "end_turn", "{prompt}");
        for kind in ["plan", "agent_message_chunk", "tool_call", "tool_call_update"] {
            ensure!(updates.contains(&kind), "no {kind} in the v1 turn: {prompt}");
        }
        ensure!(!updates.contains(&"state_update"), "a v2 update in the v1 turn: {prompt}");
        Ok(())
    });
    ended_cleanly(&outcome);
}

#[test]
fn the_ts_v2_client_drives_our_v1_agent_through_the_v2_bridge() {
    let Some(ts) = ts() else { return };
    let root = Root::new("ts-client-bridged");
    let outcome = connect(node(&ts, "client.mjs", &[root.as_str()]), our_agent(&["--bridged"]), LIMIT);
    scenario::bridged(&outcome, "acp-demo-agent");
    ended_cleanly(&outcome);
}

#[test]
fn the_ts_v2_client_rejects_our_v1_only_agent() {
    let Some(ts) = ts() else { return };
    let root = Root::new("ts-client-v1");
    let outcome = connect(node(&ts, "client.mjs", &[root.as_str()]), our_v1_agent(), LIMIT);
    verify(&outcome, |msgs, report| {
        let answer = scenario::refused_v1(msgs)?;
        ensure!(answer["agentInfo"]["name"] == "acp-demo-agent", "{answer}");
        let init = &report["initialize"];
        // The SDK validates the answer against v2's schema: `info` is required there.
        ensure!(init["ok"] == false && init["error"]["message"].as_str().is_some_and(|m| m.contains("info")), "{init}");
        ensure!(report.len() == 1, "the client went on: {report:?}");
        Ok(())
    });
}

// ---- the Rust crate's client drives our agents ------------------------------------------------

#[test]
fn the_rs_v2_client_drives_our_v2_agent() {
    let Some(rs) = rs() else { return };
    let root = Root::new("rs-client");
    let outcome = connect(bin(rs.join("client"), &["--cancel-work", root.as_str()]), our_agent(&["--v2-only"]), LIMIT);
    scenario::full(&outcome, &root, "acp-demo-agent");
    scenario::cancel_work(&outcome);
    ended_cleanly(&outcome);
}

#[test]
fn the_rs_v2_client_gets_v2_from_our_dual_agent() {
    let Some(rs) = rs() else { return };
    let root = Root::new("rs-client-dual");
    let outcome = connect(bin(rs.join("client"), &[root.as_str()]), our_agent(&[]), LIMIT);
    scenario::full(&outcome, &root, "acp-demo-agent");
    ended_cleanly(&outcome);
}

#[test]
fn the_rs_v2_client_drives_our_v1_agent_through_the_v2_bridge() {
    let Some(rs) = rs() else { return };
    let root = Root::new("rs-client-bridged");
    let outcome = connect(bin(rs.join("client"), &[root.as_str()]), our_agent(&["--bridged"]), LIMIT);
    scenario::bridged(&outcome, "acp-demo-agent");
    ended_cleanly(&outcome);
}

#[test]
fn the_rs_v2_client_reports_a_lower_version_from_our_v1_only_agent() {
    let Some(rs) = rs() else { return };
    let root = Root::new("rs-client-v1");
    let outcome = connect(bin(rs.join("client"), &[root.as_str()]), our_v1_agent(), LIMIT);
    verify(&outcome, |msgs, report| {
        let answer = scenario::refused_v1(msgs)?;
        ensure!(answer["agentInfo"]["name"] == "acp-demo-agent", "{answer}");
        let init = &report["initialize"];
        // `InitializeOutcome::LowerVersion`, with the v1 answer the SDK validated.
        let expected = serde_json::json!({"step": "initialize", "ok": false, "outcome": "lower_version", "selected": 1, "agentName": "acp-demo-agent"});
        ensure!(*init == expected, "{init}");
        ensure!(report.len() == 1, "the client went on: {report:?}");
        Ok(())
    });
}

// ---- our client drives the SDKs' agents -----------------------------------------------------------

const OUR_CLIENT: &str = env!("CARGO_BIN_EXE_v2_client");

#[test]
fn our_v2_client_drives_the_ts_v2_agent() {
    let Some(ts) = ts() else { return };
    let root = Root::new("our-client-ts");
    let outcome = connect(bin(OUR_CLIENT, &["--cancel-work", root.as_str()]), node(&ts, "agent.mjs", &[]), LIMIT);
    scenario::full(&outcome, &root, "ts-sdk-v2-interop-agent");
    scenario::cancel_work(&outcome);
}

#[test]
fn our_v2_client_drives_the_rs_v2_agent() {
    let Some(rs) = rs() else { return };
    let root = Root::new("our-client-rs");
    let outcome = connect(bin(OUR_CLIENT, &["--cancel-work", root.as_str()]), bin(rs.join("agent"), &[]), LIMIT);
    scenario::full(&outcome, &root, "rs-sdk-v2-interop-agent");
    scenario::cancel_work(&outcome);
}

/// Our client asked for v2 with v1's fields beside (`ProtocolRouter::negotiate`), got v1, and
/// went on with v1 on the same connection: no second `initialize`.
fn went_on_with_v1(outcome: &Outcome, root: &Root, agent_name: &str) {
    verify(outcome, |msgs, report| {
        let init = wire::request(msgs, relay::Dir::ToAgent, "initialize", 0)?;
        let asked = &msgs[init].json["params"];
        let both = asked["info"]["name"] == "acp-v2-client" && asked["clientInfo"]["name"] == "acp-v2-client";
        ensure!(asked["protocolVersion"] == 2 && both && asked["clientCapabilities"].is_object(), "{asked}");
        let answer = &msgs[wire::answer(msgs, init)?].json["result"];
        ensure!(answer["protocolVersion"] == 1 && answer["agentInfo"]["name"] == agent_name, "{answer}");
        ensure!(wire::request(msgs, relay::Dir::ToAgent, "initialize", 1).is_err(), "a second initialize");
        let new = wire::request(msgs, relay::Dir::ToAgent, "session/new", 0)?;
        let asked = &msgs[new].json["params"];
        ensure!(
            asked["cwd"] == root.as_str() && asked["mcpServers"] == serde_json::json!([]),
            "v1 session/new: {asked}"
        );
        let session = &msgs[wire::answer(msgs, new)?].json["result"]["sessionId"];
        ensure!(session.as_str().is_some_and(|s| s.starts_with("v1-sess-")), "{session}");
        let seen = step(report, "initialize")?;
        ensure!(seen["protocolVersion"] == 1 && seen["agentName"] == agent_name, "{seen}");
        ensure!(step(report, "session-new")?["sessionId"] == *session, "the client saw another session");
        Ok(())
    });
}

#[test]
fn our_client_goes_on_with_v1_against_the_ts_v1_only_agent() {
    let Some(ts) = ts() else { return };
    let root = Root::new("our-client-ts-v1");
    let outcome = connect(bin(OUR_CLIENT, &[root.as_str()]), node(&ts, "agent.mjs", &["--v1-only"]), LIMIT);
    went_on_with_v1(&outcome, &root, "ts-sdk-v2-interop-agent");
}

#[test]
fn our_client_goes_on_with_v1_against_the_rs_v1_only_agent() {
    let Some(rs) = rs() else { return };
    let root = Root::new("our-client-rs-v1");
    let outcome = connect(bin(OUR_CLIENT, &[root.as_str()]), bin(rs.join("agent"), &["--v1-only"]), LIMIT);
    went_on_with_v1(&outcome, &root, "rs-sdk-v2-interop-agent");
}

/// Our client speaking v2 only: the agent's v1 answer ends the run, reported, with nothing sent
/// after it.
fn stopped_at_v1(outcome: &Outcome, agent_name: &str) {
    verify(outcome, |msgs, report| {
        let answer = scenario::refused_v1(msgs)?;
        ensure!(answer["agentInfo"]["name"] == agent_name, "{answer}");
        let init = &report["initialize"];
        let why = init["error"]["message"].as_str().unwrap_or_default();
        ensure!(init["ok"] == false && why.contains("protocol version this client does not speak"), "{init}");
        ensure!(report.len() == 1, "the client went on: {report:?}");
        Ok(())
    });
}

#[test]
fn our_v2_only_client_stops_at_the_ts_v1_only_agent() {
    let Some(ts) = ts() else { return };
    let root = Root::new("our-v2-client-ts-v1");
    let outcome =
        connect(bin(OUR_CLIENT, &["--v2-only", root.as_str()]), node(&ts, "agent.mjs", &["--v1-only"]), LIMIT);
    stopped_at_v1(&outcome, "ts-sdk-v2-interop-agent");
}

#[test]
fn our_v2_only_client_stops_at_the_rs_v1_only_agent() {
    let Some(rs) = rs() else { return };
    let root = Root::new("our-v2-client-rs-v1");
    let outcome = connect(bin(OUR_CLIENT, &["--v2-only", root.as_str()]), bin(rs.join("agent"), &["--v1-only"]), LIMIT);
    stopped_at_v1(&outcome, "rs-sdk-v2-interop-agent");
}
