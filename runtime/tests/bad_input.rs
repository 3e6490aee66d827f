//! Every row of the bad-input table in the crate docs: each hostile input is answered exactly as
//! documented (or not at all), and a valid request right after it still gets its answer.

mod common;

use acp_rpc::{Connection, codes};
use common::*;
use serde_json::{Value, json};

/// What one input must cause, checked on everything the connection writes before the next ping
/// is answered.
#[derive(Debug)]
enum Expect {
    /// No output at all.
    Nothing,
    /// Exactly one error answer with this id and code.
    Error(Value, i32),
    /// Exactly this one message.
    Exactly(Value),
}
use Expect::*;

const MAX_LINE: usize = 1024 * 1024;

// One row per case, one line per row where it fits: kept as a table.
#[rustfmt::skip]
fn cases() -> Vec<(&'static str, Vec<u8>, Expect)> {
    let line = |s: &str| {
        let mut v = s.as_bytes().to_vec();
        v.push(b'\n');
        v
    };
    let null = Value::Null;
    let deep_open = "[".repeat(100_000);
    let deep_closed = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_params_open = format!(r#"{{"jsonrpc":"2.0","id":30,"method":"echo","params":{}"#, "{\"a\":".repeat(100_000));
    let nested_ok = format!("{}1{}", "[".repeat(60), "]".repeat(60));
    vec![
        ("invalid JSON", line(r#"{"jsonrpc":"2.0","id":1,"method":"#), Error(null.clone(), codes::PARSE_ERROR)),
        ("a non-JSON log line", line("INFO agent starting up (pid 4242)"), Error(null.clone(), codes::PARSE_ERROR)),
        ("trailing garbage", line(r#"{"jsonrpc":"2.0","id":1,"method":"echo"} trailing"#), Error(null.clone(), codes::PARSE_ERROR)),
        ("two messages on one line", line(r#"{"jsonrpc":"2.0","method":"a"}{"jsonrpc":"2.0","method":"b"}"#), Error(null.clone(), codes::PARSE_ERROR)),
        ("invalid UTF-8", {
            let mut v = br#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[""#.to_vec();
            v.extend_from_slice(&[0xff, 0xfe]);
            v.extend_from_slice(b"\"]}\n");
            v
        }, Error(null.clone(), codes::PARSE_ERROR)),
        ("NUL bytes", b"\0\0\0\n".to_vec(), Error(null.clone(), codes::PARSE_ERROR)),
        ("a byte-order mark", line("\u{feff}{\"jsonrpc\":\"2.0\",\"method\":\"a\"}"), Error(null.clone(), codes::PARSE_ERROR)),
        ("100k unclosed [", line(&deep_open), Error(null.clone(), codes::PARSE_ERROR)),
        ("100k nested arrays, closed", line(&deep_closed), Error(null.clone(), codes::INVALID_REQUEST)),
        ("100k nested objects in params", line(&deep_params_open), Error(null.clone(), codes::PARSE_ERROR)),
        ("a number", line("42"), Error(null.clone(), codes::INVALID_REQUEST)),
        ("a string", line(r#""hello""#), Error(null.clone(), codes::INVALID_REQUEST)),
        ("null", line("null"), Error(null.clone(), codes::INVALID_REQUEST)),
        ("true", line("true"), Error(null.clone(), codes::INVALID_REQUEST)),
        ("an empty object", line("{}"), Error(null.clone(), codes::INVALID_REQUEST)),
        ("a batch", line(r#"[{"jsonrpc":"2.0","id":1,"method":"echo"}]"#), Error(null.clone(), codes::INVALID_REQUEST)),
        ("an empty batch", line("[]"), Error(null.clone(), codes::INVALID_REQUEST)),
        ("missing jsonrpc", line(r#"{"id":1,"method":"echo"}"#), Error(json!(1), codes::INVALID_REQUEST)),
        ("jsonrpc 1.0", line(r#"{"jsonrpc":"1.0","id":2,"method":"echo"}"#), Error(json!(2), codes::INVALID_REQUEST)),
        ("jsonrpc as a number", line(r#"{"jsonrpc":2.0,"id":3,"method":"echo"}"#), Error(json!(3), codes::INVALID_REQUEST)),
        ("jsonrpc missing on a notification", line(r#"{"method":"echo"}"#), Error(null.clone(), codes::INVALID_REQUEST)),
        ("id: object", line(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"echo"}"#), Error(null.clone(), codes::INVALID_REQUEST)),
        ("id: array", line(r#"{"jsonrpc":"2.0","id":[1],"method":"echo"}"#), Error(null.clone(), codes::INVALID_REQUEST)),
        ("id: boolean", line(r#"{"jsonrpc":"2.0","id":true,"method":"echo"}"#), Error(null.clone(), codes::INVALID_REQUEST)),
        // Numbers `i64` does not take are ids all the same (JSON-RPC only discourages fractions),
        // answered as written (checked byte for byte in `ids_that_are_not_integers_come_back_as_written`).
        ("id: fraction", line(r#"{"jsonrpc":"2.0","id":1.5,"method":"echo"}"#), Exactly(json!({"jsonrpc":"2.0","id":1.5,"result":null}))),
        ("id: exponent", line(r#"{"jsonrpc":"2.0","id":1e3,"method":"echo"}"#), Exactly(json!({"jsonrpc":"2.0","id":1000.0,"result":null}))),
        ("id: beyond i64", line(r#"{"jsonrpc":"2.0","id":99999999999999999999,"method":"echo"}"#),
            Exactly(json!({"jsonrpc":"2.0","id":99999999999999999999_u128 as f64,"result":null}))),
        ("id: null (a request)", line(r#"{"jsonrpc":"2.0","id":null,"method":"echo","params":[1]}"#),
            Exactly(json!({"jsonrpc":"2.0","id":null,"result":[1]}))),
        ("id: string", line(r#"{"jsonrpc":"2.0","id":"a\"b","method":"echo","params":{}}"#),
            Exactly(json!({"jsonrpc":"2.0","id":"a\"b","result":{}}))),
        ("id: negative integer", line(r#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"echo"}"#),
            Exactly(json!({"jsonrpc":"2.0","id":i64::MIN,"result":null}))),
        ("id given twice", line(r#"{"jsonrpc":"2.0","id":7,"id":8,"method":"echo"}"#), Error(null.clone(), codes::INVALID_REQUEST)),
        ("method given twice", line(r#"{"jsonrpc":"2.0","id":9,"method":"echo","method":"ping"}"#), Error(json!(9), codes::INVALID_REQUEST)),
        ("missing method", line(r#"{"jsonrpc":"2.0","id":4}"#), Error(json!(4), codes::INVALID_REQUEST)),
        ("method: number", line(r#"{"jsonrpc":"2.0","id":5,"method":1}"#), Error(json!(5), codes::INVALID_REQUEST)),
        ("method: number, no id", line(r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#), Error(null.clone(), codes::INVALID_REQUEST)),
        ("params: string (request)", line(r#"{"jsonrpc":"2.0","id":6,"method":"echo","params":"s"}"#), Error(json!(6), codes::INVALID_PARAMS)),
        ("params: number (notification)", line(r#"{"jsonrpc":"2.0","method":"note","params":5}"#), Nothing),
        ("params: null", line(r#"{"jsonrpc":"2.0","id":10,"method":"echo","params":null}"#),
            Exactly(json!({"jsonrpc":"2.0","id":10,"result":null}))),
        ("escaped member names", line(r#"{"\u006asonrpc":"2.0","\u0069d":11,"method":"echo","params":[true]}"#),
            Exactly(json!({"jsonrpc":"2.0","id":11,"result":[true]}))),
        ("60-deep params are echoed", line(&format!(r#"{{"jsonrpc":"2.0","id":12,"method":"echo","params":{nested_ok}}}"#)),
            Exactly(json!({"jsonrpc":"2.0","id":12,"result":serde_json::from_str::<Value>(&nested_ok).unwrap()}))),
        ("unknown method", line(r#"{"jsonrpc":"2.0","id":13,"method":"no/such/method"}"#), Error(json!(13), codes::METHOD_NOT_FOUND)),
        ("unknown _ notification", line(r#"{"jsonrpc":"2.0","method":"_vendor/thing","params":{}}"#), Nothing),
        ("response to an unknown id", line(r#"{"jsonrpc":"2.0","id":424242,"result":{}}"#), Nothing),
        ("response with a string id", line(r#"{"jsonrpc":"2.0","id":"x","result":{}}"#), Nothing),
        ("error response with null id", line(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#), Nothing),
        ("response without jsonrpc", line(r#"{"id":0,"result":1}"#), Nothing),
        ("response with result and error", line(r#"{"jsonrpc":"2.0","id":0,"result":1,"error":{"code":1,"message":"m"}}"#), Nothing),
        ("response with a malformed error", line(r#"{"jsonrpc":"2.0","id":0,"error":"bad"}"#), Nothing),
        ("$/cancel_request without params", line(r#"{"jsonrpc":"2.0","method":"$/cancel_request"}"#), Nothing),
        ("$/cancel_request with a bad id", line(r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":[1]}}"#), Nothing),
        ("session/cancel without sessionId", line(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#), Nothing),
        ("empty lines", b"\n\n\n".to_vec(), Nothing),
        ("whitespace lines", b"   \n\t\t\n \r\n".to_vec(), Nothing),
        ("CRLF line ending", b"{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"echo\",\"params\":[2]}\r\n".to_vec(),
            Exactly(json!({"jsonrpc":"2.0","id":14,"result":[2]}))),
        ("an over-long line", line(&format!(r#"{{"jsonrpc":"2.0","id":15,"method":"echo","params":["{}"]}}"#, "x".repeat(MAX_LINE * 4))),
            Error(null.clone(), codes::INVALID_REQUEST)),
        ("a panicking handler", line(r#"{"jsonrpc":"2.0","id":16,"method":"panic"}"#), Error(json!(16), codes::INTERNAL_ERROR)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_table_each_input_is_answered_as_documented_and_the_connection_goes_on() {
    let (handler, _rx) = test_handler();
    let (mut raw, _peer, task) = start(Connection::new().max_line_bytes(MAX_LINE), handler);
    let cases = cases();
    assert!(cases.len() >= 25);
    for (name, input, expect) in cases {
        raw.send_bytes(&input).await;
        // Answers may come from a handler task, so wait for one before pinging; the ping then
        // shows there is nothing more.
        let mut out = Vec::new();
        if !matches!(expect, Nothing) {
            out.push(raw.recv().await);
        }
        out.extend(raw.ping().await);
        match &expect {
            Nothing => assert!(out.is_empty(), "{name}: expected no answer, got {out:?}"),
            Error(id, code) => {
                assert_eq!(out.len(), 1, "{name}: expected one answer, got {out:?}");
                let msg = &out[0];
                assert_eq!(msg["jsonrpc"], json!("2.0"), "{name}");
                assert_eq!(&msg["id"], id, "{name}: {msg}");
                assert_eq!(msg["error"]["code"], json!(code), "{name}: {msg}");
                assert!(msg["error"]["message"].is_string(), "{name}");
                assert!(msg.get("result").is_none(), "{name}");
            }
            Exactly(want) => assert_eq!(out, vec![want.clone()], "{name}"),
        }
        // Never an echo of the input (the answers are short, fixed texts).
        for msg in &out {
            assert!(msg.to_string().len() < 400, "{name}: suspiciously long answer {msg}");
        }
    }
    assert!(!task.is_finished(), "the connection survived every input");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_duplicate_id_of_an_in_flight_request_is_rejected_and_the_original_runs_on() {
    let (handler, mut rx) = test_handler();
    let (mut raw, _peer, _task) = start(Connection::new(), handler);
    raw.send(r#"{"jsonrpc":"2.0","id":"dup","method":"wait_cancel_ok"}"#).await;
    assert_eq!(next(&mut rx.started).await, "wait_cancel_ok");
    raw.send(r#"{"jsonrpc":"2.0","id":"dup","method":"echo"}"#).await;
    let out = raw.ping().await;
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0]["id"], json!("dup"));
    assert_eq!(out[0]["error"]["code"], json!(codes::INVALID_REQUEST));
    // The original is still in flight and answers once, when cancelled.
    raw.send(r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"dup"}}"#).await;
    let (answer, _) = raw.recv_until_id(json!("dup")).await;
    assert_eq!(answer["result"], json!({"partial": true}));
    // Once answered, the id may be used again.
    raw.send(r#"{"jsonrpc":"2.0","id":"dup","method":"echo","params":[3]}"#).await;
    let (answer, _) = raw.recv_until_id(json!("dup")).await;
    assert_eq!(answer["result"], json!([3]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_last_line_without_newline_is_handled_at_end_of_input() {
    let (handler, _rx) = test_handler();
    let (mut raw, _peer, task) = start(Connection::new(), handler);
    raw.send_bytes(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).await;
    raw.close_input();
    assert_eq!(raw.recv().await, json!({"jsonrpc":"2.0","id":1,"result":"pong"}));
    tokio::time::timeout(LIMIT, task).await.unwrap().unwrap().unwrap();
}

/// Ids that are numbers but not `i64`s (JSON-RPC discourages fractions but allows them) are
/// answered with the id written exactly as it came, and can be cancelled by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_that_are_not_integers_come_back_as_written() {
    let (handler, mut rx) = test_handler();
    let (mut raw, _peer, _task) = start(Connection::new(), handler);
    for id in ["1.5", "1e3", "-2.50E+2", "99999999999999999999"] {
        raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"echo","params":[1]}}"#)).await;
        assert_eq!(raw.recv_line().await, format!(r#"{{"jsonrpc":"2.0","id":{id},"result":[1]}}"#));
    }
    for id in ["2.50", "2e3"] {
        raw.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"wait_cancel_ok"}}"#)).await;
        while next(&mut rx.started).await != "wait_cancel_ok" {}
        raw.send(&format!(r#"{{"jsonrpc":"2.0","method":"$/cancel_request","params":{{"requestId":{id}}}}}"#)).await;
        assert_eq!(raw.recv_line().await, format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"partial":true}}}}"#));
    }
}
