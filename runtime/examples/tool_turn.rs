//! One protocol-v1 prompt turn with a tool call, a permission request and a file read, with
//! the agent and the client in one process over an in-memory duplex.
//!
//! `cargo run -p acp-rpc --example tool_turn`
//!
//! The agent announces a `read` tool call, asks the client for permission, marks the call
//! `in_progress`, reads the file through the client's `fs/read_text_file`, completes the call
//! with what it read, says one sentence and ends the turn. The client allows the first option
//! of kind `allow_once`, serves files from a small in-memory table, and prints every update as
//! it arrives. `runtime/tests/example_tool_turn.rs` runs [`run`] and checks the transcript.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

// ANCHOR: agent
use acp_rpc::acp_types::*;
use acp_rpc::{AgentContext, acp_agent, acp_client};

/// An agent whose every turn reads the file the prompt names.
struct ReadingAgent;

#[acp_agent]
impl ReadingAgent {
    async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(ProtocolVersion::V1))
    }
    async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }
    async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("sess_1"))
    }
    async fn session_cancel(&self, _: CancelNotification) {}

    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let session = params.session_id.clone();
        let path = match params.prompt.first() {
            Some(ContentBlock::Text(text)) => text.text.trim().to_owned(),
            _ => return Err(Error::invalid_params()),
        };
        let client = cx.client();
        let update = |update| client.session_update(SessionNotification::new(session.clone(), update));

        // 1. Announce the tool call: the client shows it as pending.
        let call = ToolCallId::from("call_1");
        let announced = ToolCall::new(call.clone(), format!("Read {path}"))
            .kind(ToolKind::Read)
            .status(ToolCallStatus::Pending)
            .locations(vec![ToolCallLocation::new(path.as_str())]);
        update(SessionUpdate::ToolCall(announced)).await?;

        // 2. Ask for permission. A `session/cancel` meanwhile answers this with `Cancelled`.
        let options = vec![
            PermissionOption::new("allow", "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
        ];
        let ask = RequestPermissionRequest::new(session.clone(), ToolCallUpdate::new(call.clone()), options);
        let allowed = match cx.client().request_permission(ask).await?.outcome {
            RequestPermissionOutcome::Selected(chosen) => chosen.option_id.as_str() == "allow",
            RequestPermissionOutcome::Cancelled => return Ok(PromptResponse::new(StopReason::Cancelled)),
            _ => false,
        };
        if !allowed {
            update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call).status(ToolCallStatus::Failed))).await?;
            return Ok(PromptResponse::new(StopReason::EndTurn));
        }

        // 3. Run the tool: the file comes from the client (it advertised `fs.readTextFile`).
        update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call.clone()).status(ToolCallStatus::InProgress)))
            .await?;
        let read = cx.client().read_text_file(ReadTextFileRequest::new(session.clone(), path.as_str())).await?;
        let result = ToolCallContent::from(Content::new(TextContent::new(read.content.as_str())));
        let done = ToolCallUpdate::new(call).status(ToolCallStatus::Completed).content(vec![result]);
        update(SessionUpdate::ToolCallUpdate(done)).await?;

        // 4. Answer, then end the turn.
        let first_line = read.content.lines().next().unwrap_or_default();
        let reply = TextContent::new(format!("{path} starts with “{first_line}”."));
        update(SessionUpdate::AgentMessageChunk(ContentChunk::new(reply))).await?;
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
}
// ANCHOR_END: agent

// ANCHOR: client
/// A client that allows every tool call once and serves files from memory.
struct MemoryClient {
    files: HashMap<String, String>,
    transcript: Arc<Mutex<Vec<String>>>,
}

impl MemoryClient {
    fn note(&self, line: String) {
        println!("{line}");
        self.transcript.lock().unwrap().push(line);
    }
}

#[acp_client]
impl MemoryClient {
    async fn session_update(&self, params: SessionNotification) {
        let line = match params.update {
            SessionUpdate::ToolCall(call) => {
                let status = call.status.as_ref().map_or("pending", ToolCallStatus::as_str);
                format!("tool call {}: {} ({status})", call.tool_call_id.as_str(), call.title)
            }
            SessionUpdate::ToolCallUpdate(update) => {
                let status = update.status.value().map_or("unchanged", ToolCallStatus::as_str);
                format!("tool call {}: {status}", update.tool_call_id.as_str())
            }
            SessionUpdate::AgentMessageChunk(ContentChunk { content: ContentBlock::Text(text), .. }) => {
                format!("agent: {}", text.text)
            }
            other => format!("other update: {other:?}"),
        };
        self.note(line);
    }

    async fn session_request_permission(
        &self,
        params: RequestPermissionRequest,
    ) -> Result<RequestPermissionResponse, Error> {
        let option = params.options.iter().find(|o| o.kind == PermissionOptionKind::AllowOnce);
        let outcome = match option {
            Some(option) => {
                RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(option.option_id.clone()))
            }
            None => RequestPermissionOutcome::Cancelled,
        };
        let answer = match &outcome {
            RequestPermissionOutcome::Selected(chosen) => format!("selected {}", chosen.option_id.as_str()),
            _ => "cancelled".to_owned(),
        };
        self.note(format!("permission for {}: {answer}", params.tool_call.tool_call_id.as_str()));
        Ok(RequestPermissionResponse::new(outcome))
    }

    async fn fs_read_text_file(&self, params: ReadTextFileRequest) -> Result<ReadTextFileResponse, Error> {
        self.note(format!("fs/read_text_file {}", params.path));
        match self.files.get(&params.path) {
            Some(text) => Ok(ReadTextFileResponse::new(text.as_str())),
            None => Err(Error::resource_not_found().data(serde_json::json!({ "uri": params.path }))),
        }
    }
}
// ANCHOR_END: client

// ANCHOR: run
/// Runs the turn and returns what the client saw, in order, ending with the stop reason.
pub async fn run() -> Result<Vec<String>, acp_rpc::Error> {
    let transcript = Arc::new(Mutex::new(Vec::new()));
    let files = HashMap::from([("/project/notes.txt".to_owned(), "Buy milk.\nCall Ada.\n".to_owned())]);
    let client = MemoryClient { files, transcript: transcript.clone() };

    // Two connected ends; each side serves one of them.
    let (agent_end, client_end) = acp_rpc::transport::duplex(64 * 1024);
    let (_client_handle, agent_serve) = acp_rpc::agent::serve_agent(ReadingAgent, agent_end.0, agent_end.1);
    let (agent, client_serve) = acp_rpc::client::serve_client(client, client_end.0, client_end.1);
    tokio::spawn(agent_serve);
    tokio::spawn(client_serve);

    // `with_capabilities` advertises what the client's handlers can do (`fs.readTextFile` here).
    let init = acp_rpc::client::with_capabilities::<MemoryClient>(InitializeRequest::new(ProtocolVersion::V1));
    agent.initialize(init).await?;
    let session = agent.new_session(NewSessionRequest::new("/project", Vec::new())).await?.session_id;
    let prompt = PromptRequest::new(session, vec![TextContent::new("/project/notes.txt").into()]);
    // Every update of the turn has been handled when `prompt` returns.
    let response = agent.prompt(prompt).await?;

    let mut lines = transcript.lock().unwrap().clone();
    lines.push(format!("stop reason: {}", response.stop_reason.as_str()));
    Ok(lines)
}

#[tokio::main]
async fn main() -> Result<(), acp_rpc::Error> {
    let lines = run().await?;
    println!("{}", lines.last().expect("a stop reason"));
    Ok(())
}
// ANCHOR_END: run
