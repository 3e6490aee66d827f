//! `acp-check` against real agent processes: it passes the runtime's example agent and a
//! hand-rolled one, and fails each deliberately broken agent (tests/agents/) on the rule it
//! breaks, with a message that says what went wrong.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const CHECK: &str = env!("CARGO_BIN_EXE_acp-check");

/// Runs `acp-check --json -- <agent>`; the exit code and the report.
fn check(agent: &str) -> (i32, Value) {
    let output = Command::new(CHECK)
        .args(["--json", "--timeout-ms", "20000", "--", agent])
        // The example agent's pause between streamed words: short, nothing depends on it.
        .env("ACP_DEMO_DELAY_MS", "5")
        .output()
        .expect("run acp-check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("acp-check --json printed no JSON ({e}):\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr))
    });
    (output.status.code().expect("exit code"), report)
}

fn find<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no check {id}"))
}

fn failures(report: &Value) -> Vec<String> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] != "pass")
        .map(|c| format!("{} {}: {}", c["status"], c["id"], c["detail"]))
        .collect()
}

#[test]
fn the_example_agent_conforms() {
    let (code, report) = check(env!("CARGO_BIN_EXE_acp-check-example-agent"));
    assert_eq!(failures(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(code, 0);
    assert_eq!(report["summary"]["conforms"], true);
    assert_eq!(report["agent"]["agent_info"]["name"], "acp-demo-agent");
    assert!(report["checks"].as_array().unwrap().len() >= 17);
    let shape = find(&report, "session-update-shape")["detail"].as_str().unwrap();
    assert!(shape.contains("tool_call") && shape.contains("plan"), "{shape}");
}

#[test]
fn a_hand_rolled_agent_conforms() {
    let (code, report) = check(env!("CARGO_BIN_EXE_acp-check-agent-ok"));
    assert_eq!(failures(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(code, 0);
}

#[test]
fn an_agent_that_ignores_cancel_fails() {
    let (code, report) = check(env!("CARGO_BIN_EXE_acp-check-agent-ignores-cancel"));
    assert_eq!(code, 1, "{report:#}");
    let cancel = find(&report, "cancel");
    assert_eq!(cancel["status"], "fail", "{cancel}");
    assert_eq!(cancel["level"], "MUST");
    let detail = cancel["detail"].as_str().unwrap();
    assert!(detail.contains("end_turn") && detail.contains("not `cancelled`"), "{detail}");
    assert_eq!(failures(&report).len(), 1, "only the cancel rule is broken: {:#?}", failures(&report));
}

#[test]
fn an_agent_that_crashes_on_an_unknown_method_fails() {
    let (code, report) = check(env!("CARGO_BIN_EXE_acp-check-agent-crashes-on-unknown"));
    assert_eq!(code, 1, "{report:#}");
    let unknown = find(&report, "unknown-method");
    assert_eq!(unknown["status"], "fail", "{unknown}");
    let detail = unknown["detail"].as_str().unwrap();
    assert!(detail.contains("exited with status 70") && detail.contains("unknown method"), "{detail}");
    // The other checks ran on fresh processes: the handshake and the turn still pass.
    for id in ["initialize", "prompt-turn", "cancel", "malformed-line-survives"] {
        assert_eq!(find(&report, id)["status"], "pass", "{id}");
    }
}

#[test]
fn an_agent_that_advertises_load_session_without_it_fails() {
    let (code, report) = check(env!("CARGO_BIN_EXE_acp-check-agent-lies-load-session"));
    assert_eq!(code, 1, "{report:#}");
    let load = find(&report, "capability-load-session");
    assert_eq!(load["status"], "fail", "{load}");
    let detail = load["detail"].as_str().unwrap();
    assert!(detail.contains("loadSession is advertised") && detail.contains("-32601"), "{detail}");
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
}

#[test]
fn the_text_report_and_the_usage_errors() {
    let output =
        Command::new(CHECK).args(["--", env!("CARGO_BIN_EXE_acp-check-agent-lies-load-session")]).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1));
    assert!(text.contains("FAIL  MUST    capability-load-session"), "{text}");
    assert!(text.contains("PASS  MUST    initialize"), "{text}");
    assert!(text.contains("a MUST does not hold"), "{text}");

    let output = Command::new(CHECK).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("missing the agent command"));

    let output = Command::new(CHECK).args(["--", "/nonexistent/acp-agent"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot start"));
}

/// The checker against an agent written with the official TypeScript SDK
/// (`tests/interop/ts/agent.mjs`; the SDK is installed by `npm ci` when missing). Its one
/// deliberate oddity, an update kind from a "newer" protocol, is a warning, not a failure.
#[test]
fn the_typescript_sdk_agent_conforms() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/interop/ts");
    let ready = Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success())
        && (dir.join("node_modules/@agentclientprotocol/sdk/package.json").exists()
            || Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir)
                .output()
                .is_ok_and(|o| o.status.success()));
    if !ready {
        assert!(
            std::env::var_os("ACP_INTEROP_REQUIRED").is_none_or(|v| v == "0"),
            "node and the TypeScript SDK are required (ACP_INTEROP_REQUIRED)"
        );
        eprintln!("SKIPPED: node or the TypeScript SDK is not available");
        return;
    }
    let output = Command::new(CHECK)
        .args(["--json", "--timeout-ms", "20000", "--", "node"])
        .arg(dir.join("agent.mjs"))
        .output()
        .expect("run acp-check");
    let report: Value = serde_json::from_slice(&output.stdout).expect("a JSON report");
    assert_eq!(output.status.code(), Some(0), "{:?}", failures(&report));
    let not_passed = failures(&report);
    assert!(
        not_passed.len() == 1
            && not_passed[0].contains("session-update-shape")
            && not_passed[0].contains("hologram_projection"),
        "only the deliberate unknown update kind may warn: {not_passed:?}"
    );
}
