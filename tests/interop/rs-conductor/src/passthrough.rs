//! A proxy written with the official SDK that handles nothing itself: the SDK forwards every
//! message to the other side.

use agent_client_protocol::{Proxy, Stdio};

#[tokio::main]
async fn main() -> Result<(), agent_client_protocol::Error> {
    Proxy.v1().name("sdk-passthrough").connect_to(Stdio::new()).await
}
