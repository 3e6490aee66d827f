//! Test harness: a raw JSON-lines peer, a scriptable handler, a shared in-memory tap.
#![allow(dead_code)]

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use acp_rpc::framing::{Frame, LineReader};
use acp_rpc::transport::{PipeReader, PipeWriter, duplex};
use acp_rpc::{Connection, Error, ErrorObject, Handler, IncomingNotification, IncomingRequest, Peer, RawValue};
use serde_json::{Value, json};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Upper bound for anything that should happen "soon"; never used as synchronisation.
pub const LIMIT: Duration = Duration::from_secs(10);

pub fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).expect("valid JSON")
}

/// The other end of a connection, spoken to in raw JSON lines.
pub struct RawPeer {
    lines: LineReader<PipeReader>,
    pub writer: Option<PipeWriter>,
    pings: u64,
}

impl RawPeer {
    /// The raw side of a pipe whose other side a connection serves.
    pub fn new(reader: PipeReader, writer: PipeWriter) -> Self {
        RawPeer { lines: LineReader::new(reader, 1 << 30), writer: Some(writer), pings: 0 }
    }

    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        let w = self.writer.as_mut().expect("writer still open");
        w.write_all(bytes).await.expect("write");
        w.flush().await.expect("flush");
    }

    /// Sends one line (a newline is appended).
    pub async fn send(&mut self, line: &str) {
        let mut bytes = line.as_bytes().to_vec();
        bytes.push(b'\n');
        self.send_bytes(&bytes).await;
    }

    pub async fn send_json(&mut self, v: Value) {
        self.send(&v.to_string()).await;
    }

    /// The raw halves, for tests that read and write concurrently.
    pub fn into_parts(self) -> (LineReader<PipeReader>, PipeWriter) {
        (self.lines, self.writer.expect("writer still open"))
    }

    /// Closes our writing side: the connection sees end of input.
    pub fn close_input(&mut self) {
        self.writer = None;
    }

    /// The next line the connection wrote, raw.
    pub async fn recv_line(&mut self) -> String {
        self.try_recv_line(LIMIT).await.expect("a message within the time limit")
    }

    /// The next line, or `None` at end of output / after `limit`.
    pub async fn try_recv_line(&mut self, limit: Duration) -> Option<String> {
        match tokio::time::timeout(limit, self.lines.next_frame()).await {
            Ok(Ok(Some(Frame::Line(l)))) => Some(String::from_utf8(l.to_vec()).expect("UTF-8 output")),
            Ok(Ok(Some(Frame::Oversized { len }))) => panic!("oversized output line of {len} bytes"),
            Ok(Ok(None)) => None,
            Ok(Err(e)) => panic!("read error: {e}"),
            Err(_) => None,
        }
    }

    pub async fn recv(&mut self) -> Value {
        let line = self.recv_line().await;
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("output is not JSON ({e}): {line}"))
    }

    /// Sends a `ping` request (handled by [`TestHandler`]) and returns everything the
    /// connection wrote before the ping's answer. The reader answers bad input itself, before
    /// it reads the ping, so those answers (and silence) show up here deterministically;
    /// answers from handler tasks may race the ping's and must be awaited first.
    pub async fn ping(&mut self) -> Vec<Value> {
        self.pings += 1;
        let id = format!("ping-{}", self.pings);
        self.send_json(json!({"jsonrpc":"2.0","id":id,"method":"ping"})).await;
        let mut before = Vec::new();
        loop {
            let msg = self.recv().await;
            if msg["id"] == json!(id) {
                assert_eq!(msg["result"], json!("pong"), "ping answer: {msg}");
                return before;
            }
            before.push(msg);
        }
    }

    /// Reads until a message with `id` arrives; returns it (other messages are returned too).
    pub async fn recv_until_id(&mut self, id: Value) -> (Value, Vec<Value>) {
        let mut other = Vec::new();
        loop {
            let msg = self.recv().await;
            if msg.get("id") == Some(&id) && msg.get("method").is_none() {
                return (msg, other);
            }
            other.push(msg);
        }
    }
}

/// Keeps the panics tests cause on purpose (their message says "on purpose") out of the test
/// output; every other panic is reported as usual.
pub fn quiet_intentional_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("");
            if !message.contains("on purpose") {
                default(info);
            }
        }));
    });
}

