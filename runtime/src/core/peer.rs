//! [`Peer`]: the handle for talking to the other side — outgoing calls and notifications,
//! cancelling sessions, and watching the connection's lifetime.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::sync::oneshot;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::core::error::Error;
use crate::core::extensions::Extensions;
use crate::core::jsonrpc::{self, Id, Message};
use crate::core::load::RequestLoad;
use crate::core::methods;
use crate::core::methods::session_id_of;
pub(crate) use crate::core::state::AnswerHook;
use crate::core::state::{Reply, Shared};

/// A cheap, clonable handle to one connection.
///
/// Every call goes through the connection's single FIFO writer; when its queue is full the
/// call waits (backpressure). All methods fail with [`Error::ConnectionClosed`] once the
/// connection has ended.
#[derive(Clone)]
pub struct Peer {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer").field("closed", &self.shared.closed.is_cancelled()).finish_non_exhaustive()
    }
}

impl Peer {
    /// Calls `method` with raw params and returns the raw result.
    ///
    /// Dropping the returned future before the response arrives sends
    /// `$/cancel_request {requestId}` to the peer (when the request was already sent) and
    /// forgets the call. The response is delivered only after every notification that arrived
    /// before it has been handled.
    pub async fn request_raw(&self, method: &str, params: Option<&RawValue>) -> Result<Box<RawValue>, Error> {
        self.call(method, params, None).await
    }

    /// Like [`Peer::request_raw`], but gives up as soon as `cancel` fires: the peer is sent
    /// `$/cancel_request` and the call returns [`Error::Cancelled`]. Pass an incoming request's
    /// token so that calls made on behalf of a cancelled turn resolve at once.
    pub async fn request_raw_until(
        &self,
        method: &str,
        params: Option<&RawValue>,
        cancel: &CancellationToken,
    ) -> Result<Box<RawValue>, Error> {
        self.call(method, params, Some(cancel)).await
    }

