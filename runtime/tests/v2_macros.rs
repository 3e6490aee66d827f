//! `#[acp_agent(v2)]` and `#[acp_client(v2)]`: a v2 agent and client written as impl blocks,
//! talking over an in-memory duplex: the v2 capabilities the handlers earn (`{}` markers under
//! `capabilities`), a turn, extension methods, and the version router serving a macro agent of
//! each version from one endpoint.

mod common;

use std::sync::{Arc, Mutex};

use acp_rpc::acp_types::v2::IdleStateUpdateStopReason as StopReason;
use acp_rpc::acp_types::v2::*;
use acp_rpc::transport::duplex;
use acp_rpc::v2::{AgentContext, ClientContext};
use acp_rpc::{Connection, acp_agent, acp_client};
use common::LIMIT;
use serde_json::json;

struct Agent2 {
    deleted: Mutex<Vec<String>>,
}

#[acp_agent(v2)]
impl Agent2 {
    async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("agent2", "1.0")))
    }
    async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("s1"))
    }
    async fn session_list(&self, _: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(vec![]))
    }
    async fn session_resume(&self, _: ResumeSessionRequest) -> Result<ResumeSessionResponse, Error> {
        Ok(ResumeSessionResponse::new())
    }
    async fn session_close(&self, _: CloseSessionRequest) -> Result<CloseSessionResponse, Error> {
        Ok(CloseSessionResponse::new())
    }
    async fn session_delete(&self, params: DeleteSessionRequest) -> Result<DeleteSessionResponse, Error> {
        self.deleted.lock().unwrap().push(params.session_id.0);
        Ok(DeleteSessionResponse::new())
    }
    async fn session_prompt(&self, _: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let turn = cx.turn().expect("a prompt has a turn");
        turn.say("hello from a macro agent").await?;
        Ok(turn.response().await?)
    }
    async fn session_cancel(&self, _: CancelSessionNotification) {}

    #[ext("_agent2/double")]
    async fn double(&self, numbers: Vec<u64>) -> Result<Vec<u64>, Error> {
        Ok(numbers.into_iter().map(|n| n * 2).collect())
    }
}

#[derive(Clone, Default)]
struct Client2 {
    messages: Arc<Mutex<Vec<String>>>,
}

#[acp_client(v2)]
impl Client2 {
    async fn session_request_permission(
        &self,
        _: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled(
            acp_rpc::acp_types::v2::CancelledPermissionOutcome::new(),
        )))
    }
    async fn session_update(&self, params: UpdateSessionNotification, _cx: ClientContext) {
        if let SessionUpdate::AgentMessage(m) = params.update {
            let text = serde_json::to_value(m.content).unwrap()[0]["text"].as_str().unwrap_or_default().to_owned();
            self.messages.lock().unwrap().push(text);
        }
    }
}

fn connect(agent: impl acp_rpc::Handler, client: Client2) -> acp_rpc::v2::AgentHandle {
    let ((ar, aw), (cr, cw)) = duplex(1 << 16);
    let (_peer, serve) = Connection::new().v2_rules().serve(ar, aw, agent);
    tokio::spawn(serve);
    let (handle, serve) = acp_rpc::v2::serve_client(client, cr, cw);
    tokio::spawn(serve);
    handle
}

#[tokio::test]
async fn a_macro_agent_earns_v2_capabilities_and_serves_a_turn() {
    let client = Client2::default();
    let agent = connect(acp_rpc::v2::AgentHandler::new(Agent2 { deleted: Mutex::default() }), client.clone());
    let init =
        agent.initialize(InitializeRequest::new(ProtocolVersion::V2, Implementation::new("c", "1"))).await.unwrap();
    let caps = serde_json::to_value(&init.capabilities).unwrap();
    assert_eq!(caps, json!({"session": {"delete": {}}}), "support markers are objects, earned by the handlers");
    agent.new_session(NewSessionRequest::new("/")).await.unwrap();
    let end =
        tokio::time::timeout(LIMIT, agent.prompt_turn(PromptRequest::new("s1", vec![TextContent::new("hi").into()])))
            .await
            .unwrap()
            .unwrap();
    assert_eq!(end.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(*client.messages.lock().unwrap(), ["hello from a macro agent"]);
    assert_eq!(agent.ext_method("_agent2/double", json!([21, 1])).await.unwrap(), json!([42, 2]));
    agent.delete_session(DeleteSessionRequest::new("old")).await.unwrap();
}

#[tokio::test]
async fn one_endpoint_serves_a_v1_and_a_v2_macro_agent() {
    use acp_rpc::version::{Negotiated, ProtocolRouter};

    struct Agent1;
    #[acp_agent]
    impl Agent1 {
        async fn initialize(
            &self,
            _: acp_rpc::acp_types::InitializeRequest,
        ) -> Result<acp_rpc::acp_types::InitializeResponse, acp_rpc::acp_types::Error> {
            Ok(acp_rpc::acp_types::InitializeResponse::new(acp_rpc::acp_types::ProtocolVersion::V1))
        }
        async fn authenticate(
            &self,
            _: acp_rpc::acp_types::AuthenticateRequest,
        ) -> Result<acp_rpc::acp_types::AuthenticateResponse, acp_rpc::acp_types::Error> {
            Ok(acp_rpc::acp_types::AuthenticateResponse::new())
        }
        async fn session_new(
            &self,
            _: acp_rpc::acp_types::NewSessionRequest,
        ) -> Result<acp_rpc::acp_types::NewSessionResponse, acp_rpc::acp_types::Error> {
            Ok(acp_rpc::acp_types::NewSessionResponse::new("v1"))
        }
        async fn session_prompt(
            &self,
            _: acp_rpc::acp_types::PromptRequest,
        ) -> Result<acp_rpc::acp_types::PromptResponse, acp_rpc::acp_types::Error> {
            Ok(acp_rpc::acp_types::PromptResponse::new(acp_rpc::acp_types::StopReason::EndTurn))
        }
        async fn session_cancel(&self, _: acp_rpc::acp_types::CancelNotification) {}
    }

    for ask_v2 in [true, false] {
        let ((ar, aw), (cr, cw)) = duplex(1 << 16);
        let router = ProtocolRouter::new().with_v1_agent(Agent1).with_v2_agent(Agent2 { deleted: Mutex::default() });
        let (_peer, serve) = Connection::new().serve(ar, aw, router);
        tokio::spawn(serve);
        let mut client_router = ProtocolRouter::new().with_v1(());
        if ask_v2 {
            client_router = client_router.with_v2_client(Client2::default());
        }
        let client_router = Arc::new(client_router);
        let (peer, serve) = Connection::new().serve(cr, cw, client_router.clone());
        tokio::spawn(serve);
        let v2_init = InitializeRequest::new(ProtocolVersion::V2, Implementation::new("c", "1"));
        let v1_init = acp_rpc::acp_types::InitializeRequest::new(acp_rpc::acp_types::ProtocolVersion::V1);
        let negotiated = client_router.negotiate(&peer, v2_init, v1_init).await.unwrap();
        match (ask_v2, negotiated) {
            (true, Negotiated::V2 { init, .. }) => {
                assert_eq!(serde_json::to_value(&init.capabilities).unwrap(), json!({"session": {"delete": {}}}))
            }
            (false, Negotiated::V1 { agent, .. }) => {
                let s = agent.new_session(acp_rpc::acp_types::NewSessionRequest::new("/", vec![])).await.unwrap();
                assert_eq!(s.session_id.0, "v1");
            }
            (ask_v2, other) => panic!("asked for v2: {ask_v2}, got {other:?}"),
        }
    }
}
