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

mod from_agent;
mod shapes;
mod turns;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::{oneshot, watch};

use crate::core::error::Error;
use crate::core::handler::{DynHandler, Handler, IncomingNotification, IncomingRequest};
use crate::core::jsonrpc::ErrorObject;
use crate::core::peer::Peer;
use crate::{Connection, transport};

use from_agent::FromAgent;
use shapes::{
    call, closed_session, copy, encode, forward, forward_as, object_answer, object_params, v1_session_params,
    v2_auth_method, v2_capabilities, v2_session_answer,
};
use turns::{BridgedTurn, Decision, Finishing, Held, Outcome, Quiet, SharedV1, State, V1Caps};

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
        let open_or_close = matches!(&*req.method, "session/resume" | "session/load" | "session/new" | "session/close");
        let closed = req.session_id.as_ref().filter(|session| !open_or_close && self.state.is_closed(session));
        if let Some(session) = closed {
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
