//! The reader side of a connection: routes each decoded line (a response to its pending call,
//! a request to a new task, a notification to the ordered queue), answers bad input, holds the
//! requests beyond the task bounds in the [backlog](crate::backlog) (or refuses them once it
//! is full; see the overload section of [`crate::connection`]), and runs request and
//! notification handlers with the cancellation rules of [`crate::connection`].

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::AsyncRead;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::core::backlog::{Backlog, Held};
use crate::core::batch::{BatchReply, ReplyTo};
use crate::core::catch_unwind::{CatchUnwind, panic_message};
use crate::core::connection::{InFlight, Options, Reply, RequestKind, Shared, lock_backlog};
use crate::core::error::Error;
use crate::core::framing::{Frame, LineReader};
use crate::core::handler::{DynHandler, IncomingNotification, IncomingRequest, Watch, session_id_of};
use crate::core::jsonrpc::{self, DecodeErrorKind, ErrorObject, Id, Message};
use crate::core::methods;
use crate::core::peer::Peer;
use crate::core::tasks::{Counted, RequestTasks};
use crate::core::writer::{TapIn, tap_in};

tokio::task_local! {
    /// Set (to the connection's address) while a notification handler runs, so an outgoing
    /// call made from it skips the response-after-notifications wait that would deadlock.
    pub(crate) static IN_NOTIFICATION_HANDLER: usize;
}

/// A notification waiting for the notification task; `seq` numbers them from 1. On a
/// forwarding connection requests take the same queue (`request`), so that what is forwarded
/// keeps the order it came in; they do not count as notifications (`seq` is that of the last
/// notification before them).
pub(crate) struct Queued {
    method: Cow<'static, str>,
    params: Option<Box<RawValue>>,
    seq: u64,
    request: Option<Box<QueuedRequest>>,
}

/// A request of a forwarding connection, registered and admitted, to be started (or forwarded)
/// by the notification task.
pub(crate) struct QueuedRequest {
    req: IncomingRequest,
    kind: RequestKind,
    slot: Slot,
    reply: ReplyTo,
    counted: Counted,
}

pub(crate) struct Router {
    options: Options,
    shared: Arc<Shared>,
    handler: Arc<dyn DynHandler>,
    notifications: mpsc::Sender<Queued>,
    /// Notifications queued so far; a response is delivered once this many are handled.
    queued: u64,
    /// Requests with a task (running or waiting): `max_concurrent_requests + max_queued_requests`.
    admitted: Arc<Semaphore>,
    /// Handler slots: `max_concurrent_requests`.
    running: Arc<Semaphore>,
    tasks: RequestTasks,
}

impl Router {
    pub(crate) fn new(
        options: Options,
        shared: Arc<Shared>,
        handler: Arc<dyn DynHandler>,
        notifications: mpsc::Sender<Queued>,
        tasks: RequestTasks,
    ) -> Self {
        Router {
            options,
            admitted: shared.load.admitted.clone(),
            running: shared.load.running.clone(),
            shared,
            handler,
            notifications,
            queued: 0,
            tasks,
        }
    }

    /// Reads until end of input (`Ok`) or a read error.
    pub(crate) async fn run(&mut self, reader: Box<dyn AsyncRead + Send + Unpin>) -> std::io::Result<()> {
        let mut lines = LineReader::new(reader, self.options.max_line_bytes);
        while let Some(frame) = lines.next_frame().await? {
            match frame {
                Frame::Line(line) => self.dispatch(line).await,
                Frame::Oversized { len } => {
                    tracing::warn!(
                        len,
                        limit = self.options.max_line_bytes,
                        "acp connection: oversized message discarded"
                    );
                    tap_in(&self.shared, TapIn::Oversized(len)).await;
                    let error = ErrorObject::invalid_request(format_args!(
                        "message of {len} bytes exceeds the limit of {} bytes",
                        self.options.max_line_bytes
                    ));
                    self.answer(&Id::Null, Err(&error)).await;
                    self.bad_input_seen();
                }
            }
        }
        Ok(())
    }

