//! Our side: acp-rpc (raw connection) with acp-types for every message, typed on both ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use acp_rpc::agent::AgentContext;
use acp_rpc::transport::{ChildProcess, SpawnOptions, StderrMode, stdio};
use acp_rpc::{Connection, ErrorObject, Handler, IncomingNotification, IncomingRequest, RawValue};
use acp_types::{
    AuthenticateRequest, AuthenticateResponse, CancelNotification, ContentBlock, ContentChunk, InitializeRequest,
    InitializeResponse, NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse, SessionNotification,
    SessionUpdate, StopReason, TextContent,
};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::common::{self, SESSION, TEXT};
use crate::official::{Ping, Pong};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelMode {
    /// The prompt handler never looks at its token and never returns.
    Ignore,
    /// The prompt handler waits for its token, then returns `cancelled`.
    Cooperative,
    /// Like `Ignore`, but a typed handler (`acp_types::Agent` on `serve_agent`): the runtime
    /// sees that it never asks for its token and skips the grace period.
    TypedIgnore,
}

/// The typed agent of [`CancelMode::TypedIgnore`].
struct TypedBenchAgent {
    started: mpsc::UnboundedSender<()>,
}

impl acp_types::Agent<AgentContext> for TypedBenchAgent {
    async fn initialize(&self, p: InitializeRequest, _: AgentContext) -> Result<InitializeResponse, acp_types::Error> {
        Ok(InitializeResponse::new(p.protocol_version))
    }
    async fn authenticate(
        &self,
        _: AuthenticateRequest,
        _: AgentContext,
    ) -> Result<AuthenticateResponse, acp_types::Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _: NewSessionRequest, _: AgentContext) -> Result<NewSessionResponse, acp_types::Error> {
        Ok(NewSessionResponse::new(SESSION))
    }
    async fn session_prompt(&self, _: PromptRequest, _: AgentContext) -> Result<PromptResponse, acp_types::Error> {
        let _ = self.started.send(());
        std::future::pending::<()>().await;
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _: CancelNotification, _: AgentContext) -> Result<(), acp_types::Error> {
        Ok(())
    }
}

/// The agent: answers initialize / session/new / _echo; `session/prompt` either streams
/// `stream` updates and ends the turn, or (cancel benchmark) signals `started` and waits.
struct BenchAgent {
    stream: u64,
    started: Option<mpsc::UnboundedSender<()>>,
    mode: CancelMode,
}

fn raw<T: Serialize>(value: &T) -> Result<Box<RawValue>, ErrorObject> {
    serde_json::value::to_raw_value(value).map_err(ErrorObject::internal_error)
}

impl Handler for BenchAgent {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        match &*req.method {
            "initialize" => {
                let p: InitializeRequest = req.parse_params()?;
                raw(&InitializeResponse::new(p.protocol_version))
            }
            "session/new" => {
                let _: NewSessionRequest = req.parse_params()?;
                raw(&NewSessionResponse::new(SESSION))
            }
            "session/prompt" => {
                let p: PromptRequest = req.parse_params()?;
                if let Some(started) = &self.started {
                    let _ = started.send(());
                    match self.mode {
                        CancelMode::Ignore | CancelMode::TypedIgnore => std::future::pending::<()>().await,
                        CancelMode::Cooperative => req.cancel.cancelled().await,
                    }
                    return raw(&PromptResponse::new(StopReason::Cancelled));
                }
                for _ in 0..self.stream {
                    let update = SessionNotification::new(
                        p.session_id.clone(),
                        SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(TEXT)))),
                    );
                    req.peer.notify("session/update", &update).await.map_err(ErrorObject::internal_error)?;
                }
                raw(&PromptResponse::new(StopReason::EndTurn))
            }
            "_echo" => {
                let p: Ping = req.parse_params()?;
                raw(&Pong { echo: p.message })
            }
            other => Err(ErrorObject::method_not_found(other)),
        }
    }
}

/// The client: decodes every `session/update` into the typed `SessionNotification`.
#[derive(Default)]
struct Counter {
    seen: AtomicU64,
}

