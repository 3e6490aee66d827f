//! `acp-check` against real agent processes: it passes the runtime's example agents (v1, and
//! v2 alone or beside v1) and hand-rolled ones, and fails each deliberately broken agent
//! (tests/agents/) on the rule it breaks, with a message that says what went wrong. The v1
//! tests run `--protocol 1`, except those of `--protocol auto` (the default).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

const CHECK: &str = env!("CARGO_BIN_EXE_acp-check");
const FLAWED: &str = env!("CARGO_BIN_EXE_acp-check-agent-flawed");
const V2_FLAWED: &str = env!("CARGO_BIN_EXE_acp-check-agent-v2");
const SLOW_START: &str = env!("CARGO_BIN_EXE_acp-check-slow-start");

/// A fresh temporary folder for one acp-check run (its TMPDIR), removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        // Tests run in parallel threads of one process, some with the same agent command.
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("acp-check-it-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("create a test folder");
        TempDir(dir)
    }

    fn entries(&self) -> Vec<String> {
        std::fs::read_dir(&self.0).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `acp-check --protocol 1 --json -- <agent>`; the exit code and the report.
fn check(agent: &str) -> (i32, Value) {
    check_with(&[agent], 20_000)
}

/// Runs `acp-check --protocol 1 --json --timeout-ms <timeout_ms> -- <command...>`.
fn check_with(command: &[&str], timeout_ms: u64) -> (i32, Value) {
    check_protocol("1", command, timeout_ms)
}

/// Runs `acp-check --protocol <protocol> --json --timeout-ms <timeout_ms> -- <command...>` with a
/// TMPDIR of its own, which must be empty again afterwards (the scratch directory is removed).
fn check_protocol(protocol: &str, command: &[&str], timeout_ms: u64) -> (i32, Value) {
    check_protocol_with(protocol, &[], command, timeout_ms)
}

/// `check_protocol` with more options (`options`) before the agent command.
fn check_protocol_with(protocol: &str, options: &[&str], command: &[&str], timeout_ms: u64) -> (i32, Value) {
    let tmp = TempDir::new(
        &command.iter().map(|c| Path::new(c).file_name().unwrap().to_string_lossy()).collect::<Vec<_>>().join("-"),
    );
    let output = Command::new(CHECK)
        .args(["--protocol", protocol, "--json", "--timeout-ms", &timeout_ms.to_string()])
        .args(options)
        .arg("--")
        .args(command)
        // The example agent's pause between streamed words: short, nothing depends on it.
        .env("ACP_DEMO_DELAY_MS", "5")
        .env("TMPDIR", &tmp.0)
        .output()
        .expect("run acp-check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("acp-check --json printed no JSON ({e}):\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr))
    });
    assert_eq!(tmp.entries(), Vec::<String>::new(), "the scratch directory is left behind");
    (output.status.code().expect("exit code"), report)
}

/// acp-check against the hand-rolled agent with the flaws named.
fn check_flawed(flaws: &[&str]) -> (i32, Value) {
    check_with(&[&[FLAWED], flaws].concat(), 20_000)
}

fn detail<'a>(report: &'a Value, id: &str) -> &'a str {
    find(report, id)["detail"].as_str().unwrap()
}

fn find<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no check {id}"))
}

/// The checks judged only when the agent offers the work they need (`--work-prompt`, background
/// work): skipped for an agent that does not.
const WORK_CHECKS: [&str; 4] =
    ["v2-tool-call-cancel", "v2-terminal-cancel", "v2-cancel-capability-withdrawn", "v2-background-work"];

