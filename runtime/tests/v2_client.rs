//! Protocol v2 clients against our v2 agent over an in-memory duplex: `prompt` returns at
//! acceptance, `prompt_turn` at the idle `state_update` (after the client's handler saw every
//! update of the turn), cancellation confirmed by `cancelled`, a stale idle snapshot not taken
//! for the end of a turn, and a client negotiating v2 that goes on with v1 against a v1 agent.

mod common;

use std::sync::{Arc, Mutex};

use acp_rpc::acp_types::v2::{
    Agent, CancelSessionNotification, Client, CloseSessionRequest, CloseSessionResponse, Error,
    IdleStateUpdateStopReason as StopReason, Implementation, InitializeRequest, InitializeResponse,
    ListSessionsRequest, ListSessionsResponse, NewSessionRequest, NewSessionResponse, PermissionOption,
    PermissionOptionKind, PromptRequest, PromptResponse, ProtocolVersion, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, ResumeSessionRequest, ResumeSessionResponse,
    SelectedPermissionOutcome, TextContent, ToolKind, UpdateSessionNotification,
};
use acp_rpc::transport::duplex;
use acp_rpc::v2::{AgentContext, ClientContext};
use acp_rpc::version::{Negotiated, ProtocolRouter};
use acp_rpc::{Connection, Handler};
use common::LIMIT;

/// A v2 agent whose prompts say what to do.
struct Scripted;

impl Agent<AgentContext> for Scripted {
    async fn session_list(&self, _: ListSessionsRequest, _cx: AgentContext) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(vec![]))
    }

    async fn session_resume(&self, _: ResumeSessionRequest, _cx: AgentContext) -> Result<ResumeSessionResponse, Error> {
        Ok(ResumeSessionResponse::new())
    }

    async fn session_close(&self, _: CloseSessionRequest, _cx: AgentContext) -> Result<CloseSessionResponse, Error> {
        Ok(CloseSessionResponse::new())
    }

    async fn initialize(&self, _: InitializeRequest, _cx: AgentContext) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("scripted", "1.0")))
    }

    async fn session_new(&self, _: NewSessionRequest, cx: AgentContext) -> Result<NewSessionResponse, Error> {
        // A bare idle snapshot right after the session exists (as some agents send).
        let snapshot =
            serde_json::json!({"sessionId": "s1", "update": {"sessionUpdate": "state_update", "state": "idle"}});
        cx.peer().notify("session/update", &snapshot).await?;
        Ok(NewSessionResponse::new("s1"))
    }

    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let turn = cx.turn().expect("a turn");
        let text = serde_json::to_value(&params.prompt[0]).unwrap()["text"].as_str().unwrap_or_default().to_owned();
        let message = turn.agent_message();
        for word in text.split(' ') {
            message.text(word).await?;
        }
        if text.contains("ask") {
            let call = turn.start_tool_call("Write a file", ToolKind::Edit).await?;
            let options = vec![PermissionOption::new("yes", "Allow", PermissionOptionKind::AllowOnce)];
            let answer =
                turn.request_permission(RequestPermissionRequest::new("s1", "Allow the write?", options)).await?;
            match answer.outcome {
                RequestPermissionOutcome::Selected(_) => call.complete().await?,
                _ => call.fail().await?,
            }
        }
        if text.contains("forever") {
            turn.cancelled().await;
        }
        turn.set_stop_reason(StopReason::EndTurn);
        Ok(turn.response().await?)
    }

    async fn session_cancel(&self, _: CancelSessionNotification, _cx: AgentContext) -> Result<(), Error> {
        Ok(())
    }
}

/// A client that records every update kind and allows every permission request (or waits for
/// the cancel when told to).
#[derive(Clone, Default)]
struct Recorder {
    updates: Arc<Mutex<Vec<String>>>,
    hold_permissions: bool,
}

