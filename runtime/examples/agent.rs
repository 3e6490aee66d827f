//! An ACP agent on stdio, written with `#[acp_agent]` (and `#[acp_agent(v2)]`): a scripted
//! prompt turn with a plan, streamed message chunks, a `read` tool call behind a permission
//! request, and the file's first lines (see `common/agent.rs`, and `common/agent_v2.rs` for
//! the protocol v2 side).
//!
//! `cargo run -p acp-rpc --example agent [-- --v1-only | --v2-only | --bridged]` (speaks ACP on
//! stdin/stdout; logs on stderr). Built with the `unstable_protocol_v2` feature (as
//! `cargo run --example` builds it), one executable serves v1 and v2 clients: each
//! connection's first `initialize` picks the version. `--bridged` serves v2 clients with the v1
//! agent through `acp_rpc::v2_bridge` instead of the v2 one (feature `unstable_v2_bridge`).
//! Drive it with the `client` example:
//! `cargo run -p acp-rpc --example client -- [--protocol 2] -- cargo run -q -p acp-rpc --example agent`
//!
//! `--listen ADDR` (e.g. `127.0.0.1:8080`; needs the `http-server` feature, on for
//! `cargo run --example`) serves remote clients over Streamable HTTP and WebSocket on
//! `http://ADDR/acp` instead of stdio.

#[path = "common/agent.rs"]
mod demo_agent;

const USAGE: &str = "\
usage: agent [--v1-only | --v2-only | --bridged] [--listen ADDR [--token NAME=TOKEN]... [--allow-origin ORIGIN]... [--max-connections N]]

  (no flag)           serve protocol v1 and v2 on stdin/stdout (each connection's initialize picks)
  --v1-only           protocol v1 only
  --v2-only           protocol v2 only
  --bridged           v2 clients served by the v1 agent through the v2 bridge
  --listen ADDR       serve remote clients on http://ADDR/acp (Streamable HTTP and WebSocket)
  --token NAME=TOKEN  with --listen: require `Authorization: Bearer TOKEN`; NAME owns the sessions
                      its connections create (repeat for more clients). Without any, every
                      connection owns its sessions alone. (A demo: arguments show in the
                      process list; a real host reads its tokens from a file or a secret store)
  --allow-origin O    with --listen: let a browser page from origin O call (`*` for any)
  --max-connections N with --listen: open ACP connections at most (default 1024)
  -h, --help          this text
";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut flag = None;
    let mut listen = None;
    let mut options = demo_agent::ListenOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |what: &str| args.next().ok_or_else(|| format!("{arg} needs {what}"));
        match arg.as_str() {
            "-h" | "--help" => {
                print!("{USAGE}");
                return std::process::ExitCode::SUCCESS;
            }
            "--listen" => match value("an address, e.g. 127.0.0.1:8080") {
                Ok(addr) => listen = Some(addr),
                Err(message) => return usage(&message),
            },
            "--token" => {
                match value("NAME=TOKEN").map(|v| v.split_once('=').map(|(n, t)| (n.to_owned(), t.to_owned()))) {
                    Ok(Some((name, token))) if !name.is_empty() && !token.is_empty() => {
                        options.tokens.push((token, name))
                    }
                    Ok(_) => return usage("--token takes NAME=TOKEN, both non-empty"),
                    Err(message) => return usage(&message),
                }
            }
            "--allow-origin" => match value("an origin, e.g. https://app.example") {
                Ok(origin) => options.allowed_origins.push(origin),
                Err(message) => return usage(&message),
            },
            "--max-connections" => match value("a number").map(|v| v.parse::<usize>()) {
                Ok(Ok(n)) if n > 0 => options.max_connections = Some(n),
                Ok(_) => return usage("--max-connections takes a positive number"),
                Err(message) => return usage(&message),
            },
            // The version flag; `Versions::from_flag` names what it does not know.
            _ if flag.is_none() => flag = Some(arg),
            _ => return usage(&format!("unexpected argument {arg:?}")),
        }
    }
    let versions = match demo_agent::Versions::from_flag(flag.as_deref()) {
        Ok(versions) => versions,
        Err(message) => return usage(&message),
    };
    let remote_only =
        !options.tokens.is_empty() || !options.allowed_origins.is_empty() || options.max_connections.is_some();
    if let Some(addr) = listen {
        return listen_on(versions, &addr, options).await;
    }
    if remote_only {
        return usage("--token, --allow-origin and --max-connections go with --listen");
    }
    match demo_agent::serve(versions).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::FAILURE,
    }
}

#[cfg(feature = "http-server")]
async fn listen_on(
    versions: demo_agent::Versions,
    addr: &str,
    options: demo_agent::ListenOptions,
) -> std::process::ExitCode {
    match demo_agent::listen(versions, addr, options).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: listening on {addr}: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "http-server"))]
async fn listen_on(_: demo_agent::Versions, _: &str, _: demo_agent::ListenOptions) -> std::process::ExitCode {
    usage("--listen: built without the `http-server` feature")
}

fn usage(message: &str) -> std::process::ExitCode {
    eprintln!("error: {message}\n\n{USAGE}");
    std::process::ExitCode::from(2)
}
