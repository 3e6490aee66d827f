//! A proxy written with the official SDK that marks what the agent says: the text of each
//! `agent_message_chunk` coming back from the agent gets a '>' in front. Everything else is
//! forwarded by the SDK.

use agent_client_protocol::v1::schema::{ContentBlock, ContentChunk, SessionNotification, SessionUpdate};
use agent_client_protocol::{Agent, Client, Proxy, Stdio};

fn mark(notification: &mut SessionNotification) {
    if let SessionUpdate::AgentMessageChunk(ContentChunk { content: ContentBlock::Text(text), .. }) =
        &mut notification.update
    {
        text.text.insert(0, '>');
    }
}

#[tokio::main]
async fn main() -> Result<(), agent_client_protocol::Error> {
    Proxy
        .v1()
        .name("sdk-arrow")
        .on_receive_notification_from(
            Agent,
            async |mut notification: SessionNotification, cx| {
                mark(&mut notification);
                cx.send_notification_to(Client, notification)
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(Stdio::new())
        .await
}
