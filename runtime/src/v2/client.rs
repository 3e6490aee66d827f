//! The client side of protocol v2: serving an [`acp_types::v2::Client`] implementation, the
//! per-call [`ClientContext`], and [`AgentHandle`] for calling the agent.
//!
//! Decoding and answering work as on v1 (see [`crate::client`]). What v2 adds is the end of a
//! turn: `session/prompt` only answers that the prompt was accepted, and the turn ends with an
//! idle `state_update`. [`AgentHandle::prompt`] returns at acceptance;
//! [`AgentHandle::prompt_turn`] returns at the end of the turn, with its stop reason, once the
//! client's `session_update` handler has seen every update of the turn (the idle one included).
//!
//! Which idle ends a turn: the first idle `state_update` of the session that arrived after the
//! prompt's answer and either carries a stop reason or follows a `running` /
//! `requires_action` state of that turn. So a bare idle snapshot (some agents send one after
//! `session/new` or `session/resume`) is not taken for the end of the next turn.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use acp_types::v2::{
    AgentNotification, AgentRequest, CancelSessionNotification, Client, CloseSessionRequest, CloseSessionResponse,
    DeleteSessionRequest, DeleteSessionResponse, IdleStateUpdateStopReason as StopReason, InitializeRequest,
    InitializeResponse, ListSessionsRequest, ListSessionsResponse, LoginAuthRequest, LoginAuthResponse,
    LogoutAuthRequest, LogoutAuthResponse, MessageId, NewSessionRequest, NewSessionResponse, PromptRequest,
    ResumeSessionRequest, ResumeSessionResponse, SetSessionConfigOptionRequest, SetSessionConfigOptionResponse,
    agent_method,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::agent::ContextInner;
use crate::core::connection::{Connection, Serve};
use crate::core::error::Error;
use crate::core::handler::{Handler, IncomingNotification, IncomingRequest};
use crate::core::jsonrpc::{ErrorObject, Id};
use crate::core::peer::AnswerHook;
use crate::core::peer::Peer;
use crate::typed;

// ---- serving --------------------------------------------------------------------------------

/// Serves a v2 `client` over `reader`/`writer` (an agent's stdout/stdin) with the default
/// [`Connection`] options; the connection follows v2's rules from the start. Returns the
/// handle to the agent and the [`Serve`] future (poll or spawn it).
pub fn serve_client<C, R, W>(client: C, reader: R, writer: W) -> (AgentHandle, Serve)
where
    C: Client<ClientContext> + 'static,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (peer, serve) = Connection::new().v2_rules().serve(reader, writer, ClientHandler::new(client));
    (AgentHandle::new(peer), serve)
}

/// `request` with the client capabilities `C`'s handlers earn (v2's `{}` markers under
/// `capabilities`, from the `#[acp_client(v2)]` table) set where it leaves them unset;
/// explicit settings are kept.
pub fn with_capabilities<C: crate::Advertise>(
    request: acp_types::v2::InitializeRequest,
) -> acp_types::v2::InitializeRequest {
    crate::advertise::advertise_request(request, C::CAPABILITIES)
}

/// The raw [`Handler`] that serves a [`Client<ClientContext>`](Client) of protocol v2 and
/// follows the turns of the connection's sessions for [`AgentHandle::prompt_turn`].
#[derive(Debug)]
pub struct ClientHandler<C> {
    client: C,
}

impl<C> ClientHandler<C> {
    /// Wraps `client`.
    pub fn new(client: C) -> Self {
        ClientHandler { client }
    }

    /// The wrapped client.
    pub fn client(&self) -> &C {
        &self.client
    }
}

impl<C: Client<ClientContext> + 'static> Handler for ClientHandler<C> {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let (request, cx) = decode_request(req)?;
        let response = request.dispatch(&self.client, cx).await?;
        typed::encode_result(&response)
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        let seq = notification.seq;
        let state = (&*notification.method == acp_types::v2::client_method::SESSION_UPDATE)
            .then(|| StateEvent::of(notification.params.as_deref()))
            .flatten();
        // After the handler, even one that panicked: a turn ends once the client has seen its
        // last update.
        let _observe = state.map(|(session, event)| ObserveOnDrop {
            peer: notification.peer.clone(),
            session,
            seq,
            event: Some(event),
        });
        if let Some((decoded, cx)) = decode_notification(notification) {
            if let Err(error) = decoded.dispatch(&self.client, cx.clone()).await {
                tracing::warn!(method = cx.method(), code = error.code.0, message = %error.message, "acp client (v2): notification handler failed");
            }
        }
    }
}

