// The params, context and result types may be written as paths (the last segment is what
// the macro checks), the result as any path ending in `Result`.
use acp_rpc::acp_agent;
use acp_rpc::acp_types;

struct MyAgent;

#[acp_agent]
impl MyAgent {
    async fn initialize(
        &self,
        p: acp_types::InitializeRequest,
    ) -> std::result::Result<acp_types::InitializeResponse, acp_types::Error> {
        Ok(acp_types::InitializeResponse::new(p.protocol_version))
    }
    async fn authenticate(
        &self,
        _p: acp_rpc::acp_types::AuthenticateRequest,
        _cx: acp_rpc::AgentContext,
    ) -> Result<acp_types::AuthenticateResponse, acp_types::Error> {
        Ok(acp_types::AuthenticateResponse::new())
    }
    async fn session_new(&self, _p: (acp_types::NewSessionRequest)) -> Result<acp_types::NewSessionResponse, acp_types::Error> {
        Ok(acp_types::NewSessionResponse::new("s"))
    }
    async fn session_cancel(&self, _p: ::acp_rpc::acp_types::CancelNotification) {}
    async fn session_prompt(
        &self,
        _p: acp_types::PromptRequest,
    ) -> ::core::result::Result<acp_types::PromptResponse, acp_types::Error> {
        Ok(acp_types::PromptResponse::new(acp_types::StopReason::EndTurn))
    }
}

fn main() {
    fn is_agent<A: acp_types::Agent<acp_rpc::AgentContext>>(_: &A) {}
    is_agent(&MyAgent);
}