impl Client<ClientContext> for Recorder {
    async fn session_request_permission(
        &self,
        params: RequestPermissionRequest,
        cx: ClientContext,
    ) -> Result<RequestPermissionResponse, Error> {
        if self.hold_permissions {
            cx.cancelled().await;
            return Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled(
                acp_rpc::acp_types::v2::CancelledPermissionOutcome::new(),
            )));
        }
        let option = params.options[0].option_id.clone();
        Ok(RequestPermissionResponse::new(SelectedPermissionOutcome::new(option)))
    }

    async fn session_update(&self, params: UpdateSessionNotification, _cx: ClientContext) -> Result<(), Error> {
        let kind = serde_json::to_value(&params.update).unwrap()["sessionUpdate"].as_str().unwrap().to_owned();
        self.updates.lock().unwrap().push(kind);
        Ok(())
    }
}

fn connect<H: Handler>(agent: H, client: Recorder) -> acp_rpc::v2::AgentHandle {
    let ((ar, aw), (cr, cw)) = duplex(1 << 16);
    let (_peer, serve) = Connection::new().v2_rules().serve(ar, aw, agent);
    tokio::spawn(serve);
    let (handle, serve) = acp_rpc::v2::serve_client(client, cr, cw);
    tokio::spawn(serve);
    handle
}

fn prompt(text: &str) -> PromptRequest {
    PromptRequest::new("s1", vec![TextContent::new(text).into()])
}

#[tokio::test]
async fn prompt_turn_returns_after_every_update_of_the_turn_was_handled() {
    let client = Recorder::default();
    let agent = connect(acp_rpc::v2::AgentHandler::new(Scripted), client.clone());
    agent.new_session(NewSessionRequest::new("/")).await.unwrap();
    let end = tokio::time::timeout(LIMIT, agent.prompt_turn(prompt("please ask me"))).await.unwrap().unwrap();
    assert_eq!(end.stop_reason, Some(StopReason::EndTurn));
    assert!(end.message_id.is_some(), "the answer named the user message");
    let updates = client.updates.lock().unwrap().clone();
    assert_eq!(
        updates,
        [
            "state_update", // the snapshot after session/new
            "user_message",
            "state_update",
            "agent_message_chunk",
            "agent_message_chunk",
            "agent_message_chunk",
            "tool_call_update",
            "state_update", // requires_action
            "state_update", // running again
            "tool_call_update",
            "state_update", // idle: seen before prompt_turn returned
        ]
    );
}

