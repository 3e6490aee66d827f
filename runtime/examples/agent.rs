//! An ACP agent on stdio, written with `#[acp_agent]` (and `#[acp_agent(v2)]`): a scripted
//! prompt turn with a plan, streamed message chunks, a `read` tool call behind a permission
//! request, and the file's first lines (see `common/agent.rs`, and `common/agent_v2.rs` for
//! the protocol v2 side).
//!
//! `cargo run -p acp-runtime --example agent [-- --v1-only | --v2-only]` (speaks ACP on
//! stdin/stdout; logs on stderr). Built with the `unstable_protocol_v2` feature (as
//! `cargo run --example` builds it), one executable serves v1 and v2 clients: each
//! connection's first `initialize` picks the version. Drive it with the `client` example:
//! `cargo run -p acp-runtime --example client -- [--protocol 2] -- cargo run -q -p acp-runtime --example agent`

#[path = "common/agent.rs"]
mod demo_agent;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let flag = std::env::args().nth(1);
    let versions = match demo_agent::Versions::from_flag(flag.as_deref()) {
        Ok(versions) => versions,
        Err(message) => {
            eprintln!("error: {message}\nusage: agent [--v1-only | --v2-only]");
            return std::process::ExitCode::from(2);
        }
    };
    match demo_agent::serve(versions).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::FAILURE,
    }
}
