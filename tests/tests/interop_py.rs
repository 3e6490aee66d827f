//! Interop with the official Python SDK (PyPI `agent-client-protocol`, pinned in
//! `tests/interop/py/requirements.txt`) as a real peer over stdio, the same scenarios as
//! `interop_ts.rs`:
//!
//! - `client.py` (the SDK's `ClientSideConnection`) drives our example agent: initialize with
//!   unknown fields and `_meta`, session/new, a prompt with a permission allowed and a file
//!   read served by the Python client, a second prompt cancelled while its permission request
//!   is pending, an unknown extension method and notification, and a last session/new;
//! - our example client drives `agent.py` (the SDK's `AgentSideConnection`).
//!
//! The SDK is installed into `tests/interop/py/.venv` (`python3 -m venv`, then `pip install -r
//! requirements.txt`) when that is missing or holds another version. Without python3, or when
//! the install fails, the tests print why and pass without running, unless
//! `ACP_INTEROP_REQUIRED=1` (as in CI), which makes that a failure.
#![cfg(unix)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

const AGENT: &str = env!("CARGO_BIN_EXE_acp-example-agent");
const CLIENT: &str = env!("CARGO_BIN_EXE_acp-example-client");
const NOTES: &str = "hello from the interop root\nsecond line\n";

fn py_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/py")
}

/// The SDK's directory, installed; `None` (after saying why) when it cannot be.
fn sdk() -> Option<PathBuf> {
    static INSTALL: Mutex<Option<Result<(), String>>> = Mutex::new(None);
    let dir = py_dir();
    let mut state = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let outcome = state.get_or_insert_with(|| install(&dir)).clone();
    match outcome {
        Ok(()) => Some(dir),
        Err(why) => {
            if std::env::var_os("ACP_INTEROP_REQUIRED").is_some_and(|v| v != "0") {
                panic!("Python interop cannot run: {why}");
            }
            eprintln!("SKIPPED: Python interop cannot run: {why} (set ACP_INTEROP_REQUIRED=1 to fail instead)");
            None
        }
    }
}

fn python(dir: &Path) -> PathBuf {
    dir.join(".venv/bin/python")
}

fn install(dir: &Path) -> Result<(), String> {
    let run = |command: &mut Command, what: &str| -> Result<String, String> {
        let out = command.current_dir(dir).output().map_err(|e| format!("cannot run {what}: {e}"))?;
        if !out.status.success() {
            return Err(format!("{what} failed:\n{}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    run(Command::new("python3").arg("--version"), "`python3 --version`")?;
    let requirements = std::fs::read_to_string(dir.join("requirements.txt")).map_err(|e| e.to_string())?;
    let pinned = requirements
        .lines()
        .find_map(|l| l.trim().strip_prefix("agent-client-protocol=="))
        .ok_or("requirements.txt pins no agent-client-protocol version")?
        .trim()
        .to_owned();
    let installed = || {
        Command::new(python(dir))
            .args(["-c", "import importlib.metadata as m; print(m.version('agent-client-protocol'))"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    if installed().as_deref() == Some(pinned.as_str()) {
        return Ok(());
    }
    if !python(dir).exists() {
        run(Command::new("python3").args(["-m", "venv", ".venv"]), "`python3 -m venv .venv`")?;
    }
    run(
        Command::new(python(dir)).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
            "requirements.txt",
        ]),
        "`pip install -r requirements.txt`",
    )?;
    match installed() {
        Some(v) if v == pinned => Ok(()),
        other => Err(format!("after pip install, agent-client-protocol is {other:?}, not {pinned}")),
    }
}

/// A session root with `notes.txt`; removed on drop.
struct Root(PathBuf);

impl Root {
    fn new(tag: &str) -> Root {
        let dir = std::env::temp_dir().join(format!("acp-interop-py-{tag}-{}", std::process::id()));
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
fn the_python_sdk_client_drives_our_agent() {
    let Some(dir) = sdk() else { return };
    let root = Root::new("client");
    let out = Command::new(python(&dir))
        .arg(dir.join("client.py"))
        .arg(&root.0)
        .arg(AGENT)
        .env("ACP_DEMO_DELAY_MS", "2")
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stdout.contains("DONE"), "client.py failed:\n{stdout}\n{stderr}");
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
    // (The SDK's `spawn_agent_process` keeps the agent's stderr, so its log is not checked here.)

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
        .args(["--policy", policy, "--prompt", "Please read notes.txt", "-v", "--"])
        .arg(python(dir))
        .arg(dir.join("agent.py"))
        .output()
        .expect("run the client example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn our_client_drives_the_python_sdk_agent() {
    let Some(dir) = sdk() else { return };
    let root = Root::new("agent");
    let allowed = run_our_client(&dir, &root, "allow");
    for expected in [
        "connected to py-sdk-interop-agent 1.0.0rc3 (protocol v1)",
        "Plan:\n  [ ] Read notes.txt (high)",
        "Python agent reading notes.txt.",
        "⚙ Read notes.txt [read] pending  (py_call_1)",
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
