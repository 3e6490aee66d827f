//! The conductor's bridge for agents that do not speak MCP over ACP (the RFD's "Bridging"):
//! when the agent's `initialize` answer lacks `mcpCapabilities.acp`, the conductor advertises
//! `acp: true` to its client itself and rewrites every `"type": "acp"` server of
//! `session/new`, `session/load`, `session/resume` and `session/fork` into a stdio server
//! the agent starts as it starts any other: a small shim process ([`run_shim`]; for
//! `acp-conductor`, its own `mcp-bridge` subcommand) that connects back to the conductor over
//! a unix socket and relays the MCP messages, line for line, both ways. The conductor is
//! then the consumer the agent would have been: each request of the agent's MCP client
//! becomes an `mcp/message` request toward whoever declared the server (the client, or a
//! proxy of the chain), under a fresh `requestId`; the provider's `mcp/message` notifications
//! for it go back to that shim; the agent's `notifications/cancelled` cancels the ACP request,
//! and its other notifications (`notifications/initialized`, ...) stop at the conductor, the
//! wire having no place for them (see `tunnel`). The provider answers the MCP client's
//! `initialize` like any other request.
//!
//! A stdio shim rather than a loopback HTTP endpoint: every MCP client can start a stdio
//! server (HTTP is optional in ACP's `mcpCapabilities`), the conductor needs no HTTP stack,
//! and the socket lives in a directory only the conductor's user can enter (mode 0700), so no
//! token has to travel in the declaration. Unix only.
//!
//! The rewritten declaration, for `{"type": "acp", "name": N, "serverId": S}`:
//!
//! ```json
//! {"name": N, "command": PROGRAM, "args": [ARGS..., "--socket", PATH, "--server-id", S], "env": []}
//! ```
//!
//! (its `_meta` kept). Between shim and conductor: the shim's first line is
//! `{"serverId": S}` (one the conductor declared), the conductor's first line
//! `{"connected": true}` or `{"error": "..."}`; then MCP's own newline-delimited messages.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use acp_types::{McpRequestId, McpServerAcpId, agent_method};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use super::MCP_SERVER_CARRIERS;
use super::tunnel::{Route, Tunnel, answer_message, tag_of};
use crate::core::framing::{DEFAULT_MAX_LINE_BYTES, Frame, LineReader};
use crate::core::jsonrpc::ErrorObject;
use crate::core::peer::Peer;

/// How long a shim has to say which server it is for.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest hello line accepted.
const HELLO_MAX_BYTES: usize = 64 * 1024;

/// The command the agent is told to run for a bridged server: a program and the arguments
/// that come before the bridge's own (`--socket PATH --server-id ID`), e.g. the conductor's
/// own executable and `["mcp-bridge"]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpBridge {
    program: String,
    args: Vec<String>,
}

