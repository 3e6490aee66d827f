//! A test agent for acp-check (see raw_agent.rs): breaks one rule on purpose (`lie_about_load_session: true`).

#[path = "raw_agent.rs"]
mod raw_agent;

fn main() {
    raw_agent::run(raw_agent::Flaws { lie_about_load_session: true, ..Default::default() });
}
