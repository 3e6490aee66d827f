//! `#[acp_agent]` / `#[acp_client]` expansions at work, over the in-memory duplex: extension
//! requests and notifications reach the function bound to them (and only that one), handlers
//! under `#[cfg]` are handled and advertised only when compiled in, notification handlers may
//! return nothing, helper functions stay in the block, and impl blocks may be generic. An agent
//! or a client served behind an `Arc` is still reachable through a clone of it, and advertises
//! what it handles.

use std::fmt::Display;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_rpc::acp_types::*;
use acp_rpc::transport::duplex;
use acp_rpc::{Advertise, AgentContext, Connection, ErrorObject, Peer, RawValue, acp_agent, acp_client, codes};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Upper bound for anything that should happen soon; never used as synchronisation.
const LIMIT: Duration = Duration::from_secs(10);

async fn next(events: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(LIMIT, events.recv()).await.expect("timed out waiting for an event").expect("channel closed")
}

fn raw(v: Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(&v).unwrap()
}

async fn request(peer: &Peer, method: &str, params: Value) -> Result<Value, ErrorObject> {
    match peer.request_raw(method, Some(&raw(params))).await {
        Ok(result) => Ok(serde_json::from_str(result.get()).unwrap()),
        Err(acp_rpc::Error::Rpc(e)) => Err(e),
        Err(other) => panic!("{method}: expected an answer, got {other:?}"),
    }
}

#[derive(Deserialize)]
struct Numbers {
    values: Vec<u64>,
}

#[derive(Deserialize)]
struct LogLine {
    line: String,
}

// ---- the agent ------------------------------------------------------------------------------

struct ExtAgent {
    events: mpsc::UnboundedSender<String>,
}

#[acp_agent]
impl ExtAgent {
    /// A plain helper in the block: left alone.
    fn report(&self, event: impl Into<String>) {
        let _ = self.events.send(event.into());
    }

    const SESSION: &str = "sess_ext";

    async fn initialize(&self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(params.protocol_version))
    }
    async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new(Self::SESSION))
    }
    async fn session_prompt(&self, _: PromptRequest) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    // A notification handler may return nothing.
    async fn session_cancel(&self, params: CancelNotification) {
        self.report(format!("cancel {}", params.session_id.0));
    }

    // Configured out: neither handled nor advertised.
    #[cfg(any())]
    async fn session_load(&self, _: LoadSessionRequest) -> Result<LoadSessionResponse, Error> {
        unreachable!("configured out")
    }

    // One of the two is compiled in: handled and advertised either way.
    #[cfg(unix)]
    async fn session_list(&self, _: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(vec![SessionInfo::new(Self::SESSION, "/unix")]))
    }
    #[cfg(not(unix))]
    async fn session_list(&self, _: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(vec![SessionInfo::new(Self::SESSION, "C:\\other")]))
    }

    // `_v/ping` as a request and as a notification, each with its own function.
    #[ext("_v/ping")]
    async fn ping(&self, params: Value) -> Result<Value, Error> {
        Ok(json!({ "pong": params }))
    }
    #[ext_notification("_v/ping")]
    async fn ping_notification(&self, params: Value, cx: AgentContext) {
        self.report(format!("ping notification {params} id={:?} method={}", cx.request_id(), cx.method()));
    }

    // Request only, and notification only.
    #[ext("_v/echo")]
    async fn echo(&self, params: Value) -> Result<Value, Error> {
        Ok(params)
    }
    #[ext_notification("_v/log")]
    async fn log(&self, params: LogLine) -> Result<(), Error> {
        if params.line == "fail" {
            return Err(Error::internal_error());
        }
        self.report(format!("log {}", params.line));
        Ok(())
    }

    // Typed params: what does not fit is answered as typed methods answer it.
    #[ext("_v/sum")]
    async fn sum(&self, params: Numbers) -> Result<u64, Error> {
        Ok(params.values.iter().sum())
    }

    // Extension methods that take no params.
    #[ext("_v/unit")]
    async fn unit(&self, _: ()) -> Result<&'static str, Error> {
        Ok("unit")
    }
    #[ext("_v/maybe")]
    async fn maybe(&self, n: Option<u32>) -> Result<Option<u32>, Error> {
        Ok(n)
    }

    // Configured out: `_v/gone` is unknown as a request and as a notification.
    #[cfg(any())]
    #[ext("_v/gone")]
    async fn gone(&self, params: Value) -> Result<Value, Error> {
        Ok(params)
    }
    #[ext_notification("_v/gone")]
    #[cfg_attr(all(), cfg(any()))]
    async fn gone_notification(&self, _: Value) {
        self.report("gone");
    }
}

