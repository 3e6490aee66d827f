// An agent with every baseline handler, an optional one, a context and an extension method.
use acp_rpc::acp_types::*;
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
    async fn session_load(&self, _params: LoadSessionRequest) -> Result<LoadSessionResponse, Error> {
        Ok(LoadSessionResponse::new())
    }
    async fn session_prompt(&self, _params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let _ = cx.session_id();
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _params: CancelNotification) -> Result<(), Error> {
        Ok(())
    }
    #[ext("_example/echo")]
    async fn echo(&self, params: serde_json::Value) -> Result<serde_json::Value, Error> {
        Ok(params)
    }
}

fn main() {
    fn is_agent<A: Agent<AgentContext>>(_: &A) {}
    is_agent(&MyAgent);
}
