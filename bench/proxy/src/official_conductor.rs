//! The official conductor's command line (`agent-client-protocol-conductor` 5.0.0), as its
//! own binary's `main` is.
use agent_client_protocol_conductor::ConductorArgs;
use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    ConductorArgs::parse().main().await
}
