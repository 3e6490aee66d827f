use acp_rpc::acp_types::*;
use acp_rpc::acp_agent;

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
    async fn session_cancel(&self, _p: CancelNotification) -> Result<(), Error> {
        Ok(())
    }
    async fn session_prompt(&self, _p: PromptRequest) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    #[ext("_vendor/a")]
    #[ext("_vendor/b")]
    async fn both(&self, p: serde_json::Value) -> Result<serde_json::Value, Error> {
        Ok(p)
    }
    #[ext("_vendor/c")]
    #[ext_notification("_vendor/c")]
    async fn request_and_notification(&self, p: serde_json::Value) -> Result<serde_json::Value, Error> {
        Ok(p)
    }
    #[ext("_vendor/d")]
    const D: u8 = 1;
}

fn main() {}
