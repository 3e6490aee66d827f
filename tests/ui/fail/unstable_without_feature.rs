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
    async fn session_fork(&self, _p: ForkSessionRequest) -> Result<ForkSessionResponse, Error> {
        Ok(ForkSessionResponse::new("s2"))
    }
    #[cfg(any())]
    async fn session_archive(&self, _p: ArchiveSessionRequest) -> Result<ArchiveSessionResponse, Error> {
        unreachable!("configured out: no error")
    }
}

fn main() {}
