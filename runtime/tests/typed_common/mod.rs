//! A test agent and a test client implemented directly on the generated traits, connected over
//! the in-memory duplex. Each records what it saw; events the tests wait for go through
//! channels (never sleeps).
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_rpc::Connection;
use acp_rpc::agent::{AgentContext, ClientHandle};
use acp_rpc::client::{AgentHandle, ClientContext};
use acp_rpc::transport::duplex;
use acp_types::*;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Upper bound for anything that should happen "soon"; never used as synchronisation.
pub const LIMIT: Duration = Duration::from_secs(10);

pub const SESSION: &str = "sess_1";

pub async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(LIMIT, rx.recv()).await.expect("timed out waiting for an event").expect("channel closed")
}

pub fn text(s: &str) -> ContentBlock {
    ContentBlock::Text(TextContent::new(s))
}

pub fn prompt(s: &str) -> PromptRequest {
    PromptRequest::new(SESSION, vec![text(s)])
}

fn first_text(p: &PromptRequest) -> &str {
    match p.prompt.first() {
        Some(ContentBlock::Text(t)) => &t.text,
        _ => "",
    }
}

// ---- the agent ------------------------------------------------------------------------------

/// What the agent reports to the test.
#[derive(Debug)]
pub enum AgentEvent {
    PermissionOutcome(RequestPermissionOutcome),
    Cancel(String),
    ExtNotification(String, Value, Option<Value>),
    Call(String, Result<Value, String>),
}

pub struct TestAgent {
    pub events: mpsc::UnboundedSender<AgentEvent>,
}

impl TestAgent {
    fn report(&self, event: AgentEvent) {
        let _ = self.events.send(event);
    }

    async fn full_turn(&self, s: SessionId, client: &ClientHandle) -> Result<PromptResponse, Error> {
        let update = |u: SessionUpdate| client.session_update(SessionNotification::new(s.clone(), u));
        update(SessionUpdate::Plan(Plan::new(vec![PlanEntry::new(
            "Read the file",
            PlanEntryPriority::High,
            PlanEntryStatus::Pending,
        )])))
        .await?;
        update(SessionUpdate::AgentMessageChunk(ContentChunk::new(text("Let me read it.")))).await?;
        update(SessionUpdate::ToolCall(
            ToolCall::new("call_1", "Read /work/a.txt").kind(ToolKind::Read).status(ToolCallStatus::Pending),
        ))
        .await?;
        let options = vec![
            PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
            PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
        ];
        let permission = client
            .request_permission(RequestPermissionRequest::new(s.clone(), ToolCallUpdate::new("call_1"), options))
            .await?;
        match &permission.outcome {
            RequestPermissionOutcome::Selected(sel) if sel.option_id.0 == "allow" => {}
            other => return Err(Error::internal_error().data(json!(format!("{other:?}")))),
        }
        update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new("call_1").status(Some(ToolCallStatus::InProgress))))
            .await?;
        let file = client.read_text_file(ReadTextFileRequest::new(s.clone(), "/work/a.txt")).await?;
        let content = vec![ToolCallContent::Content(Content::new(text(&file.content)))];
        update(SessionUpdate::ToolCallUpdate(
            ToolCallUpdate::new("call_1").status(Some(ToolCallStatus::Completed)).content(Some(content)),
        ))
        .await?;
        Ok(PromptResponse::new(StopReason::EndTurn))
    }

    async fn wait_for_permission(&self, s: SessionId, cx: &AgentContext) -> Result<PromptResponse, Error> {
        let options = vec![PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce)];
        let request = RequestPermissionRequest::new(s, ToolCallUpdate::new("call_wait"), options);
        let permission = cx.client().request_permission(request).await?;
        let cancelled = matches!(permission.outcome, RequestPermissionOutcome::Cancelled);
        self.report(AgentEvent::PermissionOutcome(permission.outcome));
        let reason = if cancelled && cx.is_cancelled() { StopReason::Cancelled } else { StopReason::EndTurn };
        Ok(PromptResponse::new(reason))
    }

    async fn terminals(&self, s: SessionId, client: &ClientHandle) -> Result<PromptResponse, Error> {
        let create = || CreateTerminalRequest::new(s.clone(), "echo").args(vec!["hello".into()]);
        let first = client.create_terminal(create()).await?;
        let output = first.output().await?;
        let exit = first.wait_for_exit().await?;
        first.kill().await?;
        let id = first.id().0.clone();
        first.release().await?;
        self.report(AgentEvent::Call(
            "terminal".into(),
            Ok(json!({"id": id, "output": output.output, "exitCode": exit.exit_code})),
        ));
        let second = client.create_terminal(create()).await?;
        assert_eq!(second.id().0, "term_2");
        drop(second);
        Ok(PromptResponse::new(StopReason::EndTurn))
    }

    async fn ext_calls(&self, client: &ClientHandle) -> Result<PromptResponse, Error> {
        let params = json!({"q": [1, 2], "_meta": {"traceparent": "00-abc-01", "deep": {"k": null}}});
        let echoed = client.ext_method("_test/echo", params.clone()).await?;
        self.report(AgentEvent::Call("_test/echo".into(), Ok(echoed)));
        client.ext_notification("_test/note", params).await?;
        let unknown = client.ext_method("_test/unknown", json!({})).await;
        self.report(AgentEvent::Call("_test/unknown".into(), unknown.map_err(|e| format!("{e:?}"))));
        Ok(PromptResponse::new(StopReason::EndTurn))
    }

    async fn hang_on_read(&self, s: SessionId, client: &ClientHandle) -> Result<PromptResponse, Error> {
        let read = client.read_text_file(ReadTextFileRequest::new(s, "/hang")).await;
        self.report(AgentEvent::Call("read".into(), read.map(|r| json!(r.content)).map_err(|e| format!("{e:?}"))));
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
}

