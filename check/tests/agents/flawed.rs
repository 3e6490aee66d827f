//! A test agent for acp-check (see raw_agent.rs) with the flaws named as arguments, e.g.
//! `acp-check-agent-flawed requires-auth` (see `Flaws::from_args`).

#[path = "raw_agent.rs"]
mod raw_agent;

fn main() {
    raw_agent::run(raw_agent::Flaws::from_args());
}
