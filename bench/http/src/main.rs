//! Remote-transport benchmarks (issue 13): acp-rpc's HTTP/WebSocket server against the
//! official Rust SDK's (`agent-client-protocol-http` 5.0.0 `AcpHttpServer`) and, for
//! throughput, the official TypeScript SDK's (`AcpServer`, `ts/server.mjs`). Each subcommand
//! does one run and prints tab-separated result lines; `run.sh` starts the servers, alternates
//! the implementations, repeats, and `report` turns the lines into markdown.
//!
//! ```text
//! acp-http-bench server --impl ours|official [--max-sockets 1000000]   # prints `LISTENING <port>`, serves 127.0.0.1
//! acp-http-bench throughput --client ours|official|raw --url URL --n N --label SERVER [--pid SERVER_PID]
//! acp-http-bench load --url ws://127.0.0.1:PORT/acp --pid PID --n 10000 --streamers 1000
//!                     [--probes 20] [--samples 2000] [--pause-us 50000,0] [--per-prompt 100] [--sources 4] --label SERVER
//! acp-http-bench slow --url ws://127.0.0.1:PORT/acp [--silent 4096] [--slowloris 1000] [--clients 100] --label SERVER
//! acp-http-bench report FILE
//! ```
//!
//! Every server runs the same agent (`agents.rs`): `session/prompt` whose text is `"N"` or
//! `"N P"` streams N `agent_message_chunk` updates (P µs apart) and ends the turn.

mod agents;
mod common;
mod load;
mod raw_sse;
mod report;
mod slow;
mod throughput;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cmd = args.first().map(String::as_str).unwrap_or("");
    let opt =
        |name: &str| -> Option<String> { args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned()) };
    let num = |name: &str, default: u64| -> u64 { opt(name).and_then(|s| s.parse().ok()).unwrap_or(default) };
    let imp = opt("--impl").unwrap_or_default();
    let label = opt("--label").unwrap_or_default();
    let url = opt("--url").unwrap_or_default();

    match (cmd, imp.as_str()) {
        ("report", _) => {
            let Some(path) = args.get(1) else {
                eprintln!("usage: report FILE");
                return ExitCode::FAILURE;
            };
            report::report(path);
        }
        // The slow-client run passes the default (4096): the 10k test needs more.
        ("server", "ours") => {
            common::rt().block_on(agents::serve_ours(num("--port", 0) as u16, num("--max-sockets", 1_000_000) as usize))
        }
        ("server", "official") => common::rt().block_on(agents::serve_official(num("--port", 0) as u16)),
        ("throughput", _) => {
            let client = opt("--client").unwrap_or_else(|| "ours".into());
            let pid = opt("--pid");
            let run = throughput::Run { url: &url, n: num("--n", 100_000), label: &label, server_pid: pid.as_deref() };
            match client.as_str() {
                "ours" => common::rt().block_on(throughput::ours(run)),
                "official" => common::rt().block_on(throughput::official(run)),
                // One thread: no hand-off between threads for each frame it reads.
                "raw" => tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime")
                    .block_on(throughput::raw(run)),
                other => {
                    eprintln!("unknown client {other}");
                    return ExitCode::FAILURE;
                }
            }
        }
        ("load", _) => {
            let Some(pid) = opt("--pid") else {
                eprintln!("load needs --pid (the server's process id)");
                return ExitCode::FAILURE;
            };
            let plan = load::Plan {
                url,
                pid,
                label,
                n: num("--n", 10_000) as usize,
                streamers: num("--streamers", 1_000) as usize,
                probes: num("--probes", 20) as usize,
                samples: num("--samples", 2_000) as usize,
                pauses: opt("--pause-us")
                    .unwrap_or_else(|| "0".into())
                    .split(',')
                    .filter_map(|p| p.trim().parse().ok())
                    .collect(),
                per_prompt: num("--per-prompt", 100),
                sources: num("--sources", 4).clamp(1, 250) as u8,
            };
            if let Err(error) = load::run(plan) {
                eprintln!("load: {error}");
                return ExitCode::FAILURE;
            }
        }
        ("slow", _) => {
            let plan = slow::Plan {
                url,
                label,
                silent: num("--silent", 4096) as usize,
                slowloris: num("--slowloris", 1000) as usize,
                clients: num("--clients", 100) as usize,
            };
            if let Err(error) = common::rt().block_on(slow::run(plan)) {
                eprintln!("slow: {error}");
                return ExitCode::FAILURE;
            }
        }
        _ => {
            eprintln!("unknown command/impl: {cmd} --impl {imp}\n(see the source's header for usage)");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
