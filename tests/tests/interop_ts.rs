//! Interop with the official TypeScript SDK (npm `@agentclientprotocol/sdk`, pinned in
//! `tests/interop/ts/package.json` and its lock file) as a real peer over stdio:
//!
//! - `client.mjs` (the SDK's `ClientSideConnection`) drives our example agent: initialize with
//!   unknown fields and `_meta`, session/new, a prompt with a permission allowed and a file
//!   read served by the TS client, a second prompt cancelled while its permission request is
//!   pending, an unknown extension method and notification, and a last session/new;
//! - our example client drives `agent.mjs` (the SDK's `AgentSideConnection`), which also
//!   sends a session update kind no schema has.
//!
//! The SDK is installed by `npm ci` into `tests/interop/ts/node_modules` when that is missing.
//! Without node/npm, or when the install fails, the tests print why and pass without running,
//! unless `ACP_INTEROP_REQUIRED=1` (as in CI), which makes that a failure.
#![cfg(unix)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

const AGENT: &str = env!("CARGO_BIN_EXE_acp-example-agent");
const CLIENT: &str = env!("CARGO_BIN_EXE_acp-example-client");
const NOTES: &str = "hello from the interop root\nsecond line\n";

fn ts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/ts")
}

/// The SDK's directory, installed; `None` (after saying why) when it cannot be.
fn sdk() -> Option<PathBuf> {
    static INSTALL: Mutex<Option<Result<(), String>>> = Mutex::new(None);
    let dir = ts_dir();
    let mut state = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let outcome = state.get_or_insert_with(|| install(&dir)).clone();
    match outcome {
        Ok(()) => Some(dir),
        Err(why) => {
            if std::env::var_os("ACP_INTEROP_REQUIRED").is_some_and(|v| v != "0") {
                panic!("TypeScript interop cannot run: {why}");
            }
            eprintln!("SKIPPED: TypeScript interop cannot run: {why} (set ACP_INTEROP_REQUIRED=1 to fail instead)");
            None
        }
    }
}

fn install(dir: &Path) -> Result<(), String> {
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => return Err("`node` is not available".into()),
    }
    if dir.join("node_modules/@agentclientprotocol/sdk/package.json").exists() {
        return Ok(());
    }
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(dir)
        .output()
        .map_err(|e| format!("cannot run `npm ci`: {e}"))?;
    if !out.status.success() {
        return Err(format!("`npm ci` in {} failed:\n{}", dir.display(), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// A session root with `notes.txt`; removed on drop.
struct Root(PathBuf);

impl Root {
    fn new(tag: &str) -> Root {
        let dir = std::env::temp_dir().join(format!("acp-interop-ts-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("notes.txt"), NOTES).unwrap();
        Root(dir.canonicalize().unwrap())
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_ts_sdk_client_drives_our_agent() {
    let Some(dir) = sdk() else { return };
    let root = Root::new("client");
    let out = Command::new("node")
        .arg(dir.join("client.mjs"))
        .arg(&root.0)
        .arg(AGENT)
        .env("ACP_DEMO_DELAY_MS", "2")
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stdout.contains("DONE"), "client.mjs failed:\n{stdout}\n{stderr}");
    let results: HashMap<String, Value> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| (v["scenario"].as_str().unwrap().to_owned(), v))
        .collect();

    // Unknown fields and `_meta` from a newer client are accepted.
    let init = &results["initialize"];
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentName"], "acp-demo-agent");
    assert!(stderr.contains("initialize from ts-sdk-interop (protocol 1, fs.readTextFile: true)"), "{stderr}");

    let session = results["session-new"]["sessionId"].as_str().unwrap();
    assert!(session.starts_with("sess_"));

    let prompt = &results["prompt"];
    assert_eq!(prompt["stopReason"], "end_turn", "{prompt}");
    for kind in ["plan", "agent_message_chunk", "tool_call", "tool_call_update"] {
        assert!(prompt["updateKinds"].as_array().unwrap().iter().any(|k| k == kind), "{kind}: {prompt}");
    }
    assert_eq!(prompt["permissions"], 1);
    let reads = prompt["reads"].as_array().unwrap();
    assert_eq!(reads.len(), 1, "{prompt}");
    assert_eq!(reads[0]["path"], root.0.join("notes.txt").to_str().unwrap());
    assert_eq!(reads[0]["limit"], 8);
    assert_eq!(prompt["toolContent"], NOTES);
    assert!(prompt["message"].as_str().unwrap().contains("starts with “hello from the interop root”"), "{prompt}");

    // Cancelled while the permission request was pending.
    assert_eq!(results["cancel"]["stopReason"], "cancelled", "{}", results["cancel"]);
    assert_eq!(results["cancel"]["permissions"], 1);

    let ext = &results["extension"];
    assert_eq!(ext["answered"], "error", "{ext}");
    assert_eq!(ext["code"], -32601, "{ext}");
    assert_ne!(results["still-alive"]["sessionId"].as_str().unwrap(), session);
}

fn run_our_client(dir: &Path, root: &Root, policy: &str) -> String {
    let out = Command::new(CLIENT)
        .args(["--root"])
        .arg(&root.0)
        .args(["--policy", policy, "--prompt", "Please read notes.txt", "-v", "--", "node"])
        .arg(dir.join("agent.mjs"))
        .output()
        .expect("run the client example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn our_client_drives_the_ts_sdk_agent() {
    let Some(dir) = sdk() else { return };
    let root = Root::new("agent");
    let allowed = run_our_client(&dir, &root, "allow");
    for expected in [
        "connected to ts-sdk-interop-agent 1.9.0 (protocol v1)",
        "Plan:\n  [ ] Read notes.txt (high)",
        "TS agent reading notes.txt.",
        // An update kind from a newer agent: shown, not fatal.
        "(hologram_projection update)",
        "⚙ Read notes.txt [read] pending  (ts_call_1)",
        "? permission for “Read notes.txt”: Allow once (policy allow)",
        "↳ Read notes.txt: in_progress",
        "⇢ fs/read_text_file",
        "↳ Read notes.txt: completed\n    │ hello from the interop root\n    │ second line",
        "It starts with \"hello from the interop root\".",
        "■ stop reason: end_turn",
    ] {
        assert!(allowed.contains(expected), "missing {expected:?} in:\n{allowed}");
    }

    let rejected = run_our_client(&dir, &root, "reject");
    assert!(rejected.contains("Reject (policy reject)"), "{rejected}");
    assert!(rejected.contains("↳ Read notes.txt: failed"), "{rejected}");
    assert!(!rejected.contains("fs/read_text_file"), "{rejected}");
    assert!(rejected.contains("■ stop reason: end_turn"), "{rejected}");
}
