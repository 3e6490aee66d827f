//! One spawned agent under test: the process, a tap on both directions of its stdio, and a
//! raw [`Connection`] whose handler plays a minimal client (its `fs/*` and `terminal/*`
//! services are in `serve.rs`).
//!
//! ```text
//! agent stdout ──► tap (records every line) ──► duplex ──► Connection (our peer)
//! agent stdin  ◄── forwarder (records what went out) ◄── duplex ◄── Connection
//!                      ▲
//!                      └── injected raw lines (malformed input)
//! ```
//!
//! The tap is what lets the checker see what the connection itself hides or would reject:
//! answers with a `null` or no id (a -32700, an answer to a notification), lines on stdout that
//! are not JSON-RPC at all, and when each message arrived relative to what the checker wrote.
//! On a protocol v2 connection ([`Agent::spawn_v2`]) a line may also be a JSON-RPC batch: the
//! tap records the array as such and each of its entries as a message of its own.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use acp_rpc::acp_types::{SessionNotification, SessionUpdate};
use acp_rpc::framing::{DEFAULT_MAX_LINE_BYTES, Frame, LineReader};
use acp_rpc::transport::{ChildProcess, SpawnOptions, StderrMode};
use acp_rpc::{
    CancellationToken, Connection, ErrorObject, Handler, IncomingNotification, IncomingRequest, Peer, RawValue,
};
use serde::Deserialize;

use crate::serve::{ClientCall, Offer, Services, Terminal};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader, ReadBuf};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;

/// The longest line read from the agent's stdout: the runtime's own limit, so the checker
/// accepts what a client built on it accepts, and an agent that never ends its line costs
/// bounded memory.
pub const MAX_LINE_BYTES: usize = DEFAULT_MAX_LINE_BYTES;

/// How the agent under test was launched.
#[derive(Clone, Debug)]
pub struct Launch {
    pub command: Vec<String>,
    /// A remote agent's endpoint (`http://` or `ws://`) instead of a command: each "spawn" is
    /// then a new connection to it.
    pub url: Option<String>,
    /// Show the agent's stderr.
    pub verbose: bool,
    /// Where every spawned agent registers, so that an interrupted run can stop them.
    pub live: Live,
}

/// The agent processes of a run that have not been stopped yet.
#[derive(Clone, Debug, Default)]
pub struct Live(Arc<Mutex<Vec<Stopper>>>);

#[derive(Debug)]
struct Stopper {
    shutdown: CancellationToken,
    /// Cancelled once the process has ended (or was terminated and reaped).
    ended: CancellationToken,
}

impl Live {
    /// Terminates every agent still running and waits (bounded) until each is reaped.
    pub async fn stop_all(&self) {
        let stoppers = std::mem::take(&mut *self.0.lock().expect("live"));
        for stopper in &stoppers {
            stopper.shutdown.cancel();
        }
        for stopper in &stoppers {
            let _ = tokio::time::timeout(Duration::from_secs(3), stopper.ended.cancelled()).await;
        }
    }

    fn register(&self, stopper: Stopper) {
        let mut live = self.0.lock().expect("live");
        live.retain(|s| !s.ended.is_cancelled());
        live.push(stopper);
    }
}

/// One `session/update` as received.
#[derive(Debug)]
pub struct Update {
    pub params: Value,
    pub decoded: Result<SessionNotification, String>,
    /// When the tap read it.
    pub at: Instant,
    /// Its place among the messages read (see [`Observed::read`]): unlike `at`, it orders
    /// lines that came in one read.
    pub seq: usize,
}

impl Update {
    /// The `sessionUpdate` tag, or a description of why there is none.
    pub fn tag(&self) -> String {
        match &self.decoded {
            Ok(n) => match &n.update {
                SessionUpdate::Other(_) => {
                    format!("unknown `{}`", self.params["update"]["sessionUpdate"].as_str().unwrap_or("?"))
                }
                known => known.tag().unwrap_or("?").to_owned(),
            },
            Err(_) => "undecodable".to_owned(),
        }
    }
}

