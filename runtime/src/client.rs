//! The client side of the typed layer: serving an [`acp_types::Client`] implementation, the
//! per-call [`ClientContext`], [`AgentHandle`] for driving the agent, and spawning an agent
//! process in one call (`spawn_agent`, with the `process` feature).
//!
//! This module owns the client's (editor's) view of a connection:
//!
//! - [`ClientHandler`] adapts a `C: Client<ClientContext>` into a raw [`Handler`], decoding
//!   with [`AgentRequest::decode`] / [`AgentNotification::decode`] and answering exactly as
//!   the agent side does (see [`crate::agent`]): -32602 with the failing field's path, -32601
//!   for an unknown method, a typed [`acp_types::Error`] unchanged, bad or unknown
//!   notifications logged.
//! - [`Connection::serve_client`] (and [`serve_client`]) start it over any transport;
//!   `Connection::spawn_agent` (and `spawn_agent`; feature `process`) start an agent process
//!   and connect to it.
//! - [`ClientContext`] is what each handler gets besides its params: the request id, the
//!   session id, `_meta`, the cancellation token, and an [`AgentHandle`].
//! - [`AgentHandle`] calls the agent: `initialize`, `authenticate`, `session/*`,
//!   `session/prompt`, `session/cancel`, extension methods.
//!
//! Cancellation on this side: [`AgentHandle::cancel`] sends `session/cancel`, and the runtime
//! answers the session's pending `session/request_permission` requests with the `cancelled`
//! outcome at once (ACP requires it of clients); the permission handler's token fires, so it
//! can close its dialog. `prompt` then returns once the agent answers, with
//! `stopReason: cancelled`. A client has seen every `session/update` of a turn when
//! [`AgentHandle::prompt`] returns (see [`crate::connection`]).

use std::future::Future;
use std::sync::{Arc, OnceLock};

use acp_types::{
    AgentNotification, AgentRequest, AuthenticateRequest, AuthenticateResponse, CancelNotification, Client,
    CloseSessionRequest, CloseSessionResponse, DeleteSessionRequest, DeleteSessionResponse, InitializeRequest,
    InitializeResponse, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest, LoadSessionResponse,
    LogoutRequest, LogoutResponse, NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse,
    ResumeSessionRequest, ResumeSessionResponse, SetSessionConfigOptionRequest, SetSessionConfigOptionResponse,
    SetSessionModeRequest, SetSessionModeResponse, agent_method,
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

// ---- serving --------------------------------------------------------------------------------

/// Serves `client` over `reader`/`writer` with the default [`Connection`] options.
///
/// Returns the handle to the agent and the [`Serve`] future that runs the connection (poll or
/// spawn it before awaiting calls).
pub fn serve_client<C, R, W>(client: C, reader: R, writer: W) -> (AgentHandle, Serve)
where
    C: Client<ClientContext> + 'static,
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    Connection::new().serve_client(client, reader, writer)
}

impl Connection {
    /// Serves `client` (the client side of ACP) with these options; see [`serve_client`].
    pub fn serve_client<C, R, W>(self, client: C, reader: R, writer: W) -> (AgentHandle, Serve)
    where
        C: Client<ClientContext> + 'static,
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        self.serve_client_with(reader, writer, |_| client)
    }

    /// Like [`Connection::serve_client`], but builds the client from the [`AgentHandle`], for
    /// a client that keeps a handle to its agent from the start.
    pub fn serve_client_with<C, R, W, F>(self, reader: R, writer: W, make_client: F) -> (AgentHandle, Serve)
    where
        C: Client<ClientContext> + 'static,
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
        F: FnOnce(AgentHandle) -> C,
    {
        let (peer, serve) =
            self.serve_with(reader, writer, |peer| ClientHandler::new(make_client(AgentHandle::new(peer.clone()))));
        (AgentHandle::new(peer), serve)
    }
}

// ---- spawning an agent (feature `process`) -----------------------------------------------

