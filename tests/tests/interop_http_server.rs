//! The remote transport against the official Rust SDK's (`agent-client-protocol-http` 5.0:
//! `tests/interop/rs-http`, built by this test with `cargo build --locked` into
//! `target/tmp/interop-rs-http`), both ways: the demo agent (`runtime/examples/agent.rs`, built
//! here as `acp-example-agent`) listening with `--listen`, driven over Streamable HTTP and over
//! WebSocket by the SDK's `HttpClient`; and the demo client (`--url`) driving the SDK's
//! `AcpHttpServer`.
//!
//! Each run goes through initialize, session/new and a prompt turn with streamed updates and a
//! permission request. Without the peer (a failed build), the test prints why and passes without
//! running, unless `ACP_INTEROP_REQUIRED=1` (as in CI), which makes that a failure.
#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

const DEMO_AGENT: &str = env!("CARGO_BIN_EXE_acp-example-agent");
/// The peer's build, cold: about four minutes on two busy cores.
const BUILD_LIMIT: Duration = Duration::from_secs(20 * 60);
const RUN_LIMIT: Duration = Duration::from_secs(60);

fn required() -> bool {
    std::env::var_os("ACP_INTEROP_REQUIRED").is_some_and(|v| v != "0")
}

/// The Rust peers' binary directory, built once per test process; `None` (or a panic when
/// required) when the build fails.
fn rust_peers() -> Option<PathBuf> {
    static BUILD: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);
    let mut state = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    match state.get_or_insert_with(build_rust_peers) {
        Ok(dir) => Some(dir.clone()),
        Err(why) if required() => panic!("Rust HTTP interop cannot run: {why}"),
        Err(why) => {
            eprintln!("SKIPPED: Rust HTTP interop cannot run: {why} (set ACP_INTEROP_REQUIRED=1 to fail instead)");
            None
        }
    }
}

fn build_rust_peers() -> Result<PathBuf, String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/rs-http/Cargo.toml");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop-rs-http");
    let log_path = target.with_extension("log");
    std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    let mut child = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["build", "--locked", "--bins", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_MANIFEST_DIR")
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start cargo: {e}"))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > BUILD_LIMIT {
            let _ = child.kill();
            return Err(format!("building {} took over {BUILD_LIMIT:?}", manifest.display()));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if !status.success() {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(15).collect();
        return Err(format!(
            "building {} failed: {}",
            manifest.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    Ok(target.join("debug"))
}

/// A process killed when the test is done with it.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The demo agent listening on a free port; its endpoint URL.
fn listening_demo_agent() -> (Running, String) {
    let mut child = Command::new(DEMO_AGENT)
        .args(["--listen", "127.0.0.1:0"])
        .env("ACP_DEMO_DELAY_MS", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the demo agent");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("the agent's LISTENING line");
    let url =
        line.trim().strip_prefix("LISTENING ").unwrap_or_else(|| panic!("unexpected first line {line:?}")).to_owned();
    (Running(child), url)
}

/// Runs the official client against `url`; the messages it received.
fn run_rust_client(peers: &Path, url: &str) -> Vec<Value> {
    let mut child = Command::new(peers.join("client"))
        .arg(url)
        .env("NO_PROXY", "*")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the client");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        assert!(started.elapsed() < RUN_LIMIT, "the official client did not finish in {RUN_LIMIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.lines().any(|l| l == "DONE"),
        "the official client failed against {url}:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.lines().filter_map(|l| l.strip_prefix("GOT ")).map(|m| serde_json::from_str(m).expect("json")).collect()
}

/// The scenario's messages, as the client saw them.
fn check_turn(messages: &[Value], profile: &str) {
    let init = messages.iter().find(|m| m["id"] == 1).unwrap_or_else(|| panic!("{profile}: no initialize answer"));
    assert_eq!(init["result"]["protocolVersion"], 1, "{profile}");
    let session = messages.iter().find(|m| m["id"] == 2).and_then(|m| m["result"]["sessionId"].as_str());
    assert!(session.is_some(), "{profile}: no session id in {messages:?}");
    assert!(messages.iter().any(|m| m["method"] == "session/update"), "{profile}: no update");
    assert!(messages.iter().any(|m| m["method"] == "session/request_permission"), "{profile}: no permission request");
    let done = messages.iter().find(|m| m["id"] == 3 && m.get("method").is_none()).expect("the prompt's answer");
    assert_eq!(done["result"]["stopReason"], "end_turn", "{profile}: {done}");
}

#[test]
fn official_rust_client_drives_our_server_over_http_and_websocket() {
    let Some(peers) = rust_peers() else { return };
    let (_agent, url) = listening_demo_agent();
    check_turn(&run_rust_client(&peers, &url), "Streamable HTTP");
    check_turn(&run_rust_client(&peers, &url.replacen("http://", "ws://", 1)), "WebSocket");
}

/// The official server (`server` of `tests/interop/rs-http`) on a free port; its endpoint.
fn official_rust_server(peers: &Path) -> (Running, String) {
    let mut child = Command::new(peers.join("server"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the official server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("the server's LISTENING line");
    let port =
        line.trim().strip_prefix("LISTENING ").unwrap_or_else(|| panic!("unexpected first line {line:?}")).to_owned();
    (Running(child), format!("http://127.0.0.1:{port}/acp"))
}

#[test]
fn our_client_drives_the_official_rust_server_over_http_and_websocket() {
    let Some(peers) = rust_peers() else { return };
    let (_server, url) = official_rust_server(&peers);
    for url in [url.clone(), url.replacen("http://", "ws://", 1)] {
        let out = Command::new(env!("CARGO_BIN_EXE_acp-example-client"))
            .args(["--policy", "allow", "--prompt", "hi", "--url", &url])
            .output()
            .expect("run the client example");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "client --url {url} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        // The server's agent streams "hello ", asks permission, reports the outcome, ends.
        for expected in ["hello", "permission: \"selected\"", "■ stop reason: end_turn"] {
            assert!(stdout.contains(expected), "{url}: missing {expected:?} in:\n{stdout}");
        }
    }
}
