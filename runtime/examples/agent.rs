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

const USAGE: &str = "usage: agent [--v1-only | --v2-only | --bridged] [--listen ADDR]";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut flag = None;
    let mut listen = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => match args.next() {
                Some(addr) => listen = Some(addr),
                None => return usage("--listen needs an address, e.g. 127.0.0.1:8080"),
            },
            _ if flag.is_none() => flag = Some(arg),
            _ => return usage(&format!("unexpected argument {arg:?}")),
        }
    }
    let versions = match demo_agent::Versions::from_flag(flag.as_deref()) {
        Ok(versions) => versions,
        Err(message) => return usage(&message),
    };
    if let Some(addr) = listen {
        return listen_on(versions, &addr).await;
    }
    match demo_agent::serve(versions).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::FAILURE,
    }
}

#[cfg(feature = "http-server")]
async fn listen_on(versions: demo_agent::Versions, addr: &str) -> std::process::ExitCode {
    match demo_agent::listen(versions, addr).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: listening on {addr}: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "http-server"))]
async fn listen_on(_: demo_agent::Versions, _: &str) -> std::process::ExitCode {
    usage("--listen: built without the `http-server` feature")
}

fn usage(message: &str) -> std::process::ExitCode {
    eprintln!("error: {message}\n{USAGE}");
    std::process::ExitCode::from(2)
}