/// Tells the turn watches about a state update once its handler is done, or has panicked.
struct ObserveOnDrop {
    peer: Peer,
    session: String,
    seq: u64,
    event: Option<StateEvent>,
}

impl Drop for ObserveOnDrop {
    fn drop(&mut self) {
        if let Some(event) = self.event.take() {
            turn_watches(&self.peer).observe(&self.session, self.seq, event);
        }
    }
}

fn decode_request(req: IncomingRequest) -> Result<(AgentRequest, ClientContext), ErrorObject> {
    req.watch.track();
    let text = typed::params_text(req.params.as_deref());
    let request = typed::decode_incoming(text, |de| AgentRequest::decode(&req.method, de))?
        .ok_or_else(|| ErrorObject::method_not_found(&req.method))?;
    let meta = typed::scan_envelope(req.params.as_deref(), false).meta;
    let cx = ClientContext {
        inner: Arc::new(ContextInner {
            request_id: Some(req.id),
            method: req.method,
            session_id: req.session_id,
            meta,
            handle: AgentHandle { peer: req.peer, cancel: Some(req.cancel.clone()) },
            cancel: req.cancel,
            watch: Some(req.watch),
            earned: OnceLock::new(),
        }),
    };
    Ok((request, cx))
}

fn decode_notification(notification: IncomingNotification) -> Option<(AgentNotification, ClientContext)> {
    let text = typed::params_text(notification.params.as_deref());
    let decoded = match typed::decode_incoming(text, |de| AgentNotification::decode(&notification.method, de)) {
        Ok(Some(decoded)) => decoded,
        Ok(None) => {
            tracing::debug!(method = %notification.method, "acp client (v2): unknown notification ignored");
            return None;
        }
        Err(error) => {
            tracing::warn!(method = %notification.method, %error, data = ?error.data, "acp client (v2): notification with invalid params ignored");
            return None;
        }
    };
    let envelope = typed::scan_envelope(notification.params.as_deref(), true);
    let cancel = notification.peer.closed_token();
    let cx = ClientContext {
        inner: Arc::new(ContextInner {
            request_id: None,
            method: notification.method,
            session_id: envelope.session_id,
            meta: envelope.meta,
            handle: AgentHandle::new(notification.peer),
            cancel,
            watch: None,
            earned: OnceLock::new(),
        }),
    };
    Some((decoded, cx))
}

// ---- the context ----------------------------------------------------------------------------

/// What a v2 client's handler gets besides its params (the `Cx` of
/// [`acp_types::v2::Client<ClientContext>`](Client)). Cheap to clone.
#[derive(Clone, Debug)]
pub struct ClientContext {
    inner: Arc<ContextInner<AgentHandle>>,
}

impl ClientContext {
    /// The id of the request being handled; `None` for a notification.
    pub fn request_id(&self) -> Option<&Id> {
        self.inner.request_id.as_ref()
    }

    /// The method being handled.
    pub fn method(&self) -> &str {
        &self.inner.method
    }

    /// The params' top-level `"sessionId"`, when there is one.
    pub fn session_id(&self) -> Option<&str> {
        self.inner.session_id.as_deref()
    }

    /// The params' top-level `"_meta"` object, when there is one.
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.inner.meta.as_deref()
    }

    /// The request's cancellation token: `$/cancel_request`, our own `session/cancel` for a
    /// pending permission request, and the connection's end.
    pub fn cancellation_token(&self) -> &CancellationToken {
        self.inner.watched();
        &self.inner.cancel
    }

    /// Whether the request has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancellation_token().is_cancelled()
    }

    /// Completes when the request is cancelled.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancellation_token().cancelled()
    }

    /// The agent, with calls bound to this request.
    pub fn agent(&self) -> &AgentHandle {
        &self.inner.handle
    }

    /// The raw connection.
    pub fn peer(&self) -> &Peer {
        &self.inner.handle.peer
    }
}

