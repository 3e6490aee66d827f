//! A pass-through proxy written with the official SDK (`agent-client-protocol` 5.0.0): the
//! proxy builder forwards everything it has no handler for.
use agent_client_protocol::{Proxy, Stdio};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), agent_client_protocol::Error> {
    Proxy.v1().name("bench-pass").connect_to(Stdio::new()).await
}