#[tokio::test]
async fn prompt_returns_at_acceptance_and_cancel_is_confirmed_by_the_idle_update() {
    let client = Recorder { hold_permissions: true, ..Recorder::default() };
    let agent = connect(acp_rpc::v2::AgentHandler::new(Scripted), client.clone());
    agent.new_session(NewSessionRequest::new("/")).await.unwrap();
    let turn = tokio::spawn({
        let agent = agent.clone();
        async move { agent.prompt_turn(prompt("ask forever")).await }
    });
    // Cancel once the permission request is pending (the agent reports requires_action).
    tokio::time::timeout(LIMIT, async {
        while client.updates.lock().unwrap().iter().filter(|k| *k == "state_update").nth(2).is_none() {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    })
    .await
    .unwrap();
    agent.cancel(CancelSessionNotification::new("s1")).await.unwrap();
    let end = tokio::time::timeout(LIMIT, turn).await.unwrap().unwrap().unwrap();
    assert_eq!(end.stop_reason, Some(StopReason::Cancelled));
    let accepted = agent.prompt(prompt("quick")).await.unwrap();
    assert!(accepted.message_id.is_some());
}

// ---- negotiation ------------------------------------------------------------------------------

mod v1 {
    use std::sync::{Arc, Mutex};

    use acp_rpc::acp_types::*;
    use acp_rpc::{AgentContext, ClientContext};

    /// A v1-only agent that remembers the capabilities the client sent.
    #[derive(Clone, Default)]
    pub struct Agent1 {
        pub seen: Arc<Mutex<Option<ClientCapabilities>>>,
    }

    impl Agent<AgentContext> for Agent1 {
        async fn initialize(&self, params: InitializeRequest, _cx: AgentContext) -> Result<InitializeResponse, Error> {
            *self.seen.lock().unwrap() = params.client_capabilities;
            Ok(InitializeResponse::new(ProtocolVersion::V1))
        }
        async fn authenticate(&self, _: AuthenticateRequest, _cx: AgentContext) -> Result<AuthenticateResponse, Error> {
            Ok(AuthenticateResponse::new())
        }
        async fn session_new(&self, _: NewSessionRequest, _cx: AgentContext) -> Result<NewSessionResponse, Error> {
            Ok(NewSessionResponse::new("v1-session"))
        }
        async fn session_prompt(&self, _: PromptRequest, _cx: AgentContext) -> Result<PromptResponse, Error> {
            Ok(PromptResponse::new(StopReason::EndTurn))
        }
        async fn session_cancel(&self, _: CancelNotification, _cx: AgentContext) -> Result<(), Error> {
            Ok(())
        }
    }

    pub struct Client1;

    impl Client<ClientContext> for Client1 {
        async fn session_request_permission(
            &self,
            _: RequestPermissionRequest,
            _cx: ClientContext,
        ) -> Result<RequestPermissionResponse, Error> {
            Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
        }
        async fn session_update(&self, _: SessionNotification, _cx: ClientContext) -> Result<(), Error> {
            Ok(())
        }
    }

    pub fn init() -> InitializeRequest {
        InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(ClientCapabilities::new().fs(FileSystemCapabilities::new().read_text_file(true)))
    }
}

async fn negotiate_with<H: Handler>(agent: H) -> Negotiated {
    let ((ar, aw), (cr, cw)) = duplex(1 << 16);
    let (_agent_peer, serve) = Connection::new().serve(ar, aw, agent);
    tokio::spawn(serve);
    let router = Arc::new(ProtocolRouter::new().with_v1_client(v1::Client1).with_v2_client(Recorder::default()));
    let (peer, serve) = Connection::new().serve(cr, cw, router.clone());
    tokio::spawn(serve);
    let v2_init = InitializeRequest::new(ProtocolVersion::V2, Implementation::new("both", "1.0"));
    let negotiated = tokio::time::timeout(LIMIT, router.negotiate(&peer, v2_init, v1::init())).await.unwrap().unwrap();
    assert_eq!(router.chosen(), Some(negotiated.version()));
    negotiated
}

#[tokio::test]
async fn a_client_asking_for_v2_goes_on_with_v1_against_a_v1_agent() {
    let agent = v1::Agent1::default();
    let negotiated = negotiate_with(acp_rpc::agent::AgentHandler::new(agent.clone())).await;
    let Negotiated::V1 { agent: handle, init } = negotiated else { panic!("expected v1: {negotiated:?}") };
    assert_eq!(init.protocol_version, acp_rpc::acp_types::ProtocolVersion::V1);
    let caps = agent.seen.lock().unwrap().clone().expect("the v1 agent read the client's v1 capabilities");
    assert_eq!(caps.fs.and_then(|fs| fs.read_text_file), Some(true));
    let session = handle.new_session(acp_rpc::acp_types::NewSessionRequest::new("/", vec![])).await.unwrap();
    assert_eq!(session.session_id.0, "v1-session");
}

#[tokio::test]
async fn a_client_asking_for_v2_gets_v2_from_a_dual_agent() {
    let router = ProtocolRouter::new().with_v1_agent(v1::Agent1::default()).with_v2_agent(Scripted);
    let Negotiated::V2 { agent, init } = negotiate_with(router).await else { panic!("expected v2") };
    assert_eq!(init.protocol_version, ProtocolVersion::V2);
    agent.new_session(NewSessionRequest::new("/")).await.unwrap();
    let end = tokio::time::timeout(LIMIT, agent.prompt_turn(prompt("hi"))).await.unwrap().unwrap();
    assert_eq!(end.stop_reason, Some(StopReason::EndTurn));
}
