//! A proxy that adds context to every prompt: the text given with `--context` goes in front of
//! each `session/prompt`'s content, and everything else passes through untouched. Run it in a
//! chain with the conductor:
//!
//! `acp-conductor agent "cargo run -q -p acp-rpc --example proxy_context -- --context 'Be brief.'" "cargo run -q -p acp-rpc --example agent"`
//!
//! and drive the chain with the `client` example as with any agent:
//! `cargo run -p acp-rpc --example client -- -- cargo run -q -p acp-conductor -- agent "..." "..."`.

#[path = "common/proxies.rs"]
#[allow(dead_code)] // each example uses one of the two proxies
mod proxies;

use acp_rpc::proxy::serve_proxy;
use proxies::{AddContext, DEFAULT_CONTEXT};

const USAGE: &str = "usage: proxy_context [--context TEXT]";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut context = DEFAULT_CONTEXT.to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--context", Some(text)) => context = text,
            _ => {
                eprintln!("{USAGE}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    // ANCHOR: serve_proxy
    let (stdin, stdout) = acp_rpc::transport::stdio();
    match serve_proxy(AddContext { context }, stdin, stdout).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxy_context: {e}");
            std::process::ExitCode::FAILURE
        }
    }
    // ANCHOR_END: serve_proxy
}