/// A message the checker wrote to the agent's stdin.
#[derive(Debug)]
pub struct Sent {
    pub method: String,
    pub id: Option<Value>,
    /// `params.sessionId`, when there is one.
    pub session: Option<String>,
    /// When it was written to the pipe.
    pub at: Instant,
}

/// An answer to one of the checker's requests.
#[derive(Debug)]
pub struct Answer {
    pub id: Value,
    /// When the tap read it.
    pub at: Instant,
    /// Its place among the messages read (see [`Update::seq`]).
    pub seq: usize,
    /// The error's code, when it is an error with an integer code.
    pub code: Option<i64>,
    /// The batch it came in (an index into [`Observed::batches`]), when it came in one.
    pub batch: Option<usize>,
}

/// A JSON array the agent wrote as one line (protocol v2: a JSON-RPC batch).
#[derive(Debug)]
pub struct BatchLine {
    /// Its entries, as read.
    pub entries: Vec<Value>,
}

/// A notification from the agent other than `session/update` (e.g. `$/cancel_request`).
#[derive(Debug)]
pub struct AgentNotification {
    pub method: String,
    pub params: Value,
}

/// One `session/request_permission` of the agent's, and how the checker answered it.
#[derive(Debug)]
pub struct Permission {
    pub id: Value,
    pub session: Option<String>,
    /// The tool call it is about: v2's `subject.toolCall.toolCallId`, v1's `toolCall.toolCallId`.
    pub tool_call: Option<String>,
    /// When it was read, and its place among the messages read.
    pub at: Instant,
    pub seq: usize,
    /// When it was answered, and with which outcome (`selected` or `cancelled`).
    pub answered: Option<(Instant, &'static str)>,
}

/// An answer (a `result` or an `error`, no `method`) that names no request.
#[derive(Debug)]
pub struct Unaddressed {
    /// `id: null`, as JSON-RPC answers what it could not read; `false` when the `id` member is
    /// missing altogether, which no valid response is.
    pub null_id: bool,
    /// The error's code, if it is an error with an integer code.
    pub code: Option<i64>,
    /// The line, truncated.
    pub line: String,
    /// When the tap read it.
    pub at: Instant,
}

/// What the tap and the handler observed.
#[derive(Default, Debug)]
pub struct Observed {
    pub updates: Vec<Update>,
    /// Lines on the agent's stdout that are not a JSON-RPC message (described, truncated).
    pub non_json_lines: Vec<String>,
    /// Answers that name no request: a `null` id, or no `id` member at all.
    pub unaddressed: Vec<Unaddressed>,
    /// Answers to the checker's requests.
    pub responses: Vec<Answer>,
    /// How many `session/update`s and answers were read: the next one's `seq`.
    pub read: usize,
    /// Requests and notifications written to the agent, in order.
    pub sent: Vec<Sent>,
    /// When each raw line ([`Agent::inject_line`]) was written.
    pub injected: Vec<Instant>,
    pub permission_requests: usize,
    /// Requests from the agent other than permission requests and `fs/*` or `terminal/*`
    /// calls (method names).
    pub other_requests: Vec<String>,
    /// What the client advertised on this connection.
    pub offer: Offer,
    /// The agent's `fs/*` and `terminal/*` calls.
    pub client_calls: Vec<ClientCall>,
    /// The terminals the agent created (filled in when the connection is closed).
    pub terminals: Vec<Terminal>,
    /// The session ids the agent handed out (a string `sessionId` in a result).
    pub sessions: Vec<String>,
    /// The ids of the agent's requests, with when each was read and its place among the
    /// messages read.
    pub requests_read: Vec<(Value, Instant, usize)>,
    /// Arrays the agent wrote (v2 connections only; on v1 an array is no JSON-RPC message).
    pub batches: Vec<BatchLine>,
    /// The agent's notifications other than `session/update`.
    pub agent_notifications: Vec<AgentNotification>,
    /// The agent's permission requests.
    pub permissions: Vec<Permission>,
    /// How the process ended, once it has.
    pub exit: Option<String>,
}

impl Observed {
    /// The last request or notification with `method` that was written, from index `from` on.
    pub fn last_sent(&self, method: &str, from: usize) -> Option<&Sent> {
        self.sent.iter().skip(from).rfind(|s| s.method == method)
    }

