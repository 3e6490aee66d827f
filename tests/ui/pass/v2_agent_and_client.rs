// A v2 agent with the whole baseline and the auth pair, and a v2 client, under the macros.
use acp_rpc::acp_types::v2::*;
use acp_rpc::v2::AgentContext;
use acp_rpc::{acp_agent, acp_client};

struct MyAgent;

#[acp_agent(v2)]
impl MyAgent {
    async fn initialize(&self, _p: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V2, Implementation::new("a", "1")))
    }
    async fn auth_login(&self, _p: LoginAuthRequest) -> Result<LoginAuthResponse, Error> {
        Ok(LoginAuthResponse::new())
    }
    async fn auth_logout(&self, _p: LogoutAuthRequest) -> Result<LogoutAuthResponse, Error> {
        Ok(LogoutAuthResponse::new())
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
    async fn session_prompt(&self, _p: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        if let Some(turn) = cx.turn() {
            turn.say("hi").await?;
        }
        Ok(PromptResponse::new("m1"))
    }
    async fn session_cancel(&self, _p: CancelSessionNotification) {}
}

struct MyClient;

#[acp_client(v2)]
impl MyClient {
    async fn session_request_permission(&self, _p: RequestPermissionRequest) -> Result<RequestPermissionResponse, Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled(CancelledPermissionOutcome::new())))
    }
    async fn session_update(&self, _p: UpdateSessionNotification) {}
}

fn main() {
    let _ = acp_rpc::v2::AgentHandler::new(MyAgent);
    let _ = acp_rpc::v2::ClientHandler::new(MyClient);
}