impl McpBridge {
    /// The shim is `program args... --socket PATH --server-id ID`.
    pub fn new(program: impl Into<String>, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        McpBridge { program: program.into(), args: args.into_iter().map(Into::into).collect() }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The listening socket and its private directory, removed when dropped.
struct Listening {
    dir: PathBuf,
    socket: PathBuf,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The bridge of one chain: the conductor asks it about what goes into the agent (see the
/// [module docs](self)).
pub(crate) struct Bridge {
    command: McpBridge,
    /// The agent lacks `mcpCapabilities.acp`: declarations are rewritten.
    active: AtomicBool,
    listening: Mutex<Option<Arc<Listening>>>,
    /// By their tag.
    tunnels: Mutex<HashMap<String, Arc<Tunnel>>>,
    /// The `serverId`s of the declarations rewritten: the shims that may connect.
    declared: Mutex<HashSet<String>>,
    /// Toward the client from the agent's place in the chain.
    route: OnceLock<Route>,
    shutdown: CancellationToken,
}

#[derive(Deserialize)]
struct RequestOf {
    #[serde(rename = "requestId")]
    request_id: McpRequestId,
}

/// The tag of the tunnel whose request an `mcp/message` notification names.
fn tunnel_of(params: Option<&RawValue>) -> Option<String> {
    let params: RequestOf = serde_json::from_str(params?.get()).ok()?;
    tag_of(&params.request_id).map(str::to_owned)
}

impl Bridge {
    pub(crate) fn new(command: McpBridge) -> Arc<Bridge> {
        Arc::new(Bridge {
            command,
            active: AtomicBool::new(false),
            listening: Mutex::new(None),
            tunnels: Mutex::new(HashMap::new()),
            declared: Mutex::new(HashSet::new()),
            route: OnceLock::new(),
            shutdown: CancellationToken::new(),
        })
    }

    /// Where the bridge's `mcp/message` requests go: toward the client, from the agent's place.
    pub(crate) fn set_route(&self, route: Route) {
        let _ = self.route.set(route);
    }

    fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Whether the bridge handles `method` on its way into the agent (asked for every message
    /// toward the agent: a lookup, and a look into `mcp/message` params only when bridging).
    pub(crate) fn wants(&self, method: &str, params: Option<&RawValue>) -> bool {
        match method {
            agent_method::INITIALIZE => true,
            agent_method::MCP_MESSAGE => {
                self.is_active() && tunnel_of(params).is_some_and(|tag| lock(&self.tunnels).contains_key(&tag))
            }
            other => self.is_active() && MCP_SERVER_CARRIERS.contains(&other),
        }
    }

    /// Handles a request going into the agent that [`Bridge::wants`]; anything it has nothing
    /// to do with (any more) goes to the agent untouched.
    pub(crate) async fn handle_request(
        self: &Arc<Self>,
        agent: &Peer,
        method: &str,
        params: Option<&RawValue>,
        cancel: &CancellationToken,
    ) -> Result<Box<RawValue>, ErrorObject> {
        let to_agent = async |params: Option<&RawValue>| {
            agent.request_raw_until(method, params, cancel).await.map_err(agent_error)
        };
        match method {
            agent_method::INITIALIZE => {
                let answer = to_agent(params).await?;
                Ok(self.on_initialized(answer))
            }
            carrier if self.is_active() && MCP_SERVER_CARRIERS.contains(&carrier) => {
                let rewritten = self.rewrite(params)?;
                to_agent(rewritten.as_deref().or(params)).await
            }
            _ => to_agent(params).await,
        }
    }

    /// Handles a notification going into the agent that [`Bridge::wants`].
    pub(crate) async fn handle_notification(&self, agent: &Peer, method: &str, params: Option<&RawValue>) {
        if method == agent_method::MCP_MESSAGE {
            if let Ok(message) = parse::<acp_types::MessageMcpNotification>(params) {
                let tunnel = tag_of(&message.request_id).and_then(|tag| lock(&self.tunnels).get(tag).cloned());
                if let Some(tunnel) = tunnel {
                    tunnel.provider_notification(&message.request_id, message.method, message.params).await;
                    return;
                }
            }
        }
        if let Err(e) = agent.notify_raw(method, params).await {
            tracing::debug!(error = %e, method, "acp conductor: notification to the agent not sent");
        }
    }

    /// The agent's `initialize` answer: bridging starts when it is a v1 answer without
    /// `mcpCapabilities.acp`, which is then advertised; otherwise the answer passes verbatim.
    fn on_initialized(&self, answer: Box<RawValue>) -> Box<RawValue> {
        let Ok(mut result) = serde_json::from_str::<Map<String, Value>>(answer.get()) else { return answer };
        if result.get("protocolVersion") != Some(&json!(1)) {
            self.active.store(false, Ordering::Release);
            return answer;
        }
        let capabilities = object_at(&mut result, "agentCapabilities");
        let mcp = object_at(capabilities, "mcpCapabilities");
        if mcp.get("acp") == Some(&Value::Bool(true)) {
            self.active.store(false, Ordering::Release);
            return answer;
        }
        mcp.insert("acp".to_owned(), Value::Bool(true));
        self.active.store(true, Ordering::Release);
        serde_json::value::to_raw_value(&result).unwrap_or(answer)
    }

    /// The params with each `"type": "acp"` server made a stdio server running the shim;
    /// `None` when there is none.
    fn rewrite(self: &Arc<Self>, params: Option<&RawValue>) -> Result<Option<Box<RawValue>>, ErrorObject> {
        let Some(params) = params else { return Ok(None) };
        let mut params: Map<String, Value> = serde_json::from_str(params.get())
            .map_err(|e| ErrorObject::invalid_params(format_args!("params must be an object: {e}")))?;
        let Some(Value::Array(servers)) = params.get_mut("mcpServers") else { return Ok(None) };
        if !servers.iter().any(|s| s.get("type").and_then(Value::as_str) == Some("acp")) {
            return Ok(None);
        }
        let listening = self.listen().map_err(|e| {
            ErrorObject::internal_error(format_args!("the conductor cannot bridge MCP-over-ACP servers: {e}"))
        })?;
        for server in servers.iter_mut() {
            if server.get("type").and_then(Value::as_str) != Some("acp") {
                continue;
            }
            let Value::Object(acp) = server else { continue };
            let Some(server_id) = acp.get("serverId").and_then(Value::as_str) else {
                return Err(ErrorObject::invalid_params("an `acp` MCP server without a string `serverId`"));
            };
            lock(&self.declared).insert(server_id.to_owned());
            let mut args = self.command.args.clone();
            args.extend([
                "--socket".to_owned(),
                listening.socket.to_string_lossy().into_owned(),
                "--server-id".to_owned(),
                server_id.to_owned(),
            ]);
            let mut stdio = Map::new();
            stdio.insert("name".to_owned(), acp.get("name").cloned().unwrap_or(Value::String(String::new())));
            stdio.insert("command".to_owned(), Value::String(self.command.program.clone()));
            stdio.insert("args".to_owned(), json!(args));
            stdio.insert("env".to_owned(), json!([]));
            if let Some(meta) = acp.get("_meta") {
                stdio.insert("_meta".to_owned(), meta.clone());
            }
            *server = Value::Object(stdio);
        }
        serde_json::value::to_raw_value(&params).map(Some).map_err(ErrorObject::internal_error)
    }

    /// The socket, listening from the first bridged declaration on.
    fn listen(self: &Arc<Self>) -> io::Result<Arc<Listening>> {
        let mut listening = lock(&self.listening);
        if let Some(listening) = &*listening {
            return Ok(listening.clone());
        }
        let dir = std::env::temp_dir().join(format!("acp-conductor-{}-{}", std::process::id(), super::random_tag()));
        create_private_dir(&dir)?;
        let socket = dir.join("mcp.sock");
        let listener = UnixListener::bind(&socket);
        let made = Arc::new(Listening { dir, socket });
        let listener = listener?;
        tokio::spawn(self.clone().accept(listener));
        *listening = Some(made.clone());
        Ok(made)
    }

    async fn accept(self: Arc<Self>, listener: UnixListener) {
        loop {
            let stream = tokio::select! {
                () = self.shutdown.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!(error = %e, "acp conductor: the MCP bridge's socket failed");
                        return;
                    }
                },
            };
            let bridge = self.clone();
            tokio::spawn(async move { bridge.serve_shim(stream).await });
        }
    }

    /// One shim: its hello, then the relay until either side ends.
    async fn serve_shim(self: Arc<Self>, stream: UnixStream) {
        let (read, mut write) = stream.into_split();
        let mut lines = LineReader::new(read, DEFAULT_MAX_LINE_BYTES);
        let connected = match self.connect(&mut lines).await {
            Ok(connected) => connected,
            Err(reason) => {
                tracing::warn!(%reason, "acp conductor: an MCP bridge shim was refused");
                let _ = write.write_all(format!("{}\n", json!({"error": reason})).as_bytes()).await;
                return;
            }
        };
        let (tunnel, local) = connected;
        if write.write_all(b"{\"connected\":true}\n").await.is_err() {
            tunnel.hang_up();
            return;
        }
        let mut inbox = local.inbox;
        let outbox = local.outbox;
        let to_shim = async move {
            while let Some(message) = inbox.recv().await {
                let mut line = message.to_string();
                line.push('\n');
                if write.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
            }
            let _ = write.shutdown().await;
        };
        let errors = tunnel.clone();
        let from_shim = async move {
            loop {
                let frame = match lines.next_frame().await {
                    Ok(Some(frame)) => frame,
                    Ok(None) | Err(_) => break,
                };
                let message = match frame {
                    Frame::Line(line) => serde_json::from_slice::<Value>(line)
                        .map_err(|_| ErrorObject::new(crate::codes::PARSE_ERROR, "Parse error")),
                    Frame::Oversized { .. } => Err(ErrorObject::invalid_request("message too long")),
                };
                match message {
                    Ok(message) => {
                        // Waits while the tunnel has not relayed the earlier ones: the shim is
                        // read no faster than the ACP connection takes its messages.
                        if !outbox.send(message).await {
                            break;
                        }
                    }
                    Err(error) => {
                        let error = serde_json::to_value(error).unwrap_or(Value::Null);
                        errors.deliver(answer_message(Value::Null, Err(error))).await;
                    }
                }
            }
            // Dropping the outbox ends the tunnel: its requests in flight are cancelled.
        };
        tokio::join!(to_shim, from_shim);
    }

    /// Reads the shim's hello and connects it: a tunnel to the server it names, if the
    /// conductor declared that server to the agent.
    async fn connect<R>(
        self: &Arc<Self>,
        lines: &mut LineReader<R>,
    ) -> Result<(Arc<Tunnel>, super::tunnel::LocalEnd), String>
    where
        R: tokio::io::AsyncRead + Unpin,
    {
        #[derive(Deserialize)]
        struct Hello {
            #[serde(rename = "serverId")]
            server_id: String,
        }
        let frame = tokio::time::timeout(HELLO_TIMEOUT, lines.next_frame())
            .await
            .map_err(|_| "no hello from the shim".to_owned())?
            .map_err(|e| format!("reading the shim's hello: {e}"))?
            .ok_or_else(|| "the shim closed before its hello".to_owned())?;
        let hello: Hello = match frame {
            Frame::Line(line) if line.len() <= HELLO_MAX_BYTES => {
                serde_json::from_slice(line).map_err(|e| format!("invalid hello: {e}"))?
            }
            _ => return Err("the shim's hello is too long".to_owned()),
        };
        if !lock(&self.declared).contains(&hello.server_id) {
            return Err(format!("no MCP server `{}` was bridged", hello.server_id));
        }
        let route = self.route.get().cloned().ok_or_else(|| "the chain is not connected yet".to_owned())?;
        let registry = Arc::downgrade(self);
        let on_end = Box::new(move |tag: &str| {
            if let Some(bridge) = registry.upgrade() {
                lock(&bridge.tunnels).remove(tag);
            }
        });
        let (tunnel, local) = Tunnel::start(McpServerAcpId(hello.server_id), route, on_end, |tunnel| {
            lock(&self.tunnels).insert(tunnel.tag().to_owned(), tunnel);
        });
        Ok((tunnel, local))
    }

    /// The chain has ended: no more shims, every connection closed, the socket removed.
    pub(crate) fn shut_down(&self) {
        self.shutdown.cancel();
        for (_, tunnel) in lock(&self.tunnels).drain() {
            tunnel.close();
        }
        lock(&self.listening).take();
    }
}

fn parse<T: serde::de::DeserializeOwned>(params: Option<&RawValue>) -> Result<T, ErrorObject> {
    let text = params.map_or("{}", RawValue::get);
    serde_json::from_str(text).map_err(ErrorObject::invalid_params)
}

fn agent_error(e: crate::Error) -> ErrorObject {
    match e {
        crate::Error::Rpc(error) => error,
        crate::Error::Cancelled => ErrorObject::request_cancelled(),
        other => ErrorObject::internal_error(format_args!("forwarding failed: {other}")),
    }
}

/// The object at `key` of `map`, made an object if it is missing or something else.
fn object_at<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = map.entry(key.to_owned()).or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(map) => map,
        _ => unreachable!("made an object above"),
    }
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

/// The shim the agent runs for a bridged server: connects to the conductor's `socket`, says
/// which server it is for, then copies stdin to the socket and the socket to stdout until the
/// conductor closes its side. An error when the conductor cannot be reached or refuses it
/// (the reason is in the error).
pub async fn run_shim(socket: &Path, server_id: &str) -> io::Result<()> {
    let stream = UnixStream::connect(socket).await?;
    let (read, mut write) = stream.into_split();
    let hello = format!("{}\n", json!({"serverId": server_id}));
    write.write_all(hello.as_bytes()).await?;
    let mut read = BufReader::new(read);
    let mut answer = String::new();
    read.read_line(&mut answer).await?;
    let answer: Value = serde_json::from_str(&answer)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "the conductor did not answer the bridge's hello"))?;
    if answer.get("connected") != Some(&Value::Bool(true)) {
        let reason = answer.get("error").and_then(Value::as_str).unwrap_or("refused");
        return Err(io::Error::new(io::ErrorKind::ConnectionRefused, reason.to_owned()));
    }
    let up = async move {
        let _ = relay(tokio::io::stdin(), &mut write).await;
        let _ = write.shutdown().await;
        // Keep relaying down until the conductor closes its side (its answers still due).
        std::future::pending::<()>().await;
    };
    let down = async move { relay(read, &mut tokio::io::stdout()).await };
    tokio::select! {
        copied = down => copied,
        () = up => Ok(()),
    }
}

