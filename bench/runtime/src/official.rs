//! The official SDK side: `agent-client-protocol` (5.2.0, pinned in `Cargo.toml`), used the
//! way its docs and examples show (`Agent.v1()` / `Client.v1()` builders, `Stdio`, `AcpAgent`,
//! `ByteStreams`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, ContentChunk, InitializeRequest, InitializeResponse, NewSessionRequest,
    NewSessionResponse, PromptRequest, PromptResponse, SessionNotification, SessionUpdate, StopReason, TextContent,
};
use agent_client_protocol::{
    AcpAgent, AcpAgentConfig, Agent, ByteStreams, Channel, Client, JsonRpcRequest, JsonRpcResponse, Stdio, UntypedRole,
};
use serde::{Deserialize, Serialize};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::common::{self, SESSION, TEXT};

/// The echo request of `rtt` (also used, through serde only, by our side).
#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "_echo", response = Pong)]
pub struct Ping {
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcResponse)]
pub struct Pong {
    pub echo: String,
}

/// Yield to the connection every this many notifications when streaming (0: never). The
/// official SDK's outgoing queue is unbounded and `send_notification` never waits, so a loop
/// that does not yield queues the whole turn before the writer gets to run.
fn yield_every() -> u64 {
    std::env::var("OFFICIAL_YIELD_EVERY").ok().and_then(|v| v.parse().ok()).unwrap_or(1)
}

fn update(session_id: &agent_client_protocol::v1::schema::SessionId) -> SessionNotification {
    SessionNotification::new(
        session_id.clone(),
        SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(TEXT)))),
    )
}

