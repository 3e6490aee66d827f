//! An ACP agent on stdio, written with `#[acp_agent]`: a scripted prompt turn with a plan,
//! streamed message chunks, a `read` tool call behind a permission request, and a file read
//! through the client (see `common/agent.rs`).
//!
//! `cargo run -p acp-runtime --example agent` (speaks ACP on stdin/stdout; logs on stderr).
//! Drive it with the `client` example:
//! `cargo run -p acp-runtime --example client -- -- cargo run -q -p acp-runtime --example agent`

#[path = "common/agent.rs"]
mod demo_agent;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match demo_agent::serve().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::FAILURE,
    }
}
