use acp_runtime::acp_types::*;
use acp_runtime::acp_agent;

struct MyAgent;

struct Marker;

#[acp_agent]
impl Agent for Marker {}

fn main() {}
