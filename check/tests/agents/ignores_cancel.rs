//! A test agent for acp-check (see raw_agent.rs): breaks one rule on purpose (`ignore_cancel: true`).

#[path = "raw_agent.rs"]
mod raw_agent;

fn main() {
    raw_agent::run(raw_agent::Flaws { ignore_cancel: true, ..Default::default() });
}
