//! The agent every server runs, and the two Rust servers.
//!
//! `initialize` answers protocol version 1; `session/new` a fresh session id; `session/prompt`
//! streams the updates its text asks for ([`common::parse_prompt`]) and ends the turn
//! (`end_turn`). Each side's agent is written the way its SDK's docs show.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::common::{self, TEXT};

static SESSIONS: AtomicU64 = AtomicU64::new(0);

fn session_id() -> String {
    format!("sess-{}", SESSIONS.fetch_add(1, Ordering::Relaxed))
}

/// The text of a prompt's first text block.
fn ours_prompt_text(prompt: &[acp_types::ContentBlock]) -> &str {
    prompt
        .iter()
        .find_map(|b| match b {
            acp_types::ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .unwrap_or("")
}

// ---- ours: an `acp_types::Agent` on acp-rpc's HttpServer ---------------------------------

mod ours {
    use acp_rpc::agent::AgentContext;
    use acp_types::{
        Agent, AuthenticateRequest, AuthenticateResponse, CancelNotification, ContentBlock, ContentChunk, Error,
        InitializeRequest, InitializeResponse, NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse,
        SessionNotification, SessionUpdate, StopReason, TextContent,
    };

    use super::*;

    pub struct BenchAgent;

    impl Agent<AgentContext> for BenchAgent {
        async fn initialize(&self, p: InitializeRequest, _: AgentContext) -> Result<InitializeResponse, Error> {
            Ok(InitializeResponse::new(p.protocol_version))
        }
        async fn authenticate(&self, _: AuthenticateRequest, _: AgentContext) -> Result<AuthenticateResponse, Error> {
            Ok(AuthenticateResponse::new())
        }
        async fn session_new(&self, _: NewSessionRequest, _: AgentContext) -> Result<NewSessionResponse, Error> {
            Ok(NewSessionResponse::new(session_id()))
        }
        async fn session_prompt(&self, p: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
            let (n, pause) = common::parse_prompt(ours_prompt_text(&p.prompt));
            for _ in 0..n {
                let chunk = ContentChunk::new(ContentBlock::Text(TextContent::new(TEXT)));
                let update = SessionNotification::new(p.session_id.clone(), SessionUpdate::AgentMessageChunk(chunk));
                cx.client().session_update(update).await?;
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
            Ok(PromptResponse::new(StopReason::EndTurn))
        }
        async fn session_cancel(&self, _: CancelNotification, _: AgentContext) -> Result<(), Error> {
            Ok(())
        }
    }
}

/// acp-rpc's server on 127.0.0.1 (the connection limit raised for the 10k test, and the socket
/// limit to `max_sockets`, since an open WebSocket holds its socket's place; every other option
/// at its default).
pub async fn serve_ours(port: u16, max_sockets: usize) {
    use acp_rpc::http::server::{HttpServer, ServerOptions};
    let options = ServerOptions { max_connections: 1_000_000, max_sockets, ..ServerOptions::default() };
    let server = HttpServer::agent(|| ours::BenchAgent).options(options).bind(("127.0.0.1", port)).await.expect("bind");
    println!("LISTENING {}", server.local_addr().port());
    server.run().await.expect("serve");
}

// ---- official: `Agent.v1()` on agent-client-protocol-http's AcpHttpServer ---------------------

mod official {
    use agent_client_protocol::v1::schema::{
        ContentBlock, ContentChunk, InitializeRequest, InitializeResponse, NewSessionRequest, NewSessionResponse,
        PromptRequest, PromptResponse, SessionNotification, SessionUpdate, StopReason, TextContent,
    };
    use agent_client_protocol::{Agent, Client, ConnectTo};

    use super::*;

    fn prompt_text(prompt: &[ContentBlock]) -> &str {
        prompt
            .iter()
            .find_map(|b| match b {
                ContentBlock::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .unwrap_or("")
    }

    pub fn agent() -> impl ConnectTo<Client> {
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
                async move |_req: NewSessionRequest, responder, _cx| {
                    responder.respond(NewSessionResponse::new(session_id()))
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |prompt: PromptRequest, responder, cx| {
                    let (n, pause) = common::parse_prompt(prompt_text(&prompt.prompt));
                    // Stream from a task, off the dispatch loop, as the SDK's docs advise for
                    // long work; yield after each update (its best setting in bench/runtime:
                    // `send_notification` never waits, its queue is unbounded).
                    let cx2 = cx.clone();
                    cx.spawn(async move {
                        for _ in 0..n {
                            let chunk = ContentChunk::new(ContentBlock::Text(TextContent::new(TEXT)));
                            let update = SessionNotification::new(
                                prompt.session_id.clone(),
                                SessionUpdate::AgentMessageChunk(chunk),
                            );
                            cx2.send_notification(update)?;
                            if pause.is_zero() {
                                tokio::task::yield_now().await;
                            } else {
                                tokio::time::sleep(pause).await;
                            }
                        }
                        responder.respond(PromptResponse::new(StopReason::EndTurn))
                    })
                },
                agent_client_protocol::on_receive_request!(),
            )
    }
}

/// The official server on 127.0.0.1, as its docs show (`axum::serve` of `into_router()`),
/// with one addition: `TCP_NODELAY` on every connection, as ours and node's servers set it.
/// axum leaves Nagle's algorithm on by default, and then every small answer that follows
/// another write waits for the client's delayed ACK (about 40 ms on Linux loopback).
pub async fn serve_official(port: u16) {
    use agent_client_protocol_http::AcpHttpServer;
    use axum::serve::ListenerExt;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    println!("LISTENING {}", listener.local_addr().expect("address").port());
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let router = AcpHttpServer::new(official::agent).into_router();
    axum::serve(listener, router).await.expect("serve");
}
