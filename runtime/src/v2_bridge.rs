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
//! | `auth/login`, `auth/logout` | `authenticate`, `logout` |
//! | `session/new`, `session/list`, `session/close`, `session/set_config_option`, `session/cancel`, extensions | the same (`mcpServers` added to `session/new` when omitted; `modes` dropped from its answer) |
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
//! cancellation passed on, and ends `idle` with the agent's `cancelled`; one withdrawn by
//! `$/cancel_request` is answered -32800 and withdrawn from the agent.
//!
//! # Where a v1 agent lacks what v2 requires
//!
//! v2 requires `session/list`, `session/resume` and `session/close` of every agent:
//! - `session/list` of an agent without `sessionCapabilities.list` is answered with no
//!   sessions;
//! - `session/close` of one without `sessionCapabilities.close` cancels the session's turn and
//!   is answered `{}`;
//! - `session/resume` without a replay cursor, of one that can neither resume nor load, is
//!   answered `{}` for a session open on this connection (created, and not closed) and -32002
//!   for any other; with a replay cursor, of one that cannot load, -32602.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::handler::{DynHandler, Handler, IncomingNotification, IncomingRequest};
use crate::jsonrpc::ErrorObject;
use crate::peer::Peer;
use crate::{Connection, transport};

/// Bytes buffered each way between the bridge and the v1 implementation.
const LINK_BUFFER: usize = 256 * 1024;

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
        let mut params = object_params(&req)?;
        params.entry("mcpServers").or_insert_with(|| json!([]));
        let answer = without_modes(call(agent, "session/new", &Value::Object(params), &req).await?)?;
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
        let load = |mut params: Map<String, Value>| {
            params.entry("mcpServers").or_insert_with(|| json!([]));
            Value::Object(params)
        };
        match replay {
            Some(cursor) => {
                if cursor.get("type").and_then(Value::as_str) != Some("start") {
                    return Err(ErrorObject::invalid_params_at("replayFrom", "unknown replay cursor"));
                }
                if !caps.load {
                    return Err(ErrorObject::invalid_params_at(
                        "replayFrom",
                        "this agent cannot replay a session's history (its v1 side has no `loadSession`)",
                    ));
                }
                let answer = without_modes(call(agent, "session/load", &load(params), &req).await?)?;
                self.state.opened(&session);
                Ok(answer)
            }
            None if caps.resume => {
                let answer = call(agent, "session/resume", &Value::Object(params), &req).await?;
                self.state.opened(&session);
                Ok(answer)
            }
            None if caps.load => {
                // Loading replays the history, which a resume without a cursor must not.
                self.state.set_quiet(&session, true);
                let answer = call(agent, "session/load", &load(params), &req).await;
                self.state.set_quiet(&session, false);
                let answer = without_modes(answer?)?;
                self.state.opened(&session);
                Ok(answer)
            }
            // The agent can neither resume nor load: a session it has open on this
            // connection resumes as it is; any other is not found.
            None if self.state.is_open(&session) => encode(&json!({})),
            None => {
                let mut error = ErrorObject::resource_not_found(None);
                error.data = Some(json!({
                    "sessionId": &*session,
                    "reason": "this agent (v1, without `sessionCapabilities.resume` or `loadSession`) \
                        can only resume the sessions it has open on this connection",
                }));
                Err(error)
            }
        }
    }

    async fn close(&self, agent: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let Some(session) = req.session_id.clone() else {
            return forward(agent, req).await;
        };
        let answer = if self.state.caps().close {
            forward(agent, req).await?
        } else {
            if let Some(turn) = self.state.turn(&session) {
                turn.cancelled.store(true, Ordering::Relaxed);
            }
            agent.notify("session/cancel", &json!({"sessionId": &*session})).await.map_err(ErrorObject::from)?;
            encode(&json!({}))?
        };
        self.state.forget(&session);
        Ok(answer)
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
            started: tokio::sync::OnceCell::new(),
            cancelled: AtomicBool::new(false),
        });
        self.state.begin_turn(&session, turn.clone());
        let mut pending = match agent.send_request_raw(&req.method, req.params.as_deref()).await {
            Ok(pending) => pending,
            Err(e) => {
                self.state.end_turn(&session, &turn);
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
                    if client.shared.cancelled_by_cancel_request(&req.id) && turn.refuse() {
                        // The request itself is withdrawn: answered -32800, the v1 prompt
                        // dropped (which withdraws it there too).
                        self.state.end_turn(&session, &turn);
                        return Err(ErrorObject::request_cancelled());
                    }
                    // `session/cancel` (passed on to the agent as well): accepted, and the
                    // agent's `cancelled` answer ends the turn.
                    pending.cancel();
                    break None;
                }
            }
        };
        let answer = match early {
            Some(Err(Error::Rpc(error))) if turn.refuse() => {
                self.state.end_turn(&session, &turn);
                return Err(error);
            }
            Some(answer) => Outcome::Answered(answer),
            None => Outcome::Pending(pending),
        };
        let state = self.state.clone();
        tokio::spawn(async move {
            turn.start(&client).await;
            let answer = match answer {
                Outcome::Answered(answer) => answer,
                Outcome::Pending(pending) => pending.await,
            };
            state.end_turn(&turn.session, &turn);
            let update = match answer {
                Ok(result) => {
                    let result: Value = serde_json::from_str(result.get()).unwrap_or(Value::Null);
                    let stop = result.get("stopReason").cloned().unwrap_or_else(|| json!("end_turn"));
                    json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": stop})
                }
                Err(Error::ConnectionClosed) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "acp v2 bridge: the v1 prompt failed after it was accepted");
                    json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": "error", "error": e.to_error_object()})
                }
            };
            let _ = client.notify("session/update", &json!({"sessionId": &*turn.session, "update": update})).await;
        });
        // v1.7.0's schema answers `{}`; the official SDKs' clients read the user message's id
        // here (as the native v2 turn answers), and a peer expecting `{}` ignores it.
        encode(&json!({"messageId": user_message}))
    }
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
        match &*req.method {
            "initialize" => self.initialize(&agent, req).await,
            "session/new" => self.new_session(&agent, req).await,
            "session/prompt" => self.prompt(&agent, req).await,
            "session/resume" => self.resume(&agent, req).await,
            "session/close" => self.close(&agent, req).await,
            "session/list" if !self.state.caps().list => encode(&json!({"sessions": []})),
            "auth/login" => forward_as(&agent, "authenticate", &req).await,
            "auth/logout" => forward_as(&agent, "logout", &req).await,
            _ => forward(&agent, req).await,
        }
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        let agent = self.link(&notification.peer);
        if notification.method == "session/cancel"
            && let Some(turn) = notification.session_id().and_then(|session| self.state.turn(&session))
        {
            turn.cancelled.store(true, Ordering::Relaxed);
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

    /// The session's pending turn is accepted (the agent works on it) and reported started.
    async fn agent_works_on(&self, session: &str) {
        if let (Some(turn), Some(client)) = (self.state.turn(session), self.client()) {
            turn.start(client).await;
        }
    }

    async fn permission(&self, client: &Peer, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let mut v1 = object_params(&req)?;
        let session = req.session_id.clone().unwrap_or_default();
        self.agent_works_on(&session).await;
        let mut tool_call = v1.remove("toolCall").unwrap_or_else(|| json!({}));
        drop_nulls(&mut tool_call);
        let title = tool_call.get("title").and_then(Value::as_str).unwrap_or("Permission requested").to_owned();
        let mut v2 = Map::new();
        copy(&v1, "sessionId", &mut v2, "sessionId");
        v2.insert("title".into(), Value::String(title));
        v2.insert("subject".into(), json!({"type": "tool_call", "toolCall": tool_call}));
        copy(&v1, "options", &mut v2, "options");
        copy(&v1, "_meta", &mut v2, "_meta");
        self.state.asking(client, &session, true).await;
        let answer = call(client, &req.method, &Value::Object(v2), &req).await;
        // A `cancelled` outcome is the turn's cancellation (the client's `session/cancel`
        // resolves it before the bridge sees the notification): no `running` after it.
        let cancelled = match &answer {
            Ok(result) => serde_json::from_str::<Value>(result.get())
                .is_ok_and(|result| result.pointer("/outcome/outcome").and_then(Value::as_str) == Some("cancelled")),
            Err(error) => error.code == crate::jsonrpc::codes::REQUEST_CANCELLED,
        };
        if cancelled && let Some(turn) = self.state.turn(&session) {
            turn.cancelled.store(true, Ordering::Relaxed);
        }
        self.state.asking(client, &session, false).await;
        answer
    }

    /// A v1 `session/update` as v2's, or `None` when v2 has nothing for it.
    fn update(&self, params: &mut Map<String, Value>) -> Option<()> {
        let session = params.get("sessionId")?.as_str()?.to_owned();
        let update = params.get_mut("update")?.as_object_mut()?;
        let kind = update.get("sessionUpdate")?.as_str()?.to_owned();
        if self.state.is_quiet(&session) {
            return None;
        }
        match kind.as_str() {
            "user_message_chunk" | "agent_message_chunk" | "agent_thought_chunk" => {
                let given = update.get("messageId").and_then(Value::as_str).map(str::to_owned);
                let id = self.state.message_id(&session, &kind, given);
                update.insert("messageId".into(), Value::String(id));
            }
            "tool_call" | "tool_call_update" => {
                self.state.message_ended(&session);
                update.retain(|_, value| !value.is_null());
                if kind == "tool_call" {
                    update.insert("sessionUpdate".into(), json!("tool_call_update"));
                    update.entry("status").or_insert_with(|| json!("pending"));
                }
            }
            "plan" => {
                self.state.message_ended(&session);
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
            "current_mode_update" => return None,
            _ => self.state.message_ended(&session),
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
        if method == "session/request_permission" {
            return self.permission(&client, req).await;
        }
        if let Some(session) = &req.session_id {
            self.agent_works_on(session).await;
        }
        forward(&client, req).await
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        let Some(client) = self.client() else { return };
        let mut params = match notification.params.as_deref().map(|raw| serde_json::from_str(raw.get())) {
            Some(Ok(Value::Object(params))) if notification.method == "session/update" => params,
            _ => {
                let _ = client.notify_raw(&notification.method, notification.params.as_deref()).await;
                return;
            }
        };
        if let Some(session) = params.get("sessionId").and_then(Value::as_str) {
            let session = session.to_owned();
            if !self.state.is_quiet(&session) {
                self.agent_works_on(&session).await;
            }
        }
        if self.update(&mut params).is_some() {
            let _ = client.notify("session/update", &params).await;
        }
    }
}

/// One v2 prompt on its way through the bridge.
struct BridgedTurn {
    session: Arc<str>,
    /// The id of the prompt as a `user_message`.
    user_message: String,
    content: Value,
    /// Fires once the prompt's answer (`{}`) is queued: the turn's updates go after it.
    answered: CancellationToken,
    decision: Mutex<Decision>,
    /// Set once `user_message` and `running` are sent.
    started: tokio::sync::OnceCell<()>,
    /// The client cancelled it: it reports no more states but its idle end.
    cancelled: AtomicBool,
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

    /// Refuses the prompt unless it was accepted; whether it is refused.
    fn refuse(&self) -> bool {
        let mut decision = lock(&self.decision);
        if matches!(*decision, Decision::Accepted) {
            return false;
        }
        *decision = Decision::Refused;
        true
    }

    /// Reports the prompt as accepted (once): the user message, then `running`. Nothing for a
    /// refused prompt.
    async fn start(&self, client: &Peer) {
        if !self.accept() {
            return;
        }
        self.started
            .get_or_init(|| async {
                self.answered.cancelled().await;
                let session = &*self.session;
                let message =
                    json!({"sessionUpdate": "user_message", "messageId": self.user_message, "content": self.content});
                let _ = client.notify("session/update", &json!({"sessionId": session, "update": message})).await;
                let _ = client.notify("session/update", &state_update(session, "running")).await;
            })
            .await;
    }
}

enum Outcome {
    Answered(Result<Box<RawValue>, Error>),
    Pending(crate::peer::PendingResponse),
}

/// What the v1 side said it can do, from its `initialize` answer.
#[derive(Clone, Copy, Debug, Default)]
struct V1Caps {
    load: bool,
    list: bool,
    resume: bool,
    close: bool,
}

impl V1Caps {
    fn of(capabilities: &Value) -> Self {
        let session =
            |name: &str| capabilities.pointer(&format!("/sessionCapabilities/{name}")).is_some_and(Value::is_object);
        Self {
            load: capabilities.get("loadSession").and_then(Value::as_bool).unwrap_or(false),
            list: session("list"),
            resume: session("resume"),
            close: session("close"),
        }
    }
}

/// The bridge's view of the connection, shared by both of its sides.
#[derive(Default)]
struct State {
    client: OnceLock<Peer>,
    caps: OnceLock<V1Caps>,
    sessions: Mutex<HashMap<Arc<str>, Track>>,
    next_id: AtomicU64,
}

/// What the bridge keeps of one session.
#[derive(Default)]
struct Track {
    /// The message that chunks without an id continue: its kind and id.
    message: Option<(String, String)>,
    turn: Option<Arc<BridgedTurn>>,
    /// The agent's permission requests waiting for the client.
    asking: u32,
    /// A resume is loading the session: its replay is not for the client.
    quiet: bool,
    /// Created, loaded or resumed on this connection, and not closed.
    open: bool,
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
            track.turn = Some(turn);
            track.message = None;
        });
    }

    fn end_turn(&self, session: &str, turn: &Arc<BridgedTurn>) {
        if let Some(track) = lock(&self.sessions).get_mut(session)
            && track.turn.as_ref().is_some_and(|current| Arc::ptr_eq(current, turn))
        {
            track.turn = None;
        }
    }

    fn opened(&self, session: &str) {
        self.with(session, |track| track.open = true);
    }

    fn is_open(&self, session: &str) -> bool {
        lock(&self.sessions).get(session).is_some_and(|track| track.open)
    }

    /// The session is closed: nothing of it is kept.
    fn forget(&self, session: &str) {
        lock(&self.sessions).remove(session);
    }

    fn turn(&self, session: &str) -> Option<Arc<BridgedTurn>> {
        lock(&self.sessions).get(session).and_then(|track| track.turn.clone())
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

    fn set_quiet(&self, session: &str, quiet: bool) {
        self.with(session, |track| track.quiet = quiet);
    }

    fn is_quiet(&self, session: &str) -> bool {
        lock(&self.sessions).get(session).is_some_and(|track| track.quiet)
    }

    /// A permission request starts or ends: the session's turn `requires_action` while any
    /// waits, and runs again after the last (unless it was cancelled meanwhile).
    async fn asking(&self, client: &Peer, session: &str, starts: bool) {
        let report = self.with(session, |track| {
            let before = track.asking;
            track.asking = if starts { before + 1 } else { before.saturating_sub(1) };
            let edge = if starts { before == 0 } else { before == 1 };
            let live = track.turn.as_ref().is_some_and(|turn| !turn.cancelled.load(Ordering::Relaxed));
            (edge && live).then_some(if starts { "requires_action" } else { "running" })
        });
        if let Some(state) = report {
            let _ = client.notify("session/update", &state_update(session, state)).await;
        }
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

/// A v1 session setup answer without what v2 removed (`modes`).
fn without_modes(answer: Box<RawValue>) -> Result<Box<RawValue>, ErrorObject> {
    let mut answer = object_answer(&answer)?;
    answer.remove("modes");
    encode(&Value::Object(answer))
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