    async fn dispatch(&mut self, line: &[u8]) {
        if self.shared.speaks_v2() && line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            return self.dispatch_batch(line).await;
        }
        let decoded = jsonrpc::decode(line);
        if self.shared.tap.is_some() {
            let item = match &decoded {
                Err(e) if e.kind == DecodeErrorKind::Parse => TapIn::Invalid(line),
                _ => TapIn::Json(line),
            };
            tap_in(&self.shared, item).await;
        }
        self.route(decoded, &ReplyTo::Line).await;
    }

    /// A JSON-RPC batch (protocol v2 only; see [`crate::batch`]): each entry is routed like a
    /// message of its own, and the answers go out together as one array.
    async fn dispatch_batch(&mut self, line: &[u8]) {
        let entries = std::str::from_utf8(line).ok().map(|text| (text, serde_json::from_str::<Vec<&RawValue>>(text)));
        if self.shared.tap.is_some() {
            let item = match &entries {
                Some((_, Ok(_))) => TapIn::Json(line),
                _ => TapIn::Invalid(line),
            };
            tap_in(&self.shared, item).await;
        }
        let entries = match entries {
            Some((_, Ok(entries))) => entries,
            Some((text, Err(_))) if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() => {
                // JSON, but not an array of values serde_json could hold (nested too deeply).
                let error = ErrorObject::invalid_request("batch entries nested too deeply");
                return self.answer(&Id::Null, Err(&error)).await;
            }
            _ => return self.answer(&Id::Null, Err(&ErrorObject::parse_error())).await,
        };
        if entries.is_empty() {
            tracing::warn!("acp connection: empty batch");
            return self.answer(&Id::Null, Err(&ErrorObject::invalid_request("empty batch"))).await;
        }
        let batch = Arc::new(BatchReply::new());
        let reply = ReplyTo::Batch(batch.clone());
        for entry in entries {
            self.route(jsonrpc::decode(entry.get().as_bytes()), &reply).await;
        }
        batch.routed(&self.shared).await;
    }

    /// Routes one decoded message (a line, or an entry of a batch).
    async fn route(&mut self, decoded: Result<Message<'_>, jsonrpc::DecodeError>, reply: &ReplyTo) {
        match decoded {
            Ok(Message::Request { id, method, params }) => self.on_request(id, method, params, reply).await,
            Ok(Message::Notification { method, params }) => self.on_notification(method, params).await,
            Ok(Message::Response { id, result }) => self.on_response(id, result.map(ToOwned::to_owned)),
            Err(e) => {
                tracing::warn!(kind = ?e.kind, reason = e.reason, id = %e.id, "acp connection: bad input");
                if e.kind == DecodeErrorKind::InvalidResponse {
                    if let Id::Number(n) = e.id {
                        self.shared.complete_call(n, Reply::Failed(Error::Protocol(e.reason)));
                    }
                }
                if let Some((id, error)) = e.answer() {
                    self.answer_to(reply, &id, Err(&error)).await;
                }
                self.bad_input_seen();
            }
        }
    }

    /// After bad input has been answered: a connection told to end on bad input ends.
    fn bad_input_seen(&self) {
        if self.options.end_on_bad_input {
            tracing::error!("acp connection: the peer sent something that is not JSON-RPC; closing the connection");
            self.shared.close();
        }
    }

    async fn answer(&self, id: &Id, result: Result<&RawValue, &ErrorObject>) {
        self.answer_to(&ReplyTo::Line, id, result).await;
    }

    /// Answers on the reader's behalf (bad input, a refused request).
    async fn answer_to(&self, reply: &ReplyTo, id: &Id, result: Result<&RawValue, &ErrorObject>) {
        match reply {
            ReplyTo::Line => {
                let mut line = Vec::with_capacity(128);
                jsonrpc::encode_response(&mut line, id, result);
                // A closed connection has nobody to answer.
                let _ = self.shared.send_line_direct(line).await;
            }
            ReplyTo::Batch(batch) => batch.answer_now(id, result),
        }
    }

    fn on_response(&mut self, id: Id, result: Result<Box<RawValue>, ErrorObject>) {
        let delivered = match &id {
            Id::Number(n) => self.shared.complete_call(*n, Reply::Response { result, barrier: self.queued }),
            Id::Null => {
                if let Err(e) = &result {
                    tracing::warn!(error = %e, "acp connection: peer reported an error about a message of ours");
                }
                return;
            }
            // Our own calls carry integers only.
            Id::OtherNumber(_) | Id::String(_) => false,
        };
        if !delivered {
            tracing::warn!(%id, "acp connection: response to an unknown request id ignored");
        }
    }

    async fn on_notification(&mut self, method: Cow<'_, str>, params: Option<&RawValue>) {
        // A proxy's (or its conductor's) `$/cancel_request` in a successor envelope names a
        // request it sent on this connection, by its id here: it cancels that request as a
        // plain one does (which passes the cancellation on with the next hop's id). Passed on
        // as it is, it would name whatever has that id on the next hop.
        if let Some(wrapped_cancel) = self.options.wrapped_cancel
            && let Some(inner) = wrapped_cancel(&method, params)
        {
            return self.on_cancel_request(inner);
        }
        match &*method {
            methods::CANCEL_REQUEST => {
                self.on_cancel_request(params);
                // Consumed by the runtime: handlers never see it.
                return;
            }
            methods::SESSION_CANCEL => {
                if let Some(session) = session_id_of(params) {
                    // Acted on here, not in the queue: cancellation must not wait behind a
                    // backlog of notifications.
                    self.shared.cancel_incoming(RequestKind::Prompt, &session);
                    self.shared.mark_turns_cancelled(&session);
                    self.shared.cancel_session_work(&session);
                    self.shared.resolve_outgoing_permissions(&session);
                }
            }
            _ => {}
        }
        self.queued += 1;
        let queued = Queued {
            method: methods::intern(&method),
            params: params.map(ToOwned::to_owned),
            seq: self.queued,
            request: None,
        };
        if self.notifications.send(queued).await.is_err() {
            // The notification task is gone (only at shutdown).
            tracing::debug!("acp connection: notification dropped, handler task has ended");
        }
    }

    fn on_cancel_request(&self, params: Option<&RawValue>) {
        // The id is read as the request's was (`parse_id`), so that a number names the request
        // written the same way (`1.50` is not `1.5`'s spelling).
        #[derive(Deserialize)]
        struct CancelParams<'a> {
            #[serde(rename = "requestId", borrow)]
            request_id: &'a RawValue,
        }
        let Some(params) = params.filter(|p| p.get().starts_with('{')) else {
            tracing::warn!("acp connection: $/cancel_request without params ignored");
            return;
        };
        let request_id = serde_json::from_str::<CancelParams<'_>>(params.get())
            .ok()
            .and_then(|p| crate::core::jsonrpc::parse_id(p.request_id));
        let Some(request_id) = request_id else {
            tracing::warn!("acp connection: $/cancel_request with invalid requestId ignored");
            return;
        };
        let mut inflight = crate::core::connection::lock_inflight(&self.shared);
        match inflight.get_mut(&request_id) {
            Some(entry) => {
                entry.by_cancel_request = true;
                entry.cancel_on_request(&request_id, &self.shared.held_cancels);
            }
            // Finished already, or never existed: nothing to do.
            None => tracing::debug!(id = %request_id, "acp connection: $/cancel_request for no in-flight request"),
        }
    }

    async fn on_request(&mut self, id: Id, method: Cow<'_, str>, params: Option<&RawValue>, reply: &ReplyTo) {
        if method == "session/close" && self.shared.speaks_v2() {
            // v2: closing a session cancels its work as `session/cancel` does. Acted on here, in
            // reading order, like `session/cancel`: a permission answer read after the close
            // must find the turn cancelled already, not race the close's handler task.
            if let Some(session) = session_id_of(params) {
                self.shared.cancel_incoming(RequestKind::Prompt, &session);
                self.shared.mark_turns_cancelled(&session);
                self.shared.cancel_session_work(&session);
                self.shared.resolve_outgoing_permissions(&session);
            }
        }
        // Never wait here: a reader waiting for a handler slot would not read the cancellation
        // or the response that handler is waiting for. A request gets a task if one is free and
        // nothing is held before it; else it joins the backlog if it fits; else it is refused.
        let admitted =
            if self.shared.load.backlog_is_empty() { self.admitted.clone().try_acquire_owned().ok() } else { None };
        let Some(admitted) = admitted else {
            return self.hold_or_refuse(id, method, params, reply).await;
        };
        let kind = RequestKind::of(&method, self.shared.speaks_v2());
        let session_id = session_id_of(params);
        let token = self.shared.closed.child_token();
        let entry = InFlight {
            token: token.clone(),
            kind,
            session: session_id.clone(),
            cancel_requested: false,
            by_cancel_request: false,
            held: false,
            turn_cancelled: false,
        };
        if !self.register(reply, &id, entry) {
            return self.refuse_duplicate(reply, &id).await;
        }
        let req = IncomingRequest {
            id,
            method: methods::intern(&method),
            params: params.map(ToOwned::to_owned),
            session_id,
            cancel: token,
            peer: Peer { shared: self.shared.clone() },
            watch: Watch::default(),
        };
        let slot = Slot { running: self.running.clone(), _admitted: admitted };
        if self.options.forwarding {
            // Started (or forwarded) by the notification task, in arrival order.
            let request = QueuedRequest { req, kind, slot, reply: reply.clone(), counted: self.tasks.count() };
            let queued =
                Queued { method: Cow::Borrowed(""), params: None, seq: self.queued, request: Some(Box::new(request)) };
            if let Err(mpsc::error::SendError(queued)) = self.notifications.send(queued).await {
                // Only at shutdown: answer it as cancelled rather than not at all.
                let request = queued.request.expect("a queued request");
                let QueuedRequest { req, reply, .. } = *request;
                finish(&self.shared, req.id, Err(ErrorObject::request_cancelled()), &reply, &req.watch).await;
            }
            return;
        }
        let (grace, barrier) = (self.options.cancel_grace, self.queued);
        let run =
            Run { shared: self.shared.clone(), handler: self.handler.clone(), kind, grace, barrier, in_order: false };
        spawn_request(run, req, slot, reply.clone(), self.tasks.count());
    }

    /// Makes `id` an in-flight request; `false` if it already is one (a duplicate, to be
    /// answered with [`Router::refuse_duplicate`]). A request of a batch adds to the answers
    /// the batch waits for.
    fn register(&self, reply: &ReplyTo, id: &Id, entry: InFlight) -> bool {
        {
            let mut inflight = crate::core::connection::lock_inflight(&self.shared);
            if inflight.contains_key(id) {
                return false;
            }
            inflight.insert(id.clone(), entry);
        }
        if let ReplyTo::Batch(batch) = reply {
            batch.expect();
        }
        true
    }

    async fn refuse_duplicate(&self, reply: &ReplyTo, id: &Id) {
        tracing::warn!(%id, "acp connection: duplicate id of an in-flight request");
        let error = ErrorObject::invalid_request("duplicate id of an in-flight request");
        self.answer_to(reply, id, Err(&error)).await;
    }

    /// A request that found no free task, or requests held before it: it joins the backlog
    /// if it fits, else it is refused as overloaded.
    async fn hold_or_refuse(&mut self, id: Id, method: Cow<'_, str>, params: Option<&RawValue>, reply: &ReplyTo) {
        let cost = Backlog::cost(&id, &method, params);
        let kind = RequestKind::of(&method, self.shared.speaks_v2());
        let session_id = session_id_of(params);
        // Under the backlog's lock from its in-flight entry on, so that a cancellation that
        // finds the entry also finds it held.
        let held = {
            let mut backlog = lock_backlog(&self.shared);
            if !backlog.fits(cost, self.options.max_backlog_bytes) {
                None
            } else {
                let seq = backlog.next_seq();
                let token = self.shared.closed.child_token();
                let entry = InFlight {
                    token: token.clone(),
                    kind,
                    session: session_id.clone(),
                    cancel_requested: false,
                    by_cancel_request: false,
                    held: true,
                    turn_cancelled: false,
                };
                let registered = self.register(reply, &id, entry);
                if registered {
                    let held = Held {
                        id: id.clone(),
                        method: methods::intern(&method),
                        params: params.map(ToOwned::to_owned),
                        session_id,
                        kind,
                        token,
                        barrier: self.queued,
                        reply: reply.clone(),
                        since: Instant::now(),
                        cost,
                    };
                    backlog.hold(seq, held, &self.shared.load);
                }
                Some(registered)
            }
        };
        match held {
            Some(true) => self.shared.backlog_grew.notify_one(),
            Some(false) => self.refuse_duplicate(reply, &id).await,
            None => self.refuse_overloaded(id, &method, reply).await,
        }
    }

    /// Refuses a request that fits neither a task nor the backlog, with the overload error.
    async fn refuse_overloaded(&self, id: Id, method: &str, reply: &ReplyTo) {
        let in_flight = self.shared.load.refused();
        tracing::warn!(%id, %method, in_flight, "acp connection: overloaded; request refused");
        let (retry_after, backlog_bytes) = {
            let backlog = lock_backlog(&self.shared);
            (backlog.retry_after(), backlog.bytes())
        };
        let mut error = ErrorObject::overloaded(retry_after);
        if let Some(serde_json::Value::Object(data)) = &mut error.data {
            data.insert("inFlight".into(), in_flight.into());
            data.insert("backlogBytes".into(), backlog_bytes.into());
            data.insert("maxBacklogBytes".into(), self.options.max_backlog_bytes.into());
        }
        self.answer_to(reply, &id, Err(&error)).await;
    }
}

