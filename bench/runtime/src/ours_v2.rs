//! Protocol v2, our side: acp-rpc's typed v2 layer (`acp_rpc::v2`, feature
//! `unstable_protocol_v2`) with acp-types' v2 messages. The agent is an
//! `acp_types::v2::Agent<AgentContext>` whose prompt handler streams through its `Turn`; the
//! client is `v2::serve_client` and waits for the turn's end with `AgentHandle::prompt_turn`.
//!
//! `pipe2 --impl ours-raw-client` keeps that agent but has the v1 measurement's kind of client:
//! a raw `Handler` that decodes each `session/update` itself (here into the v2 type) and sees
//! the turn's end in the idle update. The difference between the two is the cost of the typed
//! v2 client layer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use acp_rpc::transport::{ChildProcess, SpawnOptions, StderrMode};
use acp_rpc::v2::{AgentContext, ClientContext, serve_agent, serve_client};
use acp_rpc::{Connection, Handler, IncomingNotification};
use acp_types::v2::{
    Agent, AgentCapabilities, CancelSessionNotification, Client, CloseSessionRequest, CloseSessionResponse, Error,
    IdleStateUpdateStopReason as StopReason, Implementation, InitializeRequest, InitializeResponse,
    ListSessionsRequest, ListSessionsResponse, NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse,
    ProtocolVersion, RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    ResumeSessionRequest, ResumeSessionResponse, SessionCapabilities, SessionInfo, SessionUpdate, StateUpdate,
    TextContent, UpdateSessionNotification,
};
use tokio::sync::Notify;

use crate::common::{self, SESSION, TEXT};
use crate::ours::memory_pipes;

/// The v2 agent: `session/prompt` streams `stream` chunks of one agent message, then returns
/// (the runtime answers the prompt at the first chunk and sends the idle update at the end);
/// `session/list` answers one session. The rest of the v2 baseline answers trivially.
struct BenchAgent {
    stream: u64,
}

impl Agent<AgentContext> for BenchAgent {
    async fn initialize(&self, p: InitializeRequest, _: AgentContext) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(p.protocol_version, Implementation::new("bench-agent", "0"))
            .capabilities(AgentCapabilities::new().session(SessionCapabilities::new())))
    }
    async fn session_new(&self, _: NewSessionRequest, _: AgentContext) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new(SESSION))
    }
    async fn session_list(&self, _: ListSessionsRequest, _: AgentContext) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(vec![SessionInfo::new(SESSION, "/")]))
    }
    async fn session_resume(&self, _: ResumeSessionRequest, _: AgentContext) -> Result<ResumeSessionResponse, Error> {
        Ok(ResumeSessionResponse::new())
    }
    async fn session_close(&self, _: CloseSessionRequest, _: AgentContext) -> Result<CloseSessionResponse, Error> {
        Ok(CloseSessionResponse::new())
    }
    async fn session_prompt(&self, _: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let turn = cx.turn().expect("a prompt handler has a turn");
        let message = turn.agent_message();
        for _ in 0..self.stream {
            message.text(TEXT).await?;
        }
        Ok(turn.response().await?)
    }
    async fn session_cancel(&self, _: CancelSessionNotification, _: AgentContext) -> Result<(), Error> {
        Ok(())
    }
}

/// The v2 client: every `session/update` arrives decoded (`UpdateSessionNotification`); the
/// agent-message chunks are counted.
#[derive(Clone, Default)]
struct Counter {
    chunks: Arc<AtomicU64>,
}

impl Client<ClientContext> for Counter {
    async fn session_request_permission(
        &self,
        _: RequestPermissionRequest,
        _: ClientContext,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled(
            acp_types::v2::CancelledPermissionOutcome::new(),
        )))
    }
    async fn session_update(&self, update: UpdateSessionNotification, _: ClientContext) -> Result<(), Error> {
        if matches!(update.update, SessionUpdate::AgentMessageChunk(_)) {
            self.chunks.fetch_add(1, Ordering::Relaxed);
        }
        std::hint::black_box(&update);
        Ok(())
    }
}

/// The raw client of `ours-raw-client`: decodes every `session/update` into the typed v2
/// notification, counts the chunks, and signals the idle update that carries a stop reason.
#[derive(Default)]
struct RawCounter {
    chunks: AtomicU64,
    ended: Notify,
}

impl Handler for RawCounter {
    async fn handle_notification(&self, n: IncomingNotification) {
        if n.method == "session/update" {
            let update: UpdateSessionNotification = n.parse_params().expect("typed session/update");
            match &update.update {
                SessionUpdate::AgentMessageChunk(_) => {
                    self.chunks.fetch_add(1, Ordering::Relaxed);
                }
                SessionUpdate::StateUpdate(StateUpdate::Idle(idle)) if idle.stop_reason.is_some() => {
                    self.ended.notify_one();
                }
                _ => {}
            }
            std::hint::black_box(&update);
        }
    }
}

