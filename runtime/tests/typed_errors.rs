//! The typed layer's answers to bad input and errors, extension methods with `_meta`, and the
//! connection's end as seen by typed calls.

mod common;
mod typed_common;

use acp_rpc::{Error, ErrorObject, RawValue, codes};
use acp_types::*;
use serde_json::{Value, json};
use typed_common::*;

fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).unwrap()
}

fn rpc_error(result: Result<Box<RawValue>, Error>) -> ErrorObject {
    match result {
        Err(Error::Rpc(e)) => e,
        other => panic!("expected an error answer, got {other:?}"),
    }
}

fn path(e: &ErrorObject) -> &str {
    e.data.as_ref().and_then(|d| d["path"].as_str()).unwrap_or_else(|| panic!("no data.path in {e:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_agent_invalid_params_answer_32602_with_the_path_and_unknown_methods_32601() {
    let (peer, _events, _tasks) = raw_client_to_agent();

    let e = rpc_error(peer.request_raw("session/prompt", Some(&raw(r#"{"sessionId":5,"prompt":[]}"#))).await);
    assert_eq!(e.code, codes::INVALID_PARAMS);
    assert_eq!(path(&e), "sessionId");

    let e = rpc_error(peer.request_raw("session/new", Some(&raw(r#"{"mcpServers":[],"cwd":["/w"]}"#))).await);
    assert_eq!(e.code, codes::INVALID_PARAMS, "{e:?}");
    assert_eq!(path(&e), "cwd");
    let e = rpc_error(
        peer.request_raw(
            "session/prompt",
            Some(&raw(r#"{"sessionId":"s","prompt":[{"type":"text","text":"a"},{"type":"text"}]}"#)),
        )
        .await,
    );
    assert_eq!(e.code, codes::INVALID_PARAMS, "{e:?}");
    assert!(e.message.contains("missing field `text`"), "{e:?}");
    // Tagged unions (content blocks, updates) fail after their object is read, so the path
    // names the enclosing array, not the element.
    assert!(path(&e).starts_with("prompt"), "{e:?}");

    // Required params missing entirely: absent params read as `{}`.
    let e = rpc_error(peer.request_raw("session/prompt", None).await);
    assert_eq!(e.code, codes::INVALID_PARAMS);
    assert!(e.message.contains("missing field"), "{e:?}");

    for method in ["foo/bar", "$/whatever", "session/nope"] {
        let e = rpc_error(peer.request_raw(method, Some(&raw("{}"))).await);
        assert_eq!(e.code, codes::METHOD_NOT_FOUND, "{method}: {e:?}");
        assert_eq!(e.data, Some(json!(method)));
    }
    // A method of the spec the agent does not implement: the trait's default, -32601.
    let e = rpc_error(peer.request_raw("session/set_mode", Some(&raw(r#"{"sessionId":"s","modeId":"m"}"#))).await);
    assert_eq!(e.code, codes::METHOD_NOT_FOUND);

    // Absent and `null` params decode as `{}` where every field is optional.
    assert_eq!(peer.request_raw("session/list", None).await.unwrap().get(), r#"{"sessions":[]}"#);
    assert_eq!(peer.request_raw("session/list", Some(&raw("null"))).await.unwrap().get(), r#"{"sessions":[]}"#);

    // Bad notifications are never answered, and the connection goes on.
    peer.notify_raw("session/cancel", Some(&raw(r#"{"sessionId":42}"#))).await.unwrap();
    peer.notify_raw("no/such/notification", None).await.unwrap();
    peer.notify_raw("_unknown/ext", Some(&raw(r#"{"a":1}"#))).await.unwrap();
    let init = peer.request_raw("initialize", Some(&raw(r#"{"protocolVersion":1}"#))).await.unwrap();
    assert_eq!(init.get(), r#"{"protocolVersion":1}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_client_invalid_params_answer_32602_with_the_path_and_unknown_methods_32601() {
    let (peer, log, _tasks) = raw_agent_to_client();
    let e = rpc_error(peer.request_raw("fs/read_text_file", Some(&raw(r#"{"sessionId":"s","path":5}"#))).await);
    assert_eq!(e.code, codes::INVALID_PARAMS);
    assert_eq!(path(&e), "path");
    let e = rpc_error(peer.request_raw("session/prompt", Some(&raw("{}"))).await);
    assert_eq!(e.code, codes::METHOD_NOT_FOUND, "a client does not handle agent methods");
    // The client implements no elicitation: the trait's default.
    let e = rpc_error(peer.request_raw("elicitation/create", Some(&raw("{}"))).await);
    assert!(e.code == codes::METHOD_NOT_FOUND || e.code == codes::INVALID_PARAMS, "{e:?}");
    assert!(log.requests.lock().unwrap().is_empty());
    let ok = peer.request_raw("fs/read_text_file", Some(&raw(r#"{"sessionId":"s","path":"/p"}"#))).await.unwrap();
    assert_eq!(ok.get(), r#"{"content":"contents of a.txt"}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_handler_errors_go_out_unchanged_and_come_back_as_rpc_errors() {
    let pair = pair();
    start_session(&pair.agent).await;
    match pair.agent.prompt(prompt("fail")).await {
        Err(Error::Rpc(e)) => {
            assert_eq!(e, ErrorObject::new(-32042, "custom failure").with_data(json!({"why": ["because"]})));
            // And into the generated error type, for a handler's `?`.
            let typed: acp_types::Error = Error::Rpc(e).into();
            assert_eq!(typed.code, ErrorCode(-32042));
        }
        other => panic!("{other:?}"),
    }
    // JSON-RPC params are structured, and extension names start with `_`: such calls are
    // refused before anything is sent, and the connection goes on.
    for (method, params) in [("_test/echo", json!(1)), ("_test/echo", json!("s")), ("session/new", json!({}))] {
        let result: Result<Value, Error> = pair.agent.ext_method(method, params.clone()).await;
        assert!(matches!(&result, Err(Error::InvalidExtension { .. })), "{method} {params}: {result:?}");
        let result = pair.agent.ext_notification(method, params.clone()).await;
        assert!(matches!(&result, Err(Error::InvalidExtension { .. })), "{method} {params}: {result:?}");
    }
    // `null` means no params.
    let echoed = pair.agent.ext_method("_test/echo", Value::Null).await.unwrap();
    assert_eq!(echoed["params"], json!({}));
}

/// An "agent" that answers every request with a result of the wrong shape.
struct WrongResults;

impl acp_rpc::Handler for WrongResults {
    async fn handle_request(&self, _req: acp_rpc::IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        Ok(raw(r#"{"protocolVersion":"one","sessionId":7,"stopReason":"end_turn"}"#))
    }
}

#[tokio::test]
async fn typed_results_that_do_not_decode_fail_with_the_path_and_null_reads_as_empty() {
    let (a, b) = acp_rpc::transport::duplex(4096);
    let (_peer, agent_serve) = acp_rpc::Connection::new().serve(a.0, a.1, WrongResults);
    let agent_serve = tokio::spawn(agent_serve);
    let (peer, serve) = acp_rpc::Connection::new().serve(b.0, b.1, ());
    let serve = tokio::spawn(serve);
    let agent = acp_rpc::AgentHandle::new(peer);
    match agent.initialize(InitializeRequest::new(ProtocolVersion(1))).await {
        Err(Error::Decode { path, .. }) => assert_eq!(path, "protocolVersion"),
        other => panic!("{other:?}"),
    }
    match agent.new_session(NewSessionRequest::new("/w", vec![])).await {
        Err(Error::Decode { path, .. }) => assert_eq!(path, "sessionId"),
        other => panic!("{other:?}"),
    }
    // Unknown fields are fine.
    assert_eq!(agent.prompt(prompt("x")).await.unwrap().stop_reason, StopReason::EndTurn);
    agent.close();
    let _ = tokio::join!(serve, agent_serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_extension_methods_and_notifications_round_trip_with_meta_untouched() {
    let mut pair = pair();
    start_session(&pair.agent).await;

    // Client → agent.
    let params = json!({"x": 1, "_meta": {"traceparent": "00-abc-01", "vendor.io/k": [1, {"z": null}]}});
    let echoed = pair.agent.ext_method("_test/echo", params.clone()).await.unwrap();
    assert_eq!(echoed, json!({"method": "_test/echo", "params": params, "cxMeta": params["_meta"]}));
    // Key order and every byte of `_meta` survive (with the `preserve_order` feature, on for the
    // tests; without it `Value`s are written in sorted order on both sides).
    assert_eq!(echoed["params"].to_string(), params.to_string());

    let unknown = pair.agent.ext_method("_test/unknown", json!({})).await;
    assert!(matches!(&unknown, Err(Error::Rpc(e)) if e.code == codes::METHOD_NOT_FOUND), "{unknown:?}");

    pair.agent.ext_notification("_test/note", params.clone()).await.unwrap();
    match next(&mut pair.agent_events).await {
        AgentEvent::ExtNotification(method, p, meta) => {
            assert_eq!(method, "_test/note");
            assert_eq!(p, params);
            assert_eq!(meta, Some(params["_meta"].clone()));
        }
        other => panic!("unexpected {other:?}"),
    }

    // Agent → client, from inside a prompt turn.
    let response = pair.agent.prompt(prompt("ext")).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    let sent = json!({"q": [1, 2], "_meta": {"traceparent": "00-abc-01", "deep": {"k": null}}});
    match next(&mut pair.agent_events).await {
        AgentEvent::Call(what, Ok(v)) if what == "_test/echo" => {
            assert_eq!(v, json!({"method": "_test/echo", "params": sent, "cxMeta": sent["_meta"]}));
        }
        other => panic!("unexpected {other:?}"),
    }
    match next(&mut pair.agent_events).await {
        AgentEvent::Call(what, Err(e)) if what == "_test/unknown" => assert!(e.contains("-32601"), "{e}"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(next(&mut pair.client_events).await, ClientEvent::ExtNotification("_test/note".into(), sent));
}

/// The peer dies abruptly (a raw end we drop, so nothing answers on its behalf): the agent's
/// pending typed call fails with "connection closed", as does every later one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_peer_closing_fails_pending_typed_calls_of_the_agent_with_connection_closed() {
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let agent = acp_rpc::agent::AgentHandler::new(TestAgent { events: events_tx });
    let (mut raw_client, peer, serve) = common::start(acp_rpc::Connection::new(), agent);
    let client = acp_rpc::ClientHandle::new(peer);

    // A turn in which the agent waits for a client call that is never answered.
    let params = serde_json::to_value(prompt("hang on read")).unwrap();
    raw_client.send_json(json!({"jsonrpc":"2.0","id":1,"method":"session/prompt","params":params})).await;
    let call = raw_client.recv().await;
    assert_eq!(call["method"], "fs/read_text_file");
    assert_eq!(call["params"]["path"], "/hang");

    drop(raw_client);
    match next(&mut events).await {
        AgentEvent::Call(what, Err(e)) if what == "read" => assert_eq!(e, "ConnectionClosed"),
        other => panic!("agent side: {other:?}"),
    }
    tokio::time::timeout(LIMIT, client.closed()).await.unwrap();
    assert!(client.is_closed() && client.closed_token().is_cancelled());
    let late = client.read_text_file(ReadTextFileRequest::new(SESSION, "/x")).await;
    assert!(matches!(late, Err(Error::ConnectionClosed)), "{late:?}");
    let late = client.session_update(SessionNotification::new(SESSION, SessionUpdate::Plan(Plan::new(vec![])))).await;
    assert!(matches!(late, Err(Error::ConnectionClosed)), "{late:?}");
    let _ = tokio::time::timeout(LIMIT, serve).await.unwrap();
}

/// The same on the client side: the agent dies during `session/prompt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_peer_closing_fails_pending_typed_calls_of_the_client_with_connection_closed() {
    let (events_tx, _events) = tokio::sync::mpsc::unbounded_channel();
    let client = acp_rpc::client::ClientHandler::new(TestClient::new(Default::default(), events_tx));
    let (mut raw_agent, peer, serve) = common::start(acp_rpc::Connection::new(), client);
    let agent = acp_rpc::AgentHandle::new(peer);

    let turn = tokio::spawn({
        let agent = agent.clone();
        async move { agent.prompt(prompt("anything")).await }
    });
    let call = raw_agent.recv().await;
    assert_eq!(call["method"], "session/prompt");
    // A bound handle (as a handler's context gives) fails the same way, not as cancelled.
    let token = tokio_util::sync::CancellationToken::new();
    let bound = agent.bound_to(token.child_token());
    let bound_call = tokio::spawn(async move { bound.list_sessions(ListSessionsRequest::new()).await });
    assert_eq!(raw_agent.recv().await["method"], "session/list");

    drop(raw_agent);
    let result = tokio::time::timeout(LIMIT, turn).await.unwrap().unwrap();
    assert!(matches!(result, Err(Error::ConnectionClosed)), "{result:?}");
    let result = tokio::time::timeout(LIMIT, bound_call).await.unwrap().unwrap();
    assert!(matches!(result, Err(Error::ConnectionClosed)), "{result:?}");
    tokio::time::timeout(LIMIT, agent.closed()).await.unwrap();
    let late = agent.new_session(NewSessionRequest::new("/w", vec![])).await;
    assert!(matches!(late, Err(Error::ConnectionClosed)), "{late:?}");
    let late = agent.cancel(CancelNotification::new(SESSION)).await;
    assert!(matches!(late, Err(Error::ConnectionClosed)), "{late:?}");
    let _ = tokio::time::timeout(LIMIT, serve).await.unwrap();
}

/// Two typed ends: the agent's connection is dropped mid-turn. The client's `prompt` ends
/// either way: with "connection closed", or with the `cancelled` answer the agent's runtime
/// may still get out for its cancelled turn before its writer stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_dropping_the_agents_connection_ends_the_clients_pending_prompt() {
    let pair = pair();
    start_session(&pair.agent).await;
    let agent = pair.agent.clone();
    let turn = tokio::spawn(async move { agent.prompt(prompt("hang on read")).await });
    while pair.client_log.requests.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    pair.agent_serve.abort();
    match tokio::time::timeout(LIMIT, turn).await.unwrap().unwrap() {
        Err(Error::ConnectionClosed) => {}
        Ok(r) => assert_eq!(r.stop_reason, StopReason::Cancelled),
        other => panic!("{other:?}"),
    }
    tokio::time::timeout(LIMIT, pair.agent.closed()).await.unwrap();
    let served = tokio::time::timeout(LIMIT, pair.client_serve).await.unwrap().unwrap();
    assert!(matches!(served, Ok(()) | Err(Error::Io(_))), "{served:?}");
}
