//! One test (or a few) per line of DESIGN.md's "Runtime contract", over in-memory pipes, at the
//! raw JSON level. Lines 8 (process group) and 11 (tracing span) have more in `process.rs` and
//! `observability.rs`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use acp_rpc::transport::duplex;
use acp_rpc::{
    Connection, Error, ErrorObject, Handler, IncomingNotification, IncomingRequest, RawValue, codes, methods,
};
use common::*;
use serde_json::{Value, json};
use tokio::sync::{Barrier, Semaphore, mpsc};

// ---- 1. framing -----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_1_framing_oversized_line_is_discarded_and_connection_goes_on() {
    let (handler, _rx) = test_handler();
    let (mut raw, _peer, _task) = start(Connection::new().max_line_bytes(1024), handler);

    // 1 MiB on one line, in one write: skipped, answered once, then business as usual.
    let mut huge = vec![b'x'; 1 << 20];
    huge.push(b'\n');
    raw.send_bytes(&huge).await;
    let before = raw.ping().await;
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0]["id"], Value::Null);
    assert_eq!(before[0]["error"]["code"], json!(codes::INVALID_REQUEST));

    // A valid message that is simply too long is skipped too (never half-parsed).
    let long = json!({"jsonrpc":"2.0","id":1,"method":"echo","params":{"pad":"y".repeat(2000)}});
    raw.send_json(long).await;
    let before = raw.ping().await;
    assert_eq!(before.len(), 1);
    assert_eq!(before[0]["id"], Value::Null, "the id of a skipped line is unknown");

    // Exactly at the limit is fine.
    let base = json!({"jsonrpc":"2.0","id":2,"method":"echo","params":{"pad":""}}).to_string();
    let pad = "z".repeat(1024 - base.len());
    let exact = base.replace(r#""pad":"""#, &format!(r#""pad":"{pad}""#));
    assert_eq!(exact.len(), 1024);
    raw.send(&exact).await;
    let (answer, _) = raw.recv_until_id(json!(2)).await;
    assert_eq!(answer["result"]["pad"], json!(pad));
}

#[tokio::test]
async fn contract_1_framing_invalid_json_gets_parse_error_with_null_id_and_is_never_echoed() {
    let (handler, _rx) = test_handler();
    let (mut raw, _peer, _task) = start(Connection::new(), handler);
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":{"secret":"hunter2""#).await;
    let line = raw.recv_line().await;
    assert!(!line.contains("hunter2"), "input echoed back: {line}");
    let msg: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(msg, json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}));
    assert!(raw.ping().await.is_empty());
}

#[tokio::test]
async fn contract_1_framing_crlf_and_blank_lines() {
    let (handler, _rx) = test_handler();
    let (mut raw, _peer, _task) = start(Connection::new(), handler);
    raw.send_bytes(b"\r\n\n   \n\t\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":[1]}\r\n").await;
    let msg = raw.recv().await;
    assert_eq!(msg, json!({"jsonrpc":"2.0","id":1,"result":[1]}));
    assert!(raw.ping().await.is_empty(), "blank lines are not answered");
}

// ---- 2. concurrent requests -----------------------------------------------------------------

/// Requests that only complete if they run at the same time, and a handler that calls the peer
/// which calls back.
struct Concurrent {
    barrier: Arc<Barrier>,
}

