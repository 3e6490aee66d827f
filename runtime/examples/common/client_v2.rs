//! The demo client's protocol v2 side (`--protocol 2`, with the `unstable_protocol_v2`
//! feature), written with `#[acp_client(v2)]`.
//!
//! One `initialize` asks for v2 and carries the v1 fields too
//! (`acp_rpc::version::ProtocolRouter::negotiate`): an agent answering 2 gets the v2 turn,
//! one answering 1 the v1 turn, on the same connection. The v2 turn is followed through
//! `acp_rpc::v2::SessionState`, which applies each update with the spec's merge rules; the
//! transcript shows the lifecycle too (`running`, `requires_action`, the idle update's stop
//! reason). v2 has no `fs/*` or `terminal/*`: the agent reads files itself.

use std::sync::{Arc, Mutex, PoisonError};

use acp_rpc::acp_client;
use acp_rpc::acp_types::v2::{
    CancelSessionNotification, CancelledPermissionOutcome, ContentBlock, Error, Implementation, InitializeRequest,
    InitializeResponse, NewSessionRequest, Nullable, PlanEntryStatus, PlanUpdateContent, PromptRequest,
    ProtocolVersion, RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    RequestPermissionSubject, SelectedPermissionOutcome, SessionUpdate, StateUpdate, TextContent, ToolCallContent,
    UpdateSessionNotification,
};
use acp_rpc::transport::{ChildProcess, SpawnOptions};
use acp_rpc::v2::{AgentHandle, ClientContext, SessionState};
use acp_rpc::version::{Negotiated, ProtocolRouter};

use super::{Agent, Asker, DemoClient, Transcript, Turn, v1_initialize};

/// How the agent goes away once the turn is done.
enum Ending {
    Process(Box<ChildProcess>, tokio::task::JoinHandle<Result<(), acp_rpc::Error>>),
    #[cfg(feature = "http-client")]
    Remote(acp_rpc::http::client::RemoteAgent),
}

/// Starts (or connects to) the agent, negotiates the version, and runs the turn in the version
/// agreed on.
pub(super) async fn drive(
    client: DemoClient,
    asker: Arc<Asker>,
    agent: Agent,
    spawn: SpawnOptions,
    turn: Turn,
) -> Result<(), String> {
    let client_v2 = DemoClientV2 { asker, transcript: turn.transcript.clone(), state: Mutex::default() };
    let router = Arc::new(ProtocolRouter::new().with_v1_client(client).with_v2_client(client_v2));
    let (peer, ending) = match agent {
        Agent::Command(command) => {
            let mut child = ChildProcess::spawn(command, spawn).map_err(|e| format!("cannot start the agent: {e}"))?;
            let (reader, writer) = child.take_transport().ok_or("the agent process has no stdin/stdout")?;
            let (peer, serve) = acp_rpc::Connection::new().serve(reader, writer, router.clone());
            (peer, Ending::Process(Box::new(child), tokio::spawn(serve)))
        }
        #[cfg(feature = "http-client")]
        Agent::Url(url) => {
            // The router answers the agent's requests over the network, as over stdio.
            let (peer, remote) = acp_rpc::http::client::Remote::new(url.as_str())
                .serve(router.clone())
                .await
                .map_err(|e| format!("cannot connect to {url}: {e}"))?;
            (peer, Ending::Remote(remote))
        }
        #[cfg(not(feature = "http-client"))]
        Agent::Url(url) => return Err(format!("--url {url} needs the `http-client` feature")),
    };

    let v2_init = acp_rpc::v2::with_capabilities::<DemoClientV2>(InitializeRequest::new(
        ProtocolVersion::V2,
        Implementation::new("acp-demo-client", env!("CARGO_PKG_VERSION")),
    ));
    let result = match router.negotiate(&peer, v2_init, v1_initialize()).await {
        Ok(Negotiated::V2 { agent, init }) => turn.run_v2(&agent, &init).await,
        Ok(Negotiated::V1 { agent, init }) => {
            turn.transcript.line("(the agent answered protocol 1: going on with v1)");
            turn.run_v1(&agent, &init).await
        }
        Ok(other) => {
            Err(format!("the agent chose protocol v{}, which this client does not run", other.version().number()))
        }
        Err(e) => Err(format!("initialize: {e}")),
    };
    match ending {
        Ending::Process(child, serve) => {
            // Our agent is done; a well-behaved one exits on SIGTERM (or on end of input).
            let _ = child.terminate().await;
            serve.abort();
        }
        // Tells the server we are done (DELETE, or the WebSocket's Close).
        #[cfg(feature = "http-client")]
        Ending::Remote(remote) => {
            let _ = remote.close().await;
        }
    }
    result
}

impl Turn {
    /// The v2 turn: a session, the prompt (answered once accepted), the updates until the
    /// idle `state_update` that ends the turn.
    async fn run_v2(&self, agent: &AgentHandle, init: &InitializeResponse) -> Result<(), String> {
        self.transcript.line(&format!(
            "connected to {} {} (protocol v{})",
            init.info.name, init.info.version, init.protocol_version.0
        ));
        let session = agent
            .new_session(NewSessionRequest::new(self.root.to_string_lossy().into_owned()))
            .await
            .map_err(|e| format!("session/new: {e}"))?
            .session_id;
        self.transcript.line(&format!("session {} in {}", session.0, self.root.display()));
        self.transcript.line(&format!("› {}", self.prompt));

        let prompt = PromptRequest::new(session.clone(), vec![TextContent::new(self.prompt.as_str()).into()]);
        // Resolves once the idle update that ends the turn has been handled (and printed).
        let cancel = agent.cancel(CancelSessionNotification::new(session));
        let end = self.until_done(agent.prompt_turn(prompt), cancel).await?;
        let end = end.map_err(|e| format!("session/prompt: {e}"))?;
        let reason = end.stop_reason.as_ref().and_then(|r| r.tag()).unwrap_or("(none)");
        match &end.error {
            Some(error) => self.transcript.line(&format!("■ stop reason: {reason} ({})", error.message)),
            None => self.transcript.line(&format!("■ stop reason: {reason}")),
        }
        Ok(())
    }
}

