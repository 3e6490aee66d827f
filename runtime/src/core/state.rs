//! The state every task of a connection shares, and every [`Peer`](crate::Peer) holds: the
//! output, the pending outgoing calls, the incoming requests in flight, the backlog, the
//! notification count that orders responses after notifications, the session scopes, and the
//! [`Extensions`] of the layers above. Its fields are the core's own; the layers reach the
//! few things they need through `Peer`'s seams.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::core::backlog::Backlog;
use crate::core::error::Error;
use crate::core::extensions::Extensions;
use crate::core::jsonrpc::{self, ErrorObject, Id};
use crate::core::load::LoadGauges;
use crate::core::methods::{self, RequestKind};
use crate::core::owner::Owner;
use crate::core::writer;

/// The params of the `$/cancel_request` that a notification (method, params) carries in a
/// successor envelope, if it is one.
pub(crate) type WrappedCancel = for<'a> fn(&str, Option<&'a RawValue>) -> Option<Option<&'a RawValue>>;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Options {
    pub(crate) max_line_bytes: usize,
    pub(crate) max_backlog_bytes: usize,
    pub(crate) notification_queue_capacity: usize,
    pub(crate) cancel_grace: Duration,
    pub(crate) forwarding: bool,
    pub(crate) wrapped_cancel: Option<WrappedCancel>,
    pub(crate) end_on_bad_input: bool,
}

/// `done`'s output, waiting for it as long as the transport takes bytes at least once every
/// `stall`; `None` once it has taken none for that long (the peer stopped reading).
pub(crate) async fn while_output_moves<F: Future>(shared: &Shared, stall: Duration, done: F) -> Option<F::Output> {
    let mut done = std::pin::pin!(done);
    let mut seen = shared.out.progress();
    loop {
        if let Ok(output) = tokio::time::timeout(stall, &mut done).await {
            return Some(output);
        }
        let now = shared.out.progress();
        if now == seen {
            return None;
        }
        seen = now;
    }
}

// ---- state shared by the reader, the tasks and every Peer ---------------------------------

tokio::task_local! {
    /// Set (to the connection's address) while a notification handler runs, so an outgoing
    /// call made from it skips the response-after-notifications wait that would deadlock.
    pub(crate) static IN_NOTIFICATION_HANDLER: usize;
}

pub(crate) enum Reply {
    /// The peer answered; deliver once `barrier` notifications have been handled.
    Response { result: Result<Box<RawValue>, ErrorObject>, barrier: u64 },
    /// The call failed without an answer.
    Failed(Error),
}

pub(crate) struct PendingCall {
    tx: oneshot::Sender<Reply>,
    /// For outgoing `session/request_permission`: its session.
    permission_session: Option<Arc<str>>,
    /// Run by the reader on the answer, before it reads the next message.
    on_answer: Option<AnswerHook>,
}

/// What a call must settle in reading order, before anything the peer sent after its answer is
/// dispatched: `initialize`'s answer fixes the connection's protocol version, and the peer may
/// send requests of that version right behind it. The hook is given the answer and its barrier
/// (how many notifications were read before it).
#[cfg(feature = "unstable_protocol_v2")]
pub(crate) type AnswerHook = Box<dyn FnOnce(&Result<Box<RawValue>, ErrorObject>, u64) + Send>;
/// Only v2's calls need one: without it, a call's hook slot costs nothing.
#[cfg(not(feature = "unstable_protocol_v2"))]
pub(crate) type AnswerHook = std::convert::Infallible;

#[cfg(feature = "unstable_protocol_v2")]
fn run_hook(on_answer: AnswerHook, result: &Result<Box<RawValue>, ErrorObject>, barrier: u64) {
    on_answer(result, barrier);
}

#[cfg(not(feature = "unstable_protocol_v2"))]
fn run_hook(on_answer: AnswerHook, _: &Result<Box<RawValue>, ErrorObject>, _: u64) {
    match on_answer {}
}

#[derive(Default)]
pub(crate) struct PendingCalls {
    closed: bool,
    map: HashMap<i64, PendingCall>,
}

pub(crate) struct InFlight {
    pub(crate) token: CancellationToken,
    pub(crate) kind: RequestKind,
    pub(crate) session: Option<Arc<str>>,
    /// Cancelled on request (`$/cancel_request`, `session/cancel`), not by the connection's
    /// end: then a handler that has not started never does.
    pub(crate) cancel_requested: bool,
    /// Cancelled by a `$/cancel_request` naming it (which the runtime consumes), rather than
    /// by a `session/cancel` (which goes on to the handler): a forwarded `session/prompt`
    /// must then send the next hop a `$/cancel_request` of its own.
    pub(crate) by_cancel_request: bool,
    /// Held in the backlog (no task yet): a cancellation on request tells the backlog task,
    /// which answers it at once.
    pub(crate) held: bool,
    /// A v2 prompt whose session was cancelled (`session/cancel`, `session/close`) since it
    /// was read (see [`RequestKind::Turn`]).
    pub(crate) turn_cancelled: bool,
}

