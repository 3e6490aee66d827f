//! The demo agent and the demo client in one binary: the client spawns this very executable
//! with `--as-agent` and prints the prompt turn as a transcript. The README's run command:
//!
//! `cargo run -p acp-runtime --example duet [-- --root DIR] [--policy allow|reject|ask] [--prompt TEXT] [--protocol 1|2] [-v]`
//!
//! The agent serves protocol v1 and v2 from the one executable; `--protocol 2` has the client
//! ask for v2 and shows the v2 turn (needs the `unstable_protocol_v2` feature, which
//! `cargo run --example` turns on).
//!
//! `--url http://HOST:PORT/acp` (or `ws://…`) runs the client half only, against the agent
//! served there (e.g. this demo agent behind an ACP HTTP server) instead of spawning it.

#[path = "common/agent.rs"]
mod demo_agent;
#[path = "common/client.rs"]
mod demo_client;

use demo_client::{Agent, Parsed};

const USAGE: &str = "\
usage: duet [--root DIR] [--policy allow|reject|ask] [--prompt TEXT] [--protocol 1|2] [--url URL] [-v]

Runs the demo client against the demo agent (this binary, re-run with --as-agent).
  --root DIR      the session's cwd; file reads and writes stay inside it (default: .)
  --policy P      permission requests: ask on the terminal (default), allow, or reject;
                  `ask` allows when stdin is not a terminal
  --prompt TEXT   the prompt (default: \"Please read README.md and tell me how it starts.\")
  --protocol N    the protocol version to ask for: 1 (default) or 2 (the v2 turn, with its
                  state updates; an agent answering 1 gets the v1 turn)
  --url URL       connect to a remote agent (http://… or ws://…) instead of running this one
  -v, --verbose   show the agent's stderr";

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("--as-agent") {
        // `--as-agent [--v1-only | --v2-only]`: the agent alone, as the `agent` example runs it.
        let code = match demo_agent::Versions::from_flag(args.nth(1).as_deref()) {
            Ok(versions) => i32::from(demo_agent::serve(versions).await.is_err()),
            Err(message) => exit_usage(&message),
        };
        std::process::exit(code);
    }
    let options = match demo_client::parse(args) {
        Ok(Parsed::Run(options)) if options.agent.is_empty() => options,
        Ok(Parsed::Run(_)) => exit_usage("duet runs its own agent; use the `client` example for another one"),
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            return;
        }
        Err(message) => exit_usage(&message),
    };
    let exe = if options.url.is_some() {
        None
    } else {
        match std::env::current_exe() {
            Ok(exe) => Some(exe),
            Err(e) => {
                eprintln!("error: cannot find this executable to run the agent: {e}");
                std::process::exit(1);
            }
        }
    };
    let agent = Agent::of(&options, || {
        let mut command = std::process::Command::new(exe.unwrap_or_default());
        command.arg("--as-agent");
        command
    });
    let code = demo_client::run(options, agent).await;
    std::process::exit(code);
}

fn exit_usage(message: &str) -> ! {
    eprintln!("error: {message}\n\n{USAGE}");
    std::process::exit(2);
}