    /// The first request or notification with `method` that was written, from index `from` on.
    pub fn first_sent(&self, method: &str, from: usize) -> Option<&Sent> {
        self.sent.iter().skip(from).find(|s| s.method == method)
    }

    /// The answer to the request with `id`.
    pub fn answer(&self, id: &Value) -> Option<&Answer> {
        self.responses.iter().find(|a| a.id == *id)
    }

    /// The answer to `sent`, if it is a request that was answered.
    pub fn answer_to(&self, sent: &Sent) -> Option<&Answer> {
        self.answer(sent.id.as_ref()?)
    }

    /// The answers with an id none of the checker's requests had.
    pub fn answers_to_no_request(&self) -> impl Iterator<Item = &Answer> {
        self.responses.iter().filter(|a| !self.sent.iter().any(|s| s.id.as_ref() == Some(&a.id)))
    }

    /// The answers that answer no request of the checker's: those with an id it never used,
    /// and those with a `null` or no id, less one for each malformed line it wrote before them
    /// (the answer such a line may get). As (when read, what was read).
    pub fn unrequested_answers(&self) -> Vec<(Instant, String)> {
        let mut found: Vec<(Instant, String)> =
            self.answers_to_no_request().map(|a| (a.at, format!("a response with id {}", a.id))).collect();
        let mut lines = self.injected.iter().peekable();
        for answer in &self.unaddressed {
            if lines.next_if(|written| **written <= answer.at).is_none() {
                found.push((answer.at, answer.line.clone()));
            }
        }
        found.sort_by_key(|(at, _)| *at);
        found
    }

    /// The last notification written before `at`.
    pub fn notification_before(&self, at: Instant) -> Option<&Sent> {
        self.sent.iter().rfind(|s| s.id.is_none() && s.at <= at)
    }

    fn next_seq(&mut self) -> usize {
        self.read += 1;
        self.read - 1
    }
}

struct Shared {
    observed: Mutex<Observed>,
    /// A protocol v2 connection: arrays are batches.
    v2: bool,
    changed: Notify,
    /// Leave permission requests unanswered until they are cancelled (for the cancel check).
    hold_permissions: AtomicBool,
    /// Fires when we send `session/cancel` (or [`Agent::release_permissions`]): a permission
    /// request held then, or arriving afterwards (it crossed our cancel on the wire), is
    /// answered `cancelled`. Each [`Agent::hold_permissions`] starts a fresh one.
    cancel_sent: Mutex<CancellationToken>,
    /// What the client offers on this connection, and serves.
    services: Services,
}

impl Shared {
    fn observed<R>(&self, f: impl FnOnce(&Observed) -> R) -> R {
        f(&self.observed.lock().expect("observed"))
    }

    fn update(&self, f: impl FnOnce(&mut Observed)) {
        self.update_with(f);
    }

    fn update_with<R>(&self, f: impl FnOnce(&mut Observed) -> R) -> R {
        let result = f(&mut self.observed.lock().expect("observed"));
        self.changed.notify_waiters();
        result
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
        matches!(self, Reply::Error(e) if e.code == acp_rpc::codes::METHOD_NOT_FOUND)
    }
}

/// A running agent process under test.
pub struct Agent {
    peer: Peer,
    shared: Arc<Shared>,
    inject: mpsc::UnboundedSender<(String, oneshot::Sender<()>)>,
    /// Closes the agent's stdin.
    close_input: CancellationToken,
    shutdown: CancellationToken,
    ended: CancellationToken,
    tap: JoinHandle<()>,
}

/// Where the agent runs: a child process on stdio, or a remote endpoint (`--url`), whose
/// transport is bridged to in-memory pipes so the rest of the client sees the same byte
/// streams either way.
enum Endpoint {
    Process(Box<ChildProcess>),
    Remote { url: String, bridge: Option<tokio::io::DuplexStream>, local: Option<tokio::io::DuplexStream> },
}

type BoxRead = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
type BoxWrite = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

impl Endpoint {
    fn remote(url: String) -> Endpoint {
        let (local, bridge) = tokio::io::duplex(1 << 20);
        Endpoint::Remote { url, bridge: Some(bridge), local: Some(local) }
    }

