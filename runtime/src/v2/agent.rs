//! The agent side of protocol v2: serving an [`acp_types::v2::Agent`] implementation, the
//! per-call [`AgentContext`], and [`ClientHandle`] for calling the client back.
//!
//! Decoding, answering and cancellation work as on v1 (see [`crate::agent`]): params are
//! decoded once by method name, a decode failure is -32602 with the failing field's path, an
//! unknown method is -32601, and a handler's [`acp_types::v2::Error`] goes out unchanged.
//!
//! What differs is `session/prompt`, whose answer in v2 only says that the prompt was
//! accepted. The handler's future is the turn: it runs in a task of its own and gets a
//! [`Turn`] from its context. The request is answered as soon as the turn is accepted
//! (explicitly with [`Turn::accept`], or by the first update sent through the turn, or when
//! the handler returns), and the turn's end is reported with an idle `state_update` (see
//! [`crate::v2::turn`] for the whole lifecycle). A handler that fails before the turn was
//! accepted has its error answered instead, and no update is sent.
//!
//! `session/close` also cancels the session's turn, as the spec asks, before the handler runs,
//! and waits (up to the connection's `cancel_grace`) for the turn's idle update to be queued, so
//! the client reads the turn's end before the close's answer.

// The prompt lifecycle of a turn, public as `acp_rpc::v2::turn`.
pub mod turn;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use acp_types::v2::{
    Agent, AgentResponse, CancelTerminalResponse, CancelToolCallResponse, ClientNotification, ClientRequest,
    CompleteElicitationNotification, CreateElicitationRequest, CreateElicitationResponse, InitializeRequest,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, UpdateSessionNotification,
    client_method,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::agent::ContextInner;
use crate::core::connection::{Connection, Serve};
use crate::core::error::Error;
use crate::core::handler::{Handler, IncomingNotification, IncomingRequest};
use crate::core::jsonrpc::{ErrorObject, Id};
use crate::core::peer::Peer;
use crate::typed;
use turn::{Turn, TurnStart};

// ---- serving --------------------------------------------------------------------------------

/// Serves a v2 `agent` over `reader`/`writer` with the default [`Connection`] options; the
/// connection follows v2's rules from the start. To serve v1 clients too, use
/// [`crate::version::ProtocolRouter`].
pub fn serve_agent<A, R, W>(agent: A, reader: R, writer: W) -> (ClientHandle, Serve)
where
    A: Agent<AgentContext> + 'static,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let (peer, serve) = Connection::new().v2_rules().serve(reader, writer, AgentHandler::new(agent));
    (ClientHandle::new(peer), serve)
}

/// Serves a v2 `agent` on stdin/stdout until the client closes stdin.
pub async fn serve_stdio<A>(agent: A) -> Result<(), Error>
where
    A: Agent<AgentContext> + 'static,
{
    let (reader, writer) = crate::core::transport::stdio();
    let (_client, serve) = serve_agent(agent, reader, writer);
    serve.await
}

/// The raw [`Handler`] that serves an [`Agent<AgentContext>`](Agent) of protocol v2 (see the
/// [module docs](self)).
#[derive(Debug)]
pub struct AgentHandler<A> {
    agent: Arc<A>,
}

impl<A> AgentHandler<A> {
    /// Wraps `agent`.
    pub fn new(agent: A) -> Self {
        AgentHandler { agent: Arc::new(agent) }
    }

    /// The wrapped agent.
    pub fn agent(&self) -> &A {
        &self.agent
    }
}

/// Runs one request through the agent's methods. Boxed, and the only place that awaits
/// `dispatch`: the prompt's task and the other requests share one compiled copy of every
/// handler's future (awaiting `dispatch` at two sites compiled the prompt handler twice).
fn dispatch<A: Agent<AgentContext> + 'static>(
    agent: Arc<A>,
    request: ClientRequest,
    cx: AgentContext,
) -> Pin<Box<dyn Future<Output = Result<AgentResponse, acp_types::v2::Error>> + Send>> {
    Box::pin(async move { request.dispatch(&*agent, cx).await })
}

/// One permit per v2 turn running after its prompt was answered, as many as requests may
/// run: a turn outlives its request, and is counted here instead (see `v2::turn`).
struct TurnSlots(Arc<tokio::sync::Semaphore>);

fn turn_slots(peer: &Peer) -> Arc<tokio::sync::Semaphore> {
    peer.extensions()
        .get_or_insert_with(|| TurnSlots(Arc::new(tokio::sync::Semaphore::new(peer.request_slots()))))
        .0
        .clone()
}

