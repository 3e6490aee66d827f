//! Rough throughput of small notifications: over the in-memory duplex, and over real pipes
//! through `cat` (which echoes our notifications back to our own handler).
//!
//! `cargo run --release -p acp-rpc --example throughput [N]`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use acp_rpc::transport::{ChildProcess, SpawnOptions, duplex};
use acp_rpc::{Connection, Handler, IncomingNotification, Peer};
use serde_json::json;
use tokio::sync::Notify;

struct Counter {
    seen: AtomicU64,
    target: u64,
    done: Notify,
}

impl Handler for Counter {
    async fn handle_notification(&self, _n: IncomingNotification) {
        if self.seen.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            self.done.notify_one();
        }
    }
}

async fn blast(label: &str, sender: &Peer, counter: &Counter, n: u64) {
    let params = json!({"sessionId":"sess_1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hello"}}});
    let t0 = Instant::now();
    let send = async {
        for _ in 0..n {
            sender.notify("session/update", &params).await.expect("send");
        }
    };
    tokio::join!(send, counter.done.notified());
    let secs = t0.elapsed().as_secs_f64();
    println!("{label}: {n} notifications in {secs:.3} s = {:.0}/s", n as f64 / secs);
}

#[tokio::main]
async fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);

    let counter = Arc::new(Counter { seen: AtomicU64::new(0), target: n, done: Notify::new() });
    let ((ar, aw), (br, bw)) = duplex(1 << 20);
    let (a, sa) = Connection::new().serve(ar, aw, ());
    let (_b, sb) = Connection::new().serve(br, bw, counter.clone());
    tokio::spawn(sa);
    tokio::spawn(sb);
    blast("in-memory duplex", &a, &counter, n).await;

    let counter = Arc::new(Counter { seen: AtomicU64::new(0), target: n, done: Notify::new() });
    let mut child = ChildProcess::spawn(std::process::Command::new("cat"), SpawnOptions::default()).expect("cat");
    let (r, w) = child.take_transport().expect("transport");
    let (peer, serve) = Connection::new().serve(r, w, counter.clone());
    tokio::spawn(serve);
    blast("pipes through cat (both directions)", &peer, &counter, n).await;
}
