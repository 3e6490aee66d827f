// auth/login and auth/logout come as a pair in v2; a v1 handler name is not a v2 handler.
use acp_rpc::acp_agent;
use acp_rpc::acp_types::v2::*;

struct MyAgent;

#[acp_agent(v2)]
impl MyAgent {
    async fn initialize(&self, _p: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("a", "1")))
    }
    async fn auth_login(&self, _p: LoginAuthRequest) -> Result<LoginAuthResponse, Error> {
        Ok(LoginAuthResponse::new())
    }
    async fn session_load(&self, _p: ResumeSessionRequest) -> Result<ResumeSessionResponse, Error> {
        Ok(ResumeSessionResponse::new())
    }
    async fn session_new(&self, _p: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("s"))
    }
    async fn session_list(&self, _p: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(vec![]))
    }
    async fn session_resume(&self, _p: ResumeSessionRequest) -> Result<ResumeSessionResponse, Error> {
        Ok(ResumeSessionResponse::new())
    }
    async fn session_close(&self, _p: CloseSessionRequest) -> Result<CloseSessionResponse, Error> {
        Ok(CloseSessionResponse::new())
    }
    async fn session_prompt(&self, _p: PromptRequest) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new("m1"))
    }
    async fn session_cancel(&self, _p: CancelSessionNotification) {}
}

fn main() {}
