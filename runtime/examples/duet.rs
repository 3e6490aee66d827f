//! The demo agent and the demo client in one binary: the client spawns this very executable
//! with `--as-agent` and prints the prompt turn as a transcript. The README's run command:
//!
//! `cargo run -p acp-rpc --example duet [-- --root DIR] [--policy allow|reject|ask] [--prompt TEXT] [--protocol 1|2] [-v]`
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
#[path = "common/proxies.rs"]
mod proxies;

use demo_client::{Agent, Parsed};

const USAGE: &str = "\
usage: duet [--root DIR] [--policy allow|reject|ask] [--prompt TEXT] [--protocol 1|2] [--url URL]
            [--proxy context|filter]... [-v]

Runs the demo client against the demo agent (this binary, re-run with --as-agent).
  --root DIR      the session's cwd; file reads and writes stay inside it (default: .)
  --policy P      permission requests: ask on the terminal (default), allow, or reject;
                  `ask` allows when stdin is not a terminal
  --prompt TEXT   the prompt (default: \"Please read README.md and tell me how it starts.\")
  --protocol N    the protocol version to ask for: 1 (default) or 2 (the v2 turn, with its
                  state updates; an agent answering 1 gets the v1 turn)
  --url URL       connect to a remote agent (http://… or ws://…) instead of running this one
  --proxy P       put an example proxy in front of the agent, through the conductor (repeat
                  for a chain): `context` adds a line of context to the prompt, `filter`
                  rejects permission requests for `read` tool calls on the user's behalf
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
    if args.peek().map(String::as_str) == Some("--as-proxy") {
        std::process::exit(serve_example_proxy(args.nth(1).as_deref()).await);
    }
    if args.peek().map(String::as_str) == Some("--as-chain") {
        args.next();
        std::process::exit(run_chain(args.collect()).await);
    }
    // `--proxy NAME` is duet's own; the rest is the demo client's.
    let mut proxies = Vec::new();
    let mut rest = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--proxy" => match args.next() {
                Some(name) if PROXIES.contains(&name.as_str()) => proxies.push(name),
                _ => exit_usage("--proxy is `context` or `filter`"),
            },
            _ => rest.push(arg),
        }
    }
    let options = match demo_client::parse(rest) {
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
    if options.url.is_some() && !proxies.is_empty() {
        exit_usage("--proxy runs a local chain; it does not go with --url");
    }
    let agent = Agent::of(&options, || {
        let mut command = std::process::Command::new(exe.unwrap_or_default());
        if proxies.is_empty() {
            command.arg("--as-agent");
        } else {
            command.arg("--as-chain").args(&proxies);
        }
        command
    });
    let code = demo_client::run(options, agent).await;
    std::process::exit(code);
}

const PROXIES: [&str; 2] = ["context", "filter"];

/// `--as-proxy NAME`: one of the example proxies on stdio.
async fn serve_example_proxy(name: Option<&str>) -> i32 {
    let (stdin, stdout) = acp_rpc::transport::stdio();
    let served = match name {
        Some("context") => {
            let proxy = proxies::AddContext { context: proxies::DEFAULT_CONTEXT.to_owned() };
            acp_rpc::proxy::serve_proxy(proxy, stdin, stdout).await
        }
        Some("filter") => {
            let proxy = proxies::FilterTools::new(vec!["read".to_owned()]);
            acp_rpc::proxy::serve_proxy(proxy, stdin, stdout).await
        }
        _ => exit_usage("--as-proxy is `context` or `filter`"),
    };
    i32::from(served.is_err())
}

/// `--as-chain NAME...`: the conductor, with the named proxies in front of the demo agent
/// (all of them this executable again).
async fn run_chain(names: Vec<String>) -> i32 {
    use acp_rpc::proxy::conductor::{ComponentCommand, Conductor, run_commands};
    let exe = match std::env::current_exe() {
        Ok(exe) => exe.to_string_lossy().into_owned(),
        Err(e) => {
            eprintln!("error: cannot find this executable to run the chain: {e}");
            return 1;
        }
    };
    let component = |args: Vec<String>| ComponentCommand {
        name: args.join(" "),
        program: exe.clone(),
        args,
        env: Default::default(),
    };
    let mut commands: Vec<_> = names.into_iter().map(|name| component(vec!["--as-proxy".into(), name])).collect();
    commands.push(component(vec!["--as-agent".into()]));
    let (stdin, stdout) = acp_rpc::transport::stdio();
    let kill_grace = std::time::Duration::from_secs(2);
    match run_commands(Conductor::new(), stdin, stdout, &commands, kill_grace).await {
        Ok(exit) if exit.is_clean() => 0,
        Ok(exit) => {
            eprintln!("error: the chain ended: {:?}", exit.end);
            1
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

fn exit_usage(message: &str) -> ! {
    eprintln!("error: {message}\n\n{USAGE}");
    std::process::exit(2);
}