// ---- the handle -----------------------------------------------------------------------------

/// A v2 client's handle to its agent: typed calls, cheap to clone.
#[derive(Clone, Debug)]
pub struct AgentHandle {
    pub(crate) peer: Peer,
    cancel: Option<CancellationToken>,
}

/// What `session/prompt` answers in v2: the prompt was accepted.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Accepted {
    /// The id of the user message the prompt became (the official SDKs send it; v1.7.0's
    /// schema answers `{}`, then it is `None` and the `user_message` update carries it).
    pub message_id: Option<MessageId>,
    /// The answer's `_meta`.
    pub meta: Option<Map<String, Value>>,
}

/// How a turn ended: the idle `state_update` that ended it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TurnEnd {
    /// The id of the user message the prompt became, when the answer named it.
    pub message_id: Option<MessageId>,
    /// The stop reason (`None` when the idle update carried none).
    pub stop_reason: Option<StopReason>,
    /// The error of stop reason `error`, as a wire error object (also inside
    /// [`StopReason::Error`]).
    pub error: Option<ErrorObject>,
}

macro_rules! agent_calls {
    ($($(#[$doc:meta])* $name:ident($method:expr, $req:ty) -> $resp:ty;)*) => {
        $(
            $(#[$doc])*
            #[inline]
            pub fn $name(&self, params: $req) -> impl Future<Output = Result<$resp, Error>> + Send + '_ {
                self.call($method, &params)
            }
        )*
    };
}

impl AgentHandle {
    /// An unbound handle over a raw connection.
    pub fn new(peer: Peer) -> Self {
        AgentHandle { peer, cancel: None }
    }

    /// This handle bound to `token`: pending calls give up when it fires.
    pub fn bound_to(&self, token: CancellationToken) -> Self {
        AgentHandle { peer: self.peer.clone(), cancel: Some(token) }
    }

    /// The raw connection.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// Whether the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.peer.is_closed()
    }

    /// Ends the connection from our side.
    pub fn close(&self) {
        self.peer.close();
    }

    agent_calls! {
        /// `initialize`: the first call; send protocol version 2 (see
        /// [`crate::version::ProtocolRouter::negotiate`] to fall back to v1).
        initialize(agent_method::INITIALIZE, InitializeRequest) -> InitializeResponse;
        /// `auth/login`: logs in with one of the advertised methods.
        login(agent_method::AUTH_LOGIN, LoginAuthRequest) -> LoginAuthResponse;
        /// `auth/logout`.
        logout(agent_method::AUTH_LOGOUT, LogoutAuthRequest) -> LogoutAuthResponse;
        /// `session/new`.
        new_session(agent_method::SESSION_NEW, NewSessionRequest) -> NewSessionResponse;
        /// `session/list`.
        list_sessions(agent_method::SESSION_LIST, ListSessionsRequest) -> ListSessionsResponse;
        /// `session/resume` (with `replayFrom`, the history is replayed as `session/update`s,
        /// all handled when this returns).
        resume_session(agent_method::SESSION_RESUME, ResumeSessionRequest) -> ResumeSessionResponse;
        /// `session/close`: the agent cancels the session's work and frees it.
        close_session(agent_method::SESSION_CLOSE, CloseSessionRequest) -> CloseSessionResponse;
        /// `session/delete` (the agent's `session.delete` capability).
        delete_session(agent_method::SESSION_DELETE, DeleteSessionRequest) -> DeleteSessionResponse;
        /// `session/set_config_option`.
        set_config_option(agent_method::SESSION_SET_CONFIG_OPTION, SetSessionConfigOptionRequest) -> SetSessionConfigOptionResponse;
        /// `tool_call/cancel`: stops one tool call, foreground or background, that the agent
        /// said can be cancelled (`capabilities.cancel` on its `tool_call_update`).
        cancel_tool_call(agent_method::TOOL_CALL_CANCEL, acp_types::v2::CancelToolCallRequest) -> acp_types::v2::CancelToolCallResponse;
        /// `terminal/cancel`: stops one terminal's command that the agent said can be
        /// cancelled (`capabilities.cancel` on its `terminal_update`).
        cancel_terminal(agent_method::TERMINAL_CANCEL, acp_types::v2::CancelTerminalRequest) -> acp_types::v2::CancelTerminalResponse;
    }

    /// `session/prompt`: returns when the agent has accepted the prompt. The turn goes on;
    /// its end is an idle `state_update` (see [`AgentHandle::prompt_turn`]).
    #[inline]
    pub fn prompt(&self, params: PromptRequest) -> impl Future<Output = Result<Accepted, Error>> + Send + '_ {
        let request = self.peer.encode_request(agent_method::SESSION_PROMPT, Some(&params));
        async move { accepted(&typed::call_encoded(&self.peer, request, self.cancel.as_ref()).await?) }
    }

    /// `session/prompt`, then waits for the end of the turn (see the [module docs](self)):
    /// returns once the client's `session_update` handler has seen the turn's idle update.
    /// Needs the connection to be served by [`ClientHandler`] (as [`serve_client`] does);
    /// fails with [`Error::ConnectionClosed`] if the connection ends first.
    ///
    /// Fails at once with [`Error::Protocol`] when called from one of the connection's
    /// notification handlers (e.g. a follow-up prompt sent from `session_update`): the turn's
    /// end is seen by the notification task, which would be waiting for itself. Spawn the call
    /// instead.
    #[inline]
    pub fn prompt_turn(&self, params: PromptRequest) -> impl Future<Output = Result<TurnEnd, Error>> + Send + '_ {
        let turns = turn_watches(&self.peer);
        // Watching before the prompt goes out: nothing of the turn can slip by.
        let mut watch = turns.watch(&params.session_id.0);
        let in_handler = self.peer.in_notification_handler();
        let request = self.peer.encode_request(agent_method::SESSION_PROMPT, Some(&params));
        let request = request.map(|request| request.on_answer(watch.on_answer()));
        async move {
            if in_handler {
                return Err(Error::Protocol(
                    "prompt_turn called from a notification handler would wait for itself: spawn it",
                ));
            }
            let accepted = accepted(&typed::call_encoded(&self.peer, request, self.cancel.as_ref()).await?)?;
            // Not raced with the connection's end: the idle update may be among the last
            // notifications, still being handled when the end of input is read.
            let mut end = watch.end().await.ok_or(Error::ConnectionClosed)?;
            end.message_id = accepted.message_id;
            Ok(end)
        }
    }

    /// `session/cancel`: cancels the session's work. Our pending incoming permission requests
    /// of the session are answered `cancelled` at once; the turn's idle update (stop reason
    /// `cancelled`) confirms the cancel.
    #[inline]
    pub fn cancel(
        &self,
        notification: CancelSessionNotification,
    ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.peer.notify(agent_method::SESSION_CANCEL, &notification)
    }

    /// Calls an extension method (`method` starts with `_`); the result as it is.
    pub async fn ext_method(&self, method: &str, params: Value) -> Result<Value, Error> {
        typed::call_ext(&self.peer, method, &params, self.cancel.as_ref()).await
    }

    /// Sends an extension notification.
    pub async fn ext_notification(&self, method: &str, params: Value) -> Result<(), Error> {
        typed::notify_ext(&self.peer, method, &params).await
    }

    fn call<P, R>(&self, method: &str, params: &P) -> impl Future<Output = Result<R, Error>> + Send + use<'_, P, R>
    where
        P: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        typed::typed_call(&self.peer, method, params, self.cancel.as_ref())
    }
}

