//! The consuming end of MCP over ACP for one declared server (a `serverId`), independent of
//! what runs at the local end: an rmcp client, or the stdio shim of the conductor's bridge.
//!
//! The local end exchanges whole MCP JSON-RPC messages with the tunnel through two channels
//! ([`LocalEnd`]). Each request it sends becomes an `mcp/message` request toward whoever
//! declared the server, under a fresh `requestId` (the tunnel's tag and a counter, so several
//! tunnels on one ACP connection never collide); the answer's carrier becomes the MCP response
//! under the local end's own id: `{"result": ..}` a result, `{"error": ..}` the MCP error as
//! sent, an ACP error (the binding failed) an MCP error with its code and message. The
//! provider's `mcp/message` notifications for a request still in flight reach the local end as
//! MCP notifications. The wire carries nothing else from the consumer, so the local end's
//! notifications stop here: `notifications/cancelled` for a request in flight cancels its ACP
//! request (`$/cancel_request`, which the provider turns back into MCP's cancellation), and
//! every other one (`notifications/initialized`, ...) is dropped; the provider needs none, as
//! it serves each request on its own. What the local end sends that is no message (a batch, a
//! bare value) is answered -32600 with a null id.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use acp_types::{McpRequestId, McpServerAcpId, MessageMcpRequest, MessageMcpResponse, client_method};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::core::error::Error;
use crate::core::jsonrpc::ErrorObject;
use crate::core::peer::{Peer, PendingResponse};
use crate::proxy::{Wire, envelope};

const MCP_CANCELLED: &str = "notifications/cancelled";

/// Messages queued for the local end: once it holds this many, handing it the next one waits
/// (a notification handler, and with it the reading of the ACP connection; an answer's task),
/// so a provider cannot grow the queue faster than the local end reads.
const LOCAL_QUEUE: usize = 64;

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

    /// Sends a notification (a provider's, for the consumer).
    #[cfg(feature = "mcp-over-acp")]
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

/// The local end's request in flight over ACP.
struct InFlight {
    request_id: McpRequestId,
    /// Cancelled, it drops the ACP request (which sends `$/cancel_request`).
    cancel: CancellationToken,
}

/// The consuming end for one declared server; see the [module docs](self).
pub(crate) struct Tunnel {
    server_id: McpServerAcpId,
    /// The prefix of this tunnel's `requestId`s, unique to it.
    tag: String,
    route: Route,
    to_local: Mutex<Option<mpsc::Sender<Value>>>,
    /// Room for the tunnel's own answers to the local end waiting for it to read them
    /// ([`Tunnel::deliver_later`]), [`LOCAL_QUEUE`] at most.
    answers: Arc<Semaphore>,
    /// The local end's requests in flight, by their MCP id's JSON text.
    in_flight: Mutex<HashMap<String, InFlight>>,
    next_id: AtomicU64,
    /// Ended from outside: the owner closed it, or the ACP connection ended.
    closed: CancellationToken,
    /// Ended by the local end's owner: like the local end going away.
    hung_up: CancellationToken,
    /// Fires once the tunnel has ended.
    ended: CancellationToken,
}

