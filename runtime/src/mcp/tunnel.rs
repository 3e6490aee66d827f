//! One MCP connection carried over ACP (a `connectionId`), independent of what runs at the
//! local end: an rmcp server or client, or the stdio shim of the conductor's bridge.
//!
//! The local end exchanges whole MCP JSON-RPC messages with the tunnel through two channels
//! ([`LocalEnd`]). What it sends becomes `mcp/message` toward the ACP peer: its requests are
//! ACP requests whose answer becomes the MCP response (under the local end's own id), its
//! notifications ACP notifications, in the order it sent them. What the ACP peer sends with
//! `mcp/message` reaches the local end under ids of the tunnel's own, and the local end's
//! answer is the ACP answer. Cancellation crosses both ways: `$/cancel_request` on an ACP
//! request becomes `notifications/cancelled` for the local end, and the local end's
//! `notifications/cancelled` for a request in flight cancels the ACP request. MCP ids do not
//! cross the tunnel, so any other `notifications/cancelled` (a late one, or one the ACP peer
//! sends) stops here. What the local end sends that is no message (a batch, a bare value) is
//! answered -32600 with a null id, and an answer with neither `result` nor `error` fails the
//! request it answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use acp_types::{McpConnectionId, client_method};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::jsonrpc::ErrorObject;
use crate::peer::{Peer, PendingResponse};
use crate::proxy::{Wire, envelope};

const MCP_CANCELLED: &str = "notifications/cancelled";

/// Messages from the ACP peer queued for the local end: once it holds this many, handing it
/// the next one waits (a notification handler, and with it the reading of the ACP connection;
/// a request's task), so a peer cannot grow the queue faster than the local end reads.
const LOCAL_QUEUE: usize = 64;

/// How long a tunnel's end waits for the answer to its `mcp/disconnect`: a peer that never
/// answers must not keep `McpConnection::close` waiting.
pub(crate) const DISCONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where a tunnel's `mcp/message`s go: a peer, directly or (toward a proxy's successor)
/// wrapped in the successor envelope of the wire that proxy speaks.
#[derive(Clone, Debug)]
pub(crate) struct Route {
    peer: Peer,
    /// The wire whose envelope wraps each message ([`Wire`] as a number), read when it is
    /// sent: a conductor sets its route up before the proxy's `initialize` tells the wire.
    wrapped: Option<Arc<AtomicU8>>,
}

impl Route {
    /// Messages go to `peer` as they are.
    pub(crate) fn plain(peer: Peer) -> Self {
        Route { peer, wrapped: None }
    }

    /// Messages go to `peer` wrapped in the successor envelope of the wire in `wire` (a proxy
    /// toward the agent, or the conductor toward the proxy before the agent).
    pub(crate) fn wrapped(peer: Peer, wire: Arc<AtomicU8>) -> Self {
        Route { peer, wrapped: Some(wire) }
    }

    fn encode<'a, P: Serialize>(
        &self,
        method: &'a str,
        params: &P,
        notification: bool,
    ) -> Result<(&'a str, Box<RawValue>), Error> {
        let raw = serde_json::value::to_raw_value(params).map_err(Error::Encode)?;
        Ok(match &self.wrapped {
            Some(wire) => {
                let wire = Wire::from_u8(wire.load(Ordering::Acquire));
                (wire.successor_envelope(notification), envelope::wrap(method, Some(&raw)))
            }
            None => (method, raw),
        })
    }

    /// Sends a request and returns once it is queued, so that it keeps its place among the
    /// notifications sent after it.
    pub(crate) async fn send_request<P: Serialize>(&self, method: &str, params: &P) -> Result<PendingResponse, Error> {
        let (method, params) = self.encode(method, params, false)?;
        self.peer.send_request_raw(method, Some(&params)).await
    }

    /// Calls `method` and waits for the answer.
    pub(crate) async fn request<P: Serialize>(&self, method: &str, params: &P) -> Result<Box<RawValue>, Error> {
        self.send_request(method, params).await?.await
    }

    /// Sends a notification.
    pub(crate) async fn notify<P: Serialize>(&self, method: &str, params: &P) -> Result<(), Error> {
        let (method, params) = self.encode(method, params, true)?;
        self.peer.notify_raw(method, Some(&params)).await
    }

    pub(crate) fn closed_token(&self) -> CancellationToken {
        self.peer.closed_token()
    }
}