impl<A: Agent<AgentContext> + 'static> Handler for AgentHandler<A> {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        // The prompt's answer depends on the turn, not on the handler's return (see above).
        let answered = (&*req.method == client_method_prompt()).then(|| req.watch.answered());
        let (request, cx) = decode_request(req)?;
        match request {
            ClientRequest::SessionPrompt(params) => {
                let answered = answered.unwrap_or_default();
                // A turn goes on after its prompt is answered, and is counted apart from the
                // requests, with as many slots: a client cannot start turns without bound.
                // Until a slot frees, the prompt waits unanswered (as a running request).
                let slots = turn_slots(cx.peer());
                let slot = tokio::select! {
                    slot = slots.acquire_owned() => slot.ok(),
                    () = cx.inner.cancel.cancelled() => return Err(ErrorObject::request_cancelled()),
                };
                let (start, accepted) = TurnStart::new(&cx, &params, answered, slot);
                let agent = self.agent.clone();
                start.spawn(
                    move |turn_cx| async move {
                        match dispatch(agent, ClientRequest::SessionPrompt(params), turn_cx).await? {
                            AgentResponse::SessionPrompt(response) => Ok(response),
                            _ => Err(acp_types::v2::Error::internal_error().data(acp_types::v2::ErrorData::Other(
                                Value::from("the prompt handler's answer is of another method"),
                            ))),
                        }
                    },
                    cx,
                );
                accepted.await
            }
            ClientRequest::SessionClose(params) => {
                // The spec: closing a session cancels its ongoing work first, as
                // `session/cancel` would; the cancelled turn's idle update goes out before the
                // answer (a turn that ignores its cancellation is waited for as long as a
                // cancelled handler may run on: the connection's `cancel_grace`).
                let peer = cx.peer().clone();
                peer.cancel_session_scopes(&params.session_id.0);
                let grace = peer.cancel_grace();
                let _ = tokio::time::timeout(grace, peer.session_scopes_ended(&params.session_id.0)).await;
                let response = dispatch(self.agent.clone(), ClientRequest::SessionClose(params), cx.clone()).await?;
                encode_response(&response, &cx)
            }
            ClientRequest::ToolCallCancel(params) => {
                // A call a turn made cancellable (`ToolCall::cancellable`) is the runtime's to
                // answer; any other goes to the agent's own handler, if it has one.
                let foreground = &*turn::foreground(cx.peer());
                if foreground.cancel_tool_call(&params.session_id, &params.tool_call_id).is_ok() {
                    return encode_response(&AgentResponse::ToolCallCancel(CancelToolCallResponse::new()), &cx);
                }
                let id = params.tool_call_id.0.clone();
                match dispatch(self.agent.clone(), ClientRequest::ToolCallCancel(params), cx.clone()).await {
                    Ok(response) => encode_response(&response, &cx),
                    // The schema's answer for a call that cannot be cancelled.
                    Err(e) if e.code.0 == crate::codes::METHOD_NOT_FOUND => Err(ErrorObject::invalid_params(
                        format_args!("tool call `{id}` is unknown, final, or not cancellable"),
                    )),
                    Err(e) => Err(e.into()),
                }
            }
            ClientRequest::TerminalCancel(params) => {
                // As for tool calls: a terminal made cancellable (`TerminalHandle::cancellable`)
                // is answered here, any other by the agent's handler, if it has one.
                let foreground = &*turn::foreground(cx.peer());
                if foreground.cancel_terminal(&params.session_id, &params.terminal_id).is_ok() {
                    return encode_response(&AgentResponse::TerminalCancel(CancelTerminalResponse::new()), &cx);
                }
                let id = params.terminal_id.0.clone();
                match dispatch(self.agent.clone(), ClientRequest::TerminalCancel(params), cx.clone()).await {
                    Ok(response) => encode_response(&response, &cx),
                    Err(e) if e.code.0 == crate::codes::METHOD_NOT_FOUND => Err(ErrorObject::invalid_params(
                        format_args!("terminal `{id}` is unknown, exited, or not cancellable"),
                    )),
                    Err(e) => Err(e.into()),
                }
            }
            request => {
                let response = dispatch(self.agent.clone(), request, cx.clone()).await?;
                encode_response(&response, &cx)
            }
        }
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        let Some((decoded, cx)) = decode_notification(notification) else { return };
        if let Err(error) = decoded.dispatch(&*self.agent, cx.clone()).await {
            tracing::warn!(method = cx.method(), code = error.code.0, message = %error.message, "acp agent (v2): notification handler failed");
        }
    }
}

