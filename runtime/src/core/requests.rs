//! The request runner: each incoming request runs in a task of its own and gets exactly one
//! answer, with the cancellation rules of [`crate::connection`] (a grace period, the fixed
//! answers of a cancelled prompt or permission request); on a forwarding connection it is
//! forwarded instead when the handler says so. Also the backlog's task, which starts held
//! requests as slots free up and answers the ones cancelled meanwhile.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::core::backlog::Held;
use crate::core::batch::ReplyTo;
use crate::core::catch_unwind::{CatchUnwind, panic_message};
use crate::core::error::Error;
use crate::core::handler::{DynHandler, IncomingRequest};
use crate::core::jsonrpc::{self, ErrorObject, Id};
use crate::core::methods::{self, RequestKind};
use crate::core::peer::Peer;
use crate::core::state::{IN_NOTIFICATION_HANDLER, Shared, lock_backlog, lock_inflight, while_output_moves};
use crate::core::tasks::{Counted, RequestTasks};
use crate::core::watch::Watch;

/// A request of a forwarding connection, registered and admitted, to be started (or forwarded)
/// by the notification task.
pub(crate) struct QueuedRequest {
    pub(crate) req: IncomingRequest,
    pub(crate) kind: RequestKind,
    pub(crate) slot: Slot,
    pub(crate) reply: ReplyTo,
    pub(crate) counted: Counted,
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
    lock_inflight(shared).remove(&id);
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
        ReplyTo::Batch(batch) => batch.answer(&shared.out, &id, answer.as_deref(), watch).await,
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
pub(crate) fn start_or_forward(
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

pub(crate) async fn after_close(closed: &CancellationToken, grace: Duration) {
    closed.cancelled().await;
    tokio::time::sleep(grace).await;
}

/// What the backlog task needs to start requests.
pub(crate) struct Starter {
    pub(crate) shared: Arc<Shared>,
    pub(crate) handler: Arc<dyn DynHandler>,
    pub(crate) grace: Duration,
    pub(crate) tasks: RequestTasks,
}

/// The backlog task: while requests are held, answers the ones cancelled on request (reported
/// through `held_cancels`, see [`crate::connection::InFlight::cancel_on_request`]) and gives
/// each freed task slot to the oldest; sleeps while nothing is held. Returns when `stop` fires
/// (then [`answer_all_cancelled`] takes over).
pub(crate) async fn backlog_loop(
    starter: Starter,
    mut held_cancels: mpsc::UnboundedReceiver<Id>,
    stop: CancellationToken,
) {
    let shared = &starter.shared;
    let admitted = shared.load.admitted.clone();
    loop {
        if shared.load.backlog_is_empty() {
            // The reader notifies after each request it holds; a notification sent before
            // this wait starts is kept, so none is missed.
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                () = shared.backlog_grew.notified() => continue,
            }
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            Some(id) = held_cancels.recv() => {
                // Gone already when it started before the report was read.
                let taken = lock_backlog(shared).take_cancelled(&id, &shared.load);
                if let Some(held) = taken {
                    // Never started: answered at once, without running.
                    let answer = cancelled_answer(held.kind, None);
                    finish(shared, held.id, answer, &held.reply, &Watch::default()).await;
                }
            }
            // The semaphore is never closed.
            Ok(permit) = admitted.clone().acquire_owned() => {
                let taken = lock_backlog(shared).take_oldest(&shared.load);
                // Emptied by cancellations meanwhile: the slot goes back.
                let Some(held) = taken else { continue };
                if let Some(entry) = lock_inflight(shared).get_mut(&held.id) {
                    // From now on its task answers a cancellation (a report already sent for
                    // it finds nothing held).
                    entry.held = false;
                }
                start(&starter, held, permit);
            }
        }
    }
}

fn start(starter: &Starter, held: Held, admitted: tokio::sync::OwnedSemaphorePermit) {
    let Held { id, method, params, session_id, kind, token, barrier, reply, .. } = held;
    let shared = &starter.shared;
    let req = IncomingRequest {
        id,
        method,
        params,
        session_id,
        cancel: token,
        peer: Peer { shared: shared.clone() },
        watch: Watch::default(),
    };
    let slot = Slot::new(shared.load.running.clone(), admitted);
    let counted = starter.tasks.count();
    let run = Run {
        shared: shared.clone(),
        handler: starter.handler.clone(),
        kind,
        grace: starter.grace,
        barrier,
        in_order: false,
    };
    if shared.forwarding {
        // Boxed: what only forwarding connections run costs no task machinery of its own in
        // every binary.
        crate::core::tasks::spawn_boxed(forward_held(run, req, slot, reply, counted));
    } else {
        spawn_request(run, req, slot, reply, counted);
    }
}

/// The connection ends (the backlog task has stopped): every held request is answered as
/// cancelled, oldest first, without running, until the output stalls for `stall` (a peer
/// that no longer reads); the rest are dropped unanswered.
pub(crate) async fn answer_all_cancelled(shared: &Shared, stall: Duration) {
    loop {
        let taken = lock_backlog(shared).take_oldest(&shared.load);
        let Some(held) = taken else { return };
        let (answer, watch) = (cancelled_answer(held.kind, None), Watch::default());
        let answered = finish(shared, held.id, answer, &held.reply, &watch);
        if while_output_moves(shared, stall, answered).await.is_none() {
            break;
        }
    }
    let forgotten = std::mem::take(&mut *lock_backlog(shared));
    let mut inflight = lock_inflight(shared);
    for id in forgotten.ids() {
        inflight.remove(id);
    }
    drop(inflight);
    shared.load.set_backlog(0, 0);
}
