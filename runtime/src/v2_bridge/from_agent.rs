//! What the v1 agent sends on a bridged connection, translated for the v2 client: its updates
//! (held until the prompt's answer is written), its permission requests, and the turn's end.

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::core::handler::{Handler, IncomingNotification, IncomingRequest};
use crate::core::jsonrpc::ErrorObject;
use crate::core::peer::Peer;

use super::shapes::{call, closed_session, copy, drop_nulls, encode, forward, object_params, v2_config_options};
use super::turns::{Asking, State};

/// What the v1 agent sends, translated for the v2 client.
pub(super) struct FromAgent {
    pub(super) state: Arc<State>,
}

impl FromAgent {
    pub(super) fn client(&self) -> Option<&Peer> {
        self.state.client.get()
    }

    pub(super) async fn permission(&self, client: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let mut v1 = object_params(&req)?;
        let session = req.session_id.clone().unwrap_or_default();
        // A sign of work on the session's turn: after its start (the held updates first).
        if let Some(turn) = self.state.working_turn(&session).filter(|turn| turn.accept()) {
            turn.started().await;
        }
        let mut tool_call = v1.remove("toolCall").unwrap_or_else(|| json!({}));
        drop_nulls(&mut tool_call);
        let title = tool_call.get("title").and_then(Value::as_str).unwrap_or("Permission requested").to_owned();
        let mut v2 = Map::new();
        copy(&v1, "sessionId", &mut v2, "sessionId");
        v2.insert("title".into(), Value::String(title));
        v2.insert("subject".into(), json!({"type": "tool_call", "toolCall": tool_call}));
        copy(&v1, "options", &mut v2, "options");
        copy(&v1, "_meta", &mut v2, "_meta");
        let mut asking = Some(Asking::start(&self.state, client, &session).await);
        let v2 = Value::Object(v2);
        let call = call(client, &req.method, &v2, &req);
        tokio::pin!(call);
        let answer = tokio::select! {
            answer = &mut call => answer,
            () = req.cancel.cancelled() => {
                // The agent withdrew its request (or the session was cancelled): it waits no
                // longer, whenever the client answers.
                if let Some(asking) = asking.take() {
                    asking.end().await;
                }
                call.await
            }
        };
        // A `cancelled` outcome is the turn's cancellation (the client's `session/cancel`
        // resolves it before the bridge sees the notification): no `running` after it. An
        // error is not: the agent goes on.
        let cancelled = answer.as_ref().is_ok_and(|result| {
            serde_json::from_str::<Value>(result.get())
                .is_ok_and(|result| result.pointer("/outcome/outcome").and_then(Value::as_str) == Some("cancelled"))
        });
        if cancelled {
            self.state.cancel_turns(&session);
        }
        if let Some(asking) = asking {
            asking.end().await;
        }
        answer
    }

    /// A v1 `session/update` as v2's, or `None` when v2 has nothing for it.
    pub(super) fn update(&self, session: &str, params: &mut Map<String, Value>) -> Option<()> {
        let update = params.get_mut("update")?.as_object_mut()?;
        let kind = update.get("sessionUpdate")?.as_str()?.to_owned();
        match kind.as_str() {
            "user_message_chunk" | "agent_message_chunk" | "agent_thought_chunk" => {
                let given = update.get("messageId").and_then(Value::as_str).map(str::to_owned);
                let id = self.state.message_id(session, &kind, given);
                update.insert("messageId".into(), Value::String(id));
            }
            "tool_call" | "tool_call_update" => {
                self.state.message_ended(session);
                update.retain(|_, value| !value.is_null());
                if kind == "tool_call" {
                    update.insert("sessionUpdate".into(), json!("tool_call_update"));
                    update.entry("status").or_insert_with(|| json!("pending"));
                }
            }
            "plan" => {
                self.state.message_ended(session);
                let entries = update.remove("entries").unwrap_or_else(|| json!([]));
                let mut plan_update = Map::new();
                plan_update.insert("sessionUpdate".into(), json!("plan_update"));
                plan_update.insert("plan".into(), json!({"type": "items", "planId": "plan-1", "entries": entries}));
                copy(update, "_meta", &mut plan_update, "_meta");
                *update = plan_update;
            }
            "available_commands_update" => {
                let commands = update.get_mut("availableCommands").and_then(Value::as_array_mut);
                for command in commands.into_iter().flatten() {
                    if let Some(input) = command.get_mut("input").and_then(Value::as_object_mut) {
                        input.entry("type").or_insert_with(|| json!("text"));
                    }
                }
            }
            "config_option_update" => v2_config_options(update),
            "current_mode_update" => return None,
            _ => self.state.message_ended(session),
        }
        Some(())
    }
}

impl Handler for FromAgent {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let Some(client) = self.client().cloned() else {
            return Err(ErrorObject::internal_error("the v2 client is gone"));
        };
        let method = &*req.method;
        if method.starts_with("fs/") || method.starts_with("terminal/") {
            // Not advertised to the agent: v2 has no client file system or terminals.
            return Err(ErrorObject::method_not_found(method));
        }
        if let Some(session) = req.session_id.as_ref().filter(|session| self.state.is_closed(session)) {
            // Nothing more goes to the client about a closed session.
            return match method {
                "session/request_permission" => encode(&json!({"outcome": {"outcome": "cancelled"}})),
                _ => Err(closed_session(session)),
            };
        }
        if method == "session/request_permission" {
            return self.permission(&client, req).await;
        }
        let turn = req.session_id.as_ref().and_then(|session| self.state.working_turn(session));
        if let Some(turn) = turn.filter(|turn| turn.accept()) {
            turn.started().await;
        }
        forward(&client, req).await
    }

    /// Never waits for the client's side beyond its write queue: a notification handler that
    /// waited would hold up the agent's answers behind it (responses follow notifications),
    /// and a batch's answer may wait for one of them.
    async fn handle_notification(&self, notification: IncomingNotification) {
        let Some(client) = self.client() else { return };
        let mut params = match notification.params.as_deref().map(|raw| serde_json::from_str(raw.get())) {
            Some(Ok(Value::Object(params))) if notification.method == "session/update" => params,
            _ => {
                let _ = client.notify_raw(&notification.method, notification.params.as_deref()).await;
                return;
            }
        };
        let session = params.get("sessionId").and_then(Value::as_str).map(str::to_owned);
        if let Some(session) = &session {
            if self.state.is_quiet(session) || self.state.is_closed(session) {
                return;
            }
            if self.update(session, &mut params).is_none() {
                return;
            }
            if let Some(turn) = self.state.working_turn(session).filter(|turn| turn.accept()) {
                let mut held = turn.out.lock().await;
                if !held.started {
                    held.updates.push(params);
                    return;
                }
            }
        }
        let _ = client.notify("session/update", &params).await;
    }
}
