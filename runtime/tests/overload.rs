//! A peer that pipelines far more requests than the task bounds (1024 running + 4096 waiting):
//! the excess waits in the backlog and is answered in full, cancellations and responses sent
//! behind the flood still take effect, end of input still ends the connection, the backlog
//! stays within its byte bound (read from `Peer::request_load`), and beyond it a request is
//! refused with the documented overload error, which our own side recognises and retries.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use acp_rpc::framing::{Frame, LineReader};
use acp_rpc::transport::{PipeReader, PipeWriter, duplex};
use acp_rpc::{
    CancellationToken, Connection, Error, ErrorObject, Handler, IncomingNotification, IncomingRequest, Peer, RawValue,
    codes,
};
use common::*;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// The pipelined requests of every test: about four times the two task bounds together.
const FLOOD: i64 = 20_000;
/// The default task bounds.
const RUNNING: usize = 1024;
const WAITING: usize = 4096;

/// Requests wait for a gate (or their cancellation); `ask` calls the peer first.
struct Gated {
    gate: CancellationToken,
    started: Arc<Mutex<HashSet<String>>>,
    seen: mpsc::UnboundedSender<String>,
}

impl Handler for Gated {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        self.started.lock().unwrap().insert(req.id.to_string());
        match &*req.method {
            "gate" | "session/prompt" => tokio::select! {
                () = self.gate.cancelled() => Ok(req.params.unwrap_or_else(|| raw("null"))),
                () = req.cancel.cancelled() => Err(ErrorObject::request_cancelled()),
            },
            "ask" => {
                let answer: Value = req.peer.request("question", &json!({"n": req.id.to_string()})).await?;
                Ok(raw(&answer.to_string()))
            }
            other => Err(ErrorObject::method_not_found(other)),
        }
    }

    async fn handle_notification(&self, n: IncomingNotification) {
        let _ = self.seen.send(n.method.to_string());
    }
}

struct Harness {
    gate: CancellationToken,
    started: Arc<Mutex<HashSet<String>>>,
    seen: mpsc::UnboundedReceiver<String>,
    lines: LineReader<PipeReader>,
    writer: Option<PipeWriter>,
    peer: Peer,
    serve: ServeTask,
}

/// Serves [`Gated`] over an in-memory pipe of `pipe_bytes` in each direction.
fn serve_gated(conn: Connection, pipe_bytes: usize) -> Harness {
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let gate = CancellationToken::new();
    let started = Arc::new(Mutex::new(HashSet::new()));
    let handler = Gated { gate: gate.clone(), started: started.clone(), seen: seen_tx };
    let ((conn_r, conn_w), (raw_r, raw_w)) = duplex(pipe_bytes);
    let (peer, serve) = conn.serve(conn_r, conn_w, handler);
    let lines = LineReader::new(raw_r, 1 << 20);
    Harness { gate, started, seen, lines, writer: Some(raw_w), peer, serve: tokio::spawn(serve) }
}

impl Harness {
    async fn send(&mut self, bytes: Vec<u8>) {
        let writer = self.writer.as_mut().expect("input open");
        writer.write_all(&bytes).await.expect("write");
    }

    /// Returns once the connection has read everything sent so far (a notification behind it
    /// has reached the handler).
    async fn sync(&mut self) {
        self.send(line(json!({"jsonrpc":"2.0","method":"_sync"}))).await;
        while next(&mut self.seen).await != "_sync" {}
    }

    async fn recv(&mut self) -> Value {
        read(&mut self.lines).await.expect("a message, not the end of output")
    }

    fn started(&self, id: &str) -> bool {
        self.started.lock().unwrap().contains(id)
    }
}

async fn read(lines: &mut LineReader<PipeReader>) -> Option<Value> {
    match tokio::time::timeout(LIMIT, lines.next_frame()).await.expect("output within the time limit") {
        Ok(Some(Frame::Line(l))) => Some(serde_json::from_slice(l).expect("JSON output")),
        Ok(None) => None,
        other => panic!("{other:?}"),
    }
}

