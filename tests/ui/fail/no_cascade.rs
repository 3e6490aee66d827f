// A block with errors still implements the traits: where the type is used as an agent or a
// client, the macro's errors are the only ones.
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
    async fn session_new(&self, _p: PromptRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("s"))
    }
    async fn session_cancel(&self, _p: CancelNotification) -> Result<(), Error> {
        Ok(())
    }
    async fn session_prompt(&self, _p: PromptRequest) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
}

struct MyClient;

// Missing the baseline `session_update`.
#[acp_client]
impl MyClient {
    async fn session_request_permission(
        &self,
        _params: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
    }
}

#[tokio::main]
async fn main() -> Result<(), acp_rpc::Error> {
    let _ = acp_rpc::client::with_capabilities::<MyClient>(InitializeRequest::new(ProtocolVersion(1)));
    let _ = acp_rpc::client::spawn_agent(MyClient, std::process::Command::new("agent"));
    acp_rpc::agent::serve_stdio(MyAgent).await
}
