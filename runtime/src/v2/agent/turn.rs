//! The protocol v2 prompt lifecycle, run by the runtime: a [`Turn`] is one `session/prompt`'s
//! foreground work, from acceptance to the idle `state_update` that ends it.
//!
//! The lifecycle, as `v2/prompt-lifecycle.mdx` orders it, and who does what:
//!
//! 1. The client sends `session/prompt`; the handler (`Agent::session_prompt`) starts in a task
//!    of its own with a [`Turn`] in its context ([`AgentContext::turn`]).
//! 2. **Acceptance**: the first of [`Turn::accept`], any update sent through the turn, or the
//!    handler returning `Ok`. The runtime then answers the request with the id of the user
//!    message the prompt became (`{"messageId": ...}`; agent-owned, [`Turn::accept_as`] to
//!    choose it), and once that answer is queued sends the `user_message` update with the
//!    prompt under that id and `state_update: running`. A handler that returns without having
//!    accepted names the id in its `PromptResponse`; [`Turn::response`] builds that answer
//!    for a turn already accepted. Until then the handler
//!    may still refuse the prompt by returning an error (e.g. an unknown session), which is
//!    answered as the request's error, with no update at all; except after a `session/cancel`
//!    (the error is then taken for the cancellation's: the prompt is accepted and its idle
//!    update says `cancelled`, as the spec wants cancellations reported) or a
//!    `$/cancel_request` for it (answered -32800).
//! 3. **Progress**: messages ([`Turn::agent_message`], [`Turn::say`]), thoughts, tool calls
//!    ([`Turn::start_tool_call`]), plans ([`Turn::plan`]) and permission requests
//!    ([`Turn::request_permission`], which reports `requires_action` while it waits).
//! 4. **The end**: when the last clone of the turn is dropped (normally when the handler
//!    returns) or at [`Turn::end`], an idle `state_update` goes out with the stop reason:
//!    `cancelled` if the session was cancelled during the turn, else what the handler set with
//!    [`Turn::set_stop_reason`], else `end_turn`. A handler that failed or panicked after
//!    acceptance ends the turn with stop reason `error` and its error object beside it
//!    (`"error": {code, message, data}`, the schema's `ErrorStopReason`). Idle means the session
//!    is ready for a new prompt, so while another accepted turn of the same session still
//!    runs (the client sent a second prompt before the first ended), a turn ends silently and
//!    the last one to end sends the idle update.
//!
//! Cancellation: the turn's token ([`Turn::cancelled`]) fires on `session/cancel` for the
//! session, on `session/close`, on `$/cancel_request` for the prompt before it was accepted,
//! and when the connection ends. Calls made through [`Turn::client`] are bound to it, so a
//! pending permission request resolves `cancelled` at once. Updates are never held back by
//! it: the spec lets an agent report its last updates after the cancel, before the idle.
//!
//! A turn can outlive its handler: keep a clone (e.g. in a spawned task) and the idle update
//! waits for it.
//!
//! [`AgentContext::turn`]: super::AgentContext::turn

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use acp_types::v2::{
    AbsolutePath, TerminalCancelCapabilities, TerminalCapabilities, TerminalExitStatus, TerminalId,
    TerminalOutputChunk, TerminalUpdate,
};
use acp_types::v2::{
    AgentMessage, AgentThought, Content, ContentBlock, ContentChunk, ErrorStopReason,
    IdleStateUpdateStopReason as StopReason, MessageId, PlanEntry, PlanId, PlanItems, PlanUpdate, PromptRequest,
    PromptResponse, RequestPermissionRequest, RequestPermissionResponse, RequiresActionStateUpdate, RunningStateUpdate,
    SessionId, SessionUpdate, StateUpdate, TextContent, ToolCallCancelCapabilities, ToolCallCapabilities,
    ToolCallContent, ToolCallContentChunk, ToolCallId, ToolCallStatus, ToolCallUpdate, ToolKind,
    UpdateSessionNotification, UserMessage,
};
use serde_json::value::RawValue;
use tokio::sync::{OnceCell, OwnedSemaphorePermit, oneshot};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::{AgentContext, ClientHandle};
use crate::core::catch_unwind::{CatchUnwind, panic_message};
use crate::core::error::Error;
use crate::core::jsonrpc::ErrorObject;
use crate::core::peer::{Encoded, SessionScope};

/// One prompt's foreground work (see the [module docs](self)). Cheap to clone; the idle
/// update goes out when the last clone is dropped, or at [`Turn::end`].
#[derive(Clone)]
pub struct Turn {
    inner: Arc<TurnInner>,
}