/// The agent process (stdio), for `pipe`.
pub async fn agent(stream: u64) {
    let every = yield_every();
    Agent
        .v1()
        .name("bench-agent")
        .on_receive_request(
            async move |init: InitializeRequest, responder, _cx| {
                responder.respond(InitializeResponse::new(init.protocol_version))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_req: NewSessionRequest, responder, _cx| responder.respond(NewSessionResponse::new(SESSION)),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |prompt: PromptRequest, responder, cx| {
                // Stream from a task, off the dispatch loop, as the docs advise for long work.
                let cx2 = cx.clone();
                cx.spawn(async move {
                    for i in 0..stream {
                        cx2.send_notification(update(&prompt.session_id))?;
                        if every > 0 && i % every == every - 1 {
                            tokio::task::yield_now().await;
                        }
                    }
                    responder.respond(PromptResponse::new(StopReason::EndTurn))
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(Stdio::new())
        .await
        .expect("agent connection");
}

/// Spawns the agent process with `AcpAgent`, sets up a session, then times one prompt turn.
pub async fn pipe_client(n: u64) {
    let exe = std::env::current_exe().expect("current exe");
    let agent = AcpAgent::new(
        AcpAgentConfig::new(exe).arg("agent").arg("--impl").arg("official").arg("--n").arg(n.to_string()),
    );
    let seen = Arc::new(AtomicU64::new(0));
    let seen2 = seen.clone();
    let (elapsed, client_kib, agent_kib) = Client
        .v1()
        .name("bench-client")
        .on_receive_notification(
            async move |update: SessionNotification, _cx| {
                std::hint::black_box(&update);
                seen2.fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(agent, async |cx| {
            cx.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task().await?;
            let session = cx.send_request(NewSessionRequest::new("/")).block_task().await?;
            let prompt = PromptRequest::new(session.session_id, vec![ContentBlock::Text(TextContent::new("go"))]);

            let t0 = Instant::now();
            let resp = cx.send_request(prompt).block_task().await?;
            // The SDK's dispatch loop is sequential, so this is normally already true.
            while seen.load(Ordering::Relaxed) < n {
                tokio::task::yield_now().await;
            }
            let elapsed = t0.elapsed();
            assert_eq!(resp.stop_reason, StopReason::EndTurn);
            Ok((elapsed, common::self_hwm_kib(), common::child_hwm_kib()))
        })
        .await
        .expect("client connection");
    assert_eq!(seen.load(Ordering::Relaxed), n);
    common::print_pipe("pipe", "official", n, elapsed, client_kib, agent_kib);
}

/// `n` sequential typed `_echo` round trips in memory: over `ByteStreams` on a tokio duplex
/// (newline-delimited JSON bytes, like ours), or over the SDK's `Channel` (in-process frames,
/// no byte encoding at all).
pub async fn rtt(n: u64, channel: bool) {
    let server = UntypedRole.builder().on_receive_request(
        async move |ping: Ping, responder, _cx| responder.respond(Pong { echo: ping.message }),
        agent_client_protocol::on_receive_request!(),
    );
    let client = UntypedRole.builder();
    let run = async |cx: agent_client_protocol::ConnectionTo<UntypedRole>| {
        let ping = Ping { message: "ping".into() };
        for _ in 0..common::RTT_WARMUP {
            cx.send_request(ping.clone()).block_task().await?;
        }
        let mut samples = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let t = Instant::now();
            let pong = cx.send_request(ping.clone()).block_task().await?;
            samples.push(t.elapsed());
            std::hint::black_box(pong);
        }
        Ok(samples)
    };
    let samples = if channel {
        let (a, b) = Channel::duplex();
        tokio::spawn(async move { server.connect_to(b).await });
        client.connect_with(a, run).await
    } else {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        tokio::spawn(async move { server.connect_to(ByteStreams::new(bw.compat_write(), br.compat())).await });
        client.connect_with(ByteStreams::new(aw.compat_write(), ar.compat()), run).await
    }
    .expect("rtt connection");
    common::print_latency("rtt", if channel { "official-channel" } else { "official" }, samples);
}

/// `k` prompt turns over `ByteStreams` on a tokio duplex, each cancelled once the prompt
/// handler runs. The SDK does not act on `session/cancel` itself (it only knows
/// `$/cancel_request`), so the agent does what ACP asks by hand: the prompt handler parks its
/// responder and the `session/cancel` handler answers it with `cancelled`.
pub async fn cancel(k: u64) {
    let (tx, mut started) = tokio::sync::mpsc::unbounded_channel::<()>();
    let parked: Arc<Mutex<Option<agent_client_protocol::v1::Responder<PromptResponse>>>> = Arc::default();
    let parked2 = parked.clone();
    let agent = Agent
        .v1()
        .name("bench-agent")
        .on_receive_request(
            async move |init: InitializeRequest, responder, _cx| {
                responder.respond(InitializeResponse::new(init.protocol_version))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_req: NewSessionRequest, responder, _cx| responder.respond(NewSessionResponse::new(SESSION)),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_prompt: PromptRequest, responder, _cx| {
                *parked.lock().unwrap() = Some(responder);
                let _ = tx.send(());
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |_cancel: CancelNotification, _cx| {
                let responder = parked2.lock().unwrap().take();
                match responder {
                    Some(responder) => responder.respond(PromptResponse::new(StopReason::Cancelled)),
                    None => Ok(()),
                }
            },
            agent_client_protocol::on_receive_notification!(),
        );
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    tokio::spawn(async move { agent.connect_to(ByteStreams::new(bw.compat_write(), br.compat())).await });

    let samples = Client
        .v1()
        .name("bench-client")
        .connect_with(ByteStreams::new(aw.compat_write(), ar.compat()), async |cx| {
            cx.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task().await?;
            let session = cx.send_request(NewSessionRequest::new("/")).block_task().await?;
            let sid = session.session_id;
            let warmup = 5;
            let mut samples = Vec::with_capacity(k as usize);
            for i in 0..k + warmup {
                let call =
                    cx.send_request(PromptRequest::new(sid.clone(), vec![ContentBlock::Text(TextContent::new("go"))]));
                started.recv().await.expect("prompt handler started");
                let t0 = Instant::now();
                cx.send_notification(CancelNotification::new(sid.clone()))?;
                let resp = call.block_task().await?;
                let elapsed = t0.elapsed();
                assert_eq!(resp.stop_reason, StopReason::Cancelled);
                if i >= warmup {
                    samples.push(elapsed);
                }
            }
            Ok(samples)
        })
        .await
        .expect("cancel connection");
    common::print_latency("cancel", "official", samples);
}