/// A request's claim on the concurrency bounds: admitted by the reader (or the backlog task),
/// then waiting in its task for one of the `running` permits. Both are released when the
/// handler's future ends.
pub(crate) struct Slot {
    running: Arc<Semaphore>,
    _admitted: OwnedSemaphorePermit,
}

impl Slot {
    pub(crate) fn new(running: Arc<Semaphore>, admitted: OwnedSemaphorePermit) -> Self {
        Slot { running, _admitted: admitted }
    }
}

type HandlerOutput = Result<Result<Box<RawValue>, ErrorObject>, Box<dyn std::any::Any + Send>>;

/// How a request is run by [`run_request`].
pub(crate) struct Run {
    pub(crate) shared: Arc<Shared>,
    pub(crate) handler: Arc<dyn DynHandler>,
    pub(crate) kind: RequestKind,
    pub(crate) grace: Duration,
    /// Notifications read before it: it starts after they were handled.
    pub(crate) barrier: u64,
    /// Run from the notification task, which waits for it ([`Handler::handles_in_order`]):
    /// its calls to the peer are answered as a notification handler's are.
    pub(crate) in_order: bool,
}

/// Spawns [`run_request`]: the one place its future is made, so that its body is compiled once
/// (an `async fn`'s body is compiled again wherever its future is polled). Boxed, as the
/// connection's other tasks are, so that tokio's task code is compiled once for all of them
/// (17 KB of the 13-handler agent) for one small allocation more per request.
#[inline(never)]
pub(crate) fn spawn_request(
    run: Run,
    req: IncomingRequest,
    slot: Slot,
    reply: ReplyTo,
    counted: Counted,
) -> tokio::task::JoinHandle<()> {
    crate::core::tasks::spawn_boxed(run_request(run, req, slot, reply, counted))
}

