//! The remote transport's client (`acp_rpc::http::client`) against the official TypeScript
//! SDK's server (npm `@agentclientprotocol/sdk` 2.4.0: `AcpServer` behind its node adapter, with
//! `ws` for WebSocket; `tests/interop/ts-http/server.mjs`), over Streamable HTTP and WebSocket:
//!
//! - a typed client runs initialize, session/new, a prompt turn with updates, a permission
//!   request and an `fs/read_text_file` served over the network, then a turn cancelled while
//!   its permission request is pending; the server's log shows the headers (`Acp-Session-Id` on
//!   the answers to the agent's requests, or the TS server refuses them), the streams opened
//!   before the POSTs that need them, the cookies sent back (a deleted one no longer), and the
//!   closing DELETE;
//! - a session is re-attached on a new connection with `Remote::reconnect` (`session/load`,
//!   history replayed; the session stream opened first; affinity cookies carried over);
//! - the demo client (`--url`) runs its turn over both profiles and both protocol versions;
//! - a wrong endpoint fails `initialize` with the HTTP status and ends the connection;
//! - the other way round, the SDK's own client (`createHttpStream`, `createWebSocketStream`:
//!   `tests/interop/ts-http/client.mjs`) drives our server (the demo agent with `--listen`)
//!   through a turn with a tool call and a permission request.
//!
//! The SDK is installed by `npm ci` into `tests/interop/ts-http/node_modules` when missing.
//! Without node/npm, or when the install fails, the tests print why and pass without running,
//! unless `ACP_INTEROP_REQUIRED=1` (as in CI), which makes that a failure.
#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_rpc::acp_types::{
    CancelNotification, ContentBlock, Error, Implementation, InitializeRequest, LoadSessionRequest, NewSessionRequest,
    PromptRequest, ProtocolVersion, ReadTextFileRequest, ReadTextFileResponse, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome, SessionId, SessionNotification,
    StopReason, TextContent,
};
use acp_rpc::http::client::{CookieJar, Profile, Reattached, Remote};
use acp_rpc::{AgentHandle, ClientContext, acp_client};
use serde_json::Value;
use tokio::sync::Notify;

const CLIENT: &str = env!("CARGO_BIN_EXE_acp-example-client");
const NOTES: &str = "hello from the interop root\nsecond line\n";
/// Upper bound for anything that should happen soon; never used as synchronisation.
const LIMIT: Duration = Duration::from_secs(20);

fn ts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/ts-http")
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
                panic!("TypeScript HTTP interop cannot run: {why}");
            }
            eprintln!(
                "SKIPPED: TypeScript HTTP interop cannot run: {why} (set ACP_INTEROP_REQUIRED=1 to fail instead)"
            );
            None
        }
    }
}

