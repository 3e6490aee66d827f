//! Interop with the official TypeScript SDK (npm `@agentclientprotocol/sdk` 2.4, pinned in
//! `tests/interop/ts/package.json` and its lock file) as a real peer over stdio, through the
//! SDK's v1 apps (`acp.client()`, `acp.agent()`):
//!
//! - `client.mjs` drives our example agent: initialize with unknown fields and `_meta`,
//!   session/new, a prompt with a permission allowed and a file read served by the TS client,
//!   a second prompt cancelled while its permission request is pending, an unknown extension
//!   method and notification, and a last session/new;
//! - `client.mjs --compact=...` advertises `clientCapabilities.session.notices` and/or
//!   `.compaction` and sends `/compact`: the notice and compaction updates our agent sends
//!   (only where advertised) as the SDK's own schemas decoded them;
//! - our example client drives `agent.mjs`, which also sends a session update kind no schema
//!   has.
//!
//! The SDK validates each incoming session/update and drops one its schema rejects (it only
//! logs that), so `client.mjs` also taps the wire and fails when an update that arrived did
//! not reach its handler.
//!
//! The SDK is installed by `npm ci` into `tests/interop/ts/node_modules` when that is missing
//! or holds another version than the lock file's. Without node/npm, or when the install fails,
//! the tests print why and pass without running, unless `ACP_INTEROP_REQUIRED=1` (as in CI),
//! which makes that a failure.
#![cfg(unix)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::{Value, json};

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
    let locked = locked_sdk_version(dir)?;
    // A node_modules left by an older lock file would run the tests against the wrong SDK.
    if installed_sdk_version(dir).as_deref() == Some(locked.as_str()) {
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
    match installed_sdk_version(dir) {
        Some(installed) if installed == locked => Ok(()),
        other => Err(format!("`npm ci` installed SDK {other:?}, the lock file says {locked}")),
    }
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", path.display()))
}

fn locked_sdk_version(dir: &Path) -> Result<String, String> {
    let lock = read_json(&dir.join("package-lock.json"))?;
    lock["packages"]["node_modules/@agentclientprotocol/sdk"]["version"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "package-lock.json pins no @agentclientprotocol/sdk".into())
}

fn installed_sdk_version(dir: &Path) -> Option<String> {
    let manifest = read_json(&dir.join("node_modules/@agentclientprotocol/sdk/package.json")).ok()?;
    manifest["version"].as_str().map(str::to_owned)
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

/// What `client.mjs` printed: its `RESULT`s by scenario, its `UPDATE`s (as the SDK decoded
/// them) in order, and its stderr (where our agent logs too).
struct TsRun {
    results: HashMap<String, Value>,
    updates: Vec<Value>,
    stderr: String,
}

/// Runs `client.mjs [flag] <root> <our agent>`; it must end with `DONE`.
fn run_ts_client(dir: &Path, root: &Root, flag: Option<&str>) -> TsRun {
    let out = Command::new("node")
        .arg(dir.join("client.mjs"))
        .args(flag)
        .arg(&root.0)
        .arg(AGENT)
        .env("ACP_DEMO_DELAY_MS", "2")
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success() && stdout.contains("\nDONE\n"), "client.mjs failed:\n{stdout}\n{stderr}");
    let parsed = |prefix: &str| -> Vec<Value> {
        stdout.lines().filter_map(|l| l.strip_prefix(prefix)).map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let results = parsed("RESULT ").into_iter().map(|v| (v["scenario"].as_str().unwrap().to_owned(), v)).collect();
    TsRun { results, updates: parsed("UPDATE "), stderr }
}

#[test]
fn the_ts_sdk_client_drives_our_agent() {
    let Some(dir) = sdk() else { return };
    let root = Root::new("client");
    let TsRun { results, stderr, .. } = run_ts_client(&dir, &root, None);

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

/// `/compact` from a TS client that advertised `capabilities` (of `notices`, `compaction`):
/// checks the turn ended `end_turn` in the session it opened, and returns the updates other
/// than agent message chunks, plus the agent message those chunks make.
fn compact_turn(capabilities: &str) -> Option<(Vec<Value>, String, String)> {
    let dir = sdk()?;
    let root = Root::new(&format!("compact-{}", capabilities.replace(',', "-")));
    let run = run_ts_client(&dir, &root, Some(&format!("--compact={capabilities}")));
    let compact = &run.results["compact"];
    assert_eq!(compact["stopReason"], "end_turn", "{compact}");
    let session = compact["sessionId"].as_str().unwrap();
    let mut others = Vec::new();
    let mut message = String::new();
    for seen in &run.updates {
        assert_eq!(seen["sessionId"], session, "{seen}");
        let update = &seen["update"];
        if update["sessionUpdate"] == "agent_message_chunk" {
            message.push_str(update["content"]["text"].as_str().unwrap());
        } else {
            // Nothing may follow the message: the compaction is over before the agent says so.
            assert!(message.is_empty(), "{update} after the message {message:?}");
            others.push(update.clone());
        }
    }
    // The whole message arrived as decoded chunks (client.mjs fails on any dropped update).
    assert_eq!(compact["message"], message.as_str());
    Some((others, message, run.stderr))
}

fn expected_notice() -> Value {
    json!({
        "sessionUpdate": "notice",
        "severity": "info",
        "title": "Compacting the conversation",
        "description": "Earlier turns are replaced by a summary.",
    })
}

const NOT_COMPACTED: &str = "This client does not show compactions; nothing was compacted.";

#[test]
fn the_ts_sdk_client_decodes_our_notice_and_compaction() {
    let Some((updates, message, stderr)) = compact_turn("notices,compaction") else { return };
    // The id our agent logged is the one every compaction update names.
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("[demo-agent] compaction ")?.strip_suffix(" started"))
        .unwrap_or_else(|| panic!("no compaction started in:\n{stderr}"));
    assert!(id.starts_with("compaction_"), "{id}");
    let chunk = |text: &str| {
        json!({
            "sessionUpdate": "compaction_summary_chunk",
            "compactionId": id,
            "content": { "type": "text", "text": text },
        })
    };
    // Exactly these fields, as the SDK's schema decoded them: no summary or error on either
    // compaction_update (the chunks built the summary).
    let expected = vec![
        expected_notice(),
        json!({ "sessionUpdate": "compaction_update", "compactionId": id, "status": "in_progress" }),
        chunk("The user asked about their files; "),
        chunk("the agent read them with permission."),
        json!({ "sessionUpdate": "compaction_update", "compactionId": id, "status": "completed" }),
    ];
    assert_eq!(updates, expected);
    assert_eq!(message, "The conversation is compacted.");
}

#[test]
fn a_ts_sdk_client_without_the_capabilities_gets_neither_notice_nor_compaction() {
    let Some((updates, message, stderr)) = compact_turn("") else { return };
    assert_eq!(updates, Vec::<Value>::new());
    assert_eq!(message, NOT_COMPACTED);
    assert!(!stderr.contains("[demo-agent] compaction "), "{stderr}");
}

#[test]
fn a_ts_sdk_client_with_notices_only_gets_the_notice_and_no_compaction() {
    let Some((updates, message, stderr)) = compact_turn("notices") else { return };
    assert_eq!(updates, vec![expected_notice()]);
    assert_eq!(message, NOT_COMPACTED);
    assert!(!stderr.contains("[demo-agent] compaction "), "{stderr}");
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
        // The SDK the agent ran (it reports its version).
        "connected to ts-sdk-interop-agent 2.4.0 (protocol v1)",
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