#[cfg(feature = "process")]
pub use spawning::{AgentProcess, spawn_agent};

#[cfg(feature = "process")]
mod spawning;

/// The raw [`Handler`] that serves a [`Client<ClientContext>`](Client) (see the
/// [module docs](self)). [`Connection::serve_client`] uses it.
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
    // Only the dispatch to the client's methods is generic; decoding, the context and encoding
    // are the non-generic functions below, compiled once in this crate.
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let (request, cx) = decode_request(req)?;
        let response = request.dispatch(&self.client, cx).await?;
        encode_response(&response)
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        let Some((decoded, cx)) = decode_notification(notification) else { return };
        if let Err(error) = decoded.dispatch(&self.client, cx.clone()).await {
            notification_failed(&cx, &error);
        }
    }
}

/// Decodes a request's params by method and builds its context.
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

fn encode_response(response: &acp_types::ClientResponse) -> Result<Box<RawValue>, ErrorObject> {
    typed::encode_result(response)
}

/// Decodes a notification by method and builds its context; `None` (logged) when it is unknown
/// or its params do not fit.
fn decode_notification(notification: IncomingNotification) -> Option<(AgentNotification, ClientContext)> {
    let text = typed::params_text(notification.params.as_deref());
    let decoded = typed::decode_incoming(text, |de| AgentNotification::decode(&notification.method, de));
    let decoded = match decoded {
        Ok(Some(decoded)) => decoded,
        Ok(None) => {
            tracing::debug!(method = %notification.method, "acp client: unknown notification ignored");
            return None;
        }
        Err(error) => {
            tracing::warn!(method = %notification.method, %error, data = ?error.data, "acp client: notification with invalid params ignored");
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

fn notification_failed(cx: &ClientContext, error: &acp_types::Error) {
    tracing::warn!(method = cx.method(), code = error.code.0, message = %error.message, "acp client: notification handler failed");
}

// ---- the context ----------------------------------------------------------------------------

/// What a client's handler gets besides its params (the `Cx` of
/// [`acp_types::Client<ClientContext>`](Client)). Cheap to clone.
#[derive(Clone, Debug)]
pub struct ClientContext {
    inner: Arc<ContextInner<AgentHandle>>,
}

impl ClientContext {
    /// The id of the request being handled; `None` for a notification.
    pub fn request_id(&self) -> Option<&Id> {
        self.inner.request_id.as_ref()
    }

    /// The method being handled (e.g. `session/request_permission`, or an extension's `_`-name).
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

    /// The request's cancellation token. It fires on `$/cancel_request` for this request, when
    /// we send `session/cancel` for its session (for `session/request_permission`, which the
    /// runtime then answers `cancelled` at once), and when the connection ends; for a
    /// notification it is the connection's token.
    pub fn cancellation_token(&self) -> &CancellationToken {
        self.inner.watched();
        &self.inner.cancel
    }

    /// Whether the request has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.watched();
        self.inner.cancel.is_cancelled()
    }

    /// Completes when the request is cancelled (e.g. to close a permission dialog).
    ///
    /// Asking for the token (this, `is_cancelled`, `cancellation_token`) tells the runtime that
    /// the handler watches it: once cancelled, the handler then gets the connection's grace
    /// period to wind down. A handler that never asks is answered at once (see
    /// [`crate::connection`]).
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.inner.watched();
        self.inner.cancel.cancelled()
    }

    /// The agent, with calls bound to this request's token (unbound for a notification).
    pub fn agent(&self) -> &AgentHandle {
        &self.inner.handle
    }

    /// The raw connection, for calls outside the typed API.
    pub fn peer(&self) -> &Peer {
        &self.inner.handle.peer
    }
}

// ---- the handle -----------------------------------------------------------------------------

/// The client's handle to its agent: typed calls and notifications, cheap to clone.
///
/// As with [`crate::agent::ClientHandle`], a handle may be bound to a cancellation token
/// ([`AgentHandle::bound_to`]); the one from `spawn_agent` / [`serve_client`] is not.
/// Dropping the future of a call sends `$/cancel_request` to the agent (to cancel a prompt
/// turn, use [`AgentHandle::cancel`], which is what ACP asks for). Every call fails with
/// [`Error::ConnectionClosed`] once the connection has ended.
#[derive(Clone, Debug)]
pub struct AgentHandle {
    peer: Peer,
    cancel: Option<CancellationToken>,
}

macro_rules! agent_calls {
    ($( $(#[$attr:meta])* $name:ident($method:path, $req:ty) -> $resp:ty; )*) => {
        $(
            $(#[$attr])*
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

    /// This handle bound to `token`: once it fires, a pending call returns
    /// [`Error::Cancelled`] and the agent is sent `$/cancel_request`; a new call returns at
    /// once without being sent.
    pub fn bound_to(&self, token: CancellationToken) -> Self {
        AgentHandle { peer: self.peer.clone(), cancel: Some(token) }
    }

    /// This handle without a cancellation token.
    pub fn unbound(&self) -> Self {
        AgentHandle { peer: self.peer.clone(), cancel: None }
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

    /// Completes when the connection ends (e.g. the agent process exited).
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

    agent_calls! {
        /// `initialize`: negotiates the protocol version and exchanges capabilities; the first call.
        initialize(agent_method::INITIALIZE, InitializeRequest) -> InitializeResponse;
        /// `authenticate`: authenticates with one of the methods the agent advertised.
        authenticate(agent_method::AUTHENTICATE, AuthenticateRequest) -> AuthenticateResponse;
        /// `logout`: ends the authenticated state.
        logout(agent_method::LOGOUT, LogoutRequest) -> LogoutResponse;
        /// `session/new`: creates a session.
        new_session(agent_method::SESSION_NEW, NewSessionRequest) -> NewSessionResponse;
        /// `session/load`: loads a session; the agent replays its history as `session/update`s
        /// (all seen when this returns). Needs the agent's `loadSession` capability.
        load_session(agent_method::SESSION_LOAD, LoadSessionRequest) -> LoadSessionResponse;
        /// `session/resume`: resumes a session without replaying its history.
        resume_session(agent_method::SESSION_RESUME, ResumeSessionRequest) -> ResumeSessionResponse;
        /// `session/list`: lists the agent's sessions.
        list_sessions(agent_method::SESSION_LIST, ListSessionsRequest) -> ListSessionsResponse;
        /// `session/close`: closes an active session.
        close_session(agent_method::SESSION_CLOSE, CloseSessionRequest) -> CloseSessionResponse;
        /// `session/delete`: deletes a session.
        delete_session(agent_method::SESSION_DELETE, DeleteSessionRequest) -> DeleteSessionResponse;
        /// `session/set_mode`: switches the session's mode.
        set_mode(agent_method::SESSION_SET_MODE, SetSessionModeRequest) -> SetSessionModeResponse;
        /// `session/set_config_option`: sets one of the session's configuration options.
        set_config_option(agent_method::SESSION_SET_CONFIG_OPTION, SetSessionConfigOptionRequest) -> SetSessionConfigOptionResponse;
        /// `session/prompt`: one prompt turn. Returns when the turn ends, after every
        /// `session/update` of the turn has been handled. To stop it, call
        /// [`AgentHandle::cancel`]: the turn then ends with `stopReason: cancelled`.
        ///
        /// Like every call here, the request is sent when the future is first polled, not
        /// when it is created: to cancel a turn from elsewhere, spawn the prompt (or poll it
        /// in a `select!` whose other branch sends the cancel only after the turn started).
        prompt(agent_method::SESSION_PROMPT, PromptRequest) -> PromptResponse;
    }

    #[cfg(feature = "unstable_session_fork")]
    agent_calls! {
        /// `session/fork` (unstable): forks a session.
        fork_session(agent_method::SESSION_FORK, acp_types::ForkSessionRequest) -> acp_types::ForkSessionResponse;
    }

    #[cfg(feature = "unstable_session_archive")]
    agent_calls! {
        /// `session/archive` (unstable): archives a session (it leaves the default
        /// `session/list`).
        archive_session(agent_method::SESSION_ARCHIVE, acp_types::ArchiveSessionRequest) -> acp_types::ArchiveSessionResponse;
        /// `session/unarchive` (unstable): brings an archived session back.
        unarchive_session(agent_method::SESSION_UNARCHIVE, acp_types::UnarchiveSessionRequest) -> acp_types::UnarchiveSessionResponse;
    }

    #[cfg(feature = "unstable_session_status")]
    agent_calls! {
        /// `session/status` (unstable): what a session is doing now.
        session_status(agent_method::SESSION_STATUS, acp_types::SessionStatusRequest) -> acp_types::SessionStatusResponse;
    }

    #[cfg(feature = "unstable_session_set_title")]
    agent_calls! {
        /// `session/set_title` (unstable): renames a session.
        set_session_title(agent_method::SESSION_SET_TITLE, acp_types::SetSessionTitleRequest) -> acp_types::SetSessionTitleResponse;
    }

    #[cfg(feature = "unstable_auth_status")]
    agent_calls! {
        /// `auth/status` (unstable): whether, and as whom, the client is signed in to the agent.
        auth_status(agent_method::AUTH_STATUS, acp_types::AuthStatusRequest) -> acp_types::AuthStatusResponse;
    }

    #[cfg(feature = "unstable_llm_providers")]
    agent_calls! {
        /// `providers/list` (unstable): the agent's LLM providers.
        list_providers(agent_method::PROVIDERS_LIST, acp_types::ListProvidersRequest) -> acp_types::ListProvidersResponse;
        /// `providers/set` (unstable): configures an LLM provider.
        set_provider(agent_method::PROVIDERS_SET, acp_types::SetProviderRequest) -> acp_types::SetProviderResponse;
        /// `providers/disable` (unstable): disables an LLM provider.
        disable_provider(agent_method::PROVIDERS_DISABLE, acp_types::DisableProviderRequest) -> acp_types::DisableProviderResponse;
    }

    /// `mcp/message` (unstable), as a notification: an MCP notification (progress, ...) from
    /// a server the client offers, tied to the agent's inner request `requestId` while it is
    /// active.
    #[cfg(feature = "unstable_mcp_over_acp")]
    #[inline]
    pub fn mcp_message_notification(
        &self,
        params: acp_types::MessageMcpNotification,
    ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.peer.notify(agent_method::MCP_MESSAGE, &params)
    }

    /// `session/cancel`: cancels the session's ongoing prompt turn. Our pending incoming
    /// `session/request_permission` requests of that session are answered with the
    /// `cancelled` outcome at once; the pending [`AgentHandle::prompt`] returns when the agent
    /// answers (with `stopReason: cancelled`).
    #[inline]
    pub fn cancel(&self, notification: CancelNotification) -> impl Future<Output = Result<(), Error>> + Send + '_ {
        self.peer.notify(agent_method::SESSION_CANCEL, &notification)
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

    fn call<P, R>(&self, method: &str, params: &P) -> impl Future<Output = Result<R, Error>> + Send + use<'_, P, R>
    where
        P: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        typed::typed_call(&self.peer, method, params, self.cancel.as_ref())
    }
}

/// The `initialize` request with the capabilities `C`'s handlers earn filled in where the
/// request leaves them unset: `fs.readTextFile` when `C` handles `fs/read_text_file`,
/// `terminal` when it handles every `terminal/*` method, and so on. `C` is a type under
/// `#[acp_client]`, which implements [`Advertise`](crate::Advertise) for it.
pub fn with_capabilities<C: crate::Advertise>(request: acp_types::InitializeRequest) -> acp_types::InitializeRequest {
    crate::advertise::advertise_request(request, C::CAPABILITIES)
}
