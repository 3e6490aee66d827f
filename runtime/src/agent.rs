//! The agent side of the typed layer: serving an [`acp_types::Agent`] implementation, the
//! per-call [`AgentContext`], and [`ClientHandle`] for calling the client back.
//!
//! This module owns the agent's view of a connection:
//!
//! - [`AgentHandler`] adapts an `A: Agent<AgentContext>` into a raw [`Handler`]: params are
//!   decoded once by method name ([`ClientRequest::decode`]; absent or `null` params read as
//!   `{}`), a decode failure is -32602 with the failing field's path in `data.path`, an unknown
//!   method is -32601, the result is encoded as is, and an [`acp_types::Error`] goes out
//!   unchanged (code, message, data). Notifications go through [`ClientNotification::decode`];
//!   a bad or unknown one, or a handler error, is logged (notifications are never answered).
//! - [`Connection::serve_agent`] (and [`serve_agent`], [`serve_stdio`]) start it.
//! - [`AgentContext`] is what each handler gets besides its params: the request id, the
//!   session id, the params' `_meta`, the request's cancellation token, and a [`ClientHandle`]
//!   bound to that token.
//! - [`ClientHandle`] calls the client: `session/update`, `session/request_permission`,
//!   `fs/*`, `terminal/*` (through [`TerminalHandle`]), `elicitation/*` and extension methods.
//!
//! Concurrency and cancellation are the runtime's (see [`crate::connection`]): requests run
//! concurrently, notifications in order, a cancelled `session/prompt` answers
//! `{"stopReason":"cancelled"}` whatever the handler returns. On top of that, the typed layer
//! binds a handler's outgoing calls to its request: once the turn is cancelled, a pending call
//! made through [`AgentContext::client`] returns [`Error::Cancelled`] and the client is sent
//! `$/cancel_request` for it, and [`ClientHandle::request_permission`] resolves with the
//! `cancelled` outcome, as ACP requires.
//!
//! # Example
//!
//! ```no_run
//! use acp_rpc::agent::{AgentContext, serve_stdio};
//! use acp_rpc::acp_types::{
//!     Agent, AuthenticateRequest, AuthenticateResponse, CancelNotification, ContentBlock,
//!     ContentChunk, Error, InitializeRequest, InitializeResponse, NewSessionRequest,
//!     NewSessionResponse, PromptRequest, PromptResponse, ProtocolVersion, SessionNotification,
//!     SessionUpdate, StopReason, TextContent,
//! };
//!
//! struct Echo;
//!
//! impl Agent<AgentContext> for Echo {
//!     async fn initialize(&self, _: InitializeRequest, _cx: AgentContext) -> Result<InitializeResponse, Error> {
//!         Ok(InitializeResponse::new(ProtocolVersion::V1)) // the version this agent speaks
//!     }
//!     async fn authenticate(&self, _: AuthenticateRequest, _cx: AgentContext) -> Result<AuthenticateResponse, Error> {
//!         Ok(AuthenticateResponse::new())
//!     }
//!     async fn session_new(&self, _: NewSessionRequest, _cx: AgentContext) -> Result<NewSessionResponse, Error> {
//!         Ok(NewSessionResponse::new("sess_1"))
//!     }
//!     async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
//!         for block in params.prompt {
//!             let chunk = SessionUpdate::AgentMessageChunk(ContentChunk::new(block));
//!             // `?` turns a failed call into an error answer (-32603, or the client's own error).
//!             cx.client().session_update(SessionNotification::new(params.session_id.clone(), chunk)).await?;
//!         }
//!         let reason = if cx.is_cancelled() { StopReason::Cancelled } else { StopReason::EndTurn };
//!         Ok(PromptResponse::new(reason))
//!     }
//!     async fn session_cancel(&self, _: CancelNotification, _cx: AgentContext) -> Result<(), Error> {
//!         Ok(()) // the runtime already cancelled the turn's token
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), acp_rpc::Error> {
//!     serve_stdio(Echo).await
//! }
//! ```

// The handles a `ClientHandle` gives out, public as `acp_rpc::terminal` and
// `acp_rpc::compaction`.
pub mod compaction;
pub mod terminal;

use std::borrow::Cow;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use acp_types::{
    Agent, ClientCapabilities, ClientNotification, ClientRequest, CompleteElicitationNotification,
    CreateElicitationRequest, CreateElicitationResponse, CreateTerminalRequest, CreateTerminalResponse,
    InitializeRequest, Notice, ReadTextFileRequest, ReadTextFileResponse, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SessionId, SessionNotification, WriteTextFileRequest,
    WriteTextFileResponse, client_method,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::advertise::Capabilities;
use crate::core::connection::{Connection, Serve};
use crate::core::error::Error;
use crate::core::handler::{Handler, IncomingNotification, IncomingRequest};
use crate::core::jsonrpc::{ErrorObject, Id};
use crate::core::peer::Peer;
use crate::core::watch::Watch;
use crate::typed;
pub use terminal::TerminalHandle;

// ---- serving --------------------------------------------------------------------------------

/// Serves `agent` over `reader`/`writer` with the default [`Connection`] options.
///
/// Returns the handle to the client (for calls outside any request, e.g. from a background
/// task) and the [`Serve`] future that runs the connection (poll or spawn it).
pub fn serve_agent<A, R, W>(agent: A, reader: R, writer: W) -> (ClientHandle, Serve)
where
    A: Agent<AgentContext> + 'static,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    Connection::new().serve_agent(agent, reader, writer)
}

/// Serves `agent` on this process's stdin/stdout until the client closes stdin (or the
/// connection fails). Nothing else may write to stdout; log to stderr.
pub async fn serve_stdio<A>(agent: A) -> Result<(), Error>
where
    A: Agent<AgentContext> + 'static,
{
    Connection::new().serve_agent_stdio(agent).await
}

impl Connection {
    /// Serves `agent` (the agent side of ACP) with these options; see [`serve_agent`].
    pub fn serve_agent<A, R, W>(self, agent: A, reader: R, writer: W) -> (ClientHandle, Serve)
    where
        A: Agent<AgentContext> + 'static,
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        self.serve_agent_with(reader, writer, |_| agent)
    }

    /// Like [`Connection::serve_agent`], but builds the agent from the [`ClientHandle`], for an
    /// agent that keeps a handle to its client from the start.
    pub fn serve_agent_with<A, R, W, F>(self, reader: R, writer: W, make_agent: F) -> (ClientHandle, Serve)
    where
        A: Agent<AgentContext> + 'static,
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
        F: FnOnce(ClientHandle) -> A,
    {
        let (peer, serve) =
            self.serve_with(reader, writer, |peer| AgentHandler::new(make_agent(ClientHandle::new(peer.clone()))));
        (ClientHandle::new(peer), serve)
    }

    /// Serves `agent` on stdin/stdout with these options until the connection ends; see
    /// [`serve_stdio`].
    pub async fn serve_agent_stdio<A>(self, agent: A) -> Result<(), Error>
    where
        A: Agent<AgentContext> + 'static,
    {
        let (reader, writer) = crate::core::transport::stdio();
        let (_client, serve) = self.serve_agent(agent, reader, writer);
        serve.await
    }
}

