//! Protocol v2 over the remote transport: a v2 agent served by our HTTP server, our client
//! connected with `Remote::connect_v2`, and `Remote::reconnect_v2` re-attaching a session with
//! v2's `session/resume` after its connection was dropped, over Streamable HTTP and over
//! WebSocket; then the ways `reconnect_v2` refuses (an unknown session, an agent answering
//! another version, an agent without sessions).
#![cfg(all(feature = "http-server", feature = "http-client", feature = "unstable_protocol_v2"))]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use acp_rpc::acp_types::v2::IdleStateUpdateStopReason as StopReason;
use acp_rpc::acp_types::v2::*;
use acp_rpc::http::client::{CookieJar, Profile, ReconnectError, Remote};
use acp_rpc::http::server::HttpServer;
use acp_rpc::v2::{AgentContext, ClientContext};
use acp_rpc::version::ProtocolRouter;
use acp_rpc::{ErrorObject, Handler, IncomingNotification, IncomingRequest, RawValue, acp_agent, acp_client};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Upper bound for anything that should happen soon; never used as synchronisation.
const LIMIT: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut).await.unwrap_or_else(|_| panic!("{what} timed out"))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---- the agent ------------------------------------------------------------------------------

/// A v2 agent that answers each prompt with one message, numbered within its session, and
/// keeps its sessions (with what it said) across connections: the server makes one agent
/// value per connection, and they all share this state.
#[derive(Clone, Default)]
struct EchoAgent {
    sessions: Arc<Mutex<HashMap<String, Said>>>,
    made: Arc<AtomicU64>,
}

/// What the agent said in one session: each message's id and text.
type Said = Vec<(MessageId, String)>;

fn not_found(session: &SessionId) -> Error {
    Error::resource_not_found().data(ErrorData::Other(json!(format!("no session {}", session.0))))
}

#[acp_agent(v2)]
impl EchoAgent {
    async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("echo-v2", "1.0.0")))
    }

    async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        let id = format!("sess_{}", self.made.fetch_add(1, Ordering::Relaxed));
        lock(&self.sessions).insert(id.clone(), Vec::new());
        Ok(NewSessionResponse::new(id))
    }

    async fn session_list(&self, _: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(Vec::new()))
    }

    async fn session_resume(
        &self,
        params: ResumeSessionRequest,
        cx: AgentContext,
    ) -> Result<ResumeSessionResponse, Error> {
        let said =
            lock(&self.sessions).get(&params.session_id.0).cloned().ok_or_else(|| not_found(&params.session_id))?;
        if let Some(Some(ReplayFrom::Start(_))) = params.replay_from {
            for (id, text) in said {
                let message = AgentMessage::new(id).content(vec![TextContent::new(text).into()]);
                cx.client().session_update(UpdateSessionNotification::new(params.session_id.clone(), message)).await?;
            }
        }
        Ok(ResumeSessionResponse::new())
    }

    async fn session_close(&self, params: CloseSessionRequest) -> Result<CloseSessionResponse, Error> {
        lock(&self.sessions).remove(&params.session_id.0).ok_or_else(|| not_found(&params.session_id))?;
        Ok(CloseSessionResponse::new())
    }

    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let count = lock(&self.sessions)
            .get(&params.session_id.0)
            .map(Vec::len)
            .ok_or_else(|| not_found(&params.session_id))?;
        let turn = cx.turn().expect("a prompt has a turn");
        turn.accept().await?;
        let prompt = match params.prompt.first() {
            Some(ContentBlock::Text(t)) => t.text.clone(),
            _ => String::new(),
        };
        let text = format!("#{}: {prompt}", count + 1);
        let id = turn.say(text.as_str()).await?;
        if let Some(said) = lock(&self.sessions).get_mut(&params.session_id.0) {
            said.push((id, text));
        }
        Ok(turn.response().await?)
    }

    async fn session_cancel(&self, _: CancelSessionNotification) {}
}

/// Serves `agent` (v2, through the version router, as the demo agent does) on a fresh port.
async fn serve(agent: EchoAgent) -> std::net::SocketAddr {
    let server = HttpServer::new(move || ProtocolRouter::new().with_v2_agent(agent.clone()));
    let bound = server.bind("127.0.0.1:0").await.expect("bind");
    let addr = bound.local_addr();
    tokio::spawn(bound.run());
    addr
}

// ---- the client -----------------------------------------------------------------------------

/// Reports the text of every agent message it is sent.
struct Probe {
    messages: mpsc::UnboundedSender<String>,
}

#[acp_client(v2)]
impl Probe {
    async fn session_request_permission(
        &self,
        _: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled(CancelledPermissionOutcome::new())))
    }

    async fn session_update(&self, params: UpdateSessionNotification, _cx: ClientContext) {
        if let SessionUpdate::AgentMessage(message) = params.update {
            for block in message.content.into_iter().flatten().flatten() {
                if let ContentBlock::Text(t) = block {
                    let _ = self.messages.send(t.text);
                }
            }
        }
    }
}

fn probe() -> (Probe, mpsc::UnboundedReceiver<String>) {
    let (messages, rx) = mpsc::unbounded_channel();
    (Probe { messages }, rx)
}

fn drain(rx: &mut mpsc::UnboundedReceiver<String>) -> Vec<String> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

fn init() -> InitializeRequest {
    InitializeRequest::new(ProtocolVersion::V2, Implementation::new("probe", "1.0.0"))
}

fn prompt(session: &SessionId, text: &str) -> PromptRequest {
    PromptRequest::new(session.clone(), vec![TextContent::new(text).into()])
}

