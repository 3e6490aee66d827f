// A client method handled by an agent, and an agent method handled by a client: each error
// names the block the handler belongs in (not a "did you mean" to an unrelated name).
use acp_rpc::acp_types::*;
use acp_rpc::{acp_agent, acp_client};

struct MyAgent;

#[acp_agent]
impl MyAgent {
    async fn initialize(&self, p: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(p.protocol_version))
    }
    async fn authenticate(&self, _p: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _p: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("s"))
    }
    async fn session_cancel(&self, _p: CancelNotification) {}
    async fn session_prompt(&self, _p: PromptRequest) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_update(&self, _: SessionNotification) {}
}

struct MyClient;

#[acp_client]
impl MyClient {
    async fn session_request_permission(&self, _p: RequestPermissionRequest) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
    }
    async fn session_update(&self, _p: SessionNotification) {}
    async fn session_prompt(&self, _p: PromptRequest) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
}

fn main() {}
