//! The driver: starts one chain (the bench agent alone, or a conductor with `--proxies` pass-
//! through proxies in front of it), speaks to it as an editor would over its stdio, and prints
//! one JSON line of results.
//!
//! `proxy-bench pipe --impl direct|ours|official --proxies K --n N`: one prompt that streams N
//! `session/update`s; messages per second from the prompt's send to its answer.
//! `proxy-bench rtt --impl ... --proxies K --n N`: N `_bench/ping` requests one after the
//! other; p50 and p99 round trip in microseconds.
//! `--agent runtime|raw`: the agent at the end, an `acp-rpc` agent with typed updates (the
//! default) or a bare loop printing JSON lines (the cost of the chain alone shows more).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{ChildStdin, ChildStdout, Command};

struct Args {
    mode: String,
    agent: String,
    implementation: String,
    proxies: usize,
    n: u64,
}

fn args() -> Args {
    let mut it = std::env::args().skip(1);
    let mode = it.next().expect("pipe|rtt");
    let mut a = Args { mode, agent: "runtime".into(), implementation: "ours".into(), proxies: 0, n: 10_000 };
    while let Some(flag) = it.next() {
        let value = it.next().expect("a value");
        match flag.as_str() {
            "--impl" => a.implementation = value,
            "--proxies" => a.proxies = value.parse().unwrap(),
            "--n" => a.n = value.parse().unwrap(),
            "--agent" => a.agent = value,
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

fn sibling(name: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let dir: PathBuf = exe.parent().unwrap().to_path_buf();
    dir.join(name).to_string_lossy().into_owned()
}

fn chain(a: &Args) -> Command {
    let agent = match a.agent.as_str() {
        "raw" => sibling("bench-agent"),
        "runtime" => sibling("bench-runtime-agent"),
        other => panic!("unknown agent {other}"),
    };
    let (conductor, pass) = match a.implementation.as_str() {
        "direct" => return Command::new(agent),
        "ours" => (sibling("ours-conductor"), sibling("ours-pass")),
        "official" => (sibling("official-conductor"), sibling("official-pass")),
        other => panic!("unknown impl {other}"),
    };
    let mut command = Command::new(conductor);
    command.arg("agent");
    for _ in 0..a.proxies {
        command.arg(&pass);
    }
    command.arg(agent);
    command
}

struct Editor {
    out: BufWriter<ChildStdin>,
    lines: tokio::io::Lines<BufReader<ChildStdout>>,
}

impl Editor {
    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.out.write_all(line.as_bytes()).await.unwrap();
        self.out.flush().await.unwrap();
    }

    /// Reads until the answer to `id`, counting the notifications before it.
    async fn until(&mut self, id: i64) -> u64 {
        let mut notifications = 0;
        let needle = format!(r#""id":{id},"#);
        let needle_end = format!(r#""id":{id}}}"#);
        loop {
            let line = self.lines.next_line().await.unwrap().expect("the chain ended early");
            if line.contains(r#""method":"session/update""#) {
                notifications += 1;
            } else if !line.contains(r#""method""#) && (line.contains(&needle) || line.contains(&needle_end)) {
                assert!(!line.contains(r#""error""#), "error answer: {line}");
                return notifications;
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let a = args();
    let mut child = chain(&a)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut editor = Editor {
        out: BufWriter::new(child.stdin.take().unwrap()),
        lines: BufReader::with_capacity(1 << 16, child.stdout.take().unwrap()).lines(),
    };
    editor.send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}})).await;
    editor.until(1).await;
    editor.send(json!({"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[]}})).await;
    editor.until(2).await;
    let result = match a.mode.as_str() {
        "pipe" => {
            let started = Instant::now();
            editor.send(json!({"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"bench","prompt":[{"type":"text","text":a.n.to_string()}]}})).await;
            let seen = editor.until(3).await;
            let elapsed = started.elapsed();
            assert_eq!(seen, a.n, "updates lost");
            json!({"msgs_per_s": (a.n as f64 / elapsed.as_secs_f64()).round()})
        }
        "rtt" => {
            let mut micros = Vec::with_capacity(a.n as usize);
            for i in 0..a.n as i64 {
                let id = 10 + i;
                let started = Instant::now();
                editor.send(json!({"jsonrpc":"2.0","id":id,"method":"_bench/ping","params":{}})).await;
                editor.until(id).await;
                micros.push(started.elapsed().as_secs_f64() * 1e6);
            }
            micros.sort_by(f64::total_cmp);
            let at = |q: f64| micros[((micros.len() as f64 - 1.0) * q).round() as usize];
            json!({"p50_us": (at(0.5) * 10.0).round() / 10.0, "p99_us": (at(0.99) * 10.0).round() / 10.0})
        }
        other => panic!("unknown mode {other}"),
    };
    drop(editor);
    let _ = child.wait().await;
    println!(
        "{}",
        json!({"mode": a.mode, "agent": a.agent, "impl": a.implementation, "proxies": a.proxies, "n": a.n, "result": result})
    );
}