impl Agent<AgentContext> for TestAgent {
    async fn initialize(&self, params: InitializeRequest, _cx: AgentContext) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(params.protocol_version))
    }

    async fn authenticate(&self, _: AuthenticateRequest, _cx: AgentContext) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }

    async fn session_new(&self, _: NewSessionRequest, _cx: AgentContext) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new(SESSION))
    }

    async fn session_list(&self, _: ListSessionsRequest, _cx: AgentContext) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(vec![]))
    }

    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        assert_eq!(cx.session_id(), Some(params.session_id.0.as_str()));
        assert!(cx.request_id().is_some());
        let s = params.session_id.clone();
        match first_text(&params) {
            "full turn" => self.full_turn(s, cx.client()).await,
            "wait for permission" => self.wait_for_permission(s, &cx).await,
            "terminals" => self.terminals(s, cx.client()).await,
            "ext" => self.ext_calls(cx.client()).await,
            "hang on read" => self.hang_on_read(s, cx.client()).await,
            "fail" => Err(Error::new(-32042, "custom failure").data(json!({"why": ["because"]}))),
            other => Err(Error::invalid_params().data(json!(other))),
        }
    }

    async fn session_cancel(&self, params: CancelNotification, cx: AgentContext) -> Result<(), Error> {
        assert!(cx.request_id().is_none());
        self.report(AgentEvent::Cancel(params.session_id.0));
        Ok(())
    }

    async fn ext_method(&self, method: &str, params: ExtRequest, cx: AgentContext) -> Result<ExtResponse, Error> {
        match method {
            "_test/echo" => Ok(ExtResponse(json!({
                "method": cx.method(),
                "params": params.0,
                "cxMeta": cx.meta(),
            }))),
            _ => Err(Error::method_not_found().data(json!(method))),
        }
    }

    async fn ext_notification(&self, method: &str, params: ExtNotification, cx: AgentContext) -> Result<(), Error> {
        let meta = cx.meta().map(|m| Value::Object(m.clone()));
        self.report(AgentEvent::ExtNotification(method.to_owned(), params.0, meta));
        Ok(())
    }
}

// ---- the client -----------------------------------------------------------------------------