fn client_method_prompt() -> &'static str {
    acp_types::v2::agent_method::SESSION_PROMPT
}

/// Decodes a request's params by method and builds its context.
fn decode_request(req: IncomingRequest) -> Result<(ClientRequest, AgentContext), ErrorObject> {
    let prompt = &*req.method == client_method_prompt();
    if !prompt {
        // A prompt's handler is the turn, which outlives the request: it gets the grace
        // period of a raw handler instead (its answer is `{}` once the turn is accepted).
        req.watch.track();
    }
    let text = typed::params_text(req.params.as_deref());
    let request = typed::decode_incoming(text, |de| ClientRequest::decode(&req.method, de))?
        .ok_or_else(|| ErrorObject::method_not_found(&req.method))?;
    if let ClientRequest::Initialize(params) = &request {
        req.peer.extensions().insert(params.clone());
    }
    let meta = typed::scan_envelope(req.params.as_deref(), false).meta;
    let cx = AgentContext {
        inner: Arc::new(ContextInner {
            request_id: Some(req.id),
            method: req.method,
            session_id: req.session_id,
            meta,
            handle: ClientHandle { peer: req.peer, cancel: Some(req.cancel.clone()) },
            cancel: req.cancel,
            watch: Some(req.watch),
            earned: OnceLock::new(),
        }),
        turn: None,
    };
    Ok((request, cx))
}

/// Encodes a result; an `initialize` result gets the capabilities the handler earned.
fn encode_response(response: &acp_types::v2::AgentResponse, cx: &AgentContext) -> Result<Box<RawValue>, ErrorObject> {
    let raw = typed::encode_result(response)?;
    match cx.inner.earned.get() {
        Some(capabilities) if matches!(response, acp_types::v2::AgentResponse::Initialize(_)) => {
            Ok(crate::advertise::advertise_raw(raw, capabilities))
        }
        _ => Ok(raw),
    }
}

/// Decodes a notification by method and builds its context; `None` (logged) when it is unknown
/// or its params do not fit.
fn decode_notification(notification: IncomingNotification) -> Option<(ClientNotification, AgentContext)> {
    let text = typed::params_text(notification.params.as_deref());
    let decoded = match typed::decode_incoming(text, |de| ClientNotification::decode(&notification.method, de)) {
        Ok(Some(decoded)) => decoded,
        Ok(None) => {
            tracing::debug!(method = %notification.method, "acp agent (v2): unknown notification ignored");
            return None;
        }
        Err(error) => {
            tracing::warn!(method = %notification.method, %error, data = ?error.data, "acp agent (v2): notification with invalid params ignored");
            return None;
        }
    };
    let envelope = typed::scan_envelope(notification.params.as_deref(), true);
    let cancel = notification.peer.closed_token();
    let cx = AgentContext {
        inner: Arc::new(ContextInner {
            request_id: None,
            method: notification.method,
            session_id: envelope.session_id,
            meta: envelope.meta,
            handle: ClientHandle::new(notification.peer),
            cancel,
            watch: None,
            earned: OnceLock::new(),
        }),
        turn: None,
    };
    Some((decoded, cx))
}

// ---- the context ----------------------------------------------------------------------------

/// What a v2 agent's handler gets besides its params (the `Cx` of
/// [`acp_types::v2::Agent<AgentContext>`](Agent)). Cheap to clone.
///
/// Cancellation works as on v1 (see [`crate::agent::AgentContext`]), except for
/// `session/prompt`: its handler is the turn, and [`AgentContext::turn`] has the token that
/// `session/cancel` fires.
#[derive(Clone, Debug)]
pub struct AgentContext {
    pub(crate) inner: Arc<ContextInner<ClientHandle>>,
    pub(crate) turn: Option<Turn>,
}

impl AgentContext {
    /// The id of the request being handled; `None` for a notification.
    pub fn request_id(&self) -> Option<&Id> {
        self.inner.request_id.as_ref()
    }

    /// The method being handled (e.g. `session/prompt`, or the full `_`-name of an extension).
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

    /// The turn of a `session/prompt` handler (`None` for any other handler): accepts the
    /// prompt, reports progress, and carries the turn's cancellation.
    pub fn turn(&self) -> Option<&Turn> {
        self.turn.as_ref()
    }

    /// The request's cancellation token (for a prompt, the turn's: see [`Turn::cancelled`]).
    pub fn cancellation_token(&self) -> &CancellationToken {
        self.inner.watched();
        match &self.turn {
            Some(turn) => turn.cancellation_token(),
            None => &self.inner.cancel,
        }
    }

