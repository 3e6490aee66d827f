//! Proxies and the conductor at their edges, against raw peers: requests held in a hop's
//! backlog, cancellations that cross hops, and the order of what passes through.

mod common;

use std::time::Duration;

use acp_rpc::proxy::conductor::{Component, Conductor};
use acp_rpc::proxy::{Proxy, ProxyContext, Side};
use acp_rpc::transport::duplex;
use acp_rpc::{Connection, ErrorObject, IncomingRequest, RawValue};
use common::*;
use serde_json::{Value, json};

/// A conductor with one raw agent: (client, agent).
fn chain_with_raw_agent() -> (RawPeer, RawPeer) {
    let ((editor_r, editor_w), (conductor_r, conductor_w)) = duplex(1 << 24);
    let ((a_r, a_w), (ca_r, ca_w)) = duplex(1 << 24);
    let components = vec![Component::new("agent", ca_r, ca_w)];
    tokio::spawn(Conductor::new().run(conductor_r, conductor_w, components));
    (RawPeer::new(editor_r, editor_w), RawPeer::new(a_r, a_w))
}

/// More requests in flight than a hop admits (1,024 running and 4,096 queued by default): the
/// next one is held in the hop's backlog, and once a slot frees it is forwarded like the
/// others. It used to be started as a request addressed to the conductor, which answered it
/// -32603 "no component to forward" without the agent ever seeing it.
#[tokio::test]
async fn a_request_held_in_the_conductors_backlog_is_forwarded_when_its_turn_comes() {
    let (mut client, mut agent) = chain_with_raw_agent();
    const N: i64 = 1024 + 4096 + 1;
    for id in 0..N {
        client.send_json(json!({"jsonrpc": "2.0", "id": id, "method": "_x/slow", "params": {"n": id}})).await;
    }
    let mut agent_ids = Vec::new();
    for _ in 0..(N - 1) {
        let message = agent.recv().await;
        assert_eq!(message["method"], "_x/slow");
        agent_ids.push(message["id"].clone());
    }
    agent.send_json(json!({"jsonrpc": "2.0", "id": agent_ids[0], "result": {"ok": 0}})).await;
    assert_eq!(client.recv().await, json!({"jsonrpc": "2.0", "id": 0, "result": {"ok": 0}}));
    let unexpected = client.try_recv_line(Duration::from_millis(300)).await;
    assert!(unexpected.is_none(), "the client got an answer for a request the agent never saw: {unexpected:?}");
    let held = agent.recv().await;
    assert_eq!(held["params"], json!({"n": N - 1}), "{held}");
}

/// A proxy that intercepts nothing, and says so if its handler is ever called.
struct InterceptsNothing;

impl Proxy for InterceptsNothing {
    async fn handle_request(
        &self,
        _cx: ProxyContext,
        _from: Side,
        req: IncomingRequest,
    ) -> Result<Box<RawValue>, ErrorObject> {
        Err(ErrorObject::internal_error(format!("handler called for `{}`, which it does not intercept", req.method)))
    }
}

/// The same in a proxy: a request held in its backlog is forwarded, not handed to
/// `Proxy::handle_request` (which it never claimed with `intercepts`).
#[tokio::test]
async fn a_request_held_in_a_proxys_backlog_is_forwarded_not_handled() {
    let ((pr, pw), (cr, cw)) = duplex(1 << 20);
    let connection = Connection::new().max_concurrent_requests(1).max_queued_requests(0);
    let (_peer, serve) = acp_rpc::proxy::proxy_connection(connection, InterceptsNothing, pr, pw);
    tokio::spawn(serve);
    let mut conductor = RawPeer::new(cr, cw);
    for id in 1..=2 {
        conductor.send_json(json!({"jsonrpc": "2.0", "id": id, "method": "_x/ext", "params": {"n": id}})).await;
    }
    let first = conductor.recv().await;
    assert_eq!(first["method"], "proxy/successor", "{first}");
    conductor.send_json(json!({"jsonrpc": "2.0", "id": first["id"], "result": {}})).await;
    assert_eq!(conductor.recv().await, json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    let second = conductor.recv().await;
    assert_eq!(second["method"], "proxy/successor", "the second request is forwarded like the first: {second}");
}

/// What the client sends right behind `initialize` reaches the agent after it: the conductor
/// answers `initialize` itself (it initializes the chain), and what followed used to be
/// forwarded while it did.
#[tokio::test]
async fn nothing_the_client_pipelines_behind_initialize_overtakes_it() {
    let (mut client, mut agent) = chain_with_raw_agent();
    client
        .send_json(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}))
        .await;
    client.send_json(json!({"jsonrpc": "2.0", "method": "_x/after_initialize", "params": {}})).await;
    client
        .send_json(
            json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}}),
        )
        .await;
    let initialize = agent.recv().await;
    assert_eq!(initialize["method"], "initialize", "{initialize}");
    // Nothing more until the agent has answered it.
    assert!(agent.try_recv_line(Duration::from_millis(200)).await.is_none());
    agent.send_json(json!({"jsonrpc": "2.0", "id": initialize["id"], "result": {"protocolVersion": 1}})).await;
    assert_eq!(client.recv().await["id"], 0);
    assert_eq!(agent.recv().await["method"], "_x/after_initialize");
    assert_eq!(agent.recv().await["method"], "session/new");
}

