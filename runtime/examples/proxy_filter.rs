//! A proxy that filters tool calls: permission requests for tool calls of a denied kind
//! (`--deny execute,delete`, the default) are rejected on the user's behalf, without reaching
//! the editor; every other message passes through untouched. A permission request need not
//! repeat the tool call's kind (the demo agent's does not), so the proxy also notes the kind
//! of each tool call the agent announces in a `session/update`. Run it with the conductor:
//!
//! `acp-conductor agent "cargo run -q -p acp-runtime --example proxy_filter -- --deny read" "cargo run -q -p acp-runtime --example agent"`

use std::collections::HashMap;
use std::sync::Mutex;

use acp_runtime::proxy::{Proxy, ProxyContext, Side, serve_proxy};
use acp_runtime::{ErrorObject, IncomingNotification, IncomingRequest, RawValue};
use serde_json::{Value, json};

const USAGE: &str = "usage: proxy_filter [--deny KIND[,KIND...]]  (tool kinds: read, edit, delete, move, search, execute, think, fetch, other)";

struct FilterTools {
    denied: Vec<String>,
    /// The kind of each tool call in progress, by session and tool call id.
    kinds: Mutex<HashMap<(String, String), String>>,
}

impl FilterTools {
    /// Notes the kind a `tool_call` or `tool_call_update` gives, and forgets a finished call.
    fn note(&self, params: &Value) {
        let update = &params["update"];
        let (Some(session), Some(call)) = (params["sessionId"].as_str(), update["toolCallId"].as_str()) else {
            return;
        };
        let key = (session.to_owned(), call.to_owned());
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(update["status"].as_str(), Some("completed" | "failed")) {
            kinds.remove(&key);
        } else if let Some(kind) = update["kind"].as_str() {
            kinds.insert(key, kind.to_owned());
        }
    }

    /// The kind of the tool call a permission request is about: its own, or the one noted.
    fn kind_of(&self, params: &Value) -> String {
        if let Some(kind) = params.pointer("/toolCall/kind").and_then(Value::as_str) {
            return kind.to_owned();
        }
        let session = params["sessionId"].as_str().unwrap_or_default().to_owned();
        let call = params.pointer("/toolCall/toolCallId").and_then(Value::as_str).unwrap_or_default().to_owned();
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        kinds.get(&(session, call)).cloned().unwrap_or_else(|| "other".to_owned())
    }
}

impl Proxy for FilterTools {
    fn intercepts(&self, from: Side, method: &str) -> bool {
        from == Side::Agent && matches!(method, "session/request_permission" | "session/update")
    }

    async fn handle_notification(&self, cx: ProxyContext, from: Side, notification: IncomingNotification) {
        let params = notification.params.as_deref().map(|p| serde_json::from_str::<Value>(p.get()));
        if let Some(Ok(params)) = params {
            if matches!(params["update"]["sessionUpdate"].as_str(), Some("tool_call" | "tool_call_update")) {
                self.note(&params);
            }
        }
        cx.forward_notification(from, notification).await
    }

    async fn handle_request(
        &self,
        cx: ProxyContext,
        from: Side,
        req: IncomingRequest,
    ) -> Result<Box<RawValue>, ErrorObject> {
        let params: Value = req.parse_params()?;
        let kind = self.kind_of(&params);
        if !self.denied.contains(&kind) {
            return cx.forward_request(from, req).await;
        }
        let title = ["/toolCall/title", "/toolCall/toolCallId"]
            .iter()
            .find_map(|at| params.pointer(at).and_then(Value::as_str))
            .unwrap_or("a tool call");
        eprintln!("proxy_filter: rejected {title:?} ({kind} is denied)");
        // The agent's own reject option, so that it knows the user (here: the policy) said no.
        let options = params.get("options").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let reject = options.iter().find(|o| o["kind"].as_str().is_some_and(|k| k.starts_with("reject")));
        let answer = match reject.and_then(|o| o.get("optionId")) {
            Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
            None => json!({"outcome": {"outcome": "cancelled"}}),
        };
        serde_json::value::to_raw_value(&answer).map_err(ErrorObject::internal_error)
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut denied = vec!["execute".to_owned(), "delete".to_owned()];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--deny", Some(kinds)) => denied = kinds.split(',').map(str::trim).map(str::to_owned).collect(),
            _ => {
                eprintln!("{USAGE}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    let (stdin, stdout) = acp_runtime::transport::stdio();
    match serve_proxy(FilterTools { denied, kinds: Mutex::default() }, stdin, stdout).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxy_filter: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