    /// The agent's output and input.
    fn take_transport(&mut self) -> (BoxRead, BoxWrite) {
        match self {
            Endpoint::Process(child) => {
                let (out, input) = child.take_transport().expect("fresh child has its stdio");
                (Box::new(out), Box::new(input))
            }
            Endpoint::Remote { local, .. } => {
                let (out, input) = tokio::io::split(local.take().expect("taken once"));
                (Box::new(out), Box::new(input))
            }
        }
    }

    /// Runs until the agent ends (its process exits, or the remote connection ends: `Some`
    /// with how) or `stop` fires (the process terminated, the connection closed: `None`).
    async fn run(self, stop: CancellationToken) -> Option<String> {
        match self {
            Endpoint::Process(mut child) => {
                let status = tokio::select! {
                    status = child.wait() => Some(status),
                    _ = stop.cancelled() => None,
                };
                match status {
                    Some(status) => Some(match status {
                        Ok(s) => describe_exit(s),
                        Err(e) => format!("waiting for the agent failed: {e}"),
                    }),
                    None => {
                        let _ = child.terminate().await;
                        None
                    }
                }
            }
            Endpoint::Remote { url, bridge, .. } => {
                let bridge = bridge.expect("bridge kept for run");
                let transport = tokio::select! {
                    connected = acp_rpc::http::client::Remote::new(url.clone()).transport() => connected,
                    _ = stop.cancelled() => return None,
                };
                let transport = match transport {
                    Ok(transport) => transport,
                    Err(e) => return Some(format!("connecting to {url} failed: {e}")),
                };
                let watch = transport.watch();
                let acp_rpc::http::client::RemoteTransport { mut reader, mut writer, .. } = transport;
                let (mut from_client, mut to_client) = tokio::io::split(bridge);
                // What the client writes goes out on its own task, so that closing the client's
                // side (the "stdin" of a process) closes the connection (DELETE / Close).
                let sending = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_client, &mut writer).await;
                    let _ = writer.shutdown().await;
                });
                let received = async {
                    let _ = tokio::io::copy(&mut reader, &mut to_client).await;
                    let _ = to_client.shutdown().await;
                };
                let ended = tokio::select! {
                    () = received => true,
                    _ = stop.cancelled() => false,
                };
                sending.abort();
                let _ = tokio::time::timeout(Duration::from_secs(3), watch.finished()).await;
                ended.then(|| match watch.end_reason() {
                    Some(reason) => format!("the connection ended: {reason}"),
                    None => "the connection ended".to_owned(),
                })
            }
        }
    }
}

impl Agent {
    /// Spawns the agent; the client offers and serves what `offer` says.
    pub fn spawn(launch: &Launch, offer: Offer) -> std::io::Result<Agent> {
        Self::start(launch, offer, false)
    }

    /// Spawns the agent for a protocol v2 connection: the client offers nothing (v2 has no
    /// client methods) and follows v2's rules from the start, so that batches the agent sends
    /// are read as such (an agent that answers `initialize` with 1 on it is only asked that).
    pub fn spawn_v2(launch: &Launch) -> std::io::Result<Agent> {
        Self::start(launch, Offer::default(), true)
    }