/// Runs one request handler and sends exactly one answer for it.
async fn run_request(run: Run, req: IncomingRequest, slot: Slot, reply: ReplyTo, _counted: Counted) {
    let Run { shared, handler, kind, grace, barrier, in_order } = run;
    let span = tracing::info_span!(
        "acp_request",
        method = %req.method,
        id = %req.id,
        session_id = tracing::field::Empty,
    );
    if let Some(session) = &req.session_id {
        span.record("session_id", &**session);
    }
    let id = req.id.clone();
    let token = req.cancel.clone();
    let watch = req.watch.clone();
    // The handler is called inside the future, so a panic in its synchronous part is caught too.
    // Like a response, a request is handled only after the notifications that arrived before
    // it: a permission request never overtakes the tool call update it is about.
    let waiting = shared.clone();
    // Whether the handler was called (atomic only so that the borrowing future stays `Send`).
    let started = AtomicBool::new(false);
    // The handler's future lives in this block only: it is dropped, its request slot with it,
    // before the answer goes out (which may be at once, see `writer`). So a peer that has the
    // answer finds the slot free and the handler gone.
    let answer = {
        let started = &started;
        let fut = CatchUnwind::new(async move {
            waiting.wait_for_notifications(barrier).await;
            // Held, with `slot`, until the handler's future is done or dropped. The semaphore is
            // never closed, so the permit always comes.
            let _running = slot.running.clone().acquire_owned().await;
            // Cancelled while it waited: answered without ever running (the grace period is
            // for handlers that have started). Not so at the end of the connection: a request
            // read just before the end of input still runs within the grace period, because a
            // peer that closed its side (`echo request | agent`) may still read the answer.
            if req.cancel.is_cancelled() && waiting.cancel_requested(&req.id) {
                return None;
            }
            started.store(true, Ordering::Relaxed);
            let answer = handler.handle_request_boxed(req);
            Some(if in_order {
                IN_NOTIFICATION_HANDLER.scope(Arc::as_ptr(&waiting) as usize, answer).await
            } else {
                answer.await
            })
        })
        .instrument(span.clone());
        tokio::pin!(fut);

        let finished = tokio::select! {
            biased;
            out = &mut fut => Some(out),
            () = token.cancelled() => None,
        };
        // `Some(None)`: cancelled before it started.
        let finished = finished.map(Result::transpose);
        match finished {
            Some(Some(out)) if !token.is_cancelled() => normal_answer(out, &span),
            Some(out) => cancelled_answer(kind, out),
            // Still waiting for earlier notifications or a slot: nothing to wait for.
            None if !started.load(Ordering::Relaxed) && shared.cancel_requested(&id) => cancelled_answer(kind, None),
            None if kind == RequestKind::Permission => {
                // Answered at once; the handler may still clean up during the grace period.
                finish(&shared, id, cancelled_answer(kind, None), &reply, &watch).await;
                let _ = within_grace(watch.grace(grace), fut).await;
                return;
            }
            None => {
                let handler_grace = watch.grace(grace);
                let out = within_grace(handler_grace, &mut fut).await.and_then(Result::transpose);
                if out.is_none() {
                    span.in_scope(|| {
                        if handler_grace.is_zero() && !grace.is_zero() {
                            tracing::debug!("cancelled handler never asked for its cancellation token; dropped at once")
                        } else {
                            tracing::debug!("cancelled handler did not finish within the grace period; dropped")
                        }
                    });
                }
                cancelled_answer(kind, out)
            }
        }
    };
    finish(&shared, id, answer, &reply, &watch).await;
}

