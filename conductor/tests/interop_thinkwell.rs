//! Our proxies under `@thinkwell/conductor` 0.5.7 (npm), the TypeScript conductor of the older
//! proxy wire (`initialize` with `_meta.proxy`, `_proxy/successor/request` and
//! `_proxy/successor/notification`; see `acp_rpc::proxy`, "The older wire"). The package is a
//! library; `tests/interop/ts-conductor/conductor.mjs` runs it as a command over stdio, and this
//! test installs it there with `npm ci` from the checked-in lock file.
//!
//! - the context proxy and a pass-through in front of an echo agent: the prompt reaches the
//!   agent with the context in front and nothing else changed;
//! - a full turn of the demo agent through them: its permission request and file read travel
//!   back to the editor wrapped and unwrapped at each hop, its updates too;
//! - `session/cancel` while the agent waits on the user: the prompt is answered `cancelled`
//!   and the chain carries the next turn;
//! - our conductor in proxy mode as one of its proxies: initialized on the older wire, it runs
//!   its own chain of proxies, for the echo agent and for a full turn of the demo agent.
//!
//! Without node or npm, or when the install fails, the tests print why and pass without running,
//! unless `ACP_INTEROP_REQUIRED=1` (as in CI), which makes that a failure.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

mod common;
use common::{
    CancelIds, Editor, cancel_while_asking_with, context_reaches_the_echo_agent_losslessly,
    full_turn_reads_the_file_the_context_names,
};

const CONDUCTOR: &str = env!("CARGO_BIN_EXE_acp-conductor");
const COMPONENTS: &str = env!("CARGO_BIN_EXE_acp-conductor-test-components");
const CONTEXT: &str = env!("CARGO_BIN_EXE_acp-conductor-proxy-context");
const AGENT: &str = env!("CARGO_BIN_EXE_acp-conductor-example-agent");
const INSTALL_LIMIT: Duration = Duration::from_secs(5 * 60);

/// The folder with `conductor.mjs` and its installed package; `None` (or a panic when
/// required) when it cannot be installed.
fn thinkwell() -> Option<PathBuf> {
    static INSTALL: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);
    common::peers::once("@thinkwell/conductor", &INSTALL, npm_ci)
}

fn npm_ci() -> Result<PathBuf, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/interop/ts-conductor");
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => return Err("`node` is not available".into()),
    }
    // An install of another version (an older lock file) is replaced, not used.
    let version = |lock: &str| -> Option<String> {
        let lock: Value = serde_json::from_str(lock).ok()?;
        Some(lock["packages"]["node_modules/@thinkwell/conductor"]["version"].as_str()?.to_owned())
    };
    let pinned = std::fs::read_to_string(dir.join("package-lock.json")).map_err(|e| e.to_string())?;
    let installed = std::fs::read_to_string(dir.join("node_modules/.package-lock.json")).unwrap_or_default();
    if version(&installed).is_some() && version(&installed) == version(&pinned) {
        return Ok(dir);
    }
    let mut npm = Command::new("npm");
    npm.args(["ci", "--no-audit", "--no-fund"]).current_dir(&dir);
    let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop-ts-conductor-npm.log");
    common::peers::run_logged(npm, &log, INSTALL_LIMIT).map_err(|e| format!("`npm ci` in {}: {e}", dir.display()))?;
    Ok(dir)
}

/// The TypeScript conductor running `chain` (proxies, then the agent), as an editor sees it.
fn conductor(dir: &Path, chain: &[&str]) -> Editor {
    let script = dir.join("conductor.mjs");
    let args: Vec<&str> = std::iter::once(script.to_str().unwrap()).chain(chain.iter().copied()).collect();
    Editor::spawn("node", &args)
}

#[tokio::test]
async fn our_proxies_under_the_typescript_conductor_add_the_context_and_change_nothing_else() {
    let Some(dir) = thinkwell() else { return };
    let mut editor = conductor(
        &dir,
        &[&format!("{CONTEXT} --context injected"), &format!("{COMPONENTS} pass"), &format!("{COMPONENTS} echo-agent")],
    );
    let init = context_reaches_the_echo_agent_losslessly(&mut editor).await;
    // The conductor refuses a first proxy that does not answer with the marker; ours does.
    assert_eq!(init["result"]["_meta"]["proxy"], json!(true), "{init}");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test]
async fn our_proxies_under_the_typescript_conductor_carry_a_full_turn_of_the_demo_agent() {
    let Some(dir) = thinkwell() else { return };
    let mut editor = conductor(
        &dir,
        &[&format!("{CONTEXT} --context 'Please read CONTEXT.md'"), &format!("{COMPONENTS} pass"), AGENT],
    );
    full_turn_reads_the_file_the_context_names(&mut editor, "thinkwell-turn").await;
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test]
async fn a_turn_cancelled_while_asking_the_user_ends_cancelled_through_the_typescript_conductor() {
    let Some(dir) = thinkwell() else { return };
    let editor = conductor(&dir, &[&format!("{COMPONENTS} pass"), &format!("{CONTEXT} --context 'Be brief'"), AGENT]);
    // The agent withdraws its question; this conductor passes the `$/cancel_request` on as it
    // is, under the id the agent gave it.
    let editor = cancel_while_asking_with(editor, "typescript conductor", CancelIds::PassedAsTheyCame).await;
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test]
async fn our_conductor_in_proxy_mode_is_one_proxy_of_the_typescript_conductor() {
    let Some(dir) = thinkwell() else { return };
    let ours = |context: &str| format!("{CONDUCTOR} proxy \"{CONTEXT} --context {context}\" \"{COMPONENTS} pass\"");
    let mut editor = conductor(&dir, &[&ours("injected"), &format!("{COMPONENTS} echo-agent")]);
    let init = context_reaches_the_echo_agent_losslessly(&mut editor).await;
    // The TypeScript conductor refuses a first proxy whose answer lacks the marker.
    assert_eq!(init["result"]["_meta"]["proxy"], json!(true), "{init}");
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");

    let mut editor = conductor(&dir, &[&ours("'Please read CONTEXT.md'"), AGENT]);
    full_turn_reads_the_file_the_context_names(&mut editor, "thinkwell-nested-turn").await;
    let (code, stderr) = editor.finish().await;
    assert_eq!(code, Some(0), "{stderr}");
}