    fn start(launch: &Launch, offer: Offer, v2: bool) -> std::io::Result<Agent> {
        let mut endpoint = match &launch.url {
            Some(url) => Endpoint::remote(url.clone()),
            None => {
                let mut command = std::process::Command::new(&launch.command[0]);
                command.args(&launch.command[1..]);
                let stderr = if launch.verbose { StderrMode::Inherit } else { StderrMode::Null };
                let child =
                    ChildProcess::spawn(command, SpawnOptions { stderr, kill_grace: Duration::from_millis(500) })?;
                Endpoint::Process(Box::new(child))
            }
        };
        let (agent_out, agent_in) = endpoint.take_transport();
        let shared = Arc::new(Shared {
            observed: Mutex::default(),
            v2,
            changed: Notify::new(),
            hold_permissions: AtomicBool::new(false),
            cancel_sent: Mutex::default(),
            services: Services::new(offer.clone()),
        });
        shared.update(|o| o.offer = offer);

        let (conn_side, tap_side) = tokio::io::duplex(1 << 20);
        let (tap_read, mut tap_write) = tokio::io::split(tap_side);
        let (conn_read, conn_write) = tokio::io::split(conn_side);

        // Agent stdout -> tap -> connection. Raw bytes with a length limit: neither a line
        // without end nor bytes that are not UTF-8 may stop the tap.
        let tap_shared = shared.clone();
        let tap = tokio::spawn(async move {
            let last_read = Arc::new(Mutex::new(Instant::now()));
            let mut lines = LineReader::new(Stamped { inner: agent_out, last_read: last_read.clone() }, MAX_LINE_BYTES);
            loop {
                let line = match lines.next_frame().await {
                    Ok(Some(Frame::Line(line))) => line,
                    Ok(Some(Frame::Oversized { len })) => {
                        let what = format!("a line of {len} bytes, over the limit of {MAX_LINE_BYTES} bytes");
                        tap_shared.update(|o| o.non_json_lines.push(what));
                        continue;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let what = format!("reading stdout failed: {e}");
                        tap_shared.update(|o| o.non_json_lines.push(what));
                        break;
                    }
                };
                // A complete line was in by the last read: when it arrived, at the latest.
                let at = *last_read.lock().expect("last read");
                observe(&tap_shared, line, at);
                if tap_write.write_all(line).await.is_err() || tap_write.write_all(b"\n").await.is_err() {
                    break;
                }
            }
            let _ = tap_write.shutdown().await;
        });

        // Connection (+ injected lines) -> agent stdin, one whole line at a time.
        let (inject, mut injected) = mpsc::unbounded_channel::<(String, oneshot::Sender<()>)>();
        let forward_shared = shared.clone();
        let close_input = CancellationToken::new();
        let input_closed = close_input.clone();
        tokio::spawn(async move {
            // Ending this task drops the pipe: that is how the agent's stdin is closed.
            let mut agent_in = agent_in;
            let mut lines = BufReader::new(tap_read).lines();
            loop {
                let (line, ack) = tokio::select! {
                    _ = input_closed.cancelled() => break,
                    line = lines.next_line() => match line { Ok(Some(line)) => (line, None), _ => break },
                    Some((line, ack)) = injected.recv() => (line, Some(ack)),
                };
                // Stamped and recorded before the write: "the answer came before our message"
                // must not depend on how long the write took, and an answer must never be
                // read before the message it answers is on record.
                let at = Instant::now();
                match ack {
                    Some(_) => record_injected(&forward_shared, &line, at),
                    None => record_sent(&forward_shared, &line, at),
                }
                if agent_in.write_all(format!("{line}\n").as_bytes()).await.is_err() || agent_in.flush().await.is_err()
                {
                    break;
                }
                if let Some(ack) = ack {
                    let _ = ack.send(());
                }
            }
        });

        // The process: record how it ends, or terminate it on shutdown.
        let shutdown = CancellationToken::new();
        let ended = CancellationToken::new();
        launch.live.register(Stopper { shutdown: shutdown.clone(), ended: ended.clone() });
        let process_shared = shared.clone();
        let (stop, done) = (shutdown.clone(), ended.clone());
        tokio::spawn(async move {
            // Fires however the task ends, so nobody waits for a process that is gone.
            let _done = done.drop_guard();
            if let Some(how) = endpoint.run(stop).await {
                process_shared.update(|o| o.exit = Some(how));
            }
        });

        let handler = CheckClient { shared: shared.clone() };
        let connection = if v2 { Connection::new().v2_rules() } else { Connection::new() };
        let (peer, serve) = connection.serve(conn_read, conn_write, handler);
        tokio::spawn(serve);
        Ok(Agent { peer, shared, inject, close_input, shutdown, ended, tap })
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
        let _ = self.peer.notify(method, &params).await;
        // Only once it is queued: the held permission requests' `cancelled` answers must
        // follow the cancel on the wire, or the agent may end its turn on them first.
        if method == "session/cancel" {
            self.release_permissions();
        }
    }