fn client_init() -> InitializeRequest {
    InitializeRequest::new(ProtocolVersion::V2, Implementation::new("bench-client", "0"))
}

/// The agent process (stdio), for `pipe2`.
pub async fn agent(stream: u64) {
    acp_rpc::v2::serve_stdio(BenchAgent { stream }).await.expect("agent connection");
}

fn spawn_agent(n: u64) -> ChildProcess {
    let exe = std::env::current_exe().expect("current exe");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["agent2", "--impl", "ours", "--n", &n.to_string()]);
    ChildProcess::spawn(cmd, SpawnOptions { stderr: StderrMode::Inherit, ..Default::default() }).expect("spawn agent")
}

/// Spawns the agent process, sets up a session, then times one prompt turn of `n` chunks:
/// from sending `session/prompt` until the client has handled the turn's idle update (and so,
/// by the runtime's contract, every update before it).
pub async fn pipe_client(n: u64) {
    let mut child = spawn_agent(n);
    let (r, w) = child.take_transport().expect("transport");
    let counter = Counter::default();
    let (agent, serve) = serve_client(counter.clone(), r, w);
    let serve = tokio::spawn(serve);

    let init = agent.initialize(client_init()).await.expect("initialize");
    assert_eq!(init.protocol_version, ProtocolVersion::V2);
    let session = agent.new_session(NewSessionRequest::new("/")).await.expect("session/new");
    let prompt = PromptRequest::new(session.session_id, vec![TextContent::new("go").into()]);

    let t0 = Instant::now();
    let end = agent.prompt_turn(prompt).await.expect("session/prompt");
    let seen = counter.chunks.load(Ordering::Relaxed);
    let elapsed = t0.elapsed();
    assert_eq!(end.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(seen, n, "every chunk handled before the turn's end");

    let agent_kib = common::child_hwm_kib();
    let client_kib = common::self_hwm_kib();
    agent.close();
    let _ = serve.await;
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    common::print_pipe("pipe2", "ours", n, elapsed, client_kib, agent_kib);
}

/// [`pipe_client`] with the raw client ([`RawCounter`]): the time runs until its handler has
/// seen the idle update (notifications are handled in order, so every chunk was too).
pub async fn pipe_raw_client(n: u64) {
    let mut child = spawn_agent(n);
    let (r, w) = child.take_transport().expect("transport");
    let counter = Arc::new(RawCounter::default());
    let (peer, serve) = Connection::new().v2_rules().serve(r, w, counter.clone());
    let serve = tokio::spawn(serve);

    let init: InitializeResponse = peer.request("initialize", &client_init()).await.expect("initialize");
    assert_eq!(init.protocol_version, ProtocolVersion::V2);
    let session: NewSessionResponse =
        peer.request("session/new", &NewSessionRequest::new("/")).await.expect("session/new");
    let prompt = PromptRequest::new(session.session_id, vec![TextContent::new("go").into()]);

    let t0 = Instant::now();
    let accepted: serde_json::Value = peer.request("session/prompt", &prompt).await.expect("session/prompt");
    counter.ended.notified().await;
    let seen = counter.chunks.load(Ordering::Relaxed);
    let elapsed = t0.elapsed();
    std::hint::black_box(accepted);
    assert_eq!(seen, n, "every chunk handled before the turn's end");

    let agent_kib = common::child_hwm_kib();
    let client_kib = common::self_hwm_kib();
    peer.close();
    let _ = serve.await;
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    common::print_pipe("pipe2", "ours-raw-client", n, elapsed, client_kib, agent_kib);
}

/// `n` sequential typed `session/list` round trips in memory (after `initialize`).
pub async fn rtt(n: u64) {
    let ((ar, aw), (br, bw)) = memory_pipes();
    let (agent, sc) = serve_client(Counter::default(), ar, aw);
    let (_client, sa) = serve_agent(BenchAgent { stream: 0 }, br, bw);
    tokio::spawn(sc);
    tokio::spawn(sa);
    agent.initialize(client_init()).await.expect("initialize");
    for _ in 0..common::RTT_WARMUP {
        agent.list_sessions(ListSessionsRequest::new()).await.expect("session/list");
    }
    let mut samples = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let t = Instant::now();
        let listed = agent.list_sessions(ListSessionsRequest::new()).await.expect("session/list");
        samples.push(t.elapsed());
        std::hint::black_box(listed);
    }
    common::print_latency("rtt2", "ours", samples);
}