/// `failures`, leaving out the work checks that were skipped.
fn failures_but_work_skipped(report: &Value) -> Vec<String> {
    let skipped = |c: &str| WORK_CHECKS.iter().any(|id| c.starts_with(&format!("\"skip\" \"{id}\"")));
    failures(report).into_iter().filter(|c| !skipped(c)).collect()
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
    // In auto mode: the runtime's demo agent serving v1 only answers 1 when asked for 2, and
    // only v1 is checked (both versions: `auto_mode_finds_both_versions_of_a_dual_agent_...`).
    let agent = [env!("CARGO_BIN_EXE_acp-check-example-agent"), "--v1-only"];
    let (code, report) = check_protocol("auto", &agent, 20_000);
    assert_eq!(failures(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(code, 0);
    assert_eq!(report["versions"]["served"], json!([1]), "{}", report["versions"]);
    assert_eq!(report["versions"]["probes"], json!([{"asked": 2, "answered": 1}, {"asked": 1, "answered": 1}]));
    assert!(report["checks"].as_array().unwrap().iter().all(|c| c["protocol"] == 1));
    assert_eq!(report["summary"]["conforms"], true);
    assert_eq!(report["summary"]["verdict"], "every MUST holds");
    assert_eq!(report["agent"]["agent_info"]["name"], "acp-demo-agent");
    assert!(report["checks"].as_array().unwrap().len() >= 17);
    let shape = find(&report, "session-update-shape")["detail"].as_str().unwrap();
    assert!(shape.contains("tool_call") && shape.contains("plan"), "{shape}");
    // Offered fs, it reads the file the prompt names through the client, in both such runs.
    assert_eq!(detail(&report, "fs-calls-well-formed"), "2 call(s), all well-formed: fs/read_text_file ×2");
}

/// Each check's id and status, in the report's order.
fn verdicts(report: &Value) -> Vec<(String, String)> {
    let checks = report["checks"].as_array().unwrap();
    checks.iter().map(|c| (c["id"].as_str().unwrap().to_owned(), c["status"].as_str().unwrap().to_owned())).collect()
}

#[test]
fn a_chain_of_three_proxies_in_front_of_the_example_agent_checks_as_the_bare_agent_does() {
    // A chain must be transparent: acp-check talks to the conductor as to any agent, and
    // every check comes out as it does for the agent alone, for both protocol versions the
    // demo agent serves. The proxies: a pass-through, a tool filter whose deny list the demo
    // agent never meets (it only asks to `read`), and the context proxy, which puts a text
    // block in front of every prompt (acp-check does not look at what the agent makes of a
    // prompt). Details (ids, timings) may differ, and so may a check that could not tell
    // (the cancellation checks race a turn that ends on its own, and a chain's hops move the
    // race).
    let agent = env!("CARGO_BIN_EXE_acp-check-example-agent");
    let (bare_code, bare) = check_protocol("auto", &[agent], 20_000);
    let pass = format!("{} pass", env!("CARGO_BIN_EXE_acp-check-proxy-components"));
    let filter = format!("{} --deny execute,delete", env!("CARGO_BIN_EXE_acp-check-proxy-filter"));
    let context = format!("{} --context 'Be brief'", env!("CARGO_BIN_EXE_acp-check-proxy-context"));
    let chain = [env!("CARGO_BIN_EXE_acp-check-conductor"), "agent", &pass, &filter, &context, agent];
    let (chain_code, chained) = check_protocol("auto", &chain, 20_000);
    let failed = |report: &Value| report["checks"].as_array().unwrap().iter().filter(|c| c["status"] == "fail").count();
    assert_eq!(failed(&bare), 0, "the bare agent: {bare:#}");
    assert_eq!(failed(&chained), 0, "the chain: {chained:#}");
    assert_eq!(bare["versions"]["served"], json!([1, 2]));
    assert_eq!(chained["versions"], bare["versions"]);
    let told = |report: &Value| -> Vec<(String, String)> {
        let inconclusive = |id: &str| {
            [report, &bare, &chained].iter().any(|r| {
                r["checks"].as_array().unwrap().iter().any(|c| c["id"] == id && c["inconclusive"] == json!(true))
            })
        };
        verdicts(report).into_iter().filter(|(id, _)| !inconclusive(id)).collect()
    };
    assert_eq!(told(&chained), told(&bare), "check by check; the chain's report: {chained:#}");
    assert!(told(&bare).len() >= verdicts(&bare).len() - 4, "most checks could tell: {chained:#}");
    assert_eq!(chain_code, bare_code);
    // The agent's own initialize answers come through the chain.
    assert_eq!(chained["agent"]["agent_info"], bare["agent"]["agent_info"]);
    assert_eq!(chained["agent_v2"]["info"], bare["agent_v2"]["info"]);
    assert_eq!(detail(&chained, "fs-calls-well-formed"), detail(&bare, "fs-calls-well-formed"));
}

#[test]
fn a_hand_rolled_agent_conforms() {
    let (code, report) = check_protocol("auto", &[env!("CARGO_BIN_EXE_acp-check-agent-ok")], 20_000);
    assert_eq!(failures(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(code, 0);
    // A v1-only agent: v1 only, no v2 check at all.
    assert_eq!(report["versions"]["served"], json!([1]));
    assert!(report["checks"].as_array().unwrap().iter().all(|c| c["protocol"] == 1));
    assert_eq!(detail(&report, "version-negotiation"), "asked for 65535, the agent answered 1");
    assert_eq!(
        detail(&report, "turn-updates-before-answer"),
        "no message, thought, tool call or plan update after the answer, in 2 turn(s)"
    );
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

    // With --json, the error is a JSON report too.
    let output = Command::new(CHECK).args(["--json", "--", "/nonexistent/acp-agent"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let report: Value = serde_json::from_slice(&output.stdout).expect("a JSON report");
    assert!(report["error"].as_str().unwrap().contains("cannot start `/nonexistent/acp-agent`"), "{report}");

    for protocol in ["1", "2"] {
        let output =
            Command::new(CHECK).args(["--protocol", protocol, "--", "/nonexistent/acp-agent"]).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "--protocol {protocol}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("cannot start"), "--protocol {protocol}");
    }
    let output = Command::new(CHECK).args(["--protocol", "3", "--", FLAWED]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--protocol: \"3\" is not 1, 2 or auto"));
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

#[test]
fn a_turn_answered_before_the_cancel_is_inconclusive_not_a_failure() {
    // The agent writes its one update and `end_turn` together: acp-check's cancel, sent on the
    // update, can only cross the answer.
    let (code, report) = check_flawed(&["quick-turn"]);
    let cancel = find(&report, "cancel");
    assert_eq!(cancel["status"], "warn", "{cancel}");
    let detail = cancel["detail"].as_str().unwrap();
    assert!(detail.starts_with("inconclusive: the turn answered `end_turn` before session/cancel reached"), "{detail}");
    assert_eq!(cancel["inconclusive"], true);
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
    assert_eq!(code, 0);
    // The summary does not claim the cancel MUST was verified.
    assert_eq!(report["summary"]["inconclusive"], 1);
    assert_eq!(
        report["summary"]["verdict"],
        "every MUST that could be checked holds (MUST checks not verified: 1 inconclusive)"
    );
    let output = Command::new(CHECK).args(["--protocol", "1", "--", FLAWED, "quick-turn"]).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    let summary = text.lines().last().unwrap();
    assert!(
        summary.ends_with(
            "1 warning(s), 0 skipped: every MUST that could be checked holds (MUST checks not verified: 1 inconclusive)"
        ),
        "{text}"
    );
}

#[test]
fn a_quiet_turn_that_ignores_the_cancel_fails() {
    // No update at all, `end_turn` 600 ms after the prompt: the cancel goes out well before.
    let (code, report) = check_flawed(&["quiet-turn", "ignore-cancel"]);
    assert_eq!(code, 1, "{report:#}");
    let cancel = find(&report, "cancel");
    assert_eq!((&cancel["status"], &cancel["inconclusive"]), (&"fail".into(), &false.into()), "{cancel}");
    let detail = cancel["detail"].as_str().unwrap();
    assert!(
        detail.contains("stopReason `end_turn`") && detail.contains("ms after session/cancel was written"),
        "{detail}"
    );
    // A quiet turn also does not stream (a SHOULD); no other rule is broken.
    let streams = find(&report, "prompt-streams-updates");
    assert_eq!((&streams["status"], &streams["level"]), (&"warn".into(), &"SHOULD".into()), "{streams}");
    assert_eq!(failures(&report).len(), 2, "{:#?}", failures(&report));

    // The same quiet turn, honouring the cancel, passes it.
    let (code, report) = check_flawed(&["quiet-turn"]);
    assert_eq!(find(&report, "cancel")["status"], "pass", "{report:#}");
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
    assert_eq!(code, 0);
}

#[test]
fn an_agent_that_crashes_on_a_malformed_line_fails() {
    let (code, report) = check_flawed(&["crash-on-malformed"]);
    assert_eq!(code, 1, "{report:#}");
    let survives = find(&report, "malformed-line-survives");
    assert_eq!(survives["status"], "fail", "{survives}");
    let detail = survives["detail"].as_str().unwrap();
    assert!(detail.contains("exited with status 71"), "{detail}");
    assert_eq!(failures(&report).len(), 2, "and no -32700 answer: {:#?}", failures(&report));
}

#[test]
fn a_parse_error_answered_without_an_id_is_reported_as_such() {
    let (code, report) = check_flawed(&["idless-parse-error"]);
    let answer = find(&report, "malformed-line-answer");
    assert_eq!((&answer["status"], &answer["level"]), (&"warn".into(), &"SHOULD".into()), "{answer}");
    let said = answer["detail"].as_str().unwrap();
    assert!(said.starts_with("answered -32700 without an `id` member"), "{said}");
    // Not a valid JSON-RPC message either, which is a MUST of the stdio transport.
    let stdout = detail(&report, "stdout-json-only");
    assert!(
        stdout.contains("the first: \"a response without an `id` member: {") && stdout.contains("-32700"),
        "{stdout}"
    );
    assert_eq!(code, 1);
    assert_eq!(failures(&report).len(), 2, "{:#?}", failures(&report));
}

#[test]
fn an_agent_that_answers_notifications_fails() {
    let (code, report) = check_flawed(&["answers-notifications"]);
    assert_eq!(code, 1, "{report:#}");
    let notifications = find(&report, "notifications-unanswered");
    assert_eq!((&notifications["status"], &notifications["level"]), (&"fail".into(), &"MUST".into()));
    let said = notifications["detail"].as_str().unwrap();
    // The extension check's `_acp_check/notice` comes first; the notifications' own process
    // adds the unknown session's cancel, `_acp_check/notice` and `acp_check/notice`.
    assert!(said.contains("4 response(s) that answer no request"), "{said}");
    assert!(said.contains(r#"the first: {"jsonrpc":"2.0","id":null,"error":{"code":-32601"#), "{said}");
    assert!(said.contains("read after the notification `_acp_check/notice`"), "{said}");
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
}

#[test]
fn an_agent_that_accepts_invalid_params_fails() {
    let (code, report) = check_flawed(&["lenient-params"]);
    assert_eq!(code, 1, "{report:#}");
    let invalid = find(&report, "invalid-params");
    assert_eq!((&invalid["status"], &invalid["level"]), (&"fail".into(), &"MUST".into()), "{invalid}");
    let said = invalid["detail"].as_str().unwrap();
    assert!(said.starts_with("session/new without cwd: a result ({\"sessionId\":"), "{said}");
    assert!(said.contains("; session/prompt with a string prompt: a result ({\"stopReason\""), "{said}");
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
}

#[test]
fn an_agent_that_prompts_a_session_it_never_created_is_warned_about_not_failed() {
    // No MUST asks for the error: session-setup.mdx only lets an agent answer one (a MAY, for
    // session/close). A SHOULD, then, whose detail says what the spec says.
    let (code, report) = check_flawed(&["any-session"]);
    assert_eq!(code, 0, "{report:#}");
    let unknown = find(&report, "unknown-session");
    assert_eq!((&unknown["status"], &unknown["level"]), (&"warn".into(), &"SHOULD".into()), "{unknown}");
    let said = unknown["detail"].as_str().unwrap();
    assert!(said.starts_with("session/prompt for a session never created: a result ("), "{said}");
    assert!(
        said.ends_with(
            "instead of an error (the spec does not require one: it only says, for session/close, that an agent MAY \
             answer an error for a session that does not exist)"
        ),
        "{said}"
    );
    assert!(unknown["rule"].as_str().unwrap().contains("(no MUST: session-setup.mdx"), "{unknown}");
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
    assert_eq!(report["summary"]["verdict"], "every MUST holds");
}

#[test]
fn an_agent_that_outlives_its_stdin_is_warned_about() {
    let (code, report) = check_flawed(&["stays-after-eof"]);
    let exits = find(&report, "exits-on-stdin-close");
    assert_eq!((&exits["status"], &exits["level"]), (&"warn".into(), &"SHOULD".into()), "{exits}");
    assert_eq!(exits["detail"], "still running 3000 ms after its stdin was closed (acp-check then terminated it)");
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
    assert_eq!(code, 0);
}

#[test]
fn an_agent_that_uses_the_clients_files_and_terminals_well_conforms() {
    let (code, report) = check_flawed(&["uses-client"]);
    assert_eq!(failures(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(code, 0);
    // Offered everything, it reads, writes and runs a command; offered reads only, it reads.
    assert_eq!(
        detail(&report, "fs-calls-well-formed"),
        "3 call(s), all well-formed: fs/read_text_file ×2, fs/write_text_file ×1"
    );
    assert_eq!(
        detail(&report, "terminal-calls-well-formed"),
        "4 call(s), all well-formed: terminal/create ×1, terminal/wait_for_exit ×1, terminal/output ×1, \
         terminal/release ×1"
    );
    assert_eq!(detail(&report, "terminal-released"), "1 terminal(s), each released before its turn ended");
    assert_eq!(
        detail(&report, "client-capabilities-respected"),
        "7 fs/* or terminal/* request(s), each with its capability advertised"
    );
}

#[test]
fn an_agent_that_writes_with_only_reads_offered_fails() {
    let (code, report) = check_flawed(&["writes-without-capability"]);
    assert_eq!(code, 1, "{report:#}");
    let calls = find(&report, "client-capabilities-respected");
    assert_eq!(calls["status"], "fail", "{calls}");
    assert_eq!(
        calls["detail"],
        "1 request(s) to methods whose capability the client did not advertise; the first: fs/write_text_file (the \
         client advertised: fs.readTextFile)"
    );
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
}

#[test]
fn an_agent_that_reads_a_relative_path_fails() {
    let (code, report) = check_flawed(&["relative-path"]);
    assert_eq!(code, 1, "{report:#}");
    let calls = find(&report, "fs-calls-well-formed");
    assert_eq!((&calls["status"], &calls["level"]), (&"fail".into(), &"MUST".into()), "{calls}");
    assert_eq!(
        calls["detail"],
        "2 of 3 call(s) malformed; the first: fs/read_text_file: \"acp-check.txt\" is not an absolute path"
    );
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
}

#[test]
fn a_read_outside_the_sessions_directory_is_refused_and_reported() {
    let (code, report) = check_flawed(&["reads-outside-root"]);
    let root = find(&report, "fs-within-session-root");
    assert_eq!((&root["status"], &root["level"]), (&"warn".into(), &"SHOULD".into()), "{root}");
    let said = root["detail"].as_str().unwrap();
    assert!(said.starts_with("2 call(s) refused; the first: fs/read_text_file: /"), "{said}");
    assert!(said.ends_with("/../acp-check-outside.txt is outside the session's directory"), "{said}");
    // The refused read is well-formed: nothing else is wrong.
    assert_eq!(find(&report, "fs-calls-well-formed")["status"], "pass");
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
    assert_eq!(code, 0);
}

#[test]
fn terminals_must_be_released_and_not_used_afterwards() {
    let (code, report) = check_flawed(&["keeps-terminal"]);
    let released = find(&report, "terminal-released");
    assert_eq!((&released["status"], &released["level"]), (&"warn".into(), &"SHOULD".into()), "{released}");
    assert_eq!(released["detail"], "1 of 1 terminal(s) not released in time: acp_check_term_1 was never released");
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
    assert_eq!(code, 0);

    let (code, report) = check_flawed(&["uses-released-terminal"]);
    assert_eq!(code, 1, "{report:#}");
    let calls = find(&report, "terminal-calls-well-formed");
    assert_eq!((&calls["status"], &calls["level"]), (&"fail".into(), &"MUST".into()), "{calls}");
    assert_eq!(
        calls["detail"],
        "1 of 5 call(s) malformed; the first: terminal/output: terminal \"acp_check_term_1\" was already released"
    );
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
}

#[test]
fn wrongly_typed_update_fields_fail_the_shape_check() {
    for (flaw, path) in [
        ("bad-update=kind", "params.update.kind: 42"),
        ("bad-update=content", "params.update.content: \"not an array\""),
        ("bad-update=entries", "params.update.entries: \"nope\""),
    ] {
        let (code, report) = check_flawed(&[flaw]);
        let shape = find(&report, "session-update-shape");
        assert_eq!(shape["status"], "fail", "{flaw}: {shape}");
        assert!(shape["detail"].as_str().unwrap().contains(path), "{flaw}: {shape}");
        assert_eq!(code, 1);
        assert_eq!(failures(&report).len(), 1, "{flaw}: {:#?}", failures(&report));
    }
}

#[test]
fn an_agent_that_requires_authentication_is_skipped_not_failed() {
    let (code, report) = check_flawed(&["requires-auth"]);
    assert_eq!(code, 0, "{:#?}", failures(&report));
    for id in ["session-new", "prompt-turn", "session-update-shape", "cancel", "turn-updates-before-answer"] {
        let check = find(&report, id);
        assert_eq!(check["status"], "skip", "{check}");
        let detail = check["detail"].as_str().unwrap();
        assert!(detail.contains("requires authentication") && detail.contains("authMethods: login"), "{detail}");
    }
    // What needs no session is still checked.
    for id in ["initialize", "unknown-method", "malformed-line-survives", "extension-method", "capability-session-list"]
    {
        assert_eq!(find(&report, id)["status"], "pass", "{id}: {}", find(&report, id));
    }
    // Nor are the client's methods exercised: no turn ran in which they were offered.
    let calls = find(&report, "fs-calls-well-formed");
    assert_eq!(calls["status"], "skip", "{calls}");
    assert!(calls["detail"].as_str().unwrap().starts_with("no turn ran with the client offering fs and terminal: "));
    let verdict = report["summary"]["verdict"].as_str().unwrap();
    assert!(verdict.starts_with("every MUST that could be checked holds (MUST checks not verified: "), "{verdict}");
    assert!(verdict.ends_with(" skipped)") && !verdict.contains("inconclusive"), "{verdict}");
}

#[test]
fn an_agent_that_requires_authentication_without_listing_a_method_is_skipped_too() {
    // A method list depends on what the client can run (a `terminal` method is offered only to
    // a client advertising `auth.terminal`): an empty one does not make auth_required a lie.
    let (code, report) = check_flawed(&["requires-auth", "no-auth-methods"]);
    assert_eq!(code, 0, "{:#?}", failures(&report));
    let new = find(&report, "session-new");
    assert_eq!(new["status"], "skip", "{new}");
    assert_eq!(
        new["detail"],
        "the agent requires authentication (session/new answered auth_required, -32000; no authMethods offered to \
         this client); acp-check does not authenticate"
    );
    assert_eq!(report["auth_required"], json!([{"protocol": 1, "method": "session/new", "authMethods": []}]));
}

#[test]
fn a_prompt_that_requires_authentication_skips_the_turn_checks_instead_of_failing_them() {
    // As `@agentclientprotocol/claude-agent-acp` does without a login: a session, then
    // auth_required for every prompt.
    let (code, report) = check_flawed(&["prompt-requires-auth"]);
    assert_eq!(code, 0, "{:#?}", failures(&report));
    assert_eq!(find(&report, "session-new")["status"], "pass");
    for id in ["prompt-turn", "prompt-streams-updates", "cancel", "turn-updates-before-answer"] {
        let check = find(&report, id);
        assert_eq!(check["status"], "skip", "{check}");
        let detail = check["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("the agent requires authentication (session/prompt answered auth_required"),
            "{detail}"
        );
    }
    // What the session sent is judged all the same.
    assert_eq!(find(&report, "session-update-shape")["status"], "pass");
    // The session's other checks ran: they need no turn.
    for id in ["invalid-params", "unknown-session", "capability-load-session", "notifications-unanswered"] {
        assert_eq!(find(&report, id)["status"], "pass", "{id}: {}", find(&report, id));
    }
    // The client runs stopped at the same place, said once.
    let calls = detail(&report, "fs-calls-well-formed");
    assert_eq!(
        calls,
        "no turn ran with the client offering fs and terminal: the agent requires authentication (session/prompt \
         answered auth_required, -32000; no authMethods offered to this client); acp-check does not authenticate"
    );
    assert_eq!(report["auth_required"], json!([{"protocol": 1, "method": "session/prompt", "authMethods": []}]));
}

#[test]
fn a_turn_that_fails_with_an_error_is_inconclusive_not_a_failure() {
    // As `opencode acp` answers when its model's API cannot be reached: -32603 for the prompt.
    // JSON-RPC lets any request fail; no turn ran, so the turn's MUSTs could not be seen.
    let (code, report) = check_flawed(&["prompt-error"]);
    assert_eq!(code, 0, "{:#?}", failures(&report));
    let turn = find(&report, "prompt-turn");
    assert_eq!((&turn["status"], turn["inconclusive"].as_bool()), (&json!("warn"), Some(true)), "{turn}");
    let said = turn["detail"].as_str().unwrap();
    assert!(
        said.starts_with("inconclusive: the turn could not run (session/prompt got error -32603 (Internal error: Cannot connect to API"),
        "{said}"
    );
    assert_eq!(find(&report, "prompt-streams-updates")["status"], "skip");
    let cancel = find(&report, "cancel");
    assert_eq!((&cancel["status"], cancel["inconclusive"].as_bool()), (&json!("warn"), Some(true)), "{cancel}");
    assert!(cancel["detail"].as_str().unwrap().contains("ended before session/cancel was written"), "{cancel}");
    let verdict = report["summary"]["verdict"].as_str().unwrap();
    assert!(verdict.contains("2 inconclusive"), "{verdict}");
    assert_eq!(report["auth_required"], json!([]));
}

#[test]
fn an_agent_that_calls_fs_without_the_capability_fails() {
    // It reads /etc/hostname in every turn, whatever the client advertised.
    let (code, report) = check_flawed(&["reads-files"]);
    assert_eq!(code, 1, "{report:#}");
    let calls = find(&report, "client-capabilities-respected");
    assert_eq!(calls["status"], "fail", "{calls}");
    assert_eq!(calls["level"], "MUST");
    let said = calls["detail"].as_str().unwrap();
    assert!(said.contains("the first: fs/read_text_file (the client advertised: nothing)"), "{said}");
    // Where the client offers reads, the read is refused: it is outside the session's directory.
    let root = find(&report, "fs-within-session-root");
    assert_eq!((&root["status"], &root["level"]), (&"warn".into(), &"SHOULD".into()), "{root}");
    assert!(root["detail"].as_str().unwrap().contains("/etc/hostname is outside the session's directory"), "{root}");
    assert_eq!(failures(&report).len(), 2, "{:#?}", failures(&report));
}

#[test]
fn a_non_utf8_line_is_reported_and_the_session_goes_on() {
    let (code, report) = check_flawed(&["non-utf8-line"]);
    assert_eq!(code, 1, "{report:#}");
    let stdout = find(&report, "stdout-json-only");
    assert_eq!(stdout["status"], "fail", "{stdout}");
    assert!(stdout["detail"].as_str().unwrap().contains("not UTF-8"), "{stdout}");
    assert_eq!(failures(&report).len(), 1, "only stdout-json-only: {:#?}", failures(&report));
}

#[test]
fn an_endless_line_is_cut_and_reported_even_though_initialize_fails() {
    let (code, report) = check_with(&[FLAWED, "endless-line"], 2_000);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(find(&report, "initialize")["status"], "fail");
    let stdout = find(&report, "stdout-json-only");
    assert_eq!(stdout["status"], "fail", "{stdout}");
    let detail = stdout["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("a line of {} bytes, over the limit", 80 << 20)), "{detail}");
}

#[test]
fn a_json_log_line_on_stdout_is_not_json_rpc() {
    let (code, report) = check_flawed(&["json-log-line"]);
    assert_eq!(code, 1, "{report:#}");
    let detail = detail(&report, "stdout-json-only");
    assert!(detail.contains("not a JSON-RPC 2.0 message") && detail.contains("level"), "{detail}");
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
    // One line at startup, printed by every process acp-check started: one line, not one per
    // process.
    let rest = detail.strip_prefix("1 distinct line that is not JSON-RPC (").expect(detail);
    let (total, rest) = rest.split_once(" in all), printed by each of the ").expect(detail);
    let (processes, rest) = rest.split_once(" agent processes started; ").expect(detail);
    assert_eq!(total, processes, "{detail}");
    assert!(processes.parse::<usize>().unwrap() > 5, "{detail}");
    assert!(rest.starts_with("the first: \"not a JSON-RPC 2.0 message: {\\\"level\\\":30"), "{detail}");
}

#[test]
fn updates_sent_before_the_prompt_do_not_count_as_streaming() {
    let (code, report) = check_flawed(&["update-before-prompt"]);
    assert_eq!(code, 0, "{:#?}", failures(&report));
    let streams = find(&report, "prompt-streams-updates");
    assert_eq!(streams["status"], "warn", "{streams}");
    assert!(streams["detail"].as_str().unwrap().contains("no session/update during the turn"), "{streams}");
    // The update itself is well-formed.
    assert_eq!(find(&report, "session-update-shape")["status"], "pass");
}

#[test]
fn an_agent_that_speaks_only_version_2_is_not_a_must_failure() {
    let (code, report) = check_flawed(&["version-2"]);
    assert_eq!(code, 0, "{:#?}", failures(&report));
    let version = find(&report, "protocol-version");
    assert_eq!(version["status"], "warn", "{version}");
    assert!(version["detail"].as_str().unwrap().contains("does not support version 1"), "{version}");
    assert_eq!(find(&report, "session-new")["status"], "skip");
    assert_eq!(find(&report, "version-negotiation")["status"], "skip");
    assert_eq!(find(&report, "stdout-json-only")["status"], "pass");
}

#[test]
fn an_agent_that_echoes_an_unsupported_protocol_version_fails() {
    let (code, report) = check_flawed(&["echo-version"]);
    assert_eq!(code, 1, "{report:#}");
    let version = find(&report, "version-negotiation");
    assert_eq!((&version["status"], &version["level"]), (&"fail".into(), &"MUST".into()), "{version}");
    let detail = version["detail"].as_str().unwrap();
    assert!(detail.contains("asked for 65535") && detail.contains("answered 65535: it echoes"), "{detail}");
    // Asked for version 1, it answers 1: the handshake itself is fine.
    assert_eq!(find(&report, "protocol-version")["status"], "pass");
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
}

#[test]
fn an_agent_that_answers_an_unsupported_protocol_version_with_an_error_fails() {
    let (code, report) = check_flawed(&["reject-version"]);
    assert_eq!(code, 1, "{report:#}");
    let version = find(&report, "version-negotiation");
    assert_eq!(version["status"], "fail", "{version}");
    let detail = version["detail"].as_str().unwrap();
    assert!(detail.contains("error -32602 (Unsupported protocol version) instead of the latest version"), "{detail}");
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));
}

#[test]
fn a_turn_update_after_the_answer_fails() {
    let (code, report) = check_flawed(&["late-update"]);
    assert_eq!(code, 1, "{report:#}");
    let order = find(&report, "turn-updates-before-answer");
    assert_eq!((&order["status"], &order["level"]), (&"fail".into(), &"MUST".into()), "{order}");
    let detail = order["detail"].as_str().unwrap();
    // One after each of the two turns; the second turn's (the cancelled one) is read whenever
    // it comes, as nothing follows it.
    assert!(detail.contains("`agent_message_chunk` after the answer to session/prompt #"), "{detail}");
    assert_eq!(failures(&report).len(), 1, "{:#?}", failures(&report));

    // A session's commands may change at any time: not a turn's output.
    let (code, report) = check_flawed(&["late-update=commands"]);
    assert_eq!(failures(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(code, 0);
}

/// SIGINT during a run: acp-check stops the agent (which would outlive its stdin by a
/// minute), removes the scratch directory and exits 130.
#[cfg(unix)]
#[test]
fn an_interrupted_run_stops_the_agent_and_cleans_up() {
    let tmp = TempDir::new("interrupted");
    let mut child = Command::new(CHECK)
        .args(["-v", "--protocol", "1", "--", FLAWED, "linger"])
        .env("TMPDIR", &tmp.0)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The agent's stderr (-v) says who it is and where its session is; it then leaves the
    // prompt unanswered, so acp-check waits (10 s by default) when the signal comes.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let (mut pid, mut cwd) = (None, None);
    let mut line = String::new();
    while pid.is_none() || cwd.is_none() {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "acp-check ended early");
        if let Some(p) = line.trim().strip_prefix("raw-test-agent: pid ") {
            pid = Some(p.to_owned());
        } else if let Some(c) = line.trim().strip_prefix("raw-test-agent: cwd ") {
            cwd = Some(PathBuf::from(c));
        }
    }
    let (pid, cwd) = (pid.unwrap(), cwd.unwrap());
    assert!(cwd.starts_with(&tmp.0) && cwd.is_dir(), "{cwd:?}");

    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let status = child.wait().unwrap();
    let agent_alive = Command::new("kill").args(["-0", &pid]).stderr(Stdio::null()).status().unwrap().success();
    if agent_alive {
        // (Before reading the rest of stderr: the agent holds it open.)
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
    }
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(rest.contains("interrupted by SIGINT"), "{rest}");
    assert!(!agent_alive, "the agent {pid} still runs");
    assert!(!cwd.exists(), "the scratch directory {cwd:?} is left behind");
}

// ---- protocol v2 ------------------------------------------------------------------------------

/// The ids of the v2 checks in a report, with their status.
fn v2_checks(report: &Value) -> Vec<(String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["protocol"] == 2)
        .map(|c| (c["id"].as_str().unwrap().to_owned(), c["status"].as_str().unwrap().to_owned()))
        .collect()
}

/// acp-check `--protocol 2` against the hand-rolled v2 agent with the flaws named.
fn check_v2_flawed(flaws: &[&str], timeout_ms: u64) -> (i32, Value) {
    check_protocol("2", &[&[V2_FLAWED], flaws].concat(), timeout_ms)
}

#[test]
fn auto_mode_finds_both_versions_of_a_dual_agent_and_checks_each() {
    // The runtime's demo agent serves both versions by default.
    let agent = env!("CARGO_BIN_EXE_acp-check-example-agent");
    let (_, report) = check_protocol("auto", &[agent], 20_000);
    assert_eq!(report["versions"]["served"], json!([1, 2]), "{}", report["versions"]);
    assert_eq!(report["versions"]["probes"], json!([{"asked": 2, "answered": 2}, {"asked": 1, "answered": 1}]));
    // Both suites ran, v1's first, each check tagged with its version.
    let checks = report["checks"].as_array().unwrap();
    assert_eq!((&checks[0]["id"], &checks[0]["protocol"]), (&json!("initialize"), &json!(1)));
    assert_eq!(find(&report, "protocol-version")["status"], "pass");
    // With v2's fields beside v1's, the probe for a version nobody supports gets v2's answer.
    assert_eq!(detail(&report, "version-negotiation"), "asked for 65535, the agent answered 2");
    let v2 = v2_checks(&report);
    assert_eq!(v2.len(), 29, "{v2:?}");
    let work_skipped = |id: &str, status: &str| status == "skip" && WORK_CHECKS.contains(&id);
    let not_passed: Vec<_> = v2.iter().filter(|(id, status)| status != "pass" && !work_skipped(id, status)).collect();
    assert!(not_passed.is_empty(), "{not_passed:?}\n{report:#}");
    assert_eq!(report["agent_v2"]["info"]["name"], "acp-demo-agent");
    // The runtime's turn asks permission: pending at the cancel (unless a loaded machine kept the
    // turn from getting there within 500 ms), it is answered `cancelled`, and the runtime sends
    // `$/cancel_request` for it.
    let permission = detail(&report, "v2-cancel-permission");
    if permission.starts_with("1 permission request(s) pending at the cancel") {
        assert!(permission.ends_with("the agent sent $/cancel_request for 1"), "{permission}");
    } else {
        assert_eq!(permission, "no permission request was pending at the cancel (nothing to check)");
    }
}

#[test]
fn conforming_v2_agents_pass_the_v2_checks() {
    // The runtime's demo agent serving v2 only, the same agent's v1 side through the v2 bridge
    // (`acp_rpc::v2_bridge`), and the hand-rolled one.
    let demo = env!("CARGO_BIN_EXE_acp-check-example-agent");
    for agent in [&[demo, "--v2-only"][..], &[demo, "--bridged"], &[V2_FLAWED]] {
        let (code, report) = check_protocol("2", agent, 20_000);
        assert_eq!(failures_but_work_skipped(&report), Vec::<String>::new(), "{report:#}");
        assert_eq!(code, 0);
        assert_eq!(report["versions"]["served"], json!([2]));
        assert_eq!(v2_checks(&report).len(), report["checks"].as_array().unwrap().len(), "only v2 checks");
        assert_eq!(detail(&report, "v2-batch"), "both requests answered, together in one array");
        assert_eq!(detail(&report, "v2-batch-empty"), "a single -32600 error with a null id");
        assert!(detail(&report, "v2-cancel-request").starts_with("session/list, cancelled at once, was answered"));
        let cancel = detail(&report, "v2-cancel");
        assert!(
            cancel.starts_with("idle with stopReason `cancelled` ") && cancel.ends_with(" after session/cancel"),
            "{cancel}"
        );
        let close = detail(&report, "v2-close-cancels");
        assert!(close.ends_with("after session/close; the close answered"), "{close}");
    }
}

#[test]
fn the_demo_agents_cancellable_work_passes_the_cancel_checks() {
    let demo = env!("CARGO_BIN_EXE_acp-check-example-agent");
    let prompts = ["--work-prompt", "/slow", "--work-prompt", "/ticker"];
    let (code, report) = check_protocol_with("2", &prompts, &[demo, "--v2-only"], 20_000);
    assert_eq!(failures_but_work_skipped(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(code, 0);
    for id in ["v2-tool-call-cancel", "v2-terminal-cancel", "v2-cancel-capability-withdrawn"] {
        assert_eq!(find(&report, id)["status"], "pass", "{id}: {}", find(&report, id));
    }
    let call = detail(&report, "v2-tool-call-cancel");
    assert!(
        call.starts_with("-32602 for an unknown id; tool call ") && call.contains("status \"cancelled\""),
        "{call}"
    );
    assert!(call.ends_with("the turn went on to `end_turn`"), "{call}");
    let terminal = detail(&report, "v2-terminal-cancel");
    assert!(terminal.contains("then exitStatus {\"signal\":\"SIGTERM\"}"), "{terminal}");
    // The demo reports no background work: judged only when reported.
    assert_eq!(find(&report, "v2-background-work")["status"], "skip");

    // Without --work-prompt, the cancel checks are skipped, never passed.
    let (_, report) = check_protocol("2", &[demo, "--v2-only"], 20_000);
    for id in ["v2-tool-call-cancel", "v2-terminal-cancel", "v2-cancel-capability-withdrawn"] {
        assert_eq!(find(&report, id)["status"], "skip", "{id}");
    }
    assert!(detail(&report, "v2-tool-call-cancel").starts_with("no --work-prompt was given"));
}

#[test]
fn cancellable_and_background_work_of_the_hand_rolled_agent() {
    let work = ["--work-prompt", "/work"];
    let (code, report) = check_protocol_with("2", &work, &[V2_FLAWED], 20_000);
    assert_eq!(failures_but_work_skipped(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(code, 0);
    assert_eq!(find(&report, "v2-tool-call-cancel")["status"], "pass");
    assert_eq!(detail(&report, "v2-terminal-cancel"), "the --work-prompt turns offered no cancellable terminal");
    assert_eq!(find(&report, "v2-cancel-capability-withdrawn")["status"], "pass");
    let background = detail(&report, "v2-background-work");
    assert!(background.ends_with("background snapshot(s), each complete and consistent"), "{background}");

    let flawed = [V2_FLAWED, "cancel-unknown-ok", "keep-cancel-capability", "background-unannounced"];
    let (code, report) = check_protocol_with("2", &work, &flawed, 20_000);
    assert_eq!(code, 1, "{report:#}");
    let call = find(&report, "v2-tool-call-cancel");
    assert_eq!(call["status"], "fail");
    assert!(
        call["detail"].as_str().unwrap().starts_with("tool_call/cancel of an id the agent never made got a result")
    );
    let kept = find(&report, "v2-cancel-capability-withdrawn");
    assert_eq!((&kept["status"], &kept["level"]), (&json!("warn"), &json!("SHOULD")), "{kept}");
    assert!(kept["detail"].as_str().unwrap().contains("still advertises capabilities.cancel"), "{kept}");
    let background = detail(&report, "v2-background-work");
    assert!(background.contains("never announced before"), "{background}");

    let (code, report) = check_protocol_with("2", &work, &[V2_FLAWED, "cancel-ignored"], 2_000);
    assert_eq!(code, 1, "{report:#}");
    let call = detail(&report, "v2-tool-call-cancel");
    assert!(call.contains("was answered, but no tool_call_update reported a final status"), "{call}");

    let (code, report) =
        check_protocol_with("2", &work, &[V2_FLAWED, "cancel-ends-turn", "background-omitted"], 20_000);
    assert_eq!(code, 1, "{report:#}");
    let call = detail(&report, "v2-tool-call-cancel");
    assert!(call.contains("ended the turn `cancelled`"), "{call}");
    let background = detail(&report, "v2-background-work");
    assert!(background.contains("a state_update without `background` after one with it"), "{background}");
}

#[test]
fn v2_checks_of_a_v1_only_agent_fail_on_the_version_and_skip_the_rest() {
    let (code, report) = check_protocol("2", &[env!("CARGO_BIN_EXE_acp-check-agent-ok")], 20_000);
    assert_eq!(code, 1, "{report:#}");
    let serves = find(&report, "serves-v2");
    assert_eq!((&serves["status"], &serves["level"]), (&json!("fail"), &json!("MUST")));
    assert_eq!(serves["detail"], "asked for protocol version 2, the agent answered 1: it does not serve v2");
    assert_eq!(failures(&report).len(), 29, "{:#?}", failures(&report));
    assert!(report["checks"].as_array().unwrap().iter().skip(1).all(|c| c["status"] == "skip"));
    assert_eq!(report["versions"]["served"], json!([1]));

    let output =
        Command::new(CHECK).args(["--protocol", "2", "--", env!("CARGO_BIN_EXE_acp-check-agent-ok")]).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("protocol versions served: 1 (asked for 2: answered 1)"), "{text}");
    assert!(text.contains("FAIL  MUST    serves-v2"), "{text}");
    assert!(text.contains("SKIP  SHOULD  v2-batch "), "{text}");
}

#[test]
fn v1_capabilities_misordered_upserts_and_late_updates_are_caught() {
    let (code, report) = check_v2_flawed(
        &["v1-capabilities", "chunk-before-create", "empty-prompt-result", "update-after-idle"],
        20_000,
    );
    assert_eq!(code, 1, "{report:#}");
    let caps = find(&report, "v2-capabilities");
    assert_eq!((&caps["status"], &caps["level"]), (&json!("fail"), &json!("MUST")), "{caps}");
    let said = caps["detail"].as_str().unwrap();
    assert!(said.starts_with("3 v1-style boolean(s) where v2 has support markers"), "{said}");
    assert!(said.ends_with("`capabilities.session.prompt.image` = true, `capabilities.session.prompt.embeddedContext` = true, `capabilities.loadSession` = true"), "{said}");

    let upserts = find(&report, "v2-upserts");
    assert_eq!((&upserts["status"], &upserts["level"]), (&json!("warn"), &json!("SHOULD")), "{upserts}");
    let said = upserts["detail"].as_str().unwrap();
    assert!(said.contains("the first: a tool_call_content_chunk for tool call \"call_"), "{said}");
    assert!(said.ends_with("before any tool_call_update created it"), "{said}");

    // Required by the schema since the pin moved to npm-sdk-2.4.0 (a SHOULD before).
    let id = find(&report, "v2-prompt-message-id");
    assert_eq!((&id["status"], &id["level"]), (&json!("fail"), &json!("MUST")), "{id}");
    assert!(id["detail"].as_str().unwrap().contains("official SDK clients"), "{id}");

    let late = find(&report, "v2-cancel-updates-before-idle");
    assert_eq!((&late["status"], &late["level"]), (&json!("fail"), &json!("MUST")), "{late}");
    let said = late["detail"].as_str().unwrap();
    assert!(said.starts_with("1 update(s) of the turn after the idle state_update that ended it; the first: `tool_call_update` of tool call"), "{said}");
    assert_eq!(failures_but_work_skipped(&report).len(), 4, "{:#?}", failures(&report));
}

#[test]
fn a_v2_turn_that_ends_for_want_of_a_login_skips_the_cancel_checks() {
    // Sessions without a login, then each turn idle with stopReason `error` and auth_required
    // (-32000), and session/list refused the same way.
    let (code, report) = check_v2_flawed(&["requires-auth"], 20_000);
    assert_eq!(code, 0, "{:#?}", failures(&report));
    for id in ["v2-cancel", "v2-close-cancels", "v2-cancel-request"] {
        let check = find(&report, id);
        assert_eq!(check["status"], "skip", "{check}");
        assert!(check["detail"].as_str().unwrap().starts_with("the agent requires authentication: "), "{check}");
    }
    assert_eq!(
        detail(&report, "v2-cancel"),
        "the agent requires authentication: the turn ended before session/cancel with stopReason `error` and \
         auth_required (-32000); acp-check does not authenticate"
    );
    // `error` is a stop reason of the pinned schema (it was not of v1.7.0's).
    let idle = find(&report, "v2-idle-stop-reason");
    assert_eq!(idle["status"], "pass", "{idle}");
    assert!(idle["detail"].as_str().unwrap().contains("stopReason error"), "{idle}");
    assert_eq!(report["auth_required"], json!([{"protocol": 2, "method": "session/prompt", "authMethods": []}]));
}

#[test]
fn a_v2_agent_that_refuses_batches_fails_the_batch_checks() {
    let (code, report) = check_v2_flawed(&["reject-batches"], 20_000);
    assert_eq!(code, 1, "{report:#}");
    let batch = find(&report, "v2-batch");
    assert_eq!((&batch["status"], &batch["level"]), (&json!("warn"), &json!("SHOULD")), "{batch}");
    let said = batch["detail"].as_str().unwrap();
    assert!(
        said.starts_with(
            "the batch was refused as a whole with {\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600"
        ),
        "{said}"
    );
    // Replying to a batch of notifications breaks a MUST NOT.
    let notifications = find(&report, "v2-batch-notifications");
    assert_eq!((&notifications["status"], &notifications["level"]), (&json!("fail"), &json!("MUST")));
    assert!(notifications["detail"].as_str().unwrap().starts_with("1 answer(s) to a batch of notifications"));
    // An empty batch gets one -32600 either way.
    assert_eq!(find(&report, "v2-batch-empty")["status"], "pass");
    assert_eq!(failures_but_work_skipped(&report).len(), 2, "{:#?}", failures(&report));
}

#[test]
fn a_prompt_answered_at_the_end_of_the_turn_and_an_ignored_cancel_fail() {
    let (code, report) = check_v2_flawed(&["answer-at-end", "ignore-cancel"], 20_000);
    assert_eq!(code, 1, "{report:#}");
    let accepted = find(&report, "v2-prompt-accepted");
    assert_eq!((&accepted["status"], &accepted["level"]), (&json!("fail"), &json!("MUST")), "{accepted}");
    let said = accepted["detail"].as_str().unwrap();
    assert!(said.contains("only after the turn's idle state_update"), "{said}");
    let cancel = find(&report, "v2-cancel");
    assert_eq!(cancel["status"], "fail", "{cancel}");
    let said = cancel["detail"].as_str().unwrap();
    assert!(
        said.starts_with("the turn ended with stopReason `end_turn` ")
            && said.ends_with(" ms after session/cancel was written, not `cancelled`"),
        "{said}"
    );
    assert_eq!(failures_but_work_skipped(&report).len(), 2, "{:#?}", failures(&report));
}

#[test]
fn a_v2_turn_without_an_idle_update_and_a_cancelled_request_never_answered_fail() {
    let (code, report) = check_v2_flawed(&["no-idle-at-end", "silent-on-cancel"], 1_000);
    assert_eq!(code, 1, "{report:#}");
    let idle = find(&report, "v2-idle-stop-reason");
    assert_eq!((&idle["status"], &idle["level"]), (&json!("fail"), &json!("MUST")), "{idle}");
    let said = idle["detail"].as_str().unwrap();
    assert!(said.starts_with("no idle state_update ended the turn within "), "{said}");
    assert!(said.ends_with(" ms of the prompt (states seen: running, requires_action, running)"), "{said}");
    // What follows a turn's idle cannot be judged without one.
    assert_eq!(find(&report, "v2-idle-ends-turn")["status"], "skip");
    let cancelled = find(&report, "v2-cancel-request");
    assert_eq!((&cancelled["status"], &cancelled["level"]), (&json!("fail"), &json!("MUST")), "{cancelled}");
    assert_eq!(
        cancelled["detail"],
        "session/list, cancelled with $/cancel_request, got no answer within 1000 ms: a cancelled request still gets \
         its response"
    );
    assert_eq!(failures_but_work_skipped(&report).len(), 3, "{:#?}", failures(&report));
}

/// The demo agent listening on a free port (feature `http-server`); its URL. Killed on drop.
struct Listening(std::process::Child, String);

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn listening_example_agent() -> Listening {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_acp-check-example-agent"))
        .args(["--listen", "127.0.0.1:0"])
        .env("ACP_DEMO_DELAY_MS", "5")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the example agent");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("LISTENING line");
    let url = line.trim().strip_prefix("LISTENING ").expect("LISTENING <url>").to_owned();
    Listening(child, url)
}

#[test]
fn a_remote_agent_is_checked_over_both_profiles() {
    let agent = listening_example_agent();
    for url in [agent.1.clone(), agent.1.replacen("http://", "ws://", 1)] {
        let output = Command::new(CHECK)
            .args(["--json", "--timeout-ms", "20000", "--url", &url])
            .output()
            .expect("run acp-check");
        let report: Value = serde_json::from_slice(&output.stdout).expect("JSON report");
        assert_eq!(output.status.code(), Some(0), "{url}: {:?}", failures(&report));
        // Both versions are served and checked, as over stdio; only what needs a process is skipped.
        assert_eq!(find(&report, "exits-on-stdin-close")["status"], "skip", "{url}");
        assert_eq!(find(&report, "prompt-turn")["status"], "pass", "{url}");
        assert_eq!(find(&report, "v2-prompt-accepted")["status"], "pass", "{url}");
        let batch = &find(&report, "v2-batch-empty")["status"];
        if url.starts_with("ws://") {
            assert_eq!(batch, "pass", "a WebSocket carries batches");
            assert_eq!(find(&report, "v2-batch")["status"], "pass", "the array answer reaches the checker");
        } else {
            assert_eq!(batch, "skip", "Streamable HTTP carries none");
        }
        // Over HTTP the server answers a line that is no message 400 with -32700, and the
        // client hands that answer over.
        assert_eq!(find(&report, "malformed-line-answer")["status"], "pass", "{url}");
    }
}

#[test]
fn url_usage_errors() {
    let both = Command::new(CHECK).args(["--url", "http://127.0.0.1:9/acp", "--", "agent"]).output().unwrap();
    assert_eq!(both.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&both.stderr).contains("either --url or an agent command"));
}

// ---- slow starts ------------------------------------------------------------------------------

/// `command` behind `acp-check-slow-start`: its first `slow_starts` starts pause `pause_ms`
/// first, counted in a file of `dir`.
fn slow_start<'a>(dir: &'a TempDir, slow_starts: u32, pause_ms: u64, command: &[&'a str]) -> Vec<String> {
    let count = dir.0.join("starts").to_string_lossy().into_owned();
    let mut wrapped = vec![SLOW_START.to_owned(), count, slow_starts.to_string(), pause_ms.to_string(), "--".into()];
    wrapped.extend(command.iter().map(|c| c.to_string()));
    wrapped
}

#[test]
fn version_probes_that_time_out_leave_v2_inconclusive_and_the_run_incomplete() {
    // An agent whose first two starts are slow (a build), so that both probes time out: the v1
    // checks run all the same (the agent is quick by then), but whether it serves v2 is
    // unknown. The v2 checks are listed as inconclusive, the verdict says v2 went unchecked,
    // and the exit status is 3: not "every MUST holds", 0.
    let dir = TempDir::new("slow-probes");
    let agent = slow_start(&dir, 2, 4_000, &[env!("CARGO_BIN_EXE_acp-check-example-agent")]);
    let (code, report) = check_protocol("auto", &agent.iter().map(String::as_str).collect::<Vec<_>>(), 3_000);
    assert_eq!(code, 3, "{report:#}");
    let limit = "no answer within the --timeout-ms limit (3000 ms)";
    assert_eq!(
        report["versions"]["probes"],
        json!([{"asked": 2, "error": limit, "timed_out": true}, {"asked": 1, "error": limit, "timed_out": true}])
    );
    let v1: Vec<_> = report["checks"].as_array().unwrap().iter().filter(|c| c["protocol"] == 1).collect();
    assert!(v1.iter().all(|c| c["status"] != "fail"), "{report:#}");
    assert_eq!(find(&report, "initialize")["status"], "pass");
    let v2 = v2_checks(&report);
    assert_eq!(v2.len(), 29, "every v2 check is listed: {v2:?}");
    for (id, _) in &v2 {
        let check = find(&report, id);
        assert_eq!((&check["status"], &check["inconclusive"]), (&json!("warn"), &json!(true)), "{check}");
        assert_eq!(
            check["detail"],
            format!("inconclusive: not checked, as the probe asking for protocol version 2 got {limit}")
        );
    }
    assert_eq!(report["unchecked"][0]["protocol"], 2, "{}", report["unchecked"]);
    let why = report["unchecked"][0]["why"].as_str().unwrap();
    assert!(why.contains(limit) && why.contains("slow to start the first time"), "{why}");
    assert_eq!(report["summary"]["conforms"], true);
    let verdict = report["summary"]["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with(
            "inconclusive: protocol v2 was not checked (no answer in time to the version probe); every MUST that \
             could be checked holds (MUST checks not verified: "
        ),
        "{verdict}"
    );
}

#[test]
fn an_initialize_that_times_out_names_the_limit_and_the_likely_cause() {
    // Text report: the first start (the handshake's) is slow, the rest are not.
    let dir = TempDir::new("slow-initialize");
    let agent = slow_start(&dir, 1, 2_000, &[env!("CARGO_BIN_EXE_acp-check-agent-ok")]);
    let output =
        Command::new(CHECK).args(["--protocol", "1", "--timeout-ms", "1000", "--"]).args(&agent).output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            "initialize got no answer within the --timeout-ms limit (1000 ms); an agent slow to start the first time \
             (built or downloaded on its first run, say) can cause this: run again, or raise --timeout-ms"
        ),
        "{text}"
    );
}

#[test]
fn the_text_report_of_a_remote_agent_names_its_url() {
    let agent = listening_example_agent();
    let output = Command::new(CHECK)
        .args(["--protocol", "2", "--timeout-ms", "20000", "--url", &agent.1])
        .output()
        .expect("run acp-check");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text.lines().next(), Some(format!("acp-check: {}", agent.1).as_str()), "{text}");
    assert_eq!(output.status.code(), Some(0), "{text}");
}