    /// Writes `line` (and a newline) to the agent's stdin as it is; returns once it is written
    /// (or cannot be any more), so that what is sent next comes after it.
    pub async fn inject_line(&self, line: &str) {
        let (ack, written) = oneshot::channel();
        if self.inject.send((line.to_owned(), ack)).is_ok() {
            let _ = written.await;
        }
    }

    pub fn hold_permissions(&self, hold: bool) {
        if hold {
            *self.shared.cancel_sent.lock().expect("cancel token") = CancellationToken::new();
        }
        self.shared.hold_permissions.store(hold, Ordering::SeqCst);
    }

    /// Answers the held permission requests `cancelled`, and those that come from now on
    /// until the next [`Agent::hold_permissions`].
    pub fn release_permissions(&self) {
        self.shared.cancel_sent.lock().expect("cancel token").cancel();
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

    /// Closes the agent's stdin (nothing more is written) and waits at most `limit` for the
    /// process to end; how it ended, or `None` if it still runs. [`Agent::close`] ends it
    /// either way.
    pub async fn close_stdin(&self, limit: Duration) -> Option<String> {
        self.close_input.cancel();
        let _ = tokio::time::timeout(limit, self.ended.cancelled()).await;
        self.observed(|o| o.exit.clone())
    }

    /// What the client offers on this connection.
    pub fn offer(&self) -> Offer {
        self.shared.services.offer().clone()
    }

    /// How the process ended, if it has.
    pub fn exit(&self) -> Option<String> {
        self.observed(|o| o.exit.clone())
    }

    /// Ends the connection and terminates the process; returns what was observed, the rest
    /// of its stdout included.
    pub async fn close(self) -> Observed {
        self.peer.close();
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(3), self.ended.cancelled()).await;
        // The process is gone: its stdout ends, unless a process it left behind still holds it.
        let _ = tokio::time::timeout(Duration::from_secs(1), self.tap).await;
        let terminals = self.shared.services.terminals();
        let mut observed = std::mem::take(&mut *self.shared.observed.lock().expect("observed"));
        observed.terminals = terminals;
        observed
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
            Ok(Err(acp_rpc::Error::Rpc(e))) => Reply::Error(e),
            Ok(Err(_closed_or_io)) => Reply::Closed(how_it_ended(&self.shared).await),
        }
    }
}

async fn how_it_ended(shared: &Shared) -> String {
    // The exit status comes a moment after stdout ends.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1000);
    loop {
        let changed = shared.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if let Some(exit) = shared.observed.lock().expect("observed").exit.clone() {
            return format!("the agent {exit}");
        }
        if tokio::time::timeout_at(deadline, changed).await.is_err() {
            return "the agent closed its stdout (connection closed)".to_owned();
        }
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

/// A reader that notes when its last read returned data. Lines are stamped with it rather
/// than with when the tap got to them: the tap may be descheduled between two lines of one
/// read, and "the answer came before our cancel" must not depend on that.
struct Stamped<R> {
    inner: R,
    last_read: Arc<Mutex<Instant>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Stamped<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            *self.last_read.lock().expect("last read") = Instant::now();
        }
        polled
    }
}

