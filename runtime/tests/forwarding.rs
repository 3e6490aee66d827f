//! `Connection::forwarding` and `Handler::forward`: a relay between two raw peers keeps the
//! order of what it forwards, passes params and answers on byte for byte, passes cancellation
//! on and answers every forwarded request when the far side goes away.

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use acp_rpc::transport::duplex;
use acp_rpc::{Connection, ErrorObject, Forward, Handler, IncomingRequest, Peer, RawValue, codes};
use common::*;
use serde_json::{Value, json};

/// Forwards everything but `_relay/own` to the other connection, under the same method.
struct Relay {
    to: Arc<OnceLock<Peer>>,
}

impl Handler for Relay {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        match &*req.method {
            "_relay/own" => Ok(raw(r#"{"own":true}"#)),
            other => Err(ErrorObject::method_not_found(other)),
        }
    }

    fn forward<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>> {
        if method == "_relay/own" {
            return None;
        }
        let to = self.to.get()?.clone();
        Some(Forward { to, method: method.into(), params: params.map(std::borrow::Cow::Borrowed) })
    }
}

/// editor (raw) <-> relay <-> agent (raw).
struct Chain {
    editor: RawPeer,
    agent: RawPeer,
}

fn chain(conn: impl Fn() -> Connection) -> Chain {
    let up = Arc::new(OnceLock::new());
    let down = Arc::new(OnceLock::new());
    let ((er, ew), (editor_r, editor_w)) = duplex(1 << 20);
    let ((ar, aw), (agent_r, agent_w)) = duplex(1 << 20);
    let (up_peer, up_serve) = conn().forwarding().serve(er, ew, Relay { to: down.clone() });
    let (down_peer, down_serve) = conn().forwarding().serve(ar, aw, Relay { to: up.clone() });
    up.set(up_peer).unwrap();
    down.set(down_peer).unwrap();
    tokio::spawn(up_serve);
    tokio::spawn(down_serve);
    Chain { editor: RawPeer::new(editor_r, editor_w), agent: RawPeer::new(agent_r, agent_w) }
}

#[tokio::test]
async fn requests_and_notifications_keep_their_order_and_bytes() {
    let Chain { mut editor, mut agent } = chain(Connection::new);
    // A request immediately followed by a notification about it: the notification must not
    // overtake the request (a `session/cancel` right after `session/prompt`).
    let params = r#"{"sessionId":"s1",  "prompt":[{"type":"text","text":"hi","x-unknown":{"b":1,"a":[1.50,2e3]}}],"_meta":{"z":1,"a":2}}"#;
    editor.send(&format!(r#"{{"jsonrpc":"2.0","id":"p-1","method":"session/prompt","params":{params}}}"#)).await;
    editor.send(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}"#).await;
    for n in 0..20 {
        editor.send(&format!(r#"{{"jsonrpc":"2.0","method":"_n","params":{{"n":{n}}}}}"#)).await;
        editor.send(&format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"_r","params":{{"n":{n}}}}}"#)).await;
    }

    let first = agent.recv_line().await;
    assert!(
        first.contains(&format!(r#""method":"session/prompt","params":{params}"#)),
        "params not byte for byte: {first}"
    );
    let first: Value = serde_json::from_str(&first).unwrap();
    let second = agent.recv().await;
    assert_eq!(second["method"], "session/cancel");
    let mut seen = Vec::new();
    for _ in 0..40 {
        let msg = agent.recv().await;
        seen.push((msg["method"].as_str().unwrap().to_owned(), msg["params"]["n"].as_i64().unwrap()));
    }
    let expected: Vec<_> = (0..20).flat_map(|n| [("_n".to_owned(), n), ("_r".to_owned(), n)]).collect();
    assert_eq!(seen, expected, "forwarded out of order");

    // The agent's answer comes back verbatim, under the editor's id.
    let answer = r#"{"stopReason":"cancelled","_meta":{"usage":{"b":2,"a":1}}}"#;
    agent.send(&format!(r#"{{"jsonrpc":"2.0","id":{},"result":{answer}}}"#, first["id"])).await;
    let line = editor.recv_line().await;
    assert_eq!(line, format!(r#"{{"jsonrpc":"2.0","id":"p-1","result":{answer}}}"#));
}

#[tokio::test]
async fn errors_come_back_verbatim_and_own_requests_are_handled() {
    let Chain { mut editor, mut agent } = chain(Connection::new);
    editor.send_json(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/"}})).await;
    let forwarded = agent.recv().await;
    agent
        .send_json(json!({"jsonrpc":"2.0","id":forwarded["id"],"error":{"code":-32000,"message":"Authentication required","data":{"methods":["a"]}}}))
        .await;
    let answer = editor.recv().await;
    assert_eq!(
        answer,
        json!({"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Authentication required","data":{"methods":["a"]}}})
    );

    editor.send_json(json!({"jsonrpc":"2.0","id":2,"method":"_relay/own"})).await;
    assert_eq!(editor.recv().await, json!({"jsonrpc":"2.0","id":2,"result":{"own":true}}));
    assert!(agent.try_recv_line(Duration::from_millis(50)).await.is_none(), "a handled request was forwarded too");
}

#[tokio::test]
async fn agent_to_editor_direction_is_forwarded_too() {
    let Chain { mut editor, mut agent } = chain(Connection::new);
    agent.send(r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"plan","entries":[]}}}"#).await;
    agent.send(r#"{"jsonrpc":"2.0","id":9,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"t"},"options":[]}}"#).await;
    let update = editor.recv().await;
    assert_eq!(update["method"], "session/update");
    let permission = editor.recv().await;
    assert_eq!(permission["method"], "session/request_permission");
    editor
        .send_json(
            json!({"jsonrpc":"2.0","id":permission["id"],"result":{"outcome":{"outcome":"selected","optionId":"o"}}}),
        )
        .await;
    assert_eq!(
        agent.recv().await,
        json!({"jsonrpc":"2.0","id":9,"result":{"outcome":{"outcome":"selected","optionId":"o"}}})
    );
}

#[tokio::test]
async fn session_cancel_is_forwarded_and_the_agents_own_answer_wins_within_the_grace() {
    let Chain { mut editor, mut agent } = chain(|| Connection::new().cancel_grace(Duration::from_secs(5)));
    editor
        .send_json(json!({"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[]}}))
        .await;
    let prompt = agent.recv().await;
    editor.send_json(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}})).await;
    // Passed on once, as the notification it is: no `$/cancel_request` for the prompt.
    assert_eq!(agent.recv().await["method"], "session/cancel");
    assert!(agent.try_recv_line(Duration::from_millis(50)).await.is_none());
    agent
        .send_json(json!({"jsonrpc":"2.0","id":prompt["id"],"result":{"stopReason":"cancelled","_meta":{"k":1}}}))
        .await;
    assert_eq!(
        editor.recv().await,
        json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"cancelled","_meta":{"k":1}}})
    );
}

#[tokio::test]
async fn a_cancelled_prompt_is_answered_cancelled_when_the_far_side_is_stuck() {
    // The link answers as an agent must, whatever happens further on.
    let Chain { mut editor, mut agent } = chain(|| Connection::new().cancel_grace(Duration::from_millis(20)));
    editor
        .send_json(json!({"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[]}}))
        .await;
    let _prompt = agent.recv().await;
    editor.send_json(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}})).await;
    assert_eq!(editor.recv().await, json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"cancelled"}}));
}

#[tokio::test]
async fn a_forwarded_permission_request_is_answered_cancelled_at_once_on_session_cancel() {
    let Chain { mut editor, mut agent } = chain(|| Connection::new().cancel_grace(Duration::from_secs(5)));
    agent.send(r#"{"jsonrpc":"2.0","id":9,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"t"},"options":[]}}"#).await;
    let permission = editor.recv().await;
    // The agent cancels its own turn's permission request; the editor is told.
    agent.send(r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":9}}"#).await;
    assert_eq!(agent.recv().await, json!({"jsonrpc":"2.0","id":9,"result":{"outcome":{"outcome":"cancelled"}}}));
    assert_eq!(
        editor.recv().await,
        json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":permission["id"]}})
    );
}

#[tokio::test]
async fn cancel_request_is_passed_on_and_the_partial_answer_comes_back() {
    let Chain { mut editor, mut agent } = chain(|| Connection::new().cancel_grace(Duration::from_secs(5)));
    editor.send_json(json!({"jsonrpc":"2.0","id":"x","method":"_long","params":{}})).await;
    let long = agent.recv().await;
    editor.send_json(json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"x"}})).await;
    let cancel = agent.recv().await;
    assert_eq!(cancel, json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":long["id"]}}));
    agent.send_json(json!({"jsonrpc":"2.0","id":long["id"],"result":{"partial":true}})).await;
    assert_eq!(editor.recv().await, json!({"jsonrpc":"2.0","id":"x","result":{"partial":true}}));
}

#[tokio::test]
async fn a_prompt_cancelled_by_cancel_request_passes_a_cancel_request_on() {
    // The runtime consumes a `$/cancel_request`, so unlike a `session/cancel` it is not
    // forwarded by itself: the link sends the next hop one of its own, at once, and the
    // agent's answer comes back well within the (long) grace period.
    let Chain { mut editor, mut agent } = chain(|| Connection::new().cancel_grace(Duration::from_secs(30)));
    editor
        .send_json(json!({"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[]}}))
        .await;
    let prompt = agent.recv().await;
    editor.send_json(json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}})).await;
    assert_eq!(
        agent.recv().await,
        json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":prompt["id"]}})
    );
    agent.send_json(json!({"jsonrpc":"2.0","id":prompt["id"],"result":{"stopReason":"cancelled"}})).await;
    assert_eq!(editor.recv().await, json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"cancelled"}}));
}

#[tokio::test]
async fn a_silent_far_side_after_cancel_gets_minus_32800_after_the_grace() {
    let Chain { mut editor, mut agent } = chain(|| Connection::new().cancel_grace(Duration::from_millis(50)));
    editor.send_json(json!({"jsonrpc":"2.0","id":1,"method":"_long"})).await;
    let _long = agent.recv().await;
    editor.send_json(json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}})).await;
    let answer = editor.recv().await;
    assert_eq!(answer["error"]["code"], json!(codes::REQUEST_CANCELLED));
}

#[tokio::test]
async fn far_side_closing_answers_every_forwarded_request() {
    let Chain { mut editor, mut agent } = chain(Connection::new);
    for id in 1..=3 {
        editor.send_json(json!({"jsonrpc":"2.0","id":id,"method":"_long"})).await;
    }
    for _ in 1..=3 {
        agent.recv().await;
    }
    drop(agent);
    let mut ids = Vec::new();
    for _ in 1..=3 {
        let answer = editor.recv().await;
        assert_eq!(answer["error"]["code"], json!(codes::INTERNAL_ERROR), "{answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains("connection closed"), "{answer}");
        ids.push(answer["id"].as_i64().unwrap());
    }
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3]);
}