/// The raw [`Handler`] that serves an [`Agent<AgentContext>`](Agent) (see the
/// [module docs](self) for how messages are decoded and answered). [`Connection::serve_agent`]
/// uses it; build one yourself to combine it with other raw handling.
#[derive(Debug)]
pub struct AgentHandler<A> {
    agent: A,
}

impl<A> AgentHandler<A> {
    /// Wraps `agent`.
    pub fn new(agent: A) -> Self {
        AgentHandler { agent }
    }

    /// The wrapped agent.
    pub fn agent(&self) -> &A {
        &self.agent
    }
}

impl<A: Agent<AgentContext> + 'static> Handler for AgentHandler<A> {
    // Only the dispatch to the agent's methods is generic; decoding, the context and encoding
    // are the non-generic functions below, compiled once in this crate.
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let (request, cx) = decode_request(req)?;
        let response = request.dispatch(&self.agent, cx.clone()).await?;
        encode_response(&response, &cx)
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        let Some((decoded, cx)) = decode_notification(notification) else { return };
        if let Err(error) = decoded.dispatch(&self.agent, cx.clone()).await {
            notification_failed(&cx, &error);
        }
    }
}

/// Decodes a request's params by method and builds its context.
fn decode_request(req: IncomingRequest) -> Result<(ClientRequest, AgentContext), ErrorObject> {
    req.watch.track();
    let text = typed::params_text(req.params.as_deref());
    let request = typed::decode_incoming(text, |de| ClientRequest::decode(&req.method, de))?
        .ok_or_else(|| ErrorObject::method_not_found(&req.method))?;
    if let ClientRequest::Initialize(params) = &request {
        // Kept before the handler runs, so that it and everything after it can read it.
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
    };
    Ok((request, cx))
}