/// The local end's side of a tunnel: what it sends (`outbox`, in order) and what it receives
/// (`inbox`, [`LOCAL_QUEUE`] at most). Dropping `outbox` ends the connection.
#[derive(Debug)]
pub(crate) struct LocalEnd {
    pub(crate) outbox: Outbox,
    pub(crate) inbox: mpsc::Receiver<Value>,
}

/// What the local end sends into the tunnel, relayed in order as fast as the ACP connection
/// takes it. rmcp queues its messages at once ([`Outbox::send_now`]): its sends must keep their
/// order and cannot wait, and what it sends is our own process's. A local end across a socket
/// (the bridge's shim, which the agent drives) waits instead while [`LOCAL_QUEUE`] of its
/// messages are not taken yet ([`Outbox::send`]), so it cannot queue them faster than the ACP
/// connection takes them.
#[derive(Debug)]
pub(crate) struct Outbox {
    queue: mpsc::UnboundedSender<(Value, Option<OwnedSemaphorePermit>)>,
    /// Room for [`Outbox::send`]'s messages: each holds a permit until the pump has relayed it.
    #[cfg_attr(not(all(feature = "mcp-bridge", unix)), allow(dead_code))]
    room: Arc<Semaphore>,
}

impl Outbox {
    /// Queues `message` without waiting; false once the tunnel no longer takes messages.
    #[cfg(feature = "mcp-over-acp")]
    pub(crate) fn send_now(&self, message: Value) -> bool {
        self.queue.send((message, None)).is_ok()
    }

    /// Queues `message`, first waiting while [`LOCAL_QUEUE`] messages sent this way are not
    /// relayed yet; false once the tunnel no longer takes messages.
    #[cfg(all(feature = "mcp-bridge", unix))]
    pub(crate) async fn send(&self, message: Value) -> bool {
        // The permits come back when the pump has relayed a message, or with the messages
        // still queued when it ends; the semaphore itself is never closed.
        let Ok(permit) = self.room.clone().acquire_owned().await else { return false };
        self.queue.send((message, Some(permit))).is_ok()
    }
}

/// What a tunnel does when it ends, besides closing its local end.
pub(crate) struct OnEnd {
    /// Send `mcp/disconnect` (the connecting side does; the provider does not).
    pub(crate) disconnect: bool,
    /// Called once, e.g. to take the tunnel out of a registry.
    pub(crate) then: Box<dyn FnOnce() + Send>,
}

type Answer = Result<Value, ErrorObject>;

/// One MCP connection over ACP; see the [module docs](self).
pub(crate) struct Tunnel {
    connection_id: McpConnectionId,
    route: Route,
    to_local: Mutex<Option<mpsc::Sender<Value>>>,
    /// Room for the tunnel's own answers to the local end waiting for it to read them
    /// ([`Tunnel::deliver_later`]), [`LOCAL_QUEUE`] at most.
    answers: Arc<Semaphore>,
    /// ACP requests waiting for the local end's answer, by the tunnel's id for them.
    waiting: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    /// The local end's requests in flight over ACP, by their id's JSON text.
    in_flight: Mutex<HashMap<String, CancellationToken>>,
    next_id: AtomicU64,
    /// Ended from outside: the other side disconnected, or the registry closed it.
    closed: CancellationToken,
    /// Ended by the local end's owner: like the local end going away.
    hung_up: CancellationToken,
    /// Fires once the tunnel has ended, `mcp/disconnect` answered if it sends one.
    ended: CancellationToken,
}