/// Starts `handler` on a connection over an in-memory pipe; returns the raw other end, the
/// connection's peer handle and the serve task.
pub fn start<H: Handler>(conn: Connection, handler: H) -> (RawPeer, Peer, JoinHandle<Result<(), Error>>) {
    quiet_intentional_panics();
    let ((conn_r, conn_w), (raw_r, raw_w)) = duplex(1 << 20);
    let (peer, serve) = conn.serve(conn_r, conn_w, handler);
    let task = tokio::spawn(serve);
    let raw = RawPeer { lines: LineReader::new(raw_r, 1 << 30), writer: Some(raw_w), pings: 0 };
    (raw, peer, task)
}

pub type ServeTask = JoinHandle<Result<(), Error>>;

/// Two connections talking to each other.
pub fn pair<A: Handler, B: Handler>(a: (Connection, A), b: (Connection, B)) -> (Peer, ServeTask, Peer, ServeTask) {
    let ((ar, aw), (br, bw)) = duplex(1 << 20);
    let (pa, sa) = a.0.serve(ar, aw, a.1);
    let (pb, sb) = b.0.serve(br, bw, b.1);
    (pa, tokio::spawn(sa), pb, tokio::spawn(sb))
}

/// A notification as the handler saw it: method and raw params.
pub type Seen = (String, Option<String>);

/// A handler scripted by method name:
///
/// - `ping` → `"pong"`; `echo`, `_echo`, `_ext/echo` → the params (or `null`)
/// - `panic` → panics; `error` → the error object given as params
/// - `wait_cancel` → waits for its token, then fails (`-32603`)
/// - `wait_cancel_ok` → waits for its token, then returns `{"partial":true}`
/// - `hang` → never returns, ignores cancellation (tests the grace period)
/// - `work` → yields `params.spins` times, then returns the params; fails (-32603) if cancelled
/// - anything else → -32601
///
/// Every notification is forwarded to `seen`; every started request's method to `started`.
pub struct TestHandler {
    pub seen: mpsc::UnboundedSender<Seen>,
    pub started: mpsc::UnboundedSender<String>,
}

pub struct TestHandlerRx {
    pub seen: mpsc::UnboundedReceiver<Seen>,
    pub started: mpsc::UnboundedReceiver<String>,
}

pub fn test_handler() -> (TestHandler, TestHandlerRx) {
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let (started_tx, started) = mpsc::unbounded_channel();
    (TestHandler { seen: seen_tx, started: started_tx }, TestHandlerRx { seen, started })
}

impl Handler for TestHandler {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let _ = self.started.send(req.method.to_string());
        match &*req.method {
            "ping" => Ok(raw("\"pong\"")),
            "echo" | "_echo" | "_ext/echo" => Ok(req.params.unwrap_or_else(|| raw("null"))),
            "panic" => panic!("handler panic on purpose"),
            "error" => Err(req.parse_params::<ErrorObject>()?),
            "wait_cancel" => {
                req.cancel.cancelled().await;
                Err(ErrorObject::internal_error("aborted"))
            }
            "wait_cancel_ok" => {
                req.cancel.cancelled().await;
                Ok(raw(r#"{"partial":true}"#))
            }
            "hang" => std::future::pending().await,
            "work" => {
                let params: Value = req.parse_params()?;
                for _ in 0..params["spins"].as_u64().unwrap_or(0) {
                    if req.cancel.is_cancelled() {
                        return Err(ErrorObject::internal_error("cancelled"));
                    }
                    tokio::task::yield_now().await;
                }
                Ok(req.params.unwrap_or_else(|| raw("null")))
            }
            other => Err(ErrorObject::method_not_found(other)),
        }
    }

    async fn handle_notification(&self, n: IncomingNotification) {
        let _ = self.seen.send((n.method.to_string(), n.params.map(|p| p.get().to_owned())));
    }
}

/// An `AsyncWrite` into a shared buffer (for the wire tap).
#[derive(Clone, Default)]
pub struct SharedBuf(pub Arc<Mutex<Vec<u8>>>);

impl SharedBuf {
    pub fn lines(&self) -> Vec<Value> {
        let buf = self.0.lock().unwrap();
        String::from_utf8(buf.clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("tap line is not JSON ({e}): {l}")))
            .collect()
    }
}

impl AsyncWrite for SharedBuf {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A small seeded PRNG (xorshift64*), so "random" tests are reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Waits (bounded by [`LIMIT`]) for the next item of a channel.
pub async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(LIMIT, rx.recv()).await.expect("in time").expect("channel open")
}