/// What the client reports to the test as it happens.
#[derive(Debug, PartialEq)]
pub enum ClientEvent {
    PermissionPending(String),
    PermissionCancelled(String),
    Released(String),
    ExtNotification(String, Value),
}

#[derive(Default)]
pub struct ClientLog {
    /// Every `session/update`, in the order handled.
    pub updates: Mutex<Vec<SessionUpdate>>,
    /// Every request: method and a detail.
    pub requests: Mutex<Vec<String>>,
}

pub struct TestClient {
    pub log: Arc<ClientLog>,
    pub events: mpsc::UnboundedSender<ClientEvent>,
    next_terminal: Mutex<u32>,
}

impl TestClient {
    pub fn new(log: Arc<ClientLog>, events: mpsc::UnboundedSender<ClientEvent>) -> Self {
        TestClient { log, events, next_terminal: Mutex::new(0) }
    }

    fn record(&self, what: String) {
        self.log.requests.lock().unwrap().push(what);
    }
}

impl Client<ClientContext> for TestClient {
    async fn session_request_permission(
        &self,
        params: RequestPermissionRequest,
        cx: ClientContext,
    ) -> Result<RequestPermissionResponse, Error> {
        let call = params.tool_call.tool_call_id.0.clone();
        self.record(format!("permission {call}"));
        if call == "call_wait" {
            // A dialog the user never answers; it closes when the turn is cancelled.
            let _ = self.events.send(ClientEvent::PermissionPending(call.clone()));
            cx.cancelled().await;
            let _ = self.events.send(ClientEvent::PermissionCancelled(call));
            return Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled));
        }
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new("allow"))))
    }

    async fn session_update(&self, params: SessionNotification, cx: ClientContext) -> Result<(), Error> {
        assert_eq!(cx.session_id(), Some(params.session_id.0.as_str()));
        self.log.updates.lock().unwrap().push(params.update);
        Ok(())
    }

    async fn fs_read_text_file(
        &self,
        params: ReadTextFileRequest,
        _cx: ClientContext,
    ) -> Result<ReadTextFileResponse, Error> {
        self.record(format!("read {}", params.path));
        if params.path == "/hang" {
            std::future::pending::<()>().await;
        }
        Ok(ReadTextFileResponse::new("contents of a.txt"))
    }

    async fn terminal_create(
        &self,
        params: CreateTerminalRequest,
        _cx: ClientContext,
    ) -> Result<CreateTerminalResponse, Error> {
        let id = {
            let mut n = self.next_terminal.lock().unwrap();
            *n += 1;
            format!("term_{n}")
        };
        self.record(format!("terminal/create {} {}", params.command, id));
        Ok(CreateTerminalResponse::new(id))
    }

    async fn terminal_output(
        &self,
        params: TerminalOutputRequest,
        _cx: ClientContext,
    ) -> Result<TerminalOutputResponse, Error> {
        self.record(format!("terminal/output {}", params.terminal_id));
        Ok(TerminalOutputResponse::new("hello\n", false)
            .exit_status(Some(TerminalExitStatus::new().exit_code(Some(0)))))
    }

    async fn terminal_wait_for_exit(
        &self,
        params: WaitForTerminalExitRequest,
        _cx: ClientContext,
    ) -> Result<WaitForTerminalExitResponse, Error> {
        self.record(format!("terminal/wait_for_exit {}", params.terminal_id));
        Ok(WaitForTerminalExitResponse::new().exit_code(Some(0)))
    }

    async fn terminal_kill(
        &self,
        params: KillTerminalRequest,
        _cx: ClientContext,
    ) -> Result<KillTerminalResponse, Error> {
        self.record(format!("terminal/kill {}", params.terminal_id));
        Ok(KillTerminalResponse::new())
    }

    async fn terminal_release(
        &self,
        params: ReleaseTerminalRequest,
        _cx: ClientContext,
    ) -> Result<ReleaseTerminalResponse, Error> {
        self.record(format!("terminal/release {}", params.terminal_id));
        let _ = self.events.send(ClientEvent::Released(params.terminal_id.0));
        Ok(ReleaseTerminalResponse::new())
    }

    async fn ext_method(&self, method: &str, params: ExtRequest, cx: ClientContext) -> Result<ExtResponse, Error> {
        match method {
            "_test/echo" => Ok(ExtResponse(json!({"method": method, "params": params.0, "cxMeta": cx.meta()}))),
            _ => Err(Error::method_not_found().data(json!(method))),
        }
    }

    async fn ext_notification(&self, method: &str, params: ExtNotification, _cx: ClientContext) -> Result<(), Error> {
        let _ = self.events.send(ClientEvent::ExtNotification(method.to_owned(), params.0));
        Ok(())
    }
}

