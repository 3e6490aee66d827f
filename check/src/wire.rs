//! One spawned agent under test: the process, a tap on both directions of its stdio, and a
//! raw [`Connection`] whose handler plays a minimal client.
//!
//! ```text
//! agent stdout ──► tap (records every line) ──► duplex ──► Connection (our peer)
//! agent stdin  ◄── forwarder ◄── duplex ◄── Connection
//!                      ▲
//!                      └── injected raw lines (malformed input)
//! ```
//!
//! The tap is what lets the checker see what the connection itself hides or would reject:
//! answers with a `null` id (a -32700), and lines on stdout that are not JSON at all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_runtime::acp_types::{SessionNotification, SessionUpdate};
use acp_runtime::transport::{ChildProcess, SpawnOptions, StderrMode};
use acp_runtime::{
    CancellationToken, Connection, ErrorObject, Handler, IncomingNotification, IncomingRequest, Peer, RawValue,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

/// How the agent under test was launched.
#[derive(Clone, Debug)]
pub struct Launch {
    pub command: Vec<String>,
    /// Show the agent's stderr.
    pub verbose: bool,
}

/// One `session/update` as received.
#[derive(Debug)]
pub struct Update {
    pub raw: String,
    pub decoded: Result<SessionNotification, String>,
}

impl Update {
    /// The `sessionUpdate` tag, or a description of why there is none.
    pub fn tag(&self) -> String {
        match &self.decoded {
            Ok(n) => match &n.update {
                SessionUpdate::Other(_) => {
                    let raw: Value = serde_json::from_str(&self.raw).unwrap_or_default();
                    format!("unknown `{}`", raw["update"]["sessionUpdate"].as_str().unwrap_or("?"))
                }
                known => known.tag().unwrap_or("?").to_owned(),
            },
            Err(_) => "undecodable".to_owned(),
        }
    }
}

/// What the tap and the handler observed.
#[derive(Default, Debug)]
pub struct Observed {
    pub updates: Vec<Update>,
    /// Lines on the agent's stdout that are not a JSON object (truncated).
    pub non_json_lines: Vec<String>,
    /// Error answers with a `null` id, by code.
    pub null_id_errors: Vec<i64>,
    pub permission_requests: usize,
    /// Requests from the agent other than permission requests (method names).
    pub other_requests: Vec<String>,
    /// How the process ended, once it has.
    pub exit: Option<String>,
}

struct Shared {
    observed: Mutex<Observed>,
    changed: Notify,
    /// Leave permission requests unanswered until they are cancelled (for the cancel check).
    hold_permissions: AtomicBool,
    /// Fires when we send `session/cancel`: a permission request held then, or arriving
    /// afterwards (it crossed our cancel on the wire), is answered `cancelled`.
    cancel_sent: CancellationToken,
}

impl Shared {
    fn update(&self, f: impl FnOnce(&mut Observed)) {
        f(&mut self.observed.lock().expect("observed"));
        self.changed.notify_waiters();
    }
}

/// The answer to one call.
#[derive(Debug)]
pub enum Reply {
    Result(Value),
    Error(ErrorObject),
    /// No answer within the time limit.
    Timeout,
    /// The connection ended first; how the agent ended.
    Closed(String),
}

impl Reply {
    /// A one-line description for the report.
    pub fn describe(&self) -> String {
        match self {
            Reply::Result(v) => format!("a result ({})", truncate(&v.to_string(), 120)),
            Reply::Error(e) => format!("error {} ({})", e.code, truncate(&e.message, 80)),
            Reply::Timeout => "no answer in time".to_owned(),
            Reply::Closed(how) => format!("no answer: {how}"),
        }
    }

    pub fn is_method_not_found(&self) -> bool {
        matches!(self, Reply::Error(e) if e.code == acp_runtime::codes::METHOD_NOT_FOUND)
    }
}

/// A running agent process under test.
pub struct Agent {
    peer: Peer,
    shared: Arc<Shared>,
    inject: mpsc::UnboundedSender<String>,
    shutdown: CancellationToken,
    process: JoinHandle<()>,
}

impl Agent {
    pub fn spawn(launch: &Launch) -> std::io::Result<Agent> {
        let mut command = std::process::Command::new(&launch.command[0]);
        command.args(&launch.command[1..]);
        let stderr = if launch.verbose { StderrMode::Inherit } else { StderrMode::Null };
        let mut child = ChildProcess::spawn(command, SpawnOptions { stderr, kill_grace: Duration::from_millis(500) })?;
        let (agent_out, agent_in) = child.take_transport().expect("fresh child has its stdio");
        let shared = Arc::new(Shared {
            observed: Mutex::default(),
            changed: Notify::new(),
            hold_permissions: AtomicBool::new(false),
            cancel_sent: CancellationToken::new(),
        });

        let (conn_side, tap_side) = tokio::io::duplex(1 << 20);
        let (tap_read, mut tap_write) = tokio::io::split(tap_side);
        let (conn_read, conn_write) = tokio::io::split(conn_side);

        // Agent stdout -> tap -> connection.
        let tap_shared = shared.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(agent_out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                observe(&tap_shared, &line);
                if tap_write.write_all(line.as_bytes()).await.is_err() || tap_write.write_all(b"\n").await.is_err() {
                    break;
                }
            }
            let _ = tap_write.shutdown().await;
        });

        // Connection (+ injected lines) -> agent stdin, one whole line at a time.
        let (inject, mut injected) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            let mut agent_in = agent_in;
            let mut lines = BufReader::new(tap_read).lines();
            loop {
                let line = tokio::select! {
                    line = lines.next_line() => match line { Ok(Some(line)) => line, _ => break },
                    Some(line) = injected.recv() => line,
                };
                if agent_in.write_all(format!("{line}\n").as_bytes()).await.is_err() || agent_in.flush().await.is_err()
                {
                    break;
                }
            }
        });

        // The process: record how it ends, or terminate it on shutdown.
        let shutdown = CancellationToken::new();
        let process_shared = shared.clone();
        let stop = shutdown.clone();
        let process = tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => Some(status),
                _ = stop.cancelled() => None,
            };
            match status {
                Some(status) => {
                    let how = match status {
                        Ok(s) => describe_exit(s),
                        Err(e) => format!("waiting for the agent failed: {e}"),
                    };
                    process_shared.update(|o| o.exit = Some(how));
                }
                None => {
                    let _ = child.terminate().await;
                }
            }
        });

        let handler = CheckClient { shared: shared.clone() };
        let (peer, serve) = Connection::new().serve(conn_read, conn_write, handler);
        tokio::spawn(serve);
        Ok(Agent { peer, shared, inject, shutdown, process })
    }

    /// Calls `method` and waits at most `limit` for the answer.
    pub async fn call(&self, method: &str, params: Value, limit: Duration) -> Reply {
        self.handle().call(method, &params, limit).await
    }

    fn handle(&self) -> AgentRef {
        AgentRef { peer: self.peer.clone(), shared: self.shared.clone() }
    }

    /// Starts a call in the background (for a prompt turn that is cancelled meanwhile).
    pub fn call_in_background(&self, method: &str, params: Value, limit: Duration) -> JoinHandle<Reply> {
        let agent = self.handle();
        let method = method.to_owned();
        tokio::spawn(async move { agent.call(&method, &params, limit).await })
    }

    pub async fn notify(&self, method: &str, params: Value) {
        if method == "session/cancel" {
            self.shared.cancel_sent.cancel();
        }
        let _ = self.peer.notify(method, &params).await;
    }

    /// Writes `line` (and a newline) to the agent's stdin as it is.
    pub fn inject_line(&self, line: &str) {
        let _ = self.inject.send(line.to_owned());
    }

    pub fn hold_permissions(&self, hold: bool) {
        self.shared.hold_permissions.store(hold, Ordering::SeqCst);
    }

    pub fn observed<R>(&self, f: impl FnOnce(&Observed) -> R) -> R {
        f(&self.shared.observed.lock().expect("observed"))
    }

    /// Waits until `ready` holds for what was observed, at most `limit`; whether it held.
    pub async fn wait_for(&self, limit: Duration, ready: impl Fn(&Observed) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.observed(&ready) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.observed(&ready);
            }
        }
    }

    pub fn is_closed(&self) -> bool {
        self.peer.is_closed()
    }

    /// Ends the connection and terminates the process; returns what was observed.
    pub async fn close(self) -> Observed {
        self.peer.close();
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(3), self.process).await;
        std::mem::take(&mut *self.shared.observed.lock().expect("observed"))
    }
}