/// A raw client connected to an [`ExtAgent`].
fn agent() -> (Peer, mpsc::UnboundedReceiver<String>) {
    let (agent_end, client_end) = duplex(64 * 1024);
    let (events_tx, events) = mpsc::unbounded_channel();
    let (_client, agent_serve) = acp_rpc::serve_agent(ExtAgent { events: events_tx }, agent_end.0, agent_end.1);
    let (peer, raw_serve) = Connection::new().serve(client_end.0, client_end.1, ());
    tokio::spawn(agent_serve);
    tokio::spawn(raw_serve);
    (peer, events)
}

#[tokio::test]
async fn ext_requests_and_notifications_of_one_name_reach_their_own_functions() {
    let (peer, mut events) = agent();

    assert_eq!(request(&peer, "_v/ping", json!({"n": 1})).await.unwrap(), json!({"pong": {"n": 1}}));
    peer.notify("_v/ping", &json!({"n": 2})).await.unwrap();
    assert_eq!(next(&mut events).await, r#"ping notification {"n":2} id=None method=_v/ping"#);

    // Notifications are handled in order: when `log last` arrives, the ones before it were
    // handled, and none of them reported anything.
    peer.notify("_v/echo", &json!({"request": "only"})).await.unwrap();
    peer.notify("_v/unknown", &json!({})).await.unwrap();
    peer.notify("_v/gone", &json!({})).await.unwrap();
    peer.notify("_v/log", &json!({"line": 5})).await.unwrap(); // params do not fit: logged
    peer.notify("_v/log", &json!({"line": "fail"})).await.unwrap(); // handler error: logged
    peer.notify("_v/log", &json!({"line": "last"})).await.unwrap();
    assert_eq!(next(&mut events).await, "log last");

    // A request for a notification-only name, a configured-out name, an unknown name.
    for method in ["_v/log", "_v/gone", "_v/unknown"] {
        let e = request(&peer, method, json!({})).await.unwrap_err();
        assert_eq!(e.code, codes::METHOD_NOT_FOUND, "{method}: {e:?}");
        assert_eq!(e.data, Some(json!(method)));
    }
    assert_eq!(request(&peer, "_v/echo", json!([1, 2])).await.unwrap(), json!([1, 2]));
    // The connection went on through all of it.
    assert_eq!(request(&peer, "_v/ping", json!(null)).await.unwrap(), json!({"pong": {}}));
}

#[tokio::test]
async fn ext_handlers_taking_unit_or_an_option_can_be_called_without_params() {
    let (peer, _events) = agent();
    // Absent params, `null` params, and (for `()`) an empty object all mean "no params".
    assert_eq!(peer.request_raw("_v/unit", None).await.unwrap().get(), r#""unit""#);
    assert_eq!(request(&peer, "_v/unit", json!(null)).await.unwrap(), json!("unit"));
    assert_eq!(request(&peer, "_v/unit", json!({})).await.unwrap(), json!("unit"));
    assert_eq!(peer.request_raw("_v/maybe", None).await.unwrap().get(), "null");
    // Params that fit neither are still refused, with the first decoding error.
    let e = request(&peer, "_v/unit", json!({"x": 1})).await.unwrap_err();
    assert_eq!(e.code, codes::INVALID_PARAMS, "{e:?}");
    let e = request(&peer, "_v/maybe", json!([1])).await.unwrap_err();
    assert_eq!(e.code, codes::INVALID_PARAMS, "{e:?}");
}

#[tokio::test]
async fn ext_params_that_do_not_fit_are_refused_with_the_fields_path() {
    let (peer, _events) = agent();
    assert_eq!(request(&peer, "_v/sum", json!({"values": [1, 2]})).await.unwrap(), json!(3));
    let e = request(&peer, "_v/sum", json!({"values": [1, "two"]})).await.unwrap_err();
    assert_eq!(e.code, codes::INVALID_PARAMS, "{e:?}");
    assert!(e.message.starts_with("Invalid params: invalid type: string"), "{e:?}");
    assert_eq!(e.data, Some(json!({"path": "values[1]"})), "{e:?}");
    let e = request(&peer, "_v/sum", json!({})).await.unwrap_err();
    assert_eq!((e.message.as_str(), e.data), ("Invalid params: missing field `values`", Some(json!({"path": ""}))));
}

#[tokio::test]
async fn a_notification_handler_without_a_result_is_called() {
    let (peer, mut events) = agent();
    peer.notify("session/cancel", &json!({"sessionId": "sess_ext"})).await.unwrap();
    assert_eq!(next(&mut events).await, "cancel sess_ext");
}

#[tokio::test]
async fn handlers_under_cfg_are_handled_and_advertised_only_when_compiled_in() {
    let (peer, _events) = agent();
    let init = request(&peer, "initialize", json!({"protocolVersion": 1})).await.unwrap();
    let caps = &init["agentCapabilities"];
    assert_ne!(caps["loadSession"], json!(true), "session_load is configured out: {init}");
    assert_eq!(caps["sessionCapabilities"]["list"], json!({}), "session_list is compiled in: {init}");

    let e = request(&peer, "session/load", json!({"sessionId": "s", "cwd": "/", "mcpServers": []})).await.unwrap_err();
    assert_eq!(e.code, codes::METHOD_NOT_FOUND);
    let listed = request(&peer, "session/list", json!({})).await.unwrap();
    let cwd = if cfg!(unix) { "/unix" } else { "C:\\other" };
    assert_eq!(listed["sessions"][0]["cwd"], json!(cwd));
}

// ---- a generic client -----------------------------------------------------------------------

struct ExtClient<T> {
    tag: T,
    events: mpsc::UnboundedSender<String>,
}

#[acp_client]
impl<T> ExtClient<T>
where
    T: Display + Send + Sync + 'static,
{
    async fn session_request_permission(
        &self,
        _: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
    }
    async fn session_update(&self, _: SessionNotification) -> Result<(), Error> {
        Ok(())
    }
    #[ext("_v/whoami")]
    async fn whoami(&self, _: Value) -> Result<String, Error> {
        Ok(self.tag.to_string())
    }
    #[ext_notification("_v/status")]
    async fn status(&self, params: Value) {
        let _ = self.events.send(format!("{} status {params}", self.tag));
    }
}

#[tokio::test]
async fn a_generic_client_handles_ext_requests_and_notifications() {
    let (agent_end, client_end) = duplex(64 * 1024);
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let client = ExtClient { tag: 7u8, events: events_tx };
    let (_agent, client_serve) = acp_rpc::serve_client(client, client_end.0, client_end.1);
    let (peer, raw_serve) = Connection::new().serve(agent_end.0, agent_end.1, ());
    tokio::spawn(client_serve);
    tokio::spawn(raw_serve);

    assert_eq!(request(&peer, "_v/whoami", json!({})).await.unwrap(), json!("7"));
    peer.notify("_v/whoami", &json!({})).await.unwrap(); // request-only name: ignored
    peer.notify("_v/status", &json!({"state": "busy"})).await.unwrap();
    assert_eq!(next(&mut events).await, r#"7 status {"state":"busy"}"#);
    let e = request(&peer, "_v/status", json!({})).await.unwrap_err();
    assert_eq!(e.code, codes::METHOD_NOT_FOUND);
}

// ---- handlers behind an `Arc` ---------------------------------------------------------------

/// An agent whose state a test reads through its own clone of the `Arc` it serves.
#[derive(Default)]
struct SharedAgent {
    prompted: Mutex<Vec<String>>,
}

#[acp_agent]
impl SharedAgent {
    async fn initialize(&self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(params.protocol_version))
    }
    async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("sess_shared"))
    }
    async fn session_prompt(&self, params: PromptRequest) -> Result<PromptResponse, Error> {
        self.prompted.lock().unwrap().push(params.session_id.0);
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _: CancelNotification) {}
    // Earns `sessionCapabilities.list`.
    async fn session_list(&self, _: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(Vec::new()))
    }
}

