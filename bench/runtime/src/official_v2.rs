//! Protocol v2, the official SDK's side: `agent-client-protocol` 5.2.0 with its feature
//! `unstable_protocol_v2` (`Agent.v2()` / `Client.v2()`), written the way its
//! `simple_agent_v2` and `v2_one_shot_client` examples are: the prompt is acknowledged with the
//! user message's id first, and the turn runs in `cx.spawn`, ending with an idle update.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v2::schema::{
    AgentCapabilities, ContentBlock, ContentChunk, IdleStateUpdate, Implementation, InitializeRequest,
    InitializeResponse, ListSessionsRequest, ListSessionsResponse, MessageId, NewSessionRequest, NewSessionResponse,
    PromptRequest, PromptResponse, RunningStateUpdate, SessionCapabilities, SessionInfo, SessionUpdate, StateUpdate,
    StopReason, UpdateSessionNotification, UserMessage,
};
use agent_client_protocol::v2::{ConnectionTo, InitializeOutcome, Responder};
use agent_client_protocol::{AcpAgent, AcpAgentConfig, Agent, ByteStreams, Client, ConnectTo, Stdio};
use tokio::sync::Notify;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::common::{self, MESSAGE_ID, SESSION, TEXT};

/// The agent (the builder, a `ConnectTo<Client>`; its `connect_to` is the builder's): initialize, session/new, session/list (one session) and, when
/// `stream` is set, session/prompt streaming `stream` chunks.
fn agent_builder(stream: u64) -> impl ConnectTo<Client> {
    // As on v1 (see `official::yield_every`): the SDK's queues are unbounded, so the streaming
    // loop yields to let the writer run.
    let every = std::env::var("OFFICIAL_YIELD_EVERY").ok().and_then(|v| v.parse().ok()).unwrap_or(1u64);
    Agent
        .v2()
        .name("bench-agent")
        .on_receive_request(
            async move |init: InitializeRequest,
                        responder: Responder<InitializeResponse>,
                        _cx: ConnectionTo<Client>| {
                responder.respond(
                    InitializeResponse::new(init.protocol_version, Implementation::new("bench-agent", "0"))
                        .capabilities(AgentCapabilities::new().session(SessionCapabilities::new())),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_req: NewSessionRequest,
                        responder: Responder<NewSessionResponse>,
                        _cx: ConnectionTo<Client>| { responder.respond(NewSessionResponse::new(SESSION)) },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_req: ListSessionsRequest,
                        responder: Responder<ListSessionsResponse>,
                        _cx: ConnectionTo<Client>| {
                responder.respond(ListSessionsResponse::new(vec![SessionInfo::new(SESSION, "/")]))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |prompt: PromptRequest, responder: Responder<PromptResponse>, cx: ConnectionTo<Client>| {
                // Acceptance first, then the turn off the dispatch loop: the same updates our
                // runtime's `Turn` sends (user_message, running, the chunks, idle end_turn).
                let user_message = MessageId::new("msg_user_5f3c2a19d8e47_1");
                responder.respond(PromptResponse::new(user_message.clone()))?;
                let cx2 = cx.clone();
                cx.spawn(async move {
                    let session = prompt.session_id;
                    let send = |update: SessionUpdate| {
                        cx2.send_notification(UpdateSessionNotification::new(session.clone(), update))
                    };
                    send(SessionUpdate::UserMessage(UserMessage::new(user_message).content(prompt.prompt)))?;
                    send(SessionUpdate::StateUpdate(StateUpdate::Running(RunningStateUpdate::new())))?;
                    let message = MessageId::new(MESSAGE_ID);
                    for i in 0..stream {
                        send(SessionUpdate::AgentMessageChunk(ContentChunk::new(
                            ContentBlock::from(TEXT),
                            message.clone(),
                        )))?;
                        if every > 0 && i % every == every - 1 {
                            tokio::task::yield_now().await;
                        }
                    }
                    send(SessionUpdate::StateUpdate(StateUpdate::Idle(
                        IdleStateUpdate::new().stop_reason(StopReason::EndTurn),
                    )))
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
}

fn client_init() -> InitializeRequest {
    InitializeRequest::new(ProtocolVersion::V2, Implementation::new("bench-client", "0"))
}

async fn initialize(cx: &ConnectionTo<Agent>) -> agent_client_protocol::Result<()> {
    match cx.send_initialize(client_init()).block_task().await? {
        InitializeOutcome::Initialized(init) => {
            assert_eq!(init.protocol_version, ProtocolVersion::V2);
            Ok(())
        }
        _ => panic!("the agent did not select protocol v2"),
    }
}

/// The agent process (stdio), for `pipe2`.
pub async fn agent(stream: u64) {
    agent_builder(stream).connect_to(Stdio::new()).await.expect("agent connection");
}

/// Spawns the agent process with `AcpAgent`, sets up a session, then times one prompt turn:
/// from sending `session/prompt` until the notification handler has seen the idle update
/// with a stop reason (the SDK's dispatch loop handles notifications in order, so every chunk
/// was handled before it).
pub async fn pipe_client(n: u64) {
    let exe = std::env::current_exe().expect("current exe");
    let agent = AcpAgent::new(
        AcpAgentConfig::new(exe).arg("agent2").arg("--impl").arg("official").arg("--n").arg(n.to_string()),
    );
    let chunks = Arc::new(AtomicU64::new(0));
    let ended = Arc::new(Notify::new());
    let (chunks2, ended2) = (chunks.clone(), ended.clone());
    let (elapsed, client_kib, agent_kib) = Client
        .v2()
        .name("bench-client")
        .on_receive_notification(
            async move |update: UpdateSessionNotification, _cx: ConnectionTo<Agent>| {
                match &update.update {
                    SessionUpdate::AgentMessageChunk(_) => {
                        chunks2.fetch_add(1, Ordering::Relaxed);
                    }
                    SessionUpdate::StateUpdate(StateUpdate::Idle(idle)) if idle.stop_reason.is_some() => {
                        ended2.notify_one();
                    }
                    _ => {}
                }
                std::hint::black_box(&update);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(agent, async |cx| {
            initialize(&cx).await?;
            let session = cx.send_request(NewSessionRequest::new("/")).block_task().await?;
            let prompt = PromptRequest::new(session.session_id, vec![ContentBlock::from("go")]);

            let t0 = Instant::now();
            let accepted = cx.send_request(prompt).block_task().await?;
            ended.notified().await;
            let elapsed = t0.elapsed();
            std::hint::black_box(accepted);
            Ok((elapsed, common::self_hwm_kib(), common::child_hwm_kib()))
        })
        .await
        .expect("client connection");
    assert_eq!(chunks.load(Ordering::Relaxed), n);
    common::print_pipe("pipe2", "official", n, elapsed, client_kib, agent_kib);
}

/// `n` sequential typed `session/list` round trips in memory (after `initialize`), over
/// `ByteStreams` on a tokio duplex, as `official::rtt`.
pub async fn rtt(n: u64) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    let agent = agent_builder(0);
    tokio::spawn(async move { agent.connect_to(ByteStreams::new(bw.compat_write(), br.compat())).await });
    let samples = Client
        .v2()
        .name("bench-client")
        .connect_with(ByteStreams::new(aw.compat_write(), ar.compat()), async |cx| {
            initialize(&cx).await?;
            for _ in 0..common::RTT_WARMUP {
                cx.send_request(ListSessionsRequest::new()).block_task().await?;
            }
            let mut samples = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let t = Instant::now();
                let listed = cx.send_request(ListSessionsRequest::new()).block_task().await?;
                samples.push(t.elapsed());
                std::hint::black_box(listed);
            }
            Ok(samples)
        })
        .await
        .expect("rtt connection");
    common::print_latency("rtt2", "official", samples);
}