async fn resumes_a_dropped_sessions_connection(scheme: &str) {
    let addr = serve(EchoAgent::default()).await;
    let url = format!("{scheme}://{addr}/acp");
    let jar = CookieJar::new();

    let (client, mut messages) = probe();
    let (agent, remote) =
        within("connect", Remote::new(url.as_str()).cookie_jar(jar.clone()).connect_v2(client)).await.expect("connect");
    let expected_profile = if scheme == "ws" { Profile::WebSocket } else { Profile::StreamableHttp };
    assert_eq!(remote.profile(), expected_profile);
    let answer = within("initialize", agent.initialize(init())).await.expect("initialize");
    assert_eq!(answer.protocol_version, ProtocolVersion::V2);
    let session =
        within("session/new", agent.new_session(NewSessionRequest::new("/tmp"))).await.expect("new").session_id;
    let end = within("prompt", agent.prompt_turn(prompt(&session, "one"))).await.expect("prompt");
    assert_eq!(end.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(drain(&mut messages), ["#1: one"]);
    let first = remote.connection_id();

    // The connection goes away; the session stays with the agent.
    drop(remote);
    within("the old connection ends", agent.peer().closed()).await;
    assert!(agent.is_closed());

    // Resumed with the history replayed: the replay is handled when `reconnect_v2` returns.
    let (client, mut messages) = probe();
    let resume =
        ResumeSessionRequest::new(session.clone(), "/tmp").replay_from(ReplayFrom::Start(ReplayFromStart::new()));
    let again =
        within("reconnect", Remote::new(url.as_str()).cookie_jar(jar.clone()).reconnect_v2(client, init(), resume))
            .await
            .expect("reconnect_v2");
    assert_eq!(again.init.info.name, "echo-v2");
    assert_ne!(again.remote.connection_id(), first, "a new connection");
    assert_eq!(drain(&mut messages), ["#1: one"], "the replay");
    let end = within("prompt", again.agent.prompt_turn(prompt(&session, "two"))).await.expect("prompt again");
    assert_eq!(end.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(drain(&mut messages), ["#2: two"], "the session goes on where it was");
    drop(again);

    // Resumed without `replayFrom`: nothing replayed, the session still goes on.
    let (client, mut messages) = probe();
    let resume = ResumeSessionRequest::new(session.clone(), "/tmp");
    let again = within("reconnect", Remote::new(url.as_str()).cookie_jar(jar).reconnect_v2(client, init(), resume))
        .await
        .expect("reconnect_v2 without replay");
    assert!(drain(&mut messages).is_empty());
    let end = within("prompt", again.agent.prompt_turn(prompt(&session, "three"))).await.expect("prompt");
    assert_eq!(end.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(drain(&mut messages), ["#3: three"]);
    within("close", again.remote.close()).await.expect("close");
}

#[tokio::test]
async fn a_v2_session_is_resumed_on_a_new_connection_over_streamable_http() {
    resumes_a_dropped_sessions_connection("http").await;
}

#[tokio::test]
async fn a_v2_session_is_resumed_on_a_new_connection_over_websocket() {
    resumes_a_dropped_sessions_connection("ws").await;
}

/// A raw agent that answers `initialize` with `answer`, and nothing else.
struct Answers(Value);

impl Handler for Answers {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        match &*req.method {
            "initialize" => Ok(RawValue::from_string(self.0.to_string()).expect("json")),
            other => Err(ErrorObject::method_not_found(other)),
        }
    }

    async fn handle_notification(&self, _: IncomingNotification) {}
}

async fn serve_answers(answer: Value) -> String {
    let bound = HttpServer::new(move || Answers(answer.clone())).bind("127.0.0.1:0").await.expect("bind");
    let url = bound.url();
    tokio::spawn(bound.run());
    url
}

#[tokio::test]
async fn reconnect_v2_says_why_it_cannot_resume() {
    // An unknown session: the agent's error, at the `session/resume` step.
    let addr = serve(EchoAgent::default()).await;
    for scheme in ["http", "ws"] {
        let (client, _messages) = probe();
        let resume = ResumeSessionRequest::new("sess_gone", "/tmp");
        let result =
            within("reconnect", Remote::new(format!("{scheme}://{addr}/acp")).reconnect_v2(client, init(), resume))
                .await;
        match result {
            Err(ReconnectError::Call { step: "session/resume", source: acp_rpc::Error::Rpc(error) }) => {
                assert_eq!(error.code, acp_rpc::codes::RESOURCE_NOT_FOUND, "{error:?}");
                assert_eq!(error.data, Some(json!("no session sess_gone")));
            }
            other => panic!("{scheme}: expected the agent's error for an unknown session, got {other:?}"),
        }
    }

    // An agent that answers protocol 1.
    let url = serve_answers(json!({"protocolVersion": 1, "info": {"name": "old", "version": "1"}})).await;
    let (client, _messages) = probe();
    let result =
        within("reconnect", Remote::new(url).reconnect_v2(client, init(), ResumeSessionRequest::new("s", "/tmp")))
            .await;
    assert!(matches!(result, Err(ReconnectError::Version { answered: 1 })), "{result:?}");

    // A v2 agent without the session surface (no `capabilities.session`).
    let url =
        serve_answers(json!({"protocolVersion": 2, "info": {"name": "bare", "version": "1"}, "capabilities": {}}))
            .await;
    let (client, _messages) = probe();
    let result =
        within("reconnect", Remote::new(url).reconnect_v2(client, init(), ResumeSessionRequest::new("s", "/tmp")))
            .await;
    match result {
        Err(error @ ReconnectError::Unsupported) => {
            assert!(error.to_string().contains("capabilities.session"), "{error}")
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}
