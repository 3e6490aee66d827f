//! JSON-RPC batches on a connection that follows protocol v2's rules: each hostile or valid
//! batch gets exactly the answer `v2/transports.mdx` and JSON-RPC 2.0 prescribe, and the
//! connection still serves afterwards. (On a v1 connection a batch is -32600: `bad_input.rs`.)

mod common;

use acp_rpc::{Connection, codes};
use common::*;
use serde_json::{Value, json};

fn v2() -> Connection {
    Connection::new().v2_rules()
}

/// The answers the connection wrote before our ping's answer.
async fn answers_to(peer: &mut RawPeer, line: &str) -> Vec<Value> {
    peer.send(line).await;
    peer.ping().await
}

fn sorted_ids(array: &Value) -> Vec<Value> {
    let mut ids: Vec<Value> = array.as_array().expect("an array").iter().map(|a| a["id"].clone()).collect();
    ids.sort_by_key(|v| v.to_string());
    ids
}

#[tokio::test]
async fn a_batch_of_requests_is_answered_with_one_array() {
    let (handler, _rx) = test_handler();
    let (mut peer, _p, _serve) = start(v2(), handler);
    let out = answers_to(
        &mut peer,
        r#"[{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]},{"jsonrpc":"2.0","id":"b","method":"echo","params":{"x":2}},{"jsonrpc":"2.0","id":3,"method":"nope"}]"#,
    )
    .await;
    assert_eq!(out.len(), 1, "one line for the whole batch: {out:?}");
    let array = &out[0];
    assert_eq!(array.as_array().unwrap().len(), 3);
    assert_eq!(sorted_ids(array), sorted_ids(&json!([{"id": 1}, {"id": 3}, {"id": "b"}])));
    for answer in array.as_array().unwrap() {
        match &answer["id"] {
            v if v == &json!(1) => assert_eq!(answer["result"], json!([1])),
            v if v == &json!("b") => assert_eq!(answer["result"], json!({"x": 2})),
            _ => assert_eq!(answer["error"]["code"], codes::METHOD_NOT_FOUND),
        }
    }
}

#[tokio::test]
async fn notifications_in_a_batch_are_handled_in_order_and_never_answered() {
    let (handler, mut rx) = test_handler();
    let (mut peer, _p, _serve) = start(v2(), handler);
    let out = answers_to(
        &mut peer,
        r#"[{"jsonrpc":"2.0","method":"note","params":[1]},{"jsonrpc":"2.0","method":"note","params":[2]},{"jsonrpc":"2.0","method":"_x"}]"#,
    )
    .await;
    assert!(out.is_empty(), "an all-notification batch gets no answer, not even []: {out:?}");
    // The ping was answered after the notifications before it were handled (requests follow
    // notifications), so everything is there.
    let mut seen = Vec::new();
    while let Ok((method, params)) = rx.seen.try_recv() {
        seen.push((method, params));
    }
    let expected = vec![
        ("note".to_owned(), Some("[1]".to_owned())),
        ("note".to_owned(), Some("[2]".to_owned())),
        ("_x".to_owned(), None),
    ];
    assert_eq!(seen, expected, "every notification, in arrival order");
}

#[tokio::test]
async fn a_mixed_batch_answers_only_its_requests() {
    let (handler, _rx) = test_handler();
    let (mut peer, _p, _serve) = start(v2(), handler);
    let out = answers_to(
        &mut peer,
        r#"[{"jsonrpc":"2.0","method":"note"},{"jsonrpc":"2.0","id":7,"method":"echo","params":["x"]},{"jsonrpc":"2.0","method":"note"}]"#,
    )
    .await;
    assert_eq!(out, vec![json!([{"jsonrpc": "2.0", "id": 7, "result": ["x"]}])]);
}

