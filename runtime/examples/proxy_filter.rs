//! A proxy that filters tool calls: permission requests for tool calls of a denied kind
//! (`--deny execute,delete`, the default) are rejected on the user's behalf, without reaching
//! the editor; every other message passes through untouched. Run it with the conductor:
//!
//! `acp-conductor agent "cargo run -q -p acp-rpc --example proxy_filter -- --deny read" "cargo run -q -p acp-rpc --example agent"`

#[path = "common/proxies.rs"]
#[allow(dead_code)] // each example uses one of the two proxies
mod proxies;

use acp_rpc::proxy::serve_proxy;
use proxies::FilterTools;

const USAGE: &str = "usage: proxy_filter [--deny KIND[,KIND...]]  (tool kinds: read, edit, delete, move, search, execute, think, fetch, other)";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut denied = vec!["execute".to_owned(), "delete".to_owned()];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--deny", Some(kinds)) => denied = kinds.split(',').map(str::trim).map(str::to_owned).collect(),
            _ => {
                eprintln!("{USAGE}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    let (stdin, stdout) = acp_rpc::transport::stdio();
    match serve_proxy(FilterTools::new(denied), stdin, stdout).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxy_filter: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