/// Gives a cancelled handler `grace` to finish. A zero grace polls it once instead of arming a
/// timer, whose 1 ms tick would otherwise be the floor of the cancellation latency.
async fn within_grace<F: Future + Unpin>(grace: Duration, mut fut: F) -> Option<F::Output> {
    if grace.is_zero() {
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut fut).poll(cx) {
                std::task::Poll::Ready(out) => Some(out),
                std::task::Poll::Pending => None,
            })
        })
        .await
    } else {
        tokio::time::timeout(grace, fut).await.ok()
    }
}

fn normal_answer(out: HandlerOutput, span: &tracing::Span) -> Result<Box<RawValue>, ErrorObject> {
    match out {
        Ok(result) => result,
        Err(panic) => {
            span.in_scope(|| tracing::error!(panic = panic_message(&*panic), "request handler panicked"));
            Err(ErrorObject::internal_error("the request handler panicked"))
        }
    }
}

/// The fixed answers of cancelled requests (see the table in [`crate::connection`]).
pub(crate) fn cancelled_answer(kind: RequestKind, out: Option<HandlerOutput>) -> Result<Box<RawValue>, ErrorObject> {
    let handler_result = match out {
        Some(Ok(Ok(result))) => Some(result),
        _ => None,
    };
    let fixed = |text: &str| RawValue::from_string(text.to_owned()).map_err(ErrorObject::internal_error);
    match kind {
        RequestKind::Prompt => match handler_result {
            Some(result) if says_cancelled(&result) => Ok(result),
            _ => fixed(methods::CANCELLED_PROMPT_RESULT),
        },
        RequestKind::Permission => fixed(methods::CANCELLED_PERMISSION_RESULT),
        RequestKind::Turn | RequestKind::Other => handler_result.ok_or_else(ErrorObject::request_cancelled),
    }
}

