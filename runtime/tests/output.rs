//! The fast path of the concurrency contract (runtime/src/connection.rs): requests and
//! responses written by their senders when the writer is idle. Checked at the raw JSON level
//! over small in-memory pipes, so that writes only partly go through and the queue fills up:
//! the order stays FIFO and no line is ever torn, also when a sender is dropped mid-line.

mod common;

use std::collections::{HashMap, HashSet};

use acp_rpc::framing::{Frame, LineReader};
use acp_rpc::transport::{PipeReader, duplex};
use acp_rpc::{Connection, Peer, RawValue, methods};
use common::*;
use serde_json::{Value, json};

/// The next line the connection wrote, which must be whole JSON.
async fn next_json(lines: &mut LineReader<PipeReader>) -> Value {
    let frame = tokio::time::timeout(LIMIT, lines.next_frame()).await.expect("output in time").expect("read");
    match frame {
        Some(Frame::Line(l)) => serde_json::from_slice(l)
            .unwrap_or_else(|e| panic!("torn or invalid line ({e}): {}", String::from_utf8_lossy(l))),
        other => panic!("expected a line, got {other:?}"),
    }
}

/// Starts a call, lets it send (or queue) its request, and drops it before any answer: the
/// caller goes away mid-call, as a cancelled `select!` branch does.
async fn call_and_drop(peer: &Peer, method: &str, params: &Value) {
    let params = RawValue::from_string(params.to_string()).expect("JSON");
    let call = peer.request_raw(method, Some(&params));
    tokio::select! {
        biased;
        r = call => panic!("nobody answers, yet: {r:?}"),
        () = std::future::ready(()) => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_and_queued_sends_stay_in_order_and_whole() {
    const SENDERS: u64 = 4;
    const EACH: u64 = 150;
    // A 256-byte pipe and a 4-line queue: direct writes often go through only in part, and
    // senders often find the queue full.
    let ((conn_r, conn_w), (raw_r, _raw_w)) = duplex(256);
    let (peer, serve) = Connection::new().write_queue_capacity(4).serve(conn_r, conn_w, ());
    let _serve = tokio::spawn(serve);
    let mut lines = LineReader::new(raw_r, 1 << 20);

    let reader = tokio::spawn(async move {
        let mut out = Vec::new();
        loop {
            let msg = next_json(&mut lines).await;
            if msg["method"] == "test/end" {
                return out;
            }
            out.push(msg);
        }
    });
    let mut senders = Vec::new();
    for t in 0..SENDERS {
        let peer = peer.clone();
        senders.push(tokio::spawn(async move {
            for i in 0..EACH {
                // Lines of 60 to 500 bytes: some fit the pipe, some never do at once.
                let pad = "x".repeat(((i * 37 + t * 11) % 440) as usize);
                // Notifications always queue; requests are written directly when the writer is
                // idle, then dropped before their answer (which sends `$/cancel_request`).
                peer.notify("test/n", &json!({"t":t,"i":i,"pad":pad})).await.expect("notify");
                call_and_drop(&peer, "test/r", &json!({"t":t,"i":i,"pad":pad})).await;
            }
        }));
    }
    for s in senders {
        s.await.expect("sender");
    }
    peer.notify("test/end", &json!({})).await.expect("notify");
    let out = reader.await.expect("reader");

    // Per sender: notification i, then request i (if it was sent), in order of i.
    let mut last: HashMap<u64, (u64, u8)> = HashMap::new();
    let mut notified = 0;
    let mut requested = HashSet::new();
    for msg in &out {
        let method = msg["method"].as_str().expect("a request or notification");
        if method == methods::CANCEL_REQUEST {
            let id = msg["params"]["requestId"].as_i64().expect("requestId");
            assert!(requested.contains(&id), "cancel of request {id} before the request: {msg}");
            continue;
        }
        let (t, i) = (msg["params"]["t"].as_u64().unwrap(), msg["params"]["i"].as_u64().unwrap());
        let pos = match method {
            "test/n" => {
                notified += 1;
                (i, 0)
            }
            "test/r" => {
                assert!(requested.insert(msg["id"].as_i64().expect("id")), "request sent twice: {msg}");
                (i, 1)
            }
            other => panic!("unexpected {other}"),
        };
        if let Some(prev) = last.insert(t, pos) {
            assert!(prev < pos, "sender {t}: {pos:?} after {prev:?}");
        }
    }
    assert_eq!(notified, SENDERS * EACH, "every notification arrives");
    assert!(!requested.is_empty());
}

#[tokio::test]
async fn a_caller_dropped_mid_line_leaves_the_whole_line_and_its_order() {
    let ((conn_r, conn_w), (raw_r, _raw_w)) = duplex(64);
    let (peer, serve) = Connection::new().serve(conn_r, conn_w, ());
    let _serve = tokio::spawn(serve);
    let mut lines = LineReader::new(raw_r, 1 << 20);
    // Running, with an idle writer.
    peer.notify("test/warm", &json!({})).await.expect("notify");
    assert_eq!(next_json(&mut lines).await["method"], "test/warm");

    // 64 bytes of this go out at once, the rest waits for the writer; its caller is gone.
    let big = "y".repeat(10_000);
    call_and_drop(&peer, "test/big", &json!({"pad": big})).await;
    peer.notify("test/after", &json!({})).await.expect("notify");

    let request = next_json(&mut lines).await;
    assert_eq!(request["method"], "test/big");
    assert_eq!(request["params"]["pad"].as_str().map(str::len), Some(10_000));
    let cancel = next_json(&mut lines).await;
    assert_eq!(cancel["method"], methods::CANCEL_REQUEST);
    assert_eq!(cancel["params"]["requestId"], request["id"]);
    assert_eq!(next_json(&mut lines).await["method"], "test/after");
}

/// Answers every request with a pretty-printed result (`RawValue` keeps its whitespace).
struct Pretty;

const PRETTY: &str = "{\r\n  \"text\": \"two\\nlines\",\n  \"list\": [\n    1,\r    2\n  ]\n}";

impl acp_rpc::Handler for Pretty {
    async fn handle_request(&self, _req: acp_rpc::IncomingRequest) -> Result<Box<RawValue>, acp_rpc::ErrorObject> {
        Ok(raw(PRETTY))
    }
}

#[tokio::test]
async fn a_raw_value_with_newlines_is_written_on_one_line() {
    let tap = SharedBuf::default();
    let (mut peer_end, peer, _task) = start(Connection::new().wire_tap(tap.clone()), Pretty);
    let expected = json!({"text": "two\nlines", "list": [1, 2]});

    // A handler's result (for a request with a lone `\r` between its tokens).
    peer_end.send("{\"jsonrpc\":\"2.0\",\r\"id\":1,\"method\":\"any\"}").await;
    let answer = peer_end.recv().await;
    assert_eq!(answer, json!({"jsonrpc":"2.0","id":1,"result":expected}));

    // Params of a call and of a notification.
    let params = raw(PRETTY);
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("test/call", Some(&raw(PRETTY))).await })
    };
    let request = peer_end.recv().await;
    assert_eq!(request["params"], expected, "{request}");
    peer.notify_raw("test/note", Some(&params)).await.expect("notify");
    let note = peer_end.recv().await;
    assert_eq!(note, json!({"jsonrpc":"2.0","method":"test/note","params":expected}));

    // The caller gets its answer: the peer could read the request.
    peer_end.send_json(json!({"jsonrpc":"2.0","id":request["id"],"result":"done"})).await;
    let result = tokio::time::timeout(LIMIT, call).await.expect("answered").unwrap().expect("call");
    assert_eq!(result.get(), r#""done""#);

    // The wire tap got the same single lines: every entry parses on its own.
    peer_end.close_input();
    tokio::time::timeout(LIMIT, _task).await.unwrap().unwrap().unwrap();
    let bytes = tap.0.lock().unwrap().clone();
    assert!(!bytes.contains(&b'\r'), "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 5, "{}", String::from_utf8_lossy(&bytes));
    let dirs: Vec<Value> = tap.lines().into_iter().map(|entry| entry["dir"].clone()).collect();
    assert_eq!(dirs, ["in", "out", "out", "out", "in"].map(|d| json!(d)), "{:?}", tap.lines());
    for entry in tap.lines().iter().filter(|e| e["dir"] == "out") {
        assert_eq!(entry["msg"].get("result").or(entry["msg"].get("params")), Some(&expected), "{entry}");
    }
}

/// Answers every request at once with a 2 KB result.
struct Bulky;

impl acp_rpc::Handler for Bulky {
    async fn handle_request(&self, _req: acp_rpc::IncomingRequest) -> Result<Box<RawValue>, acp_rpc::ErrorObject> {
        Ok(raw(&format!(r#"{{"pad":"{}"}}"#, "x".repeat(2048))))
    }

    async fn handle_notification(&self, _notification: acp_rpc::IncomingNotification) {}
}

/// After the end of input, a peer that still reads, however slowly, gets the answer to every
/// request it sent, each line whole: the grace period bounds a peer that stops reading, not
/// the time a slow one needs.
#[tokio::test]
async fn after_the_end_of_input_a_slow_reader_still_gets_every_answer_whole() {
    const N: usize = 300;
    let grace = std::time::Duration::from_millis(20);
    let ((conn_r, conn_w), (raw_r, mut raw_w)) = duplex(4096);
    let (_peer, serve) = Connection::new().cancel_grace(grace).serve(conn_r, conn_w, Bulky);
    let serve = tokio::spawn(serve);
    let mut requests = String::new();
    for id in 0..N {
        requests.push_str(&format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"_x/bulk\"}}\n"));
    }
    tokio::io::AsyncWriteExt::write_all(&mut raw_w, requests.as_bytes()).await.unwrap();
    drop(raw_w);

    // About 2 ms per answer: 600 KB over more than half a second, thirty grace periods.
    let mut lines = LineReader::new(raw_r, 1 << 20);
    let mut ids = HashSet::new();
    while let Some(frame) = lines.next_frame().await.unwrap() {
        let Frame::Line(line) = frame else { panic!("an oversized line") };
        let answer: Value = serde_json::from_slice(line).unwrap_or_else(|e| panic!("a torn line ({e})"));
        assert_eq!(answer["result"]["pad"].as_str().map(str::len), Some(2048), "{answer}");
        assert!(ids.insert(answer["id"].as_u64().unwrap()), "one answer per request: {answer}");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert_eq!(ids.len(), N, "every request answered");
    serve.await.unwrap().unwrap();
}
