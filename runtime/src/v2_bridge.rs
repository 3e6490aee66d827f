//! Protocol v2 for a v1 agent (feature `unstable_v2_bridge`): [`V2Bridge`] serves v2 clients
//! with a v1 implementation, translating every message on the way, so one `#[acp_agent]` impl
//! answers both versions from one binary without a second implementation. The translation is
//! done on JSON values: none of the v2 types' code is compiled in.
//!
//! Put it beside the v1 implementation with
//! [`ProtocolRouter::with_v2_bridge`](crate::version::ProtocolRouter::with_v2_bridge): a client
//! that asks for v2 is answered `protocolVersion: 2` and talks to the bridge, any other client
//! to the v1 implementation directly. On each v2 connection the bridge runs the v1
//! implementation on an in-memory connection of its own and plays a v1 client toward it, which
//! advertises no client capabilities (v2 has no `fs/*` or `terminal/*`).
//!
//! # The translation
//!
//! | v2 client sends | the v1 agent gets |
//! |---|---|
//! | `initialize` (`info`, `capabilities`) | `initialize` with `protocolVersion: 1`, `clientInfo` and empty `clientCapabilities`; its answer becomes v2's `info`, `capabilities` (support markers under `session`; `mcp.stdio` always, as v1 requires it of every agent) and `authMethods` (`methodId`, `type`) |
//! | `auth/login`, `auth/logout` | `authenticate`, `logout` (`logout` only when the agent advertises `auth.logout`; else the bridge refuses it, -32600) |
//! | `session/new`, `session/list`, `session/close`, `session/cancel`, extensions | the same; `mcpServers` in v1's shapes (added when omitted; a stdio server without `type`, with `args` and `env`, an HTTP one with `headers`), and the session answers without `modes` and with v2's `configId` for each config option |
//! | `session/set_config_option` | the same, a select's value without v2's `type: id`; the options of its answer with `configId` |
//! | `session/resume` with `replayFrom: {type: start}` | `session/load` (its replayed history comes back as v2 updates) |
//! | `session/resume` without `replayFrom` | `session/resume`, or `session/load` with the replay dropped when the agent only loads |
//! | `session/prompt` | `session/prompt`; see below |
//!
//! | the v1 agent sends | the v2 client gets |
//! |---|---|
//! | `user_message_chunk`, `agent_message_chunk`, `agent_thought_chunk` | the same, with a `messageId`: the agent's own, or one the bridge gives each run of chunks of one kind |
//! | `tool_call` | `tool_call_update` (status `pending` when it gives none) |
//! | `tool_call_update` | the same, without members set to `null` (v1 means "not given", v2 would clear them) |
//! | `plan` | `plan_update` with the session's one plan id, `plan-1` |
//! | `available_commands_update` | the same, each command's `input` with `type: text` |
//! | `current_mode_update` | nothing: v2 has no modes |
//! | `config_option_update` | the same, each option's `id` as `configId` |
//! | `session/request_permission` | the same, with `title` (the tool call's, or "Permission requested") and the tool call as `subject`; the turn reports `requires_action` while it waits |
//! | `fs/*`, `terminal/*` | nothing: answered -32601, as the bridge advertised neither |
//! | other updates, extensions | the same |
//!
//! # The prompt lifecycle
//!
//! A v1 agent answers `session/prompt` at the end of the turn; a v2 client expects the answer
//! as soon as the prompt is accepted, and the end as an idle `state_update`. The bridge accepts
//! the prompt when the v1 agent shows it took it: its first update or request for the session,
//! or its answer. Then it answers with the id it gives the prompt (`{"messageId": ...}`, as the
//! native v2 turn does), reports the prompt as a `user_message` under that id and the session as
//! `running`, passes the turn's updates on, and ends with `idle` and the agent's stop reason. A
//! v1 error before acceptance is the prompt's error (an unknown session, invalid params); one
//! after ends the turn with stop reason `error` and the error beside it, as the native v2 turn
//! does. A prompt cancelled by `session/cancel` before that is accepted at once, the
//! cancellation passed on, and ends `idle` with the agent's `cancelled` (also when the agent
//! answers the cancelled prompt with an error); one withdrawn by `$/cancel_request` is answered
//! -32800 and withdrawn from the agent.
//!
//! Until the prompt's answer is written (inside a JSON-RPC batch, that is when the whole batch
//! is answered), the turn's updates are held, in order, and the agent's permission requests
//! wait; nothing the bridge reads from the agent waits for it. A second prompt sent while a
//! turn of the same session runs is not accepted by that turn's updates (a v1 agent's updates
//! say nothing of the prompt they belong to): it is accepted by its own answer, a cancellation,
//! or the first update once the turns before it ended. The session reports `idle` when its last
//! accepted turn ends, as the native v2 turn does.
//!
//! # Where a v1 agent lacks what v2 requires
//!
//! v2 requires `session/list`, `session/resume` and `session/close` of every agent:
//! - `session/list` of an agent without `sessionCapabilities.list` is answered with no
//!   sessions;
//! - `session/close` of one without `sessionCapabilities.close` cancels the session's turn and
//!   is answered `{}`;
//! - `session/resume` of one that cannot load is answered as if it had no replay cursor (a
//!   successful answer with an empty replay, which the schema allows): `session/resume` where
//!   the agent can resume; else `{}` for a session open on this connection (created, and not
//!   closed) and -32002 for any other.
//!
//! After `session/close` is answered, the session is gone from this connection, as from a
//! native v2 agent: a request about it (a prompt, a second close) is answered -32002 until a
//! `session/resume` opens it again, and what the v1 agent still sends about it is not passed on
//! (its permission requests are answered `cancelled`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::core::error::Error;
use crate::core::handler::{DynHandler, Handler, IncomingNotification, IncomingRequest};
use crate::core::jsonrpc::ErrorObject;
use crate::core::peer::Peer;
use crate::{Connection, transport};