#[tokio::test]
async fn an_agent_behind_an_arc_is_served_and_reachable_through_a_clone() {
    let agent = Arc::new(SharedAgent::default());
    let (agent_end, client_end) = duplex(64 * 1024);
    let (_client, agent_serve) = acp_rpc::serve_agent(Arc::clone(&agent), agent_end.0, agent_end.1);
    let (peer, raw_serve) = Connection::new().serve(client_end.0, client_end.1, ());
    tokio::spawn(agent_serve);
    tokio::spawn(raw_serve);

    // `initialize` goes through the `Arc` to the agent, which earns its capabilities there.
    let init = request(&peer, "initialize", json!({"protocolVersion": 1})).await.unwrap();
    assert_eq!(init["agentCapabilities"]["sessionCapabilities"]["list"], json!({}), "{init}");
    assert_eq!(<Arc<SharedAgent> as Advertise>::CAPABILITIES, SharedAgent::CAPABILITIES);

    request(&peer, "session/prompt", json!({"sessionId": "sess_1", "prompt": []})).await.unwrap();
    assert_eq!(*agent.prompted.lock().unwrap(), ["sess_1"], "the handler ran on the agent the test holds");
}

/// A client whose state a test reads through its own clone of the `Arc` it serves.
#[derive(Default)]
struct SharedClient {
    reads: Mutex<Vec<String>>,
}