/// Encodes a result; an `initialize` result gets the capabilities the handler earned (see
/// [`crate::macro_support::earn`]), on the JSON, so the result type is never decoded again.
fn encode_response(response: &acp_types::AgentResponse, cx: &AgentContext) -> Result<Box<RawValue>, ErrorObject> {
    let raw = typed::encode_result(response)?;
    match cx.inner.earned.get() {
        Some(capabilities) if matches!(response, acp_types::AgentResponse::Initialize(_)) => {
            Ok(crate::advertise::advertise_raw(raw, capabilities))
        }
        _ => Ok(raw),
    }
}

/// Decodes a notification by method and builds its context; `None` (logged) when it is unknown
/// or its params do not fit.
fn decode_notification(notification: IncomingNotification) -> Option<(ClientNotification, AgentContext)> {
    let text = typed::params_text(notification.params.as_deref());
    let decoded = typed::decode_incoming(text, |de| ClientNotification::decode(&notification.method, de));
    let decoded = match decoded {
        Ok(Some(decoded)) => decoded,
        Ok(None) => {
            tracing::debug!(method = %notification.method, "acp agent: unknown notification ignored");
            return None;
        }
        Err(error) => {
            tracing::warn!(method = %notification.method, %error, data = ?error.data, "acp agent: notification with invalid params ignored");
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
    };
    Some((decoded, cx))
}

fn notification_failed(cx: &AgentContext, error: &acp_types::Error) {
    tracing::warn!(method = cx.method(), code = error.code.0, message = %error.message, "acp agent: notification handler failed");
}

// ---- the context ----------------------------------------------------------------------------

/// What an agent's handler gets besides its params (the `Cx` of
/// [`acp_types::Agent<AgentContext>`](Agent)). Cheap to clone.
///
/// # Cancellation
///
/// When a request is cancelled (`session/cancel` for a prompt, `$/cancel_request` for any
/// request), what happens to its handler depends on whether it has asked for its token
/// *by then* ([`cancelled`](Self::cancelled), [`is_cancelled`](Self::is_cancelled) or
/// [`cancellation_token`](Self::cancellation_token)):
///
/// - it has: it gets the connection's grace period (100 ms by default,
///   [`Connection::cancel_grace`](crate::Connection::cancel_grace)) to wind down, send its
///   last updates and return; a prompt is answered `cancelled` whatever it returns;
/// - it has not: it is dropped at once (after one last poll) and answered `cancelled`, so a
///   handler that ignores cancellation never delays the answer.
///
/// A handler that wants to clean up must therefore ask before it awaits long work, e.g. by
/// calling `cx.cancellation_token()` first or by `select!`ing on `cx.cancelled()`. Asking
/// only afterwards is too late: the handler is gone before it gets there.
#[derive(Clone, Debug)]
pub struct AgentContext {
    pub(crate) inner: Arc<ContextInner<ClientHandle>>,
}

/// The fields of a handler context, shared by both sides.
#[derive(Debug)]
pub(crate) struct ContextInner<H> {
    pub(crate) request_id: Option<Id>,
    pub(crate) method: Cow<'static, str>,
    pub(crate) session_id: Option<Arc<str>>,
    pub(crate) meta: Option<Arc<Map<String, Value>>>,
    pub(crate) cancel: CancellationToken,
    pub(crate) handle: H,
    /// Requests: told when the handler asks for its token (see [`Watch`]).
    pub(crate) watch: Option<Watch>,
    /// Agent side, `initialize`: the capabilities `#[acp_agent]` adds to the result.
    pub(crate) earned: OnceLock<&'static Capabilities>,
}

impl<H> ContextInner<H> {
    pub(crate) fn watched(&self) {
        if let Some(watch) = &self.watch {
            watch.watched();
        }
    }
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

    /// The params' top-level `"_meta"` object, when there is one (also in the typed params of
    /// most methods; here for every method, extensions included).
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.inner.meta.as_deref()
    }

    /// The request's cancellation token. It fires on `$/cancel_request` for this request, on
    /// `session/cancel` (for `session/prompt`), and when the connection ends; for a
    /// notification it is the connection's token.
    pub fn cancellation_token(&self) -> &CancellationToken {
        self.inner.watched();
        &self.inner.cancel
    }

    /// Whether the request has been cancelled (see [`AgentContext::cancellation_token`]).
    pub fn is_cancelled(&self) -> bool {
        self.inner.watched();
        self.inner.cancel.is_cancelled()
    }

    /// Completes when the request is cancelled (e.g. to `select!` against long work).
    ///
    /// Asking for the token (this, `is_cancelled`, `cancellation_token`) tells the runtime that
    /// the handler watches it: once cancelled, the handler then gets the connection's grace
    /// period to wind down. A handler that never asks is answered at once (see
    /// [`crate::connection`]).
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.inner.watched();
        self.inner.cancel.cancelled()
    }

    /// The client, with calls bound to this request: once it is cancelled, pending calls
    /// return [`Error::Cancelled`] (and the client gets `$/cancel_request`), and a permission
    /// request resolves `cancelled`. For a notification the handle is not bound.
    pub fn client(&self) -> &ClientHandle {
        &self.inner.handle
    }

    /// What the client sent in `initialize` (see [`ClientHandle::client_init`]).
    pub fn client_init(&self) -> Option<Arc<InitializeRequest>> {
        self.inner.handle.client_init()
    }

    /// The client's capabilities (see [`ClientHandle::client_capabilities`]).
    pub fn client_capabilities(&self) -> ClientCapabilities {
        self.inner.handle.client_capabilities()
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

/// The agent's handle to its client: typed calls and notifications, cheap to clone.
///
/// A handle may be *bound* to a cancellation token (the one from [`AgentContext::client`] is
/// bound to its request): calls made through it give up when the token fires, see
/// [`ClientHandle::bound_to`]. Notifications are never held back by the token (ACP lets an
/// agent send updates after `session/cancel`, before it answers the prompt). Every call fails
/// with [`Error::ConnectionClosed`] once the connection has ended.
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

    /// The params of the client's `initialize` request (its protocol version, capabilities and
    /// `clientInfo`), from the moment it arrived (its handler sees it too); the latest one if
    /// it sent several, `None` before the first.
    pub fn client_init(&self) -> Option<Arc<InitializeRequest>> {
        self.peer.extensions().get::<acp_types::InitializeRequest>()
    }

    /// The capabilities the client advertised in `initialize`: what may be called on it
    /// (`fs.readTextFile`, `terminal`, ...). None at all (the default) before `initialize`.
    pub fn client_capabilities(&self) -> ClientCapabilities {
        self.client_init().and_then(|init| init.client_capabilities.clone()).unwrap_or_default()
    }

    /// This handle bound to `token`: once it fires, a pending call returns
    /// [`Error::Cancelled`] and the client is sent `$/cancel_request` for it, a new call
    /// returns at once without being sent, and [`ClientHandle::request_permission`] resolves
    /// with the `cancelled` outcome instead.
    pub fn bound_to(&self, token: CancellationToken) -> Self {
        ClientHandle { peer: self.peer.clone(), cancel: Some(token) }
    }

    /// This handle without a cancellation token (e.g. for clean-up that must happen even
    /// though the turn was cancelled).
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

    /// Completes when the connection ends.
    pub fn closed(&self) -> impl Future<Output = ()> + Send + 'static {
        self.peer.closed()
    }

    /// A token that fires when the connection ends.
    pub fn closed_token(&self) -> CancellationToken {
        self.peer.closed_token()
    }

    /// Ends the connection from our side: pending calls fail with
    /// [`Error::ConnectionClosed`], in-flight handlers are cancelled.
    pub fn close(&self) {
        self.peer.close();
    }

    /// `session/update`: streams progress of a session (message chunks, plans, tool calls, ...).
    pub fn session_update(
        &self,
        notification: SessionNotification,
    ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.peer.notify(client_method::SESSION_UPDATE, &notification)
    }

    /// Whether the client advertised `clientCapabilities.session.notices`: the schema allows
    /// [`ClientHandle::notice`] only then.
    pub fn accepts_notices(&self) -> bool {
        self.client_capabilities().session.flatten().is_some_and(|s| s.notices.flatten().is_some())
    }

    /// Whether the client advertised `clientCapabilities.session.compaction`: the schema allows
    /// compaction updates ([`ClientHandle::start_compaction`]) only then.
    pub fn accepts_compaction(&self) -> bool {
        self.client_capabilities().session.flatten().is_some_and(|s| s.compaction.flatten().is_some())
    }

    /// Sends a live, fire-and-forget notice to the user (a `notice` session update), if the
    /// client advertised `session.notices`. Returns whether it was sent: without the
    /// capability nothing is sent (an agent message is the fallback the schema suggests).
    pub async fn notice(&self, session_id: impl Into<SessionId>, notice: Notice) -> Result<bool, Error> {
        if !self.accepts_notices() {
            return Ok(false);
        }
        self.session_update(SessionNotification::new(session_id, notice)).await?;
        Ok(true)
    }

    /// Starts reporting a context compaction of the session (its first update,
    /// `in_progress`), if the client advertised `session.compaction`; `None` (nothing sent)
    /// otherwise. The [`Compaction`](compaction::Compaction) reports the rest.
    pub async fn start_compaction(
        &self,
        session_id: impl Into<SessionId>,
    ) -> Result<Option<compaction::Compaction>, Error> {
        if !self.accepts_compaction() {
            return Ok(None);
        }
        compaction::Compaction::start(self.clone(), session_id.into()).await.map(Some)
    }

    /// `session/request_permission`: asks the user to allow a tool call.
    ///
    /// If the turn is cancelled first (the bound token fires, or the client sends
    /// `session/cancel` for the session), this resolves at once with
    /// [`RequestPermissionOutcome::Cancelled`] and the client is sent `$/cancel_request`.
    pub fn request_permission(
        &self,
        params: RequestPermissionRequest,
    ) -> impl Future<Output = Result<RequestPermissionResponse, Error>> + Send + '_ {
        let call = self.call(client_method::SESSION_REQUEST_PERMISSION, &params);
        async move { typed::permission_answer(call.await, self.cancel.as_ref(), cancelled_permission) }
    }

    /// `fs/read_text_file`: reads a text file through the client (which sees unsaved edits).
    /// Needs the client's `fs.readTextFile` capability.
    pub fn read_text_file(
        &self,
        params: ReadTextFileRequest,
    ) -> impl Future<Output = Result<ReadTextFileResponse, Error>> + Send + '_ {
        self.call(client_method::FS_READ_TEXT_FILE, &params)
    }

    /// `fs/write_text_file`: writes a text file through the client. Needs the client's
    /// `fs.writeTextFile` capability.
    pub fn write_text_file(
        &self,
        params: WriteTextFileRequest,
    ) -> impl Future<Output = Result<WriteTextFileResponse, Error>> + Send + '_ {
        self.call(client_method::FS_WRITE_TEXT_FILE, &params)
    }

    /// `terminal/create`: starts a command in a client terminal. The returned [`TerminalHandle`]
    /// reads its output, waits for it, kills it, and releases it (when dropped, if not
    /// released before). Needs the client's `terminal` capability.
    pub fn create_terminal(
        &self,
        params: CreateTerminalRequest,
    ) -> impl Future<Output = Result<TerminalHandle, Error>> + Send + '_ {
        let call = self.call::<_, CreateTerminalResponse>(client_method::TERMINAL_CREATE, &params);
        let session_id = params.session_id;
        async move { Ok(TerminalHandle::new(call.await?.terminal_id, session_id, self.clone())) }
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

    /// `auth/status_update` (unstable): tells the client its sign-in state changed.
    #[cfg(feature = "unstable_auth_status")]
    pub fn auth_status_update(
        &self,
        notification: acp_types::AuthStatusUpdateNotification,
    ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.peer.notify(client_method::AUTH_STATUS_UPDATE, &notification)
    }

    /// `mcp/message` (unstable): one inner MCP request to a server the client (or a proxy)
    /// declared with `"type": "acp"`; the result carries the inner outcome, `{"result": ..}` or
    /// `{"error": ..}`, and an ACP error means the binding failed. The caller picks the
    /// `requestId`. To run an rmcp client over it, use `acp_rpc::mcp::McpClients` (feature
    /// `mcp-over-acp`), which makes these calls.
    #[cfg(feature = "unstable_mcp_over_acp")]
    pub fn mcp_message(
        &self,
        params: acp_types::MessageMcpRequest,
    ) -> impl Future<Output = Result<acp_types::MessageMcpResponse, Error>> + Send + '_ {
        self.call(client_method::MCP_MESSAGE, &params)
    }

    /// Calls an extension method; `method` is the full name, starting with `_`. The params
    /// (an object, an array, or `null` for none) and the result are passed as they are
    /// (`_meta` included). Anything else fails with [`Error::InvalidExtension`], unsent.
    pub async fn ext_method(&self, method: &str, params: Value) -> Result<Value, Error> {
        typed::call_ext(&self.peer, method, &params, self.cancel.as_ref()).await
    }

    /// Sends an extension notification; `method` is the full name, starting with `_`, and
    /// the params are as for [`Self::ext_method`].
    pub async fn ext_notification(&self, method: &str, params: Value) -> Result<(), Error> {
        typed::notify_ext(&self.peer, method, &params).await
    }

    /// A typed call, bound to the handle's token (see [`typed::typed_call`]).
    pub(crate) fn call<P, R>(
        &self,
        method: &str,
        params: &P,
    ) -> impl Future<Output = Result<R, Error>> + Send + use<'_, P, R>
    where
        P: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        typed::typed_call(&self.peer, method, params, self.cancel.as_ref())
    }
}

fn cancelled_permission() -> RequestPermissionResponse {
    RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled)
}
