//! The `sacp-conductor` command line (`ConductorArgs`, as the crate's own binary runs it).

use clap::Parser;
use sacp_conductor::ConductorArgs;

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