struct TurnInner {
    session_id: SessionId,
    /// The prompt, until the `user_message` acknowledgement takes it.
    prompt: Mutex<Option<Vec<ContentBlock>>>,
    /// Bound to `token`.
    client: ClientHandle,
    /// The session's work while the turn runs: `session/cancel` fires its token, and
    /// `session/close` waits for it to be dropped, which happens once the idle update is queued.
    scope: Option<SessionScope>,
    /// The scope's token.
    token: CancellationToken,
    /// Answers the `session/prompt` request; taken by acceptance or refusal.
    answer: Mutex<Option<oneshot::Sender<Answer>>>,
    /// Fires once the answer is queued for writing.
    answered: CancellationToken,
    /// The user message id, once accepted.
    accepted: OnceCell<MessageId>,
    stop_reason: Mutex<Option<StopReason>>,
    /// The handler failed or panicked after acceptance: its error.
    failed: Mutex<Option<ErrorObject>>,
    /// The idle update was sent (by [`Turn::end`]).
    ended: AtomicBool,
    /// The plan id of this turn's plan, once there is one.
    plan_id: Mutex<Option<PlanId>>,
    /// Permission requests of the turn waiting for the client's answer: the turn
    /// `requires_action` while there is one.
    asking: AtomicUsize,
    /// The turn's place among the connection's running turns, until its last clone is gone.
    _slot: Option<OwnedSemaphorePermit>,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn")
            .field("session_id", &self.inner.session_id)
            .field("accepted", &self.inner.accepted.get())
            .field("cancelled", &self.inner.token.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// The answer to the `session/prompt` request.
type Answer = Result<Box<RawValue>, ErrorObject>;

/// One permission request counted in [`TurnInner::asking`] while it waits (also when its
/// future is dropped).
struct Asking<'a> {
    count: &'a AtomicUsize,
    /// It was the only one waiting when it started.
    first: bool,
    done: bool,
}

impl<'a> Asking<'a> {
    fn start(count: &'a AtomicUsize) -> Self {
        Asking { count, first: count.fetch_add(1, Ordering::AcqRel) == 0, done: false }
    }

