// A v2 agent must handle the v2 baseline: the session lifecycle comes whole.
use acp_rpc::acp_agent;
use acp_rpc::acp_types::v2::*;

struct MyAgent;

#[acp_agent(v2)]
impl MyAgent {
    async fn initialize(&self, _p: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("a", "1")))
    }
    async fn session_new(&self, _p: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("s"))
    }
    async fn session_prompt(&self, _p: PromptRequest) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new("m1"))
    }
    async fn session_cancel(&self, _p: CancelSessionNotification) {}
}

fn main() {}
