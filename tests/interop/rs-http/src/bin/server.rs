//! The official SDK's HTTP/WebSocket server (`AcpHttpServer`) around a small raw v1 agent:
//! `server [PORT]` listens on 127.0.0.1 and prints `LISTENING <port>`. A prompt streams an
//! update, asks permission, reports the outcome in a second update and ends the turn;
//! `session/load` replays one update.
use agent_client_protocol::{Agent, Client, ConnectTo, Responder, UntypedMessage, V1};
use agent_client_protocol_http::AcpHttpServer;
use serde_json::{Value, json};

fn chunk(session: &Option<String>, text: &str) -> Result<UntypedMessage, agent_client_protocol::Error> {
    UntypedMessage::new(
        "session/update",
        json!({"sessionId": session, "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}),
    )
}

fn agent() -> impl ConnectTo<Client> {
    Agent.v1().on_receive_request(
        async |req: UntypedMessage, responder: Responder<Value, V1>, cx| {
            let session = req.params()["sessionId"].as_str().map(str::to_owned);
            match req.method() {
                "initialize" => responder.respond(
                    json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true}, "authMethods": []}),
                ),
                "session/new" => responder.respond(json!({"sessionId": "rs-sess-1"})),
                "session/load" => {
                    cx.send_notification(chunk(&session, "(replay)")?)?;
                    responder.respond(json!({}))
                }
                "session/prompt" => {
                    let cx2 = cx.clone();
                    // The SDK's dispatch loop must not wait on our own outgoing request.
                    cx.spawn(async move {
                        cx2.send_notification(chunk(&session, "hello ")?)?;
                        let ask = json!({"sessionId": session, "toolCall": {"toolCallId": "t1", "title": "demo"},
                            "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]});
                        let answer = cx2
                            .send_request(UntypedMessage::new("session/request_permission", ask)?)
                            .block_task()
                            .await?;
                        cx2.send_notification(chunk(
                            &session,
                            &format!("permission: {}", answer["outcome"]["outcome"]),
                        )?)?;
                        responder.respond(json!({"stopReason": "end_turn"}))
                    })
                }
                method => responder.respond_with_error(agent_client_protocol::Error::method_not_found().data(method)),
            }
        },
        agent_client_protocol::on_receive_request!(),
    )
}

#[tokio::main]
async fn main() {
    let port = std::env::args().nth(1).unwrap_or_else(|| "0".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await.expect("bind");
    println!("LISTENING {}", listener.local_addr().expect("address").port());
    axum::serve(listener, AcpHttpServer::new(agent).into_router()).await.expect("serve");
}