/// Whether a prompt result is `{"stopReason":"cancelled", ...}` (then it is kept, `_meta` and all).
fn says_cancelled(result: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct StopReason<'a> {
        #[serde(rename = "stopReason", borrow)]
        stop_reason: Cow<'a, str>,
    }
    result.get().starts_with('{')
        && serde_json::from_str::<StopReason<'_>>(result.get()).is_ok_and(|r| r.stop_reason == "cancelled")
}

pub(crate) async fn finish(
    shared: &Shared,
    id: Id,
    answer: Result<Box<RawValue>, ErrorObject>,
    reply: &ReplyTo,
    watch: &Watch,
) {
    // Forget the id *before* answering: once the peer has the answer it may reuse the id.
    crate::core::connection::lock_inflight(shared).remove(&id);
    match reply {
        ReplyTo::Line => {
            let mut line = Vec::with_capacity(match &answer {
                Ok(result) => result.get().len() + 48,
                Err(_) => 128,
            });
            jsonrpc::encode_response(&mut line, &id, answer.as_deref());
            let _ = shared.send_line_direct(line).await;
            watch.mark_answered();
        }
        // Told once the batch's line is queued.
        ReplyTo::Batch(batch) => batch.answer(shared, &id, answer.as_deref(), watch).await,
    }
}

