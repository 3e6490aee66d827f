// `#[cfg]` on handlers: a configured-out optional handler is neither handled nor advertised;
// two handlers of one name under complementary `cfg`s are one handler.
use acp_rpc::acp_types::*;
use acp_rpc::macro_support::Advertise;
use acp_rpc::{AgentContext, acp_agent};

struct MyAgent;

#[acp_agent]
impl MyAgent {
    async fn initialize(&self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(params.protocol_version))
    }
    async fn authenticate(&self, _params: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _params: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("sess_1"))
    }
    async fn session_prompt(&self, _params: PromptRequest) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _params: CancelNotification) -> Result<(), Error> {
        Ok(())
    }
    #[cfg(any())]
    async fn session_load(&self, _params: LoadSessionRequest) -> Result<LoadSessionResponse, Error> {
        Ok(LoadSessionResponse::new())
    }
    #[cfg(unix)]
    async fn session_list(&self, _params: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(vec![]))
    }
    #[cfg(not(unix))]
    async fn session_list(&self, _params: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        Ok(ListSessionsResponse::new(vec![]))
    }
    #[cfg_attr(any(), cfg(any()))]
    async fn session_delete(&self, _params: DeleteSessionRequest) -> Result<DeleteSessionResponse, Error> {
        Ok(DeleteSessionResponse::new())
    }
    #[cfg_attr(all(), cfg(any()))]
    async fn session_close(&self, _params: CloseSessionRequest) -> Result<CloseSessionResponse, Error> {
        Ok(CloseSessionResponse::new())
    }
    // Two extension functions for one name, never both compiled in.
    #[cfg(unix)]
    #[ext("_example/os")]
    async fn os(&self, _params: serde_json::Value) -> Result<&'static str, Error> {
        Ok("unix")
    }
    #[cfg(not(unix))]
    #[ext("_example/os")]
    async fn os(&self, _params: serde_json::Value) -> Result<&'static str, Error> {
        Ok("other")
    }
}

fn main() {
    fn is_agent<A: Agent<AgentContext>>(_: &A) {}
    is_agent(&MyAgent);
    let advertised: Vec<String> = MyAgent::CAPABILITIES.iter().map(|(path, _)| path.join(".")).collect();
    assert_eq!(
        advertised,
        ["agentCapabilities.sessionCapabilities.list", "agentCapabilities.sessionCapabilities.delete"],
        "session_load and session_close are configured out"
    );
}