impl InFlight {
    /// Cancels the request on the peer's (or our own `session/cancel`'s) behalf; a held one is
    /// reported to the backlog task through `held_cancels`.
    pub(crate) fn cancel_on_request(&mut self, id: &Id, held_cancels: &mpsc::UnboundedSender<Id>) {
        if self.held && !self.cancel_requested {
            // Once per request, so the channel never holds more than the backlog did.
            let _ = held_cancels.send(id.clone());
        }
        self.cancel_requested = true;
        self.token.cancel();
    }
}

pub(crate) struct Shared {
    pub(crate) out: writer::Output,
    /// The request bounds and how full they are.
    pub(crate) load: LoadGauges,
    /// Held requests cancelled on request, for the backlog task to answer.
    pub(crate) held_cancels: mpsc::UnboundedSender<Id>,
    /// Requests beyond the task bounds (see [`crate::backlog`]).
    backlog: Mutex<Backlog>,
    /// The reader held a request (wakes the backlog task).
    pub(crate) backlog_grew: Notify,
    pub(crate) next_id: AtomicI64,
    pending: Mutex<PendingCalls>,
    inflight: Mutex<HashMap<Id, InFlight>>,
    /// Fires when the connection ends.
    pub(crate) closed: CancellationToken,
    /// How many notifications the notification task has handled (`u64::MAX` once it is gone).
    handled: AtomicU64,
    handled_waiters: AtomicUsize,
    handled_notify: Notify,
    /// The layers' own state and close hooks (see [`Extensions`]).
    pub(crate) extensions: Extensions,
    /// The connection follows protocol v2's rules: batches are accepted, and `session/prompt`
    /// is not answered `{"stopReason":"cancelled"}` when cancelled (see [`RequestKind::of`]).
    v2: AtomicBool,
    /// Who is asking (see [`Connection::owner`]); an anonymous owner is made on first use.
    pub(crate) owner: OnceLock<Owner>,
    /// A link in a chain (see [`Connection::forwarding`]).
    pub(crate) forwarding: bool,
    /// Work tied to a session rather than to a request (see [`crate::peer::SessionScope`]).
    session_work: Mutex<SessionWork>,
    /// Woken whenever a session's last piece of work ends (see [`Shared::session_work_ended`]).
    session_work_done: Notify,
    /// How long a cancelled handler may run on (see [`Connection::cancel_grace`]).
    pub(crate) cancel_grace: Duration,
}

/// The tokens of the live [`crate::peer::SessionScope`]s, by session; `session/cancel` fires
/// them. A scope removes its own entry when dropped.
#[derive(Default)]
pub(crate) struct SessionWork {
    next: u64,
    by_session: HashMap<Arc<str>, Vec<(u64, CancellationToken)>>,
}

pub(crate) fn lock_inflight(shared: &Shared) -> MutexGuard<'_, HashMap<Id, InFlight>> {
    lock(&shared.inflight)
}

/// Taken before the in-flight lock when both are needed.
pub(crate) fn lock_backlog(shared: &Shared) -> MutexGuard<'_, Backlog> {
    lock(&shared.backlog)
}