/// Handles queued notifications one at a time, in order, until the queue ends.
pub(crate) async fn notification_loop(
    mut rx: mpsc::Receiver<Queued>,
    handler: Arc<dyn DynHandler>,
    shared: Arc<Shared>,
    grace: Duration,
) {
    let me = Arc::as_ptr(&shared) as usize;
    while let Some(queued) = rx.recv().await {
        if let Some(request) = queued.request {
            start_or_forward(shared.clone(), handler.clone(), *request, grace).await;
            continue;
        }
        if shared.forwarding {
            if let Some(forward) = handler.forward_notification_dyn(&queued.method, queued.params.as_deref()) {
                if let Err(e) = forward.to.notify_raw(&forward.method, forward.params.as_deref()).await {
                    tracing::debug!(error = %e, method = %forward.method, "acp connection: forwarded notification not sent");
                }
                shared.mark_handled(queued.seq);
                continue;
            }
        }
        let notification = IncomingNotification {
            method: queued.method,
            params: queued.params,
            peer: Peer { shared: shared.clone() },
            seq: queued.seq,
        };
        let handler = &handler;
        let fut = IN_NOTIFICATION_HANDLER
            .scope(me, CatchUnwind::new(async move { handler.handle_notification_boxed(notification).await }));
        tokio::pin!(fut);
        let finished = tokio::select! {
            biased;
            out = &mut fut => {
                if let Err(panic) = out {
                    tracing::error!(panic = panic_message(&*panic), "notification handler panicked");
                }
                true
            }
            () = after_close(&shared.closed, grace) => false,
        };
        shared.mark_handled(queued.seq);
        if !finished {
            tracing::warn!(
                "notification handler still running a grace period after the connection ended; dropped with the rest of the queue"
            );
            break;
        }
    }
}

/// A request of a forwarding connection that was held in the backlog, started by the backlog
/// task once a slot freed: after the notifications read before it, it is forwarded (or
/// started) as [`start_or_forward`] does for the others, never handled as one addressed to us.
pub(crate) async fn forward_held(run: Run, req: IncomingRequest, slot: Slot, reply: ReplyTo, counted: Counted) {
    let Run { shared, handler, kind, grace, barrier, .. } = run;
    shared.wait_for_notifications(barrier).await;
    start_or_forward(shared, handler, QueuedRequest { req, kind, slot, reply, counted }, grace).await;
}

