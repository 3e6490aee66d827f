//! The ceiling: the same JSON-RPC lines with no runtime at all. The child encodes each
//! `session/update` with serde_json into a buffered stdout; the parent reads lines from the
//! pipe and decodes each into the typed notification. Blocking I/O, one thread per side.
//!
//! The floor of `rtt`: a round trip over the same in-memory transport with no runtime either.
//! A spawned task reads each request line, decodes it, and writes the encoded response; the
//! caller writes the request and reads the response line itself, so each round trip is only
//! the two task hand-offs any in-memory peer needs, plus serde_json.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use acp_types::{ContentBlock, ContentChunk, SessionId, SessionNotification, SessionUpdate, TextContent};
use serde::{Deserialize, Serialize};

use crate::common::{self, SESSION, TEXT};
use crate::official::{Ping, Pong};

#[derive(Serialize)]
struct EchoRequest<'a> {
    jsonrpc: &'static str,
    id: u64,
    method: &'static str,
    params: &'a Ping,
}

#[derive(Deserialize)]
struct EchoCall {
    id: u64,
    params: Ping,
}

#[derive(Serialize)]
struct EchoResponse {
    jsonrpc: &'static str,
    id: u64,
    result: Pong,
}

#[derive(Deserialize)]
struct EchoAnswer {
    id: u64,
    result: Pong,
}

/// `n` sequential `_echo` round trips over a tokio duplex (64 KiB each way, split into halves,
/// as in `ours::rtt` and `official::rtt`) with no runtime: see the module docs.
pub async fn rtt(n: u64) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (ar, mut aw) = tokio::io::split(a);
    let (br, mut bw) = tokio::io::split(b);
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(br);
        let (mut line, mut out) = (Vec::new(), Vec::new());
        while lines.read_until(b'\n', &mut line).await.expect("read request") > 0 {
            let call: EchoCall = serde_json::from_slice(&line).expect("decode request");
            let response = EchoResponse { jsonrpc: "2.0", id: call.id, result: Pong { echo: call.params.message } };
            serde_json::to_writer(&mut out, &response).expect("encode response");
            out.push(b'\n');
            bw.write_all(&out).await.expect("write response");
            line.clear();
            out.clear();
        }
    });
    let mut lines = tokio::io::BufReader::new(ar);
    let (mut line, mut out) = (Vec::new(), Vec::new());
    let ping = Ping { message: "ping".into() };
    let mut round_trip = async |id: u64| {
        serde_json::to_writer(&mut out, &EchoRequest { jsonrpc: "2.0", id, method: "_echo", params: &ping })
            .expect("encode request");
        out.push(b'\n');
        aw.write_all(&out).await.expect("write request");
        out.clear();
        lines.read_until(b'\n', &mut line).await.expect("read response");
        let answer: EchoAnswer = serde_json::from_slice(&line).expect("decode response");
        line.clear();
        assert_eq!(answer.id, id);
        answer.result
    };
    for id in 0..common::RTT_WARMUP {
        round_trip(id).await;
    }
    let mut samples = Vec::with_capacity(n as usize);
    for id in 0..n {
        let t = Instant::now();
        let pong = round_trip(common::RTT_WARMUP + id).await;
        samples.push(t.elapsed());
        std::hint::black_box(pong);
    }
    common::print_latency("rtt", "raw", samples);
}

#[derive(Serialize)]
struct Outgoing<'a> {
    jsonrpc: &'static str,
    method: &'a str,
    params: SessionNotification,
}

#[derive(Deserialize)]
struct Incoming<'a> {
    #[serde(borrow, default)]
    method: Option<&'a str>,
    #[serde(default)]
    params: Option<SessionNotification>,
    #[serde(default)]
    id: Option<u64>,
}

pub fn agent(stream: u64) {
    let mut input = BufReader::new(std::io::stdin().lock());
    let mut go = String::new();
    input.read_line(&mut go).expect("go line");
    let session = SessionId::from(SESSION);
    let mut out = BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    for _ in 0..stream {
        let msg = Outgoing {
            jsonrpc: "2.0",
            method: "session/update",
            params: SessionNotification::new(
                session.clone(),
                SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(TEXT)))),
            ),
        };
        serde_json::to_writer(&mut out, &msg).expect("encode");
        out.write_all(b"\n").expect("write");
    }
    out.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"stopReason\":\"end_turn\"}}\n").expect("write");
    out.flush().expect("flush");
    // Stay alive (and measurable) until the parent closes our stdin.
    let _ = std::io::copy(&mut input, &mut std::io::sink());
}

pub fn client(n: u64) {
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .args(["agent", "--impl", "raw", "--n", &n.to_string()])
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
        let msg: Incoming<'_> = serde_json::from_slice(&line).expect("decode");
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
    common::print_pipe("raw", n, elapsed, client_kib, agent_kib);
}
