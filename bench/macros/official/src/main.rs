//! The 13-handler agent on the official SDK (`agent-client-protocol` 5.2.0, the `Agent.v1()`
//! builder its docs and examples show), served on stdio.
//! Keep the handler bodies in step with ../../ours/src/main.rs.
use agent_client_protocol::v1::schema::*;
use agent_client_protocol::{Agent, Stdio, on_receive_notification, on_receive_request};

#[tokio::main]
async fn main() -> agent_client_protocol::Result<()> {
    Agent
        .v1()
        .name("bench-agent")
        .on_receive_request(
            async |params: InitializeRequest, responder, _cx| {
                // The SDK does not derive capabilities from the handlers: advertise the same
                // ones the `#[acp_agent]` side advertises.
                let sessions = SessionCapabilities::new()
                    .list(SessionListCapabilities::new())
                    .delete(SessionDeleteCapabilities::new())
                    .resume(SessionResumeCapabilities::new())
                    .close(SessionCloseCapabilities::new());
                let caps = AgentCapabilities::new()
                    .load_session(true)
                    .session_capabilities(sessions)
                    .auth(AgentAuthCapabilities::new().logout(LogoutCapabilities::new()));
                responder.respond(InitializeResponse::new(params.protocol_version).agent_capabilities(caps))
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async |_params: AuthenticateRequest, responder, _cx| responder.respond(AuthenticateResponse::new()),
            on_receive_request!(),
        )
        .on_receive_request(
            async |_params: LogoutRequest, responder, _cx| responder.respond(LogoutResponse::new()),
            on_receive_request!(),
        )
        .on_receive_request(
            async |_params: NewSessionRequest, responder, _cx| responder.respond(NewSessionResponse::new("sess_1")),
            on_receive_request!(),
        )
        .on_receive_request(
            async |_params: LoadSessionRequest, responder, _cx| responder.respond(LoadSessionResponse::new()),
            on_receive_request!(),
        )
        .on_receive_request(
            async |_params: ListSessionsRequest, responder, _cx| {
                responder.respond(ListSessionsResponse::new(Vec::new()))
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async |_params: DeleteSessionRequest, responder, _cx| responder.respond(DeleteSessionResponse::new()),
            on_receive_request!(),
        )
        .on_receive_request(
            async |_params: ResumeSessionRequest, responder, _cx| responder.respond(ResumeSessionResponse::new()),
            on_receive_request!(),
        )
        .on_receive_request(
            async |_params: CloseSessionRequest, responder, _cx| responder.respond(CloseSessionResponse::new()),
            on_receive_request!(),
        )
        .on_receive_request(
            async |_params: SetSessionModeRequest, responder, _cx| responder.respond(SetSessionModeResponse::new()),
            on_receive_request!(),
        )
        .on_receive_request(
            async |_params: SetSessionConfigOptionRequest, responder, _cx| {
                responder.respond(SetSessionConfigOptionResponse::new(Vec::new()))
            },
            on_receive_request!(),
        )
        .on_receive_request(
            async |params: PromptRequest, responder, cx| {
                for text in ["Hello", ", ", "world"] {
                    let chunk =
                        SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(text))));
                    cx.send_notification(SessionNotification::new(params.session_id.clone(), chunk))?;
                }
                responder.respond(PromptResponse::new(StopReason::EndTurn))
            },
            on_receive_request!(),
        )
        .on_receive_notification(async |_params: CancelNotification, _cx| Ok(()), on_receive_notification!())
        .connect_to(Stdio::new())
        .await
}