/// Bytes buffered each way between the bridge and the v1 implementation.
const LINK_BUFFER: usize = 256 * 1024;

/// How long `session/close` waits for the turns it cancelled to end before it answers. The
/// v1 side answers a cancelled prompt within its cancel grace (100 ms by default), so this bound
/// is only reached by a close batched with its own prompt (whose answer waits for the batch):
/// the spec says not to batch prompts.
const CLOSE_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// Serves v2 clients with a v1 implementation (see the [module docs](self)). One per
/// connection: it holds the connection's sessions (a [`ProtocolRouter`] is one per connection
/// too).
///
/// [`ProtocolRouter`]: crate::version::ProtocolRouter
pub struct V2Bridge {
    v1: Arc<dyn DynHandler>,
    /// The v1 implementation's connection, started by the first message.
    agent: OnceLock<Peer>,
    state: Arc<State>,
}

impl std::fmt::Debug for V2Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("V2Bridge").field("linked", &self.agent.get().is_some()).finish_non_exhaustive()
    }
}

impl V2Bridge {
    /// A bridge to a raw v1 handler.
    pub fn new(v1: impl Handler) -> Self {
        Self::over(Arc::new(v1))
    }

    /// A bridge to a typed v1 agent (`acp_types::Agent`, e.g. under `#[acp_agent]`).
    pub fn agent<A>(agent: A) -> Self
    where
        A: acp_types::Agent<crate::AgentContext> + 'static,
    {
        Self::new(crate::agent::AgentHandler::new(agent))
    }

    pub(crate) fn over(v1: Arc<dyn DynHandler>) -> Self {
        Self { v1, agent: OnceLock::new(), state: Arc::new(State::default()) }
    }

    /// The v1 implementation's connection, started on first use; `client` is the v2 client's.
    fn link(&self, client: &Peer) -> Peer {
        self.agent
            .get_or_init(|| {
                let _ = self.state.client.set(client.clone());
                let ((agent_reads, agent_writes), (bridge_reads, bridge_writes)) = transport::duplex(LINK_BUFFER);
                let (_, agent_side) = Connection::new().serve(agent_reads, agent_writes, SharedV1(self.v1.clone()));
                let (agent, bridge_side) =
                    Connection::new().serve(bridge_reads, bridge_writes, FromAgent { state: self.state.clone() });
                // Both end when the bridge is dropped (see `Drop`).
                tokio::spawn(agent_side);
                tokio::spawn(bridge_side);
                agent
            })
            .clone()
    }

    async fn initialize(&self, agent: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let v2 = object_params(&req)?;
        let mut v1 = Map::new();
        v1.insert("protocolVersion".into(), json!(1));
        v1.insert("clientCapabilities".into(), json!({}));
        copy(&v2, "info", &mut v1, "clientInfo");
        copy(&v2, "_meta", &mut v1, "_meta");
        let answer = object_answer(&call(agent, "initialize", &Value::Object(v1), &req).await?)?;
        let capabilities = answer.get("agentCapabilities").cloned().unwrap_or(Value::Null);
        let _ = self.state.caps.set(V1Caps::of(&capabilities));
        let mut v2 = Map::new();
        v2.insert("protocolVersion".into(), json!(2));
        let info = answer.get("agentInfo").filter(|info| info.is_object()).cloned();
        v2.insert("info".into(), info.unwrap_or_else(|| json!({"name": "unknown", "version": "unknown"})));
        v2.insert("capabilities".into(), v2_capabilities(&capabilities));
        if let Some(Value::Array(methods)) = answer.get("authMethods") {
            v2.insert("authMethods".into(), Value::Array(methods.iter().map(v2_auth_method).collect()));
        }
        copy(&answer, "_meta", &mut v2, "_meta");
        encode(&Value::Object(v2))
    }

    async fn new_session(&self, agent: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let params = v1_session_params(object_params(&req)?);
        let answer = v2_session_answer(&call(agent, "session/new", &params, &req).await?)?;
        #[derive(serde::Deserialize)]
        struct Created {
            #[serde(rename = "sessionId")]
            session_id: String,
        }
        if let Ok(created) = serde_json::from_str::<Created>(answer.get()) {
            self.state.opened(&created.session_id);
        }
        Ok(answer)
    }

