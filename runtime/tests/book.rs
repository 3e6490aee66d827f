//! The book's code (`docs/book/`), compiled and where it can be, run: each chapter includes the
//! region between an `ANCHOR: name` and its `ANCHOR_END: name` from this file or from the
//! examples, so what a reader copies is what CI builds.

#![allow(dead_code)] // some snippets are shown, built, and not called

use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(10);

// ---- The generated types (chapter "The generated types") --------------------------------------

#[test]
fn generated_types() {
    // ANCHOR: types
    use acp_rpc::acp_types::{AgentNotification, PromptRequest, SessionUpdate, TextContent};

    // Required fields go through `new`, optional ones through setters, so that a new optional
    // field in a later spec breaks no caller. A payload converts into its union
    // (`TextContent` into `ContentBlock`).
    let prompt = PromptRequest::new("sess_1", vec![TextContent::new("Hello").into()]);
    assert_eq!(serde_json::to_value(&prompt).unwrap()["prompt"][0]["type"], "text");
    assert_eq!(prompt.session_id.as_str(), "sess_1");

    // Messages decode by method name; a variant from a newer peer is kept whole.
    let params = serde_json::json!({"sessionId": "sess_1", "update": {"sessionUpdate": "hologram", "x": 1}});
    let Some(AgentNotification::SessionUpdate(n)) = AgentNotification::decode("session/update", &params).unwrap()
    else {
        unreachable!()
    };
    assert!(matches!(n.update, SessionUpdate::Other(_)));
    assert_eq!(serde_json::to_value(&n).unwrap(), params); // written back unchanged
    // ANCHOR_END: types
}

#[test]
fn decode_errors_name_the_path() {
    // ANCHOR: decode_path
    use acp_rpc::acp_types::{PromptRequest, decode};

    let text = r#"{"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}, {"text": "no type"}]}"#;
    let error = decode::from_str::<PromptRequest>(text).unwrap_err();
    assert_eq!(error.path(), Some("prompt[1]"));
    // ANCHOR_END: decode_path
}

// ---- Agents (chapter "Agents") --------------------------------------------------------------

mod echo {
    // ANCHOR: echo
    use acp_rpc::acp_types::*;
    use acp_rpc::{AgentContext, acp_agent};

    pub struct EchoAgent;

    #[acp_agent]
    impl EchoAgent {
        async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, Error> {
            Ok(InitializeResponse::new(ProtocolVersion::V1))
        }
        async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
            Ok(AuthenticateResponse::new())
        }
        async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
            Ok(NewSessionResponse::new("sess_1"))
        }
        async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
            // Echo the prompt back as message chunks; stop early when the turn is cancelled.
            for block in params.prompt {
                if cx.is_cancelled() {
                    return Ok(PromptResponse::new(StopReason::Cancelled));
                }
                let chunk = SessionUpdate::AgentMessageChunk(ContentChunk::new(block));
                cx.client().session_update(SessionNotification::new(params.session_id.clone(), chunk)).await?;
            }
            Ok(PromptResponse::new(StopReason::EndTurn))
        }
        async fn session_cancel(&self, _: CancelNotification) {
            // Nothing to do: the runtime already cancelled the turn's token.
        }

        // Extensions: a request `_echo/reverse` (answered), a notification `_echo/log` (not).
        #[ext("_echo/reverse")]
        async fn reverse(&self, params: Vec<String>) -> Result<Vec<String>, Error> {
            Ok(params.into_iter().rev().collect())
        }
        #[ext_notification("_echo/log")]
        async fn log(&self, params: serde_json::Value) {
            eprintln!("client says: {params}");
        }

        // Not a handler: plain functions may sit in the block.
        fn describe(&self) -> &'static str {
            "echoes the prompt"
        }
    }
    // ANCHOR_END: echo
}

/// The extension request of the echo agent, called through a raw peer.
#[tokio::test]
async fn the_echo_agents_extension_answers() {
    let ((ar, aw), (cr, cw)) = acp_rpc::transport::duplex(1 << 16);
    let (_client, serve) = acp_rpc::agent::serve_agent(echo::EchoAgent, ar, aw);
    tokio::spawn(serve);
    let (agent, serve) = acp_rpc::client::serve_client(Silent, cr, cw);
    tokio::spawn(serve);
    let reversed = tokio::time::timeout(LIMIT, agent.ext_method("_echo/reverse", serde_json::json!(["a", "b"])))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reversed, serde_json::json!(["b", "a"]));
}

/// A client that handles only what a client must.
struct Silent;

#[acp_rpc::acp_client]
impl Silent {
    async fn session_update(&self, _: acp_rpc::acp_types::SessionNotification) {}
    async fn session_request_permission(
        &self,
        _: acp_rpc::acp_types::RequestPermissionRequest,
    ) -> Result<acp_rpc::acp_types::RequestPermissionResponse, acp_rpc::acp_types::Error> {
        use acp_rpc::acp_types::{RequestPermissionOutcome, RequestPermissionResponse};
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
    }
}

// ---- Protocol v2 (chapter "Protocol v2") ------------------------------------------------------

mod v2_agent {
    // ANCHOR: v2_agent
    use acp_rpc::acp_types::v2::*;
    use acp_rpc::v2::AgentContext;

    pub struct NotesAgent;