/// Copies `from` to `to` until the end of `from`, flushing after every chunk (MCP's messages
/// must not wait in a buffer).
async fn relay<R, W>(mut from: R, to: &mut W) -> io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::io::AsyncReadExt::read(&mut from, &mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buf[..n]).await?;
        to.flush().await?;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use tokio::io::AsyncReadExt;
    use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

    use super::*;
    use crate::core::transport::{PipeReader, PipeWriter};

    /// Past this many bytes taken from a shim whose messages cannot go anywhere, the bridge is
    /// queueing them without limit: what it may hold (the socket's buffers, its queues of
    /// [`super::super::tunnel`] and the short ACP write queue below) is well under a MiB.
    const CAP: usize = 8 << 20;

    /// A shim connected through a bridge to an ACP peer driven by hand (`far`), which reads
    /// nothing unless a test reads it.
    async fn connected_shim() -> (OwnedReadHalf, OwnedWriteHalf, LineReader<PipeReader>, PipeWriter) {
        let ((ours_r, ours_w), (far_r, far_w)) = crate::core::transport::duplex(4096);
        let (peer, serve) = crate::Connection::new().write_queue_capacity(4).serve(ours_r, ours_w, ());
        tokio::spawn(serve);
        let bridge = Bridge::new(McpBridge::new("shim", Vec::<String>::new()));
        bridge.set_route(Route::plain(peer));
        lock(&bridge.declared).insert("s".to_owned());
        let (shim, theirs) = UnixStream::pair().unwrap();
        let (mut shim_read, mut shim_write) = shim.into_split();
        shim_write.write_all(b"{\"serverId\":\"s\"}\n").await.unwrap();
        tokio::spawn(bridge.serve_shim(theirs));
        let far = LineReader::new(far_r, DEFAULT_MAX_LINE_BYTES);
        let mut connected = [0u8; 19];
        shim_read.read_exact(&mut connected).await.unwrap();
        assert_eq!(&connected, b"{\"connected\":true}\n");
        (shim_read, shim_write, far, far_w)
    }

    async fn next_message<R: tokio::io::AsyncRead + Unpin>(lines: &mut LineReader<R>) -> Value {
        match lines.next_frame().await.unwrap() {
            Some(Frame::Line(line)) => serde_json::from_slice(line).unwrap(),
            other => panic!("expected a message: {:?}", other.map(|_| "oversized")),
        }
    }

    /// Writes `line(0)`, `line(1)`, ... to the shim's socket until the bridge stops reading it;
    /// returns the number of the line under way and what is left of it. With the clock paused,
    /// the timeout fires only once nothing else can run: the socket stays full because the
    /// bridge waits, not because it is slow.
    async fn write_until_held(socket: &OwnedWriteHalf, line: impl Fn(usize) -> Vec<u8>) -> (usize, Vec<u8>) {
        let (mut written, mut n, mut current, mut at) = (0, 0, line(0), 0);
        loop {
            assert!(written < CAP, "the bridge took {written} bytes from the shim that could go nowhere");
            match socket.try_write(&current[at..]) {
                Ok(k) => {
                    written += k;
                    at += k;
                    if at == current.len() {
                        n += 1;
                        (current, at) = (line(n), 0);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if tokio::time::timeout(Duration::from_secs(60), socket.writable()).await.is_err() {
                        return (n, current[at..].to_vec());
                    }
                }
                Err(e) => panic!("writing to the bridge: {e}"),
            }
        }
    }

    /// A shim that writes faster than the ACP peer reads is held back (its socket fills), and
    /// every message reaches the peer, in order, once it reads.
    #[tokio::test(start_paused = true)]
    async fn a_shim_writing_faster_than_the_acp_peer_reads_is_held_back_and_nothing_is_lost() {
        let (_shim_read, shim_write, mut far, _far_w) = connected_shim().await;
        let pad = "x".repeat(4000);
        let line = |n: usize| {
            let message = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"n": n, "pad": pad}});
            format!("{message}\n").into_bytes()
        };
        let (last, rest) = write_until_held(&shim_write, line).await;
        let finish = tokio::spawn(async move {
            let mut shim_write = shim_write;
            shim_write.write_all(&rest).await.unwrap();
            shim_write
        });
        for n in 0..=last {
            let message = next_message(&mut far).await;
            assert_eq!(message["method"], "mcp/message");
            assert_eq!(message["params"]["serverId"], "s");
            assert_eq!(message["params"]["params"]["n"], n, "{}", message["params"]["method"]);
        }
        finish.await.unwrap();
    }

    /// A shim that sends invalid messages and reads none of the answers is held back too: the
    /// answers waiting for it stay bounded instead of piling up (one task each), and each is
    /// delivered once it reads.
    #[tokio::test(start_paused = true)]
    async fn a_shim_that_does_not_read_the_answers_to_its_invalid_messages_is_held_back() {
        let (shim_read, shim_write, _far, _far_w) = connected_shim().await;
        // `method` is no string: answered -32600 under the request's id, 4 KB long.
        let pad = "x".repeat(4000);
        let line = |n: usize| format!("{}\n", json!({"jsonrpc": "2.0", "id": format!("{n}-{pad}"), "method": 5}));
        let (last, rest) = write_until_held(&shim_write, |n| line(n).into_bytes()).await;
        let finish = tokio::spawn(async move {
            let mut shim_write = shim_write;
            shim_write.write_all(&rest).await.unwrap();
            shim_write
        });
        let mut answers = LineReader::new(shim_read, DEFAULT_MAX_LINE_BYTES);
        let mut answered = BTreeSet::new();
        while answered.len() <= last {
            let answer = next_message(&mut answers).await;
            assert_eq!(answer["error"]["code"], crate::codes::INVALID_REQUEST, "{answer}");
            let id = answer["id"].as_str().unwrap();
            let n: usize = id.split_once('-').unwrap().0.parse().unwrap();
            assert!(answered.insert(n), "{n} answered twice");
        }
        assert_eq!(answered, (0..=last).collect());
        finish.await.unwrap();
    }
}
