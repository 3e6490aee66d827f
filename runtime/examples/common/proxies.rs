//! The example proxies, shared by the `proxy_context` and `proxy_filter` examples and by
//! `duet --proxy`: a proxy that adds context to every prompt, and one that filters tool calls.
//! Both are `#[acp_proxy]` blocks: what they change goes on with every member they did not
//! touch, and what they do not name passes through unread. Both serve protocol v1 and v2
//! chains: the prompt's content and the session updates they read have the same shape in both,
//! and the filter reads a permission request's tool call wherever its version puts it.

use std::collections::HashMap;
use std::sync::Mutex;

use acp_rpc::acp_types::lossless::Lossless;
use acp_rpc::acp_types::{
    ContentBlock, PromptRequest, RequestPermissionOutcome, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionNotification, SessionUpdate, TextContent,
};
use acp_rpc::proxy::{ProxiedNotification, ProxiedRequest};
use acp_rpc::{ErrorObject, RawValue, acp_proxy};
use serde_json::Value;

/// The text `AddContext` adds when not told otherwise.
pub const DEFAULT_CONTEXT: &str = "Context from the proxy: keep the answer short.";

// ANCHOR: add_context
/// Adds a text block in front of every `session/prompt`'s content.
pub struct AddContext {
    /// The text put in front of each prompt.
    pub context: String,
}

#[acp_proxy]
impl AddContext {
    async fn session_prompt(
        &self,
        mut call: ProxiedRequest<Lossless<PromptRequest>>,
    ) -> Result<Box<RawValue>, ErrorObject> {
        let block = ContentBlock::from(TextContent::new(self.context.clone()));
        call.params.prompt.insert(0, block);
        call.forward().await
    }
}
// ANCHOR_END: add_context

/// Rejects, on the user's behalf, the permission requests of tool calls of a denied kind.
/// A permission request need not repeat its tool call's kind, so the kinds are learnt from
/// the `tool_call` updates that announce the calls (which pass on unchanged).
pub struct FilterTools {
    /// The denied tool kinds (`execute`, `delete`, ...).
    pub denied: Vec<String>,
    /// The kind of each tool call announced so far, by session and id.
    kinds: Mutex<HashMap<(String, String), String>>,
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

#[acp_proxy]
impl FilterTools {
    async fn session_update(&self, call: ProxiedNotification<Lossless<SessionNotification>>) {
        // A call is announced by `tool_call` in v1, by `tool_call_update` in v2 (an upsert).
        let announced = match &call.params.update {
            SessionUpdate::ToolCall(tool_call) => tool_call.kind.as_ref().map(|kind| (&tool_call.tool_call_id, kind)),
            SessionUpdate::ToolCallUpdate(update) => {
                update.kind.as_ref().and_then(Option::as_ref).map(|kind| (&update.tool_call_id, kind))
            }
            _ => None,
        };
        if let Some((id, kind)) = announced {
            let key = (call.params.session_id.to_string(), id.to_string());
            self.kinds().insert(key, kind.as_str().to_owned());
        }
        // Read only: forwarded byte for byte.
        let _ = call.forward().await;
    }

    async fn session_request_permission(
        &self,
        call: ProxiedRequest<Box<RawValue>>,
    ) -> Result<Box<RawValue>, ErrorObject> {
        // Only what the filter needs is read, in either protocol version (v1 has the tool call
        // at `toolCall`, v2 at `subject.toolCall`); the request passes on byte for byte.
        let request: Value = serde_json::from_str(call.params.get()).map_err(ErrorObject::invalid_params)?;
        let tool_call = request.get("toolCall").or_else(|| request.pointer("/subject/toolCall"));
        let field = |name: &str| tool_call.and_then(|t| t.get(name)).and_then(Value::as_str);
        let key = (
            request["sessionId"].as_str().unwrap_or_default().to_owned(),
            field("toolCallId").unwrap_or_default().to_owned(),
        );
        let kind = match field("kind") {
            Some(kind) => kind.to_owned(),
            None => self.kinds().get(&key).cloned().unwrap_or_else(|| "other".to_owned()),
        };
        if !self.denied.contains(&kind) {
            return call.forward().await;
        }
        let title = field("title").unwrap_or(&key.1);
        eprintln!("proxy_filter: rejected {title:?} ({kind} is denied)");
        // The agent's own reject option, so that it knows the user (here: the policy) said no.
        // The answer has the same shape in both versions.
        let options = request["options"].as_array().map_or(&[][..], Vec::as_slice);
        let reject = options.iter().find(|o| matches!(o["kind"].as_str(), Some("reject_once" | "reject_always")));
        let outcome = match reject.and_then(|o| o["optionId"].as_str()) {
            Some(option) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(option.to_owned())),
            None => RequestPermissionOutcome::Cancelled,
        };
        serde_json::value::to_raw_value(&RequestPermissionResponse::new(outcome)).map_err(ErrorObject::internal_error)
    }
}