impl std::fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnel").field("connection_id", &self.connection_id).finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A message from the local end, by its JSON-RPC shape.
enum Local {
    Request {
        id: Value,
        method: String,
        params: Option<Map<String, Value>>,
    },
    Notification {
        method: String,
        params: Option<Map<String, Value>>,
    },
    Answer {
        id: Value,
        answer: Answer,
    },
    Invalid {
        id: Option<Value>,
        reason: &'static str,
    },
    /// A notification the tunnel cannot carry: logged, never answered.
    BadNotification {
        reason: &'static str,
    },
}

fn params_of(message: &mut Map<String, Value>) -> Result<Option<Map<String, Value>>, &'static str> {
    match message.remove("params") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(params)) => Ok(Some(params)),
        Some(_) => Err("MCP over ACP carries params that are an object"),
    }
}

fn classify(message: Value) -> Local {
    let mut message = match message {
        Value::Object(message) => message,
        Value::Array(_) => {
            return Local::Invalid {
                id: None,
                reason: "JSON-RPC batches are not carried over ACP: send each message on its own",
            };
        }
        _ => return Local::Invalid { id: None, reason: "not a JSON-RPC object" },
    };
    let id = message.remove("id");
    let method = match message.remove("method") {
        Some(Value::String(method)) => Some(method),
        Some(_) => return Local::Invalid { id, reason: "`method` is not a string" },
        None => None,
    };
    match (id, method) {
        (Some(id), Some(method)) => match params_of(&mut message) {
            Ok(params) => Local::Request { id, method, params },
            Err(reason) => Local::Invalid { id: Some(id), reason },
        },
        (None, Some(method)) => match params_of(&mut message) {
            Ok(params) => Local::Notification { method, params },
            Err(reason) => Local::BadNotification { reason },
        },
        (Some(id), None) => {
            if let Some(result) = message.remove("result") {
                Local::Answer { id, answer: Ok(result) }
            } else if let Some(error) = message.remove("error") {
                let error = serde_json::from_value(error).unwrap_or_else(|_| {
                    ErrorObject::internal_error("the MCP peer answered with an invalid error object")
                });
                Local::Answer { id, answer: Err(error) }
            } else {
                // An answer all the same (it has an id and no method): never answered back,
                // and what waits for it fails instead of waiting for ever.
                let error = ErrorObject::internal_error("the MCP peer answered with neither `result` nor `error`");
                Local::Answer { id, answer: Err(error) }
            }
        }
        (None, None) => Local::Invalid { id: None, reason: "neither a request, a notification nor an answer" },
    }
}

/// The JSON-RPC answer to `id` for the local end.
pub(crate) fn answer_message(id: Value, answer: Answer) -> Value {
    match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    }
}

#[derive(Serialize)]
struct McpMessage<'a> {
    #[serde(rename = "connectionId")]
    connection_id: &'a McpConnectionId,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a Map<String, Value>>,
}

/// MCP's cancellation of the tunnel's request `id`.
fn cancelled(id: u64, reason: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": MCP_CANCELLED, "params": {"requestId": id, "reason": reason}})
}

/// The error for a request on a connection that has ended.
pub(crate) fn closed_error() -> ErrorObject {
    ErrorObject::internal_error("the MCP connection over ACP is closed")
}