struct AgentRef {
    peer: Peer,
    shared: Arc<Shared>,
}

impl AgentRef {
    async fn call(&self, method: &str, params: &Value, limit: Duration) -> Reply {
        match tokio::time::timeout(limit, self.peer.request::<Value, Value>(method, params)).await {
            Err(_) => Reply::Timeout,
            Ok(Ok(v)) => Reply::Result(v),
            Ok(Err(acp_runtime::Error::Rpc(e))) => Reply::Error(e),
            Ok(Err(_closed_or_io)) => Reply::Closed(how_it_ended(&self.shared).await),
        }
    }
}

async fn how_it_ended(shared: &Shared) -> String {
    // The exit status comes a moment after stdout ends.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1000);
    loop {
        if let Some(exit) = shared.observed.lock().expect("observed").exit.clone() {
            return format!("the agent {exit}");
        }
        if tokio::time::Instant::now() >= deadline {
            return "the agent closed its stdout (connection closed)".to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => "exited".to_owned(),
    }
}

fn observe(shared: &Shared, line: &str) {
    if line.trim().is_empty() {
        return;
    }
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(message)) => {
            let null_id = matches!(message.get("id"), Some(Value::Null));
            if null_id && message.get("method").is_none() {
                if let Some(code) = message.get("error").and_then(|e| e.get("code")).and_then(Value::as_i64) {
                    shared.update(|o| o.null_id_errors.push(code));
                }
            }
        }
        _ => {
            let line = truncate(line, 120);
            shared.update(|o| o.non_json_lines.push(line));
        }
    }
}

pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}

/// The client side the checker plays: records `session/update`s, answers permission requests
/// (allow, or hold until cancelled), and knows no other method.
struct CheckClient {
    shared: Arc<Shared>,
}

impl Handler for CheckClient {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        if req.method != "session/request_permission" {
            self.shared.update(|o| o.other_requests.push(req.method.to_string()));
            return Err(ErrorObject::method_not_found(&req.method));
        }
        self.shared.update(|o| o.permission_requests += 1);
        let cancelled = json!({"outcome": {"outcome": "cancelled"}});
        let outcome = if self.shared.hold_permissions.load(Ordering::SeqCst) {
            tokio::select! {
                _ = req.cancel.cancelled() => {}
                _ = self.shared.cancel_sent.cancelled() => {}
            }
            cancelled
        } else {
            let params: Value =
                req.params.as_deref().and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or_default();
            let options = params["options"].as_array().cloned().unwrap_or_default();
            let pick = ["allow_once", "allow_always"]
                .iter()
                .find_map(|kind| options.iter().find(|o| o["kind"] == *kind))
                .or(options.first());
            match pick.and_then(|o| o["optionId"].as_str()) {
                Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
                None => cancelled,
            }
        };
        Ok(RawValue::from_string(outcome.to_string()).expect("valid JSON"))
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        if notification.method != "session/update" {
            return;
        }
        let raw = notification.params.as_deref().map_or("null", RawValue::get).to_owned();
        let decoded = serde_json::from_str::<SessionNotification>(&raw).map_err(|e| e.to_string());
        self.shared.update(|o| o.updates.push(Update { raw, decoded }));
    }
}
