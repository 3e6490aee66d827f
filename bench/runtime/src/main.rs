//! Runtime benchmarks: acp-rpc (+ acp-types) against the official `agent-client-protocol`
//! 5.2.0 SDK. Each subcommand does one run and prints one tab-separated result line; `run.sh`
//! alternates the implementations, repeats, and `report` turns the lines into a markdown table.
//!
//! ```text
//! acp-rpc-bench pipe   --impl ours|official|raw --n N    # client: spawns `agent`
//! acp-rpc-bench agent  --impl ours|official|raw          # child (stdio)
//! acp-rpc-bench rtt    --impl ours|official|official-channel|raw --n N   # BENCH_CALLER=task: caller on a worker
//! acp-rpc-bench cancel --impl ours-ignore|ours-ignore-grace0|ours-typed-ignore|ours-coop|official --n K
//! acp-rpc-bench report FILE
//!
//! # protocol v2 (acp-rpc's `v2` layer vs the SDK's `Agent.v2()` / `Client.v2()`)
//! acp-rpc-bench pipe2  --impl ours|ours-raw-client|official|raw --n N   # spawns `agent2`
//! acp-rpc-bench agent2 --impl ours|official|raw          # child (stdio)
//! acp-rpc-bench rtt2   --impl ours|official|raw --n N    # `session/list`
//! ```

mod common;
mod official;
mod official_v2;
mod ours;
mod ours_v2;
mod raw;
mod report;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cmd = args.first().map(String::as_str).unwrap_or("");
    let opt =
        |name: &str| -> Option<String> { args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned()) };
    let imp = opt("--impl").unwrap_or_default();
    let n: u64 = opt("--n").and_then(|s| s.parse().ok()).unwrap_or(100_000);

    match (cmd, imp.as_str()) {
        ("report", _) => {
            let Some(path) = args.get(1) else {
                eprintln!("usage: report FILE");
                return ExitCode::FAILURE;
            };
            report::report(path);
        }
        ("agent", "raw") => raw::agent(n),
        ("pipe", "raw") => raw::client(n),
        ("agent", "ours") => common::rt().block_on(ours::agent(n)),
        ("pipe", "ours") => common::rt().block_on(ours::pipe_client(n)),
        ("rtt", "ours") => common::run(ours::rtt(n)),
        ("rtt", "raw") => common::run(raw::rtt(n)),
        ("cancel", "ours-ignore") => common::rt().block_on(ours::cancel(n, ours::CancelMode::Ignore, None)),
        ("cancel", "ours-ignore-grace0") => {
            common::rt().block_on(ours::cancel(n, ours::CancelMode::Ignore, Some(std::time::Duration::ZERO)))
        }
        ("cancel", "ours-typed-ignore") => common::rt().block_on(ours::cancel(n, ours::CancelMode::TypedIgnore, None)),
        ("cancel", "ours-coop") => common::rt().block_on(ours::cancel(n, ours::CancelMode::Cooperative, None)),
        ("agent", "official") => common::rt().block_on(official::agent(n)),
        ("pipe", "official") => common::rt().block_on(official::pipe_client(n)),
        ("rtt", "official") => common::run(official::rtt(n, false)),
        ("rtt", "official-channel") => common::run(official::rtt(n, true)),
        ("cancel", "official") => common::rt().block_on(official::cancel(n)),
        ("agent2", "raw") => raw::agent_v2(n),
        ("pipe2", "raw") => raw::client_v2(n),
        ("agent2", "ours") => common::rt().block_on(ours_v2::agent(n)),
        ("pipe2", "ours") => common::rt().block_on(ours_v2::pipe_client(n)),
        ("pipe2", "ours-raw-client") => common::rt().block_on(ours_v2::pipe_raw_client(n)),
        ("agent2", "official") => common::rt().block_on(official_v2::agent(n)),
        ("pipe2", "official") => common::rt().block_on(official_v2::pipe_client(n)),
        ("rtt2", "ours") => common::run(ours_v2::rtt(n)),
        ("rtt2", "official") => common::run(official_v2::rtt(n)),
        ("rtt2", "raw") => common::run(raw::rtt_v2(n)),
        _ => {
            eprintln!("unknown command/impl: {cmd} --impl {imp}\n(see the source's header for usage)");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
