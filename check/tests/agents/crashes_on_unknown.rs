//! A test agent for acp-check (see raw_agent.rs): breaks one rule on purpose (`crash_on_unknown_method: true`).

#[path = "raw_agent.rs"]
mod raw_agent;

fn main() {
    raw_agent::run(raw_agent::Flaws { crash_on_unknown_method: true, ..Default::default() });
}
