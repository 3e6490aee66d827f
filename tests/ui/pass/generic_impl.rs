// A generic impl block, with bounds in both places, and `self: &Self`.
use std::fmt::Display;

use acp_rpc::acp_types::*;
use acp_rpc::{AgentContext, acp_agent};

struct MyAgent<T, U> {
    name: T,
    store: U,
}

#[acp_agent]
impl<T: Display + Send + Sync + 'static, U> MyAgent<T, U>
where
    U: AsRef<str> + Send + Sync + 'static,
{
    async fn initialize(self: &Self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        let info = Implementation::new(self.name.to_string(), self.store.as_ref());
        Ok(InitializeResponse::new(params.protocol_version).agent_info(Some(info)))
    }
    async fn authenticate(&self, _params: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _params: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new(self.name.to_string()))
    }
    async fn session_load(&self, _params: LoadSessionRequest) -> Result<LoadSessionResponse, Error> {
        Ok(LoadSessionResponse::new())
    }
    async fn session_prompt(&self, _params: PromptRequest, _cx: AgentContext) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _params: CancelNotification) {}
    #[ext("_example/name")]
    async fn name(&self, _params: serde_json::Value) -> Result<String, Error> {
        Ok(self.name.to_string())
    }
}

fn main() {
    use acp_rpc::macro_support::Advertise;
    fn is_agent<A: Agent<AgentContext>>(_: &A) {}
    is_agent(&MyAgent { name: 1u32, store: "x" });
    is_agent(&MyAgent { name: "a", store: String::new() });
    assert_eq!(<MyAgent<u8, &str>>::CAPABILITIES.len(), 1);
}