fn line(v: Value) -> Vec<u8> {
    let mut bytes = v.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// `n` requests of `method` with ids `0..n`, one write's worth.
fn flood(method: &str, n: i64) -> Vec<u8> {
    (0..n).flat_map(|i| line(json!({"jsonrpc":"2.0","id":i,"method":method,"params":{"i":i}}))).collect()
}

fn cancel_request(id: Value) -> Vec<u8> {
    line(json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":id}}))
}

/// Waits (bounded by [`LIMIT`]) until `cond` holds; for counts that settle as tasks get polled.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_pipelined_requests_are_all_answered_and_the_backlog_stays_bounded() {
    let mut h = serve_gated(Connection::new(), 1 << 20);
    h.send(flood("gate", FLOOD)).await;
    h.sync().await;

    // Everything was read; what has no task is held, none refused.
    let held = FLOOD as usize - RUNNING - WAITING;
    let load = h.peer.request_load();
    assert_eq!(load.running + load.waiting, RUNNING + WAITING, "{load:?}");
    assert_eq!((load.backlog, load.refused), (held, 0), "{load:?}");
    assert!(load.backlog_bytes >= held * 640 && load.backlog_bytes <= 64 << 20, "{load:?}");
    eventually("every handler slot taken", || h.peer.request_load().running == RUNNING).await;
    assert_eq!(h.peer.request_load().waiting, WAITING);

    h.gate.cancel();
    let mut answered = HashSet::new();
    for _ in 0..FLOOD {
        let msg = h.recv().await;
        let id = msg["id"].as_i64().unwrap_or_else(|| panic!("{msg}"));
        assert_eq!(msg["result"], json!({"i": id}), "{msg}");
        assert!(answered.insert(id), "{id} answered twice");
    }
    let load = h.peer.request_load();
    assert_eq!((load.backlog, load.backlog_bytes, load.refused), (0, 0, 0), "{load:?}");
    assert!(load.peak_backlog_bytes >= held * 640 && load.peak_backlog_bytes <= 64 << 20, "{load:?}");
    eventually("every task done", || {
        let load = h.peer.request_load();
        load.running == 0 && load.waiting == 0
    })
    .await;

    h.writer = None;
    tokio::time::timeout(LIMIT, h.serve).await.expect("ends at end of input").unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_backlog_is_never_exceeded_and_the_excess_is_refused_as_overloaded() {
    const BACKLOG: usize = 128 * 1024;
    let mut h = serve_gated(Connection::new().max_backlog_bytes(BACKLOG), 1 << 20);
    // The refusals come at once, while nothing can run, so they are read while the flood is
    // still being written (they are more than the pipe holds). The last request is refused.
    let mut writer = h.writer.take().unwrap();
    let feeder = tokio::spawn(async move {
        writer.write_all(&flood("gate", FLOOD)).await.unwrap();
        writer
    });
    let mut refusals = Vec::new();
    while refusals.last().is_none_or(|msg: &Value| msg["id"] != FLOOD - 1) {
        refusals.push(h.recv().await);
    }
    h.writer = Some(feeder.await.unwrap());
    h.sync().await;

    let load = h.peer.request_load();
    let admitted = RUNNING + WAITING + load.backlog;
    assert!(load.backlog > 100 && load.backlog_bytes <= BACKLOG, "{load:?}");
    assert_eq!(load.refused as usize, FLOOD as usize - admitted, "{load:?}");

    // In arrival order, all of them after the last request that found room.
    let mut refused = Vec::new();
    for msg in refusals {
        let error = &msg["error"];
        assert_eq!(error["code"], codes::OVERLOADED, "{msg}");
        assert_eq!(error["message"], "Overloaded, retry later", "{msg}");
        let retry_after = error["data"]["retryAfterMs"].as_u64().unwrap();
        assert!((10..=60_000).contains(&retry_after), "{msg}");
        assert_eq!(error["data"]["maxBacklogBytes"], BACKLOG, "{msg}");
        assert!(error["data"]["backlogBytes"].as_u64().unwrap() <= BACKLOG as u64, "{msg}");
        assert_eq!(error["data"]["inFlight"], admitted, "{msg}");
        // Our own side reads it as an overload refusal, with the same hint.
        let object: ErrorObject = serde_json::from_value(error.clone()).unwrap();
        let as_error = Error::Rpc(object);
        assert!(as_error.is_overloaded());
        assert_eq!(as_error.retry_after(), Some(Duration::from_millis(retry_after)));
        refused.push(msg["id"].as_i64().unwrap());
    }
    assert_eq!(refused, (admitted as i64..FLOOD).collect::<Vec<_>>());
    assert!(!h.started(&(admitted as i64).to_string()), "a refused request never runs");

    h.gate.cancel();
    let mut answered = HashSet::new();
    while answered.len() < admitted {
        let msg = h.recv().await;
        let id = msg["id"].as_i64().unwrap();
        assert!(id < admitted as i64 && answered.insert(id), "{msg}");
        assert_eq!(msg["result"], json!({"i": id}), "{msg}");
    }
    let load = h.peer.request_load();
    assert!(load.peak_backlog_bytes <= BACKLOG && load.peak_backlog_bytes > BACKLOG - 1024, "{load:?}");
    assert_eq!(load.backlog_bytes, 0);
}

/// A client built on this runtime sees the refusal as `Error::is_overloaded` and gets every
/// call through by waiting `retry_after` and sending it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_retries_overloaded_calls_gets_every_answer() {
    const CALLS: usize = 2_000;
    let (seen_tx, _seen) = mpsc::unbounded_channel();
    let gate = CancellationToken::new();
    let server = Gated { gate: gate.clone(), started: Default::default(), seen: seen_tx };
    let tight = Connection::new().max_concurrent_requests(4).max_queued_requests(4).max_backlog_bytes(2048);
    let (client, _client_task, server_peer, _server_task) = pair((Connection::new(), ()), (tight, server));

    let retries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..CALLS {
        let (client, retries) = (client.clone(), retries.clone());
        calls.spawn(async move {
            loop {
                match client.request::<_, Value>("gate", &json!({ "i": i })).await {
                    Err(e) if e.is_overloaded() => {
                        retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(e.retry_after().expect("a hint")).await;
                    }
                    other => return (i, other),
                }
            }
        });
    }
    // Closed gate: 8 tasks and a few held; the rest must have been refused.
    eventually("refusals", || server_peer.request_load().refused > 0).await;
    gate.cancel();
    let mut done = HashSet::new();
    while let Some(joined) = tokio::time::timeout(LIMIT * 3, calls.join_next()).await.expect("no hang") {
        let (i, result) = joined.unwrap();
        assert_eq!(result.unwrap_or_else(|e| panic!("call {i}: {e}")), json!({ "i": i }));
        done.insert(i);
    }
    assert_eq!(done.len(), CALLS);
    assert!(retries.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellations_sent_after_the_flood_take_effect_at_once() {
    let mut h = serve_gated(Connection::new(), 1 << 20);
    let mut input = flood("gate", FLOOD);
    input.extend(line(json!({"jsonrpc":"2.0","id":"p","method":"session/prompt","params":{"sessionId":"s1"}})));
    h.send(input).await;
    h.sync().await;
    eventually("every handler slot taken", || h.peer.request_load().running == RUNNING).await;
    assert!(h.started("7") && !h.started("3000"));

    // A running request, one waiting for a slot, two held, and a held prompt by its session.
    let mut cancels = Vec::new();
    for id in [7, 3000, 12_000, 19_999] {
        cancels.extend(cancel_request(json!(id)));
    }
    cancels.extend(line(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}})));
    h.send(cancels).await;

    // Answered with the gate still closed.
    let mut answers = HashMap::new();
    while answers.len() < 5 {
        let msg = h.recv().await;
        answers.insert(msg["id"].to_string(), msg);
    }
    for id in ["7", "3000", "12000", "19999"] {
        assert_eq!(answers[id]["error"]["code"], codes::REQUEST_CANCELLED, "{}", answers[id]);
    }
    assert_eq!(answers["\"p\""]["result"], json!({"stopReason": "cancelled"}), "{}", answers["\"p\""]);
    for never_ran in ["3000", "12000", "19999", "\"p\""] {
        assert!(!h.started(never_ran), "{never_ran} was cancelled before it started");
    }
    // Three left the backlog cancelled; the two task slots that the cancelled running and
    // waiting requests freed went to the two oldest held requests.
    let left = FLOOD as usize + 1 - RUNNING - WAITING - 3 - 2;
    eventually("two held requests started", || h.peer.request_load().backlog == left).await;

    h.gate.cancel();
    let mut rest = HashSet::new();
    while rest.len() < FLOOD as usize - 4 {
        let msg = h.recv().await;
        let id = msg["id"].as_i64().unwrap_or_else(|| panic!("{msg}"));
        assert!(![7, 3000, 12_000, 19_999].contains(&id), "answered twice: {msg}");
        assert_eq!(msg["result"], json!({"i": id}), "{msg}");
        assert!(rest.insert(id));
    }
    assert_eq!(h.peer.request_load().backlog, 0);
}