    /// Answered: whether it was the last one waiting.
    fn finish(mut self) -> bool {
        self.done = true;
        self.count.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A turn between its request's arrival and the start of its handler (see `agent.rs`).
pub(crate) struct TurnStart {
    turn: Turn,
    /// The request's own token: `$/cancel_request` for the prompt, or the connection's end.
    request: CancellationToken,
}

impl TurnStart {
    /// The turn of a `session/prompt` request, and the future that answers the request.
    pub(crate) fn new(
        cx: &AgentContext,
        params: &PromptRequest,
        answered: CancellationToken,
        slot: Option<OwnedSemaphorePermit>,
    ) -> (TurnStart, impl Future<Output = Result<Box<RawValue>, ErrorObject>> + Send + 'static) {
        let scope = cx.peer().session_scope(&params.session_id.0);
        let token = scope.token().clone();
        // A `session/cancel` read after the prompt but before this scope existed.
        if cx.request_id().is_some_and(|id| cx.peer().turn_cancelled(id)) {
            token.cancel();
        }
        let (tx, rx) = oneshot::channel();
        let turn = Turn {
            inner: Arc::new(TurnInner {
                session_id: params.session_id.clone(),
                prompt: Mutex::new(Some(params.prompt.clone())),
                client: cx.inner.handle.bound_to(token.clone()),
                scope: Some(scope),
                token: token.clone(),
                answer: Mutex::new(Some(tx)),
                answered,
                accepted: OnceCell::new(),
                stop_reason: Mutex::new(None),
                failed: Mutex::new(None),
                ended: AtomicBool::new(false),
                plan_id: Mutex::new(None),
                asking: AtomicUsize::new(0),
                _slot: slot,
            }),
        };
        // Before acceptance, cancelling the request (`$/cancel_request`, or the connection's
        // end) cancels the turn; the handler then ends it and the answer follows.
        let request = cx.inner.cancel.clone();
        let answer = async move {
            let mut rx = rx;
            tokio::select! {
                biased;
                answer = &mut rx => return answer.unwrap_or_else(|_| Err(ErrorObject::internal_error("the turn ended without an answer"))),
                () = request.cancelled() => token.cancel(),
            }
            rx.await.unwrap_or_else(|_| Err(ErrorObject::internal_error("the turn ended without an answer")))
        };
        (TurnStart { turn, request: cx.inner.cancel.clone() }, answer)
    }

    /// Runs the handler `run` with a context that carries the turn, in a task of its own.
    pub(crate) fn spawn<F, Fut>(self, run: F, cx: AgentContext)
    where
        F: FnOnce(AgentContext) -> Fut + Send + 'static,
        Fut: Future<Output = Result<PromptResponse, acp_types::v2::Error>> + Send + 'static,
    {
        let TurnStart { turn, request } = self;
        let turn_cx = AgentContext { inner: cx.inner, turn: Some(turn.clone()) };
        let span = tracing::info_span!("acp_turn", session_id = %turn.inner.session_id.0);
        let task = async move {
            let outcome = CatchUnwind::new(async move { run(turn_cx).await }).await;
            match outcome {
                Ok(Ok(response)) => {
                    // The handler's id names the user message unless the turn was accepted
                    // already (then the id it was accepted with stands).
                    if let Err(e) = turn.accept_with(Some(response.message_id), response.meta).await {
                        tracing::debug!(error = %e, "acp turn: not accepted at the end of its handler");
                    }
                }
                // The session was cancelled before the prompt was accepted, and the handler
                // failed, likely because it was aborted: the spec wants cancellation reported
                // as the `cancelled` stop reason, never as an error, so the prompt is accepted
                // and its idle update says `cancelled` (as when the handler returns `Ok`).
                // A cancelled request (`$/cancel_request`) is answered -32800 instead.
                Ok(Err(error)) if turn.is_cancelled() && !turn.is_accepted() && !request.is_cancelled() => {
                    tracing::debug!(code = error.code.0, message = %error.message, "acp turn: the handler of a cancelled prompt failed before accepting it; reported as cancelled");
                    if let Err(e) = turn.accept_with(None, None).await {
                        tracing::debug!(error = %e, "acp turn: cancelled before acceptance, and not accepted");
                    }
                }
                Ok(Err(error)) => turn.fail(error.into()),
                Err(panic) => {
                    tracing::error!(panic = panic_message(&*panic), "prompt handler panicked");
                    turn.fail(ErrorObject::internal_error("the prompt handler panicked"));
                }
            }
            // The idle update goes out when the last clone is dropped (maybe this one).
        };
        tokio::spawn(tracing::Instrument::instrument(task, span));
    }
}

impl Turn {
    /// The session this turn belongs to.
    pub fn session_id(&self) -> &SessionId {
        &self.inner.session_id
    }

    /// The client, with calls bound to the turn: once it is cancelled, pending calls return
    /// [`Error::Cancelled`] and permission requests resolve `cancelled`.
    pub fn client(&self) -> &ClientHandle {
        &self.inner.client
    }

    /// The turn's cancellation token (see the [module docs](self)).
    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.inner.token
    }

    /// Whether the turn has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// Completes when the turn is cancelled.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.inner.token.cancelled()
    }

    /// Whether the prompt has been accepted.
    pub fn is_accepted(&self) -> bool {
        self.inner.accepted.initialized()
    }

    /// Accepts the prompt (step 2 of the lifecycle): answers `session/prompt` with the user
    /// message's id, then reports the user message and `state_update: running`. Returns the user message's id.
    /// Idempotent: later calls return the same id. Fails if the request was already answered
    /// otherwise (refused, or cancelled before acceptance and answered -32800).
    pub async fn accept(&self) -> Result<MessageId, Error> {
        self.accept_with(None, None).await
    }

    /// [`Turn::accept`] with the user message's id chosen by the agent (ignored if the turn
    /// was accepted already).
    pub async fn accept_as(&self, message_id: impl Into<MessageId>) -> Result<MessageId, Error> {
        self.accept_with(Some(message_id.into()), None).await
    }

    /// The answer a prompt handler returns once it is done: accepts the prompt if it was not
    /// yet, and names the user message it was accepted as.
    pub async fn response(&self) -> Result<PromptResponse, Error> {
        self.accept().await.map(PromptResponse::new)
    }

