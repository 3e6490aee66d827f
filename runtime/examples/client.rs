//! An ACP client: spawns any agent command (or connects to a remote agent by URL), runs one
//! prompt turn and prints a live transcript (see `common/client.rs`).
//!
//! `cargo run -p acp-rpc --example client -- [--root DIR] [--policy allow|reject|ask] [--prompt TEXT] [--protocol 1|2] [-v] -- <agent command...>`
//!
//! `cargo run -p acp-rpc --example client -- [options] --url http://HOST:PORT/acp` (or `ws://…`): the
//! same turn against a remote agent, over Streamable HTTP or WebSocket (`acp_rpc::http::client`).

#[path = "common/client.rs"]
mod demo_client;

use demo_client::{Agent, Parsed};

const USAGE: &str = "\
usage: client [--root DIR] [--policy allow|reject|ask] [--prompt TEXT] [--protocol 1|2] [-v] -- <agent command...>
       client [--root DIR] [--policy allow|reject|ask] [--prompt TEXT] [--protocol 1|2] --url URL

  --root DIR      the session's cwd; file reads and writes stay inside it (default: .)
  --policy P      permission requests: ask on the terminal (default), allow, or reject;
                  `ask` allows when stdin is not a terminal
  --prompt TEXT   the prompt (default: \"Please read README.md and tell me how it starts.\")
  --protocol N    the protocol version to ask for: 1 (default) or 2 (goes on with v1 when the
                  agent answers 1)
  --url URL       a remote agent instead of a command: http://HOST:PORT/acp (Streamable
                  HTTP) or ws://HOST:PORT/acp (WebSocket)
  -v, --verbose   show the agent's stderr";

#[tokio::main]
async fn main() {
    let options = match demo_client::parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(options)) if !options.agent.is_empty() || options.url.is_some() => options,
        Ok(Parsed::Run(_)) => exit_usage("missing the agent command after `--` (or --url)"),
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            return;
        }
        Err(message) => exit_usage(&message),
    };
    let agent = Agent::of(&options, || {
        let mut command = std::process::Command::new(&options.agent[0]);
        command.args(&options.agent[1..]);
        command
    });
    let code = demo_client::run(options, agent).await;
    // Not returning: a thread may still be blocked reading the terminal.
    std::process::exit(code);
}

fn exit_usage(message: &str) -> ! {
    eprintln!("error: {message}\n\n{USAGE}");
    std::process::exit(2);
}
