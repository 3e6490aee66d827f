//! A protocol v2 test agent for acp-check (see raw_v2_agent.rs) with the flaws named as
//! arguments, e.g. `acp-check-agent-v2 reject-batches` (see `Flaws::from_args`); none for a
//! well-behaved one.

#[path = "raw_v2_agent.rs"]
mod raw_v2_agent;

fn main() {
    raw_v2_agent::run(raw_v2_agent::Flaws::from_args());
}