    async fn accept_with(
        &self,
        message_id: Option<MessageId>,
        meta: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> Result<MessageId, Error> {
        let id = self
            .inner
            .accepted
            .get_or_try_init(|| async {
                let tx = lock(&self.inner.answer).take().ok_or(Error::Cancelled)?;
                let id = message_id.unwrap_or_else(|| fresh_id("msg_user").into());
                tx.send(Ok(accepted_answer(&id, meta)?)).map_err(|_| Error::Cancelled)?;
                // The updates follow the answer on the wire.
                let peer = self.inner.client.peer();
                tokio::select! {
                    biased;
                    () = self.inner.answered.cancelled() => {}
                    () = peer.closed() => return Err(Error::ConnectionClosed),
                }
                let prompt = lock(&self.inner.prompt).take().unwrap_or_default();
                let user_message = self.send(UserMessage::new(id.clone()).content(prompt).into());
                let running = self.send(StateUpdate::from(RunningStateUpdate::new()).into());
                // Counted, and reported, under the session's foreground lock: an idle update
                // of another turn of the session cannot slip in after this `running`.
                let foreground = foreground(peer);
                let mut live = foreground.live.lock().await;
                *live.entry(self.inner.session_id.0.clone()).or_default() += 1;
                user_message.await?;
                running.await?;
                drop(live);
                Ok(id)
            })
            .await?;
        Ok(id.clone())
    }

    /// Sends one update of this session, accepting the prompt first if needed.
    pub fn update(&self, update: impl Into<SessionUpdate>) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.send_accepted(update.into())
    }

    // The helpers below are plain functions that encode their update at once and return the
    // future that sends it: the encoders are compiled in this crate, not in the agent's (the
    // body of an `async fn` is compiled where it is awaited).

    /// Encodes `update` now; the future accepts the prompt if needed, then sends it.
    fn send_accepted(&self, update: SessionUpdate) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        let notification = self.encode(update);
        let accepting = self.accepting();
        async move {
            if let Some(accepting) = accepting {
                accepting.await?;
            }
            self.inner.client.peer().send_notification(notification).await
        }
    }