struct DemoClientV2 {
    asker: Arc<Asker>,
    transcript: Arc<Transcript>,
    /// The one session this client opens, as its updates left it.
    state: Mutex<SessionState>,
}

#[acp_client(v2)]
impl DemoClientV2 {
    async fn session_update(&self, params: UpdateSessionNotification) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // A tool call is new when no update named it before this one.
        let new_tool_call = match &params.update {
            SessionUpdate::ToolCallUpdate(update) => state.tool_call_by_id(&update.tool_call_id).is_none(),
            _ => false,
        };
        state.apply(&params.update);
        self.transcript.update_v2(&params.update, &state, new_tool_call);
    }

    async fn session_request_permission(
        &self,
        params: RequestPermissionRequest,
        cx: ClientContext,
    ) -> Result<RequestPermissionResponse, Error> {
        let title = match params.subject.value() {
            Some(RequestPermissionSubject::ToolCall(subject)) => {
                let id = &subject.tool_call.tool_call_id;
                let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                state.tool_call_by_id(id).and_then(|call| call.title.clone()).unwrap_or(params.title.clone())
            }
            _ => params.title.clone(),
        };
        let options: Vec<(&str, &str)> = params.options.iter().map(|o| (o.name.as_str(), o.kind.as_str())).collect();
        // `cx.cancelled()` fires on our own `session/cancel` and on the agent's `$/cancel_request`.
        let outcome: RequestPermissionOutcome = match self.asker.choose(&title, &options, cx.cancelled()).await {
            Some(n) => SelectedPermissionOutcome::new(params.options[n].option_id.clone()).into(),
            None => CancelledPermissionOutcome::new().into(),
        };
        Ok(RequestPermissionResponse::new(outcome))
    }
}

impl Transcript {
    /// Prints one v2 update, already applied to `session` (`new_tool_call`: the update
    /// created its tool call).
    fn update_v2(&self, update: &SessionUpdate, session: &SessionState, new_tool_call: bool) {
        let mut state = self.state.lock().expect("transcript");
        let state = &mut *state;
        match update {
            // The prompt was printed when it was sent.
            SessionUpdate::UserMessage(_) | SessionUpdate::UserMessageChunk(_) => {}
            SessionUpdate::AgentMessageChunk(chunk) => self.write(state, &text_v2(&chunk.content), false),
            SessionUpdate::AgentMessage(message) => {
                if let Some(whole) = session.message_by_id(&message.message_id) {
                    let text: String = whole.content.iter().map(text_v2).collect();
                    self.write(state, &text, true);
                }
            }
            SessionUpdate::AgentThoughtChunk(chunk) => {
                self.write(state, &format!("  (thinking) {}", text_v2(&chunk.content)), true);
            }
            SessionUpdate::StateUpdate(StateUpdate::Running(_)) => self.write(state, "  ◦ running", true),
            SessionUpdate::StateUpdate(StateUpdate::RequiresAction(_)) => {
                self.write(state, "  ◦ requires action", true);
            }
            // The turn's end: printed with its stop reason once `prompt_turn` returns.
            SessionUpdate::StateUpdate(StateUpdate::Idle(_)) => {}
            SessionUpdate::ToolCallUpdate(patch) => {
                let Some(call) = session.tool_call_by_id(&patch.tool_call_id) else { return };
                let title = call.title.clone().unwrap_or_else(|| call.id.0.clone());
                let status = call.status.as_ref().map_or("pending", |s| s.as_str());
                let line = if new_tool_call {
                    let kind = call.kind.as_ref().map_or("other", |k| k.as_str());
                    format!("⚙ {title} [{kind}] {status}  ({})", call.id.0)
                } else {
                    format!("  ↳ {title}: {status}")
                };
                self.write(state, &line, true);
            }
            SessionUpdate::ToolCallContentChunk(chunk) => {
                let text = match &chunk.content {
                    ToolCallContent::Content(c) => text_v2(&c.content),
                    _ => "(other content)".to_owned(),
                };
                let lines: Vec<String> = text.lines().map(|l| format!("    │ {l}").trim_end().to_owned()).collect();
                self.write(state, &lines.join("\n"), true);
            }
            SessionUpdate::PlanUpdate(plan) => {
                let PlanUpdateContent::Items(items) = &plan.plan else {
                    self.write(state, "  (plan update)", true);
                    return;
                };
                let mut text = String::from("Plan:");
                for entry in &items.entries {
                    let mark = match entry.status {
                        PlanEntryStatus::Completed => "[x]",
                        PlanEntryStatus::InProgress => "[~]",
                        _ => "[ ]",
                    };
                    text.push_str(&format!("\n  {mark} {} ({})", entry.content, entry.priority.as_str()));
                }
                self.write(state, &text, true);
            }
            other => {
                let tag = other.tag().unwrap_or("unknown").to_owned();
                self.write(state, &format!("  ({tag} update)"), true);
            }
        }
    }
}

fn text_v2(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::ResourceLink(link) => link.uri.clone(),
        other => format!("[{} content]", other.tag().unwrap_or("unknown")),
    }
}