    /// Calls `method`, serializing `params` straight into the outgoing line (when this is
    /// called, not when the future is first polled) and decoding the result into `R`.
    pub fn request<'a, P, R>(
        &'a self,
        method: &str,
        params: &P,
    ) -> impl Future<Output = Result<R, Error>> + Send + use<'a, P, R>
    where
        P: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let request = self.encode_request(method, Some(params));
        decode_after(self.call_encoded(request, None), decode_result::<R>)
    }

    /// [`Peer::request`] tied to a cancellation token, as in [`Peer::request_raw_until`].
    pub fn request_until<'a, P, R>(
        &'a self,
        method: &str,
        params: &P,
        cancel: &'a CancellationToken,
    ) -> impl Future<Output = Result<R, Error>> + Send + use<'a, P, R>
    where
        P: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let request = self.encode_request(method, Some(params));
        decode_after(self.call_encoded(request, Some(cancel)), decode_result::<R>)
    }

    /// Sends a request and returns once it is queued for writing, with a handle that resolves
    /// to the answer: the two halves of [`Peer::request_raw`], for a caller that must know its
    /// request went out before it does anything else (a proxy forwarding messages in order) or
    /// that pipelines calls.
    ///
    /// Dropping the handle before the answer forgets the call and sends `$/cancel_request`;
    /// [`PendingResponse::cancel`] sends it and keeps waiting for the peer's answer.
    pub async fn send_request_raw(&self, method: &str, params: Option<&RawValue>) -> Result<PendingResponse, Error> {
        let shared = &self.shared;
        let Encoded { id, line, session: permission_session, on_answer } = self.encode_request(method, params)?;
        let (tx, rx) = oneshot::channel();
        shared.register_call(id, tx, permission_session, on_answer)?;
        let mut pending = PendingResponse {
            shared: shared.clone(),
            id,
            rx,
            sent: false,
            cancel_sent: false,
            answered: false,
            delivered: None,
        };
        shared.send_line_direct(line).await?;
        pending.sent = true;
        Ok(pending)
    }

    /// Sends a notification with raw params.
    ///
    /// Sending `session/cancel` also cancels our in-flight *incoming*
    /// `session/request_permission` requests of that session, which are answered with the
    /// `cancelled` outcome at once (ACP requires it of clients).
    pub async fn notify_raw(&self, method: &str, params: Option<&RawValue>) -> Result<(), Error> {
        self.send_notification(self.encode_notification(method, params)).await
    }

    /// Sends a notification, serializing `params` straight into the outgoing line (when this
    /// is called, not when the future is first polled). `session/cancel` has the effect
    /// described at [`Peer::notify_raw`].
    pub fn notify<'a, P: Serialize + ?Sized>(
        &'a self,
        method: &str,
        params: &P,
    ) -> impl Future<Output = Result<(), Error>> + Send + use<'a, P> {
        self.send_notification(self.encode_notification(method, Some(params)))
    }

    /// Sends `session/cancel {"sessionId": session_id}` (with the effect described at
    /// [`Peer::notify_raw`]).
    pub async fn cancel_session(&self, session_id: &str) -> Result<(), Error> {
        #[derive(Serialize)]
        struct Params<'a> {
            #[serde(rename = "sessionId")]
            session_id: &'a str,
        }
        self.send_notification(self.encode_notification(methods::SESSION_CANCEL, Some(&Params { session_id }))).await
    }

    /// Ends the connection from our side: `serve` stops reading, pending calls fail with
    /// [`Error::ConnectionClosed`], in-flight handlers are cancelled.
    pub fn close(&self) {
        self.shared.close();
    }

    /// Whether the connection has ended (or is ending).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.is_cancelled()
    }

    /// Who is asking on this connection: the owner of what it creates (see
    /// [`crate::owner`] and [`crate::sessions::SessionStore`]).
    pub fn owner(&self) -> &crate::core::owner::Owner {
        self.shared.owner.get_or_init(crate::core::owner::Owner::anonymous)
    }

    /// Completes when the connection ends.
    pub fn closed(&self) -> impl Future<Output = ()> + Send + 'static {
        let fut: WaitForCancellationFutureOwned = self.shared.closed.clone().cancelled_owned();
        fut
    }

    /// A token that fires when the connection ends (e.g. to derive child tokens from).
    pub fn closed_token(&self) -> CancellationToken {
        self.shared.closed.clone()
    }

    /// How busy this connection is with the peer's requests: handlers running, requests
    /// waiting, the backlog and the overload refusals so far (see the
    /// [overload section](crate::connection#overload-a-peer-that-sends-more-than-it-lets-us-finish)).
    pub fn request_load(&self) -> RequestLoad {
        self.shared.load.snapshot()
    }

    /// The connection's slots for the layers above the core, and for an application's own
    /// per-connection state: one value per type, and hooks run when the connection ends.
    pub fn extensions(&self) -> &Extensions {
        &self.shared.extensions
    }

    /// How long a cancelled handler may run on before it is answered without it (see
    /// [`Connection::cancel_grace`](crate::Connection::cancel_grace)).
    pub fn cancel_grace(&self) -> Duration {
        self.shared.cancel_grace
    }

    /// Ties work to a session rather than to a request: the scope's token fires when the
    /// peer sends `session/cancel` for `session_id` (read at once, ahead of queued
    /// notifications) and when the connection ends. For work that outlives the request that
    /// started it, such as a protocol v2 turn after its `session/prompt` was answered, or an
    /// agent's background work. The scope stops listening when dropped.
    pub fn session_scope(&self, session_id: &str) -> SessionScope {
        let session: Arc<str> = Arc::from(session_id);
        let token = self.shared.closed.child_token();
        let key = self.shared.add_session_work(session.clone(), token.clone());
        SessionScope { shared: self.shared.clone(), session, key, token }
    }

    /// Fires the tokens of every [`SessionScope`] of `session_id`, as an incoming
    /// `session/cancel` would (e.g. for `session/close`, which ends the session's work too).
    pub fn cancel_session_scopes(&self, session_id: &str) {
        self.shared.cancel_session_work(session_id);
    }

    /// Resolves once every [`SessionScope`] of `session_id` is dropped (at once when there is
    /// none), e.g. to answer `session/close` only after the cancelled turn has reported its end.
    pub async fn session_scopes_ended(&self, session_id: &str) {
        self.shared.session_work_ended(session_id).await;
    }

    // Outgoing calls are split in two: `encode_*`, plain functions that serialize the params
    // at once, and the async halves, not generic, that send the encoded line and wait. rustc
    // compiles the body of an `async fn` in every crate that awaits it, once per type it is
    // generic over; split so, the waiting code is compiled once whatever the params, and a
    // typed call that is a plain function compiles its encoder and decoder beside it. The
    // agent role's calls (`ClientHandle`, `TerminalHandle`, the v2 `Turn`) are compiled so in
    // acp-rpc, once: the crate that is edited and rebuilt most is an agent's, and an agent
    // binary keeps one copy of each. The client role's calls (`AgentHandle`) are `#[inline]`,
    // compiled in the crate that makes them: an agent does not build them.

    // ---- seams: the switches and readings the layers above the core use ------------------

    /// Switches the connection to protocol v2's rules (batches accepted; a cancelled
    /// `session/prompt` only acknowledges the prompt) or back to v1's. The version router
    /// flips it before the `initialize` answer that chooses v2 goes out, so that what the peer
    /// sends after reading it is read under these rules.
    pub(crate) fn follow_v2_rules(&self, v2: bool) {
        self.shared.set_v2(v2);
    }

    /// Whether in-flight incoming request `id` was cancelled by a `$/cancel_request` (rather
    /// than by `session/cancel` or the connection's end).
    pub(crate) fn cancelled_by_cancel_request(&self, id: &Id) -> bool {
        self.shared.cancelled_by_cancel_request(id)
    }

    /// Whether the session of in-flight v2 prompt `id` was cancelled since it was read (its
    /// turn then starts cancelled).
    #[cfg(feature = "unstable_protocol_v2")]
    pub(crate) fn turn_cancelled(&self, id: &Id) -> bool {
        self.shared.turn_cancelled(id)
    }

    /// Whether the current task runs one of this connection's notification handlers (which
    /// must not wait for anything the notification task would have to handle first).
    #[cfg(feature = "unstable_protocol_v2")]
    pub(crate) fn in_notification_handler(&self) -> bool {
        self.shared.in_notification_handler()
    }

    /// How many incoming request handlers may run at once
    /// ([`Connection::max_concurrent_requests`](crate::Connection::max_concurrent_requests)).
    #[cfg(feature = "unstable_protocol_v2")]
    pub(crate) fn request_slots(&self) -> usize {
        self.shared.load.max_concurrent()
    }

    /// Encodes a notification; `session/cancel` remembers its session for
    /// [`Peer::send_notification`].
    pub(crate) fn encode_notification<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: Option<&P>,
    ) -> Result<Encoded, Error> {
        let mut line = Vec::with_capacity(128);
        jsonrpc::encode_notification(&mut line, method, params).map_err(Error::Encode)?;
        let session = if method == methods::SESSION_CANCEL { params_session_id(&line) } else { None };
        Ok(Encoded { id: 0, line, session, on_answer: None })
    }

    /// Encodes a request under a new id; `session/request_permission` remembers its session
    /// for [`Peer::call_encoded`].
    pub(crate) fn encode_request<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: Option<&P>,
    ) -> Result<Encoded, Error> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut line = Vec::with_capacity(128);
        jsonrpc::encode_request(&mut line, id, method, params).map_err(Error::Encode)?;
        let session = if method == methods::SESSION_REQUEST_PERMISSION { params_session_id(&line) } else { None };
        Ok(Encoded { id, line, session, on_answer: None })
    }

    pub(crate) async fn send_notification(&self, notification: Result<Encoded, Error>) -> Result<(), Error> {
        if self.shared.closed.is_cancelled() {
            return Err(Error::ConnectionClosed);
        }
        let Encoded { line, session, .. } = notification?;
        self.shared.send_line(line).await?;
        // Only once `session/cancel` is queued: the `cancelled` answers to the permission
        // requests queue behind it, so the agent knows its turn was cancelled by the time it
        // reads them (otherwise it may end the turn with `end_turn`).
        if let Some(session) = session {
            self.shared.cancel_incoming_permissions(&session);
        }
        Ok(())
    }

    /// Calls `method`, serializing `params` straight into the outgoing line, optionally tied to
    /// `cancel`; the raw result (the typed layer decodes it).
    pub(crate) async fn call<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: Option<&P>,
        cancel: Option<&CancellationToken>,
    ) -> Result<Box<RawValue>, Error> {
        self.call_encoded(self.encode_request(method, params), cancel).await
    }

    /// Sends an encoded request and waits for its answer, optionally tied to `cancel`; the raw
    /// result, once every incoming notification that arrived before it has been handled.
    pub(crate) async fn call_encoded(
        &self,
        request: Result<Encoded, Error>,
        cancel: Option<&CancellationToken>,
    ) -> Result<Box<RawValue>, Error> {
        let shared = &self.shared;
        if cancel.is_some_and(CancellationToken::is_cancelled) {
            // Already cancelled: do not bother the peer at all.
            return Err(Error::Cancelled);
        }
        let Encoded { id, line, session: permission_session, on_answer } = request?;
        // Outgoing permission requests remember their session: an incoming `session/cancel`
        // resolves them as cancelled at once (agent side of ACP's cancellation rules).
        let (tx, rx) = oneshot::channel();
        shared.register_call(id, tx, permission_session, on_answer)?;
        let mut guard = CallGuard { shared, id, sent: false };
        match cancel {
            None => shared.send_line_direct(line).await?,
            // While waiting for room in the write queue, too: not sent yet, nothing to cancel.
            Some(cancel) => tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(Error::Cancelled),
                sent = shared.send_line_direct(line) => sent?,
            },
        }
        guard.sent = true;
        let reply = match cancel {
            None => rx.await,
            Some(cancel) => tokio::select! {
                biased;
                reply = rx => reply,
                // The guard's drop sends `$/cancel_request`.
                () = cancel.cancelled() => return Err(Error::Cancelled),
            },
        };
        // Answered (or failed): nothing left to cancel.
        guard.sent = false;
        drop(guard);
        match reply {
            Ok(Reply::Response { result, barrier }) => {
                shared.wait_for_notifications(barrier).await;
                result.map_err(Error::Rpc)
            }
            Ok(Reply::Failed(e)) => Err(e),
            // The sender was dropped: the connection went away.
            Err(_) => Err(Error::ConnectionClosed),
        }
    }
}