impl Handler for Counter {
    async fn handle_notification(&self, n: IncomingNotification) {
        if n.method == "session/update" {
            let update: SessionNotification = n.parse_params().expect("typed session/update");
            std::hint::black_box(&update);
            self.seen.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub(crate) type Half<T> = (tokio::io::ReadHalf<T>, tokio::io::WriteHalf<T>);

/// The in-memory transport of `rtt` and `cancel`: `tokio::io::duplex` (64 KiB each way), split
/// into halves, exactly what the official side runs on (there behind the futures-io `compat`
/// adapters its `ByteStreams` needs).
pub(crate) fn memory_pipes() -> (Half<tokio::io::DuplexStream>, Half<tokio::io::DuplexStream>) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    (tokio::io::split(a), tokio::io::split(b))
}

/// The agent process (stdio), for `pipe`.
pub async fn agent(stream: u64) {
    let (r, w) = stdio();
    let (_peer, serve) = Connection::new().serve(r, w, BenchAgent { stream, started: None, mode: CancelMode::Ignore });
    serve.await.expect("agent connection");
}

/// Spawns the agent process, sets up a session, then times one prompt turn of `n` updates.
pub async fn pipe_client(n: u64) {
    let exe = std::env::current_exe().expect("current exe");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["agent", "--impl", "ours", "--n", &n.to_string()]);
    let mut child = ChildProcess::spawn(cmd, SpawnOptions { stderr: StderrMode::Inherit, ..Default::default() })
        .expect("spawn agent");
    let (r, w) = child.take_transport().expect("transport");
    let counter = Arc::new(Counter::default());
    let (peer, serve) = Connection::new().serve(r, w, counter.clone());
    let serve = tokio::spawn(serve);

    let _: InitializeResponse = peer.request("initialize", &InitializeRequest::new(1u16)).await.expect("initialize");
    let session: NewSessionResponse =
        peer.request("session/new", &NewSessionRequest::new("/", vec![])).await.expect("session/new");
    let prompt = PromptRequest::new(session.session_id, vec![ContentBlock::Text(TextContent::new("go"))]);

    let t0 = Instant::now();
    let resp: PromptResponse = peer.request("session/prompt", &prompt).await.expect("session/prompt");
    // The runtime delivers a response only after every earlier notification was handled.
    let seen = counter.seen.load(Ordering::Relaxed);
    let elapsed = t0.elapsed();
    assert_eq!(resp.stop_reason, StopReason::EndTurn);
    assert_eq!(seen, n, "every update handled before the prompt's answer");

    let agent_kib = common::child_hwm_kib();
    let client_kib = common::self_hwm_kib();
    peer.close();
    let _ = serve.await;
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    common::print_pipe("pipe", "ours", n, elapsed, client_kib, agent_kib);
}

/// `n` sequential typed `_echo` round trips in memory ([`memory_pipes`]).
pub async fn rtt(n: u64) {
    let ((ar, aw), (br, bw)) = memory_pipes();
    let (client, sc) = Connection::new().serve(ar, aw, ());
    let (_agent, sa) =
        Connection::new().serve(br, bw, BenchAgent { stream: 0, started: None, mode: CancelMode::Ignore });
    tokio::spawn(sc);
    tokio::spawn(sa);
    let ping = Ping { message: "ping".into() };
    for _ in 0..common::RTT_WARMUP {
        let _: Pong = client.request("_echo", &ping).await.expect("echo");
    }
    let mut samples = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let t = Instant::now();
        let pong: Pong = client.request("_echo", &ping).await.expect("echo");
        samples.push(t.elapsed());
        std::hint::black_box(pong);
    }
    common::print_latency("rtt", "ours", samples);
}

/// `k` prompt turns in memory ([`memory_pipes`]), each cancelled once the handler runs; the
/// sample is from sending `session/cancel` to receiving the prompt's response.
pub async fn cancel(k: u64, mode: CancelMode, grace: Option<Duration>) {
    let label = match (mode, grace) {
        (CancelMode::Cooperative, _) => "ours-coop".to_string(),
        (CancelMode::TypedIgnore, _) => "ours-typed-ignore".to_string(),
        (CancelMode::Ignore, None) => "ours-ignore".to_string(),
        (CancelMode::Ignore, Some(g)) => format!("ours-ignore-grace{}", g.as_millis()),
    };
    let ((ar, aw), (br, bw)) = memory_pipes();
    let (tx, mut started) = mpsc::unbounded_channel();
    let mut agent_conn = Connection::new();
    if let Some(g) = grace {
        agent_conn = agent_conn.cancel_grace(g);
    }
    let (client, sc) = Connection::new().serve(ar, aw, ());
    let sa = match mode {
        CancelMode::TypedIgnore => agent_conn.serve_agent(TypedBenchAgent { started: tx }, br, bw).1,
        _ => agent_conn.serve(br, bw, BenchAgent { stream: 0, started: Some(tx), mode }).1,
    };
    tokio::spawn(sc);
    tokio::spawn(sa);

    let _: InitializeResponse = client.request("initialize", &InitializeRequest::new(1u16)).await.expect("initialize");
    let session: NewSessionResponse =
        client.request("session/new", &NewSessionRequest::new("/", vec![])).await.expect("session/new");
    let sid = session.session_id.0.clone();
    let prompt = PromptRequest::new(session.session_id, vec![ContentBlock::Text(TextContent::new("go"))]);

    let warmup = 5;
    let mut samples = Vec::with_capacity(k as usize);
    for i in 0..k + warmup {
        let call = client.request::<_, PromptResponse>("session/prompt", &prompt);
        tokio::pin!(call);
        tokio::select! {
            biased;
            r = &mut call => panic!("prompt answered before cancel: {r:?}"),
            _ = started.recv() => {}
        }
        let t0 = Instant::now();
        client.cancel_session(&sid).await.expect("session/cancel");
        let resp = call.await.expect("prompt response");
        let elapsed = t0.elapsed();
        assert_eq!(resp.stop_reason, StopReason::Cancelled);
        if i >= warmup {
            samples.push(elapsed);
        }
    }
    common::print_latency("cancel", &label, samples);
}
