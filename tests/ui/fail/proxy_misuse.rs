use acp_rpc::proxy::{ProxiedNotification, ProxiedRequest};
use acp_rpc::{ErrorObject, RawValue, acp_proxy};
use serde_json::Value;

struct Proxy;

#[acp_proxy]
impl Proxy {
    // A typo: "did you mean".
    async fn session_promt(&self, call: ProxiedRequest<Value>) -> Result<Box<RawValue>, ErrorObject> {
        call.forward().await
    }

    // A name both sides have, without saying which.
    async fn mcp_message(&self, call: ProxiedRequest<Value>) -> Result<Box<RawValue>, ErrorObject> {
        call.forward().await
    }

    // A notification answers nothing.
    async fn session_update(&self, call: ProxiedNotification<Value>) -> Result<(), ErrorObject> {
        let _ = call.forward().await;
        Ok(())
    }

    // An extension without its side.
    #[ext("_x/y")]
    async fn ext(&self, call: ProxiedRequest<Value>) -> Result<Box<RawValue>, ErrorObject> {
        call.forward().await
    }

    // A request must answer.
    async fn session_new(&self, call: ProxiedRequest<Value>) {
        let _ = call;
    }

    // `&mut self`.
    async fn session_cancel(&mut self, call: ProxiedNotification<Value>) {
        let _ = call;
    }
}

fn main() {}
