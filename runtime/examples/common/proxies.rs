//! The example proxies, shared by the `proxy_context` and `proxy_filter` examples and by
//! `duet --proxy`: a proxy that adds context to every prompt, and one that filters tool calls.
//! Both are `#[acp_proxy]` blocks over lossless typed views: what they change goes on with
//! every member they did not touch, and what they do not name passes through unread.

use std::collections::HashMap;
use std::sync::Mutex;

use acp_rpc::acp_types::lossless::Lossless;
use acp_rpc::acp_types::{
    ContentBlock, PermissionOptionKind, PromptRequest, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionNotification, SessionUpdate, TextContent,
};
use acp_rpc::proxy::{ProxiedNotification, ProxiedRequest};
use acp_rpc::{ErrorObject, RawValue, acp_proxy};

/// The text `AddContext` adds when not told otherwise.
pub const DEFAULT_CONTEXT: &str = "Context from the proxy: keep the answer short.";

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
        if let SessionUpdate::ToolCall(tool_call) = &call.params.update {
            if let Some(kind) = &tool_call.kind {
                let key = (call.params.session_id.to_string(), tool_call.tool_call_id.to_string());
                self.kinds().insert(key, kind.as_str().to_owned());
            }
        }
        // Read only: forwarded byte for byte.
        let _ = call.forward().await;
    }

    async fn session_request_permission(
        &self,
        call: ProxiedRequest<Lossless<RequestPermissionRequest>>,
    ) -> Result<Box<RawValue>, ErrorObject> {
        let request = &call.params;
        let key = (request.session_id.to_string(), request.tool_call.tool_call_id.to_string());
        let kind = match &request.tool_call.kind {
            Some(Some(kind)) => kind.as_str().to_owned(),
            _ => self.kinds().get(&key).cloned().unwrap_or_else(|| "other".to_owned()),
        };
        if !self.denied.contains(&kind) {
            return call.forward().await;
        }
        let title =
            request.tool_call.title.clone().flatten().unwrap_or_else(|| request.tool_call.tool_call_id.to_string());
        eprintln!("proxy_filter: rejected {title:?} ({kind} is denied)");
        // The agent's own reject option, so that it knows the user (here: the policy) said no.
        let reject = request
            .options
            .iter()
            .find(|o| matches!(o.kind, PermissionOptionKind::RejectOnce | PermissionOptionKind::RejectAlways));
        let outcome = match reject {
            Some(option) => {
                RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(option.option_id.clone()))
            }
            None => RequestPermissionOutcome::Cancelled,
        };
        serde_json::value::to_raw_value(&RequestPermissionResponse::new(outcome)).map_err(ErrorObject::internal_error)
    }
}
