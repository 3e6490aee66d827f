//! The official SDK's remote client (`HttpClient`; `http://` is Streamable HTTP, `ws://` is
//! WebSocket), raw JSON-RPC over its channel: `client URL` sends initialize, session/new and a
//! prompt, answers a permission request with its first option, and prints every message it
//! receives as `GOT <json>` until the prompt's answer, then `DONE`.
use std::time::Duration;

use agent_client_protocol::{Channel, Client, ConnectTo, TransportFrame};
use agent_client_protocol_http::HttpClient;
use futures::StreamExt;
use serde_json::{Value, json};

fn send(channel: &Channel, message: Value) {
    channel.tx.unbounded_send(TransportFrame::parse_json(&message.to_string())).expect("send");
}

async fn receive(channel: &mut Channel) -> Value {
    let frame = tokio::time::timeout(Duration::from_secs(20), channel.rx.next())
        .await
        .expect("a message in time")
        .expect("open");
    let message: Value = serde_json::from_str(&frame.to_json().expect("json")).expect("json");
    println!("GOT {message}");
    message
}

#[tokio::main]
async fn main() {
    let url = std::env::args().nth(1).expect("usage: client URL");
    let transport = HttpClient::builder_with_endpoint(&url).configure_http(|h| h.no_proxy()).build().expect("client");
    let (mut channel, driver) = ConnectTo::<Client>::into_channel_and_future(transport);
    let driver = tokio::spawn(driver.expect("driver"));
    send(
        &channel,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}),
    );
    receive(&mut channel).await;
    send(
        &channel,
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/tmp", "mcpServers": []}}),
    );
    let session = receive(&mut channel).await["result"]["sessionId"].clone();
    let prompt = json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]});
    send(&channel, json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt}));
    loop {
        let message = receive(&mut channel).await;
        if message["method"] == "session/request_permission" {
            let option = message["params"]["options"][0]["optionId"].clone();
            let answer = json!({"outcome": {"outcome": "selected", "optionId": option}});
            send(&channel, json!({"jsonrpc": "2.0", "id": message["id"], "result": answer}));
        }
        if message["id"] == 3 && message.get("method").is_none() {
            break;
        }
    }
    drop(channel);
    let _ = tokio::time::timeout(Duration::from_secs(5), driver).await;
    println!("DONE");
}
