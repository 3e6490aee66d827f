use acp_rpc::acp_types::*;
use acp_rpc::acp_agent;

struct MyAgent;

#[acp_agent]
impl MyAgent {
    async fn initialize(&mut self, p: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(p.protocol_version))
    }
    async fn sesion_new(&self, _p: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("s"))
    }
}

fn main() {}