/// Records one line of the agent's stdout, which had arrived by `at`.
fn observe(shared: &Shared, line: &[u8], at: Instant) {
    let Ok(text) = std::str::from_utf8(line) else {
        let what = format!("{} bytes that are not UTF-8: {}", line.len(), truncate(&String::from_utf8_lossy(line), 80));
        shared.update(|o| o.non_json_lines.push(what));
        return;
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(message)) => observe_message(shared, &message, text, at, None),
        Ok(Value::Array(entries)) if shared.v2 => {
            let batch = shared.update_with(|o| {
                o.batches.push(BatchLine { entries: entries.clone() });
                o.batches.len() - 1
            });
            if entries.is_empty() {
                let what = "an empty array `[]` (no JSON-RPC message: a batch has at least one entry)".to_owned();
                shared.update(|o| o.non_json_lines.push(what));
            }
            for entry in &entries {
                let entry_text = entry.to_string();
                match entry {
                    Value::Object(message) => observe_message(shared, message, &entry_text, at, Some(batch)),
                    _ => {
                        let what =
                            format!("a batch entry that is not a JSON-RPC message: {}", truncate(&entry_text, 120));
                        shared.update(|o| o.non_json_lines.push(what));
                    }
                }
            }
        }
        _ => {
            let what = truncate(text, 120);
            shared.update(|o| o.non_json_lines.push(what));
        }
    }
}

/// Records one message (a line, or an entry of a batch the agent wrote), read by `at`.
fn observe_message(
    shared: &Shared,
    message: &serde_json::Map<String, Value>,
    text: &str,
    at: Instant,
    batch: Option<usize>,
) {
    let method = message.get("method").and_then(Value::as_str);
    let id = message.get("id");
    let versioned = message.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
    let answer_shaped = method.is_none() && (message.contains_key("result") != message.contains_key("error"));
    let code = message.get("error").and_then(|e| e.get("code")).and_then(Value::as_i64);
    if versioned && answer_shaped && id.is_none() {
        // Not a valid response (JSON-RPC requires the id, `null` when it could not be read),
        // but plainly meant as one: recorded as an answer too, so that checks can say so.
        let line = truncate(text, 120);
        let what = format!("a response without an `id` member: {line}");
        shared.update(|o| {
            o.non_json_lines.push(what);
            o.unaddressed.push(Unaddressed { null_id: false, code, line, at });
        });
        return;
    }
    let is_jsonrpc = versioned && (method.is_some() || (id.is_some() && answer_shaped));
    if !is_jsonrpc {
        let what = format!("not a JSON-RPC 2.0 message: {}", truncate(text, 120));
        shared.update(|o| o.non_json_lines.push(what));
        return;
    }
    match (method, id) {
        (Some("session/update"), None) => {
            let params = message.get("params").cloned().unwrap_or(Value::Null);
            let decoded = SessionNotification::deserialize(&params).map_err(|e| e.to_string());
            shared.update(|o| {
                let seq = o.next_seq();
                o.updates.push(Update { params, decoded, at, seq });
            });
        }
        (Some(method), None) => {
            let notification = AgentNotification {
                method: method.to_owned(),
                params: message.get("params").cloned().unwrap_or(Value::Null),
            };
            shared.update(|o| o.agent_notifications.push(notification));
        }
        // A request of the agent's: when it was read, for the handler to stamp what it does.
        (Some(_), Some(id)) if !id.is_null() => {
            let id = id.clone();
            shared.update(|o| {
                let seq = o.next_seq();
                o.requests_read.push((id, at, seq));
            });
        }
        (None, Some(Value::Null)) => {
            let line = truncate(text, 120);
            shared.update(|o| o.unaddressed.push(Unaddressed { null_id: true, code, line, at }));
        }
        (None, Some(id)) => {
            let id = id.clone();
            let session = message.get("result").and_then(|r| r.get("sessionId")).and_then(Value::as_str);
            let session = session.map(str::to_owned);
            shared.update(|o| {
                o.sessions.extend(session);
                let seq = o.next_seq();
                o.responses.push(Answer { id, at, seq, code, batch });
            });
        }
        _ => {}
    }
}

/// Records a message the connection wrote to the agent (its method and id).
fn record_sent(shared: &Shared, line: &str, at: Instant) {
    let Ok(Value::Object(message)) = serde_json::from_str::<Value>(line) else { return };
    let Some(method) = message.get("method").and_then(Value::as_str) else { return };
    let session = message.get("params").and_then(|p| p.get("sessionId")).and_then(Value::as_str).map(str::to_owned);
    let sent = Sent { method: method.to_owned(), id: message.get("id").cloned(), session, at };
    shared.update(|o| o.sent.push(sent));
}