    /// [`Turn::accept`] unless the prompt was accepted already; boxed, so that the
    /// acceptance's code stays in this crate too (it runs once per turn).
    fn accepting(&self) -> Option<Accepting<'_>> {
        (!self.is_accepted()).then(|| Box::pin(self.accept()) as _)
    }

    /// Encodes `update` now; the future sends it (the prompt is accepted already).
    fn send(&self, update: SessionUpdate) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.inner.client.peer().send_notification(self.encode(update))
    }

    fn encode(&self, update: SessionUpdate) -> Result<Encoded, Error> {
        let notification = UpdateSessionNotification::new(self.inner.session_id.clone(), update);
        self.inner.client.peer().encode_notification(acp_types::v2::client_method::SESSION_UPDATE, Some(&notification))
    }

    /// A new agent message, streamed in chunks or replaced whole (see [`MessageStream`]).
    pub fn agent_message(&self) -> MessageStream {
        MessageStream { turn: self.clone(), id: fresh_id("msg_agent").into(), thought: false }
    }

    /// A new thought (the agent's reasoning), like [`Turn::agent_message`].
    pub fn thought(&self) -> MessageStream {
        MessageStream { turn: self.clone(), id: fresh_id("msg_thought").into(), thought: true }
    }

    /// Sends a whole agent message of one text block; returns its id.
    pub fn say(&self, text: impl Into<String>) -> impl Future<Output = Result<MessageId, Error>> + Send + '_ {
        self.say_text(text.into())
    }

    fn say_text(&self, text: String) -> impl Future<Output = Result<MessageId, Error>> + Send + '_ {
        let id: MessageId = fresh_id("msg_agent").into();
        let message = AgentMessage::new(id.clone()).content(Some(vec![TextContent::new(text).into()]));
        let sent = self.send_accepted(SessionUpdate::AgentMessage(message));
        async move { sent.await.map(|()| id) }
    }

    /// Starts a tool call: sends its first `tool_call_update` (which creates it on the client)
    /// with the title, the kind and `status: pending`.
    pub fn start_tool_call(
        &self,
        title: impl Into<String>,
        kind: ToolKind,
    ) -> impl Future<Output = Result<ToolCall, Error>> + Send + '_ {
        self.start_titled_tool_call(title.into(), kind)
    }

    fn start_titled_tool_call(
        &self,
        title: String,
        kind: ToolKind,
    ) -> impl Future<Output = Result<ToolCall, Error>> + Send + '_ {
        let call = ToolCall { turn: self.clone(), id: fresh_id("call").into() };
        let patch = ToolCallUpdate::new(call.id.clone()).title(title).kind(kind).status(ToolCallStatus::Pending);
        let sent = self.send_accepted(patch.into());
        async move { sent.await.map(|()| call) }
    }

    /// Starts an agent-owned terminal: sends its first `terminal_update` (which creates it on
    /// the client) with the command and, when given, its working directory. The agent runs the
    /// command; the handle reports its output and exit (v2 has no client-side terminals).
    pub fn start_terminal(
        &self,
        command: impl Into<String>,
        cwd: Option<AbsolutePath>,
    ) -> impl Future<Output = Result<TerminalHandle, Error>> + Send + '_ {
        let terminal = TerminalHandle { turn: self.clone(), id: fresh_id("term").into() };
        let mut patch = TerminalUpdate::new(terminal.id.clone()).command(command.into());
        if let Some(cwd) = cwd {
            patch = patch.cwd(cwd);
        }
        let sent = self.send_accepted(patch.into());
        async move { sent.await.map(|()| terminal) }
    }

    /// Reports the turn's plan: the first call creates it, later ones replace its entries.
    pub fn plan(&self, entries: Vec<PlanEntry>) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        let plan_id = lock(&self.inner.plan_id).get_or_insert_with(|| fresh_id("plan").into()).clone();
        self.send_accepted(PlanUpdate::new(PlanItems::new(plan_id, entries)).into())
    }

    /// `session/request_permission`, with the state around it: `requires_action` while the
    /// client decides, `running` again afterwards. With several of the turn's requests pending
    /// at once, the turn requires action until the last is answered. A cancelled turn, or one
    /// that [ended](Turn::end), reports neither. Bound to the turn: resolves `cancelled` at
    /// once when the turn is cancelled.
    pub fn request_permission(
        &self,
        request: RequestPermissionRequest,
    ) -> impl Future<Output = Result<RequestPermissionResponse, Error>> + Send + '_ {
        let requires_action = self.send_accepted(StateUpdate::from(RequiresActionStateUpdate::new()).into());
        let ask = self.inner.client.request_permission(request);
        let running = self.encode(StateUpdate::from(RunningStateUpdate::new()).into());
        async move {
            let asking = Asking::start(&self.inner.asking);
            if asking.first && self.in_foreground() {
                requires_action.await?;
            } else if let Some(accepting) = self.accepting() {
                // The request goes out after the acceptance all the same.
                accepting.await?;
            }
            let response = ask.await;
            if asking.finish() && self.in_foreground() {
                self.inner.client.peer().send_notification(running).await?;
            }
            response
        }
    }

    /// Whether the turn's state is still the session's: neither cancelled nor ended.
    fn in_foreground(&self) -> bool {
        !self.is_cancelled() && !self.inner.ended.load(Ordering::Acquire)
    }

    /// Sets the stop reason the idle update will carry (unless the turn is cancelled, which
    /// always reports `cancelled`).
    pub fn set_stop_reason(&self, reason: StopReason) {
        *lock(&self.inner.stop_reason) = Some(reason);
    }

    /// Ends the turn now: sends the idle `state_update` (with `reason`, or `cancelled` if the
    /// turn was cancelled), unless another turn of the session still runs (see the
    /// [module docs](self)). Later updates through the turn are still sent, but belong to no
    /// foreground work; dropping the turn afterwards sends nothing more.
    pub fn end(&self, reason: StopReason) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.set_stop_reason(reason);
        let accepting = self.accepting();
        async move {
            if let Some(accepting) = accepting {
                accepting.await?;
            }
            if self.inner.ended.swap(true, Ordering::AcqRel) {
                return Ok(());
            }
            self.inner.end_foreground().await
        }
    }

    /// The handler failed: before acceptance its error answers the request; after, the turn
    /// ends with stop reason `error` (carrying the error) when dropped.
    fn fail(&self, error: ErrorObject) {
        let tx = lock(&self.inner.answer).take();
        match tx {
            Some(tx) => {
                let _ = tx.send(Err(error));
            }
            None => {
                tracing::warn!(code = error.code, message = %error.message, "acp turn: prompt handler failed after accepting the prompt");
                *lock(&self.inner.failed) = Some(error);
            }
        }
    }
}

/// The acceptance of a turn's prompt, boxed (see [`Turn::accepting`]).
type Accepting<'a> = Pin<Box<dyn Future<Output = Result<MessageId, Error>> + Send + 'a>>;