fn accepted(raw: &RawValue) -> Result<Accepted, Error> {
    #[derive(Deserialize, Default)]
    struct Answer {
        #[serde(rename = "messageId", default)]
        message_id: Option<MessageId>,
        #[serde(rename = "_meta", default)]
        meta: Option<Map<String, Value>>,
    }
    let answer: Answer = typed::decode_result(raw)?;
    Ok(Accepted { message_id: answer.message_id, meta: answer.meta })
}

// ---- following turns ------------------------------------------------------------------------

/// A `state_update` as far as the end of a turn is concerned.
// Made and consumed once per state update: not worth a box for the idle variant.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
enum StateEvent {
    /// `running`, `requires_action`, or a state this schema does not know (not idle).
    Active,
    Idle {
        stop_reason: Option<StopReason>,
        error: Option<ErrorObject>,
    },
}

impl StateEvent {
    /// The session and state of a `session/update`'s raw params, if it is a `state_update`.
    fn of(params: Option<&RawValue>) -> Option<(String, StateEvent)> {
        #[derive(Deserialize)]
        struct Params {
            #[serde(rename = "sessionId")]
            session_id: String,
            update: Update,
        }
        #[derive(Deserialize)]
        struct Update {
            #[serde(rename = "sessionUpdate")]
            kind: String,
            #[serde(default)]
            state: Option<String>,
            // Read as they come and converted one by one: an idle update whose stop reason or
            // (non-standard) error does not decode still ends the turn, as the typed layer
            // delivers it with that member absent.
            #[serde(rename = "stopReason", default)]
            stop_reason: Option<serde_json::Value>,
            #[serde(default)]
            error: Option<serde_json::Value>,
        }
        let params = params.filter(|p| p.get().starts_with('{') && may_hold_state_update(p.get()))?;
        let Params { session_id, update } = serde_json::from_str(params.get()).ok()?;
        if update.kind != "state_update" {
            return None;
        }
        let event = match update.state.as_deref() {
            Some("idle") => {
                let error = update.error.clone().and_then(|v| serde_json::from_value(v).ok());
                // The stop reason is the union flattened into the update: its tag, and for
                // `error` the error member beside it.
                let stop_reason = update.stop_reason.and_then(|reason| {
                    let mut members = Map::new();
                    members.insert("stopReason".to_owned(), reason);
                    if let Some(error) = update.error {
                        members.insert("error".to_owned(), error);
                    }
                    serde_json::from_value(Value::Object(members)).ok()
                });
                StateEvent::Idle { stop_reason, error }
            }
            _ => StateEvent::Active,
        };
        Some((session_id, event))
    }
}