    async fn resume(&self, agent: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let mut params = object_params(&req)?;
        let caps = self.state.caps();
        let session = req.session_id.clone().unwrap_or_default();
        let replay = params.remove("replayFrom").filter(|cursor| !cursor.is_null());
        let params = v1_session_params(params);
        let method = match replay {
            Some(cursor) => {
                if cursor.get("type").and_then(Value::as_str) != Some("start") {
                    return Err(ErrorObject::invalid_params_at("replayFrom", "unknown replay cursor"));
                }
                if caps.load {
                    "session/load"
                } else {
                    // Nothing to replay from: resumed as without a cursor, with an empty replay.
                    return self.resume_without_replay(agent, &req, &session, &params).await;
                }
            }
            None => return self.resume_without_replay(agent, &req, &session, &params).await,
        };
        let answer = v2_session_answer(&call(agent, method, &params, &req).await?)?;
        self.state.opened(&session);
        Ok(answer)
    }

    /// A resume that replays nothing: `session/resume` where the agent can, else a load whose
    /// replay is dropped, else the session as it is if it is open on this connection.
    async fn resume_without_replay(
        &self,
        agent: &Peer,
        req: &IncomingRequest,
        session: &Arc<str>,
        params: &Value,
    ) -> Result<Box<RawValue>, ErrorObject> {
        let caps = self.state.caps();
        let answer = if caps.resume {
            v2_session_answer(&call(agent, "session/resume", params, req).await?)?
        } else if caps.load {
            // Loading replays the history, which a resume without a cursor must not (until the
            // load ends, however it ends).
            let _quiet = Quiet::new(&self.state, session);
            v2_session_answer(&call(agent, "session/load", params, req).await?)?
        } else if self.state.is_open(session) {
            // The agent can neither resume nor load: a session it has open on this connection
            // resumes as it is; any other is not found.
            encode(&json!({}))?
        } else {
            let mut error = ErrorObject::resource_not_found(None);
            error.data = Some(json!({
                "sessionId": &**session,
                "reason": "this agent (v1, without `sessionCapabilities.resume` or `loadSession`) \
                    can only resume the sessions it has open on this connection",
            }));
            return Err(error);
        };
        self.state.opened(session);
        Ok(answer)
    }

    async fn close(&self, agent: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let Some(session) = req.session_id.clone() else {
            return forward(agent, req).await;
        };
        if self.state.is_closed(&session) {
            // Closing a session that is gone succeeds, as the schema asks.
            return encode(&json!({}));
        }
        let answer = if self.state.caps().close {
            forward(agent, req).await?
        } else {
            self.state.cancel_turns(&session);
            agent.notify("session/cancel", &json!({"sessionId": &*session})).await.map_err(ErrorObject::from)?;
            encode(&json!({}))?
        };
        // The cancelled turns' last updates and their idle `state_update` go before the answer;
        // nothing about the session goes after it.
        self.state.settled(&session, CLOSE_SETTLE).await;
        self.state.forget(&session);
        self.state.close(&session);
        Ok(answer)
    }

    async fn set_config_option(&self, agent: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let mut params = object_params(&req)?;
        // v2 tags a select's value `type: id`; v1 tells it by the absence of a type.
        if params.get("type").and_then(Value::as_str) == Some("id") {
            params.remove("type");
        }
        v2_session_answer(&call(agent, &req.method, &Value::Object(params), &req).await?)
    }

    async fn logout(&self, agent: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        if self.state.caps().logout {
            return forward_as(agent, "logout", &req).await;
        }
        Err(ErrorObject::invalid_request(
            "this agent cannot log out: its v1 side does not advertise `agentCapabilities.auth.logout`",
        ))
    }