#[acp_client]
impl SharedClient {
    async fn session_request_permission(
        &self,
        _: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
    }
    async fn session_update(&self, _: SessionNotification) {}
    // Earns `fs.readTextFile`.
    async fn fs_read_text_file(&self, params: ReadTextFileRequest) -> Result<ReadTextFileResponse, Error> {
        let content = format!("contents of {}", params.path);
        self.reads.lock().unwrap().push(params.path);
        Ok(ReadTextFileResponse::new(content))
    }
}

#[tokio::test]
async fn a_client_behind_an_arc_is_served_and_advertises_what_it_handles() {
    let client = Arc::new(SharedClient::default());
    let (agent_end, client_end) = duplex(64 * 1024);
    let (_agent, client_serve) = Connection::new().serve_client(Arc::clone(&client), client_end.0, client_end.1);
    let (peer, raw_serve) = Connection::new().serve(agent_end.0, agent_end.1, ());
    tokio::spawn(client_serve);
    tokio::spawn(raw_serve);

    let read = request(&peer, "fs/read_text_file", json!({"sessionId": "s", "path": "/a.txt"})).await.unwrap();
    assert_eq!(read, json!({"content": "contents of /a.txt"}));
    assert_eq!(*client.reads.lock().unwrap(), ["/a.txt"], "the handler ran on the client the test holds");

    let init = acp_rpc::client::with_capabilities::<Arc<SharedClient>>(InitializeRequest::new(ProtocolVersion::V1));
    let init = serde_json::to_value(init).unwrap();
    assert_eq!(init["clientCapabilities"]["fs"]["readTextFile"], json!(true), "{init}");
}

#[test]
fn boxed_agents_and_clients_are_handlers_too() {
    fn agent<A: Agent<AgentContext> + 'static>() {}
    fn client<C: Client<acp_rpc::ClientContext> + 'static>() {}
    agent::<Box<SharedAgent>>();
    client::<Box<SharedClient>>();
}