/// The accepted turns of a connection that are still running, by session: the session is
/// idle, and its idle update goes out, only when the last of them ends (`v2/prompt-lifecycle.mdx`:
/// idle means ready for a new prompt). An async lock, held while a turn's `running` or idle
/// update is queued, so that the wire agrees with the count.
#[derive(Default)]
pub(crate) struct Foreground {
    live: tokio::sync::Mutex<HashMap<String, usize>>,
    /// The tool calls the client may cancel (`tool_call/cancel`), by id: each one's token,
    /// until the call reaches a final status through its handle.
    cancellable: Mutex<HashMap<ToolCallId, (SessionId, CancellationToken)>>,
    /// Likewise for terminals (`terminal/cancel`), until the terminal reports its exit.
    cancellable_terminals: Mutex<HashMap<TerminalId, (SessionId, CancellationToken)>>,
}

/// The connection's [`Foreground`], kept in its extensions (made on first use).
pub(crate) fn foreground(peer: &crate::Peer) -> Arc<Foreground> {
    peer.extensions().get_or_insert_with(Foreground::default)
}

/// Why a `tool_call/cancel` was refused: the call is unknown here, final, or not cancellable.
pub(crate) struct NotCancellable;

impl Foreground {
    /// `tool_call/cancel` for a call this connection's turns made cancellable: fires its token.
    pub(crate) fn cancel_tool_call(&self, session: &SessionId, id: &ToolCallId) -> Result<(), NotCancellable> {
        match lock(&self.cancellable).get(id) {
            Some((owner, token)) if owner == session => {
                token.cancel();
                Ok(())
            }
            _ => Err(NotCancellable),
        }
    }

    /// `terminal/cancel` for a terminal this connection's turns made cancellable: fires its token.
    pub(crate) fn cancel_terminal(&self, session: &SessionId, id: &TerminalId) -> Result<(), NotCancellable> {
        match lock(&self.cancellable_terminals).get(id) {
            Some((owner, token)) if owner == session => {
                token.cancel();
                Ok(())
            }
            _ => Err(NotCancellable),
        }
    }
}

impl TurnInner {
    /// Ends this accepted turn's foreground work: encodes the idle update now (its stop reason
    /// as of now), and the future sends it unless another turn of the session still runs (that
    /// one's end reports the idle state).
    fn end_foreground(&self) -> impl Future<Output = Result<(), Error>> + Send + use<> {
        let peer = self.client.peer().clone();
        let session = self.session_id.0.clone();
        let notification =
            peer.encode_notification(acp_types::v2::client_method::SESSION_UPDATE, Some(&self.idle_notification()));
        async move {
            let foreground = foreground(&peer);
            let mut live = foreground.live.lock().await;
            let others = live.get_mut(&session).map_or(0, |count| {
                *count = count.saturating_sub(1);
                *count
            });
            if others > 0 {
                tracing::debug!(session_id = %session, others, "acp turn: ended; the session still runs other turns");
                return Ok(());
            }
            live.remove(&session);
            peer.send_notification(notification).await
        }
    }

    /// The `session/update` that ends the turn (see the [module docs](self) for the reason).
    fn idle_notification(&self) -> IdleNotification<'_> {
        let cancelled = self.token.is_cancelled();
        let failed = if cancelled { None } else { lock(&self.failed).clone() };
        let stop_reason = if cancelled {
            StopReason::Cancelled
        } else if let Some(error) = failed {
            StopReason::Error(ErrorStopReason::new().error(acp_types::v2::Error::from(error)))
        } else {
            lock(&self.stop_reason).clone().unwrap_or(StopReason::EndTurn)
        };
        IdleNotification {
            session_id: &self.session_id,
            update: IdleUpdate { session_update: "state_update", state: "idle", stop_reason },
        }
    }
}

/// The idle `session/update`, written as a view of its own rather than built as a
/// [`SessionUpdate`]: going through the whole update type would compile every update type's
/// encoder a second time.
#[derive(serde::Serialize)]
struct IdleNotification<'a> {
    #[serde(rename = "sessionId")]
    session_id: &'a SessionId,
    update: IdleUpdate,
}

#[derive(serde::Serialize)]
struct IdleUpdate {
    #[serde(rename = "sessionUpdate")]
    session_update: &'static str,
    state: &'static str,
    /// `stopReason`, and with `error` the failure beside it.
    #[serde(flatten)]
    stop_reason: StopReason,
}

impl Drop for TurnInner {
    /// The last clone is gone: a turn that was accepted and not ended reports idle now.
    fn drop(&mut self) {
        if self.accepted.get().is_none() || self.ended.load(Ordering::Acquire) {
            return;
        }
        let sending = self.end_foreground();
        // Held until the idle update is queued: `session/close` answers after it.
        let scope = self.scope.take();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = sending.await {
                        tracing::debug!(error = %e, "acp turn: the idle update could not be sent");
                    }
                    drop(scope);
                });
            }
            Err(_) => tracing::warn!("acp turn: dropped outside a tokio runtime; no idle update sent"),
        }
    }
}

