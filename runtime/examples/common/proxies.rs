//! The example proxies, shared by the `proxy_context` and `proxy_filter` examples and by
//! `duet --proxy`: a proxy that adds context to every prompt, and one that filters tool calls.

use acp_runtime::proxy::{Proxy, ProxyContext, Side};
use std::collections::HashMap;
use std::sync::Mutex;

use acp_runtime::{ErrorObject, IncomingNotification, IncomingRequest, RawValue};
use serde_json::{Value, json};

/// The text `AddContext` adds when not told otherwise.
pub const DEFAULT_CONTEXT: &str = "Context from the proxy: keep the answer short.";

/// Adds a text block in front of every `session/prompt`'s content.
pub struct AddContext {
    /// The text put in front of each prompt.
    pub context: String,
}

impl Proxy for AddContext {
    fn intercepts(&self, from: Side, method: &str) -> bool {
        from == Side::Client && method == "session/prompt"
    }

    async fn handle_request(
        &self,
        cx: ProxyContext,
        from: Side,
        mut req: IncomingRequest,
    ) -> Result<Box<RawValue>, ErrorObject> {
        // A `Value` keeps every member it reads, known or not; only this one array changes.
        let mut params: Value = req.parse_params()?;
        let Some(prompt) = params.get_mut("prompt").and_then(Value::as_array_mut) else {
            return Err(ErrorObject::invalid_params_at("prompt", "expected an array of content blocks"));
        };
        prompt.insert(0, serde_json::json!({"type": "text", "text": self.context}));
        req.params = Some(serde_json::value::to_raw_value(&params).map_err(ErrorObject::internal_error)?);
        cx.forward_request(from, req).await
    }
}

/// Rejects, on the user's behalf, the permission requests of tool calls of a denied kind.
/// A permission request need not repeat its tool call's kind, so the kinds are learnt from
/// the `tool_call` updates that announce the calls (which pass on unchanged).
pub struct FilterTools {
    /// The denied tool kinds (`execute`, `delete`, ...).
    pub denied: Vec<String>,
    /// The kind of each tool call announced so far, by session and id.
    pub kinds: Mutex<HashMap<(String, String), String>>,
}

impl FilterTools {
    /// A filter denying `denied`.
    pub fn new(denied: Vec<String>) -> Self {
        FilterTools { denied, kinds: Mutex::default() }
    }

    fn kinds(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.kinds.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `(sessionId, toolCallId)` of a `session/update` or `session/request_permission`.
fn tool_call_key(params: &Value, tool_call: &Value) -> Option<(String, String)> {
    let session = params.get("sessionId")?.as_str()?;
    let id = tool_call.get("toolCallId")?.as_str()?;
    Some((session.to_owned(), id.to_owned()))
}

impl Proxy for FilterTools {
    fn intercepts(&self, from: Side, method: &str) -> bool {
        from == Side::Agent && matches!(method, "session/update" | "session/request_permission")
    }

    async fn handle_notification(&self, cx: ProxyContext, from: Side, notification: IncomingNotification) {
        if let Ok(params) = notification.parse_params::<Value>() {
            let update = &params["update"];
            if let (Some(key), Some(kind)) =
                (tool_call_key(&params, update), update.get("kind").and_then(Value::as_str))
            {
                self.kinds().insert(key, kind.to_owned());
            }
        }
        cx.forward_notification(from, notification).await;
    }

    async fn handle_request(
        &self,
        cx: ProxyContext,
        from: Side,
        req: IncomingRequest,
    ) -> Result<Box<RawValue>, ErrorObject> {
        let params: Value = req.parse_params()?;
        let tool_call = &params["toolCall"];
        let kind = tool_call
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| tool_call_key(&params, tool_call).and_then(|key| self.kinds().get(&key).cloned()))
            .unwrap_or_else(|| "other".to_owned());
        if !self.denied.contains(&kind) {
            return cx.forward_request(from, req).await;
        }
        let title = tool_call.get("title").and_then(Value::as_str).unwrap_or("a tool call");
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
