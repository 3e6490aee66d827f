//! The ceiling: the same JSON-RPC lines with no runtime at all. The child encodes each
//! `session/update` with serde_json into a buffered stdout; the parent reads lines from the
//! pipe and decodes each into the typed notification. Blocking I/O, one thread per side.
//!
//! The same for protocol v2 (`pipe2`): v2 `agent_message_chunk`s, each with its `messageId`.
//!
//! The floor of `rtt` (and `rtt2`): a round trip over the same in-memory transport with no
//! runtime either. A spawned task reads each request line, decodes it, and writes the encoded
//! response; the caller writes the request and reads the response line itself, so each round
//! trip is only the two task hand-offs any in-memory peer needs, plus serde_json.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use acp_types::v2::{self, ListSessionsRequest, ListSessionsResponse, SessionInfo};
use acp_types::{ContentBlock, ContentChunk, SessionId, SessionNotification, SessionUpdate, TextContent};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::common::{self, MESSAGE_ID, SESSION, TEXT};
use crate::official::{Ping, Pong};

#[derive(Serialize)]
struct CallOut<'a, P> {
    jsonrpc: &'static str,
    id: u64,
    method: &'static str,
    params: &'a P,
}

#[derive(Deserialize)]
struct CallIn<P> {
    id: u64,
    params: P,
}

#[derive(Serialize)]
struct ReplyOut<R> {
    jsonrpc: &'static str,
    id: u64,
    result: R,
}

#[derive(Deserialize)]
struct ReplyIn<R> {
    id: u64,
    result: R,
}

/// `n` sequential `_echo` round trips over a tokio duplex (64 KiB each way, split into halves,
/// as in `ours::rtt` and `official::rtt`) with no runtime: see the module docs.
pub async fn rtt(n: u64) {
    round_trips(n, "rtt", "_echo", Ping { message: "ping".into() }, |p: Ping| Pong { echo: p.message }).await;
}

/// The same for protocol v2's `session/list` with acp-types' v2 messages (as `ours_v2::rtt`
/// and `official_v2::rtt`: one session in the answer).
pub async fn rtt_v2(n: u64) {
    round_trips(n, "rtt2", "session/list", ListSessionsRequest::new(), |_: ListSessionsRequest| {
        ListSessionsResponse::new(vec![SessionInfo::new(SESSION, "/")])
    })
    .await;
}

async fn round_trips<P, R>(n: u64, kind: &str, method: &'static str, params: P, answer: fn(P) -> R)
where
    P: Serialize + DeserializeOwned + Send + 'static,
    R: Serialize + DeserializeOwned + Send + 'static,
{
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (ar, mut aw) = tokio::io::split(a);
    let (br, mut bw) = tokio::io::split(b);
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(br);
        let (mut line, mut out) = (Vec::new(), Vec::new());
        while lines.read_until(b'\n', &mut line).await.expect("read request") > 0 {
            let call: CallIn<P> = serde_json::from_slice(&line).expect("decode request");
            let response = ReplyOut { jsonrpc: "2.0", id: call.id, result: answer(call.params) };
            serde_json::to_writer(&mut out, &response).expect("encode response");
            out.push(b'\n');
            bw.write_all(&out).await.expect("write response");
            line.clear();
            out.clear();
        }
    });
    let mut lines = tokio::io::BufReader::new(ar);
    let (mut line, mut out) = (Vec::new(), Vec::new());
    let mut round_trip = async |id: u64| {
        serde_json::to_writer(&mut out, &CallOut { jsonrpc: "2.0", id, method, params: &params })
            .expect("encode request");
        out.push(b'\n');
        aw.write_all(&out).await.expect("write request");
        out.clear();
        lines.read_until(b'\n', &mut line).await.expect("read response");
        let reply: ReplyIn<R> = serde_json::from_slice(&line).expect("decode response");
        line.clear();
        assert_eq!(reply.id, id);
        reply.result
    };
    for id in 0..common::RTT_WARMUP {
        round_trip(id).await;
    }
    let mut samples = Vec::with_capacity(n as usize);
    for id in 0..n {
        let t = Instant::now();
        let result = round_trip(common::RTT_WARMUP + id).await;
        samples.push(t.elapsed());
        std::hint::black_box(result);
    }
    common::print_latency(kind, "raw", samples);
}