impl Shared {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        out: writer::Output,
        load: LoadGauges,
        held_cancels: mpsc::UnboundedSender<Id>,
        v2: bool,
        owner: Option<Owner>,
        forwarding: bool,
        cancel_grace: Duration,
    ) -> Self {
        Shared {
            out,
            load,
            held_cancels,
            backlog: Mutex::new(Backlog::default()),
            backlog_grew: Notify::new(),
            next_id: AtomicI64::new(0),
            pending: Mutex::new(PendingCalls::default()),
            inflight: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
            handled: AtomicU64::new(0),
            handled_waiters: AtomicUsize::new(0),
            handled_notify: Notify::new(),
            extensions: Extensions::default(),
            v2: AtomicBool::new(v2),
            owner: owner.map(OnceLock::from).unwrap_or_default(),
            forwarding,
            session_work: Mutex::new(SessionWork::default()),
            session_work_done: Notify::new(),
            cancel_grace,
        }
    }

    /// Whether the connection follows protocol v2's rules (see [`Shared::v2`]).
    pub(crate) fn speaks_v2(&self) -> bool {
        self.v2.load(Ordering::Acquire)
    }

    /// From now on the connection follows protocol v2's rules (or v1's). Set before the `initialize`
    /// answer that negotiates v2 goes out, so everything the peer sends after reading it is
    /// read under these rules.
    pub(crate) fn set_v2(&self, v2: bool) {
        self.v2.store(v2, Ordering::Release);
    }

    /// Registers a token that `session/cancel` for `session` fires; returns its key.
    pub(crate) fn add_session_work(&self, session: Arc<str>, token: CancellationToken) -> u64 {
        let mut work = lock(&self.session_work);
        work.next += 1;
        let key = work.next;
        work.by_session.entry(session).or_default().push((key, token));
        key
    }

    /// Forgets the token registered under `key`.
    pub(crate) fn remove_session_work(&self, session: &str, key: u64) {
        let mut work = lock(&self.session_work);
        if let Some(tokens) = work.by_session.get_mut(session) {
            tokens.retain(|(k, _)| *k != key);
            if tokens.is_empty() {
                work.by_session.remove(session);
                drop(work);
                self.session_work_done.notify_waiters();
            }
        }
    }

    /// Resolves once no work of `session` is left (at once when there is none).
    pub(crate) async fn session_work_ended(&self, session: &str) {
        loop {
            let woken = self.session_work_done.notified();
            tokio::pin!(woken);
            // Registered before the check, so an end between the two is not missed.
            woken.as_mut().enable();
            if !lock(&self.session_work).by_session.contains_key(session) {
                return;
            }
            woken.await;
        }
    }

    /// Fires every token registered for `session` (an incoming `session/cancel`).
    pub(crate) fn cancel_session_work(&self, session: &str) {
        let work = lock(&self.session_work);
        for (_, token) in work.by_session.get(session).into_iter().flatten() {
            token.cancel();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code panics while holding these locks; if one ever did, the data is still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Queues one encoded line for the writer, waiting while the queue is full.
    pub(crate) async fn send_line(&self, line: Vec<u8>) -> Result<(), Error> {
        self.out.send(line, false).await
    }

    /// Like [`Shared::send_line`], but the line is written at once when the writer is idle (for
    /// requests and responses, whose latency counts; see [`writer`]).
    pub(crate) async fn send_line_direct(&self, line: Vec<u8>) -> Result<(), Error> {
        self.out.send(line, true).await
    }

    pub(crate) fn register_call(
        &self,
        id: i64,
        tx: oneshot::Sender<Reply>,
        permission_session: Option<Arc<str>>,
        on_answer: Option<AnswerHook>,
    ) -> Result<(), Error> {
        let mut pending = lock(&self.pending);
        if pending.closed {
            return Err(Error::ConnectionClosed);
        }
        pending.map.insert(id, PendingCall { tx, permission_session, on_answer });
        Ok(())
    }

    /// Removes a pending call; `true` if it was still pending.
    pub(crate) fn forget_call(&self, id: i64) -> bool {
        lock(&self.pending).map.remove(&id).is_some()
    }

    /// Completes a pending call; `false` if no call has that id.
    pub(crate) fn complete_call(&self, id: i64, reply: Reply) -> bool {
        let call = lock(&self.pending).map.remove(&id);
        match call {
            Some(call) => {
                if let (Some(on_answer), Reply::Response { result, barrier }) = (call.on_answer, &reply) {
                    run_hook(on_answer, result, *barrier);
                }
                // The caller may have just given up; then nobody needs the reply.
                let _ = call.tx.send(reply);
                true
            }
            None => false,
        }
    }

    /// Resolves our pending `session/request_permission` calls of `session` as cancelled, and
    /// tells the peer (`$/cancel_request`).
    pub(crate) fn resolve_outgoing_permissions(&self, session: &str) {
        let resolved: Vec<(i64, PendingCall)> = {
            let mut pending = lock(&self.pending);
            let ids: Vec<i64> = pending
                .map
                .iter()
                .filter(|(_, c)| c.permission_session.as_deref() == Some(session))
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter().filter_map(|id| pending.map.remove(&id).map(|c| (id, c))).collect()
        };
        for (id, call) in resolved {
            let result = RawValue::from_string(methods::CANCELLED_PERMISSION_RESULT.to_owned())
                .map_err(ErrorObject::internal_error);
            let _ = call.tx.send(Reply::Response { result, barrier: 0 });
            self.send_cancel_request(id);
        }
    }

    /// Cancels in-flight incoming requests of `kind` for `session`.
    pub(crate) fn cancel_incoming(&self, kind: RequestKind, session: &str) {
        let mut inflight = lock(&self.inflight);
        for (id, entry) in inflight.iter_mut() {
            if entry.kind == kind && entry.session.as_deref() == Some(session) {
                entry.cancel_on_request(id, &self.held_cancels);
            }
        }
    }

    /// Marks the in-flight v2 prompts of `session` cancelled (see [`RequestKind::Turn`]).
    /// Called before the session's scopes are cancelled: a turn creates its scope, then asks
    /// [`Shared::turn_cancelled`], so a cancel reaches it one way or the other.
    pub(crate) fn mark_turns_cancelled(&self, session: &str) {
        for entry in lock(&self.inflight).values_mut() {
            if entry.kind == RequestKind::Turn && entry.session.as_deref() == Some(session) {
                entry.turn_cancelled = true;
            }
        }
    }

    /// Whether in-flight v2 prompt `id`'s session was cancelled since it was read.
    #[cfg(feature = "unstable_protocol_v2")]
    pub(crate) fn turn_cancelled(&self, id: &Id) -> bool {
        lock(&self.inflight).get(id).is_some_and(|entry| entry.turn_cancelled)
    }

    /// Whether in-flight request `id` was cancelled by a `$/cancel_request` (see [`InFlight`]).
    pub(crate) fn cancelled_by_cancel_request(&self, id: &Id) -> bool {
        lock(&self.inflight).get(id).is_some_and(|entry| entry.by_cancel_request)
    }

    /// Whether in-flight request `id` was cancelled on request (see [`InFlight`]).
    pub(crate) fn cancel_requested(&self, id: &Id) -> bool {
        lock(&self.inflight).get(id).is_some_and(|entry| entry.cancel_requested)
    }

    /// Client side of `session/cancel`: our in-flight incoming permission requests of the
    /// session are cancelled (and answered `cancelled` by their tasks at once).
    pub(crate) fn cancel_incoming_permissions(&self, session: &str) {
        self.cancel_incoming(RequestKind::Permission, session);
    }

    /// Sends `$/cancel_request` from a synchronous context (a dropped call future). It goes
    /// through the same FIFO queue, behind the request it cancels; when the queue is full the
    /// send continues in a spawned task rather than being lost.
    pub(crate) fn send_cancel_request(&self, id: i64) {
        #[derive(serde::Serialize)]
        struct Params {
            #[serde(rename = "requestId")]
            request_id: i64,
        }
        let mut line = Vec::with_capacity(96);
        if jsonrpc::encode_notification(&mut line, methods::CANCEL_REQUEST, Some(&Params { request_id: id })).is_err() {
            return;
        }
        match self.out.queue.try_send(line) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(line)) => {
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    let tx = self.out.queue.clone();
                    // Boxed: the task then shares tokio's task code with the connection's
                    // other boxed tasks (see `tasks::spawn_boxed`).
                    let send: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
                        let _ = tx.send(line).await;
                    });
                    handle.spawn(send);
                }
            }
        }
    }

    /// The connection ends: the token fires (cancelling every handler, whose tokens are its
    /// children) and every pending call fails at once.
    pub(crate) fn close(&self) {
        self.closed.cancel();
        let calls = {
            let mut pending = lock(&self.pending);
            pending.closed = true;
            std::mem::take(&mut pending.map)
        };
        for (_, call) in calls {
            let _ = call.tx.send(Reply::Failed(Error::ConnectionClosed));
        }
    }

    /// The notification task handled notification number `seq`.
    pub(crate) fn mark_handled(&self, seq: u64) {
        // Never lower: a handler that finishes after `Serve` was dropped must not take back the
        // `u64::MAX` of `release_waiters` (its task is aborted only at its next await).
        self.handled.fetch_max(seq, Ordering::SeqCst);
        // Waking is a lock on the Notify; skip it when nobody waits (the common case).
        if self.handled_waiters.load(Ordering::SeqCst) > 0 {
            self.handled_notify.notify_waiters();
        }
    }

    /// No notification will be handled any more: nobody may wait for one.
    pub(crate) fn release_waiters(&self) {
        self.mark_handled(u64::MAX);
    }

    /// Whether the current task runs one of this connection's notification handlers.
    pub(crate) fn in_notification_handler(&self) -> bool {
        let me = self as *const Shared as usize;
        IN_NOTIFICATION_HANDLER.try_with(|conn| *conn == me).unwrap_or(false)
    }

    /// Waits until `barrier` notifications have been handled (contract 3), unless we are inside
    /// this connection's notification handler, which would wait for itself.
    pub(crate) async fn wait_for_notifications(&self, barrier: u64) {
        if self.handled.load(Ordering::SeqCst) >= barrier || self.in_notification_handler() {
            return;
        }
        self.handled_waiters.fetch_add(1, Ordering::SeqCst);
        struct Unregister<'a>(&'a AtomicUsize);
        impl Drop for Unregister<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _unregister = Unregister(&self.handled_waiters);
        loop {
            let notified = self.handled_notify.notified();
            tokio::pin!(notified);
            // Register before checking, so a `notify_waiters` between the check and the await
            // is not missed.
            notified.as_mut().enable();
            if self.handled.load(Ordering::SeqCst) >= barrier {
                return;
            }
            notified.await;
        }
    }
}