    /// Whether the request (for a prompt, the turn) has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancellation_token().is_cancelled()
    }

    /// Completes when the request (for a prompt, the turn) is cancelled.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancellation_token().cancelled()
    }

    /// The client, with calls bound to this request (for a prompt, to the turn).
    pub fn client(&self) -> &ClientHandle {
        match &self.turn {
            Some(turn) => turn.client(),
            None => &self.inner.handle,
        }
    }

    /// What the client sent in `initialize` (see [`ClientHandle::client_init`]).
    pub fn client_init(&self) -> Option<Arc<InitializeRequest>> {
        self.inner.handle.client_init()
    }

    /// The raw connection, for calls outside the typed API.
    pub fn peer(&self) -> &Peer {
        &self.inner.handle.peer
    }

    /// Who is asking: the owner of the sessions this connection creates, to keep each
    /// owner's sessions apart (see [`SessionStore`](crate::sessions::SessionStore)).
    pub fn owner(&self) -> &crate::core::owner::Owner {
        self.inner.handle.peer.owner()
    }
}

// ---- the handle -----------------------------------------------------------------------------

/// A v2 agent's handle to its client: typed calls and notifications, cheap to clone. Bound to
/// a token like the v1 [`crate::ClientHandle`] (see [`ClientHandle::bound_to`]).
#[derive(Clone, Debug)]
pub struct ClientHandle {
    pub(crate) peer: Peer,
    cancel: Option<CancellationToken>,
}

impl ClientHandle {
    /// An unbound handle over a raw connection.
    pub fn new(peer: Peer) -> Self {
        ClientHandle { peer, cancel: None }
    }

    /// The params of the client's (v2) `initialize` request, from the moment it arrived.
    pub fn client_init(&self) -> Option<Arc<InitializeRequest>> {
        self.peer.extensions().get::<acp_types::v2::InitializeRequest>()
    }

    /// This handle bound to `token`: once it fires, a pending call returns
    /// [`Error::Cancelled`] (the client is sent `$/cancel_request`), a new call returns at once
    /// unsent, and [`ClientHandle::request_permission`] resolves `cancelled`.
    pub fn bound_to(&self, token: CancellationToken) -> Self {
        ClientHandle { peer: self.peer.clone(), cancel: Some(token) }
    }

    /// This handle without a cancellation token.
    pub fn unbound(&self) -> Self {
        ClientHandle { peer: self.peer.clone(), cancel: None }
    }

    /// The token calls are bound to, if any.
    pub fn cancellation_token(&self) -> Option<&CancellationToken> {
        self.cancel.as_ref()
    }

    /// The raw connection, for calls outside the typed API.
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

    /// `session/update`: one update of a session (messages, tool calls, plans, state, ...).
    /// Inside a turn, prefer the [`Turn`]'s helpers: they accept the prompt first.
    pub fn session_update(
        &self,
        notification: UpdateSessionNotification,
    ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.peer.notify(client_method::SESSION_UPDATE, &notification)
    }

    /// `session/request_permission`: asks the user to allow an action. Resolves with the
    /// `cancelled` outcome at once when the turn is cancelled first.
    pub fn request_permission(
        &self,
        params: RequestPermissionRequest,
    ) -> impl Future<Output = Result<RequestPermissionResponse, Error>> + Send + '_ {
        let call = self.call(client_method::SESSION_REQUEST_PERMISSION, &params);
        async move { typed::permission_answer(call.await, self.cancel.as_ref(), cancelled_permission) }
    }

    /// `elicitation/create`: asks the user for structured input (a form or a URL).
    pub fn create_elicitation(
        &self,
        params: CreateElicitationRequest,
    ) -> impl Future<Output = Result<CreateElicitationResponse, Error>> + Send + '_ {
        self.call(client_method::ELICITATION_CREATE, &params)
    }

    /// `elicitation/complete`: tells the client a URL-based elicitation is complete.
    pub fn complete_elicitation(
        &self,
        notification: CompleteElicitationNotification,
    ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.peer.notify(client_method::ELICITATION_COMPLETE, &notification)
    }

    /// Calls an extension method (`method` starts with `_`; params an object, an array or
    /// `null`); the result as it is.
    pub async fn ext_method(&self, method: &str, params: Value) -> Result<Value, Error> {
        typed::call_ext(&self.peer, method, &params, self.cancel.as_ref()).await
    }

    /// Sends an extension notification (as for [`Self::ext_method`]).
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

fn cancelled_permission() -> RequestPermissionResponse {
    RequestPermissionResponse::new(
        RequestPermissionOutcome::Cancelled(acp_types::v2::CancelledPermissionOutcome::new()),
    )
}
