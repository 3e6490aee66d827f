use acp_rpc::acp_types::*;
use acp_rpc::acp_agent;

struct MyAgent;

struct NotDeserialize;

#[acp_agent]
impl MyAgent {
    async fn initialize(&self, p: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(p.protocol_version))
    }
    async fn authenticate(&self, _p: AuthenticateRequest) -> Result<AuthenticateResponse, String> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _p: NewSessionRequest) -> Result<NewSessionResponse, std::io::Error> {
        Ok(NewSessionResponse::new("s"))
    }
    async fn session_cancel(&self, _p: CancelNotification) -> Result<(), Error> {
        Ok(())
    }
    async fn session_prompt(&self, _p: PromptRequest) -> std::io::Result<PromptResponse> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    #[ext("_vendor/get")]
    async fn get(&self, _p: NotDeserialize) -> Result<String, String> {
        Ok(String::new())
    }
    #[ext_notification("_vendor/log")]
    async fn log(&self, _p: NotDeserialize) {}
}

fn main() {}