/// Records a raw line the checker wrote ([`Agent::inject_line`]): when, and the requests and
/// notifications in it (a batch's entries included), so that their answers count as asked for.
fn record_injected(shared: &Shared, line: &str, at: Instant) {
    let entries = match serde_json::from_str::<Value>(line) {
        Ok(Value::Array(entries)) => entries,
        Ok(message @ Value::Object(_)) => vec![message],
        _ => Vec::new(),
    };
    let sent: Vec<Sent> = entries
        .iter()
        .filter_map(|entry| {
            let method = entry.get("method")?.as_str()?.to_owned();
            let session = entry.get("params").and_then(|p| p.get("sessionId")).and_then(Value::as_str);
            Some(Sent { method, id: entry.get("id").cloned(), session: session.map(str::to_owned), at })
        })
        .collect();
    shared.update(|o| {
        o.injected.push(at);
        o.sent.extend(sent);
    });
}

pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}

/// The client side the checker plays: answers permission requests (allow, or hold until
/// cancelled), has `fs/*` and `terminal/*` calls served and recorded (refused as unknown
/// where not advertised), records other requests, and knows no other method.
/// `session/update`s are recorded by the tap, which also knows when each arrived.
struct CheckClient {
    shared: Arc<Shared>,
}

impl Handler for CheckClient {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        if self.shared.services.offer().covers(&req.method).is_some() {
            let params: Value =
                req.params.as_deref().and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or_default();
            // Stamped with when the request was read, not when it is handled: the agent's
            // next line (its turn's answer, say) may be read before this handler runs.
            let id = serde_json::to_value(&req.id).unwrap_or_default();
            let read = self.shared.observed(|o| o.requests_read.iter().rfind(|(i, ..)| *i == id).map(|(_, at, _)| *at));
            let (answer, call) = self.shared.services.handle(&req.method, &params, read.unwrap_or_else(Instant::now));
            self.shared.update(|o| o.client_calls.push(call));
            let result = answer?;
            return Ok(RawValue::from_string(result.to_string()).expect("valid JSON"));
        }
        if req.method != "session/request_permission" {
            self.shared.update(|o| o.other_requests.push(req.method.to_string()));
            return Err(ErrorObject::method_not_found(&req.method));
        }
        let params: Value = req.params.as_deref().and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or_default();
        let id = serde_json::to_value(&req.id).unwrap_or_default();
        let tool_call =
            params["subject"]["toolCall"]["toolCallId"].as_str().or(params["toolCall"]["toolCallId"].as_str());
        let permission = Permission {
            id: id.clone(),
            session: params["sessionId"].as_str().map(str::to_owned),
            tool_call: tool_call.map(str::to_owned),
            at: Instant::now(),
            seq: 0,
            answered: None,
        };
        self.shared.update(|o| {
            o.permission_requests += 1;
            let read = o.requests_read.iter().rfind(|(i, ..)| *i == id);
            let (at, seq) = read.map_or((permission.at, o.read), |(_, at, seq)| (*at, *seq));
            o.permissions.push(Permission { at, seq, ..permission });
        });
        let cancelled = json!({"outcome": {"outcome": "cancelled"}});
        let outcome = if self.shared.hold_permissions.load(Ordering::SeqCst) {
            let released = self.shared.cancel_sent.lock().expect("cancel token").clone();
            tokio::select! {
                _ = req.cancel.cancelled() => {}
                _ = released.cancelled() => {}
            }
            cancelled
        } else {
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
        let how = if outcome["outcome"]["outcome"] == "selected" { "selected" } else { "cancelled" };
        self.shared.update(|o| {
            if let Some(p) = o.permissions.iter_mut().rfind(|p| p.id == id) {
                p.answered = Some((Instant::now(), how));
            }
        });
        Ok(RawValue::from_string(outcome.to_string()).expect("valid JSON"))
    }

    async fn handle_notification(&self, _notification: IncomingNotification) {}
}