impl Tunnel {
    /// Starts a tunnel for `connection_id` whose `mcp/message`s take `route`; the local end
    /// gets the returned [`LocalEnd`]. `register` puts the tunnel in its registry before it
    /// runs, so that an end at once (the ACP connection already closed) finds it there for
    /// `on_end` to take out.
    pub(crate) fn start(
        connection_id: McpConnectionId,
        route: Route,
        on_end: OnEnd,
        register: impl FnOnce(Arc<Tunnel>),
    ) -> (Arc<Tunnel>, LocalEnd) {
        let (to_local, inbox) = mpsc::channel(LOCAL_QUEUE);
        let (queue, from_local) = mpsc::unbounded_channel();
        let tunnel = Arc::new(Tunnel {
            connection_id,
            route,
            to_local: Mutex::new(Some(to_local)),
            answers: Arc::new(Semaphore::new(LOCAL_QUEUE)),
            waiting: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: CancellationToken::new(),
            hung_up: CancellationToken::new(),
            ended: CancellationToken::new(),
        });
        register(tunnel.clone());
        tokio::spawn(tunnel.clone().pump(from_local, on_end));
        let outbox = Outbox { queue, room: Arc::new(Semaphore::new(LOCAL_QUEUE)) };
        (tunnel, LocalEnd { outbox, inbox })
    }

    /// Ends the tunnel from the local end's side, as if the local end had gone away (the
    /// connecting side then sends `mcp/disconnect`).
    pub(crate) fn hang_up(&self) {
        self.hung_up.cancel();
    }

    /// Completes once the tunnel has ended (and its `mcp/disconnect`, if any, was answered).
    #[cfg(feature = "mcp-over-acp")]
    pub(crate) async fn ended(&self) {
        self.ended.cancelled().await;
    }

    /// Ends the connection: the local end's input closes, waiting requests fail, the local
    /// end's requests in flight are cancelled.
    pub(crate) fn close(&self) {
        self.closed.cancel();
        let to_local = lock(&self.to_local).take();
        // The local end learns that nobody waits for these answers any more, before its input
        // ends: an rmcp server stops their handlers at once instead of draining them. As far
        // as its queue has room: they are a courtesy, the end of its input follows anyway.
        for (id, _) in lock(&self.waiting).drain() {
            if let Some(to_local) = &to_local {
                let _ = to_local.try_send(cancelled(id, "the MCP connection over ACP closed"));
            }
        }
        for (_, token) in lock(&self.in_flight).drain() {
            token.cancel();
        }
    }

    /// Hands `message` to the local end, waiting while its queue is full; false once it is
    /// gone or the tunnel closed.
    pub(crate) async fn deliver(&self, message: Value) -> bool {
        let Some(to_local) = lock(&self.to_local).clone() else { return false };
        tokio::select! {
            biased;
            () = self.closed.cancelled() => false,
            sent = to_local.send(message) => sent.is_ok(),
        }
    }

    /// [`Tunnel::deliver`] on a task of its own, for the tunnel's answers to the local end's
    /// own messages: the pump that relays the local end's output must not wait for the local
    /// end to read each of them (a local end that writes before it reads would wait for it).
    /// Only while [`LOCAL_QUEUE`] of them wait, though: then the pump waits for room, and a
    /// local end that keeps writing without reading is held back instead of piling up tasks.
    async fn deliver_later(self: &Arc<Self>, message: Value) {
        let permit = tokio::select! {
            biased;
            () = self.closed.cancelled() => return,
            // Never closed: `Err` cannot happen, and would only drop this answer.
            permit = self.answers.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let tunnel = self.clone();
        tokio::spawn(async move {
            tunnel.deliver(message).await;
            drop(permit);
        });
    }

    /// An `mcp/message` request from the ACP peer: the local end's answer, or the request's
    /// cancellation (the local end is then sent `notifications/cancelled`).
    pub(crate) async fn acp_request(
        self: &Arc<Self>,
        method: String,
        params: Option<Map<String, Value>>,
        cancel: &CancellationToken,
    ) -> Answer {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).insert(id, tx);
        let mut message = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(params) = params {
            message["params"] = Value::Object(params);
        }
        // Waiting for room in the local end's queue is cancellable too.
        let delivered = tokio::select! {
            delivered = self.deliver(message) => delivered,
            () = cancel.cancelled() => {
                lock(&self.waiting).remove(&id);
                return Err(ErrorObject::request_cancelled());
            }
        };
        if !delivered {
            lock(&self.waiting).remove(&id);
            return Err(closed_error());
        }
        tokio::select! {
            answer = rx => answer.unwrap_or_else(|_| Err(closed_error())),
            () = cancel.cancelled() => {
                lock(&self.waiting).remove(&id);
                // Its delivery is not waited for (only room among the tunnel's own answers):
                // the request is answered now, whenever the local end reads its queue.
                self.deliver_later(cancelled(id, "cancelled by the ACP peer")).await;
                Err(ErrorObject::request_cancelled())
            }
        }
    }