/// An outgoing message, encoded: the line (newline included), our id for a request, the
/// session a `session/cancel` or a `session/request_permission` concerns, and for a request
/// what the reader must do on its answer.
pub(crate) struct Encoded {
    id: i64,
    line: Vec<u8>,
    session: Option<Arc<str>>,
    on_answer: Option<AnswerHook>,
}

#[cfg(feature = "unstable_protocol_v2")]
impl Encoded {
    /// Has the reader run `hook` on the request's answer, before it reads the next message.
    pub(crate) fn on_answer(mut self, hook: AnswerHook) -> Self {
        self.on_answer = Some(hook);
        self
    }
}

/// Awaits a call and decodes its raw result with `decode`. `decode` is a function pointer,
/// taken where the call was encoded, so the decoder is compiled there (see `encode_*`).
pub(crate) async fn decode_after<R>(
    call: impl Future<Output = Result<Box<RawValue>, Error>>,
    decode: fn(&RawValue) -> Result<R, Error>,
) -> Result<R, Error> {
    decode(&call.await?)
}

/// The answer to a request sent with [`Peer::send_request_raw`]; await it for the raw result.
///
/// Like the answer of [`Peer::request_raw`], it is delivered only after every notification
/// that arrived before it has been handled.
#[must_use = "dropping it cancels the request"]
pub struct PendingResponse {
    shared: Arc<Shared>,
    id: i64,
    rx: oneshot::Receiver<Reply>,
    sent: bool,
    cancel_sent: bool,
    /// The peer's answer has arrived (nothing left to cancel).
    answered: bool,
    /// An answer waiting for the notifications read before it.
    delivered: Option<(BoxFuture, Result<Box<RawValue>, crate::core::jsonrpc::ErrorObject>)>,
}