/// The answer to an accepted `session/prompt`: `{"messageId": ...}`, the id of the user
/// message the prompt became.
fn accepted_answer(
    message_id: &MessageId,
    meta: Option<serde_json::Map<String, serde_json::Value>>,
) -> Result<Box<RawValue>, Error> {
    let mut answer = serde_json::json!({ "messageId": message_id });
    if let Some(meta) = meta {
        answer["_meta"] = serde_json::Value::Object(meta);
    }
    serde_json::value::to_raw_value(&answer).map_err(Error::Encode)
}

/// One message of a turn (an agent message or a thought), by id: chunks append, a whole
/// content replaces (see `v2/prompt-lifecycle.mdx`, "Message IDs").
#[derive(Clone, Debug)]
pub struct MessageStream {
    turn: Turn,
    id: MessageId,
    thought: bool,
}

impl MessageStream {
    /// The message's id.
    pub fn id(&self) -> &MessageId {
        &self.id
    }

    /// Appends one content block (an `agent_message_chunk` / `agent_thought_chunk`).
    pub fn chunk(&self, content: impl Into<ContentBlock>) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.append_block(content.into())
    }

    fn append_block(&self, content: ContentBlock) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        let chunk = ContentChunk::new(self.id.clone(), content);
        let update = if self.thought {
            SessionUpdate::AgentThoughtChunk(chunk)
        } else {
            SessionUpdate::AgentMessageChunk(chunk)
        };
        self.turn.send_accepted(update)
    }

    /// Appends text.
    pub fn text(&self, text: impl Into<String>) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.append_block(TextContent::new(text).into())
    }

    /// Replaces the whole content (an `agent_message` / `agent_thought` upsert).
    pub fn replace(&self, content: Vec<ContentBlock>) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.upsert(Some(content))
    }

    /// Clears the content (`content: null`).
    pub fn clear(&self) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.upsert(None)
    }

    fn upsert(&self, content: Option<Vec<ContentBlock>>) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        let update = if self.thought {
            SessionUpdate::AgentThought(AgentThought::new(self.id.clone()).content(content))
        } else {
            SessionUpdate::AgentMessage(AgentMessage::new(self.id.clone()).content(content))
        };
        self.turn.send_accepted(update)
    }
}

/// A tool call of a turn, by id: each method sends one `tool_call_update` patch (omitted
/// fields unchanged) or one `tool_call_content_chunk`.
#[derive(Clone, Debug)]
pub struct ToolCall {
    turn: Turn,
    id: ToolCallId,
}

impl ToolCall {
    /// The tool call's id.
    pub fn id(&self) -> &ToolCallId {
        &self.id
    }

    /// Sends a patch; its `toolCallId` is set to this call's.
    pub fn update(&self, mut patch: ToolCallUpdate) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        patch.tool_call_id = self.id.clone();
        self.turn.send_accepted(patch.into())
    }

    /// `status: in_progress`.
    pub fn in_progress(&self) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.status(ToolCallStatus::InProgress)
    }

    /// Appends one content item (a `tool_call_content_chunk`).
    pub fn append(&self, content: impl Into<ToolCallContent>) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.append_content(content.into())
    }

    fn append_content(&self, content: ToolCallContent) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.turn.send_accepted(ToolCallContentChunk::new(self.id.clone(), content).into())
    }

    /// Appends a text block as content.
    pub fn append_text(&self, text: impl Into<String>) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.append_content(Content::new(TextContent::new(text)).into())
    }

    /// `status: completed`, content unchanged.
    pub fn complete(&self) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.status(ToolCallStatus::Completed)
    }

    /// `status: failed`, content unchanged.
    pub fn fail(&self) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.status(ToolCallStatus::Failed)
    }

    /// `status: cancelled`: the final status of a call stopped before it finished (after a
    /// `tool_call/cancel`, see [`ToolCall::cancellable`]).
    pub fn cancelled(&self) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.status(ToolCallStatus::Cancelled)
    }

    /// Lets the client cancel this call with `tool_call/cancel`: advertises
    /// `capabilities.cancel` on it and returns the token that fires when the client asks, or
    /// when the turn is cancelled. The runtime answers the request (`{}` once the token has
    /// fired, -32602 for a call that is not cancellable, or no longer); the agent then stops
    /// the work and reports the final status, normally [`ToolCall::cancelled`]. A final status
    /// sent through this handle ends the call's cancellability.
    pub async fn cancellable(&self) -> Result<CancellationToken, Error> {
        let token = self.turn.inner.token.child_token();
        let foreground = &*foreground(self.turn.inner.client.peer());
        let entry = (self.turn.inner.session_id.clone(), token.clone());
        lock(&foreground.cancellable).insert(self.id.clone(), entry);
        let capabilities = ToolCallCapabilities::new().cancel(ToolCallCancelCapabilities::new());
        self.update(ToolCallUpdate::new(self.id.clone()).capabilities(capabilities)).await?;
        Ok(token)
    }

    fn status(&self, status: ToolCallStatus) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        let mut patch = ToolCallUpdate::new(self.id.clone()).status(status.clone());
        if matches!(status, ToolCallStatus::Completed | ToolCallStatus::Failed | ToolCallStatus::Cancelled)
            && lock(&foreground(self.turn.inner.client.peer()).cancellable).remove(&self.id).is_some()
        {
            // The schema: stop advertising `cancel` once the call is final.
            patch = patch.capabilities(None);
        }
        self.update(patch)
    }
}