/// The handlers of the first requests wait for answers to their own calls, which the peer
/// sends only after the whole flood: a reader that stopped at the bound would never get to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_to_our_calls_behind_the_flood_are_still_read() {
    let h = serve_gated(Connection::new(), 1 << 16);
    let Harness { mut lines, writer, serve, .. } = h;
    let mut writer = writer.unwrap();
    let (answers_tx, mut answers_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let feeder = tokio::spawn(async move {
        writer.write_all(&flood("ask", FLOOD)).await.unwrap();
        while let Some(answer) = answers_rx.recv().await {
            writer.write_all(&answer).await.unwrap();
        }
        writer
    });
    let mut answered = HashSet::new();
    while answered.len() < FLOOD as usize {
        let msg = read(&mut lines).await.expect("more output");
        if msg["method"] == "question" {
            let n = msg["params"]["n"].as_str().unwrap().to_owned();
            answers_tx.send(line(json!({"jsonrpc":"2.0","id":msg["id"],"result":{"n":n}}))).unwrap();
        } else {
            let id = msg["id"].as_i64().unwrap_or_else(|| panic!("{msg}"));
            assert_eq!(msg["result"], json!({"n": id.to_string()}), "{msg}");
            assert!(answered.insert(id));
        }
    }
    drop(answers_tx);
    drop(feeder.await.unwrap());
    tokio::time::timeout(LIMIT, serve).await.expect("ends at end of input").unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_of_input_with_a_full_backlog_ends_the_connection_and_answers_everything() {
    // A long grace, so that the requests waiting for a slot get to see their cancellation too.
    let mut h = serve_gated(Connection::new().cancel_grace(Duration::from_secs(30)), 1 << 20);
    h.send(flood("gate", FLOOD)).await;
    h.sync().await;
    assert_eq!(h.peer.request_load().backlog, FLOOD as usize - RUNNING - WAITING);

    h.writer = None;
    let mut answered = HashSet::new();
    while let Some(msg) = read(&mut h.lines).await {
        assert_eq!(msg["error"]["code"], codes::REQUEST_CANCELLED, "{msg}");
        assert!(answered.insert(msg["id"].as_i64().unwrap()), "{msg}");
    }
    assert_eq!(answered.len(), FLOOD as usize);
    (&mut h.serve).await.unwrap().unwrap();
    assert!(!h.started(&(FLOOD - 1).to_string()), "held requests never run");
    assert_eq!(h.peer.request_load().backlog, 0);
}

/// The answers to held requests at the end cannot hold up the end when nobody reads them:
/// a small pipe fills, and the connection gives up after the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_of_input_with_a_full_backlog_and_a_peer_that_stopped_reading_still_ends() {
    let mut h = serve_gated(Connection::new(), 4096);
    h.send(flood("gate", FLOOD)).await;
    h.sync().await;
    assert!(h.peer.request_load().backlog > 0);
    h.writer = None;
    tokio::time::timeout(LIMIT, h.serve).await.expect("ended although nobody reads").unwrap().unwrap();
    assert_eq!(h.peer.request_load().backlog, 0, "what could not be answered was dropped");
}