    /// An `mcp/message` notification from the ACP peer; waits while the local end's queue is
    /// full.
    pub(crate) async fn acp_notification(&self, method: String, params: Option<Map<String, Value>>) {
        if method == MCP_CANCELLED {
            // It names a request by the sender's MCP id, which does not cross the tunnel (its
            // requests reach us as ACP requests, cancelled with `$/cancel_request`): handed
            // on, it would name an unrelated request of ours.
            tracing::debug!(connection = %self.connection_id, "mcp over acp: notifications/cancelled from the ACP peer dropped");
            return;
        }
        let mut message = json!({"jsonrpc": "2.0", "method": method});
        if let Some(params) = params {
            message["params"] = Value::Object(params);
        }
        if !self.deliver(message).await {
            tracing::debug!(connection = %self.connection_id, "mcp over acp: notification for a closed connection dropped");
        }
    }

    /// Answers the tunnel's own request `id` with an error (the local end could not take it).
    #[cfg(feature = "mcp-over-acp")]
    pub(crate) fn reject(&self, id: &Value, error: ErrorObject) -> bool {
        let Some(id) = id.as_u64() else { return false };
        match lock(&self.waiting).remove(&id) {
            Some(tx) => tx.send(Err(error)).is_ok(),
            None => false,
        }
    }