    #[acp_rpc::acp_agent(v2)]
    impl NotesAgent {
        async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, Error> {
            Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("notes-agent", "1.0")))
        }
        async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
            Ok(NewSessionResponse::new("sess_1"))
        }
        async fn session_prompt(&self, _: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
            let turn = cx.turn().expect("a prompt has a turn");
            let call = turn.start_tool_call("Read notes.txt", ToolKind::Read).await?;
            call.append_text("Buy milk.").await?;
            call.complete().await?;
            turn.say("Done.").await?;
            // The answer (the accepted prompt's message id); returning ends the turn with an
            // idle `state_update` whose stop reason is `end_turn`.
            Ok(turn.response().await?)
        }
        async fn session_cancel(&self, _: CancelSessionNotification) {}
        // The rest of the v2 baseline: listing, resuming and closing sessions.
        async fn session_list(&self, _: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
            Ok(ListSessionsResponse::new(vec![]))
        }
        async fn session_resume(&self, _: ResumeSessionRequest) -> Result<ResumeSessionResponse, Error> {
            Ok(ResumeSessionResponse::new())
        }
        async fn session_close(&self, _: CloseSessionRequest) -> Result<CloseSessionResponse, Error> {
            Ok(CloseSessionResponse::new())
        }
    }
    // ANCHOR_END: v2_agent
}

/// The v2 agent's turn, driven by a v2 client over the duplex.
#[tokio::test]
async fn the_v2_agent_runs_its_turn() {
    use acp_rpc::acp_types::v2::*;

    struct Watcher;
    #[acp_rpc::acp_client(v2)]
    impl Watcher {
        async fn session_request_permission(
            &self,
            _: RequestPermissionRequest,
        ) -> Result<RequestPermissionResponse, Error> {
            Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled(CancelledPermissionOutcome::new())))
        }
        async fn session_update(&self, _: UpdateSessionNotification) {}
    }

    let ((ar, aw), (cr, cw)) = acp_rpc::transport::duplex(1 << 16);
    let handler = acp_rpc::v2::AgentHandler::new(v2_agent::NotesAgent);
    let (_peer, serve) = acp_rpc::Connection::new().v2_rules().serve(ar, aw, handler);
    tokio::spawn(serve);
    let (agent, serve) = acp_rpc::v2::serve_client(Watcher, cr, cw);
    tokio::spawn(serve);
    agent.initialize(InitializeRequest::new(ProtocolVersion::V2, Implementation::new("c", "1"))).await.unwrap();
    agent.new_session(NewSessionRequest::new("/")).await.unwrap();
    let prompt = PromptRequest::new("sess_1", vec![TextContent::new("go").into()]);
    let end = tokio::time::timeout(LIMIT, agent.prompt_turn(prompt)).await.unwrap().unwrap();
    assert_eq!(end.stop_reason, Some(IdleStateUpdateStopReason::EndTurn));
}

// ---- Remote agents (chapter "Remote agents") --------------------------------------------------

// ANCHOR: http_server
use acp_rpc::http::server::{HttpServer, ServerOptions};

/// Serves the echo agent on `http://127.0.0.1:8080/acp` (Streamable HTTP and WebSocket), to
/// two clients with a bearer token each.
async fn serve_remotely() -> Result<(), Box<dyn std::error::Error>> {
    // One agent value per ACP connection. Each token's principal owns the sessions its
    // connections create.
    let server = HttpServer::agent(|| echo::EchoAgent)
        .options(ServerOptions { allowed_origins: vec!["https://app.example".into()], ..ServerOptions::default() })
        .bearer_tokens([(std::env::var("ALICE_TOKEN")?, "alice"), (std::env::var("BOB_TOKEN")?, "bob")])
        .bind("127.0.0.1:8080")
        .await?;
    println!("serving on {}", server.url());
    server.run().await?;
    Ok(())
}
// ANCHOR_END: http_server

// ANCHOR: remote_client
use acp_rpc::ClientContext;
use acp_rpc::acp_types::{Client, InitializeRequest, ProtocolVersion};
use acp_rpc::http::client::{CookieJar, Remote};

async fn connect_remotely(
    client: impl Client<ClientContext> + 'static,
    jar: CookieJar,
) -> Result<(), Box<dyn std::error::Error>> {
    let (agent, remote) = Remote::new("http://127.0.0.1:8080/acp")
        .bearer_token("secret") // any header goes on every request
        .cookie_jar(jar) // cookies kept and sent back (load-balancer affinity)
        .connect(client) // or .serve(handler): e.g. a ProtocolRouter for v1 and v2
        .await?;
    let _init = agent.initialize(InitializeRequest::new(ProtocolVersion::V1)).await?;
    // ... sessions and prompts, as over stdio
    remote.close().await?; // DELETE, or the WebSocket's Close
    Ok(())
}
// ANCHOR_END: remote_client

// ANCHOR: tls
use acp_rpc::http::client::rustls;
use rustls::pki_types::{CertificateDer, pem::PemObject};

/// A client that trusts one private certificate authority and nothing else.
fn private_ca_remote(ca_pem: &[u8]) -> Result<Remote, Box<dyn std::error::Error>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem)?)?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Remote::new("https://agents.internal:8443/acp").tls_config(config))
}
// ANCHOR_END: tls