// ---- wiring ---------------------------------------------------------------------------------

pub type ServeTask = JoinHandle<Result<(), acp_rpc::Error>>;

/// A typed client connected to the typed test agent over an in-memory duplex.
pub struct Pair {
    pub agent: AgentHandle,
    pub client_handle: ClientHandle,
    pub client_log: Arc<ClientLog>,
    pub client_events: mpsc::UnboundedReceiver<ClientEvent>,
    pub agent_events: mpsc::UnboundedReceiver<AgentEvent>,
    pub agent_serve: ServeTask,
    pub client_serve: ServeTask,
}

pub fn pair() -> Pair {
    let (agent_end, client_end) = duplex(64 * 1024);
    let (agent_tx, agent_events) = mpsc::unbounded_channel();
    let (client_tx, client_events) = mpsc::unbounded_channel();
    let (client_handle, agent_serve) =
        Connection::new().serve_agent(TestAgent { events: agent_tx }, agent_end.0, agent_end.1);
    let client_log = Arc::new(ClientLog::default());
    let client = TestClient::new(client_log.clone(), client_tx);
    let (agent, client_serve) = Connection::new().serve_client(client, client_end.0, client_end.1);
    Pair {
        agent,
        client_handle,
        client_log,
        client_events,
        agent_events,
        agent_serve: tokio::spawn(agent_serve),
        client_serve: tokio::spawn(client_serve),
    }
}

/// Serves the test agent on one end and returns a raw peer (no handler) on the other.
pub fn raw_client_to_agent() -> (acp_rpc::Peer, mpsc::UnboundedReceiver<AgentEvent>, Vec<ServeTask>) {
    let (agent_end, client_end) = duplex(64 * 1024);
    let (agent_tx, agent_events) = mpsc::unbounded_channel();
    let (_client, agent_serve) = acp_rpc::serve_agent(TestAgent { events: agent_tx }, agent_end.0, agent_end.1);
    let (peer, raw_serve) = Connection::new().serve(client_end.0, client_end.1, ());
    (peer, agent_events, vec![tokio::spawn(agent_serve), tokio::spawn(raw_serve)])
}

/// Serves the test client on one end and returns a raw peer (no handler) on the other.
pub fn raw_agent_to_client() -> (acp_rpc::Peer, Arc<ClientLog>, Vec<ServeTask>) {
    let (agent_end, client_end) = duplex(64 * 1024);
    let (client_tx, _) = mpsc::unbounded_channel();
    let log = Arc::new(ClientLog::default());
    let client = TestClient::new(log.clone(), client_tx);
    let (_agent, client_serve) = acp_rpc::serve_client(client, client_end.0, client_end.1);
    let (peer, raw_serve) = Connection::new().serve(agent_end.0, agent_end.1, ());
    (peer, log, vec![tokio::spawn(client_serve), tokio::spawn(raw_serve)])
}

/// Runs `initialize` and `session/new` through the typed handle.
pub async fn start_session(agent: &AgentHandle) -> SessionId {
    let init = agent.initialize(InitializeRequest::new(ProtocolVersion(1))).await.expect("initialize");
    assert_eq!(init.protocol_version, ProtocolVersion(1));
    let session = agent.new_session(NewSessionRequest::new("/work", vec![])).await.expect("session/new");
    session.session_id
}