impl Handler for Concurrent {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        match &*req.method {
            "together" => {
                self.barrier.wait().await;
                Ok(raw("true"))
            }
            // Calls the other side, which calls us back ("leaf") before answering.
            "outer" => {
                let inner: Value = req.peer.request("inner", &json!({})).await.map_err(ErrorObject::from)?;
                Ok(raw(&json!({"outer": inner}).to_string()))
            }
            "inner" => {
                let leaf: Value = req.peer.request("leaf", &json!({})).await.map_err(ErrorObject::from)?;
                Ok(raw(&json!({"inner": leaf}).to_string()))
            }
            "leaf" => Ok(raw("\"leaf\"")),
            other => Err(ErrorObject::method_not_found(other)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_2_requests_run_concurrently_and_handlers_may_call_the_peer() {
    let n = 50;
    let a = Concurrent { barrier: Arc::new(Barrier::new(n)) };
    let b = Concurrent { barrier: Arc::new(Barrier::new(1)) };
    let (pa, _ta, _pb, _tb) = pair((Connection::new(), a), (Connection::new(), b));

    // B asks A for `n` requests that each wait for all the others: only concurrency finishes.
    let calls: Vec<_> = (0..n)
        .map(|_| {
            let pb = _pb.clone();
            tokio::spawn(async move { pb.request_raw("together", None).await })
        })
        .collect();
    for c in calls {
        let r = tokio::time::timeout(LIMIT, c).await.expect("no deadlock").unwrap();
        assert_eq!(r.unwrap().get(), "true");
    }

    // A → B "outer"; B's handler calls A "inner"; A's handler calls B "leaf": nested calls in
    // both directions while handlers are running.
    let out: Value = tokio::time::timeout(LIMIT, pa.request("outer", &json!({}))).await.unwrap().unwrap();
    assert_eq!(out, json!({"outer": {"inner": "leaf"}}));
}

/// Counts how many of its requests run at once; each waits for a permit from the test.
struct Bounded {
    running: AtomicUsize,
    max_running: AtomicUsize,
    release: Semaphore,
    reached: mpsc::UnboundedSender<usize>,
}

impl Handler for Bounded {
    async fn handle_request(&self, _req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let _ = self.reached.send(now);
        let permit = self.release.acquire().await.unwrap();
        permit.forget();
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(raw("null"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_2_concurrency_bound_is_configurable() {
    let (reached_tx, mut reached) = mpsc::unbounded_channel();
    let h = Arc::new(Bounded {
        running: AtomicUsize::new(0),
        max_running: AtomicUsize::new(0),
        release: Semaphore::new(0),
        reached: reached_tx,
    });
    let (mut raw, _peer, _task) = start(Connection::new().max_concurrent_requests(3), h.clone());
    for id in 0..10 {
        raw.send_json(json!({"jsonrpc":"2.0","id":id,"method":"work"})).await;
    }
    // Three start; the fourth only after one is released.
    for _ in 0..3 {
        next(&mut reached).await;
    }
    assert_eq!(h.running.load(Ordering::SeqCst), 3);
    h.release.add_permits(10);
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(raw.recv().await["id"].as_i64().unwrap());
    }
    ids.sort();
    assert_eq!(ids, (0..10).collect::<Vec<_>>());
    assert_eq!(h.max_running.load(Ordering::SeqCst), 3);
}

/// Beyond `max_concurrent_requests`, requests wait for a slot (up to `max_queued_requests`), a
/// waiting one can be cancelled without ever running, and, without a backlog, one beyond both
/// bounds is refused at once as overloaded; the reader keeps reading throughout. (The backlog
/// itself: `tests/overload.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_2_requests_beyond_the_bound_wait_and_beyond_the_queue_are_refused() {
    let (reached_tx, mut reached) = mpsc::unbounded_channel();
    let h = Arc::new(Bounded {
        running: AtomicUsize::new(0),
        max_running: AtomicUsize::new(0),
        release: Semaphore::new(0),
        reached: reached_tx,
    });
    let conn = Connection::new().max_concurrent_requests(1).max_queued_requests(1).max_backlog_bytes(0);
    let (mut raw, peer, _task) = start(conn, h.clone());
    raw.send_json(json!({"jsonrpc":"2.0","id":0,"method":"work"})).await;
    next(&mut reached).await;
    raw.send_json(json!({"jsonrpc":"2.0","id":1,"method":"work"})).await; // waits for the slot
    raw.send_json(json!({"jsonrpc":"2.0","id":2,"method":"work"})).await; // one too many
    let refused = raw.recv().await;
    assert_eq!(refused["id"], 2, "{refused}");
    assert_eq!(refused["error"]["code"], codes::OVERLOADED, "{refused}");
    assert_eq!(refused["error"]["message"], "Overloaded, retry later", "{refused}");
    assert_eq!(refused["error"]["data"]["retryAfterMs"], 100, "nothing held: the default hint; {refused}");
    assert_eq!(refused["error"]["data"]["inFlight"], 2, "{refused}");
    assert_eq!(refused["error"]["data"]["maxBacklogBytes"], 0, "{refused}");
    let load = peer.request_load();
    assert_eq!((load.running, load.waiting, load.backlog, load.refused), (1, 1, 0, 1), "{load:?}");

    // The waiting request is cancelled before it ever runs.
    raw.send_json(json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}})).await;
    let cancelled = raw.recv().await;
    assert_eq!(cancelled["id"], 1, "{cancelled}");
    assert_eq!(cancelled["error"]["code"], codes::REQUEST_CANCELLED, "{cancelled}");

    h.release.add_permits(1);
    assert_eq!(raw.recv().await, json!({"jsonrpc":"2.0","id":0,"result":null}));
    // Room again: the next request runs.
    raw.send_json(json!({"jsonrpc":"2.0","id":3,"method":"work"})).await;
    next(&mut reached).await;
    h.release.add_permits(1);
    assert_eq!(raw.recv().await, json!({"jsonrpc":"2.0","id":3,"result":null}));
    assert_eq!(h.max_running.load(Ordering::SeqCst), 1, "request 1 never ran, so never two at once");
    assert!(reached.try_recv().is_err(), "only requests 0 and 3 ran");
}

/// A request cancelled while it waits for a slot is answered without ever running, also when
/// the slot frees up before its task runs again (here: the running request ends because of its
/// own cancellation, read in the same batch of input; the grace period is an hour). On this
/// single-threaded runtime tasks run in the order they are woken, which makes the race certain.
#[tokio::test]
async fn a_request_cancelled_while_waiting_for_a_slot_never_runs() {
    let (handler, mut rx) = test_handler();
    let conn = Connection::new().max_concurrent_requests(1).cancel_grace(Duration::from_secs(3600));
    let (mut raw, _peer, _task) = start(conn, handler);
    raw.send_json(json!({"jsonrpc":"2.0","id":1,"method":"wait_cancel_ok"})).await;
    assert_eq!(next(&mut rx.started).await, "wait_cancel_ok");
    raw.send_json(json!({"jsonrpc":"2.0","id":2,"method":"echo","params":{"ran":true}})).await;
    // Handled after request 2's task has run once (it waits for the slot now).
    raw.send_json(json!({"jsonrpc":"2.0","method":"_sync"})).await;
    assert_eq!(next(&mut rx.seen).await.0, "_sync");
    let cancel = |id: i64| json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":id}}).to_string();
    raw.send_bytes(format!("{}\n{}\n", cancel(1), cancel(2)).as_bytes()).await;

    let mut answers = std::collections::BTreeMap::new();
    while answers.len() < 2 {
        let msg = raw.recv().await;
        answers.insert(msg["id"].as_i64().unwrap(), msg);
    }
    assert_eq!(answers[&1]["result"], json!({"partial": true}), "{}", answers[&1]);
    assert_eq!(answers[&2]["error"]["code"], json!(codes::REQUEST_CANCELLED), "{}", answers[&2]);
    assert!(raw.ping().await.is_empty());
    assert_eq!(next(&mut rx.started).await, "ping");
    assert!(rx.started.try_recv().is_err(), "the cancelled request never started");
}

/// Nothing runs, so nothing gets a grace period: the answer comes while the slot is still taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cancelled_while_waiting_for_a_slot_is_answered_at_once() {
    let (handler, mut rx) = test_handler();
    let conn = Connection::new().max_concurrent_requests(1).cancel_grace(Duration::from_secs(3600));
    let (mut raw, _peer, _task) = start(conn, handler);
    raw.send_json(json!({"jsonrpc":"2.0","id":1,"method":"hang"})).await;
    assert_eq!(next(&mut rx.started).await, "hang");
    raw.send_json(json!({"jsonrpc":"2.0","id":2,"method":"echo"})).await;
    raw.send_json(json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":2}})).await;
    let answer = raw.recv().await;
    assert_eq!(answer["id"], json!(2), "{answer}");
    assert_eq!(answer["error"]["code"], json!(codes::REQUEST_CANCELLED), "{answer}");
    assert!(rx.started.try_recv().is_err(), "the cancelled request never started");
}

// ---- 3. notification order, responses after notifications --------------------------------

/// Agent side: a prompt streams `updates` notifications, then ends the turn.
struct Streamer {
    updates: usize,
}

impl Handler for Streamer {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        for i in 0..self.updates {
            req.peer
                .notify(methods::SESSION_UPDATE, &json!({"sessionId":"s","seq":i}))
                .await
                .map_err(ErrorObject::from)?;
        }
        Ok(raw(r#"{"stopReason":"end_turn"}"#))
    }
}

/// Client side: a deliberately slow notification handler that records the order.
struct SlowClient {
    seen: Arc<std::sync::Mutex<Vec<u64>>>,
}

impl Handler for SlowClient {
    async fn handle_notification(&self, n: IncomingNotification) {
        // Slower than the response path: many yields per notification.
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        let v: Value = n.parse_params().unwrap();
        self.seen.lock().unwrap().push(v["seq"].as_u64().unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_3_response_after_prior_notifications() {
    let updates = 300;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (_agent, _ta, client, _tc) =
        pair((Connection::new(), Streamer { updates }), (Connection::new(), SlowClient { seen: seen.clone() }));
    for turn in 0..3 {
        let result = tokio::time::timeout(
            LIMIT,
            client.request_raw(methods::SESSION_PROMPT, Some(&raw(r#"{"sessionId":"s"}"#))),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(result.get(), r#"{"stopReason":"end_turn"}"#);
        // Every update of the turn was handled before the call returned, in order.
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), updates * (turn + 1));
        let expected: Vec<u64> = (0..3).flat_map(|_| 0..updates as u64).take(updates * (turn + 1)).collect();
        assert_eq!(*seen, expected);
    }
}

/// A notification handler that awaits a call to the peer: must not deadlock.
struct CallsFromNotification {
    done: mpsc::UnboundedSender<Result<String, String>>,
}

impl Handler for CallsFromNotification {
    async fn handle_notification(&self, n: IncomingNotification) {
        let r = n.peer.request_raw("ping", None).await;
        let _ = self.done.send(r.map(|v| v.get().to_owned()).map_err(|e| e.to_string()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_3_notification_handler_may_await_a_call_without_deadlock() {
    let (done_tx, mut done) = mpsc::unbounded_channel();
    let (handler, _rx) = test_handler();
    let (_pa, _ta, pb, _tb) =
        pair((Connection::new(), handler), (Connection::new(), CallsFromNotification { done: done_tx }));
    // A → B notification; B's notification handler calls A and awaits the answer.
    _pa.notify("note", &json!({})).await.unwrap();
    _pa.notify("note", &json!({})).await.unwrap();
    assert_eq!(next(&mut done).await, Ok("\"pong\"".to_owned()));
    assert_eq!(next(&mut done).await, Ok("\"pong\"".to_owned()));
    drop(pb);
}

// ---- 4. one FIFO writer, bounded queue, backpressure ---------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_4_single_fifo_writer_with_bounded_queue_applies_backpressure() {
    // The other end does not read: a 4 KiB pipe, a write queue of 8.
    let ((conn_r, conn_w), (other_r, _other_w)) = duplex(4096);
    let (peer, serve) = Connection::new().write_queue_capacity(8).serve(conn_r, conn_w, ());
    let _serve = tokio::spawn(serve);

    let total = 5_000usize;
    let sent = Arc::new(AtomicUsize::new(0));
    let pad = "p".repeat(1024);
    let sender = {
        let (peer, sent) = (peer.clone(), sent.clone());
        tokio::spawn(async move {
            for i in 0..total {
                peer.notify("_bulk", &json!({"seq": i, "pad": pad})).await.unwrap();
                sent.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let sender = {
        let mut sender = sender;
        // The sender cannot finish while nobody reads: it is held back, not buffering.
        assert!(tokio::time::timeout(Duration::from_millis(500), &mut sender).await.is_err());
        sender
    };
    // What may be in flight: the queue (8), one writer batch (64), the writer's buffer (64 KiB ≈ 63
    // lines of ~1 KiB), the pipe (4 KiB ≈ 4 lines), one line being written.
    let in_flight = sent.load(Ordering::SeqCst);
    assert!(in_flight <= 8 + 64 + 64 + 4 + 2, "{in_flight} messages accepted without a reader");

    // Now read: everything arrives, in the order it was sent.
    let mut lines = acp_rpc::framing::LineReader::new(other_r, 1 << 20);
    for i in 0..total {
        let frame = tokio::time::timeout(LIMIT, lines.next_frame()).await.unwrap().unwrap().unwrap();
        let acp_rpc::framing::Frame::Line(line) = frame else { panic!("oversized") };
        let v: Value = serde_json::from_slice(line).unwrap();
        assert_eq!(v["params"]["seq"], json!(i));
    }
    tokio::time::timeout(LIMIT, sender).await.unwrap().unwrap();
}

/// Capacities beyond what tokio's channels take are clamped (a panic before), as is zero.
#[tokio::test]
async fn out_of_range_queue_capacities_are_clamped() {
    for n in [usize::MAX, 0] {
        let conn = Connection::new()
            .write_queue_capacity(n)
            .notification_queue_capacity(n)
            .max_concurrent_requests(n)
            .max_queued_requests(n);
        let (handler, mut rx) = test_handler();
        let (mut other, peer, _task) = start(conn, handler);
        other.send(r#"{"jsonrpc":"2.0","method":"_note"}"#).await;
        assert_eq!(next(&mut rx.seen).await.0, "_note");
        assert!(other.ping().await.is_empty());
        peer.notify("_out", &json!({})).await.unwrap();
        assert_eq!(other.recv().await["method"], json!("_out"));
    }
}

// ---- 5. cancellation ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_5_cancel_request_cancels_the_token_and_answers_request_cancelled() {
    let (handler, mut rx) = test_handler();
    let (mut raw, _peer, _task) = start(Connection::new(), handler);
    raw.send_json(json!({"jsonrpc":"2.0","id":1,"method":"wait_cancel"})).await;
    raw.send_json(json!({"jsonrpc":"2.0","id":"two","method":"wait_cancel_ok"})).await;
    let mut started = [next(&mut rx.started).await, next(&mut rx.started).await];
    started.sort();
    assert_eq!(started, ["wait_cancel", "wait_cancel_ok"]);

    raw.send_json(json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}})).await;
    let (answer, _) = raw.recv_until_id(json!(1)).await;
    assert_eq!(answer["error"]["code"], json!(codes::REQUEST_CANCELLED), "{answer}");

    // A handler that returns a (partial) result after cancellation keeps it.
    raw.send_json(json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"two"}})).await;
    let (answer, _) = raw.recv_until_id(json!("two")).await;
    assert_eq!(answer["result"], json!({"partial": true}));

    // `$/cancel_request` is the runtime's: the handler never sees it; unknown ids are ignored.
    raw.send_json(json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":99}})).await;
    assert!(raw.ping().await.is_empty());
    assert!(rx.seen.try_recv().is_err());
}

/// Agent side: prompts that fail (or hang) once cancelled.
struct Prompter {
    dropped: Arc<AtomicBool>,
    started: mpsc::UnboundedSender<()>,
}

struct SetOnDrop(Arc<AtomicBool>);
impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Handler for Prompter {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        if req.method == "ping" {
            return Ok(raw("\"pong\""));
        }
        let mode: Value = req.parse_params()?;
        let _ = self.started.send(());
        match mode["mode"].as_str() {
            Some("error") => {
                req.cancel.cancelled().await;
                Err(ErrorObject::internal_error("the model call was aborted"))
            }
            Some("hang") => {
                let _guard = SetOnDrop(self.dropped.clone());
                std::future::pending().await
            }
            Some("panic") => {
                req.cancel.cancelled().await;
                panic!("aborted by a panic on purpose")
            }
            Some("meta") => {
                req.cancel.cancelled().await;
                Ok(raw(r#"{"stopReason":"cancelled","_meta":{"k":1}}"#))
            }
            _ => Ok(raw(r#"{"stopReason":"end_turn"}"#)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_5_session_cancel_cancels_the_prompt_which_answers_stop_reason_cancelled() {
    let dropped = Arc::new(AtomicBool::new(false));
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (mut raw, _peer, _task) = start(
        Connection::new().cancel_grace(Duration::from_millis(50)),
        Prompter { dropped: dropped.clone(), started: started_tx },
    );
    let prompt = |id: i64, session: &str, mode: &str| json!({"jsonrpc":"2.0","id":id,"method":"session/prompt","params":{"sessionId":session,"mode":mode}});
    raw.send_json(prompt(1, "s1", "error")).await;
    raw.send_json(prompt(2, "s1", "hang")).await;
    raw.send_json(prompt(3, "s1", "panic")).await;
    raw.send_json(prompt(4, "s1", "meta")).await;
    raw.send_json(prompt(5, "s2", "error")).await;
    // Running, so they see the cancellation (a prompt cancelled before it starts never runs).
    for _ in 0..5 {
        next(&mut started).await;
    }
    raw.send_json(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}})).await;

    let mut answers = std::collections::BTreeMap::new();
    while answers.len() < 4 {
        let msg = raw.recv().await;
        answers.insert(msg["id"].as_i64().unwrap(), msg);
    }
    let cancelled = json!({"stopReason":"cancelled"});
    // Error, dropped after the grace period, panic: all `cancelled`.
    assert_eq!(answers[&1]["result"], cancelled, "{}", answers[&1]);
    assert_eq!(answers[&2]["result"], cancelled);
    assert_eq!(answers[&3]["result"], cancelled);
    // A handler's own `cancelled` result is kept with its `_meta`.
    assert_eq!(answers[&4]["result"], json!({"stopReason":"cancelled","_meta":{"k":1}}));
    assert!(dropped.load(Ordering::SeqCst), "the hanging handler was dropped after the grace period");
    // The other session's prompt runs on.
    assert!(raw.ping().await.is_empty());
    raw.send_json(json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":5}})).await;
    let (answer, _) = raw.recv_until_id(json!(5)).await;
    assert_eq!(answer["result"], cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_5_cancelled_handler_is_dropped_after_the_grace_period() {
    let (handler, mut rx) = test_handler();
    let grace = Duration::from_millis(80);
    let (mut raw, _peer, _task) = start(Connection::new().cancel_grace(grace), handler);
    raw.send_json(json!({"jsonrpc":"2.0","id":1,"method":"hang"})).await;
    assert_eq!(next(&mut rx.started).await, "hang");
    let t0 = Instant::now();
    raw.send_json(json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}})).await;
    let (answer, _) = raw.recv_until_id(json!(1)).await;
    assert!(t0.elapsed() >= grace, "answered before the grace period ended");
    assert_eq!(answer["error"]["code"], json!(codes::REQUEST_CANCELLED));
    // session/cancel is delivered to the handler as well.
    raw.send_json(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"x"}})).await;
    assert_eq!(next(&mut rx.seen).await.0, "session/cancel");
}

// ---- 6. session/cancel and permission requests --------------------------------------------

/// Client side: a permission dialog that never gets an answer from the user.
struct NeverAnswers {
    started: mpsc::UnboundedSender<()>,
}

impl Handler for NeverAnswers {
    async fn handle_request(&self, _req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let _ = self.started.send(());
        std::future::pending().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_6_client_cancel_session_answers_pending_permission_requests_at_once() {
    let (started_tx, mut started) = mpsc::unbounded_channel();
    // A grace period far beyond the test's limit: the answer must not wait for it.
    let (mut agent, client, _task) =
        start(Connection::new().cancel_grace(Duration::from_secs(3600)), NeverAnswers { started: started_tx });
    let permission = |id: i64, session: &str| {
        json!({"jsonrpc":"2.0","id":id,"method":"session/request_permission",
               "params":{"sessionId":session,"toolCall":{"toolCallId":"t"},"options":[]}})
    };
    agent.send_json(permission(1, "s")).await;
    agent.send_json(permission(2, "s")).await;
    agent.send_json(permission(3, "other")).await;
    for _ in 0..3 {
        next(&mut started).await;
    }
    client.cancel_session("s").await.unwrap();

    let mut got = Vec::new();
    while got.len() < 3 {
        got.push(agent.recv().await);
    }
    let cancel = got.iter().find(|m| m["method"] == json!("session/cancel")).expect("session/cancel sent");
    assert_eq!(cancel["params"], json!({"sessionId":"s"}));
    for id in [1, 2] {
        let answer = got.iter().find(|m| m["id"] == json!(id)).expect("answered");
        assert_eq!(answer["result"], json!({"outcome":{"outcome":"cancelled"}}));
    }
    // The other session's request is still pending.
    assert!(agent.try_recv_line(Duration::from_millis(100)).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_6_session_cancel_goes_out_before_the_cancelled_permission_answers() {
    // The agent must learn of the cancellation no later than it sees the `cancelled` outcome,
    // or its turn may end with `end_turn` instead of `cancelled`. Racy when broken, hence
    // the repetitions.
    for round in 0..1000 {
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let (mut agent, client, _task) = start(Connection::new(), NeverAnswers { started: started_tx });
        agent
            .send_json(json!({"jsonrpc":"2.0","id":1,"method":"session/request_permission",
                              "params":{"sessionId":"s","toolCall":{"toolCallId":"t"},"options":[]}}))
            .await;
        next(&mut started).await;
        client.cancel_session("s").await.unwrap();
        let first = agent.recv().await;
        let second = agent.recv().await;
        assert_eq!(first["method"], json!("session/cancel"), "round {round}: {first} came before session/cancel");
        assert_eq!(second["result"], json!({"outcome":{"outcome":"cancelled"}}), "round {round}");
    }
}

/// Agent side: a prompt that asks for permission and reports what it got.
struct AsksPermission {
    got: mpsc::UnboundedSender<Result<String, String>>,
}

impl Handler for AsksPermission {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        if req.method == "ping" {
            return Ok(raw("\"pong\""));
        }
        let params = raw(r#"{"sessionId":"s","toolCall":{"toolCallId":"t"},"options":[]}"#);
        // Tied to nothing: the runtime resolves it when `session/cancel` arrives.
        let permission = req.peer.request_raw(methods::SESSION_REQUEST_PERMISSION, Some(&params)).await;
        let _ = self.got.send(permission.map(|p| p.get().to_owned()).map_err(|e| e.to_string()));
        // Tied to the prompt's token: resolves as `Cancelled` once the turn is cancelled.
        let terminal = req.peer.request_raw_until("terminal/create", Some(&params), &req.cancel).await;
        let _ = self.got.send(terminal.map(|p| p.get().to_owned()).map_err(|e| e.to_string()));
        Err(ErrorObject::internal_error("turn aborted"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_6_agent_permission_request_of_a_cancelled_turn_resolves_as_cancelled() {
    let (got_tx, mut got) = mpsc::unbounded_channel();
    let (mut client, _agent, _task) = start(Connection::new(), AsksPermission { got: got_tx });
    client
        .send_json(json!({"jsonrpc":"2.0","id":"p","method":"session/prompt","params":{"sessionId":"s","prompt":[]}}))
        .await;
    let ask = client.recv().await;
    assert_eq!(ask["method"], json!("session/request_permission"));
    let ask_id = ask["id"].clone();

    // The user has not answered; the client cancels the turn.
    client.send_json(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}})).await;
    assert_eq!(next(&mut got).await, Ok(r#"{"outcome":{"outcome":"cancelled"}}"#.to_owned()));
    // The token-bound call gives up as well (the turn's token fired).
    assert_eq!(next(&mut got).await, Err("request cancelled".to_owned()));

    // The wire: `$/cancel_request` for the permission request (and for terminal/create if it
    // was sent), then the prompt's answer.
    let (answer, before) = client.recv_until_id(json!("p")).await;
    assert_eq!(answer["result"], json!({"stopReason":"cancelled"}));
    assert!(
        before.iter().any(|m| m["method"] == json!("$/cancel_request") && m["params"]["requestId"] == ask_id),
        "{before:?}"
    );
    // The client's late answer to the permission request is ignored.
    client.send_json(json!({"jsonrpc":"2.0","id":ask_id,"result":{"outcome":{"outcome":"cancelled"}}})).await;
    assert!(client.ping().await.is_empty());
}

// ---- 7. dropping an outgoing call sends $/cancel_request -------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_7_dropping_an_outgoing_call_sends_cancel_request() {
    let (handler, _rx) = test_handler();
    let (mut other, peer, _task) = start(Connection::new(), handler);
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("slow/thing", Some(&raw(r#"{"a":1}"#))).await })
    };
    let req = other.recv().await;
    assert_eq!(req["method"], json!("slow/thing"));
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    let cancel = other.recv().await;
    assert_eq!(cancel, json!({"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":req["id"]}}));
    // The late answer is ignored; the connection goes on.
    other
        .send_json(json!({"jsonrpc":"2.0","id":req["id"],"error":{"code":-32800,"message":"Request cancelled"}}))
        .await;
    assert!(other.ping().await.is_empty());

    // With a timeout around the call, the same happens.
    let r = tokio::time::timeout(Duration::from_millis(20), peer.request_raw("slow/other", None)).await;
    assert!(r.is_err());
    let req = other.recv().await;
    let cancel = other.recv().await;
    assert_eq!(cancel["params"]["requestId"], req["id"]);
}

// ---- 8. end of input / transport error ------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_8_end_of_input_fails_pending_calls_cancels_handlers_and_serve_returns() {
    let (handler, mut rx) = test_handler();
    let (mut other, peer, task) = start(Connection::new().cancel_grace(Duration::from_millis(50)), handler);
    other.send_json(json!({"jsonrpc":"2.0","id":1,"method":"wait_cancel"})).await;
    other.send_json(json!({"jsonrpc":"2.0","id":2,"method":"hang"})).await;
    next(&mut rx.started).await;
    next(&mut rx.started).await;
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let peer = peer.clone();
            tokio::spawn(async move { peer.request_raw("never/answered", None).await })
        })
        .collect();
    for _ in 0..5 {
        assert!(other.recv().await["method"] == json!("never/answered"));
    }

    let t0 = Instant::now();
    other.close_input();
    for c in calls {
        let r = tokio::time::timeout(LIMIT, c).await.unwrap().unwrap();
        assert!(matches!(r, Err(Error::ConnectionClosed)), "{r:?}");
    }
    let failed_after = t0.elapsed();
    assert!(failed_after < Duration::from_secs(1), "pending calls failed after {failed_after:?}");
    // The cancelled handlers still answer while the output works.
    let mut answers = [other.recv().await, other.recv().await];
    answers.sort_by_key(|a| a["id"].as_i64());
    assert_eq!(answers[0]["error"]["code"], json!(codes::REQUEST_CANCELLED));
    assert_eq!(answers[1]["error"]["code"], json!(codes::REQUEST_CANCELLED));
    let served = tokio::time::timeout(LIMIT, task).await.unwrap().unwrap();
    assert!(served.is_ok(), "{served:?}");
    assert!(peer.is_closed());
    tokio::time::timeout(LIMIT, peer.closed()).await.unwrap();
    assert!(matches!(peer.request_raw("x", None).await, Err(Error::ConnectionClosed)));
    assert!(matches!(peer.notify("x", &json!({})).await, Err(Error::ConnectionClosed)));
}

struct FailingReader;
impl tokio::io::AsyncRead for FailingReader {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        _: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "boom")))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_8_transport_errors_end_the_connection_with_an_error() {
    // Read error.
    let (_, (_, w)) = duplex(64);
    let (peer, serve) = Connection::new().serve(FailingReader, w, ());
    let r = tokio::time::timeout(LIMIT, serve).await.unwrap();
    assert!(matches!(r, Err(Error::Io(_))), "{r:?}");
    assert!(peer.is_closed());

    // Write error: the other side stopped reading for good.
    let ((r, w), (other_r, _other_w)) = duplex(64);
    drop(other_r);
    let (peer, serve) = Connection::new().serve(r, w, ());
    let task = tokio::spawn(serve);
    let call = peer.request_raw("x", None).await;
    assert!(matches!(call, Err(Error::ConnectionClosed)), "{call:?}");
    let r = tokio::time::timeout(LIMIT, task).await.unwrap().unwrap();
    assert!(matches!(r, Err(Error::Io(_))), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_8_close_and_dropping_serve_end_the_connection() {
    let (handler, _rx) = test_handler();
    let (mut other, peer, task) = start(Connection::new(), handler);
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("x", None).await })
    };
    other.recv().await;
    peer.close();
    assert!(matches!(tokio::time::timeout(LIMIT, call).await.unwrap().unwrap(), Err(Error::ConnectionClosed)));
    assert!(tokio::time::timeout(LIMIT, task).await.unwrap().unwrap().is_ok());

    // Dropping `Serve` (here: never polling it) fails calls instead of leaving them hanging.
    let ((r, w), _other) = duplex(1 << 16);
    let (peer, serve) = Connection::new().serve(r, w, ());
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("x", None).await })
    };
    tokio::task::yield_now().await;
    drop(serve);
    assert!(matches!(tokio::time::timeout(LIMIT, call).await.unwrap().unwrap(), Err(Error::ConnectionClosed)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_cancel_grace_means_waiting_as_long_as_needed_without_panicking() {
    let (handler, mut rx) = test_handler();
    let (mut other, _peer, task) = start(Connection::new().cancel_grace(Duration::MAX), handler);
    other.send_json(json!({"jsonrpc":"2.0","id":1,"method":"wait_cancel"})).await;
    assert_eq!(next(&mut rx.started).await, "wait_cancel");
    other.close_input();
    // The handler ends once the end of input cancels it; then the connection ends normally.
    let (answer, _) = other.recv_until_id(json!(1)).await;
    assert_eq!(answer["error"]["code"], json!(codes::REQUEST_CANCELLED), "{answer}");
    let served = tokio::time::timeout(LIMIT, task).await.expect("serve returns").expect("no panic");
    assert!(served.is_ok(), "{served:?}");
}

/// Notification `block` holds its worker thread until released; any other never finishes.
struct BlocksInNotification {
    entered: mpsc::UnboundedSender<()>,
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Handler for BlocksInNotification {
    async fn handle_notification(&self, n: IncomingNotification) {
        if n.method == "block" {
            let _ = self.entered.send(());
            let _ = self.release.lock().unwrap().recv();
        } else {
            std::future::pending::<()>().await;
        }
    }
}

/// A notification handler that finishes after `Serve` was dropped must not take back the
/// "everyone may go" that the drop gave: a caller whose response had arrived would then wait
/// for notifications nobody will handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_whose_response_arrived_is_not_held_after_serve_is_dropped() {
    let (entered_tx, mut entered) = mpsc::unbounded_channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let h = Arc::new(BlocksInNotification { entered: entered_tx, release: std::sync::Mutex::new(release_rx) });
    let ((conn_r, conn_w), (raw_r, raw_w)) = duplex(1 << 16);
    let (peer, serve) = Connection::new().serve(conn_r, conn_w, h.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serve = tokio::spawn(async move {
        tokio::select! {
            _ = serve => {}
            _ = stopped => {}
        }
    });
    let mut other = acp_rpc::framing::LineReader::new(raw_r, 1 << 20);
    let mut other_w = raw_w;

    // The call is polled by this test only: it sends its request now and looks at its reply
    // only at the end.
    let call = peer.request_raw("x", None);
    tokio::pin!(call);
    tokio::select! {
        biased;
        r = &mut call => panic!("no answer yet: {r:?}"),
        () = std::future::ready(()) => {}
    }
    let Some(acp_rpc::framing::Frame::Line(line)) = other.next_frame().await.unwrap() else { panic!("request") };
    let id = serde_json::from_slice::<Value>(line).unwrap()["id"].clone();
    // Two notifications, then the response (so it waits for both), then a line the reader
    // answers itself: once that answer is out, the response has reached the call.
    let input = format!(
        "{}\n{}\n{}\nnot json\n",
        json!({"jsonrpc":"2.0","method":"block"}),
        json!({"jsonrpc":"2.0","method":"never"}),
        json!({"jsonrpc":"2.0","id":id,"result":"done"}),
    );
    tokio::io::AsyncWriteExt::write_all(&mut other_w, input.as_bytes()).await.unwrap();
    let Some(acp_rpc::framing::Frame::Line(line)) = other.next_frame().await.unwrap() else { panic!("answer") };
    assert_eq!(serde_json::from_slice::<Value>(line).unwrap()["error"]["code"], json!(codes::PARSE_ERROR));
    next(&mut entered).await;

    // `Serve` goes while the first notification handler runs; then that handler finishes.
    stop.send(()).unwrap();
    serve.await.unwrap();
    release.send(()).unwrap();
    // Its task has ended (after recording the notification) once it let go of the handler.
    let t0 = Instant::now();
    while Arc::strong_count(&h) > 1 {
        assert!(t0.elapsed() < LIMIT, "the notification task did not end");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let result = tokio::time::timeout(LIMIT, call).await.expect("the caller is not held").expect("answered");
    assert_eq!(result.get(), r#""done""#);
}

// ---- 9. error codes -------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_9_error_codes_and_a_panicking_handler_answers_internal_error() {
    assert_eq!(
        [
            codes::PARSE_ERROR,
            codes::INVALID_REQUEST,
            codes::METHOD_NOT_FOUND,
            codes::INVALID_PARAMS,
            codes::INTERNAL_ERROR,
            codes::REQUEST_CANCELLED,
            codes::AUTH_REQUIRED,
            codes::RESOURCE_NOT_FOUND
        ],
        [-32700, -32600, -32601, -32602, -32603, -32800, -32000, -32002]
    );
    let constructed = [
        ErrorObject::parse_error(),
        ErrorObject::invalid_request("x"),
        ErrorObject::method_not_found("m"),
        ErrorObject::invalid_params_at("prompt[0].type", "unknown variant"),
        ErrorObject::internal_error("x"),
        ErrorObject::request_cancelled(),
        ErrorObject::auth_required(),
        ErrorObject::resource_not_found(Some("file:///a")),
    ];
    let (handler, _rx) = test_handler();
    let (mut raw, _peer, _task) = start(Connection::new(), handler);
    for (i, e) in constructed.iter().enumerate() {
        // The handler returns the error object it is given; it travels unchanged.
        raw.send_json(json!({"jsonrpc":"2.0","id":i,"method":"error","params":e})).await;
        let (answer, _) = raw.recv_until_id(json!(i)).await;
        assert_eq!(answer["error"], serde_json::to_value(e).unwrap());
    }
    assert_eq!(serde_json::to_value(&constructed[3]).unwrap()["data"], json!({"path":"prompt[0].type"}));
    // Params that do not decode: -32602 with the failing field's path.
    raw.send_json(json!({"jsonrpc":"2.0","id":"bad","method":"error","params":{"message":"m","code":"x"}})).await;
    let (answer, _) = raw.recv_until_id(json!("bad")).await;
    assert_eq!(answer["error"]["code"], json!(codes::INVALID_PARAMS));
    assert_eq!(answer["error"]["data"], json!({"path":"code"}), "{answer}");
    // Unknown method (the test handler's default): -32601.
    raw.send_json(json!({"jsonrpc":"2.0","id":"nf","method":"no/such"})).await;
    let (answer, _) = raw.recv_until_id(json!("nf")).await;
    assert_eq!(answer["error"]["code"], json!(codes::METHOD_NOT_FOUND));
    // A panic: -32603, and the connection goes on.
    for id in 0..3 {
        raw.send_json(json!({"jsonrpc":"2.0","id":format!("panic-{id}"),"method":"panic"})).await;
        let (answer, _) = raw.recv_until_id(json!(format!("panic-{id}"))).await;
        assert_eq!(answer["error"]["code"], json!(codes::INTERNAL_ERROR));
        assert!(!answer["error"]["message"].as_str().unwrap().contains("on purpose"), "panic text leaked");
    }
    assert!(raw.ping().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_9_peer_errors_reach_the_caller() {
    let (handler, _rx) = test_handler();
    let (mut other, peer, _task) = start(Connection::new(), handler);
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("fs/read_text_file", Some(&raw(r#"{"path":"/x"}"#))).await })
    };
    let req = other.recv().await;
    other
        .send_json(json!({"jsonrpc":"2.0","id":req["id"],"error":{"code":-32002,"message":"Resource not found","data":{"uri":"/x"}}}))
        .await;
    match tokio::time::timeout(LIMIT, call).await.unwrap().unwrap() {
        Err(Error::Rpc(e)) => {
            assert_eq!(e.code, codes::RESOURCE_NOT_FOUND);
            assert_eq!(e.data, Some(json!({"uri":"/x"})));
        }
        other => panic!("{other:?}"),
    }
    // A malformed answer fails the call with a protocol error rather than hanging it.
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("x", None).await })
    };
    let req = other.recv().await;
    other.send_json(json!({"jsonrpc":"2.0","id":req["id"],"result":1,"error":{"code":1,"message":"m"}})).await;
    let r = tokio::time::timeout(LIMIT, call).await.unwrap().unwrap();
    assert!(matches!(r, Err(Error::Protocol(_))), "{r:?}");
    // Typed results that do not decode: a decode error.
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request::<_, Vec<u8>>("x", &json!({})).await })
    };
    let req = other.recv().await;
    other.send_json(json!({"jsonrpc":"2.0","id":req["id"],"result":{"not":"a list"}})).await;
    let r = tokio::time::timeout(LIMIT, call).await.unwrap().unwrap();
    assert!(matches!(&r, Err(Error::Decode { path, .. }) if path.is_empty()), "{r:?}");
    // ... and a field deep inside names its path.
    let call = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request::<_, Vec<Vec<u8>>>("x", &json!({})).await })
    };
    let req = other.recv().await;
    other.send_json(json!({"jsonrpc":"2.0","id":req["id"],"result":[[1],[2,"three"]]})).await;
    let r = tokio::time::timeout(LIMIT, call).await.unwrap().unwrap();
    assert!(matches!(&r, Err(Error::Decode { path, .. }) if path == "[1][1]"), "{r:?}");
}

// ---- 10. extension methods, _meta -----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_10_extension_methods_reach_the_handler_unknown_ones_are_ignored_and_meta_is_untouched() {
    let (handler, mut rx) = test_handler();
    let (mut raw, _peer, _task) = start(Connection::new(), handler);
    // Odd spacing, key order, unicode escapes, big numbers: params travel byte for byte.
    let params = r#"{ "z": 1, "a" : [1, 2.50, 1e400], "_meta": {"traceparent":"00-ab-cd-01", "zed.dev/x": {"\u00e9": 123456789012345678901234567890}} }"#;
    let line = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"_ext/echo","params":{params}}}"#);
    raw.send(&line).await;
    let answer = raw.recv_line().await;
    assert_eq!(answer, format!(r#"{{"jsonrpc":"2.0","id":1,"result":{params}}}"#));

    // An unknown `_` notification: delivered to the handler (which may ignore it), never answered.
    let note = r#"{"jsonrpc":"2.0","method":"_zed.dev/file_opened","params":{"path":"/a","_meta":{ "x" :1}}}"#;
    raw.send(note).await;
    assert!(raw.ping().await.is_empty());
    assert_eq!(
        next(&mut rx.seen).await,
        ("_zed.dev/file_opened".to_owned(), Some(r#"{"path":"/a","_meta":{ "x" :1}}"#.to_owned()))
    );

    // The default handler answers unknown `_` requests -32601 and ignores notifications.
    let (mut raw, _peer, _task) = start(Connection::new(), ());
    raw.send(r#"{"jsonrpc":"2.0","method":"_unknown","params":{}}"#).await;
    raw.send(r#"{"jsonrpc":"2.0","id":5,"method":"_unknown/request","params":{}}"#).await;
    let answer = raw.recv().await;
    assert_eq!(answer["id"], json!(5));
    assert_eq!(answer["error"]["code"], json!(codes::METHOD_NOT_FOUND));
}

// ---- 11. wire tap (the span test is in observability.rs) -----------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_11_wire_tap_records_every_message_in_and_out_as_jsonl() {
    let tap = SharedBuf::default();
    let (handler, _rx) = test_handler();
    let (mut raw, peer, task) = start(Connection::new().wire_tap(tap.clone()), handler);
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}"#).await;
    raw.recv().await;
    raw.send("not json at all").await;
    raw.recv().await;
    peer.notify("_note", &json!({"b":2})).await.unwrap();
    raw.recv().await;
    raw.close_input();
    tokio::time::timeout(LIMIT, task).await.unwrap().unwrap().unwrap();

    let lines = tap.lines();
    assert_eq!(
        lines,
        vec![
            json!({"dir":"in","msg":{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}}),
            json!({"dir":"out","msg":{"jsonrpc":"2.0","id":1,"result":{"a":1}}}),
            json!({"dir":"in","invalid":"not json at all"}),
            json!({"dir":"out","msg":{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}}),
            json!({"dir":"out","msg":{"jsonrpc":"2.0","method":"_note","params":{"b":2}}}),
        ]
    );
}
