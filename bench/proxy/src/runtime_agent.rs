//! The agent at the end of each chain, built on `acp-rpc` as an agent author would write
//! it: typed params and typed `session/update`s (N from the prompt's text), `_bench/ping`
//! answered at once. The "direct" baseline with it is an ACP agent, not a bare pipe.
use acp_rpc::acp_types::{
    ContentBlock, ContentChunk, InitializeRequest, InitializeResponse, NewSessionResponse, PromptRequest,
    PromptResponse, SessionNotification, SessionUpdate, StopReason, TextContent,
};
use acp_rpc::{Connection, ErrorObject, Handler, IncomingRequest, RawValue};

struct Agent;

fn raw<T: serde::Serialize>(value: &T) -> Result<Box<RawValue>, ErrorObject> {
    serde_json::value::to_raw_value(value).map_err(ErrorObject::internal_error)
}

impl Handler for Agent {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        match &*req.method {
            "initialize" => raw(&InitializeResponse::new(req.parse_params::<InitializeRequest>()?.protocol_version)),
            "session/new" => raw(&NewSessionResponse::new("bench")),
            "_bench/ping" => raw(&serde_json::json!({})),
            "session/prompt" => {
                let p: PromptRequest = req.parse_params()?;
                let n: u64 = match p.prompt.first() {
                    Some(ContentBlock::Text(t)) => t.text.parse().unwrap_or(1),
                    _ => 1,
                };
                for i in 0..n {
                    let chunk = ContentChunk::new(ContentBlock::Text(TextContent::new(format!("chunk {i}"))));
                    let update =
                        SessionNotification::new(p.session_id.clone(), SessionUpdate::AgentMessageChunk(chunk));
                    req.peer.notify("session/update", &update).await.map_err(ErrorObject::internal_error)?;
                }
                raw(&PromptResponse::new(StopReason::EndTurn))
            }
            other => Err(ErrorObject::method_not_found(other)),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (stdin, stdout) = acp_rpc::transport::stdio();
    let (_peer, serve) = Connection::new().serve(stdin, stdout, Agent);
    let _ = serve.await;
    std::process::exit(0);
}
