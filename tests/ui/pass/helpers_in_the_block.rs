// Plain functions and associated consts that are not handlers stay in the block; notification
// handlers may return nothing.
use std::sync::atomic::{AtomicU64, Ordering};

use acp_rpc::acp_types::*;
use acp_rpc::{AgentContext, acp_agent};

struct MyAgent {
    sessions: AtomicU64,
}

#[acp_agent]
impl MyAgent {
    const PREFIX: &'static str = "sess_";

    fn new() -> Self {
        MyAgent { sessions: AtomicU64::new(0) }
    }

    fn next_session(&self) -> String {
        format!("{}{}", Self::PREFIX, self.sessions.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn sessions_made(&self) -> u64 {
        self.sessions.load(Ordering::Relaxed)
    }

    async fn initialize(&self, params: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(params.protocol_version))
    }
    async fn authenticate(&self, _params: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _params: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new(self.next_session()))
    }
    async fn session_prompt(&self, _params: PromptRequest) -> Result<PromptResponse, Error> {
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
    async fn session_cancel(&self, _params: CancelNotification) {}
    #[ext_notification("_example/note")]
    async fn note(&self, _params: serde_json::Value, _cx: AgentContext) {}
    #[ext_notification("_example/checked")]
    async fn checked(&self, _params: serde_json::Value) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {
    fn is_agent<A: Agent<AgentContext>>(_: &A) {}
    let agent = MyAgent::new();
    is_agent(&agent);
    assert_eq!(agent.next_session(), "sess_0");
    assert_eq!(agent.sessions_made(), 1);
}