/// A conductor with a raw proxy and a raw agent: (client, proxy, agent).
fn chain_with_raw_proxy_and_agent() -> (RawPeer, RawPeer, RawPeer) {
    let ((editor_r, editor_w), (conductor_r, conductor_w)) = duplex(1 << 24);
    let ((p_r, p_w), (cp_r, cp_w)) = duplex(1 << 24);
    let ((a_r, a_w), (ca_r, ca_w)) = duplex(1 << 24);
    let components = vec![Component::new("proxy", cp_r, cp_w), Component::new("agent", ca_r, ca_w)];
    tokio::spawn(Conductor::new().run(conductor_r, conductor_w, components));
    (RawPeer::new(editor_r, editor_w), RawPeer::new(p_r, p_w), RawPeer::new(a_r, a_w))
}

/// A proxy that wraps every notification it passes on wraps its `$/cancel_request`s too. The
/// id in one names a request the proxy sent the conductor; the conductor cancels that request,
/// and tells the agent with the agent's id for it. It used to pass the notification on as it
/// was, where the same number named another request.
#[tokio::test]
async fn a_wrapped_cancel_request_cancels_the_request_it_names_on_the_next_hop() {
    let (_client, mut proxy, mut agent) = chain_with_raw_proxy_and_agent();
    // The proxy's requests 7 and 0; the agent sees them as 0 and 1.
    for (id, method) in [(7, "_x/a"), (0, "_x/b")] {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "proxy/successor", "params": {"method": method, "params": {}}});
        proxy.send_json(request).await;
    }
    let a = agent.recv().await;
    let b = agent.recv().await;
    assert_eq!((&a["method"], &a["id"]), (&json!("_x/a"), &json!(0)));
    assert_eq!((&b["method"], &b["id"]), (&json!("_x/b"), &json!(1)));
    // The proxy cancels its request 0 (`_x/b`).
    let cancel = json!({"method": "$/cancel_request", "params": {"requestId": 0}});
    proxy.send_json(json!({"jsonrpc": "2.0", "method": "proxy/successor", "params": cancel})).await;
    let told = agent.recv().await;
    assert_eq!(told, json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}}));
    agent.send_json(json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32800, "message": "cancelled"}})).await;
    assert_eq!(proxy.recv().await["id"], 0);
}

/// A proxy served by `serve_proxy` waits as long as the conductor's hops do for a cancelled
/// prompt's answer from the agent: an agent that takes 300 ms to wind down after
/// `session/cancel` has its last update passed on before the turn's answer, and the agent's
/// own answer is the one passed on. The proxy used to give up after 100 ms, answer
/// `cancelled` itself, and send a `$/cancel_request` after the `session/cancel`.
#[tokio::test]
async fn a_library_proxy_passes_a_cancelled_turns_last_updates_and_answer_on_in_order() {
    let ((pr, pw), (cr, cw)) = duplex(1 << 20);
    tokio::spawn(acp_rpc::proxy::serve_proxy(acp_rpc::proxy::Passthrough, pr, pw));
    let mut conductor = RawPeer::new(cr, cw);
    let prompt = json!({"sessionId": "s", "prompt": []});
    conductor.send_json(json!({"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": prompt})).await;
    let wrapped = conductor.recv().await;
    assert_eq!(wrapped["method"], "proxy/successor");
    conductor.send_json(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}})).await;
    assert_eq!(conductor.recv().await["params"]["method"], "session/cancel");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let update = json!({"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "last"}}});
    let wrapped_update = json!({"method": "session/update", "params": update});
    conductor.send_json(json!({"jsonrpc": "2.0", "method": "proxy/successor", "params": wrapped_update})).await;
    let answer = json!({"stopReason": "cancelled", "_meta": {"from": "agent"}});
    conductor.send_json(json!({"jsonrpc": "2.0", "id": wrapped["id"], "result": answer})).await;
    let (answer, before) = conductor.recv_until_id(json!(1)).await;
    let methods: Vec<&Value> = before.iter().map(|m| &m["method"]).collect();
    assert_eq!(methods, [&json!("session/update")], "before the answer: {before:?}");
    assert_eq!(answer["result"]["_meta"]["from"], "agent", "{answer}");
}

/// A typed proxy that forwards the prompts it intercepts.
struct TypedPrompts;

#[acp_rpc::acp_proxy]
impl TypedPrompts {
    async fn session_prompt(&self, call: acp_rpc::proxy::ProxiedRequest<Value>) -> Result<Box<RawValue>, ErrorObject> {
        call.forward().await
    }
}

/// `ProxiedRequest::forward` passes a `$/cancel_request` for a prompt on at once, with the next
/// hop's id, and returns the answer the next hop gives, as the untyped forward does. It used
/// to pass it on only when the grace period ended, having answered `cancelled` itself.
#[tokio::test]
async fn a_typed_forward_passes_a_cancel_request_for_a_prompt_on_at_once() {
    let ((pr, pw), (cr, cw)) = duplex(1 << 20);
    tokio::spawn(acp_rpc::proxy::serve_proxy(TypedPrompts, pr, pw));
    let mut conductor = RawPeer::new(cr, cw);
    let prompt = json!({"sessionId": "s", "prompt": []});
    conductor.send_json(json!({"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": prompt})).await;
    let wrapped = conductor.recv().await;
    assert_eq!(wrapped["method"], "proxy/successor");
    conductor.send_json(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}})).await;
    let cancel = conductor.try_recv_line(Duration::from_millis(500)).await.expect("a $/cancel_request at once");
    let cancel: Value = serde_json::from_str(&cancel).unwrap();
    assert_eq!(cancel, json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": wrapped["id"]}}));
    let answer = json!({"stopReason": "cancelled", "_meta": {"from": "agent"}});
    conductor.send_json(json!({"jsonrpc": "2.0", "id": wrapped["id"], "result": answer})).await;
    assert_eq!(conductor.recv().await, json!({"jsonrpc": "2.0", "id": 1, "result": answer}));
}
