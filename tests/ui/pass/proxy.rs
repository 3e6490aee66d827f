use acp_rpc::proxy::{ProxiedNotification, ProxiedRequest, serve_proxy};
use acp_rpc::{ErrorObject, RawValue, acp_proxy};
use serde_json::Value;

struct Filter<T> {
    denied: T,
}

#[acp_proxy]
impl<T: AsRef<str> + Send + Sync + 'static> Filter<T> {
    async fn session_request_permission(&self, call: ProxiedRequest<Value>) -> Result<Value, ErrorObject> {
        if call.params["toolCall"]["kind"] == self.denied.as_ref() {
            return Ok(serde_json::json!({"outcome": {"outcome": "cancelled"}}));
        }
        let answer = call.forward().await?;
        serde_json::from_str(answer.get()).map_err(ErrorObject::internal_error)
    }

    async fn session_cancel(&self, call: ProxiedNotification<Box<RawValue>>) {
        let _ = call.forward().await;
    }

    #[from(agent)]
    async fn mcp_message(&self, call: ProxiedRequest<Option<Box<RawValue>>>) -> Result<Box<RawValue>, ErrorObject> {
        call.forward().await
    }

    #[ext_notification("_filter/note")]
    #[from(client)]
    async fn note(&self, call: ProxiedNotification<Value>) {
        let _ = call;
    }
}

fn main() {
    let _ = serve_proxy(Filter { denied: "execute" }, tokio::io::empty(), tokio::io::sink());
}
