use acp_rpc::acp_types::*;
use acp_rpc::acp_agent;

struct MyAgent;

struct Marker;

#[acp_agent]
impl Agent for Marker {}

fn main() {}