    /// A v2 prompt: passed on as a v1 prompt, answered once accepted; the turn goes on in a
    /// task of its own (see the [module docs](self#the-prompt-lifecycle)).
    async fn prompt(&self, agent: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let Some(session) = req.session_id.clone() else {
            return forward(agent, req).await;
        };
        let client = req.peer.clone();
        let content = object_params(&req)?.remove("prompt").unwrap_or_else(|| json!([]));
        let (accept, accepted) = oneshot::channel();
        let user_message = self.state.next_id("user");
        let turn = Arc::new(BridgedTurn {
            session: session.clone(),
            user_message: user_message.clone(),
            content,
            answered: req.watch.answered(),
            decision: Mutex::new(Decision::Waiting(accept)),
            out: tokio::sync::Mutex::new(Held::default()),
            settled: watch::Sender::new(false),
            cancelled: AtomicBool::new(false),
        });
        self.state.begin_turn(&session, turn.clone());
        let mut pending = match agent.send_request_raw(&req.method, req.params.as_deref()).await {
            Ok(pending) => pending,
            Err(e) => {
                turn.refuse();
                self.state.end_turn(&turn);
                return Err(e.into());
            }
        };
        let (mut accepted, mut ending) = (accepted, false);
        let early = loop {
            tokio::select! {
                biased;
                answer = &mut pending => break Some(answer),
                _ = &mut accepted => break None,
                () = req.cancel.cancelled(), if !ending => {
                    if client.is_closed() {
                        // The connection is ending, which cancels nothing: the runtime still
                        // writes what comes within its grace period.
                        ending = true;
                        continue;
                    }
                    if client.cancelled_by_cancel_request(&req.id) && turn.refuse() {
                        // The request itself is withdrawn: answered -32800, the v1 prompt
                        // dropped (which withdraws it there too).
                        self.state.end_turn(&turn);
                        return Err(ErrorObject::request_cancelled());
                    }
                    // `session/cancel` (passed on to the agent as well): accepted, and the
                    // agent's `cancelled` answer ends the turn.
                    turn.cancelled.store(true, Ordering::Relaxed);
                    pending.cancel();
                    break None;
                }
            }
        };
        let answer = match early {
            Some(Err(Error::Rpc(error))) if !turn.cancelled.load(Ordering::Relaxed) && turn.refuse() => {
                self.state.end_turn(&turn);
                return Err(error);
            }
            Some(answer) => Outcome::Answered(answer),
            None => Outcome::Pending(pending),
        };
        turn.accept();
        let finishing = Finishing::new(&self.state, &session);
        tokio::spawn(finish(self.state.clone(), client, turn, answer, finishing));
        // v1.7.0's schema answers `{}`; the official SDKs' clients read the user message's id
        // here (as the native v2 turn answers), and a peer expecting `{}` ignores it.
        encode(&json!({"messageId": user_message}))
    }
}

/// An accepted turn, from its start to its idle end.
async fn finish(state: Arc<State>, client: Peer, turn: Arc<BridgedTurn>, answer: Outcome, _finishing: Finishing) {
    turn.start(&client).await;
    let answer = match answer {
        Outcome::Answered(answer) => answer,
        Outcome::Pending(pending) => pending.await,
    };
    let others = state.end_turn(&turn);
    let cancelled = turn.cancelled.load(Ordering::Relaxed);
    let update = match answer {
        Err(Error::ConnectionClosed) => return,
        Ok(result) => {
            let result: Value = serde_json::from_str(result.get()).unwrap_or(Value::Null);
            let stop = result.get("stopReason").cloned().unwrap_or_else(|| json!("end_turn"));
            json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": stop})
        }
        // A cancelled prompt whose agent failed instead of answering `cancelled`: the spec
        // wants the cancellation reported.
        Err(_) if cancelled => json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}),
        Err(e) => {
            tracing::warn!(error = %e, "acp v2 bridge: the v1 prompt failed after it was accepted");
            json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": "error", "error": e.to_error_object()})
        }
    };
    if others > 0 {
        tracing::debug!(session_id = %turn.session, others, "acp v2 bridge: turn ended; the session still runs others");
        return;
    }
    let _ = client.notify("session/update", &json!({"sessionId": &*turn.session, "update": update})).await;
}

impl Drop for V2Bridge {
    /// The client's connection is done with the bridge (everything answered, or given up after
    /// its grace period): the v1 implementation's connection ends too, cancelling what still
    /// runs there. Not sooner: a client that closes its side right after a request (`echo
    /// request | agent`) still gets the answer, as from a v1 implementation served directly.
    fn drop(&mut self) {
        if let Some(agent) = self.agent.get() {
            agent.close();
        }
    }
}

impl Handler for V2Bridge {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let agent = self.link(&req.peer);
        if let Some(session) = &req.session_id
            && self.state.is_closed(session)
            && !matches!(&*req.method, "session/resume" | "session/load" | "session/new" | "session/close")
        {
            // As a native v2 agent answers: the session no longer exists on this connection.
            return Err(closed_session(session));
        }
        match &*req.method {
            "initialize" => self.initialize(&agent, req).await,
            "session/new" => self.new_session(&agent, req).await,
            "session/prompt" => self.prompt(&agent, req).await,
            "session/resume" => self.resume(&agent, req).await,
            "session/close" => self.close(&agent, req).await,
            "session/set_config_option" => self.set_config_option(&agent, req).await,
            "session/list" if !self.state.caps().list => encode(&json!({"sessions": []})),
            "auth/login" => forward_as(&agent, "authenticate", &req).await,
            "auth/logout" => self.logout(&agent, req).await,
            // A v1 agent cannot stop one tool call or terminal, so the bridge never advertises
            // `capabilities.cancel`; a cancel for a call that does not advertise it is -32602.
            "tool_call/cancel" | "terminal/cancel" => Err(ErrorObject::invalid_params(format_args!(
                "`{}`: the v1 agent behind this bridge cannot cancel one tool call or terminal",
                req.method
            ))),
            _ => forward(&agent, req).await,
        }
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        let agent = self.link(&notification.peer);
        if let Some(session) = notification.session_id() {
            if self.state.is_closed(&session) {
                return;
            }
            if notification.method == "session/cancel" {
                self.state.cancel_turns(&session);
            }
        }
        if let Err(e) = agent.notify_raw(&notification.method, notification.params.as_deref()).await {
            tracing::debug!(error = %e, method = %notification.method, "acp v2 bridge: not passed on to the v1 agent");
        }
    }
}