    /// Relays what the local end sends, in order, until it or the ACP connection ends.
    async fn pump(
        self: Arc<Self>,
        mut from_local: mpsc::UnboundedReceiver<(Value, Option<OwnedSemaphorePermit>)>,
        on_end: OnEnd,
    ) {
        let acp_closed = self.route.closed_token();
        loop {
            tokio::select! {
                biased;
                () = self.closed.cancelled() => break,
                () = acp_closed.cancelled() => break,
                () = self.hung_up.cancelled() => break,
                message = from_local.recv() => match message {
                    // The permit (room for the next message) goes once this one is relayed.
                    Some((message, _room)) => self.from_local(message).await,
                    None => break,
                },
            }
        }
        // Nothing more is taken from the local end: its sends fail, and what it queued goes
        // (with its permits, so a sender waiting for room learns the end too).
        drop(from_local);
        let closed_here = !self.closed.is_cancelled();
        self.close();
        (on_end.then)();
        if on_end.disconnect && closed_here && !acp_closed.is_cancelled() {
            let params = acp_types::DisconnectMcpRequest::new(self.connection_id.clone());
            // Given up, the request is cancelled (`$/cancel_request`) as it drops.
            match tokio::time::timeout(DISCONNECT_TIMEOUT, self.route.request(client_method::MCP_DISCONNECT, &params))
                .await
            {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::debug!(connection = %self.connection_id, error = %e, "mcp over acp: mcp/disconnect failed")
                }
                Err(_) => {
                    tracing::debug!(connection = %self.connection_id, "mcp over acp: mcp/disconnect not answered in time")
                }
            }
        }
        self.ended.cancel();
    }

    async fn from_local(self: &Arc<Self>, message: Value) {
        match classify(message) {
            Local::Request { id, method, params } => self.local_request(id, &method, params.as_ref()).await,
            Local::Notification { method, params } => {
                if method == MCP_CANCELLED {
                    let request = params.as_ref().and_then(|p| p.get("requestId")).map(Value::to_string);
                    match request.and_then(|key| lock(&self.in_flight).remove(&key)) {
                        // Cancelling the ACP request tells the other side (`$/cancel_request`).
                        Some(token) => token.cancel(),
                        // Already answered (MCP allows a late cancellation) or never sent: the
                        // id means nothing on the other side, where it could name another
                        // request.
                        None => {
                            tracing::debug!(connection = %self.connection_id, "mcp over acp: cancellation of no request in flight dropped")
                        }
                    }
                    return;
                }
                let message =
                    McpMessage { connection_id: &self.connection_id, method: &method, params: params.as_ref() };
                if let Err(e) = self.route.notify(client_method::MCP_MESSAGE, &message).await {
                    tracing::debug!(connection = %self.connection_id, error = %e, "mcp over acp: notification not sent");
                }
            }
            Local::Answer { id, answer } => {
                let waiting = our_id(&id).and_then(|id| lock(&self.waiting).remove(&id));
                match waiting {
                    Some(tx) => {
                        let _ = tx.send(answer);
                    }
                    None => {
                        tracing::debug!(connection = %self.connection_id, %id, "mcp over acp: answer to no request dropped")
                    }
                }
            }
            Local::BadNotification { reason } => {
                tracing::warn!(connection = %self.connection_id, reason, "mcp over acp: notification from the local MCP end dropped");
            }
            Local::Invalid { id, reason } => {
                tracing::warn!(connection = %self.connection_id, reason, "mcp over acp: invalid message from the local MCP end");
                // JSON-RPC: an invalid request is answered, with a null id when none can be read.
                self.deliver_later(answer_message(
                    id.unwrap_or(Value::Null),
                    Err(ErrorObject::invalid_request(reason)),
                ))
                .await;
            }
        }
    }

    /// Sends the local end's request over ACP (in order with its notifications) and hands the
    /// answer back under the local end's id.
    async fn local_request(self: &Arc<Self>, id: Value, method: &str, params: Option<&Map<String, Value>>) {
        let message = McpMessage { connection_id: &self.connection_id, method, params };
        let pending = match self.route.send_request(client_method::MCP_MESSAGE, &message).await {
            Ok(pending) => pending,
            Err(e) => {
                self.deliver_later(answer_message(id, Err(failure(e)))).await;
                return;
            }
        };
        let key = id.to_string();
        let token = self.closed.child_token();
        lock(&self.in_flight).insert(key.clone(), token.clone());
        let tunnel = self.clone();
        tokio::spawn(async move {
            let answer = tokio::select! {
                answer = pending => answer,
                // Dropping `pending` sends `$/cancel_request`; the local end expects no answer.
                () = token.cancelled() => return,
            };
            lock(&tunnel.in_flight).remove(&key);
            let answer = answer.map_err(failure).and_then(|raw| {
                serde_json::from_str(raw.get())
                    .map_err(|e| ErrorObject::internal_error(format_args!("invalid result: {e}")))
            });
            tunnel.deliver(answer_message(id, answer)).await;
        });
    }
}

/// The MCP error for an ACP call that failed: the peer's own error as it is, anything else as
/// an internal error.
fn failure(e: Error) -> ErrorObject {
    match e {
        Error::Rpc(error) => error,
        Error::Cancelled => ErrorObject::request_cancelled(),
        Error::ConnectionClosed => closed_error(),
        other => ErrorObject::internal_error(format_args!("mcp/message failed: {other}")),
    }
}

