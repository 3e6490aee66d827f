//! The 13-handler agent on acp-rpc's `#[acp_agent]`, served on stdio.
//! Keep the handler bodies in step with ../../official/src/main.rs.
use acp_rpc::acp_types::*;
use acp_rpc::{AgentContext, acp_agent};

struct BenchAgent;

#[acp_agent]
impl BenchAgent {
    // Capabilities (loadSession, sessionCapabilities.{list,delete,resume,close}, auth.logout)
    // are advertised by the macro from the handlers below.
    async fn initialize(&self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(params.protocol_version))
    }
    async fn authenticate(&self, _params: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn logout(&self, _params: LogoutRequest) -> Result<LogoutResponse, Error> {
        Ok(LogoutResponse::new())
    }
    async fn session_new(&self, _params: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("sess_1"))
    }
    async fn session_load(&self, _params: LoadSessionRequest) -> Result<LoadSessionResponse, Error> {
        Ok(LoadSessionResponse::new())
    }
    async fn session_list(&self, _params: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(Vec::new()))
    }
    async fn session_delete(&self, _params: DeleteSessionRequest) -> Result<DeleteSessionResponse, Error> {
        Ok(DeleteSessionResponse::new())
    }
    async fn session_resume(&self, _params: ResumeSessionRequest) -> Result<ResumeSessionResponse, Error> {
        Ok(ResumeSessionResponse::new())
    }
    async fn session_close(&self, _params: CloseSessionRequest) -> Result<CloseSessionResponse, Error> {
        Ok(CloseSessionResponse::new())
    }
    async fn session_set_mode(&self, _params: SetSessionModeRequest) -> Result<SetSessionModeResponse, Error> {
        Ok(SetSessionModeResponse::new())
    }
    async fn session_set_config_option(
        &self,
        _params: SetSessionConfigOptionRequest,
    ) -> Result<SetSessionConfigOptionResponse, Error> {
        Ok(SetSessionConfigOptionResponse::new(Vec::new()))
    }
    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        for text in ["Hello", ", ", "world"] {
            let chunk = SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(text))));
            cx.client().session_update(SessionNotification::new(params.session_id.clone(), chunk)).await?;
        }
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _params: CancelNotification) -> Result<(), Error> {
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), acp_rpc::Error> {
    acp_rpc::agent::serve_stdio(BenchAgent).await
}
