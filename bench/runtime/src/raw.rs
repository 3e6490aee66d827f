//! The ceiling: the same JSON-RPC lines with no runtime at all. The child encodes each
//! `session/update` with serde_json into a buffered stdout; the parent reads lines from the
//! pipe and decodes each into the typed notification. Blocking I/O, one thread per side.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use acp_types::{ContentBlock, ContentChunk, SessionId, SessionNotification, SessionUpdate, TextContent};
use serde::{Deserialize, Serialize};

use crate::common::{self, SESSION, TEXT};

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