/// Whether `text` can hold the string `"state_update"`: written plainly, or with a `\u` escape
/// (the only escape that yields a letter or `_`). Most updates are chunks; this scan spares
/// them the second parse in [`StateEvent::of`], which was a tenth of a v2 client's
/// instructions per streamed chunk (BENCHMARKS.md, "Protocol v2").
fn may_hold_state_update(text: &str) -> bool {
    use std::sync::LazyLock;
    // Built once: building a searcher costs more than a search of a chunk's params.
    static TAG: LazyLock<memchr::memmem::Finder<'static>> =
        LazyLock::new(|| memchr::memmem::Finder::new("state_update"));
    static ESCAPE: LazyLock<memchr::memmem::Finder<'static>> = LazyLock::new(|| memchr::memmem::Finder::new("\\u"));
    let bytes = text.as_bytes();
    TAG.find(bytes).is_some() || ESCAPE.find(bytes).is_some()
}

/// The turns being waited for, by session (one per connection, fed by [`ClientHandler`]).
#[derive(Default)]
pub(crate) struct TurnWatches {
    sessions: Mutex<HashMap<String, Vec<Arc<WatchState>>>>,
    /// The connection ended and its notifications are all handled: no end can arrive.
    closed: AtomicBool,
}

#[derive(Default)]
struct WatchState {
    inner: Mutex<WatchInner>,
}

#[derive(Default)]
struct WatchInner {
    /// Set by the reader as it reads the prompt's answer: how many notifications were read
    /// before it. Only state updates read after the answer concern the turn; any update
    /// observed while this is unset was read before the answer, so none has to be kept.
    barrier: Option<u64>,
    /// Whether the turn was reported active since the answer.
    active: bool,
    /// The turn's end, once it arrived, until `end` takes it.
    end: Option<TurnEnd>,
    /// Told the end when it arrives, once `end` waits.
    waiter: Option<oneshot::Sender<TurnEnd>>,
}

impl StateEvent {
    /// Folds this event into a turn's `active` flag; the turn's end if it is one.
    fn ends_turn(&self, active: &mut bool) -> Option<TurnEnd> {
        match self {
            StateEvent::Active => {
                *active = true;
                None
            }
            StateEvent::Idle { stop_reason, error } if *active || stop_reason.is_some() => {
                Some(TurnEnd { message_id: None, stop_reason: stop_reason.clone(), error: error.clone() })
            }
            StateEvent::Idle { .. } => None,
        }
    }
}