#[tokio::test]
async fn invalid_entries_get_their_own_errors_and_the_rest_is_served() {
    let (handler, _rx) = test_handler();
    let (mut peer, _p, _serve) = start(v2(), handler);
    let out =
        answers_to(&mut peer, r#"[1,{"jsonrpc":"2.0","id":2,"method":"echo","params":[2]},"x",[],{"foo":"bar"}]"#)
            .await;
    assert_eq!(out.len(), 1, "{out:?}");
    let answers = out[0].as_array().unwrap();
    assert_eq!(answers.len(), 5, "{answers:?}");
    let errors: Vec<&Value> = answers.iter().filter(|a| a.get("error").is_some()).collect();
    assert_eq!(errors.len(), 4);
    for e in errors {
        assert_eq!(e["id"], Value::Null);
        assert_eq!(e["error"]["code"], codes::INVALID_REQUEST);
    }
    assert!(answers.iter().any(|a| a["id"] == 2 && a["result"] == json!([2])));
}

#[tokio::test]
async fn empty_and_malformed_batches_get_a_single_error() {
    let (handler, _rx) = test_handler();
    let (mut peer, _p, _serve) = start(v2(), handler);
    for (line, code) in [
        ("[]", codes::INVALID_REQUEST),
        ("  [ ]  ", codes::INVALID_REQUEST),
        (r#"[{"jsonrpc":"2.0","id":1,"method":"echo"},"#, codes::PARSE_ERROR),
        (r#"[{"jsonrpc":"2.0","id":1,"method":"echo"}] trailing"#, codes::PARSE_ERROR),
    ] {
        let out = answers_to(&mut peer, line).await;
        assert_eq!(out.len(), 1, "{line}: {out:?}");
        assert!(out[0].is_object(), "a single error object, not an array: {out:?}");
        assert_eq!(out[0]["id"], Value::Null);
        assert_eq!(out[0]["error"]["code"], code, "{line}");
    }
    // One entry, valid JSON but nested 100,000 deep: that entry is invalid, not the batch.
    let deep = format!("[{}{}]", "[".repeat(100_000), "]".repeat(100_000));
    let out = answers_to(&mut peer, &deep).await;
    assert_eq!(out.len(), 1);
    assert_eq!(out[0][0]["id"], Value::Null);
    assert_eq!(out[0][0]["error"]["code"], codes::INVALID_REQUEST);
}

#[tokio::test]
async fn duplicate_ids_in_a_batch_are_refused_for_the_duplicate_only() {
    let (handler, _rx) = test_handler();
    let (mut peer, _p, _serve) = start(v2(), handler);
    // The batch is answered once `work` is done, whenever that is: read its line itself.
    peer.send(r#"[{"jsonrpc":"2.0","id":5,"method":"work","params":{"spins":10}},{"jsonrpc":"2.0","id":5,"method":"echo","params":[1]}]"#).await;
    let out = peer.recv().await;
    let answers = out.as_array().unwrap();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers.iter().filter(|a| a["error"]["code"] == codes::INVALID_REQUEST).count(), 1);
    assert_eq!(answers.iter().filter(|a| a.get("result").is_some()).count(), 1);
}

#[tokio::test]
async fn an_oversized_batch_is_refused_like_any_oversized_line() {
    let (handler, _rx) = test_handler();
    let (mut peer, _p, _serve) = start(v2().max_line_bytes(1024), handler);
    let entry = r#"{"jsonrpc":"2.0","method":"note"}"#;
    let big = format!("[{}]", vec![entry; 100].join(","));
    let out = answers_to(&mut peer, &big).await;
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0]["id"], Value::Null);
    assert_eq!(out[0]["error"]["code"], codes::INVALID_REQUEST);
}

#[tokio::test]
async fn responses_in_a_batch_reach_their_calls() {
    let (handler, _rx) = test_handler();
    let (mut peer, conn, _serve) = start(v2(), handler);
    let call = tokio::spawn(async move { conn.request_raw("ask", None).await.map(|r| r.get().to_owned()) });
    let request: Value = peer.recv().await;
    let id = request["id"].clone();
    peer.send_json(json!([{"jsonrpc": "2.0", "id": id, "result": {"ok": true}}])).await;
    let result = tokio::time::timeout(LIMIT, call).await.unwrap().unwrap().unwrap();
    assert_eq!(result, r#"{"ok":true}"#);
}

#[tokio::test]
async fn a_v1_connection_still_refuses_batches() {
    let (handler, _rx) = test_handler();
    let (mut peer, _p, _serve) = start(Connection::new(), handler);
    let out = answers_to(&mut peer, r#"[{"jsonrpc":"2.0","id":1,"method":"echo"}]"#).await;
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["error"]["code"], codes::INVALID_REQUEST);
}
