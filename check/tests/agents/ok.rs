//! A test agent for acp-check (see raw_agent.rs): well-behaved.

#[path = "raw_agent.rs"]
mod raw_agent;

fn main() {
    raw_agent::run(raw_agent::Flaws::default());
}