/// The id of one of our requests, as the local MCP end wrote it back: our ids are numbers, and
/// a peer that returns them as strings is understood, but only in the form we wrote (`"7"`,
/// not `"07"` or `"+7"`), so an answer never reaches a request it was not meant for.
fn our_id(id: &Value) -> Option<u64> {
    if let Some(n) = id.as_u64() {
        return Some(n);
    }
    let text = id.as_str()?;
    let n: u64 = text.parse().ok()?;
    (n.to_string() == text).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_told_apart_by_their_members() {
        let request = classify(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"a": 1}}));
        assert!(matches!(request, Local::Request { ref method, params: Some(_), .. } if method == "tools/list"));
        let notification = classify(json!({"jsonrpc": "2.0", "method": "notifications/initialized", "params": null}));
        assert!(matches!(notification, Local::Notification { params: None, .. }));
        assert!(matches!(classify(json!({"id": 1, "result": {}})), Local::Answer { answer: Ok(_), .. }));
        let error = classify(json!({"id": 1, "error": {"code": -32601, "message": "nope"}}));
        assert!(matches!(error, Local::Answer { answer: Err(ErrorObject { code: -32601, .. }), .. }));
        assert!(matches!(classify(json!({"id": 1, "method": "x", "params": [1]})), Local::Invalid { id: Some(_), .. }));
        assert!(matches!(classify(json!([1])), Local::Invalid { id: None, .. }));
        assert!(matches!(classify(json!(42)), Local::Invalid { id: None, .. }));
        let neither = classify(json!({"id": 1}));
        assert!(matches!(neither, Local::Answer { answer: Err(ErrorObject { code: -32603, .. }), .. }));
    }

    /// A local end that does not read holds up the ACP peer's messages at [`LOCAL_QUEUE`],
    /// and gets every one of them, in order, once it reads. (The queue was unbounded: a peer
    /// could fill memory as fast as it could write.)
    #[tokio::test]
    async fn the_peers_messages_wait_for_a_local_end_that_does_not_read_and_none_is_lost() {
        const SENT: usize = 10 * LOCAL_QUEUE;
        let (ours, _far) = crate::transport::duplex(1 << 16);
        let (peer, serve) = crate::Connection::new().serve(ours.0, ours.1, ());
        tokio::spawn(serve);
        let on_end = OnEnd { disconnect: false, then: Box::new(|| {}) };
        let (tunnel, local) = Tunnel::start(McpConnectionId::from("c1".to_owned()), Route::plain(peer), on_end, |_| {});
        let mut inbox = local.inbox;
        let peer_side = tokio::spawn({
            let tunnel = tunnel.clone();
            async move {
                for n in 0..SENT {
                    tunnel.acp_notification(format!("n/{n}"), None).await;
                }
            }
        });
        // Given time to run ahead, the peer's side is held at the queue's size.
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(inbox.len(), LOCAL_QUEUE);
        assert!(!peer_side.is_finished());
        // A request waiting for room can still be cancelled.
        let cancel = CancellationToken::new();
        let request = tokio::spawn({
            let (tunnel, cancel) = (tunnel.clone(), cancel.clone());
            async move { tunnel.acp_request("r".to_owned(), None, &cancel).await }
        });
        cancel.cancel();
        let answer = tokio::time::timeout(std::time::Duration::from_secs(10), request).await.expect("in time");
        assert_eq!(answer.unwrap().unwrap_err().code, ErrorObject::request_cancelled().code);
        for n in 0..SENT {
            let message = tokio::time::timeout(std::time::Duration::from_secs(10), inbox.recv()).await;
            let message = message.expect("in time").expect("the tunnel still open");
            assert_eq!(message["method"], format!("n/{n}"));
        }
        peer_side.await.unwrap();
    }

    #[test]
    fn answers_match_our_ids_written_as_numbers_or_as_their_exact_decimal_strings() {
        assert_eq!(our_id(&json!(7)), Some(7));
        assert_eq!(our_id(&json!("7")), Some(7));
        assert_eq!(our_id(&json!("0")), Some(0));
        for other in [json!("07"), json!("+7"), json!(" 7"), json!("7.0"), json!(-7), json!(7.5), json!(null)] {
            assert_eq!(our_id(&other), None, "{other}");
        }
    }
}
