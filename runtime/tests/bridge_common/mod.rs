//! What the v2 bridge's tests share: a v1 handler behind `ProtocolRouter::with_v2_bridge`,
//! driven by a v2 client written as raw JSON lines (`common::RawPeer`).
#![allow(dead_code)]

use acp_rpc::version::ProtocolRouter;
use acp_rpc::{Connection, ErrorObject, Handler, RawValue};
use serde_json::{Value, json};

use super::common::{RawPeer, start};

/// A v2 client (raw lines) talking to the v1 `agent` through the bridge.
pub fn bridged<H: Handler + Clone>(agent: &H) -> RawPeer {
    bridged_on(Connection::new(), agent)
}

/// [`bridged`], the client's connection built from `connection`.
pub fn bridged_on<H: Handler + Clone>(connection: Connection, agent: &H) -> RawPeer {
    let router = ProtocolRouter::new().with_v1(agent.clone()).with_v2_bridge();
    let (client, _peer, _task) = start(connection, router);
    client
}

/// Sends a request; its answer, and what came before it.
pub async fn request(client: &mut RawPeer, id: u64, method: &str, params: Value) -> (Value, Vec<Value>) {
    client.send_json(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
    client.recv_until_id(json!(id)).await
}

/// What the client gets up to and including the first message `last` holds for.
pub async fn recv_until(client: &mut RawPeer, last: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let msg = client.recv().await;
        let done = last(&msg);
        seen.push(msg);
        if done {
            return seen;
        }
    }
}

/// What the client gets up to and including the agent's next permission request.
pub async fn until_permission(client: &mut RawPeer) -> Vec<Value> {
    recv_until(client, |msg| msg["method"] == "session/request_permission").await
}

/// Answers the agent's permission request `asked` with `outcome` (e.g.
/// `{"outcome": "selected", "optionId": "yes"}`).
pub async fn answer_permission(client: &mut RawPeer, asked: &Value, outcome: Value) {
    client.send_json(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"outcome": outcome}})).await;
}

/// A v2 `initialize` (id 0); its answer.
pub async fn initialize_v2(client: &mut RawPeer) -> Value {
    let params = json!({"protocolVersion": 2, "info": {"name": "v2-client", "version": "2.0"}, "capabilities": {}});
    request(client, 0, "initialize", params).await.0
}

/// A handler's result.
pub fn answer(value: Value) -> Result<Box<RawValue>, ErrorObject> {
    Ok(serde_json::value::to_raw_value(&value).unwrap())
}

/// A text content block.
pub fn text(text: &str) -> Value {
    json!({"type": "text", "text": text})
}