/// An agent-owned terminal of a turn, by id (see [`Turn::start_terminal`]): each method sends
/// one `terminal_update` patch or one `terminal_output_chunk`.
#[derive(Clone, Debug)]
pub struct TerminalHandle {
    turn: Turn,
    id: TerminalId,
}

impl TerminalHandle {
    /// The terminal's id (for a `terminal` content item of a tool call).
    pub fn id(&self) -> &TerminalId {
        &self.id
    }

    /// Sends a patch; its `terminalId` is set to this terminal's.
    pub fn update(&self, mut patch: TerminalUpdate) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        patch.terminal_id = self.id.clone();
        self.turn.send_accepted(patch.into())
    }

    /// Appends output bytes (a `terminal_output_chunk`, base64 on the wire).
    pub fn output(&self, bytes: &[u8]) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        let chunk = TerminalOutputChunk::new(self.id.clone(), encode_base64(bytes));
        self.turn.send_accepted(chunk.into())
    }

    /// Reports the command's exit (`exitStatus`), which ends the terminal's cancellability:
    /// its `capabilities` are cleared in the same patch, as the schema asks.
    pub fn exited(&self, status: TerminalExitStatus) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        lock(&foreground(self.turn.inner.client.peer()).cancellable_terminals).remove(&self.id);
        self.update(TerminalUpdate::new(self.id.clone()).exit_status(status).capabilities(None))
    }

    /// Lets the client cancel this terminal's command with `terminal/cancel`: advertises
    /// `capabilities.cancel` and returns the token that fires when the client asks, or when the
    /// turn is cancelled. The runtime answers the request (`{}` once the token has fired,
    /// -32602 for a terminal that is not cancellable, or has exited); the agent then stops the
    /// command and reports it with [`TerminalHandle::exited`]. Cancelling a terminal leaves the
    /// status of a tool call showing it to the agent.
    pub async fn cancellable(&self) -> Result<CancellationToken, Error> {
        let token = self.turn.inner.token.child_token();
        let foreground = &*foreground(self.turn.inner.client.peer());
        let entry = (self.turn.inner.session_id.clone(), token.clone());
        lock(&foreground.cancellable_terminals).insert(self.id.clone(), entry);
        let capabilities = TerminalCapabilities::new().cancel(TerminalCancelCapabilities::new());
        self.update(TerminalUpdate::new(self.id.clone()).capabilities(capabilities)).await?;
        Ok(token)
    }
}

/// RFC 4648 base64 with padding, as `terminal_output_chunk.data` is written.
fn encode_base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let n = group.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A fresh id for an entity the agent owns: `PREFIX_<process start, hex>_<counter>`, unique
/// within the process and unlikely to collide across processes.
pub(crate) fn fresh_id(prefix: &str) -> String {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let start = *START.get_or_init(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
    });
    format!("{prefix}_{start:x}_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_is_rfc_4648_with_padding() {
        // RFC 4648's own test vectors.
        for (bytes, text) in
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("foobar", "Zm9vYmFy")]
        {
            assert_eq!(super::encode_base64(bytes.as_bytes()), text, "{bytes:?}");
        }
        assert_eq!(super::encode_base64(&[0xff, 0xfe, 0x00]), "//4A");
    }
}
