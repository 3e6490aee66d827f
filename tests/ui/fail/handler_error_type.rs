// Handler errors that do not convert into `acp_types::Error`, in a client and in a v2 agent:
// each is reported at the user's error type, with how to convert it.
use acp_rpc::acp_types::*;
use acp_rpc::{acp_agent, acp_client};

struct MyClient;

#[acp_client]
impl MyClient {
    async fn session_request_permission(&self, _p: RequestPermissionRequest) -> Result<RequestPermissionResponse, String> {
        Err("no".into())
    }
    async fn session_update(&self, _p: SessionNotification) -> Result<(), std::io::Error> {
        Ok(())
    }
    async fn fs_read_text_file(&self, _p: ReadTextFileRequest) -> std::io::Result<ReadTextFileResponse> {
        Ok(ReadTextFileResponse::new(std::fs::read_to_string("f")?))
    }
}

struct MyAgent;

#[acp_agent(v2)]
impl MyAgent {
    async fn initialize(&self, _p: v2::InitializeRequest) -> Result<v2::InitializeResponse, v2::Error> {
        Ok(v2::InitializeResponse::new(v2::ProtocolVersion::V2, v2::Implementation::new("a", "1")))
    }
    async fn session_new(&self, _p: v2::NewSessionRequest) -> Result<v2::NewSessionResponse, std::io::Error> {
        Ok(v2::NewSessionResponse::new("s"))
    }
    async fn session_list(&self, _p: v2::ListSessionsRequest) -> Result<v2::ListSessionsResponse, v2::Error> {
        Ok(v2::ListSessionsResponse::new(vec![]))
    }
    async fn session_resume(&self, _p: v2::ResumeSessionRequest) -> Result<v2::ResumeSessionResponse, v2::Error> {
        Ok(v2::ResumeSessionResponse::new())
    }
    async fn session_close(&self, _p: v2::CloseSessionRequest) -> Result<v2::CloseSessionResponse, v2::Error> {
        Ok(v2::CloseSessionResponse::new())
    }
    async fn session_prompt(&self, _p: v2::PromptRequest) -> Result<v2::PromptResponse, v2::Error> {
        Ok(v2::PromptResponse::new("m1"))
    }
    async fn session_cancel(&self, _p: v2::CancelSessionNotification) {}
}

fn main() {}
