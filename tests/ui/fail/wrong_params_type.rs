use acp_rpc::acp_types::*;
use acp_rpc::acp_agent;

struct MyAgent;

#[acp_agent]
impl MyAgent {
    async fn initialize(&self, p: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(p.protocol_version))
    }
    // A reference: the params are passed by value.
    async fn authenticate(&self, _p: &AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    // Another method's params.
    async fn session_new(&self, _: PromptRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("s"))
    }
    async fn session_cancel(&self, _p: CancelNotification) -> Result<(), Error> {
        Ok(())
    }
    async fn session_prompt(&self, _p: NewSessionRequest) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    // Extension params are any `Deserialize` type, by value.
    #[ext("_vendor/echo")]
    async fn echo(&self, p: &str) -> Result<String, Error> {
        Ok(p.to_owned())
    }
}

fn main() {}
