//! Load: 10,000 concurrent requests with seeded random cancellations (exactly one answer each),
//! and backpressure against a slow reader (bounded memory).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use acp_rpc::framing::{Frame, LineReader};
use acp_rpc::transport::duplex;
use acp_rpc::{Connection, Error, codes};
use common::*;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

const N: u64 = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_requests_with_random_cancellations_get_exactly_one_answer_each() {
    let (handler, _rx) = test_handler();
    // All N may be in flight at once: the reader outruns the handlers.
    let (raw, _peer, task) = start(Connection::new().max_queued_requests(N as usize), handler);
    let RawPeerParts { mut lines, mut writer } = split(raw);

    // Requests interleaved with `$/cancel_request` for a seeded 30%, each sent a random
    // distance after its request (sometimes before the handler starts, sometimes during).
    let mut rng = Rng::new(0x5eed_ac00);
    let mut cancel_at: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut cancelled = vec![false; N as usize];
    for id in 0..N {
        if rng.below(10) < 3 {
            cancelled[id as usize] = true;
            cancel_at.entry(id + rng.below(50)).or_default().push(id);
        }
    }
    let spins: Vec<u64> = (0..N).map(|_| rng.below(20)).collect();
    let send = tokio::spawn(async move {
        let mut buf = Vec::new();
        for id in 0..N {
            buf.extend_from_slice(
                json!({"jsonrpc":"2.0","id":id,"method":"work","params":{"spins":spins[id as usize],"id":id}})
                    .to_string()
                    .as_bytes(),
            );
            buf.push(b'\n');
            for c in cancel_at.remove(&id).unwrap_or_default() {
                buf.extend_from_slice(
                    json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":c}})
                        .to_string()
                        .as_bytes(),
                );
                buf.push(b'\n');
            }
            if buf.len() > 16 * 1024 {
                writer.write_all(&buf).await.unwrap();
                buf.clear();
            }
        }
        for (_, ids) in cancel_at {
            for c in ids {
                buf.extend_from_slice(
                    json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":c}})
                        .to_string()
                        .as_bytes(),
                );
                buf.push(b'\n');
            }
        }
        writer.write_all(&buf).await.unwrap();
        writer
    });

    let mut answers: HashMap<u64, Value> = HashMap::new();
    while answers.len() < N as usize {
        let msg = read_json(&mut lines).await;
        let id = msg["id"].as_u64().unwrap_or_else(|| panic!("unexpected message {msg}"));
        assert!(answers.insert(id, msg).is_none(), "request {id} answered twice");
    }
    let mut writer = send.await.unwrap();

    // Nothing else comes: a ping is the very next message.
    writer.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":\"ping\",\"method\":\"ping\"}\n").await.unwrap();
    assert_eq!(read_json(&mut lines).await, json!({"jsonrpc":"2.0","id":"ping","result":"pong"}));

    let mut n_cancelled = 0;
    for id in 0..N {
        let msg = &answers[&id];
        match msg.get("result") {
            Some(result) => assert_eq!(result["id"], json!(id)),
            None => {
                assert!(cancelled[id as usize], "request {id} failed without being cancelled: {msg}");
                assert_eq!(msg["error"]["code"], json!(codes::REQUEST_CANCELLED), "{msg}");
                n_cancelled += 1;
            }
        }
    }
    // Some cancellations overtook their handlers (the exact number depends on scheduling).
    assert!(n_cancelled > 0);
    drop(writer);
    tokio::time::timeout(LIMIT, task).await.unwrap().unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_calls_between_two_connections_with_random_drops() {
    let tap = SharedBuf::default();
    let (server_handler, _rx) = test_handler();
    let (client, client_task, _server, server_task) = pair(
        (Connection::new(), ()),
        (Connection::new().max_queued_requests(N as usize).wire_tap(tap.clone()), server_handler),
    );

    let mut rng = Rng::new(42);
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..N {
        let client = client.clone();
        let spins = rng.below(20);
        // A seeded third of the calls give up early: their futures are dropped mid-flight.
        let give_up = (rng.below(3) == 0).then(|| Duration::from_micros(rng.below(2000)));
        calls.spawn(async move {
            let params = json!({"spins": spins, "i": i});
            let call = client.request::<_, Value>("work", &params);
            match give_up {
                None => Some(call.await),
                Some(after) => tokio::time::timeout(after, call).await.ok(),
            }
            .map(|r| (i, r))
        });
    }
    let mut completed = 0;
    while let Some(joined) = tokio::time::timeout(LIMIT * 3, calls.join_next()).await.unwrap() {
        if let Some((i, result)) = joined.unwrap() {
            let v = result.unwrap_or_else(|e| panic!("call {i} failed: {e}"));
            assert_eq!(v["i"], json!(i));
            completed += 1;
        }
    }
    assert!(completed >= N as usize / 2);

    // Calls dropped while still waiting for the write queue were never sent; every request the
    // server did receive is answered exactly once. Wait (bounded) until the server has answered
    // all it received, then end the connection.
    let t0 = std::time::Instant::now();
    let (requests, responses) = loop {
        let (requests, responses) = server_wire(&tap);
        if responses.len() >= requests.len() {
            break (requests, responses);
        }
        assert!(t0.elapsed() < LIMIT, "server still has unanswered requests");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(requests.len() >= completed && requests.len() <= N as usize);
    for id in &requests {
        assert_eq!(responses.get(id), Some(&1), "request {id}");
    }
    assert_eq!(responses.len(), requests.len());

    client.close();
    tokio::time::timeout(LIMIT, client_task).await.unwrap().unwrap().unwrap();
    tokio::time::timeout(LIMIT, server_task).await.unwrap().unwrap().unwrap();
    // Nothing more was written after the end.
    assert_eq!(server_wire(&tap), (requests, responses));
}

/// The server's wire tap: ids of `work` requests received, and answers sent per id.
fn server_wire(tap: &SharedBuf) -> (std::collections::BTreeSet<i64>, HashMap<i64, usize>) {
    let mut requests = std::collections::BTreeSet::new();
    let mut responses: HashMap<i64, usize> = HashMap::new();
    for entry in tap.lines() {
        let msg = &entry["msg"];
        match (entry["dir"].as_str(), msg.get("method")) {
            (Some("in"), Some(m)) if m == "work" => {
                assert!(requests.insert(msg["id"].as_i64().unwrap()), "duplicate request id");
            }
            (Some("out"), None) => *responses.entry(msg["id"].as_i64().unwrap()).or_default() += 1,
            _ => {}
        }
    }
    (requests, responses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_a_slow_reader_keeps_the_outgoing_backlog_bounded() {
    let ((conn_r, conn_w), (other_r, _other_w)) = duplex(8 * 1024);
    let queue = 16;
    let (peer, serve) = Connection::new().write_queue_capacity(queue).serve(conn_r, conn_w, ());
    let _serve = tokio::spawn(serve);

    let total = 20_000usize;
    let sent = Arc::new(AtomicUsize::new(0));
    let received = Arc::new(AtomicUsize::new(0));
    let max_backlog = Arc::new(AtomicUsize::new(0));
    let producer = {
        let (sent, received, max_backlog) = (sent.clone(), received.clone(), max_backlog.clone());
        tokio::spawn(async move {
            let pad = "q".repeat(512);
            for i in 0..total {
                peer.notify("_bulk", &json!({"i": i, "pad": pad})).await.unwrap();
                let s = sent.fetch_add(1, Ordering::SeqCst) + 1;
                max_backlog.fetch_max(s - received.load(Ordering::SeqCst), Ordering::SeqCst);
            }
        })
    };
    // A reader that takes its time.
    let mut lines = LineReader::new(other_r, 1 << 20);
    for i in 0..total {
        let Some(Frame::Line(line)) = tokio::time::timeout(LIMIT, lines.next_frame()).await.unwrap().unwrap() else {
            panic!("end of output")
        };
        let v: Value = serde_json::from_slice(line).unwrap();
        assert_eq!(v["params"]["i"], json!(i));
        received.fetch_add(1, Ordering::SeqCst);
        if i % 100 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    producer.await.unwrap();
    // Queue + one writer batch + the writer's 64 KiB buffer (~120 lines of ~550 bytes) + the pipe
    // (~15 lines) + a line in transit: the backlog never grows with the number of messages.
    let max = max_backlog.load(Ordering::SeqCst);
    assert!(max <= queue + 64 + 120 + 15 + 4, "backlog reached {max}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_connection_fails_sends_instead_of_blocking_them() {
    // Senders blocked on a full queue are released with an error when the connection ends.
    let ((conn_r, conn_w), (_other_r, other_w)) = duplex(1024);
    let (peer, serve) = Connection::new().write_queue_capacity(1).serve(conn_r, conn_w, ());
    let serve = tokio::spawn(serve);
    let blocked: Vec<_> = (0..20)
        .map(|i| {
            let peer = peer.clone();
            tokio::spawn(async move { peer.notify("_x", &json!({"pad": "z".repeat(1000), "i": i})).await })
        })
        .collect();
    drop(other_w);
    for b in blocked {
        let r = tokio::time::timeout(LIMIT, b).await.unwrap().unwrap();
        assert!(matches!(r, Ok(()) | Err(Error::ConnectionClosed)), "{r:?}");
    }
    tokio::time::timeout(LIMIT, serve).await.unwrap().unwrap().unwrap();
}

struct RawPeerParts {
    lines: LineReader<acp_rpc::transport::PipeReader>,
    writer: acp_rpc::transport::PipeWriter,
}

fn split(raw: RawPeer) -> RawPeerParts {
    let (lines, writer) = raw.into_parts();
    RawPeerParts { lines, writer }
}

async fn read_json(lines: &mut LineReader<acp_rpc::transport::PipeReader>) -> Value {
    match tokio::time::timeout(LIMIT, lines.next_frame()).await.unwrap().unwrap() {
        Some(Frame::Line(l)) => serde_json::from_slice(l).unwrap(),
        other => panic!("{other:?}"),
    }
}