/// A request of a forwarding connection, in its turn: forwarded if the handler says so (sent
/// before the next message is looked at), else started like any request. Boxed, and made in
/// this one place, so that its body is compiled once for its two callers.
#[inline(never)]
fn start_or_forward(
    shared: Arc<Shared>,
    handler: Arc<dyn DynHandler>,
    request: QueuedRequest,
    grace: Duration,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(start_or_forward_now(shared, handler, request, grace))
}

async fn start_or_forward_now(
    shared: Arc<Shared>,
    handler: Arc<dyn DynHandler>,
    request: QueuedRequest,
    grace: Duration,
) {
    let (shared, handler) = (&shared, &handler);
    let QueuedRequest { req, kind, slot, reply, counted } = request;
    let Some(forward) = handler.forward_dyn(&req.method, req.params.as_deref()) else {
        // Every notification before it is handled: no barrier left to wait for.
        // Answered before the next message is looked at when it must be: its own calls to the
        // peer are answered meanwhile, as a notification handler's are (they cannot wait for
        // the messages queued behind it).
        let in_order = handler.handles_in_order_dyn(&req.method, req.params.as_deref());
        let run = Run { shared: shared.clone(), handler: handler.clone(), kind, grace, barrier: 0, in_order };
        let task = spawn_request(run, req, slot, reply, counted);
        if in_order {
            let _ = task.await;
        }
        return;
    };
    // Forwarded even when cancelled already: what cancelled it (a `session/cancel`, a
    // `$/cancel_request`) follows it, so the far side sees both in the order they came.
    let sent = forward.to.send_request_raw(&forward.method, forward.params.as_deref()).await;
    crate::core::tasks::spawn_boxed(forward_answer(shared.clone(), req, kind, sent, grace, slot, reply, counted));
}

/// Waits for the answer to a forwarded request and passes it back verbatim. A cancelled one
/// is answered as the table at [`crate::Connection::forwarding`] says.
#[allow(clippy::too_many_arguments)]
async fn forward_answer(
    shared: Arc<Shared>,
    req: IncomingRequest,
    kind: RequestKind,
    sent: Result<crate::core::peer::PendingResponse, Error>,
    grace: Duration,
    _slot: Slot,
    reply: ReplyTo,
    _counted: Counted,
) {
    let answer = match sent {
        Err(e) => Err(forward_error(e)),
        Ok(mut pending) => tokio::select! {
            biased;
            answer = &mut pending => answer.map_err(forward_error),
            () = req.cancel.cancelled() => match kind {
                RequestKind::Permission => {
                    pending.cancel();
                    cancelled_answer(kind, None)
                }
                RequestKind::Prompt => {
                    // A `session/cancel` is forwarded as it is; a `$/cancel_request` was
                    // consumed here, so the next hop gets one of its own.
                    let by_cancel_request = shared.cancelled_by_cancel_request(&req.id);
                    if by_cancel_request {
                        pending.cancel();
                    }
                    let answer = tokio::time::timeout(grace, &mut pending).await.ok();
                    if !by_cancel_request {
                        // The `session/cancel` said it all: nothing more goes after it.
                        pending.abandon_quietly();
                    }
                    cancelled_answer(kind, answer.map(|a| Ok(a.map_err(forward_error))))
                }
                RequestKind::Turn | RequestKind::Other => {
                    pending.cancel();
                    match tokio::time::timeout(grace, &mut pending).await {
                        Ok(answer) => answer.map_err(forward_error),
                        Err(_) => Err(ErrorObject::request_cancelled()),
                    }
                }
            },
        },
    };
    finish(&shared, req.id, answer, &reply, &req.watch).await;
}

/// The answer to a forwarded request that got none from where it went.
fn forward_error(e: Error) -> ErrorObject {
    match e {
        Error::Rpc(error) => error,
        Error::Cancelled => ErrorObject::request_cancelled(),
        other => ErrorObject::internal_error(format_args!("forwarding failed: {other}")),
    }
}

async fn after_close(closed: &CancellationToken, grace: Duration) {
    closed.cancelled().await;
    tokio::time::sleep(grace).await;
}