fn install(dir: &Path) -> Result<(), String> {
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => return Err("`node` is not available".into()),
    }
    if dir.join("node_modules/@agentclientprotocol/sdk/package.json").exists()
        && dir.join("node_modules/ws/package.json").exists()
    {
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

// ---- the server -----------------------------------------------------------------------------

/// `server.mjs` on a free port, its stdout collected; killed on drop.
struct Server {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let mut child = Command::new("node")
            .arg(dir.join("server.mjs"))
            .env("PORT", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run node server.mjs");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if let Some(port) = line.strip_prefix("LISTENING ") {
                    let _ = port_tx.send(port.trim().parse::<u16>().unwrap());
                }
                lines.lock().unwrap().push(line);
            }
        });
        let port = port_rx.recv_timeout(LIMIT).expect("server.mjs did not start listening");
        Server { child, port, log }
    }

    fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}/acp", self.port)
    }

    /// The cookie jar's key for this server.
    fn key(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The log's `tag` events (`REQ`, `RES`, `AGENT`), in order.
    fn events(&self, tag: &str) -> Vec<Value> {
        let prefix = format!("{tag} ");
        let log = self.log.lock().unwrap();
        log.iter().filter_map(|l| l.strip_prefix(&prefix)).map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// The whole log, for failure messages.
    fn dump(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits until the log has a line satisfying `seen` (the server logs asynchronously).
    async fn wait_for(&self, what: &str, seen: impl Fn(&str) -> bool) {
        let deadline = tokio::time::Instant::now() + LIMIT;
        while !self.log.lock().unwrap().iter().any(|l| seen(l)) {
            assert!(tokio::time::Instant::now() < deadline, "the server never logged {what}:\n{}", self.dump());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A session root with `notes.txt`; removed on drop.
struct Root(PathBuf);

impl Root {
    fn new(tag: &str) -> Root {
        let dir = std::env::temp_dir().join(format!("acp-interop-http-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("notes.txt"), NOTES).unwrap();
        Root(dir.canonicalize().unwrap())
    }

    fn cwd(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---- the client -----------------------------------------------------------------------------

/// How [`TestClient`] answers permission requests.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Policy {
    Allow,
    /// Wait until the request is cancelled (our `session/cancel` does it), then say so.
    Hold,
}

/// Records what the agent sends (`update <kind> [<status>] [<text>]`, `permission`,
/// `read <path>`) and answers permission requests by its policy.
struct TestClient(Probe);

/// The test's side of a [`TestClient`] that has moved into its connection.
#[derive(Clone, Default)]
struct Probe {
    policy: Arc<Mutex<Option<Policy>>>,
    seen: Arc<Mutex<Vec<String>>>,
    /// Notified when a permission request comes (`Notify::notified` before the prompt).
    asked: Arc<Notify>,
}

impl Probe {
    fn client(&self) -> TestClient {
        TestClient(self.clone())
    }

    fn set(&self, policy: Policy) {
        *self.policy.lock().unwrap() = Some(policy);
    }

    fn note(&self, line: String) {
        self.seen.lock().unwrap().push(line);
    }

    /// What was recorded since the last call.
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

#[acp_client]
impl TestClient {
    async fn session_update(&self, params: SessionNotification) -> Result<(), Error> {
        let update = serde_json::to_value(&params.update).unwrap();
        let kind = update["sessionUpdate"].as_str().unwrap_or("?").to_owned();
        let text = update["content"]["text"].as_str().map(|t| format!(" {t}")).unwrap_or_default();
        let status = update["status"].as_str().map(|s| format!(" {s}")).unwrap_or_default();
        self.0.note(format!("update {kind}{status}{text}"));
        Ok(())
    }

    async fn session_request_permission(
        &self,
        params: RequestPermissionRequest,
        cx: ClientContext,
    ) -> Result<RequestPermissionResponse, Error> {
        self.0.note("permission".to_owned());
        let policy = self.0.policy.lock().unwrap().unwrap_or(Policy::Allow);
        // Only a waiting test is told (a stored permit would tell the next turn's test too early).
        self.0.asked.notify_waiters();
        let outcome = match policy {
            Policy::Allow => {
                let allow = params.options.iter().find(|o| o.kind.as_str() == "allow_once").unwrap();
                RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(allow.option_id.clone()))
            }
            Policy::Hold => {
                cx.cancelled().await;
                RequestPermissionOutcome::Cancelled
            }
        };
        Ok(RequestPermissionResponse::new(outcome))
    }

    async fn fs_read_text_file(&self, params: ReadTextFileRequest) -> Result<ReadTextFileResponse, Error> {
        self.0.note(format!("read {}", params.path));
        let text = std::fs::read_to_string(&params.path)
            .map_err(|e| Error::internal_error().data(Value::from(e.to_string())))?;
        Ok(ReadTextFileResponse::new(text))
    }
}

fn initialize_request() -> InitializeRequest {
    acp_rpc::client::with_capabilities::<TestClient>(
        InitializeRequest::new(ProtocolVersion(1)).client_info(Implementation::new("acp-http-interop", "0")),
    )
}

fn prompt(session: &SessionId, text: &str) -> PromptRequest {
    PromptRequest::new(session.clone(), vec![ContentBlock::Text(TextContent::new(text))])
}

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut).await.unwrap_or_else(|_| panic!("{what} timed out"))
}

/// initialize, session/new, an allowed turn, a cancelled turn; returns the session.
async fn run_turns(agent: &AgentHandle, probe: &Probe, root: &Root) -> SessionId {
    let init = within("initialize", agent.initialize(initialize_request())).await.expect("initialize");
    assert_eq!(init.protocol_version, ProtocolVersion(1));
    assert_eq!(init.agent_info.clone().flatten().unwrap().name, "ts-http-interop-agent");

    let session = within("session/new", agent.new_session(NewSessionRequest::new(root.cwd(), Vec::new())))
        .await
        .expect("session/new")
        .session_id;
    assert!(session.0.starts_with("ts-sess-"), "{session:?}");

    // An allowed turn: the permission answer and the file read go back with Acp-Session-Id (the
    // TS server refuses them without, which would fail the turn).
    let done = within("the allowed prompt", agent.prompt(prompt(&session, "Please read notes.txt"))).await.unwrap();
    assert_eq!(done.stop_reason, StopReason::EndTurn);
    let turn = probe.take();
    let path = root.0.join("notes.txt");
    for expected in [
        "update agent_message_chunk Reading notes.txt.".to_owned(),
        "update tool_call pending".to_owned(),
        "permission".to_owned(),
        "update tool_call_update in_progress".to_owned(),
        format!("read {}", path.display()),
        "update tool_call_update completed".to_owned(),
        "update agent_message_chunk It starts with \"hello from the interop root\".".to_owned(),
    ] {
        assert!(turn.contains(&expected), "missing {expected:?} in {turn:#?}");
    }

    // A turn cancelled while its permission request is pending.
    probe.set(Policy::Hold);
    let asked_now = probe.asked.notified();
    let turn = agent.prompt(prompt(&session, "Please read notes.txt again"));
    tokio::pin!(turn);
    tokio::select! {
        () = asked_now => {}
        done = &mut turn => panic!("the turn ended before its permission request: {done:?}"),
        () = tokio::time::sleep(LIMIT) => panic!("no permission request"),
    }
    agent.cancel(CancelNotification::new(session.clone())).await.unwrap();
    let done = within("the cancelled prompt", turn).await.unwrap();
    assert_eq!(done.stop_reason, StopReason::Cancelled);
    let turn = probe.take();
    assert!(turn.contains(&"update tool_call_update cancelled".to_owned()), "{turn:#?}");
    probe.set(Policy::Allow);
    session
}

fn text(value: &Value, key: &str) -> Option<String> {
    value[key].as_str().map(str::to_owned)
}

/// The HTTP requests of connection `conn`, in order: `METHOD sess=… cookie=…`.
fn requests_of(server: &Server, conn: &str) -> Vec<Value> {
    server.events("REQ").into_iter().filter(|r| r["conn"] == conn).collect()
}

// ---- the tests ------------------------------------------------------------------------------

#[tokio::test]
async fn our_client_runs_turns_over_streamable_http_against_the_ts_server() {
    let Some(dir) = sdk() else { return };
    let server = Server::start(&dir);
    let root = Root::new("http");
    let probe = Probe::default();
    let jar = CookieJar::new();
    let (agent, remote) =
        Remote::new(server.url("http")).cookie_jar(jar.clone()).connect(probe.client()).await.unwrap();
    assert_eq!(remote.profile(), Profile::StreamableHttp);
    let session = run_turns(&agent, &probe, &root).await;
    let conn = remote.connection_id().expect("the connection id from initialize");
    within("close", remote.close()).await.unwrap();
    server.wait_for("the DELETE's answer", |l| l.starts_with("RES") && l.contains("\"DELETE\"")).await;

    let log = server.dump();
    let first = &server.events("REQ")[0];
    assert_eq!(
        (first["method"].as_str(), &first["conn"], &first["cookie"]),
        (Some("POST"), &Value::Null, &Value::Null),
        "{log}"
    );
    let requests = requests_of(&server, &conn);
    let line = |r: &Value| format!("{} sess={:?}", r["method"].as_str().unwrap(), text(r, "sess"));
    let lines: Vec<String> = requests.iter().map(line).collect();
    // The connection stream first, the session stream before the session's first POST, the
    // DELETE last.
    assert_eq!(lines[0], "GET sess=None", "{log}");
    let sess = Some(session.0.to_string());
    let session_get = lines.iter().position(|l| *l == format!("GET sess={sess:?}")).expect("a session GET");
    let first_session_post = lines.iter().position(|l| *l == format!("POST sess={sess:?}")).expect("a session POST");
    assert!(session_get < first_session_post, "{lines:#?}");
    assert_eq!(lines.last().unwrap(), "DELETE sess=None", "{lines:#?}");
    // prompt, permission answer, fs answer, prompt, cancel, cancelled permission answer.
    assert!(lines.iter().filter(|l| **l == format!("POST sess={sess:?}")).count() >= 6, "{lines:#?}");
    // Every POST and the DELETE were accepted.
    for answer in server.events("RES").into_iter().filter(|r| r["conn"] == conn.as_str() && r["method"] != "GET") {
        assert!(matches!(answer["status"].as_u64(), Some(200 | 202)), "{answer} in\n{log}");
    }

    // Cookies: set by the initialize answer, sent back; `temp` no longer once deleted by the
    // session stream's answer.
    let cookie = |r: &Value| text(r, "cookie").unwrap_or_default();
    assert_eq!(cookie(&requests[0]), "affinity=node-1; temp=1", "{log}");
    let after = &requests[session_get + 1..];
    assert!(after.iter().all(|r| cookie(r) == "affinity=node-1"), "{after:#?}");
    assert_eq!(jar.get(&server.key(), "affinity").as_deref(), Some("node-1"));
    assert_eq!(jar.get(&server.key(), "temp"), None);
}

#[tokio::test]
async fn our_client_runs_turns_over_websocket_against_the_ts_server() {
    let Some(dir) = sdk() else { return };
    let server = Server::start(&dir);
    let root = Root::new("ws");
    let probe = Probe::default();
    // A jar from an earlier connection: its cookies go with the handshake.
    let jar = CookieJar::new();
    jar.store(&server.key(), "affinity=node-7");
    let (agent, remote) = Remote::new(server.url("ws")).cookie_jar(jar.clone()).connect(probe.client()).await.unwrap();
    assert_eq!(remote.profile(), Profile::WebSocket);
    assert!(remote.connection_id().is_some(), "the 101 carries Acp-Connection-Id");
    run_turns(&agent, &probe, &root).await;
    within("close", remote.close()).await.unwrap();

    let upgrades: Vec<Value> = server.events("REQ").into_iter().filter(|r| r["upgrade"] == true).collect();
    assert_eq!(upgrades.len(), 1, "{}", server.dump());
    assert_eq!(text(&upgrades[0], "cookie").as_deref(), Some("affinity=node-7"));
    // Everything went over the socket.
    assert_eq!(server.events("REQ").len(), 1, "{}", server.dump());
    // The 101's cookie is kept, beside the earlier one.
    assert_eq!(jar.get(&server.key(), "ws").as_deref(), Some("1"));
    assert_eq!(jar.get(&server.key(), "affinity").as_deref(), Some("node-7"));
}

#[tokio::test]
async fn a_session_is_reloaded_on_a_new_connection() {
    let Some(dir) = sdk() else { return };
    let server = Server::start(&dir);
    let root = Root::new("reconnect");
    let probe = Probe::default();
    let jar = CookieJar::new();
    let (agent, remote) =
        Remote::new(server.url("http")).cookie_jar(jar.clone()).connect(probe.client()).await.unwrap();
    within("initialize", agent.initialize(initialize_request())).await.unwrap();
    let session = agent.new_session(NewSessionRequest::new(root.cwd(), Vec::new())).await.unwrap().session_id;
    let done = within("prompt", agent.prompt(prompt(&session, "Please read notes.txt"))).await.unwrap();
    assert_eq!(done.stop_reason, StopReason::EndTurn);
    let first = remote.connection_id().unwrap();
    // The connection is lost (here: closed).
    drop(remote);
    server.wait_for("the first DELETE", |l| l.starts_with("REQ") && l.contains("DELETE")).await;

    let again = Probe::default();
    let load = LoadSessionRequest::new(session.clone(), Vec::new(), root.cwd());
    let reconnected = within(
        "reconnect",
        Remote::new(server.url("http")).cookie_jar(jar.clone()).reconnect(again.client(), initialize_request(), load),
    )
    .await
    .expect("reconnect");
    assert!(matches!(reconnected.session, Reattached::Loaded(_)), "{:?}", reconnected.session);
    let second = reconnected.remote.connection_id().unwrap();
    assert_ne!(first, second);
    // The replay was handled before `session/load` returned.
    let replayed = again.take();
    assert!(replayed.contains(&"update agent_message_chunk Reading notes.txt.".to_owned()), "{replayed:#?}");
    assert!(replayed.iter().any(|l| l.starts_with("update user_message_chunk")), "{replayed:#?}");
    // The session goes on.
    let done = within("prompt", reconnected.agent.prompt(prompt(&session, "Please read notes.txt"))).await.unwrap();
    assert_eq!(done.stop_reason, StopReason::EndTurn);
    within("close", reconnected.remote.close()).await.unwrap();

    // The new connection: the RFD's resume flow, with the old affinity cookie from the start.
    let log = server.dump();
    let requests = requests_of(&server, &second);
    let lines: Vec<String> =
        requests.iter().map(|r| format!("{} sess={:?}", r["method"].as_str().unwrap(), text(r, "sess"))).collect();
    let sess = format!("{:?}", Some(session.0.to_string()));
    assert_eq!(
        lines[..3],
        ["GET sess=None".to_owned(), format!("GET sess={sess}"), format!("POST sess={sess}")],
        "{log}"
    );
    let inits: Vec<Value> =
        server.events("REQ").into_iter().filter(|r| r["conn"].is_null() && r["method"] == "POST").collect();
    assert_eq!(inits.len(), 2, "{log}");
    assert_eq!(text(&inits[1], "cookie").as_deref(), Some("affinity=node-1"), "{log}");
    let loads = server.events("AGENT").into_iter().filter(|a| a["method"] == "session/load").count();
    assert_eq!(loads, 1, "{log}");
}

/// Runs the demo client against `url`; its transcript.
fn run_example(url: &str, root: &Root, protocol: &str) -> String {
    let out = Command::new(CLIENT)
        .arg("--root")
        .arg(&root.0)
        .args(["--policy", "allow", "--prompt", "Please read notes.txt", "--protocol", protocol, "--url", url])
        .output()
        .expect("run the client example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "client --url {url} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn the_example_client_runs_its_turn_over_a_url() {
    let Some(dir) = sdk() else { return };
    let server = Server::start(&dir);
    let root = Root::new("example");
    for scheme in ["http", "ws"] {
        let v1 = run_example(&server.url(scheme), &root, "1");
        for expected in [
            format!("→ {}", server.url(scheme)),
            "connected to ts-http-interop-agent 2.4.0 (protocol v1)".to_owned(),
            "⚙ Read notes.txt [read] pending".to_owned(),
            "? permission for “Read notes.txt”: Allow once (policy allow)".to_owned(),
            format!("⇢ fs/read_text_file {}", root.0.join("notes.txt").display()),
            "↳ Read notes.txt: completed\n    │ hello from the interop root\n    │ second line".to_owned(),
            "■ stop reason: end_turn".to_owned(),
        ] {
            assert!(v1.contains(&expected), "{scheme}: missing {expected:?} in:\n{v1}");
        }
        let v2 = run_example(&server.url(scheme), &root, "2");
        for expected in [
            "connected to ts-http-interop-agent 2.4.0 (protocol v2)",
            "◦ requires action",
            "? permission for “Read notes.txt”: Allow once (policy allow)",
            "It starts with \"hello from the interop root\".",
            "■ stop reason: end_turn",
        ] {
            assert!(v2.contains(expected), "{scheme}: missing {expected:?} in:\n{v2}");
        }
    }
}

#[tokio::test]
async fn a_wrong_endpoint_fails_initialize_and_ends_the_connection() {
    let Some(dir) = sdk() else { return };
    let server = Server::start(&dir);
    let url = format!("http://127.0.0.1:{}/nowhere", server.port);
    let (agent, remote) = Remote::new(url).connect(Probe::default().client()).await.unwrap();
    let error = within("initialize", agent.initialize(initialize_request())).await.unwrap_err();
    let acp_rpc::Error::Rpc(error) = error else { panic!("expected the server's answer, got {error:?}") };
    assert_eq!(error.code, acp_rpc::codes::INTERNAL_ERROR);
    assert_eq!(error.data.as_ref().unwrap()["status"], 404, "{error:?}");
    within("the end of the connection", agent.closed()).await;
    assert!(remote.end_reason().unwrap().contains("404"), "{:?}", remote.end_reason());
    assert!(matches!(
        agent.new_session(NewSessionRequest::new("/", Vec::new())).await,
        Err(acp_rpc::Error::ConnectionClosed)
    ));
}

// ---- the other direction: the SDK's client against our server ---------------------------------

/// The demo agent (`runtime/examples/agent.rs`) listening on a free port; killed on drop.
struct ListeningAgent {
    child: Child,
    url: String,
}

impl ListeningAgent {
    fn start() -> ListeningAgent {
        let mut child = Command::new(env!("CARGO_BIN_EXE_acp-example-agent"))
            .args(["--listen", "127.0.0.1:0"])
            .env("ACP_DEMO_DELAY_MS", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the demo agent");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("LISTENING line");
        let url = line.trim().strip_prefix("LISTENING ").expect("LISTENING <url>").to_owned();
        ListeningAgent { child, url }
    }
}

impl Drop for ListeningAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `client.mjs` against `url`; its output lines.
fn ts_client(dir: &Path, url: &str, websocket: bool) -> Vec<String> {
    let mut command = Command::new("node");
    command.arg(dir.join("client.mjs")).arg(url);
    if websocket {
        command.arg("ws");
    }
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run node client.mjs");
    let started = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        assert!(started.elapsed() < LIMIT * 3, "the TypeScript client did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "client.mjs failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().map(str::to_owned).collect()
}

#[test]
fn the_sdk_client_drives_our_server_over_http_and_websocket() {
    let Some(dir) = sdk() else { return };
    let agent = ListeningAgent::start();
    for websocket in [false, true] {
        let profile = if websocket { "WebSocket" } else { "Streamable HTTP" };
        let lines = ts_client(&dir, &agent.url, websocket);
        let has = |prefix: &str| lines.iter().any(|l| l.starts_with(prefix));
        assert!(has("INIT ") && has("SESSION ") && has("PERMISSION ") && has("DONE"), "{profile}: {lines:?}");
        assert!(lines.iter().any(|l| l == "UPDATE agent_message_chunk"), "{profile}: {lines:?}");
        assert!(lines.iter().any(|l| l == "UPDATE tool_call"), "{profile}: {lines:?}");
        let answer = lines.iter().find_map(|l| l.strip_prefix("PROMPT ")).expect("the prompt's answer");
        let answer: Value = serde_json::from_str(answer).expect("json");
        assert_eq!(answer["stopReason"], "end_turn", "{profile}");
    }
}
