//! A proxy written with `sacp` 11 that marks what the agent says: the text of each
//! `agent_message_chunk` coming back from the agent gets a '>' in front. Everything else is
//! forwarded by the SDK.

use sacp::schema::{ContentBlock, ContentChunk, SessionNotification, SessionUpdate};
use sacp::{Agent, Client, Proxy};

fn mark(notification: &mut SessionNotification) {
    if let SessionUpdate::AgentMessageChunk(ContentChunk { content: ContentBlock::Text(text), .. }) =
        &mut notification.update
    {
        text.text.insert(0, '>');
    }
}

#[tokio::main]
async fn main() -> Result<(), sacp::Error> {
    Proxy
        .builder()
        .name("sacp-arrow")
        .on_receive_notification_from(
            Agent,
            async |mut notification: SessionNotification, cx| {
                mark(&mut notification);
                cx.send_notification_to(Client, notification)
            },
            sacp::on_receive_notification!(),
        )
        .connect_to(sacp_tokio::Stdio::new())
        .await
}