#[test]
fn the_overload_error_carries_its_retry_hint() {
    let e = ErrorObject::overloaded(Duration::from_millis(250));
    assert_eq!(e.code, codes::OVERLOADED);
    assert!(e.is_overloaded());
    assert_eq!(e.retry_after(), Some(Duration::from_millis(250)));
    assert_eq!(ErrorObject::overloaded(Duration::ZERO).retry_after(), Some(Duration::from_millis(1)));
    // Without a usable hint: 100 ms.
    let bare = ErrorObject::new(codes::OVERLOADED, "busy");
    assert_eq!(bare.retry_after(), Some(Duration::from_millis(100)));
    let odd = bare.clone().with_data(json!({"retryAfterMs": "soon"}));
    assert_eq!(odd.retry_after(), Some(Duration::from_millis(100)));
    // Anything else is not an overload.
    let internal = Error::Rpc(ErrorObject::internal_error("x"));
    assert!(!internal.is_overloaded() && internal.retry_after().is_none());
    assert!(!Error::ConnectionClosed.is_overloaded());
    assert!(Error::Rpc(e).is_overloaded());
}

/// The overload code is one JSON-RPC leaves to implementations, and no ACP release defines it.
#[test]
fn the_overload_code_is_implementation_defined_and_unused_by_acp() {
    assert!((-32099..=-32000).contains(&codes::OVERLOADED));
    let releases = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/acp-schema/releases");
    let mut defined = std::collections::BTreeSet::new();
    for release in std::fs::read_dir(&releases).expect("the upstream releases next to the workspace") {
        for version in ["v1", "v2"] {
            for file in ["schema.json", "schema.unstable.json"] {
                let Ok(text) = std::fs::read_to_string(release.as_ref().unwrap().path().join(version).join(file))
                else {
                    continue;
                };
                let schema: Value = serde_json::from_str(&text).unwrap();
                let variants = schema["$defs"]["ErrorCode"]["anyOf"].as_array().cloned().unwrap_or_default();
                defined.extend(variants.iter().filter_map(|v| v["const"].as_i64()));
            }
        }
    }
    assert!(defined.contains(&-32800) && defined.contains(&-32002), "the codes were found: {defined:?}");
    assert!(!defined.contains(&i64::from(codes::OVERLOADED)), "{defined:?}");
}
