//! An agent learns what the client said in `initialize` (its capabilities, its info) from
//! every handler's context and from its client handle, from the moment the request arrived.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_rpc::acp_types::*;
use acp_rpc::transport::duplex;
use acp_rpc::{AgentContext, Connection, RawValue, acp_agent};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(10);

/// Notes what its handlers saw, in a list the test keeps a handle to.
#[derive(Default)]
struct Recorder {
    seen: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn note(&self, what: String) {
        self.seen.lock().unwrap().push(what);
    }
}

#[acp_agent]
impl Recorder {
    async fn initialize(&self, _: InitializeRequest, cx: AgentContext) -> Result<InitializeResponse, Error> {
        let init = cx.client_init().expect("set before the handler runs");
        let name = init.client_info.value().map(|info| &info.name);
        self.note(format!("initialize: terminal {:?}, client {name:?}", cx.client_capabilities().terminal));
        Ok(InitializeResponse::new(ProtocolVersion::V1))
    }
    async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _: NewSessionRequest, cx: AgentContext) -> Result<NewSessionResponse, Error> {
        let fs = cx.client_capabilities().fs.unwrap_or_default();
        self.note(format!("session/new: read {:?}, write {:?}", fs.read_text_file, fs.write_text_file));
        Ok(NewSessionResponse::new("sess_1"))
    }
    async fn session_prompt(&self, _: PromptRequest) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _: CancelNotification) {}
}

async fn call(peer: &acp_rpc::Peer, method: &str, params: Value) -> Value {
    let params = RawValue::from_string(params.to_string()).unwrap();
    let result = tokio::time::timeout(LIMIT, peer.request_raw(method, Some(&params))).await.unwrap().unwrap();
    serde_json::from_str(result.get()).unwrap()
}

#[tokio::test]
async fn handlers_and_the_client_handle_see_what_the_client_sent_in_initialize() {
    let (agent_end, client_end) = duplex(64 * 1024);
    let agent = Recorder::default();
    let seen = agent.seen.clone();
    let (client_handle, agent_serve) = acp_rpc::serve_agent(agent, agent_end.0, agent_end.1);
    let (peer, client_serve) = Connection::new().serve(client_end.0, client_end.1, ());
    tokio::spawn(agent_serve);
    tokio::spawn(client_serve);

    // Before `initialize`: nothing known, and no capability assumed.
    assert!(client_handle.client_init().is_none());
    assert_eq!(client_handle.client_capabilities(), ClientCapabilities::default());

    let init = json!({
        "protocolVersion": 1,
        "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": false}, "terminal": true},
        "clientInfo": {"name": "test-editor", "version": "1.0"}
    });
    assert_eq!(call(&peer, "initialize", init).await["protocolVersion"], json!(1));
    call(&peer, "session/new", json!({"cwd": "/", "mcpServers": []})).await;

    assert_eq!(
        *seen.lock().unwrap(),
        [
            r#"initialize: terminal Some(true), client Some("test-editor")"#,
            "session/new: read Some(true), write Some(false)",
        ]
    );
    // The handle given out at the start knows it too (e.g. for a background task).
    assert_eq!(client_handle.client_capabilities().terminal, Some(true));
    assert_eq!(client_handle.client_init().unwrap().protocol_version, ProtocolVersion::V1);
}