type BoxFuture = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

impl PendingResponse {
    /// Our id of the request on this connection.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// Asks the peer to stop working on the request (`$/cancel_request`, sent once) and keeps
    /// waiting for its answer, which may be a partial result, a cancellation error or anything
    /// else the peer chooses.
    pub fn cancel(&mut self) {
        if self.sent && !self.cancel_sent && !self.answered {
            self.cancel_sent = true;
            self.shared.send_cancel_request(self.id);
        }
    }

    /// Stops waiting without telling the peer (no `$/cancel_request` when dropped): for a
    /// request the peer was already told to stop otherwise (a prompt whose `session/cancel`
    /// went the same way).
    pub(crate) fn abandon_quietly(mut self) {
        self.cancel_sent = true;
    }
}

impl fmt::Debug for PendingResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingResponse").field("id", &self.id).finish_non_exhaustive()
    }
}

impl Future for PendingResponse {
    type Output = Result<Box<RawValue>, Error>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let this = &mut *self;
        loop {
            if let Some((barrier, _)) = &mut this.delivered {
                // Notifications read before the answer are still being handled.
                if barrier.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                let (_, result) = this.delivered.take().expect("checked above");
                return Poll::Ready(result.map_err(Error::Rpc));
            }
            let reply = match std::pin::Pin::new(&mut this.rx).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(reply) => reply,
            };
            this.answered = true;
            match reply {
                Ok(Reply::Response { result, barrier }) => {
                    let shared = this.shared.clone();
                    let wait: BoxFuture = Box::pin(async move { shared.wait_for_notifications(barrier).await });
                    this.delivered = Some((wait, result));
                }
                Ok(Reply::Failed(e)) => return Poll::Ready(Err(e)),
                Err(_) => return Poll::Ready(Err(Error::ConnectionClosed)),
            }
        }
    }
}