/// What the v1 agent sends, translated for the v2 client.
struct FromAgent {
    state: Arc<State>,
}

impl FromAgent {
    fn client(&self) -> Option<&Peer> {
        self.state.client.get()
    }

    async fn permission(&self, client: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let mut v1 = object_params(&req)?;
        let session = req.session_id.clone().unwrap_or_default();
        // A sign of work on the session's turn: after its start (the held updates first).
        if let Some(turn) = self.state.working_turn(&session)
            && turn.accept()
        {
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
    fn update(&self, session: &str, params: &mut Map<String, Value>) -> Option<()> {
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
        if let Some(session) = &req.session_id
            && self.state.is_closed(session)
        {
            // Nothing more goes to the client about a closed session.
            return match method {
                "session/request_permission" => encode(&json!({"outcome": {"outcome": "cancelled"}})),
                _ => Err(closed_session(session)),
            };
        }
        if method == "session/request_permission" {
            return self.permission(&client, req).await;
        }
        if let Some(session) = &req.session_id
            && let Some(turn) = self.state.working_turn(session)
            && turn.accept()
        {
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
            if let Some(turn) = self.state.working_turn(session)
                && turn.accept()
            {
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

/// One v2 prompt on its way through the bridge.
struct BridgedTurn {
    session: Arc<str>,
    /// The id of the prompt as a `user_message`.
    user_message: String,
    content: Value,
    /// Fires once the prompt's answer is queued: the turn's updates go after it.
    answered: CancellationToken,
    decision: Mutex<Decision>,
    /// The turn's updates that came before its start, and whether it started.
    out: tokio::sync::Mutex<Held>,
    /// `true` once started or refused: what waited for it may go on.
    settled: watch::Sender<bool>,
    /// The client cancelled it: it reports no more states but its idle end.
    cancelled: AtomicBool,
}

#[derive(Default)]
struct Held {
    started: bool,
    updates: Vec<Map<String, Value>>,
}

/// Whether a bridged prompt is accepted: by the first sign that the agent took it, or by the
/// bridge (the answer came, or a cancellation); or refused, by an error before either.
enum Decision {
    Waiting(oneshot::Sender<()>),
    Accepted,
    Refused,
}

impl BridgedTurn {
    /// Accepts the prompt unless it was refused; whether it is accepted.
    fn accept(&self) -> bool {
        let mut decision = lock(&self.decision);
        match std::mem::replace(&mut *decision, Decision::Accepted) {
            Decision::Waiting(accept) => {
                let _ = accept.send(());
                true
            }
            Decision::Accepted => true,
            Decision::Refused => {
                *decision = Decision::Refused;
                false
            }
        }
    }

    fn is_accepted(&self) -> bool {
        matches!(*lock(&self.decision), Decision::Accepted)
    }

    /// Refuses the prompt unless it was accepted; whether it is refused.
    fn refuse(&self) -> bool {
        let mut decision = lock(&self.decision);
        if matches!(*decision, Decision::Accepted) {
            return false;
        }
        *decision = Decision::Refused;
        self.settled.send_replace(true);
        true
    }

    /// Reports the accepted prompt once its answer is written (or can no longer be): the user
    /// message, `running`, then the updates held meanwhile.
    async fn start(&self, client: &Peer) {
        tokio::select! {
            () = self.answered.cancelled() => {}
            () = client.closed() => {}
        }
        let mut held = self.out.lock().await;
        let session = &*self.session;
        let message = json!({"sessionUpdate": "user_message", "messageId": self.user_message, "content": self.content});
        let _ = client.notify("session/update", &json!({"sessionId": session, "update": message})).await;
        let _ = client.notify("session/update", &state_update(session, "running")).await;
        for update in held.updates.drain(..) {
            let _ = client.notify("session/update", &update).await;
        }
        held.started = true;
        drop(held);
        self.settled.send_replace(true);
    }

    /// Waits until the turn started (or was refused).
    async fn started(&self) {
        let _ = self.settled.subscribe().wait_for(|settled| *settled).await;
    }
}

enum Outcome {
    Answered(Result<Box<RawValue>, Error>),
    Pending(crate::core::peer::PendingResponse),
}

/// What the v1 side said it can do, from its `initialize` answer.
#[derive(Clone, Copy, Debug, Default)]
struct V1Caps {
    load: bool,
    list: bool,
    resume: bool,
    close: bool,
    logout: bool,
}

impl V1Caps {
    fn of(capabilities: &Value) -> Self {
        let marker = |pointer: &str| capabilities.pointer(pointer).is_some_and(Value::is_object);
        Self {
            load: capabilities.get("loadSession").and_then(Value::as_bool).unwrap_or(false),
            list: marker("/sessionCapabilities/list"),
            resume: marker("/sessionCapabilities/resume"),
            close: marker("/sessionCapabilities/close"),
            logout: marker("/auth/logout"),
        }
    }
}

/// The bridge's view of the connection, shared by both of its sides.
#[derive(Default)]
struct State {
    client: OnceLock<Peer>,
    caps: OnceLock<V1Caps>,
    sessions: Mutex<HashMap<Arc<str>, Track>>,
    /// Sessions closed on this connection and not resumed since.
    closed: Mutex<std::collections::HashSet<Arc<str>>>,
    /// Woken when a turn ends or its last update is sent.
    changed: tokio::sync::Notify,
    next_id: AtomicU64,
}

/// What the bridge keeps of one session.
#[derive(Default)]
struct Track {
    /// The message that chunks without an id continue: its kind and id.
    message: Option<(String, String)>,
    /// The session's prompts not yet ended, in the order they came: it is idle when none of
    /// them is accepted.
    turns: Vec<Arc<BridgedTurn>>,
    /// The agent's permission requests waiting for the client.
    asking: u32,
    /// How many loads are replaying history that is not for the client.
    quiet: u32,
    /// Created, loaded or resumed on this connection, and not closed.
    open: bool,
    /// Accepted turns whose end is still to be reported.
    finishing: u32,
}

/// An accepted turn whose end is not yet reported: counted in its session's [`Track`] from
/// the prompt's answer until the turn's task is done with it, however it ends.
struct Finishing {
    state: Arc<State>,
    session: Arc<str>,
}

impl Finishing {
    fn new(state: &Arc<State>, session: &Arc<str>) -> Self {
        state.with(session, |track| track.finishing += 1);
        Finishing { state: state.clone(), session: session.clone() }
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        if let Some(track) = lock(&self.state.sessions).get_mut(&*self.session) {
            track.finishing = track.finishing.saturating_sub(1);
        }
        self.state.changed.notify_waiters();
    }
}

impl State {
    fn caps(&self) -> V1Caps {
        self.caps.get().copied().unwrap_or_default()
    }

    fn next_id(&self, prefix: &str) -> String {
        format!("{prefix}-{}", self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn with<T>(&self, session: &str, f: impl FnOnce(&mut Track) -> T) -> T {
        let mut sessions = lock(&self.sessions);
        match sessions.get_mut(session) {
            Some(track) => f(track),
            None => f(sessions.entry(Arc::from(session)).or_default()),
        }
    }

    fn begin_turn(&self, session: &str, turn: Arc<BridgedTurn>) {
        self.with(session, |track| {
            if track.turns.is_empty() {
                track.message = None;
            }
            track.turns.push(turn);
        });
    }

    /// The turn is over (ended or refused); how many accepted turns the session still has.
    fn end_turn(&self, turn: &Arc<BridgedTurn>) -> usize {
        let mut sessions = lock(&self.sessions);
        let Some(track) = sessions.get_mut(&*turn.session) else { return 0 };
        track.turns.retain(|other| !Arc::ptr_eq(other, turn));
        let others = track.turns.iter().filter(|other| other.is_accepted()).count();
        drop(sessions);
        self.changed.notify_waiters();
        others
    }

    /// The turn the agent's work on the session belongs to: the oldest one not ended.
    fn working_turn(&self, session: &str) -> Option<Arc<BridgedTurn>> {
        lock(&self.sessions).get(session).and_then(|track| track.turns.first().cloned())
    }

    fn cancel_turns(&self, session: &str) {
        if let Some(track) = lock(&self.sessions).get(session) {
            for turn in &track.turns {
                turn.cancelled.store(true, Ordering::Relaxed);
            }
        }
    }

    fn opened(&self, session: &str) {
        lock(&self.closed).remove(session);
        self.with(session, |track| track.open = true);
    }

    /// `session/close` was answered: the session is gone from the connection.
    fn close(&self, session: &str) {
        lock(&self.closed).insert(Arc::from(session));
    }

    fn is_closed(&self, session: &str) -> bool {
        lock(&self.closed).contains(session)
    }

    /// Whether the session has turns not yet ended, or ended turns whose last update is not yet
    /// sent.
    fn busy(&self, session: &str) -> bool {
        lock(&self.sessions).get(session).is_some_and(|track| !track.turns.is_empty() || track.finishing > 0)
    }

    /// Waits until the session is no longer [busy](Self::busy), at most `bound`.
    async fn settled(&self, session: &str, bound: std::time::Duration) {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if !self.busy(session) {
                    return;
                }
                changed.await;
            }
        };
        if tokio::time::timeout(bound, wait).await.is_err() {
            tracing::debug!(session_id = %session, "acp v2 bridge: closing a session whose turns have not ended");
        }
    }

    fn is_open(&self, session: &str) -> bool {
        lock(&self.sessions).get(session).is_some_and(|track| track.open)
    }

    /// The session is closed: nothing of it is kept.
    fn forget(&self, session: &str) {
        lock(&self.sessions).remove(session);
    }

    /// The id for a message chunk of `kind`: the agent's own, else that of the message the
    /// last chunk belonged to when it was of the same kind, else a new one.
    fn message_id(&self, session: &str, kind: &str, given: Option<String>) -> String {
        self.with(session, |track| {
            let id = match (given, &track.message) {
                (Some(id), _) => id,
                (None, Some((last, id))) if last == kind => id.clone(),
                (None, _) => self.next_id(kind.trim_end_matches("_chunk")),
            };
            track.message = Some((kind.to_owned(), id.clone()));
            id
        })
    }

    /// Something other than a message chunk came: the next chunk starts a new message.
    fn message_ended(&self, session: &str) {
        self.with(session, |track| track.message = None);
    }

    fn is_quiet(&self, session: &str) -> bool {
        lock(&self.sessions).get(session).is_some_and(|track| track.quiet > 0)
    }

    /// A permission request starts or ends: the state to report, if any. The session's turn
    /// `requires_action` while any waits, and runs again after the last (unless it was
    /// cancelled meanwhile).
    fn asking(&self, session: &str, starts: bool) -> Option<&'static str> {
        self.with(session, |track| {
            let before = track.asking;
            track.asking = if starts { before + 1 } else { before.saturating_sub(1) };
            let edge = if starts { before == 0 } else { before == 1 };
            let live =
                track.turns.first().is_some_and(|turn| turn.is_accepted() && !turn.cancelled.load(Ordering::Relaxed));
            (edge && live).then_some(if starts { "requires_action" } else { "running" })
        })
    }
}

/// One permission request of the agent waiting for the client; counted until ended or
/// dropped (a handler given up after its grace period still ends its count).
struct Asking {
    state: Arc<State>,
    client: Peer,
    session: String,
    ended: bool,
}

impl Asking {
    async fn start(state: &Arc<State>, client: &Peer, session: &str) -> Self {
        if let Some(report) = state.asking(session, true) {
            let _ = client.notify("session/update", &state_update(session, report)).await;
        }
        Self { state: state.clone(), client: client.clone(), session: session.to_owned(), ended: false }
    }

    async fn end(mut self) {
        self.ended = true;
        if let Some(report) = self.state.asking(&self.session, false) {
            let _ = self.client.notify("session/update", &state_update(&self.session, report)).await;
        }
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        if let Some(report) = self.state.asking(&self.session, false)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let (client, update) = (self.client.clone(), state_update(&self.session, report));
            runtime.spawn(async move {
                let _ = client.notify("session/update", &update).await;
            });
        }
    }
}

/// A session's history being loaded for a resume that asked for none: its replay is dropped
/// until the load ends, however it ends.
struct Quiet {
    state: Arc<State>,
    session: Arc<str>,
}

impl Quiet {
    fn new(state: &Arc<State>, session: &Arc<str>) -> Self {
        state.with(session, |track| track.quiet += 1);
        Self { state: state.clone(), session: session.clone() }
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        self.state.with(&self.session, |track| track.quiet = track.quiet.saturating_sub(1));
    }
}

/// The v1 implementation as the bridge's own connection serves it.
struct SharedV1(Arc<dyn DynHandler>);

impl Handler for SharedV1 {
    fn handle_request(&self, req: IncomingRequest) -> impl Future<Output = Result<Box<RawValue>, ErrorObject>> + Send {
        self.0.handle_request_boxed(req)
    }

    fn handle_notification(&self, notification: IncomingNotification) -> impl Future<Output = ()> + Send {
        self.0.handle_notification_boxed(notification)
    }
}

// ---- JSON helpers ----------------------------------------------------------------------------

/// -32002 for a session closed on this connection, as the native v2 agent answers.
fn closed_session(session: &str) -> ErrorObject {
    let mut error = ErrorObject::resource_not_found(None);
    error.data = Some(json!({"sessionId": session, "reason": "the session was closed on this connection"}));
    error
}

fn state_update(session: &str, state: &str) -> Value {
    json!({"sessionId": session, "update": {"sessionUpdate": "state_update", "state": state}})
}

/// Calls the other side on behalf of `req` with `params` and hands back its answer, result or
/// error, as is.
async fn call(to: &Peer, method: &str, params: &Value, req: &IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
    ask(to, method, Some(&*encode(params)?), req).await
}

/// Passes a request on as it is.
async fn forward(to: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
    forward_as(to, &req.method, &req).await
}

/// Passes a request on as `method`, params untouched.
async fn forward_as(to: &Peer, method: &str, req: &IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
    ask(to, method, req.params.as_deref(), req).await
}

/// Calls the other side for `req`, passing its cancellation on: a cancelled `req` withdraws
/// the call (`$/cancel_request`) and answers what the other side answers then. When `req` was
/// cancelled because its connection is ending, the call runs on: the runtime still writes
/// what comes within its grace period.
async fn ask(
    to: &Peer,
    method: &str,
    params: Option<&RawValue>,
    req: &IncomingRequest,
) -> Result<Box<RawValue>, ErrorObject> {
    let mut pending = to.send_request_raw(method, params).await?;
    tokio::select! {
        biased;
        answer = &mut pending => return answer.map_err(ErrorObject::from),
        () = req.cancel.cancelled() => {}
    }
    if !req.peer.is_closed() {
        pending.cancel();
    }
    pending.await.map_err(ErrorObject::from)
}

fn object_params(req: &IncomingRequest) -> Result<Map<String, Value>, ErrorObject> {
    match req.params.as_deref().map(|raw| serde_json::from_str(raw.get())) {
        Some(Ok(Value::Object(params))) => Ok(params),
        None => Ok(Map::new()),
        _ => Err(ErrorObject::invalid_params("params must be an object")),
    }
}

fn object_answer(raw: &RawValue) -> Result<Map<String, Value>, ErrorObject> {
    match serde_json::from_str(raw.get()) {
        Ok(Value::Object(answer)) => Ok(answer),
        _ => Err(ErrorObject::internal_error("the v1 agent's answer is not an object")),
    }
}

fn encode(value: &Value) -> Result<Box<RawValue>, ErrorObject> {
    serde_json::value::to_raw_value(value).map_err(ErrorObject::internal_error)
}

fn copy(from: &Map<String, Value>, key: &str, to: &mut Map<String, Value>, as_key: &str) {
    if let Some(value) = from.get(key).filter(|value| !value.is_null()) {
        to.insert(as_key.to_owned(), value.clone());
    }
}

fn drop_nulls(value: &mut Value) {
    if let Some(object) = value.as_object_mut() {
        object.retain(|_, value| !value.is_null());
    }
}

/// A v1 session answer (new, load, resume, set_config_option) as v2's: without `modes`, which
/// v2 removed, and with v2's `configId` for each config option.
fn v2_session_answer(answer: &RawValue) -> Result<Box<RawValue>, ErrorObject> {
    let mut answer = object_answer(answer)?;
    answer.remove("modes");
    v2_config_options(&mut answer);
    encode(&Value::Object(answer))
}

/// The config options under `configOptions`, each with v1's `id` renamed v2's `configId`.
fn v2_config_options(holder: &mut Map<String, Value>) {
    let options = holder.get_mut("configOptions").and_then(Value::as_array_mut);
    for option in options.into_iter().flatten().filter_map(Value::as_object_mut) {
        if let Some(id) = option.remove("id") {
            option.entry("configId").or_insert(id);
        }
    }
}

/// v2 session setup params as v1's: `mcpServers` required, each in v1's shape (a stdio server
/// has no `type` and requires `args` and `env`; HTTP and SSE servers require `headers`).
fn v1_session_params(mut params: Map<String, Value>) -> Value {
    let servers = params.entry("mcpServers").or_insert_with(|| json!([]));
    for server in servers.as_array_mut().into_iter().flatten().filter_map(Value::as_object_mut) {
        match server.get("type").and_then(Value::as_str) {
            Some("stdio") | None => {
                server.remove("type");
                server.entry("args").or_insert_with(|| json!([]));
                server.entry("env").or_insert_with(|| json!([]));
            }
            Some("http" | "sse") => {
                server.entry("headers").or_insert_with(|| json!([]));
            }
            Some(_) => {}
        }
    }
    Value::Object(params)
}

/// v1's `agentCapabilities` as v2's `capabilities` (support markers, under `session`).
fn v2_capabilities(v1: &Value) -> Value {
    let flag = |pointer: &str| v1.pointer(pointer).and_then(Value::as_bool).unwrap_or(false);
    let marker = |pointer: &str| v1.pointer(pointer).is_some_and(Value::is_object);
    let mut prompt = Map::new();
    for (v1_name, v2_name) in [("image", "image"), ("audio", "audio"), ("embeddedContext", "embeddedContext")] {
        if flag(&format!("/promptCapabilities/{v1_name}")) {
            prompt.insert(v2_name.into(), json!({}));
        }
    }
    let mut mcp = Map::new();
    mcp.insert("stdio".into(), json!({}));
    if flag("/mcpCapabilities/http") {
        mcp.insert("http".into(), json!({}));
    }
    let mut session = Map::new();
    session.insert("prompt".into(), Value::Object(prompt));
    session.insert("mcp".into(), Value::Object(mcp));
    for extra in ["delete", "additionalDirectories"] {
        if marker(&format!("/sessionCapabilities/{extra}")) {
            session.insert(extra.into(), json!({}));
        }
    }
    let mut capabilities = Map::new();
    capabilities.insert("session".into(), Value::Object(session));
    if let Some(meta) = v1.get("_meta").filter(|meta| meta.is_object()) {
        capabilities.insert("_meta".into(), meta.clone());
    }
    Value::Object(capabilities)
}

/// A v1 auth method as v2's: `id` is `methodId`, and `type` is required (`agent` when absent).
fn v2_auth_method(v1: &Value) -> Value {
    let mut method = v1.as_object().cloned().unwrap_or_default();
    if let Some(id) = method.remove("id") {
        method.entry("methodId").or_insert(id);
    }
    method.entry("type").or_insert_with(|| json!("agent"));
    Value::Object(method)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