#[derive(Serialize)]
struct Outgoing<'a, P> {
    jsonrpc: &'static str,
    method: &'a str,
    params: P,
}

#[derive(Deserialize)]
struct Incoming<'a, P> {
    #[serde(borrow, default)]
    method: Option<&'a str>,
    #[serde(default = "none")]
    params: Option<P>,
    #[serde(default)]
    id: Option<u64>,
}

fn none<P>() -> Option<P> {
    None
}

/// The v1 ceiling's agent: `session/update`s with a v1 `agent_message_chunk`.
pub fn agent(stream: u64) {
    let session = SessionId::from(SESSION);
    agent_with(stream, || {
        SessionNotification::new(
            session.clone(),
            SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(TEXT)))),
        )
    });
}

/// The v2 ceiling's agent: v2 `agent_message_chunk`s, with the `messageId` of every chunk.
pub fn agent_v2(stream: u64) {
    let session = v2::SessionId::from(SESSION);
    let message = v2::MessageId::from(MESSAGE_ID);
    agent_with(stream, || {
        v2::UpdateSessionNotification::new(
            session.clone(),
            v2::SessionUpdate::AgentMessageChunk(v2::ContentChunk::new(message.clone(), v2::TextContent::new(TEXT))),
        )
    });
}

/// Waits for the client's go line, writes `stream` typed `session/update`s and a last line
/// that ends the turn, then stays alive (and measurable) until the client closes stdin.
fn agent_with<P: Serialize>(stream: u64, update: impl Fn() -> P) {
    let mut input = BufReader::new(std::io::stdin().lock());
    let mut go = String::new();
    input.read_line(&mut go).expect("go line");
    let mut out = BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    for _ in 0..stream {
        let msg = Outgoing { jsonrpc: "2.0", method: "session/update", params: update() };
        serde_json::to_writer(&mut out, &msg).expect("encode");
        out.write_all(b"\n").expect("write");
    }
    out.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"stopReason\":\"end_turn\"}}\n").expect("write");
    out.flush().expect("flush");
    let _ = std::io::copy(&mut input, &mut std::io::sink());
}

pub fn client(n: u64) {
    client_with::<SessionNotification>(n, "pipe", "agent");
}

pub fn client_v2(n: u64) {
    client_with::<v2::UpdateSessionNotification>(n, "pipe2", "agent2");
}

/// Spawns `<agent_cmd> --impl raw`, then reads and decodes every line into `P` until the last.
fn client_with<P: DeserializeOwned>(n: u64, kind: &str, agent_cmd: &str) {
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .args([agent_cmd, "--impl", "raw", "--n", &n.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::with_capacity(64 * 1024, child.stdout.take().expect("stdout"));
    let mut line = Vec::with_capacity(256);
    let mut seen = 0u64;

    let t0 = Instant::now();
    stdin.write_all(b"go\n").expect("go");
    stdin.flush().expect("flush");
    loop {
        line.clear();
        if lines.read_until(b'\n', &mut line).expect("read") == 0 {
            panic!("agent ended early");
        }
        let msg: Incoming<'_, P> = serde_json::from_slice(&line).expect("decode");
        if msg.id.is_some() {
            break;
        }
        assert_eq!(msg.method, Some("session/update"));
        std::hint::black_box(msg.params.expect("params"));
        seen += 1;
    }
    let elapsed = t0.elapsed();
    assert_eq!(seen, n);
    let agent_kib = common::vm_hwm_kib(&child.id().to_string()).unwrap_or(0);
    let client_kib = common::self_hwm_kib();
    drop(stdin);
    let _ = child.wait();
    common::print_pipe(kind, "raw", n, elapsed, client_kib, agent_kib);
}