impl std::fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnel").field("server_id", &self.server_id).field("tag", &self.tag).finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The tag of the tunnel that made `request_id` (see [`Tunnel::tag`]).
pub(crate) fn tag_of(request_id: &McpRequestId) -> Option<&str> {
    request_id.0.rsplit_once('/').map(|(tag, _)| tag)
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
        #[cfg_attr(not(test), allow(dead_code))]
        answer: Result<Value, ErrorObject>,
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

type Answer = Result<Value, Value>;

/// The error for a request on a tunnel that has ended.
pub(crate) fn closed_error() -> ErrorObject {
    ErrorObject::internal_error("the MCP connection over ACP is closed")
}

fn error_value(error: &ErrorObject) -> Value {
    serde_json::to_value(error).unwrap_or_else(|_| json!({"code": -32603, "message": "Internal error"}))
}

/// The MCP answer an `mcp/message` outcome stands for.
fn outcome(answer: Result<Box<RawValue>, Error>) -> Answer {
    let raw = answer.map_err(|e| error_value(&failure(e)))?;
    match serde_json::from_str::<MessageMcpResponse>(raw.get()) {
        Ok(MessageMcpResponse::Result(carrier)) => Ok(carrier.result),
        Ok(MessageMcpResponse::Error(carrier)) => {
            Err(serde_json::to_value(&carrier.error).map_err(|e| error_value(&ErrorObject::internal_error(e)))?)
        }
        Ok(_) | Err(_) => Err(error_value(&ErrorObject::internal_error(
            "the mcp/message answer carries neither `result` nor `error`",
        ))),
    }
}

impl Tunnel {
    /// Starts a tunnel to `server_id` whose `mcp/message`s take `route`; the local end gets
    /// the returned [`LocalEnd`]. `register` puts the tunnel in its owner's registry (under
    /// [`Tunnel::tag`]) before it runs, so that an end at once (the ACP connection already
    /// closed) finds it there for `on_end` (given the tag) to take out.
    pub(crate) fn start(
        server_id: McpServerAcpId,
        route: Route,
        on_end: Box<dyn FnOnce(&str) + Send>,
        register: impl FnOnce(Arc<Tunnel>),
    ) -> (Arc<Tunnel>, LocalEnd) {
        let (to_local, inbox) = mpsc::channel(LOCAL_QUEUE);
        let (queue, from_local) = mpsc::unbounded_channel();
        let tunnel = Arc::new(Tunnel {
            server_id,
            tag: format!("mcp-{}", super::random_tag()),
            route,
            to_local: Mutex::new(Some(to_local)),
            answers: Arc::new(Semaphore::new(LOCAL_QUEUE)),
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

    /// The prefix of this tunnel's `requestId`s (`TAG/N`), by which its owner finds it for a
    /// provider's notification.
    pub(crate) fn tag(&self) -> &str {
        &self.tag
    }

    /// The server this tunnel reaches.
    #[cfg(feature = "mcp-over-acp")]
    pub(crate) fn server_id(&self) -> &McpServerAcpId {
        &self.server_id
    }

    /// Ends the tunnel from the local end's side, as if the local end had gone away.
    pub(crate) fn hang_up(&self) {
        self.hung_up.cancel();
    }

    /// Completes once the tunnel has ended.
    #[cfg(feature = "mcp-over-acp")]
    pub(crate) async fn ended(&self) {
        self.ended.cancelled().await;
    }

    /// Ends the tunnel: the local end's input closes, its requests in flight are cancelled.
    pub(crate) fn close(&self) {
        self.closed.cancel();
        lock(&self.to_local).take();
        for (_, request) in lock(&self.in_flight).drain() {
            request.cancel.cancel();
        }
    }

    /// Hands `message` to the local end, waiting while its queue is full; false once it is
    /// closed.
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

    /// An `mcp/message` notification from the provider: handed to the local end while the
    /// request it names is in flight (waiting while the local end's queue is full), dropped
    /// otherwise, as MCP ties it to that request.
    pub(crate) async fn provider_notification(
        &self,
        request_id: &McpRequestId,
        method: String,
        params: Option<Map<String, Value>>,
    ) {
        let active = lock(&self.in_flight).values().any(|r| &r.request_id == request_id);
        if !active {
            tracing::debug!(server = %self.server_id, request = %request_id, method, "mcp over acp: notification for no request in flight dropped");
            return;
        }
        let mut message = json!({"jsonrpc": "2.0", "method": method});
        if let Some(params) = params {
            message["params"] = Value::Object(params);
        }
        if !self.deliver(message).await {
            tracing::debug!(server = %self.server_id, "mcp over acp: notification for a closed tunnel dropped");
        }
    }

    /// Relays what the local end sends, in order, until it or the ACP connection ends.
    async fn pump(
        self: Arc<Self>,
        mut from_local: mpsc::UnboundedReceiver<(Value, Option<OwnedSemaphorePermit>)>,
        on_end: Box<dyn FnOnce(&str) + Send>,
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
        self.close();
        on_end(&self.tag);
        self.ended.cancel();
    }

    async fn from_local(self: &Arc<Self>, message: Value) {
        match classify(message) {
            Local::Request { id, method, params } => self.local_request(id, method, params).await,
            Local::Notification { method, params } => {
                if method == MCP_CANCELLED {
                    let request = params.as_ref().and_then(|p| p.get("requestId")).map(Value::to_string);
                    match request.and_then(|key| lock(&self.in_flight).remove(&key)) {
                        // Dropping the ACP request tells the provider (`$/cancel_request`).
                        Some(request) => request.cancel.cancel(),
                        // Already answered (MCP allows a late cancellation) or never sent.
                        None => {
                            tracing::debug!(server = %self.server_id, "mcp over acp: cancellation of no request in flight dropped")
                        }
                    }
                    return;
                }
                // `mcp/message` notifications only go from the provider to the consumer, and the
                // provider serves each request on its own: `notifications/initialized` (and any
                // other) has no receiver.
                tracing::debug!(server = %self.server_id, method, "mcp over acp: notification from the local MCP end not carried");
            }
            Local::Answer { id, .. } => {
                // The provider cannot send requests on this wire, so there is nothing to answer.
                tracing::debug!(server = %self.server_id, %id, "mcp over acp: answer to no request dropped");
            }
            Local::BadNotification { reason } => {
                tracing::warn!(server = %self.server_id, reason, "mcp over acp: notification from the local MCP end dropped");
            }
            Local::Invalid { id, reason } => {
                tracing::warn!(server = %self.server_id, reason, "mcp over acp: invalid message from the local MCP end");
                // JSON-RPC: an invalid request is answered, with a null id when none can be read.
                let error = error_value(&ErrorObject::invalid_request(reason));
                self.deliver_later(answer_message(id.unwrap_or(Value::Null), Err(error))).await;
            }
        }
    }

    /// Sends the local end's request as `mcp/message` (in order with what it sent before) and
    /// hands the inner outcome back under the local end's id.
    async fn local_request(self: &Arc<Self>, id: Value, method: String, params: Option<Map<String, Value>>) {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let request_id = McpRequestId(format!("{}/{n}", self.tag));
        let mut message = MessageMcpRequest::new(self.server_id.clone(), request_id.clone(), method);
        message.params = params;
        let key = id.to_string();
        let cancel = self.closed.child_token();
        // In flight before it is sent: the provider's first notification may come before the
        // send returns.
        lock(&self.in_flight).insert(key.clone(), InFlight { request_id, cancel: cancel.clone() });
        let pending = match self.route.send_request(client_method::MCP_MESSAGE, &message).await {
            Ok(pending) => pending,
            Err(e) => {
                lock(&self.in_flight).remove(&key);
                self.deliver_later(answer_message(id, Err(error_value(&failure(e))))).await;
                return;
            }
        };
        let tunnel = self.clone();
        tokio::spawn(async move {
            let answer = tokio::select! {
                answer = pending => answer,
                // Dropping `pending` sends `$/cancel_request`; the local end expects no answer.
                () = cancel.cancelled() => return,
            };
            lock(&tunnel.in_flight).remove(&key);
            tunnel.deliver(answer_message(id, outcome(answer))).await;
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

    #[test]
    fn carriers_become_mcp_answers() {
        let raw = |v: Value| Ok(serde_json::value::to_raw_value(&v).unwrap());
        assert_eq!(outcome(raw(json!({"result": null}))), Ok(Value::Null));
        assert_eq!(outcome(raw(json!({"result": {"tools": []}}))), Ok(json!({"tools": []})));
        let error = json!({"code": -32602, "message": "no such tool", "data": null});
        assert_eq!(outcome(raw(json!({"error": error.clone()}))), Err(error));
        // Receivers prefer `result` when both are there.
        assert_eq!(outcome(raw(json!({"result": 1, "error": {"code": 1, "message": "m"}}))), Ok(json!(1)));
        let neither = outcome(raw(json!({"other": 1}))).unwrap_err();
        assert_eq!(neither["code"], -32603);
        let outer = outcome(Err(Error::Rpc(ErrorObject::invalid_params("unknown server")))).unwrap_err();
        assert_eq!(outer["code"], -32602);
    }

    /// A local end that does not read holds up the provider's notifications at
    /// [`LOCAL_QUEUE`], and gets every one of them, in order, once it reads.
    #[tokio::test]
    async fn the_providers_notifications_wait_for_a_local_end_that_does_not_read_and_none_is_lost() {
        const SENT: usize = 10 * LOCAL_QUEUE;
        let (ours, _far) = crate::core::transport::duplex(1 << 16);
        let (peer, serve) = crate::Connection::new().serve(ours.0, ours.1, ());
        tokio::spawn(serve);
        let (tunnel, local) = Tunnel::start(McpServerAcpId::from("s"), Route::plain(peer), Box::new(|_| {}), |_| {});
        let mut inbox = local.inbox;
        assert!(local.outbox.send_now(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call"})));
        let request_id = McpRequestId(format!("{}/1", tunnel.tag()));
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while !lock(&tunnel.in_flight).values().any(|r| r.request_id == request_id) {
            assert!(tokio::time::Instant::now() < deadline, "the request never went out");
            tokio::task::yield_now().await;
        }
        let provider = tokio::spawn({
            let (tunnel, request_id) = (tunnel.clone(), request_id.clone());
            async move {
                for n in 0..SENT {
                    tunnel.provider_notification(&request_id, format!("n/{n}"), None).await;
                }
            }
        });
        // Given time to run ahead, the provider's side is held at the queue's size.
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(inbox.len(), LOCAL_QUEUE);
        assert!(!provider.is_finished());
        for n in 0..SENT {
            let message = tokio::time::timeout(std::time::Duration::from_secs(10), inbox.recv()).await;
            let message = message.expect("in time").expect("the tunnel still open");
            assert_eq!(message["method"], format!("n/{n}"));
        }
        provider.await.unwrap();
        // One for a request that is not in flight goes nowhere.
        tunnel.provider_notification(&McpRequestId("other/1".to_owned()), "late".to_owned(), None).await;
        assert!(inbox.try_recv().is_err());
    }

    #[test]
    fn request_ids_name_their_tunnel() {
        assert_eq!(tag_of(&McpRequestId("mcp-0123/7".to_owned())), Some("mcp-0123"));
        assert_eq!(tag_of(&McpRequestId("no-tag".to_owned())), None);
    }
}
