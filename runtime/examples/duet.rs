//! The demo agent and the demo client in one binary: the client spawns this very executable
//! with `--as-agent` and prints the prompt turn as a transcript. The README's run command:
//!
//! `cargo run -p acp-runtime --example duet [-- --root DIR] [--policy allow|reject|ask] [--prompt TEXT] [-v]`

#[path = "common/agent.rs"]
mod demo_agent;
#[path = "common/client.rs"]
mod demo_client;

use demo_client::Parsed;

const USAGE: &str = "\
usage: duet [--root DIR] [--policy allow|reject|ask] [--prompt TEXT] [-v]

Runs the demo client against the demo agent (this binary, re-run with --as-agent).
  --root DIR      the session's cwd; file reads and writes stay inside it (default: .)
  --policy P      permission requests: ask on the terminal (default), allow, or reject;
                  `ask` allows when stdin is not a terminal
  --prompt TEXT   the prompt (default: \"Please read README.md and tell me how it starts.\")
  -v, --verbose   show the agent's stderr";

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("--as-agent") {
        let code = if demo_agent::serve().await.is_ok() { 0 } else { 1 };
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
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("error: cannot find this executable to run the agent: {e}");
            std::process::exit(1);
        }
    };
    let mut command = std::process::Command::new(exe);
    command.arg("--as-agent");
    let code = demo_client::run(options, command).await;
    std::process::exit(code);
}

fn exit_usage(message: &str) -> ! {
    eprintln!("error: {message}\n\n{USAGE}");
    std::process::exit(2);
}