/// The connection's [`TurnWatches`], kept in its extensions; made on first use, and closed
/// when the connection ends.
pub(crate) fn turn_watches(peer: &Peer) -> Arc<TurnWatches> {
    if let Some(watches) = peer.extensions().get::<TurnWatches>() {
        return watches;
    }
    let mut made = false;
    let watches = peer.extensions().get_or_insert_with(|| {
        made = true;
        TurnWatches::default()
    });
    if made {
        let closing = watches.clone();
        peer.extensions().on_close(move || closing.close());
    }
    watches
}

impl TurnWatches {
    fn watch(self: &Arc<Self>, session: &str) -> TurnWatch {
        let state = Arc::new(WatchState::default());
        lock(&self.sessions).entry(session.to_owned()).or_default().push(state.clone());
        TurnWatch { watches: self.clone(), session: session.to_owned(), state }
    }

    /// The connection ended and every notification it read was handled: the turns still
    /// waited for end with [`Error::ConnectionClosed`], now and from now on.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for state in lock(&self.sessions).values().flatten() {
            lock(&state.inner).waiter.take();
        }
    }

    /// State update number `seq` of `session` was handled.
    fn observe(&self, session: &str, seq: u64, event: StateEvent) {
        let sessions = lock(&self.sessions);
        for state in sessions.get(session).into_iter().flatten() {
            let mut inner = lock(&state.inner);
            // Read before the prompt's answer, or after the turn's end.
            if inner.barrier.is_none_or(|barrier| seq <= barrier) || inner.end.is_some() {
                continue;
            }
            let mut active = inner.active;
            let end = event.ends_turn(&mut active);
            inner.active = active;
            if let Some(end) = end {
                match inner.waiter.take() {
                    Some(tx) => {
                        let _ = tx.send(end);
                    }
                    None => inner.end = Some(end),
                }
            }
        }
    }
}

/// One `prompt_turn`'s view of its session's state updates; unregisters when dropped.
struct TurnWatch {
    watches: Arc<TurnWatches>,
    session: String,
    state: Arc<WatchState>,
}

impl TurnWatch {
    /// For the prompt's request: marks where, among the notifications, its answer was read.
    fn on_answer(&self) -> AnswerHook {
        let state = self.state.clone();
        Box::new(move |_, barrier| lock(&state.inner).barrier = Some(barrier))
    }

    /// The end of the turn whose prompt was answered; `None` if the connection ended first.
    async fn end(&mut self) -> Option<TurnEnd> {
        let rx = {
            let mut inner = lock(&self.state.inner);
            if let Some(end) = inner.end.take() {
                return Some(end);
            }
            // Checked with the waiter's lock held: `close` takes the lock after setting it.
            if self.watches.closed.load(Ordering::Acquire) {
                return None;
            }
            let (tx, rx) = oneshot::channel();
            inner.waiter = Some(tx);
            rx
        };
        rx.await.ok()
    }
}

impl Drop for TurnWatch {
    fn drop(&mut self) {
        let mut sessions = lock(&self.watches.sessions);
        if let Some(states) = sessions.get_mut(&self.session) {
            states.retain(|s| !Arc::ptr_eq(s, &self.state));
            if states.is_empty() {
                sessions.remove(&self.session);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn state_updates_are_found_plain_or_escaped_and_chunks_skipped() {
        let idle = raw(
            r#"{"sessionId":"s","update":{"sessionUpdate":"state_update","state":"idle","stopReason":"end_turn"}}"#,
        );
        assert!(
            matches!(StateEvent::of(Some(&idle)), Some((s, StateEvent::Idle { stop_reason: Some(StopReason::EndTurn), .. })) if s == "s")
        );
        // The tag's value with an escape still reads as a state update.
        let escaped = raw(r#"{"sessionId":"s","update":{"sessionUpdate":"state\u005fupdate","state":"running"}}"#);
        assert!(matches!(StateEvent::of(Some(&escaped)), Some((_, StateEvent::Active))));
        let chunk = raw(
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","messageId":"m","content":{"type":"text","text":"hi"}}}"#,
        );
        assert!(!may_hold_state_update(chunk.get()));
        assert!(StateEvent::of(Some(&chunk)).is_none());
    }
}