impl Drop for PendingResponse {
    fn drop(&mut self) {
        if self.shared.forget_call(self.id) && self.sent && !self.cancel_sent {
            self.shared.send_cancel_request(self.id);
        }
    }
}

/// Work of one session that `session/cancel` stops (see [`Peer::session_scope`]).
pub struct SessionScope {
    shared: Arc<Shared>,
    session: Arc<str>,
    key: u64,
    token: CancellationToken,
}

impl SessionScope {
    /// The session.
    pub fn session_id(&self) -> &str {
        &self.session
    }

    /// Fires on `session/cancel` for the session and when the connection ends.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

impl fmt::Debug for SessionScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionScope")
            .field("session", &self.session)
            .field("cancelled", &self.token.is_cancelled())
            .finish()
    }
}

impl Drop for SessionScope {
    fn drop(&mut self) {
        self.shared.remove_session_work(&self.session, self.key);
    }
}

/// Forgets a call whose future is dropped, and tells the peer to stop working on it.
struct CallGuard<'a> {
    shared: &'a Arc<Shared>,
    id: i64,
    sent: bool,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        // If the entry is gone, the response (or the connection's end) got there first.
        if self.shared.forget_call(self.id) && self.sent {
            self.shared.send_cancel_request(self.id);
        }
    }
}

fn decode_result<R: DeserializeOwned>(raw: &RawValue) -> Result<R, Error> {
    jsonrpc::decode_with_path(raw.get())
        .map_err(|(path, message)| Error::Decode { path: path.unwrap_or_default(), message })
}

/// The `sessionId` of the params of an encoded message.
fn params_session_id(line: &[u8]) -> Option<Arc<str>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    match jsonrpc::decode(line).ok()? {
        Message::Request { params, .. } | Message::Notification { params, .. } => session_id_of(params),
        Message::Response { .. } => None,
    }
}
