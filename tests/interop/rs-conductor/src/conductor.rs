//! The official conductor's command line (`ConductorArgs`, as the crate's own binary runs it).

use agent_client_protocol_conductor::ConductorArgs;
use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match ConductorArgs::parse().main().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            std::process::ExitCode::FAILURE
        }
    }
}
